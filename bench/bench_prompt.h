/* bench_prompt — the setup the model benches share: open a GGUF model and
 * its tokenizer, read a prompt file's raw text and encode it (no chat
 * template, no BOS added beyond what the tokenizer does by default). */
#ifndef FATHOM_BENCH_PROMPT_H
#define FATHOM_BENCH_PROMPT_H

#include "fathom.h"
#include "fathom_model.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct bench_prompt {
    fathom_model *model;
    fathom_tokenizer *tok;
    fathom_model_info info;
    int32_t *ids; /* [n + 1]: room for one more token */
    size_t n;
} bench_prompt;

static inline void bench_prompt_free(bench_prompt *p) {
    fathom_tokenizer_free(p->tok);
    fathom_model_free(p->model);
    free(p->ids);
}

/* On failure prints "<prog>: <what>: <status>: <message>" and returns 1. */
static inline int bench_prompt_open(bench_prompt *p, const char *prog, const char *model_path,
                                    const char *prompt_path) {
    *p = (bench_prompt){0};
    const char *what = model_path;
    char *text = NULL;
    size_t len = 0;
    int st = fathom_model_open(&p->model, model_path);
    if (st >= 0) {
        what = "tokenizer";
        st = fathom_model_tokenizer(p->model, &p->tok);
    }
    if (st >= 0) {
        fathom_model_get_info(p->model, &p->info);
        what = prompt_path;
        FILE *f = fopen(prompt_path, "rb");
        long size = f && fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
        if (size >= 0 && fseek(f, 0, SEEK_SET) == 0 && (text = malloc((size_t)size + 1)))
            len = fread(text, 1, (size_t)size, f);
        if (f) fclose(f);
        st = text && len == (size_t)size ? FATHOM_OK : FATHOM_ERR_IO;
    }
    if (st >= 0) {
        /* a first call sizes the ids (it fails with "buffer too small" and sets n) */
        what = "encode";
        st = fathom_tokenizer_encode(p->tok, text, len, false, NULL, 0, &p->n);
        if (p->n > 0) st = (p->ids = malloc((p->n + 1) * sizeof *p->ids)) ? FATHOM_OK : FATHOM_ERR_NOMEM;
        if (st >= 0) st = fathom_tokenizer_encode(p->tok, text, len, false, p->ids, p->n, &p->n);
    }
    free(text);
    if (st >= 0) return 0;
    fprintf(stderr, "%s: %s: %s: %s\n", prog, what, fathom_status_name(st),
            st == FATHOM_ERR_IO ? "cannot read the file" : fathom_last_error());
    bench_prompt_free(p);
    return 1;
}

#endif

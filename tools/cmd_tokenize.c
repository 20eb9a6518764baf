/* fathom tokenize — a text's token ids by a GGUF model's tokenizer (only the
 * tokenizer is built; the weights are not loaded). scripts/make-prompts uses
 * --offsets to cut texts at a token count. */
#include "cli.h"
#include "fathom.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: fathom tokenize [--model FILE] (--text TEXT | --file F) [options]\n"
            "\n"
            "  --model FILE   GGUF model (default $FATHOM_MODEL, else models/...)\n"
            "  --text TEXT    the text\n"
            "  --file F       the text from a file\n"
            "  --special      cut control tokens (<|im_start|> ...) out of the text\n"
            "  --count        print only the number of tokens\n"
            "  --offsets      one line per token: its id and the byte offset where its\n"
            "                 bytes end in the decoded text (equal to the input's offsets\n"
            "                 when every byte has a token)\n"
            "Default: the ids, comma-separated, on one line.\n");
}

int cmd_tokenize(int argc, char **argv) {
    const char *model_path = NULL, *text_arg = NULL, *file = NULL;
    bool special = false, count = false, offsets = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--special")) {
            special = true;
        } else if (!strcmp(a, "--count")) {
            count = true;
        } else if (!strcmp(a, "--offsets")) {
            offsets = true;
        } else if (!strcmp(a, "--model") || !strcmp(a, "--text") || !strcmp(a, "--file")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "fathom tokenize: %s needs a value\n", a);
                return 2;
            }
            const char *v = argv[++i];
            if (a[2] == 'm') model_path = v;
            else if (a[2] == 't') text_arg = v;
            else file = v;
        } else {
            fprintf(stderr, "fathom tokenize: unknown option %s\n\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!!text_arg + !!file != 1) {
        fprintf(stderr, "fathom tokenize: give exactly one of --text, --file\n");
        return 2;
    }
    if (count && offsets) {
        fprintf(stderr, "fathom tokenize: --count and --offsets exclude each other\n");
        return 2;
    }
    int rc = 1, st;
    fathom_gguf *gguf = NULL;
    fathom_tokenizer *tok = NULL;
    char *text = NULL;
    int32_t *ids = NULL;
    size_t len = 0, n = 0;
    const char *path = cli_model_path(model_path);
    if ((st = fathom_gguf_open(&gguf, path)) < 0) {
        rc = cli_fail("tokenize", path, st);
        goto done;
    }
    if ((st = fathom_tokenizer_from_gguf(&tok, gguf)) < 0) {
        rc = cli_fail("tokenize", "tokenizer", st);
        goto done;
    }
    if (file) {
        if (cli_read_file(file, &text, &len) < 0) {
            fprintf(stderr, "fathom tokenize: cannot read %s\n", file);
            goto done;
        }
    } else {
        len = strlen(text_arg);
    }
    const char *src = text ? text : text_arg;
    st = fathom_tokenizer_encode(tok, src, len, special, NULL, 0, &n);
    if (st == FATHOM_ERR_INVALID_ARG && n > 0) st = FATHOM_OK; /* the size query */
    if (st == FATHOM_OK && n > 0) {
        ids = malloc(n * sizeof *ids);
        st = ids ? fathom_tokenizer_encode(tok, src, len, special, ids, n, &n) : FATHOM_ERR_NOMEM;
    }
    if (st < 0) {
        rc = cli_fail("tokenize", "encode", st);
        goto done;
    }
    if (count) {
        printf("%zu\n", n);
    } else if (offsets) {
        size_t at = 0;
        for (size_t i = 0; i < n; i++) {
            char piece[512];
            size_t plen = 0;
            if ((st = fathom_tokenizer_token_to_piece(tok, ids[i], piece, sizeof piece, &plen)) < 0) {
                rc = cli_fail("tokenize", "decode", st);
                goto done;
            }
            at += plen;
            printf("%d %zu\n", ids[i], at);
        }
    } else {
        for (size_t i = 0; i < n; i++) printf("%s%d", i ? "," : "", ids[i]);
        printf("\n");
    }
    rc = 0;
done:
    free(text);
    free(ids);
    fathom_tokenizer_free(tok);
    fathom_gguf_close(gguf);
    return rc;
}

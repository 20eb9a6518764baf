/* fathom capture — run a text through the GGUF model (dense prefill) and
 * write a capture file (docs/capture-format.md): per layer the queries of
 * the last P positions exactly as attention sees them (after QK-norm and
 * RoPE, in the GGUF's channel order) and every key and value. */
#include "cli.h"
#include "fathom.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: fathom capture --model FILE (--text-file F | --text TEXT | --chat MESSAGE |\n"
            "                      --prompt-ids LIST)"
            " --out FILE [options]\n"
            "\n"
            "Run the text through the model with dense attention and write its queries\n"
            "(last P positions), keys and values, every layer and head, to a capture file\n"
            "for fathom eval / fathom info.\n"
            "\n"
            "  --model FILE       GGUF model (default $FATHOM_MODEL, else models/...)\n"
            "  --text-file F      the text\n"
            "  --text TEXT        the text, inline\n"
            "  --chat MESSAGE     a user message in the chat template, up to the assistant's turn\n"
            "  --prompt-ids LIST  the tokens themselves, comma-separated ids\n"
            "  --system TEXT      with --chat, a system turn first\n"
            "  --out FILE         the capture file to write\n"
            "  --positions P      queried positions, the last P (default 128)\n"
            "  --max-tokens N     keep only the first N tokens of the text\n"
            "  --dtype T          f32 | f16 | bf16 (default bf16)\n"
            "  --global-only      only the layers that attend the whole context (Gemma 3: not\n"
            "                     the sliding-window ones, whose attention sparse methods\n"
            "                     never replace); metadata 'layers' names them\n"
            "  --threads N        threads (default: one per core)\n"
            "  --quiet            no progress on stderr\n");
}

typedef struct cap_options {
    const char *model, *text_file, *text, *chat, *system, *out, *dtype, *prompt_ids;
    uint32_t positions, max_tokens, threads;
    bool quiet, global_only;
} cap_options;

static void progress(void *user, uint64_t done, uint64_t total) {
    const double *t0 = user;
    double dt = cli_now() - *t0;
    fprintf(stderr, "\rprefill: %llu / %llu tokens, %.1f tokens/s   ", (unsigned long long)done,
            (unsigned long long)total, dt > 0 ? (double)done / dt : 0.0);
    if (done == total) fprintf(stderr, "\n");
}

static int run(const cap_options *o, fathom_dtype dtype) {
    int rc = 1, st;
    fathom_model *model = NULL;
    fathom_tokenizer *tok = NULL;
    fathom_ctx *ctx = NULL;
    fathom_capture_writer *w = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    char *text = NULL;
    float *q = NULL, *k = NULL, *v = NULL;

    const char *path = cli_model_path(o->model);
    if ((st = fathom_model_open(&model, path)) < 0) {
        rc = cli_fail("capture", path, st);
        goto done;
    }
    fathom_model_info mi;
    fathom_model_get_info(model, &mi);
    if ((st = fathom_model_tokenizer(model, &tok)) < 0) {
        rc = cli_fail("capture", "tokenizer", st);
        goto done;
    }
    size_t len = 0;
    const char *src = NULL;
    if (o->prompt_ids) {
        if (!cli_parse_ids(o->prompt_ids, &ids, &n)) {
            fprintf(stderr, "fathom capture: --prompt-ids needs comma-separated token ids\n");
            rc = 2;
            goto done;
        }
    } else if (o->text_file) {
        if (cli_read_file(o->text_file, &text, &len) < 0) {
            fprintf(stderr, "fathom capture: cannot read %s\n", o->text_file);
            goto done;
        }
        src = text;
    } else {
        src = o->chat ? o->chat : o->text;
        len = strlen(src);
    }
    if (!ids && (st = cli_encode_prompt(tok, src, len, o->chat != NULL, o->system, &ids, &n)) < 0) {
        rc = cli_fail("capture", "encode", st);
        goto done;
    }
    if (o->max_tokens && n > o->max_tokens) n = o->max_tokens;
    if (n < 2) {
        fprintf(stderr, "fathom capture: the text has %zu tokens; at least 2 are needed\n", n);
        goto done;
    }
    if (n > UINT32_MAX) {
        fprintf(stderr, "fathom capture: %zu tokens is too many\n", n);
        goto done;
    }
    const uint32_t P = o->positions < n ? o->positions : (uint32_t)n;
    const uint64_t D = mi.head_dim;
    q = malloc((size_t)mi.layers * mi.q_heads * P * D * sizeof *q);
    k = malloc((size_t)mi.kv_heads * n * D * sizeof *k);
    v = malloc((size_t)mi.kv_heads * n * D * sizeof *v);
    if (!q || !k || !v) {
        fprintf(stderr, "fathom capture: out of memory for %zu tokens\n", n);
        goto done;
    }
    if ((st = fathom_ctx_create(&ctx, model, (uint32_t)n, o->threads)) < 0 ||
        (st = fathom_ctx_record_queries(ctx, n - P, P, q)) < 0) {
        rc = cli_fail("capture", "context", st);
        goto done;
    }
    double t0 = cli_now();
    if (!o->quiet) fathom_ctx_set_progress(ctx, progress, &t0);
    if ((st = fathom_ctx_prefill(ctx, ids, n, NULL)) < 0) {
        rc = cli_fail("capture", "prefill", st);
        goto done;
    }
    double dt = cli_now() - t0;

    /* the model layers written, and their indices for the metadata */
    uint32_t n_out = 0;
    char layer_list[4096] = "";
    for (uint32_t l = 0; l < mi.layers; l++) {
        if (o->global_only && fathom_model_layer_sliding(model, l)) continue;
        size_t at = strlen(layer_list);
        snprintf(layer_list + at, sizeof layer_list - at, "%s%u", n_out ? "," : "", l);
        n_out++;
    }
    if (n_out == 0 || strlen(layer_list) + 1 >= sizeof layer_list) {
        fprintf(stderr, "fathom capture: %s\n", n_out ? "too many layers" : "the model has no global layer");
        goto done;
    }
    fathom_source_info info = {0};
    snprintf(info.model, sizeof info.model, "%s", mi.name[0] ? mi.name : mi.arch);
    info.layers = n_out;
    info.q_heads = mi.q_heads;
    info.kv_heads = mi.kv_heads;
    info.dim = mi.head_dim;
    info.tokens = n;
    info.positions = P;
    info.first_query = n - P;
    if ((st = fathom_capture_writer_open(&w, o->out, &info, dtype)) < 0) {
        rc = cli_fail("capture", o->out, st);
        goto done;
    }
    const char *base = strrchr(path, '/');
    if ((st = fathom_capture_writer_meta(w, "gguf", base ? base + 1 : path)) < 0 ||
        (st = fathom_capture_writer_meta(w, "producer", "fathom capture")) < 0 ||
        (st = fathom_capture_writer_meta(w, "query_layout",
                                         mi.rope_neox ? "after QK-norm and RoPE (pairs i, i+d/2)"
                                                      : "after RoPE (adjacent pairs, GGUF order)")) < 0 ||
        (st = fathom_capture_writer_meta(w, "layers", layer_list)) < 0) {
        rc = cli_fail("capture", "metadata", st);
        goto done;
    }
    for (uint32_t l = 0, out_l = 0; l < mi.layers; l++) {
        if (o->global_only && fathom_model_layer_sliding(model, l)) continue;
        for (uint32_t h = 0; h < mi.kv_heads; h++) {
            const float *keys, *values;
            fathom_ctx_kv(ctx, l, h, &keys, &values);
            memcpy(k + (size_t)h * n * D, keys, n * D * sizeof *k);
            memcpy(v + (size_t)h * n * D, values, n * D * sizeof *v);
        }
        st = fathom_capture_writer_layer(w, out_l++, q + (size_t)l * mi.q_heads * P * D, k, v);
        if (st < 0) {
            rc = cli_fail("capture", "write layer", st);
            goto done;
        }
    }
    st = fathom_capture_writer_close(w);
    w = NULL;
    if (st < 0) {
        rc = cli_fail("capture", o->out, st);
        goto done;
    }
    if (!o->quiet)
        fprintf(stderr, "fathom capture: %zu tokens (%.1f tokens/s), %u queried positions -> %s\n", n,
                (double)n / dt, P, o->out);
    rc = 0;
done:
    if (w) fathom_capture_writer_close(w);
    free(q);
    free(k);
    free(v);
    free(ids);
    free(text);
    fathom_ctx_free(ctx);
    fathom_tokenizer_free(tok);
    fathom_model_free(model);
    return rc;
}

int cmd_capture(int argc, char **argv) {
    cap_options o = {0};
    o.positions = 128;
    o.dtype = "bf16";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        const char **str = NULL;
        uint32_t *num = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--model")) str = &o.model;
        else if (!strcmp(a, "--text-file")) str = &o.text_file;
        else if (!strcmp(a, "--text")) str = &o.text;
        else if (!strcmp(a, "--chat")) str = &o.chat;
        else if (!strcmp(a, "--system")) str = &o.system;
        else if (!strcmp(a, "--out")) str = &o.out;
        else if (!strcmp(a, "--prompt-ids")) str = &o.prompt_ids;
        else if (!strcmp(a, "--dtype")) str = &o.dtype;
        else if (!strcmp(a, "--positions")) num = &o.positions;
        else if (!strcmp(a, "--max-tokens")) num = &o.max_tokens;
        else if (!strcmp(a, "--threads")) num = &o.threads;
        else if (!strcmp(a, "--quiet")) {
            o.quiet = true;
            continue;
        } else if (!strcmp(a, "--global-only")) {
            o.global_only = true;
            continue;
        } else {
            fprintf(stderr, "fathom capture: unknown option %s\n\n", a);
            usage(stderr);
            return 2;
        }
        if (!val) {
            fprintf(stderr, "fathom capture: %s needs a value\n", a);
            return 2;
        }
        if (num && !cli_parse_u32(val, num)) {
            fprintf(stderr, "fathom capture: %s needs a non-negative integer, not '%s'\n", a, val);
            return 2;
        }
        if (str) *str = val;
        i++;
    }
    if (!!o.text_file + !!o.text + !!o.chat + !!o.prompt_ids != 1) {
        fprintf(stderr, "fathom capture: give exactly one of --text-file, --text, --chat, --prompt-ids\n");
        return 2;
    }
    if (!o.out) {
        fprintf(stderr, "fathom capture: --out is required\n");
        return 2;
    }
    if (o.positions == 0) {
        fprintf(stderr, "fathom capture: --positions must be at least 1\n");
        return 2;
    }
    if (o.system && !o.chat) {
        fprintf(stderr, "fathom capture: --system needs --chat\n");
        return 2;
    }
    fathom_dtype dtype;
    if (!strcmp(o.dtype, "f32")) dtype = FATHOM_DTYPE_F32;
    else if (!strcmp(o.dtype, "f16")) dtype = FATHOM_DTYPE_F16;
    else if (!strcmp(o.dtype, "bf16")) dtype = FATHOM_DTYPE_BF16;
    else {
        fprintf(stderr, "fathom capture: --dtype must be f32, f16 or bf16\n");
        return 2;
    }
    return run(&o, dtype);
}

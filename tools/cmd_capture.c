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
            "  --model FILE       " CLI_MODEL_HELP "\n"
            "  --text-file F      the text\n"
            "  --text TEXT        the text, inline\n"
            "  --chat MESSAGE     a user message in the model's chat template (ChatML, with its\n"
            "                     default system turn), up to the assistant's turn\n"
            "  --prompt-ids LIST  the tokens themselves, comma-separated ids\n"
            "  --system TEXT      with --chat, this system turn instead of the template's default\n"
            "  --out FILE         the capture file to write\n"
            "  --positions P      queried positions, the last P (default 128)\n"
            "  --max-tokens N     keep only the first N tokens of the text\n"
            "  --dtype T          f32 | f16 | bf16 (default bf16)\n"
            "  --global-only      only the layers that attend the whole context (Gemma 3: not\n"
            "                     the sliding-window ones, whose attention sparse methods\n"
            "                     never replace); metadata 'layers' names them\n"
            "  --threads N        threads (default: one per core)\n"
            "  --progress         prefill progress on stderr (default: only on a terminal)\n"
            "  --quiet            no progress or summary on stderr\n"
            "\n"
            "Exit status: 0 success, 1 failure, 2 usage error.\n");
}

typedef struct cap_options {
    const char *model, *text_file, *text, *chat, *system, *out, *dtype, *prompt_ids;
    uint32_t positions, max_tokens, threads;
    bool quiet, global_only;
    cli_progress_mode progress;
} cap_options;

/* The text's token ids (the chat template around --chat). */
static int load_text(const cap_options *o, const char *model_path, const fathom_tokenizer *tok, int32_t **ids,
                     size_t *n) {
    if (o->prompt_ids)
        return cli_parse_ids(o->prompt_ids, ids, n) ? CLI_OK
                                                    : cli_usage_error("--prompt-ids needs comma-separated token ids");
    char *text = NULL;
    size_t len = 0;
    if (o->text_file) {
        if (cli_read_file(o->text_file, &text, &len) < 0) {
            cli_error("cannot read %s", o->text_file);
            return CLI_FAILURE;
        }
    } else if (o->chat) {
        cli_chat chat;
        int rc = cli_chat_load(model_path, &chat);
        if (rc != CLI_OK) return rc;
        if (!(text = cli_chat_text(&chat, o->system, o->chat, strlen(o->chat), &len))) return CLI_FAILURE;
    } else {
        len = strlen(o->text);
    }
    int st = cli_encode(tok, text ? text : o->text, len, o->chat != NULL, ids, n);
    free(text);
    return st < 0 ? cli_fail("text", st) : CLI_OK;
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
    if (!path) return CLI_FAILURE;
    if (!cli_check_writable(o->out)) return CLI_FAILURE;
    if ((st = fathom_model_open(&model, path)) < 0) return cli_fail(path, st);
    fathom_model_info mi;
    fathom_model_get_info(model, &mi);
    if ((st = fathom_model_tokenizer(model, &tok)) < 0) {
        rc = cli_fail("tokenizer", st);
        goto done;
    }
    if ((rc = load_text(o, path, tok, &ids, &n)) != CLI_OK) goto done;
    rc = CLI_FAILURE;
    if (o->max_tokens && n > o->max_tokens) n = o->max_tokens;
    if (n < 2) {
        cli_error("the text has %zu tokens; at least 2 are needed", n);
        goto done;
    }
    if (n > UINT32_MAX) {
        cli_error("%zu tokens is too many", n);
        goto done;
    }
    cli_check_window(&mi, n);
    const uint32_t P = o->positions < n ? o->positions : (uint32_t)n;
    const uint64_t D = mi.head_dim;
    q = malloc((size_t)mi.layers * mi.q_heads * P * D * sizeof *q);
    k = malloc((size_t)mi.kv_heads * n * D * sizeof *k);
    v = malloc((size_t)mi.kv_heads * n * D * sizeof *v);
    if (!q || !k || !v) {
        cli_error("out of memory for %zu tokens", n);
        goto done;
    }
    if ((st = fathom_ctx_create(&ctx, model, (uint32_t)n, o->threads)) < 0 ||
        (st = fathom_ctx_record_queries(ctx, n - P, P, q)) < 0) {
        rc = cli_fail("context", st);
        goto done;
    }
    double t0 = cli_now();
    if ((st = cli_prefill(ctx, ids, n, NULL, !o->quiet && cli_progress_wanted(o->progress, false))) < 0) {
        rc = cli_fail("prefill", st);
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
        cli_error("%s", n_out ? "too many layers" : "the model has no global layer");
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
        rc = cli_fail(o->out, st);
        goto done;
    }
    const char *base = strrchr(path, '/');
    if ((st = fathom_capture_writer_meta(w, "gguf", base ? base + 1 : path)) < 0 ||
        (st = fathom_capture_writer_meta(w, "producer", "fathom capture")) < 0 ||
        (st = fathom_capture_writer_meta(w, "query_layout",
                                         mi.rope_neox ? "after QK-norm and RoPE (pairs i, i+d/2)"
                                                      : "after RoPE (adjacent pairs, GGUF order)")) < 0 ||
        (st = fathom_capture_writer_meta(w, "layers", layer_list)) < 0) {
        rc = cli_fail("metadata", st);
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
            rc = cli_fail("write layer", st);
            goto done;
        }
    }
    st = fathom_capture_writer_close(w);
    w = NULL;
    if (st < 0) {
        rc = cli_fail(o->out, st);
        goto done;
    }
    if (!o->quiet) {
        fprintf(stderr, "fathom capture: %zu tokens (%.1f tokens/s), %u queried positions -> ", n, (double)n / dt, P);
        cli_print_safe(stderr, o->out);
        fputc('\n', stderr);
    }
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

enum { OPT_MODEL = 256, OPT_TEXT_FILE, OPT_TEXT, OPT_CHAT, OPT_SYSTEM, OPT_OUT, OPT_PROMPT_IDS, OPT_DTYPE,
       OPT_POSITIONS, OPT_MAX_TOKENS, OPT_THREADS, OPT_QUIET, OPT_PROGRESS, OPT_GLOBAL_ONLY };
static const struct option long_options[] = {
    {"help", no_argument, NULL, 'h'},
    {"model", required_argument, NULL, OPT_MODEL},
    {"text-file", required_argument, NULL, OPT_TEXT_FILE},
    {"text", required_argument, NULL, OPT_TEXT},
    {"chat", required_argument, NULL, OPT_CHAT},
    {"system", required_argument, NULL, OPT_SYSTEM},
    {"out", required_argument, NULL, OPT_OUT},
    {"prompt-ids", required_argument, NULL, OPT_PROMPT_IDS},
    {"dtype", required_argument, NULL, OPT_DTYPE},
    {"positions", required_argument, NULL, OPT_POSITIONS},
    {"max-tokens", required_argument, NULL, OPT_MAX_TOKENS},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"progress", no_argument, NULL, OPT_PROGRESS},
    {"global-only", no_argument, NULL, OPT_GLOBAL_ONLY},
    {NULL, 0, NULL, 0},
};

int cmd_capture(int argc, char **argv) {
    cap_options o = {0};
    o.positions = 128;
    o.dtype = "bf16";
    int c;
    while ((c = cli_getopt(argc, argv, "h", long_options)) != -1) {
        uint32_t *num = NULL;
        switch (c) {
        case 'h': usage(stdout); return CLI_OK;
        case '?': return CLI_USAGE;
        case OPT_MODEL: o.model = optarg; break;
        case OPT_TEXT_FILE: o.text_file = optarg; break;
        case OPT_TEXT: o.text = optarg; break;
        case OPT_CHAT: o.chat = optarg; break;
        case OPT_SYSTEM: o.system = optarg; break;
        case OPT_OUT: o.out = optarg; break;
        case OPT_PROMPT_IDS: o.prompt_ids = optarg; break;
        case OPT_DTYPE: o.dtype = optarg; break;
        case OPT_POSITIONS: num = &o.positions; break;
        case OPT_MAX_TOKENS: num = &o.max_tokens; break;
        case OPT_THREADS: num = &o.threads; break;
        case OPT_QUIET: o.quiet = true; break;
        case OPT_PROGRESS: o.progress = CLI_PROGRESS_ON; break;
        case OPT_GLOBAL_ONLY: o.global_only = true; break;
        }
        if (num && !cli_parse_u32(optarg, num)) return cli_bad_value("a non-negative integer");
    }
    if (optind < argc) return cli_usage_error("unexpected argument '%s'", argv[optind]);
    if (!!o.text_file + !!o.text + !!o.chat + !!o.prompt_ids != 1)
        return cli_usage_error("give exactly one of --text-file, --text, --chat, --prompt-ids");
    if (!o.out) return cli_usage_error("--out is required");
    if (o.positions == 0) return cli_usage_error("--positions must be at least 1");
    if (o.system && !o.chat) return cli_usage_error("--system needs --chat");
    fathom_dtype dtype;
    if (!strcmp(o.dtype, "f32")) dtype = FATHOM_DTYPE_F32;
    else if (!strcmp(o.dtype, "f16")) dtype = FATHOM_DTYPE_F16;
    else if (!strcmp(o.dtype, "bf16")) dtype = FATHOM_DTYPE_BF16;
    else return cli_usage_error("--dtype must be f32, f16 or bf16");
    return run(&o, dtype);
}

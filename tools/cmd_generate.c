/* fathom generate — greedy decoding with the GGUF model, with dense or
 * sparse attention in the decode steps (prefill is always dense). */
#include "cli.h"
#include "fathom.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: fathom generate --model FILE (--prompt TEXT | --prompt-file F | --prompt-ids LIST)\n"
            "                       [options]\n"
            "\n"
            "Greedy decoding. Prefill is dense; decode steps attend by --attn: per layer and\n"
            "KV head the method scans its index of the cached keys, keeps sink 4 + local 32 +\n"
            "top-k per query head (k in total) and attends exactly over them.\n"
            "\n"
            "  --model FILE        " CLI_MODEL_HELP "\n"
            "  --prompt TEXT       the prompt text\n"
            "  --prompt-file F     the prompt from a file\n"
            "  --prompt-ids LIST   the prompt as comma-separated token ids\n"
            "  --chat              wrap the prompt in the chat template the model declares\n"
            "                      (ChatML: its default system turn, the user turn, the\n"
            "                      assistant's opening; or Gemma's <start_of_turn>user ...; none\n"
            "                      declared: the one its turn tokens name); generation stops at\n"
            "                      the end of the turn\n"
            "  --system TEXT       with --chat, this system turn instead of the template's default\n"
            "  --tokens N          tokens to generate (default 64)\n"
            "  --attn METHOD       dense (default), oracle, fathom:B, fathom-centered:B, sparq:r,\n"
            "                      thumb, full4, landmark; fathom-klt:B, ds:c, loki:r need --calib\n"
            "  --k K               selected keys per query head (default 256)\n"
            "  --calib FILE        a capture of this model (fathom's Var, ds, KLT basis)\n"
            "  --ignore-eos        do not stop at the end-of-sequence token\n"
            "  --ids               print the generated token ids (one line) after the text,\n"
            "                      and the prompt's on stderr\n"
            "  --dump-logits FILE  write the logits that chose each token: float32 [N x vocab]\n"
            "  --max-prompt N      keep only the first N prompt tokens\n"
            "  --ctx N             context capacity (default: prompt + tokens)\n"
            "  --threads N         threads (default: one per core)\n"
            "  --progress          prefill progress on stderr (default: only on a terminal)\n"
            "  --quiet             no text on stdout (with --ids: only the ids)\n"
            "  --json              instead of the text, one JSON object on stdout: the generated\n"
            "                      ids, prefill and decode times and rates, scan bytes per\n"
            "                      step, and the process's peak resident memory\n"
            "\n"
            "The end-of-turn token stops generation (unless --ignore-eos) and is not printed;\n"
            "--ids lists it. Exit status: 0 success, 1 failure, 2 usage error.\n");
}

/* Print a token's bytes. */
static void print_piece(cli_text_out *text, const fathom_tokenizer *tok, int32_t id) {
    char buf[256];
    size_t len = 0;
    if (fathom_tokenizer_token_to_piece(tok, id, buf, sizeof buf, &len) == FATHOM_OK)
        cli_text_write(text, buf, len);
    fflush(stdout);
}

typedef struct gen_options {
    const char *model, *prompt, *prompt_file, *prompt_ids, *system, *attn, *calib, *dump;
    uint32_t tokens, k, ctx, threads, max_prompt;
    bool chat, ignore_eos, ids, quiet, progress, json;
} gen_options;

/* The prompt's token ids: given, or the text (from --prompt or the file),
 * in the chat template with --chat. CLI_OK or an exit status after a message. */
static int load_prompt(const gen_options *o, const char *model_path, const fathom_tokenizer *tok,
                       int32_t **ids, size_t *n) {
    if (o->prompt_ids)
        return cli_parse_ids(o->prompt_ids, ids, n) ? CLI_OK
                                                    : cli_usage_error("--prompt-ids needs comma-separated token ids");
    char *file_text = NULL, *chat_text = NULL;
    size_t len = 0;
    if (o->prompt_file && cli_read_file(o->prompt_file, &file_text, &len) < 0) {
        cli_error("cannot read %s", o->prompt_file);
        return CLI_FAILURE;
    }
    const char *text = o->prompt_file ? file_text : o->prompt;
    if (!o->prompt_file) len = strlen(o->prompt);
    cli_chat chat;
    int rc = cli_chat_load(model_path, &chat);
    if (rc == CLI_OK && o->chat) {
        chat_text = cli_chat_text(&chat, o->system, text, len, &len);
        if (!chat_text) rc = CLI_FAILURE;
        text = chat_text;
    } else if (rc == CLI_OK && chat.declared) {
        cli_warn("the model declares a chat template (an instruct model): --chat is probably "
                 "wanted, without it the prompt is continued as plain text");
    }
    int st;
    if (rc == CLI_OK && (st = cli_encode(tok, text, len, o->chat, ids, n)) < 0) rc = cli_fail("prompt", st);
    free(file_text);
    free(chat_text);
    return rc;
}

static void print_stats(const fathom_ctx *ctx, const fathom_method *method, uint32_t k, size_t n_prompt,
                        double prefill_s, double decode_s) {
    fathom_ctx_stats stats;
    fathom_ctx_get_stats(ctx, &stats);
    fprintf(stderr, "prefill: %zu tokens in %.3f s, %.1f tokens/s\n", n_prompt, prefill_s,
            (double)n_prompt / prefill_s);
    if (stats.decode_steps)
        fprintf(stderr, "decode: %" PRIu64 " steps in %.3f s, %.2f tokens/s (attention %s, k %u)\n",
                stats.decode_steps, decode_s, (double)stats.decode_steps / decode_s, method->name, k);
    if (stats.sparse_steps)
        fprintf(stderr, "sparse: %.1f KB scanned per step, %.2f%% of visible keys selected\n",
                stats.scan_bytes / (double)stats.sparse_steps / 1024.0,
                100.0 * stats.selected_rows / (stats.visible_rows > 0 ? stats.visible_rows : 1));
}

/* --json: the run's numbers; peak_rss_kib is getrusage's ru_maxrss (KiB on Linux). */
static void print_json(const fathom_ctx *ctx, const fathom_model_info *info, const fathom_method *method,
                       uint32_t k, size_t n_prompt, double prefill_s, double decode_s, const int32_t *ids,
                       uint32_t n_ids) {
    fathom_ctx_stats stats;
    fathom_ctx_get_stats(ctx, &stats);
    struct rusage ru;
    long rss = getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;
    printf("{\"model\": ");
    cli_print_json_string(stdout, info->name[0] ? info->name : info->arch);
    printf(", \"arch\": ");
    cli_print_json_string(stdout, info->arch);
    printf(", \"attn\": ");
    cli_print_json_string(stdout, method->name);
    const double steps = (double)stats.decode_steps, sparse = (double)stats.sparse_steps;
    printf(", \"k\": %u, \"prompt_tokens\": %zu, \"prefill_s\": %.4f, \"prefill_tokens_per_s\": %.2f, "
           "\"decode_steps\": %" PRIu64 ", \"decode_s\": %.4f, \"decode_tokens_per_s\": %.3f, "
           "\"scan_bytes_per_step\": %.1f, \"selected_share\": %.6f, \"peak_rss_kib\": %ld, \"ids\": [",
           method->kind == FATHOM_METHOD_DENSE ? 0 : k, n_prompt, prefill_s, (double)n_prompt / prefill_s,
           stats.decode_steps, decode_s, steps > 0 ? steps / decode_s : 0.0,
           sparse > 0 ? stats.scan_bytes / sparse : 0.0,
           stats.visible_rows > 0 ? stats.selected_rows / stats.visible_rows : 0.0, rss);
    for (uint32_t i = 0; i < n_ids; i++) printf("%s%d", i ? ", " : "", ids[i]);
    printf("]}\n");
}

static int run(const gen_options *o) {
    int rc = CLI_FAILURE, st;
    fathom_model *model = NULL;
    fathom_tokenizer *tok = NULL;
    fathom_ctx *ctx = NULL;
    fathom_source *calib = NULL;
    int32_t *prompt = NULL, *out_ids = NULL;
    size_t n_prompt = 0;
    float *logits = NULL;
    FILE *dump = NULL;

    fathom_method method;
    if ((st = fathom_method_parse(o->attn, &method)) < 0) return cli_fail_usage("--attn", st);
    const char *path = cli_model_path(o->model);
    if (!path) return CLI_FAILURE;
    if (o->dump && !cli_check_writable(o->dump)) return CLI_FAILURE;
    double t0 = cli_now();
    if ((st = fathom_model_open(&model, path)) < 0) return cli_fail(path, st);
    fathom_model_info info;
    fathom_model_get_info(model, &info);
    if ((rc = cli_check_method(&method, info.head_dim)) != CLI_OK) goto done;
    rc = CLI_FAILURE;
    fprintf(stderr, "fathom generate: ");
    cli_print_safe(stderr, info.name[0] ? info.name : path);
    fprintf(stderr, " (");
    cli_print_safe(stderr, info.arch);
    fprintf(stderr, ", %u layers, %u/%u heads of %u) loaded in %.2f s\n", info.layers, info.q_heads,
            info.kv_heads, info.head_dim, cli_now() - t0);
    if ((st = fathom_model_tokenizer(model, &tok)) < 0) {
        rc = cli_fail("tokenizer", st);
        goto done;
    }
    if ((rc = load_prompt(o, path, tok, &prompt, &n_prompt)) != CLI_OK) goto done;
    rc = CLI_FAILURE;
    if (o->max_prompt && n_prompt > o->max_prompt) n_prompt = o->max_prompt;
    if (o->ids) {
        fprintf(stderr, "prompt ids (%zu): ", n_prompt);
        for (size_t i = 0; i < n_prompt; i++) fprintf(stderr, "%s%d", i ? "," : "", prompt[i]);
        fprintf(stderr, "\n");
    }
    if (n_prompt == 0) {
        rc = cli_usage_error("the prompt is empty");
        goto done;
    }
    const uint64_t need = (uint64_t)n_prompt + o->tokens;
    const uint32_t cap = o->ctx ? o->ctx : (need < UINT32_MAX ? (uint32_t)need : UINT32_MAX);
    cli_check_window(&info, need < cap ? need : cap);
    if (method.kind != FATHOM_METHOD_DENSE) cli_check_k(o->k, need, "k");
    if ((st = fathom_ctx_create(&ctx, model, cap, o->threads)) < 0) {
        rc = cli_fail("context", st);
        goto done;
    }
    if (o->calib && (st = fathom_capture_open(&calib, o->calib)) < 0) {
        rc = cli_fail(o->calib, st);
        goto done;
    }
    logits = malloc((size_t)info.vocab * sizeof *logits);
    out_ids = malloc(((size_t)o->tokens + 1) * sizeof *out_ids);
    if (!logits || !out_ids) {
        cli_error("out of memory");
        goto done;
    }
    if (o->dump && !(dump = fopen(o->dump, "wb"))) {
        cli_error("cannot write %s", o->dump);
        goto done;
    }
    int32_t stop_a, stop_b;
    cli_stop_tokens(tok, &stop_a, &stop_b);

    if ((st = fathom_ctx_set_attention(ctx, &method, o->k, calib)) < 0) {
        rc = cli_fail("--attn", st);
        goto done;
    }
    const double tp = cli_now();
    const bool progress = cli_progress_wanted(o->progress ? CLI_PROGRESS_ON : CLI_PROGRESS_AUTO, false);
    if ((st = cli_prefill(ctx, prompt, n_prompt, logits, progress)) < 0) {
        rc = cli_fail("prefill", st);
        goto done;
    }
    const double prefill_s = cli_now() - tp;
    uint32_t produced = 0;
    cli_text_out text = {stdout, false};
    const double td = cli_now();
    while (produced < o->tokens) {
        if (dump && fwrite(logits, sizeof *logits, info.vocab, dump) != info.vocab) {
            cli_error("write error on %s", o->dump);
            goto done;
        }
        int32_t next = cli_argmax(logits, info.vocab);
        out_ids[produced++] = next;
        if (!o->ignore_eos && (next == stop_a || next == stop_b)) break; /* the end of the turn: not printed */
        if (!o->quiet) print_piece(&text, tok, next);
        if (produced == o->tokens) break;
        if ((st = fathom_ctx_step(ctx, next, logits)) < 0) {
            rc = cli_fail("decode step", st);
            goto done;
        }
    }
    const double decode_s = cli_now() - td;
    cli_text_finish(&text);
    if (!o->quiet) printf("\n");
    if (o->ids) {
        for (uint32_t i = 0; i < produced; i++) printf("%s%d", i ? "," : "", out_ids[i]);
        printf("\n");
    }
    print_stats(ctx, &method, o->k, n_prompt, prefill_s, decode_s);
    if (o->json) print_json(ctx, &info, &method, o->k, n_prompt, prefill_s, decode_s, out_ids, produced);
    rc = CLI_OK;
done:
    if (dump && fclose(dump) != 0 && rc == CLI_OK) {
        cli_error("write error on %s", o->dump);
        rc = CLI_FAILURE;
    }
    free(prompt);
    free(out_ids);
    free(logits);
    fathom_source_free(calib);
    fathom_ctx_free(ctx);
    fathom_tokenizer_free(tok);
    fathom_model_free(model);
    return rc;
}

enum {
    OPT_MODEL = 256, OPT_PROMPT, OPT_PROMPT_FILE, OPT_PROMPT_IDS, OPT_SYSTEM, OPT_ATTN, OPT_CALIB,
    OPT_DUMP, OPT_TOKENS, OPT_K, OPT_CTX, OPT_MAX_PROMPT, OPT_THREADS, OPT_CHAT, OPT_IGNORE_EOS,
    OPT_IDS, OPT_QUIET, OPT_PROGRESS, OPT_JSON
};
static const struct option long_options[] = {
    {"help", no_argument, NULL, 'h'},
    {"model", required_argument, NULL, OPT_MODEL},
    {"prompt", required_argument, NULL, OPT_PROMPT},
    {"prompt-file", required_argument, NULL, OPT_PROMPT_FILE},
    {"prompt-ids", required_argument, NULL, OPT_PROMPT_IDS},
    {"system", required_argument, NULL, OPT_SYSTEM},
    {"attn", required_argument, NULL, OPT_ATTN},
    {"calib", required_argument, NULL, OPT_CALIB},
    {"dump-logits", required_argument, NULL, OPT_DUMP},
    {"tokens", required_argument, NULL, OPT_TOKENS},
    {"k", required_argument, NULL, OPT_K},
    {"ctx", required_argument, NULL, OPT_CTX},
    {"max-prompt", required_argument, NULL, OPT_MAX_PROMPT},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"chat", no_argument, NULL, OPT_CHAT},
    {"ignore-eos", no_argument, NULL, OPT_IGNORE_EOS},
    {"ids", no_argument, NULL, OPT_IDS},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"progress", no_argument, NULL, OPT_PROGRESS},
    {"json", no_argument, NULL, OPT_JSON},
    {NULL, 0, NULL, 0},
};

int cmd_generate(int argc, char **argv) {
    gen_options o = {0};
    o.attn = "dense";
    o.tokens = 64;
    o.k = 256;
    int c;
    while ((c = cli_getopt(argc, argv, "h", long_options)) != -1) {
        uint32_t *num = NULL;
        switch (c) {
        case 'h': usage(stdout); return CLI_OK;
        case '?': return CLI_USAGE;
        case OPT_MODEL: o.model = optarg; break;
        case OPT_PROMPT: o.prompt = optarg; break;
        case OPT_PROMPT_FILE: o.prompt_file = optarg; break;
        case OPT_PROMPT_IDS: o.prompt_ids = optarg; break;
        case OPT_SYSTEM: o.system = optarg; break;
        case OPT_ATTN: o.attn = optarg; break;
        case OPT_CALIB: o.calib = optarg; break;
        case OPT_DUMP: o.dump = optarg; break;
        case OPT_TOKENS: num = &o.tokens; break;
        case OPT_K: num = &o.k; break;
        case OPT_CTX: num = &o.ctx; break;
        case OPT_MAX_PROMPT: num = &o.max_prompt; break;
        case OPT_THREADS: num = &o.threads; break;
        case OPT_CHAT: o.chat = true; break;
        case OPT_IGNORE_EOS: o.ignore_eos = true; break;
        case OPT_IDS: o.ids = true; break;
        case OPT_QUIET: o.quiet = true; break;
        case OPT_PROGRESS: o.progress = true; break;
        case OPT_JSON: o.json = o.quiet = true; break;
        }
        if (num && !cli_parse_u32(optarg, num)) return cli_bad_value("a non-negative integer");
    }
    if (optind < argc) return cli_usage_error("unexpected argument '%s'", argv[optind]);
    if (!!o.prompt + !!o.prompt_file + !!o.prompt_ids != 1)
        return cli_usage_error("give exactly one of --prompt, --prompt-file, --prompt-ids");
    if (o.prompt_ids && o.chat) return cli_usage_error("--chat needs text, not --prompt-ids");
    if (o.system && !o.chat) return cli_usage_error("--system needs --chat");
    if (o.json && o.ids) return cli_usage_error("--json lists the ids itself; give --json or --ids");
    if (o.tokens == 0 || o.k == 0) return cli_usage_error("--tokens and --k must be at least 1");
    return run(&o);
}

/* fathom generate — greedy decoding with the GGUF model, with dense or
 * sparse attention in the decode steps (prefill is always dense). Also holds
 * the helpers the model commands share (declared in cli.h). */
#include "cli.h"
#include "fathom.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_MODEL_NAME "SmolLM2-135M-Instruct.Q4_1.gguf"

static void usage(FILE *f) {
    fprintf(f,
            "usage: fathom generate --model FILE (--prompt TEXT | --prompt-file F | --prompt-ids LIST)\n"
            "                       [options]\n"
            "\n"
            "Greedy decoding. Prefill is dense; decode steps attend by --attn: per layer and\n"
            "KV head the method scans its index of the cached keys, keeps sink 4 + local 32 +\n"
            "top-k per query head (k in total) and attends exactly over them.\n"
            "\n"
            "  --model FILE        GGUF model (default $FATHOM_MODEL, else models/" DEFAULT_MODEL_NAME ")\n"
            "  --prompt TEXT       the prompt text\n"
            "  --prompt-file F     the prompt from a file\n"
            "  --prompt-ids LIST   the prompt as comma-separated token ids\n"
            "  --chat              wrap the prompt in the model's chat template (user turn, then\n"
            "                      the assistant's): ChatML <|im_start|>user\\n...<|im_end|>\\n\n"
            "                      <|im_start|>assistant\\n, or Gemma's <start_of_turn>user ...\n"
            "  --system TEXT       with --chat, a system turn first\n"
            "  --tokens N          tokens to generate (default 64)\n"
            "  --attn METHOD       dense (default), oracle, fathom:B, sparq:r, thumb, full4,\n"
            "                      landmark; fathom-klt:B, ds:c, loki:r need --calib\n"
            "  --k K               selected keys per query head (default 256)\n"
            "  --calib FILE        a capture of this model (fathom's Var, ds, KLT basis)\n"
            "  --ignore-eos        do not stop at the end-of-sequence token\n"
            "  --ids               print the generated token ids (one line) after the text,\n"
            "                      and the prompt's on stderr\n"
            "  --dump-logits FILE  write the logits that chose each token: float32 [N x vocab]\n"
            "  --max-prompt N      keep only the first N prompt tokens\n"
            "  --ctx N             context capacity (default: prompt + tokens)\n"
            "  --threads N         threads (default: one per core)\n"
            "  --quiet             no text on stdout (with --ids: only the ids)\n");
}

/* ---- helpers shared by the model commands ---- */

bool cli_parse_u32(const char *s, uint32_t *out) {
    if (!s || !*s || *s == '-') return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v > UINT32_MAX) return false;
    *out = (uint32_t)v;
    return true;
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *cli_model_path(const char *given) {
    if (given) return given;
    const char *env = getenv("FATHOM_MODEL");
    if (env && *env) return env;
    return "models/" DEFAULT_MODEL_NAME;
}

int cli_read_file(const char *path, char **text, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        char *bigger = realloc(buf, cap * 2);
        if (!bigger) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = bigger;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf || err) {
        free(buf);
        return -1;
    }
    *text = buf;
    *len = n;
    return 0;
}

int cli_encode_prompt(const fathom_tokenizer *tok, const char *text, size_t len, bool chat,
                      const char *system, int32_t **ids, size_t *n) {
    char *buf = NULL;
    const char *src = text;
    size_t src_len = len;
    if (chat) { /* the model's template (fathom_chat_template_for) */
        fathom_chat_template t;
        int st = fathom_chat_template_for(tok, &t);
        size_t sys_len = system ? strlen(system) : 0, total = 0;
        if (st == FATHOM_OK) st = fathom_chat_render(&t, system, sys_len, text, len, NULL, 0, &total);
        if (st == FATHOM_ERR_INVALID_ARG && total > 0) st = FATHOM_OK; /* the size query */
        if (st < 0) return st;
        buf = malloc(total);
        if (!buf) return FATHOM_ERR_NOMEM;
        if ((st = fathom_chat_render(&t, system, sys_len, text, len, buf, total, &total)) < 0) {
            free(buf);
            return st;
        }
        src = buf;
        src_len = total;
    }
    size_t need = 0;
    int st = fathom_tokenizer_encode(tok, src, src_len, chat, NULL, 0, &need);
    if (st == FATHOM_ERR_INVALID_ARG && need > 0) st = FATHOM_OK; /* the size query */
    int32_t *out = NULL;
    if (st == FATHOM_OK) {
        out = malloc((need ? need : 1) * sizeof *out);
        st = out ? fathom_tokenizer_encode(tok, src, src_len, chat, out, need, &need) : FATHOM_ERR_NOMEM;
    }
    free(buf);
    if (st < 0) {
        free(out);
        return st;
    }
    *ids = out;
    *n = need;
    return FATHOM_OK;
}

/* ---- generate ---- */

bool cli_parse_ids(const char *list, int32_t **ids, size_t *n) {
    size_t cap = 16, count = 0;
    int32_t *out = malloc(cap * sizeof *out);
    const char *p = list;
    while (out && *p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            free(out);
            return false;
        }
        if (count == cap) {
            int32_t *bigger = realloc(out, 2 * cap * sizeof *out);
            if (!bigger) break;
            out = bigger;
            cap *= 2;
        }
        out[count++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (!out || count == 0 || *p) {
        free(out);
        return false;
    }
    *ids = out;
    *n = count;
    return true;
}

static int32_t argmax(const float *x, uint32_t n) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return (int32_t)best;
}

/* Print a token's bytes. */
static void print_piece(const fathom_tokenizer *tok, int32_t id) {
    char buf[256];
    size_t len = 0;
    if (fathom_tokenizer_token_to_piece(tok, id, buf, sizeof buf, &len) == FATHOM_OK)
        fwrite(buf, 1, len, stdout);
    fflush(stdout);
}

typedef struct gen_options {
    const char *model, *prompt, *prompt_file, *prompt_ids, *system, *attn, *calib, *dump;
    uint32_t tokens, k, ctx, threads, max_prompt;
    bool chat, ignore_eos, ids, quiet;
} gen_options;

static int run(const gen_options *o) {
    int rc = 1, st;
    fathom_model *model = NULL;
    fathom_tokenizer *tok = NULL;
    fathom_ctx *ctx = NULL;
    fathom_source *calib = NULL;
    int32_t *prompt = NULL, *out_ids = NULL;
    size_t n_prompt = 0;
    float *logits = NULL;
    FILE *dump = NULL;
    char *text = NULL;

    fathom_method method;
    if ((st = fathom_method_parse(o->attn, &method)) < 0) return cli_fail("generate", o->attn, st);
    const char *path = cli_model_path(o->model);
    double t0 = cli_now();
    if ((st = fathom_model_open(&model, path)) < 0) {
        rc = cli_fail("generate", path, st);
        goto done;
    }
    fathom_model_info info;
    fathom_model_get_info(model, &info);
    fprintf(stderr, "fathom generate: %s (%s, %u layers, %u/%u heads of %u) loaded in %.2f s\n",
            info.name, info.arch, info.layers, info.q_heads, info.kv_heads, info.head_dim,
            cli_now() - t0);
    if ((st = fathom_model_tokenizer(model, &tok)) < 0) {
        rc = cli_fail("generate", "tokenizer", st);
        goto done;
    }
    if (o->prompt_ids) {
        if (!cli_parse_ids(o->prompt_ids, &prompt, &n_prompt)) {
            fprintf(stderr, "fathom generate: --prompt-ids needs comma-separated token ids\n");
            rc = 2;
            goto done;
        }
    } else {
        size_t len;
        if (o->prompt_file) {
            if (cli_read_file(o->prompt_file, &text, &len) < 0) {
                fprintf(stderr, "fathom generate: cannot read %s\n", o->prompt_file);
                goto done;
            }
        } else {
            len = strlen(o->prompt);
        }
        if ((st = cli_encode_prompt(tok, text ? text : o->prompt, len, o->chat, o->system, &prompt,
                                    &n_prompt)) < 0) {
            rc = cli_fail("generate", "encode", st);
            goto done;
        }
    }
    if (o->max_prompt && n_prompt > o->max_prompt) n_prompt = o->max_prompt;
    if (o->ids) {
        fprintf(stderr, "prompt ids (%zu): ", n_prompt);
        for (size_t i = 0; i < n_prompt; i++) fprintf(stderr, "%s%d", i ? "," : "", prompt[i]);
        fprintf(stderr, "\n");
    }
    if (n_prompt == 0) {
        fprintf(stderr, "fathom generate: the prompt is empty\n");
        rc = 2;
        goto done;
    }
    uint64_t need = (uint64_t)n_prompt + o->tokens;
    uint32_t cap = o->ctx ? o->ctx : (need < UINT32_MAX ? (uint32_t)need : UINT32_MAX);
    if ((st = fathom_ctx_create(&ctx, model, cap, o->threads)) < 0) {
        rc = cli_fail("generate", "context", st);
        goto done;
    }
    if (o->calib && (st = fathom_capture_open(&calib, o->calib)) < 0) {
        rc = cli_fail("generate", o->calib, st);
        goto done;
    }
    if ((st = fathom_ctx_set_attention(ctx, &method, o->k, calib)) < 0) {
        rc = cli_fail("generate", o->attn, st);
        goto done;
    }
    logits = malloc((size_t)info.vocab * sizeof *logits);
    out_ids = malloc(((size_t)o->tokens + 1) * sizeof *out_ids);
    if (!logits || !out_ids) {
        fprintf(stderr, "fathom generate: out of memory\n");
        goto done;
    }
    if (o->dump && !(dump = fopen(o->dump, "wb"))) {
        fprintf(stderr, "fathom generate: cannot write %s\n", o->dump);
        goto done;
    }
    int32_t stop_a = fathom_tokenizer_eos(tok), stop_b = -1;
    fathom_chat_template tmpl; /* the end of a chat turn stops generation too */
    if (fathom_chat_template_for(tok, &tmpl) == FATHOM_OK)
        fathom_tokenizer_find(tok, tmpl.end_of_turn, strlen(tmpl.end_of_turn), &stop_b);

    double tp = cli_now();
    if ((st = fathom_ctx_prefill(ctx, prompt, n_prompt, logits)) < 0) {
        rc = cli_fail("generate", "prefill", st);
        goto done;
    }
    double prefill_s = cli_now() - tp;
    uint32_t produced = 0;
    double td = cli_now();
    while (produced < o->tokens) {
        if (dump && fwrite(logits, sizeof *logits, info.vocab, dump) != info.vocab) {
            fprintf(stderr, "fathom generate: write error on %s\n", o->dump);
            goto done;
        }
        int32_t next = argmax(logits, info.vocab);
        out_ids[produced++] = next;
        if (!o->quiet) print_piece(tok, next);
        if (!o->ignore_eos && (next == stop_a || next == stop_b)) break;
        if (produced == o->tokens) break;
        if ((st = fathom_ctx_step(ctx, next, logits)) < 0) {
            rc = cli_fail("generate", "decode step", st);
            goto done;
        }
    }
    double decode_s = cli_now() - td;
    if (!o->quiet) printf("\n");
    if (o->ids) {
        for (uint32_t i = 0; i < produced; i++) printf("%s%d", i ? "," : "", out_ids[i]);
        printf("\n");
    }
    fathom_ctx_stats stats;
    fathom_ctx_get_stats(ctx, &stats);
    fprintf(stderr, "prefill: %zu tokens in %.3f s, %.1f tokens/s\n", n_prompt, prefill_s,
            (double)n_prompt / prefill_s);
    if (stats.decode_steps)
        fprintf(stderr, "decode: %" PRIu64 " steps in %.3f s, %.2f tokens/s (attention %s, k %u)\n",
                stats.decode_steps, decode_s, (double)stats.decode_steps / decode_s, method.name, o->k);
    if (stats.sparse_steps)
        fprintf(stderr, "sparse: %.1f KB scanned per step, %.2f%% of visible keys selected\n",
                stats.scan_bytes / (double)stats.sparse_steps / 1024.0,
                100.0 * stats.selected_rows / (stats.visible_rows > 0 ? stats.visible_rows : 1));
    rc = 0;
done:
    if (dump && fclose(dump) != 0 && rc == 0) {
        fprintf(stderr, "fathom generate: write error on %s\n", o->dump);
        rc = 1;
    }
    free(text);
    free(prompt);
    free(out_ids);
    free(logits);
    fathom_source_free(calib);
    fathom_ctx_free(ctx);
    fathom_tokenizer_free(tok);
    fathom_model_free(model);
    return rc;
}

int cmd_generate(int argc, char **argv) {
    gen_options o = {0};
    o.attn = "dense";
    o.tokens = 64;
    o.k = 256;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define TAKE(field)                                                                                \
    do {                                                                                           \
        if (!v) goto missing;                                                                      \
        o.field = v;                                                                               \
        i++;                                                                                       \
    } while (0)
#define TAKE_U32(field)                                                                            \
    do {                                                                                           \
        if (!cli_parse_u32(v, &o.field)) goto bad_number;                                          \
        i++;                                                                                       \
    } while (0)
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--model")) TAKE(model);
        else if (!strcmp(a, "--prompt")) TAKE(prompt);
        else if (!strcmp(a, "--prompt-file")) TAKE(prompt_file);
        else if (!strcmp(a, "--prompt-ids")) TAKE(prompt_ids);
        else if (!strcmp(a, "--system")) TAKE(system);
        else if (!strcmp(a, "--attn")) TAKE(attn);
        else if (!strcmp(a, "--calib")) TAKE(calib);
        else if (!strcmp(a, "--dump-logits")) TAKE(dump);
        else if (!strcmp(a, "--tokens")) TAKE_U32(tokens);
        else if (!strcmp(a, "--k")) TAKE_U32(k);
        else if (!strcmp(a, "--ctx")) TAKE_U32(ctx);
        else if (!strcmp(a, "--max-prompt")) TAKE_U32(max_prompt);
        else if (!strcmp(a, "--threads")) TAKE_U32(threads);
        else if (!strcmp(a, "--chat")) o.chat = true;
        else if (!strcmp(a, "--ignore-eos")) o.ignore_eos = true;
        else if (!strcmp(a, "--ids")) o.ids = true;
        else if (!strcmp(a, "--quiet")) o.quiet = true;
        else {
            fprintf(stderr, "fathom generate: unknown option %s\n\n", a);
            usage(stderr);
            return 2;
        }
        continue;
    missing:
        fprintf(stderr, "fathom generate: %s needs a value\n", a);
        return 2;
    bad_number:
        fprintf(stderr, "fathom generate: %s needs a non-negative integer, not '%s'\n", a, v ? v : "");
        return 2;
#undef TAKE
#undef TAKE_U32
    }
    int sources = !!o.prompt + !!o.prompt_file + !!o.prompt_ids;
    if (sources != 1) {
        fprintf(stderr, "fathom generate: give exactly one of --prompt, --prompt-file, --prompt-ids\n");
        return 2;
    }
    if (o.prompt_ids && o.chat) {
        fprintf(stderr, "fathom generate: --chat needs text, not --prompt-ids\n");
        return 2;
    }
    if (o.tokens == 0 || o.k == 0) {
        fprintf(stderr, "fathom generate: --tokens and --k must be at least 1\n");
        return 2;
    }
    return run(&o);
}

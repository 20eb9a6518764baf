/* fathom needle — RULER-style needle retrieval (single needle, key-value):
 * "The special magic number for <word> is <7 digits>." hidden at a random
 * depth of a haystack of real text, asked for at the end in the chat
 * template; a sample scores 1 when the generated answer contains the number.
 * One dense prefill per sample; every method continues from it. */
#include "cli.h"
#include "fathom.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_METHODS "oracle,fathom:48,sparq:16,sparq:32,thumb,landmark,full4"

static void usage(FILE *f) {
    fprintf(f,
            "usage: fathom needle --haystack DIR|FILE... [options]\n"
            "\n"
            "RULER-style retrieval: per sample, a key-value needle (\"The special magic number\n"
            "for <word> is <7 digits>.\") is put on its own line at a random depth of a\n"
            "haystack cut from the given texts, the question comes at the end in the chat\n"
            "template with RULER's answer prefix, and the sample scores 1 if the greedy\n"
            "answer contains the number. Dense, then every method at each budget\n"
            "(k = max(37, ceil(budget * n))), all from the same dense prefill.\n"
            "\n"
            "  --model FILE      GGUF model (default $FATHOM_MODEL, else models/...)\n"
            "  --haystack P...   text files, or directories of them (sorted by name)\n"
            "  --context N       prompt tokens per sample (default 1024)\n"
            "  --samples S       samples (default 10)\n"
            "  --seed S          seed of words, numbers, depths (default 1)\n"
            "  --tokens N        answer tokens (default 12)\n"
            "  --methods LIST    default " DEFAULT_METHODS " (dense is always run)\n"
            "  --budgets LIST    default 0.02,0.005\n"
            "  --calib FILE      a capture of this model, for ds, loki, fathom-klt\n"
            "  --threads N       threads (default: one per core)\n"
            "  --json            one JSON object on stdout instead of the table\n"
            "  --quiet           no progress on stderr\n");
}

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* RULER draws keys from a word list; these are common English nouns. */
static const char *const keys_words[] = {
    "apple",   "harbor",  "violin",  "meadow",  "lantern", "falcon",  "pepper",  "glacier",
    "copper",  "saddle",  "orchid",  "thunder", "marble",  "compass", "velvet",  "walnut",
    "beacon",  "cactus",  "dolphin", "ember",   "fountain", "garnet", "hammock", "iceberg",
    "jasmine", "kettle",  "lobster", "mirror",  "nectar",  "oyster",  "pebble",  "quartz",
    "raven",   "saffron", "tunnel",  "umbrella", "willow", "yogurt",  "zephyr",  "anchor",
    "blossom", "canyon",  "dragon",  "engine",  "feather", "gravel",  "helmet",  "island"};

/* after the chat template's user_open */
static const char head_body[] =
    "Some special magic numbers are hidden within the following text. Make sure "
    "to memorize it. I will quiz you about the numbers afterwards.\n";

typedef struct needle_options {
    const char *model, *methods, *budgets, *calib;
    char **haystack;
    int n_haystack;
    uint32_t context, samples, tokens, threads;
    uint64_t seed;
    bool json, quiet;
} needle_options;

typedef struct text_buf {
    char *p;
    size_t len, cap;
} text_buf;

static bool put(text_buf *b, const char *s, size_t len) {
    if (b->len + len + 1 > b->cap) {
        size_t cap = (b->len + len + 1) * 2;
        char *bigger = realloc(b->p, cap);
        if (!bigger) return false;
        b->p = bigger;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, len);
    b->len += len;
    b->p[b->len] = '\0';
    return true;
}

static int encode(const fathom_tokenizer *tok, const char *text, size_t len, int32_t **ids, size_t *n) {
    size_t need = 0;
    int st = fathom_tokenizer_encode(tok, text, len, 1, NULL, 0, &need);
    if (st == FATHOM_ERR_INVALID_ARG && need > 0) st = FATHOM_OK;
    if (st < 0) return st;
    int32_t *out = malloc((need ? need : 1) * sizeof *out);
    if (!out) return FATHOM_ERR_NOMEM;
    if (need && (st = fathom_tokenizer_encode(tok, text, len, 1, out, need, &need)) < 0) {
        free(out);
        return st;
    }
    *ids = out;
    *n = need;
    return FATHOM_OK;
}

/* The haystack: texts from files[first], first+1, ... (cyclically), cut to
 * at most `budget` tokens at a token boundary, then back to the last line
 * break so the needle goes between whole lines. */
static int make_haystack(const fathom_tokenizer *tok, char **files, size_t n_files, size_t first,
                         uint64_t budget, char **out) {
    text_buf raw = {0};
    /* Short texts repeat (bounded): RULER's simplest haystack is one sentence repeated. */
    for (size_t f = 0; f < 64 * n_files && raw.len < 8 * budget; f++) {
        char *text = NULL;
        size_t len = 0;
        if (cli_read_file(files[(first + f) % n_files], &text, &len) < 0) {
            fprintf(stderr, "fathom needle: cannot read %s\n", files[(first + f) % n_files]);
            free(raw.p);
            return FATHOM_ERR_IO;
        }
        bool ok = put(&raw, text, len) && put(&raw, "\n", 1);
        free(text);
        if (!ok) {
            free(raw.p);
            return FATHOM_ERR_NOMEM;
        }
    }
    int32_t *ids = NULL;
    size_t n = 0;
    /* No special tokens in the haystack: encode as plain text. */
    size_t need = 0;
    int st = fathom_tokenizer_encode(tok, raw.p, raw.len, 0, NULL, 0, &need);
    if (st == FATHOM_ERR_INVALID_ARG && need > 0) st = FATHOM_OK;
    if (st == FATHOM_OK) {
        ids = malloc((need ? need : 1) * sizeof *ids);
        st = ids ? fathom_tokenizer_encode(tok, raw.p, raw.len, 0, ids, need, &n) : FATHOM_ERR_NOMEM;
    }
    free(raw.p);
    if (st < 0) {
        free(ids);
        return st;
    }
    if (n > budget) n = (size_t)budget;
    char *text = cli_decode_text(tok, ids, (uint32_t)n);
    free(ids);
    if (!text) return FATHOM_ERR_NOMEM;
    char *nl = strrchr(text, '\n');
    if (nl) nl[1] = '\0';
    *out = text;
    return FATHOM_OK;
}

typedef struct row {
    fathom_method method;
    double budget;
    double *hits; /* [samples] */
    double k;     /* sum */
} row;

static int run(const needle_options *o) {
    int rc = 1, st;
    fathom_ctx *ctx = NULL;
    char *hay = NULL;
    row *rows = NULL;
    uint32_t n_rows = 0;
    float *logits = NULL;
    int32_t *gen = NULL, *ids = NULL;
    text_buf prompt = {0};

    fathom_method dense_m;
    cli_session ses;
    if ((rc = cli_session_open(&ses, "needle", o->methods, o->budgets, o->model, o->calib, o->haystack,
                               o->n_haystack)) != 0)
        return rc;
    rc = 1;
    /* short names for the session's parts */
    fathom_method *user = ses.methods;
    const uint32_t n_user = ses.n_methods, n_budgets = ses.n_budgets;
    double *budgets = ses.budgets;
    fathom_model *model = ses.model;
    fathom_model_info info = ses.info;
    fathom_tokenizer *tok = ses.tok;
    fathom_source *calib = ses.calib;
    char **files = ses.files;
    const size_t n_files = ses.n_files;
    fathom_method_parse("dense", &dense_m);
    if ((st = fathom_ctx_create(&ctx, model, o->context + o->tokens + 64, o->threads)) < 0) {
        rc = cli_fail("needle", "context", st);
        goto done;
    }
    rows = calloc(1 + (size_t)n_budgets * n_user, sizeof *rows);
    if (!rows) goto oom;
    rows[n_rows++].method = dense_m;
    for (uint32_t b = 0; b < n_budgets; b++)
        for (uint32_t m = 0; m < n_user; m++) {
            if (user[m].kind == FATHOM_METHOD_DENSE) continue;
            rows[n_rows].method = user[m];
            rows[n_rows++].budget = budgets[b];
        }
    for (uint32_t r = 0; r < n_rows; r++)
        if (!(rows[r].hits = calloc(o->samples, sizeof(double)))) goto oom;
    logits = malloc((size_t)info.vocab * sizeof *logits);
    gen = malloc((size_t)o->tokens * sizeof *gen);
    if (!logits || !gen) goto oom;
    int32_t stop_a = fathom_tokenizer_eos(tok), stop_b = -1;
    fathom_chat_template tmpl; /* the model's: ChatML, Gemma */
    if ((st = fathom_chat_template_for(tok, &tmpl)) < 0) {
        rc = cli_fail("needle", "chat template", st);
        goto done;
    }
    fathom_tokenizer_find(tok, tmpl.end_of_turn, strlen(tmpl.end_of_turn), &stop_b);
    char head_text[512];
    snprintf(head_text, sizeof head_text, "%s%s", tmpl.user_open, head_body);

    if (o->json) printf("{\"model\": \"%s\", \"context\": %u, \"samples\": [", info.name, o->context);
    for (uint32_t s = 0; s < o->samples; s++) {
        uint64_t rng = o->seed * 0x100000001B3ull + s;
        const char *word = keys_words[splitmix64(&rng) % (sizeof keys_words / sizeof keys_words[0])];
        const unsigned number = 1000000u + (unsigned)(splitmix64(&rng) % 9000000u);
        const double depth = (double)(splitmix64(&rng) >> 11) * 0x1.0p-53;
        char needle[128], tail[512], digits[16];
        snprintf(needle, sizeof needle, "The special magic number for %s is %u.\n", word, number);
        snprintf(digits, sizeof digits, "%u", number);
        snprintf(tail, sizeof tail,
                 "\nWhat is the special magic number for %s mentioned in the provided text?"
                 "%s%sThe special magic number for %s mentioned in the provided text is",
                 word, tmpl.user_close, tmpl.assistant_open, word);
        /* Token cost of everything but the haystack, then the haystack fills the rest. */
        prompt.len = 0;
        if (!put(&prompt, head_text, strlen(head_text)) || !put(&prompt, needle, strlen(needle)) ||
            !put(&prompt, tail, strlen(tail)))
            goto oom;
        size_t fixed = 0;
        free(ids);
        ids = NULL;
        if ((st = encode(tok, prompt.p, prompt.len, &ids, &fixed)) < 0) {
            rc = cli_fail("needle", "encode", st);
            goto done;
        }
        if (fixed + 16 > o->context) {
            fprintf(stderr, "fathom needle: --context %u is too small for the question\n", o->context);
            rc = 2;
            goto done;
        }
        free(hay);
        hay = NULL;
        if ((st = make_haystack(tok, files, n_files, s % n_files, o->context - fixed - 8, &hay)) < 0) {
            rc = cli_fail("needle", "haystack", st);
            goto done;
        }
        /* The needle goes at the line break nearest below depth * length. */
        size_t hay_len = strlen(hay), at = (size_t)(depth * (double)hay_len);
        while (at > 0 && hay[at - 1] != '\n') at--;
        prompt.len = 0;
        if (!put(&prompt, head_text, strlen(head_text)) || !put(&prompt, hay, at) ||
            !put(&prompt, needle, strlen(needle)) || !put(&prompt, hay + at, hay_len - at) ||
            !put(&prompt, tail, strlen(tail)))
            goto oom;
        free(ids);
        ids = NULL;
        size_t n = 0;
        if ((st = encode(tok, prompt.p, prompt.len, &ids, &n)) < 0) {
            rc = cli_fail("needle", "encode", st);
            goto done;
        }
        if (n + o->tokens > fathom_ctx_capacity(ctx)) {
            fprintf(stderr, "fathom needle: sample %u has %zu tokens, more than the context\n", s, n);
            goto done;
        }
        double t0 = cli_now();
        if (!o->quiet)
            fprintf(stderr, "[%u/%u] %zu tokens, needle '%s' %s at depth %.2f, prefill...", s + 1,
                    o->samples, n, word, digits, depth);
        if ((st = fathom_ctx_reset(ctx)) < 0 || (st = fathom_ctx_set_attention(ctx, NULL, 1, NULL)) < 0 ||
            (st = fathom_ctx_prefill(ctx, ids, n - 1, NULL)) < 0) {
            rc = cli_fail("needle", "prefill", st);
            goto done;
        }
        if (!o->quiet) fprintf(stderr, " %.1f s\n", cli_now() - t0);
        if (o->json) {
            printf("%s{\"word\": \"%s\", \"number\": %u, \"depth\": %.4f, \"n_tokens\": %zu, \"answers\": {",
                   s ? ", " : "", word, number, depth, n);
        }
        for (uint32_t r = 0; r < n_rows; r++) {
            row *w = &rows[r];
            const uint32_t k = w->method.kind == FATHOM_METHOD_DENSE ? 1 : cli_budget_k(w->budget, n);
            const fathom_source *cal = (w->method.kind == FATHOM_METHOD_FATHOM_KLT ||
                                        w->method.kind == FATHOM_METHOD_DS ||
                                        w->method.kind == FATHOM_METHOD_LOKI)
                                           ? calib
                                           : NULL;
            uint32_t produced = 0;
            if ((st = cli_continue(ctx, n - 1, ids[n - 1], &w->method, k, cal, o->tokens, stop_a,
                                   stop_b, logits, info.vocab, gen, &produced, NULL)) < 0) {
                rc = cli_fail("needle", w->method.name, st);
                goto done;
            }
            char *answer = cli_decode_text(tok, gen, produced);
            if (!answer) goto oom;
            w->hits[s] = strstr(answer, digits) != NULL;
            w->k += w->method.kind == FATHOM_METHOD_DENSE ? 0 : k;
            if (!o->quiet)
                fprintf(stderr, "  %-12s %-6g k %-5u %s |%s|\n", w->method.name, w->budget, k,
                        w->hits[s] ? "hit " : "miss", answer);
            if (o->json) {
                printf("%s\"%s@%g\": ", r ? ", " : "", w->method.name, w->budget);
                cli_print_json_string(stdout, answer);
            }
            free(answer);
        }
        if (o->json) printf("}}");
    }

    if (o->json) printf("], \"results\": [");
    else printf("needle retrieval: %u samples of %u tokens (score: mean +- standard error)\n",
                o->samples, o->context);
    if (!o->json) printf("%-8s %-12s %7s %15s\n", "budget", "method", "k", "score");
    for (uint32_t r = 0; r < n_rows; r++) {
        const row *w = &rows[r];
        double sum = 0.0, ss = 0.0;
        for (uint32_t s = 0; s < o->samples; s++) sum += w->hits[s];
        const double mean = sum / o->samples;
        for (uint32_t s = 0; s < o->samples; s++) ss += (w->hits[s] - mean) * (w->hits[s] - mean);
        const double se = o->samples > 1 ? sqrt(ss / (o->samples - 1) / o->samples) : 0.0;
        if (o->json) {
            printf("%s\n  {\"method\": \"%s\", \"budget\": %g, \"k_mean\": %.1f, \"score\": %.4f, "
                   "\"stderr\": %.4f}",
                   r ? "," : "", w->method.name, w->budget, w->k / o->samples, mean, se);
        } else {
            printf("%-8g %-12s %7.1f   %5.3f +- %5.3f\n", w->budget, w->method.name,
                   w->k / o->samples, mean, se);
        }
    }
    if (o->json) printf("\n]}\n");
    rc = 0;
    goto done;
oom:
    fprintf(stderr, "fathom needle: out of memory\n");
    rc = 1;
done:
    free(hay);
    free(prompt.p);
    free(ids);
    if (rows)
        for (uint32_t r = 0; r < n_rows; r++) free(rows[r].hits);
    free(rows);
    free(logits);
    free(gen);
    fathom_ctx_free(ctx);
    cli_session_close(&ses);
    return rc;
}

int cmd_needle(int argc, char **argv) {
    needle_options o = {0};
    o.methods = DEFAULT_METHODS;
    o.budgets = "0.02,0.005";
    o.context = 1024;
    o.samples = 10;
    o.tokens = 12;
    o.seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--haystack")) {
            o.haystack = argv + i + 1;
            o.n_haystack = 0;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
                i++;
                o.n_haystack++;
            }
            if (o.n_haystack == 0) {
                fprintf(stderr, "fathom needle: --haystack needs a value\n");
                return 2;
            }
            continue;
        } else if (!strcmp(a, "--json")) {
            o.json = true;
            continue;
        } else if (!strcmp(a, "--quiet")) {
            o.quiet = true;
            continue;
        }
        static const char *const valued[] = {"--model", "--methods", "--budgets", "--calib",
                                             "--context", "--samples", "--seed", "--tokens",
                                             "--threads"};
        bool known = false;
        for (size_t j = 0; j < sizeof valued / sizeof valued[0]; j++) known |= !strcmp(a, valued[j]);
        if (!known) {
            fprintf(stderr, "fathom needle: unknown option %s\n\n", a);
            usage(stderr);
            return 2;
        }
        if (!v) {
            fprintf(stderr, "fathom needle: %s needs a value\n", a);
            return 2;
        }
        i++;
        uint32_t u = 0;
        if (!strcmp(a, "--model")) o.model = v;
        else if (!strcmp(a, "--methods")) o.methods = v;
        else if (!strcmp(a, "--budgets")) o.budgets = v;
        else if (!strcmp(a, "--calib")) o.calib = v;
        else if (!cli_parse_u32(v, &u)) {
            fprintf(stderr, "fathom needle: %s needs a non-negative integer, not '%s'\n", a, v);
            return 2;
        } else if (!strcmp(a, "--context")) o.context = u;
        else if (!strcmp(a, "--samples")) o.samples = u;
        else if (!strcmp(a, "--seed")) o.seed = u;
        else if (!strcmp(a, "--tokens")) o.tokens = u;
        else o.threads = u;
    }
    if (o.n_haystack == 0) {
        fprintf(stderr, "fathom needle: --haystack is required\n");
        return 2;
    }
    if (o.samples == 0 || o.tokens == 0 || o.context < 64 || o.context > (1u << 24)) {
        fprintf(stderr, "fathom needle: --samples and --tokens must be >= 1, --context in [64, 2^24]\n");
        return 2;
    }
    return run(&o);
}

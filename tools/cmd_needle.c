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
            "  --model FILE      " CLI_MODEL_HELP "\n"
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
            "  --progress        progress on stderr (default: only on a terminal, not with --json)\n"
            "  --quiet           no progress\n"
            "\n"
            "Exit status: 0 success, 1 failure, 2 usage error.\n");
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
            cli_error("cannot read %s", files[(first + f) % n_files]);
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
    int st = raw.p ? cli_encode(tok, raw.p, raw.len, false, &ids, &n) : FATHOM_OK;
    free(raw.p);
    if (st < 0) return st;
    if (n > budget) n = (size_t)budget;
    char *text = n ? cli_decode_text(tok, ids, (uint32_t)n) : strdup("");
    free(ids);
    if (!text) return FATHOM_ERR_NOMEM;
    char *nl = strrchr(text, '\n');
    if (nl) nl[1] = '\0';
    *out = text;
    return FATHOM_OK;
}

typedef struct needle_options {
    const char *model, *methods, *budgets, *calib;
    char **haystack;
    int n_haystack;
    uint32_t context, samples, tokens, threads;
    uint64_t seed;
    bool json;
    cli_progress_mode progress;
} needle_options;

typedef struct row {
    fathom_method method;
    double budget;
    double *hits; /* [samples] */
    double k;     /* sum */
} row;

/* Everything one run holds. */
typedef struct needle_run {
    const needle_options *o;
    bool progress;
    cli_session ses;
    fathom_ctx *ctx;
    row *rows; /* dense, then every method at every budget */
    uint32_t n_rows;
    float *logits;
    int32_t *gen, stop_a, stop_b;
    uint64_t tokens_sum; /* prompt tokens over the samples */
    fathom_chat_template tmpl; /* the model's (ChatML, Gemma): by its turn tokens */
    char head_text[512];       /* tmpl.user_open + head_body */
} needle_run;

static int make_rows(needle_run *r) {
    const cli_session *s = &r->ses;
    fathom_method dense_m;
    fathom_method_parse("dense", &dense_m);
    r->rows = calloc(1 + (size_t)s->n_budgets * s->n_methods, sizeof *r->rows);
    if (!r->rows) return cli_out_of_memory();
    r->rows[r->n_rows++].method = dense_m;
    for (uint32_t b = 0; b < s->n_budgets; b++)
        for (uint32_t m = 0; m < s->n_methods; m++) {
            if (s->methods[m].kind == FATHOM_METHOD_DENSE) continue;
            r->rows[r->n_rows].method = s->methods[m];
            r->rows[r->n_rows++].budget = s->budgets[b];
        }
    for (uint32_t w = 0; w < r->n_rows; w++)
        if (!(r->rows[w].hits = calloc(r->o->samples, sizeof(double)))) return cli_out_of_memory();
    r->logits = malloc((size_t)s->info.vocab * sizeof *r->logits);
    r->gen = malloc((size_t)r->o->tokens * sizeof *r->gen);
    return r->logits && r->gen ? CLI_OK : cli_out_of_memory();
}

/* Sample s's prompt: the question's parts around a haystack that fills the
 * rest of --context, the needle on its own line at `depth`. */
static int make_prompt(needle_run *r, uint32_t s, const char *needle, const char *tail, double depth,
                       text_buf *prompt, int32_t **ids, size_t *n) {
    const fathom_tokenizer *tok = r->ses.tok;
    int st;
    /* Token cost of everything but the haystack, then the haystack fills the rest. */
    prompt->len = 0;
    if (!put(prompt, r->head_text, strlen(r->head_text)) || !put(prompt, needle, strlen(needle)) ||
        !put(prompt, tail, strlen(tail)))
        return cli_out_of_memory();
    size_t fixed = 0;
    if ((st = cli_encode(tok, prompt->p, prompt->len, true, ids, &fixed)) < 0) return cli_fail("encode", st);
    free(*ids);
    *ids = NULL;
    if (fixed + 16 > r->o->context)
        return cli_usage_error("--context %u is too small for the question", r->o->context);
    char *hay = NULL;
    if ((st = make_haystack(tok, r->ses.files, r->ses.n_files, s % r->ses.n_files, r->o->context - fixed - 8,
                            &hay)) < 0)
        return cli_fail("haystack", st);
    /* The needle goes at the line break nearest below depth * length. */
    size_t hay_len = strlen(hay), at = (size_t)(depth * (double)hay_len);
    if (strspn(hay, " \t\r\n") == hay_len) {
        free(hay);
        cli_error("the haystack files hold no text");
        return CLI_FAILURE;
    }
    while (at > 0 && hay[at - 1] != '\n') at--;
    prompt->len = 0;
    bool ok = put(prompt, r->head_text, strlen(r->head_text)) && put(prompt, hay, at) &&
              put(prompt, needle, strlen(needle)) && put(prompt, hay + at, hay_len - at) &&
              put(prompt, tail, strlen(tail));
    free(hay);
    if (!ok) return cli_out_of_memory();
    if ((st = cli_encode(tok, prompt->p, prompt->len, true, ids, n)) < 0) return cli_fail("encode", st);
    if (s == 0 && *n < r->o->context * 9 / 10)
        cli_warn("the prompt has %zu tokens, fewer than --context %u: the haystack files are too short",
                 *n, r->o->context);
    if (*n + r->o->tokens > fathom_ctx_capacity(r->ctx)) {
        cli_error("sample %u has %zu tokens, more than the context", s, *n);
        return CLI_FAILURE;
    }
    return CLI_OK;
}

/* One sample: its prompt, one dense prefill, every row's answer. */
static int run_sample(needle_run *r, uint32_t s, text_buf *prompt) {
    const needle_options *o = r->o;
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
             word, r->tmpl.user_close, r->tmpl.assistant_open, word);
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = make_prompt(r, s, needle, tail, depth, prompt, &ids, &n);
    if (rc != CLI_OK) {
        free(ids);
        return rc;
    }
    r->tokens_sum += n;
    if (r->progress)
        fprintf(stderr, "[%u/%u] %zu tokens, needle '%s' %s at depth %.2f\n", s + 1, o->samples, n, word,
                digits, depth);
    int st;
    if ((st = fathom_ctx_reset(r->ctx)) < 0 || (st = fathom_ctx_set_attention(r->ctx, NULL, 1, NULL)) < 0 ||
        (st = cli_prefill(r->ctx, ids, n - 1, NULL, r->progress)) < 0) {
        free(ids);
        return cli_fail("prefill", st);
    }
    if (o->json)
        printf("%s{\"word\": \"%s\", \"number\": %u, \"depth\": %.4f, \"n_tokens\": %zu, \"answers\": {",
               s ? ", " : "", word, number, depth, n);
    for (uint32_t i = 0; i < r->n_rows && rc == CLI_OK; i++) {
        row *w = &r->rows[i];
        const bool dense = w->method.kind == FATHOM_METHOD_DENSE;
        const uint32_t k = dense ? 1 : cli_budget_k(w->budget, n);
        const fathom_source *cal = cli_method_uses_calib(&w->method) ? r->ses.calib : NULL;
        uint32_t produced = 0;
        if ((st = cli_continue(r->ctx, n - 1, ids[n - 1], &w->method, k, cal, o->tokens, r->stop_a, r->stop_b,
                               r->logits, r->ses.info.vocab, r->gen, &produced, NULL)) < 0) {
            rc = cli_fail(w->method.name, st);
            break;
        }
        char *answer = cli_decode_text(r->ses.tok, r->gen, produced);
        if (!answer) {
            rc = cli_out_of_memory();
            break;
        }
        w->hits[s] = strstr(answer, digits) != NULL;
        w->k += dense ? 0 : k;
        if (r->progress) {
            fprintf(stderr, "  %-12s %-6g k %-5u %s |", w->method.name, w->budget, k, w->hits[s] ? "hit " : "miss");
            cli_print_safe(stderr, answer);
            fprintf(stderr, "|\n");
        }
        if (o->json) {
            char key[64];
            snprintf(key, sizeof key, "%s@%g", w->method.name, w->budget);
            printf("%s", i ? ", " : "");
            cli_print_json_string(stdout, key);
            printf(": ");
            cli_print_json_string(stdout, answer);
        }
        free(answer);
    }
    if (o->json && rc == CLI_OK) printf("}}");
    free(ids);
    return rc;
}

static void print_results(const needle_run *r) {
    const needle_options *o = r->o;
    if (o->json) printf("], \"results\": [");
    else
        printf("needle retrieval: %u samples of %.0f tokens on average (score: mean +- standard error)\n"
               "%-8s %-12s %7s %15s\n",
               o->samples, (double)r->tokens_sum / o->samples, "budget", "method", "k", "score");
    for (uint32_t i = 0; i < r->n_rows; i++) {
        const row *w = &r->rows[i];
        double sum = 0.0, ss = 0.0;
        for (uint32_t s = 0; s < o->samples; s++) sum += w->hits[s];
        const double mean = sum / o->samples;
        for (uint32_t s = 0; s < o->samples; s++) ss += (w->hits[s] - mean) * (w->hits[s] - mean);
        const double se = o->samples > 1 ? sqrt(ss / (o->samples - 1) / o->samples) : 0.0;
        if (o->json) {
            printf("%s\n  {\"method\": ", i ? "," : "");
            cli_print_json_string(stdout, w->method.name);
            printf(", \"budget\": %g, \"k_mean\": %.1f, \"score\": %.4f, \"stderr\": %.4f}", w->budget,
                   w->k / o->samples, mean, se);
        } else {
            printf("%-8g %-12s %7.1f   %5.3f +- %5.3f\n", w->budget, w->method.name, w->k / o->samples, mean, se);
        }
    }
    if (o->json) printf("\n]}\n");
    else printf("score: share of samples whose answer contains the needle's number; higher is better.\n");
}

static int run(const needle_options *o) {
    needle_run r = {.o = o, .progress = cli_progress_wanted(o->progress, o->json)};
    text_buf prompt = {0};
    int rc = cli_session_open(&r.ses, o->methods, o->budgets, o->model, o->calib, o->haystack, o->n_haystack);
    if (rc != CLI_OK) return rc;
    cli_check_window(&r.ses.info, (uint64_t)o->context + o->tokens);
    int st = fathom_ctx_create(&r.ctx, r.ses.model, o->context + o->tokens + 64, o->threads);
    if (st < 0) rc = cli_fail("context", st);
    else if ((st = fathom_chat_template_for(r.ses.tok, &r.tmpl)) < 0) rc = cli_fail("chat template", st);
    else rc = make_rows(&r);
    snprintf(r.head_text, sizeof r.head_text, "%s%s", r.tmpl.user_open, head_body);
    if (rc == CLI_OK) {
        cli_stop_tokens(r.ses.tok, &r.stop_a, &r.stop_b);
        if (o->json) {
            printf("{\"model\": ");
            cli_print_json_string(stdout, r.ses.info.name);
            printf(", \"context\": %u, \"samples\": [", o->context);
        }
        for (uint32_t s = 0; s < o->samples && rc == CLI_OK; s++) rc = run_sample(&r, s, &prompt);
        if (rc == CLI_OK) print_results(&r);
    }
    free(prompt.p);
    if (r.rows)
        for (uint32_t i = 0; i < r.n_rows; i++) free(r.rows[i].hits);
    free(r.rows);
    free(r.logits);
    free(r.gen);
    fathom_ctx_free(r.ctx);
    cli_session_close(&r.ses);
    return rc;
}

enum { OPT_MODEL = 256, OPT_HAYSTACK, OPT_CONTEXT, OPT_SAMPLES, OPT_SEED, OPT_TOKENS, OPT_METHODS,
       OPT_BUDGETS, OPT_CALIB, OPT_THREADS, OPT_JSON, OPT_QUIET, OPT_PROGRESS };
static const struct option long_options[] = {
    {"help", no_argument, NULL, 'h'},
    {"model", required_argument, NULL, OPT_MODEL},
    {"haystack", required_argument, NULL, OPT_HAYSTACK},
    {"context", required_argument, NULL, OPT_CONTEXT},
    {"samples", required_argument, NULL, OPT_SAMPLES},
    {"seed", required_argument, NULL, OPT_SEED},
    {"tokens", required_argument, NULL, OPT_TOKENS},
    {"methods", required_argument, NULL, OPT_METHODS},
    {"budgets", required_argument, NULL, OPT_BUDGETS},
    {"calib", required_argument, NULL, OPT_CALIB},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"json", no_argument, NULL, OPT_JSON},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"progress", no_argument, NULL, OPT_PROGRESS},
    {NULL, 0, NULL, 0},
};

int cmd_needle(int argc, char **argv) {
    needle_options o = {0};
    o.methods = DEFAULT_METHODS;
    o.budgets = "0.02,0.005";
    o.context = 1024;
    o.samples = 10;
    o.tokens = 12;
    o.seed = 1;
    const char *first_hay = NULL;
    int c;
    while ((c = cli_getopt(argc, argv, "h", long_options)) != -1) {
        uint32_t *num = NULL;
        switch (c) {
        case 'h': usage(stdout); return CLI_OK;
        case '?': return CLI_USAGE;
        case OPT_MODEL: o.model = optarg; break;
        case OPT_HAYSTACK: first_hay = optarg; break;
        case OPT_METHODS: o.methods = optarg; break;
        case OPT_BUDGETS: o.budgets = optarg; break;
        case OPT_CALIB: o.calib = optarg; break;
        case OPT_CONTEXT: num = &o.context; break;
        case OPT_SAMPLES: num = &o.samples; break;
        case OPT_TOKENS: num = &o.tokens; break;
        case OPT_THREADS: num = &o.threads; break;
        case OPT_SEED:
            if (!cli_parse_u64(optarg, &o.seed)) return cli_bad_value("a non-negative integer");
            break;
        case OPT_JSON: o.json = true; break;
        case OPT_QUIET: o.progress = CLI_PROGRESS_OFF; break;
        case OPT_PROGRESS: o.progress = CLI_PROGRESS_ON; break;
        }
        if (num && !cli_parse_u32(optarg, num)) return cli_bad_value("a non-negative integer");
    }
    if (!first_hay) return cli_usage_error("--haystack is required");
    if (o.samples == 0 || o.tokens == 0 || o.context < 64 || o.context > (1u << 24))
        return cli_usage_error("--samples and --tokens must be >= 1, --context in [64, 2^24]");
    /* --haystack a b c: getopt_long leaves b and c after the options */
    char **hay = malloc((size_t)(argc - optind + 1) * sizeof *hay);
    if (!hay) return cli_out_of_memory();
    hay[0] = (char *)first_hay;
    for (int i = optind; i < argc; i++) hay[1 + i - optind] = argv[i];
    o.haystack = hay;
    o.n_haystack = 1 + argc - optind;
    int rc = run(&o);
    free(hay);
    return rc;
}

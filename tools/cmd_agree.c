/* fathom agree — step agreement of sparse decoding with dense and with exact
 * top-k (oracle) decoding on long prompts (paper §5.6). */
#include "cli.h"
#include "fathom.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define DEFAULT_METHODS "fathom:48,sparq:16,sparq:32,thumb,landmark,full4,oracle"

static void usage(FILE *f) {
    fprintf(f,
            "usage: fathom agree --prompts DIR|FILE... [options]\n"
            "\n"
            "Step agreement (paper §5.6). For each prompt of n tokens: one dense prefill of\n"
            "its first n-1 tokens; then for dense, the exact top-k oracle and every method,\n"
            "rewind to that prefill, run the last prompt token and N-1 greedy tokens as\n"
            "decode steps with that attention, and compare the N generated tokens with\n"
            "dense and oracle decoding at the same k: token level (fraction of positions\n"
            "with equal tokens) and word level (whitespace-separated words of the decoded\n"
            "texts equal position-wise, over the larger word count). k = max(37,\n"
            "ceil(budget * n)) per prompt. Mean and standard error over prompts.\n"
            "\n"
            "  --model FILE      " CLI_MODEL_HELP "\n"
            "  --prompts P...    prompt files, or directories of them (sorted by name)\n"
            "  --tokens N        decode steps per continuation (default 32)\n"
            "  --methods LIST    default " DEFAULT_METHODS "\n"
            "                    (dense and oracle rows are always reported)\n"
            "  --budgets LIST    selection budgets as fractions of n (default 0.02,0.005)\n"
            "  --calib FILE      a capture of this model from other text, for ds, loki,\n"
            "                    fathom-klt\n"
            "  --max-prompt N    keep only the first N tokens of each prompt\n"
            "  --time-limit S    start no prompt that would end more than S seconds after the\n"
            "                    first began (by the mean time per prompt so far); the results\n"
            "                    cover the prompts completed (0: no limit, the default)\n"
            "  --threads N       threads (default: one per core)\n"
            "  --json            one JSON object on stdout instead of the table\n"
            "  --progress        progress on stderr (default: only on a terminal, not with --json)\n"
            "  --quiet           no progress\n"
            "\n"
            "Exit status: 0 success, 1 failure, 2 usage error.\n");
}

/* ---- agreement measures ---- */

static double token_agreement(const int32_t *a, uint32_t na, const int32_t *b, uint32_t nb) {
    uint32_t most = na > nb ? na : nb, same = 0;
    if (most == 0) return 1.0;
    for (uint32_t i = 0; i < na && i < nb; i++) same += a[i] == b[i];
    return (double)same / most;
}

/* Split text in place at whitespace into words[cap]; returns the count. */
static uint32_t split_words(char *text, char **words, uint32_t cap) {
    uint32_t n = 0;
    for (char *p = strtok(text, " \t\n\r\f\v"); p && n < cap; p = strtok(NULL, " \t\n\r\f\v"))
        words[n++] = p;
    return n;
}

static double word_agreement(const char *a, const char *b) {
    char *ca = strdup(a), *cb = strdup(b);
    size_t la = strlen(a) + 1, lb = strlen(b) + 1;
    char **wa = malloc(la * sizeof *wa), **wb = malloc(lb * sizeof *wb);
    double r = 0.0;
    if (ca && cb && wa && wb) {
        uint32_t na = split_words(ca, wa, (uint32_t)la), nb = split_words(cb, wb, (uint32_t)lb);
        uint32_t most = na > nb ? na : nb, same = 0;
        for (uint32_t i = 0; i < na && i < nb; i++) same += strcmp(wa[i], wb[i]) == 0;
        r = most ? (double)same / most : 1.0;
    }
    free(ca);
    free(cb);
    free(wa);
    free(wb);
    return r;
}

/* ---- agree ---- */

enum { VS_DENSE_TOK, VS_DENSE_WORD, VS_ORACLE_TOK, VS_ORACLE_WORD, N_MEASURES };
static const char *const measure_names[N_MEASURES] = {"token_vs_dense", "word_vs_dense",
                                                      "token_vs_oracle", "word_vs_oracle"};

typedef struct row {
    fathom_method method;
    double budget;
    double *values[N_MEASURES]; /* [prompts] */
    double bits, selection, k;  /* sums over prompts */
    double decode_s;            /* seconds of its decode steps, all prompts */
    uint64_t steps;             /* its decode steps, all prompts */
} row;

typedef struct agree_options {
    const char *model, *methods, *budgets, *calib;
    char **prompts;
    int n_prompts;
    uint32_t tokens, max_prompt, threads, time_limit;
    bool json;
    cli_progress_mode progress;
} agree_options;

static void mean_stderr(const double *x, size_t n, double *mean, double *se) {
    double s = 0.0, ss = 0.0;
    for (size_t i = 0; i < n; i++) s += x[i];
    *mean = n ? s / (double)n : 0.0;
    for (size_t i = 0; i < n; i++) ss += (x[i] - *mean) * (x[i] - *mean);
    *se = n > 1 ? sqrt(ss / (double)(n - 1) / (double)n) : 0.0;
}

/* Everything one run holds. */
typedef struct agree_run {
    const agree_options *o;
    bool progress;
    cli_session ses;
    fathom_ctx *ctx;
    int32_t **ids;  /* [files] the prompts' token ids */
    size_t *n_ids;  /* [files] */
    row *rows;      /* per budget: oracle, dense, then the methods */
    uint32_t n_rows;
    float *logits;                   /* [vocab] */
    int32_t *dense, *oracle, *gen;   /* [tokens] this prompt's continuations */
    uint32_t n_dense, n_oracle;
    char *dense_text, *oracle_text;
    size_t n_done; /* prompts completed: the results are over these */
} agree_run;

/* Tokenise every prompt file; size the context for the longest. */
static int load_prompts(agree_run *r) {
    const cli_session *s = &r->ses;
    r->ids = calloc(s->n_files, sizeof *r->ids);
    r->n_ids = calloc(s->n_files, sizeof *r->n_ids);
    if (!r->ids || !r->n_ids) return cli_out_of_memory();
    size_t longest = 0, shortest = SIZE_MAX;
    for (size_t p = 0; p < s->n_files; p++) {
        char *text = NULL;
        size_t len = 0;
        if (cli_read_file(s->files[p], &text, &len) < 0) {
            cli_error("cannot read %s", s->files[p]);
            return CLI_FAILURE;
        }
        int st = cli_encode(s->tok, text, len, false, &r->ids[p], &r->n_ids[p]);
        free(text);
        if (st < 0) return cli_fail(s->files[p], st);
        if (r->o->max_prompt && r->n_ids[p] > r->o->max_prompt) r->n_ids[p] = r->o->max_prompt;
        if (r->n_ids[p] < 2) {
            cli_error("%s has fewer than 2 tokens", s->files[p]);
            return CLI_FAILURE;
        }
        if (r->n_ids[p] > longest) longest = r->n_ids[p];
        if (r->n_ids[p] < shortest) shortest = r->n_ids[p];
    }
    if (longest + r->o->tokens > UINT32_MAX) {
        cli_error("prompts too long");
        return CLI_FAILURE;
    }
    cli_check_window(&s->info, longest + r->o->tokens);
    for (uint32_t b = 0; b < s->n_budgets; b++)
        cli_check_k(cli_budget_k(s->budgets[b], shortest), shortest, "k of the shortest prompt");
    int st = fathom_ctx_create(&r->ctx, s->model, (uint32_t)(longest + r->o->tokens), r->o->threads);
    return st < 0 ? cli_fail("context", st) : CLI_OK;
}

/* Rows: per budget, oracle (first: the rows after it compare with it),
 * dense, then the methods without repeats of those two; and scratch. */
static int make_rows(agree_run *r) {
    const cli_session *s = &r->ses;
    fathom_method dense_m, oracle_m;
    fathom_method_parse("dense", &dense_m);
    fathom_method_parse("oracle", &oracle_m);
    r->rows = calloc((size_t)s->n_budgets * (s->n_methods + 2), sizeof *r->rows);
    if (!r->rows) return cli_out_of_memory();
    for (uint32_t b = 0; b < s->n_budgets; b++) {
        r->rows[r->n_rows++] = (row){.method = oracle_m, .budget = s->budgets[b]};
        r->rows[r->n_rows++] = (row){.method = dense_m, .budget = s->budgets[b]};
        for (uint32_t m = 0; m < s->n_methods; m++) {
            const fathom_method_kind kind = s->methods[m].kind;
            if (kind == FATHOM_METHOD_DENSE || kind == FATHOM_METHOD_ORACLE) continue;
            r->rows[r->n_rows++] = (row){.method = s->methods[m], .budget = s->budgets[b]};
        }
    }
    for (uint32_t w = 0; w < r->n_rows; w++)
        for (int v = 0; v < N_MEASURES; v++)
            if (!(r->rows[w].values[v] = calloc(s->n_files, sizeof(double)))) return cli_out_of_memory();
    const size_t n = r->o->tokens;
    r->logits = malloc((size_t)s->info.vocab * sizeof *r->logits);
    r->dense = malloc(n * sizeof *r->dense);
    r->oracle = malloc(n * sizeof *r->oracle);
    r->gen = malloc(n * sizeof *r->gen);
    return r->logits && r->dense && r->oracle && r->gen ? CLI_OK : cli_out_of_memory();
}

/* One row's continuation of prompt p at selection size k, compared with
 * this prompt's dense and oracle continuations. */
static int run_row(agree_run *r, size_t p, row *w, uint32_t k) {
    const cli_session *s = &r->ses;
    const int32_t no_stop = -1; /* fixed-length continuations: every method decodes all N steps */
    const uint64_t prefix = r->n_ids[p] - 1;
    const bool is_dense = w->method.kind == FATHOM_METHOD_DENSE;
    const bool is_oracle = w->method.kind == FATHOM_METHOD_ORACLE;
    fathom_ctx_stats stats = {0};
    uint32_t n_gen = 0;
    const double t0 = cli_now();
    if (is_dense) {
        memcpy(r->gen, r->dense, r->n_dense * sizeof *r->gen);
        n_gen = r->n_dense;
    } else {
        const fathom_source *cal = cli_method_uses_calib(&w->method) ? s->calib : NULL;
        int st = cli_continue(r->ctx, prefix, r->ids[p][prefix], &w->method, k, cal, r->o->tokens, no_stop,
                              no_stop, r->logits, s->info.vocab, r->gen, &n_gen, &stats);
        if (st < 0) return cli_fail(w->method.name, st);
    }
    char *text = cli_decode_text(s->tok, r->gen, n_gen);
    if (!text) return cli_out_of_memory();
    if (is_oracle) { /* the oracle row comes before the methods of its budget */
        memcpy(r->oracle, r->gen, n_gen * sizeof *r->gen);
        r->n_oracle = n_gen;
        free(r->oracle_text);
        if (!(r->oracle_text = strdup(text))) {
            free(text);
            return cli_out_of_memory();
        }
    }
    w->values[VS_DENSE_TOK][p] = token_agreement(r->gen, n_gen, r->dense, r->n_dense);
    w->values[VS_DENSE_WORD][p] = word_agreement(text, r->dense_text);
    w->values[VS_ORACLE_TOK][p] = token_agreement(r->gen, n_gen, r->oracle, r->n_oracle);
    w->values[VS_ORACLE_WORD][p] = word_agreement(text, r->oracle_text);
    free(text);
    w->k += is_dense ? 0 : k;
    if (!is_dense) {
        w->decode_s += cli_now() - t0;
        w->steps += stats.decode_steps;
    }
    if (stats.sparse_steps) {
        /* per (layer, KV head) that scans: Gemma 3's sliding-window layers attend exactly */
        uint32_t sparse_layers = 0;
        for (uint32_t l = 0; l < s->info.layers; l++) sparse_layers += fathom_model_layer_sliding(s->model, l) == 0;
        const double layers_heads = (double)sparse_layers * s->info.kv_heads;
        const double ctx_mean = (double)prefix + 0.5 * (double)(stats.sparse_steps + 1);
        w->bits += 8.0 * stats.scan_bytes / (double)stats.sparse_steps / layers_heads / ctx_mean;
        w->selection += stats.selected_rows / (stats.visible_rows > 0 ? stats.visible_rows : 1);
    }
    if (r->progress)
        fprintf(stderr, "  %-12s k %-5u tok %.2f/%.2f word %.2f/%.2f (vs dense/oracle) %.1f s\n",
                w->method.name, k, w->values[VS_DENSE_TOK][p], w->values[VS_ORACLE_TOK][p],
                w->values[VS_DENSE_WORD][p], w->values[VS_ORACLE_WORD][p], cli_now() - t0);
    return CLI_OK;
}

/* Prompt p: one dense prefill of its first n-1 tokens, the dense
 * continuation, then every row from the same prefill. */
static int run_prompt(agree_run *r, size_t p) {
    const cli_session *s = &r->ses;
    const uint64_t n = r->n_ids[p], prefix = n - 1;
    int st;
    if (r->progress) {
        fprintf(stderr, "[%zu/%zu] ", p + 1, s->n_files);
        cli_print_safe(stderr, s->files[p]);
        fprintf(stderr, ": %llu tokens\n", (unsigned long long)n);
    }
    const double tp = cli_now();
    if ((st = fathom_ctx_reset(r->ctx)) < 0 || (st = fathom_ctx_set_attention(r->ctx, NULL, 1, NULL)) < 0 ||
        (st = cli_prefill(r->ctx, r->ids[p], prefix, NULL, r->progress)) < 0)
        return cli_fail("prefill", st);
    const double prefill_s = cli_now() - tp;
    fathom_method dense_m;
    fathom_method_parse("dense", &dense_m);
    const double t0 = cli_now();
    if ((st = cli_continue(r->ctx, prefix, r->ids[p][prefix], &dense_m, 1, NULL, r->o->tokens, -1, -1,
                           r->logits, s->info.vocab, r->dense, &r->n_dense, NULL)) < 0)
        return cli_fail("dense decoding", st);
    const double dense_s = cli_now() - t0;
    if (r->progress) fprintf(stderr, "  dense decoding: %u steps in %.1f s\n", r->n_dense, dense_s);
    free(r->dense_text);
    if (!(r->dense_text = cli_decode_text(s->tok, r->dense, r->n_dense))) return cli_out_of_memory();
    if (r->o->json) {
        printf("%s{\"file\": ", p ? ", " : "");
        cli_print_json_string(stdout, s->files[p]);
        printf(", \"n_tokens\": %llu, \"prefill_s\": %.3f, \"dense_decode_s\": %.3f, \"dense_steps\": %u, "
               "\"dense_text\": ",
               (unsigned long long)n, prefill_s, dense_s, r->n_dense);
        cli_print_json_string(stdout, r->dense_text);
        printf("}");
    }
    for (uint32_t b = 0; b < s->n_budgets; b++) {
        const uint32_t k = cli_budget_k(s->budgets[b], n);
        for (uint32_t w = 0; w < r->n_rows; w++) {
            if (r->rows[w].budget != s->budgets[b]) continue;
            int rc = run_row(r, p, &r->rows[w], k);
            if (rc != CLI_OK) return rc;
        }
    }
    return CLI_OK;
}

static void print_results(const agree_run *r) {
    const size_t n_files = r->n_done;
    const double np = (double)n_files;
    if (r->o->json) {
        printf("], \"results\": [");
        for (uint32_t i = 0; i < r->n_rows; i++) {
            const row *w = &r->rows[i];
            printf("%s\n  {\"method\": ", i ? "," : "");
            cli_print_json_string(stdout, w->method.name);
            printf(", \"budget\": %g, \"k_mean\": %.1f, \"bits_per_token\": %.2f, \"selection_ratio\": %.5f, "
                   "\"decode_s\": %.3f, \"decode_steps\": %llu",
                   w->budget, w->k / np, w->bits / np, w->selection / np, w->decode_s, (unsigned long long)w->steps);
            for (int v = 0; v < N_MEASURES; v++) {
                double mean, se;
                mean_stderr(w->values[v], n_files, &mean, &se);
                printf(", \"%s\": {\"mean\": %.4f, \"stderr\": %.4f, \"per_prompt\": [", measure_names[v], mean,
                       se);
                for (size_t p = 0; p < n_files; p++) printf("%s%.4f", p ? ", " : "", w->values[v][p]);
                printf("]}");
            }
            printf("}");
        }
        struct rusage ru;
        printf("\n], \"peak_rss_kib\": %ld}\n", getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1L);
        return;
    }
    printf("step agreement over %zu prompts, %u decode steps each (mean +- standard error)\n", n_files,
           r->o->tokens);
    printf("%-8s %-12s %7s %7s %15s %15s %15s %15s\n", "budget", "method", "k", "bits", "token/dense",
           "word/dense", "token/oracle", "word/oracle");
    for (uint32_t i = 0; i < r->n_rows; i++) {
        const row *w = &r->rows[i];
        printf("%-8g %-12s %7.1f %7.1f", w->budget, w->method.name, w->k / np, w->bits / np);
        for (int v = 0; v < N_MEASURES; v++) {
            double mean, se;
            mean_stderr(w->values[v], n_files, &mean, &se);
            printf("   %5.3f +- %5.3f", mean, se);
        }
        printf("\n");
    }
    printf("token/word: share of the N generated tokens (whitespace-separated words) equal to\n"
           "dense's (the exact top-k oracle's at the same k), position by position; higher is\n"
           "better. bits: index bits read per cached token and KV head to choose the keys.\n");
}

static void agree_free(agree_run *r) {
    if (r->ids)
        for (size_t p = 0; p < r->ses.n_files; p++) free(r->ids[p]);
    free(r->ids);
    free(r->n_ids);
    if (r->rows)
        for (uint32_t w = 0; w < r->n_rows; w++)
            for (int v = 0; v < N_MEASURES; v++) free(r->rows[w].values[v]);
    free(r->rows);
    free(r->logits);
    free(r->dense);
    free(r->oracle);
    free(r->gen);
    free(r->dense_text);
    free(r->oracle_text);
    fathom_ctx_free(r->ctx);
    cli_session_close(&r->ses);
}

static int run(const agree_options *o) {
    agree_run r = {.o = o, .progress = cli_progress_wanted(o->progress, o->json)};
    int rc = cli_session_open(&r.ses, o->methods, o->budgets, o->model, o->calib, o->prompts, o->n_prompts);
    if (rc != CLI_OK) return rc;
    if ((rc = load_prompts(&r)) == CLI_OK && (rc = make_rows(&r)) == CLI_OK) {
        if (o->json) {
            printf("{\"model\": ");
            cli_print_json_string(stdout, r.ses.info.name);
            printf(", \"tokens\": %u, \"prompts\": [", o->tokens);
        }
        const double t0 = cli_now();
        for (size_t p = 0; p < r.ses.n_files && rc == CLI_OK; p++) {
            /* --time-limit: no prompt that would end past it, judged by the mean so far */
            const double spent = cli_now() - t0;
            if (o->time_limit && p > 0 && spent + spent / (double)p > (double)o->time_limit) {
                cli_warn("--time-limit %u s: stopping after %zu of %zu prompts", o->time_limit, p,
                         r.ses.n_files);
                break;
            }
            if ((rc = run_prompt(&r, p)) == CLI_OK) r.n_done = p + 1;
        }
        if (rc == CLI_OK) print_results(&r);
    }
    agree_free(&r);
    return rc;
}

enum { OPT_MODEL = 256, OPT_PROMPTS, OPT_TOKENS, OPT_METHODS, OPT_BUDGETS, OPT_CALIB, OPT_MAX_PROMPT, OPT_TIME_LIMIT,
       OPT_THREADS, OPT_JSON, OPT_QUIET, OPT_PROGRESS };
static const struct option long_options[] = {
    {"help", no_argument, NULL, 'h'},
    {"model", required_argument, NULL, OPT_MODEL},
    {"prompts", required_argument, NULL, OPT_PROMPTS},
    {"tokens", required_argument, NULL, OPT_TOKENS},
    {"methods", required_argument, NULL, OPT_METHODS},
    {"budgets", required_argument, NULL, OPT_BUDGETS},
    {"calib", required_argument, NULL, OPT_CALIB},
    {"max-prompt", required_argument, NULL, OPT_MAX_PROMPT},
    {"time-limit", required_argument, NULL, OPT_TIME_LIMIT},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"json", no_argument, NULL, OPT_JSON},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"progress", no_argument, NULL, OPT_PROGRESS},
    {NULL, 0, NULL, 0},
};

int cmd_agree(int argc, char **argv) {
    agree_options o = {0};
    o.methods = DEFAULT_METHODS;
    o.budgets = "0.02,0.005";
    o.tokens = 32;
    const char *first_prompt = NULL;
    int c;
    while ((c = cli_getopt(argc, argv, "h", long_options)) != -1) {
        uint32_t *num = NULL;
        switch (c) {
        case 'h': usage(stdout); return CLI_OK;
        case '?': return CLI_USAGE;
        case OPT_MODEL: o.model = optarg; break;
        case OPT_PROMPTS: first_prompt = optarg; break;
        case OPT_METHODS: o.methods = optarg; break;
        case OPT_BUDGETS: o.budgets = optarg; break;
        case OPT_CALIB: o.calib = optarg; break;
        case OPT_TOKENS: num = &o.tokens; break;
        case OPT_MAX_PROMPT: num = &o.max_prompt; break;
        case OPT_TIME_LIMIT: num = &o.time_limit; break;
        case OPT_THREADS: num = &o.threads; break;
        case OPT_JSON: o.json = true; break;
        case OPT_QUIET: o.progress = CLI_PROGRESS_OFF; break;
        case OPT_PROGRESS: o.progress = CLI_PROGRESS_ON; break;
        }
        if (num && !cli_parse_u32(optarg, num)) return cli_bad_value("a non-negative integer");
    }
    if (!first_prompt) return cli_usage_error("--prompts is required");
    if (o.tokens == 0) return cli_usage_error("--tokens must be at least 1");
    /* --prompts a b c: getopt_long leaves b and c after the options */
    char **prompts = malloc((size_t)(argc - optind + 1) * sizeof *prompts);
    if (!prompts) return cli_out_of_memory();
    prompts[0] = (char *)first_prompt;
    for (int i = optind; i < argc; i++) prompts[1 + i - optind] = argv[i];
    o.prompts = prompts;
    o.n_prompts = 1 + argc - optind;
    int rc = run(&o);
    free(prompts);
    return rc;
}

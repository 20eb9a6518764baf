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
            "ceil(budget * n)) per prompt. Mean and standard error over prompts, and over\n"
            "documents (the prompt files; with --branches several prompts share one).\n"
            "\n"
            "With --branches N each file is a document that gives N prompts: its prefixes\n"
            "ending at N distinct cut points in its last quarter (code: a line that ends\n"
            "in ':' or '{', as scripts/make-prompts cuts; prose: a line that ends a\n"
            "sentence in '.', '!' or '?'; the cut just after its line break, else just\n"
            "before it), spread evenly by tokens, each where the prefix's own\n"
            "tokenisation is a prefix of the document's. One\n"
            "dense prefill of the document up to its last cut serves all N: each prompt\n"
            "rewinds to its cut (fathom_ctx_truncate) and continues as above.\n"
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
            "  --branches N      N prompts per file, cut as above (default 0: the file is\n"
            "                    one prompt)\n"
            "  --cut code|prose  the cut rule of --branches (default code)\n"
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
    int32_t *gen;               /* [tokens] its continuation of the current prompt */
    uint32_t n_gen, k_now;      /* its length; k of the current prompt */
} row;

typedef struct agree_options {
    const char *model, *methods, *budgets, *calib;
    char **prompts;
    int n_prompts;
    uint32_t tokens, max_prompt, threads, time_limit, branches;
    bool json, prose_cuts;
    cli_progress_mode progress;
} agree_options;

static void mean_stderr(const double *x, size_t n, double *mean, double *se) {
    double s = 0.0, ss = 0.0;
    for (size_t i = 0; i < n; i++) s += x[i];
    *mean = n ? s / (double)n : 0.0;
    for (size_t i = 0; i < n; i++) ss += (x[i] - *mean) * (x[i] - *mean);
    *se = n > 1 ? sqrt(ss / (double)(n - 1) / (double)n) : 0.0;
}

/* Cluster-robust (CR1) standard error of the mean of x over its clusters
 * (group[i] in [0, groups)): sqrt(G/(G-1) * sum_g (sum_{i in g} (x_i - mean))^2) / n
 * over the G clusters present; -1 with fewer than 2. */
static double cluster_stderr(const double *x, const size_t *group, size_t n, size_t groups) {
    double mean, se;
    mean_stderr(x, n, &mean, &se);
    double *sum = calloc(groups ? groups : 1, sizeof *sum);
    char *seen = calloc(groups ? groups : 1, 1);
    size_t g_present = 0;
    double acc = 0.0;
    if (sum && seen) {
        for (size_t i = 0; i < n; i++) {
            sum[group[i]] += x[i] - mean;
            g_present += !seen[group[i]];
            seen[group[i]] = 1;
        }
        for (size_t g = 0; g < groups; g++) acc += sum[g] * sum[g];
    }
    free(sum);
    free(seen);
    if (g_present < 2) return -1.0;
    const double gp = (double)g_present;
    return sqrt(gp / (gp - 1.0) * acc) / (double)n;
}

/* Standard error over the means of the clusters present (-1 with fewer than 2). */
static double cluster_means_stderr(const double *x, const size_t *group, size_t n, size_t groups) {
    double *sum = calloc(groups ? groups : 1, sizeof *sum), *means = calloc(groups ? groups : 1, sizeof *means);
    size_t *count = calloc(groups ? groups : 1, sizeof *count), g_present = 0;
    double mean, se = -1.0;
    if (sum && means && count) {
        for (size_t i = 0; i < n; i++) {
            sum[group[i]] += x[i];
            count[group[i]]++;
        }
        for (size_t g = 0; g < groups; g++)
            if (count[g]) means[g_present++] = sum[g] / (double)count[g];
        if (g_present >= 2) mean_stderr(means, g_present, &mean, &se);
    }
    free(sum);
    free(means);
    free(count);
    return se;
}

/* One prompt: the first n tokens of document doc's ids; with --branches its
 * text is the document's first cut_byte bytes. */
typedef struct prompt {
    size_t doc, n, cut_byte;
    uint32_t branch;
} prompt;

/* Everything one run holds. */
typedef struct agree_run {
    const agree_options *o;
    bool progress;
    cli_session ses;
    fathom_ctx *ctx;
    int32_t **ids;  /* [files] the documents' token ids */
    size_t *n_ids;  /* [files] */
    prompt *prompts; /* [n_prompts] in run order: by file, each file's cuts from the last */
    size_t n_prompts, *prompt_doc; /* prompt_doc: [n_prompts] the documents, for the stderrs */
    size_t prefilled_doc;          /* the document whose dense prefill ctx holds (SIZE_MAX none) */
    uint64_t *doc_prefill;         /* [files] tokens to prefill: the longest prompt's n - 1 */
    row *rows;      /* per budget: oracle, dense, then the methods */
    uint32_t n_rows;
    float *logits;                   /* [vocab] */
    int32_t *dense, *oracle, *gen;   /* [tokens] this prompt's continuations */
    uint32_t n_dense, n_oracle;
    char *dense_text, *oracle_text;
    size_t n_done; /* prompts completed: the results are over these */
} agree_run;

/* Whether the line that ends at text[nl] ('\n') is one a prompt may end
 * after: code, a line opening a block (':' or '{' last, as scripts/make-prompts
 * cuts); prose, a line ending a sentence ('.', '!' or '?' last). */
static bool is_cut_line(const char *text, size_t nl, bool prose) {
    size_t e = nl;
    while (e > 0 && (text[e - 1] == ' ' || text[e - 1] == '\t' || text[e - 1] == '\r')) e--;
    if (e == 0 || text[e - 1] == '\n') return false;
    const char c = text[e - 1];
    return prose ? c == '.' || c == '!' || c == '?' : c == ':' || c == '{';
}

/* Document p's --branches prompts, appended to r->prompts: for b = 0..N-1
 * the largest cut of at most n - (n/4) b / N tokens (and below the previous
 * one, not below n - n/4) just after a cut line's line break, or just
 * before it (tokenizers that join a line break to the next line's indent
 * leave no token boundary after it), where the tokenisation of the text
 * before the cut is the document's first tokens. */
static int find_cuts(agree_run *r, size_t p, const char *text, size_t len) {
    const fathom_tokenizer *tok = r->ses.tok;
    const size_t n = r->n_ids[p], lo = n - n / 4;
    const int32_t *ids = r->ids[p];
    size_t *ends = malloc(n * sizeof *ends); /* byte offset where token i's piece ends */
    if (!ends) return cli_out_of_memory();
    size_t at = 0;
    const int32_t bos = fathom_tokenizer_bos(tok);
    for (size_t i = 0; i < n; i++) {
        char piece[512];
        size_t plen = 0;
        /* a leading BOS (Gemma's tokenizer adds one) has a piece but no text */
        int st = i == 0 && ids[0] == bos ? FATHOM_OK
                                         : fathom_tokenizer_token_to_piece(tok, ids[i], piece, sizeof piece, &plen);
        if (st < 0) {
            free(ends);
            return cli_fail(r->ses.files[p], st);
        }
        ends[i] = at += plen;
    }
    size_t prev = n + 1;
    uint32_t found = 0;
    for (uint32_t b = 0; b < r->o->branches; b++) {
        size_t m = n - (size_t)((double)(n / 4) * b / r->o->branches);
        if (m >= prev) m = prev - 1;
        for (; m >= lo && m >= 2; m--) {
            const size_t e = ends[m - 1];
            const bool after = e > 0 && e <= len && text[e - 1] == '\n' && is_cut_line(text, e - 1, r->o->prose_cuts);
            const bool before = e < len && text[e] == '\n' && is_cut_line(text, e, r->o->prose_cuts);
            if (!after && !before) continue;
            /* piece offsets may differ from the text's bytes: the prefix's own tokens decide */
            int32_t *pids = NULL;
            size_t pn = 0;
            int st = cli_encode(tok, text, e, false, &pids, &pn);
            const bool same = st >= 0 && pn == m && memcmp(pids, ids, m * sizeof *ids) == 0;
            free(pids);
            if (st < 0) {
                free(ends);
                return cli_fail(r->ses.files[p], st);
            }
            if (same) break;
        }
        if (m < lo || m < 2) break;
        r->prompts[r->n_prompts++] = (prompt){.doc = p, .n = m, .cut_byte = ends[m - 1], .branch = b};
        prev = m;
        found++;
    }
    free(ends);
    if (found < r->o->branches) {
        cli_warn("%s: %u of %u cut points in its last %zu tokens", r->ses.files[p], found, r->o->branches,
                 n - lo);
    }
    return CLI_OK;
}

/* Tokenise every prompt file, cut the branches; size the context for the
 * longest prompt. */
static int load_prompts(agree_run *r) {
    const cli_session *s = &r->ses;
    const size_t per_file = r->o->branches ? r->o->branches : 1;
    r->ids = calloc(s->n_files, sizeof *r->ids);
    r->n_ids = calloc(s->n_files, sizeof *r->n_ids);
    r->doc_prefill = calloc(s->n_files, sizeof *r->doc_prefill);
    r->prompts = calloc(s->n_files * per_file, sizeof *r->prompts);
    r->prompt_doc = calloc(s->n_files * per_file, sizeof *r->prompt_doc);
    if (!r->ids || !r->n_ids || !r->doc_prefill || !r->prompts || !r->prompt_doc) return cli_out_of_memory();
    for (size_t p = 0; p < s->n_files; p++) {
        char *text = NULL;
        size_t len = 0;
        if (cli_read_file(s->files[p], &text, &len) < 0) {
            cli_error("cannot read %s", s->files[p]);
            return CLI_FAILURE;
        }
        int st = cli_encode(s->tok, text, len, false, &r->ids[p], &r->n_ids[p]);
        if (st < 0) {
            free(text);
            return cli_fail(s->files[p], st);
        }
        if (r->o->max_prompt && r->n_ids[p] > r->o->max_prompt) r->n_ids[p] = r->o->max_prompt;
        if (r->n_ids[p] < 2) {
            free(text);
            cli_error("%s has fewer than 2 tokens", s->files[p]);
            return CLI_FAILURE;
        }
        const size_t first = r->n_prompts;
        if (r->o->branches) {
            int rc = find_cuts(r, p, text, len);
            if (rc != CLI_OK) {
                free(text);
                return rc;
            }
        } else {
            r->prompts[r->n_prompts++] = (prompt){.doc = p, .n = r->n_ids[p], .cut_byte = len};
        }
        free(text);
        if (r->n_prompts > first) r->doc_prefill[p] = r->prompts[first].n - 1; /* the longest comes first */
    }
    if (r->n_prompts == 0) {
        cli_error("no prompts: no cut points found");
        return CLI_FAILURE;
    }
    size_t longest = 0, shortest = SIZE_MAX;
    for (size_t q = 0; q < r->n_prompts; q++) {
        r->prompt_doc[q] = r->prompts[q].doc;
        if (r->prompts[q].n > longest) longest = r->prompts[q].n;
        if (r->prompts[q].n < shortest) shortest = r->prompts[q].n;
    }
    if (longest + r->o->tokens > UINT32_MAX) {
        cli_error("prompts too long");
        return CLI_FAILURE;
    }
    r->prefilled_doc = SIZE_MAX;
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
    const size_t n = r->o->tokens;
    for (uint32_t w = 0; w < r->n_rows; w++) {
        for (int v = 0; v < N_MEASURES; v++)
            if (!(r->rows[w].values[v] = calloc(r->n_prompts, sizeof(double)))) return cli_out_of_memory();
        if (!(r->rows[w].gen = malloc(n * sizeof *r->rows[w].gen))) return cli_out_of_memory();
    }
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
    const uint64_t prefix = r->prompts[p].n - 1;
    const int32_t *ids = r->ids[r->prompts[p].doc];
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
        int st = cli_continue(r->ctx, prefix, ids[prefix], &w->method, k, cal, r->o->tokens, no_stop,
                              no_stop, r->logits, s->info.vocab, r->gen, &n_gen, &stats);
        if (st < 0) return cli_fail(w->method.name, st);
    }
    memcpy(w->gen, r->gen, n_gen * sizeof *w->gen);
    w->n_gen = n_gen;
    w->k_now = is_dense ? 0 : k;
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

/* Prompt p's JSON entry: where it comes from, the dense prefill it
 * needed, its dense continuation and every row's. */
static void print_prompt_json(const agree_run *r, size_t p, double prefill_s, uint64_t prefilled, double dense_s) {
    const prompt *q = &r->prompts[p];
    printf("%s\n {\"file\": ", p ? "," : "");
    cli_print_json_string(stdout, r->ses.files[q->doc]);
    printf(", \"document\": %zu", q->doc);
    if (r->o->branches) printf(", \"branch\": %u, \"cut_byte\": %zu", q->branch, q->cut_byte);
    printf(", \"n_tokens\": %zu, \"prefill_tokens\": %llu, \"prefill_s\": %.3f, \"dense_decode_s\": %.3f, "
           "\"dense_steps\": %u, \"dense_text\": ",
           q->n, (unsigned long long)prefilled, prefill_s, dense_s, r->n_dense);
    cli_print_json_string(stdout, r->dense_text);
    printf(", \"dense_ids\": [");
    for (uint32_t i = 0; i < r->n_dense; i++) printf("%s%d", i ? ", " : "", r->dense[i]);
    printf("], \"continuations\": [");
    for (uint32_t i = 0; i < r->n_rows; i++) {
        const row *w = &r->rows[i];
        printf("%s{\"method\": ", i ? ", " : "");
        cli_print_json_string(stdout, w->method.name);
        printf(", \"budget\": %g, \"k\": %u, \"ids\": [", w->budget, w->k_now);
        for (uint32_t t = 0; t < w->n_gen; t++) printf("%s%d", t ? ", " : "", w->gen[t]);
        printf("]}");
    }
    printf("]}");
}

/* Prompt p: a dense prefill of its document up to the longest prompt's
 * n - 1 tokens unless ctx holds it already, the dense continuation from
 * p's cut, then every row from the same rows. */
static int run_prompt(agree_run *r, size_t p) {
    const cli_session *s = &r->ses;
    const prompt *q = &r->prompts[p];
    const int32_t *ids = r->ids[q->doc];
    const uint64_t n = q->n, prefix = n - 1;
    int st;
    if (r->progress) {
        fprintf(stderr, "[%zu/%zu] ", p + 1, r->n_prompts);
        cli_print_safe(stderr, s->files[q->doc]);
        if (r->o->branches) fprintf(stderr, " cut %u", q->branch);
        fprintf(stderr, ": %llu tokens\n", (unsigned long long)n);
    }
    double prefill_s = 0.0;
    uint64_t prefilled = 0;
    if (r->prefilled_doc != q->doc) {
        const double tp = cli_now();
        r->prefilled_doc = SIZE_MAX;
        prefilled = r->doc_prefill[q->doc];
        if ((st = fathom_ctx_reset(r->ctx)) < 0 || (st = fathom_ctx_set_attention(r->ctx, NULL, 1, NULL)) < 0 ||
            (st = cli_prefill(r->ctx, ids, prefilled, NULL, r->progress)) < 0)
            return cli_fail("prefill", st);
        r->prefilled_doc = q->doc;
        prefill_s = cli_now() - tp;
    }
    fathom_method dense_m;
    fathom_method_parse("dense", &dense_m);
    const double t0 = cli_now();
    if ((st = cli_continue(r->ctx, prefix, ids[prefix], &dense_m, 1, NULL, r->o->tokens, -1, -1, r->logits,
                           s->info.vocab, r->dense, &r->n_dense, NULL)) < 0)
        return cli_fail("dense decoding", st);
    const double dense_s = cli_now() - t0;
    if (r->progress) fprintf(stderr, "  dense decoding: %u steps in %.1f s\n", r->n_dense, dense_s);
    free(r->dense_text);
    if (!(r->dense_text = cli_decode_text(s->tok, r->dense, r->n_dense))) return cli_out_of_memory();
    for (uint32_t b = 0; b < s->n_budgets; b++) {
        const uint32_t k = cli_budget_k(s->budgets[b], n);
        for (uint32_t w = 0; w < r->n_rows; w++) {
            if (r->rows[w].budget != s->budgets[b]) continue;
            int rc = run_row(r, p, &r->rows[w], k);
            if (rc != CLI_OK) return rc;
        }
    }
    if (r->o->json) print_prompt_json(r, p, prefill_s, prefilled, dense_s);
    return CLI_OK;
}

/* A standard error, or JSON null where it is undefined (< 0). */
static void print_json_se(const char *name, double se) {
    if (se < 0)
        printf(", \"%s\": null", name);
    else
        printf(", \"%s\": %.4f", name, se);
}

static void print_results(const agree_run *r) {
    const size_t n_files = r->n_done; /* prompts completed */
    const double np = (double)n_files;
    size_t n_docs = 0;
    for (size_t p = 0; p < n_files; p++) n_docs += p == 0 || r->prompt_doc[p] != r->prompt_doc[p - 1];
    if (r->o->json) {
        printf("], \"documents\": %zu, \"results\": [", n_docs);
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
                printf(", \"%s\": {\"mean\": %.4f, \"stderr\": %.4f", measure_names[v], mean, se);
                print_json_se("stderr_documents",
                              cluster_means_stderr(w->values[v], r->prompt_doc, n_files, r->ses.n_files));
                print_json_se("stderr_cluster", cluster_stderr(w->values[v], r->prompt_doc, n_files, r->ses.n_files));
                printf(", \"per_prompt\": [");
                for (size_t p = 0; p < n_files; p++) printf("%s%.4f", p ? ", " : "", w->values[v][p]);
                printf("]}");
            }
            printf("}");
        }
        struct rusage ru;
        printf("\n], \"peak_rss_kib\": %ld}\n", getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1L);
        return;
    }
    printf("step agreement over %zu prompts from %zu documents, %u decode steps each (mean +- standard\n"
           "error over prompts; word/oracle also over the documents' means)\n",
           n_files, n_docs, r->o->tokens);
    printf("%-8s %-12s %7s %7s %15s %15s %15s %15s %8s\n", "budget", "method", "k", "bits", "token/dense",
           "word/dense", "token/oracle", "word/oracle", "se(doc)");
    for (uint32_t i = 0; i < r->n_rows; i++) {
        const row *w = &r->rows[i];
        printf("%-8g %-12s %7.1f %7.1f", w->budget, w->method.name, w->k / np, w->bits / np);
        for (int v = 0; v < N_MEASURES; v++) {
            double mean, se;
            mean_stderr(w->values[v], n_files, &mean, &se);
            printf("   %5.3f +- %5.3f", mean, se);
        }
        const double sd = cluster_means_stderr(w->values[VS_ORACLE_WORD], r->prompt_doc, n_files, r->ses.n_files);
        if (sd < 0)
            printf(" %8s\n", "-");
        else
            printf(" %8.3f\n", sd);
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
    if (r->rows)
        for (uint32_t w = 0; w < r->n_rows; w++) free(r->rows[w].gen);
    free(r->rows);
    free(r->prompts);
    free(r->prompt_doc);
    free(r->doc_prefill);
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
        for (size_t p = 0; p < r.n_prompts && rc == CLI_OK; p++) {
            /* --time-limit: no prompt that would end past it, judged by the mean so far */
            const double spent = cli_now() - t0;
            if (o->time_limit && p > 0 && spent + spent / (double)p > (double)o->time_limit) {
                cli_warn("--time-limit %u s: stopping after %zu of %zu prompts", o->time_limit, p, r.n_prompts);
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
       OPT_THREADS, OPT_JSON, OPT_QUIET, OPT_PROGRESS, OPT_BRANCHES, OPT_CUT };
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
    {"branches", required_argument, NULL, OPT_BRANCHES},
    {"cut", required_argument, NULL, OPT_CUT},
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
        case OPT_BRANCHES: num = &o.branches; break;
        case OPT_CUT:
            if (strcmp(optarg, "code") != 0 && strcmp(optarg, "prose") != 0)
                return cli_usage_error("--cut must be code or prose");
            o.prose_cuts = strcmp(optarg, "prose") == 0;
            break;
        }
        if (num && !cli_parse_u32(optarg, num)) return cli_bad_value("a non-negative integer");
    }
    if (!first_prompt) return cli_usage_error("--prompts is required");
    if (o.tokens == 0) return cli_usage_error("--tokens must be at least 1");
    if (o.branches > 4096) return cli_usage_error("--branches must be at most 4096");
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

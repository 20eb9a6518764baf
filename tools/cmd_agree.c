/* fathom agree — step agreement of sparse decoding with dense and with exact
 * top-k (oracle) decoding on long prompts (paper §5.6). Also holds the
 * helpers fathom needle shares (declared in cli.h). */
#include "cli.h"
#include "fathom.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define AGREE_MIN_K 37 /* sink 4 + local 32 + at least one scanned winner */
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
            "  --model FILE      GGUF model (default $FATHOM_MODEL, else models/...)\n"
            "  --prompts P...    prompt files, or directories of them (sorted by name)\n"
            "  --tokens N        decode steps per continuation (default 32)\n"
            "  --methods LIST    default " DEFAULT_METHODS "\n"
            "                    (dense and oracle rows are always reported)\n"
            "  --budgets LIST    selection budgets as fractions of n (default 0.02,0.005)\n"
            "  --calib FILE      a capture of this model from other text, for ds, loki,\n"
            "                    fathom-klt\n"
            "  --max-prompt N    keep only the first N tokens of each prompt\n"
            "  --threads N       threads (default: one per core)\n"
            "  --json            one JSON object on stdout instead of the table\n"
            "  --quiet           no progress on stderr\n");
}

/* ---- helpers shared with fathom needle ---- */

bool cli_parse_fractions(const char *list, double *out, uint32_t cap, uint32_t *count) {
    uint32_t n = 0;
    const char *p = list;
    while (p && *p) {
        char *end;
        double v = strtod(p, &end);
        if (end == p || !(v > 0.0 && v <= 1.0) || (*end && *end != ',') || n == cap) return false;
        out[n++] = v;
        p = *end ? end + 1 : end;
    }
    *count = n;
    return n > 0;
}

uint32_t cli_budget_k(double fraction, uint64_t n) {
    double k = ceil(fraction * (double)n - 1e-9); /* 0.02 * 2500 is 50, not 51 */
    if (k < AGREE_MIN_K) k = AGREE_MIN_K;
    return k > (double)UINT32_MAX ? UINT32_MAX : (uint32_t)k;
}

int cli_check_method(const fathom_method *m, uint32_t dim) {
    if ((m->kind == FATHOM_METHOD_FATHOM || m->kind == FATHOM_METHOD_FATHOM_KLT) &&
        (m->param < 1 || m->param > FATHOM_MAX_DEPTH * dim)) {
        fprintf(stderr, "%s: the bit budget must be in [1, %u] at head dim %u\n", m->name,
                FATHOM_MAX_DEPTH * dim, dim);
        return FATHOM_ERR_INVALID_ARG;
    }
    if ((m->kind == FATHOM_METHOD_SPARQ || m->kind == FATHOM_METHOD_DS ||
         m->kind == FATHOM_METHOD_LOKI) &&
        (m->param < 1 || m->param > dim)) {
        fprintf(stderr, "%s: the channel count must be in [1, %u]\n", m->name, dim);
        return FATHOM_ERR_INVALID_ARG;
    }
    return FATHOM_OK;
}

static int32_t argmax(const float *x, uint32_t n) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return (int32_t)best;
}

int cli_continue(fathom_ctx *ctx, uint64_t prefix, int32_t last, const fathom_method *method,
                 uint32_t k, const fathom_source *calib, uint32_t n_tokens, int32_t stop_a,
                 int32_t stop_b, float *logits, uint32_t vocab, int32_t *out, uint32_t *produced,
                 fathom_ctx_stats *stats) {
    int st;
    *produced = 0;
    if ((st = fathom_ctx_truncate(ctx, prefix)) < 0) return st;
    if ((st = fathom_ctx_set_attention(ctx, method, k, calib)) < 0) return st;
    fathom_ctx_stats before;
    fathom_ctx_get_stats(ctx, &before);
    int32_t token = last;
    for (uint32_t i = 0; i < n_tokens; i++) {
        if ((st = fathom_ctx_step(ctx, token, logits)) < 0) return st;
        token = argmax(logits, vocab);
        out[(*produced)++] = token;
        if (token == stop_a || token == stop_b) break;
    }
    if (stats) { /* this continuation's share of the counters */
        fathom_ctx_get_stats(ctx, stats);
        stats->decode_steps -= before.decode_steps;
        stats->sparse_steps -= before.sparse_steps;
        stats->scan_bytes -= before.scan_bytes;
        stats->selected_rows -= before.selected_rows;
        stats->visible_rows -= before.visible_rows;
    }
    return FATHOM_OK;
}

char *cli_decode_text(const fathom_tokenizer *tok, const int32_t *ids, uint32_t n) {
    size_t need = 0;
    int st = fathom_tokenizer_decode(tok, ids, n, NULL, 0, &need);
    if (st < 0 && !(st == FATHOM_ERR_INVALID_ARG && need > 0)) return NULL;
    char *text = malloc(need + 1);
    if (!text) return NULL;
    if (need && fathom_tokenizer_decode(tok, ids, n, text, need, &need) < 0) {
        free(text);
        return NULL;
    }
    text[need] = '\0';
    return text;
}

void cli_print_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", f);
        else if (*p == '\t') fputs("\\t", f);
        else if (*p < 0x20 || *p == 0x7f) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

/* Files named by args: a file as is, a directory's regular files (not
 * hidden) in name order. */
static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int cli_collect_files(char **args, int n_args, char ***files, size_t *count) {
    char **list = NULL;
    size_t n = 0, cap = 0;
    for (int a = 0; a < n_args; a++) {
        struct stat sb;
        if (stat(args[a], &sb) != 0) {
            fprintf(stderr, "cannot open %s\n", args[a]);
            goto fail;
        }
        size_t first = n;
        DIR *dir = S_ISDIR(sb.st_mode) ? opendir(args[a]) : NULL;
        if (S_ISDIR(sb.st_mode) && !dir) {
            fprintf(stderr, "cannot read directory %s\n", args[a]);
            goto fail;
        }
        for (struct dirent *e = dir ? readdir(dir) : NULL;; e = dir ? readdir(dir) : NULL) {
            char *path;
            if (dir) {
                if (!e) break;
                if (e->d_name[0] == '.') continue;
                size_t len = strlen(args[a]) + strlen(e->d_name) + 2;
                if (!(path = malloc(len))) break;
                snprintf(path, len, "%s/%s", args[a], e->d_name);
                struct stat fs;
                if (stat(path, &fs) != 0 || !S_ISREG(fs.st_mode)) {
                    free(path);
                    continue;
                }
            } else {
                path = strdup(args[a]);
            }
            if (!path) break;
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                char **bigger = realloc(list, cap * sizeof *list);
                if (!bigger) {
                    free(path);
                    break;
                }
                list = bigger;
            }
            list[n++] = path;
            if (!dir) break;
        }
        if (dir) {
            closedir(dir);
            if (n > first) qsort(list + first, n - first, sizeof *list, cmp_str);
        }
    }
    if (n == 0) {
        fprintf(stderr, "no prompt files found\n");
        goto fail;
    }
    *files = list;
    *count = n;
    return 0;
fail:
    for (size_t i = 0; i < n; i++) free(list[i]);
    free(list);
    return -1;
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
} row;

typedef struct agree_options {
    const char *model, *methods, *budgets, *calib;
    char **prompts;
    int n_prompts;
    uint32_t tokens, max_prompt, threads;
    bool json, quiet;
} agree_options;

static void mean_stderr(const double *x, size_t n, double *mean, double *se) {
    double s = 0.0, ss = 0.0;
    for (size_t i = 0; i < n; i++) s += x[i];
    *mean = n ? s / (double)n : 0.0;
    for (size_t i = 0; i < n; i++) ss += (x[i] - *mean) * (x[i] - *mean);
    *se = n > 1 ? sqrt(ss / (double)(n - 1) / (double)n) : 0.0;
}

static int run(const agree_options *o) {
    int rc = 1, st;
    fathom_ctx *ctx = NULL;
    int32_t **ids = NULL;
    size_t *n_ids = NULL;
    row *rows = NULL;
    uint32_t n_rows = 0;
    float *logits = NULL;
    int32_t *dense = NULL, *oracle = NULL, *gen = NULL;
    char *dense_text = NULL, *oracle_text = NULL;

    fathom_method dense_m, oracle_m;
    cli_session ses;
    if ((rc = cli_session_open(&ses, "agree", o->methods, o->budgets, o->model, o->calib, o->prompts,
                               o->n_prompts)) != 0)
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
    fathom_method_parse("oracle", &oracle_m);
    ids = calloc(n_files, sizeof *ids);
    n_ids = calloc(n_files, sizeof *n_ids);
    if (!ids || !n_ids) goto oom;
    size_t longest = 0;
    for (size_t p = 0; p < n_files; p++) {
        char *text = NULL;
        size_t len = 0;
        if (cli_read_file(files[p], &text, &len) < 0) {
            fprintf(stderr, "fathom agree: cannot read %s\n", files[p]);
            goto done;
        }
        st = cli_encode_prompt(tok, text, len, false, NULL, &ids[p], &n_ids[p]);
        free(text);
        if (st < 0) {
            rc = cli_fail("agree", files[p], st);
            goto done;
        }
        if (o->max_prompt && n_ids[p] > o->max_prompt) n_ids[p] = o->max_prompt;
        if (n_ids[p] < 2) {
            fprintf(stderr, "fathom agree: %s has fewer than 2 tokens\n", files[p]);
            goto done;
        }
        if (n_ids[p] > longest) longest = n_ids[p];
    }
    if (longest + o->tokens > UINT32_MAX) {
        fprintf(stderr, "fathom agree: prompts too long\n");
        goto done;
    }
    if ((st = fathom_ctx_create(&ctx, model, (uint32_t)(longest + o->tokens), o->threads)) < 0) {
        rc = cli_fail("agree", "context", st);
        goto done;
    }

    /* Rows: per budget, oracle, dense, then the methods (without repeats of those two). */
    rows = calloc((size_t)n_budgets * (n_user + 2), sizeof *rows);
    if (!rows) goto oom;
    for (uint32_t b = 0; b < n_budgets; b++) {
        rows[n_rows].method = oracle_m; /* first: the rows after it compare with it */
        rows[n_rows++].budget = budgets[b];
        rows[n_rows].method = dense_m;
        rows[n_rows++].budget = budgets[b];
        for (uint32_t m = 0; m < n_user; m++) {
            if (user[m].kind == FATHOM_METHOD_DENSE || user[m].kind == FATHOM_METHOD_ORACLE) continue;
            rows[n_rows].method = user[m];
            rows[n_rows++].budget = budgets[b];
        }
    }
    for (uint32_t r = 0; r < n_rows; r++)
        for (int v = 0; v < N_MEASURES; v++)
            if (!(rows[r].values[v] = calloc(n_files, sizeof(double)))) goto oom;
    logits = malloc((size_t)info.vocab * sizeof *logits);
    dense = malloc((size_t)o->tokens * sizeof *dense);
    oracle = malloc((size_t)o->tokens * sizeof *oracle);
    gen = malloc((size_t)o->tokens * sizeof *gen);
    if (!logits || !dense || !oracle || !gen) goto oom;
    /* Fixed-length continuations: every method decodes all N steps. */
    const int32_t no_stop = -1;

    if (o->json) printf("{\"model\": \"%s\", \"tokens\": %u, \"prompts\": [", info.name, o->tokens);
    const double layers_heads = (double)info.layers * info.kv_heads;
    for (size_t p = 0; p < n_files; p++) {
        const uint64_t n = n_ids[p], prefix = n - 1;
        double t0 = cli_now();
        if (!o->quiet)
            fprintf(stderr, "[%zu/%zu] %s: %llu tokens, prefill...", p + 1, n_files, files[p],
                    (unsigned long long)n);
        if ((st = fathom_ctx_reset(ctx)) < 0 || (st = fathom_ctx_set_attention(ctx, NULL, 1, NULL)) < 0 ||
            (st = fathom_ctx_prefill(ctx, ids[p], prefix, NULL)) < 0) {
            rc = cli_fail("agree", "prefill", st);
            goto done;
        }
        if (!o->quiet) fprintf(stderr, " %.1f s\n", cli_now() - t0);
        uint32_t n_dense = 0, n_oracle = 0, n_gen = 0;
        const double t_dense = cli_now();
        if ((st = cli_continue(ctx, prefix, ids[p][prefix], &dense_m, 1, NULL, o->tokens, no_stop,
                               no_stop, logits, info.vocab, dense, &n_dense, NULL)) < 0) {
            rc = cli_fail("agree", "dense decoding", st);
            goto done;
        }
        if (!o->quiet)
            fprintf(stderr, "  dense decoding: %u steps in %.1f s\n", n_dense, cli_now() - t_dense);
        free(dense_text);
        if (!(dense_text = cli_decode_text(tok, dense, n_dense))) goto oom;
        if (o->json) {
            printf("%s{\"file\": ", p ? ", " : "");
            cli_print_json_string(stdout, files[p]);
            printf(", \"n_tokens\": %llu, \"dense_text\": ", (unsigned long long)n);
            cli_print_json_string(stdout, dense_text);
            printf("}");
        }
        for (uint32_t b = 0; b < n_budgets; b++) {
            const uint32_t k = cli_budget_k(budgets[b], n);
            for (uint32_t r = 0; r < n_rows; r++) {
                row *w = &rows[r];
                if (w->budget != budgets[b]) continue;
                const bool is_dense = w->method.kind == FATHOM_METHOD_DENSE;
                const bool is_oracle = w->method.kind == FATHOM_METHOD_ORACLE;
                const fathom_source *cal = (w->method.kind == FATHOM_METHOD_FATHOM_KLT ||
                                            w->method.kind == FATHOM_METHOD_DS ||
                                            w->method.kind == FATHOM_METHOD_LOKI)
                                               ? calib
                                               : NULL;
                fathom_ctx_stats stats = {0};
                double t1 = cli_now();
                if (is_dense) {
                    memcpy(gen, dense, n_dense * sizeof *gen);
                    n_gen = n_dense;
                } else if ((st = cli_continue(ctx, prefix, ids[p][prefix], &w->method, k, cal, o->tokens,
                                              no_stop, no_stop, logits, info.vocab, gen, &n_gen,
                                              &stats)) < 0) {
                    rc = cli_fail("agree", w->method.name, st);
                    goto done;
                }
                char *text = cli_decode_text(tok, gen, n_gen);
                if (!text) goto oom;
                if (is_oracle) { /* the oracle row comes before the methods of its budget */
                    memcpy(oracle, gen, n_gen * sizeof *gen);
                    n_oracle = n_gen;
                    free(oracle_text);
                    oracle_text = strdup(text);
                    if (!oracle_text) {
                        free(text);
                        goto oom;
                    }
                }
                w->values[VS_DENSE_TOK][p] = token_agreement(gen, n_gen, dense, n_dense);
                w->values[VS_DENSE_WORD][p] = word_agreement(text, dense_text);
                w->values[VS_ORACLE_TOK][p] = token_agreement(gen, n_gen, oracle, n_oracle);
                w->values[VS_ORACLE_WORD][p] = word_agreement(text, oracle_text);
                w->k += is_dense ? 0 : k;
                if (stats.sparse_steps) {
                    const double ctx_mean = (double)prefix + 0.5 * (double)(stats.sparse_steps + 1);
                    w->bits += 8.0 * stats.scan_bytes / (double)stats.sparse_steps / layers_heads / ctx_mean;
                    w->selection += stats.selected_rows / (stats.visible_rows > 0 ? stats.visible_rows : 1);
                }
                if (!o->quiet)
                    fprintf(stderr, "  %-12s k %-5u tok %.2f/%.2f word %.2f/%.2f (vs dense/oracle) %.1f s\n",
                            w->method.name, k, w->values[VS_DENSE_TOK][p], w->values[VS_ORACLE_TOK][p],
                            w->values[VS_DENSE_WORD][p], w->values[VS_ORACLE_WORD][p], cli_now() - t1);
                free(text);
            }
        }
    }

    const double np = (double)n_files;
    if (o->json) {
        printf("], \"results\": [");
        for (uint32_t r = 0; r < n_rows; r++) {
            const row *w = &rows[r];
            printf("%s\n  {\"method\": ", r ? "," : "");
            cli_print_json_string(stdout, w->method.name);
            printf(", \"budget\": %g, \"k_mean\": %.1f, \"bits_per_token\": %.2f, \"selection_ratio\": %.5f",
                   w->budget, w->k / np, w->bits / np, w->selection / np);
            for (int v = 0; v < N_MEASURES; v++) {
                double mean, se;
                mean_stderr(w->values[v], n_files, &mean, &se);
                printf(", \"%s\": {\"mean\": %.4f, \"stderr\": %.4f}", measure_names[v], mean, se);
            }
            printf("}");
        }
        printf("\n]}\n");
    } else {
        printf("step agreement over %zu prompts, %u decode steps each (mean +- standard error)\n",
               n_files, o->tokens);
        printf("%-8s %-12s %7s %7s %15s %15s %15s %15s\n", "budget", "method", "k", "bits",
               "token/dense", "word/dense", "token/oracle", "word/oracle");
        for (uint32_t r = 0; r < n_rows; r++) {
            const row *w = &rows[r];
            printf("%-8g %-12s %7.1f %7.1f", w->budget, w->method.name, w->k / np, w->bits / np);
            for (int v = 0; v < N_MEASURES; v++) {
                static const int order[N_MEASURES] = {VS_DENSE_TOK, VS_DENSE_WORD, VS_ORACLE_TOK,
                                                      VS_ORACLE_WORD};
                double mean, se;
                mean_stderr(w->values[order[v]], n_files, &mean, &se);
                printf("   %5.3f +- %5.3f", mean, se);
            }
            printf("\n");
        }
    }
    rc = 0;
    goto done;
oom:
    fprintf(stderr, "fathom agree: out of memory\n");
    rc = 1;
done:
    if (ids)
        for (size_t p = 0; p < n_files; p++) free(ids[p]);
    free(ids);
    free(n_ids);
    if (rows)
        for (uint32_t r = 0; r < n_rows; r++)
            for (int v = 0; v < N_MEASURES; v++) free(rows[r].values[v]);
    free(rows);
    free(logits);
    free(dense);
    free(oracle);
    free(gen);
    free(dense_text);
    free(oracle_text);
    fathom_ctx_free(ctx);
    cli_session_close(&ses);
    return rc;
}

int cmd_agree(int argc, char **argv) {
    agree_options o = {0};
    o.methods = DEFAULT_METHODS;
    o.budgets = "0.02,0.005";
    o.tokens = 32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--prompts")) {
            o.prompts = argv + i + 1;
            o.n_prompts = 0;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
                i++;
                o.n_prompts++;
            }
            if (o.n_prompts == 0) goto missing;
            continue;
        } else if (!strcmp(a, "--json")) {
            o.json = true;
            continue;
        } else if (!strcmp(a, "--quiet")) {
            o.quiet = true;
            continue;
        }
        static const char *const valued[] = {"--model", "--methods", "--budgets", "--calib",
                                             "--tokens", "--max-prompt", "--threads"};
        bool known = false;
        for (size_t j = 0; j < sizeof valued / sizeof valued[0]; j++) known |= !strcmp(a, valued[j]);
        if (!known) {
            fprintf(stderr, "fathom agree: unknown option %s\n\n", a);
            usage(stderr);
            return 2;
        }
        if (!v) goto missing;
        i++;
        if (!strcmp(a, "--model")) o.model = v;
        else if (!strcmp(a, "--methods")) o.methods = v;
        else if (!strcmp(a, "--budgets")) o.budgets = v;
        else if (!strcmp(a, "--calib")) o.calib = v;
        else if (!strcmp(a, "--tokens")) {
            if (!cli_parse_u32(v, &o.tokens)) goto bad_number;
        } else if (!strcmp(a, "--max-prompt")) {
            if (!cli_parse_u32(v, &o.max_prompt)) goto bad_number;
        } else if (!strcmp(a, "--threads")) {
            if (!cli_parse_u32(v, &o.threads)) goto bad_number;
        }
        continue;
    missing:
        fprintf(stderr, "fathom agree: %s needs a value\n", a);
        return 2;
    bad_number:
        fprintf(stderr, "fathom agree: %s needs a non-negative integer, not '%s'\n", a, v);
        return 2;
    }
    if (o.n_prompts == 0) {
        fprintf(stderr, "fathom agree: --prompts is required\n");
        return 2;
    }
    if (o.tokens == 0) {
        fprintf(stderr, "fathom agree: --tokens must be at least 1\n");
        return 2;
    }
    return run(&o);
}

int cli_session_open(cli_session *s, const char *cmd, const char *methods, const char *budgets,
                     const char *model, const char *calib, char **file_args, int n_file_args) {
    int st;
    memset(s, 0, sizeof *s);
    if ((st = fathom_method_parse_list(methods, s->methods, CLI_MAX_METHODS, &s->n_methods)) < 0)
        return cli_fail(cmd, methods, st);
    if (!cli_parse_fractions(budgets, s->budgets, CLI_MAX_BUDGETS, &s->n_budgets)) {
        fprintf(stderr, "fathom %s: --budgets needs fractions in (0, 1], e.g. 0.02,0.005\n", cmd);
        return 2;
    }
    if (cli_collect_files(file_args, n_file_args, &s->files, &s->n_files) < 0) return 1;
    int rc = 1;
    const char *path = cli_model_path(model);
    if ((st = fathom_model_open(&s->model, path)) < 0) {
        cli_fail(cmd, path, st);
        goto fail;
    }
    fathom_model_get_info(s->model, &s->info);
    for (uint32_t m = 0; m < s->n_methods; m++)
        if (cli_check_method(&s->methods[m], s->info.head_dim) < 0) {
            rc = 2;
            goto fail;
        }
    if ((st = fathom_model_tokenizer(s->model, &s->tok)) < 0) {
        cli_fail(cmd, "tokenizer", st);
        goto fail;
    }
    if (calib && (st = fathom_capture_open(&s->calib, calib)) < 0) {
        cli_fail(cmd, calib, st);
        goto fail;
    }
    return 0;
fail:
    cli_session_close(s);
    return rc;
}

void cli_session_close(cli_session *s) {
    for (size_t f = 0; f < s->n_files; f++) free(s->files[f]);
    free(s->files);
    fathom_source_free(s->calib);
    fathom_tokenizer_free(s->tok);
    fathom_model_free(s->model);
    memset(s, 0, sizeof *s);
}

/* bench_next_token — teacher-forced next-token agreement of sparse decode
 * steps: from one dense prefill of a prompt's first n-1 tokens, at each of
 * its last P positions p the context is cut back to p (fathom_ctx_truncate:
 * the dense rows below p stay) and one decode step of the prompt's own token
 * ids[p] runs with each method; its greedy token is compared with the
 * oracle's (exact top-k at the same k) and with dense attention's.
 *
 *   bench_next_token --model GGUF --prompt-file FILE [--positions 128]
 *                    [--budgets 0.02,0.005] [--methods sparq:16,sparq:32]
 *                    [--threads T] [--json]
 *
 * Every position starts from the same dense prefix, so one step's error
 * never feeds the next: P paired Bernoulli outcomes per method, where a free
 * continuation (fathom agree) gives one run-length per prompt. k = ceil(budget
 * x n). The prompt is the file's raw text (no chat template). */
#include "fathom.h"
#include "fathom_model.h"
#include "bench_prompt.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_METHODS 16
#define MAX_BUDGETS 8

static int fail(const char *what, int st) {
    fprintf(stderr, "bench_next_token: %s: %s: %s\n", what, fathom_status_name(st), fathom_last_error());
    return 1;
}

static int32_t argmax(const float *x, uint32_t n) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return (int32_t)best;
}

/* Mean and standard error of x[0..n). */
static void mean_se(const double *x, uint32_t n, double *mean, double *se) {
    double s = 0, s2 = 0;
    for (uint32_t i = 0; i < n; i++) s += x[i];
    *mean = s / n;
    for (uint32_t i = 0; i < n; i++) s2 += (x[i] - *mean) * (x[i] - *mean);
    *se = n > 1 ? sqrt(s2 / (n - 1) / n) : 0.0;
}

/* Greedy tokens of one step at each of the last P positions with method m
 * (NULL: dense) at k. */
static int steps(fathom_ctx *ctx, const int32_t *ids, uint64_t n, uint32_t P, const fathom_method *m, uint32_t k,
                 float *logits, uint32_t vocab, int32_t *out) {
    int st = fathom_ctx_set_attention(ctx, m, k, NULL);
    for (uint32_t i = 0; st >= 0 && i < P; i++) {
        const uint64_t p = n - P + i;
        if ((st = fathom_ctx_truncate(ctx, p)) >= 0 && (st = fathom_ctx_step(ctx, ids[p], logits)) >= 0)
            out[i] = argmax(logits, vocab);
    }
    int off = fathom_ctx_set_attention(ctx, NULL, 0, NULL);
    return st < 0 ? st : off;
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *prompt_path = NULL, *budget_list = "0.02,0.005";
    const char *method_list = "sparq:16,sparq:32";
    uint32_t P = 128, threads = 0;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) json = true;
        else if (v && !strcmp(a, "--model")) model_path = argv[++i];
        else if (v && !strcmp(a, "--prompt-file")) prompt_path = argv[++i];
        else if (v && !strcmp(a, "--positions")) P = (uint32_t)atoi(argv[++i]);
        else if (v && !strcmp(a, "--budgets")) budget_list = argv[++i];
        else if (v && !strcmp(a, "--methods")) method_list = argv[++i];
        else if (v && !strcmp(a, "--threads")) threads = (uint32_t)atoi(argv[++i]);
        else model_path = NULL, i = argc;
    }
    fathom_method methods[MAX_METHODS];
    uint32_t nm = 0, nb = 0;
    double budgets[MAX_BUDGETS];
    for (const char *p = budget_list; *p && nb < MAX_BUDGETS;) {
        char *end;
        budgets[nb] = strtod(p, &end);
        if (end == p || !(budgets[nb] > 0 && budgets[nb] <= 1)) nb = 0, p = "";
        else nb++, p = *end == ',' ? end + 1 : end;
    }
    if (!model_path || !prompt_path || P < 2 || nb == 0) {
        fprintf(stderr, "usage: bench_next_token --model GGUF --prompt-file FILE [--positions 128] "
                        "[--budgets 0.02,0.005] [--methods sparq:16,sparq:32] [--threads T] [--json]\n");
        return 2;
    }
    int st = fathom_method_parse_list(method_list, methods, MAX_METHODS, &nm);
    if (st < 0) return fail(method_list, st);
    bench_prompt bp;
    if (bench_prompt_open(&bp, "bench_next_token", model_path, prompt_path)) return 1;
    fathom_model *model = bp.model;
    const fathom_model_info info = bp.info;
    const int32_t *ids = bp.ids;
    const size_t n = bp.n;
    float *logits = malloc((size_t)info.vocab * sizeof *logits);
    int32_t *dense = malloc(P * sizeof *dense), *oracle = malloc(P * sizeof *oracle);
    int32_t *got = malloc((size_t)nm * P * sizeof *got);
    double *x = malloc(P * sizeof *x);
    if (!logits || !dense || !oracle || !got || !x) return fail("allocation", FATHOM_ERR_NOMEM);
    if (n <= P) return fail("prompt shorter than --positions", FATHOM_ERR_INVALID_ARG);
    fathom_ctx *ctx = NULL;
    if ((st = fathom_ctx_create(&ctx, model, (uint32_t)n, threads)) < 0) return fail("context", st);
    if ((st = fathom_ctx_prefill(ctx, ids, n - 1, logits)) < 0) return fail("prefill", st);
    if ((st = steps(ctx, ids, n, P, NULL, 0, logits, info.vocab, dense)) < 0) return fail("dense", st);
    fathom_method oracle_m;
    fathom_method_parse("oracle", &oracle_m);
    if (json) printf("{\"model\":\"%s\",\"prompt\":\"%s\",\"tokens\":%zu,\"positions\":%u,\"budgets\":[", info.name,
                     prompt_path, n, P);
    for (uint32_t b = 0; b < nb; b++) {
        const uint32_t k = (uint32_t)ceil(budgets[b] * (double)n);
        if ((st = steps(ctx, ids, n, P, &oracle_m, k, logits, info.vocab, oracle)) < 0) return fail("oracle", st);
        for (uint32_t m = 0; m < nm; m++)
            if ((st = steps(ctx, ids, n, P, &methods[m], k, logits, info.vocab, got + (size_t)m * P)) < 0)
                return fail(methods[m].name, st);
        double mean, se;
        for (uint32_t i = 0; i < P; i++) x[i] = oracle[i] == dense[i];
        mean_se(x, P, &mean, &se);
        if (json) printf("%s{\"budget\":%g,\"k\":%u,\"oracle_vs_dense\":%.4f,\"methods\":[", b ? "," : "", budgets[b],
                         k, mean);
        else printf("budget %g, k = %u of n = %zu, %u positions: oracle vs dense %.4f\n", budgets[b], k, n, P, mean);
        for (uint32_t m = 0; m < nm; m++) {
            const int32_t *g = got + (size_t)m * P;
            double vs_dense, se_dense;
            for (uint32_t i = 0; i < P; i++) x[i] = g[i] == dense[i];
            mean_se(x, P, &vs_dense, &se_dense);
            for (uint32_t i = 0; i < P; i++) x[i] = g[i] == oracle[i];
            mean_se(x, P, &mean, &se);
            if (json)
                printf("%s{\"method\":\"%s\",\"vs_oracle\":%.4f,\"vs_oracle_stderr\":%.4f,\"vs_dense\":%.4f,"
                       "\"vs_dense_stderr\":%.4f,\"per_position_vs_oracle\":[",
                       m ? "," : "", methods[m].name, mean, se, vs_dense, se_dense);
            else
                printf("  %-20s vs oracle %.4f ± %.4f   vs dense %.4f ± %.4f\n", methods[m].name, mean, se, vs_dense,
                       se_dense);
            for (uint32_t i = 0; json && i < P; i++) printf("%s%d", i ? "," : "", g[i] == oracle[i]);
            if (json) printf("]}");
        }
        if (json) printf("]}");
        fflush(stdout);
    }
    if (json) printf("]}\n");
    fathom_ctx_free(ctx);
    bench_prompt_free(&bp);
    free(logits);
    free(dense);
    free(oracle);
    free(got);
    free(x);
    return 0;
}

/* bench_grouped_agreement — on real captures, how often the grouped-table
 * scan (FATHOM_SCAN_GROUPED: the same sums as the exact scan in another
 * float order) selects other rows than the exact scan, and what that does
 * to the attention error.
 *
 *   bench_grouped_agreement CAPTURE [--budget B] [--k K] [--positions P] [--int8|--int16] [--json]
 *
 * --int8: the same for the integer ("VNNI") scan (FATHOM_SCAN_INT8: per
 * block and head int8 weights, so other sums, not only another order) in
 * place of the grouped one; --int16: its int16 variant (FATHOM_SCAN_INT16).
 *
 * For every layer and KV head of the capture, an index with fathom:B over
 * the whole window (variance from the store's running sums, as eval without
 * calibration); for each of the last P queried positions (0: all) and each
 * query head, the exact scores (fathom_index_scores) and the grouped ones
 * (the same store, depths and queries), then fathom_select of each (k, sink
 * FATHOM_SINK_TOKENS, local FATHOM_LOCAL_TOKENS, as eval). Counted: selected
 * rows that both selections hold, and selections that are identical. Where
 * a selection differs, both are scored as eval scores them: exact attention
 * over the selection (q.k in double, softmax in double) against dense
 * attention over every visible key, relative L2 error; "error change" is
 * the sum of (grouped - exact) over those rows divided by all rows, i.e.
 * the change of eval's mean error, since identical selections have equal
 * errors. */
#include "fathom.h"
#include "store_internal.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, int st) {
    fprintf(stderr, "bench_grouped_agreement: %s: %s: %s\n", what, fathom_status_name(st), fathom_last_error());
    return 1;
}

/* Relative L2 error of attention over idx[count] against attention over
 * keys [0, n), for query q: exact q.k and softmax in double. */
static double selection_error(uint32_t d, const float *q, const float *k, const float *v, uint64_t n,
                              const uint32_t *idx, uint32_t count, double *w) {
    const double scale = 1.0 / sqrt((double)d);
    double mx = -INFINITY;
    for (uint64_t i = 0; i < n; i++) {
        double s = 0;
        for (uint32_t j = 0; j < d; j++) s += (double)q[j] * k[i * d + j];
        w[i] = s * scale;
        if (w[i] > mx) mx = w[i];
    }
    double dense[512] = {0}, sel[512] = {0}, zd = 0, zs = 0, msel = -INFINITY;
    for (uint32_t r = 0; r < count; r++)
        if (w[idx[r]] > msel) msel = w[idx[r]];
    for (uint64_t i = 0; i < n; i++) {
        const double e = exp(w[i] - mx);
        zd += e;
        for (uint32_t j = 0; j < d; j++) dense[j] += e * v[i * d + j];
    }
    for (uint32_t r = 0; r < count; r++) {
        const double e = exp(w[idx[r]] - msel);
        zs += e;
        for (uint32_t j = 0; j < d; j++) sel[j] += e * v[(uint64_t)idx[r] * d + j];
    }
    double num = 0, den = 0;
    for (uint32_t j = 0; j < d; j++) {
        const double a = dense[j] / zd, b = sel[j] / zs;
        num += (a - b) * (a - b);
        den += a * a;
    }
    return den > 0 ? sqrt(num / den) : 0;
}

int main(int argc, char **argv) {
    const char *path = NULL;
    uint32_t budget = 48, k = 64, max_pos = 0;
    int json = 0, int8 = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--int8")) int8 = 1;
        else if (!strcmp(a, "--int16")) int8 = 2;
        else if (v && !strcmp(a, "--budget")) budget = (uint32_t)atoi(v), i++;
        else if (v && !strcmp(a, "--k")) k = (uint32_t)atoi(v), i++;
        else if (v && !strcmp(a, "--positions")) max_pos = (uint32_t)atoi(v), i++;
        else if (a[0] != '-' && !path) path = a;
        else {
            fprintf(stderr, "usage: bench_grouped_agreement CAPTURE [--budget B] [--k K] [--positions P] [--int8|--int16] [--json]\n");
            return 2;
        }
    }
    if (!path || !k) {
        fprintf(stderr, "usage: bench_grouped_agreement CAPTURE [--budget B] [--k K] [--positions P] [--int8|--int16] [--json]\n");
        return 2;
    }
    fathom_source *src;
    int st = fathom_capture_open(&src, path);
    if (st < 0) return fail(path, st);
    fathom_source_info in;
    fathom_source_get_info(src, &in);
    const uint32_t d = in.dim, G = in.q_heads / in.kv_heads, P = in.positions;
    const uint32_t p0 = max_pos && max_pos < P ? P - max_pos : 0;
    if (d > 512 || G > 64) return fail("shape", FATHOM_ERR_UNSUPPORTED);
    char spec[32];
    snprintf(spec, sizeof spec, "fathom:%u", budget);
    fathom_method m;
    if ((st = fathom_method_parse(spec, &m)) < 0 || (st = fathom_method_check(&m, d)) < 0) return fail(spec, st);
    const uint64_t n = in.tokens;
    float *q = malloc((size_t)in.q_heads * P * d * sizeof(float));
    float *kk = malloc((size_t)in.kv_heads * n * d * sizeof(float));
    float *vv = malloc((size_t)in.kv_heads * n * d * sizeof(float));
    float *qg = malloc((size_t)G * d * sizeof(float));
    float *se = malloc((size_t)G * n * sizeof(float)), *sg = malloc((size_t)G * n * sizeof(float));
    double *w = malloc(n * sizeof(double));
    uint64_t *work = malloc(fathom_select_work_size(n));
    uint32_t *ie = malloc(k * sizeof(uint32_t)), *ig = malloc(k * sizeof(uint32_t));
    void *scratch = malloc(fathom_index_scratch_size(d, G));
    if (!q || !kk || !vv || !qg || !se || !sg || !w || !work || !ie || !ig || !scratch)
        return fail("allocation", FATHOM_ERR_NOMEM);
    uint64_t rows = 0, same_rows = 0, selections = 0, same_sel = 0, diff_scores = 0, scores = 0;
    double err_change = 0, err_max = 0, bits = 0, err_exact = 0;
    const fathom_scan_kernel mode = int8 == 2 ? FATHOM_SCAN_INT16 : int8 ? FATHOM_SCAN_INT8 : FATHOM_SCAN_GROUPED;
    const char *mname = int8 == 2 ? "int16" : int8 ? "int8" : "grouped";
    for (uint32_t l = 0; l < in.layers; l++) {
        if ((st = fathom_source_layer(src, l, q, kk, vv)) < 0) return fail("layer", st);
        for (uint32_t h = 0; h < in.kv_heads; h++) {
            fathom_index *ix;
            if ((st = fathom_index_create(&ix, &m, 1, d, 0)) < 0) return fail("index", st);
            const float *keys = kk + (size_t)h * n * d, *vals = vv + (size_t)h * n * d;
            if ((st = fathom_index_append(ix, keys, n)) < 0) return fail("append", st);
            for (uint32_t p = p0; p < P; p++) {
                const uint64_t nv = in.first_query + p + 1;
                for (uint32_t g = 0; g < G; g++)
                    memcpy(qg + (size_t)g * d, q + (((size_t)h * G + g) * P + p) * d, d * sizeof(float));
                double b;
                if ((st = fathom_index_scores(ix, &m, budget, G, qg, nv, se, scratch, &b, NULL)) < 0)
                    return fail("exact scores", st);
                bits += b;
                const uint8_t *depths = fathom_index_scratch_depths(scratch, d, G);
                if ((st = fathom_store_scan_with(mode, fathom_index_store(ix), depths, qg, G, nv, sg, NULL)) < 0)
                    return fail(mname, st);
                for (uint64_t i = 0; i < (uint64_t)G * nv; i++) diff_scores += se[i] != sg[i];
                scores += (uint64_t)G * nv;
                for (uint32_t g = 0; g < G; g++) {
                    uint32_t ne, ng;
                    if ((st = fathom_select(se + (size_t)g * nv, nv, k, FATHOM_SINK_TOKENS, FATHOM_LOCAL_TOKENS,
                                            work, ie, &ne)) < 0 ||
                        (st = fathom_select(sg + (size_t)g * nv, nv, k, FATHOM_SINK_TOKENS, FATHOM_LOCAL_TOKENS,
                                            work, ig, &ng)) < 0)
                        return fail("select", st);
                    uint32_t both = 0; /* ascending: a merge */
                    for (uint32_t x = 0, y = 0; x < ne && y < ng;)
                        if (ie[x] == ig[y]) both++, x++, y++;
                        else if (ie[x] < ig[y]) x++;
                        else y++;
                    rows += ne, same_rows += both, selections++;
                    if (both == ne && ne == ng) {
                        same_sel++;
                        continue;
                    }
                    const float *qq = qg + (size_t)g * d;
                    const double ee = selection_error(d, qq, keys, vals, nv, ie, ne, w);
                    const double eg = selection_error(d, qq, keys, vals, nv, ig, ng, w);
                    err_change += eg - ee;
                    err_exact += ee;
                    if (fabs(eg - ee) > err_max) err_max = fabs(eg - ee);
                }
            }
            fathom_index_free(ix);
        }
    }
    const double frac_rows = rows ? (double)same_rows / rows : 1, frac_sel = selections ? (double)same_sel / selections : 1;
    const double mean_change = selections ? err_change / selections : 0;
    const uint32_t npos = P - p0;
    fprintf(stderr, "bench_grouped_agreement (%s): %s (%s), %u layers, %u KV heads, G = %u, d = %u, n = %llu, "
                    "last %u positions, %s (%.1f bits/token), k = %u (sink %d, local %d)\n",
            mname, path, in.model, in.layers, in.kv_heads, G, d, (unsigned long long)n, npos, spec,
            selections ? bits * G / selections : 0, k, FATHOM_SINK_TOKENS, FATHOM_LOCAL_TOKENS);
    fprintf(stderr, "scores differing from the exact scan's: %.4f of %llu\n", scores ? (double)diff_scores / scores : 0,
            (unsigned long long)scores);
    fprintf(stderr, "selected rows in both selections: %.6f of %llu; identical selections: %.6f of %llu\n", frac_rows,
            (unsigned long long)rows, frac_sel, (unsigned long long)selections);
    fprintf(stderr, "attention error where selections differ: mean error change %+.3e over all selections, "
                    "largest change on one %.3e (mean exact-selection error there %.3e)\n",
            mean_change, err_max, selections > same_sel ? err_exact / (double)(selections - same_sel) : 0);
    if (json)
        printf("{\"bench\":\"bench_grouped_agreement\",\"mode\":\"%s\",\"capture\":\"%s\",\"model\":\"%s\",\"method\":\"%s\","
               "\"k\":%u,\"positions\":%u,\"selections\":%llu,\"rows\":%llu,\"same_rows\":%.6f,"
               "\"same_selections\":%.6f,\"scores_differ\":%.6f,\"mean_error_change\":%.4e,\"max_error_change\":%.4e}\n",
               mname, path, in.model, spec, k, npos, (unsigned long long)selections, (unsigned long long)rows, frac_rows,
               frac_sel, scores ? (double)diff_scores / scores : 0, mean_change, err_max);
    fathom_source_free(src);
    free(q), free(kk), free(vv), free(qg), free(se), free(sg), free(w), free(work), free(ie), free(ig), free(scratch);
    return 0;
}

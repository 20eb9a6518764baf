/* Channel choices and calibration statistics shared by the fidelity harness
 * (eval.c) and the decoder's sparse attention (model.c), so that a method
 * means the same thing in both. */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void fathom_channel_variance(uint32_t dim, const float *rows, uint64_t n, float *var) {
    for (uint32_t j = 0; j < dim; j++) {
        double mean = 0, m2 = 0;
        for (uint64_t i = 0; i < n; i++) mean += rows[i * dim + j];
        mean /= (double)n;
        for (uint64_t i = 0; i < n; i++) {
            double x = rows[i * dim + j] - mean;
            m2 += x * x;
        }
        var[j] = (float)(m2 / (double)n);
    }
}

void fathom_top_channels(uint32_t dim, const double *value, uint32_t count, uint8_t *depths, uint8_t depth) {
    memset(depths, 0, dim);
    for (uint32_t c = 0; c < count && c < dim; c++) {
        int64_t best = -1;
        for (uint32_t j = 0; j < dim; j++)
            if (!depths[j] && (best < 0 || value[j] > value[best])) best = j;
        depths[best] = depth;
    }
}

void fathom_sparq_depths(uint32_t dim, uint32_t group, const float *queries, uint32_t r, double *scratch,
                         uint8_t *depths) {
    for (uint32_t j = 0; j < dim; j++) {
        double a = 0;
        for (uint32_t h = 0; h < group; h++) a += fabs(queries[h * dim + j]);
        scratch[j] = a;
    }
    fathom_top_channels(dim, scratch, r, depths, FATHOM_MAX_DEPTH);
}

int fathom_ds_depths(uint32_t dim, const float *keys, uint64_t n, const float *queries, uint64_t q_rows,
                     uint32_t channels, uint8_t *depths) {
    FATHOM_CHECK_ARG(n > 0 && q_rows > 0, "Double Sparsity needs calibration keys and queries");
    double *stat = fathom_alloc_array(dim, sizeof(double));
    if (!stat) return fathom_fail(FATHOM_ERR_NOMEM, "ds: out of memory");
    for (uint32_t j = 0; j < dim; j++) {
        double mq = 0, mk = 0;
        for (uint64_t r = 0; r < q_rows; r++) mq += fabs(queries[r * dim + j]);
        for (uint64_t i = 0; i < n; i++) mk += fabs(keys[i * dim + j]);
        stat[j] = (mq / (double)q_rows) * (mk / (double)n);
    }
    fathom_top_channels(dim, stat, channels, depths, FATHOM_MAX_DEPTH);
    free(stat);
    return FATHOM_OK;
}

int fathom_basis_fit_strided(fathom_basis **out, uint32_t dim, const float *keys, uint64_t n,
                             const float *queries, uint64_t q_rows) {
    uint64_t stride = n > FATHOM_BASIS_MAX_KEYS ? (n + FATHOM_BASIS_MAX_KEYS - 1) / FATHOM_BASIS_MAX_KEYS : 1;
    uint64_t m = (n + stride - 1) / stride;
    float *sub = fathom_alloc_array(m, (uint64_t)dim * sizeof(float));
    if (!sub) return fathom_fail(FATHOM_ERR_NOMEM, "basis: out of memory for %llu keys", (unsigned long long)m);
    for (uint64_t i = 0; i < m; i++) memcpy(sub + i * dim, keys + i * stride * dim, dim * sizeof(float));
    int st = fathom_basis_fit(out, dim, sub, m, queries, q_rows);
    free(sub);
    return st;
}

/* landmarks — the fp16 mean key of each 8-token block, the ShadowKV-style
 * block baseline (§2): a query scores a block once and every token of the
 * block gets that score. Reads dim fp16 values per 8 tokens (§4). */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct fathom_landmarks {
    uint32_t dim;
    uint64_t length;
    /* [blocks][dim] means, each rounded to fp16 and kept as the float it
     * equals (every fp16 is exact in float), so the scan needs no convert. */
    float *means;
    uint64_t capacity_blocks;
    float *open_rows; /* [8][dim] raw rows of the open block */
};

int fathom_landmarks_create(fathom_landmarks **out, uint32_t dim) {
    FATHOM_CHECK_ARG(out, "landmarks_create: out is NULL");
    *out = NULL;
    FATHOM_CHECK_ARG(dim > 0, "landmarks_create: dim is 0");
    fathom_landmarks *lm = calloc(1, sizeof *lm);
    if (!lm) return fathom_fail(FATHOM_ERR_NOMEM, "landmarks_create: out of memory");
    lm->dim = dim;
    lm->open_rows = fathom_alloc_array((uint64_t)dim * FATHOM_LANDMARK_TOKENS, sizeof(float));
    if (!lm->open_rows) {
        free(lm);
        return fathom_fail(FATHOM_ERR_NOMEM, "landmarks_create: out of memory for dim %u", dim);
    }
    *out = lm;
    return FATHOM_OK;
}

void fathom_landmarks_free(fathom_landmarks *lm) {
    if (!lm) return;
    free(lm->means);
    free(lm->open_rows);
    free(lm);
}

uint64_t fathom_landmarks_length(const fathom_landmarks *lm) { return lm ? lm->length : 0; }

static uint64_t landmark_blocks(uint64_t tokens) {
    return tokens / FATHOM_LANDMARK_TOKENS + (tokens % FATHOM_LANDMARK_TOKENS != 0);
}

static int reserve_blocks(fathom_landmarks *lm, uint64_t blocks) {
    if (blocks <= lm->capacity_blocks) return FATHOM_OK;
    uint64_t cap = lm->capacity_blocks ? lm->capacity_blocks : 64;
    while (cap < blocks) cap = cap > UINT64_MAX / 2 ? blocks : cap * 2;
    uint64_t values, bytes;
    FATHOM_CHECK(!fathom_mul_u64(cap, lm->dim, &values) ||
                     !fathom_mul_u64(values, sizeof(float), &bytes) || bytes > SIZE_MAX,
                 FATHOM_ERR_NOMEM, "landmarks: %llu blocks overflow", (unsigned long long)cap);
    float *grown = realloc(lm->means, (size_t)bytes);
    FATHOM_CHECK(!grown, FATHOM_ERR_NOMEM, "landmarks: out of memory for %llu blocks",
                 (unsigned long long)cap);
    lm->means = grown;
    lm->capacity_blocks = cap;
    return FATHOM_OK;
}

/* Mean of the `count` rows present, summed in order in double, so a block's
 * mean depends only on its rows, never on how they were appended. */
static void update_mean(fathom_landmarks *lm, uint64_t block, uint32_t count) {
    const uint32_t dim = lm->dim;
    float *mean = lm->means + block * dim;
    for (uint32_t j = 0; j < dim; j++) {
        double acc = 0.0;
        for (uint32_t i = 0; i < count; i++) acc += lm->open_rows[(size_t)i * dim + j];
        mean[j] = fathom_f16_to_f32(fathom_f32_to_f16((float)(acc / count)));
    }
}

int fathom_landmarks_append(fathom_landmarks *lm, const float *keys, uint64_t count) {
    FATHOM_CHECK_ARG(lm && keys, "landmarks_append: NULL argument");
    FATHOM_CHECK_ARG(count > 0, "landmarks_append: count is 0");
    const uint32_t dim = lm->dim;
    uint64_t values, new_length;
    FATHOM_CHECK(!fathom_mul_u64(count, dim, &values) ||
                     !fathom_add_u64(lm->length, count, &new_length),
                 FATHOM_ERR_NOMEM, "landmarks_append: size overflows");
    for (uint64_t v = 0; v < values; v++)
        FATHOM_CHECK(!isfinite(keys[v]), FATHOM_ERR_NONFINITE,
                     "landmarks_append: key %llu channel %llu is not finite",
                     (unsigned long long)(v / dim), (unsigned long long)(v % dim));
    FATHOM_TRY(reserve_blocks(lm, landmark_blocks(new_length)));
    for (uint64_t r = 0; r < count; r++) {
        uint32_t pos = (uint32_t)(lm->length % FATHOM_LANDMARK_TOKENS);
        memcpy(lm->open_rows + (size_t)pos * dim, keys + r * dim, (size_t)dim * sizeof(float));
        lm->length++;
        pos++;
        if (pos == FATHOM_LANDMARK_TOKENS || r + 1 == count)
            update_mean(lm, (lm->length - 1) / FATHOM_LANDMARK_TOKENS, pos);
    }
    return FATHOM_OK;
}

/* q . m with 8 independent partial sums (two 4-float vectors), so the sum
 * is not one long dependency chain. GCC/clang vector extensions compile to
 * SSE on the baseline ISA. */
typedef float landmark_v4 __attribute__((vector_size(16)));

static float dot(const float *q, const float *m, uint32_t dim) {
    landmark_v4 acc0 = {0, 0, 0, 0}, acc1 = {0, 0, 0, 0};
    uint32_t j = 0;
    for (; j + 8 <= dim; j += 8) {
        landmark_v4 q0, q1, m0, m1;
        memcpy(&q0, q + j, sizeof q0);
        memcpy(&q1, q + j + 4, sizeof q1);
        memcpy(&m0, m + j, sizeof m0);
        memcpy(&m1, m + j + 4, sizeof m1);
        acc0 += q0 * m0;
        acc1 += q1 * m1;
    }
    landmark_v4 sum = acc0 + acc1;
    float acc = (sum[0] + sum[1]) + (sum[2] + sum[3]);
    for (; j < dim; j++) acc += q[j] * m[j];
    return acc;
}

int fathom_landmarks_scan(const fathom_landmarks *lm, const float *queries, uint32_t group,
                          uint64_t n, float *scores, uint64_t *bytes_read) {
    FATHOM_CHECK_ARG(lm && queries && scores, "landmarks_scan: NULL argument");
    FATHOM_CHECK_ARG(group > 0, "landmarks_scan: group is 0");
    FATHOM_CHECK_ARG(n > 0 && n <= lm->length, "landmarks_scan: n = %llu not in 1..length %llu",
                     (unsigned long long)n, (unsigned long long)lm->length);
    uint64_t total, bytes;
    const uint64_t blocks = landmark_blocks(n);
    FATHOM_CHECK(!fathom_mul_u64(group, n, &total) ||
                     !fathom_mul_u64(blocks, (uint64_t)lm->dim * sizeof(uint16_t), &bytes),
                 FATHOM_ERR_NOMEM, "landmarks_scan: size overflows");
    const uint32_t dim = lm->dim;
    for (uint64_t b = 0; b < blocks; b++) {
        const float *mean = lm->means + b * dim;
        uint64_t first = b * FATHOM_LANDMARK_TOKENS;
        uint64_t count = n - first < FATHOM_LANDMARK_TOKENS ? n - first : FATHOM_LANDMARK_TOKENS;
        for (uint32_t h = 0; h < group; h++) {
            float acc = dot(queries + (uint64_t)h * dim, mean, dim);
            float *s = scores + (uint64_t)h * n + first;
            for (uint64_t i = 0; i < count; i++) s[i] = acc;
        }
    }
    if (bytes_read) *bytes_read = bytes;
    return FATHOM_OK;
}

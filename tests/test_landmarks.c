/* Landmarks: fp16 block means, broadcast scores, append == bulk, bytes. */
#include "check.h"
#include "fathom.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define DIM 5

static float key_value(uint64_t i, uint32_t j) {
    return (float)sin(0.37 * (double)i + 1.3 * j) * (float)(1 + j) + 0.01f * (float)i;
}

/* The fp16 mean of tokens [first, first+count) of channel j. */
static float test_mean(const float *keys, uint64_t first, uint64_t count, uint32_t j) {
    double s = 0;
    for (uint64_t i = first; i < first + count; i++) s += keys[i * DIM + j];
    return fathom_f16_to_f32(fathom_f32_to_f16((float)(s / (double)count)));
}

static void test_means_and_scores(void) {
    const uint64_t n = 29; /* 3 full blocks and an open one of 5 */
    float keys[29 * DIM];
    for (uint64_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < DIM; j++) keys[i * DIM + j] = key_value(i, j);
    fathom_landmarks *bulk = NULL, *stream = NULL;
    CHECK_OK(fathom_landmarks_create(&bulk, DIM));
    CHECK_OK(fathom_landmarks_create(&stream, DIM));
    CHECK_OK(fathom_landmarks_append(bulk, keys, n));
    for (uint64_t i = 0; i < n; i++) CHECK_OK(fathom_landmarks_append(stream, keys + i * DIM, 1));
    CHECK(fathom_landmarks_length(bulk) == n && fathom_landmarks_length(stream) == n);

    /* Unit queries read each mean exactly: scores[h*n + i] = mean_h(block of i). */
    float unit[DIM * DIM] = {0};
    for (int h = 0; h < DIM; h++) unit[h * DIM + h] = 1.0f;
    float sb[DIM * 32], ss[DIM * 29];
    uint64_t bytes = 0;
    CHECK_OK(fathom_landmarks_scan(bulk, unit, DIM, n, sb, &bytes));
    CHECK(bytes == 4 * DIM * 2);
    CHECK_OK(fathom_landmarks_scan(stream, unit, DIM, n, ss, NULL));
    CHECK(memcmp(sb, ss, sizeof ss) == 0); /* append == bulk */
    int bad = 0;
    for (uint32_t h = 0; h < DIM; h++)
        for (uint64_t i = 0; i < n; i++) {
            uint64_t first = i / 8 * 8, count = n - first < 8 ? n - first : 8;
            if (sb[h * n + i] != test_mean(keys, first, count, h)) bad++;
        }
    CHECK(bad == 0);

    /* Random queries against q . mean in double; n < length scans a prefix. */
    float q[2 * DIM] = {0.5f, -1.0f, 2.0f, 0.25f, -3.0f, 1.5f, 1.0f, -0.5f, 0.0f, 2.5f};
    float s2[2 * 19];
    CHECK_OK(fathom_landmarks_scan(bulk, q, 2, 19, s2, &bytes));
    CHECK(bytes == 3 * DIM * 2);
    for (uint32_t h = 0; h < 2; h++)
        for (uint64_t i = 0; i < 19; i++) {
            double want = 0;
            for (uint32_t j = 0; j < DIM; j++)
                want += (double)q[h * DIM + j] * test_mean(keys, i / 8 * 8, 8, j);
            CHECK_NEAR(s2[h * 19 + i], want, 1e-5 * (1 + fabs(want)));
        }
    /* the open block's mean follows its tokens as they arrive */
    float extra[3 * DIM];
    for (uint64_t i = 0; i < 3; i++)
        for (uint32_t j = 0; j < DIM; j++) extra[i * DIM + j] = 100.0f + (float)(i + j);
    CHECK_OK(fathom_landmarks_append(stream, extra, 3));
    CHECK_OK(fathom_landmarks_scan(stream, unit, DIM, 32, sb, NULL));
    double want = 0;
    for (uint64_t i = 24; i < 29; i++) want += keys[i * DIM + 0];
    want = (want + 100 + 101 + 102) / 8;
    CHECK(sb[31] == fathom_f16_to_f32(fathom_f32_to_f16((float)want)));
    CHECK(sb[24] == sb[31]);
    fathom_landmarks_free(bulk);
    fathom_landmarks_free(stream);
}

static void test_bad_args(void) {
    fathom_landmarks *lm = (fathom_landmarks *)&lm;
    CHECK_STATUS(fathom_landmarks_create(NULL, 4), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_landmarks_create(&lm, 0), FATHOM_ERR_INVALID_ARG);
    CHECK(lm == NULL);
    CHECK_OK(fathom_landmarks_create(&lm, 2));
    float keys[6] = {1, 2, 3, 4, 5, 6}, q[2] = {1, 1}, s[3];
    CHECK_STATUS(fathom_landmarks_scan(lm, q, 1, 1, s, NULL), FATHOM_ERR_INVALID_ARG); /* empty */
    CHECK_STATUS(fathom_landmarks_append(NULL, keys, 1), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_landmarks_append(lm, NULL, 1), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_landmarks_append(lm, keys, 0), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_landmarks_append(lm, keys, UINT64_MAX), FATHOM_ERR_NOMEM);
    keys[3] = NAN;
    CHECK_STATUS(fathom_landmarks_append(lm, keys, 3), FATHOM_ERR_NONFINITE);
    CHECK(fathom_landmarks_length(lm) == 0);
    keys[3] = 4;
    CHECK_OK(fathom_landmarks_append(lm, keys, 3));
    CHECK_STATUS(fathom_landmarks_scan(NULL, q, 1, 3, s, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_landmarks_scan(lm, NULL, 1, 3, s, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_landmarks_scan(lm, q, 1, 3, NULL, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_landmarks_scan(lm, q, 0, 3, s, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_landmarks_scan(lm, q, 1, 0, s, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_landmarks_scan(lm, q, 1, 4, s, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_OK(fathom_landmarks_scan(lm, q, 1, 3, s, NULL));
    CHECK(s[0] == 7.0f && s[2] == 7.0f); /* mean (3, 4) */
    fathom_landmarks_free(lm);
    fathom_landmarks_free(NULL);
    CHECK(fathom_landmarks_length(NULL) == 0);
}

int main(void) {
    test_means_and_scores();
    test_bad_args();
    return check_summary("test_landmarks");
}

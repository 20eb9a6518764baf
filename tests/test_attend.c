/* attend: against a two-pass long-double reference (scores stored, max
 * subtracted, normalized weights), dense vs explicit rows, saturation,
 * odd and large dims, non-finite inputs, rel_l2 values, bad arguments. */
#include "check.h"
#include "fathom.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 777;
static double rng_normal(void) { /* Box-Muller on splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    double u1 = ((double)(z >> 11) + 1.0) / 9007199254740993.0;
    double u2 = (double)(z & 0xfffff) / 1048576.0;
    return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

static void reference(uint32_t dim, const float *q, const float *k, const float *v,
                      const uint32_t *idx, uint32_t count, double *out) {
    long double *s = malloc(count * sizeof *s), max = -INFINITY, sum = 0;
    for (uint32_t r = 0; r < count; r++) {
        const float *kr = k + (size_t)idx[r] * dim;
        long double dot = 0;
        for (uint32_t c = dim; c-- > 0;) dot += (long double)q[c] * kr[c]; /* reversed order */
        s[r] = dot / sqrtl(dim);
        if (s[r] > max) max = s[r];
    }
    for (uint32_t r = 0; r < count; r++) sum += (s[r] = expl(s[r] - max));
    for (uint32_t c = 0; c < dim; c++) {
        long double o = 0;
        for (uint32_t r = 0; r < count; r++) o += s[r] / sum * v[(size_t)idx[r] * dim + c];
        out[c] = (double)o;
    }
    free(s);
}

static void fill(float *x, size_t n, double scale) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(scale * rng_normal());
}

/* Random problem at this dim; returns the worst |out - ref| / max |v|. */
static double random_case(uint32_t dim, uint32_t n, uint32_t count, double qscale) {
    float *q = malloc(dim * sizeof *q), *k = malloc((size_t)n * dim * sizeof *k);
    float *v = malloc((size_t)n * dim * sizeof *v), *out = malloc(dim * sizeof *out);
    uint32_t *idx = malloc(count * sizeof *idx);
    double *ref = malloc(dim * sizeof *ref);
    fill(q, dim, qscale);
    fill(k, (size_t)n * dim, 1.0);
    fill(v, (size_t)n * dim, 1.0);
    for (uint32_t r = 0; r < count; r++) idx[r] = (uint32_t)((r * 7919u + 13) % n); /* any order */
    double worst = INFINITY;
    if (fathom_attend(dim, q, k, v, idx, count, out) == FATHOM_OK) {
        reference(dim, q, k, v, idx, count, ref);
        worst = 0;
        for (uint32_t c = 0; c < dim; c++) worst = fmax(worst, fabs(out[c] - ref[c]));
    }
    free(q), free(k), free(v), free(out), free(idx), free(ref);
    return worst;
}

static void test_against_reference(void) {
    /* Float output rounding is ~6e-8 relative; values are O(1), |v| <= ~5. */
    CHECK(random_case(128, 500, 300, 1.0) < 1e-6);
    CHECK(random_case(128, 500, 500, 3.0) < 1e-6);
    CHECK(random_case(7, 50, 13, 1.0) < 1e-6);
    CHECK(random_case(97, 200, 1, 1.0) < 1e-6);
    CHECK(random_case(600, 100, 64, 1.0) < 1e-6); /* heap accumulator */
    /* Scores in the thousands: exp without the max subtraction overflows. */
    CHECK(random_case(128, 300, 200, 5000.0) < 1e-6);
}

static void test_dense_and_exact_cases(void) {
    enum { D = 64, N = 200 };
    static float q[D], k[N * D], v[N * D], a[D], b[D];
    static uint32_t all[N];
    fill(q, D, 1), fill(k, N * D, 1), fill(v, N * D, 1);
    for (uint32_t i = 0; i < N; i++) all[i] = i;
    CHECK_OK(fathom_attend(D, q, k, v, NULL, N, a));
    CHECK_OK(fathom_attend(D, q, k, v, all, N, b));
    CHECK(!memcmp(a, b, sizeof a));

    /* One row: its value row exactly. */
    const uint32_t one[1] = {17};
    CHECK_OK(fathom_attend(D, q, k, v, one, 1, a));
    CHECK(!memcmp(a, v + 17 * D, sizeof a));

    /* Equal scores (q = 0): the plain mean of the rows. */
    const float q0[2] = {0, 0}, k2[4] = {1, 2, 3, 4}, v2[4] = {1, 10, 3, -20};
    float o[2];
    CHECK_OK(fathom_attend(2, q0, k2, v2, NULL, 2, o));
    CHECK(o[0] == 2.0f && o[1] == -5.0f);
    /* Known weights: q = (ln 3 * sqrt 2, 0), k rows (1,0),(0,0): softmax (3/4, 1/4). */
    const float q1[2] = {(float)(log(3.0) * sqrt(2.0)), 0}, k3[4] = {1, 0, 0, 0};
    CHECK_OK(fathom_attend(2, q1, k3, v2, NULL, 2, o));
    CHECK_NEAR(o[0], 0.75 * 1 + 0.25 * 3, 1e-6);
    CHECK_NEAR(o[1], 0.75 * 10 - 0.25 * 20, 1e-5);
    /* A repeated row counts twice: weights (2/3, 1/3) at equal scores. */
    const uint32_t twice[3] = {0, 0, 1};
    CHECK_OK(fathom_attend(2, q0, k2, v2, twice, 3, o));
    CHECK_NEAR(o[0], (1 + 1 + 3) / 3.0, 1e-6);

    /* Non-finite inputs. */
    float kn[4] = {1, NAN, 3, 4}, vn[4] = {1, 2, INFINITY, 4};
    CHECK_STATUS(fathom_attend(2, q1, kn, v2, NULL, 2, o), FATHOM_ERR_NONFINITE);
    CHECK_STATUS(fathom_attend(2, q0, k2, vn, NULL, 2, o), FATHOM_ERR_NONFINITE);

    /* Bad arguments. */
    CHECK_STATUS(fathom_attend(0, q0, k2, v2, NULL, 2, o), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_attend(2, q0, k2, v2, NULL, 0, o), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_attend(2, NULL, k2, v2, NULL, 2, o), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_attend(2, q0, NULL, v2, NULL, 2, o), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_attend(2, q0, k2, NULL, NULL, 2, o), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_attend(2, q0, k2, v2, NULL, 2, NULL), FATHOM_ERR_INVALID_ARG);
}

static void test_rel_l2(void) {
    const float a[2] = {1, 0}, b[2] = {0, 2}, z[3] = {0, 0, 0}, c[3] = {3, 4, 12};
    CHECK_NEAR(fathom_rel_l2(2, a, b), sqrt(5.0) / 2, 1e-15);
    CHECK(fathom_rel_l2(2, b, b) == 0.0);
    CHECK(fathom_rel_l2(2, z, z) == 0.0);
    CHECK(isinf(fathom_rel_l2(2, a, z)));
    CHECK(fathom_rel_l2(2, z, b) == 1.0);
    CHECK_NEAR(fathom_rel_l2(3, z, c), 1.0, 0);
    const float c2[3] = {3, 4, 12 + 13};
    CHECK_NEAR(fathom_rel_l2(3, c2, c), 1.0, 1e-15); /* |diff| = 13 = |c| */
    CHECK(isnan(fathom_rel_l2(0, a, b)));
    CHECK(isnan(fathom_rel_l2(2, NULL, b)));
    CHECK(isnan(fathom_rel_l2(2, a, NULL)));
    /* Large values do not overflow: squares are summed in double. */
    const float big[1] = {3e38f}, bigger[1] = {-3e38f};
    CHECK_NEAR(fathom_rel_l2(1, bigger, big), 2.0, 1e-12);
}

int main(void) {
    test_against_reference();
    test_dense_and_exact_cases();
    test_rel_l2();
    return check_summary("test_attend");
}

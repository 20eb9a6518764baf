/* plan: Appendix A golden values, exact breakpoints, the exact water-fill
 * against an independent marginal-value greedy, bisection against exact,
 * ties, zeros, greedy layer budgets and every bad argument. */
#include "check.h"
#include "fathom.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng_next(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double rng_uniform(void) { return (double)(rng_next() >> 11) / 9007199254740992.0; }

static int depths_equal(const uint8_t *a, const uint8_t *b, uint32_t n) { return !memcmp(a, b, n); }
static uint32_t depth_sum(const uint8_t *d, uint32_t n) {
    uint32_t s = 0;
    for (uint32_t j = 0; j < n; j++) s += d[j];
    return s;
}

/* Reference written differently: hand out planes one at a time, each to the
 * channel whose next plane has the largest marginal value g / 4^(t + 1/2)
 * (i.e. the score-error reduction per plane, up to a constant). Matches the
 * water-fill when no two breakpoints tie. */
static void greedy_planes(uint32_t dim, const double *g, uint32_t budget, uint8_t *t) {
    memset(t, 0, dim);
    for (uint32_t b = 0; b < budget; b++) {
        int best = -1;
        double best_value = 0.0;
        for (uint32_t j = 0; j < dim; j++) {
            if (t[j] >= 4 || g[j] <= 0) continue;
            double value = g[j] / pow(4.0, t[j] + 0.5);
            if (value > best_value) {
                best_value = value;
                best = (int)j;
            }
        }
        if (best < 0) return;
        t[best]++;
    }
}

static void test_appendix_a(void) {
    const float var[4] = {1.222f, 0.755f, 0.127f, 0.001f};
    const float queries[8] = {3, 1, 2, 0.1f, 1, 2, -1, 0.2f};
    double g[4];
    CHECK_OK(fathom_importance(4, 2, queries, var, g));
    CHECK_NEAR(g[0], 12.22, 1e-5);
    CHECK_NEAR(g[1], 3.775, 1e-5);
    CHECK_NEAR(g[2], 0.635, 1e-6);
    CHECK_NEAR(g[3], 0.00005, 1e-9);

    uint8_t d[4];
    double theta = -1;
    CHECK_OK(fathom_water_fill(4, g, 8, d, &theta));
    CHECK(depths_equal(d, (const uint8_t[]){4, 3, 1, 0}, 4));
    CHECK_NEAR(theta, 0.635 / 8, 1e-6); /* ≈ 0.0794: g_2's second breakpoint */
    CHECK_NEAR(fathom_depth_bits(4, d), 8.75, 1e-12);

    CHECK_OK(fathom_water_fill(4, g, 6, d, &theta));
    CHECK(depths_equal(d, (const uint8_t[]){3, 2, 1, 0}, 4));
    CHECK_NEAR(theta, 3.775 / 32, 1e-6);

    CHECK_OK(fathom_depths_at(4, g, 0.1, d));
    CHECK(depths_equal(d, (const uint8_t[]){3, 3, 1, 0}, 4));
    CHECK_OK(fathom_depths_at(4, g, 0.01, d));
    CHECK(depths_equal(d, (const uint8_t[]){4, 4, 3, 0}, 4));

    /* The paper's bisection lands just above the same breakpoint. */
    CHECK_OK(fathom_water_fill_bisect(4, g, 8, d, &theta));
    CHECK(depths_equal(d, (const uint8_t[]){4, 3, 1, 0}, 4));
    CHECK(theta > g[2] / 8 && theta < g[2] / 8 * (1 + 1e-6));
    CHECK_OK(fathom_water_fill_bisect(4, g, 6, d, NULL));
    CHECK(depths_equal(d, (const uint8_t[]){3, 2, 1, 0}, 4));
}

static void test_breakpoints_exact(void) {
    /* g = 8: breakpoints 4, 1, 1/4, 1/16; log4(8/4) = 1/2 rounds up to 1. */
    const double g[1] = {8.0};
    uint8_t t;
    const struct { double theta; uint8_t depth; } cases[] = {
        {4.0, 1}, {1.0, 2}, {0.25, 3}, {0.0625, 4}, {1e-300, 4}, {1e300, 0}, {8.0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK_OK(fathom_depths_at(1, g, cases[i].theta, &t));
        CHECK(t == cases[i].depth);
        /* Just above a breakpoint the channel loses that plane. */
        if (cases[i].depth > 0 && cases[i].theta >= 0.0625) {
            CHECK_OK(fathom_depths_at(1, g, nextafter(cases[i].theta, INFINITY), &t));
            CHECK(t == cases[i].depth - 1);
        }
    }
    CHECK_OK(fathom_depths_at(1, g, nextafter(4.0, INFINITY), &t));
    CHECK(t == 0);

    /* Away from breakpoints, the closed form clip(round(log4(g/theta)), 0, 4). */
    int bad = 0;
    for (int i = 0; i < 20000; i++) {
        double gi = pow(10.0, 8 * rng_uniform() - 4), theta = pow(10.0, 10 * rng_uniform() - 5);
        double x = log(gi / theta) / log(4.0);
        if (fabs(x - floor(x) - 0.5) < 1e-9) continue;
        double r = floor(x + 0.5);
        uint8_t want = r < 0 ? 0 : r > 4 ? 4 : (uint8_t)r;
        CHECK_OK(fathom_depths_at(1, &gi, theta, &t));
        bad += t != want;
    }
    CHECK(bad == 0);
}

static void test_random_water_fill(void) {
    enum { DIM = 128, VECTORS = 1000 };
    double g[DIM];
    uint8_t exact[DIM], bisect[DIM], ref[DIM], at[DIM];
    int bad_sum = 0, bad_max = 0, bad_ref = 0, bad_bisect = 0, bad_theta = 0;
    for (int v = 0; v < VECTORS; v++) {
        for (int j = 0; j < DIM; j++) g[j] = pow(10.0, 8 * rng_uniform() - 4);
        uint32_t budget = 8 + (uint32_t)(rng_next() % 505); /* 8..512 */
        double theta, theta_b;
        CHECK_OK(fathom_water_fill(DIM, g, budget, exact, &theta));
        CHECK_OK(fathom_water_fill_bisect(DIM, g, budget, bisect, &theta_b));
        uint32_t sum = depth_sum(exact, DIM);
        bad_sum += sum > budget;
        if (theta > 0) {
            /* Maximal: the next breakpoint group (at theta) would exceed B... */
            CHECK_OK(fathom_depths_at(DIM, g, theta, at));
            bad_max += depth_sum(at, DIM) <= budget;
            /* ...and the depths are those just above theta. */
            CHECK_OK(fathom_depths_at(DIM, g, nextafter(theta, INFINITY), at));
            bad_theta += !depths_equal(at, exact, DIM);
        } else {
            bad_max += sum != 4 * DIM; /* theta 0 only when all fit */
        }
        greedy_planes(DIM, g, budget, ref);
        bad_ref += !depths_equal(ref, exact, DIM);
        bad_bisect += !depths_equal(bisect, exact, DIM);
        bad_bisect += depth_sum(bisect, DIM) > budget;
    }
    CHECK(bad_sum == 0);
    CHECK(bad_max == 0);
    CHECK(bad_theta == 0);
    CHECK(bad_ref == 0);
    CHECK(bad_bisect == 0);

    /* Budget at or above 4*dim: everything at depth 4, theta 0. */
    double theta = -1;
    CHECK_OK(fathom_water_fill(DIM, g, 4 * DIM, exact, &theta));
    CHECK(depth_sum(exact, DIM) == 4 * DIM && theta == 0.0);
    CHECK_OK(fathom_water_fill_bisect(DIM, g, 4 * DIM + 7, bisect, &theta));
    CHECK(depth_sum(bisect, DIM) == 4 * DIM && theta == 0.0);
    /* Budget 0: nothing read, theta is the largest breakpoint. */
    CHECK_OK(fathom_water_fill(DIM, g, 0, exact, &theta));
    double gmax = 0;
    for (int j = 0; j < DIM; j++) gmax = g[j] > gmax ? g[j] : gmax;
    CHECK(depth_sum(exact, DIM) == 0 && theta == gmax / 2);
    CHECK_OK(fathom_water_fill_bisect(DIM, g, 0, bisect, NULL));
    CHECK(depth_sum(bisect, DIM) == 0);
}

static void test_ties_and_zeros(void) {
    /* Breakpoints: g=4: 2, .5, .125, .03125; g=1: .5, .125, .03125, .0078125. */
    const double g[3] = {4, 4, 1};
    const struct { uint32_t budget; uint8_t d[3]; double theta; } cases[] = {
        {0, {0, 0, 0}, 2},        {1, {0, 0, 0}, 2},     {2, {1, 1, 0}, 0.5},
        {3, {1, 1, 0}, 0.5},      {4, {1, 1, 0}, 0.5},   {5, {2, 2, 1}, 0.125},
        {7, {2, 2, 1}, 0.125},    {8, {3, 3, 2}, 0.03125}, {10, {3, 3, 2}, 0.03125},
        {11, {4, 4, 3}, 0.0078125}, {12, {4, 4, 4}, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t d[3], b[3];
        double theta = -1;
        CHECK_OK(fathom_water_fill(3, g, cases[i].budget, d, &theta));
        CHECK(depths_equal(d, cases[i].d, 3));
        CHECK(theta == cases[i].theta);
        CHECK_OK(fathom_water_fill_bisect(3, g, cases[i].budget, b, NULL));
        CHECK(depths_equal(b, cases[i].d, 3));
    }

    /* Zero and negative importance are never read, at any budget. */
    const double gz[4] = {0, 5, 0, -1};
    uint8_t d[4];
    double theta;
    CHECK_OK(fathom_water_fill(4, gz, 2, d, &theta));
    CHECK(depths_equal(d, (const uint8_t[]){0, 2, 0, 0}, 4));
    CHECK(theta == 5.0 / 32);
    CHECK_OK(fathom_water_fill(4, gz, 100, d, &theta));
    CHECK(depths_equal(d, (const uint8_t[]){0, 4, 0, 0}, 4) && theta == 0);
    CHECK_OK(fathom_water_fill_bisect(4, gz, 3, d, NULL));
    CHECK(depths_equal(d, (const uint8_t[]){0, 3, 0, 0}, 4));
    CHECK_OK(fathom_depths_at(4, gz, 1e-30, d));
    CHECK(depths_equal(d, (const uint8_t[]){0, 4, 0, 0}, 4));
    const double all_zero[2] = {0, 0};
    CHECK_OK(fathom_water_fill(2, all_zero, 0, d, &theta));
    CHECK(d[0] == 0 && d[1] == 0 && theta == 0);
    CHECK_OK(fathom_water_fill_bisect(2, all_zero, 5, d, &theta));
    CHECK(d[0] == 0 && d[1] == 0 && theta == 0);

    /* A negative variance (round-off eigenvalue) gives g < 0: depth 0. */
    const float q[2] = {1, 1}, var[2] = {-1e-9f, 2};
    double gi[2];
    CHECK_OK(fathom_importance(2, 1, q, var, gi));
    CHECK(gi[0] < 0 && gi[1] == 2);
}

static void test_depth_bits(void) {
    uint8_t d[128];
    memset(d, 4, sizeof d);
    CHECK(fathom_depth_bits(128, d) == 544.0); /* full4 */
    memset(d, 2, sizeof d);
    CHECK(fathom_depth_bits(128, d) == 288.0); /* thumb */
    memset(d, 0, sizeof d);
    CHECK(fathom_depth_bits(128, d) == 0.0);
    d[5] = 1;
    d[9] = 3;
    CHECK(fathom_depth_bits(128, d) == 4.5);
    d[0] = 5;
    CHECK(isnan(fathom_depth_bits(128, d)));
    CHECK(isnan(fathom_depth_bits(0, d)));
    CHECK(isnan(fathom_depth_bits(4, NULL)));
}

static void test_greedy(void) {
    const uint32_t levels[4] = {24, 32, 48, 64};
    /* Gains per bit from level 0: L0 .5, L1 .125, L2 0 (blocked although its
     * next step would drop 4). Expected moves: L0->32, L1->32, L1->48
     * (gain 9/16), then L0 and L1 tie at 1/16 and the lower layer wins the
     * last 16 bits: (48, 48, 24), mean exactly 40. */
    const double err[12] = {10, 6, 5, 4.9, 20, 19, 10, 9, 5, 5, 1, 0};
    uint32_t b[3];
    CHECK_OK(fathom_greedy_layer_budgets(3, levels, 4, err, 40.0, b));
    CHECK(b[0] == 48 && b[1] == 48 && b[2] == 24);
    CHECK_OK(fathom_greedy_layer_budgets(3, levels, 4, err, 24.0, b));
    CHECK(b[0] == 24 && b[1] == 24 && b[2] == 24);
    CHECK_OK(fathom_greedy_layer_budgets(3, levels, 4, err, 1000.0, b));
    CHECK(b[0] == 64 && b[1] == 64 && b[2] == 24); /* L2 never moves */

    /* A best move that does not fit is skipped, not the end: L1's 16-bit
     * step (gain .3125) does not fit in the last 8 bits, L0's 8-bit one does. */
    const double err2[8] = {10, 9, 1, 0, 10, 5, 0, 0};
    CHECK_OK(fathom_greedy_layer_budgets(2, levels, 4, err2, 32.0, b));
    CHECK(b[0] == 32 && b[1] == 32);
    CHECK_OK(fathom_greedy_layer_budgets(2, levels, 4, err2, 31.9, b));
    CHECK(b[0] == 24 && b[1] == 32);

    /* One level: everyone stays there. */
    CHECK_OK(fathom_greedy_layer_budgets(2, levels, 1, err2, 100, b));
    CHECK(b[0] == 24 && b[1] == 24);

    const uint32_t unsorted[3] = {24, 24, 48};
    double nan_err[12];
    memcpy(nan_err, err, sizeof nan_err);
    nan_err[7] = NAN;
    CHECK_STATUS(fathom_greedy_layer_budgets(0, levels, 4, err, 40, b), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_greedy_layer_budgets(3, levels, 0, err, 40, b), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_greedy_layer_budgets(3, NULL, 4, err, 40, b), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_greedy_layer_budgets(3, levels, 4, NULL, 40, b), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_greedy_layer_budgets(3, levels, 4, err, 40, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_greedy_layer_budgets(1, unsorted, 3, err, 40, b), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_greedy_layer_budgets(3, levels, 4, err, 23.5, b), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_greedy_layer_budgets(3, levels, 4, err, NAN, b), FATHOM_ERR_NONFINITE);
    CHECK_STATUS(fathom_greedy_layer_budgets(3, levels, 4, nan_err, 40, b), FATHOM_ERR_NONFINITE);
}

static void test_bad_args(void) {
    const float q[4] = {1, 2, 3, 4}, var[4] = {1, 1, 1, 1};
    const float q_nan[4] = {1, NAN, 3, 4}, var_inf[4] = {1, 1, INFINITY, 1};
    double g[4] = {1, 2, 3, 4};
    const double g_nan[4] = {1, NAN, 3, 4}, g_inf[4] = {1, 2, INFINITY, 4};
    uint8_t d[4];
    CHECK_STATUS(fathom_importance(0, 1, q, var, g), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_importance(4, 0, q, var, g), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_importance(4, 1, NULL, var, g), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_importance(4, 1, q, NULL, g), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_importance(4, 1, q, var, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_importance(4, 1, q_nan, var, g), FATHOM_ERR_NONFINITE);
    CHECK_STATUS(fathom_importance(4, 1, q, var_inf, g), FATHOM_ERR_NONFINITE);
    /* The largest finite inputs stay finite in double: (3.4e38)^3 < 1e116. */
    const float huge[1] = {3.4e38f};
    CHECK_OK(fathom_importance(1, 1, huge, huge, g));
    CHECK(isfinite(g[0]) && g[0] > 3.9e115);

    CHECK_STATUS(fathom_depths_at(0, g, 1, d), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_depths_at(4, NULL, 1, d), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_depths_at(4, g, 1, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_depths_at(4, g, 0, d), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_depths_at(4, g, -1, d), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_depths_at(4, g, NAN, d), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_depths_at(4, g_nan, 1, d), FATHOM_ERR_NONFINITE);

    int (*fills[2])(uint32_t, const double *, uint32_t, uint8_t *, double *) = {
        fathom_water_fill, fathom_water_fill_bisect};
    for (int i = 0; i < 2; i++) {
        CHECK_STATUS(fills[i](0, g, 8, d, NULL), FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fills[i](4, NULL, 8, d, NULL), FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fills[i](4, g, 8, NULL, NULL), FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fills[i](4, g_nan, 8, d, NULL), FATHOM_ERR_NONFINITE);
        CHECK_STATUS(fills[i](4, g_inf, 8, d, NULL), FATHOM_ERR_NONFINITE);
    }
    CHECK(strlen(fathom_last_error()) > 0);
}

int main(void) {
    test_appendix_a();
    test_breakpoints_exact();
    test_random_water_fill();
    test_ties_and_zeros();
    test_depth_bits();
    test_greedy();
    test_bad_args();
    return check_summary("test_plan");
}

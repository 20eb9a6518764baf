/* plan — channel importance and reverse water-filling (paper §3.3, §3.4).
 *
 * Reading t planes of channel j leaves a score error proportional to
 * g_j 4^-t, so minimizing sum_j g_j 4^-t_j under sum_j t_j <= B is reverse
 * water-filling with the integer solution t_j = clip(round(log4(g_j/theta)),
 * 0, 4). Rounding half up, t_j >= m exactly when theta <= g_j / 4^(m-1/2):
 * every channel has four breakpoints g_j/2, g_j/8, g_j/32, g_j/128 and its
 * depth is the number of them at or above theta. Everything below works on
 * those breakpoints, computed one way (ldexp, exact for normal numbers), so
 * fathom_depths_at and the water line of fathom_water_fill agree bit for bit.
 */
#include "internal.h"

#include <math.h>
#include <stdlib.h>

/* g / 4^(m - 1/2) = g * 2^(1 - 2m), m = 1..4. */
static double breakpoint(double g, int m) { return ldexp(g, 1 - 2 * m); }

static uint8_t depth_at(double g, double theta) {
    uint8_t t = 0;
    if (!(g > 0.0)) return 0;
    for (int m = 1; m <= FATHOM_MAX_DEPTH; m++)
        if (theta <= breakpoint(g, m)) t++;
    return t;
}

static int check_importance(uint32_t dim, const double *g) {
    for (uint32_t j = 0; j < dim; j++)
        FATHOM_CHECK(!isfinite(g[j]), FATHOM_ERR_NONFINITE, "importance g[%u] is not finite", j);
    return FATHOM_OK;
}

int fathom_importance(uint32_t dim, uint32_t group, const float *queries, const float *var,
                      double *g) {
    FATHOM_CHECK_ARG(dim > 0, "fathom_importance: dim is 0");
    FATHOM_CHECK_ARG(group > 0, "fathom_importance: group is 0");
    FATHOM_CHECK_ARG(queries && var && g, "fathom_importance: NULL pointer");
    for (uint32_t j = 0; j < dim; j++)
        FATHOM_CHECK(!isfinite(var[j]), FATHOM_ERR_NONFINITE, "fathom_importance: var[%u] is not finite",
                     j);
    for (uint64_t i = 0; i < (uint64_t)group * dim; i++)
        FATHOM_CHECK(!isfinite(queries[i]), FATHOM_ERR_NONFINITE,
                     "fathom_importance: query value %llu is not finite", (unsigned long long)i);
    for (uint32_t j = 0; j < dim; j++) {
        double q2 = 0.0;
        for (uint32_t h = 0; h < group; h++) {
            double q = queries[(uint64_t)h * dim + j];
            q2 += q * q;
        }
        /* A round-off negative eigenvalue gives g <= 0: that channel is never read. */
        g[j] = q2 * (double)var[j]; /* finite: float^3 * group stays far below DBL_MAX */
    }
    return FATHOM_OK;
}

int fathom_depths_at(uint32_t dim, const double *g, double theta, uint8_t *depths) {
    FATHOM_CHECK_ARG(dim > 0, "fathom_depths_at: dim is 0");
    FATHOM_CHECK_ARG(g && depths, "fathom_depths_at: NULL pointer");
    FATHOM_CHECK_ARG(theta > 0.0, "fathom_depths_at: theta must be > 0 (got %g)", theta);
    FATHOM_TRY(check_importance(dim, g));
    for (uint32_t j = 0; j < dim; j++) depths[j] = depth_at(g[j], theta);
    return FATHOM_OK;
}

static int compare_descending(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

/* Positive breakpoints only: a breakpoint that underflows to 0 is below every
 * theta > 0 and can never be reached. */
static uint64_t count_positive_breakpoints(uint32_t dim, const double *g) {
    uint64_t n = 0;
    for (uint32_t j = 0; j < dim; j++)
        for (int m = 1; m <= FATHOM_MAX_DEPTH; m++)
            if (breakpoint(g[j], m) > 0.0) n++;
    return n;
}

/* Every positive breakpoint fits: depth = number of positive breakpoints
 * (4 for any normal g > 0), the water line is 0. */
static void fill_all(uint32_t dim, const double *g, uint8_t *depths, double *theta) {
    for (uint32_t j = 0; j < dim; j++) {
        uint8_t t = 0;
        for (int m = 1; m <= FATHOM_MAX_DEPTH; m++)
            if (breakpoint(g[j], m) > 0.0) t++;
        depths[j] = t;
    }
    if (theta) *theta = 0.0;
}

#define WATER_FILL_STACK_BREAKPOINTS 1024

int fathom_water_fill(uint32_t dim, const double *g, uint32_t budget, uint8_t *depths,
                      double *theta) {
    FATHOM_CHECK_ARG(dim > 0, "fathom_water_fill: dim is 0");
    FATHOM_CHECK_ARG(g && depths, "fathom_water_fill: NULL pointer");
    FATHOM_TRY(check_importance(dim, g));

    uint64_t n = count_positive_breakpoints(dim, g);
    if (n <= budget) {
        fill_all(dim, g, depths, theta);
        return FATHOM_OK;
    }
    double stack_points[WATER_FILL_STACK_BREAKPOINTS];
    double *points = stack_points;
    if (n > WATER_FILL_STACK_BREAKPOINTS) {
        points = fathom_alloc_array(n, sizeof *points);
        FATHOM_CHECK(!points, FATHOM_ERR_NOMEM, "fathom_water_fill: %llu breakpoints",
                     (unsigned long long)n);
    }
    uint64_t i = 0;
    for (uint32_t j = 0; j < dim; j++)
        for (int m = 1; m <= FATHOM_MAX_DEPTH; m++) {
            double b = breakpoint(g[j], m);
            if (b > 0.0) points[i++] = b;
        }
    qsort(points, (size_t)n, sizeof *points, compare_descending);
    /* points[budget] is the first breakpoint that does not fit: the channels
     * above it take budget planes or fewer (fewer when it ties with earlier
     * ones, which then stay out with it). Depths just above that line are the
     * breakpoints strictly greater than it. */
    double line = points[budget];
    if (points != stack_points) free(points);
    for (uint32_t j = 0; j < dim; j++) {
        uint8_t t = 0;
        for (int m = 1; m <= FATHOM_MAX_DEPTH; m++)
            if (breakpoint(g[j], m) > line) t++;
        depths[j] = t;
    }
    if (theta) *theta = line;
    return FATHOM_OK;
}

static uint64_t planes_at(uint32_t dim, const double *g, double theta) {
    uint64_t sum = 0;
    for (uint32_t j = 0; j < dim; j++) sum += depth_at(g[j], theta);
    return sum;
}

int fathom_water_fill_bisect(uint32_t dim, const double *g, uint32_t budget, uint8_t *depths,
                             double *theta) {
    FATHOM_CHECK_ARG(dim > 0, "fathom_water_fill_bisect: dim is 0");
    FATHOM_CHECK_ARG(g && depths, "fathom_water_fill_bisect: NULL pointer");
    FATHOM_TRY(check_importance(dim, g));

    /* Bracket: at hi = max g every channel is at depth 0 (g/2 < g); at lo =
     * the smallest positive breakpoint every breakpoint is in, which exceeds
     * the budget unless everything fits. */
    double hi = 0.0, lo = INFINITY;
    for (uint32_t j = 0; j < dim; j++) {
        if (g[j] > hi) hi = g[j];
        for (int m = 1; m <= FATHOM_MAX_DEPTH; m++) {
            double b = breakpoint(g[j], m);
            if (b > 0.0 && b < lo) lo = b;
        }
    }
    if (count_positive_breakpoints(dim, g) <= budget) {
        fill_all(dim, g, depths, theta);
        return FATHOM_OK;
    }
    /* Invariant: planes_at(hi) <= budget < planes_at(lo). */
    for (int step = 0; step < FATHOM_BISECT_STEPS; step++) {
        double mid = sqrt(lo) * sqrt(hi); /* geometric midpoint, no overflow */
        if (!(mid > lo && mid < hi)) break;
        if (planes_at(dim, g, mid) <= budget)
            hi = mid;
        else
            lo = mid;
    }
    for (uint32_t j = 0; j < dim; j++) depths[j] = depth_at(g[j], hi);
    if (theta) *theta = hi;
    return FATHOM_OK;
}

double fathom_depth_bits(uint32_t dim, const uint8_t *depths) {
    if (dim == 0 || !depths) {
        fathom_fail(FATHOM_ERR_INVALID_ARG, "fathom_depth_bits: %s", dim ? "NULL depths" : "dim is 0");
        return NAN;
    }
    uint64_t code = 0, active = 0;
    for (uint32_t j = 0; j < dim; j++) {
        if (depths[j] > FATHOM_MAX_DEPTH) {
            fathom_fail(FATHOM_ERR_INVALID_ARG, "fathom_depth_bits: depths[%u] = %u > %d", j,
                        depths[j], FATHOM_MAX_DEPTH);
            return NAN;
        }
        code += depths[j];
        active += depths[j] > 0;
    }
    /* §4: one fp16 scale per 64 tokens for every channel read. */
    return (double)code + (double)active * (16.0 / FATHOM_BLOCK_TOKENS);
}

/*
 * Greedy per-layer budgets (§3.4). Each step considers, for every layer not
 * at its last level, the move to its next level: its gain is the error drop
 * per bit (err[i] - err[i+1]) / (levels[i+1] - levels[i]). Only moves with a
 * positive drop that keep the total within target_mean * layers are
 * candidates; the largest gain wins (ties: lower layer). A move that does not
 * fit is skipped, not a reason to stop, so a cheaper move of another layer
 * can still use the remaining bits. A layer whose next step does not lower
 * its error stays where it is, even if a later level would (the greedy rule
 * looks one level ahead).
 */
int fathom_greedy_layer_budgets(uint32_t layers, const uint32_t *levels, uint32_t n_levels,
                                const double *err, double target_mean, uint32_t *budgets_out) {
    FATHOM_CHECK_ARG(layers > 0, "fathom_greedy_layer_budgets: layers is 0");
    FATHOM_CHECK_ARG(n_levels > 0, "fathom_greedy_layer_budgets: n_levels is 0");
    FATHOM_CHECK_ARG(levels && err && budgets_out, "fathom_greedy_layer_budgets: NULL pointer");
    FATHOM_CHECK(!isfinite(target_mean), FATHOM_ERR_NONFINITE,
                 "fathom_greedy_layer_budgets: target_mean is not finite");
    for (uint32_t i = 1; i < n_levels; i++)
        FATHOM_CHECK_ARG(levels[i] > levels[i - 1],
                         "fathom_greedy_layer_budgets: levels must be strictly ascending "
                         "(levels[%u] = %u, levels[%u] = %u)",
                         i - 1, levels[i - 1], i, levels[i]);
    FATHOM_CHECK_ARG(target_mean >= (double)levels[0],
                     "fathom_greedy_layer_budgets: target_mean %g is below the lowest level %u",
                     target_mean, levels[0]);
    uint64_t cells;
    FATHOM_CHECK(!fathom_mul_u64(layers, n_levels, &cells), FATHOM_ERR_NOMEM,
                 "fathom_greedy_layer_budgets: table size overflows");
    for (uint64_t c = 0; c < cells; c++)
        FATHOM_CHECK(!isfinite(err[c]), FATHOM_ERR_NONFINITE,
                     "fathom_greedy_layer_budgets: err[%llu] is not finite", (unsigned long long)c);

    /* budgets_out holds each layer's level index while the loop runs. */
    for (uint32_t l = 0; l < layers; l++) budgets_out[l] = 0;
    const double allowed = target_mean * (double)layers;
    uint64_t total = (uint64_t)levels[0] * layers; /* < 2^64: both factors < 2^32 */
    for (;;) {
        uint32_t best = UINT32_MAX;
        double best_gain = 0.0;
        for (uint32_t l = 0; l < layers; l++) {
            uint32_t i = budgets_out[l];
            if (i + 1 >= n_levels) continue;
            uint32_t step = levels[i + 1] - levels[i];
            if ((double)(total + step) > allowed) continue;
            const double *row = err + (uint64_t)l * n_levels;
            double gain = (row[i] - row[i + 1]) / step;
            if (gain > best_gain) {
                best_gain = gain;
                best = l;
            }
        }
        if (best == UINT32_MAX) break;
        uint32_t i = budgets_out[best];
        total += levels[i + 1] - levels[i];
        budgets_out[best] = i + 1;
    }
    for (uint32_t l = 0; l < layers; l++) budgets_out[l] = levels[budgets_out[l]];
    return FATHOM_OK;
}

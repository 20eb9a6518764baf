/* attend — exact softmax attention over a selected set of rows, the
 * reference every method's error is measured against (§4).
 *
 * One pass with a running maximum (online softmax): each row's weight is
 * exp(s - max so far), and when the maximum rises the accumulated sums are
 * rescaled, so no exp overflows and no score buffer is needed. Dot products,
 * weights and sums are all double; only the output is rounded to float.
 */
#include "cpu.h"
#include "internal.h"

#include <math.h>
#include <stdlib.h>

#define ATTEND_STACK_DIM 512

/* q.k in double with eight partial sums: a fixed order (deterministic) that
 * the compiler can keep in vector registers. */
FATHOM_INLINE double dot_double_body(const float *q, const float *k, uint32_t dim) {
    double part[8] = {0};
    uint32_t c = 0;
    for (; c + 8 <= dim; c += 8)
        for (uint32_t l = 0; l < 8; l++) part[l] += (double)q[c + l] * k[c + l];
    double s = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
    for (; c < dim; c++) s += (double)q[c] * k[c];
    return s;
}
FATHOM_CPU_DISPATCH(double, dot_double, (const float *q, const float *k, uint32_t dim), (q, k, dim))

int fathom_attend(uint32_t dim, const float *query, const float *keys, const float *values,
                  const uint32_t *idx, uint64_t count, float *out) {
    FATHOM_CHECK_ARG(dim > 0, "fathom_attend: dim is 0");
    FATHOM_CHECK_ARG(count > 0, "fathom_attend: count is 0 (softmax over no rows)");
    FATHOM_CHECK_ARG(query && keys && values && out, "fathom_attend: NULL pointer");

    double stack_acc[ATTEND_STACK_DIM];
    double *acc = stack_acc;
    if (dim > ATTEND_STACK_DIM) {
        acc = fathom_alloc_array(dim, sizeof *acc);
        FATHOM_CHECK(!acc, FATHOM_ERR_NOMEM, "fathom_attend: accumulator of %u doubles", dim);
    }
    for (uint32_t c = 0; c < dim; c++) acc[c] = 0.0;

    const double scale = 1.0 / sqrt((double)dim);
    double max = -INFINITY, denom = 0.0;
    int status = FATHOM_OK;
    for (uint64_t r = 0; r < count; r++) {
        uint64_t row = idx ? idx[r] : r;
        const float *k = keys + row * dim;
        const float *v = values + row * dim;
        double s = dot_double(query, k, dim) * scale;
        if (!isfinite(s)) {
            status = fathom_fail(FATHOM_ERR_NONFINITE, "fathom_attend: score of row %llu is not finite",
                                 (unsigned long long)row);
            goto done;
        }
        if (s > max) {
            double shrink = exp(max - s); /* 0 on the first row */
            denom *= shrink;
            for (uint32_t c = 0; c < dim; c++) acc[c] *= shrink;
            max = s;
        }
        double w = exp(s - max);
        denom += w;
        for (uint32_t c = 0; c < dim; c++) acc[c] += w * v[c];
    }
    /* denom >= 1: the row holding the maximum contributes exp(0). */
    for (uint32_t c = 0; c < dim; c++) {
        double o = acc[c] / denom;
        if (!isfinite(o) || fabs(o) > 3.4028234663852886e38) {
            status = fathom_fail(FATHOM_ERR_NONFINITE, "fathom_attend: output %u is not finite "
                                                       "(non-finite values?)", c);
            goto done;
        }
        out[c] = (float)o;
    }
done:
    if (acc != stack_acc) free(acc);
    return status;
}

/* Squares of floats are at most ~1e77, so double sums cannot overflow.
 * Invalid arguments give NaN (and a message), which poisons any mean. */
double fathom_rel_l2(uint32_t dim, const float *a, const float *b) {
    if (dim == 0 || !a || !b) {
        fathom_fail(FATHOM_ERR_INVALID_ARG, "fathom_rel_l2: %s", dim ? "NULL pointer" : "dim is 0");
        return NAN;
    }
    double diff = 0.0, norm = 0.0;
    for (uint32_t c = 0; c < dim; c++) {
        double d = (double)a[c] - (double)b[c];
        diff += d * d;
        norm += (double)b[c] * b[c];
    }
    if (norm == 0.0) return diff == 0.0 ? 0.0 : INFINITY;
    return sqrt(diff / norm);
}

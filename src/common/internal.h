/* Internal helpers shared by the library's modules. Not installed. */
#ifndef FATHOM_INTERNAL_H
#define FATHOM_INTERNAL_H

#include "fathom.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define FATHOM_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define FATHOM_PRINTF(a, b)
#endif

/* Record a message for fathom_last_error() and return status. */
int fathom_fail(int status, const char *fmt, ...) FATHOM_PRINTF(2, 3);

/* Return an error with a message when cond holds. */
#define FATHOM_CHECK(cond, status, ...)                                                            \
    do {                                                                                           \
        if (cond) return fathom_fail((status), __VA_ARGS__);                                      \
    } while (0)

#define FATHOM_CHECK_ARG(cond, ...) FATHOM_CHECK(!(cond), FATHOM_ERR_INVALID_ARG, __VA_ARGS__)

/* Forward a failing status unchanged (the callee set the message). */
#define FATHOM_TRY(expr)                                                                           \
    do {                                                                                           \
        int fathom_try_status_ = (expr);                                                           \
        if (fathom_try_status_ < 0) return fathom_try_status_;                                     \
    } while (0)

/* Overflow-checked size arithmetic: false on overflow. */
static inline bool fathom_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool fathom_add_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* malloc/calloc of count*size with overflow check; NULL on failure. */
void *fathom_alloc_array(uint64_t count, uint64_t size);
void *fathom_calloc_array(uint64_t count, uint64_t size);

/* Number of worker threads for "0 = one per core". */
uint32_t fathom_default_threads(void);

/* ---- calib.c: channel choices and calibration statistics shared by the
 * fidelity harness and the decoder ---- */

#define FATHOM_BASIS_MAX_KEYS 16384 /* calibration keys per KLT fit (evenly strided) */

/* Population variance of each channel of rows [n x dim] (two passes, double). */
void fathom_channel_variance(uint32_t dim, const float *rows, uint64_t n, float *var);
/* depths[j] = depth for the `count` largest value[j] (ties to the lower index), else 0. */
void fathom_top_channels(uint32_t dim, const double *value, uint32_t count, uint8_t *depths, uint8_t depth);
/* SparQ's GQA rule (§2): depth 4 on the r channels with the largest sum_h |q_j|
 * of the group's queries [group x dim]; scratch holds dim doubles. */
void fathom_sparq_depths(uint32_t dim, uint32_t group, const float *queries, uint32_t r, double *scratch,
                         uint8_t *depths);
/* Double Sparsity: depth 4 on the c channels with the largest mean|q| * mean|k|
 * over calibration keys [n x dim] and queries [q_rows x dim]. */
int fathom_ds_depths(uint32_t dim, const float *keys, uint64_t n, const float *queries, uint64_t q_rows,
                     uint32_t channels, uint8_t *depths);
/* fathom_basis_fit on at most FATHOM_BASIS_MAX_KEYS evenly strided keys. */
int fathom_basis_fit_strided(fathom_basis **out, uint32_t dim, const float *keys, uint64_t n,
                             const float *queries, uint64_t q_rows);

/* What the index-based scorers read for one KV head; a field a method does
 * not use may be NULL. */
typedef struct fathom_scorer_index {
    const fathom_store *store;         /* raw-channel planes: fathom, sparq, ds, thumb, full4 */
    const fathom_store *rotated;       /* planes of (k - mean)V: fathom-klt, loki */
    const fathom_basis *basis;         /* the rotation (fathom-klt, loki) */
    const fathom_landmarks *landmarks; /* landmark */
    const float *variance;             /* [dim] Var(k_j) for fathom's plan */
    const uint8_t *ds_depths;          /* [dim] Double Sparsity's fixed channels */
} fathom_scorer_index;

/* Scratch of fathom_method_scores: g [dim], qrot [group x dim], depths [dim]. */
typedef struct fathom_scorer_scratch {
    double *g;
    float *qrot;
    uint8_t *depths;
} fathom_scorer_scratch;

/* Approximate scores [group x n] of the group's queries q [group x dim] for
 * every index-based method (not oracle or dense, whose exact scores each
 * caller computes its own way). *bits gets the bits per token the method
 * read (NULL: not wanted), *bytes the bytes (NULL: not wanted); after a
 * plane scan, scratch->depths holds the depths it read. */
int fathom_method_scores(const fathom_method *m, uint32_t budget, const fathom_scorer_index *ix,
                         uint32_t dim, uint32_t group, const float *q, uint64_t n, float *scores,
                         fathom_scorer_scratch *scratch, double *bits, uint64_t *bytes);

#endif /* FATHOM_INTERNAL_H */

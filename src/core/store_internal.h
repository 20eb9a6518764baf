/* Internal hooks of the store module, for tests and benchmarks. Not installed. */
#ifndef FATHOM_STORE_INTERNAL_H
#define FATHOM_STORE_INTERNAL_H

#include "fathom.h"

/* Which implementation of fathom_store_scan runs. */
typedef enum fathom_scan_kernel {
    FATHOM_SCAN_AUTO = 0,  /* what fathom_store_scan uses: the fastest this CPU supports */
    FATHOM_SCAN_REFERENCE, /* plain per-token loop, double accumulation: the one to read */
    FATHOM_SCAN_PORTABLE,  /* the fast kernel compiled for the baseline ISA */
    FATHOM_SCAN_AVX2,      /* AVX2+FMA+F16C intrinsics (x86-64 only) */
    FATHOM_SCAN_AVX512     /* AVX-512F intrinsics (x86-64 only) */
} fathom_scan_kernel;

/* 1 when this build and CPU can run the kernel, else 0. */
int fathom_scan_kernel_available(fathom_scan_kernel kernel);

/* fathom_store_scan with a chosen kernel; FATHOM_ERR_UNSUPPORTED if it is not
 * available. Same arguments, checks, results (up to float summation order)
 * and bytes_read. */
int fathom_store_scan_with(fathom_scan_kernel kernel, const fathom_store *store,
                           const uint8_t *depths, const float *queries, uint32_t group, uint64_t n,
                           float *scores, uint64_t *bytes_read);

/* The reference scan: scores[h*n + i] = sum_j q_hj * decode(i, j, depths[j]),
 * token by token, accumulated in double. */
int fathom_store_scan_reference(const fathom_store *store, const uint8_t *depths,
                                const float *queries, uint32_t group, uint64_t n, float *scores,
                                uint64_t *bytes_read);

/* The running sums fathom_store_append keeps, [dim] each: shift (the first
 * stored row), sum and sum of squares of (row - shift). For tests that
 * compare another encoder byte for byte. NULL store: all NULL. */
void fathom_store_sums(const fathom_store *store, const double **shift, const double **sum,
                       const double **sum_sq);

#endif /* FATHOM_STORE_INTERNAL_H */

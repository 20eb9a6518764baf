/* Internal hooks of the store module, for tests and benchmarks. Not installed. */
#ifndef FATHOM_STORE_INTERNAL_H
#define FATHOM_STORE_INTERNAL_H

#include "fathom.h"

#include <stdint.h>

/* Blocks of FATHOM_BLOCK_TOKENS that hold `tokens` tokens. */
static inline uint64_t fathom_blocks_for(uint64_t tokens) {
    return tokens / FATHOM_BLOCK_TOKENS + (tokens % FATHOM_BLOCK_TOKENS != 0);
}

/* FATHOM_ERR_INVALID_ARG naming `who` unless every depths[j] <= FATHOM_PLANES. */
int fathom_depths_check(uint32_t dim, const uint8_t *depths, const char *who);

/* Value of token `token` (absolute, < length) of channel j at depth 1..4:
 * the t-bit mid-rise value, exact in float. No argument checks. */
float fathom_store_token_value(const fathom_store *st, uint64_t token, uint32_t j, uint32_t t);

/* Which implementation of fathom_store_scan runs. */
typedef enum fathom_scan_kernel {
    FATHOM_SCAN_AUTO = 0,  /* what fathom_store_scan uses: the tiled AVX-512 kernel where
                            * AVX-512F runs, else the tiled AVX2 one where AVX2 runs, else
                            * the tiled portable one */
    FATHOM_SCAN_REFERENCE, /* plain per-token loop, double accumulation: the one to read */
    FATHOM_SCAN_PORTABLE,  /* the fast kernel compiled for the baseline ISA */
    FATHOM_SCAN_AVX2,      /* AVX2+FMA+F16C intrinsics (x86-64 only) */
    FATHOM_SCAN_AVX512,    /* AVX-512F intrinsics (x86-64 only) */
    /* The tiled kernels (scan_internal.h): same scores, bit for bit, as the
     * three above of the same instruction set; they also scan token ranges. */
    FATHOM_SCAN_TILED_PORTABLE,
    FATHOM_SCAN_TILED_AVX2,
    FATHOM_SCAN_TILED_AVX512,
    /* The grouped-table ("LUT") mode, opt-in only (AUTO never picks it):
     * per block one 16-entry table per group of up to 4 plane rows, so a
     * token costs one lookup and one add per group and head instead of one
     * multiply-add per channel and head. Its scores are the grouped
     * definition's (scan_internal.h), NOT the exact kernels': the same sum
     * in another float order, within a few units in the last place of
     * sum_j |q_j v_j| of them, and so not bit-identical to the GPU scan or
     * the hybrid step. All grouped kernels give the same scores, bit for
     * bit. Tiled kernels: they also scan token ranges. */
    FATHOM_SCAN_GROUPED_REFERENCE, /* the definition, token by token (fathom_store_scan_with only) */
    FATHOM_SCAN_GROUPED,           /* the widest grouped kernel this CPU runs */
    FATHOM_SCAN_GROUPED_PORTABLE,  /* plain C */
    FATHOM_SCAN_GROUPED_AVX512,    /* AVX-512 with GFNI (the nibble kernel's features) */
    /* The integer ("VNNI") mode, opt-in only (AUTO never picks it): per
     * pass, block and head the products q_hj a_jb are quantized to int8
     * against their largest magnitude, each token's sum over the channels is
     * an exact integer dot product of those weights with the channels'
     * decoded codes, and one multiply scales it back (the int8 definition in
     * scan_internal.h). Its scores are NOT the exact kernels': each channel's
     * term is off by up to half a quantization step (max_j |q_hj a_jb| / 254
     * times |2c' + 2^(4-t) - 16| / 16). All int8 kernels give the same
     * scores, bit for bit. Tiled kernels: they also scan token ranges. */
    FATHOM_SCAN_INT8_REFERENCE, /* the definition, token by token (fathom_store_scan_with only) */
    FATHOM_SCAN_INT8,           /* the widest int8 kernel this CPU runs */
    FATHOM_SCAN_INT8_PORTABLE,  /* plain C */
    FATHOM_SCAN_INT8_AVX512,    /* AVX-512 VNNI with GFNI and VBMI */
    /* The int16 variant of the int8 mode (same definition with 32512
     * levels in place of 127: 16-bit weights, each dot product run twice,
     * on the weights' high and low bytes): 256 times finer weights, twice
     * the dot products. Opt-in only; all int16 kernels give the same scores,
     * bit for bit. */
    FATHOM_SCAN_INT16_REFERENCE, /* the definition, token by token (fathom_store_scan_with only) */
    FATHOM_SCAN_INT16,           /* the widest int16 kernel this CPU runs */
    FATHOM_SCAN_INT16_PORTABLE,  /* plain C */
    FATHOM_SCAN_INT16_AVX512     /* AVX-512 VNNI with GFNI and VBMI */
} fathom_scan_kernel;

/* 1 when this build and CPU can run the kernel, else 0. */
int fathom_scan_kernel_available(fathom_scan_kernel kernel);

/* fathom_store_scan with a chosen kernel; FATHOM_ERR_UNSUPPORTED if it is not
 * available. Same arguments, checks, results (up to float summation order)
 * and bytes_read. The exact kernels' scores are bit-identical to each other
 * (the reference aside); the grouped ones' to each other. */
int fathom_store_scan_with(fathom_scan_kernel kernel, const fathom_store *store,
                           const uint8_t *depths, const float *queries, uint32_t group, uint64_t n,
                           float *scores, uint64_t *bytes_read);

/* Scores of tokens [first, first + count) only: score of head h and token
 * first + i in scores[h * ld + i] (ld >= count). first is a multiple of
 * FATHOM_BLOCK_TOKENS; first + count <= the store's length. kernel is
 * FATHOM_SCAN_AUTO, a tiled kernel or a grouped or int8 one (not their references); the scores are bit-identical to
 * fathom_store_scan_with's for the same kernel family. *bytes_read gets the
 * plane and scale bytes of the range's blocks. Threads may scan disjoint
 * ranges (or the same range into different buffers) of one store at once. */
int fathom_store_scan_range(fathom_scan_kernel kernel, const fathom_store *store,
                            const uint8_t *depths, const float *queries, uint32_t group,
                            uint64_t first, uint64_t count, float *scores, uint64_t ld,
                            uint64_t *bytes_read);

/* A read-only K index over segments held elsewhere, in the store's layout
 * (e.g. the CUDA tier's pinned host segments): views[i] is segment i, its
 * planes [dim][4][segment_blocks] and scales [dim][segment_blocks], with
 * first_token = i * 64 * segment_blocks; there are
 * ceil(length / (64 * segment_blocks)) of them. The scans below read the
 * views in place (nothing is copied); blocks and tokens of the views are not
 * read. The caller keeps the memory alive and unchanged during a scan. */
typedef struct fathom_segments {
    uint32_t dim;
    uint32_t segment_blocks;
    uint64_t length; /* tokens */
    const fathom_segment_view *views;
} fathom_segments;

/* FATHOM_ERR_INVALID_ARG (message from `who`) unless segments and its views
 * are non-NULL, dim and segment_blocks are >= 1 and length needs at most
 * 2^32 - 1 segments. The views themselves are checked as a scan reads them
 * (NULL planes or scales: FATHOM_ERR_INVALID_ARG). */
int fathom_segments_check(const fathom_segments *segments, const char *who);

/* fathom_store_scan_range over caller-provided segments: the same kernels,
 * checks and scores, bit for bit, as over a store holding the same words and
 * scales. */
int fathom_segments_scan_range(fathom_scan_kernel kernel, const fathom_segments *segments,
                               const uint8_t *depths, const float *queries, uint32_t group,
                               uint64_t first, uint64_t count, float *scores, uint64_t ld,
                               uint64_t *bytes_read);

/* fathom_store_variance from running sums over n >= 1 rows (the store's,
 * or a copy of them such as the CUDA tier's): out[j] = sum_sq/n - (sum/n)^2
 * in double, negative round-off as 0. */
void fathom_variance_from_sums(uint32_t dim, uint64_t n, const double *sum, const double *sum_sq,
                               float *out);

/* Where the AVX-512 tiled kernel reads its values from: "masks" (also off
 * x86), "tables", "nibbles" (tables by nibble indices) or "nibbles-inloop"
 * (the same with the tables formed in the block loop); the same scores each
 * way (scan.c says which runs where; FATHOM_SCAN_TABLES=0 to 3 in the
 * environment overrides). */
const char *fathom_scan_avx512_values(void);

/* One scan of a batch: scores [group x n] (row stride n) of `queries`
 * [group x dim] over the first n tokens of store at depths [dim]. */
typedef struct fathom_scan_item {
    const fathom_store *store;
    const uint8_t *depths;
    const float *queries;
    uint32_t group;
    uint64_t n;
    float *scores;
} fathom_scan_item;

struct fathom_pool;

/* Scans items [0, count) on the pool's threads (pool.h), split into tasks
 * of one item and a range of range_tokens tokens (a multiple of
 * FATHOM_BLOCK_TOKENS; 0: 16384), so that threads share a long context as
 * well as the heads. kernel: FATHOM_SCAN_AUTO or a tiled kernel. The
 * scores are those of scanning each item alone, bit for bit. On failure the
 * first failing task's status and message come back. */
int fathom_scan_parallel(struct fathom_pool *pool, fathom_scan_kernel kernel,
                         const fathom_scan_item *items, uint32_t count, uint64_t range_tokens);

/* One scan and selection of a batch: for each query head h < group, the
 * positions fathom_select(scores of head h, n, k, sink, local) returns, in
 * idx[h * k ...] (ascending, as fathom_select writes them), and their number
 * in count[h]; the scores are those of fathom_store_scan over the first n
 * tokens of store at depths [dim] for queries [group x dim]. */
typedef struct fathom_scan_select_item {
    const fathom_store *store; /* NULL: segments */
    const uint8_t *depths;
    const float *queries;
    uint32_t group;
    uint64_t n;
    uint32_t k, sink, local;
    uint32_t *idx;   /* [group * k] */
    uint32_t *count; /* [group] */
    const fathom_segments *segments; /* the index when store is NULL */
} fathom_scan_select_item;

/* Scans and selects items [0, count) on the pool's threads in tasks of one
 * item and range_tokens tokens (a multiple of FATHOM_BLOCK_TOKENS; 0:
 * 16384), without writing the scores out: each task keeps only the
 * candidates that may be among its heads' top (core/scan_select.c). The
 * selections equal fathom_select's on the scores of fathom_store_scan, at
 * any thread count. kernel: FATHOM_SCAN_AUTO or a tiled kernel. */
int fathom_scan_select_parallel(struct fathom_pool *pool, fathom_scan_kernel kernel,
                                const fathom_scan_select_item *items, uint32_t count,
                                uint64_t range_tokens);

/* The host's part of a decode step for one KV head (the CUDA tier's
 * hybrid step): the plan fathom_cuda_tier_step makes (variance from the
 * running sums over n tokens, fathom_importance, fathom_water_fill at
 * budget), then the scan and selection of fathom_scan_select_parallel over
 * segments. depths [dim] out; idx [group * k] and count [group] as there. */
typedef struct fathom_plan_select_item {
    const fathom_segments *segments;
    const double *sum, *sum_sq; /* [dim] running sums (fathom_store_sums) */
    const float *queries;       /* [group x dim] */
    uint32_t group;
    uint64_t n;                 /* tokens seen, 1..segments->length */
    uint32_t budget;            /* water-filling budget B, 1..4*dim */
    uint32_t k, sink, local;
    uint8_t *depths;            /* [dim] */
    uint32_t *idx;              /* [group * k] */
    uint32_t *count;            /* [group] */
} fathom_plan_select_item;

/* Plans items [0, count) (one task each), then scans and selects them on the
 * pool's threads in tasks of one item and range_tokens tokens (0: 16384).
 * Every argument fathom_scan_select_parallel checks, and segments, sum,
 * sum_sq and budget, are checked before any depths are written
 * (FATHOM_ERR_INVALID_ARG naming plan_select, the item and the argument). */
int fathom_plan_select_parallel(struct fathom_pool *pool, fathom_scan_kernel kernel,
                                const fathom_plan_select_item *items, uint32_t count,
                                uint64_t range_tokens);

/* The reference scan: scores[h*n + i] = sum_j q_hj * decode(i, j, depths[j]),
 * token by token, accumulated in double. */
int fathom_store_scan_reference(const fathom_store *store, const uint8_t *depths,
                                const float *queries, uint32_t group, uint64_t n, float *scores,
                                uint64_t *bytes_read);

/* The grouped scan's definition (scan_internal.h), token by token: the
 * scores every FATHOM_SCAN_GROUPED_* kernel gives, bit for bit. Same
 * arguments, checks and bytes_read as fathom_store_scan. */
int fathom_store_scan_grouped_reference(const fathom_store *store, const uint8_t *depths,
                                        const float *queries, uint32_t group, uint64_t n,
                                        float *scores, uint64_t *bytes_read);

/* The int8 scan's definition (scan_internal.h), token by token: the scores
 * every FATHOM_SCAN_INT8_* kernel gives, bit for bit. Same arguments, checks
 * and bytes_read as fathom_store_scan. */
int fathom_store_scan_int8_reference(const fathom_store *store, const uint8_t *depths,
                                     const float *queries, uint32_t group, uint64_t n,
                                     float *scores, uint64_t *bytes_read);

/* The same for the int16 variant (FATHOM_SCAN_INT16_*). */
int fathom_store_scan_int16_reference(const fathom_store *store, const uint8_t *depths,
                                      const float *queries, uint32_t group, uint64_t n,
                                      float *scores, uint64_t *bytes_read);

/* The running sums fathom_store_append keeps, [dim] each: shift (the first
 * stored row), sum and sum of squares of (row - shift). For tests that
 * compare another encoder byte for byte. NULL store: all NULL. */
void fathom_store_sums(const fathom_store *store, const double **shift, const double **sum,
                       const double **sum_sq);

#endif /* FATHOM_STORE_INTERNAL_H */

/*
 * libfathom — per-query read depth for sparse decoding over offloaded KV caches.
 *
 * The index core's public header. Every function that can fail returns an int status:
 * FATHOM_OK (0) or a negative fathom_status; fathom_last_error() then holds a
 * message for the calling thread. Sizes and offsets are 64-bit. Nothing here
 * calls exit() or abort().
 *
 * Conventions
 *   dim         channels of one key/query head (d).
 *   group       query heads sharing one KV head (G); query head h belongs to
 *               KV head h / G.
 *   Matrices are row-major float32 unless stated: keys [n x dim].
 *   Bits per token are per token per KV head per layer, counting code bits
 *   plus 16 bits of fp16 scale per 64 tokens for every channel read (§4).
 *
 * Module sections, in dependency order: status, fp16, basis, store,
 * landmarks, plan, select, attend, methods, index, source (capture +
 * synthetic), eval. The model test bed (GGUF, tokenizer, decoder) is
 * declared in fathom_model.h, the CUDA backend in fathom_cuda.h.
 */
#ifndef FATHOM_H
#define FATHOM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the library's public functions: libfathom.so is built with
 * -fvisibility=hidden and exports only these (tests/cli/test_symbols.sh). */
#if defined(__GNUC__)
#define FATHOM_API __attribute__((visibility("default")))
#else
#define FATHOM_API
#endif

#define FATHOM_VERSION_MAJOR 0
#define FATHOM_VERSION_MINOR 1
#define FATHOM_VERSION_PATCH 0

/* ===================================================================== *
 * status
 * ===================================================================== */

typedef enum fathom_status {
    FATHOM_OK = 0,
    FATHOM_ERR_INVALID_ARG = -1, /* a NULL pointer, zero size, out-of-range value */
    FATHOM_ERR_NOMEM = -2,       /* allocation failed or size overflowed */
    FATHOM_ERR_IO = -3,          /* open/read/write/mmap failed */
    FATHOM_ERR_FORMAT = -4,      /* a file is malformed (capture, GGUF) */
    FATHOM_ERR_NONFINITE = -5,   /* NaN or infinity in an input that needs finite values */
    FATHOM_ERR_UNSUPPORTED = -6, /* valid but not handled (dtype, quant type, ...) */
    FATHOM_ERR_NUMERIC = -7,     /* LAPACK or another numeric routine failed */
    FATHOM_ERR_STATE = -8,       /* the object is not in a state that allows the call */
    FATHOM_ERR_DEVICE = -9       /* a CUDA call failed or no device is present (fathom_cuda.h) */
} fathom_status;

/* Fixed name of a status code, e.g. "invalid argument". Never NULL. */
FATHOM_API const char *fathom_status_name(int status);

/* The message of the last failure on this thread ("" if none). The pointer
 * stays valid until the next failing call on this thread. */
FATHOM_API const char *fathom_last_error(void);

/* Layout of a struct of this header as compiled, for bindings that mirror it
 * (ctypes, cffi): with field NULL, *size = sizeof(type) and *offset = 0; else
 * the field's offsetof and sizeof. type is the struct's name, e.g.
 * "fathom_source_info". FATHOM_ERR_INVALID_ARG for a struct or field not in
 * the table (every struct passed by value or pointer-to-struct is listed).
 * offset and size may be NULL. */
FATHOM_API int fathom_abi_layout(const char *type, const char *field, size_t *offset, size_t *size);
/* Name of field `index` (declaration order) of struct `type`; NULL past the
 * last field or for an unknown type. */
FATHOM_API const char *fathom_abi_field(const char *type, uint32_t index);

/* ===================================================================== *
 * fp16 (IEEE binary16), round to nearest even; used for scales and dtypes
 * ===================================================================== */

FATHOM_API uint16_t fathom_f32_to_f16(float x);
FATHOM_API float fathom_f16_to_f32(uint16_t h);
FATHOM_API uint16_t fathom_f32_to_bf16(float x); /* round to nearest even; NaN stays NaN */
FATHOM_API float fathom_bf16_to_f32(uint16_t h);

/* ===================================================================== *
 * basis — the KLT of calibration keys (§3.5), used by fathom-klt and loki
 * ===================================================================== */

/* A rotation k' = (k - mean) V. Column c of V (vectors[i + c*dim]) is the
 * eigenvector of the calibration key covariance that becomes stored
 * coordinate c; eigenvalues[c] is its variance on the calibration keys.
 * Columns are ordered by calibration score variance
 * eigenvalues[c] * mean_q((q V)_c^2), largest first (by eigenvalue when no
 * queries are given). */
typedef struct fathom_basis fathom_basis;

/* Fit from n_keys calibration keys [n_keys x dim] and optional calibration
 * queries [n_queries x dim] (NULL/0: order by eigenvalue). Uses LAPACK
 * (dsyev). Needs n_keys >= 2 and finite inputs. */
FATHOM_API int fathom_basis_fit(fathom_basis **out, uint32_t dim, const float *keys, uint64_t n_keys,
                                const float *queries, uint64_t n_queries);
/* Build from explicit parts (copied). vectors is dim x dim column-major as above. */
FATHOM_API int fathom_basis_create(fathom_basis **out, uint32_t dim, const float *mean, const float *vectors,
                                   const float *eigenvalues);
FATHOM_API void fathom_basis_free(fathom_basis *basis); /* NULL is fine */
FATHOM_API uint32_t fathom_basis_dim(const fathom_basis *basis);
FATHOM_API const float *fathom_basis_mean(const fathom_basis *basis);        /* [dim] */
FATHOM_API const float *fathom_basis_vectors(const fathom_basis *basis);     /* [dim*dim], column-major */
FATHOM_API const float *fathom_basis_eigenvalues(const fathom_basis *basis); /* [dim] */
/* out[c] = sum_i (x[i] - mean[i]) V[i,c]: a key into stored coordinates. */
FATHOM_API int fathom_basis_rotate_key(const fathom_basis *basis, const float *key, float *out);
/* out[c] = sum_i q[i] V[i,c]: a query into stored coordinates (no centering;
 * q.k = qV.(k-mean)V + q.mean, and the last term is the same for every key). */
FATHOM_API int fathom_basis_rotate_query(const fathom_basis *basis, const float *query, float *out);

/* ===================================================================== *
 * store — the bit-plane K store (§3.2)
 * ===================================================================== */

#define FATHOM_BLOCK_TOKENS 64
#define FATHOM_PLANES 4
#define FATHOM_DEFAULT_SEGMENT_BLOCKS 1024 /* 65,536 tokens per segment */

/*
 * Layout. Tokens are grouped in blocks of 64. For block b and channel j the
 * scale a = fp16(max_i |k_ij|) is stored as fp16 and quantization uses that
 * rounded value, so decoding is exact against what is stored. With s = a/8
 * the code is c = clip(floor(k/s) + 8, 0, 15) (code 8 is zero, the MSB is the
 * sign; an all-zero block has a = 0 and every code 8). Bit p (0 = MSB) of
 * the 64 codes is one uint64 word: bit i of the word is token i of the block.
 *
 * Blocks are grouped in segments of segment_blocks blocks (S). Inside a
 * segment the words are channel-major, [channel j][plane p][block b], so the
 * first t planes of channel j over a full segment are ONE contiguous run of
 * t*S*8 bytes (t runs of nb*8 bytes for a partly filled segment). Scales are
 * [channel j][block b] fp16. A segment is allocated whole when the first
 * token reaches it and never moves or shrinks: a pointer from
 * fathom_store_segment() stays valid until fathom_store_free(). Capacity
 * grows by adding segments; nothing is copied.
 *
 * Streaming: the last block may be open (fewer than 64 tokens). The store
 * keeps its raw float rows and re-quantizes the whole block on every append,
 * so appending token by token gives the same bytes as one bulk append,
 * including the open block, whose scale can grow as tokens arrive. Bits of
 * tokens not yet appended are 0 in every plane. Memory: exactly
 * dim/2 + dim/32 bytes per token (68 at dim 128) for closed blocks, plus
 * 64*dim floats for the open block, rounded up to whole segments.
 *
 * Rotated store: created with a basis, the store keeps the planes of
 * (k - mean)V and every function below speaks of those stored coordinates.
 *
 * Centered store: given a per-channel center mu before the first append
 * (fathom_store_set_center), the store keeps the planes of k - mu, and every
 * function below speaks of those stored coordinates. A query scans them
 * unchanged: q.k = q.(k - mu) + q.mu and the last term is the same for every
 * key, so per-query rankings are those of the raw keys scored on the
 * centered code, and the variance is the raw keys' (it does not depend on a
 * shift). A channel whose keys sit far from zero then spends its planes on
 * their spread, not on the offset; no byte is added per token.
 *
 * The store also keeps per-channel running sums of the stored coordinates
 * (double), so it knows its keys' variance without calibration (App. D).
 */
typedef struct fathom_store fathom_store;

/* segment_blocks 0 means FATHOM_DEFAULT_SEGMENT_BLOCKS. basis may be NULL
 * (raw channels); if given it must have the same dim and outlive the store. */
FATHOM_API int fathom_store_create(fathom_store **out, uint32_t dim, uint32_t segment_blocks,
                                   const fathom_basis *basis);
FATHOM_API void fathom_store_free(fathom_store *store); /* NULL is fine */

/* Append count key rows [count x dim] (original coordinates). All values must
 * be finite (else FATHOM_ERR_NONFINITE and nothing is appended). A scale above
 * the largest finite fp16 (65504) saturates there and codes clip; see docs. */
FATHOM_API int fathom_store_append(fathom_store *store, const float *keys, uint64_t count);

FATHOM_API uint64_t fathom_store_length(const fathom_store *store); /* tokens appended */
FATHOM_API uint32_t fathom_store_dim(const fathom_store *store);
FATHOM_API uint32_t fathom_store_segment_blocks(const fathom_store *store);
FATHOM_API uint32_t fathom_store_segment_count(const fathom_store *store);
FATHOM_API const fathom_basis *fathom_store_basis(const fathom_store *store); /* NULL if raw */

/* Center the store's codes on center[dim] (copied; finite): stored
 * coordinates become k - center. Only before the first append
 * (FATHOM_ERR_STATE after) and only on a store without a basis (a rotated
 * store is centered by its basis' mean). A second call replaces the center.
 * An append whose k - center overflows fails with FATHOM_ERR_NONFINITE and
 * appends nothing. */
FATHOM_API int fathom_store_set_center(fathom_store *store, const float *center);
/* The center [dim], or NULL if the store has none. */
FATHOM_API const float *fathom_store_center(const fathom_store *store);

/* Bytes of plane words and scales for the blocks in use (n rounded up to 64
 * tokens); exactly 68 per token at dim 128 when n is a multiple of 64. */
FATHOM_API uint64_t fathom_store_index_bytes(const fathom_store *store);
/* Bytes allocated: whole segments plus the open-block buffer. */
FATHOM_API uint64_t fathom_store_allocated_bytes(const fathom_store *store);

typedef struct fathom_segment_view {
    const uint64_t *planes; /* [dim][4][segment_blocks] */
    const uint16_t *scales; /* [dim][segment_blocks], fp16 */
    uint64_t first_token;   /* absolute index of the segment's first token */
    uint32_t blocks;        /* blocks in use, the open one included */
    uint32_t tokens;        /* tokens in use */
} fathom_segment_view;

/* View of segment seg (< fathom_store_segment_count()). */
FATHOM_API int fathom_store_segment(const fathom_store *store, uint32_t seg, fathom_segment_view *out);

/* Word of plane p for channel j and absolute block index b, and that block's
 * fp16 scale. For tests and tools; the scan reads segments directly. */
FATHOM_API int fathom_store_word(const fathom_store *store, uint32_t channel, uint32_t plane, uint64_t block,
                                 uint64_t *word, uint16_t *scale);

/* Decode tokens [first, first+count) at per-channel depth depths[dim]
 * (0..4) into out [count x dim], stored coordinates. A channel read to t
 * planes decodes to (c>>(4-t) + 0.5 - 2^(t-1)) * a / 2^(t-1), the t-bit
 * mid-rise quantizer of [-a, a); t = 0 gives 0. */
FATHOM_API int fathom_store_decode(const fathom_store *store, uint64_t first, uint64_t count,
                                   const uint8_t *depths, float *out);

/* Population variance of each stored coordinate over every appended token,
 * from the running sums. out[dim]. Needs length >= 1. */
FATHOM_API int fathom_store_variance(const fathom_store *store, float *out);

/* Approximate scores of the first n tokens for `group` queries
 * [group x dim] (stored coordinates): scores[h*n + i] = sum_j q_hj khat_ij,
 * khat at depths[j]. Reads only planes p < depths[j] and scales of channels
 * with depths[j] > 0. bytes_read (may be NULL) gets the plane and scale bytes
 * it touched: sum over active channels of ceil(n/64)*(8*t_j + 2). On x86
 * with AVX2 or AVX-512 the scores follow the fixed order of fused
 * multiply-adds that the CUDA scan also follows (bit-identical to it); the
 * faster grouped-table mode, which rounds in another order, and the integer
 * (int8/int16) mode, which quantizes q_j a_j per block, are never
 * substituted here: they are explicit internal options (FATHOM_SCAN_GROUPED,
 * FATHOM_SCAN_INT8, FATHOM_SCAN_INT16 in src/core/store_internal.h, for
 * benchmarks and tests). */
FATHOM_API int fathom_store_scan(const fathom_store *store, const uint8_t *depths, const float *queries,
                                 uint32_t group, uint64_t n, float *scores, uint64_t *bytes_read);

/* ===================================================================== *
 * landmarks — fp16 mean key of each 8-token block (ShadowKV-style baseline)
 * ===================================================================== */

#define FATHOM_LANDMARK_TOKENS 8

typedef struct fathom_landmarks fathom_landmarks;
FATHOM_API int fathom_landmarks_create(fathom_landmarks **out, uint32_t dim);
FATHOM_API void fathom_landmarks_free(fathom_landmarks *lm);
/* Append key rows; an open last block's mean is over the tokens it has. */
FATHOM_API int fathom_landmarks_append(fathom_landmarks *lm, const float *keys, uint64_t count);
FATHOM_API uint64_t fathom_landmarks_length(const fathom_landmarks *lm);
/* scores[h*n + i] = q_h . mean(block of i) for the first n tokens. */
FATHOM_API int fathom_landmarks_scan(const fathom_landmarks *lm, const float *queries, uint32_t group,
                                     uint64_t n, float *scores, uint64_t *bytes_read);

/* ===================================================================== *
 * plan — channel importance and reverse water-filling (§3.3, §3.4)
 * ===================================================================== */

#define FATHOM_MAX_DEPTH 4
#define FATHOM_BISECT_STEPS 30

/* g[j] = sum_h q_hj^2 * var[j] over the group's queries [group x dim]. For the
 * rotated store pass rotated queries and the basis eigenvalues as var. */
FATHOM_API int fathom_importance(uint32_t dim, uint32_t group, const float *queries, const float *var,
                                 double *g);

/* t_j(theta) = clip(round(log4(g_j/theta)), 0, 4), round half up; g_j <= 0
 * gives 0. theta must be > 0. */
FATHOM_API int fathom_depths_at(uint32_t dim, const double *g, double theta, uint8_t *depths);

/* Depths for the smallest water line theta with sum_j t_j <= budget. The sum
 * is a step function of theta, so the depths are those just above the first
 * breakpoint that would exceed the budget; *theta (may be NULL) gets that
 * breakpoint (0 when every positive channel fits at depth 4). Exact search
 * over the breakpoints g_j / 4^(m - 1/2), m = 1..4; tied breakpoints enter
 * together. */
FATHOM_API int fathom_water_fill(uint32_t dim, const double *g, uint32_t budget, uint8_t *depths,
                                 double *theta);
/* The paper's procedure: 30 steps of bisection on log(theta). Same depths as
 * fathom_water_fill unless two breakpoints lie within the final bracket. */
FATHOM_API int fathom_water_fill_bisect(uint32_t dim, const double *g, uint32_t budget, uint8_t *depths,
                                        double *theta);

/* Code bits plus scale bits per token for a depth vector:
 * sum_j t_j + (16/64) * #{j : t_j > 0}. */
FATHOM_API double fathom_depth_bits(uint32_t dim, const uint8_t *depths);

/* Greedy per-layer budget (§3.4). err[l*n_levels + i] is the calibration
 * error of layer l at budget levels[i] (ascending). Every layer starts at
 * levels[0]; while the total allows, one step moves a layer to its next level,
 * choosing the largest error drop per bit. Mean of budgets_out <= target. */
FATHOM_API int fathom_greedy_layer_budgets(uint32_t layers, const uint32_t *levels, uint32_t n_levels,
                                           const double *err, double target_mean, uint32_t *budgets_out);

/* ===================================================================== *
 * select — sink + local + top-k per query head (§2)
 * ===================================================================== */

#define FATHOM_SINK_TOKENS 4
#define FATHOM_LOCAL_TOKENS 32

/* Select for one query head that sees keys [0, n_visible): the first `sink`
 * and last `local` positions always, plus the highest-scoring of the rest
 * until k are chosen (all of them when n_visible <= k). Ties go to the lower
 * index; NaN scores rank lowest. idx_out (capacity min(k, n_visible)) gets the
 * chosen positions in ascending order, *count their number. work must hold
 * n_visible uint64 (fathom_select_work_size). Allocates nothing. */
FATHOM_API int fathom_select(const float *scores, uint64_t n_visible, uint32_t k, uint32_t sink,
                             uint32_t local, uint64_t *work, uint32_t *idx_out, uint32_t *count);
FATHOM_API size_t fathom_select_work_size(uint64_t n_visible); /* in bytes */

/* Size of the union of `sets` sorted index lists (the rows a fetch moves). */
FATHOM_API int fathom_union_size(uint32_t n_sets, const uint32_t *const *sets, const uint32_t *counts,
                                 uint32_t *union_count);

/* ===================================================================== *
 * attend — exact softmax attention, scale 1/sqrt(dim)
 * ===================================================================== */

/* out[dim] = softmax(q.K_S / sqrt(dim)) V_S over rows S = idx[0..count) of
 * keys/values [n x dim] (idx NULL: rows 0..count-1, dense). Accumulates in
 * double. */
FATHOM_API int fathom_attend(uint32_t dim, const float *query, const float *keys, const float *values,
                             const uint32_t *idx, uint64_t count, float *out);

/* ||a - b|| / ||b||; 0 if both are zero. */
FATHOM_API double fathom_rel_l2(uint32_t dim, const float *a, const float *b);

/* ===================================================================== *
 * methods — every scan under one protocol and byte accounting (§4)
 * ===================================================================== */

typedef enum fathom_method_kind {
    FATHOM_METHOD_FATHOM = 0, /* fathom:B      raw planes, per-query depths, budget B code bits */
    FATHOM_METHOD_FATHOM_KLT, /* fathom-klt:B  rotated planes */
    FATHOM_METHOD_SPARQ,      /* sparq:r       top-r channels by sum_h |q_j|, 4 bits */
    FATHOM_METHOD_DS,         /* ds:c          Double Sparsity: c offline channels, 4 bits */
    FATHOM_METHOD_LOKI,       /* loki:r        first r KLT coordinates, 4 bits */
    FATHOM_METHOD_THUMB,      /* thumb         all channels, 2 planes */
    FATHOM_METHOD_LANDMARK,   /* landmark      fp16 mean key per 8 tokens */
    FATHOM_METHOD_FULL4,      /* full4         all channels, 4 planes */
    FATHOM_METHOD_ORACLE,     /* oracle        exact scores */
    FATHOM_METHOD_DENSE,      /* dense         no selection */
    FATHOM_METHOD_FATHOM_CENTERED /* fathom-centered:B  fathom's plan on planes of k - mu, mu the
                                     mean of the index's first append (fathom_store_set_center) */
} fathom_method_kind;

typedef struct fathom_method {
    fathom_method_kind kind;
    uint32_t param;  /* B, r or c; 0 for methods without one */
    char name[32];   /* the spec as given, e.g. "fathom:48" */
} fathom_method;

/* Parse one spec ("fathom:48", "sparq:16", "thumb", ...). */
FATHOM_API int fathom_method_parse(const char *spec, fathom_method *out);
/* Parse a comma-separated list into out[cap]; *count gets the number. */
FATHOM_API int fathom_method_parse_list(const char *list, fathom_method *out, uint32_t cap, uint32_t *count);
/* Bits per token of a fixed-depth method at this dim (sparq, ds, loki,
 * thumb, landmark, full4: 68/136/136/288/256/544 at dim 128, r=c=16/32);
 * oracle reads bf16 keys (16*dim); dense scans nothing (0). For fathom,
 * fathom-klt and fathom-centered the bits depend on the plan: returns -1. */
FATHOM_API double fathom_method_fixed_bits(const fathom_method *method, uint32_t dim);

/* Check a method against a head dimension: a known kind; fathom:B and
 * fathom-klt:B with 1 <= B <= 4*dim code bits; sparq:r, ds:c and loki:r
 * with 1 <= r <= dim channels. FATHOM_ERR_INVALID_ARG with a message that
 * names the method otherwise. Every caller that takes a method for a shape
 * (the index, eval, the decoder) checks it here. */
FATHOM_API int fathom_method_check(const fathom_method *method, uint32_t dim);

/* ===================================================================== *
 * index — one KV head's index for a set of methods: the bit-plane store,
 * the rotated store and its basis, the landmarks, and the calibration
 * statistics the methods read. The fidelity harness (eval) and the decoder's
 * sparse attention (fathom_model.h) build the same index.
 * ===================================================================== */

/* What a method reads, as bit flags (fathom_method_needs). */
#define FATHOM_NEEDS_STORE 1u     /* raw-channel planes: fathom, sparq, ds, thumb, full4 */
#define FATHOM_NEEDS_ROTATED 2u   /* planes of (k - mean)V and the basis: fathom-klt, loki */
#define FATHOM_NEEDS_LANDMARKS 4u /* block means: landmark */
#define FATHOM_NEEDS_CALIB 8u     /* calibration keys and queries: fathom-klt, ds, loki */
#define FATHOM_NEEDS_CENTERED 16u /* planes of k - mu, mu the first append's mean: fathom-centered */

/* The FATHOM_NEEDS_* flags of a method (0 for oracle, dense and NULL). */
FATHOM_API unsigned fathom_method_needs(const fathom_method *method);

typedef struct fathom_index fathom_index;

/* An empty index for methods[n_methods] (each passes fathom_method_check at
 * dim; at most one ds:c, whose channels the index keeps) plus extra_needs
 * (FATHOM_NEEDS_STORE keeps the raw store when no method reads it). Oracle
 * and dense are allowed and need nothing. */
FATHOM_API int fathom_index_create(fathom_index **out, const fathom_method *methods, uint32_t n_methods,
                                   uint32_t dim, unsigned extra_needs);
FATHOM_API void fathom_index_free(fathom_index *index); /* NULL is fine */

/* Calibration data of one KV head: keys [n_keys x dim] and the group's
 * queries [n_queries x dim]. */
typedef struct fathom_index_calib {
    const float *keys;
    uint64_t n_keys;
    const float *queries;
    uint64_t n_queries;
    int variance_from_store; /* nonzero: fathom's Var from the store's running sums
                                (calibration-free, App. D), not from these keys */
} fathom_index_calib;

/* Fit what the method set reads from calibration data: fathom's channel
 * variance (unless variance_from_store), Double Sparsity's channels, the
 * KLT basis (creating the rotated store). Once, before the first append;
 * needs n_keys >= 2 and n_queries >= 1 when a method needs calibration.
 * Without it, fathom reads the store's variance and methods that need
 * calibration fail with FATHOM_ERR_STATE. */
FATHOM_API int fathom_index_calibrate(fathom_index *index, const fathom_index_calib *calib);

/* Append key rows [count x dim] to every store and the landmarks. The
 * first append after create or clear fixes the centered store's center
 * (fathom-centered): the mean of that append's keys, so eval's window and the
 * decoder's prefill (fathom_ctx_set_attention after it) center on their own
 * keys' mean. On failure the index is unusable until fathom_index_clear. */
FATHOM_API int fathom_index_append(fathom_index *index, const float *keys, uint64_t count);
/* Drop every key and the centered store's center; calibration is kept. */
FATHOM_API int fathom_index_clear(fathom_index *index);
FATHOM_API uint64_t fathom_index_length(const fathom_index *index); /* keys appended */
FATHOM_API uint32_t fathom_index_dim(const fathom_index *index);
/* The raw store (NULL when the index has none), e.g. to decode keys. */
FATHOM_API const fathom_store *fathom_index_store(const fathom_index *index);

/* Bytes of scratch fathom_index_scores needs for `group` queries (0 when
 * dim or group is 0 or too large). Aligned as malloc aligns. */
FATHOM_API size_t fathom_index_scratch_size(uint32_t dim, uint32_t group);

/* Approximate scores [group x n] of the group's queries [group x dim] over
 * the first n keys, for a method of the index's set other than oracle and
 * dense (their exact scores each caller computes its own way). budget is
 * fathom's, fathom-klt's and fathom-centered's bit budget (e.g. method->param, or a per-layer
 * budget), ignored by the others. *bits (may be NULL) gets the bits per
 * token the method read, *bytes (may be NULL) the bytes. scratch holds
 * fathom_index_scratch_size(dim, group) bytes; concurrent calls on one index
 * are fine with separate scratch. */
FATHOM_API int fathom_index_scores(const fathom_index *index, const fathom_method *method, uint32_t budget,
                                   uint32_t group, const float *queries, uint64_t n, float *scores,
                                   void *scratch, double *bits, uint64_t *bytes);
/* The per-channel depths [dim] that the last fathom_index_scores call with
 * this scratch (same dim and group) read, for the methods that scan planes
 * (not landmark); NULL when dim or group is out of range. */
FATHOM_API const uint8_t *fathom_index_scratch_depths(const void *scratch, uint32_t dim, uint32_t group);

/* ===================================================================== *
 * source — where keys, values and queries come from: a capture file
 * (safetensors, docs/capture-format.md) or the built-in synthetic generator
 * ===================================================================== */

typedef struct fathom_source fathom_source;

typedef struct fathom_source_info {
    char model[64];
    uint32_t layers;
    uint32_t q_heads;     /* Hq */
    uint32_t kv_heads;    /* Hkv; Hq is a multiple of it */
    uint32_t dim;         /* head dimension d */
    uint64_t tokens;      /* n: keys/values per layer and head */
    uint32_t positions;   /* P: queries per head, for the last P positions */
    uint64_t first_query; /* absolute position of the first query (n - P for a capture of one window) */
} fathom_source_info;

/* Open a capture file (mapped, every length/offset/shape/dtype checked). */
FATHOM_API int fathom_capture_open(fathom_source **out, const char *path);
/* Synthetic generator, seeded and deterministic. preset: "qwen3-8b",
 * "llama-3.1-8b", "smollm2-135m". See docs/synthetic.md. */
FATHOM_API int fathom_synth_open(fathom_source **out, const char *preset, uint64_t context, uint32_t positions,
                                 uint64_t seed);

/* A synthetic preset as a value: a built-in one or one fitted to a capture
 * (fathom_synth_fit), kept in a JSON preset file (docs/synthetic.md, "Presets
 * fitted to captures"). Preset files are untrusted input: every field is
 * checked (FATHOM_ERR_FORMAT naming the field). */
typedef struct fathom_synth_preset fathom_synth_preset;
/* name: a built-in preset's name, or a path ending in ".json" (a preset file). */
FATHOM_API int fathom_synth_preset_load(fathom_synth_preset **out, const char *name);
/* A preset file's text (len bytes, need not be NUL-terminated). */
FATHOM_API int fathom_synth_preset_parse(fathom_synth_preset **out, const char *text, size_t len);
/* Write p as a preset file (JSON); extra (may be NULL) is kept under "fit"
 * as free-form information (a JSON object text, e.g. the fit's report). */
FATHOM_API int fathom_synth_preset_write(const fathom_synth_preset *p, const char *path, const char *extra);
FATHOM_API void fathom_synth_preset_free(fathom_synth_preset *p); /* NULL is fine */
/* Name and shape of a preset (the source it opens reports the same). */
FATHOM_API int fathom_synth_preset_info(const fathom_synth_preset *p, fathom_source_info *info);
/* As fathom_synth_open, from a preset value (copied: p may be freed after). */
FATHOM_API int fathom_synth_open_preset(fathom_source **out, const fathom_synth_preset *p, uint64_t context,
                                        uint32_t positions, uint64_t seed);

/* The statistics a fit matches, measured on any source over its queried
 * positions (keys and queries un-rotated with the given RoPE first):
 * dense-softmax mass on the top k keys, on the first 4 tokens and on the
 * last 32, the share of the key covariance in its top d/4 eigenvalues
 * (the rank of the content), and the cosine between consecutive queries of
 * one head (step-to-step drift), each the mean over layers, heads and
 * positions; mean_ratio is the largest |mean| / std of a key channel,
 * averaged over heads (outliers); content_mass (reported, not fitted) is
 * the concentration without the positional part: the logits less the
 * head's mean key's (rotated to each key's position), softmax over the
 * keys between the first 4 and the last 32, mass of the k - 36 largest;
 * dev_skew (reported, not fitted) is the skewness, over those keys, of the
 * logits of the query's deviation from its head's mean query (un-rotated
 * mean, rotated back to the query's position) against each key's deviation
 * from the head's mean key: positive when the queries point along a heavy
 * right tail of the keys (trained models), 0 for queries drawn from their
 * moments alone (docs/synthetic.md, "Query direction"). Of the key of the
 * query's largest logit among those keys (the one it attends most),
 * target_cos (reported) is the cosine of that deviation (rotated as the
 * query is) with the key's deviation from the head's mean key, and
 * target_lift (fitted by FATHOM_SYNTH_FIT_TARGET) the z-score of its
 * deviation logit among those keys' less the same for a query drawn per
 * channel from the head's query mean and std (8 positions per query head):
 * how far the queries point at the keys they attend beyond what their
 * moments give (docs/synthetic.md, "Queries that point at their targets").
 * Of the channel importance g_j = sum over a KV head's query heads of
 * q_j^2 times the variance of key channel j over the keys up to the query
 * (stored, rotated frame), over the last min(32, positions) queried
 * positions: churn_overlap (reported) is the mean share of the top d/8
 * channels by g that consecutive queries have in common, and fixed_share
 * (fitted by FATHOM_SYNTH_FIT_CHURN) the g share (g normalized per query)
 * that the best fixed d/8 channels (top by the mean share over those
 * queries) cover, over the share each query's own top d/8 cover: how far
 * one channel set chosen ahead (Double Sparsity) stands for per-query
 * choice (docs/synthetic.md, "Channel churn"). */
typedef struct fathom_synth_stats {
    double top_mass, sink_mass, local_mass, pca_share, drift, mean_ratio;
    double content_mass;
    double dev_skew;
    double target_cos, target_lift;
    double churn_overlap, fixed_share;
} fathom_synth_stats;

typedef enum fathom_rope_style {
    FATHOM_ROPE_DETECT = 0,  /* fit: the style and base whose un-rotation leaves the largest key means */
    FATHOM_ROPE_NEOX = 1,    /* pairs (i, i + d/2) (Qwen3, Gemma 3, the generator) */
    FATHOM_ROPE_ADJACENT = 2 /* pairs (2i, 2i + 1) (Llama, SmolLM2 in GGUF) */
} fathom_rope_style;

/* Statistics of src at top-k size k, every layer_stride-th layer (1: all). */
FATHOM_API int fathom_synth_stats_measure(const fathom_source *src, fathom_rope_style style, double rope_base,
                                          uint32_t k, uint32_t layer_stride, fathom_synth_stats *out);

/* Groups of statistics a fit takes from the capture; a group left out of
 * fathom_synth_fit_options.fit keeps the base preset's value (ablations). */
enum {
    FATHOM_SYNTH_FIT_PROFILES = 1,      /* per-channel key/query std and mean, their spread over heads */
    FATHOM_SYNTH_FIT_CONCENTRATION = 2, /* top-k mass (topic logit) */
    FATHOM_SYNTH_FIT_SINKS = 4,         /* first-4-token mass (sink logit) */
    FATHOM_SYNTH_FIT_RECENCY = 8,       /* last-32-token mass (positional profile of the means, its gain) */
    FATHOM_SYNTH_FIT_RANK = 16,         /* covariance share of the top d/4 eigenvalues (topic amplitude) */
    FATHOM_SYNTH_FIT_DRIFT = 32,        /* consecutive-query cosine (query run length) */
    /* each (layer, KV head) its own key profiles and each query head its own
     * positional profile, as measured (with PROFILES and RECENCY; left out:
     * one profile for all heads, each head's key scales spread around it) */
    FATHOM_SYNTH_FIT_HEADS = 64,
    /* each layer its own topic logit, for its own top-k mass (with
     * CONCENTRATION; left out: one topic logit for the mass over layers) */
    FATHOM_SYNTH_FIT_LAYERS = 128,
    /* each query head its own query std profile, as measured (with HEADS:
     * the generated query's noise and topic parts take it; left out: one
     * query profile for all heads) */
    FATHOM_SYNTH_FIT_QUERY_HEADS = 256,
    /* queries that point at their targets: the share of each query's
     * deviation along one earlier key's (target_share), for target_cos */
    FATHOM_SYNTH_FIT_TARGET = 512,
    FATHOM_SYNTH_FIT_ALL = 1023,
    /* opt-in, not in ALL: per-query channel churn, a log-normal gain per
     * RoPE pair on each query (query_churn), for fixed_share */
    FATHOM_SYNTH_FIT_CHURN = 2048,
    /* Everything but per-head profiles. (Until the positional profile, recency was left out: the
     * recency direction it replaced could not reach a real model's last-32
     * mass without swamping the other logits; docs/synthetic.md.) */
    FATHOM_SYNTH_FIT_DEFAULT =
        FATHOM_SYNTH_FIT_ALL & ~FATHOM_SYNTH_FIT_HEADS & ~FATHOM_SYNTH_FIT_LAYERS & ~FATHOM_SYNTH_FIT_QUERY_HEADS &
        ~FATHOM_SYNTH_FIT_TARGET
    /* (Per-head profiles are asked for: on SmolLM2 they put fathom:48 /
     * ds:32 outside the study's margin; docs/synthetic.md.) */
};

typedef struct fathom_synth_fit_options {
    const char *base;         /* built-in preset for what is not fitted (qk_norm, caps, seeds' roles) */
    const char *name;         /* the fitted preset's name (1..63 bytes; it seeds the model draws) */
    fathom_rope_style style;  /* the capture's RoPE (FATHOM_ROPE_DETECT: detect style and base) */
    double rope_base;         /* with a given style: its base (> 1) */
    uint32_t k;               /* top-k size of the concentration statistic (0: max(64, n/64)) */
    uint32_t fit;             /* FATHOM_SYNTH_FIT_* bits (0: FATHOM_SYNTH_FIT_DEFAULT) */
    uint32_t layer_stride;    /* measure every this-many layers of the candidates (0: 1) */
    /* > 0: the preset's query_churn held at this value (at most 4) and
     * every fitted statistic searched with it, in place of
     * FATHOM_SYNTH_FIT_CHURN's search, which it excludes (0: none) */
    float query_churn;
} fathom_synth_fit_options;

typedef struct fathom_synth_fit_report {
    fathom_synth_stats target;   /* the capture's */
    fathom_synth_stats achieved; /* the fitted preset's, at the capture's n and positions */
    fathom_synth_stats base;     /* the base preset's, same n and positions */
    fathom_rope_style style;     /* the capture's RoPE, as used */
    double rope_base;
    uint32_t k;
} fathom_synth_fit_report;

/* Fit a preset to a capture: per-channel profiles and the positional
 * profile are measured directly; the topic amplitude, logit targets,
 * positional gain and query run are searched so that the generator's
 * statistics at the capture's n match the capture's. report may be NULL. */
FATHOM_API int fathom_synth_fit(fathom_synth_preset **out, const fathom_source *capture,
                                const fathom_synth_fit_options *options, fathom_synth_fit_report *report);
FATHOM_API void fathom_source_free(fathom_source *src);
FATHOM_API int fathom_source_get_info(const fathom_source *src, fathom_source_info *info);
/* One layer as float32: q [Hq x P x d], k and v [Hkv x n x d]; any may be
 * NULL to skip it. Thread-safe for distinct output buffers. */
FATHOM_API int fathom_source_layer(const fathom_source *src, uint32_t layer, float *q, float *k, float *v);
/* Extra metadata string of a capture ("" for none/synthetic). */
FATHOM_API int fathom_source_metadata(const fathom_source *src, const char *key, const char **value);
/* Metadata entry `index` in file order: *key and *value, or both NULL past
 * the last entry (a synthetic source has none). Valid while src lives. */
FATHOM_API int fathom_source_metadata_at(const fathom_source *src, uint64_t index, const char **key,
                                         const char **value);

typedef enum fathom_dtype { FATHOM_DTYPE_F32 = 0, FATHOM_DTYPE_F16, FATHOM_DTYPE_BF16 } fathom_dtype;

/* How layer's q, k and v are stored (a synthetic source: F32); NULL outputs
 * are skipped. */
FATHOM_API int fathom_source_dtypes(const fathom_source *src, uint32_t layer, fathom_dtype *q, fathom_dtype *k,
                                    fathom_dtype *v);

/* Write src (every layer) to a capture file in the given dtype. */
FATHOM_API int fathom_capture_write(const fathom_source *src, const char *path, fathom_dtype dtype);

/* Streaming writer, for producers such as the model's capture. */
typedef struct fathom_capture_writer fathom_capture_writer;
FATHOM_API int fathom_capture_writer_open(fathom_capture_writer **out, const char *path,
                                          const fathom_source_info *info, fathom_dtype dtype);
/* Extra __metadata__ entry (before the first layer). */
FATHOM_API int fathom_capture_writer_meta(fathom_capture_writer *w, const char *key, const char *value);
/* Layers in order 0..layers-1, shapes as fathom_source_layer. */
FATHOM_API int fathom_capture_writer_layer(fathom_capture_writer *w, uint32_t layer, const float *q,
                                           const float *k, const float *v);
/* Writes the header and closes; frees w in every case. */
FATHOM_API int fathom_capture_writer_close(fathom_capture_writer *w);

/* ===================================================================== *
 * eval — the fidelity harness (§4)
 * ===================================================================== */

typedef enum fathom_layer_budget { FATHOM_BUDGET_FLAT = 0, FATHOM_BUDGET_GREEDY } fathom_layer_budget;

typedef void (*fathom_progress_fn)(void *user, uint64_t done, uint64_t total);

typedef struct fathom_eval_config {
    uint32_t k;                       /* selection size per query head (sink + local included) */
    const fathom_source *calib;       /* NULL: statistics from the evaluated window itself */
    fathom_layer_budget layer_budget; /* for fathom and fathom-klt */
    uint32_t threads;                 /* 0: one per core */
    uint32_t max_positions;           /* 0: all of the source's positions, else the last this many */
    int planes_as_keys;               /* 1: attend over the selection with keys decoded from all four
                                         planes (the bit planes as the primary K cache, §7); the
                                         dense reference keeps the exact keys */
    fathom_progress_fn progress;      /* may be NULL */
    void *progress_user;
} fathom_eval_config;

typedef struct fathom_method_result {
    char name[32];
    double bits_per_token;       /* mean over query groups */
    double scan_bytes_per_step;  /* all layers and KV heads, one decode step */
    double row_bytes_per_step;   /* union of the group's winners, K and V rows in bf16 */
    double rel_error;            /* mean relative L2 error vs dense attention */
    double rel_error_stderr;     /* standard error of that mean over (layer, head, position) */
    double selection_ratio;      /* mean |selected| / n_visible */
} fathom_method_result;

/* Evaluate each method on src: index built once over the whole window, for
 * every queried position, layer and query head: select, attend exactly over
 * the selection, compare with dense attention. results[n_methods]. Every
 * method must pass fathom_method_check at the source's dim, with at most one
 * ds:c. k may exceed the window (scratch is sized by min(k, n)). Finite but
 * extreme keys or queries that overflow q.k give FATHOM_ERR_NONFINITE with a
 * message naming the layer, head and position, never a NaN error. Calls on
 * separate threads are independent (each hands its workers' errors back to
 * its own caller). */
FATHOM_API int fathom_eval_run(const fathom_source *src, const fathom_method *methods, uint32_t n_methods,
                               const fathom_eval_config *config, fathom_method_result *results);

#ifdef __cplusplus
}
#endif

#endif /* FATHOM_H */

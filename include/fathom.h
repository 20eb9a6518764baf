/*
 * libfathom — per-query read depth for sparse decoding over offloaded KV caches.
 *
 * One public header. Every function that can fail returns an int status:
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
 * landmarks, plan, select, attend, methods, source (capture + synthetic),
 * eval, gguf, tokenizer, model. The CUDA backend has its own header,
 * fathom_cuda.h.
 */
#ifndef FATHOM_H
#define FATHOM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
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
const char *fathom_status_name(int status);

/* The message of the last failure on this thread ("" if none). The pointer
 * stays valid until the next failing call on this thread. */
const char *fathom_last_error(void);

/* ===================================================================== *
 * fp16 (IEEE binary16), round to nearest even; used for scales and dtypes
 * ===================================================================== */

uint16_t fathom_f32_to_f16(float x);
float fathom_f16_to_f32(uint16_t h);
uint16_t fathom_f32_to_bf16(float x); /* round to nearest even; NaN stays NaN */
float fathom_bf16_to_f32(uint16_t h);

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
int fathom_basis_fit(fathom_basis **out, uint32_t dim, const float *keys, uint64_t n_keys,
                     const float *queries, uint64_t n_queries);
/* Build from explicit parts (copied). vectors is dim x dim column-major as above. */
int fathom_basis_create(fathom_basis **out, uint32_t dim, const float *mean, const float *vectors,
                        const float *eigenvalues);
void fathom_basis_free(fathom_basis *basis); /* NULL is fine */
uint32_t fathom_basis_dim(const fathom_basis *basis);
const float *fathom_basis_mean(const fathom_basis *basis);        /* [dim] */
const float *fathom_basis_vectors(const fathom_basis *basis);     /* [dim*dim], column-major */
const float *fathom_basis_eigenvalues(const fathom_basis *basis); /* [dim] */
/* out[c] = sum_i (x[i] - mean[i]) V[i,c]: a key into stored coordinates. */
int fathom_basis_rotate_key(const fathom_basis *basis, const float *key, float *out);
/* out[c] = sum_i q[i] V[i,c]: a query into stored coordinates (no centering;
 * q.k = qV.(k-mean)V + q.mean, and the last term is the same for every key). */
int fathom_basis_rotate_query(const fathom_basis *basis, const float *query, float *out);

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
 * The store also keeps per-channel running sums of the stored coordinates
 * (double), so it knows its keys' variance without calibration (App. D).
 */
typedef struct fathom_store fathom_store;

/* segment_blocks 0 means FATHOM_DEFAULT_SEGMENT_BLOCKS. basis may be NULL
 * (raw channels); if given it must have the same dim and outlive the store. */
int fathom_store_create(fathom_store **out, uint32_t dim, uint32_t segment_blocks,
                        const fathom_basis *basis);
void fathom_store_free(fathom_store *store); /* NULL is fine */

/* Append count key rows [count x dim] (original coordinates). All values must
 * be finite (else FATHOM_ERR_NONFINITE and nothing is appended). A scale above
 * the largest finite fp16 (65504) saturates there and codes clip; see docs. */
int fathom_store_append(fathom_store *store, const float *keys, uint64_t count);

uint64_t fathom_store_length(const fathom_store *store); /* tokens appended */
uint32_t fathom_store_dim(const fathom_store *store);
uint32_t fathom_store_segment_blocks(const fathom_store *store);
uint32_t fathom_store_segment_count(const fathom_store *store);
const fathom_basis *fathom_store_basis(const fathom_store *store); /* NULL if raw */

/* Bytes of plane words and scales for the blocks in use (n rounded up to 64
 * tokens); exactly 68 per token at dim 128 when n is a multiple of 64. */
uint64_t fathom_store_index_bytes(const fathom_store *store);
/* Bytes allocated: whole segments plus the open-block buffer. */
uint64_t fathom_store_allocated_bytes(const fathom_store *store);

typedef struct fathom_segment_view {
    const uint64_t *planes; /* [dim][4][segment_blocks] */
    const uint16_t *scales; /* [dim][segment_blocks], fp16 */
    uint64_t first_token;   /* absolute index of the segment's first token */
    uint32_t blocks;        /* blocks in use, the open one included */
    uint32_t tokens;        /* tokens in use */
} fathom_segment_view;

/* View of segment seg (< fathom_store_segment_count()). */
int fathom_store_segment(const fathom_store *store, uint32_t seg, fathom_segment_view *out);

/* Word of plane p for channel j and absolute block index b, and that block's
 * fp16 scale. For tests and tools; the scan reads segments directly. */
int fathom_store_word(const fathom_store *store, uint32_t channel, uint32_t plane, uint64_t block,
                      uint64_t *word, uint16_t *scale);

/* Decode tokens [first, first+count) at per-channel depth depths[dim]
 * (0..4) into out [count x dim], stored coordinates. A channel read to t
 * planes decodes to (c>>(4-t) + 0.5 - 2^(t-1)) * a / 2^(t-1), the t-bit
 * mid-rise quantizer of [-a, a); t = 0 gives 0. */
int fathom_store_decode(const fathom_store *store, uint64_t first, uint64_t count,
                        const uint8_t *depths, float *out);

/* Population variance of each stored coordinate over every appended token,
 * from the running sums. out[dim]. Needs length >= 1. */
int fathom_store_variance(const fathom_store *store, float *out);

/* Approximate scores of the first n tokens for `group` queries
 * [group x dim] (stored coordinates): scores[h*n + i] = sum_j q_hj khat_ij,
 * khat at depths[j]. Reads only planes p < depths[j] and scales of channels
 * with depths[j] > 0. bytes_read (may be NULL) gets the plane and scale bytes
 * it touched: sum over active channels of ceil(n/64)*(8*t_j + 2). */
int fathom_store_scan(const fathom_store *store, const uint8_t *depths, const float *queries,
                      uint32_t group, uint64_t n, float *scores, uint64_t *bytes_read);

/* ===================================================================== *
 * landmarks — fp16 mean key of each 8-token block (ShadowKV-style baseline)
 * ===================================================================== */

#define FATHOM_LANDMARK_TOKENS 8

typedef struct fathom_landmarks fathom_landmarks;
int fathom_landmarks_create(fathom_landmarks **out, uint32_t dim);
void fathom_landmarks_free(fathom_landmarks *lm);
/* Append key rows; an open last block's mean is over the tokens it has. */
int fathom_landmarks_append(fathom_landmarks *lm, const float *keys, uint64_t count);
uint64_t fathom_landmarks_length(const fathom_landmarks *lm);
/* scores[h*n + i] = q_h . mean(block of i) for the first n tokens. */
int fathom_landmarks_scan(const fathom_landmarks *lm, const float *queries, uint32_t group,
                          uint64_t n, float *scores, uint64_t *bytes_read);

/* ===================================================================== *
 * plan — channel importance and reverse water-filling (§3.3, §3.4)
 * ===================================================================== */

#define FATHOM_MAX_DEPTH 4
#define FATHOM_BISECT_STEPS 30

/* g[j] = sum_h q_hj^2 * var[j] over the group's queries [group x dim]. For the
 * rotated store pass rotated queries and the basis eigenvalues as var. */
int fathom_importance(uint32_t dim, uint32_t group, const float *queries, const float *var,
                      double *g);

/* t_j(theta) = clip(round(log4(g_j/theta)), 0, 4), round half up; g_j <= 0
 * gives 0. theta must be > 0. */
int fathom_depths_at(uint32_t dim, const double *g, double theta, uint8_t *depths);

/* Depths for the smallest water line theta with sum_j t_j <= budget. The sum
 * is a step function of theta, so the depths are those just above the first
 * breakpoint that would exceed the budget; *theta (may be NULL) gets that
 * breakpoint (0 when every positive channel fits at depth 4). Exact search
 * over the breakpoints g_j / 4^(m - 1/2), m = 1..4; tied breakpoints enter
 * together. */
int fathom_water_fill(uint32_t dim, const double *g, uint32_t budget, uint8_t *depths,
                      double *theta);
/* The paper's procedure: 30 steps of bisection on log(theta). Same depths as
 * fathom_water_fill unless two breakpoints lie within the final bracket. */
int fathom_water_fill_bisect(uint32_t dim, const double *g, uint32_t budget, uint8_t *depths,
                             double *theta);

/* Code bits plus scale bits per token for a depth vector:
 * sum_j t_j + (16/64) * #{j : t_j > 0}. */
double fathom_depth_bits(uint32_t dim, const uint8_t *depths);

/* Greedy per-layer budget (§3.4). err[l*n_levels + i] is the calibration
 * error of layer l at budget levels[i] (ascending). Every layer starts at
 * levels[0]; while the total allows, one step moves a layer to its next level,
 * choosing the largest error drop per bit. Mean of budgets_out <= target. */
int fathom_greedy_layer_budgets(uint32_t layers, const uint32_t *levels, uint32_t n_levels,
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
int fathom_select(const float *scores, uint64_t n_visible, uint32_t k, uint32_t sink,
                  uint32_t local, uint64_t *work, uint32_t *idx_out, uint32_t *count);
size_t fathom_select_work_size(uint64_t n_visible); /* in bytes */

/* Size of the union of `sets` sorted index lists (the rows a fetch moves). */
int fathom_union_size(uint32_t n_sets, const uint32_t *const *sets, const uint32_t *counts,
                      uint32_t *union_count);

/* ===================================================================== *
 * attend — exact softmax attention, scale 1/sqrt(dim)
 * ===================================================================== */

/* out[dim] = softmax(q.K_S / sqrt(dim)) V_S over rows S = idx[0..count) of
 * keys/values [n x dim] (idx NULL: rows 0..count-1, dense). Accumulates in
 * double. */
int fathom_attend(uint32_t dim, const float *query, const float *keys, const float *values,
                  const uint32_t *idx, uint64_t count, float *out);

/* ||a - b|| / ||b||; 0 if both are zero. */
double fathom_rel_l2(uint32_t dim, const float *a, const float *b);

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
    FATHOM_METHOD_DENSE       /* dense         no selection */
} fathom_method_kind;

typedef struct fathom_method {
    fathom_method_kind kind;
    uint32_t param;  /* B, r or c; 0 for methods without one */
    char name[32];   /* the spec as given, e.g. "fathom:48" */
} fathom_method;

/* Parse one spec ("fathom:48", "sparq:16", "thumb", ...). */
int fathom_method_parse(const char *spec, fathom_method *out);
/* Parse a comma-separated list into out[cap]; *count gets the number. */
int fathom_method_parse_list(const char *list, fathom_method *out, uint32_t cap, uint32_t *count);
/* Bits per token of a fixed-depth method at this dim (sparq, ds, loki,
 * thumb, landmark, full4: 68/136/136/288/256/544 at dim 128, r=c=16/32);
 * oracle reads bf16 keys (16*dim); dense scans nothing (0). For fathom and
 * fathom-klt the bits depend on the plan: returns -1. */
double fathom_method_fixed_bits(const fathom_method *method, uint32_t dim);

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
int fathom_capture_open(fathom_source **out, const char *path);
/* Synthetic generator, seeded and deterministic. preset: "qwen3-8b",
 * "llama-3.1-8b", "smollm2-135m". See docs/synthetic.md. */
int fathom_synth_open(fathom_source **out, const char *preset, uint64_t context, uint32_t positions,
                      uint64_t seed);
void fathom_source_free(fathom_source *src);
int fathom_source_get_info(const fathom_source *src, fathom_source_info *info);
/* One layer as float32: q [Hq x P x d], k and v [Hkv x n x d]; any may be
 * NULL to skip it. Thread-safe for distinct output buffers. */
int fathom_source_layer(const fathom_source *src, uint32_t layer, float *q, float *k, float *v);
/* Extra metadata string of a capture ("" for none/synthetic). */
int fathom_source_metadata(const fathom_source *src, const char *key, const char **value);
/* Metadata entry `index` in file order: *key and *value, or both NULL past
 * the last entry (a synthetic source has none). Valid while src lives. */
int fathom_source_metadata_at(const fathom_source *src, uint64_t index, const char **key,
                              const char **value);

typedef enum fathom_dtype { FATHOM_DTYPE_F32 = 0, FATHOM_DTYPE_F16, FATHOM_DTYPE_BF16 } fathom_dtype;

/* How layer's q, k and v are stored (a synthetic source: F32); NULL outputs
 * are skipped. */
int fathom_source_dtypes(const fathom_source *src, uint32_t layer, fathom_dtype *q, fathom_dtype *k,
                         fathom_dtype *v);

/* Write src (every layer) to a capture file in the given dtype. */
int fathom_capture_write(const fathom_source *src, const char *path, fathom_dtype dtype);

/* Streaming writer, for producers such as the model's capture. */
typedef struct fathom_capture_writer fathom_capture_writer;
int fathom_capture_writer_open(fathom_capture_writer **out, const char *path,
                               const fathom_source_info *info, fathom_dtype dtype);
/* Extra __metadata__ entry (before the first layer). */
int fathom_capture_writer_meta(fathom_capture_writer *w, const char *key, const char *value);
/* Layers in order 0..layers-1, shapes as fathom_source_layer. */
int fathom_capture_writer_layer(fathom_capture_writer *w, uint32_t layer, const float *q,
                                const float *k, const float *v);
/* Writes the header and closes; frees w in every case. */
int fathom_capture_writer_close(fathom_capture_writer *w);

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
 * the selection, compare with dense attention. results[n_methods]. */
int fathom_eval_run(const fathom_source *src, const fathom_method *methods, uint32_t n_methods,
                    const fathom_eval_config *config, fathom_method_result *results);

/* ===================================================================== *
 * tokenizer — GPT-2 style byte-level BPE (SmolLM2 and kin)
 * ===================================================================== */

/* Token types, with the values of GGUF tokenizer.ggml.token_type. */
typedef enum fathom_token_type {
    FATHOM_TOKEN_NORMAL = 1,
    FATHOM_TOKEN_UNKNOWN = 2,
    FATHOM_TOKEN_CONTROL = 3,      /* <|im_start|>, <|endoftext|>, ... */
    FATHOM_TOKEN_USER_DEFINED = 4,
    FATHOM_TOKEN_UNUSED = 5,
    FATHOM_TOKEN_BYTE = 6
} fathom_token_type;

/*
 * What a tokenizer is built from; every field maps to one GGUF key.
 * Strings are (pointer, byte length) pairs; a NULL length array means the
 * strings are NUL-terminated. Everything is copied: the spec may be freed
 * after fathom_tokenizer_create().
 *
 * Tokens are in the byte-level alphabet (GPT-2 bytes_to_unicode: byte 0x20
 * is "\u0120", ...), valid UTF-8, no two alike (empty ones are allowed and
 * never produced). Merge i is "left right" (split at the first space after
 * the first byte) with rank i; left, right and their concatenation must be
 * tokens. A repeated pair keeps its first rank. A byte with no single-byte
 * token is dropped by encode, as HF tokenizers (no unk token) and llama.cpp
 * drop it: SmolLM2 lacks 21 (0x04 0x06 0x13 0x14 0x16 0x1d 0xc0 0xc1 0xf1
 * 0xf2 0xf5-0xff), so only text without those bytes round-trips exactly.
 */
typedef struct fathom_tokenizer_spec {
    const char *model;            /* tokenizer.ggml.model: only "gpt2" */
    const char *pre;              /* tokenizer.ggml.pre: "smollm" (or a llama.cpp alias
                                     with the same split: "starcoder", "refact",
                                     "command-r", "codeshell", "exaone", "minerva")
                                     or "gpt2" */
    uint64_t n_tokens;            /* 256 .. INT32_MAX */
    const char *const *tokens;    /* [n_tokens] tokenizer.ggml.tokens */
    const uint64_t *token_lens;   /* [n_tokens] or NULL */
    const int32_t *token_types;   /* [n_tokens] fathom_token_type, or NULL: all normal */
    uint64_t n_merges;
    const char *const *merges;    /* [n_merges] tokenizer.ggml.merges (NULL if none) */
    const uint64_t *merge_lens;   /* [n_merges] or NULL */
    int32_t bos_id;               /* tokenizer.ggml.bos_token_id, -1: none */
    int32_t eos_id;               /* tokenizer.ggml.eos_token_id, -1: none */
    int add_bos;                  /* tokenizer.ggml.add_bos_token: prepend bos_id */
} fathom_tokenizer_spec;

typedef struct fathom_tokenizer fathom_tokenizer;

/* Build a tokenizer (immutable afterwards; encode/decode are thread-safe).
 * FATHOM_ERR_UNSUPPORTED for another model or pre-tokenizer,
 * FATHOM_ERR_FORMAT for a malformed vocabulary (invalid UTF-8, duplicate
 * token, a merge not "left right" or naming a string not in the vocabulary,
 * unknown token type). */
int fathom_tokenizer_create(fathom_tokenizer **out, const fathom_tokenizer_spec *spec);
void fathom_tokenizer_free(fathom_tokenizer *tok); /* NULL is fine */

/*
 * Encode len bytes of text (NULL is fine when len is 0) into ids[cap].
 * Pipeline, as HF tokenizers / llama.cpp for the "smollm" pre-tokenizer:
 *   1. special tokens: with parse_special, control (and unknown) tokens are
 *      cut out of the text, leftmost-longest, and emitted whole;
 *      user-defined tokens are always cut out. Without it they are text.
 *   2. every Unicode number character (\p{N}) is a piece of its own
 *      ("smollm" only), then the GPT-2 regex
 *      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *      splits what lies between (PCRE2, UTF + UCP);
 *   3. byte-level BPE on each piece: the lowest-ranked merge first, ties to
 *      the left.
 * Whitespace in step 2 is Unicode White_Space (as Oniguruma's \s in HF; not
 * PCRE2's, which adds U+180E). \p{L} and \p{N} come from the system PCRE2's
 * tables (Unicode 14 in 10.42): characters assigned since (Unicode 15/16,
 * e.g. Garay, Kawi, CJK ext. H) may split differently from a newer HF build.
 * Text need not be valid UTF-8: each maximal run of invalid bytes becomes a
 * piece of its own and is encoded byte-level like any other, so decode
 * returns the exact bytes when the vocabulary has them all (HF cannot take
 * such input; llama.cpp would turn each bad byte into U+FFFD). The bos
 * token is prepended if the spec asked.
 * *n_out gets the number of ids the text needs; if that exceeds cap,
 * FATHOM_ERR_INVALID_ARG ("buffer too small, need N") and ids holds the
 * first cap of them. cap 0 (ids NULL) is thus a size query.
 */
int fathom_tokenizer_encode(const fathom_tokenizer *tok, const char *text, size_t len,
                            int parse_special, int32_t *ids, size_t cap, size_t *n_out);

/* The bytes of n ids concatenated into out[cap] (no NUL terminator added).
 * Normal tokens map back through the byte-level alphabet; control,
 * user-defined and unknown tokens give their text verbatim. The bytes may be
 * invalid UTF-8 when ids cut a character (HF would print U+FFFD there).
 * *len_out gets the bytes needed; more than cap: FATHOM_ERR_INVALID_ARG as
 * for encode. An id out of range: FATHOM_ERR_INVALID_ARG. */
int fathom_tokenizer_decode(const fathom_tokenizer *tok, const int32_t *ids, size_t n, char *out,
                            size_t cap, size_t *len_out);
/* The bytes of one token, as decode. */
int fathom_tokenizer_token_to_piece(const fathom_tokenizer *tok, int32_t id, char *out, size_t cap,
                                    size_t *len_out);
/* The id of the token whose vocabulary string is exactly text[len]
 * (e.g. "<|im_end|>"), or -1 in *id if there is none. */
int fathom_tokenizer_find(const fathom_tokenizer *tok, const char *text, size_t len, int32_t *id);

uint32_t fathom_tokenizer_vocab_size(const fathom_tokenizer *tok); /* 0 for NULL */
int32_t fathom_tokenizer_bos(const fathom_tokenizer *tok);         /* -1: none */
int32_t fathom_tokenizer_eos(const fathom_tokenizer *tok);         /* -1: none */
/* The fathom_token_type of id, or FATHOM_ERR_INVALID_ARG. */
int fathom_tokenizer_token_type(const fathom_tokenizer *tok, int32_t id);

/* ===================================================================== *
 * gguf — a GGUF (v2, v3) reader and ggml dequantization
 * ===================================================================== */

/*
 * The file is mapped read-only, never copied: tensor data pointers point
 * into the mapping. Keys, tensor names and string values are copied once
 * into NUL-terminated storage owned by the fathom_gguf. The file is treated
 * as hostile: every count, length, dimension, type, offset and alignment is
 * checked (overflow-safe) against the file size before use, empty or
 * duplicate keys and tensor names (and names holding a NUL byte) are
 * rejected, arrays nest at most FATHOM_GGUF_MAX_NESTING deep, tensors must
 * be aligned and lie inside the data section without overlapping, and any
 * violation is FATHOM_ERR_FORMAT.
 * Everything returned stays valid until fathom_gguf_close(); an open file is
 * read-only, so any number of threads may query it at once. The mapping
 * assumes nobody truncates the file while it is open.
 */

/* ggml tensor types; values are ggml's numbering (ggml.h). Missing numbers
 * (4, 5, 31-33, 36-38) were removed from ggml and are rejected. */
typedef enum fathom_ggml_type {
    FATHOM_GGML_TYPE_F32 = 0,
    FATHOM_GGML_TYPE_F16 = 1,
    FATHOM_GGML_TYPE_Q4_0 = 2,
    FATHOM_GGML_TYPE_Q4_1 = 3,
    FATHOM_GGML_TYPE_Q5_0 = 6,
    FATHOM_GGML_TYPE_Q5_1 = 7,
    FATHOM_GGML_TYPE_Q8_0 = 8,
    FATHOM_GGML_TYPE_Q8_1 = 9,
    FATHOM_GGML_TYPE_Q2_K = 10,
    FATHOM_GGML_TYPE_Q3_K = 11,
    FATHOM_GGML_TYPE_Q4_K = 12,
    FATHOM_GGML_TYPE_Q5_K = 13,
    FATHOM_GGML_TYPE_Q6_K = 14,
    FATHOM_GGML_TYPE_Q8_K = 15,
    FATHOM_GGML_TYPE_IQ2_XXS = 16,
    FATHOM_GGML_TYPE_IQ2_XS = 17,
    FATHOM_GGML_TYPE_IQ3_XXS = 18,
    FATHOM_GGML_TYPE_IQ1_S = 19,
    FATHOM_GGML_TYPE_IQ4_NL = 20,
    FATHOM_GGML_TYPE_IQ3_S = 21,
    FATHOM_GGML_TYPE_IQ2_S = 22,
    FATHOM_GGML_TYPE_IQ4_XS = 23,
    FATHOM_GGML_TYPE_I8 = 24,
    FATHOM_GGML_TYPE_I16 = 25,
    FATHOM_GGML_TYPE_I32 = 26,
    FATHOM_GGML_TYPE_I64 = 27,
    FATHOM_GGML_TYPE_F64 = 28,
    FATHOM_GGML_TYPE_IQ1_M = 29,
    FATHOM_GGML_TYPE_BF16 = 30,
    FATHOM_GGML_TYPE_TQ1_0 = 34,
    FATHOM_GGML_TYPE_TQ2_0 = 35,
    FATHOM_GGML_TYPE_MXFP4 = 39,
    FATHOM_GGML_TYPE_NVFP4 = 40,
    FATHOM_GGML_TYPE_Q1_0 = 41,
    FATHOM_GGML_TYPE_COUNT = 42
} fathom_ggml_type;

/* Block layout of a type: elements per block and bytes per block (1 and the
 * element size for plain types). FATHOM_ERR_UNSUPPORTED for an id ggml does
 * not define; NULL outputs are skipped. */
int fathom_ggml_type_block(fathom_ggml_type type, uint32_t *block_elements, uint32_t *block_bytes);
/* Lower-case ggml name ("q4_1", "f32"); "unknown" for other ids. */
const char *fathom_ggml_type_name(fathom_ggml_type type);
/* Bytes of n_elements of type: FATHOM_ERR_INVALID_ARG unless n_elements is a
 * multiple of the block size and the size fits in 64 bits. */
int fathom_ggml_row_bytes(fathom_ggml_type type, uint64_t n_elements, uint64_t *bytes);
/* Decode n_elements (a multiple of the block size) from src into dst as
 * float32, exactly as ggml's reference dequantization does (same float
 * operations in the same order). src needs at least
 * fathom_ggml_row_bytes(type, n_elements) bytes (src_bytes says how many it
 * has; more is fine) and may be unaligned. Implemented: F32, F16, BF16,
 * Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K;
 * FATHOM_ERR_UNSUPPORTED for other types. NaN/inf in the data (or in a block scale) pass through. */
int fathom_dequantize(fathom_ggml_type type, const void *src, uint64_t src_bytes,
                      uint64_t n_elements, float *dst);

/* GGUF metadata value types (numbering of the format). */
typedef enum fathom_gguf_type {
    FATHOM_GGUF_UINT8 = 0,
    FATHOM_GGUF_INT8 = 1,
    FATHOM_GGUF_UINT16 = 2,
    FATHOM_GGUF_INT16 = 3,
    FATHOM_GGUF_UINT32 = 4,
    FATHOM_GGUF_INT32 = 5,
    FATHOM_GGUF_FLOAT32 = 6,
    FATHOM_GGUF_BOOL = 7,
    FATHOM_GGUF_STRING = 8,
    FATHOM_GGUF_ARRAY = 9,
    FATHOM_GGUF_UINT64 = 10,
    FATHOM_GGUF_INT64 = 11,
    FATHOM_GGUF_FLOAT64 = 12
} fathom_gguf_type;

#define FATHOM_GGUF_MAX_DIMS 4
#define FATHOM_GGUF_DEFAULT_ALIGNMENT 32
#define FATHOM_GGUF_MAX_NESTING 8 /* arrays of arrays deeper than this are rejected */

typedef struct fathom_gguf fathom_gguf;

/* A view of one metadata value (or array element), filled by the calls
 * below; valid until fathom_gguf_close(). Read scalars with the typed
 * getters, array elements with fathom_gguf_array_get(). */
typedef struct fathom_gguf_value {
    fathom_gguf_type type;
    fathom_gguf_type elem_type; /* ARRAY: type of its elements */
    uint64_t count;             /* ARRAY: number of elements; STRING: bytes, no NUL */
    const char *string;         /* STRING: NUL-terminated copy (may hold NULs before count) */
    union {
        uint64_t u;
        int64_t i;
        double f;
    } number_;           /* private: integer/bool scalars widened, floats as double */
    const void *array_;  /* private */
} fathom_gguf_value;

typedef struct fathom_gguf_tensor_info {
    const char *name;          /* NUL-terminated */
    fathom_ggml_type type;
    uint32_t n_dims;           /* 0..4 */
    uint64_t dims[FATHOM_GGUF_MAX_DIMS]; /* ggml "ne" order: dims[0] varies fastest; unused = 1 */
    uint64_t n_elements;
    uint64_t offset;           /* from the start of the file (aligned) */
    uint64_t bytes;            /* fathom_ggml_row_bytes(type, n_elements) */
    const void *data;          /* into the mapping: bytes readable bytes */
} fathom_gguf_tensor_info;

/* Map and parse a GGUF v2 or v3 file. FATHOM_ERR_IO if it cannot be opened
 * or mapped, FATHOM_ERR_FORMAT (with the byte offset in the message) for
 * anything malformed. */
int fathom_gguf_open(fathom_gguf **out, const char *path);
void fathom_gguf_close(fathom_gguf *gguf); /* NULL is fine */

uint32_t fathom_gguf_version(const fathom_gguf *gguf);     /* 2 or 3; 0 for NULL */
uint64_t fathom_gguf_alignment(const fathom_gguf *gguf);   /* general.alignment or 32 */
/* File offset of the data section (past the end for a file without tensors). */
uint64_t fathom_gguf_data_offset(const fathom_gguf *gguf);
uint64_t fathom_gguf_file_size(const fathom_gguf *gguf);

/* Metadata, in file order. */
uint64_t fathom_gguf_kv_count(const fathom_gguf *gguf);
/* Key and value of entry index (< kv_count); either output may be NULL. */
int fathom_gguf_kv_at(const fathom_gguf *gguf, uint64_t index, const char **key,
                      fathom_gguf_value *value);
/* Index of key, or -1 when absent (or gguf/key NULL). O(log n). */
int64_t fathom_gguf_find_key(const fathom_gguf *gguf, const char *key);
/* Value of key; FATHOM_ERR_FORMAT when the file lacks it. */
int fathom_gguf_get(const fathom_gguf *gguf, const char *key, fathom_gguf_value *value);

/* Typed reads of a value. Integer getters accept any integer type whose
 * value fits the result; float getters accept FLOAT32 and FLOAT64 (FLOAT64 is
 * rounded to float for _f32); bool and string need exactly BOOL / STRING.
 * Anything else is FATHOM_ERR_FORMAT (the file has the wrong type). */
int fathom_gguf_value_u32(const fathom_gguf_value *value, uint32_t *out);
int fathom_gguf_value_i32(const fathom_gguf_value *value, int32_t *out);
int fathom_gguf_value_u64(const fathom_gguf_value *value, uint64_t *out);
int fathom_gguf_value_i64(const fathom_gguf_value *value, int64_t *out);
int fathom_gguf_value_f32(const fathom_gguf_value *value, float *out);
int fathom_gguf_value_f64(const fathom_gguf_value *value, double *out);
int fathom_gguf_value_bool(const fathom_gguf_value *value, int *out); /* 0 or 1 */
/* len may be NULL. */
int fathom_gguf_value_string(const fathom_gguf_value *value, const char **str, uint64_t *len);
/* Element index (< value->count) of an ARRAY value; FATHOM_ERR_INVALID_ARG
 * if value is not an array or index is out of range. */
int fathom_gguf_array_get(const fathom_gguf_value *array, uint64_t index, fathom_gguf_value *elem);

/* Shorthands: fathom_gguf_get() then the typed getter. */
int fathom_gguf_get_u32(const fathom_gguf *gguf, const char *key, uint32_t *out);
int fathom_gguf_get_i32(const fathom_gguf *gguf, const char *key, int32_t *out);
int fathom_gguf_get_u64(const fathom_gguf *gguf, const char *key, uint64_t *out);
int fathom_gguf_get_f32(const fathom_gguf *gguf, const char *key, float *out);
int fathom_gguf_get_bool(const fathom_gguf *gguf, const char *key, int *out);
int fathom_gguf_get_string(const fathom_gguf *gguf, const char *key, const char **str,
                           uint64_t *len);
/* An ARRAY whose elements have type elem_type, else FATHOM_ERR_FORMAT. */
int fathom_gguf_get_array(const fathom_gguf *gguf, const char *key, fathom_gguf_type elem_type,
                          fathom_gguf_value *array);

/* Tensors, in file order. */
uint64_t fathom_gguf_tensor_count(const fathom_gguf *gguf);
int fathom_gguf_tensor_at(const fathom_gguf *gguf, uint64_t index, fathom_gguf_tensor_info *info);
/* Index of the tensor called name, or -1 when absent (or arguments NULL). */
int64_t fathom_gguf_find_tensor(const fathom_gguf *gguf, const char *name);
/* Info of the tensor called name; FATHOM_ERR_FORMAT when the file lacks it. */
int fathom_gguf_tensor(const fathom_gguf *gguf, const char *name, fathom_gguf_tensor_info *info);

/* ===================================================================== *
 * model — a Llama-family decoder (SmolLM2; Qwen3 with QK-norm) from a
 * GGUF file, run on the CPU in plain C
 * ===================================================================== */

/*
 * Weights are dequantized once at load to float32 (SmolLM2-135M: 540 MB)
 * and never touched again; every hyper-parameter comes from the GGUF
 * metadata and every tensor's shape is checked against them. Architectures:
 * "llama" (RoPE on adjacent pairs (2i, 2i+1): GGUF stores Q/K rows permuted
 * for it) and "qwen3" (QK-norm, RoPE on pairs (i, i + d/2) as llama.cpp's
 * NEOX mode). Biases, RoPE scaling and unknown tensors are
 * FATHOM_ERR_UNSUPPORTED, not silently ignored.
 */
typedef struct fathom_model fathom_model;

typedef struct fathom_model_info {
    char arch[16];            /* general.architecture */
    char name[64];            /* general.name ("" if absent) */
    uint32_t layers;          /* <arch>.block_count */
    uint32_t embed;           /* <arch>.embedding_length */
    uint32_t ffn;             /* <arch>.feed_forward_length */
    uint32_t q_heads;         /* <arch>.attention.head_count */
    uint32_t kv_heads;        /* <arch>.attention.head_count_kv */
    uint32_t head_dim;        /* <arch>.attention.key_length, else embed / q_heads */
    uint32_t vocab;           /* rows of token_embd (<arch>.vocab_size must agree) */
    uint32_t context_length;  /* <arch>.context_length */
    float rope_base;          /* <arch>.rope.freq_base (10000 if absent) */
    float rms_eps;            /* <arch>.attention.layer_norm_rms_epsilon */
    int rope_neox;            /* 1: pairs (i, i + d/2); 0: adjacent pairs */
    int qk_norm;              /* 1: per-head RMSNorm of q and k before RoPE */
    int tied_output;          /* 1: output.weight absent, token_embd reused */
    uint64_t params;          /* weights held, in floats (tied output counted once) */
} fathom_model_info;

/* Open, validate and dequantize a GGUF model. FATHOM_ERR_IO / _FORMAT for a
 * bad file (the message names the key or tensor), _UNSUPPORTED for an
 * architecture, tensor type or feature this code does not run. */
int fathom_model_open(fathom_model **out, const char *path);
void fathom_model_free(fathom_model *model); /* NULL is fine */
int fathom_model_get_info(const fathom_model *model, fathom_model_info *info);

/* A tokenizer built from the GGUF metadata tokenizer.ggml.* (model, pre,
 * tokens, token_type, merges, bos/eos_token_id, add_bos_token); free it with
 * fathom_tokenizer_free. fathom_model_tokenizer also checks that every token
 * has an embedding row (FATHOM_ERR_FORMAT otherwise). */
int fathom_tokenizer_from_gguf(fathom_tokenizer **out, const fathom_gguf *gguf);
int fathom_model_tokenizer(const fathom_model *model, fathom_tokenizer **out);

/*
 * A decoding context: the KV cache (float32, [layer][kv head][position][d],
 * keys after RoPE / QK-norm, as attention sees them) and the position.
 * Matmuls run on `threads` threads over rows (0: one per core); results do
 * not depend on the thread count or on how tokens are split between prefill
 * calls and steps (every dot product sums in the same order). One call at a
 * time per context; contexts of one model may run on different threads (the
 * model is read-only). After a failed prefill or step the context refuses
 * work (FATHOM_ERR_STATE) until fathom_ctx_reset.
 */
typedef struct fathom_ctx fathom_ctx;

/* n_ctx: capacity in positions (0: the model's context_length). */
int fathom_ctx_create(fathom_ctx **out, const fathom_model *model, uint32_t n_ctx,
                      uint32_t threads);
void fathom_ctx_free(fathom_ctx *ctx); /* NULL is fine */
uint64_t fathom_ctx_length(const fathom_ctx *ctx);   /* positions filled */
uint64_t fathom_ctx_capacity(const fathom_ctx *ctx);
/* Forget every position (the attention method stays, its index is emptied). */
int fathom_ctx_reset(fathom_ctx *ctx);

/* Forget positions [n, length): the cache keeps rows [0, n) as they are
 * and a sparse method's index is rebuilt over them, so decoding continues
 * from position n as if the later tokens had never run. n <= length. */
int fathom_ctx_truncate(fathom_ctx *ctx, uint64_t n);

/* Run n tokens (ids < vocab) at the next positions with dense causal
 * attention. logits_out [vocab] (may be NULL) gets the last token's logits.
 * FATHOM_ERR_STATE if the tokens do not fit in the capacity. */
int fathom_ctx_prefill(fathom_ctx *ctx, const int32_t *tokens, uint64_t n, float *logits_out);
/* One decode step: the token at the next position, attention by the method
 * set with fathom_ctx_set_attention (dense by default). */
int fathom_ctx_step(fathom_ctx *ctx, int32_t token, float *logits_out);

/*
 * Attention of decode steps. method NULL or dense: exact dense attention.
 * Otherwise, per layer and KV head, an index over the cached keys (a
 * fathom_store, grown by fathom_store_append as tokens arrive; landmarks for
 * "landmark") is scanned for the group's queries, fathom_select keeps sink 4
 * + local 32 + top-k per query head (k in total) and fathom_attend attends
 * exactly over the selection. oracle scores with exact q.k. fathom's plan
 * uses the store's running channel variance, or the calibration keys' when
 * calib is given. fathom-klt, ds and loki need calib (a capture of this
 * model: same layers, heads and dim), else FATHOM_ERR_UNSUPPORTED. calib is
 * read during this call only. May be called at any time; prefill stays dense.
 */
int fathom_ctx_set_attention(fathom_ctx *ctx, const fathom_method *method, uint32_t k,
                             const fathom_source *calib);

typedef struct fathom_ctx_stats {
    uint64_t prefill_tokens, decode_steps;
    uint64_t sparse_steps;     /* decode steps that used the sparse path */
    double scan_bytes;         /* index bytes the scans touched, all layers and heads */
    double selected_rows;      /* sum over steps, layers, query heads of |selection| */
    double visible_rows;       /* sum of the visible positions of those selections */
} fathom_ctx_stats;
int fathom_ctx_get_stats(const fathom_ctx *ctx, fathom_ctx_stats *stats);

/* Record the queries (after RoPE / QK-norm) of positions [first, first+count)
 * as they are computed, into the caller's buffer [layers x q_heads x count x d]
 * (the capture layout), which must stay valid while positions in that range
 * are run. buffer NULL stops recording. */
int fathom_ctx_record_queries(fathom_ctx *ctx, uint64_t first, uint32_t count, float *buffer);
/* The cached keys and values of one layer and KV head: rows
 * [0, fathom_ctx_length) of d floats; valid until the next call on ctx. */
int fathom_ctx_kv(const fathom_ctx *ctx, uint32_t layer, uint32_t kv_head, const float **keys,
                  const float **values);
/* Called during prefill with (tokens done, tokens of this call). */
int fathom_ctx_set_progress(fathom_ctx *ctx, fathom_progress_fn fn, void *user);

#ifdef __cplusplus
}
#endif

#endif /* FATHOM_H */

/*
 * libfathom CUDA backend — one decode step of sparse attention over a
 * bit-plane K index, on the GPU, with no host round trip (§3.6, §5.1).
 *
 * For every KV head of a batch ("problem": one session, one layer, one KV
 * head) a step runs these phases, on one stream or pipelined over the heads
 * with a fathom_cuda_lanes object (below):
 *   plan      depths t_j from the query group: water-filling (fathom:B, the
 *             same depths as fathom_water_fill), top-r channels (sparq:r),
 *             or a caller's fixed depth vector (ds, thumb, full4);
 *   transfer  the planned runs (the first t_j planes of channel j are ONE
 *             contiguous run, plus that channel's scales) from pinned host
 *             memory into an HBM staging buffer: a fixed run list, one slot
 *             per channel and kind, length 0 when inactive (none when the
 *             index is RESIDENT in device memory);
 *   scan      approximate scores of every token for each query head;
 *   top-k     sink + local + top of the rest per query head (fathom_select's
 *             semantics: ties to the lower index, NaN lowest);
 *   fetch     the union of the group's winners, K and V rows from host;
 *   attend    exact softmax attention over each head's own selection.
 * Every call is asynchronous on `stream`, allocates nothing and can be
 * captured into a CUDA graph. Pointers named "device-accessible" may be
 * device memory or mapped pinned host memory (cudaHostAlloc with
 * cudaHostAllocMapped, or cudaHostRegister + cudaHostGetDevicePointer).
 *
 * Errors: every function returns FATHOM_OK or a negative fathom_status and
 * sets fathom_last_error(). A failing CUDA call is FATHOM_ERR_DEVICE with the
 * CUDA error's name in the message. Device data is not validated on the
 * host: a depth above 4 is clamped; a top-k whose scores contradict its own
 * histogram (memory corrupted under it, a workspace shared by two steps in
 * flight) traps on the device, so the stream reports an error (the caller's
 * bug is loud, never a silently wrong selection).
 *
 * Stable and experimental: this header's plain part (config, problems,
 * workspace size, step, lanes, the next layer's prefetch) is the API.
 * Switches kept to measure alternatives against it (the nibble-packed scan,
 * bit planes as the K cache, the DIRECT transport, per-phase events, lane
 * traces) are declared only when FATHOM_CUDA_EXPERIMENTAL is defined before
 * this header is included (zstd's ZSTD_STATIC_LINKING_ONLY pattern); they
 * may change or go. Their struct fields exist in every build (the layout
 * does not depend on the macro) and zero selects the stable behaviour, so
 * a zero-initialised config or args is a stable one. The prefetch is
 * stable: it is how a pipelined step keeps the link busy across layers;
 * staged_depths is its other half (the step after a prefetch), so it is
 * stable too.
 */
#ifndef FATHOM_CUDA_H
#define FATHOM_CUDA_H

#include "fathom.h"

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FATHOM_CUDA_DIM 128     /* head dimension the kernels are built for */
#define FATHOM_CUDA_MAX_GROUP 8 /* query heads per KV head */
#define FATHOM_CUDA_MAX_K 1024  /* selection size per query head */

typedef enum fathom_cuda_scan_kind {
    FATHOM_CUDA_SCAN_WATER_FILL = 0,   /* fathom:B  depths by water-filling, budget B code bits */
    FATHOM_CUDA_SCAN_TOP_CHANNELS = 1, /* sparq:r   depth 4 on the r largest sum_h |q_j| */
    FATHOM_CUDA_SCAN_FIXED = 2,        /* caller's depths: ds:c, thumb (2 on all), full4 */
    FATHOM_CUDA_SCAN_LANDMARK = 3,     /* fp16 mean key per 8 tokens, 256 bits/token */
    FATHOM_CUDA_SCAN_ORACLE = 4        /* exact q.k over the bf16 keys */
#ifdef FATHOM_CUDA_EXPERIMENTAL
    ,
    FATHOM_CUDA_SCAN_NIBBLE4 = 5 /* 4-bit channel scan of a nibble-packed K cache (the same
                                    codes as full4, another layout), of every channel or of
                                    the fixed_depths channels: the baselines the bit-plane
                                    scan is compared with in HBM */
#endif
} fathom_cuda_scan_kind;

typedef enum fathom_cuda_transport {
    FATHOM_CUDA_GATHER_KERNEL = 0, /* gather kernel, 16-byte loads of mapped host memory */
    FATHOM_CUDA_RESIDENT = 1       /* no transfer: the index is in device memory, scan it there */
#ifdef FATHOM_CUDA_EXPERIMENTAL
    ,
    FATHOM_CUDA_DIRECT = 2 /* no staging: the scan reads the planes and scales where they
                              are, in mapped pinned host memory; the link carries exactly
                              the words and scales the scan touches (the staged copy's
                              HBM write and re-read disappear, and the scan overlaps the
                              transfer by construction) */
#endif
} fathom_cuda_transport;

/* Shapes and method of one step; the same for every problem of the call. */
typedef struct fathom_cuda_config {
    uint32_t dim;      /* must be FATHOM_CUDA_DIM */
    uint32_t group;    /* G: query heads per KV head, 1..FATHOM_CUDA_MAX_GROUP */
    uint32_t problems; /* KV heads in the batch (sessions x layers x heads) */
    uint64_t tokens;   /* n: keys visible to every query (n >= 1) */
    uint32_t k;        /* selection per query head, sink + local <= k <= FATHOM_CUDA_MAX_K */
    uint32_t sink;     /* first positions always kept (FATHOM_SINK_TOKENS) */
    uint32_t local;    /* last positions always kept (FATHOM_LOCAL_TOKENS) */
    fathom_cuda_scan_kind scan;
    uint32_t param;    /* WATER_FILL: budget B (1..4*dim); TOP_CHANNELS: r (1..dim) */
    fathom_cuda_transport transport;
    uint32_t row_stride; /* bf16 elements from one K (or V) row to the next: 0 or dim for
                            separate [n][dim] arrays; 2*dim for K and V interleaved per
                            token (values = keys + dim), one host page per fetched row
                            instead of two. Not with ORACLE, which reads keys whole. */
    uint32_t key_rows;   /* 0: K rows fetched from the bf16 keys; experimental values
                            under FATHOM_CUDA_EXPERIMENTAL (fathom_cuda_key_rows) */
} fathom_cuda_config;

/* Where one problem's data lives; every pointer device-accessible. The index
 * is one store segment covering the whole context (fathom_store_create with
 * segment_blocks = ceil(n/64)), so nb = ceil(n/64) in the layouts below.
 * A centered store's segment (fathom_store_set_center, fathom-centered:B) is
 * scanned as it is: its planes hold k - mu, the queries stay the raw ones
 * (q.mu is the same for every key of the problem, so rankings are
 * unchanged) and the variance is that store's fathom_store_variance; the K
 * rows the step fetches and attends over are the raw keys. (The
 * experimental KEYS_PLANES rows then decode to k - mu, which shifts every
 * logit of a query by q.mu: the softmax is the same up to rounding.) */
typedef struct fathom_cuda_problem {
    const uint64_t *planes;    /* [dim][4][nb] plane words (plane scans); the experimental
                                  NIBBLE4 scan reads another layout here (below) */
    const uint16_t *scales;    /* [dim][nb] fp16 scales */
    const uint16_t *landmarks; /* [ceil(n/8)][dim] fp16 mean keys (LANDMARK only) */
    const uint16_t *keys;      /* [n][row_stride] bf16 (KEYS_BF16, ORACLE) */
    const uint16_t *values;    /* [n][row_stride] bf16 */
} fathom_cuda_problem;

/* Arguments of one step. Device pointers unless said otherwise. */
typedef struct fathom_cuda_step_args {
    const fathom_cuda_problem *problems; /* [problems], in device memory */
    const float *queries;                /* [problems][group][dim], stored coordinates */
    const float *variance;               /* [problems][dim]; WATER_FILL only (else NULL) */
    const uint8_t *fixed_depths;         /* [problems][dim], 0..4; FIXED only (else NULL) */
    float *out;                          /* [problems][group][dim] attention output */
    uint32_t *selected;                  /* [problems][group][k] ascending positions; may be NULL */
    uint32_t *selected_count;            /* [problems][group]; may be NULL */
    uint8_t *depths;                     /* [problems][dim] planned depths; may be NULL */
    float *scores;                       /* [problems][group][n] approximate scores; may be NULL */
    uint32_t *union_count;               /* [problems] rows the fetch moved; may be NULL */
    void *workspace;                     /* fathom_cuda_workspace_size() bytes, 256-byte aligned */
    size_t workspace_bytes;
    const struct fathom_cuda_lanes *lanes; /* NULL: every phase on `stream`, one after another.
                                  Else the step is pipelined over the KV heads: the plan runs
                                  for all of them, then chunk by chunk of heads (up to
                                  FATHOM_CUDA_MAX_CHUNKS; fathom_cuda_lanes_set_chunk) the
                                  link-bound phase (the gather) runs in order, one chunk at a
                                  time, while earlier chunks scan, select, fetch and attend on
                                  the lanes. The link stays busy, and
                                  only one chunk's K/V rows are being fetched at a time (on an
                                  H200, scattered rows over a few GiB of host memory read at
                                  about half the link rate, over < 1 GiB near the full rate:
                                  bench/cuda/bench_host_rows). Same results, bit for bit, as
                                  without lanes. */
    /* Speculative prefetch (needs lanes, the kernel transport and a plane
     * scan: water-fill, top-channels or fixed): once this step's last gather
     * is issued, the planes and scales that prefetch_depths name for the first
     * prefetch_count problems of the NEXT step are gathered into the staging
     * slots those problems will use (each after this step's scan of that
     * slot), while this step's last chunks finish: the link would idle
     * otherwise (the next layer's query depends on this layer's output). The
     * depths are a guess, e.g. the same layer's plan at the previous decode
     * step (on real activations that guess holds ~79 % of a plan's bytes;
     * bench_cuda_step --prefetch reports the share it hits); every
     * prefetched byte crosses the link whether used or not. The prefetch
     * stays on the lanes' link stream: the next step must run with
     * the same config, lanes and workspace (it joins the prefetch), and the
     * last step of a graph must not prefetch. */
    const fathom_cuda_problem *prefetch_problems; /* [prefetch_count], device; NULL if 0 */
    const uint8_t *prefetch_depths;               /* [prefetch_count][dim], device, 0..4 */
    uint32_t prefetch_count;                      /* 0 (none) .. problems */
    /* What the previous step prefetched into this workspace for the first
     * staged_count problems of this one (its prefetch_depths): their gather
     * moves only planes beyond those depths, and scales of channels that
     * had none. NULL / 0 when nothing was prefetched. A wrong claim gives
     * wrong scores: pass exactly the previous step's prefetch. */
    const uint8_t *staged_depths; /* [staged_count][dim], device */
    uint32_t staged_count;
    cudaEvent_t *phase_events; /* NULL; experimental under FATHOM_CUDA_EXPERIMENTAL (below) */
} fathom_cuda_step_args;

#define FATHOM_CUDA_MAX_LANES 8   /* streams of a lanes object */
#define FATHOM_CUDA_MAX_CHUNKS 16 /* pipeline chunks of a step (at least ceil(problems/16) heads each) */

/* Streams and events for pipelined steps; create once, pass in
 * fathom_cuda_step_args.lanes. One high-priority link stream carries the
 * link-bound phases of the chunks in order; `count` (1..FATHOM_CUDA_MAX_LANES)
 * lanes run the rest, so up to `count` chunks are scanned, selected, fetched
 * and attended at once (2-4 is plenty for one session's 8 KV heads).
 * Streams are created on the current device, non-blocking. Steps that share
 * a lanes object must be enqueued from one host thread at a time (like a
 * cuBLAS handle). Graph capture works: the lanes fork from and join back
 * into the capturing stream. */
typedef struct fathom_cuda_lanes fathom_cuda_lanes;
int fathom_cuda_lanes_create(uint32_t count, fathom_cuda_lanes **out);
void fathom_cuda_lanes_destroy(fathom_cuda_lanes *lanes); /* NULL is a no-op */

/* KV heads (problems) per pipeline chunk for the following steps, at least
 * ceil(problems / FATHOM_CUDA_MAX_CHUNKS). 0 (the default) picks by context:
 * all problems in one chunk below 64k tokens, 2 per chunk below 192k, else
 * 1 (measured on an H200 with bench_cuda_step --chunk: a chunk's fixed
 * latency of launches outweighs the transfer it hides at short contexts).
 * Bigger chunks mean fewer graph nodes, less of the transfer hidden. */
int fathom_cuda_lanes_set_chunk(fathom_cuda_lanes *lanes, uint32_t problems_per_chunk);

/* Problems per chunk a pipelined step with these lanes and this config
 * uses; 0 if either is NULL. */
uint32_t fathom_cuda_lanes_chunk(const fathom_cuda_lanes *lanes, const fathom_cuda_config *config);

/* Bytes of workspace a step with this config needs. */
int fathom_cuda_workspace_size(const fathom_cuda_config *config, size_t *bytes);

/* Enqueue one step on stream. Asynchronous: a device-side failure (a trap
 * in the top-k, see the header's first comment) surfaces at the stream's
 * next synchronisation as a CUDA error, and the stream's context is lost. */
int fathom_cuda_step(const fathom_cuda_config *config, const fathom_cuda_step_args *args,
                     cudaStream_t stream);

/* Bytes a plane scan moves for a depth vector (host copy): the plane runs and
 * scales of the active channels, sum_j [t_j > 0] (8*t_j + 2) * nb. */
uint64_t fathom_cuda_plane_bytes(uint32_t dim, uint64_t tokens, const uint8_t *depths);

/* 1 if a CUDA device is usable, else 0 (and the reason in fathom_last_error). */
int fathom_cuda_device_present(void);

#ifdef FATHOM_CUDA_EXPERIMENTAL
/* ---- Experimental: switches for measuring alternatives to the stable
 * step. They may change or go; zero in their fields is the stable path. */

/* fathom_cuda_config.key_rows */
typedef enum fathom_cuda_key_rows {
    FATHOM_CUDA_KEYS_BF16 = 0, /* K rows fetched from the bf16 keys (the stable path) */
    FATHOM_CUDA_KEYS_PLANES = 1 /* bit planes are the K cache: rows decoded from all 4 planes,
                                   only V rows fetched (not with NIBBLE4) */
} fathom_cuda_key_rows;

/* FATHOM_CUDA_SCAN_NIBBLE4 reads fathom_cuda_problem.planes as [dim][nb][4]
 * words, word w of block b holding tokens 16w..16w+15 as nibbles (token
 * 16w+i in bits 4i..4i+3). fixed_depths is optional with it: the channels
 * read (nonzero), each whole, as a nibble label cache of those channels;
 * NULL reads every channel. No prefetch with it.
 *
 * FATHOM_CUDA_DIRECT: the scan itself is the link-bound phase of a
 * pipelined step. No prefetch with it. */

/* fathom_cuda_step_args.phase_events: NULL, or FATHOM_CUDA_PHASES + 1
 * events recorded at the start and after each phase (for breakdowns, not
 * graphs; not with lanes). */
#define FATHOM_CUDA_PHASES 6 /* plan, transfer, scan, top-k, fetch, attend */

/* A timeline of pipelined steps, for finding where a step's time goes:
 * with stamps (device memory, steps * FATHOM_CUDA_TRACE_SLOTS uint64) set,
 * each following pipelined step enqueued (or captured) with these lanes
 * writes %globaltimer nanoseconds into the next FATHOM_CUDA_TRACE_SLOTS
 * slots, until `steps` steps are traced: slot 0 after the plan, 1 at the
 * end; chunk c at 2 + 6c + {0 link phase starts, 1 link phase ends, 2 the
 * chunk's lane starts, 3 top-k ends, 4 fetch ends, 5 attention ends}.
 * Each stamp is a one-thread kernel, so a traced step runs a little slower.
 * NULL, 0 turns tracing off. */
#define FATHOM_CUDA_TRACE_SLOTS (2 + 6 * FATHOM_CUDA_MAX_CHUNKS)
int fathom_cuda_lanes_trace(fathom_cuda_lanes *lanes, uint64_t *stamps, uint32_t steps);
#endif /* FATHOM_CUDA_EXPERIMENTAL */


/* ===================================================================== *
 * KV tier — sessions in pinned host memory that grow on the GPU
 * ===================================================================== *
 *
 * A tier holds many sessions of one model shape (layers, KV heads, G query
 * heads per KV head, head dim d). Per session, per layer and KV head, it
 * keeps the bit-plane K index (the CPU store's layout, fathom_store_create:
 * per segment [d][4][S] plane words and [d][S] fp16 scales), the running
 * channel sums of fathom_store_append (calibration-free variance) and the
 * bf16 K and V rows, all in pinned mapped host memory. Memory comes in
 * segments of S blocks (64*S tokens, all layers and heads of a session),
 * allocated whole and never moved; the GPU finds them through a segment
 * table in device memory. Capacity grows by adding segments.
 *
 * Per decode step and layer an engine enqueues fathom_cuda_tier_append (the
 * new tokens' bf16 K and V from device memory, quantized on the GPU) and
 * fathom_cuda_tier_step (plan -> scan -> top-k -> row fetch -> attention).
 * Both read every length, count and segment pointer from device memory, so
 * a CUDA graph captured once replays for every later step while sessions
 * grow; re-capture when the batch's sessions or the step's capacity_tokens
 * change. The host must fathom_cuda_tier_reserve capacity before a replay
 * that appends beyond it.
 *
 * Errors that only the GPU can see (a session id out of range, an append
 * beyond a session's capacity, a length above the step's capacity_tokens)
 * skip that session's work and are reported by fathom_cuda_tier_check.
 *
 * Host-side calls (session create/free/fork/truncate/reserve, length, usage,
 * views) must not run while work that touches the same session is in flight:
 * synchronize its streams first. A failed call leaves every session as it was.
 */
#define FATHOM_CUDA_TIER_MAX_GROUP 16

typedef struct fathom_cuda_tier fathom_cuda_tier;

typedef struct fathom_cuda_tier_shape {
    uint32_t layers;         /* >= 1 */
    uint32_t kv_heads;       /* >= 1 */
    uint32_t group;          /* query heads per KV head, 1..FATHOM_CUDA_TIER_MAX_GROUP */
    uint32_t dim;            /* head dimension: 64, 128 or 256 */
    uint32_t segment_blocks; /* S, blocks of 64 tokens per segment, a multiple of 32 (0: 64) */
    uint32_t max_sessions;   /* sessions alive at once, >= 1 */
    uint64_t max_tokens;     /* per session, <= 2^32 - 65; sizes the segment table */
} fathom_cuda_tier_shape;

/* Create a tier on the current device (allocates the device tables). */
int fathom_cuda_tier_create(const fathom_cuda_tier_shape *shape, fathom_cuda_tier **out);
void fathom_cuda_tier_destroy(fathom_cuda_tier *tier); /* NULL is a no-op */

/* A new empty session; *session is its id (< max_sessions). */
int fathom_cuda_tier_session_create(fathom_cuda_tier *tier, uint32_t *session);
/* Release a session and its references to segments. */
int fathom_cuda_tier_session_free(fathom_cuda_tier *tier, uint32_t session);
/* Make room for `tokens` tokens in total (allocates segments; never shrinks).
 * FATHOM_ERR_NOMEM with nothing changed when host memory runs out. */
int fathom_cuda_tier_reserve(fathom_cuda_tier *tier, uint32_t session, uint64_t tokens);
/* Tokens in the session (read from the device; FATHOM_ERR_STATE if its
 * layers disagree, i.e. a step's appends are incomplete). */
int fathom_cuda_tier_length(fathom_cuda_tier *tier, uint32_t session, uint64_t *length);
/* Forget tokens [n, length) (n <= length): planes and scales of the kept
 * tokens are those of appending them alone (the open block re-encoded from
 * the kept K rows), the running sums are recomputed over them, as
 * fathom_ctx_truncate rebuilds its index. A segment shared with a fork that
 * becomes writable is copied first. A centered session keeps its center
 * for n > 0 (the kept tokens' bytes are those of a store centered on it; the
 * closed blocks are not re-encoded, so unlike fathom_ctx_truncate the center
 * is not re-fitted to the kept keys); at n = 0 a center taken from the first
 * append is dropped (the next first append fixes a new one) and a center
 * the caller gave is kept. */
int fathom_cuda_tier_truncate(fathom_cuda_tier *tier, uint32_t session, uint64_t n);
/* A new session with the same tokens: full segments are shared (reference
 * counted, never written again), the partly filled one is copied; the
 * center (fathom_cuda_tier_set_center) and its mode are copied. */
int fathom_cuda_tier_fork(fathom_cuda_tier *tier, uint32_t source, uint32_t *session);

/* Centered codes (fathom-centered:B): the session's planes hold k - mu, mu
 * one center per (layer, KV head), exactly as a CPU store given
 * fathom_store_set_center(mu) (k - mu rounded once to float; the running
 * sums are of k - mu, so the variance the plan reads is the same, and the
 * queries, the scan and the K/V rows are unchanged: q.mu is the same for
 * every token of a head, so only the codes change). center NULL: each
 * (layer, KV head) centers on the mean of its first append's keys, as
 * fathom_index_append does (summed in double over the rows in order,
 * divided by the count, rounded once to float), computed on the GPU by that
 * append. Else center [layers][kv_heads][dim] host floats (copied), each
 * finite (FATHOM_ERR_NONFINITE otherwise). Only on an empty session (every
 * layer at 0 tokens; FATHOM_ERR_STATE otherwise); a second call replaces
 * the center. An append of a centered session needs the centering kernel
 * that fathom_cuda_tier_append enqueues once the tier has had a centered
 * session: a graph captured before the tier's first set_center lacks it,
 * and its appends to a session whose center is not fixed are skipped and
 * reported by fathom_cuda_tier_check (capture after set_center). The
 * device does not check k - mu for overflow (as it does not check keys). */
int fathom_cuda_tier_set_center(fathom_cuda_tier *tier, uint32_t session, const float *center);
/* The center of (session, layer, head): *center gets dim floats in host
 * memory (valid until the session is freed or its center changes), NULL
 * when the session is not centered or its first append at that layer has
 * not fixed the center yet. Host call (synchronize first). */
int fathom_cuda_tier_center(const fathom_cuda_tier *tier, uint32_t session, uint32_t layer, uint32_t head,
                            const float **center);

typedef struct fathom_cuda_tier_usage {
    uint64_t length;          /* tokens */
    uint64_t capacity;        /* tokens its segments hold */
    uint32_t segments;        /* segments it references */
    uint32_t shared_segments; /* of those, referenced by other sessions too */
    uint64_t bytes;           /* host bytes it references: segments + running sums (+ centers) */
    uint64_t exclusive_bytes; /* of those, held by this session alone */
} fathom_cuda_tier_usage;
int fathom_cuda_tier_usage_of(fathom_cuda_tier *tier, uint32_t session,
                              fathom_cuda_tier_usage *usage);

/* Host view of one segment of (session, layer, KV head), for tests and
 * tools: planes [dim][4][S], scales [dim][S], kv [64*S][2][dim] bf16 (the
 * K row then the V row of each token). */
typedef struct fathom_cuda_tier_view {
    const uint64_t *planes;
    const uint16_t *scales;
    const uint16_t *kv;
    uint64_t first_token;
    uint32_t segment_blocks;
} fathom_cuda_tier_view;
int fathom_cuda_tier_segment(const fathom_cuda_tier *tier, uint32_t session, uint32_t layer,
                             uint32_t head, uint32_t segment, fathom_cuda_tier_view *view);
/* The running sums (shift = first stored row, sum and sum of squares of
 * row - shift, as fathom_store_append keeps them; a stored row is k - mu in
 * a centered session) of (session, layer, head):
 * three arrays of dim doubles in host memory. */
int fathom_cuda_tier_sums(const fathom_cuda_tier *tier, uint32_t session, uint32_t layer,
                          uint32_t head, const double **shift, const double **sum,
                          const double **sum_sq);

/* Errors the GPU recorded since the last call (FATHOM_OK if none; the
 * first one's reason in the message). Synchronizes the device. */
int fathom_cuda_tier_check(fathom_cuda_tier *tier);

/* Append to every session of a batch, for one layer. keys and values: bf16,
 * device, [total][kv_heads][dim] with the rows of batch entry i after those
 * of entries < i (total = sum of counts). sessions and counts: [batch],
 * device; an entry appends counts[i] tokens (0..max_count) at the
 * session's length for this layer. max_count (host) bounds every count and
 * sizes the grid: 1 for decode, the chunk size for a prefill. The planes,
 * scales and sums are byte-identical to fathom_store_append of the same
 * keys (bf16 -> float32 exactly), however the tokens are split into calls
 * (a centered session's: to a store given its center by
 * fathom_store_set_center).
 * A session appears at most once per batch. */
int fathom_cuda_tier_append(fathom_cuda_tier *tier, uint32_t layer, const uint32_t *sessions,
                            uint32_t batch, const uint32_t *counts, uint32_t max_count,
                            const uint16_t *keys, const uint16_t *values, cudaStream_t stream);

typedef struct fathom_cuda_tier_step_args {
    uint32_t layer;
    const uint32_t *sessions;  /* [batch], device */
    uint32_t batch;            /* >= 1; batch * kv_heads <= 65535 */
    uint64_t capacity_tokens;  /* every session's length at run time must be <= it
                                  (else its heads output 0 and tier_check reports it);
                                  sizes grids and workspace: the graph's capacity class */
    uint32_t k, sink, local;   /* as fathom_cuda_config; group * k <= 4096 */
    uint32_t budget;           /* water-filling budget B (fathom:B), 1..4*dim */
    float scale;               /* softmax scale (1/sqrt(dim) for fathom_attend's) */
    const uint16_t *queries;   /* bf16 [batch][kv_heads][group][dim], device */
    uint16_t *out;             /* bf16 [batch][kv_heads][group][dim], device */
    float *lse;                /* [batch][kv_heads][group] log sum exp(scale q.k) over the
                                  selection, natural log; may be NULL. -inf when empty. */
    uint32_t *selected;        /* [batch*kv_heads*group][k] ascending; may be NULL */
    uint32_t *selected_count;  /* [batch*kv_heads*group]; may be NULL */
    uint8_t *depths;           /* [batch*kv_heads][dim] planned depths; may be NULL */
    uint32_t *union_count;     /* [batch*kv_heads] rows fetched; may be NULL */
    void *workspace;           /* fathom_cuda_tier_workspace_size bytes, 256-aligned */
    size_t workspace_bytes;
    const uint8_t *fixed_depths; /* [batch*kv_heads][dim] depths 0..4 (more is clamped), device:
                                  the plan is skipped and these are scanned (ds:c as depth 4 on
                                  its c channels, full4 as 4 everywhere); budget is then not
                                  used. NULL: water-filling with budget (fathom:B) */
    unsigned long long *cache_bytes; /* [2], device: the plane bytes (words and scales) and the
                                  K/V row bytes this step read from the sessions' HBM caches
                                  are ADDED to [0] and [1]; may be NULL */
    unsigned long long *ahead_bytes; /* [2], device: the plane bytes and row bytes this step read
                                  from the sessions' read-ahead staging are ADDED to [0] and [1];
                                  may be NULL */
} fathom_cuda_tier_step_args;

int fathom_cuda_tier_workspace_size(const fathom_cuda_tier *tier,
                                    const fathom_cuda_tier_step_args *args, size_t *bytes);
/* Sparse attention of one layer for every session of a batch, each at its
 * own length (the one this layer's appends reached). Each planned plane
 * byte crosses the link once, except what the session's HBM cache holds
 * (below). With a row cache, a session appears at most once per batch.
 *
 * The step is pipelined as fathom_cuda_step with lanes: after the plan of
 * every (entry, KV head), chunks of them (fathom_cuda_lanes_set_chunk's
 * sizes, by capacity_tokens) have their planned planes and scales gathered
 * into HBM staging one after another on the tier's high-priority link
 * stream, and each chunk's scan, top-k, row fetch and attention run on one
 * of its lanes beside the next chunks' gathers; the streams fork from and
 * join back into `stream` (graph capture works). For a session with a
 * plane cache the gather moves only what the cache does not hold. Chunks by
 * context (the default) pipeline only from 196608 tokens of
 * capacity_tokens, with at most FATHOM_CUDA_MAX_CHUNKS (entry, KV head)
 * pairs and segments of at least 4096 blocks, and, for a water-filling
 * step (fixed_depths NULL) with at least one live session, not while every
 * live session's plane cache holds at least budget lines per (layer, KV
 * head) (checked when the step is enqueued or captured); otherwise, and
 * without lanes or with one chunk, every phase runs on `stream` and the
 * scan reads the planes the cache lacks in place from host memory. Steps of one tier must be enqueued from
 * one host thread at a time. Same bits with or without the pipeline; the
 * workspace holds the staging (workspace_size depends on the lanes).
 * Sessions with read-ahead (fathom_cuda_tier_cache_config.ahead_lines or
 * ahead_rows): the tier's read-ahead stream copies into each such session's
 * staging what its last step of the next layer (layer 0 after the last)
 * read and its caches lack (the plane lines only when this step scans in
 * place); that next step reads those bytes from the staging. It starts
 * with the step, beside it, except while capturing a graph with
 * FATHOM_CUDA_AHEAD_BETWEEN (fathom_cuda_tier_set_ahead_start), where a
 * step of a layer other than the last starts it after its own work, or
 * FATHOM_CUDA_AHEAD_ACROSS, where every layer's step does. `stream` waits
 * for the read-ahead at the end of this step, except while capturing a
 * graph, where a step of a layer other than the last (with
 * FATHOM_CUDA_AHEAD_ACROSS: any step) leaves it to the tier's next step in
 * the same capture (so it also runs beside the caller's work between the
 * two steps, e.g. the model's MLP): a graph of such steps must end after a
 * step that joined it (without FATHOM_CUDA_AHEAD_ACROSS: one of the last
 * layer), or call fathom_cuda_tier_ahead_join first. Every layer of a
 * model's step is assumed to run the same sessions; a session stepped
 * otherwise reads host memory as without read-ahead. Same bits with or
 * without it. The read-ahead's stream has the device's highest priority; a
 * graph keeps it where instantiated with
 * cudaGraphInstantiateFlagUseNodePriority (as PyTorch's are), else its
 * kernels run at the launch stream's. */
int fathom_cuda_tier_step(fathom_cuda_tier *tier, const fathom_cuda_tier_step_args *args,
                          cudaStream_t stream);

/* `stream` waits for a read-ahead that a step captured into the graph
 * `stream` is capturing left to the next step (no-op otherwise): call it
 * before ending a capture whose last step left one (with
 * FATHOM_CUDA_AHEAD_ACROSS, every capture of a step), else
 * cudaStreamEndCapture fails with cudaErrorStreamCaptureUnjoined. */
int fathom_cuda_tier_ahead_join(fathom_cuda_tier *tier, cudaStream_t stream);

/* When a captured step starts its read-ahead of the next layer. */
typedef enum fathom_cuda_ahead_start {
    FATHOM_CUDA_AHEAD_BESIDE = 0, /* with the step (the default): the copy shares the link with the
                                     step's own reads of host memory, then runs beside the caller's
                                     work until the next step */
    FATHOM_CUDA_AHEAD_BETWEEN = 1, /* in a capture, a step of a layer other than the last starts it
                                      once its own reads of host memory are issued (after its row
                                      fetch), and its bookkeeping (row caches' insertion, the
                                      read-ahead's save, the plan window's note) after its output,
                                      both on the read-ahead's stream: the copy has the link to
                                      itself while the step's attention and the caller's work
                                      between two layers' steps run; for callers whose work there
                                      takes longer than the copy (bench_cuda_tier --read-ahead E
                                      --between-us X [--between-copy] times both). Eager steps and
                                      the last layer's step start it with the step */
    FATHOM_CUDA_AHEAD_ACROSS = 2 /* as FATHOM_CUDA_AHEAD_BETWEEN, and the last layer's step too: its
                                    copy (of layer 0, for the next decode step) runs beside the
                                    caller's work from the last layer's attention to the next decode
                                    step's first layer (the model's last MLP, its head, sampling); the
                                    next step in the same capture joins it, so a capture must end with
                                    fathom_cuda_tier_ahead_join (e.g. a graph per decode step, after
                                    the head). Eager steps start it with the step */
} fathom_cuda_ahead_start;

/* The tier's read-ahead start (a new tier: FATHOM_CUDA_AHEAD_BESIDE) for
 * the steps enqueued or captured after the call; not while a step of this
 * tier is being captured. Same bits either way. FATHOM_ERR_INVALID_ARG for
 * a NULL tier or another value. */
int fathom_cuda_tier_set_ahead_start(fathom_cuda_tier *tier, fathom_cuda_ahead_start start);

/* Selections made elsewhere for the LAST `pairs` (entry, KV head) pairs of
 * a step's batch, p in [batch*kv_heads - pairs, batch*kv_heads) with
 * p = entry * kv_heads + head (fathom_cuda_hybrid makes them on the host
 * CPU). selected: device, [pairs * group][k], row (p - first given) * group
 * + query head: that head's positions ascending, as fathom_select writes
 * them for the session's length at this layer (sink, k - sink - local
 * middle winners, local; only the middle ones are read). The step checks
 * the middle winners on the device, since the row fetch reads the rows they
 * name: a head of a session with n > k tokens whose middle winners are not
 * strictly ascending inside [sink, n - local) attends over the placeholder
 * positions sink, sink + 1, .. instead, and fathom_cuda_tier_check reports
 * FATHOM_ERR_STATE ("a given selection ..."); nothing outside the session
 * is read. ready: NULL, or an
 * event recorded after the selections are written (e.g. after their H2D
 * copy on another stream of the same capture); the step waits for it on
 * `stream` after the other pairs' work is enqueued. depths: NULL (the GPU
 * plans the given pairs), or device [pairs][dim] depths of their plan (the
 * ones the selections were made with, e.g. fathom_cuda_hybrid_select's):
 * the GPU then does not plan them and args->depths shows these (copied
 * after `ready`, not checked; water-filling steps only). */
typedef struct fathom_cuda_tier_given {
    uint32_t pairs;
    const uint32_t *selected;
    cudaEvent_t ready;
    const uint8_t *depths;
} fathom_cuda_tier_given;

/* fathom_cuda_tier_step, the given pairs' selections taken as they are:
 * they are planned (depths as usual, or given), their planes are neither
 * gathered nor scanned on the GPU and they have no top-k; after `ready`,
 * their selections give selected, selected_count, the union, the row fetch
 * and the attention exactly as if the GPU had selected the same positions.
 * given NULL or pairs 0: fathom_cuda_tier_step. Capturable when `ready` is
 * part of the capture. */
int fathom_cuda_tier_step_given(fathom_cuda_tier *tier, const fathom_cuda_tier_step_args *args,
                                const fathom_cuda_tier_given *given, cudaStream_t stream);

/* How a tier's steps score tokens in the plane scan. */
typedef enum fathom_cuda_scan_mode {
    FATHOM_CUDA_SCAN_EXACT = 0, /* the default: scores bit-identical to the CPU's exact scan
                                   kernels (fathom_store_scan) */
    FATHOM_CUDA_SCAN_INT8 = 1   /* the CPU library's integer ("VNNI") scan mode: per pass of 64
                                   active channels, 64-token block and query head, the products
                                   q_j a_j quantized to int8 against their largest magnitude,
                                   an exact integer dot product with the decoded codes, one
                                   multiply back. Its scores APPROXIMATE the exact ones (off by
                                   up to half a quantization step per channel term) and are
                                   bit-identical to the CPU's int8 kernels
                                   (FATHOM_SCAN_INT8_*, core/scan_internal.h), so selections
                                   may differ from the exact mode's */
} fathom_cuda_scan_mode;

/* The tier's scan mode (a new tier: FATHOM_CUDA_SCAN_EXACT). It applies to
 * the steps enqueued or captured after the call (fathom_cuda_tier_step,
 * _step_given, the hybrid step and its calibration, whose host side then
 * scans with the CPU's int8 kernels too, so hybrid and GPU-only steps stay
 * bit-identical); a graph captured before keeps the mode it was captured
 * with. Not while a step of this tier is being captured. The plan, top-k
 * and attention are the same in both modes. FATHOM_ERR_INVALID_ARG for a
 * NULL tier or another mode. */
int fathom_cuda_tier_set_scan_mode(fathom_cuda_tier *tier, fathom_cuda_scan_mode mode);

/* ===================================================================== *
 * Hybrid step: the host CPU scans a share of the pairs where they live
 * ===================================================================== *
 *
 * The tier's host segments can be read by the host CPU in place. A hybrid
 * object runs, for the last host_pairs pairs of a step, the plan the GPU
 * step would make (running variance, water-filling at the step's budget),
 * the scan of the pinned host segments and the selection (the CPU
 * library's kernels on a thread pool of `threads` threads, split over
 * pairs and token ranges) on the host, while the GPU runs plan, gather,
 * scan and top-k of the other pairs; only the selected positions cross to
 * the GPU, which fetches those rows and attends (fathom_cuda_tier_step_given).
 * Selections, depths, outputs and LSE are the GPU-only step's, bit for bit,
 * in either scan mode (fathom_cuda_tier_set_scan_mode).
 *
 * fathom_cuda_hybrid_step enqueues, beside `stream` on the object's side
 * stream: a kernel that copies the host pairs' session ids, lengths and
 * bf16 queries into mapped host memory, a host function
 * (cudaLaunchHostFunc) that plans, scans and selects on the thread pool,
 * the H2D copy of the selections and depths, and, once the step's plan on
 * `stream` is done, the host pairs' union, row fetch and attention; `stream`
 * waits for the side stream at the end of the step. Every
 * piece is a stream operation, so the call can be captured into a CUDA
 * graph (the host function becomes a host node); the host work itself runs
 * on CUDA's callback thread and blocks the side stream, not `stream`. What is
 * not capturable: fathom_cuda_hybrid_select, _calibrate (it synchronizes the
 * device; start-up only) and _check; and a graph keeps the host_pairs it was
 * captured with, so a new share needs a new capture.
 * Errors of the host work are reported by fathom_cuda_hybrid_check (the
 * step's given pairs then attend over placeholder positions).
 *
 * One call per layer may be in flight (each layer has its own buffers);
 * sessions must not be reserved, truncated, forked or freed while a hybrid
 * step that reads them is in flight. */
typedef struct fathom_cuda_hybrid fathom_cuda_hybrid;

/* threads: 1..1024 host threads (the pool's, the caller's included);
 * max_pairs: 1..65535, bounds host_pairs; max_k: 1..FATHOM_CUDA_MAX_K, bounds
 * the steps' k. Allocates, for every layer of the tier, pinned host and
 * device buffers of max_pairs * group * max_k selections and max_pairs *
 * group * dim bf16 queries. *out is NULL on failure. */
int fathom_cuda_hybrid_create(fathom_cuda_tier *tier, uint32_t threads, uint32_t max_pairs, uint32_t max_k,
                              fathom_cuda_hybrid **out);
/* Waits for the object's side stream, then frees it; the steps that use its
 * selections on other streams must have completed. NULL is a no-op. */
void fathom_cuda_hybrid_destroy(fathom_cuda_hybrid *hybrid);

/* The host's selection now (synchronous; it first waits for the object's
 * side stream, whose host work uses the same thread pool; no GPU work): for
 * each i < count (1..max_pairs), the pair (sessions[i], heads[i]) at layer
 * with lengths[i] tokens (1 .. the session's length at that layer as the
 * device holds it at the call, read with one device-to-host copy; appends
 * still in flight on other streams are not waited for) and
 * queries[i] ([group][dim] float, the bf16 queries' values): depths
 * [count][dim] (may be NULL), selected [count][group][k], selected_count
 * [count][group], all host memory. The tier's step makes the same ones for
 * the same data (in the tier's scan mode: the host scans with the CPU's
 * int8 kernels when it is FATHOM_CUDA_SCAN_INT8). Not capturable. */
int fathom_cuda_hybrid_select(fathom_cuda_hybrid *hybrid, uint32_t layer, uint32_t count,
                              const uint32_t *sessions, const uint32_t *heads, const uint64_t *lengths,
                              const float *queries, uint32_t budget, uint32_t k, uint32_t sink,
                              uint32_t local, uint8_t *depths, uint32_t *selected,
                              uint32_t *selected_count);

/* One hybrid step (see above): args as fathom_cuda_tier_step (water-filling
 * only: fixed_depths NULL; k <= max_k), host_pairs <= min(max_pairs,
 * batch*kv_heads); host_pairs 0 is the GPU-only step. Every argument is
 * checked before anything is enqueued. The GPU does not plan the host
 * pairs (their depths cross with their selections), and their union, row
 * fetch and attention run on the side stream as soon as the step's plan
 * and their selections are done, beside the GPU pairs' work; `stream`
 * joins the side stream at the end of the step. A host selection the
 * device finds invalid is reported by fathom_cuda_tier_check
 * (fathom_cuda_tier_given). */
int fathom_cuda_hybrid_step(fathom_cuda_hybrid *hybrid, const fathom_cuda_tier_step_args *args,
                            uint32_t host_pairs, cudaStream_t stream);

/* The first error of the host work since the last call (FATHOM_OK if none).
 * Synchronizes the side stream. */
int fathom_cuda_hybrid_check(fathom_cuda_hybrid *hybrid);

/* The scheduler's rates, measured by fathom_cuda_hybrid_calibrate on a
 * step's batch as it is, in the plane bytes of fathom_cuda_hybrid_share's
 * estimate: cpu: the host's plan + scan + select of every pair on the
 * object's threads (in the tier's scan mode: the int8 kernels' rates when it
 * is FATHOM_CUDA_SCAN_INT8); gpu: the GPU side of the step with c = 0 .. min(max_pairs,
 * pairs) pairs given (the host's selections of the last c pairs, given at
 * once: plan, the other pairs' gather, scan and top-k, every pair's union,
 * fetch and attention; at most 17 values of c, median of 5 each), fitted by
 * least squares as gpu_fixed_s + the GPU pairs' bytes / gpu_bytes_per_s
 * (INFINITY, gpu_fixed_s the mean time, where the time does not fall with
 * the bytes); cpu_fixed_s: the hybrid step with min(max_pairs, pairs) pairs
 * on the host, less their bytes at the cpu rate (the host side's latency
 * that does not scale with bytes: export, host function and pool wake-ups,
 * H2D copy, the given pairs' union, fetch and attention after the host is
 * done). */
typedef struct fathom_cuda_hybrid_rates {
    double cpu_bytes_per_s;
    double gpu_bytes_per_s;
    double cpu_fixed_s;
    double cpu_s, gpu_s; /* the measured times of the whole batch (gpu: the GPU-only step) */
    double gpu_fixed_s;
    double noise; /* the GPU-only step's replays: second largest less second smallest, over the median */
} fathom_cuda_hybrid_rates;

/* Measure the rates at start-up on the batch of args (its sessions at their
 * current lengths, equal in every layer; batch * kv_heads <= max_pairs; the
 * step runs a few dozen times, its outputs are overwritten, and like any
 * step it inserts rows into the sessions' row caches and notes its plan in
 * their plan windows: calibrate before giving them caches; the tier's
 * recorded errors are checked and cleared, fathom_cuda_tier_check) and keep
 * them in the object, with the hybrid step itself measured with every
 * c = 1 .. min(max_pairs, pairs) pairs on the host (median of 5; every time
 * here is of the step captured into a graph and replayed, as callers run
 * steps): for each c
 * the measured time over the rates' estimate of it is kept as that share's
 * correction (the two sides slow each other down, reading the same host
 * memory, and the host's threads do not divide a few pairs evenly). rates
 * may be NULL. Synchronizes the device. */
int fathom_cuda_hybrid_calibrate(fathom_cuda_hybrid *hybrid, const fathom_cuda_tier_step_args *args,
                                 cudaStream_t stream, fathom_cuda_hybrid_rates *rates);

/* The scheduler (host arithmetic only; FATHOM_ERR_STATE before
 * fathom_cuda_hybrid_calibrate): host_pairs for a step of args (batch and
 * budget read) whose entries have lengths [batch] tokens (host), from the
 * calibration: the c in 0..min(max_pairs, batch*kv_heads) that minimizes
 * the estimate max(cpu_fixed_s + host bytes of the last c pairs / cpu rate,
 * gpu_fixed_s + GPU bytes of the others / gpu rate) (c = 0: the GPU side
 * alone) times c's measured correction (c beyond the calibration's: its
 * largest c's), so that both sides finish together (ties: fewer host
 * pairs); on the calibration's own batch that is the fastest measured
 * share. A share c > 0 is taken only when that estimate is below the GPU
 * side alone's by more than the relative spread of the calibration's
 * replays (the GPU-only step's, rates.noise, and c's own; a calibration
 * whose replays spread by more than 5% is timed again, up to 3 rounds, and
 * its quietest round kept) and by more than 1%: a gain within the noise is
 * not one. Bytes per pair are
 * estimated as the budget's plane bits plus a scale per active channel per
 * block, n * (budget + min(budget, dim) / 4) / 8. */
int fathom_cuda_hybrid_share(const fathom_cuda_hybrid *hybrid, const fathom_cuda_tier_step_args *args,
                             const uint64_t *lengths, uint32_t *host_pairs);

#ifdef FATHOM_CUDA_EXPERIMENTAL
/* lanes 0..FATHOM_CUDA_MAX_LANES (0: every phase on the caller's stream, one
 * after another), problems per chunk as fathom_cuda_lanes_set_chunk (0: by
 * context). A new tier has 3 lanes and chunks by context. Not while a step
 * of this tier is in flight or being captured; size the workspace after. */
int fathom_cuda_tier_set_lanes(fathom_cuda_tier *tier, uint32_t lanes, uint32_t problems_per_chunk);
#endif

/* HBM cache of a session: bytes the steps would otherwise read over the
 * link again, kept in device memory. Results (selections, outputs, LSE) are
 * the same bits with or without it; only where the bytes come from changes.
 *
 * plane cache: per (layer, KV head) a set of plane lines (channel j, plane
 * p: the words of blocks [0, blocks)) and, with line (j, 0), channel j's
 * scales. fathom_cuda_tier_cache_fill chooses the lines and copies the
 * CLOSED blocks (those of the first floor(length/64)*64 tokens, which no
 * later append rewrites) of the session's current length; the scan reads
 * those from HBM and everything else (later blocks, other lines) from host.
 * Fill again as the session grows to cover more blocks.
 * plan window (window > 0): every tier step (fathom_cuda_tier_step,
 * fathom_cuda_hybrid_step and its calibration) of a layer notes the plan of
 * each batch entry's KV heads (the depths it would write to args->depths)
 * in the entry's session, keeping the last `window` plans per (layer, KV
 * head); the fill then ranks lines by how many of them read each line.
 * Consecutive plans differ, and lines most plans read are hit by more of the
 * steps until the next fill than the last plan's lines (bench/cache_sim.py
 * --window). A step of a batch that names one session twice notes its
 * plans in an unspecified order. A graph captured while no session of the
 * tier had a window does not note (capture after fathom_cuda_tier_cache_set).
 * row cache: per (layer, KV head) `slots` K/V rows. The row fetch reads a
 * resident row from HBM; then the missed rows enter:
 *   row_ways 0 or 1, direct-mapped (token mod slots): each missed row is
 *     written into its slot unless the slot holds a later token (later
 *     tokens stay: a decode re-selects recent tokens more often);
 *   row_ways W = 2, 4 or 8, W-way sets (token mod sets) kept by recency of
 *     use: each (layer, KV head) counts its steps; a hit stamps its way with
 *     the step; the step's missed rows enter their sets in ascending token
 *     order, each evicting the way read longest ago (ways read in an earlier
 *     step by hit before insertion, then ascending token) unless this step
 *     read every way of the set, where the row stays out. bench/cache_sim.py
 *     --as-rows waysW is the same rule. On real decode traces sets keep more
 *     of a step's rows than direct-mapped slots of the same bytes where the
 *     slots outnumber a step's union rows, and no more where they are fewer
 *     (docs/results.md, "The same budgets with associative row slots").
 *     A batch naming one session twice leaves which rows stay unspecified
 *     (what is read is always the token's row).
 * A graph captured while no session of the tier had a row cache of one
 * kind (direct-mapped, sets) inserts no rows into caches of that kind.
 *
 * Truncating a session drops what the caches hold beyond the new length;
 * a fork starts without a cache; freeing a session frees its cache. */
typedef struct fathom_cuda_tier_cache_config {
    uint64_t plane_bytes; /* device bytes for plane lines (0: none); per (layer, head)
                             floor(plane_bytes / (layers * kv_heads * 10 * blocks)) lines, at
                             most 4 * dim, where blocks = ceil(tokens / 64) */
    uint64_t tokens;      /* the plane lines cover tokens [0, tokens), <= max_tokens */
    uint64_t row_bytes;   /* device bytes for K/V rows (0: none); per (layer, head)
                             floor(row_bytes / (layers * kv_heads * (4 * dim + 4))) slots */
    uint32_t window;      /* plans the plane-line fill ranks by, 0..FATHOM_CUDA_TIER_CACHE_MAX_WINDOW
                             (0: no window, the fill's depths argument; ignored without
                             plane lines); window x layers x kv_heads x dim more bytes */
    uint32_t row_ways;    /* 0 or 1: direct-mapped row slots; 2, 4, 8: sets of that many ways,
                             floor(row_bytes / (layers * kv_heads * row_ways * (4 * dim + 8)))
                             sets per (layer, head) (a step stamp per way; 4 more bytes per
                             (layer, head) for its step count) */
    uint32_t ahead_lines; /* read-ahead (0: none): each step of layer l copies into HBM staging,
                             beside its own work or after it (fathom_cuda_tier_set_ahead_start),
                             the plane lines of layer l + 1 (the last layer:
                             layer 0) that the session's last step of that layer planned and its
                             plane cache lacks, up to ahead_lines lines per KV head in channel
                             order, over the blocks closed at that step (< tokens), with their
                             channels' scales; that layer's step scans them from the staging.
                             Used by steps that scan in place (not pipelined); needs tokens */
    uint32_t ahead_rows;  /* read-ahead of rows (0: none): the same for the K/V rows of that
                             step's union (its first ahead_rows, ascending) that the row cache
                             lacks. Staging: 2 x kv_heads x (ahead_lines x blocks x 8 +
                             min(ahead_lines, dim) x blocks x 2 + ahead_rows x 4 x dim) bytes,
                             plus the last plan and union of every (layer, head) */
} fathom_cuda_tier_cache_config;
/* The window bench/cache_sim.py's decode traces favour, and the largest. */
#define FATHOM_CUDA_TIER_CACHE_WINDOW 16
#define FATHOM_CUDA_TIER_CACHE_MAX_WINDOW 255
/* Give a session an empty HBM cache of these sizes (replacing any it had;
 * all zero frees it). FATHOM_ERR_NOMEM, with the old cache kept, when device
 * memory runs out; FATHOM_ERR_INVALID_ARG when a nonzero size holds less
 * than one line or slot per (layer, head). Synchronizes the device. */
int fathom_cuda_tier_cache_set(fathom_cuda_tier *tier, uint32_t session,
                               const fathom_cuda_tier_cache_config *config);
/* Choose the session's plane lines and copy their closed blocks from host
 * memory, for every layer and head, on `stream` (capturable: it reads the
 * lengths and the window from device memory). A line (j, p) is counted by
 * the plans that read it (p < depth_j): with a window, the plans noted in
 * it (up to `window`, the steps' own; none yet: no line counted); without
 * one, the plan of depths: [layers][kv_heads][dim] device (e.g. the depths
 * the last step of each layer planned; NULL: no plan). The ranking: counted
 * lines by count descending, then the spare lines (uncounted, of every
 * channel with variance > 0), so lines the plans leave over hold what the
 * next plans may add; within equal counts by var_j / 4^p descending (the
 * running variance: low planes of high-variance channels first), ties to
 * the lower 4 j + p. With no plan that is a static per-head prefix; with a
 * window of 1, the last step's plan as by its depths without a window. The
 * first `lines` of the ranking are kept. FATHOM_ERR_INVALID_ARG for depths
 * with a window. No-op without a plane cache. */
int fathom_cuda_tier_cache_fill(fathom_cuda_tier *tier, uint32_t session, const uint8_t *depths,
                                cudaStream_t stream);
/* Device bytes the session's cache holds allocated (0 without one). */
int fathom_cuda_tier_cache_bytes(const fathom_cuda_tier *tier, uint32_t session, uint64_t *bytes);


/* ===================================================================== *
 * KV tier over several GPUs of one host (tensor-parallel ranks)
 * ===================================================================== *
 *
 * A shard object places one model's KV tier on tp ranks, one tier per rank
 * on the rank's device, as tensor-parallel engines place KV heads:
 *   head sharding (kv_heads % tp == 0): rank r holds KV heads
 *     [r*H/tp, (r+1)*H/tp) of every token; its step is the plain tier step
 *     on its heads: no traffic between ranks.
 *   token split (tp % kv_heads == 0, tp > kv_heads): rank r holds KV head
 *     r / Q for Q = tp / kv_heads ranks ("parts"); part q = r % Q holds the
 *     head's segments i with i % Q == q (whole segments of 64*S tokens,
 *     round robin, so appends spread over the parts as a session grows and
 *     every 64-token block lies in one part). A step's results equal ONE
 *     tier's: the planner's variance comes from running sums over every
 *     token (each rank keeps them for its heads), sink and local are
 *     positions of the whole session, each part scans its tokens and takes
 *     its top k by (score, position) -- a superset of its share of the
 *     global top k -- the parts exchange those candidates and every rank
 *     picks the same global winners (fathom_select's rule: ties to the
 *     lower position), each part attends over its winners, and the partial
 *     softmax sums are merged by their maxima (log-sum-exp). Exchanges are
 *     copies between the ranks' workspaces ordered by events: device to
 *     device (capturable) where the devices share peer access or are one
 *     device (the one-GPU simulation), else cudaMemcpyPeerAsync through the
 *     host (not capturable).
 *     Selections and depths are those of one tier; out and lse differ from
 *     one tier's only by the order of the double sums (partial sums scaled
 *     by exp(max_q - max)), far below bf16's and float's rounding.
 *
 * Single-process engines: one object drives every rank; per-rank arguments
 * are arrays of tp pointers on the ranks' devices, laid out as the tier's
 * with the rank's heads. A token-split rank takes the queries of every
 * query head of its KV head (the engine all-gathers the group's G query
 * heads, G*dim values) and writes the merged out/lse of all G on every
 * rank of the group. One process per GPU: create a plain fathom_cuda_tier
 * with the local heads (head sharding); the token split needs this object.
 *
 * Host memory of a rank's segments is allocated, where the host has several
 * NUMA nodes, with the node nearest its GPU preferred
 * (/sys/bus/pci/devices/<bus id>/numa_node); numa_node reports it.
 * Sessions have the same id on every rank. With head sharding, truncate,
 * fork and the HBM caches are the rank tiers' own (call each rank's tier;
 * the ranks' session ids stay equal while every rank sees the same calls).
 * The token split provides none of them (a rank's tier must not be
 * truncated or forked under it) nor union_count, nor centered sessions
 * (fathom_cuda_tier_set_center; with head sharding, center each rank's
 * tier's session). */
typedef struct fathom_cuda_shard fathom_cuda_shard;

typedef struct fathom_cuda_shard_config {
    fathom_cuda_tier_shape shape; /* the whole model: every KV head */
    uint32_t tp;                  /* ranks: kv_heads % tp == 0 or tp % kv_heads == 0 */
    const int *devices;           /* [tp] CUDA device of each rank (repeats allowed) */
    uint32_t max_append_rows;     /* token split: rows (sum of counts) one append carries
                                     at most, per rank staging; 0: 4096 */
} fathom_cuda_shard_config;

int fathom_cuda_shard_create(const fathom_cuda_shard_config *config, fathom_cuda_shard **out);
void fathom_cuda_shard_destroy(fathom_cuda_shard *shard); /* NULL is a no-op */

typedef struct fathom_cuda_shard_rank {
    int device;
    int numa_node;         /* node nearest the device, -1 when unknown */
    uint32_t first_head;   /* the rank's KV heads [first_head, first_head + heads) */
    uint32_t heads;
    uint32_t part, parts;  /* its token part: segments i with i % parts == part */
    fathom_cuda_tier *tier;/* the rank's tier (views, sums of its own tokens, usage) */
} fathom_cuda_shard_rank;
int fathom_cuda_shard_rank_of(const fathom_cuda_shard *shard, uint32_t rank,
                              fathom_cuda_shard_rank *out);

/* Sessions, as the tier's, on every rank; reserve and length count the
 * whole session's tokens. */
int fathom_cuda_shard_session_create(fathom_cuda_shard *shard, uint32_t *session);
int fathom_cuda_shard_session_free(fathom_cuda_shard *shard, uint32_t session);
int fathom_cuda_shard_reserve(fathom_cuda_shard *shard, uint32_t session, uint64_t tokens);
int fathom_cuda_shard_length(fathom_cuda_shard *shard, uint32_t session, uint64_t *length);
/* Errors every rank's GPU recorded (as fathom_cuda_tier_check). */
int fathom_cuda_shard_check(fathom_cuda_shard *shard);

/* fathom_cuda_tier_append on every rank: sessions[r], counts[r], keys[r],
 * values[r] on rank r's device, keys/values [total][rank heads][dim]; a
 * token-split rank keeps the rows of its segments. streams[r] on rank r's
 * device. */
int fathom_cuda_shard_append(fathom_cuda_shard *shard, uint32_t layer,
                             const uint32_t *const *sessions, uint32_t batch,
                             const uint32_t *const *counts, uint32_t max_count,
                             const uint16_t *const *keys, const uint16_t *const *values,
                             const cudaStream_t *streams);

/* args[r]: rank r's step (pointers on its device, shapes with its heads);
 * layer, batch, capacity_tokens (whole session), k, sink, local, budget,
 * scale and fixed_depths' presence must agree across ranks. The workspace
 * of each rank: fathom_cuda_shard_workspace_size. Every rank's work is
 * enqueued before the call returns; the ranks of a token-split head wait
 * for each other through events (one stream for all ranks of a device, or
 * streams of one capture, keep it capturable). */
int fathom_cuda_shard_workspace_size(const fathom_cuda_shard *shard, uint32_t rank,
                                     const fathom_cuda_tier_step_args *args, size_t *bytes);
int fathom_cuda_shard_step(fathom_cuda_shard *shard, const fathom_cuda_tier_step_args *args,
                           const cudaStream_t *streams);

#ifdef __cplusplus
}
#endif

#endif /* FATHOM_CUDA_H */

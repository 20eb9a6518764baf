/* Internal layout of the KV tier, shared by tier.cu (host side), append.cu
 * and tier_step.cu (kernels). */
#ifndef FATHOM_TIER_INTERNAL_CUH
#define FATHOM_TIER_INTERNAL_CUH

#include "cuda_internal.cuh"

/* Error codes the kernels record in tier_dev.error (the first one wins). */
enum {
    TIER_ERR_NONE = 0,
    TIER_ERR_SESSION = 1,  /* a session id >= max_sessions */
    TIER_ERR_CAPACITY = 2, /* an append beyond the session's reserved capacity */
    TIER_ERR_COUNT = 3,    /* an append count above max_count */
    TIER_ERR_LENGTH = 4,   /* a length above the step's capacity_tokens */
    TIER_ERR_GIVEN = 5,    /* a given selection outside [sink, n - local) or not strictly ascending */
    TIER_ERR_CENTER = 6    /* an append to a centered session whose center is not fixed */
};

/* A centered session's state per layer (tier_dev.center_state; 0: not centered). */
enum {
    TIER_CENTER_PENDING = 1, /* the center is the mean of the first append's keys, not taken yet */
    TIER_CENTER_TAKEN = 2,   /* ... taken from this layer's first append */
    TIER_CENTER_GIVEN = 3    /* the caller's (fathom_cuda_tier_set_center) */
};

/* A session's HBM cache (device memory; all NULL / 0 without one). A plane
 * line is (channel j, plane p) of one (layer, head): words of blocks
 * [0, blocks) and, in the same slot, channel j's scales (used for p = 0). */
typedef struct tier_cache {
    uint64_t *words;   /* [layers][heads][lines][blocks] */
    uint16_t *scales;  /* [layers][heads][lines][blocks] */
    int16_t *map;      /* [layers][heads][dim * 4] slot of line (j, p) at j * 4 + p, -1 none */
    uint32_t *line_of; /* [layers][heads][lines] the line j * 4 + p in each slot, ~0 none */
    uint32_t *valid;   /* [layers] blocks [0, valid) of every mapped line hold the host's words */
    uint32_t lines, blocks;
    uint8_t *plans;    /* [window][layers][heads][dim] depths of the last `window` plans noted, 0 before */
    uint32_t *noted;   /* [layers][heads] plans noted; the next goes to slot noted % window */
    uint32_t window;   /* 0: the fill ranks by its depths argument */
    uint16_t *rows;    /* [layers][heads][slots][2][dim] bf16 K then V */
    uint32_t *tags;    /* [layers][heads][slots] token + 1 held, 0 empty */
    uint32_t slots;    /* a multiple of ways */
    uint32_t ways;     /* 1: direct-mapped (token mod slots); 2, 4, 8: sets (token mod slots / ways) */
    uint32_t *stamps;  /* ways > 1: [layers][heads][slots] 2 x the step a way was last read, + 1 if inserted */
    uint32_t *steps;   /* ways > 1: [layers][heads] steps counted (the stamps' clock) */
    /* read-ahead (ahead_lines or ahead_rows > 0; tier_ahead.cu) */
    uint8_t *ahead_dep;     /* [layers][heads][dim] the last step's plan of each (layer, head), 0 before */
    uint32_t *ahead_uni;    /* [layers][heads][ahead_rows] the first rows of its union, ascending */
    uint32_t *ahead_cnt;    /* [layers][heads] rows of ahead_uni kept */
    uint32_t *ahead_nb;     /* [layers][heads] blocks closed at that step, <= blocks */
    uint16_t *ahead_map;    /* [heads][TIER_AHEAD_MAP(dim)] the running read-ahead's layout of a head's
                               plan: its lines (4 j + p) in (j, p) order, at most ahead_lines, then its
                               channels, at most ahead_chans, then the counts of both */
    uint64_t *stage_words;  /* [2][heads][ahead_lines][blocks] line x: the plan's x-th line in (j, p) order */
    uint16_t *stage_scales; /* [2][heads][ahead_chans][blocks] channel r: the plan's r-th channel */
    uint16_t *stage_rows;   /* [2][heads][ahead_rows][2][dim] row u of ahead_uni */
    int32_t *stage_layer;   /* [5] the layer each half of the staging holds (-1 none), then whether
                               it holds that layer's plane lines (else its rows only), then the half
                               the running read-ahead fills */
    uint32_t ahead_lines, ahead_chans, ahead_rows;
} tier_cache;

#define TIER_AHEAD_MAP(dim) ((FATHOM_PLANES + 1) * (dim) + 2) /* lines, channels, the two counts */

/* One warp walks a plan's depths dep[0, D) in channel order: f(j, d, x, r)
 * for channel j of depth d, x the plan's lines (j', p) before it in (j, p)
 * order, r its planned channels (d > 0) before it. Returns the plan's lines
 * and channels in *lines and *chans (every lane). */
template <int D, typename F>
static __device__ __forceinline__ void tier_plan_walk(const uint8_t *dep, uint32_t lane, uint32_t *lines,
                                                      uint32_t *chans, F f) {
    uint32_t run_l = 0, run_c = 0;
    for (uint32_t j0 = 0; j0 < D; j0 += 32) {
        const uint32_t j = j0 + lane, d = dep[j];
        uint32_t il = d, ic = d > 0;
        for (int o = 1; o < 32; o <<= 1) {
            const uint32_t a = __shfl_up_sync(0xffffffffu, il, o), b = __shfl_up_sync(0xffffffffu, ic, o);
            if (lane >= (uint32_t)o) il += a, ic += b;
        }
        f(j, d, run_l + il - d, run_c + ic - (d > 0));
        run_l += __shfl_sync(0xffffffffu, il, 31);
        run_c += __shfl_sync(0xffffffffu, ic, 31);
    }
    *lines = run_l;
    *chans = run_c;
}

/* The words of a set of W = 2, 4 or 8 ways at once (the set's first word
 * is W-word aligned: slots are a multiple of W). */
static __device__ __forceinline__ void set_load(uint32_t (&v)[8], const uint32_t *at, uint32_t W) {
    if (W == 2) {
        const uint2 a = *(const uint2 *)at;
        v[0] = a.x, v[1] = a.y;
        return;
    }
    const uint4 a = *(const uint4 *)at;
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    if (W == 8) {
        const uint4 b = *((const uint4 *)at + 1);
        v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    }
}

/* The row-cache slot (index into rows, tags) of (layer, head) lh holding
 * token idx: its slot (direct-mapped) or the way of its set tagged with it;
 * TIER_NO_SLOT where the cache does not hold it or has no rows. The fetch,
 * the insertion's row writes and the read-ahead all ask this. */
#define TIER_NO_SLOT (~(size_t)0)
static __device__ __forceinline__ size_t tier_row_slot(const tier_cache &c, size_t lh, uint32_t idx) {
    if (!c.slots) return TIER_NO_SLOT;
    if (c.ways <= 1) {
        const size_t cs = lh * c.slots + idx % c.slots;
        return c.tags[cs] == idx + 1 ? cs : TIER_NO_SLOT;
    }
    const size_t set0 = lh * c.slots + (size_t)(idx % (c.slots / c.ways)) * c.ways;
    uint32_t tag[8];
    set_load(tag, c.tags + set0, c.ways);
    size_t cs = TIER_NO_SLOT;
    for (uint32_t x = 0; x < c.ways; x++)
        if (tag[x] == idx + 1) cs = set0 + x;
    return cs;
}

/* The half of a session's staging that holds layer's read-ahead, -1 none. */
static __device__ __forceinline__ int tier_stage_half(const tier_cache &c, uint32_t layer) {
    if (!c.stage_layer) return -1;
    return c.stage_layer[0] == (int32_t)layer ? 0 : c.stage_layer[1] == (int32_t)layer ? 1 : -1;
}

/* What the kernels see: everything in device memory except the segments and
 * sums, which are mapped pinned host memory. Passed by value. */
typedef struct tier_dev {
    uint32_t layers, heads, dim, segment_blocks;
    uint32_t max_sessions, max_segments;
    uint64_t head_bytes;   /* one (layer, head) slice of a segment */
    uint64_t scales_off;   /* byte offsets inside a slice */
    uint64_t kv_off;
    uint8_t *const *table; /* [max_sessions][max_segments] segment bases (device pointers) */
    uint32_t *len;         /* [max_sessions][layers] tokens appended per layer */
    const uint32_t *cap;   /* [max_sessions] tokens the segments hold */
    double *const *sums;   /* [max_sessions] -> [layers][heads][3][dim] (mapped host) */
    uint32_t *error;       /* first error code */
    const tier_cache *caches; /* [max_sessions], device */
    float *const *centers;  /* [max_sessions] -> [layers][heads][dim] (mapped host); NULL: not centered */
    uint32_t *center_state; /* [max_sessions][layers] TIER_CENTER_*, 0 where not centered */
} tier_dev;

static __device__ __forceinline__ void tier_fail(const tier_dev &t, uint32_t code) {
    atomicCAS(t.error, 0u, code);
}

/* Base of (layer, head)'s slice in segment seg of session s. */
static __device__ __forceinline__ uint8_t *tier_slice(const tier_dev &t, uint32_t s, uint32_t seg,
                                                      uint32_t layer, uint32_t head) {
    return t.table[(size_t)s * t.max_segments + seg] +
           ((uint64_t)layer * t.heads + head) * t.head_bytes;
}

/* The device description of a tier (tier.cu). */
const tier_dev *fc_tier_dev(const fathom_cuda_tier *tier);
uint32_t fc_tier_group(const fathom_cuda_tier *tier);

/* The fp16 scale of a block from max |k|, saturated at 65504 (store.c's block_scale). */
static __host__ __device__ __forceinline__ uint16_t tier_saturate_scale(uint16_t h) {
    return (h & 0x7c00u) == 0x7c00u ? (uint16_t)0x7bffu : h;
}

/* store.c's quantize_code: c = clip(floor(k/s) + 8, 0, 15). */
static __host__ __device__ __forceinline__ unsigned tier_code(float k, float s) {
    const float f = floorf(k / s) + 8.0f;
    if (!(f >= 0.0f)) return 0;
    if (f > 15.0f) return 15;
    return (unsigned)f;
}


/* fp16 conversions that give the same bits on host and device. */
static __host__ __device__ __forceinline__ uint16_t tier_f16(float x) {
#ifdef __CUDA_ARCH__
    return __half_as_ushort(__float2half_rn(x));
#else
    return fathom_f32_to_f16(x);
#endif
}
static __host__ __device__ __forceinline__ float tier_f32(uint16_t h) {
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half(h));
#else
    return fathom_f16_to_f32(h);
#endif
}
static __host__ __device__ __forceinline__ float tier_bf16(uint16_t b) {
#ifdef __CUDA_ARCH__
    return __uint_as_float((uint32_t)b << 16);
#else
    return fathom_bf16_to_f32(b);
#endif
}

/* Encode one channel of one block whose rows 0..count-1 have values
 * value(i): the four plane words (bits of tokens >= count are 0) and the
 * fp16 scale, exactly as store.c's quantize_block leaves them. */
template <typename F>
static __host__ __device__ __forceinline__ void tier_encode_channel(F value, uint32_t count,
                                                                    uint64_t (&w)[FATHOM_PLANES],
                                                                    uint16_t *scale) {
    float max_abs = 0.0f;
    for (uint32_t i = 0; i < count; i++) max_abs = fmaxf(max_abs, fabsf(value(i)));
    const uint16_t h = tier_saturate_scale(tier_f16(max_abs));
    const float a = tier_f32(h);
    for (int p = 0; p < FATHOM_PLANES; p++) w[p] = 0;
    for (uint32_t i = 0; i < count; i++) {
        const unsigned c = a > 0.0f ? tier_code(value(i), a / 8.0f) : 8u;
        for (int p = 0; p < FATHOM_PLANES; p++) w[p] |= (uint64_t)((c >> (3 - p)) & 1u) << i;
    }
    *scale = h;
}

/* Values from an array, for tier_encode_channel on the host. */
typedef struct tier_values {
    const float *v;
    __host__ __device__ float operator()(uint32_t i) const { return v[i]; }
} tier_values;

/* store.c's running sums for one channel: x = row - shift, sum += x,
 * sum_sq += x*x, in double without contraction. */
static __host__ __device__ __forceinline__ void tier_sums_add(float v, double shift, double *sum,
                                                              double *sum_sq) {
#ifdef __CUDA_ARCH__
    const double x = __dsub_rn((double)v, shift);
    *sum = __dadd_rn(*sum, x);
    *sum_sq = __dadd_rn(*sum_sq, __dmul_rn(x, x));
#else
    const double x = (double)v - shift;
    *sum += x;
    *sum_sq += x * x;
#endif
}

/* The caches' host and device descriptions (tier.cu), and whether a
 * session is live. */
tier_cache *fc_tier_caches(fathom_cuda_tier *tier, tier_cache **device);
int fc_tier_live(const fathom_cuda_tier *tier, uint32_t session);
uint32_t *fc_tier_row_caches(fathom_cuda_tier *tier); /* sessions with a direct-mapped row cache */
uint32_t *fc_tier_set_caches(fathom_cuda_tier *tier); /* sessions with a row cache of ways > 1 */
uint32_t *fc_tier_plan_windows(fathom_cuda_tier *tier); /* sessions whose plane cache notes plans */
uint32_t *fc_tier_ahead_sessions(fathom_cuda_tier *tier); /* sessions with read-ahead */
/* The read-ahead stream and its fork and join events (created with the tier);
 * the capture id of the graph whose last step left its read-ahead to the
 * next step (fc_tier_ahead_join), 0 none. */
cudaStream_t fc_tier_ahead_stream(const fathom_cuda_tier *tier, cudaEvent_t *fork, cudaEvent_t *join);
unsigned long long *fc_tier_ahead_pending(fathom_cuda_tier *tier);
/* tier_ahead.cu: `stream` waits for a read-ahead left pending in the graph
 * it is capturing (none pending, or another capture's: nothing to do). */
int fc_tier_ahead_join(fathom_cuda_tier *tier, cudaStream_t stream);
/* At the end of a step of `layer` that forked a read-ahead: in a capture, and
 * unless layer is the last (FATHOM_CUDA_AHEAD_ACROSS: any layer), leave it
 * to the next step (pending); else `stream` waits for it now. */
int fc_tier_ahead_leave(fathom_cuda_tier *tier, uint32_t layer, cudaStream_t stream);
/* Whether a step of `layer` on `stream` starts its read-ahead after its own
 * work (in a capture: FATHOM_CUDA_AHEAD_BETWEEN but for the last layer,
 * FATHOM_CUDA_AHEAD_ACROSS). */
int fc_tier_ahead_after(fathom_cuda_tier *tier, uint32_t layer, cudaStream_t stream, bool *after);
/* The step's pipeline (NULL: one stream); a tier starts with TIER_LANES
 * lanes and chunks by context (fathom_cuda_tier_set_lanes). */
#define TIER_LANES 3
fathom_cuda_lanes *fc_tier_lanes(const fathom_cuda_tier *tier);
/* The tier's scan mode (fathom_cuda_tier_set_scan_mode). */
fathom_cuda_scan_mode fc_tier_scan_mode(const fathom_cuda_tier *tier);
/* The tier's read-ahead start (fathom_cuda_tier_set_ahead_start). */
fathom_cuda_ahead_start fc_tier_ahead_start(const fathom_cuda_tier *tier);
/* tier_cache.cu: free a description's device memory (and zero it); drop a
 * session's cache (its device description zeroed first); after a
 * truncation to n tokens, forget what the cache holds beyond n. */
void fc_tier_cache_release(tier_cache *c);
int fc_tier_cache_drop(fathom_cuda_tier *tier, uint32_t session);
int fc_tier_cache_truncate(fathom_cuda_tier *tier, uint32_t session, uint64_t n);
/* The step's plan of `layer` ([batch][heads][dim] depths, device) noted in
 * the plan window of every session of the batch that has one, on stream. */
int fc_tier_cache_note(fathom_cuda_tier *tier, uint32_t layer, const uint32_t *sessions, uint32_t batch,
                       const uint8_t *depths, cudaStream_t stream);

/* fathom_store_variance of one channel from its running sums over n > 0 rows. */
static __device__ __forceinline__ float tier_variance(double sum, double sum_sq, uint32_t n) {
    const double mean = __ddiv_rn(sum, (double)n);
    const double v = __dsub_rn(__ddiv_rn(sum_sq, (double)n), __dmul_rn(mean, mean));
    return v > 0.0 ? (float)v : 0.0f;
}

/* tier_step.cu: every check fathom_cuda_tier_step makes of its arguments
 * (messages name `who`), with the workspace's alignment and size when
 * `workspace`; nothing is enqueued. */
int fc_tier_step_check(const fathom_cuda_tier *tier, const fathom_cuda_tier_step_args *args, const char *who,
                       bool workspace);

/* The step's workspace layout (tier_step.cu), computed once per step by
 * fc_tier_step_prepare. */
typedef struct tier_ws {
    uint32_t *n_of;    /* [P] */
    float *qf;         /* [R][D] */
    uint8_t *depths;   /* [P][D] */
    uint16_t *order;   /* [P][D] channels in scan order */
    uint8_t *order_t;  /* [P][D] their depths */
    uint32_t *active;  /* [P] */
    float *scores;     /* [R][stride] */
    uint64_t stride;
    fc_workspace top;  /* the top-k's arrays (hist .. uni_count) */
    float *rows_k;     /* [P][G*k][D] */
    uint16_t *rows_v;  /* [P][G*k][D] */
    uint8_t *miss;     /* [P][G*k] the row came from host and may enter the row cache */
    double *logit;     /* [R][k] the attention's logits */
    uint8_t *stage;    /* [P][nseg][kv_off] planes and scales as in the host slices; NULL: scanned in place */
    uint32_t nseg;     /* segments of capacity_tokens */
    size_t total;
    bool scan_int8;    /* not part of the layout: the tier's scan mode, set by fc_tier_step_launch */
} tier_ws;

/* tier_ahead.cu, on stream: the read-ahead of layer + 1 (mod layers) for
 * the sessions of a step of layer (their plane lines too when `planes`),
 * and, after the step, its plans and unions kept as the last ones. */
int fc_tier_ahead_launch(fathom_cuda_tier *tier, uint32_t layer, const uint32_t *sessions, uint32_t batch,
                         bool planes, cudaStream_t stream);
int fc_tier_ahead_save(fathom_cuda_tier *tier, uint32_t layer, const uint32_t *sessions, uint32_t batch,
                       uint32_t cap, const tier_ws *w, cudaStream_t stream);

/* Where a step's given pairs finish (fc_tier_step_launch): their union, row
 * fetch and attention on `stream`, which waits for `start` (recorded on the
 * step's stream after the plan) and records `done` (the step's stream waits
 * for it before its last copies). Selections and events are the caller's;
 * work already enqueued on `stream` (e.g. the H2D copy of the selections)
 * runs first. */
typedef struct tier_given_lane {
    cudaStream_t stream;
    cudaEvent_t start, done;
} tier_given_lane;

/* tier_step.cu: fathom_cuda_tier_step_given in two halves, so that a caller
 * can check everything before it enqueues its own work: prepare checks the
 * arguments and the given pairs (FATHOM_ERR_INVALID_ARG; given with 0 pairs
 * becomes NULL in *use) and lays out the workspace; launch enqueues the step
 * with that layout (no checks). lane NULL: the given pairs finish on the
 * step's stream after the other pairs' work. */
int fc_tier_step_prepare(const fathom_cuda_tier *tier, const fathom_cuda_tier_step_args *args,
                         const fathom_cuda_tier_given *given, const char *who, tier_ws *w,
                         const fathom_cuda_tier_given **use);
int fc_tier_step_launch(fathom_cuda_tier *tier, const fathom_cuda_tier_step_args *args,
                        const fathom_cuda_tier_given *given, const tier_given_lane *lane, const tier_ws *w,
                        cudaStream_t stream);

/* tier_step.cu: where a step with these arguments leaves the scan's scores
 * in its workspace ([batch*kv_heads*group][stride] floats; a row's first n
 * tokens, n its session's length, hold the scores after the step). The
 * token-split step (tier_shard.cu) reads its candidates' scores there. */
int fc_tier_step_scores(const fathom_cuda_tier *tier, const fathom_cuda_tier_step_args *args,
                        const float **scores, uint64_t *stride);

/* Launchers for tier.cu's host code that need kernels. */
/* centering: enqueue the kernel that takes a pending center from a first
 * append (once the tier has had a centered session). */
int fc_tier_append(const tier_dev *t, uint32_t layer, const uint32_t *sessions, uint32_t batch,
                   const uint32_t *counts, uint32_t max_count, const uint16_t *keys,
                   const uint16_t *values, bool centering, cudaStream_t stream);

#endif

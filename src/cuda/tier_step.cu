/* The step over a KV tier: for every (batch entry, KV head) of one layer,
 *   prep    the length from device memory, bf16 queries to float, the
 *           variance from the running sums (fathom_store_variance), the
 *           water-filling depths (fathom_water_fill) or the caller's fixed
 *           depths, and the scan order;
 *   gather  (pipelined steps) the planned plane rows and scales of a chunk
 *           of problems that the session's HBM plane cache does not hold
 *           into HBM staging, laid out as the host slices;
 *   scan    approximate scores of every token, plane words from the
 *           session's HBM plane cache where it holds them, else from
 *           staging (pipelined), from the read-ahead's staging
 *           (tier_ahead.cu) or read in place from the host segments
 *           through the segment table;
 *   top-k   topk.cu's radix select, each row at its own length;
 *   fetch   the union of the group's winners, K and V rows from the
 *           session's HBM row cache, the read-ahead's staging or the host;
 *   attend  softmax(scale q.k) v over each head's own winners, in double
 *           (logits, then max, sum and value sums: two launches); bf16
 *           output and optional log-sum-exp;
 *   insert  (sessions with a row cache) the missed rows into their slots;
 *   note    (sessions with a plan window) the plan into the window;
 *   save    (sessions with read-ahead) the plan and union as the layer's
 *           last, for the read-ahead of the previous layer's next step.
 * Given pairs (fathom_cuda_tier_step_given: the last pairs of the batch,
 * selected on the host) are planned (or take the given depths), then skip
 * gather, scan and top-k: once their event fires, their selections' middle
 * winners are checked and go through the top-k's sort and union, and fetch
 * and attention run as for the others (after the other pairs on the step's
 * stream, or beside them on a caller's stream: fc_tier_step_launch).
 * Grids depend only on the host arguments (batch, capacity_tokens, k), so a
 * captured graph stays valid while lengths grow. Kernels are templated on
 * the head dimension (64, 128, 256) and on G rounded up to a power of two.
 *
 * Scores are bit-identical to fathom_store_scan's fast kernels: active
 * channels in passes of 64 (index order), inside a pass by depth then
 * index, fmaf(q, khat, acc) from 0 per pass, each pass added to the score
 * (scan.cu explains why khat is exact). In the int8 scan mode
 * (fathom_cuda_tier_set_scan_mode) they are bit-identical to the CPU's
 * int8 kernels instead (the same passes; core/scan_internal.h defines the
 * pass's term). */
#include "tier_internal.cuh"

#include <cuda_bf16.h>
#include <math.h>
#include <string.h>

#define PASS 64 /* active channels per scan pass, as the CPU kernels */

/* ---- workspace ---- */

/* tier_ws: tier_internal.cuh */

/* A bump allocator over the workspace: 256-byte aligned pieces. */
typedef struct bump {
    uint8_t *base;
    uint64_t off;
    bool overflow;
} bump;

template <typename T>
static T *take(bump *b, uint64_t count) {
    const uint64_t at = (b->off + 255) & ~(uint64_t)255;
    uint64_t bytes;
    if (!fathom_mul_u64(count, sizeof(T), &bytes) || at + bytes < at || at + bytes > (1ull << 46))
        b->overflow = true;
    b->off = at + bytes;
    return b->base && !b->overflow ? (T *)(b->base + at) : NULL;
}

/* Problems per pipeline chunk; P (one stream, planes scanned in place) when
 * the step is not pipelined: no lanes, one chunk, or chunks by context
 * outside the one shape the pipeline measured faster in (bench_cuda_tier):
 * from TIER_PIPELINE_TOKENS of capacity (below, the gathers' fixed
 * latencies cost more than the transfer they hide), one KV head per chunk
 * (at most FATHOM_CUDA_MAX_CHUNKS problems) and segments of at least
 * TIER_PIPELINE_SEGMENT blocks (long plane runs). A ragged batch of 32
 * problems over segments of 1024 blocks, pipelined in chunks of 2, measured
 * slower than on one stream. */
#define TIER_PIPELINE_TOKENS 196608
#define TIER_PIPELINE_SEGMENT 4096
static uint32_t chunk_of(const fathom_cuda_tier *tier, const fathom_cuda_tier_step_args *a) {
    const fathom_cuda_lanes *L = fc_tier_lanes(tier);
    const tier_dev *t = fc_tier_dev(tier);
    const uint32_t P = a->batch * t->heads;
    if (!L) return P;
    if (L->per_chunk == 0 && (a->capacity_tokens < TIER_PIPELINE_TOKENS || P > FATHOM_CUDA_MAX_CHUNKS ||
                              t->segment_blocks < TIER_PIPELINE_SEGMENT))
        return P;
    return fc_chunk_size(L->per_chunk, P, a->capacity_tokens);
}

/* Whether every live session's HBM cache holds at least a water-filling
 * plan's budget of plane lines per (layer, KV head): then the gather would
 * move little and a step chunked by context runs on one stream. bench_cuda_tier
 * at 1M tokens: with up to 70% of the plane bytes cached (what a real decode's
 * drifting plans get from a cache of fewer lines than a plan) the pipeline
 * was faster, its gathers hiding earlier chunks' scans; with a plan that does
 * not drift, one stream was faster from 3/4 of its lines cached. Host work: a
 * pass over max_sessions, for steps that would pipeline only. */
static bool whole_plan_cached(fathom_cuda_tier *tier, const fathom_cuda_tier_step_args *a) {
    if (a->fixed_depths) return false;
    const tier_dev *t = fc_tier_dev(tier);
    tier_cache *dev;
    const tier_cache *c = fc_tier_caches(tier, &dev);
    bool any = false;
    for (uint32_t s = 0; s < t->max_sessions; s++) {
        if (!fc_tier_live(tier, s)) continue;
        if (c[s].lines < a->budget) return false;
        any = true;
    }
    return any;
}

static int layout(const fathom_cuda_tier *tier, const fathom_cuda_tier_step_args *a, void *base,
                  tier_ws *w) {
    const tier_dev *t = fc_tier_dev(tier);
    const uint64_t G = fc_tier_group(tier), D = t->dim, P = (uint64_t)a->batch * t->heads, R = P * G;
    const uint64_t k = a->k;
    bump b = {(uint8_t *)base, 0, false};
    memset(w, 0, sizeof *w);
    w->stride = (a->capacity_tokens + 63) & ~(uint64_t)63;
    w->n_of = take<uint32_t>(&b, P);
    w->qf = take<float>(&b, R * D);
    w->depths = take<uint8_t>(&b, P * D);
    w->order = take<uint16_t>(&b, P * D);
    w->order_t = take<uint8_t>(&b, P * D);
    w->active = take<uint32_t>(&b, P);
    w->scores = take<float>(&b, R * w->stride);
    fc_workspace *f = &w->top;
    /* hist, counters and cand_fill adjacent: one memset zeroes them */
    const uint64_t zero_from = (b.off + 255) & ~(uint64_t)255;
    f->hist = take<uint32_t>(&b, R * 2 * FC_HIST_BINS);
    f->counters = take<uint32_t>(&b, R * FC_COUNTERS);
    f->cand_fill = take<uint32_t>(&b, R);
    f->zero_bytes = (size_t)(b.off - zero_from);
    f->state = take<fc_select_state>(&b, R);
    f->mid = take<uint32_t>(&b, R * k);
    f->cand = take<uint64_t>(&b, R * FC_CAND_CAP);
    f->sel = take<uint32_t>(&b, R * k);
    f->sel_count = take<uint32_t>(&b, R);
    f->slot = take<uint16_t>(&b, R * k);
    f->uni = take<uint32_t>(&b, R * k);
    f->uni_count = take<uint32_t>(&b, P);
    w->rows_k = take<float>(&b, R * k * D);
    w->rows_v = take<uint16_t>(&b, R * k * D);
    w->miss = take<uint8_t>(&b, R * k);
    w->logit = take<double>(&b, R * k);
    const uint64_t seg_tokens = (uint64_t)t->segment_blocks * FATHOM_BLOCK_TOKENS;
    w->nseg = (uint32_t)((a->capacity_tokens + seg_tokens - 1) / seg_tokens);
    uint64_t stage = 0;
    if (chunk_of(tier, a) < P && (!fathom_mul_u64(P * w->nseg, t->kv_off, &stage) || stage > (1ull << 44)))
        b.overflow = true;
    w->stage = stage ? take<uint8_t>(&b, stage) : NULL; /* NULL: the scan reads in place */
    FATHOM_CHECK(b.overflow, FATHOM_ERR_NOMEM, "tier_step: workspace size overflows");
    w->total = (size_t)b.off + 256;
    return FATHOM_OK;
}

/* ---- prep: length, queries, variance, depths, scan order ---- */

template <int D>
static __global__ void __launch_bounds__(D)
tier_prep_kernel(tier_dev t, uint32_t layer, const uint32_t *sessions, uint32_t G, uint32_t budget,
                 const uint8_t *fixed, uint64_t capacity, const uint16_t *queries, uint32_t plan_to, tier_ws w) {
    __shared__ uint16_t s_pref[FATHOM_PLANES][D + 1]; /* [v][i]: channels below i of depth v + 1 */
    __shared__ uint16_t s_wcnt[FATHOM_PLANES][D / 32];  /* [v][w]: warp w's channels of depth v + 1 */
    __shared__ uint16_t s_start[D / PASS + 1];          /* each pass's first channel */
    __shared__ uint32_t s_active;
    const uint32_t p = blockIdx.x, j = threadIdx.x;
    const uint32_t s = sessions[p / t.heads], h = p % t.heads;
    uint32_t n = 0;
    if (s >= t.max_sessions) {
        if (j == 0 && h == 0) tier_fail(t, TIER_ERR_SESSION);
    } else {
        n = t.len[(size_t)s * t.layers + layer];
        if (n > capacity) {
            if (j == 0 && h == 0) tier_fail(t, TIER_ERR_LENGTH);
            n = 0;
        }
    }
    if (j == 0) w.n_of[p] = n;
    /* queries, and g_j = (sum_h q_hj^2) var_j in fathom_importance's order */
    double q2 = 0.0;
    for (uint32_t g = 0; g < G; g++) {
        const size_t at = ((size_t)p * G + g) * D + j;
        const float q = tier_bf16(queries[at]);
        w.qf[at] = q;
        q2 = __dadd_rn(q2, __dmul_rn((double)q, (double)q));
    }
    if (p >= plan_to) { /* a given pair whose depths come with its selections: no plan, no scan */
        if (j == 0) w.active[p] = 0;
        return; /* uniform over the CTA */
    }
    uint32_t depth;
    if (fixed) { /* uniform over the CTA */
        const uint32_t f = fixed[(size_t)p * D + j];
        depth = f < FATHOM_PLANES ? f : FATHOM_PLANES;
    } else {
        float var = 0.0f;
        if (n > 0) {
            const double *base = t.sums[s] + ((size_t)layer * t.heads + h) * 3 * D;
            var = tier_variance(__ldcv(&base[D + j]), __ldcv(&base[2 * D + j]), n);
        }
        depth = fc_water_fill_depth<D>(__dmul_rn(q2, (double)var), budget);
    }
    w.depths[(size_t)p * D + j] = (uint8_t)depth;
    /* scan order: passes of PASS active channels (index order), by depth
     * then index. rank = active channels below j; a pass holds the active
     * channels [start, end) of its ranks, so j's place in it is the pass's
     * channels of smaller depth plus those of its depth below j: differences
     * of the per-depth prefix counts (warp ballots, then the warps before). */
    const uint32_t lane = j & 31, warp = j >> 5;
    uint32_t ballot[FATHOM_PLANES];
    for (int v = 0; v < FATHOM_PLANES; v++) {
        ballot[v] = __ballot_sync(0xffffffffu, depth == (uint32_t)v + 1);
        if (lane == 0) s_wcnt[v][warp] = (uint16_t)__popc(ballot[v]);
    }
    __syncthreads();
    uint32_t below[FATHOM_PLANES], rank = 0;
    for (int v = 0; v < FATHOM_PLANES; v++) {
        uint32_t c = __popc(ballot[v] & ((1u << lane) - 1u));
        for (uint32_t x = 0; x < warp; x++) c += s_wcnt[v][x];
        below[v] = c;
        s_pref[v][j] = (uint16_t)c;
        if (j == D - 1) s_pref[v][D] = (uint16_t)(c + (depth == (uint32_t)v + 1));
        rank += c;
    }
    if (j == D - 1) s_active = rank + (depth > 0);
    if (depth > 0 && rank % PASS == 0) s_start[rank / PASS] = (uint16_t)j;
    __syncthreads();
    if (depth > 0) {
        const uint32_t pass = rank / PASS, start = s_start[pass];
        const uint32_t end = (pass + 1) * PASS < s_active ? s_start[pass + 1] : D;
        uint32_t pos = pass * PASS + below[depth - 1] - s_pref[depth - 1][start];
        for (uint32_t v = 0; v + 1 < depth; v++) pos += s_pref[v][end] - s_pref[v][start];
        w.order[(size_t)p * D + pos] = (uint16_t)j;
        w.order_t[(size_t)p * D + pos] = (uint8_t)depth;
    }
    if (j == 0) w.active[p] = s_active;
}

/* ---- scan ---- */

/* G <= 4: 8 tokens a lane and 32 warps an SM (at most 64 registers), which
 * measured faster than 16 tokens and 16 warps: twice the warps have plane
 * words in flight and each thread waits on fewer loads. G = 8 keeps 8
 * tokens at 16 warps (64 accumulators), G = 16 4 tokens. */
template <int GP>
struct tier_scan_shape {
    static const int TOK = GP <= 8 ? 8 : 4;           /* tokens per lane */
    static const int PARTS = 64 / TOK;                /* warps per 32 blocks */
    static const int THREADS = 32 * PARTS;
    static const int WARPS_PER_SM = GP <= 4 ? 32 : 16;
    static const int MIN_BLOCKS = WARPS_PER_SM * 32 / THREADS; /* at most 65536 / (32 WARPS_PER_SM) registers */
};

/* A lane's TOK codes of one channel read to `depth`: its plane words at
 * words[0], words[32], ... (one row of 32 blocks per plane), from bit
 * `shift` (a multiple of TOK) on, as fc_codes_add_plane leaves them. */
template <int TOK>
static __device__ __forceinline__ void tier_lane_codes(uint32_t (&nib)[(TOK + 7) / 8], const uint64_t *words,
                                                       uint32_t depth, uint32_t shift, const uint32_t *spread) {
    const uint8_t *bytes = (const uint8_t *)words + shift / 8; /* TOK == 8: the lane's bits, little-endian */
#pragma unroll
    for (int pl = 0; pl < FATHOM_PLANES; pl++) {
        if (pl >= (int)depth) break;
        fc_codes_add_plane(nib, TOK == 8 ? (uint32_t)bytes[pl * 32 * 8] : (uint32_t)(words[pl * 32] >> shift),
                           spread);
    }
}

/* Signed dot product of four unsigned bytes (a) with four signed ones (b),
 * added to c (dp4a.u32.s32). */
static __device__ __forceinline__ int32_t tier_dp4a_us(uint32_t a, int32_t b, int32_t c) {
    int32_t d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

/* The int8 scan's codes of a quad of channels: for every token i of the
 * lane, the four channels' codes filled to 4 bits, c' = c 2^(4 - t) (the
 * planes past a channel's depth t cleared), channel u in byte u. `bytes`:
 * the lane's plane bytes in s_words (row 0, its 8 tokens' bits from bit 0;
 * TOK == 4: from bit sh4, 0 or 4); off.u: channel u's first row times 256
 * (one row of 32 words); pm.p: byte u 0xff where plane p < channel u's
 * depth. Plane p of the four channels in one word (channel u in byte u,
 * token i at bit i of each byte), then a 4 x 4 bit transpose between the
 * words and the bits of each nibble: code bit q is plane 3 - q, so word w
 * holds token w's codes in its low nibbles and token 4 + w's in its high
 * ones (lo[w], and 16 times hi[w]). NPL: the planes read, the quad's
 * largest depth (pm.p is 0 from p = NPL on). */
template <int TOK, int NPL>
static __device__ __forceinline__ void tier_quad_codes(const uint8_t *bytes, uint4 off, uint4 pm, uint32_t sh4,
                                                       uint32_t (&lo)[4], uint32_t (&hi)[4]) {
    const uint32_t offs[4] = {off.x, off.y, off.z, off.w}, masks[4] = {pm.x, pm.y, pm.z, pm.w};
    uint32_t a[4]; /* a[q]: plane 3 - q */
#pragma unroll
    for (int pl = 0; pl < FATHOM_PLANES; pl++) {
        a[3 - pl] = 0;
        if (pl >= NPL) continue;
        uint32_t v = (uint32_t)bytes[offs[0] + pl * 256] | (uint32_t)bytes[offs[1] + pl * 256] << 8 |
                     (uint32_t)bytes[offs[2] + pl * 256] << 16 | (uint32_t)bytes[offs[3] + pl * 256] << 24;
        if (TOK == 4) v >>= sh4; /* the lane's 4 tokens to the low nibbles (the high ones unused) */
        a[3 - pl] = v & masks[pl];
    }
    /* swap bit 1 of the word index with bit 1 of the bit index (in every nibble), then bit 0 with bit 0 */
#pragma unroll
    for (int q = 0; q < 2; q++) {
        const uint32_t t = ((a[q] >> 2) ^ a[q + 2]) & 0x33333333u;
        a[q + 2] ^= t;
        a[q] ^= t << 2;
    }
#pragma unroll
    for (int q = 0; q < 4; q += 2) {
        const uint32_t t = ((a[q] >> 1) ^ a[q + 1]) & 0x55555555u;
        a[q + 1] ^= t;
        a[q] ^= t << 1;
    }
#pragma unroll
    for (int w = 0; w < 4; w++) {
        lo[w] = a[w] & 0x0f0f0f0fu;
        hi[w] = a[w] & 0xf0f0f0f0u;
    }
}

/* The int8 definition's constants (core/scan_internal.h: SCAN_INT8_*). */
#define TIER_INT8_MAGIC 0x1.8p23f /* 1.5 * 2^23: adding it rounds to an integer */
#define TIER_INT8_TINY 0x1p-100f  /* below it a block's weights are all 0 */
#define TIER_INT8_LEVELS 127

/* One CTA: 32 consecutive blocks (lane = block) of one KV head, warps
 * splitting each block's 64 tokens. Per pass, the pass's plane words and
 * scales of the 32 blocks are loaded once into shared memory (coalesced
 * 256-byte runs of host memory), then decoded by every warp. The last pass
 * also counts the top-k's level-0 histogram (topk.cu) of the final scores of
 * the middle tokens [sink, n - local) of rows with n > k, as hist0_kernel
 * would: G histograms in shared memory after the words (INT8: two 16-bit
 * counts a word, as a CTA counts at most 2048 tokens a head, to leave room
 * for the weights), added to the workspace's at the end.
 * INT8: the int8 definition (core/scan_internal.h, scan_int8_weights and
 * int_reference). Per pass, head g and block (lane), the threads first
 * find m = max_k |q_gk a_k| and the block's r = 127 / m and s = m / 2032
 * (s_ir, s_is; NaN s where a product is not finite, r = s = 0 below
 * 2^-100), then the weights w_k = fmaf(q_gk a_k, r, 1.5 2^23) - 1.5 2^23,
 * four channels (a quad of the pass) a word as signed bytes, and K =
 * sum_k w_k (2^(4 - t_k) - 16) (after the histograms in shared memory).
 * Each lane then sums T = K + 2 sum_k w_k c'_k exactly in int32 per token
 * (c'_k = c_k 2^(4 - t_k), the code filled to 4 bits, so that T = sum_k
 * w_k d_k with d_k = (2 c_k + 1) 2^(4 - t_k) - 16), a quad's four codes of
 * a token in one word (tier_quad_codes: a bit transpose in registers) and
 * one dp4a per head and token, and writes s * (float)T as the pass's term,
 * combined with the score as the exact passes are. Every float operation is
 * an explicit _rn intrinsic, so no contraction changes a rounding. */
#define SCAN_LOADS 8 /* plane words a thread has in flight */
template <int D, int GP, bool INT8>
static __global__ void __launch_bounds__(tier_scan_shape<GP>::THREADS, tier_scan_shape<GP>::MIN_BLOCKS)
tier_scan_kernel(tier_dev t, uint32_t layer, const uint32_t *sessions, uint32_t G, uint32_t p0, tier_ws w,
                 uint32_t k, uint32_t sink, uint32_t local, uint32_t pass_words, unsigned long long *hit_bytes,
                 unsigned long long *ahead_bytes) {
    typedef tier_scan_shape<GP> SH;
    extern __shared__ uint64_t s_words[]; /* [pass_words][32], [G][FC_HIST_BINS / HPW] counts, INT8: s_w4, s_K */
    __shared__ __align__(16) float s_q[PASS][GP]; /* a channel's GP queries in one vector load */
    __shared__ __align__(16) fc_depth_consts s_dc[FATHOM_PLANES + 1];
    __shared__ uint16_t s_j[PASS], s_off[PASS + 1], s_scale[PASS][32];
    __shared__ uint8_t s_t[PASS];
    __shared__ uint16_t s_row_j[PASS * FATHOM_PLANES];
    __shared__ uint8_t s_row_p[PASS * FATHOM_PLANES];
    __shared__ int16_t s_line[PASS * FATHOM_PLANES]; /* cache slot of (pass channel c, plane p) */
    __shared__ int16_t s_row_line[PASS * FATHOM_PLANES];
    __shared__ int16_t s_sline[PASS * FATHOM_PLANES]; /* staged line of (pass channel c, plane p) */
    __shared__ int16_t s_row_sline[PASS * FATHOM_PLANES];
    __shared__ int16_t s_sscale[PASS];                /* staged scales of pass channel c */
    __shared__ uint16_t s_apref[D], s_arank[D];       /* the staged plan: line of (j, 0), channel rank */
    __shared__ uint8_t s_adep[D];
    __shared__ uint32_t s_spread[INT8 ? 1 : 256]; /* exact: fc_spread8 of every byte (int8: tier_quad_codes) */
    __shared__ float s_ir[INT8 ? GP : 1][32], s_is[INT8 ? GP : 1][32]; /* int8: r and s of (head, block) */
    __shared__ uint4 s_qoff[INT8 ? PASS / 4 : 1]; /* int8: per quad, its channels' first rows times 256, 0 past np */
    __shared__ uint4 s_qpm[INT8 ? PASS / 4 : 1];  /* int8: per quad and plane p, byte u 0xff where p < t_u */
    const uint32_t p = p0 + blockIdx.y, tid = threadIdx.x, lane = tid & 31, part = tid >> 5;
    const uint64_t n = w.n_of[p], nb = (n + 63) / 64, b0 = (uint64_t)blockIdx.x * 32;
    if (b0 >= nb) return; /* uniform */
    if (!INT8)
        for (uint32_t i = tid; i < 256; i += SH::THREADS) s_spread[i] = fc_spread8(i); /* read after a barrier */
    if (tid >= 1 && tid <= FATHOM_PLANES) s_dc[tid] = fc_depth_consts_of(tid); /* read after a barrier */
    constexpr uint32_t HPW = INT8 ? 2 : 1; /* histogram bins a word */
    uint32_t *s_hist = (uint32_t *)(s_words + (size_t)pass_words * 32); /* INT8: bins 2i, 2i + 1 in word i */
    uint32_t *s_w4 = s_hist + G * FC_HIST_BINS / HPW; /* INT8: [GP][PASS / 4][32] weights, four a word */
    int32_t *s_K = (int32_t *)(s_w4 + GP * (PASS / 4) * 32); /* INT8: [GP][32] */
    const bool tally = n > k; /* uniform */
    if (tally)
        for (uint32_t i = tid; i < G * FC_HIST_BINS / HPW; i += SH::THREADS) s_hist[i] = 0; /* read after a barrier */
    const uint32_t S = t.segment_blocks, h = p % t.heads;
    const uint32_t s = sessions[p / t.heads];
    const tier_cache cache = t.caches[s];
    const size_t lh = (size_t)layer * t.heads + h;
    const uint32_t cvalid = cache.map ? cache.valid[layer] : 0; /* blocks below it: cached lines */
    const int16_t *cmap = cache.map + lh * D * FATHOM_PLANES;
    const uint64_t *cwords = cache.words + lh * cache.lines * cache.blocks;
    const uint16_t *cscales = cache.scales + lh * cache.lines * cache.blocks;
    uint32_t cached = 0, staged = 0; /* bytes this thread read from the cache, the read-ahead's staging */
    /* the read-ahead's staging of this layer's planes (scans in place only) */
    const int half = w.stage ? -1 : tier_stage_half(cache, layer);
    const bool ahead = half >= 0 && cache.stage_layer[2 + half] && cache.ahead_lines; /* uniform */
    const uint32_t snb = ahead ? cache.ahead_nb[lh] : 0; /* staged blocks: [0, snb) */
    const uint64_t *swords = ahead ? cache.stage_words + ((size_t)half * t.heads + h) * cache.ahead_lines * cache.blocks : NULL;
    const uint16_t *sscales = ahead ? cache.stage_scales + ((size_t)half * t.heads + h) * cache.ahead_chans * cache.blocks : NULL;
    if (ahead && tid < 32) { /* warp 0: the staged plan's line and channel ranks */
        uint32_t lines, chans;
        tier_plan_walk<D>(cache.ahead_dep + lh * D, lane, &lines, &chans,
                          [&](uint32_t j, uint32_t d, uint32_t x0, uint32_t r) {
                              s_adep[j] = (uint8_t)d;
                              s_apref[j] = (uint16_t)x0;
                              s_arank[j] = (uint16_t)r;
                          });
    } /* read after the passes' barriers */
    const uint8_t *slice = w.stage ? w.stage + ((size_t)p * w.nseg + b0 / S) * t.kv_off /* the gather's copy */
                                   : tier_slice(t, s, (uint32_t)(b0 / S), layer, h);
    const uint64_t *planes = (const uint64_t *)slice;
    const uint16_t *scales = (const uint16_t *)(slice + t.scales_off);
    const uint32_t bs0 = (uint32_t)(b0 % S), nblk = nb - b0 < 32 ? (uint32_t)(nb - b0) : 32;
    const uint32_t active = w.active[p], shift = part * SH::TOK;
    const uint64_t first = (b0 + lane) * 64 + shift;
    for (uint32_t c0 = 0; c0 < active || (c0 == 0 && active == 0); c0 += PASS) {
        const uint32_t np = active - c0 < PASS ? active - c0 : PASS;
        __syncthreads(); /* the previous pass is done with shared memory */
        if (tid < np) {
            s_j[tid] = w.order[(size_t)p * D + c0 + tid];
            s_t[tid] = w.order_t[(size_t)p * D + c0 + tid];
        }
        __syncthreads();
        for (uint32_t i = tid; i < np * FATHOM_PLANES; i += SH::THREADS) {
            const uint32_t j = s_j[i / FATHOM_PLANES], pl = i % FATHOM_PLANES;
            s_line[i] = b0 < cvalid ? cmap[(size_t)j * FATHOM_PLANES + pl] : (int16_t)-1;
            s_sline[i] = ahead && b0 < snb && pl < s_adep[j] && s_apref[j] + pl < cache.ahead_lines
                             ? (int16_t)(s_apref[j] + pl) : (int16_t)-1;
            if (pl == 0)
                s_sscale[i / FATHOM_PLANES] = ahead && b0 < snb && s_adep[j] && s_arank[j] < cache.ahead_chans
                                                  ? (int16_t)s_arank[j] : (int16_t)-1;
        }
        __syncthreads();
        if (tid == 0) {
            uint32_t r = 0;
            for (uint32_t c = 0; c < np; c++) {
                s_off[c] = (uint16_t)r;
                for (uint32_t pl = 0; pl < s_t[c]; pl++, r++) {
                    s_row_j[r] = s_j[c];
                    s_row_p[r] = (uint8_t)pl;
                    s_row_line[r] = s_line[c * FATHOM_PLANES + pl];
                    s_row_sline[r] = s_sline[c * FATHOM_PLANES + pl];
                }
            }
            s_off[np] = (uint16_t)r;
        }
        for (uint32_t i = tid; i < GP * np; i += SH::THREADS) {
            const uint32_t g = i / np, c = i % np;
            s_q[c][g] = g < G ? w.qf[((size_t)p * G + g) * D + s_j[c]] : 0.0f;
        }
        for (uint32_t i = tid; i < np * 32; i += SH::THREADS) {
            const uint32_t c = i >> 5, l = i & 31;
            const int line = s_line[c * FATHOM_PLANES];
            if (l >= nblk) s_scale[c][l] = 0;
            else if (line >= 0 && b0 + l < cvalid) {
                s_scale[c][l] = cscales[(size_t)line * cache.blocks + b0 + l];
                cached += 2;
            } else if (s_sscale[c] >= 0 && b0 + l < snb) {
                s_scale[c][l] = sscales[(size_t)s_sscale[c] * cache.blocks + b0 + l];
                staged += 2;
            } else s_scale[c][l] = __ldcv(&scales[(size_t)s_j[c] * S + bs0 + l]);
        }
        __syncthreads();
        if (INT8) /* r and s of every (head, block); read after the barrier below */
            for (uint32_t i = tid; i < GP * 32; i += SH::THREADS) {
                const uint32_t g = i >> 5, l = i & 31;
                float m = 0.0f;
                bool finite = true;
                for (uint32_t c = 0; c < np; c++) {
                    const float x = fabsf(__fmul_rn(s_q[c][g], __half2float(__ushort_as_half(s_scale[c][l]))));
                    if (!(x <= 3.4028234663852886e38f)) finite = false; /* inf or NaN */
                    else if (x > m) m = x;
                }
                float r = 0.0f, sc = 0.0f;
                if (!finite) sc = __int_as_float(0x7fc00000); /* NaN: the pass adds NaN */
                else if (!(m < TIER_INT8_TINY)) {
                    r = __fdiv_rn((float)TIER_INT8_LEVELS, m);
                    sc = __fdiv_rn(m, (float)(16 * TIER_INT8_LEVELS));
                }
                s_ir[g][l] = r;
                s_is[g][l] = sc;
                s_K[g * 32 + l] = 0;
            }
        const uint32_t rows = s_off[np];
        /* SCAN_LOADS words into registers, then into shared memory: __ldcv's memory
           clobber orders a store before the next load, so a load-then-store loop has
           one read of host memory in flight per thread */
        for (uint32_t i0 = tid; i0 < rows * 32; i0 += SCAN_LOADS * SH::THREADS) {
            uint64_t v[SCAN_LOADS];
#pragma unroll
            for (int u = 0; u < SCAN_LOADS; u++) {
                const uint32_t i = i0 + u * SH::THREADS, r = i >> 5, l = i & 31;
                v[u] = 0;
                if (i >= rows * 32 || l >= nblk) continue;
                const int line = s_row_line[r], sl = s_row_sline[r];
                if (line >= 0 && b0 + l < cvalid) {
                    v[u] = cwords[(size_t)line * cache.blocks + b0 + l];
                    cached += 8;
                } else if (sl >= 0 && b0 + l < snb) {
                    v[u] = swords[(size_t)sl * cache.blocks + b0 + l];
                    staged += 8;
                } else
                    v[u] = __ldcv((const unsigned long long *)&planes[((size_t)s_row_j[r] * FATHOM_PLANES + s_row_p[r]) * S + bs0 + l]);
            }
#pragma unroll
            for (int u = 0; u < SCAN_LOADS; u++) {
                const uint32_t i = i0 + u * SH::THREADS;
                if (i < rows * 32 && (i & 31) < nblk) s_words[i] = v[u];
            }
        }
        __syncthreads();
        const uint32_t quads = (np + 3) / 4;
        if (INT8) { /* the weights of every (head, quad, block), and K */
            for (uint32_t i = tid; i < GP * quads * 32; i += SH::THREADS) {
                const uint32_t l = i & 31, qd = (i >> 5) % quads, g = (i >> 5) / quads;
                const float r = s_ir[g][l];
                uint32_t packed = 0;
                int32_t part = 0;
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    const uint32_t c = qd * 4 + u;
                    if (c >= np) break;
                    const float W = __fmul_rn(s_q[c][g], __half2float(__ushort_as_half(s_scale[c][l])));
                    const int32_t wk =
                        __float2int_rz(__fsub_rn(__fmaf_rn(W, r, TIER_INT8_MAGIC), TIER_INT8_MAGIC));
                    packed |= ((uint32_t)wk & 0xffu) << (8 * u);
                    part += wk * ((int32_t)(16u >> s_t[c]) - 16);
                }
                s_w4[(g * (PASS / 4) + qd) * 32 + l] = packed;
                atomicAdd(&s_K[g * 32 + l], part);
            }
            /* the quads' rows and plane masks; a channel past np reads rows 0..3 (any bits) under mask 0 */
            for (uint32_t i = tid; i < quads * 4; i += SH::THREADS) {
                const uint32_t qd = i / 4, x = i % 4;
                uint32_t m = 0;
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    const uint32_t c = qd * 4 + u;
                    if (c < np && x < s_t[c]) m |= 0xffu << (8 * u);
                }
                ((uint32_t *)&s_qoff[qd])[x] = qd * 4 + x < np ? (uint32_t)s_off[qd * 4 + x] * 256 : 0;
                ((uint32_t *)&s_qpm[qd])[x] = m;
            }
            __syncthreads();
        }
        if (lane >= nblk) continue;
        float acc[SH::TOK][GP];
        if constexpr (INT8) { /* (the exact branch reads s_spread, which int8 kernels do not fill) */
            int32_t T[SH::TOK][GP];
#pragma unroll
            for (int g = 0; g < GP; g++)
#pragma unroll
                for (int i = 0; i < SH::TOK; i++) T[i][g] = 0;
            const uint8_t *bytes = (const uint8_t *)(s_words + lane) + shift / 8; /* little-endian */
            for (uint32_t qd = 0; qd < quads; qd++) {
                uint32_t lo[4], hi[4]; /* tokens w and 4 + w (16 c'): channel qd*4+u's code c' in byte u */
                const uint4 off = s_qoff[qd], pm = s_qpm[qd];
                /* the quad's largest depth, uniform: a pass is in depth order, so most quads read fewer planes */
                if (pm.w) tier_quad_codes<SH::TOK, 4>(bytes, off, pm, shift & 4, lo, hi);
                else if (pm.z) tier_quad_codes<SH::TOK, 3>(bytes, off, pm, shift & 4, lo, hi);
                else if (pm.y) tier_quad_codes<SH::TOK, 2>(bytes, off, pm, shift & 4, lo, hi);
                else tier_quad_codes<SH::TOK, 1>(bytes, off, pm, shift & 4, lo, hi);
#pragma unroll
                for (int g = 0; g < GP; g++) {
                    const int wv = (int)s_w4[(g * (PASS / 4) + qd) * 32 + lane];
#pragma unroll
                    for (int w = 0; w < 4; w++) {
                        T[w][g] = __dp4a((int)lo[w], wv, T[w][g]);
                        if (SH::TOK == 8) T[4 + w][g] = tier_dp4a_us(hi[w], wv, T[4 + w][g]);
                    }
                }
            }
#pragma unroll
            for (int g = 0; g < GP; g++) {
                const float sc = s_is[g][lane];
                const int32_t K = s_K[g * 32 + lane];
#pragma unroll
                for (int i = 0; i < SH::TOK; i++) /* tokens 4..7 summed 16 c': exact multiples of 16 */
                    acc[i][g] = __fmul_rn(sc, __int2float_rn(K + 2 * (i < 4 ? T[i][g] : T[i][g] >> 4)));
            }
        } else {
#pragma unroll
            for (int i = 0; i < SH::TOK; i++)
#pragma unroll
                for (int g = 0; g < GP; g++) acc[i][g] = 0.0f;
            for (uint32_t c = 0; c < np; c++) { /* scan.cu's codes and khat: the same exact values */
                const uint32_t depth = s_t[c];
                uint32_t nib[(SH::TOK + 7) / 8] = {};
                tier_lane_codes<SH::TOK>(nib, s_words + (size_t)s_off[c] * 32 + lane, depth, shift, s_spread);
                fc_codes_accumulate<GP, SH::TOK>(acc, [&](int g) { return s_q[c][g]; }, s_dc[depth], s_scale[c][lane], nib);
            }
        }
#pragma unroll
        for (int g = 0; g < GP; g++) {
            if (g >= (int)G) break;
            float *row = w.scores + ((size_t)p * G + g) * w.stride + first;
            float f[SH::TOK]; /* the scores as written */
            if (first + SH::TOK <= n) { /* 16-byte aligned: first and the stride are multiples of 4 */
#pragma unroll
                for (int i = 0; i < SH::TOK; i += 4) {
                    const float4 o = c0 == 0 ? make_float4(0.0f, 0.0f, 0.0f, 0.0f) : *(const float4 *)(row + i);
                    const float4 x = make_float4(o.x + acc[i][g], o.y + acc[i + 1][g], o.z + acc[i + 2][g],
                                                 o.w + acc[i + 3][g]);
                    *(float4 *)(row + i) = x;
                    f[i] = x.x;
                    f[i + 1] = x.y;
                    f[i + 2] = x.z;
                    f[i + 3] = x.w;
                }
            } else {
#pragma unroll
                for (int i = 0; i < SH::TOK; i++) {
                    f[i] = 0.0f;
                    if (first + i < n) row[i] = f[i] = (c0 == 0 ? 0.0f : row[i]) + acc[i][g];
                }
            }
            if (tally && c0 + PASS >= active) /* the last pass: final scores */
#pragma unroll
                for (int i = 0; i < SH::TOK; i++)
                    if (first + i >= sink && first + i + local < n) {
                        const uint32_t b = fc_score_order(f[i]) >> (32 - FC_HIST_BITS);
                        if (INT8) atomicAdd(&s_hist[g * (FC_HIST_BINS / 2) + b / 2], b & 1 ? 0x10000u : 1u);
                        else atomicAdd(&s_hist[g * FC_HIST_BINS + b], 1u);
                    }
        }
    }
    if (tally) { /* every thread is here: the passes' loop is uniform */
        __syncthreads();
        uint32_t *ghist = w.top.hist + (size_t)p * G * 2 * FC_HIST_BINS;
        if (INT8)
            for (uint32_t i = tid; i < G * FC_HIST_BINS / 2; i += SH::THREADS) {
                const uint32_t v = s_hist[i], g = i / (FC_HIST_BINS / 2), b = i % (FC_HIST_BINS / 2) * 2;
                if (v & 0xffffu) atomicAdd(&ghist[g * 2 * FC_HIST_BINS + b], v & 0xffffu);
                if (v >> 16) atomicAdd(&ghist[g * 2 * FC_HIST_BINS + b + 1], v >> 16);
            }
        else
            for (uint32_t i = tid; i < G * FC_HIST_BINS; i += SH::THREADS)
                if (s_hist[i]) atomicAdd(&ghist[(i / FC_HIST_BINS) * 2 * FC_HIST_BINS + i % FC_HIST_BINS], s_hist[i]);
    }
    if (hit_bytes) { /* per warp, one atomic */
        for (int off = 16; off > 0; off >>= 1) cached += __shfl_xor_sync(0xffffffffu, cached, off);
        if (lane == 0 && cached) atomicAdd(hit_bytes, (unsigned long long)cached);
    }
    if (ahead_bytes) {
        for (int off = 16; off > 0; off >>= 1) staged += __shfl_xor_sync(0xffffffffu, staged, off);
        if (lane == 0 && staged) atomicAdd(ahead_bytes, (unsigned long long)staged);
    }
}

/* ---- gather: the planned plane rows and scales into HBM staging ---- */

#define GATHER_GRID 32   /* CTAs: few, so the scans of earlier chunks keep the SMs */
#define GATHER_WARPS 8
#define GATHER_PIECE 4096u /* bytes a warp moves at a time: 8 16-byte loads a lane, all in flight */

/* Copy len bytes (even; both 16-byte aligned) with one warp. */
static __device__ __forceinline__ void warp_copy(uint8_t *dst, const uint8_t *src, uint32_t len, uint32_t lane) {
    const uint32_t body = len / 16;
    uint4 v[GATHER_PIECE / 512];
#pragma unroll
    for (int i = 0; i < (int)(GATHER_PIECE / 512); i++)
        if (lane + 32 * i < body) v[i] = __ldcv((const uint4 *)src + lane + 32 * i);
#pragma unroll
    for (int i = 0; i < (int)(GATHER_PIECE / 512); i++)
        if (lane + 32 * i < body) ((uint4 *)dst)[lane + 32 * i] = v[i];
    for (uint32_t x = body * 16 + lane * 2; x < len; x += 64)
        *(uint16_t *)(dst + x) = __ldcv((const unsigned short *)(src + x));
}

/* Problems [p0, p0 + count) of a step: for every segment the length
 * reaches, the plane rows p < depth_j of every channel and the channel's
 * scales, at the offsets of the host slice, less what the session's plane
 * cache holds (line (j, p) mapped: its blocks below the cache's valid
 * count; the scales with line (j, 0)), which the scan reads from the cache.
 * A row's blocks left to copy are one run; runs adjacent in the slice merge
 * (a full segment without a cache: one run per channel). The runs are cut
 * into GATHER_PIECE pieces dealt round robin to all warps of the grid;
 * every warp walks the same list (depths and cache map in shared memory). A
 * first walk counts the pieces: a warp near its last ones lets the next
 * chunk's gather (programmatic dependent launch) start, so the link does not
 * drain between chunks. */
template <int D>
static __global__ void __launch_bounds__(GATHER_WARPS * 32)
tier_gather_kernel(tier_dev t, uint32_t layer, const uint32_t *sessions, uint32_t p0, uint32_t count,
                   tier_ws w) {
    __shared__ uint8_t s_dep[D];
    __shared__ int16_t s_map[D * FATHOM_PLANES];
    const uint32_t lane = threadIdx.x & 31, W = GATHER_GRID * GATHER_WARPS;
    const uint32_t me = blockIdx.x * GATHER_WARPS + (threadIdx.x >> 5), S = t.segment_blocks;
    uint64_t total = 0, g = 0;
    for (int walk = 0; walk < 2; walk++) {
        for (uint32_t p = p0; p < p0 + count; p++) {
            const uint32_t s = sessions[p / t.heads], h = p % t.heads;
            const uint64_t nb = ((uint64_t)w.n_of[p] + 63) / 64;
            if (s >= t.max_sessions) continue; /* uniform */
            const tier_cache cache = t.caches[s];
            const uint64_t cvalid = cache.map ? cache.valid[layer] : 0; /* cached blocks of mapped lines */
            const int16_t *cmap = cvalid ? cache.map + ((size_t)layer * t.heads + h) * D * FATHOM_PLANES : NULL;
            __syncthreads();
            for (uint32_t j = threadIdx.x; j < D; j += blockDim.x) s_dep[j] = w.depths[(size_t)p * D + j];
            for (uint32_t i = threadIdx.x; i < D * FATHOM_PLANES; i += blockDim.x)
                s_map[i] = cvalid ? cmap[i] : (int16_t)-1;
            __syncthreads();
            for (uint32_t seg = 0; (uint64_t)seg * S < nb; seg++) {
                const uint64_t sb = (uint64_t)seg * S; /* the segment's first block */
                const uint32_t nblk = nb - sb < S ? (uint32_t)(nb - sb) : S;
                /* blocks [from, nblk) of a cached line's row are left to copy; from is
                   rounded down to 8 blocks so that every run starts 16-byte aligned */
                const uint32_t from = (cvalid <= sb ? 0 : cvalid - sb < nblk ? (uint32_t)(cvalid - sb) : nblk) & ~7u;
                const uint8_t *src = walk ? tier_slice(t, s, seg, layer, h) : NULL;
                uint8_t *dst = w.stage + ((size_t)p * w.nseg + seg) * t.kv_off;
                for (uint32_t j = 0; j < D; j++) {
                    const uint32_t tj = s_dep[j];
                    if (!tj) continue;
                    /* runs (offset, length): the rows p < tj, then the scales */
                    uint64_t off = 0;
                    uint32_t len = 0;
                    for (uint32_t r = 0; r <= tj + 1; r++) {
                        uint64_t o = 0;
                        uint32_t n = 0;
                        if (r < tj) {
                            const uint32_t lo = s_map[j * FATHOM_PLANES + r] >= 0 ? from : 0;
                            o = ((uint64_t)j * FATHOM_PLANES + r) * S * 8 + (uint64_t)lo * 8;
                            n = (nblk - lo) * 8;
                        } else if (r == tj) {
                            const uint32_t lo = s_map[j * FATHOM_PLANES] >= 0 ? from : 0;
                            o = t.scales_off + ((uint64_t)j * S + lo) * 2;
                            n = (nblk - lo) * 2;
                        }
                        if (n && len && o == off + len) { /* adjacent in the slice: one run */
                            len += n;
                            continue;
                        }
                        if (len) { /* copy the run (off, len) */
                            const uint32_t pieces = (len + GATHER_PIECE - 1) / GATHER_PIECE;
                            if (walk == 0) total += pieces;
                            else /* this warp's pieces of the run: g + q = me (mod W) */
                                for (uint32_t q = (me + W - (uint32_t)(g % W)) % W; q < pieces; q += W) {
                                    if (g + q + 2 * W >= total) asm volatile("griddepcontrol.launch_dependents;");
                                    const uint32_t at = q * GATHER_PIECE;
                                    warp_copy(dst + off + at, src + off + at,
                                              len - at < GATHER_PIECE ? len - at : GATHER_PIECE, lane);
                                }
                            g += walk ? pieces : 0;
                        }
                        off = o;
                        len = n;
                    }
                }
            }
        }
    }
}

/* ---- fetch and attention ---- */

#define FETCH_WARPS 8
/* the row-cache insertions a step launches (sessions with such a cache exist) */
#define INSERT_DIRECT 1u
#define INSERT_SETS 2u

/* One warp per union row: from the session's row cache when its slot (or
 * a way of its set, which the hit stamps with the step) holds the token,
 * else from the read-ahead's staging when the last union of this (layer,
 * head) holds it and the staging holds this layer, else from host (16 bytes
 * a lane). */
template <int D>
static __global__ void __launch_bounds__(FETCH_WARPS * 32)
tier_fetch_kernel(tier_dev t, uint32_t layer, const uint32_t *sessions, uint32_t cap, uint32_t p0, tier_ws w,
                  unsigned long long *hit_bytes, unsigned long long *ahead_bytes) {
    const uint32_t p = p0 + blockIdx.y, lane = threadIdx.x & 31;
    const uint32_t u = blockIdx.x * FETCH_WARPS + (threadIdx.x >> 5);
    const bool live = u < w.top.uni_count[p];
    bool hit = false, staged = false;
    if (live) {
        const uint64_t seg_tokens = (uint64_t)t.segment_blocks * FATHOM_BLOCK_TOKENS;
        const uint32_t idx = w.top.uni[(size_t)p * cap + u];
        const uint32_t s = sessions[p / t.heads], h = p % t.heads;
        const tier_cache cache = t.caches[s];
        const uint16_t *row = NULL;
        const size_t lh = (size_t)layer * t.heads + h, cs = tier_row_slot(cache, lh, idx);
        if (cs != TIER_NO_SLOT) {
            hit = true;
            row = cache.rows + cs * 2 * D;
            if (cache.ways > 1 && lane == 0) cache.stamps[cs] = 2 * cache.steps[lh];
        }
        const int half = !hit && cache.ahead_rows ? tier_stage_half(cache, layer) : -1;
        if (half >= 0) { /* the read-ahead staged the rows of the last union the row cache lacked */
            const uint32_t *last = cache.ahead_uni + lh * cache.ahead_rows;
            uint32_t lo = 0, hi = cache.ahead_cnt[lh]; /* first position >= idx */
            while (lo < hi) {
                const uint32_t mid = (lo + hi) / 2;
                if (last[mid] < idx) lo = mid + 1;
                else hi = mid;
            }
            if (lo < cache.ahead_cnt[lh] && last[lo] == idx) {
                staged = true;
                row = cache.stage_rows + (((size_t)half * t.heads + h) * cache.ahead_rows + lo) * 2 * D;
            }
        }
        if (!hit && !staged)
            row = (const uint16_t *)(tier_slice(t, s, (uint32_t)(idx / seg_tokens), layer, h) + t.kv_off) +
                  (idx % seg_tokens) * 2 * D;
        const size_t at = (size_t)p * cap + u;
        if (lane == 0) w.miss[at] = cache.slots && !hit;
        for (uint32_t e = lane * 8; e < 2 * D; e += 256) {
            const uint4 v = hit || staged ? *(const uint4 *)(row + e) : __ldcv((const uint4 *)(row + e));
            if (e < D) fc_bf16x8_to_float(v, w.rows_k + at * D + e);
            else *(uint4 *)(w.rows_v + at * D + (e - D)) = v;
        }
    }
    const uint32_t hits = __syncthreads_count(live && hit && lane == 0);
    if (hit_bytes && threadIdx.x == 0 && hits) atomicAdd(hit_bytes, (unsigned long long)hits * 4 * D);
    const uint32_t ahead = __syncthreads_count(live && staged && lane == 0);
    if (ahead_bytes && threadIdx.x == 0 && ahead) atomicAdd(ahead_bytes, (unsigned long long)ahead * 4 * D);
}

/* Row-cache insertion after the fetch, a warp per missed union row.
 * INSERT_CLAIM (direct-mapped): claim the row's slot (the latest token
 * mapped there wins). INSERT_WRITE: the winners write their rows (K back to
 * bf16: exact); nobody reads the cache in between. INSERT_SET_WRITE (sets,
 * after tier_set_insert_kernel chose the ways): a row whose set has a way
 * tagged with it writes it there. */
enum { INSERT_CLAIM, INSERT_WRITE, INSERT_SET_WRITE };
template <int D>
static __global__ void __launch_bounds__(FETCH_WARPS * 32)
tier_insert_kernel(tier_dev t, uint32_t layer, const uint32_t *sessions, uint32_t cap, uint32_t p0, tier_ws w,
                   int mode) {
    const uint32_t p = p0 + blockIdx.y, lane = threadIdx.x & 31;
    const uint32_t u = blockIdx.x * FETCH_WARPS + (threadIdx.x >> 5);
    if (u >= w.top.uni_count[p]) return;
    const size_t at = (size_t)p * cap + u;
    if (!w.miss[at]) return;
    const uint32_t idx = w.top.uni[at];
    const tier_cache cache = t.caches[sessions[p / t.heads]];
    if ((cache.ways > 1) != (mode == INSERT_SET_WRITE)) return; /* the other rule's launch */
    const size_t lh = (size_t)layer * t.heads + p % t.heads;
    if (mode == INSERT_CLAIM) {
        if (lane == 0) atomicMax(&cache.tags[lh * cache.slots + idx % cache.slots], idx + 1);
        return;
    }
    const size_t cs = tier_row_slot(cache, lh, idx);
    if (cs == TIER_NO_SLOT) return; /* kept out: another token won the slot, or no way */
    uint16_t *row = cache.rows + cs * 2 * D;
    for (uint32_t e = lane; e < D; e += 32) {
        row[e] = __bfloat16_as_ushort(__float2bfloat16_rn(w.rows_k[at * D + e]));
        row[D + e] = w.rows_v[at * D + e];
    }
}

#define SET_THREADS 1024

/* The set rule's insertion (row_ways > 1), after the fetch: one CTA per
 * pair. The pair's missed union rows (ascending tokens) are keyed (set,
 * position) and sorted in shared memory (bitonic), so a set's missed rows
 * are adjacent and in ascending order: the row of rank r among them (r < W
 * read off the W keys before it) takes the set's r-th way not read this
 * step, in (stamp, tag) order with empty ways first (then by way), or stays
 * out where there are fewer: the same as inserting the rows one by one in
 * ascending order. A taken way's tag becomes the token + 1 and its stamp
 * 2 step + 1, and the pair's step count grows; tier_insert_kernel
 * (INSERT_SET_WRITE) then writes the rows. */
template <int D>
static __global__ void __launch_bounds__(SET_THREADS)
tier_set_insert_kernel(tier_dev t, uint32_t layer, const uint32_t *sessions, uint32_t cap, uint32_t p0, tier_ws w) {
    __shared__ uint64_t s_key[4096]; /* set << 32 | i for the i-th missed row (cap <= 4096); sorted */
    __shared__ uint16_t s_u[4096];   /* the i-th missed row's union position */
    __shared__ uint8_t s_way[4096];  /* the way sorted key q takes, W: out */
    __shared__ uint32_t s_warp[SET_THREADS / 32];
    const uint32_t p = p0 + blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const tier_cache cache = t.caches[sessions[p / t.heads]];
    if (cache.ways <= 1) return; /* uniform */
    const size_t lh = (size_t)layer * t.heads + p % t.heads, base = (size_t)p * cap;
    const uint32_t W = cache.ways, sets = cache.slots / W, U = w.top.uni_count[p], step = cache.steps[lh];
    uint32_t *tags = cache.tags + lh * cache.slots, *stamps = cache.stamps + lh * cache.slots;
    uint32_t M = 0;
    for (uint32_t u0 = 0; u0 < U; u0 += SET_THREADS) { /* uniform */
        const uint32_t u = u0 + tid;
        const bool f = u < U && w.miss[base + u];
        const uint32_t ballot = __ballot_sync(0xffffffffu, f);
        if (lane == 0) s_warp[warp] = __popc(ballot);
        __syncthreads();
        uint32_t before = 0, total = 0;
        for (uint32_t x = 0; x < SET_THREADS / 32; x++) {
            before += x < warp ? s_warp[x] : 0;
            total += s_warp[x];
        }
        if (f) {
            const uint32_t i = M + before + __popc(ballot & ((1u << lane) - 1));
            s_key[i] = (uint64_t)(w.top.uni[base + u] % sets) << 32 | i;
            s_u[i] = (uint16_t)u;
        }
        M += total;
        __syncthreads(); /* s_warp is rewritten next pass */
    }
    uint32_t Mp = 1;
    while (Mp < M) Mp <<= 1;
    for (uint32_t q = M + tid; q < Mp; q += SET_THREADS) s_key[q] = ~0ull;
    __syncthreads();
    for (uint32_t k = 2; k <= Mp; k <<= 1) /* bitonic sort, ascending */
        for (uint32_t j = k >> 1; j > 0; j >>= 1) {
            for (uint32_t q = tid; q < Mp; q += SET_THREADS) {
                const uint32_t o = q ^ j;
                if (o <= q) continue;
                const uint64_t a = s_key[q], b = s_key[o];
                if ((a > b) == ((q & k) == 0)) s_key[q] = b, s_key[o] = a;
            }
            __syncthreads();
        }
    for (uint32_t q = tid; q < M; q += SET_THREADS) {
        const uint32_t set = (uint32_t)(s_key[q] >> 32);
        uint32_t r = 0; /* the set's missed rows before this one, up to W */
        while (r < W && r < q && (uint32_t)(s_key[q - 1 - r] >> 32) == set) r++;
        uint32_t way = W;
        if (r < W) { /* the way of position r among the eligible ones */
            uint32_t tag[8], st[8];
            uint64_t key[8];
            bool ok[8];
            set_load(tag, tags + (size_t)set * W, W);
            set_load(st, stamps + (size_t)set * W, W);
            for (uint32_t x = 0; x < W; x++) {
                ok[x] = !tag[x] || st[x] >> 1 != step;
                key[x] = tag[x] ? (uint64_t)st[x] << 32 | tag[x] : 0;
            }
            for (uint32_t x = 0; x < W; x++) {
                if (!ok[x]) continue;
                uint32_t pos = 0;
                for (uint32_t y = 0; y < W; y++) pos += ok[y] && (key[y] < key[x] || (key[y] == key[x] && y < x));
                if (pos == r) way = x;
            }
        }
        s_way[q] = (uint8_t)way;
    }
    __syncthreads(); /* every set's state read before any is written */
    for (uint32_t q = tid; q < M; q += SET_THREADS)
        if (s_way[q] < W) {
            const size_t at = (size_t)(s_key[q] >> 32) * W + s_way[q];
            tags[at] = w.top.uni[base + s_u[(uint32_t)s_key[q]]] + 1;
            stamps[at] = 2 * step + 1;
        }
    if (tid == 0) cache.steps[lh] = step + 1;
}

/* Attention of a query head over its count <= k winners, in two launches
 * over many CTAs that give the bits of one CTA of ATT_THREADS threads per
 * head summing in the order below:
 *   logits  one thread per winner i (the CTAs of a head split its winners;
 *           each CTA first requests its winners' K rows into shared memory,
 *           a row by consecutive threads): l_i = scale q.k_i in double, two
 *           interleaved partial sums, into w.logit;
 *   value   ATT_VCTAS CTAs per head, each for D / ATT_VCTAS channels: every
 *           one requests its channels of the winners' V rows into shared
 *           memory (cp.async, all in flight), computes the head's max and
 *           exp-sum as ATT_THREADS virtual threads would (virtual thread v:
 *           the rows v, v + ATT_THREADS, .. in order, then fc_block_reduce's
 *           tree: warp butterflies, then the 32 warps' results in warp
 *           order), so all of them hold the same max and sum; then the value
 *           sum of its channels split over SPLIT = ATT_THREADS / D row
 *           subsets (row i in subset i % SPLIT, each summed in row order, the
 *           subsets added in order 0..SPLIT-1), divided by the sum.
 * Every expression keeps the one-CTA form (operand order and types, so
 * contraction into fma is the same); test_cuda_tier's ragged digest checks
 * the bits across commits. */
#define ATT_THREADS 1024 /* virtual threads per query head: ATT_THREADS / D row subsets in the value sum */
#define ATT_LROWS 64     /* winners (threads) per logits CTA */
/* bytes between K rows in the logits CTA's shared memory: a row and 16 (a
 * quarter-warp's float4 reads of 8 rows then fall in 8 different bank groups) */
#define ATT_KSTRIDE(D) ((D) * 4 + 16)
#define ATT_VTHREADS 256 /* threads per value CTA: one (subset, channel) chain each */
#define ATT_VCTAS (ATT_THREADS / ATT_VTHREADS) /* value CTAs per query head */

/* One 16-byte global -> shared copy in flight without a register
 * (cp.async, sm_80+): a CTA requests its whole tile of rows at once. */
static __device__ __forceinline__ void att_copy16(void *dst, const void *src) {
    const uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
}

template <int D>
static __global__ void __launch_bounds__(ATT_LROWS)
tier_logit_kernel(uint32_t k, double scale, const uint32_t *sel_count, uint32_t G, uint32_t r0, tier_ws w) {
    constexpr uint32_t PIECES = D * 4 / 16; /* 16-byte pieces of a K row */
    extern __shared__ float4 s_rows[];      /* [ATT_LROWS][ATT_KSTRIDE(D) / 16]: the CTA's K rows, padded */
    __shared__ float s_q[D];
    const uint32_t r = r0 + blockIdx.x, p = r / G, cap = G * k, tid = threadIdx.x;
    const uint32_t count = sel_count[r], i0 = blockIdx.y * ATT_LROWS;
    if (i0 >= count) return; /* uniform */
    const uint32_t rows = count - i0 < ATT_LROWS ? count - i0 : ATT_LROWS;
    const float *base_k = w.rows_k + (size_t)p * cap * D;
    /* every row requested at once, a row's pieces by consecutive threads */
    for (uint32_t x = tid; x < rows * PIECES; x += ATT_LROWS) {
        const uint32_t row = x / PIECES, piece = x % PIECES;
        att_copy16(s_rows + row * (ATT_KSTRIDE(D) / 16) + piece,
                   base_k + (size_t)w.top.slot[(size_t)r * k + i0 + row] * D + piece * 4);
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    for (uint32_t c = tid; c < D; c += ATT_LROWS) s_q[c] = w.qf[(size_t)r * D + c];
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    __syncthreads();
    if (tid >= rows) return;
    w.logit[(size_t)r * k + i0 + tid] = fc_qk_dot<D>(s_q, s_rows + tid * (ATT_KSTRIDE(D) / 16)) * scale;
}

/* fc_block_reduce of ATT_THREADS virtual threads, thread t of ATT_VTHREADS
 * holding x[j] of virtual thread t + ATT_VTHREADS * j: the same lanes
 * (t & 31) and virtual warps ((t >> 5) + ATT_VTHREADS / 32 * j), so the
 * same butterflies and the same warp order. part: ATT_THREADS / 32 doubles. */
static __device__ __forceinline__ double att_virtual_reduce(double (&x)[ATT_VCTAS], bool is_max, double *part) {
#pragma unroll
    for (int j = 0; j < ATT_VCTAS; j++)
        for (int off = 16; off > 0; off >>= 1) {
            const double y = __shfl_xor_sync(0xffffffffu, x[j], off);
            x[j] = is_max ? fmax(x[j], y) : x[j] + y;
        }
    __syncthreads(); /* part may still be read from the last call */
    if ((threadIdx.x & 31) == 0)
#pragma unroll
        for (int j = 0; j < ATT_VCTAS; j++) part[(threadIdx.x >> 5) + ATT_VTHREADS / 32 * j] = x[j];
    __syncthreads();
    double acc = part[0];
    for (uint32_t v = 1; v < ATT_THREADS / 32; v++) acc = is_max ? fmax(acc, part[v]) : acc + part[v];
    return acc;
}

template <int D>
static __global__ void __launch_bounds__(ATT_VTHREADS)
tier_value_kernel(uint32_t G, uint32_t k, const uint32_t *sel_count, uint32_t r0, tier_ws w, uint16_t *out,
                  float *lse) {
    constexpr int SPLIT = ATT_THREADS / D > 0 ? ATT_THREADS / D : 1;
    constexpr int CW = D / ATT_VCTAS; /* channels of this CTA */
    constexpr int CH = CW * 2 / 16;   /* 16-byte pieces of a row's channels */
    static_assert(SPLIT * CW == ATT_VTHREADS && CH >= 1, "one (subset, channel) chain per thread");
    extern __shared__ uint4 s_dyn[];  /* [count][CW] bf16: the CTA's channels of the winners' V rows */
    uint16_t *s_v = (uint16_t *)s_dyn;
    __shared__ double logit[FATHOM_CUDA_MAX_K];
    __shared__ double part[ATT_THREADS / 32];
    __shared__ double s_acc[SPLIT][CW];
    __shared__ uint16_t s_slot[FATHOM_CUDA_MAX_K];
    const uint32_t r = r0 + blockIdx.x, p = r / G, cap = G * k, tid = threadIdx.x, c0 = blockIdx.y * CW;
    const uint32_t count = sel_count[r];
    const double *lg = w.logit + (size_t)r * k;
    for (uint32_t i = tid; i < count; i += ATT_VTHREADS) {
        s_slot[i] = w.top.slot[(size_t)r * k + i];
        logit[i] = lg[i];
    }
    __syncthreads();
    const uint16_t *base_v = w.rows_v + (size_t)p * cap * D + c0; /* rows 16-byte aligned, c0 a multiple of 8 */
    for (uint32_t q = tid; q < count * CH; q += ATT_VTHREADS) {
        const uint32_t i = q / CH, piece = q % CH;
        att_copy16(s_v + (size_t)i * CW + piece * 8, base_v + (size_t)s_slot[i] * D + piece * 8);
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    double x[ATT_VCTAS];
#pragma unroll
    for (int j = 0; j < ATT_VCTAS; j++) {
        double mx = -INFINITY;
        for (uint32_t i = tid + ATT_VTHREADS * j; i < count; i += ATT_THREADS) mx = fmax(mx, logit[i]);
        x[j] = mx;
    }
    const double mx = att_virtual_reduce(x, true, part);
    /* a thread reads and writes the logits of its own virtual threads only */
#pragma unroll
    for (int j = 0; j < ATT_VCTAS; j++) {
        double sum = 0.0;
        for (uint32_t i = tid + ATT_VTHREADS * j; i < count; i += ATT_THREADS) {
            const double e = exp(logit[i] - mx);
            logit[i] = e;
            sum += e;
        }
        x[j] = sum;
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory"); /* this thread's pieces; the reduce's barriers publish all */
    const double sum = att_virtual_reduce(x, false, part); /* its barriers publish logit[] and s_v */
    {
        const uint32_t cl = tid % CW, sub = tid / CW;
        double a = 0.0;
        for (uint32_t i = sub; i < count; i += SPLIT) a += logit[i] * (double)tier_bf16(s_v[(size_t)i * CW + cl]);
        s_acc[sub][cl] = a;
    }
    __syncthreads();
    for (uint32_t cl = tid; cl < CW; cl += ATT_VTHREADS) {
        double a = 0.0;
        for (int sub = 0; sub < SPLIT; sub++) a += s_acc[sub][cl];
        const float o = count ? (float)(a / sum) : 0.0f;
        out[(size_t)r * D + c0 + cl] = __bfloat16_as_ushort(__float2bfloat16_rn(o));
    }
    if (lse && blockIdx.y == 0 && tid == 0) lse[r] = count ? (float)(mx + log(sum)) : -INFINITY;
}

/* ---- launch ---- */

/* Problems [p0, p0 + count) of a step, the phases after the plan. */
typedef struct tier_chunk {
    uint32_t p0, count;
} tier_chunk;

template <int D, int GP>
static int launch_scan(const tier_dev *t, const fathom_cuda_tier_step_args *a, uint32_t G,
                       const tier_ws *w, tier_chunk c, cudaStream_t stream) {
    typedef tier_scan_shape<GP> SH;
    /* plane rows of one pass: at most the budget (water-filling plans at most budget
       planes), at most 4 per channel */
    const uint32_t pass_words = !a->fixed_depths && a->budget < PASS * FATHOM_PLANES ? a->budget
                                                                                     : PASS * FATHOM_PLANES;
    const size_t smem = (size_t)pass_words * 32 * 8 + /* the words, the histograms (int8: pairs), s_w4 and s_K */
                        (w->scan_int8 ? (size_t)G * FC_HIST_BINS / 2 * 4 + (size_t)GP * (PASS / 4 + 1) * 32 * 4
                                      : (size_t)G * FC_HIST_BINS * 4);
    auto kernel = w->scan_int8 ? tier_scan_kernel<D, GP, true> : tier_scan_kernel<D, GP, false>;
    if (smem > 24 * 1024) /* with the static arrays (< 24 KB), past the 48 KB a launch gets without opting in */
        FATHOM_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const uint64_t nb = (a->capacity_tokens + 63) / 64;
    const dim3 grid((uint32_t)((nb + 31) / 32), c.count);
    kernel<<<grid, SH::THREADS, smem, stream>>>(*t, a->layer, a->sessions, G, c.p0, *w, a->k, a->sink, a->local,
                                                pass_words, a->cache_bytes, a->ahead_bytes);
    FATHOM_CUDA_LAUNCHED();
    return FATHOM_OK;
}

template <int D>
static int scan_chunk(const tier_dev *t, const fathom_cuda_tier_step_args *a, uint32_t G, const tier_ws *w,
                      tier_chunk c, cudaStream_t stream) {
    if (G == 1) return launch_scan<D, 1>(t, a, G, w, c, stream);
    if (G == 2) return launch_scan<D, 2>(t, a, G, w, c, stream);
    if (G <= 4) return launch_scan<D, 4>(t, a, G, w, c, stream);
    if (G <= 8) return launch_scan<D, 8>(t, a, G, w, c, stream);
    return launch_scan<D, 16>(t, a, G, w, c, stream);
}

/* The chunk's planned planes into staging, on the link stream; behind
 * another chunk's gather it launches as that one's last pieces are read. */
template <int D>
static int gather_chunk(const tier_dev *t, const fathom_cuda_tier_step_args *a, const tier_ws *w, tier_chunk c,
                        bool behind, cudaStream_t stream) {
    cudaLaunchAttribute overlap;
    overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    overlap.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t launch = {};
    launch.gridDim = dim3(GATHER_GRID);
    launch.blockDim = dim3(GATHER_WARPS * 32);
    launch.stream = stream;
    launch.attrs = &overlap;
    launch.numAttrs = behind ? 1 : 0;
    FATHOM_CUDA_TRY(cudaLaunchKernelEx(&launch, tier_gather_kernel<D>, *t, a->layer, a->sessions, c.p0, c.count, *w));
    FATHOM_CUDA_LAUNCHED();
    return FATHOM_OK;
}

/* ---- host-given selections ---- */

/* Rows of the given pairs [p0, p0 + count): the middle winners of each
 * head's given selection (ascending, as fathom_select writes it: sink
 * positions, then the k - sink - local middle winners, then the local ones)
 * into the top-k's mid, from which fc_topk_union rebuilds the sorted
 * selection, the union and the slots exactly as after a scan on the GPU.
 * Rows with n <= k select every token: fc_topk_union reads no mid.
 * The middle winners are checked here, since the row fetch reads the rows
 * they name: a head whose winners are not strictly ascending inside
 * [sink, n - local) records TIER_ERR_GIVEN (fathom_cuda_tier_check) and
 * gets the placeholder winners sink, sink + 1, .. (rows every session with
 * n > k has), so that nothing outside the session is read. With given
 * depths, each pair's first row copies them into the plan's. */
static __global__ void tier_given_kernel(tier_dev t, uint32_t G, uint32_t k, uint32_t sink, uint32_t local,
                                         uint32_t p0, const uint32_t *given, const uint8_t *given_depths,
                                         tier_ws w) {
    const uint32_t r = p0 * G + blockIdx.x, p = r / G;
    if (given_depths && r % G == 0)
        for (uint32_t j = threadIdx.x; j < t.dim; j += blockDim.x)
            w.depths[(size_t)p * t.dim + j] = given_depths[(size_t)(p - p0) * t.dim + j];
    const uint64_t n = w.n_of[p];
    if (n <= k) return; /* uniform */
    const uint32_t m = k - sink - local;
    const uint32_t *src = given + (size_t)blockIdx.x * k + sink;
    int bad = 0;
    for (uint32_t i = threadIdx.x; i < m; i += blockDim.x) {
        const uint32_t v = src[i];
        bad |= v < sink || v >= n - local || (i > 0 && src[i - 1] >= v);
    }
    bad = __syncthreads_or(bad);
    if (bad && threadIdx.x == 0) tier_fail(t, TIER_ERR_GIVEN);
    for (uint32_t i = threadIdx.x; i < m; i += blockDim.x) w.top.mid[(size_t)r * k + i] = bad ? sink + i : src[i];
}

/* The direct-mapped row caches' insertion of chunk c's missed union rows
 * (the fetch's w.miss): slots claimed, then written. */
template <int D>
static int insert_direct(const tier_dev *t, const fathom_cuda_tier_step_args *a, uint32_t G, const tier_ws *w,
                         tier_chunk c, cudaStream_t stream) {
    const uint32_t cap = G * a->k;
    const dim3 rows_grid((cap + FETCH_WARPS - 1) / FETCH_WARPS, c.count);
    for (int mode = INSERT_CLAIM; mode <= INSERT_WRITE; mode++) {
        tier_insert_kernel<D><<<rows_grid, FETCH_WARPS * 32, 0, stream>>>(*t, a->layer, a->sessions, cap, c.p0,
                                                                         *w, mode);
        FATHOM_CUDA_LAUNCHED();
    }
    return FATHOM_OK;
}

/* The row sets' insertion of chunk c's missed union rows: ways chosen,
 * then rows written. */
template <int D>
static int insert_sets(const tier_dev *t, const fathom_cuda_tier_step_args *a, uint32_t G, const tier_ws *w,
                       tier_chunk c, cudaStream_t stream) {
    const uint32_t cap = G * a->k;
    const dim3 rows_grid((cap + FETCH_WARPS - 1) / FETCH_WARPS, c.count);
    tier_set_insert_kernel<D><<<c.count, SET_THREADS, 0, stream>>>(*t, a->layer, a->sessions, cap, c.p0, *w);
    FATHOM_CUDA_LAUNCHED();
    tier_insert_kernel<D><<<rows_grid, FETCH_WARPS * 32, 0, stream>>>(*t, a->layer, a->sessions, cap, c.p0, *w,
                                                                     INSERT_SET_WRITE);
    FATHOM_CUDA_LAUNCHED();
    return FATHOM_OK;
}

/* The read-ahead of the next layer (fc_tier_ahead_launch) on the tier's
 * read-ahead stream, forked from `stream` once (done): at the step's start
 * (FATHOM_CUDA_AHEAD_BESIDE) or, where the step starts it after its own work
 * (FATHOM_CUDA_AHEAD_BETWEEN, _ACROSS), once it has issued its reads of host
 * memory: after the row fetch of its last chunk, so that its CTAs take SMs
 * while the step's attention leaves them free. */
typedef struct tier_fork {
    fathom_cuda_tier *tier;
    const fathom_cuda_tier_step_args *a;
    bool planes; /* plane lines too (the step scans in place) */
    bool done;
} tier_fork;

static int fork_ahead(tier_fork *f, cudaStream_t stream) {
    if (!f || f->done) return FATHOM_OK;
    cudaEvent_t forked, joined;
    cudaStream_t aside = fc_tier_ahead_stream(f->tier, &forked, &joined);
    FATHOM_CUDA_TRY(cudaEventRecord(forked, stream));
    FATHOM_CUDA_TRY(cudaStreamWaitEvent(aside, forked, 0));
    FATHOM_TRY(fc_tier_ahead_launch(f->tier, f->a->layer, f->a->sessions, f->a->batch, f->planes, aside));
    f->done = true;
    return FATHOM_OK;
}

/* Both row caches' insertion of chunk c (`insert`: INSERT_DIRECT,
 * INSERT_SETS), in the order a chunk runs them. */
template <int D>
static int insert_rows(const tier_dev *t, const fathom_cuda_tier_step_args *a, uint32_t G, const tier_ws *w,
                       tier_chunk c, uint32_t insert, cudaStream_t stream) {
    if (insert & INSERT_DIRECT) FATHOM_TRY(insert_direct<D>(t, a, G, w, c, stream));
    if (insert & INSERT_SETS) FATHOM_TRY(insert_sets<D>(t, a, G, w, c, stream));
    return FATHOM_OK;
}

/* Top-k (or, given, the union of the given selections), row fetch,
 * row-cache insertion (`insert`: INSERT_DIRECT, INSERT_SETS; 0: none) and
 * attention of one chunk; after the fetch, the read-ahead `fork` (NULL:
 * none). */
template <int D>
static int finish_chunk(const tier_dev *t, const fathom_cuda_tier_step_args *a, uint32_t G, const tier_ws *w,
                        tier_chunk c, uint32_t *sel, uint32_t *sel_count, uint32_t insert, cudaStream_t stream,
                        tier_fork *fork, const fathom_cuda_tier_given *given = NULL) {
    const uint64_t rows0 = (uint64_t)c.p0 * G;
    fc_workspace top = w->top;
    fc_topk_view(&top, c.p0, G, a->k);
    const fc_rows rows = {a->capacity_tokens, w->n_of + c.p0, G, w->stride};
    if (given) {
        tier_given_kernel<<<c.count * G, 256, 0, stream>>>(*t, G, a->k, a->sink, a->local, c.p0, given->selected,
                                                           given->depths, *w);
        FATHOM_CUDA_LAUNCHED();
        FATHOM_TRY(fc_topk_union(c.count, G, a->k, a->sink, a->local, rows, &top, sel + rows0 * a->k,
                                 sel_count + rows0, stream));
    } else
        FATHOM_TRY(fc_topk_rows(c.count, G, a->k, a->sink, a->local, rows, a->capacity_tokens, true, &top,
                                w->scores + rows0 * w->stride, sel + rows0 * a->k, sel_count + rows0, stream));
    const uint32_t cap = G * a->k;
    const dim3 rows_grid((cap + FETCH_WARPS - 1) / FETCH_WARPS, c.count);
    tier_fetch_kernel<D><<<rows_grid, FETCH_WARPS * 32, 0, stream>>>(*t, a->layer, a->sessions, cap, c.p0, *w,
                                                                    a->cache_bytes ? a->cache_bytes + 1 : NULL,
                                                                    a->ahead_bytes ? a->ahead_bytes + 1 : NULL);
    FATHOM_CUDA_LAUNCHED();
    FATHOM_TRY(fork_ahead(fork, stream));
    if (insert & INSERT_DIRECT) FATHOM_TRY(insert_direct<D>(t, a, G, w, c, stream));
    const dim3 logit_grid(c.count * G, (a->k + ATT_LROWS - 1) / ATT_LROWS);
    const size_t lsmem = (size_t)ATT_LROWS * ATT_KSTRIDE(D); /* the CTA's K rows */
    if (lsmem > 48 * 1024)
        FATHOM_CUDA_TRY(cudaFuncSetAttribute(tier_logit_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)lsmem));
    tier_logit_kernel<D><<<logit_grid, ATT_LROWS, lsmem, stream>>>(a->k, (double)a->scale, sel_count, G,
                                                              (uint32_t)rows0, *w);
    FATHOM_CUDA_LAUNCHED();
    const size_t vsmem = (size_t)a->k * (D / ATT_VCTAS) * 2; /* the V tile: k rows of D / ATT_VCTAS bf16 */
    if (vsmem > 48 * 1024)
        FATHOM_CUDA_TRY(cudaFuncSetAttribute(tier_value_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)vsmem));
    tier_value_kernel<D><<<dim3(c.count * G, ATT_VCTAS), ATT_VTHREADS, vsmem, stream>>>(
        G, a->k, sel_count, (uint32_t)rows0, *w, a->out, a->lse);
    FATHOM_CUDA_LAUNCHED();
    if (insert & INSERT_SETS) /* off the chunk's path to its output: attention reads the workspace rows */
        FATHOM_TRY(insert_sets<D>(t, a, G, w, c, stream));
    return FATHOM_OK;
}

template <int D>
static int launch_gpu(const tier_dev *t, fathom_cuda_lanes *L, uint32_t per, const fathom_cuda_tier_step_args *a,
                      uint32_t G, const tier_ws *w, uint32_t *sel, uint32_t *sel_count, uint32_t insert,
                      uint32_t P, tier_fork *fork, cudaStream_t stream);

/* The plan of every problem (of the given pairs too, unless their depths
 * are given), then the problems [0, P - given pairs) on the GPU
 * (launch_gpu), and the given pairs' union, row fetch and attention: on
 * `stream` after the others once given->ready has fired (lane NULL), or on
 * the lane's stream beside them from the end of the plan (the step's
 * stream joins it at the end). */
template <int D>
static int launch_all(const tier_dev *t, fathom_cuda_lanes *L, uint32_t per, const fathom_cuda_tier_step_args *a,
                      uint32_t G, const tier_ws *w, uint32_t *sel, uint32_t *sel_count, uint32_t insert,
                      const fathom_cuda_tier_given *given, const tier_given_lane *lane, tier_fork *fork,
                      cudaStream_t stream) {
    const uint32_t P = a->batch * t->heads, Pg = P - (given ? given->pairs : 0);
    const uint32_t plan_to = given && given->depths ? Pg : P;
    tier_prep_kernel<D><<<P, D, 0, stream>>>(*t, a->layer, a->sessions, G, a->budget, a->fixed_depths,
                                             a->capacity_tokens, a->queries, plan_to, *w);
    FATHOM_CUDA_LAUNCHED();
    const tier_chunk host = {Pg, P - Pg};
    if (Pg < P && lane) {
        FATHOM_CUDA_TRY(cudaEventRecord(lane->start, stream));
        FATHOM_CUDA_TRY(cudaStreamWaitEvent(lane->stream, lane->start, 0));
        if (given->ready) FATHOM_CUDA_TRY(cudaStreamWaitEvent(lane->stream, given->ready, 0));
        FATHOM_TRY(finish_chunk<D>(t, a, G, w, host, sel, sel_count, insert, lane->stream, NULL, given));
        FATHOM_CUDA_TRY(cudaEventRecord(lane->done, lane->stream));
    }
    if (Pg > 0) FATHOM_TRY(launch_gpu<D>(t, L, per, a, G, w, sel, sel_count, insert, Pg, fork, stream));
    if (Pg == P) return FATHOM_OK;
    if (lane) {
        FATHOM_CUDA_TRY(cudaStreamWaitEvent(stream, lane->done, 0));
        return FATHOM_OK;
    }
    if (given->ready) FATHOM_CUDA_TRY(cudaStreamWaitEvent(stream, given->ready, 0));
    return finish_chunk<D>(t, a, G, w, host, sel, sel_count, insert, stream, NULL, given);
}

/* Problems [0, P) after the plan. Not pipelined (per >= P, chunk_of): every
 * phase on `stream`, the planes scanned in place. Pipelined: the chunks'
 * gathers one after another on the lanes' link stream (the link moves one
 * chunk at a time, at its full rate), and each chunk's scan (from staging),
 * top-k, fetch and attention on lane i % count as soon as its planes are in,
 * beside the next chunks' gathers; the lanes join back into `stream`. */
template <int D>
static int launch_gpu(const tier_dev *t, fathom_cuda_lanes *L, uint32_t per, const fathom_cuda_tier_step_args *a,
                      uint32_t G, const tier_ws *w, uint32_t *sel, uint32_t *sel_count, uint32_t insert,
                      uint32_t P, tier_fork *fork, cudaStream_t stream) {
    if (per >= P) {
        const tier_chunk all = {0, P};
        FATHOM_TRY(scan_chunk<D>(t, a, G, w, all, stream));
        return finish_chunk<D>(t, a, G, w, all, sel, sel_count, insert, stream, fork);
    }
    const uint32_t chunks = (P + per - 1) / per;
    FATHOM_CUDA_TRY(cudaEventRecord(L->fork, stream));
    FATHOM_CUDA_TRY(cudaStreamWaitEvent(L->link, L->fork, 0));
    for (uint32_t i = 0; i < chunks; i++) {
        const tier_chunk c = {i * per, P - i * per < per ? P - i * per : per};
        FATHOM_TRY(gather_chunk<D>(t, a, w, c, i > 0, L->link));
        FATHOM_CUDA_TRY(cudaEventRecord(L->moved[i], L->link));
    }
    FATHOM_CUDA_TRY(cudaEventRecord(L->link_done, L->link));
    for (uint32_t i = 0; i < chunks; i++) {
        const tier_chunk c = {i * per, P - i * per < per ? P - i * per : per};
        cudaStream_t s = L->stream[i % L->count];
        FATHOM_CUDA_TRY(cudaStreamWaitEvent(s, L->moved[i], 0));
        FATHOM_TRY(scan_chunk<D>(t, a, G, w, c, s));
        FATHOM_TRY(finish_chunk<D>(t, a, G, w, c, sel, sel_count, insert, s, i + 1 == chunks ? fork : NULL));
    }
    FATHOM_CUDA_TRY(cudaStreamWaitEvent(stream, L->link_done, 0));
    const uint32_t used = chunks < L->count ? chunks : L->count;
    for (uint32_t l = 0; l < used; l++) {
        FATHOM_CUDA_TRY(cudaEventRecord(L->done[l], L->stream[l]));
        FATHOM_CUDA_TRY(cudaStreamWaitEvent(stream, L->done[l], 0));
    }
    return FATHOM_OK;
}

/* The workspace's alignment and size; *w: its layout over args->workspace. */
static int check_workspace(const fathom_cuda_tier *tier, const fathom_cuda_tier_step_args *a, const char *who,
                           tier_ws *w) {
    FATHOM_CHECK_ARG(a->workspace != NULL && ((uintptr_t)a->workspace & 255) == 0,
                     "%s: workspace is NULL or not 256-byte aligned", who);
    FATHOM_TRY(layout(tier, a, a->workspace, w));
    FATHOM_CHECK_ARG(a->workspace_bytes >= w->total, "%s: workspace of %zu bytes, need %zu", who,
                     a->workspace_bytes, w->total);
    return FATHOM_OK;
}

int fc_tier_step_check(const fathom_cuda_tier *tier, const fathom_cuda_tier_step_args *a, const char *who,
                       bool workspace) {
    FATHOM_CHECK_ARG(tier != NULL && a != NULL, "%s: NULL tier or args", who);
    const tier_dev *t = fc_tier_dev(tier);
    const uint32_t G = fc_tier_group(tier);
    FATHOM_CHECK_ARG(a->layer < t->layers, "%s: layer %u >= %u", who, a->layer, t->layers);
    FATHOM_CHECK_ARG(a->sessions && a->queries && a->out, "%s: NULL sessions, queries or out", who);
    FATHOM_CHECK_ARG(a->batch >= 1 && (uint64_t)a->batch * t->heads <= 65535 &&
                         (uint64_t)a->batch * t->heads * G <= 0x7fffffffu,
                     "%s: batch %u x kv_heads %u not in 1..65535", who, a->batch, t->heads);
    FATHOM_CHECK_ARG(a->capacity_tokens >= 1 && a->capacity_tokens <= 0xffffffffull - 64,
                     "%s: capacity_tokens %llu not in 1..2^32-65", who,
                     (unsigned long long)a->capacity_tokens);
    FATHOM_CHECK_ARG(a->k >= 1 && a->k <= FATHOM_CUDA_MAX_K, "%s: k %u not in 1..%d", who, a->k,
                     FATHOM_CUDA_MAX_K);
    FATHOM_CHECK_ARG((uint64_t)a->sink + a->local <= a->k, "%s: sink %u + local %u exceed k %u", who,
                     a->sink, a->local, a->k);
    FATHOM_CHECK_ARG((uint64_t)G * a->k <= 4096, "%s: group %u x k %u exceeds 4096", who, G, a->k);
    FATHOM_CHECK_ARG(a->fixed_depths || (a->budget >= 1 && a->budget <= FATHOM_PLANES * t->dim),
                     "%s: budget %u not in 1..%u", who, a->budget, FATHOM_PLANES * t->dim);
    FATHOM_CHECK_ARG(isfinite(a->scale), "%s: scale is not finite", who);
    if (!workspace) return FATHOM_OK;
    tier_ws w;
    return check_workspace(tier, a, who, &w);
}

extern "C" int fathom_cuda_tier_workspace_size(const fathom_cuda_tier *tier,
                                               const fathom_cuda_tier_step_args *args, size_t *bytes) {
    FATHOM_CHECK_ARG(bytes != NULL, "tier_workspace_size: bytes is NULL");
    FATHOM_TRY(fc_tier_step_check(tier, args, "tier_workspace_size", false));
    tier_ws w;
    FATHOM_TRY(layout(tier, args, NULL, &w));
    *bytes = w.total;
    return FATHOM_OK;
}

int fc_tier_step_prepare(const fathom_cuda_tier *tier, const fathom_cuda_tier_step_args *a,
                         const fathom_cuda_tier_given *given, const char *who, tier_ws *w,
                         const fathom_cuda_tier_given **use) {
    FATHOM_TRY(fc_tier_step_check(tier, a, who, false));
    FATHOM_TRY(check_workspace(tier, a, who, w));
    *use = NULL;
    if (given && given->pairs) {
        const uint64_t P = (uint64_t)a->batch * fc_tier_dev(tier)->heads;
        FATHOM_CHECK_ARG(given->pairs <= P, "%s: given->pairs %u > batch x kv_heads %llu", who, given->pairs,
                         (unsigned long long)P);
        FATHOM_CHECK_ARG(given->selected != NULL, "%s: given->selected is NULL", who);
        FATHOM_CHECK_ARG(a->fixed_depths == NULL || given->depths == NULL,
                         "%s: given->depths with fixed_depths (the plan is the caller's already)", who);
        *use = given;
    }
    return FATHOM_OK;
}

/* The step's optional outputs, one CTA per pair p: its planned depths and
 * its union's row count (either destination may be NULL). */
static __global__ void __launch_bounds__(128)
tier_outputs_kernel(const uint8_t *depths, const uint32_t *uni_count, uint32_t dim, uint8_t *depths_out,
                    uint32_t *union_count_out) {
    const uint32_t p = blockIdx.x;
    if (depths_out)
        for (uint32_t j = threadIdx.x; j < dim; j += blockDim.x)
            depths_out[(size_t)p * dim + j] = depths[(size_t)p * dim + j];
    if (union_count_out && threadIdx.x == 0) union_count_out[p] = uni_count[p];
}

int fc_tier_step_launch(fathom_cuda_tier *tier, const fathom_cuda_tier_step_args *a,
                        const fathom_cuda_tier_given *given, const tier_given_lane *lane, const tier_ws *layout_ws,
                        cudaStream_t stream) {
    tier_ws ws = *layout_ws, *w = &ws; /* this step's copy: the stage may be dropped below */
    ws.scan_int8 = fc_tier_scan_mode(tier) == FATHOM_CUDA_SCAN_INT8;
    const tier_dev *t = fc_tier_dev(tier);
    const char *who = given ? "tier_step_given" : "tier_step";
    const uint32_t G = fc_tier_group(tier), P = a->batch * t->heads;
    uint32_t *sel = a->selected ? a->selected : w->top.sel;
    uint32_t *sel_count = a->selected_count ? a->selected_count : w->top.sel_count;
    fathom_cuda_lanes *L = fc_tier_lanes(tier);
    uint32_t per = chunk_of(tier, a);
    if (per < P && L->per_chunk == 0 && whole_plan_cached(tier, a)) {
        per = P;
        w->stage = NULL; /* reserved by the layout, unused: the scan reads what the cache lacks in place */
    }
    /* the last step's read-ahead (and bookkeeping), if it left it: before
       this step touches the workspace */
    FATHOM_TRY(fc_tier_ahead_join(tier, stream));
    FATHOM_CUDA_TRY(cudaMemsetAsync(w->top.hist, 0, w->top.zero_bytes, stream));
    const uint32_t insert = (*fc_tier_row_caches(tier) > 0 ? INSERT_DIRECT : 0u) |
                            (*fc_tier_set_caches(tier) > 0 ? INSERT_SETS : 0u);
    /* the read-ahead of the next layer (the plane lines when this step, and
       so the next layer's, scans in place): beside the whole step, or once
       the step's reads of host memory are issued (fc_tier_ahead_after: after
       its last row fetch), where the step's bookkeeping (the row caches'
       insertion, the read-ahead's save, the plan window's note: nothing its
       output waits for) follows it after the step; in a capture the next step
       joins them (fc_tier_ahead_leave), so they also run beside the caller's
       work between the two steps, and the next step reuses the workspace only
       then */
    const bool ahead = *fc_tier_ahead_sessions(tier) > 0, fork = ahead && t->layers > 1;
    bool after = false;
    if (fork) FATHOM_TRY(fc_tier_ahead_after(tier, a->layer, stream, &after));
    cudaEvent_t forked, joined;
    cudaStream_t aside = fc_tier_ahead_stream(tier, &forked, &joined);
    cudaStream_t books = after ? aside : stream; /* where the bookkeeping runs */
    tier_fork fork_at = {tier, a, per >= P, false};
    if (fork && !after) {
        FATHOM_TRY(fork_ahead(&fork_at, stream));
        FATHOM_CUDA_TRY(cudaEventRecord(joined, aside));
    }
    const uint32_t ins = after ? 0u : insert;
    tier_fork *fk = after ? &fork_at : NULL;
    switch (t->dim) {
    case 64: FATHOM_TRY(launch_all<64>(t, L, per, a, G, w, sel, sel_count, ins, given, lane, fk, stream)); break;
    case 128: FATHOM_TRY(launch_all<128>(t, L, per, a, G, w, sel, sel_count, ins, given, lane, fk, stream)); break;
    case 256: FATHOM_TRY(launch_all<256>(t, L, per, a, G, w, sel, sel_count, ins, given, lane, fk, stream)); break;
    default: return fathom_fail(FATHOM_ERR_UNSUPPORTED, "%s: dim %u not supported", who, t->dim);
    }
    if (after) { /* the read-ahead started after the last row fetch; the bookkeeping waits for the whole step */
        FATHOM_TRY(fork_ahead(fk, stream)); /* unless no chunk of the GPU's started it (every pair given) */
        FATHOM_CUDA_TRY(cudaEventRecord(forked, stream));
        FATHOM_CUDA_TRY(cudaStreamWaitEvent(aside, forked, 0));
        const tier_chunk all = {0, P};
        switch (t->dim) {
        case 64: FATHOM_TRY(insert_rows<64>(t, a, G, w, all, insert, aside)); break;
        case 128: FATHOM_TRY(insert_rows<128>(t, a, G, w, all, insert, aside)); break;
        default: FATHOM_TRY(insert_rows<256>(t, a, G, w, all, insert, aside)); break;
        }
    }
    if (fork && !after) FATHOM_TRY(fc_tier_ahead_leave(tier, a->layer, stream));
    if (ahead) /* this layer's staging is read (the next layer's read-ahead reads only its own layer's plans) */
        FATHOM_TRY(fc_tier_ahead_save(tier, a->layer, a->sessions, a->batch, G * a->k, w, books));
    if (*fc_tier_plan_windows(tier) > 0) /* every pair's depths are in w->depths here, the given ones too */
        FATHOM_TRY(fc_tier_cache_note(tier, a->layer, a->sessions, a->batch, w->depths, books));
    if (after) {
        FATHOM_CUDA_TRY(cudaEventRecord(joined, aside));
        FATHOM_TRY(fc_tier_ahead_leave(tier, a->layer, stream));
    }
    if (a->depths || a->union_count) { /* one kernel: copy nodes wait long beside a read-ahead's host reads */
        tier_outputs_kernel<<<P, 128, 0, stream>>>(w->depths, w->top.uni_count, t->dim, a->depths, a->union_count);
        FATHOM_CUDA_LAUNCHED();
    }
    return FATHOM_OK;
}

static int step(fathom_cuda_tier *tier, const fathom_cuda_tier_step_args *a, const fathom_cuda_tier_given *given,
                cudaStream_t stream, const char *who) {
    tier_ws w;
    const fathom_cuda_tier_given *use;
    FATHOM_TRY(fc_tier_step_prepare(tier, a, given, who, &w, &use));
    return fc_tier_step_launch(tier, a, use, NULL, &w, stream);
}

extern "C" int fathom_cuda_tier_step(fathom_cuda_tier *tier, const fathom_cuda_tier_step_args *a,
                                     cudaStream_t stream) {
    return step(tier, a, NULL, stream, "tier_step");
}

extern "C" int fathom_cuda_tier_step_given(fathom_cuda_tier *tier, const fathom_cuda_tier_step_args *a,
                                           const fathom_cuda_tier_given *given, cudaStream_t stream) {
    return step(tier, a, given, stream, "tier_step_given");
}

int fc_tier_step_scores(const fathom_cuda_tier *tier, const fathom_cuda_tier_step_args *a,
                        const float **scores, uint64_t *stride) {
    tier_ws w;
    FATHOM_TRY(layout(tier, a, a->workspace, &w));
    *scores = w.scores;
    *stride = w.stride;
    return FATHOM_OK;
}

/* The KV tier's read-ahead (fathom_cuda_tier_cache_config.ahead_lines and
 * ahead_rows): each step of layer l copies, beside its own work or after it
 * (fathom_cuda_tier_set_ahead_start), what the session's last step of layer
 * l + 1 read and its caches lack into one half of the session's staging,
 * and that layer's step reads those bytes from it (tier_step.cu's scan and
 * fetch). Plans and unions of consecutive decode steps overlap
 * (bench/cache_sim.py: plane_ahead_hit, row_ahead_hit), so the bytes move
 * while the link would otherwise idle under layer l's kernels and, in a
 * captured graph (the next step joins the read-ahead: fc_tier_ahead_leave),
 * the caller's work before layer l + 1's step (with
 * FATHOM_CUDA_AHEAD_ACROSS, the last layer's too: before the next decode
 * step's layer 0).
 *
 * Only closed blocks are staged (an append rewrites only the open block and
 * adds rows past the length), up to the blocks closed when the plan was
 * saved; a plane-cache fill, a truncation or a new cache empties the
 * staging. */
#include "tier_internal.cuh"

#define AHEAD_GRID_BESIDE 16  /* CTAs beside a step: few, so that its kernels keep the SMs and most of the link */
#define AHEAD_GRID_BETWEEN 64 /* CTAs between two steps: more loads in flight where other work
                                 keeps the SMs and HBM busy */
#define AHEAD_WARPS 8
#define AHEAD_LOADS 16  /* loads a lane has in flight */
#define AHEAD_PIECE (32 * AHEAD_LOADS) /* blocks of a line or a channel's scales per warp item */
#define AHEAD_ROWS 8    /* K/V rows per warp item */

/* The staging half a step of `layer` fills (stage_layer[4], claimed once by
 * tier_ahead_claim_kernel: the step's own layer's half may be emptied
 * meanwhile): the one not holding layer's own. */
static __global__ void tier_ahead_claim_kernel(tier_dev t, uint32_t layer, const uint32_t *sessions,
                                               uint32_t batch) {
    const uint32_t e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= batch || sessions[e] >= t.max_sessions) return;
    const tier_cache c = t.caches[sessions[e]];
    if (c.stage_layer) c.stage_layer[4] = c.stage_layer[0] == (int32_t)layer ? 1 : 0;
}

/* One warp per pair: the layout of the last plan of (next, head) in
 * ahead_map (line x: the x-th planned (j, p) in (j, p) order, channel r: the
 * r-th planned channel; none where the read-ahead takes rows only). */
template <int D>
static __global__ void tier_ahead_layout_kernel(tier_dev t, uint32_t next, const uint32_t *sessions, bool planes) {
    const uint32_t p = blockIdx.x, s = sessions[p / t.heads], h = p % t.heads, lane = threadIdx.x;
    if (s >= t.max_sessions) return;
    const tier_cache c = t.caches[s];
    if (!c.stage_layer) return;
    uint16_t *map = c.ahead_map + (size_t)h * TIER_AHEAD_MAP(D);
    uint32_t run_l = 0, run_c = 0;
    if (planes)
        tier_plan_walk<D>(c.ahead_dep + ((size_t)next * t.heads + h) * D, lane, &run_l, &run_c,
                          [&](uint32_t j, uint32_t d, uint32_t x0, uint32_t r) {
                              for (uint32_t q = 0; q < d; q++)
                                  if (x0 + q < c.ahead_lines) map[x0 + q] = (uint16_t)(j * FATHOM_PLANES + q);
                              if (d && r < c.ahead_chans) map[FATHOM_PLANES * D + r] = (uint16_t)j;
                          });
    if (lane == 0) {
        map[(FATHOM_PLANES + 1) * D] = (uint16_t)min(run_l, c.ahead_lines);
        map[(FATHOM_PLANES + 1) * D + 1] = (uint16_t)min(run_c, c.ahead_chans);
    }
}

/* The items of all the batch's pairs (pieces of AHEAD_PIECE blocks of a
 * line or of a channel's scales, groups of AHEAD_ROWS rows), numbered pair
 * after pair, are dealt round robin to every warp of the grid, no barrier
 * between pairs; a lane has all its loads of an item in flight before it
 * stores. */
template <int D>
static __global__ void __launch_bounds__(AHEAD_WARPS * 32)
tier_ahead_kernel(tier_dev t, uint32_t next, const uint32_t *sessions, uint32_t P) {
    const uint32_t lane = threadIdx.x & 31, W = gridDim.x * AHEAD_WARPS;
    const uint32_t me = blockIdx.x * AHEAD_WARPS + (threadIdx.x >> 5), S = t.segment_blocks;
    const uint64_t seg_tokens = (uint64_t)S * FATHOM_BLOCK_TOKENS;
    uint64_t g = 0; /* items of the pairs before this one */
    for (uint32_t p = 0; p < P; p++) {
        const uint32_t s = sessions[p / t.heads], h = p % t.heads;
        if (s >= t.max_sessions) continue; /* uniform; the step records the error */
        const tier_cache c = t.caches[s];
        if (!c.stage_layer) continue;
        const size_t lh = (size_t)next * t.heads + h;
        const uint32_t half = (uint32_t)c.stage_layer[4], nb = c.ahead_nb[lh];
        const uint32_t pieces = (c.blocks + AHEAD_PIECE - 1) / AHEAD_PIECE;
        const uint16_t *map = c.ahead_map + (size_t)h * TIER_AHEAD_MAP(D);
        const uint32_t lines = map[(FATHOM_PLANES + 1) * D], chans = map[(FATHOM_PLANES + 1) * D + 1];
        const uint32_t rows = c.ahead_rows ? min(c.ahead_cnt[lh], c.ahead_rows) : 0;
        const uint64_t items = (uint64_t)(lines + chans) * pieces + (rows + AHEAD_ROWS - 1) / AHEAD_ROWS;
        const uint32_t cvalid = c.map ? c.valid[next] : 0;
        const int16_t *cmap = c.map ? c.map + lh * D * FATHOM_PLANES : NULL;
        for (uint64_t i = (me + W - g % W) % W; i < items; i += W) {
            if (i < (uint64_t)(lines + chans) * pieces) { /* blocks of one line or one channel's scales */
                const uint32_t x = (uint32_t)(i / pieces), q = (uint32_t)(i % pieces);
                const bool word = x < lines;
                const uint32_t line = word ? map[x] : map[FATHOM_PLANES * D + x - lines] * FATHOM_PLANES;
                const uint32_t lo = cmap && cmap[line] >= 0 ? cvalid : 0;
                const uint32_t b0 = max(lo, q * AHEAD_PIECE), b1 = min(nb, (q + 1) * AHEAD_PIECE);
                if (word) {
                    uint64_t v[AHEAD_LOADS];
#pragma unroll
                    for (int k = 0; k < AHEAD_LOADS; k++) {
                        const uint32_t b = b0 + lane + 32 * k;
                        if (b < b1)
                            v[k] = __ldcv((const unsigned long long *)tier_slice(t, s, b / S, next, h) +
                                          (size_t)line * S + b % S);
                    }
                    uint64_t *dst = c.stage_words + (((size_t)half * t.heads + h) * c.ahead_lines + x) * c.blocks;
#pragma unroll
                    for (int k = 0; k < AHEAD_LOADS; k++)
                        if (b0 + lane + 32 * k < b1) dst[b0 + lane + 32 * k] = v[k];
                } else {
                    uint16_t v[AHEAD_LOADS];
#pragma unroll
                    for (int k = 0; k < AHEAD_LOADS; k++) {
                        const uint32_t b = b0 + lane + 32 * k;
                        if (b < b1)
                            v[k] = __ldcv((const unsigned short *)(tier_slice(t, s, b / S, next, h) + t.scales_off) +
                                          (size_t)(line / FATHOM_PLANES) * S + b % S);
                    }
                    uint16_t *dst =
                        c.stage_scales + (((size_t)half * t.heads + h) * c.ahead_chans + x - lines) * c.blocks;
#pragma unroll
                    for (int k = 0; k < AHEAD_LOADS; k++)
                        if (b0 + lane + 32 * k < b1) dst[b0 + lane + 32 * k] = v[k];
                }
            } else { /* AHEAD_ROWS K/V rows the row cache lacks, in 16-byte pieces */
                constexpr uint32_t PR = D / 4; /* pieces of a row */
                constexpr int PER = AHEAD_ROWS * PR / 32; /* pieces of a lane */
                const uint32_t u0 = (uint32_t)(i - (uint64_t)(lines + chans) * pieces) * AHEAD_ROWS;
                uint4 v[PER];
                bool take[PER];
#pragma unroll
                for (int k = 0; k < PER; k++) {
                    const uint32_t q = lane + 32 * k, u = u0 + q / PR;
                    take[k] = false;
                    if (u >= rows) continue;
                    const uint32_t idx = c.ahead_uni[lh * c.ahead_rows + u];
                    if (tier_row_slot(c, lh, idx) != TIER_NO_SLOT) continue; /* the fetch's hit */
                    take[k] = true;
                    const uint16_t *src = (const uint16_t *)(tier_slice(t, s, (uint32_t)(idx / seg_tokens), next, h) +
                                                             t.kv_off) + (idx % seg_tokens) * 2 * D;
                    v[k] = __ldcv((const uint4 *)src + q % PR);
                }
#pragma unroll
                for (int k = 0; k < PER; k++) {
                    const uint32_t q = lane + 32 * k, u = u0 + q / PR;
                    if (take[k])
                        ((uint4 *)(c.stage_rows + (((size_t)half * t.heads + h) * c.ahead_rows + u) * 2 * D))[q % PR] =
                            v[k];
                }
            }
        }
        g += items;
    }
}

/* The half the copy filled now holds `next` (with its planes or not); no
 * other half does. */
static __global__ void tier_ahead_publish_kernel(tier_dev t, uint32_t next, const uint32_t *sessions, uint32_t batch,
                                                 bool planes) {
    const uint32_t e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= batch) return;
    const uint32_t s = sessions[e];
    if (s >= t.max_sessions) return;
    const tier_cache c = t.caches[s];
    if (!c.stage_layer) return;
    const uint32_t half = (uint32_t)c.stage_layer[4];
    if (c.stage_layer[1 - half] == (int32_t)next) c.stage_layer[1 - half] = -1;
    c.stage_layer[half] = (int32_t)next;
    c.stage_layer[2 + half] = planes;
}

/* The P pairs' layouts, then the copy on `grid` CTAs. */
template <int D>
static void tier_ahead_copy(const tier_dev &t, uint32_t next, const uint32_t *sessions, uint32_t P, bool planes,
                            unsigned grid, cudaStream_t stream) {
    tier_ahead_layout_kernel<D><<<P, 32, 0, stream>>>(t, next, sessions, planes);
    tier_ahead_kernel<D><<<grid, AHEAD_WARPS * 32, 0, stream>>>(t, next, sessions, P);
}

int fc_tier_ahead_launch(fathom_cuda_tier *tier, uint32_t layer, const uint32_t *sessions, uint32_t batch,
                         bool planes, cudaStream_t stream) {
    const tier_dev *t = fc_tier_dev(tier);
    const uint32_t next = (layer + 1) % t->layers, P = batch * t->heads;
    tier_ahead_claim_kernel<<<(batch + 255) / 256, 256, 0, stream>>>(*t, layer, sessions, batch);
    FATHOM_CUDA_LAUNCHED();
    const unsigned grid =
        fc_tier_ahead_start(tier) != FATHOM_CUDA_AHEAD_BESIDE ? AHEAD_GRID_BETWEEN : AHEAD_GRID_BESIDE;
    switch (t->dim) {
    case 64: tier_ahead_copy<64>(*t, next, sessions, P, planes, grid, stream); break;
    case 128: tier_ahead_copy<128>(*t, next, sessions, P, planes, grid, stream); break;
    default: tier_ahead_copy<256>(*t, next, sessions, P, planes, grid, stream); break;
    }
    FATHOM_CUDA_LAUNCHED();
    tier_ahead_publish_kernel<<<(batch + 255) / 256, 256, 0, stream>>>(*t, next, sessions, batch, planes);
    FATHOM_CUDA_LAUNCHED();
    return FATHOM_OK;
}

/* One CTA per pair after the step of `layer`: its plan, the first rows of
 * its union and the blocks closed now become the (layer, head)'s last; the
 * staging half that held this layer is emptied (it was read). */
static __global__ void tier_ahead_save_kernel(tier_dev t, uint32_t layer, const uint32_t *sessions, uint32_t cap,
                                              tier_ws w) {
    const uint32_t p = blockIdx.x, s = sessions[p / t.heads], h = p % t.heads;
    if (s >= t.max_sessions) return;
    const tier_cache c = t.caches[s];
    if (!c.stage_layer) return;
    const size_t lh = (size_t)layer * t.heads + h;
    for (uint32_t j = threadIdx.x; j < t.dim; j += blockDim.x) c.ahead_dep[lh * t.dim + j] = w.depths[(size_t)p * t.dim + j];
    const uint32_t cnt = c.ahead_rows ? min(w.top.uni_count[p], c.ahead_rows) : 0;
    for (uint32_t u = threadIdx.x; u < cnt; u += blockDim.x)
        c.ahead_uni[lh * c.ahead_rows + u] = w.top.uni[(size_t)p * cap + u];
    if (threadIdx.x == 0) {
        c.ahead_cnt[lh] = cnt;
        c.ahead_nb[lh] = min(w.n_of[p] / FATHOM_BLOCK_TOKENS, c.blocks);
        if (h == 0)
            for (int x = 0; x < 2; x++)
                if (c.stage_layer[x] == (int32_t)layer) c.stage_layer[x] = -1;
    }
}

int fc_tier_ahead_save(fathom_cuda_tier *tier, uint32_t layer, const uint32_t *sessions, uint32_t batch,
                       uint32_t cap, const tier_ws *w, cudaStream_t stream) {
    const tier_dev *t = fc_tier_dev(tier);
    tier_ahead_save_kernel<<<batch * t->heads, 256, 0, stream>>>(*t, layer, sessions, cap, *w);
    FATHOM_CUDA_LAUNCHED();
    return FATHOM_OK;
}

/* The capture `stream` belongs to (0: not capturing). */
static int capture_id(cudaStream_t stream, unsigned long long *id) {
    cudaStreamCaptureStatus st;
    FATHOM_CUDA_TRY(cudaStreamGetCaptureInfo(stream, &st, id));
    if (st != cudaStreamCaptureStatusActive) *id = 0;
    return FATHOM_OK;
}

int fc_tier_ahead_join(fathom_cuda_tier *tier, cudaStream_t stream) {
    unsigned long long *pending = fc_tier_ahead_pending(tier), id;
    if (!*pending) return FATHOM_OK;
    FATHOM_TRY(capture_id(stream, &id));
    if (id == *pending) {
        cudaEvent_t fork, join;
        fc_tier_ahead_stream(tier, &fork, &join);
        FATHOM_CUDA_TRY(cudaStreamWaitEvent(stream, join, 0));
    }
    *pending = 0; /* another capture's: it ended (joined or failed) */
    return FATHOM_OK;
}

/* Whether a captured step of `layer` waits for its read-ahead at its own
 * end: the last layer's, but with FATHOM_CUDA_AHEAD_ACROSS. */
static bool joined_by_step(const fathom_cuda_tier *tier, uint32_t layer) {
    return layer + 1 >= fc_tier_dev(tier)->layers && fc_tier_ahead_start(tier) != FATHOM_CUDA_AHEAD_ACROSS;
}

int fc_tier_ahead_after(fathom_cuda_tier *tier, uint32_t layer, cudaStream_t stream, bool *after) {
    *after = false;
    if (fc_tier_ahead_start(tier) == FATHOM_CUDA_AHEAD_BESIDE || joined_by_step(tier, layer)) return FATHOM_OK;
    unsigned long long id;
    FATHOM_TRY(capture_id(stream, &id));
    *after = id != 0;
    return FATHOM_OK;
}

int fc_tier_ahead_leave(fathom_cuda_tier *tier, uint32_t layer, cudaStream_t stream) {
    unsigned long long id;
    FATHOM_TRY(capture_id(stream, &id));
    if (id && !joined_by_step(tier, layer)) { /* the next step in the capture, or fathom_cuda_tier_ahead_join */
        *fc_tier_ahead_pending(tier) = id;
        return FATHOM_OK;
    }
    cudaEvent_t fork, join;
    fc_tier_ahead_stream(tier, &fork, &join);
    FATHOM_CUDA_TRY(cudaStreamWaitEvent(stream, join, 0));
    return FATHOM_OK;
}

extern "C" int fathom_cuda_tier_ahead_join(fathom_cuda_tier *tier, cudaStream_t stream) {
    FATHOM_CHECK_ARG(tier != NULL, "tier_ahead_join: tier is NULL");
    return fc_tier_ahead_join(tier, stream);
}

/* scan — approximate scores of every token for each query head.
 *
 * Plane scan (§3.2): a channel read to depth t decodes to
 *   khat = (c_t + 0.5 - 2^(t-1)) * a / 2^(t-1),  c_t = the first t bits of c,
 * so score_h = sum_j q_hj khat_j. Rather than one multiply-add per bit and
 * head (the literal bit-serial sum over 2^-p terms: 4 + G ops per bit),
 * each thread assembles c_t and does one multiply-add per head.
 *
 * Mapping (v2): lane l of a warp owns block b = base + l, so a plane word
 * load is one coalesced 256-byte access per warp and loads of different
 * channels are independent (v1, a warp per two blocks with broadcast loads,
 * was latency-bound at 81 GB/s for fathom:48 in HBM). The warp's 64 tokens
 * per block are split in quarters over 4 warps (TOK = 16 tokens a lane, G
 * accumulators each). Per channel a lane spreads each plane's 16 bits to
 * every 4th bit (3 shift-and-mask steps per byte) and shifts the planes
 * together MSB first, giving the 16 codes as nibbles: ~1.1 t integer ops
 * per token instead of 3 t for bit-by-bit extraction. A code becomes a
 * float without a conversion: with c at bits [r, r+4) of a word, the bits
 * (150 - r) << 23 | (c << r) are the float 2^(23-r) + c (one mask-and-or),
 * and khat is one fma of it with a and a per-channel constant (below):
 * ~2.5 fewer operations per token and channel than 2^22 + c + 0.5 from
 * c << 1, a subtraction and a multiply, which made the scans in HBM only
 * 1-3 % faster (they are latency- as much as issue-bound).
 *
 * Exactness: khat = (c + 0.5 - 2^(t-1)) * (a / 2^(t-1)) is exact in float (5
 * and 11 significant bits), as is the CPU kernels' plane-by-plane form of
 * the same value. The CPU kernels (fathom_store_scan, AVX2 and AVX-512) take
 * the active channels in passes of up to 64 (index order), inside a pass by
 * depth then index, add fmaf(q, khat, acc) per head from acc = 0 and add each
 * pass's acc into the scores. This kernel keeps that order and those
 * operations, so its scores are bit-identical to theirs. (A zero scale
 * makes khat +0 here where the CPU's product may be -0; the sums start
 * at +0, so no score differs.) */
#include "cuda_internal.cuh"

#define SCAN_THREADS 256
#define SCAN_PASS 64 /* active channels per pass, as the CPU kernels */


template <int G, int TOK_>
struct scan_shape {
    static const int TOK = TOK_;                    /* tokens per lane: 16 or 8 */
    static const int PARTS = 64 / TOK;              /* warps sharing one block */
    static const int GROUPS = (SCAN_THREADS / 32) / PARTS; /* 32-block groups per CTA */
    static const int BLOCKS = GROUPS * 32;          /* blocks per CTA */
};

/* One lane's TOK tokens of block b over every active channel. */
template <int G, int TOK, bool NIBBLE>
static __device__ __forceinline__ void
scan_lane(float (&acc)[TOK][G], uint32_t c0, uint32_t c1, const uint8_t *s_chan,
          const uint8_t *s_t, const float (*s_q)[FC_DIM], const uint64_t *planes,
          const uint16_t *scales, uint32_t nb, uint32_t b, uint32_t shift, const uint32_t *s_spread) {
    const int WORDS = TOK / 8;
#pragma unroll
    for (int i = 0; i < TOK; i++)
#pragma unroll
        for (int h = 0; h < G; h++) acc[i][h] = 0.0f;
    /* two channels' words in flight while one is decoded, in two buffers:
     * a channel's words are turned into codes first, which frees its buffer
     * for the load two channels ahead before the multiply-adds (one channel
     * ahead left half the issue slots idle at a quarter of the warp slots;
     * a third buffer for the words being decoded spilled at 128 registers) */
    uint64_t wa[FATHOM_PLANES], wb[FATHOM_PLANES];
    uint16_t sa = 0, sb = 0;
    auto load = [&](uint32_t c, uint64_t (&next)[FATHOM_PLANES], uint16_t &next_scale) {
        const uint32_t j = s_chan[c], t = s_t[c];
        if (NIBBLE) {
            /* [j][nb][4]: this lane's TOK codes are already nibbles */
            next[0] = planes[((size_t)j * nb + b) * 4 + shift / 16];
        } else {
            /* only the 32-bit half of each word that holds this lane's tokens:
             * the other half is another warp's (L1 serves both), and the
             * lane's bits need one 32-bit shift instead of a 64-bit one */
            const uint32_t *w = (const uint32_t *)(planes + (size_t)j * FATHOM_PLANES * nb + b) + shift / 32;
#pragma unroll
            for (int pl = 0; pl < FATHOM_PLANES; pl++) next[pl] = pl < (int)t ? w[(size_t)pl * nb * 2] : 0;
        }
        next_scale = scales[(size_t)j * nb + b];
    };
    /* channel c's codes as nibbles, from its words */
    auto codes = [&](uint32_t t, const uint64_t (&word)[FATHOM_PLANES], uint32_t (&nib)[WORDS]) {
#pragma unroll
        for (int k = 0; k < WORDS; k++) nib[k] = 0;
        if (NIBBLE) {
            const uint64_t q4 = word[0] >> (4 * (shift % 16)); /* TOK = 8 starts mid-word */
#pragma unroll
            for (int k = 0; k < WORDS; k++) nib[k] = (uint32_t)(q4 >> (32 * k));
        } else {
#pragma unroll
            for (int pl = 0; pl < FATHOM_PLANES; pl++) {
                if (pl >= (int)t) break;
                fc_codes_add_plane(nib, (uint32_t)word[pl] >> (shift % 32), s_spread);
            }
        }
    };
    /* the multiply-adds of channel c */
    auto accumulate = [&](uint32_t c, uint32_t t, uint16_t scale, const uint32_t (&nib)[WORDS]) {
        fc_codes_accumulate<G, TOK>(acc, [&](int h) { return s_q[h][c]; }, fc_depth_consts_of(t), scale, nib);
    };
    if (c0 < c1) load(c0, wa, sa);
    if (c0 + 1 < c1) load(c0 + 1, wb, sb);
    /* two channels an iteration, so the buffers stay in registers */
    for (uint32_t c = c0; c < c1; c += 2) {
        uint32_t nib[WORDS];
        uint32_t t = s_t[c];
        uint16_t scale = sa;
        codes(t, wa, nib);
        if (c + 2 < c1) load(c + 2, wa, sa);
        accumulate(c, t, scale, nib);
        if (c + 1 < c1) {
            t = s_t[c + 1];
            scale = sb;
            codes(t, wb, nib);
            if (c + 3 < c1) load(c + 3, wb, sb);
            accumulate(c + 1, t, scale, nib);
        }
    }
}

/* Where a plane scan counts the top-k's level-0 histogram: the middle
 * tokens [lo, hi) of each row, into hist[row][0][...]; hist is NULL when
 * nothing is selected (n <= k). */
typedef struct level0_tally {
    uint32_t *hist;
    uint64_t lo, hi;
} level0_tally;

template <int G, int TOK, bool NIBBLE>
static __global__ void __launch_bounds__(SCAN_THREADS, 2)
scan_planes_kernel(uint64_t n, uint32_t nb, const uint8_t *depths, const float *queries,
                   const fathom_cuda_problem *problems, const uint64_t *stage,
                   uint64_t stage_words, const uint16_t *stage_scales, int resident,
                   float *scores, level0_tally tally) {
    typedef scan_shape<G, TOK> S;
    extern __shared__ uint32_t s_hist[]; /* [G][FC_HIST_BINS] when tally.hist */
    __shared__ uint8_t s_chan[FC_DIM], s_t[FC_DIM];
    __shared__ float s_q[G][FC_DIM];
    const uint32_t p = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    /* the active channels in the CPU kernels' order: passes of up to 64 in
     * index order, each bucketed by depth (stable) */
    __shared__ uint8_t s_dep[FC_DIM];
    __shared__ uint16_t s_rank[FC_DIM];
    __shared__ uint32_t s_active;
    /* byte -> its 8 bits at nibble positions: two shared loads per plane
     * and 16 tokens instead of 18 shift-and-mask operations */
    __shared__ uint32_t s_spread[256];
    for (uint32_t i = tid; i < 256; i += blockDim.x) s_spread[i] = fc_spread8(i);
    if (tally.hist)
        for (uint32_t i = tid; i < G * FC_HIST_BINS; i += blockDim.x) s_hist[i] = 0;
    uint32_t t_mine = 0, rank = 0;
    if (tid < FC_DIM) {
        t_mine = depths[(size_t)p * FC_DIM + tid];
        t_mine = t_mine > FATHOM_PLANES ? FATHOM_PLANES : t_mine;
        s_dep[tid] = (uint8_t)t_mine;
    }
    __syncthreads();
    if (tid < FC_DIM) {
        for (uint32_t i = 0; i < tid; i++) rank += s_dep[i] > 0;
        s_rank[tid] = (uint16_t)rank;
        if (tid == FC_DIM - 1) s_active = rank + (t_mine > 0);
    }
    __syncthreads();
    if (tid < FC_DIM && t_mine > 0) {
        const uint32_t pass = rank / SCAN_PASS;
        uint32_t pos = pass * SCAN_PASS;
        for (uint32_t i = 0; i < FC_DIM; i++) {
            const uint32_t ti = s_dep[i];
            pos += ti > 0 && s_rank[i] / SCAN_PASS == pass && (ti < t_mine || (ti == t_mine && i < tid));
        }
        s_chan[pos] = (uint8_t)tid;
        s_t[pos] = (uint8_t)t_mine;
    }
    __syncthreads();
    const uint32_t active = s_active;
    for (uint32_t i = tid; i < active * G; i += blockDim.x) {
        const uint32_t c = i % active, h = i / active;
        s_q[h][c] = queries[((size_t)p * G + h) * FC_DIM + s_chan[c]];
    }
    __syncthreads();
    const uint64_t *planes = resident ? problems[p].planes : stage + p * stage_words;
    const uint16_t *scales = resident ? problems[p].scales : stage_scales + (size_t)p * FC_DIM * nb;
    const uint32_t part = warp % S::PARTS, group = warp / S::PARTS;
    const uint32_t b = blockIdx.x * S::BLOCKS + group * 32 + lane;
    const uint32_t shift = part * TOK;
    const uint64_t first = (uint64_t)b * 64 + shift;
    /* a final score into the level-0 histogram (shared, flushed below) */
    auto count = [&](int h, uint64_t i, float v) {
        if (i >= tally.lo && i < tally.hi)
            atomicAdd(&s_hist[h * FC_HIST_BINS + (fc_score_order(v) >> (32 - FC_HIST_BITS))], 1u);
    };
    if (b < nb) { /* no return: the whole block meets at the flush */
        float acc[TOK][G];
        for (uint32_t c0 = 0; c0 < active; c0 += SCAN_PASS) {
            const uint32_t c1 = active - c0 < SCAN_PASS ? active : c0 + SCAN_PASS;
            scan_lane<G, TOK, NIBBLE>(acc, c0, c1, s_chan, s_t, s_q, planes, scales, nb, b, shift,
                                      s_spread);
            /* the first pass stores (0 + acc is acc), later passes add, as the CPU does */
            const bool add = c0 > 0, last = c1 == active && tally.hist;
#pragma unroll
            for (int h = 0; h < G; h++) {
                float *row = scores + ((size_t)p * G + h) * n + first;
                if (first + TOK <= n && (((uintptr_t)row) & 15) == 0) {
#pragma unroll
                    for (int i = 0; i < TOK; i += 4) {
                        float4 v = make_float4(acc[i][h], acc[i + 1][h], acc[i + 2][h], acc[i + 3][h]);
                        if (add) {
                            const float4 o = *(const float4 *)(row + i);
                            v = make_float4(o.x + v.x, o.y + v.y, o.z + v.z, o.w + v.w);
                        }
                        *(float4 *)(row + i) = v;
                        if (last) {
                            count(h, first + i, v.x);
                            count(h, first + i + 1, v.y);
                            count(h, first + i + 2, v.z);
                            count(h, first + i + 3, v.w);
                        }
                    }
                } else {
#pragma unroll
                    for (int i = 0; i < TOK; i++)
                        if (first + i < n) {
                            const float v = add ? row[i] + acc[i][h] : acc[i][h];
                            row[i] = v;
                            if (last) count(h, first + i, v);
                        }
                }
            }
        }
        if (active == 0) /* no channel read: every score is 0 */
            for (int h = 0; h < G; h++)
                for (int i = 0; i < TOK; i++)
                    if (first + i < n) {
                        scores[((size_t)p * G + h) * n + first + i] = 0.0f;
                        if (tally.hist) count(h, first + i, 0.0f);
                    }
    }
    if (tally.hist) {
        __syncthreads();
        for (uint32_t i = tid; i < G * FC_HIST_BINS; i += blockDim.x)
            if (s_hist[i])
                atomicAdd(&tally.hist[((size_t)p * G + i / FC_HIST_BINS) * 2 * FC_HIST_BINS +
                                      i % FC_HIST_BINS],
                          s_hist[i]);
    }
}

/* Dense scans. Landmarks: score of token i = q_h . mean(i / 8), one thread
 * per landmark row, with exactly the additions of fathom_landmarks_scan. Oracle: q_h . k_i over bf16 keys, one warp
 * per key (lane l holds channels 4l..4l+3), float products, butterfly sum. */
template <int G>
static __global__ void __launch_bounds__(256)
scan_landmarks_kernel(uint64_t n, uint64_t rows, const float *queries,
                      const fathom_cuda_problem *problems, const uint64_t *stage,
                      uint64_t stage_words, int resident, float *scores) {
    __shared__ float s_q[G][FC_DIM];
    const uint32_t p = blockIdx.y;
    for (uint32_t i = threadIdx.x; i < G * FC_DIM; i += blockDim.x)
        s_q[i / FC_DIM][i % FC_DIM] = queries[(size_t)p * G * FC_DIM + i];
    __syncthreads();
    const uint16_t *base = resident ? problems[p].landmarks : (const uint16_t *)(stage + p * stage_words);
    for (uint64_t r = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; r < rows;
         r += (uint64_t)gridDim.x * blockDim.x) {
        const uint4 *row = (const uint4 *)(base + r * FC_DIM);
        /* fathom_landmarks_scan's order: 8 partial sums (channel j into sum
         * j % 8), unfused, then (s0+s4 + s1+s5) + (s2+s6 + s3+s7) */
        float part[G][8];
#pragma unroll
        for (int h = 0; h < G; h++)
#pragma unroll
            for (int e = 0; e < 8; e++) part[h][e] = 0.0f;
        for (int v = 0; v < FC_DIM / 8; v++) {
            const uint4 raw = row[v];
            const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const uint16_t u = (uint16_t)(w[e / 2] >> (16 * (e & 1)));
                const float x = __half2float(__ushort_as_half(u));
#pragma unroll
                for (int h = 0; h < G; h++)
                    part[h][e] = __fadd_rn(part[h][e], __fmul_rn(s_q[h][v * 8 + e], x));
            }
        }
        float acc[G];
#pragma unroll
        for (int h = 0; h < G; h++) {
            const float s0 = __fadd_rn(part[h][0], part[h][4]), s1 = __fadd_rn(part[h][1], part[h][5]);
            const float s2 = __fadd_rn(part[h][2], part[h][6]), s3 = __fadd_rn(part[h][3], part[h][7]);
            acc[h] = __fadd_rn(__fadd_rn(s0, s1), __fadd_rn(s2, s3));
        }
        const uint64_t first = r * FATHOM_LANDMARK_TOKENS;
        for (uint64_t i = first; i < first + FATHOM_LANDMARK_TOKENS && i < n; i++)
#pragma unroll
            for (int h = 0; h < G; h++) scores[((size_t)p * G + h) * n + i] = acc[h];
    }
}

template <int G>
static __global__ void __launch_bounds__(256)
scan_keys_kernel(uint64_t n, const float *queries, const fathom_cuda_problem *problems,
                 const uint64_t *stage, uint64_t stage_words, int resident, float *scores) {
    const uint32_t p = blockIdx.y, lane = threadIdx.x & 31;
    const uint16_t *base = resident ? problems[p].keys : (const uint16_t *)(stage + p * stage_words);
    float q[G][4];
#pragma unroll
    for (int h = 0; h < G; h++)
#pragma unroll
        for (int c = 0; c < 4; c++) q[h][c] = queries[((size_t)p * G + h) * FC_DIM + lane * 4 + c];
    const uint64_t warps = (uint64_t)gridDim.x * (blockDim.x / 32);
    for (uint64_t r = (uint64_t)blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5); r < n; r += warps) {
        const uint2 raw = *(const uint2 *)(base + r * FC_DIM + lane * 4);
        const float x[4] = {__uint_as_float(raw.x << 16), __uint_as_float(raw.x & 0xffff0000u),
                            __uint_as_float(raw.y << 16), __uint_as_float(raw.y & 0xffff0000u)};
        float s[G];
#pragma unroll
        for (int h = 0; h < G; h++) {
            s[h] = q[h][0] * x[0];
#pragma unroll
            for (int c = 1; c < 4; c++) s[h] = fmaf(q[h][c], x[c], s[h]);
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) s[h] += __shfl_xor_sync(0xffffffffu, s[h], off);
        }
        if (lane == 0)
#pragma unroll
            for (int h = 0; h < G; h++) scores[((size_t)p * G + h) * n + r] = s[h];
    }
}

template <int G, int TOK, bool NIBBLE>
static int launch_planes(const fathom_cuda_config *cfg, const fathom_cuda_problem *problems,
                         const fc_workspace *ws, const float *queries, float *scores,
                         level0_tally tally, cudaStream_t stream) {
    typedef scan_shape<G, TOK> S;
    const uint32_t nb = fc_blocks_of(cfg->tokens);
    const size_t hist_bytes = tally.hist ? (size_t)G * FC_HIST_BINS * 4 : 0;
    if (hist_bytes > 48 * 1024) /* G > 6: opt in to more than the default shared memory */
        FATHOM_CUDA_TRY(cudaFuncSetAttribute(scan_planes_kernel<G, TOK, NIBBLE>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)hist_bytes));
    const dim3 grid((nb + S::BLOCKS - 1) / S::BLOCKS, cfg->problems);
    scan_planes_kernel<G, TOK, NIBBLE><<<grid, SCAN_THREADS, hist_bytes, stream>>>(
        cfg->tokens, nb, ws->depths, queries, problems, ws->stage, ws->stage_words,
        ws->stage_scales, !fc_staged(cfg->transport), scores, tally);
    FATHOM_CUDA_LAUNCHED();
    return FATHOM_OK;
}

template <int G>
static int launch_scan(const fathom_cuda_config *cfg, const fathom_cuda_problem *problems,
                       const fc_workspace *ws, const float *queries, float *scores,
                       cudaStream_t stream) {
    const int resident = !fc_staged(cfg->transport); /* read problems[] in place */
    if (cfg->scan == FATHOM_CUDA_SCAN_LANDMARK) {
        const uint64_t rows = (cfg->tokens + FATHOM_LANDMARK_TOKENS - 1) / FATHOM_LANDMARK_TOKENS;
        uint64_t grid = (rows + 255) / 256;
        if (grid > 65535) grid = 65535;
        scan_landmarks_kernel<G><<<dim3((uint32_t)grid, cfg->problems), 256, 0, stream>>>(
            cfg->tokens, rows, queries, problems, ws->stage, ws->stage_words, resident, scores);
        FATHOM_CUDA_LAUNCHED();
        return FATHOM_OK;
    }
    if (cfg->scan == FATHOM_CUDA_SCAN_ORACLE) {
        uint64_t grid = (cfg->tokens + 7) / 8;
        if (grid > 8192) grid = 8192;
        scan_keys_kernel<G><<<dim3((uint32_t)grid, cfg->problems), 256, 0, stream>>>(
            cfg->tokens, queries, problems, ws->stage, ws->stage_words, resident, scores);
        FATHOM_CUDA_LAUNCHED();
        return FATHOM_OK;
    }
    level0_tally tally = {NULL, 0, 0};
    if (cfg->tokens > cfg->k) {
        tally.hist = ws->hist;
        tally.lo = cfg->sink;
        tally.hi = cfg->tokens - cfg->local;
    }
    const bool nibble = cfg->scan == FATHOM_CUDA_SCAN_NIBBLE4;
    /* 16 tokens a lane (G accumulators each) up to G = 4, else 8. Measured
     * for one KV head at 1M in a pipelined step, 8 tokens (twice the CTAs)
     * made the chunk's scan + top-k slower (92 -> 119 us on an H200). */
    const int TOK = G <= 4 ? 16 : 8;
    if (nibble) return launch_planes<G, TOK, true>(cfg, problems, ws, queries, scores, tally, stream);
    return launch_planes<G, TOK, false>(cfg, problems, ws, queries, scores, tally, stream);
}

int fc_scan(const fathom_cuda_config *cfg, const fathom_cuda_problem *problems,
            const fc_workspace *ws, const float *queries, float *scores, cudaStream_t stream) {
    switch (cfg->group) {
    case 1: return launch_scan<1>(cfg, problems, ws, queries, scores, stream);
    case 2: return launch_scan<2>(cfg, problems, ws, queries, scores, stream);
    case 3: return launch_scan<3>(cfg, problems, ws, queries, scores, stream);
    case 4: return launch_scan<4>(cfg, problems, ws, queries, scores, stream);
    case 5: return launch_scan<5>(cfg, problems, ws, queries, scores, stream);
    case 6: return launch_scan<6>(cfg, problems, ws, queries, scores, stream);
    case 7: return launch_scan<7>(cfg, problems, ws, queries, scores, stream);
    case 8: return launch_scan<8>(cfg, problems, ws, queries, scores, stream);
    default: return fathom_fail(FATHOM_ERR_INVALID_ARG, "group %u out of range", cfg->group);
    }
}

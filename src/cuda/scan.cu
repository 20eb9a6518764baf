/* scan — approximate scores of every token for each query head.
 *
 * Plane scan (§3.2): a channel read to depth t decodes to
 *   khat = (c_t + 0.5 - 2^(t-1)) * a / 2^(t-1),  c_t = the first t bits of c,
 * so score_h = sum_j q_hj khat_j. Rather than one multiply-add per bit and
 * head (the bit-serial sum over 2^-p terms), each thread assembles c_t from
 * the t plane bits (shift-or per bit), converts once and does one
 * multiply-add per head: per token and active channel that is 3t integer ops
 * + 1 conversion + 1 + G float ops, against 4 + G per *bit* for the literal
 * bit-serial form. khat is formed exactly in float ((c_t + 0.5 - 2^(t-1)) has
 * at most 5 significant bits, a/2^(t-1) an fp16's 11) and the per-head terms
 * are fused multiply-adds in ascending channel order, starting from 0: the
 * same operations as the CPU's AVX2+FMA kernel (fathom_store_scan), which
 * makes the scores bit-identical to it; in a partial last block that kernel
 * adds unfused products, and so does this one there.
 *
 * Mapping: a warp owns two consecutive 64-token blocks; lane l scores tokens
 * l and l+32 of each, so a plane word is one broadcast load shared by the
 * warp's 64 tokens of that block, and score stores are coalesced. */
#include "cuda_internal.cuh"


#define SCAN_WARPS 8
#define SCAN_BLOCKS_PER_WARP 2

/* The CPU kernel adds unfused products in a partial last block. */
static __device__ __forceinline__ float fma_or_not(float q, float k, float acc, bool unfused) {
    return unfused ? __fadd_rn(acc, __fmul_rn(q, k)) : fmaf(q, k, acc);
}

template <int G>
static __global__ void __launch_bounds__(SCAN_WARPS * 32)
scan_planes_kernel(uint64_t n, uint32_t nb, const uint8_t *depths, const float *queries,
                   const fathom_cuda_problem *problems, const uint64_t *stage,
                   uint64_t stage_words, const uint16_t *stage_scales, int resident,
                   float *scores) {
    __shared__ uint8_t s_chan[FC_DIM], s_t[FC_DIM];
    __shared__ float s_q[G][FC_DIM];
    __shared__ uint32_t s_warp_count[FC_DIM / 32];
    const uint32_t p = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    /* compact the active channels, ascending, with their depths and queries */
    if (tid < FC_DIM) {
        uint32_t t = depths[(size_t)p * FC_DIM + tid];
        uint32_t ballot = __ballot_sync(0xffffffffu, t > 0);
        if (lane == 0) s_warp_count[warp] = __popc(ballot);
        __syncwarp();
        (void)t;
    }
    __syncthreads();
    if (tid < FC_DIM) {
        uint32_t t = depths[(size_t)p * FC_DIM + tid];
        uint32_t ballot = __ballot_sync(0xffffffffu, t > 0);
        uint32_t pos = __popc(ballot & ((1u << lane) - 1u));
        for (uint32_t w = 0; w < warp; w++) pos += s_warp_count[w];
        if (t > 0) {
            s_chan[pos] = (uint8_t)tid;
            s_t[pos] = (uint8_t)t;
            for (int h = 0; h < G; h++) s_q[h][pos] = queries[((size_t)p * G + h) * FC_DIM + tid];
        }
    }
    __syncthreads();
    const uint32_t active = s_warp_count[0] + s_warp_count[1] + s_warp_count[2] + s_warp_count[3];
    const uint64_t *planes = resident ? problems[p].planes : stage + p * stage_words;
    const uint16_t *scales = resident ? problems[p].scales : stage_scales + (size_t)p * FC_DIM * nb;
    const uint32_t b0 = (blockIdx.x * SCAN_WARPS + warp) * SCAN_BLOCKS_PER_WARP;
    if (b0 >= nb) return;
    const bool has1 = b0 + 1 < nb;
    const uint32_t b1 = has1 ? b0 + 1 : b0;
    /* a block is partial when the context ends inside it (only the last one) */
    const bool partial0 = (uint64_t)(b0 + 1) * 64 > n, partial1 = (uint64_t)(b1 + 1) * 64 > n;
    float acc[4][G];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int h = 0; h < G; h++) acc[i][h] = 0.0f;
    for (uint32_t c = 0; c < active; c++) {
        const uint32_t j = s_chan[c], t = s_t[c];
        const uint64_t *w = planes + (size_t)j * FATHOM_PLANES * nb;
        const float unit = __int_as_float((127 + 1 - (int)t) << 23);  /* 2^-(t-1) */
        const float offset = 0.5f - (float)(1u << (t - 1));           /* 0.5 - 2^(t-1) */
        const float a0 = __half2float(__ushort_as_half(scales[(size_t)j * nb + b0])) * unit;
        const float a1 = __half2float(__ushort_as_half(scales[(size_t)j * nb + b1])) * unit;
        uint32_t c0 = 0, c1 = 0, c2 = 0, c3 = 0;
        for (uint32_t pl = 0; pl < t; pl++) {
            const uint64_t w0 = w[(size_t)pl * nb + b0], w1 = w[(size_t)pl * nb + b1];
            c0 = (c0 << 1) | (((uint32_t)w0 >> lane) & 1u);
            c1 = (c1 << 1) | (((uint32_t)(w0 >> 32) >> lane) & 1u);
            c2 = (c2 << 1) | (((uint32_t)w1 >> lane) & 1u);
            c3 = (c3 << 1) | (((uint32_t)(w1 >> 32) >> lane) & 1u);
        }
        const float k0 = ((float)c0 + offset) * a0, k1 = ((float)c1 + offset) * a0;
        const float k2 = ((float)c2 + offset) * a1, k3 = ((float)c3 + offset) * a1;
#pragma unroll
        for (int h = 0; h < G; h++) {
            const float q = s_q[h][c];
            acc[0][h] = fma_or_not(q, k0, acc[0][h], partial0);
            acc[1][h] = fma_or_not(q, k1, acc[1][h], partial0);
            acc[2][h] = fma_or_not(q, k2, acc[2][h], partial1);
            acc[3][h] = fma_or_not(q, k3, acc[3][h], partial1);
        }
    }
    const uint64_t tok[4] = {(uint64_t)b0 * 64 + lane, (uint64_t)b0 * 64 + lane + 32,
                             (uint64_t)b1 * 64 + lane, (uint64_t)b1 * 64 + lane + 32};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        if (i >= 2 && !has1) break;
        if (tok[i] >= n) continue;
#pragma unroll
        for (int h = 0; h < G; h++) scores[((size_t)p * G + h) * n + tok[i]] = acc[i][h];
    }
}

/* Dense scans. Landmarks: score of token i = q_h . mean(i / 8), one thread
 * per landmark row summing unfused float products in channel order, exactly
 * as fathom_landmarks_scan does. Oracle: q_h . k_i over bf16 keys, one warp
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
        float acc[G];
#pragma unroll
        for (int h = 0; h < G; h++) acc[h] = 0.0f;
        for (int v = 0; v < FC_DIM / 8; v++) {
            const uint4 raw = row[v];
            const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const uint16_t u = (uint16_t)(w[e / 2] >> (16 * (e & 1)));
                const float x = __half2float(__ushort_as_half(u));
#pragma unroll
                for (int h = 0; h < G; h++) acc[h] = __fadd_rn(acc[h], __fmul_rn(s_q[h][v * 8 + e], x));
            }
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

template <int G>
static int launch_scan(const fathom_cuda_config *cfg, const fathom_cuda_problem *problems,
                       const fc_workspace *ws, const float *queries, float *scores,
                       cudaStream_t stream) {
    const uint32_t nb = fc_blocks_of(cfg->tokens);
    const int resident = cfg->transport == FATHOM_CUDA_RESIDENT;
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
    const uint32_t per_cta = SCAN_WARPS * SCAN_BLOCKS_PER_WARP;
    scan_planes_kernel<G><<<dim3((nb + per_cta - 1) / per_cta, cfg->problems), SCAN_WARPS * 32, 0,
                            stream>>>(cfg->tokens, nb, ws->depths, queries, problems, ws->stage,
                                      ws->stage_words, ws->stage_scales, resident, scores);
    FATHOM_CUDA_LAUNCHED();
    return FATHOM_OK;
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

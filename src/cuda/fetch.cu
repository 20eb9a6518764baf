/* fetch + attend — the union of the group's winners, K and V rows, then
 * exact softmax attention per query head over its own winners.
 *
 * Rows move from pinned host memory with ld.global.cv (no cached copy of
 * host memory is trusted or reused), one warp per row, 16 bytes a lane. K
 * rows become float: bf16 converts exactly, and in KEYS_PLANES mode a key is
 * decoded from all four planes, (c + 0.5 - 8) * a/8, which needs up to 15
 * significant bits (more than bf16 holds). Attention accumulates in double
 * like fathom_attend. */
#include "cuda_internal.cuh"

#define FETCH_WARPS 8

static __global__ void __launch_bounds__(FETCH_WARPS * 32)
fetch_kernel(uint32_t union_cap, uint32_t nb, uint32_t stride, int planes_mode,
             const fathom_cuda_problem *problems,
             const uint32_t *uni, const uint32_t *uni_count, float *rows_k, uint16_t *rows_v) {
    const uint32_t p = blockIdx.y, lane = threadIdx.x & 31;
    const uint32_t u = blockIdx.x * FETCH_WARPS + (threadIdx.x >> 5);
    if (u >= uni_count[p]) return;
    const uint64_t idx = uni[(size_t)p * union_cap + u];
    const fathom_cuda_problem prob = problems[p];
    const size_t row = (size_t)p * union_cap + u;
    /* half-warps: lanes 0-15 move the K row, 16-31 the V row, 16 bytes each */
    const uint32_t half = lane >> 4, hl = lane & 15;
    if (half == 1) {
        const uint4 v = __ldcv((const uint4 *)(prob.values + idx * stride + hl * 8));
        *(uint4 *)(rows_v + row * FC_DIM + hl * 8) = v;
    } else if (!planes_mode) {
        const uint4 kr = __ldcv((const uint4 *)(prob.keys + idx * stride + hl * 8));
        float *dst = rows_k + row * FC_DIM + hl * 8;
        *(float4 *)dst = make_float4(__uint_as_float(kr.x << 16), __uint_as_float(kr.x & 0xffff0000u),
                                     __uint_as_float(kr.y << 16), __uint_as_float(kr.y & 0xffff0000u));
        *(float4 *)(dst + 4) = make_float4(__uint_as_float(kr.z << 16), __uint_as_float(kr.z & 0xffff0000u),
                                           __uint_as_float(kr.w << 16), __uint_as_float(kr.w & 0xffff0000u));
    }
    if (planes_mode) {
        const uint64_t b = idx >> 6;
        const uint32_t bit = (uint32_t)(idx & 63);
        float x[4];
        for (int c = 0; c < 4; c++) {
            const uint32_t j = lane * 4 + c;
            const uint64_t *w = prob.planes + (size_t)j * FATHOM_PLANES * nb + b;
            uint32_t code = 0;
            for (int pl = 0; pl < FATHOM_PLANES; pl++)
                code = (code << 1) | (uint32_t)((__ldcv((const unsigned long long *)(w + (size_t)pl * nb)) >> bit) & 1u);
            const float a = __half2float(__ushort_as_half(__ldcv((const unsigned short *)(prob.scales + (size_t)j * nb + b))));
            x[c] = ((float)code - 7.5f) * (a * 0.125f); /* exact, as fathom_store_decode at depth 4 */
        }
        *(float4 *)(rows_k + row * FC_DIM + lane * 4) = make_float4(x[0], x[1], x[2], x[3]);
    }
}

#define ATTEND_THREADS 512

static __global__ void __launch_bounds__(ATTEND_THREADS)
attend_kernel(uint32_t group, uint32_t k, const float *queries, const uint32_t *sel_count,
              const uint16_t *slot, const float *rows_k, const uint16_t *rows_v, float *out) {
    __shared__ double logit[FATHOM_CUDA_MAX_K];
    __shared__ double part[ATTEND_THREADS];
    __shared__ double s_max, s_sum;
    const uint32_t r = blockIdx.x, p = r / group, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint32_t union_cap = group * k;
    const uint32_t count = sel_count[r];
    const float *q = queries + (size_t)r * FC_DIM;
    double ql[4];
    for (int c = 0; c < 4; c++) ql[c] = (double)q[lane * 4 + c];
    const double inv_sqrt_d = 1.0 / sqrt((double)FC_DIM);
    /* (staging the slots in shared memory and unrolling these loops was
     * slower, 79 against 59 us per layer-step under ncu: kept simple) */
    for (uint32_t i = warp; i < count; i += ATTEND_THREADS / 32) {
        const float4 kv = *(const float4 *)(rows_k + ((size_t)p * union_cap + slot[(size_t)r * k + i]) * FC_DIM + lane * 4);
        double d = ql[0] * kv.x + ql[1] * kv.y + ql[2] * kv.z + ql[3] * kv.w;
        for (int off = 16; off > 0; off >>= 1) d += __shfl_xor_sync(0xffffffffu, d, off);
        if (lane == 0) logit[i] = d * inv_sqrt_d;
    }
    __syncthreads();
    double mx = -INFINITY;
    for (uint32_t i = threadIdx.x; i < count; i += ATTEND_THREADS) mx = fmax(mx, logit[i]);
    part[threadIdx.x] = mx;
    __syncthreads();
    if (threadIdx.x == 0) {
        double m = -INFINITY;
        for (int i = 0; i < ATTEND_THREADS; i++) m = fmax(m, part[i]);
        s_max = m;
    }
    __syncthreads();
    double sum = 0.0;
    for (uint32_t i = threadIdx.x; i < count; i += ATTEND_THREADS) {
        const double e = exp(logit[i] - s_max);
        logit[i] = e;
        sum += e;
    }
    part[threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        double s = 0.0;
        for (int i = 0; i < ATTEND_THREADS; i++) s += part[i];
        s_sum = s;
    }
    __syncthreads();
    /* channel c = tid % 128, a quarter of the rows each; combined in part[] */
    const uint32_t c = threadIdx.x % FC_DIM, half = threadIdx.x / FC_DIM;
    double acc = 0.0;
    for (uint32_t i = half; i < count; i += ATTEND_THREADS / FC_DIM) {
        const uint16_t v = rows_v[((size_t)p * union_cap + slot[(size_t)r * k + i]) * FC_DIM + c];
        acc += logit[i] * (double)__uint_as_float((uint32_t)v << 16);
    }
    __syncthreads();
    part[threadIdx.x] = acc;
    __syncthreads();
    if (half == 0)
        out[(size_t)r * FC_DIM + c] =
            (float)(((part[c] + part[c + FC_DIM]) + (part[c + 2 * FC_DIM] + part[c + 3 * FC_DIM])) / s_sum);
}

int fc_fetch(const fathom_cuda_config *cfg, const fathom_cuda_problem *problems,
             const fc_workspace *ws, cudaStream_t stream) {
    const uint32_t cap = cfg->group * cfg->k;
    fetch_kernel<<<dim3((cap + FETCH_WARPS - 1) / FETCH_WARPS, cfg->problems), FETCH_WARPS * 32, 0,
                   stream>>>(cap, fc_blocks_of(cfg->tokens), cfg->row_stride ? cfg->row_stride : FC_DIM,
                             cfg->key_rows == FATHOM_CUDA_KEYS_PLANES,
                             problems, ws->uni, ws->uni_count, ws->rows_k, ws->rows_v);
    FATHOM_CUDA_LAUNCHED();
    return FATHOM_OK;
}

int fc_attend(const fathom_cuda_config *cfg, const fc_workspace *ws, const float *queries,
              const uint32_t *sel_count, float *out, cudaStream_t stream) {
    attend_kernel<<<cfg->problems * cfg->group, ATTEND_THREADS, 0, stream>>>(
        cfg->group, cfg->k, queries, sel_count, ws->slot, ws->rows_k, ws->rows_v, out);
    FATHOM_CUDA_LAUNCHED();
    return FATHOM_OK;
}

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
        fc_bf16x8_to_float(__ldcv((const uint4 *)(prob.keys + idx * stride + hl * 8)),
                           rows_k + row * FC_DIM + hl * 8);
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

#define ATTEND_THREADS 1024
#define ATTEND_SPLIT (ATTEND_THREADS / 64) /* row subsets of the value sum */

/* One block per query head. Each thread owns whole rows for the logits (a
 * 128-term dot product in double from 32 independent 16-byte loads), and a
 * channel pair over a sixteenth of the rows for the value sum (coalesced
 * 4-byte loads, 8 rows in flight). The first version (a warp per row with
 * shuffles, then 4 threads per channel walking 128 rows each with 2-byte
 * loads) took 60-80 us per layer-step, all of it latency; in the pipelined
 * step every chunk pays that in its critical path. 1024 threads instead
 * of 512: 0.76 -> 0.69 ms a step (36 layers, H200). */
static __global__ void __launch_bounds__(ATTEND_THREADS)
attend_kernel(uint32_t group, uint32_t k, const float *queries, const uint32_t *sel_count,
              const uint16_t *slot, const float *rows_k, const uint16_t *rows_v, float *out) {
    __shared__ double logit[FATHOM_CUDA_MAX_K];
    __shared__ double s_part[ATTEND_THREADS / 32];
    __shared__ float s_q[FC_DIM];
    __shared__ double s_acc[ATTEND_SPLIT][FC_DIM];
    __shared__ uint16_t s_slot[FATHOM_CUDA_MAX_K];
    const uint32_t r = blockIdx.x, p = r / group;
    const uint32_t union_cap = group * k;
    const uint32_t count = sel_count[r];
    if (threadIdx.x < FC_DIM) s_q[threadIdx.x] = queries[(size_t)r * FC_DIM + threadIdx.x];
    for (uint32_t i = threadIdx.x; i < count; i += ATTEND_THREADS) s_slot[i] = slot[(size_t)r * k + i];
    __syncthreads();
    const double inv_sqrt_d = 1.0 / sqrt((double)FC_DIM);
    const float *base_k = rows_k + (size_t)p * union_cap * FC_DIM;
    double mx = -INFINITY;
    for (uint32_t i = threadIdx.x; i < count; i += ATTEND_THREADS) {
        const double l =
            fc_qk_dot<FC_DIM>(s_q, (const float4 *)(base_k + (size_t)s_slot[i] * FC_DIM)) * inv_sqrt_d;
        logit[i] = l;
        mx = fmax(mx, l);
    }
    mx = fc_block_reduce(mx, true, s_part);
    double sum = 0.0;
    for (uint32_t i = threadIdx.x; i < count; i += ATTEND_THREADS) {
        const double e = exp(logit[i] - mx);
        logit[i] = e;
        sum += e;
    }
    sum = fc_block_reduce(sum, false, s_part); /* its barriers also publish logit[] */
    const uint32_t pair = threadIdx.x % 64, part = threadIdx.x / 64;
    const uint16_t *base_v = rows_v + (size_t)p * union_cap * FC_DIM + 2 * pair;
    double a0 = 0.0, a1 = 0.0;
    uint32_t i = part;
    for (; i + 7 * ATTEND_SPLIT < count; i += 8 * ATTEND_SPLIT) {
        uint32_t v[8];
        double w[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            v[u] = *(const uint32_t *)(base_v + (size_t)s_slot[i + u * ATTEND_SPLIT] * FC_DIM);
            w[u] = logit[i + u * ATTEND_SPLIT];
        }
#pragma unroll
        for (int u = 0; u < 8; u++) {
            a0 += w[u] * (double)__uint_as_float(v[u] << 16);
            a1 += w[u] * (double)__uint_as_float(v[u] & 0xffff0000u);
        }
    }
    for (; i < count; i += ATTEND_SPLIT) {
        const uint32_t v = *(const uint32_t *)(base_v + (size_t)s_slot[i] * FC_DIM);
        a0 += logit[i] * (double)__uint_as_float(v << 16);
        a1 += logit[i] * (double)__uint_as_float(v & 0xffff0000u);
    }
    s_acc[part][2 * pair] = a0;
    s_acc[part][2 * pair + 1] = a1;
    __syncthreads();
    if (threadIdx.x < FC_DIM) {
        double t = 0.0;
        for (int q = 0; q < ATTEND_SPLIT; q++) t += s_acc[q][threadIdx.x];
        out[(size_t)r * FC_DIM + threadIdx.x] = (float)(t / sum);
    }
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

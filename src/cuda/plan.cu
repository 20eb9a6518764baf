/* plan — per-problem depths on the GPU, no host round trip (§3.3, §3.4).
 *
 * One block of FC_DIM threads per problem, thread j owns channel j.
 * Water-filling: fc_water_fill_depth (cuda_internal.cuh), shared with the
 * KV tier's plan. Double arithmetic without FMA contraction
 * (__dmul_rn/__dadd_rn) so g matches fathom_importance. */
#include "cuda_internal.cuh"

static __device__ double importance(const float *q, uint32_t group, float var, uint32_t j) {
    /* g_j = (sum_h q_hj^2) var_j in double, in fathom_importance's order */
    double q2 = 0.0;
    for (uint32_t h = 0; h < group; h++) {
        double x = (double)q[(size_t)h * FC_DIM + j];
        q2 = __dadd_rn(q2, __dmul_rn(x, x));
    }
    return __dmul_rn(q2, (double)var);
}

static __global__ void plan_water_fill_kernel(uint32_t group, uint32_t budget, const float *queries,
                                              const float *variance, uint8_t *depths) {
    const uint32_t p = blockIdx.x, j = threadIdx.x;
    const float *q = queries + (size_t)p * group * FC_DIM;
    const double g = importance(q, group, variance[(size_t)p * FC_DIM + j], j);
    depths[(size_t)p * FC_DIM + j] = (uint8_t)fc_water_fill_depth<FC_DIM>(g, budget);
}

/* sparq:r — depth 4 on the r channels with the largest sum_h |q_hj| (ties to
 * the lower channel), 0 elsewhere. */
static __global__ void plan_top_channels_kernel(uint32_t group, uint32_t r, const float *queries,
                                                uint8_t *depths) {
    __shared__ double mass[FC_DIM];
    const uint32_t p = blockIdx.x, j = threadIdx.x;
    const float *q = queries + (size_t)p * group * FC_DIM;
    double s = 0.0;
    for (uint32_t h = 0; h < group; h++) s = __dadd_rn(s, fabs((double)q[(size_t)h * FC_DIM + j]));
    mass[j] = s;
    __syncthreads();
    uint32_t rank = 0;
    for (uint32_t i = 0; i < FC_DIM; i++) rank += mass[i] > s || (mass[i] == s && i < j);
    depths[(size_t)p * FC_DIM + j] = rank < r ? FATHOM_PLANES : 0;
}

/* The caller's depths, clamped to 0..4 (device data is not validated).
 * whole: a nibble label cache of the channels whose fixed depth is nonzero
 * (a nibble is read whole: its run is 4 * nb words whatever the depth). */
static __global__ void plan_fixed_kernel(const uint8_t *fixed, bool whole, uint8_t *depths) {
    size_t i = (size_t)blockIdx.x * FC_DIM + threadIdx.x;
    const uint8_t t = fixed[i];
    depths[i] = whole ? (t ? FATHOM_PLANES : 0) : t > FATHOM_PLANES ? FATHOM_PLANES : t;
}

int fc_plan(const fathom_cuda_config *cfg, const float *queries, const float *variance,
            const uint8_t *fixed_depths, uint8_t *depths, cudaStream_t stream) {
    switch (cfg->scan) {
    case FATHOM_CUDA_SCAN_WATER_FILL:
        plan_water_fill_kernel<<<cfg->problems, FC_DIM, 0, stream>>>(cfg->group, cfg->param, queries,
                                                                     variance, depths);
        break;
    case FATHOM_CUDA_SCAN_TOP_CHANNELS:
        plan_top_channels_kernel<<<cfg->problems, FC_DIM, 0, stream>>>(cfg->group, cfg->param,
                                                                       queries, depths);
        break;
    case FATHOM_CUDA_SCAN_FIXED:
        plan_fixed_kernel<<<cfg->problems, FC_DIM, 0, stream>>>(fixed_depths, false, depths);
        break;
    case FATHOM_CUDA_SCAN_NIBBLE4: /* all 4 bits of every channel, or of the fixed ones */
        if (fixed_depths) {
            plan_fixed_kernel<<<cfg->problems, FC_DIM, 0, stream>>>(fixed_depths, true, depths);
            break;
        }
        FATHOM_CUDA_TRY(cudaMemsetAsync(depths, FATHOM_PLANES, (size_t)cfg->problems * FC_DIM, stream));
        return FATHOM_OK;
    default: return FATHOM_OK; /* landmark and oracle scans have no plan */
    }
    FATHOM_CUDA_LAUNCHED();
    return FATHOM_OK;
}

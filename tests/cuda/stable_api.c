/* Compiled, never run: a C11 program that uses only the stable CUDA API
 * (fathom_cuda.h without FATHOM_CUDA_EXPERIMENTAL) builds, and the
 * experimental names stay hidden from it. */
#include "fathom_cuda.h"

#if defined(FATHOM_CUDA_TRACE_SLOTS) || defined(FATHOM_CUDA_PHASES)
#error "experimental names visible without FATHOM_CUDA_EXPERIMENTAL"
#endif

int fathom_cuda_stable_api_example(const fathom_cuda_problem *problems, void *workspace,
                                   size_t workspace_bytes, const float *queries,
                                   const float *variance, float *out, cudaStream_t stream);

/* One water-filling step over 8 KV heads, pipelined over 2 lanes. */
int fathom_cuda_stable_api_example(const fathom_cuda_problem *problems, void *workspace,
                                   size_t workspace_bytes, const float *queries,
                                   const float *variance, float *out, cudaStream_t stream) {
    /* fields left out are zero: every experimental switch off */
    const fathom_cuda_config c = {.dim = FATHOM_CUDA_DIM, .group = 4, .problems = 8,
                                  .tokens = 1u << 20, .k = 512, .sink = FATHOM_SINK_TOKENS,
                                  .local = FATHOM_LOCAL_TOKENS, .scan = FATHOM_CUDA_SCAN_WATER_FILL,
                                  .param = 48, .transport = FATHOM_CUDA_GATHER_KERNEL};
    size_t need = 0;
    int rc = fathom_cuda_workspace_size(&c, &need);
    if (rc != FATHOM_OK) return rc;
    if (need > workspace_bytes) return FATHOM_ERR_INVALID_ARG;
    fathom_cuda_lanes *lanes = NULL;
    rc = fathom_cuda_lanes_create(2, &lanes);
    if (rc != FATHOM_OK) return rc;
    const fathom_cuda_step_args a = {.problems = problems, .queries = queries,
                                     .variance = variance, .out = out, .workspace = workspace,
                                     .workspace_bytes = workspace_bytes, .lanes = lanes};
    rc = fathom_cuda_step(&c, &a, stream);
    fathom_cuda_lanes_destroy(lanes);
    return rc;
}

int fathom_cuda_stable_tier_example(fathom_cuda_tier *tier, uint32_t session, const uint8_t *depths,
                                    cudaStream_t stream);

/* A KV-tier session's HBM cache: a tenth of a 1M-token index of 4 layers x
 * 8 heads (d = 128) for plane lines, 64 MB for rows, filled from a plan. */
int fathom_cuda_stable_tier_example(fathom_cuda_tier *tier, uint32_t session, const uint8_t *depths,
                                    cudaStream_t stream) {
    const uint64_t index = 4ull * 8 * 16384 * 128 * (4 * 8 + 2);
    const fathom_cuda_tier_cache_config c = {.plane_bytes = index / 10, .tokens = 1u << 20,
                                             .row_bytes = 64ull << 20};
    int rc = fathom_cuda_tier_cache_set(tier, session, &c);
    if (rc != FATHOM_OK) return rc;
    return fathom_cuda_tier_cache_fill(tier, session, depths, stream);
}

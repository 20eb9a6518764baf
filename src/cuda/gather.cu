/* transfer — the planned runs from pinned host memory into HBM staging (§3.6).
 *
 * The run list has a fixed shape, one slot per (problem, channel, kind), so
 * the graph never depends on the plan: kind 0 is the first t_j planes of
 * channel j (ONE contiguous run of t_j*nb*8 bytes in a whole-context
 * segment), kind 1 its nb fp16 scales; both have length 0 when t_j = 0.
 * The staging buffer mirrors the host layout, so a run lands at the same
 * offset it was read from and the scan addresses staging exactly as it
 * would the host segment.
 *
 * A previous step's prefetch may have staged the first planes of a channel
 * (and its scales): the run then starts after them.
 *
 * The kernel transport: one block per 64 KiB chunk of a run, 16-byte loads
 * (the measured ceiling for mapped host reads, HARDWARE.md), four in flight
 * per thread. The CUB transport builds the same list as pointer arrays and
 * hands it to cub::DeviceMemcpy::Batched. */
#include "cuda_internal.cuh"

#include <cub/device/device_memcpy.cuh>

#define GATHER_THREADS 256
#define GATHER_CHUNK (64u * 1024u) /* 32 and 128 KiB measured no better (RESULTS) */
/* Blocks of the gather: 33 blocks of 256 threads with 4 loads in flight
 * already read mapped host memory at the link's SM-side rate (51.3 GB/s,
 * bench_host_rows: the same for 33..1024 blocks); 128 leaves most of every
 * SM to the kernels a pipelined step runs beside the gather (1024 blocks
 * filled the SMs, so the scan of one chunk waited for the next chunk's
 * gather to finish). */
#define GATHER_GRID 128u

/* Copy len bytes; src and dst share their offset modulo 16 when the bases are
 * 16-byte aligned, so a short head and tail bracket a 16-byte body. */
static __device__ void copy_span(uint8_t *dst, const uint8_t *src, uint64_t len) {
    uint64_t head = (16u - ((uintptr_t)src & 15u)) & 15u;
    if (((uintptr_t)src & 15u) != ((uintptr_t)dst & 15u)) head = len; /* unaligned: bytewise */
    if (head > len) head = len;
    for (uint64_t i = threadIdx.x; i < head; i += blockDim.x) dst[i] = src[i];
    const uint64_t body = (len - head) / 16;
    const uint4 *s = (const uint4 *)(src + head);
    uint4 *d = (uint4 *)(dst + head);
    uint64_t i = threadIdx.x;
    for (; i + 3 * GATHER_THREADS < body; i += 4 * GATHER_THREADS) {
        uint4 a = s[i], b = s[i + GATHER_THREADS], c = s[i + 2 * GATHER_THREADS],
              e = s[i + 3 * GATHER_THREADS];
        d[i] = a;
        d[i + GATHER_THREADS] = b;
        d[i + 2 * GATHER_THREADS] = c;
        d[i + 3 * GATHER_THREADS] = e;
    }
    for (; i < body; i += GATHER_THREADS) d[i] = s[i];
    for (uint64_t k = head + body * 16 + threadIdx.x; k < len; k += blockDim.x) dst[k] = src[k];
}

/* A grid-stride loop over the fixed run list, flattened as (problem,
 * channel*2 + kind, chunk): a bounded grid leaves room on every SM for the
 * kernels of other streams (a sliced step scans one group of heads while
 * another's runs cross the link); a grid of one block per chunk filled the
 * SMs with blocks waiting on host reads. */
static __global__ void __launch_bounds__(GATHER_THREADS)
gather_planes_kernel(uint32_t problems_n, uint32_t nb, uint32_t chunks, const uint8_t *depths,
                     const fathom_cuda_problem *problems, uint64_t *stage, uint64_t stage_words,
                     uint16_t *stage_scales, const uint8_t *staged, uint32_t staged_count) {
    const uint64_t total = (uint64_t)problems_n * FC_DIM * 2 * chunks;
    for (uint64_t w = blockIdx.x; w < total; w += gridDim.x) {
        const uint32_t chunk = (uint32_t)(w % chunks);
        const uint64_t run = w / chunks;
        const uint32_t p = (uint32_t)(run / (FC_DIM * 2)), j = (uint32_t)(run % (FC_DIM * 2)) >> 1,
                       kind = (uint32_t)(run & 1);
        uint32_t t = depths[(size_t)p * FC_DIM + j];
        t = t < FATHOM_PLANES ? t : FATHOM_PLANES;
        /* planes [0, from) and, if from > 0, the scales are staged already */
        uint32_t from = p < staged_count ? staged[(size_t)p * FC_DIM + j] : 0;
        from = from < FATHOM_PLANES ? from : FATHOM_PLANES;
        if (t == 0 || (kind == 0 && t <= from) || (kind == 1 && from > 0)) continue;
        const uint8_t *src;
        uint8_t *dst;
        uint64_t len;
        if (kind == 0) {
            const size_t at = ((size_t)j * FATHOM_PLANES + from) * nb; /* words */
            src = (const uint8_t *)(problems[p].planes + at);
            dst = (uint8_t *)(stage + p * stage_words + at);
            len = (uint64_t)(t - from) * nb * 8;
        } else {
            src = (const uint8_t *)(problems[p].scales + (size_t)j * nb);
            dst = (uint8_t *)(stage_scales + ((size_t)p * FC_DIM + j) * nb);
            len = (uint64_t)nb * 2;
        }
        const uint64_t first = (uint64_t)chunk * GATHER_CHUNK;
        if (first >= len) continue;
        const uint64_t n = len - first < GATHER_CHUNK ? len - first : GATHER_CHUNK;
        copy_span(dst + first, src + first, n);
    }
}

/* One dense run per problem (landmarks or bf16 keys); grid: x = chunk, y = problem. */
static __global__ void __launch_bounds__(GATHER_THREADS)
gather_dense_kernel(int landmarks, uint64_t len, const fathom_cuda_problem *problems,
                    uint64_t *stage, uint64_t stage_words) {
    const uint32_t p = blockIdx.y;
    const uint8_t *src = (const uint8_t *)(landmarks ? problems[p].landmarks : problems[p].keys);
    uint8_t *dst = (uint8_t *)(stage + p * stage_words);
    for (uint64_t first = (uint64_t)blockIdx.x * GATHER_CHUNK; first < len;
         first += (uint64_t)gridDim.x * GATHER_CHUNK) {
        const uint64_t n = len - first < GATHER_CHUNK ? len - first : GATHER_CHUNK;
        copy_span(dst + first, src + first, n);
        __syncthreads();
    }
}

/* The same run list as pointer arrays for cub::DeviceMemcpy::Batched. */
static __global__ void build_runs_kernel(uint32_t nb, const uint8_t *depths,
                                         const fathom_cuda_problem *problems, uint64_t *stage,
                                         uint64_t stage_words, uint16_t *stage_scales,
                                         const void **src, void **dst, size_t *size) {
    const uint32_t p = blockIdx.x, j = threadIdx.x;
    const uint32_t t = depths[(size_t)p * FC_DIM + j];
    const size_t slot = ((size_t)p * FC_DIM + j) * 2;
    src[slot] = problems[p].planes + (size_t)j * FATHOM_PLANES * nb;
    dst[slot] = stage + p * stage_words + (size_t)j * FATHOM_PLANES * nb;
    size[slot] = (size_t)t * nb * 8;
    src[slot + 1] = problems[p].scales + (size_t)j * nb;
    dst[slot + 1] = stage_scales + ((size_t)p * FC_DIM + j) * nb;
    size[slot + 1] = t ? (size_t)nb * 2 : 0;
}

int fc_gather(const fathom_cuda_config *cfg, const fathom_cuda_problem *problems,
              const fc_workspace *ws, const uint8_t *staged, uint32_t staged_count,
              cudaStream_t stream) {
    if (!fc_staged(cfg->transport)) return FATHOM_OK; /* resident or direct: scanned in place */
    const uint32_t nb = fc_blocks_of(cfg->tokens);
    if (cfg->scan == FATHOM_CUDA_SCAN_LANDMARK || cfg->scan == FATHOM_CUDA_SCAN_ORACLE) {
        const int lm = cfg->scan == FATHOM_CUDA_SCAN_LANDMARK;
        const uint64_t rows = lm ? (cfg->tokens + FATHOM_LANDMARK_TOKENS - 1) / FATHOM_LANDMARK_TOKENS
                                 : cfg->tokens;
        const uint64_t len = rows * FC_DIM * 2;
        uint64_t chunks = (len + GATHER_CHUNK - 1) / GATHER_CHUNK;
        const uint64_t cap = (GATHER_GRID + cfg->problems - 1) / cfg->problems;
        if (chunks > cap) chunks = cap;
        gather_dense_kernel<<<dim3((uint32_t)chunks, cfg->problems), GATHER_THREADS, 0, stream>>>(
            lm, len, problems, ws->stage, ws->stage_words);
        FATHOM_CUDA_LAUNCHED();
        return FATHOM_OK;
    }
    if (cfg->transport == FATHOM_CUDA_GATHER_CUB) {
        build_runs_kernel<<<cfg->problems, FC_DIM, 0, stream>>>(nb, ws->depths, problems, ws->stage,
                                                                 ws->stage_words, ws->stage_scales,
                                                                 ws->run_src, ws->run_dst,
                                                                 ws->run_size);
        FATHOM_CUDA_LAUNCHED();
        size_t temp = ws->cub_temp_bytes;
        FATHOM_CUDA_TRY(cub::DeviceMemcpy::Batched(ws->cub_temp, temp, ws->run_src, ws->run_dst,
                                                   ws->run_size,
                                                   (uint32_t)((size_t)cfg->problems * FC_DIM * 2),
                                                   stream));
        return FATHOM_OK;
    }
    const uint64_t max_run = (uint64_t)FATHOM_PLANES * nb * 8;
    const uint32_t chunks = (uint32_t)((max_run + GATHER_CHUNK - 1) / GATHER_CHUNK);
    const uint64_t items = (uint64_t)cfg->problems * FC_DIM * 2 * chunks;
    const uint32_t grid = (uint32_t)(items < GATHER_GRID ? items : GATHER_GRID);
    gather_planes_kernel<<<grid, GATHER_THREADS, 0, stream>>>(cfg->problems, nb, chunks, ws->depths,
                                                               problems, ws->stage, ws->stage_words,
                                                               ws->stage_scales, staged,
                                                               staged ? staged_count : 0);
    FATHOM_CUDA_LAUNCHED();
    return FATHOM_OK;
}

/* Temporary bytes cub::DeviceMemcpy::Batched needs for `runs` buffers. */
extern "C++" size_t fc_cub_temp_bytes(uint32_t runs) {
    size_t bytes = 0;
    if (cub::DeviceMemcpy::Batched(NULL, bytes, (const void **)NULL, (void **)NULL,
                                   (const size_t *)NULL, runs, (cudaStream_t)0) != cudaSuccess)
        return 0;
    return bytes;
}

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
 * The kernel transport: a fixed grid, each block an equal share of the
 * planned bytes, 16-byte loads (the widest a thread issues; they read
 * mapped host memory at ~51 GB/s over an H200's Gen5 x16 link,
 * bench_host_rows), four in flight per thread; behind another gather on
 * the same stream it starts as that one's last loads are issued.
 * cub::DeviceMemcpy::Batched over the same run list measured no faster
 * (docs/results.md). */
#include "cuda_internal.cuh"

#include <cub/block/block_scan.cuh>

#define GATHER_THREADS 256
#define GATHER_CHUNK (64u * 1024u) /* a dense run's unit; 32 and 128 KiB measured no better */
/* Blocks of the plane gather, each with an equal share of the bytes: 33
 * blocks of 256 threads with 4 loads in flight already read mapped host
 * memory at the link's SM-side rate (51.3 GB/s on an H200, bench_host_rows),
 * and every block more holds an SM the scans of a pipelined step need (at
 * 1M, 128 busy blocks stretched the tail of a layer from 155 to 235 us; 32
 * gave the shortest step of 16-128). */
#define GATHER_GRID 32u
#define GATHER_LOADS 4 /* 16-byte loads in flight per thread */
/* Bytes of a block's share still to load when the next gather on the stream
 * may launch (at most a quarter of the share). Before another chunk's
 * gather (GATHER_EARLY): three rounds of the copy loop (256 threads x 4 x
 * 16 B each), so the next head's bytes start while this one's last ones are
 * in flight (a 1M step with prefetch 1.1 % faster than with one round; 32,
 * 64 and 96 KiB no better). Before the next layer's prefetch
 * (GATHER_EARLY_LAST): one round; a prefetch started earlier takes the link
 * from the last head, whose scan the layer's tail waits for (32 KiB for
 * both: 0.2 % slower with prefetch). Much earlier still lets the launches
 * chain until every chunk's gather shares the link and no chunk's bytes
 * arrive before the end (35 % slower). */
#define GATHER_EARLY (48u * 1024u)
#define GATHER_EARLY_LAST (16u * 1024u)
/* landmark and bf16-key runs: a grid-stride over 64 KiB chunks (1024 blocks
 * filled the SMs, so the scan of one chunk waited for the next chunk's gather) */
#define GATHER_DENSE_GRID 128u

/* Let the next kernel on the stream launch (a no-op without programmatic
 * dependent launch). */
static __device__ __forceinline__ void launch_next(void) {
    asm volatile("griddepcontrol.launch_dependents;");
}

/* Copy len bytes; src and dst share their offset modulo 16 when the bases are
 * 16-byte aligned, so a short head and tail bracket a 16-byte body. Once the
 * loads reach byte `early` of the span, the next gather may launch. */
static __device__ void copy_span(uint8_t *dst, const uint8_t *src, uint64_t len,
                                 uint64_t early = UINT64_MAX) {
    uint64_t head = (16u - ((uintptr_t)src & 15u)) & 15u;
    if (((uintptr_t)src & 15u) != ((uintptr_t)dst & 15u)) head = len; /* unaligned: bytewise */
    if (head > len) head = len;
    for (uint64_t i = threadIdx.x; i < head; i += blockDim.x) dst[i] = src[i];
    const uint64_t body = (len - head) / 16;
    const uint4 *s = (const uint4 *)(src + head);
    uint4 *d = (uint4 *)(dst + head);
    uint64_t i = threadIdx.x;
    for (; i + (GATHER_LOADS - 1) * GATHER_THREADS < body; i += GATHER_LOADS * GATHER_THREADS) {
        if (head + (i - threadIdx.x) * 16 >= early) launch_next();
        uint4 v[GATHER_LOADS];
#pragma unroll
        for (int u = 0; u < GATHER_LOADS; u++) v[u] = s[i + u * GATHER_THREADS];
#pragma unroll
        for (int u = 0; u < GATHER_LOADS; u++) d[i + u * GATHER_THREADS] = v[u];
    }
    for (; i < body; i += GATHER_THREADS) d[i] = s[i];
    for (uint64_t k = head + body * 16 + threadIdx.x; k < len; k += blockDim.x) dst[k] = src[k];
}

/* Slot s of the fixed run list (problem, channel, kind): its length in bytes
 * and, if nonzero, where it is read from and written to. */
static __device__ uint64_t plane_run(uint32_t s, uint32_t nb, const uint8_t *depths,
                                     const fathom_cuda_problem *problems, uint64_t *stage,
                                     uint64_t stage_words, uint16_t *stage_scales,
                                     const uint8_t *staged, uint32_t staged_count,
                                     const uint8_t **src, uint8_t **dst) {
    const uint32_t p = s / (FC_DIM * 2), j = (s % (FC_DIM * 2)) >> 1, kind = s & 1;
    uint32_t t = depths[(size_t)p * FC_DIM + j];
    t = t < FATHOM_PLANES ? t : FATHOM_PLANES;
    /* planes [0, from) and, if from > 0, the scales are staged already */
    uint32_t from = p < staged_count ? staged[(size_t)p * FC_DIM + j] : 0;
    from = from < FATHOM_PLANES ? from : FATHOM_PLANES;
    if (t == 0 || (kind == 0 && t <= from) || (kind == 1 && from > 0)) return 0;
    if (kind == 0) {
        const size_t at = ((size_t)j * FATHOM_PLANES + from) * nb; /* words */
        *src = (const uint8_t *)(problems[p].planes + at);
        *dst = (uint8_t *)(stage + p * stage_words + at);
        return (uint64_t)(t - from) * nb * 8;
    }
    *src = (const uint8_t *)(problems[p].scales + (size_t)j * nb);
    *dst = (uint8_t *)(stage_scales + ((size_t)p * FC_DIM + j) * nb);
    return (uint64_t)nb * 2;
}

/* Every block copies an equal share of the planned bytes: the runs laid end
 * to end, block b takes bytes [b*L/G, (b+1)*L/G) of them. Each block finds
 * its runs itself (a scan over the slots' lengths, 256 at a time), so the
 * graph needs no extra launch. Equal shares because a pipelined step gathers
 * one head (~7 MB at 1M) per launch: a grid-stride over fixed-size chunks of
 * the slots left most blocks idle (chunks past a short run are empty) and
 * the launch's last chunks ran with the link half used. */
static __global__ void __launch_bounds__(GATHER_THREADS)
gather_planes_kernel(uint32_t problems_n, uint32_t nb, const uint8_t *depths,
                     const fathom_cuda_problem *problems, uint64_t *stage, uint64_t stage_words,
                     uint16_t *stage_scales, const uint8_t *staged, uint32_t staged_count,
                     uint32_t early_bytes) {
    typedef cub::BlockScan<unsigned long long, GATHER_THREADS> scan_t;
    __shared__ typename scan_t::TempStorage scan_tmp;
    __shared__ unsigned long long total_sh;
    __shared__ uint32_t hits_n;
    __shared__ uint32_t hit_slot[GATHER_THREADS];
    __shared__ unsigned long long hit_from[GATHER_THREADS], hit_len[GATHER_THREADS];
    const uint32_t slots = problems_n * FC_DIM * 2;
    const uint8_t *src;
    uint8_t *dst;

    unsigned long long mine = 0;
    for (uint32_t s = threadIdx.x; s < slots; s += GATHER_THREADS)
        mine += plane_run(s, nb, depths, problems, stage, stage_words, stage_scales, staged,
                          staged_count, &src, &dst);
    unsigned long long total; /* the block-wide sum; the per-thread prefix is not needed */
    scan_t(scan_tmp).ExclusiveSum(mine, mine, total);
    if (threadIdx.x == 0) total_sh = total;
    __syncthreads();
    total = total_sh;
    /* exact in 64 bits: a step plans < 2^40 bytes and the grid is far below 2^24 blocks */
    const unsigned long long lo = total * blockIdx.x / gridDim.x,
                             hi = total * (blockIdx.x + 1) / gridDim.x;
    /* the next gather may launch once early_bytes, and at most a quarter,
     * of the share are left (at 256k tokens a block's share of one head is
     * ~56 KiB: with 48 KiB left the launches chain) */
    const unsigned long long left = early_bytes < (hi - lo) / 4 ? early_bytes : (hi - lo) / 4,
                             early = hi - lo - left;
    unsigned long long base = 0, done = 0;
    if (early == 0) launch_next();
    for (uint32_t tile = 0; tile < slots && base < hi; tile += GATHER_THREADS) {
        const uint32_t s = tile + threadIdx.x;
        const unsigned long long len =
            s < slots ? plane_run(s, nb, depths, problems, stage, stage_words, stage_scales,
                                  staged, staged_count, &src, &dst)
                      : 0;
        unsigned long long start, tile_bytes;
        __syncthreads(); /* scan_tmp and the hit list of the previous tile are free */
        if (threadIdx.x == 0) hits_n = 0;
        scan_t(scan_tmp).ExclusiveSum(len, start, tile_bytes);
        start += base;
        __syncthreads();
        const unsigned long long a = start > lo ? start : lo,
                                 e = start + len < hi ? start + len : hi;
        if (len && a < e) {
            const uint32_t h = atomicAdd(&hits_n, 1u);
            hit_slot[h] = s;
            hit_from[h] = a - start;
            hit_len[h] = e - a;
        }
        __syncthreads();
        for (uint32_t h = 0; h < hits_n; h++) {
            plane_run(hit_slot[h], nb, depths, problems, stage, stage_words, stage_scales, staged,
                      staged_count, &src, &dst);
            copy_span(dst + hit_from[h], src + hit_from[h], hit_len[h],
                      done + hit_len[h] > early ? (early > done ? early - done : 0) : UINT64_MAX);
            done += hit_len[h];
        }
        base += tile_bytes;
    }
    launch_next();
    /* finish only after the gather before this one: whatever waits on this
     * gather may assume every earlier one is in staging too */
    asm volatile("griddepcontrol.wait;" ::: "memory");
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

int fc_gather(const fathom_cuda_config *cfg, const fathom_cuda_problem *problems,
              const fc_workspace *ws, const uint8_t *staged, uint32_t staged_count,
              bool behind, bool chunk_follows, cudaStream_t stream) {
    if (!fc_staged(cfg->transport)) return FATHOM_OK; /* resident or direct: scanned in place */
    const uint32_t nb = fc_blocks_of(cfg->tokens);
    if (cfg->scan == FATHOM_CUDA_SCAN_LANDMARK || cfg->scan == FATHOM_CUDA_SCAN_ORACLE) {
        const int lm = cfg->scan == FATHOM_CUDA_SCAN_LANDMARK;
        const uint64_t rows = lm ? (cfg->tokens + FATHOM_LANDMARK_TOKENS - 1) / FATHOM_LANDMARK_TOKENS
                                 : cfg->tokens;
        const uint64_t len = rows * FC_DIM * 2;
        uint64_t chunks = (len + GATHER_CHUNK - 1) / GATHER_CHUNK;
        const uint64_t cap = (GATHER_DENSE_GRID + cfg->problems - 1) / cfg->problems;
        if (chunks > cap) chunks = cap;
        gather_dense_kernel<<<dim3((uint32_t)chunks, cfg->problems), GATHER_THREADS, 0, stream>>>(
            lm, len, problems, ws->stage, ws->stage_words);
        FATHOM_CUDA_LAUNCHED();
        return FATHOM_OK;
    }
    /* Behind another gather (the chunks of a pipelined step, back to back on
     * the link stream) this one launches while that one's last bytes are in
     * flight, so the link does not drain between them. */
    cudaLaunchAttribute overlap;
    overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    overlap.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t launch = {};
    launch.gridDim = dim3(GATHER_GRID);
    launch.blockDim = dim3(GATHER_THREADS);
    launch.stream = stream;
    launch.attrs = &overlap;
    launch.numAttrs = behind ? 1 : 0;
    FATHOM_CUDA_TRY(cudaLaunchKernelEx(&launch, gather_planes_kernel, cfg->problems, nb,
                                       (const uint8_t *)ws->depths, problems, ws->stage,
                                       ws->stage_words, ws->stage_scales, staged,
                                       staged ? staged_count : 0u,
                                       chunk_follows ? GATHER_EARLY : GATHER_EARLY_LAST));
    FATHOM_CUDA_LAUNCHED();
    return FATHOM_OK;
}

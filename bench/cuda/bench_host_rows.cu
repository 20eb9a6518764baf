/* bench_host_rows — what makes scattered K/V row reads from host memory
 * slow, and which host allocation fixes it.
 *
 * The offload step fetches the union of each KV head's winners: ~1-2k rows
 * of 512 bytes (K and V interleaved) scattered over the head's whole
 * context. At 32k tokens those reads reach the link rate; at 1M they run at
 * a third of it for the same bytes (measured on an H200). This program reads
 * sorted random 512-byte rows from spans of 8 MiB .. 8 GiB of host memory
 * allocated four ways and prints GB/s, so the cause (page translation) and
 * the cure (larger pages) are measured side by side:
 *   hostalloc   cudaHostAlloc(mapped): the driver's pages
 *   register    posix_memalign + madvise(MADV_HUGEPAGE) + cudaHostRegister
 *   hugetlb     mmap(MAP_HUGETLB) + cudaHostRegister (when the kernel has 2 MiB pages)
 *   vmm         cuMemCreate(CU_MEM_LOCATION_TYPE_HOST_NUMA) mapped with the
 *               allocation granularity the driver reports
 * Also: a linear read per allocation (the link), the linear read with grids
 * of 33..1024 blocks (how few SMs saturate the link), with an L2 256-byte
 * fetch hint and by cp.async.bulk (the TMA), and a linear read and a row
 * fetch running together on two streams.
 * Usage: bench_host_rows [GiB per allocation, 8] [kinds, 4]
 */
#include <algorithm>
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <vector>

#include "cuda/cuda_check.cuh"

#define DK(call)                                                                                   \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            const char *s_ = "?";                                                                  \
            cuGetErrorName(r_, &s_);                                                               \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, s_);                     \
            ok = false;                                                                            \
        }                                                                                          \
    } while (0)

#define ROW 512
#define ROWS_PER_CALL 16384

static __global__ void fill_kernel(uint4 *p, uint64_t n16, uint32_t seed) {
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n16; i += (uint64_t)gridDim.x * blockDim.x) {
        uint32_t x = (uint32_t)i * 2654435761u ^ seed;
        p[i] = make_uint4(x, x * 3u, x * 5u, x * 7u);
    }
}

/* one warp per 512-byte row, 16 bytes a lane, ld.global.cv as the step's fetch */
static __global__ void rows_kernel(const uint8_t *base, const uint64_t *idx, uint32_t rows, uint4 *dst) {
    const uint32_t w = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (w >= rows) return;
    const uint4 v = __ldcv((const uint4 *)(base + idx[w] * ROW) + lane);
    dst[(size_t)w * 32 + lane] = v;
}

static __global__ void linear_kernel(const uint4 *src, uint64_t n16, uint4 *dst, uint64_t dst16) {
    uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
    const uint64_t step = (uint64_t)gridDim.x * blockDim.x;
    for (; i + 3 * step < n16; i += 4 * step) {
        uint4 a = __ldcv(src + i), b = __ldcv(src + i + step), c = __ldcv(src + i + 2 * step), d = __ldcv(src + i + 3 * step);
        dst[i % dst16] = a; dst[(i + step) % dst16] = b; dst[(i + 2 * step) % dst16] = c; dst[(i + 3 * step) % dst16] = d;
    }
    for (; i < n16; i += step) dst[i % dst16] = __ldcv(src + i);
}

/* the same read with the L2 told to fetch 256-byte lines */
static __device__ __forceinline__ uint4 ld_l2_256(const uint4 *p) {
    uint4 v;
    asm volatile("ld.global.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

static __global__ void linear_hint_kernel(const uint4 *src, uint64_t n16, uint4 *dst, uint64_t dst16) {
    uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
    const uint64_t step = (uint64_t)gridDim.x * blockDim.x;
    for (; i + 3 * step < n16; i += 4 * step) {
        uint4 a = ld_l2_256(src + i), b = ld_l2_256(src + i + step), c = ld_l2_256(src + i + 2 * step),
              d = ld_l2_256(src + i + 3 * step);
        dst[i % dst16] = a; dst[(i + step) % dst16] = b; dst[(i + 2 * step) % dst16] = c; dst[(i + 3 * step) % dst16] = d;
    }
    for (; i < n16; i += step) dst[i % dst16] = ld_l2_256(src + i);
}

/* the tensor memory accelerator: cp.async.bulk of BULK bytes into shared
 * memory, STAGES in flight per block, completion on an mbarrier */
#define BULK 8192u
#define STAGES 4
static __device__ __forceinline__ void bulk_issue(uint32_t bar, uint32_t dst, const void *src) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(BULK) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(dst), "l"(src), "r"(BULK), "r"(bar) : "memory");
}
static __device__ __forceinline__ void bulk_wait(uint32_t bar, uint32_t phase) {
    uint32_t done = 0;
    while (!done)
        asm volatile("{ .reg .pred P; mbarrier.try_wait.parity.shared::cta.b64 P, [%1], %2; selp.b32 %0, 1, 0, P; }"
                     : "=r"(done) : "r"(bar), "r"(phase) : "memory");
}
static __global__ void __launch_bounds__(128) linear_bulk_kernel(const uint8_t *src, uint64_t bytes, uint64_t *sink) {
    __shared__ __align__(128) uint8_t buf[STAGES][BULK];
    __shared__ __align__(8) uint64_t bar[STAGES];
    const uint64_t chunks = bytes / BULK;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"((uint32_t)__cvta_generic_to_shared(&bar[s])));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    for (int s = 0; s < STAGES; s++) {
        const uint64_t c = blockIdx.x + (uint64_t)s * gridDim.x;
        if (threadIdx.x == 0 && c < chunks)
            bulk_issue((uint32_t)__cvta_generic_to_shared(&bar[s]), (uint32_t)__cvta_generic_to_shared(buf[s]), src + c * BULK);
    }
    uint64_t acc = 0;
    uint32_t phase = 0;
    for (uint64_t it = 0;; it++) {
        const uint64_t c = blockIdx.x + it * gridDim.x;
        if (c >= chunks) break;
        const int s = (int)(it % STAGES);
        bulk_wait((uint32_t)__cvta_generic_to_shared(&bar[s]), (phase >> s) & 1u);
        phase ^= 1u << s;
        acc += ((const uint64_t *)buf[s])[threadIdx.x];
        __syncthreads();
        const uint64_t cn = c + (uint64_t)STAGES * gridDim.x;
        if (threadIdx.x == 0 && cn < chunks)
            bulk_issue((uint32_t)__cvta_generic_to_shared(&bar[s]), (uint32_t)__cvta_generic_to_shared(buf[s]), src + cn * BULK);
    }
    if (acc == 0x5eed) *sink = acc; /* keeps the loads */
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static long meminfo_kb(const char *key) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, strlen(key))) { v = atol(line + strlen(key)); break; }
    fclose(f);
    return v;
}

typedef struct alloc { const char *name; uint8_t *dev; void *host; size_t bytes; int kind; CUdeviceptr va; CUmemGenericAllocationHandle h; } alloc;

static bool make_alloc(alloc *a, int kind, size_t bytes) {
    bool ok = true;
    memset(a, 0, sizeof *a);
    a->kind = kind;
    a->bytes = bytes;
    const long huge0 = meminfo_kb("AnonHugePages:");
    switch (kind) {
    case 0:
        a->name = "hostalloc";
        CK(cudaHostAlloc(&a->host, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
        CK(cudaHostGetDevicePointer((void **)&a->dev, a->host, 0));
        break;
    case 1:
        a->name = "register";
        if (posix_memalign(&a->host, 2u << 20, bytes)) return false;
        madvise(a->host, bytes, MADV_HUGEPAGE);
        memset(a->host, 1, bytes);
        printf("   register: AnonHugePages grew by %ld MiB of %zu MiB\n",
               (meminfo_kb("AnonHugePages:") - huge0) / 1024, bytes >> 20);
        CK(cudaHostRegister(a->host, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable));
        CK(cudaHostGetDevicePointer((void **)&a->dev, a->host, 0));
        break;
    case 2: {
        a->name = "hugetlb";
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
        if (p == MAP_FAILED) { printf("   hugetlb: mmap(MAP_HUGETLB) failed (HugePages_Total %ld)\n", meminfo_kb("HugePages_Total:")); return false; }
        a->host = p;
        memset(p, 1, bytes);
        if (cudaHostRegister(p, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable) != cudaSuccess) {
            printf("   hugetlb: cudaHostRegister failed\n");
            (void)cudaGetLastError();
            munmap(p, bytes);
            return false;
        }
        CK(cudaHostGetDevicePointer((void **)&a->dev, a->host, 0));
        break;
    }
    case 3: {
        a->name = "vmm";
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof prop);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
        prop.location.id = 0;
        size_t gmin = 0, grec = 0;
        DK(cuMemGetAllocationGranularity(&gmin, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
        DK(cuMemGetAllocationGranularity(&grec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
        if (!ok) return false;
        printf("   vmm: host-NUMA granularity min %zu KiB, recommended %zu KiB\n", gmin >> 10, grec >> 10);
        const size_t g = std::max(grec, (size_t)2 << 20);
        bytes = (bytes + g - 1) / g * g;
        a->bytes = bytes;
        DK(cuMemCreate(&a->h, bytes, &prop, 0));
        if (!ok) return false;
        DK(cuMemAddressReserve(&a->va, bytes, g, 0, 0));
        DK(cuMemMap(a->va, bytes, 0, a->h, 0));
        CUmemAccessDesc acc[2];
        memset(acc, 0, sizeof acc);
        acc[0].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        acc[0].location.id = 0;
        acc[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        DK(cuMemSetAccess(a->va, bytes, acc, 1));
        if (!ok) return false;
        a->dev = (uint8_t *)a->va;
        break;
    }
    }
    fill_kernel<<<1024, 256>>>((uint4 *)a->dev, a->bytes / 16, 0x1234u + kind);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    return true;
}

static void free_alloc(alloc *a) {
    bool ok = true;
    switch (a->kind) {
    case 0: CK(cudaFreeHost(a->host)); break;
    case 1: CK(cudaHostUnregister(a->host)); free(a->host); break;
    case 2: CK(cudaHostUnregister(a->host)); munmap(a->host, a->bytes); break;
    case 3: DK(cuMemUnmap(a->va, a->bytes)); DK(cuMemAddressFree(a->va, a->bytes)); DK(cuMemRelease(a->h)); break;
    }
    if (!ok) fprintf(stderr, "freeing %s failed\n", a->name);
}

/* Milliseconds of the work `launch` enqueues on s; it gets the start event,
 * so it may fork other streams from it (and must join them back into s). */
template <typename F>
static float time_ms(cudaStream_t s, F launch) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0, s));
    launch(e0);
    CK(cudaGetLastError());
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return ms;
}

/* GB/s of `calls` back-to-back launches of ROWS_PER_CALL sorted random rows in [0, span) */
static double rows_rate(const alloc *a, size_t span, uint64_t *d_idx, uint4 *d_dst, cudaStream_t s, int calls, uint64_t seed) {
    const uint64_t nrows = span / ROW;
    std::vector<uint64_t> idx((size_t)calls * ROWS_PER_CALL);
    for (int c = 0; c < calls; c++) {
        uint64_t *v = idx.data() + (size_t)c * ROWS_PER_CALL;
        for (int i = 0; i < ROWS_PER_CALL; i++) v[i] = splitmix(&seed) % nrows;
        std::sort(v, v + ROWS_PER_CALL);
    }
    CK(cudaMemcpy(d_idx, idx.data(), idx.size() * 8, cudaMemcpyHostToDevice));
    const float ms = time_ms(s, [&](cudaEvent_t) {
        for (int c = 0; c < calls; c++)
            rows_kernel<<<ROWS_PER_CALL / 8, 256, 0, s>>>(a->dev, d_idx + (size_t)c * ROWS_PER_CALL, ROWS_PER_CALL, d_dst);
    });
    return (double)calls * ROWS_PER_CALL * ROW / (ms * 1e-3) / 1e9;
}

static double linear_rate(const alloc *a, size_t bytes, int grid, uint4 *d_dst, uint64_t dst16, cudaStream_t s, float *ms_out) {
    const float ms = time_ms(s, [&](cudaEvent_t) {
        linear_kernel<<<grid, 256, 0, s>>>((const uint4 *)a->dev, bytes / 16, d_dst, dst16);
    });
    if (ms_out) *ms_out = ms;
    return bytes / (ms * 1e-3) / 1e9;
}

int main(int argc, char **argv) {
    size_t bytes = (size_t)8 << 30;
    int kinds = 4; /* argv[2]: only the first kinds (hostalloc first) */
    if (argc > 1) bytes = (size_t)(atof(argv[1]) * (double)(1u << 30));
    if (argc > 2) kinds = atoi(argv[2]);
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) { printf("no CUDA device\n"); return 77; }
    CK(cudaSetDevice(0));
    CK(cudaFree(0));
    {
        FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
        char buf[128] = "?";
        if (f) { if (!fgets(buf, sizeof buf, f)) strcpy(buf, "?"); fclose(f); }
        printf("THP enabled: %sHugePages_Total %ld, Hugepagesize %ld kB\n", buf, meminfo_kb("HugePages_Total:"), meminfo_kb("Hugepagesize:"));
    }
    const int calls = 8;
    uint64_t *d_idx;
    uint4 *d_dst;
    const uint64_t dst16 = (64ull << 20) / 16;
    CK(cudaMalloc(&d_idx, (size_t)calls * ROWS_PER_CALL * 8));
    CK(cudaMalloc(&d_dst, dst16 * 16));
    cudaStream_t s0, s1;
    CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    const size_t spans[] = {(size_t)8 << 20, (size_t)64 << 20, (size_t)256 << 20, (size_t)1 << 30, (size_t)4 << 30, (size_t)8 << 30};
    printf("\nsorted random 512-byte rows (%d x %d per span), GB/s; linear read of 2 GiB, GB/s\n", calls, ROWS_PER_CALL);
    printf("%-10s", "alloc");
    for (size_t sp : spans) if (sp <= bytes) printf(" %8zuM", sp >> 20);
    printf(" %9s\n", "linear");
    for (int kind = 0; kind < kinds && kind < 4; kind++) {
        alloc a;
        if (!make_alloc(&a, kind, bytes)) { printf("%-10s unavailable\n", kind == 2 ? "hugetlb" : kind == 3 ? "vmm" : "?"); continue; }
        rows_rate(&a, (size_t)8 << 20, d_idx, d_dst, s0, 2, 99); /* warm */
        printf("%-10s", a.name);
        for (size_t sp : spans) if (sp <= bytes) printf(" %9.1f", rows_rate(&a, sp, d_idx, d_dst, s0, calls, sp ^ 7));
        printf(" %9.1f\n", linear_rate(&a, (size_t)2 << 30, 1024, d_dst, dst16, s0, NULL));
        fflush(stdout);
        if (kind == 0) {
            printf("   linear read of 2 GiB by grid size (256 threads):");
            for (int g : {33, 66, 132, 264, 528, 1024}) printf(" %d: %.1f", g, linear_rate(&a, (size_t)2 << 30, g, d_dst, dst16, s0, NULL));
            printf(" GB/s\n");
            {
                /* the same 2 GiB with an L2 256-byte fetch hint, and by cp.async.bulk (second of two) */
                float ms_hint = 0, ms_bulk = 0;
                for (int rep = 0; rep < 2; rep++) {
                    ms_hint = time_ms(s0, [&](cudaEvent_t) {
                        linear_hint_kernel<<<132, 256, 0, s0>>>((const uint4 *)a.dev, ((size_t)2 << 30) / 16, d_dst, dst16);
                    });
                    ms_bulk = time_ms(s0, [&](cudaEvent_t) {
                        linear_bulk_kernel<<<132, 128, 0, s0>>>(a.dev, (size_t)2 << 30, (uint64_t *)d_dst);
                    });
                }
                printf("   linear read of 2 GiB: ld.global.L2::256B %.1f GB/s, cp.async.bulk %u B x %d stages %.1f GB/s\n",
                       2.147 / (ms_hint * 1e-3), BULK, STAGES, 2.147 / (ms_bulk * 1e-3));
            }
            /* linear read (132 blocks) alone, rows alone, both on two streams */
            float lin_ms = 0;
            linear_rate(&a, (size_t)2 << 30, 132, d_dst, dst16, s0, &lin_ms);
            cudaEvent_t joined;
            CK(cudaEventCreateWithFlags(&joined, cudaEventDisableTiming));
            const float both = time_ms(s0, [&](cudaEvent_t start) {
                CK(cudaStreamWaitEvent(s1, start, 0));
                linear_kernel<<<132, 256, 0, s0>>>((const uint4 *)a.dev, ((size_t)2 << 30) / 16, d_dst, dst16);
                for (int c = 0; c < calls; c++) /* the rows of the last (widest) span measured above */
                    rows_kernel<<<ROWS_PER_CALL / 8, 256, 0, s1>>>(a.dev, d_idx + (size_t)c * ROWS_PER_CALL, ROWS_PER_CALL,
                                                                 d_dst + dst16 / 2);
                CK(cudaEventRecord(joined, s1));
                CK(cudaStreamWaitEvent(s0, joined, 0));
            });
            CK(cudaEventDestroy(joined));
            const double rows_gb = (double)calls * ROWS_PER_CALL * ROW / 1e9;
            printf("   together: linear 2 GiB (132 blocks) alone %.2f ms; + %.3f GB of rows (8 GiB span) on a second stream: %.2f ms for %.3f GB = %.1f GB/s\n",
                   lin_ms, rows_gb, both, 2.147 + rows_gb, (2.147 + rows_gb) / (both * 1e-3));
        }
        free_alloc(&a);
    }
    return 0;
}

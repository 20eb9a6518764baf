/* bench_link_share — how the copy engines and SM-side reads share the link.
 *
 * SM-side reads of mapped host memory top out near 51 GB/s on the H200 host
 * (bench_host_rows), the copy engines near 55 (bench_cuda_step's link line).
 * If both run at once, does the link carry more than either alone, and in what shares? And what does one
 * copy cost when the runs are those of a plane prefix (one cudaMemcpy2DAsync
 * for m equal runs at the channel stride, or one graph memcpy node a run)?
 * This decides whether moving part of a step's planes by copy engine can beat
 * the gather kernel (on the H200 it did not: the gather kernel stays).
 *
 * It prints, for one 1 GiB transfer split between a cudaMemcpyAsync and the
 * gather kernel's shape (32 blocks x 256 threads, equal contiguous shares,
 * four 16-byte loads in flight a thread) on two streams, each side's time
 * and rate and the total rate; then 2D copies and graph memcpy nodes.
 * Usage: bench_link_share (no arguments)
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include "cuda/cuda_check.cuh"

#define READ_THREADS 256
#define READ_BLOCKS 32u

static __global__ void __launch_bounds__(READ_THREADS) sm_read(const uint4 *src, uint4 *dst, uint64_t n16) {
    const uint64_t lo = n16 * blockIdx.x / gridDim.x, hi = n16 * (blockIdx.x + 1) / gridDim.x;
    uint64_t i = lo + threadIdx.x;
    for (; i + 3 * READ_THREADS < hi; i += 4 * READ_THREADS) {
        const uint4 a = src[i], b = src[i + READ_THREADS], c = src[i + 2 * READ_THREADS],
                    d = src[i + 3 * READ_THREADS];
        dst[i] = a;
        dst[i + READ_THREADS] = b;
        dst[i + 2 * READ_THREADS] = c;
        dst[i + 3 * READ_THREADS] = d;
    }
    for (; i < hi; i += READ_THREADS) dst[i] = src[i];
}

typedef struct link_ctx {
    uint8_t *host, *host_dev, *dev;
    cudaStream_t copy, kernel;
    cudaEvent_t start, copy_done, kernel_done;
} link_ctx;

/* copy_bytes by the copy engine from host[0..), read_bytes by the kernel from
 * host[1 GiB..), started together; each side's ms from the common start */
static void run_pair(link_ctx *c, size_t copy_bytes, size_t read_bytes, uint32_t blocks, float *copy_ms,
                     float *read_ms) {
    const size_t G = (size_t)1 << 30;
    CK(cudaEventRecord(c->start, c->copy));
    CK(cudaStreamWaitEvent(c->kernel, c->start, 0));
    if (copy_bytes) CK(cudaMemcpyAsync(c->dev, c->host, copy_bytes, cudaMemcpyHostToDevice, c->copy));
    CK(cudaEventRecord(c->copy_done, c->copy));
    if (read_bytes) {
        sm_read<<<blocks, READ_THREADS, 0, c->kernel>>>((const uint4 *)(c->host_dev + G), (uint4 *)(c->dev + G),
                                                        read_bytes / 16);
        CK(cudaGetLastError());
    }
    CK(cudaEventRecord(c->kernel_done, c->kernel));
    CK(cudaDeviceSynchronize());
    CK(cudaEventElapsedTime(copy_ms, c->start, c->copy_done));
    CK(cudaEventElapsedTime(read_ms, c->start, c->kernel_done));
}

int main(void) {
    const size_t G = (size_t)1 << 30, total = 2 * G;
    link_ctx c;
    CK(cudaHostAlloc(&c.host, total, cudaHostAllocMapped));
    for (size_t i = 0; i < total; i += 4096) c.host[i] = (uint8_t)(i >> 12);
    CK(cudaHostGetDevicePointer((void **)&c.host_dev, c.host, 0));
    CK(cudaMalloc(&c.dev, total));
    CK(cudaStreamCreateWithFlags(&c.copy, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&c.kernel, cudaStreamNonBlocking));
    CK(cudaEventCreate(&c.start));
    CK(cudaEventCreate(&c.copy_done));
    CK(cudaEventCreate(&c.kernel_done));
    float t1, t2;
    run_pair(&c, G / 4, G / 4, READ_BLOCKS, &t1, &t2); /* warm */
    run_pair(&c, G, 0, READ_BLOCKS, &t1, &t2);
    printf("copy engine alone, 1 GiB: %.1f GB/s\n", G / t1 / 1e6);
    for (uint32_t blocks : {READ_BLOCKS, 132u}) {
        run_pair(&c, 0, G, blocks, &t1, &t2);
        printf("gather-shaped kernel alone, 1 GiB, %u blocks: %.1f GB/s\n", blocks, G / t2 / 1e6);
    }
    for (double share : {0.1, 0.25, 0.5, 0.75}) {
        const size_t copy = (size_t)(G * share) & ~(size_t)4095, read = G - copy;
        run_pair(&c, copy, read, READ_BLOCKS, &t1, &t2);
        const float t = t1 > t2 ? t1 : t2;
        printf("together, %2.0f %% by copy engine: copy %.2f ms (%.1f GB/s), kernel %.2f ms (%.1f GB/s), "
               "total %.1f GB/s\n",
               share * 100, t1, copy / t1 / 1e6, t2, read / t2 / 1e6, G / t / 1e6);
    }
    /* a plane prefix of m channels: m runs of w bytes at a stride of 4w */
    for (size_t w : {(size_t)128 << 10, (size_t)256 << 10, (size_t)512 << 10}) {
        const int m = 16, calls = 64;
        CK(cudaEventRecord(c.start, c.copy));
        for (int i = 0; i < calls; i++)
            CK(cudaMemcpy2DAsync(c.dev + (size_t)i * m * w, w, c.host + (size_t)i * 4 * w * m % (total - 4 * w * m),
                                 4 * w, w, m, cudaMemcpyHostToDevice, c.copy));
        CK(cudaEventRecord(c.copy_done, c.copy));
        CK(cudaDeviceSynchronize());
        CK(cudaEventElapsedTime(&t1, c.start, c.copy_done));
        printf("cudaMemcpy2DAsync, %d calls of %d runs x %zu KiB: %.1f GB/s, %.1f us a call\n", calls, m, w >> 10,
               (double)calls * m * w / t1 / 1e6, t1 * 1e3 / calls);
    }
    /* one graph memcpy node a run, chained */
    for (size_t w : {(size_t)128 << 10, (size_t)512 << 10}) {
        const int nodes = 256;
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(c.copy, cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < nodes; i++)
            CK(cudaMemcpyAsync(c.dev + (size_t)i * w, c.host + (size_t)i * 2 * w, w, cudaMemcpyHostToDevice, c.copy));
        CK(cudaStreamEndCapture(c.copy, &g));
        CK(cudaGraphInstantiate(&ge, g, 0));
        CK(cudaGraphLaunch(ge, c.copy)); /* warm */
        CK(cudaEventRecord(c.start, c.copy));
        CK(cudaGraphLaunch(ge, c.copy));
        CK(cudaEventRecord(c.copy_done, c.copy));
        CK(cudaDeviceSynchronize());
        CK(cudaEventElapsedTime(&t1, c.start, c.copy_done));
        printf("graph of %d chained memcpy nodes of %zu KiB: %.1f GB/s, %.2f us a node\n", nodes, w >> 10,
               (double)nodes * w / t1 / 1e6, t1 * 1e3 / nodes);
        CK(cudaGraphExecDestroy(ge));
        CK(cudaGraphDestroy(g));
    }
    CK(cudaFree(c.dev));
    CK(cudaFreeHost(c.host));
    return 0;
}

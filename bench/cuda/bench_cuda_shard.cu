/* The KV tier over tp GPUs (fathom_cuda_shard, head sharding): one session
 * of N tokens, Qwen3-8B's attention shape (8 KV heads, G 4, d 128), L
 * layers, k 512, sink 4, local 32; fathom:48 (water-filling) and ds:32
 * (depth 4 on 32 channels). For tp = 1, 2, 4 where that many GPUs exist:
 *   step     ms per decode step (L layer steps on every rank, ranks on their
 *            own streams), mean of R after one warm-up;
 *   links    bytes each rank read from host memory per step (planes and
 *            scales by its planned depths, K/V rows of its unions) over the
 *            step time, and their sum: the host memory bandwidth the step
 *            drew;
 *   copy     in the same run, a 1 GiB pinned host -> device copy on every
 *            rank's GPU at once: each link's rate and the host's total.
 * tp values above the GPU count are reported as not run. --split-sim Q
 * runs the token split with Q parts per KV head (tp = 8Q) with every rank
 * on device 0: its step time against tp = 1 is the split's own cost on one
 * GPU (selection exchange, the parts' top-k, the merged attention), not a
 * multi-GPU time; per-link rates are not computed there. */
#include "fathom_cuda.h"

#include <chrono>
#include <cuda_bf16.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <vector>

#include "cuda/cuda_check.cuh"

#define FK(call)                                                                                   \
    do {                                                                                           \
        int st_ = (call);                                                                          \
        if (st_ != FATHOM_OK) {                                                                    \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, fathom_last_error());    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static const uint32_t H = 8, G = 4, D = 128, K = 512;

static double now_s(void) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/* bf16 values of a splitmix hash of (index, seed), channel c scaled by 2^(c % 5 - 2). */
static __global__ void random_bf16(uint16_t *x, uint64_t n, uint32_t width, uint64_t seed) {
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x) {
        uint64_t z = (i + seed * 0x632be59bd9b4e019ull) * 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 31)) * 0xd6e8feb86659fd93ull;
        const float u = (float)((z >> 40) & 0xffffff) / 16777216.0f - 0.5f;
        x[i] = __bfloat16_as_ushort(__float2bfloat16_rn(u * exp2f((float)(i % width % 5) - 2.0f)));
    }
}

/* Each GPU of `tp` copies 1 GiB from pinned host memory at once: GB/s per link. */
static std::vector<double> copy_rates(uint32_t tp) {
    const size_t bytes = 1ull << 30;
    std::vector<void *> h(tp), d(tp);
    std::vector<cudaStream_t> s(tp);
    std::vector<cudaEvent_t> e0(tp), e1(tp);
    for (uint32_t r = 0; r < tp; r++) {
        CK(cudaSetDevice((int)r));
        CK(cudaHostAlloc(&h[r], bytes, cudaHostAllocDefault));
        memset(h[r], 1, bytes);
        CK(cudaMalloc(&d[r], bytes));
        CK(cudaStreamCreate(&s[r]));
        CK(cudaEventCreate(&e0[r]));
        CK(cudaEventCreate(&e1[r]));
    }
    std::vector<double> best(tp, 0.0);
    for (int rep = 0; rep < 3; rep++) {
        for (uint32_t r = 0; r < tp; r++) {
            CK(cudaSetDevice((int)r));
            CK(cudaEventRecord(e0[r], s[r]));
            CK(cudaMemcpyAsync(d[r], h[r], bytes, cudaMemcpyHostToDevice, s[r]));
            CK(cudaEventRecord(e1[r], s[r]));
        }
        for (uint32_t r = 0; r < tp; r++) {
            float ms;
            CK(cudaSetDevice((int)r));
            CK(cudaEventSynchronize(e1[r]));
            CK(cudaEventElapsedTime(&ms, e0[r], e1[r]));
            if (bytes / (ms * 1e-3) / 1e9 > best[r]) best[r] = bytes / (ms * 1e-3) / 1e9;
        }
    }
    for (uint32_t r = 0; r < tp; r++) {
        CK(cudaSetDevice((int)r));
        cudaFreeHost(h[r]);
        cudaFree(d[r]);
        cudaStreamDestroy(s[r]);
        cudaEventDestroy(e0[r]);
        cudaEventDestroy(e1[r]);
    }
    CK(cudaSetDevice(0));
    return best;
}

struct rank_bufs {
    uint32_t *sess, *counts, *union_count;
    uint16_t *k, *v, *q, *out;
    uint8_t *depths, *fixed;
    void *ws;
    size_t ws_bytes;
    cudaStream_t stream;
};

static std::string run_tp(uint32_t tp, uint64_t n, uint32_t L, int reps, bool one_device) {
    std::vector<int> devices(tp);
    for (uint32_t r = 0; r < tp; r++) devices[r] = one_device ? 0 : (int)r;
    const bool split = tp > H;
    const fathom_cuda_tier_shape shape = {L, H, G, D, 0, 1, n};
    const fathom_cuda_shard_config cfg = {shape, tp, devices.data(), 0};
    fathom_cuda_shard *sh = NULL;
    FK(fathom_cuda_shard_create(&cfg, &sh));
    uint32_t sid;
    FK(fathom_cuda_shard_session_create(sh, &sid));
    const double t0 = now_s();
    FK(fathom_cuda_shard_reserve(sh, sid, n));
    const uint32_t Hr = split ? 1 : H / tp, chunk = 8192;
    std::vector<rank_bufs> rb(tp);
    std::vector<uint32_t> first(tp); /* the rank's first KV head: the data's seed (replicas get the same) */
    for (uint32_t r = 0; r < tp; r++) {
        rank_bufs &b = rb[r];
        fathom_cuda_shard_rank ri;
        FK(fathom_cuda_shard_rank_of(sh, r, &ri));
        first[r] = ri.first_head;
        CK(cudaSetDevice(devices[r]));
        CK(cudaStreamCreate(&b.stream));
        CK(cudaMalloc((void **)&b.sess, 4));
        CK(cudaMemset(b.sess, 0, 4));
        CK(cudaMalloc((void **)&b.counts, 4));
        CK(cudaMalloc((void **)&b.union_count, Hr * 4));
        CK(cudaMalloc((void **)&b.k, (size_t)chunk * Hr * D * 2));
        CK(cudaMalloc((void **)&b.v, (size_t)chunk * Hr * D * 2));
        CK(cudaMalloc((void **)&b.q, (size_t)L * Hr * G * D * 2));
        CK(cudaMalloc((void **)&b.out, (size_t)Hr * G * D * 2));
        CK(cudaMalloc((void **)&b.depths, (size_t)Hr * D));
        CK(cudaMalloc((void **)&b.fixed, (size_t)Hr * D));
        std::vector<uint8_t> ds32((size_t)Hr * D, 0);
        for (uint32_t h = 0; h < Hr; h++) memset(&ds32[(size_t)h * D], 4, 32);
        CK(cudaMemcpy(b.fixed, ds32.data(), ds32.size(), cudaMemcpyHostToDevice));
        random_bf16<<<64, 256>>>(b.q, (uint64_t)L * Hr * G * D, D, 99 + first[r]);
    }
    /* prefill through the GPU append, chunk by chunk */
    for (uint64_t at = 0; at < n; at += chunk) {
        const uint32_t c = (uint32_t)(n - at < chunk ? n - at : chunk);
        for (uint32_t l = 0; l < L; l++) {
            std::vector<const uint32_t *> ss(tp), cs(tp);
            std::vector<const uint16_t *> ks(tp), vs(tp);
            std::vector<cudaStream_t> st(tp);
            for (uint32_t r = 0; r < tp; r++) {
                CK(cudaSetDevice(devices[r]));
                CK(cudaMemcpyAsync(rb[r].counts, &c, 4, cudaMemcpyHostToDevice, rb[r].stream));
                random_bf16<<<256, 256, 0, rb[r].stream>>>(rb[r].k, (uint64_t)c * Hr * D, D, at * 131 + l * 7 + first[r]);
                random_bf16<<<256, 256, 0, rb[r].stream>>>(rb[r].v, (uint64_t)c * Hr * D, D, at * 137 + l * 11 + first[r]);
                ss[r] = rb[r].sess;
                cs[r] = rb[r].counts;
                ks[r] = rb[r].k;
                vs[r] = rb[r].v;
                st[r] = rb[r].stream;
            }
            FK(fathom_cuda_shard_append(sh, l, ss.data(), 1, cs.data(), chunk, ks.data(), vs.data(), st.data()));
        }
        for (uint32_t r = 0; r < tp; r++) {
            CK(cudaSetDevice(devices[r]));
            CK(cudaStreamSynchronize(rb[r].stream));
        }
    }
    FK(fathom_cuda_shard_check(sh));
    const double fill_s = now_s() - t0;
    std::string js;
    const char *methods[2] = {"fathom:48", "ds:32"};
    for (int m = 0; m < 2; m++) {
        std::vector<fathom_cuda_tier_step_args> as((size_t)tp * L);
        std::vector<cudaStream_t> st(tp);
        for (uint32_t r = 0; r < tp; r++) {
            CK(cudaSetDevice(devices[r]));
            st[r] = rb[r].stream;
            for (uint32_t l = 0; l < L; l++) {
                fathom_cuda_tier_step_args &a = as[(size_t)l * tp + r];
                memset(&a, 0, sizeof a);
                a.layer = l;
                a.sessions = rb[r].sess;
                a.batch = 1;
                a.capacity_tokens = n;
                a.k = K;
                a.sink = 4;
                a.local = 32;
                a.budget = 48;
                a.scale = 0.08838834764831845f;
                a.queries = rb[r].q + (size_t)l * Hr * G * D;
                a.out = rb[r].out;
                a.depths = rb[r].depths;
                a.union_count = split ? NULL : rb[r].union_count;
                a.fixed_depths = m ? rb[r].fixed : NULL;
                if (l == 0) {
                    FK(fathom_cuda_shard_workspace_size(sh, r, &a, &rb[r].ws_bytes));
                    if (m == 0) CK(cudaMalloc(&rb[r].ws, rb[r].ws_bytes));
                }
                a.workspace = rb[r].ws;
                a.workspace_bytes = rb[r].ws_bytes;
            }
        }
        /* bytes per rank and step: the last layer's plan and unions stand for every layer */
        auto step = [&]() {
            for (uint32_t l = 0; l < L; l++) FK(fathom_cuda_shard_step(sh, &as[(size_t)l * tp], st.data()));
        };
        step();
        for (uint32_t r = 0; r < tp; r++) {
            CK(cudaSetDevice(devices[r]));
            CK(cudaStreamSynchronize(rb[r].stream));
        }
        const double t1 = now_s();
        for (int i = 0; i < reps; i++) step();
        for (uint32_t r = 0; r < tp; r++) {
            CK(cudaSetDevice(devices[r]));
            CK(cudaStreamSynchronize(rb[r].stream));
        }
        const double ms = (now_s() - t1) / reps * 1e3;
        const uint64_t nb = (n + 63) / 64;
        std::string links;
        double total = 0;
        for (uint32_t r = 0; r < tp && !split; r++) {
            std::vector<uint8_t> dep((size_t)Hr * D);
            std::vector<uint32_t> uni(Hr);
            CK(cudaSetDevice(devices[r]));
            CK(cudaMemcpy(dep.data(), rb[r].depths, dep.size(), cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(uni.data(), rb[r].union_count, Hr * 4, cudaMemcpyDeviceToHost));
            double bytes = 0;
            for (uint32_t h = 0; h < Hr; h++) {
                for (uint32_t j = 0; j < D; j++) {
                    const uint32_t t = dep[(size_t)h * D + j];
                    bytes += (double)t * nb * 8 + (t ? nb * 2.0 : 0.0);
                }
                bytes += (double)uni[h] * 4 * D;
            }
            bytes *= L;
            const double gbps = bytes / (ms * 1e-3) / 1e9;
            total += gbps;
            char b[64];
            snprintf(b, sizeof b, "%s%.2f", r ? ", " : "", gbps);
            links += b;
        }
        char buf[512];
        snprintf(buf, sizeof buf,
                 "%s{\"tp\": %u, \"method\": \"%s\", \"step_ms\": %.3f, \"link_GBps\": [%s], \"host_GBps\": %.2f, "
                 "\"prefill_s\": %.1f, \"token_split\": %s, \"one_device\": %s}",
                 m ? ", " : "", tp, methods[m], ms, links.c_str(), total, fill_s, split ? "true" : "false",
                 one_device ? "true" : "false");
        fprintf(stderr, "tp %u %-9s step %.3f ms, links [%s] GB/s, host %.2f GB/s\n", tp, methods[m], ms, links.c_str(), total);
        js += buf;
    }
    for (uint32_t r = 0; r < tp; r++) {
        CK(cudaSetDevice(devices[r]));
        void *p[] = {rb[r].sess, rb[r].counts, rb[r].union_count, rb[r].k, rb[r].v, rb[r].q, rb[r].out,
                     rb[r].depths, rb[r].fixed, rb[r].ws};
        for (void *x : p) cudaFree(x);
        cudaStreamDestroy(rb[r].stream);
    }
    CK(cudaSetDevice(0));
    fathom_cuda_shard_destroy(sh);
    return js;
}

int main(int argc, char **argv) {
    uint64_t n = 1048576;
    uint32_t L = 4;
    int reps = 10;
    bool json = false;
    std::vector<uint32_t> tps = {1, 2, 4}, split_sim;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokens") && i + 1 < argc) n = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--layers") && i + 1 < argc) L = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--split-sim") && i + 1 < argc)
            for (char *t = strtok(argv[++i], ","); t; t = strtok(NULL, ",")) split_sim.push_back((uint32_t)atoi(t));
        else {
            fprintf(stderr, "usage: %s [--tokens N] [--layers L] [--reps R] [--split-sim Q,..] [--json]\n", argv[0]);
            return 2;
        }
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "bench_cuda_shard: no CUDA device\n");
        return 77;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    std::string runs, skipped, copies;
    for (uint32_t tp : tps) {
        if (tp > (uint32_t)ndev) {
            fprintf(stderr, "tp %u: not run, %d GPU(s) on this host\n", tp, ndev);
            skipped += (skipped.empty() ? "" : ", ") + std::to_string(tp);
            continue;
        }
        const std::vector<double> c = copy_rates(tp);
        std::string cs;
        double sum = 0;
        for (uint32_t r = 0; r < tp; r++) {
            char b[32];
            snprintf(b, sizeof b, "%s%.2f", r ? ", " : "", c[r]);
            cs += b;
            sum += c[r];
        }
        fprintf(stderr, "tp %u copy: links [%s] GB/s, host %.2f GB/s\n", tp, cs.c_str(), sum);
        char b[256];
        snprintf(b, sizeof b, "%s{\"tp\": %u, \"link_GBps\": [%s], \"host_GBps\": %.2f}", copies.empty() ? "" : ", ", tp,
                 cs.c_str(), sum);
        copies += b;
        runs += (runs.empty() ? "" : ", ") + run_tp(tp, n, L, reps, false);
    }
    for (uint32_t q : split_sim) /* every rank on device 0: the token split's cost, not its scaling */
        runs += (runs.empty() ? "" : ", ") + run_tp(H * q, n, L, reps, true);
    if (json)
        printf("{\"machine\": \"%s x%d\", \"tokens\": %llu, \"layers\": %u, \"kv_heads\": %u, \"group\": %u, \"dim\": %u, "
               "\"k\": %u, \"reps\": %d, \"steps\": [%s], \"copy\": [%s], \"not_run_tp\": [%s]}\n",
               prop.name, ndev, (unsigned long long)n, L, H, G, D, K, reps, runs.c_str(), copies.c_str(), skipped.c_str());
    return 0;
}

/* bench_cuda_tier — the KV tier on the GPU, one JSON object on stdout
 * (progress on stderr).
 *
 * Shapes: --layers L (4) layers x 8 KV heads, G = 4, d = 128, k = 512,
 * fathom:48 (water-filling, budget 48), sink 4, local 32. Keys: bf16 with
 * log-normal per-channel scales, generated on the GPU and appended through
 * fathom_cuda_tier_append (so planes, scales and sums are real).
 *
 * decode (per --contexts N): one session, one segment of N tokens (S =
 * N/64), filled to N - 3R - 10; then
 *   tier     ONE graph of L x (append one token + tier step), replayed R
 *            times back to back: GPU ms per step (events), host us per
 *            cudaGraphLaunch (host clock), the bytes the plans and unions
 *            moved and their link floor; the tier's pipeline as created
 *            (--chunk C: C KV heads per chunk), and "one stream" the same
 *            graph with fathom_cuda_tier_set_lanes(tier, 0, 0);
 *   append   a graph of the L appends alone, replayed R times: its share;
 *   fixed    fathom_cuda_step (the fixed-context step of bench_cuda_step)
 *            over the SAME host memory at the session's final length
 *            (whose nb equals S, so the segment is its whole-context layout,
 *            K/V interleaved, row_stride 2*dim), same queries and variance:
 *            one-stream kernel transport, pipelined on 3 lanes, and direct;
 *            graphs of L layer-steps, R replays; "fixed_best" the fastest;
 *   eager    host us to enqueue the L tier steps without a graph;
 *   cache    the session's HBM cache (fathom_cuda_tier_cache_set/fill):
 *            graphs of L tier steps (no appends: the length stays, so the
 *            cached closed blocks are all but the last), replayed R times
 *            after one warm-up replay that fills the row cache, for plane
 *            lines = a fraction of the plan's lines per head (filled by the
 *            plan's depths) and row slots = a multiple of the mean union;
 *            the hit rates are measured (bytes the step read from HBM over
 *            the bytes it planned and fetched), not assumed. "none" is the
 *            same graph without a cache. --trace-point NAME:N:PLANE:ROW
 *            adds, at --contexts N only, a point that forces the plane and
 *            row hit rates a real decode trace gives (bench/cache_sim.py
 *            --as-context N: the GPU's own policy on a trace, with the lines
 *            and slots an HBM budget of a share of an N-token session's index
 *            buys): lines = the plan's lines x (PLANE - 0.015) (the first
 *            lines carry their channels' scales), slots = m x union with
 *            m (1 - exp(-1/m)) = ROW (a direct-mapped cache over a static
 *            union; with :WAYS, row_ways = WAYS and m from the same count
 *            for sets: static_row_hits); the hit rates are measured as above, and the HBM they
 *            took is reported against the index's (a static replay needs less
 *            than the trace's budget for the same rates); a trace point's
 *            cache keeps a plan window of FATHOM_CUDA_TIER_CACHE_WINDOW plans,
 *            as a decode would (its steps note their plans; one round of
 *            steps notes the replayed plan before the fill, which then keeps
 *            the lines a fill from the plan's depths would). Every point is
 *            also timed on one stream (fathom_cuda_tier_set_lanes(tier, 0, 0)).
 * ragged: four sessions of --ragged lengths in one batch (segments of 1024
 *   blocks), one graph of L x (append + step): ms per step against the link
 *   floor of the bytes it moved.
 * --only-tier: the tier and one-stream graphs only (no fixed step, cache
 * sweep or ragged batch: for a profiler). --only-cache: no fixed step and
 * no ragged batch. --profile P,..: one more replay of those cache points'
 * pipelined and one-stream graphs between cudaProfilerStart and
 * cudaProfilerStop (ncu --profile-from-start off).
 * --hybrid: instead of the above, the hybrid CPU/GPU step (fathom_cuda_hybrid)
 *   per --contexts N: one session filled to N - 64 (segments of N/64
 *   blocks, or --segment-blocks S: the tier's default is 64), graphs of
 *   the L layer steps without appends, R replays each:
 *   the GPU-only step, then for each of --threads T,..: the scheduler's
 *   rates (fathom_cuda_hybrid_calibrate on layer 0: one layer's step, so its
 *   measured corrections are of one layer, the graphs' of L) and its share, and the
 *   step with 0..kv_heads pairs on the host (ms_by_share), so the chosen
 *   share can be read against the best one. Then "cache", per --trace-point
 *   of that context: the session's HBM cache at that point (lines and slots
 *   as in the cache sweep; hit rates measured on the GPU-only step), the
 *   GPU-only step with it, and with the last --threads
 *   count the rates, share and ms_by_share of the hybrid step with it, each
 *   also against the uncached GPU-only step.
 * --read-ahead E,..: after the cache sweep, the read-ahead sweep (ahead_sweep:
 *   graphs alternating the queries with a set drifted by E, the trace
 *   points' caches without and with fathom_cuda_tier_cache_config's
 *   read-ahead, started beside each step, after it but for the last layer
 *   (+ahead-between) and after every layer's step (+ahead-across),
 *   "ahead-only" giving the step-to-step overlap; a trace point's
 *   :PLANE_AHEAD:ROW_AHEAD, the trace's read-ahead rates, caps its
 *   read-ahead at them); --ahead-cycle M: the graphs cycle through M query
 *   sets, each drifted by E from the one before (2: A, B; more, so that the
 *   step two back differs too); --between-us X: one warp busy for X us after
 *   each layer's step in those graphs (the model's own work between two
 *   layers; the steps of a graph leave their read-ahead to the next step),
 *   "tier_ms" the time less that work; with --between-copy that work copies
 *   HBM instead, in short CTAs on every SM, for about X us (timed alone at
 *   the start), as a decode's weight-streaming kernels keep the SMs and HBM
 *   busy there.
 * Every graph is instantiated with cudaGraphInstantiateFlagUseNodePriority,
 *   as PyTorch's are; --flat-priority: without it.
 * --int8: every tier in the int8 scan mode (fathom_cuda_tier_set_scan_mode
 *   FATHOM_CUDA_SCAN_INT8): the tier and hybrid steps scan with the GPU's
 *   int8 kernel, the hybrid's host side with the CPU's int8 kernels (its
 *   calibration measures their rates); the fixed step (fathom_cuda_step)
 *   stays exact. The JSON's "scan_mode" is "int8" or "exact".
 * The link: one 1 GiB pinned host -> device copy, best of 3, in the same run. */
#define FATHOM_CUDA_EXPERIMENTAL /* the direct transport, for the fixed step's comparison */
#include "fathom_cuda.h"

#include <algorithm>
#include <ctype.h>
#include <chrono>
#include <cuda_bf16.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <vector>

#include "cuda/cuda_check.cuh"
#include "bench_machine.h"

/* A cache point that forces a real trace's hit rates (--trace-point): the
 * fraction of the plan's lines and the multiple of the mean union that a
 * static replay needs for them. */
struct trace_point {
    std::string name;
    uint64_t context;
    double plane, row;       /* the trace's hit rates */
    uint32_t ways;           /* the row cache's row_ways (1: direct-mapped) */
    double plane_ahead, row_ahead; /* the trace's read-ahead hit rates beyond the cache (-1: not given) */
    double plane_frac, slot_mult;
};

/* The row hits of m x union slots of `ways`-way sets over one static union:
 * a set's c rows, c ~ Poisson(ways / m), keep min(c, ways) of them (direct-
 * mapped: m (1 - exp(-1/m))). */
static double static_row_hits(double m, uint32_t ways) {
    const double lambda = ways / m;
    double pc = exp(-lambda), below = 0, kept = 0; /* P(c), P(c < ways), E[c; c < ways] */
    for (uint32_t c = 0; c < ways; c++) {
        below += pc;
        kept += c * pc;
        pc *= lambda / (c + 1);
    }
    return (kept + ways * (1 - below)) / lambda;
}

/* m with static_row_hits(m, ways) = row (bisection; the hits grow with m). */
static double slot_multiple_for(double row, uint32_t ways) {
    if (row <= 0) return 0;
    double lo = 0, hi = 1;
    while (static_row_hits(hi, ways) < row && hi < 1e6) hi *= 2;
    for (int i = 0; i < 100; i++) {
        const double m = (lo + hi) / 2;
        (static_row_hits(m, ways) < row ? lo : hi) = m;
    }
    return hi;
}

/* A row cache of about `slots` slots per (layer, head) in `ways`-way sets. */
static uint64_t row_bytes_for(uint64_t LH, uint32_t dim, uint64_t slots, uint32_t ways) {
    if (ways <= 1) return LH * (4ull * dim + 4) * slots;
    return LH * ((slots + ways - 1) / ways) * ways * (4ull * dim + 8);
}

static bool parse_trace_point(const char *arg, trace_point *tp) {
    const char *c1 = strchr(arg, ':');
    if (!c1 || c1 == arg || c1 - arg > 64) return false;
    for (const char *p = arg; p < c1; p++) /* the name goes into JSON as is */
        if (!isalnum((unsigned char)*p) && !strchr("._%/-", *p)) return false;
    char *end;
    tp->name.assign(arg, c1 - arg);
    tp->context = strtoull(c1 + 1, &end, 10);
    if (*end != ':' || tp->context < 4096) return false;
    tp->plane = strtod(end + 1, &end);
    if (*end != ':') return false;
    tp->row = strtod(end + 1, &end);
    tp->ways = 1;
    tp->plane_ahead = tp->row_ahead = -1;
    if (*end == ':') {
        const unsigned long w = strtoul(end + 1, &end, 10);
        if (w != 1 && w != 2 && w != 4 && w != 8) return false;
        tp->ways = (uint32_t)w;
        if (*end == ':') {
            tp->plane_ahead = strtod(end + 1, &end);
            if (*end != ':') return false;
            tp->row_ahead = strtod(end + 1, &end);
            if (!(tp->plane_ahead >= 0 && tp->plane + tp->plane_ahead <= 1) ||
                !(tp->row_ahead >= 0 && tp->row + tp->row_ahead <= 1))
                return false;
        }
    }
    if (*end || !(tp->plane >= 0 && tp->plane <= 1) || !(tp->row >= 0 && tp->row < 1)) return false;
    tp->plane_frac = tp->plane > 0.015 ? tp->plane - 0.015 : 0;
    tp->slot_mult = slot_multiple_for(tp->row, tp->ways);
    return true;
}

static std::vector<trace_point> trace_points;

#define FK(call)                                                                                   \
    do {                                                                                           \
        int s_ = (call);                                                                           \
        if (s_ != FATHOM_OK) {                                                                     \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, fathom_last_error());    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static const uint32_t H = 8, G = 4, D = 128, K = 512, BUDGET = 48;

static double now_s(void) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static __device__ uint32_t hash3(uint64_t a, uint32_t b) {
    uint64_t z = a * 0x9e3779b97f4a7c15ull + b * 0xbf58476d1ce4e5b9ull + 0x94d049bb133111ebull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (uint32_t)(z ^ (z >> 31));
}

/* rows [count][H][D] bf16: channel (h, j) ~ scale_hj * (sum of 4 uniforms - 2) */
static __global__ void fill_rows(uint16_t *rows, uint64_t first, uint64_t count, uint32_t seed) {
    const uint64_t total = count * H * D;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (uint64_t)gridDim.x * blockDim.x) {
        const uint32_t c = (uint32_t)(i % (H * D));
        const uint64_t tok = first + i / (H * D);
        const float scale = __expf(((float)(hash3(c, seed) >> 8) * (1.0f / 16777216.0f) - 0.5f) * 4.0f);
        float u = 0.0f;
        for (int r = 0; r < 4; r++) u += (float)(hash3(tok * 4 + r, c ^ (seed << 16)) >> 8) * (1.0f / 16777216.0f);
        rows[i] = __bfloat16_as_ushort(__float2bfloat16_rn(scale * (u - 2.0f)));
    }
}

typedef struct timing {
    double gpu_ms, host_us;
} timing;

/* Replay exec `reps` times back to back: GPU ms per replay (events around
 * all of them) and mean host us per cudaGraphLaunch. */
static timing replay(cudaGraphExec_t exec, cudaStream_t s, int reps) {
    CK(cudaGraphLaunch(exec, s));
    CK(cudaStreamSynchronize(s));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    double host = 0;
    CK(cudaEventRecord(e0, s));
    for (int i = 0; i < reps; i++) {
        const double h0 = now_s();
        CK(cudaGraphLaunch(exec, s));
        host += now_s() - h0;
    }
    CK(cudaEventRecord(e1, s));
    CK(cudaStreamSynchronize(s));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    timing t = {ms / reps, host / reps * 1e6};
    return t;
}

static double link_gbps(void) {
    const size_t bytes = 1ull << 30;
    void *h, *d;
    CK(cudaHostAlloc(&h, bytes, cudaHostAllocDefault));
    CK(cudaMalloc(&d, bytes));
    memset(h, 1, bytes);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    double best = 0;
    for (int i = 0; i < 3; i++) {
        CK(cudaEventRecord(e0, 0));
        CK(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, 0));
        CK(cudaEventRecord(e1, 0));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        best = std::max(best, bytes / (ms * 1e-3) / 1e9);
    }
    CK(cudaFreeHost(h));
    CK(cudaFree(d));
    return best;
}

/* A tier with the given sessions filled to `lens` through the GPU append. */
typedef struct setup {
    fathom_cuda_tier *tier;
    uint32_t L, batch;
    std::vector<uint32_t> ids;
    uint32_t *d_ids, *d_ones;
    uint16_t *d_q, *d_out, *d_kv1;
    uint8_t *d_depths;
    uint32_t *d_union;
    void *ws;
    size_t ws_bytes;
    uint64_t capacity;
} setup;

static uint32_t chunk_heads = 0; /* --chunk: KV heads per pipeline chunk, 0 by context */
static const char *profile_point = NULL; /* --profile: cache points, comma-separated */
static bool scan_int8 = false;           /* --int8: the tiers' scan mode */
static uint32_t hybrid_segment_blocks = 0; /* --segment-blocks: the --hybrid session's S (0: N / 64) */
/* Graphs are instantiated as PyTorch instantiates its own (torch.cuda.CUDAGraph):
 * with cudaGraphInstantiateFlagUseNodePriority, so a kernel keeps the priority
 * of the stream it was captured on (the tier's read-ahead and the pipeline's
 * link stream: the highest); --flat-priority: without it, every kernel at the
 * launch stream's priority. */
static unsigned long long graph_flags = cudaGraphInstantiateFlagUseNodePriority;

/* Whether name is one of list's comma-separated names. */
static bool listed(const char *list, const char *name) {
    const size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, name, n)) return true;
        p = e ? e + 1 : NULL;
    }
    return false;
}

static setup make_setup(uint32_t L, uint32_t S, const std::vector<uint64_t> &lens, uint64_t capacity) {
    setup st;
    st.L = L;
    st.batch = (uint32_t)lens.size();
    st.capacity = capacity;
    fathom_cuda_tier_shape sh = {L, H, G, D, S, st.batch, capacity};
    FK(fathom_cuda_tier_create(&sh, &st.tier));
    FK(fathom_cuda_tier_set_scan_mode(st.tier, scan_int8 ? FATHOM_CUDA_SCAN_INT8 : FATHOM_CUDA_SCAN_EXACT));
    FK(fathom_cuda_tier_set_lanes(st.tier, 3, chunk_heads));
    st.ids.resize(st.batch);
    const double t0 = now_s();
    for (uint32_t i = 0; i < st.batch; i++) {
        FK(fathom_cuda_tier_session_create(st.tier, &st.ids[i]));
        FK(fathom_cuda_tier_reserve(st.tier, st.ids[i], std::min<uint64_t>(capacity, lens[i] + 4096)));
    }
    fprintf(stderr, "  reserved %u sessions x %llu tokens in %.1f s\n", st.batch,
            (unsigned long long)capacity, now_s() - t0);
    CK(cudaMalloc((void **)&st.d_ids, st.batch * 4));
    CK(cudaMemcpy(st.d_ids, st.ids.data(), st.batch * 4, cudaMemcpyHostToDevice));
    /* prefill in chunks of 65536 tokens per session */
    const uint32_t chunk = 65536;
    uint16_t *dk, *dv;
    uint32_t *dc;
    CK(cudaMalloc((void **)&dk, (size_t)st.batch * chunk * H * D * 2));
    CK(cudaMalloc((void **)&dv, (size_t)st.batch * chunk * H * D * 2));
    CK(cudaMalloc((void **)&dc, st.batch * 4));
    const double t1 = now_s();
    for (uint64_t at = 0;; at += chunk) {
        std::vector<uint32_t> c(st.batch);
        uint64_t total = 0;
        for (uint32_t i = 0; i < st.batch; i++) {
            c[i] = (uint32_t)(lens[i] > at ? std::min<uint64_t>(lens[i] - at, chunk) : 0);
            total += c[i];
        }
        if (!total) break;
        CK(cudaMemcpy(dc, c.data(), st.batch * 4, cudaMemcpyHostToDevice));
        for (uint32_t l = 0; l < L; l++) {
            uint64_t off = 0;
            for (uint32_t i = 0; i < st.batch; i++) {
                if (c[i]) {
                    fill_rows<<<1024, 256>>>(dk + off * H * D, at, c[i], 1 + l * 64 + i);
                    fill_rows<<<1024, 256>>>(dv + off * H * D, at, c[i], 1000 + l * 64 + i);
                }
                off += c[i];
            }
            FK(fathom_cuda_tier_append(st.tier, l, st.d_ids, st.batch, dc, chunk, dk, dv, 0));
        }
    }
    CK(cudaDeviceSynchronize());
    FK(fathom_cuda_tier_check(st.tier));
    fprintf(stderr, "  prefilled in %.1f s\n", now_s() - t1);
    cudaFree(dk);
    cudaFree(dv);
    cudaFree(dc);
    const size_t R = (size_t)st.batch * H * G;
    std::vector<uint32_t> ones(st.batch, 1);
    CK(cudaMalloc((void **)&st.d_ones, st.batch * 4));
    CK(cudaMemcpy(st.d_ones, ones.data(), st.batch * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc((void **)&st.d_kv1, (size_t)st.batch * H * D * 2));
    fill_rows<<<64, 256>>>(st.d_kv1, 7, st.batch, 77);
    CK(cudaMalloc((void **)&st.d_q, L * R * D * 2));
    CK(cudaMalloc((void **)&st.d_out, L * R * D * 2));
    CK(cudaMalloc((void **)&st.d_depths, (size_t)L * st.batch * H * D));
    CK(cudaMalloc((void **)&st.d_union, (size_t)L * st.batch * H * 4));
    for (uint32_t l = 0; l < L; l++) /* queries: 4 query heads as 4 of the K rows' channels, rescaled */
        fill_rows<<<64, 256>>>(st.d_q + l * R * D, 0, R / H, 5000 + l);
    fathom_cuda_tier_step_args a;
    memset(&a, 0, sizeof a);
    a.sessions = st.d_ids;
    a.batch = st.batch;
    a.capacity_tokens = capacity;
    a.k = K;
    a.sink = 4;
    a.local = 32;
    a.budget = BUDGET;
    a.scale = 1.0f / sqrtf((float)D);
    a.queries = st.d_q;
    a.out = st.d_out;
    FK(fathom_cuda_tier_workspace_size(st.tier, &a, &st.ws_bytes));
    CK(cudaMalloc(&st.ws, st.ws_bytes));
    CK(cudaDeviceSynchronize());
    return st;
}

static fathom_cuda_tier_step_args args_of(const setup &st, uint32_t l) {
    const size_t R = (size_t)st.batch * H * G;
    fathom_cuda_tier_step_args a;
    memset(&a, 0, sizeof a);
    a.layer = l;
    a.sessions = st.d_ids;
    a.batch = st.batch;
    a.capacity_tokens = st.capacity;
    a.k = K;
    a.sink = 4;
    a.local = 32;
    a.budget = BUDGET;
    a.scale = 1.0f / sqrtf((float)D);
    a.queries = st.d_q + l * R * D;
    a.out = st.d_out + l * R * D;
    a.depths = st.d_depths + (size_t)l * st.batch * H * D;
    a.union_count = st.d_union + (size_t)l * st.batch * H;
    a.workspace = st.ws;
    a.workspace_bytes = st.ws_bytes;
    return a;
}

/* Capture L x (append, if with_append; step, if with_step). */
static cudaGraphExec_t capture(setup &st, cudaStream_t s, bool with_append, bool with_step) {
    cudaGraph_t g;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (uint32_t l = 0; l < st.L; l++) {
        if (with_append)
            FK(fathom_cuda_tier_append(st.tier, l, st.d_ids, st.batch, st.d_ones, 1, st.d_kv1, st.d_kv1, s));
        if (with_step) {
            fathom_cuda_tier_step_args a = args_of(st, l);
            FK(fathom_cuda_tier_step(st.tier, &a, s));
        }
    }
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&exec, g, graph_flags));
    CK(cudaGraphDestroy(g));
    return exec;
}

/* Bytes the last steps moved: plane runs + scales of the plans, K and V rows of the unions. */
static void bytes_of(const setup &st, const std::vector<uint64_t> &lens, double *scan, double *rows) {
    const size_t P = (size_t)st.batch * H;
    std::vector<uint8_t> dep(st.L * P * D);
    std::vector<uint32_t> uni(st.L * P);
    CK(cudaMemcpy(dep.data(), st.d_depths, dep.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(uni.data(), st.d_union, uni.size() * 4, cudaMemcpyDeviceToHost));
    *scan = *rows = 0;
    for (uint32_t l = 0; l < st.L; l++)
        for (size_t p = 0; p < P; p++) {
            *scan += (double)fathom_cuda_plane_bytes(D, lens[p / H], &dep[(l * P + p) * D]);
            *rows += (double)uni[l * P + p] * D * 2 * 2;
        }
}

static void free_setup(setup &st) {
    fathom_cuda_tier_destroy(st.tier);
    cudaFree(st.d_ids);
    cudaFree(st.d_ones);
    cudaFree(st.d_kv1);
    cudaFree(st.d_q);
    cudaFree(st.d_out);
    cudaFree(st.d_depths);
    cudaFree(st.d_union);
    cudaFree(st.ws);
}

/* The last step's mean plan lines (sum of depths) and mean union of the
 * group's winners per (layer, KV head) of st's session. */
static void plan_means(const setup &st, double *lines_mean, double *union_mean) {
    const size_t LH = (size_t)st.L * H;
    std::vector<uint8_t> dep(LH * D);
    std::vector<uint32_t> uni(LH);
    CK(cudaMemcpy(dep.data(), st.d_depths, dep.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(uni.data(), st.d_union, uni.size() * 4, cudaMemcpyDeviceToHost));
    double l = 0, u = 0;
    for (uint8_t x : dep) l += x;
    for (uint32_t x : uni) u += x;
    *lines_mean = l / (double)LH;
    *union_mean = u / (double)LH;
}

/* A trace point's cache: cc with a plan window, noted by one round of the L
 * layer steps (the replays repeat one plan, so the fill keeps the plan's
 * lines, then spare ones, as from its depths), then filled from it. */
static void set_trace_cache(setup &st, uint32_t sid, fathom_cuda_tier_cache_config cc, cudaStream_t s) {
    cc.window = FATHOM_CUDA_TIER_CACHE_WINDOW;
    FK(fathom_cuda_tier_cache_set(st.tier, sid, &cc));
    for (uint32_t l = 0; l < st.L; l++) {
        fathom_cuda_tier_step_args a = args_of(st, l);
        FK(fathom_cuda_tier_step(st.tier, &a, s));
    }
    FK(fathom_cuda_tier_cache_fill(st.tier, sid, NULL, s));
}

/* The cache sweep at the session's current length (see the header). */
static std::string cache_sweep(setup &st, uint64_t context, uint64_t n, cudaStream_t s, int reps, double link) {
    const uint32_t L = st.L, P = H, sid = st.ids[0];
    double lines_mean, union_mean;
    plan_means(st, &lines_mean, &union_mean);
    const uint64_t blocks = (n + 63) / 64, LH = (uint64_t)L * P;
    const double index_bytes = (double)LH * blocks * D * (FATHOM_PLANES * 8 + 2);
    unsigned long long *d_hits;
    CK(cudaMalloc((void **)&d_hits, 16));
    struct point {
        std::string name;
        double plane_frac, slot_mult;
        const trace_point *trace;
    };
    /* slots = m x union keep about m (1 - exp(-1/m)) of a static union (direct-mapped);
       lines = f x the plan's lines give a little more than f of its bytes (the first
       lines carry their channels' scales) */
    std::vector<point> pts = {{"none", 0, 0, NULL},      {"p0.25", 0.25, 0.25, NULL}, {"p0.5", 0.5, 0.75, NULL},
                              {"p0.75", 0.75, 2, NULL},  {"p1", 1, 64, NULL},         {"planes-only", 1, 0, NULL},
                              {"rows-only", 0, 64, NULL}};
    for (const trace_point &tp : trace_points)
        if (tp.context == context) pts.push_back({tp.name, tp.plane_frac, tp.slot_mult, &tp});
    std::string js = "[";
    double none_ms = 0;
    for (size_t i = 0; i < pts.size(); i++) {
        const point &pt = pts[i];
        const uint64_t lines = (uint64_t)llround(pt.plane_frac * lines_mean);
        const uint64_t slots = (uint64_t)llround(pt.slot_mult * union_mean);
        const uint32_t ways = pt.trace ? pt.trace->ways : 1;
        const fathom_cuda_tier_cache_config cc = {LH * 10 * blocks * lines, n, row_bytes_for(LH, D, slots, ways), 0,
                                                  ways, 0, 0};
        if (pt.trace) {
            set_trace_cache(st, sid, cc, s);
        } else {
            FK(fathom_cuda_tier_cache_set(st.tier, sid, &cc));
            FK(fathom_cuda_tier_cache_fill(st.tier, sid, st.d_depths, s));
        }
        uint64_t hbm = 0;
        FK(fathom_cuda_tier_cache_bytes(st.tier, sid, &hbm));
        auto graph_of = [&](unsigned long long *hits_to) {
            cudaGraph_t g;
            cudaGraphExec_t exec;
            CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
            for (uint32_t l = 0; l < L; l++) {
                fathom_cuda_tier_step_args a = args_of(st, l);
                a.cache_bytes = hits_to;
                FK(fathom_cuda_tier_step(st.tier, &a, s));
            }
            CK(cudaStreamEndCapture(s, &g));
            CK(cudaGraphInstantiate(&exec, g, graph_flags));
            CK(cudaGraphDestroy(g));
            return exec;
        };
        cudaGraphExec_t exec = graph_of(d_hits);
        CK(cudaGraphLaunch(exec, s)); /* warm: the row cache fills */
        CK(cudaMemsetAsync(d_hits, 0, 16, s));
        const timing t = replay(exec, s, reps); /* reps + 1 replays counted */
        unsigned long long hits[2];
        CK(cudaMemcpy(hits, d_hits, 16, cudaMemcpyDeviceToHost));
        double scan_b, row_b;
        bytes_of(st, {n}, &scan_b, &row_b);
        /* the same point on one stream (no counters: the rates are the pipeline's) */
        FK(fathom_cuda_tier_set_lanes(st.tier, 0, 0));
        cudaGraphExec_t one = graph_of(NULL);
        const timing t1 = replay(one, s, reps);
        FK(fathom_cuda_tier_set_lanes(st.tier, 3, chunk_heads));
        if (listed(profile_point, pt.name.c_str())) {
            CK(cudaStreamSynchronize(s));
            CK(cudaProfilerStart());
            CK(cudaGraphLaunch(exec, s));
            CK(cudaStreamSynchronize(s));
            CK(cudaGraphLaunch(one, s));
            CK(cudaStreamSynchronize(s));
            CK(cudaProfilerStop());
        }
        CK(cudaGraphExecDestroy(exec));
        CK(cudaGraphExecDestroy(one));
        const double ph = hits[0] / (scan_b * (reps + 1)), rh = hits[1] / (row_b * (reps + 1));
        if (i == 0) none_ms = t.gpu_ms;
        const double floor_ms = ((1 - ph) * scan_b + (1 - rh) * row_b) / (link * 1e9) * 1e3;
        char want[96] = "";
        if (pt.trace)
            snprintf(want, sizeof want, ", \"trace_plane_hit\": %.4f, \"trace_row_hit\": %.4f, \"row_ways\": %u",
                     pt.trace->plane, pt.trace->row, pt.trace->ways);
        char buf[768];
        snprintf(buf, sizeof buf,
                 "%s{\"point\": \"%s\", \"lines\": %llu, \"plan_lines\": %.2f, \"slots\": %llu, "
                 "\"union_mean\": %.1f, \"hbm_GB\": %.4f, \"hbm_of_index\": %.4f, \"plane_hit\": %.4f, "
                 "\"row_hit\": %.4f, \"ms\": %.4f, \"one_stream_ms\": %.4f, \"vs_none\": %.4f, "
                 "\"host_floor_ms\": %.4f%s}",
                 i ? ", " : "", pt.name.c_str(), (unsigned long long)lines, lines_mean, (unsigned long long)slots,
                 union_mean, hbm / 1e9, hbm / index_bytes, ph, rh, t.gpu_ms, t1.gpu_ms, t.gpu_ms / none_ms,
                 floor_ms, want);
        fprintf(stderr, "  cache %s\n", buf);
        js += buf;
    }
    const fathom_cuda_tier_cache_config off = {0, 0, 0, 0, 0, 0, 0};
    FK(fathom_cuda_tier_cache_set(st.tier, sid, &off));
    cudaFree(d_hits);
    return js + "]";
}

/* q_b = bf16(sqrt(1 - e^2) q_a + e z), z from fill_rows: a drifted query set. */
static __global__ void drift_rows(uint16_t *qb, const uint16_t *qa, const uint16_t *z, uint64_t total, float e) {
    const float c = sqrtf(1.0f - e * e);
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (uint64_t)gridDim.x * blockDim.x) {
        const float a = __bfloat162float(__ushort_as_bfloat16(qa[i])), b = __bfloat162float(__ushort_as_bfloat16(z[i]));
        qb[i] = __bfloat16_as_ushort(__float2bfloat16_rn(c * a + e * b));
    }
}

static std::vector<double> ahead_drifts; /* --read-ahead: drifts of the alternating query sets */
static double between_us = 0;            /* --between-us: other work after each layer's step */
static uint32_t ahead_cycle = 2;         /* --ahead-cycle: query sets the read-ahead graphs cycle through */
static bool between_copy = false;        /* --between-copy: the work between layers copies HBM on every SM */

/* The work between two layers' steps (a model's projections and MLP)
 * copies HBM: CTAs of BETWEEN_CHUNK bytes each, many short ones, as a
 * decode's weight-streaming matrix-vector kernels run. */
#define BETWEEN_CHUNK (64 << 10)
static __global__ void between_copy_kernel(const uint4 *src, uint4 *dst) {
    const size_t base = (size_t)blockIdx.x * (BETWEEN_CHUNK / 16);
    for (uint32_t i = threadIdx.x; i < BETWEEN_CHUNK / 16; i += blockDim.x) dst[base + i] = src[base + i];
}

/* One warp that keeps the stream busy for `cycles` clocks without the link:
 * the model's work between two layers' steps (its projections and MLP). */
static __global__ void spin_kernel(long long cycles) {
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

/* The read-ahead sweep (--read-ahead E,..) at the session's current length:
 * per drift e, M - 1 more query sets (--ahead-cycle M, default 2), set m =
 * sqrt(1 - e^2) set m-1 + e Z_m (set 0 the bench's queries), and graphs of
 * M L layer steps (L with each set in turn) replayed R times, so each step's
 * last step of a layer planned and selected with another set, as
 * consecutive decode steps differ. Points: "none" (no cache), "ahead-only"
 * (read-ahead of whole plans and unions, no cache: its staged fractions are
 * the plans' and unions' overlap from step to step), and per trace point of
 * this context its cache (lines and slots as in the cache sweep, its window
 * noted by every set) without read-ahead, with it started beside each step
 * ("+ahead"), started after each step's own work but the last layer's
 * ("+ahead-between", FATHOM_CUDA_AHEAD_BETWEEN) and after every step's own
 * work ("+ahead-across", FATHOM_CUDA_AHEAD_ACROSS: the last layer's copy of
 * layer 0 runs beside the work after it, before the next decode step's
 * layer 0; the capture ends with fathom_cuda_tier_ahead_join). A trace point
 * that gives the trace's read-ahead rates (:PLANE_AHEAD:ROW_AHEAD) caps its
 * read-ahead (ahead_lines, ahead_rows; bisection on measured replays) so
 * that cache + staging serve at most the trace's hit + read-ahead shares of
 * plane bytes and rows: the bench's plans overlap more from step to step
 * than real traces' do. Hit and staged fractions are measured over the
 * replays' planned plane bytes and union rows; ms is per decode step (a
 * replay / M). */
static std::string ahead_sweep(setup &st, uint64_t context, uint64_t n, cudaStream_t s, int reps) {
    const uint32_t L = st.L, sid = st.ids[0], M = ahead_cycle;
    const size_t R = (size_t)st.batch * H * G;
    double lines_mean, union_mean;
    plan_means(st, &lines_mean, &union_mean);
    const uint64_t blocks = (n + 63) / 64, LH = (uint64_t)L * H;
    uint16_t *d_qb = NULL, *d_z = NULL; /* sets 1 .. M - 1 ([M - 1][L][R][D]); set 0 is st.d_q */
    CK(cudaMalloc((void **)&d_qb, (M - 1) * L * R * D * 2));
    CK(cudaMalloc((void **)&d_z, L * R * D * 2));
    unsigned long long *d_cnt = NULL;
    CK(cudaMalloc((void **)&d_cnt, 32));
    int khz = 0;
    CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    const long long spin = between_copy ? 0 : (long long)(between_us * khz / 1000.0);
    uint4 *copy_buf = NULL; /* --between-copy: source and destination; chunks per layer, sized to between_us */
    uint32_t copy_chunks = 0;
    double between_alone = between_us; /* us the work between two layers' steps takes alone */
    if (between_copy && between_us > 0) {
        const uint32_t probe = 4096; /* 256 MiB each way */
        CK(cudaMalloc((void **)&copy_buf, 2 * (size_t)probe * BETWEEN_CHUNK));
        CK(cudaMemset(copy_buf, 1, 2 * (size_t)probe * BETWEEN_CHUNK));
        cudaEvent_t e0, e1;
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        between_copy_kernel<<<probe, 256, 0, s>>>(copy_buf, copy_buf + (size_t)probe * BETWEEN_CHUNK / 16);
        CK(cudaEventRecord(e0, s));
        for (int i = 0; i < 5; i++)
            between_copy_kernel<<<probe, 256, 0, s>>>(copy_buf, copy_buf + (size_t)probe * BETWEEN_CHUNK / 16);
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        const double us_per_chunk = ms * 1e3 / 5 / probe;
        copy_chunks = (uint32_t)std::max<double>(1.0, (double)llround(between_us / us_per_chunk));
        between_alone = copy_chunks * us_per_chunk;
        if (copy_chunks > probe) { /* a larger buffer */
            CK(cudaFree(copy_buf));
            CK(cudaMalloc((void **)&copy_buf, 2 * (size_t)copy_chunks * BETWEEN_CHUNK));
            CK(cudaMemset(copy_buf, 1, 2 * (size_t)copy_chunks * BETWEEN_CHUNK));
        }
        fprintf(stderr, "  between: %u chunks of %d KiB copied per layer (%.1f GB/s alone)\n", copy_chunks,
                BETWEEN_CHUNK >> 10, 2.0 * BETWEEN_CHUNK / (us_per_chunk * 1e3));
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
    }
    auto set_of = [&](uint32_t m) { return m ? d_qb + (size_t)(m - 1) * L * R * D : (uint16_t *)st.d_q; };
    auto steps = [&](const uint16_t *q, unsigned long long *cnt) { /* L layer steps with query set q */
        for (uint32_t l = 0; l < L; l++) {
            fathom_cuda_tier_step_args a = args_of(st, l);
            a.queries = q + l * R * D;
            a.cache_bytes = cnt;
            a.ahead_bytes = cnt ? cnt + 2 : NULL;
            FK(fathom_cuda_tier_step(st.tier, &a, s));
            if (copy_chunks) {
                between_copy_kernel<<<copy_chunks, 256, 0, s>>>(copy_buf,
                                                                copy_buf + (size_t)copy_chunks * BETWEEN_CHUNK / 16);
                CK(cudaGetLastError());
            }
            if (spin > 0) {
                spin_kernel<<<1, 32, 0, s>>>(spin);
                CK(cudaGetLastError());
            }
        }
    };
    struct measured {
        double ms, plane_hit, row_hit, plane_staged, row_staged;
        uint64_t hbm;
    };
    std::string js = "[";
    for (size_t di = 0; di < ahead_drifts.size(); di++) {
        const double e = ahead_drifts[di];
        for (uint32_t m = 1; m < M; m++) { /* set m drifts from set m - 1 */
            for (uint32_t l = 0; l < L; l++) fill_rows<<<64, 256>>>(d_z + l * R * D, 0, R / H, 9000 + 100 * m + l);
            drift_rows<<<256, 256>>>(set_of(m), set_of(m - 1), d_z, (uint64_t)L * R * D, (float)e);
            CK(cudaGetLastError());
        }
        double scan_all = 0, row_all = 0; /* the sets' planned bytes */
        for (uint32_t m = 0; m < M; m++) {
            double scan_m, row_m;
            steps(set_of(m), NULL);
            CK(cudaStreamSynchronize(s));
            bytes_of(st, {n}, &scan_m, &row_m);
            scan_all += scan_m;
            row_all += row_m;
        }
        /* one point: the cache config, the read-ahead's start, reps replays of the M sets' graph */
        auto measure = [&](const fathom_cuda_tier_cache_config &cc, fathom_cuda_ahead_start start, int r) -> measured {
            FK(fathom_cuda_tier_cache_set(st.tier, sid, &cc));
            FK(fathom_cuda_tier_set_ahead_start(st.tier, start));
            for (uint32_t m = 0; m < M; m++) steps(set_of(m), NULL); /* the window notes every set's plans */
            FK(fathom_cuda_tier_cache_fill(st.tier, sid, NULL, s));
            measured x;
            FK(fathom_cuda_tier_cache_bytes(st.tier, sid, &x.hbm));
            cudaGraph_t g;
            cudaGraphExec_t exec;
            CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
            for (uint32_t m = 0; m < M; m++) steps(set_of(m), d_cnt);
            FK(fathom_cuda_tier_ahead_join(st.tier, s)); /* across: the last layer's read-ahead */
            CK(cudaStreamEndCapture(s, &g));
            CK(cudaGraphInstantiate(&exec, g, graph_flags));
            CK(cudaGraphDestroy(g));
            CK(cudaGraphLaunch(exec, s)); /* warm: the row cache fills, the staging follows the sets */
            CK(cudaMemsetAsync(d_cnt, 0, 32, s));
            const timing t = replay(exec, s, r); /* r + 1 replays counted */
            unsigned long long c[4];
            CK(cudaMemcpy(c, d_cnt, 32, cudaMemcpyDeviceToHost));
            CK(cudaGraphExecDestroy(exec));
            FK(fathom_cuda_tier_set_ahead_start(st.tier, FATHOM_CUDA_AHEAD_BESIDE));
            const double planes = scan_all * (r + 1), rows = row_all * (r + 1);
            x.ms = t.gpu_ms / M;
            x.plane_hit = c[0] / planes, x.row_hit = c[1] / rows;
            x.plane_staged = c[2] / planes, x.row_staged = c[3] / rows;
            return x;
        };
        struct apoint {
            std::string name;
            const trace_point *tp; /* NULL: no cache */
            bool ahead;
            fathom_cuda_ahead_start start;
        };
        const fathom_cuda_ahead_start beside = FATHOM_CUDA_AHEAD_BESIDE;
        const char *start_names[3] = {"beside", "between", "across"};
        std::vector<apoint> pts = {{"none", NULL, false, beside}, {"ahead-only", NULL, true, beside}};
        for (const trace_point &tp : trace_points)
            if (tp.context == context) {
                pts.push_back({tp.name, &tp, false, beside});
                pts.push_back({tp.name + "+ahead", &tp, true, beside});
                pts.push_back({tp.name + "+ahead-between", &tp, true, FATHOM_CUDA_AHEAD_BETWEEN});
                pts.push_back({tp.name + "+ahead-across", &tp, true, FATHOM_CUDA_AHEAD_ACROSS});
            }
        double none_ms = 0, none_tier_ms = 0;
        std::string pj;
        for (size_t i = 0; i < pts.size(); i++) {
            const apoint &pt = pts[i];
            const uint64_t lines = pt.tp ? (uint64_t)llround(pt.tp->plane_frac * lines_mean) : 0;
            const uint64_t slots = pt.tp ? (uint64_t)llround(pt.tp->slot_mult * union_mean) : 0;
            const uint32_t ways = pt.tp ? pt.tp->ways : 1;
            fathom_cuda_tier_cache_config cc = {LH * 10 * blocks * lines, n, row_bytes_for(LH, D, slots, ways),
                                                lines ? (uint32_t)FATHOM_CUDA_TIER_CACHE_WINDOW : 0u, ways,
                                                pt.ahead ? BUDGET : 0u, pt.ahead ? G * K : 0u};
            const bool capped = pt.ahead && pt.tp && pt.tp->plane_ahead >= 0;
            if (capped) { /* the largest ahead_lines, ahead_rows whose cache + staging stay within the trace's */
                const double plane_to = pt.tp->plane + pt.tp->plane_ahead, row_to = pt.tp->row + pt.tp->row_ahead;
                uint32_t lo_l = 0, hi_l = BUDGET, lo_r = 0, hi_r = G * K; /* lo fits (or is 0), the answer <= hi */
                measured x = measure(cc, pt.start, 3);
                if (x.plane_hit + x.plane_staged <= plane_to) lo_l = hi_l;
                if (x.row_hit + x.row_staged <= row_to) lo_r = hi_r;
                while (lo_l < hi_l || lo_r < hi_r) {
                    const uint32_t mid_l = lo_l < hi_l ? (lo_l + hi_l + 1) / 2 : lo_l;
                    const uint32_t mid_r = lo_r < hi_r ? (lo_r + hi_r + 1) / 2 : lo_r;
                    cc.ahead_lines = mid_l, cc.ahead_rows = mid_r;
                    x = measure(cc, pt.start, 3);
                    if (lo_l < hi_l) {
                        if (x.plane_hit + x.plane_staged <= plane_to) lo_l = mid_l;
                        else hi_l = mid_l - 1;
                    }
                    if (lo_r < hi_r) {
                        if (x.row_hit + x.row_staged <= row_to) lo_r = mid_r;
                        else hi_r = mid_r - 1;
                    }
                }
                cc.ahead_lines = lo_l, cc.ahead_rows = lo_r;
            }
            const measured x = measure(cc, pt.start, reps);
            if (i == 0) none_ms = x.ms;
            const double tier_ms = x.ms - L * between_alone / 1e3; /* less the work between the steps, alone */
            if (i == 0) none_tier_ms = tier_ms;
            char buf[900];
            snprintf(buf, sizeof buf,
                     "%s{\"point\": \"%s\", \"lines\": %llu, \"slots\": %llu, \"row_ways\": %u, \"read_ahead\": %s, "
                     "\"ahead_start\": \"%s\", \"ahead_lines\": %u, \"ahead_rows\": %u, \"capped\": %s, "
                     "\"hbm_GB\": %.4f, \"plane_hit\": %.4f, \"row_hit\": %.4f, \"plane_staged\": %.4f, "
                     "\"row_staged\": %.4f, \"ms\": %.4f, \"vs_none\": %.4f, \"tier_ms\": %.4f, "
                     "\"tier_vs_none\": %.4f",
                     i ? ", " : "", pt.name.c_str(), (unsigned long long)lines, (unsigned long long)slots, ways,
                     pt.ahead ? "true" : "false", start_names[pt.start], cc.ahead_lines, cc.ahead_rows,
                     capped ? "true" : "false", x.hbm / 1e9, x.plane_hit, x.row_hit, x.plane_staged, x.row_staged, x.ms,
                     x.ms / none_ms, tier_ms, tier_ms / none_tier_ms);
            std::string one = buf;
            if (pt.tp && pt.tp->plane_ahead >= 0) {
                snprintf(buf, sizeof buf, ", \"trace_plane_ahead\": %.4f, \"trace_row_ahead\": %.4f",
                         pt.tp->plane_ahead, pt.tp->row_ahead);
                one += buf;
            }
            one += "}";
            fprintf(stderr, "  ahead e=%.3f %s\n", e, one.c_str());
            pj += one;
        }
        char head[384];
        snprintf(head, sizeof head, "%s{\"drift\": %.4f, \"cycle\": %u, \"between_us\": %.1f, \"between\": \"%s\", "
                 "\"between_chunks\": %u, \"between_alone_us\": %.1f, \"plan_GB\": %.5f, \"row_GB\": %.5f, "
                 "\"points\": [",
                 di ? ", " : "", e, M, between_us, between_copy ? "copy" : "spin", copy_chunks, between_alone,
                 scan_all / M / 1e9, row_all / M / 1e9);
        js += head + pj + "]}";
    }
    const fathom_cuda_tier_cache_config off = {0, 0, 0, 0, 0, 0, 0};
    FK(fathom_cuda_tier_cache_set(st.tier, sid, &off));
    cudaFree(d_qb);
    cudaFree(d_z);
    cudaFree(d_cnt);
    cudaFree(copy_buf);
    return js + "]";
}

/* fathom_cuda_step over the tier's segment 0 of session 0 at n tokens
 * (n/64 rounded up = S): graphs of L layer-steps. */
static void fixed_steps(setup &st, uint64_t n, cudaStream_t s, int reps, double *kernel_ms,
                        double *lanes_ms, double *direct_ms) {
    const uint32_t L = st.L, P = H;
    std::vector<fathom_cuda_problem> probs(L * P);
    std::vector<float> var(L * P * D), qf(L * P * G * D);
    std::vector<uint16_t> qb(L * P * G * D);
    CK(cudaMemcpy(qb.data(), st.d_q, qb.size() * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < qb.size(); i++) qf[i] = fathom_bf16_to_f32(qb[i]);
    for (uint32_t l = 0; l < L; l++)
        for (uint32_t h = 0; h < P; h++) {
            fathom_cuda_tier_view v;
            FK(fathom_cuda_tier_segment(st.tier, st.ids[0], l, h, 0, &v));
            fathom_cuda_problem &pr = probs[l * P + h];
            memset(&pr, 0, sizeof pr);
            pr.planes = v.planes; /* mapped memory: the same address on the device (UVA) */
            pr.scales = v.scales;
            pr.keys = v.kv;
            pr.values = v.kv + D;
            const double *shift, *sum, *sum_sq;
            FK(fathom_cuda_tier_sums(st.tier, st.ids[0], l, h, &shift, &sum, &sum_sq));
            for (uint32_t j = 0; j < D; j++) { /* fathom_store_variance */
                const double mean = sum[j] / (double)n, x = sum_sq[j] / (double)n - mean * mean;
                var[(l * P + h) * D + j] = x > 0.0 ? (float)x : 0.0f;
            }
        }
    fathom_cuda_problem *d_probs;
    float *d_var, *d_qf, *d_out;
    CK(cudaMalloc((void **)&d_probs, probs.size() * sizeof probs[0]));
    CK(cudaMemcpy(d_probs, probs.data(), probs.size() * sizeof probs[0], cudaMemcpyHostToDevice));
    CK(cudaMalloc((void **)&d_var, var.size() * 4));
    CK(cudaMemcpy(d_var, var.data(), var.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc((void **)&d_qf, qf.size() * 4));
    CK(cudaMemcpy(d_qf, qf.data(), qf.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc((void **)&d_out, qf.size() * 4));
    fathom_cuda_lanes *lanes;
    FK(fathom_cuda_lanes_create(3, &lanes));
    const fathom_cuda_transport tr[3] = {FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_DIRECT};
    double *res[3] = {kernel_ms, lanes_ms, direct_ms};
    for (int v = 0; v < 3; v++) {
        fathom_cuda_config cfg = {D, G, P, n, K, 4, 32, FATHOM_CUDA_SCAN_WATER_FILL, BUDGET, tr[v], 0, 0};
        cfg.row_stride = 2 * D; /* K and V interleaved per token */
        cfg.key_rows = FATHOM_CUDA_KEYS_BF16;
        size_t need;
        FK(fathom_cuda_workspace_size(&cfg, &need));
        void *ws;
        CK(cudaMalloc(&ws, need));
        cudaGraph_t g;
        cudaGraphExec_t exec;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        for (uint32_t l = 0; l < L; l++) {
            fathom_cuda_step_args a;
            memset(&a, 0, sizeof a);
            a.problems = d_probs + l * P;
            a.queries = d_qf + (size_t)l * P * G * D;
            a.variance = d_var + (size_t)l * P * D;
            a.out = d_out + (size_t)l * P * G * D;
            a.workspace = ws;
            a.workspace_bytes = need;
            a.lanes = v == 1 ? lanes : NULL;
            FK(fathom_cuda_step(&cfg, &a, s));
        }
        CK(cudaStreamEndCapture(s, &g));
        CK(cudaGraphInstantiate(&exec, g, graph_flags));
        *res[v] = replay(exec, s, reps).gpu_ms;
        CK(cudaGraphExecDestroy(exec));
        CK(cudaGraphDestroy(g));
        cudaFree(ws);
    }
    fathom_cuda_lanes_destroy(lanes);
    cudaFree(d_probs);
    cudaFree(d_var);
    cudaFree(d_qf);
    cudaFree(d_out);
}

/* A rate in GB/s as JSON: null where the fit found no per-byte time (INFINITY). */
static std::string gbps_json(double bytes_per_s) {
    char b[32];
    if (!isfinite(bytes_per_s)) return "null";
    snprintf(b, sizeof b, "%.3f", bytes_per_s / 1e9);
    return b;
}

/* Capture L x fathom_cuda_hybrid_step with host_pairs on the host. */
static cudaGraphExec_t capture_hybrid(setup &st, fathom_cuda_hybrid *hy, uint32_t host_pairs, cudaStream_t s) {
    cudaGraph_t g;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (uint32_t l = 0; l < st.L; l++) {
        fathom_cuda_tier_step_args a = args_of(st, l);
        FK(fathom_cuda_hybrid_step(hy, &a, host_pairs, s));
    }
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&exec, g, graph_flags));
    CK(cudaGraphDestroy(g));
    return exec;
}

/* The --hybrid mode at context N (see the header): one JSON object. */
static std::string hybrid_context(uint32_t L, uint64_t N, const std::vector<uint64_t> &threads, int reps,
                                  cudaStream_t s) {
    const uint64_t n = N - 64;
    const uint32_t S = hybrid_segment_blocks ? hybrid_segment_blocks : (uint32_t)(N / 64);
    setup st = make_setup(L, S, {n}, N);
    cudaGraphExec_t gpu = capture(st, s, false, true);
    const double gpu_ms = replay(gpu, s, reps).gpu_ms;
    CK(cudaGraphExecDestroy(gpu));
    double scan_b, row_b;
    bytes_of(st, {n}, &scan_b, &row_b);
    char buf[1024];
    snprintf(buf, sizeof buf, "{\"context\": %llu, \"length\": %llu, \"segment_blocks\": %u, \"gpu_only_ms\": %.4f, "
             "\"scan_GB\": %.4f, \"row_GB\": %.4f, \"threads\": [",
             (unsigned long long)N, (unsigned long long)n, S, gpu_ms, scan_b / 1e9, row_b / 1e9);
    std::string js = buf;
    fprintf(stderr, "  GPU only: %.3f ms per step of %u layers\n", gpu_ms, L);
    /* the hybrid with `threads` host threads: rates, share and the step at every share */
    auto hybrid_at = [&](uint64_t threads_n, const char *lead) {
        fathom_cuda_hybrid *hy = NULL;
        FK(fathom_cuda_hybrid_create(st.tier, (uint32_t)threads_n, H, K, &hy));
        fathom_cuda_tier_step_args a0 = args_of(st, 0);
        fathom_cuda_hybrid_rates r;
        FK(fathom_cuda_hybrid_calibrate(hy, &a0, s, &r));
        uint32_t share = 0;
        FK(fathom_cuda_hybrid_share(hy, &a0, &n, &share));
        std::string by = "[";
        double best = 1e30, chosen = 0;
        uint32_t best_c = 0;
        for (uint32_t c = 0; c <= H; c++) {
            cudaGraphExec_t exec = capture_hybrid(st, hy, c, s);
            const double ms = replay(exec, s, reps).gpu_ms;
            CK(cudaGraphExecDestroy(exec));
            FK(fathom_cuda_hybrid_check(hy));
            FK(fathom_cuda_tier_check(st.tier));
            if (ms < best) best = ms, best_c = c;
            if (c == share) chosen = ms;
            snprintf(buf, sizeof buf, "%s%.4f", c ? ", " : "", ms);
            by += buf;
        }
        by += "]";
        fprintf(stderr, "  %2llu threads: cpu %.2f GB/s + %.3f ms, gpu %.2f GB/s + %.3f ms, share %u: %.3f ms (best %u: "
                "%.3f ms) %s\n", (unsigned long long)threads_n, r.cpu_bytes_per_s / 1e9, r.cpu_fixed_s * 1e3,
                r.gpu_bytes_per_s / 1e9, r.gpu_fixed_s * 1e3, share, chosen, best_c, best, by.c_str());
        snprintf(buf, sizeof buf,
                 "%s\"threads\": %llu, \"cpu_GBps\": %.3f, \"cpu_fixed_ms\": %.4f, \"gpu_GBps\": %s, "
                 "\"gpu_fixed_ms\": %.4f, \"noise\": %.4f, \"share\": %u, \"ms\": %.4f, \"vs_gpu_only\": %.4f, "
                 "\"best_share\": %u, \"best_ms\": %.4f, \"ms_by_share\": ",
                 lead, (unsigned long long)threads_n, r.cpu_bytes_per_s / 1e9, r.cpu_fixed_s * 1e3,
                 gbps_json(r.gpu_bytes_per_s).c_str(), r.gpu_fixed_s * 1e3, r.noise, share, chosen, chosen / gpu_ms,
                 best_c, best);
        fathom_cuda_hybrid_destroy(hy);
        return buf + by;
    };
    for (size_t i = 0; i < threads.size(); i++) js += hybrid_at(threads[i], i ? ", {" : "{") + "}";
    js += "], \"cache\": [";
    /* the cache at each --trace-point of this context, from the GPU-only step's plans and unions */
    bool first_point = true;
    double lines_mean, union_mean;
    plan_means(st, &lines_mean, &union_mean);
    const uint32_t sid = st.ids[0];
    const uint64_t LH = (uint64_t)L * H, blocks = (n + 63) / 64;
    for (const trace_point &tp : trace_points) {
        if (tp.context != N) continue;
        const uint64_t lines = (uint64_t)llround(tp.plane_frac * lines_mean),
                       slots = (uint64_t)llround(tp.slot_mult * union_mean);
        const fathom_cuda_tier_cache_config cc = {LH * 10 * blocks * lines, n, row_bytes_for(LH, D, slots, tp.ways),
                                                  0, tp.ways, 0, 0};
        set_trace_cache(st, sid, cc, s);
        uint64_t hbm = 0;
        FK(fathom_cuda_tier_cache_bytes(st.tier, sid, &hbm));
        unsigned long long *d_hits;
        CK(cudaMalloc((void **)&d_hits, 16));
        cudaGraph_t g;
        cudaGraphExec_t exec;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        for (uint32_t l = 0; l < L; l++) {
            fathom_cuda_tier_step_args a = args_of(st, l);
            a.cache_bytes = d_hits;
            FK(fathom_cuda_tier_step(st.tier, &a, s));
        }
        CK(cudaStreamEndCapture(s, &g));
        CK(cudaGraphInstantiate(&exec, g, graph_flags));
        CK(cudaGraphDestroy(g));
        CK(cudaGraphLaunch(exec, s)); /* warm: the row cache fills */
        CK(cudaMemsetAsync(d_hits, 0, 16, s));
        const double cached_ms = replay(exec, s, reps).gpu_ms; /* reps + 1 replays counted */
        CK(cudaGraphExecDestroy(exec));
        unsigned long long hits[2];
        CK(cudaMemcpy(hits, d_hits, 16, cudaMemcpyDeviceToHost));
        cudaFree(d_hits);
        double scan_c, row_c;
        bytes_of(st, {n}, &scan_c, &row_c);
        const double ph = hits[0] / (scan_c * (reps + 1)), rh = hits[1] / (row_c * (reps + 1));
        const double index_bytes = (double)LH * blocks * D * (FATHOM_PLANES * 8 + 2);
        fprintf(stderr, "  cache %s: planes %.3f rows %.3f hit, GPU only %.3f ms (%.3fx uncached)\n", tp.name.c_str(),
                ph, rh, cached_ms, cached_ms / gpu_ms);
        snprintf(buf, sizeof buf,
                 "%s{\"point\": \"%s\", \"trace_plane_hit\": %.4f, \"trace_row_hit\": %.4f, \"row_ways\": %u, "
                 "\"lines\": %llu, \"plan_lines\": %.2f, \"slots\": %llu, \"union_mean\": %.1f, "
                 "\"hbm_of_index\": %.4f, "
                 "\"plane_hit\": %.4f, \"row_hit\": %.4f, \"gpu_only_ms\": %.4f, \"gpu_only_vs_uncached\": %.4f, "
                 "\"hybrid\": {",
                 first_point ? "" : ", ", tp.name.c_str(), tp.plane, tp.row, tp.ways, (unsigned long long)lines,
                 lines_mean, (unsigned long long)slots, union_mean, hbm / index_bytes, ph, rh, cached_ms,
                 cached_ms / gpu_ms);
        first_point = false;
        std::string cjs = buf;
        const double uncached_ms = gpu_ms;
        std::string hj = hybrid_at(threads.back(), "");
        /* hybrid_at's vs_gpu_only is against the uncached GPU-only step (gpu_ms) */
        js += cjs + hj;
        snprintf(buf, sizeof buf, "}, \"uncached_gpu_only_ms\": %.4f}", uncached_ms);
        js += buf;
        const fathom_cuda_tier_cache_config off = {0, 0, 0, 0, 0, 0, 0};
        FK(fathom_cuda_tier_cache_set(st.tier, sid, &off));
    }
    js += "]";
    free_setup(st);
    return js + "}";
}

int main(int argc, char **argv) {
    std::vector<uint64_t> contexts = {131072, 1048576};
    std::vector<uint64_t> threads = {1, 2, 4, 8, 15};
    bool hybrid = false;
    std::vector<uint64_t> ragged = {1000000, 600000, 300000, 131072};
    uint32_t L = 4;
    int reps = 50;
    bool only_tier = false, only_cache = false;
    for (int i = 1; i < argc; i++) {
        auto list = [&](std::vector<uint64_t> &v) {
            v.clear();
            for (char *p = argv[++i]; *p;) {
                v.push_back(strtoull(p, &p, 10));
                if (*p == ',') p++;
            }
        };
        if (!strcmp(argv[i], "--contexts") && i + 1 < argc) list(contexts);
        else if (!strcmp(argv[i], "--ragged") && i + 1 < argc) list(ragged);
        else if (!strcmp(argv[i], "--layers") && i + 1 < argc) L = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--chunk") && i + 1 < argc) chunk_heads = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only-tier")) only_tier = true;
        else if (!strcmp(argv[i], "--only-cache")) only_cache = true;
        else if (!strcmp(argv[i], "--profile") && i + 1 < argc) profile_point = argv[++i];
        else if (!strcmp(argv[i], "--hybrid")) hybrid = true;
        else if (!strcmp(argv[i], "--int8")) scan_int8 = true;
        else if (!strcmp(argv[i], "--ahead-cycle") && i + 1 < argc) {
            ahead_cycle = (uint32_t)atoi(argv[++i]);
            if (ahead_cycle < 2 || ahead_cycle > 16) {
                fprintf(stderr, "--ahead-cycle: 2..16 query sets\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--flat-priority")) {
            graph_flags = 0;
        } else if (!strcmp(argv[i], "--between-copy")) {
            between_copy = true;
        } else if (!strcmp(argv[i], "--between-us") && i + 1 < argc) {
            between_us = strtod(argv[++i], NULL);
            if (!(between_us >= 0 && between_us <= 1e5)) {
                fprintf(stderr, "--between-us: microseconds in [0, 100000]\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--read-ahead") && i + 1 < argc) {
            for (char *p = argv[++i]; *p;) {
                const double e = strtod(p, &p);
                if (!(e >= 0 && e <= 1)) {
                    fprintf(stderr, "--read-ahead: drifts in [0, 1], comma-separated\n");
                    return 2;
                }
                ahead_drifts.push_back(e);
                if (*p == ',') p++;
                else if (*p) {
                    fprintf(stderr, "--read-ahead: drifts in [0, 1], comma-separated\n");
                    return 2;
                }
            }
        }
        else if (!strcmp(argv[i], "--segment-blocks") && i + 1 < argc)
            hybrid_segment_blocks = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--trace-point") && i + 1 < argc) {
            trace_point tp;
            if (!parse_trace_point(argv[++i], &tp)) {
                fprintf(stderr, "--trace-point: want NAME:CONTEXT:PLANE:ROW[:WAYS[:PLANE_AHEAD:ROW_AHEAD]] (NAME of letters, "
                        "digits and ._%%/-, at most 64; context >= 4096; rates in [0, 1], row < 1, rate + its "
                        "read-ahead rate <= 1; WAYS 1, 2, 4 or 8), got "
                        "'%s'\n", argv[i]);
                return 2;
            }
            trace_points.push_back(tp);
        }
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) list(threads);
        else if (!strcmp(argv[i], "--json")) {
        } else {
            fprintf(stderr, "usage: %s [--contexts N,..] [--ragged N,N,N,N] [--layers L] [--reps R] [--chunk C] [--only-tier] [--only-cache] [--profile POINT,..] [--trace-point NAME:N:PLANE:ROW[:WAYS[:PA:RA]] ..] [--hybrid [--threads T,..] [--segment-blocks S]] [--int8] [--read-ahead E,.. [--between-us X [--between-copy]] [--ahead-cycle M]] [--flat-priority] [--json]\n", argv[0]);
            return 2;
        }
    }
    if (!fathom_cuda_device_present()) {
        fprintf(stderr, "no CUDA device\n");
        return 77;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const double link = link_gbps();
    fprintf(stderr, "link %.1f GB/s\n", link);
    std::string js;
    char buf[1024];
    if (hybrid) {
        snprintf(buf, sizeof buf,
                 "{\"bench\": \"tier-hybrid\", \"gpu\": \"%s\", \"machine\": \"%s / %s\", \"layers\": %u, "
                 "\"kv_heads\": %u, \"group\": %u, \"dim\": %u, \"k\": %u, \"method\": \"fathom:%u\", "
                 "\"scan_mode\": \"%s\", \"calibration\": \"median of 5 replays, a share taken only when it "
                 "gains more than their spread\", \"reps\": %d, \"link_GBps\": %.2f, "
                 "\"node_priority\": %s, \"decode\": [",
                 prop.name, prop.name, bench_host_cpu().c_str(), L, H, G, D, K, BUDGET, scan_int8 ? "int8" : "exact",
                 reps, link, graph_flags ? "true" : "false");
        js += buf;
        for (size_t c = 0; c < contexts.size(); c++) {
            fprintf(stderr, "hybrid at %llu tokens\n", (unsigned long long)contexts[c]);
            js += (c ? ", " : "") + hybrid_context(L, contexts[c], threads, reps, s);
        }
        printf("%s]}\n", js.c_str());
        return 0;
    }
    snprintf(buf, sizeof buf,
             "{\"bench\": \"tier\", \"gpu\": \"%s\", \"machine\": \"%s / %s\", \"layers\": %u, \"kv_heads\": %u, "
             "\"group\": %u, \"dim\": %u, \"k\": %u, \"method\": \"fathom:%u\", \"scan_mode\": \"%s\", "
             "\"reps\": %d, \"chunk\": %u, \"link_GBps\": %.2f, \"node_priority\": %s, \"decode\": [",
             prop.name, prop.name, bench_host_cpu().c_str(), L, H, G, D, K, BUDGET, scan_int8 ? "int8" : "exact", reps,
             chunk_heads, link, graph_flags ? "true" : "false");
    js += buf;
    for (size_t c = 0; c < contexts.size(); c++) {
        const uint64_t N = contexts[c];
        fprintf(stderr, "decode at %llu tokens\n", (unsigned long long)N);
        const uint64_t n0 = N - 3 * (uint64_t)reps - 10;
        setup st = make_setup(L, (uint32_t)(N / 64), {n0}, N);
        /* eager enqueue of the L steps (no appends), host clock */
        double eager_us = 1e30;
        for (int i = 0; i < 5; i++) {
            const double h0 = now_s();
            for (uint32_t l = 0; l < L; l++) {
                fathom_cuda_tier_step_args a = args_of(st, l);
                FK(fathom_cuda_tier_step(st.tier, &a, s));
            }
            eager_us = std::min(eager_us, (now_s() - h0) * 1e6);
            CK(cudaStreamSynchronize(s));
        }
        cudaGraphExec_t full = capture(st, s, true, true);
        const timing tier = replay(full, s, reps); /* reps + 1 tokens appended */
        double scan_b, row_b;
        const uint64_t n_now = n0 + reps + 1;
        bytes_of(st, {n_now}, &scan_b, &row_b);
        cudaGraphExec_t app = capture(st, s, true, false);
        const timing append = replay(app, s, reps);
        FK(fathom_cuda_tier_set_lanes(st.tier, 0, 0));
        cudaGraphExec_t one = capture(st, s, true, true);
        const timing one_stream = replay(one, s, reps);
        FK(fathom_cuda_tier_set_lanes(st.tier, 3, chunk_heads));
        CK(cudaGraphExecDestroy(full));
        CK(cudaGraphExecDestroy(app));
        CK(cudaGraphExecDestroy(one));
        FK(fathom_cuda_tier_check(st.tier));
        uint64_t len;
        FK(fathom_cuda_tier_length(st.tier, st.ids[0], &len));
        double fk = 0, fl = 0, fd = 0;
        if (!only_tier && !only_cache) fixed_steps(st, len, s, reps, &fk, &fl, &fd);
        const double best = only_tier || only_cache ? 1.0 : std::min(fk, std::min(fl, fd));
        const std::string cache_js = only_tier ? std::string("[]") : cache_sweep(st, N, len, s, reps, link);
        const std::string ahead_js =
            ahead_drifts.empty() || only_tier ? std::string() : ", \"ahead\": " + ahead_sweep(st, N, len, s, reps);
        const double floor_ms = (scan_b + row_b) / (link * 1e9) * 1e3;
        snprintf(buf, sizeof buf,
                 "%s{\"context\": %llu, \"length_after\": %llu, \"tier_ms\": %.4f, \"tier_host_us\": %.2f, "
                 "\"one_stream_ms\": %.4f, "
                 "\"append_ms\": %.4f, \"append_share\": %.4f, \"fixed_kernel_ms\": %.4f, \"fixed_lanes_ms\": %.4f, "
                 "\"fixed_direct_ms\": %.4f, \"fixed_best_ms\": %.4f, \"tier_vs_fixed\": %.4f, "
                 "\"eager_enqueue_us\": %.1f, \"scan_GB\": %.4f, \"row_GB\": %.4f, \"floor_ms\": %.4f, "
                 "\"tier_x_floor\": %.4f, \"cache\": ",
                 c ? ", " : "", (unsigned long long)N, (unsigned long long)len, tier.gpu_ms, tier.host_us, one_stream.gpu_ms,
                 append.gpu_ms, append.gpu_ms / tier.gpu_ms, fk, fl, fd, best, tier.gpu_ms / best, eager_us,
                 scan_b / 1e9, row_b / 1e9, floor_ms, tier.gpu_ms / floor_ms);
        fprintf(stderr, "  %s\n", buf);
        js += buf + cache_js + ahead_js + "}";
        free_setup(st);
    }
    js += "]";
    if (ragged.size() == 4 && !only_tier && !only_cache) {
        fprintf(stderr, "ragged batch\n");
        uint64_t cap = 0;
        for (uint64_t n : ragged) cap = std::max(cap, n + reps + 2);
        cap = (cap + 65535) / 65536 * 65536;
        setup st = make_setup(L, 1024, ragged, cap);
        cudaGraphExec_t full = capture(st, s, true, true);
        const timing t = replay(full, s, reps);
        std::vector<uint64_t> now(4);
        for (int i = 0; i < 4; i++) now[i] = ragged[i] + reps + 1;
        double scan_b, row_b;
        bytes_of(st, now, &scan_b, &row_b);
        FK(fathom_cuda_tier_set_lanes(st.tier, 0, 0));
        cudaGraphExec_t one = capture(st, s, true, true);
        const timing t1 = replay(one, s, reps);
        FK(fathom_cuda_tier_check(st.tier));
        CK(cudaGraphExecDestroy(full));
        CK(cudaGraphExecDestroy(one));
        const double floor_ms = (scan_b + row_b) / (link * 1e9) * 1e3;
        snprintf(buf, sizeof buf,
                 ", \"ragged\": {\"lengths\": [%llu, %llu, %llu, %llu], \"segment_blocks\": 1024, "
                 "\"capacity_tokens\": %llu, \"ms\": %.4f, \"host_us\": %.2f, \"one_stream_ms\": %.4f, "
                 "\"scan_GB\": %.4f, \"row_GB\": %.4f, "
                 "\"floor_ms\": %.4f, \"x_floor\": %.4f}",
                 (unsigned long long)ragged[0], (unsigned long long)ragged[1], (unsigned long long)ragged[2],
                 (unsigned long long)ragged[3], (unsigned long long)cap, t.gpu_ms, t.host_us, t1.gpu_ms, scan_b / 1e9,
                 row_b / 1e9, floor_ms, t.gpu_ms / floor_ms);
        fprintf(stderr, "  %s\n", buf);
        js += buf;
        free_setup(st);
    }
    js += "}";
    printf("%s\n", js.c_str());
    return 0;
}

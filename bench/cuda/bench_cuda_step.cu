/* bench_cuda_step — GPU time of one decode step (every layer and KV head),
 * Qwen3-8B shapes (36 layers x 8 KV heads, G = 4, d = 128, k = 512), per
 * method, context and batch, with a phase breakdown, the bytes moved and
 * the link rate measured in the same run. Also: the gather kernel against
 * cudaMemcpyBatchAsync on the same run lists, the HBM-resident variant (scan bandwidth; each
 * phase the median of 5 recorded runs, with the nibble layouts the plane
 * scans are compared with: nibble4, every channel, and dsnib:c, each ds:c's
 * channels as a nibble label cache), and the bit planes as the primary K
 * cache.
 *
 * What is held, and how (printed again at the start of a run):
 *  - The plane index lives in pinned host memory as whole-context segments
 *    (planes [128][4][nb] and scales [128][nb] per KV head). Every (session,
 *    layer, head) has its own set while the index arena holds them; past
 *    that the sets rotate (set = problem index mod sets held) and the run
 *    says so. A set is >= 2.2 MB and a layer's 8 sets are 17.8 MB at 32k,
 *    so with >= 36 layers' sets held no layer-step can hit in the 60 MB L2
 *    for data another layer-step read; every layer-step moves its own bytes
 *    over PCIe.
 *  - Plane words are uniform random bits (every code 0..15 equally likely,
 *    i.e. random keys in [-a, a)); scales are random fp16 in [0.5, 1).
 *    Landmarks: random fp16. K and V: random bf16 in (-1, 1).
 *  - K/V rows (bf16) and landmarks are held for fewer sets (they do not fit
 *    for 288 heads at 1M); the rotation is printed. Row fetches read with
 *    ld.global.cv (no cached host data is reused).
 *  - Queries are random with log-normal per-channel scales; the plans
 *    (water-filling, top-r) are computed on the GPU from them, per layer
 *    and head, inside the timed step.
 * Timing: the 36 layer-steps of one decode step are captured in one CUDA
 * graph (layer l+1 waits for all of layer l, as a real forward pass must);
 * its replays are timed with events, median of --reps, once with every
 * phase on one stream and once pipelined over --lanes streams
 * (fathom_cuda_lanes; --chunk N heads per chunk, 0 = the library's choice).
 * --prefetch N adds a pipelined run in which every layer prefetches the
 * first N heads of the next layer as they were planned one decode step
 * earlier (see run_config); the bytes and the floor count every prefetched
 * byte. --prefetch-last-min D keeps of the last prefetched head only the
 * channels planned at depth >= D (a prefetch sized to the link's idle time).
 * --k K sets the selection per query head (512; 36 keeps only sink and
 * local rows, which isolates what the row fetch costs a step). Wall-clock: host time from cudaGraphLaunch to the
 * end of cudaStreamSynchronize, median, of the faster of the two graphs. The phase
 * breakdown comes from a separate, non-graph, one-stream run with events
 * between phases (sum of 36 layers); "other" = one-stream graph total - sum
 * of phases (>= 0).
 * Transports: "kernel" gathers the planned runs into HBM staging, then
 * scans; "direct" scans the pinned host memory in place. K/V rows are
 * interleaved per token (row_stride 2*dim) unless a row says "sep" (K and
 * V in separate arrays).
 * --json: the human output goes to stderr and stdout carries one JSON object
 * with every number the tables print, and what produced them: machine (GPU
 * and host CPU), date, the command line, the commit (FATHOM_COMMIT in the
 * environment, else null) and the parameters (docs/results.md is rendered
 * from it by scripts/render-results).
 */
#define FATHOM_CUDA_EXPERIMENTAL /* direct transport, planes as K, nibble scans, phase events, traces */
#include "fathom_cuda.h"

#include <algorithm>
#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <vector>

#include "cuda/cuda_check.cuh"
#include "bench_machine.h"

#define DIM 128
#define LAYERS_DEFAULT 36
#define KV_HEADS 8
#define GROUP 4
static uint32_t g_topk = 512; /* --k: the selection per query head */

#define FK(call)                                                                                   \
    do {                                                                                           \
        int s_ = (call);                                                                           \
        if (s_ != FATHOM_OK) {                                                                     \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, fathom_last_error());    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static const double GB = 1e9;

/* ---------------------------------------------------------------- JSON */

/* One JSON object built field by field; numbers that are not finite are null. */
typedef struct jobj {
    std::string s;
    void key(const char *k) {
        s += s.empty() ? "{" : ",";
        str_value(k);
        s += ":";
    }
    void str_value(const char *v) {
        s += '"';
        for (const char *c = v; *c; c++) {
            char buf[8];
            if (*c == '"' || *c == '\\') { s += '\\'; s += *c; }
            else if ((unsigned char)*c < 0x20) { snprintf(buf, sizeof buf, "\\u%04x", *c); s += buf; }
            else s += *c;
        }
        s += '"';
    }
    void str(const char *k, const char *v) { key(k); if (v) str_value(v); else s += "null"; }
    void num(const char *k, double v, int prec = 4) {
        key(k);
        char buf[64];
        if (isfinite(v)) snprintf(buf, sizeof buf, "%.*f", prec, v);
        else snprintf(buf, sizeof buf, "null");
        s += buf;
    }
    void u64(const char *k, uint64_t v) {
        key(k);
        s += std::to_string((unsigned long long)v);
    }
    void raw(const char *k, const std::string &v) { key(k); s += v; }
    std::string done() const { return s.empty() ? "{}" : s + "}"; }
} jobj;

/* A JSON array of already-built values. */
static std::string jarray(const std::vector<std::string> &items) {
    std::string s = "[";
    for (size_t i = 0; i < items.size(); i++) s += (i ? "," : "") + items[i];
    return s + "]";
}

static std::vector<std::string> g_json_rows;      /* one per printed table row */
static std::vector<std::string> g_json_transfers; /* gather kernel vs cudaMemcpyBatchAsync */
static std::vector<std::string> g_json_timelines; /* traced replays */

/* ---------------------------------------------------------------- setup */

typedef struct method_spec {
    char name[24];
    fathom_cuda_scan_kind scan;
    uint32_t param;
    int fixed_kind; /* FIXED: 1 ds:c, 2 thumb, 3 full4 */
} method_spec;

static int parse_method(const char *s, method_spec *m) {
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", s);
    unsigned v = 0;
    if (sscanf(s, "fathom:%u", &v) == 1) { m->scan = FATHOM_CUDA_SCAN_WATER_FILL; m->param = v; }
    else if (sscanf(s, "sparq:%u", &v) == 1) { m->scan = FATHOM_CUDA_SCAN_TOP_CHANNELS; m->param = v; }
    else if (sscanf(s, "ds:%u", &v) == 1) { m->scan = FATHOM_CUDA_SCAN_FIXED; m->param = v; m->fixed_kind = 1; }
    else if (!strcmp(s, "thumb")) { m->scan = FATHOM_CUDA_SCAN_FIXED; m->fixed_kind = 2; }
    else if (!strcmp(s, "full4")) { m->scan = FATHOM_CUDA_SCAN_FIXED; m->fixed_kind = 3; }
    else if (!strcmp(s, "landmark")) m->scan = FATHOM_CUDA_SCAN_LANDMARK;
    else if (!strcmp(s, "oracle")) m->scan = FATHOM_CUDA_SCAN_ORACLE;
    else if (!strcmp(s, "nibble4")) m->scan = FATHOM_CUDA_SCAN_NIBBLE4; /* random bits read as nibbles */
    else if (sscanf(s, "dsnib:%u", &v) == 1) { /* ds:c's channels from a nibble label cache */
        m->scan = FATHOM_CUDA_SCAN_NIBBLE4; m->param = v; m->fixed_kind = 1;
    }
    else return -1;
    return 0;
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Fill in parallel: kind 0 random bits, 1 fp16 in [0.5,1), 2 fp16 landmarks, 3 bf16 in (-1,1). */
typedef struct fill_job { uint64_t *p; uint64_t words; int kind; uint64_t seed; } fill_job;
static void *fill_thread(void *arg) {
    fill_job *j = (fill_job *)arg;
    uint64_t s = j->seed;
    for (uint64_t i = 0; i < j->words; i++) {
        uint64_t r = splitmix(&s);
        switch (j->kind) {
        case 1: r = (r & 0x03ff03ff03ff03ffull) | 0x3800380038003800ull; break;
        case 2: r = (r & 0x87ff87ff87ff87ffull) | 0x3000300030003000ull; break;
        case 3: r = (r & 0x81ff81ff81ff81ffull) | 0x3e003e003e003e00ull; break;
        default: break;
        }
        j->p[i] = r;
    }
    return NULL;
}

/* Pinned, mapped host memory filled in parallel: malloc'd (2 MiB aligned,
 * huge pages advised) then cudaHostRegister, or cudaHostAlloc (driver pages). */
static void *host_arena(uint64_t bytes, int kind, uint64_t seed, void **device_ptr, int driver_alloc = 0) {
    void *p = NULL;
    bytes = (bytes + (2u << 20) - 1) & ~(uint64_t)((2u << 20) - 1);
    if (driver_alloc) {
        CK(cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    } else {
        if (posix_memalign(&p, 2u << 20, bytes)) { fprintf(stderr, "host alloc %llu failed\n", (unsigned long long)bytes); exit(1); }
        madvise(p, bytes, MADV_HUGEPAGE);
    }
    const int T = 16;
    pthread_t th[T];
    fill_job jobs[T];
    const uint64_t words = bytes / 8, per = (words + T - 1) / T;
    for (int t = 0; t < T; t++) {
        uint64_t first = per * t < words ? per * t : words;
        uint64_t n = words - first < per ? words - first : per;
        jobs[t] = (fill_job){(uint64_t *)p + first, n, kind, seed * 1315423911ull + t};
        pthread_create(&th[t], NULL, fill_thread, &jobs[t]);
    }
    for (int t = 0; t < T; t++) pthread_join(th[t], NULL);
    if (!driver_alloc) CK(cudaHostRegister(p, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable));
    CK(cudaHostGetDevicePointer(device_ptr, p, 0));
    return p;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0f : v[v.size() / 2];
}

/* ---------------------------------------------------------------- arenas */

typedef struct arenas {
    uint64_t planes_cap, scales_cap, lm_cap, kv_cap; /* bytes each (K and V: kv_cap each) */
    uint8_t *planes, *scales, *lm, *k, *v;           /* device-accessible pointers */
} arenas;

typedef struct held {
    uint64_t idx_sets, lm_sets, kv_sets; /* distinct sets held for this context */
} held;

static held sets_for(const arenas *a, uint64_t n, uint64_t needed) {
    const uint64_t nb = (n + 63) / 64;
    held h;
    h.idx_sets = std::min(a->planes_cap / (nb * DIM * 32), a->scales_cap / (nb * DIM * 2));
    h.lm_sets = a->lm_cap / (((n + 7) / 8) * DIM * 2);
    h.kv_sets = a->kv_cap / (n * DIM * 4); /* interleaved [n][K|V] sets in the K arena */
    h.idx_sets = std::min(h.idx_sets, needed);
    h.lm_sets = std::min(h.lm_sets, needed);
    h.kv_sets = std::min(h.kv_sets, needed);
    return h;
}

/* problems for `layers` layer-steps of P = sessions*8 problems each */
static void build_problems(const arenas *a, uint64_t n, uint32_t layers, uint32_t P, const held *h,
                           std::vector<fathom_cuda_problem> &out, int interleaved = 0) {
    const uint64_t nb = (n + 63) / 64;
    out.resize((size_t)layers * P);
    for (uint64_t i = 0; i < (uint64_t)layers * P; i++) {
        fathom_cuda_problem &pr = out[i];
        const uint64_t s = i % h->idx_sets, l = i % h->lm_sets, kv = i % h->kv_sets;
        pr.planes = (const uint64_t *)(a->planes + s * nb * DIM * 32);
        pr.scales = (const uint16_t *)(a->scales + s * nb * DIM * 2);
        pr.landmarks = (const uint16_t *)(a->lm + l * ((n + 7) / 8) * DIM * 2);
        pr.keys = (const uint16_t *)(a->k + kv * n * DIM * 2);
        pr.values = (const uint16_t *)(a->v + kv * n * DIM * 2);
        if (interleaved) { /* [n][K|V] in the K arena, half as many sets */
            pr.keys = (const uint16_t *)(a->k + kv * n * DIM * 4);
            pr.values = pr.keys + DIM;
        }
    }
}

/* ---------------------------------------------------------------- one config */

typedef struct run_result {
    float step_ms;              /* graph replay, median */
    float lanes_ms;             /* the same graph, pipelined over b->lanes */
    float wall1_ms, wall_ms;    /* host wall-clock per step: one-stream graph, pipelined graph */
    float phase_ms[FATHOM_CUDA_PHASES];
    double scan_bytes, row_bytes; /* per step */
    double bits_per_token;      /* code + scale bits, mean over problems */
    float pf_ms, pf_wall_ms;    /* pipelined with --prefetch (0: not run) */
    double pf_scan_bytes;       /* plane bytes moved with the prefetch: gathered + prefetched */
    double pf_hit, pf_waste;    /* prefetched bytes the plans used / did not, over planned bytes */
} run_result;

typedef struct bench_ctx {
    uint32_t layers, reps;
    cudaStream_t stream;
    void *ws;
    size_t ws_bytes;
    float *d_q, *d_var, *d_out;
    float *d_qprev;               /* the previous decode step's queries (same channel scales) */
    uint8_t *d_fixed, *d_depths;
    uint8_t *d_pred;              /* [layers][P][DIM] plans of the previous step's queries */
    uint32_t prefetch;            /* --prefetch: next-layer heads prefetched (0: off) */
    uint32_t prefetch_last_min;   /* --prefetch-last-min D: the last of them only channels at depth >= D */
    uint32_t *d_union;
    fathom_cuda_problem *d_probs; /* [layers][P] */
    cudaEvent_t *ev;              /* [layers][PHASES+1] */
    fathom_cuda_lanes *lanes;     /* NULL: no pipelined graphs */
    uint64_t *d_trace;            /* [layers][FATHOM_CUDA_TRACE_SLOTS] */
    int trace_next;               /* trace the next run_config's pipelined graph */
} bench_ctx;

static void make_fixed(const method_spec *m, const float *var, uint32_t count, uint8_t *fixed) {
    for (uint32_t p = 0; p < count; p++) {
        uint8_t *f = fixed + (size_t)p * DIM;
        const float *v = var + (size_t)p * DIM;
        if (m->fixed_kind == 2) memset(f, 2, DIM);
        else if (m->fixed_kind == 3) memset(f, 4, DIM);
        else {
            /* ds:c — c channels fixed offline: the largest variances */
            memset(f, 0, DIM);
            for (uint32_t c = 0; c < m->param && c < DIM; c++) {
                int best = -1;
                for (uint32_t j = 0; j < DIM; j++)
                    if (!f[j] && (best < 0 || v[j] > v[best])) best = (int)j;
                f[best] = 4;
            }
        }
    }
}

/* Capture the L layer-steps into one graph (pipelined over `lanes` when
 * not NULL); median replay time in ms by events, and by the host clock
 * (launch to synchronized) into *wall_ms when not NULL. */
static float time_graph(bench_ctx *b, const fathom_cuda_config *cfg, const fathom_cuda_step_args *args,
                        const fathom_cuda_lanes *lanes, int reps, float *wall_ms) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal));
    for (uint32_t l = 0; l < b->layers; l++) {
        fathom_cuda_step_args a = args[l];
        a.lanes = lanes;
        FK(fathom_cuda_step(cfg, &a, b->stream));
    }
    CK(cudaStreamEndCapture(b->stream, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    CK(cudaGraphLaunch(exec, b->stream)); /* warm */
    CK(cudaStreamSynchronize(b->stream));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<float> t, w;
    for (int i = 0; i < reps; i++) {
        CK(cudaEventRecord(e0, b->stream));
        const double h0 = now_s();
        CK(cudaGraphLaunch(exec, b->stream));
        CK(cudaEventRecord(e1, b->stream));
        CK(cudaStreamSynchronize(b->stream));
        w.push_back((float)((now_s() - h0) * 1e3));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms);
    }
    CK(cudaGetLastError());
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    if (wall_ms) *wall_ms = median(w);
    return median(t);
}

static run_result run_config(bench_ctx *b, const method_spec *m, uint64_t n, uint32_t P,
                             fathom_cuda_transport transport, fathom_cuda_key_rows key_rows,
                             int graph_reps, uint32_t row_stride = 0, int breakdown_reps = 1) {
    run_result r;
    memset(&r, 0, sizeof r);
    fathom_cuda_config cfg = {DIM, GROUP, P, n, g_topk, 4, 32, m->scan, m->param, transport, row_stride,
                              (uint32_t)key_rows};
    size_t need = 0;
    FK(fathom_cuda_workspace_size(&cfg, &need));
    if (need > b->ws_bytes) { fprintf(stderr, "workspace %zu > %zu\n", need, b->ws_bytes); exit(1); }
    const uint32_t L = b->layers;
    std::vector<fathom_cuda_step_args> args(L);
    for (uint32_t l = 0; l < L; l++) {
        fathom_cuda_step_args &a = args[l];
        memset(&a, 0, sizeof a);
        a.problems = b->d_probs + (size_t)l * P;
        a.queries = b->d_q + (size_t)l * P * GROUP * DIM;
        a.variance = b->d_var + (size_t)l * P * DIM;
        /* FIXED, and NIBBLE4 over ds:c's channels (else every channel) */
        a.fixed_depths = m->fixed_kind ? b->d_fixed + (size_t)l * P * DIM : NULL;
        a.out = b->d_out + (size_t)l * P * GROUP * DIM;
        a.depths = b->d_depths + (size_t)l * P * DIM;
        a.union_count = b->d_union + (size_t)l * P;
        a.workspace = b->ws;
        a.workspace_bytes = b->ws_bytes;
    }
    /* breakdown run: events between phases, after one unrecorded run (the
     * first launch of a kernel loads its module: the first config's
     * breakdown once showed a 32k scan at 3x its 128k time); each phase's
     * median over breakdown_reps recorded runs */
    std::vector<float> per_run[FATHOM_CUDA_PHASES];
    for (int pass = 0; pass < 1 + breakdown_reps; pass++) {
        for (uint32_t l = 0; l < L; l++) {
            fathom_cuda_step_args a = args[l];
            a.phase_events = b->ev + (size_t)l * (FATHOM_CUDA_PHASES + 1);
            FK(fathom_cuda_step(&cfg, &a, b->stream));
        }
        CK(cudaStreamSynchronize(b->stream));
        if (pass == 0) continue;
        for (int ph = 0; ph < FATHOM_CUDA_PHASES; ph++) {
            float total = 0;
            for (uint32_t l = 0; l < L; l++) {
                float ms = 0;
                cudaEvent_t *e = b->ev + (size_t)l * (FATHOM_CUDA_PHASES + 1);
                CK(cudaEventElapsedTime(&ms, e[ph], e[ph + 1]));
                total += ms;
            }
            per_run[ph].push_back(total);
        }
    }
    for (int ph = 0; ph < FATHOM_CUDA_PHASES; ph++) r.phase_ms[ph] = median(per_run[ph]);
    /* bytes: from the plans and union sizes this run produced */
    std::vector<uint8_t> depths((size_t)L * P * DIM);
    std::vector<uint32_t> uni((size_t)L * P);
    CK(cudaMemcpy(depths.data(), b->d_depths, depths.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(uni.data(), b->d_union, uni.size() * 4, cudaMemcpyDeviceToHost));
    double bits = 0;
    for (size_t i = 0; i < (size_t)L * P; i++) {
        double sb;
        if (m->scan == FATHOM_CUDA_SCAN_LANDMARK) sb = (double)((n + 7) / 8) * DIM * 2;
        else if (m->scan == FATHOM_CUDA_SCAN_ORACLE) sb = (double)n * DIM * 2;
        else sb = (double)fathom_cuda_plane_bytes(DIM, n, &depths[i * DIM]);
        r.scan_bytes += sb;
        bits += sb * 8.0 / (double)n;
        r.row_bytes += (double)uni[i] * DIM * 2 * 2;
    }
    r.bits_per_token = bits / ((double)L * P);
    /* graph of the whole step on one stream, then pipelined over the lanes */
    r.step_ms = time_graph(b, &cfg, args.data(), NULL, graph_reps, &r.wall1_ms);
    if (b->trace_next && b->lanes) {
        /* one traced replay of the pipelined graph: where a layer's time goes */
        b->trace_next = 0;
        CK(cudaMemset(b->d_trace, 0, (size_t)L * FATHOM_CUDA_TRACE_SLOTS * 8));
        FK(fathom_cuda_lanes_trace(b->lanes, b->d_trace, L));
        const float traced = time_graph(b, &cfg, args.data(), b->lanes, 1, NULL);
        FK(fathom_cuda_lanes_trace(b->lanes, NULL, 0));
        std::vector<uint64_t> t((size_t)L * FATHOM_CUDA_TRACE_SLOTS);
        CK(cudaMemcpy(t.data(), b->d_trace, t.size() * 8, cudaMemcpyDeviceToHost));
        const uint32_t per = fathom_cuda_lanes_chunk(b->lanes, &cfg), chunks = (P + per - 1) / per;
        double layer = 0, lead = 0, busy = 0, gaps = 0, tail = 0, chain = 0, wait = 0, between = 0;
        double sel = 0, fetch = 0, att = 0, last_sel = 0, last_fetch = 0, last_att = 0;
        for (uint32_t l = 0; l < L; l++) {
            const uint64_t *x = t.data() + (size_t)l * FATHOM_CUDA_TRACE_SLOTS;
            const uint64_t *c0 = x + 2, *cl = x + 2 + 6 * (chunks - 1);
            layer += x[1] - x[0];
            lead += c0[0] - x[0];
            tail += x[1] - cl[1];
            for (uint32_t c = 0; c < chunks; c++) {
                const uint64_t *e = x + 2 + 6 * c;
                busy += e[1] - e[0];
                if (c) gaps += e[0] - e[-6 + 1];
                chain += e[5] - e[2];
                wait += e[2] - e[1];
                sel += e[3] - e[2];
                fetch += e[4] - e[3];
                att += e[5] - e[4];
                if (c + 1 == chunks) {
                    last_sel += e[3] - e[2];
                    last_fetch += e[4] - e[3];
                    last_att += e[5] - e[4];
                }
            }
            if (l + 1 < L) between += x[FATHOM_CUDA_TRACE_SLOTS] - x[1];
        }
        const double us = 1e-3 / L;
        printf("   timeline (traced replay %.2f ms, per layer, us): layer %.0f = lead %.0f + link phases %.0f "
               "+ link gaps %.0f + tail %.0f; chunk chain %.0f (lane start after its bytes %.0f); "
               "between layers (plan) %.0f\n"
               "   chunk chain = scan (if staged) + top-k %.0f, fetch %.0f, attention %.0f; last chunk %.0f, %.0f, %.0f\n",
               traced, layer * us, lead * us, busy * us, gaps * us, tail * us, chain * us / chunks,
               wait * us / chunks, L > 1 ? between * 1e-3 / (L - 1) : 0.0, sel * us / chunks, fetch * us / chunks,
               att * us / chunks, last_sel * us, last_fetch * us, last_att * us);
        jobj t_j;
        t_j.str("method", m->name);
        t_j.u64("context", n);
        t_j.u64("batch", P / KV_HEADS);
        t_j.u64("chunks", chunks);
        t_j.num("traced_ms", traced, 3);
        t_j.num("layer_us", layer * us, 1);
        t_j.num("lead_us", lead * us, 1);
        t_j.num("link_phases_us", busy * us, 1);
        t_j.num("link_gaps_us", gaps * us, 1);
        t_j.num("tail_us", tail * us, 1);
        t_j.num("chunk_chain_us", chain * us / chunks, 1);
        t_j.num("lane_start_after_bytes_us", wait * us / chunks, 1);
        t_j.num("between_layers_us", L > 1 ? between * 1e-3 / (L - 1) : 0.0, 1);
        t_j.num("chunk_topk_us", sel * us / chunks, 1);
        t_j.num("chunk_fetch_us", fetch * us / chunks, 1);
        t_j.num("chunk_attend_us", att * us / chunks, 1);
        t_j.num("last_chunk_topk_us", last_sel * us, 1);
        t_j.num("last_chunk_fetch_us", last_fetch * us, 1);
        t_j.num("last_chunk_attend_us", last_att * us, 1);
        g_json_timelines.push_back(t_j.done());
    }
    r.lanes_ms = 0;
    r.wall_ms = 0;
    if (b->lanes) {
        CK(cudaMemset(b->d_out, 0xff, (size_t)L * P * GROUP * DIM * 4));
        r.lanes_ms = time_graph(b, &cfg, args.data(), b->lanes, graph_reps, &r.wall_ms);
    }
    const bool prefix_scan = m->scan == FATHOM_CUDA_SCAN_WATER_FILL ||
                             m->scan == FATHOM_CUDA_SCAN_TOP_CHANNELS || m->scan == FATHOM_CUDA_SCAN_FIXED;
    if (b->prefetch && b->lanes && transport == FATHOM_CUDA_GATHER_KERNEL && prefix_scan && L > 1) {
        /* speculative prefetch: during layer l's tail, the first `pf` heads of
         * layer l+1 as that layer planned them one decode step earlier (its
         * plans from the previous step's queries: same channel scales, fresh
         * draws, which reuse ~77 % of a head's bytes; on real activations
         * 79 %). Every prefetched byte is counted as moved. */
        const uint32_t pf = std::min(b->prefetch, P);
        for (uint32_t l = 0; l < L; l++) {
            fathom_cuda_step_args a = args[l];
            a.queries = b->d_qprev + (size_t)l * P * GROUP * DIM;
            a.depths = b->d_pred + (size_t)l * P * DIM;
            FK(fathom_cuda_step(&cfg, &a, b->stream));
        }
        CK(cudaStreamSynchronize(b->stream));
        std::vector<uint8_t> pred((size_t)L * P * DIM);
        CK(cudaMemcpy(pred.data(), b->d_pred, pred.size(), cudaMemcpyDeviceToHost));
        if (b->prefetch_last_min > 1) {
            /* the last prefetched head only in part: its channels planned at
             * least this deep, to fit the prefetch to the link's idle time */
            for (uint32_t l = 0; l < L; l++)
                for (uint32_t j = 0; j < DIM; j++) {
                    uint8_t &t = pred[((size_t)l * P + pf - 1) * DIM + j];
                    if (t < b->prefetch_last_min) t = 0;
                }
            CK(cudaMemcpy(b->d_pred, pred.data(), pred.size(), cudaMemcpyHostToDevice));
        }
        std::vector<fathom_cuda_step_args> pa(args);
        for (uint32_t l = 0; l < L; l++) {
            if (l + 1 < L) {
                pa[l].prefetch_problems = args[l + 1].problems;
                pa[l].prefetch_depths = b->d_pred + (size_t)(l + 1) * P * DIM;
                pa[l].prefetch_count = pf;
            }
            if (l > 0) {
                pa[l].staged_depths = b->d_pred + (size_t)l * P * DIM;
                pa[l].staged_count = pf;
            }
        }
        CK(cudaMemset(b->d_out, 0xff, (size_t)L * P * GROUP * DIM * 4));
        r.pf_ms = time_graph(b, &cfg, pa.data(), b->lanes, graph_reps, &r.pf_wall_ms);
        /* the overlap min(t, s) has a channel's scales iff both have: its
         * bytes are the planned bytes already staged */
        double planned = 0, hit = 0, moved = 0;
        uint8_t common[DIM];
        for (uint32_t l = 0; l < L; l++)
            for (uint32_t p = 0; p < P; p++) {
                const uint8_t *t = &depths[((size_t)l * P + p) * DIM], *sp = &pred[((size_t)l * P + p) * DIM];
                const double need = (double)fathom_cuda_plane_bytes(DIM, n, t);
                double got = 0, prefetched = 0;
                if (l > 0 && p < pf) {
                    for (uint32_t j = 0; j < DIM; j++) common[j] = std::min(t[j], sp[j]);
                    got = (double)fathom_cuda_plane_bytes(DIM, n, common);
                    prefetched = (double)fathom_cuda_plane_bytes(DIM, n, sp);
                }
                planned += need;
                hit += got;
                moved += need - got + prefetched;
            }
        r.pf_scan_bytes = moved;
        r.pf_hit = hit / planned;
        r.pf_waste = (moved - planned) / planned;
    }
    /* the output must be finite everywhere (it was poisoned before the config) */
    std::vector<float> out((size_t)L * P * GROUP * DIM);
    CK(cudaMemcpy(out.data(), b->d_out, out.size() * 4, cudaMemcpyDeviceToHost));
    for (float x : out)
        if (!isfinite(x)) { fprintf(stderr, "non-finite output in %s n=%llu\n", m->name, (unsigned long long)n); exit(1); }
    return r;
}

/* ---------------------------------------------------------------- link */

static double link_rate(void *host, void *dev, uint64_t bytes, cudaStream_t s) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<float> t;
    for (int i = 0; i < 9; i++) {
        CK(cudaEventRecord(e0, s));
        CK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s));
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (i) t.push_back(ms);
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return (double)bytes / (median(t) * 1e-3) / GB;
}

/* cudaMemcpyBatchAsync over one layer-step's active runs (the run list must be
 * on the host: it needs the plan copied back, so it cannot sit in the graph). */
static float time_batch_memcpy(bench_ctx *b, const std::vector<fathom_cuda_problem> &probs,
                               uint64_t n, uint32_t P, uint8_t *stage_dev) {
    const uint64_t nb = (n + 63) / 64;
    const uint32_t L = b->layers;
    std::vector<uint8_t> depths((size_t)L * P * DIM);
    CK(cudaMemcpy(depths.data(), b->d_depths, depths.size(), cudaMemcpyDeviceToHost));
    std::vector<std::vector<void *>> dsts(L);
    std::vector<std::vector<const void *>> srcs(L);
    std::vector<std::vector<size_t>> sizes(L);
    for (uint32_t l = 0; l < L; l++)
        for (uint32_t p = 0; p < P; p++) {
            const fathom_cuda_problem &pr = probs[(size_t)l * P + p];
            uint8_t *stage = stage_dev + (size_t)p * nb * DIM * 34;
            for (uint32_t j = 0; j < DIM; j++) {
                const uint32_t t = depths[((size_t)l * P + p) * DIM + j];
                if (!t) continue;
                srcs[l].push_back(pr.planes + (size_t)j * 4 * nb);
                dsts[l].push_back(stage + (size_t)j * 4 * nb * 8);
                sizes[l].push_back((size_t)t * nb * 8);
                srcs[l].push_back(pr.scales + (size_t)j * nb);
                dsts[l].push_back(stage + (size_t)nb * DIM * 32 + (size_t)j * nb * 2);
                sizes[l].push_back((size_t)nb * 2);
            }
        }
    cudaMemcpyAttributes attr;
    memset(&attr, 0, sizeof attr);
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
    size_t attr_idx = 0;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<float> t;
    for (int rep = 0; rep < 3; rep++) {
        CK(cudaEventRecord(e0, b->stream));
        for (uint32_t l = 0; l < L; l++) {
            if (sizes[l].empty()) continue;
            cudaError_t e = cudaMemcpyBatchAsync(dsts[l].data(), srcs[l].data(), sizes[l].data(),
                                                 sizes[l].size(), &attr, &attr_idx, 1, b->stream);
            if (e != cudaSuccess) {
                /* not fatal: report and leave this transport out */
                printf("   cudaMemcpyBatchAsync failed: %s\n", cudaGetErrorString(e));
                (void)cudaGetLastError();
                CK(cudaStreamSynchronize(b->stream));
                CK(cudaEventDestroy(e0));
                CK(cudaEventDestroy(e1));
                return -1.0f;
            }
        }
        CK(cudaEventRecord(e1, b->stream));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms);
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return median(t);
}

/* ---------------------------------------------------------------- main */

static std::vector<uint64_t> parse_list_u64(const char *s) {
    std::vector<uint64_t> v;
    while (*s) {
        char *end;
        unsigned long long x = strtoull(s, &end, 10);
        if (*end == 'k' || *end == 'K') { x *= 1024; end++; }
        else if (*end == 'M' || *end == 'm') { x *= 1024 * 1024; end++; }
        v.push_back(x);
        s = *end == ',' ? end + 1 : end;
        if (end == s && *s) break;
    }
    return v;
}

/* The host CPU's model name and online cores. */
static std::string list_json(const std::vector<uint64_t> &v) {
    std::vector<std::string> items;
    for (uint64_t x : v) items.push_back(std::to_string((unsigned long long)x));
    return jarray(items);
}

int main(int argc, char **argv) {
    const char *out_dir = ".";
    std::vector<uint64_t> contexts = parse_list_u64("32k,128k,256k,512k,1M");
    std::vector<uint64_t> batches = parse_list_u64("1,2,4");
    const char *method_list = "fathom:48,fathom:40,sparq:16,ds:32,thumb,full4,landmark,oracle";
    uint32_t layers = LAYERS_DEFAULT, reps = 5;
    double planes_gib = 40, lm_gib = 16, kv_gib = 8;
    uint64_t oracle_max = 1ull << 20;
    int extras = 1, resident_only = 0; /* --resident-only: just the HBM-resident section */
    uint32_t lane_count = 3, per_chunk = 0, prefetch = 0, prefetch_last_min = 0;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--out") && i + 1 < argc) out_dir = argv[++i];
        else if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--contexts") && i + 1 < argc) contexts = parse_list_u64(argv[++i]);
        else if (!strcmp(argv[i], "--batches") && i + 1 < argc) batches = parse_list_u64(argv[++i]);
        else if (!strcmp(argv[i], "--methods") && i + 1 < argc) method_list = argv[++i];
        else if (!strcmp(argv[i], "--layers") && i + 1 < argc) layers = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--k") && i + 1 < argc) g_topk = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--planes-gib") && i + 1 < argc) planes_gib = atof(argv[++i]);
        else if (!strcmp(argv[i], "--landmark-gib") && i + 1 < argc) lm_gib = atof(argv[++i]);
        else if (!strcmp(argv[i], "--kv-gib") && i + 1 < argc) kv_gib = atof(argv[++i]);
        else if (!strcmp(argv[i], "--oracle-max") && i + 1 < argc) oracle_max = parse_list_u64(argv[++i])[0];
        else if (!strcmp(argv[i], "--no-extras")) extras = 0;
        else if (!strcmp(argv[i], "--resident-only")) resident_only = 1;
        else if (!strcmp(argv[i], "--lanes") && i + 1 < argc) lane_count = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--chunk") && i + 1 < argc) per_chunk = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--prefetch") && i + 1 < argc) prefetch = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--prefetch-last-min") && i + 1 < argc)
            prefetch_last_min = (uint32_t)atoi(argv[++i]);
        else { fprintf(stderr, "unknown argument %s\n", argv[i]); return 2; }
    }
    if (g_topk < 36 || g_topk > FATHOM_CUDA_MAX_K) { fprintf(stderr, "--k 36..%d\n", FATHOM_CUDA_MAX_K); return 2; }
    if (lane_count > FATHOM_CUDA_MAX_LANES) { fprintf(stderr, "--lanes 0..%d\n", FATHOM_CUDA_MAX_LANES); return 2; }
    /* --json: stdout is the JSON's alone; the human output goes to stderr */
    FILE *json_out = NULL;
    if (json) {
        fflush(stdout);
        const int fd = dup(1);
        if (fd < 0 || dup2(2, 1) < 0 || !(json_out = fdopen(fd, "w"))) { perror("--json"); return 1; }
    }
    if (!fathom_cuda_device_present()) { printf("bench_cuda_step: %s\n", fathom_last_error()); return 77; }
    std::vector<method_spec> methods;
    {
        char buf[512];
        snprintf(buf, sizeof buf, "%s", method_list);
        for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
            method_spec m;
            if (parse_method(tok, &m)) { fprintf(stderr, "unknown method %s\n", tok); return 2; }
            methods.push_back(m);
        }
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/bench.csv", out_dir);
    FILE *csv = fopen(path, "w");
    if (!csv) { perror(path); return 1; }
    fprintf(csv, "section,method,context,batch,transport,keys,step_ms,lanes_ms,wall_ms,plan_ms,transfer_ms,scan_ms,topk_ms,"
                 "fetch_ms,attend_ms,other_ms,scan_GB,row_GB,bits_per_token,link_GBps,floor_ms,"
                 "ratio_to_floor,idx_sets_held,idx_sets_needed,kv_sets_held\n");
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
    jobj head; /* what produced the numbers */
    {
        char date[16], machine[512];
        const time_t now = time(NULL);
        strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
        snprintf(machine, sizeof machine, "%s / %s", prop.name, bench_host_cpu().c_str());
        std::string cmd;
        for (int i = 0; i < argc; i++) {
            if (i) cmd += " ";
            const bool quote = strpbrk(argv[i], " \t'\"$") != NULL || !*argv[i];
            if (!quote) { cmd += argv[i]; continue; }
            cmd += "'";
            for (const char *c = argv[i]; *c; c++) cmd += *c == '\'' ? std::string("'\\''") : std::string(1, *c);
            cmd += "'";
        }
        head.str("bench", "bench_cuda_step");
        head.str("machine", machine);
        head.str("gpu", prop.name);
        head.u64("gpu_sms", (uint64_t)prop.multiProcessorCount);
        head.u64("gpu_l2_mib", (uint64_t)(prop.l2CacheSize >> 20));
        head.str("cpu", bench_host_cpu().c_str());
        head.str("date", date);
        head.str("command", cmd.c_str());
        head.str("commit", getenv("FATHOM_COMMIT") && *getenv("FATHOM_COMMIT") ? getenv("FATHOM_COMMIT") : NULL);
        jobj par;
        par.u64("layers", layers);
        par.u64("kv_heads", KV_HEADS);
        par.u64("group", GROUP);
        par.u64("dim", DIM);
        par.u64("k", g_topk);
        par.u64("reps", reps);
        par.u64("lanes", lane_count);
        par.u64("chunk", per_chunk);
        par.u64("prefetch", prefetch);
        par.u64("prefetch_last_min", prefetch_last_min);
        par.raw("contexts", list_json(contexts));
        par.raw("batches", list_json(batches));
        par.str("methods", method_list);
        par.u64("extras", (uint64_t)extras);
        par.u64("resident_only", (uint64_t)resident_only);
        head.raw("params", par.done());
    }

    const uint64_t n_max = *std::max_element(contexts.begin(), contexts.end());
    const uint64_t N_max = *std::max_element(batches.begin(), batches.end());
    arenas a;
    memset(&a, 0, sizeof a);
    const double gib = 1024.0 * 1024 * 1024;
    /* never more than a whole step needs at the largest context */
    const uint64_t sets_max = N_max * layers * KV_HEADS, nb_max = (n_max + 63) / 64;
    a.planes_cap = std::min((uint64_t)(planes_gib * gib), sets_max * nb_max * DIM * 32);
    a.scales_cap = std::min((uint64_t)(planes_gib * gib / 16), sets_max * nb_max * DIM * 2);
    a.lm_cap = std::min((uint64_t)(lm_gib * gib), sets_max * ((n_max + 7) / 8) * DIM * 2);
    a.kv_cap = std::min((uint64_t)(kv_gib * gib), sets_max * n_max * DIM * 2);
    double t0 = now_s();
    void *dp;
    host_arena(a.planes_cap, 0, 1, &dp); a.planes = (uint8_t *)dp;
    host_arena(a.scales_cap, 1, 2, &dp); a.scales = (uint8_t *)dp;
    host_arena(a.lm_cap, 2, 3, &dp); a.lm = (uint8_t *)dp;
    host_arena(a.kv_cap, 3, 4, &dp); a.k = (uint8_t *)dp;
    host_arena(a.kv_cap, 3, 5, &dp); a.v = (uint8_t *)dp;
    printf("host arenas (pinned, mapped): planes %.1f GiB, scales %.2f GiB, landmarks %.1f GiB, K %.1f GiB, "
           "V %.1f GiB; filled and registered in %.1f s\n",
           a.planes_cap / gib, a.scales_cap / gib, a.lm_cap / gib, a.kv_cap / gib, a.kv_cap / gib, now_s() - t0);
    {
        jobj ar;
        ar.num("planes_gib", a.planes_cap / gib, 3);
        ar.num("scales_gib", a.scales_cap / gib, 3);
        ar.num("landmarks_gib", a.lm_cap / gib, 3);
        ar.num("k_gib", a.kv_cap / gib, 3);
        ar.num("v_gib", a.kv_cap / gib, 3);
        ar.num("fill_s", now_s() - t0, 1);
        head.raw("host_arenas", ar.done());
    }

    bench_ctx b;
    memset(&b, 0, sizeof b);
    b.layers = layers;
    b.reps = reps;
    if (lane_count) {
        FK(fathom_cuda_lanes_create(lane_count, &b.lanes));
        FK(fathom_cuda_lanes_set_chunk(b.lanes, per_chunk));
    }
    CK(cudaMalloc(&b.d_trace, (size_t)layers * FATHOM_CUDA_TRACE_SLOTS * 8));
    CK(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));
    /* link rate, same run: 1 GiB pinned host -> device */
    const uint64_t link_bytes = std::min<uint64_t>(1ull << 30, a.planes_cap);
    void *link_dev;
    CK(cudaMalloc(&link_dev, link_bytes));
    const double link = link_rate(a.planes, link_dev, link_bytes, b.stream);
    CK(cudaFree(link_dev));
    printf("link: %.1f GB/s host->device (1 GiB cudaMemcpyAsync from the pinned arena)\n", link);
    head.num("link_GBps", link, 2);
    fprintf(csv, "link,memcpy,0,0,copy,-,0,0,0,0,0,0,0,0,0,0,0,0,0,%.2f,0,0,0,0,0\n", link);

    /* workspace for the largest config */
    size_t ws_max = 0;
    std::vector<method_spec> all_methods = methods;
    {
        method_spec nib;
        parse_method("nibble4", &nib);
        all_methods.push_back(nib);
    }
    for (uint64_t N : batches)
        for (uint64_t n : contexts)
            for (const method_spec &m : all_methods)
                for (fathom_cuda_transport tr : {FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_RESIDENT, FATHOM_CUDA_DIRECT}) {
                    if (m.scan == FATHOM_CUDA_SCAN_ORACLE && (n > oracle_max || N != 1)) continue;
                    fathom_cuda_config cfg = {DIM, GROUP, (uint32_t)(N * KV_HEADS), n, g_topk, 4, 32,
                                              m.scan, m.param, tr, 0, FATHOM_CUDA_KEYS_BF16};
                    if (cfg.param == 0 && m.scan <= FATHOM_CUDA_SCAN_TOP_CHANNELS) continue;
                    size_t s;
                    FK(fathom_cuda_workspace_size(&cfg, &s));
                    ws_max = std::max(ws_max, s);
                }
    CK(cudaMalloc(&b.ws, ws_max));
    b.ws_bytes = ws_max;
    const uint64_t P_max = N_max * KV_HEADS;
    CK(cudaMalloc(&b.d_q, layers * P_max * GROUP * DIM * 4));
    CK(cudaMalloc(&b.d_qprev, layers * P_max * GROUP * DIM * 4));
    CK(cudaMalloc(&b.d_pred, layers * P_max * DIM));
    b.prefetch = prefetch;
    b.prefetch_last_min = prefetch_last_min;
    CK(cudaMalloc(&b.d_var, layers * P_max * DIM * 4));
    CK(cudaMalloc(&b.d_out, layers * P_max * GROUP * DIM * 4));
    CK(cudaMalloc(&b.d_fixed, layers * P_max * DIM));
    CK(cudaMalloc(&b.d_depths, layers * P_max * DIM));
    CK(cudaMalloc(&b.d_union, layers * P_max * 4));
    CK(cudaMalloc(&b.d_probs, layers * P_max * sizeof(fathom_cuda_problem)));
    b.ev = (cudaEvent_t *)malloc(sizeof(cudaEvent_t) * layers * (FATHOM_CUDA_PHASES + 1));
    for (uint32_t i = 0; i < layers * (FATHOM_CUDA_PHASES + 1); i++) CK(cudaEventCreate(&b.ev[i]));
    printf("workspace %.2f GiB\n", ws_max / gib);
    head.num("workspace_gib", ws_max / gib, 3);

    /* queries and variances: log-normal channel scales, fixed per (layer, head) */
    std::vector<float> q(layers * P_max * GROUP * DIM), var(layers * P_max * DIM), qscale(q.size());
    {
        uint64_t s = 12345;
        auto normal = [&]() {
            double u = ((splitmix(&s) >> 11) + 1) * 0x1.0p-53, v = (splitmix(&s) >> 11) * 0x1.0p-53;
            return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
        };
        for (uint64_t p = 0; p < layers * P_max; p++) {
            float qs[DIM];
            for (uint32_t j = 0; j < DIM; j++) {
                qs[j] = (float)exp(normal());
                var[p * DIM + j] = (float)exp(2 * normal() - 1);
            }
            for (uint32_t h = 0; h < GROUP; h++)
                for (uint32_t j = 0; j < DIM; j++) {
                    q[(p * GROUP + h) * DIM + j] = (float)(normal() * qs[j]);
                    qscale[(p * GROUP + h) * DIM + j] = qs[j];
                }
        }
        CK(cudaMemcpy(b.d_q, q.data(), q.size() * 4, cudaMemcpyHostToDevice));
        /* the previous decode step's queries: the same channel scales, fresh
         * draws from a second generator (q above stays as in earlier runs) */
        uint64_t s2 = 67890;
        auto normal2 = [&]() {
            double u = ((splitmix(&s2) >> 11) + 1) * 0x1.0p-53, v = (splitmix(&s2) >> 11) * 0x1.0p-53;
            return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
        };
        std::vector<float> qprev(q.size());
        for (size_t i = 0; i < q.size(); i++) qprev[i] = (float)(normal2() * qscale[i]);
        CK(cudaMemcpy(b.d_qprev, qprev.data(), qprev.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(b.d_var, var.data(), var.size() * 4, cudaMemcpyHostToDevice));
    }

    printf("\n%-10s %7s %2s %-8s %-6s %8s %8s %8s | %6s %8s %6s %6s %6s %6s %6s | %7s %6s %6s %6s\n", "method", "ctx",
           "N", "transp", "K/V", "1-stream", "lanes", "wall", "plan", "transfer", "scan", "topk", "fetch", "attend",
           "other", "scan GB", "row GB", "bits", "xfloor");
    auto report = [&](const char *section, const method_spec &m, uint64_t n, uint64_t N, const char *tr,
                      const char *keys, const run_result &r, const held &h, uint64_t needed) {
        double sum = 0;
        for (int i = 0; i < FATHOM_CUDA_PHASES; i++) sum += r.phase_ms[i];
        const double other = std::max(0.0, (double)r.step_ms - sum);
        const bool resident = !strcmp(tr, "resident");
        const double link_bytes_moved = (resident ? 0 : r.scan_bytes) + r.row_bytes;
        const double floor_ms = link_bytes_moved / (link * GB) * 1e3;
        const bool piped = r.lanes_ms > 0 && r.lanes_ms < r.step_ms;
        const double best = piped ? r.lanes_ms : r.step_ms, wall = piped ? r.wall_ms : r.wall1_ms;
        printf("%-10s %6lluk %2llu %-8s %-6s %8.2f %8.2f %8.2f | %6.2f %8.2f %6.2f %6.2f %6.2f %6.2f %6.2f | %7.3f %6.3f %6.1f %6.2f%s\n",
               m.name, (unsigned long long)(n / 1024), (unsigned long long)N, tr, keys, r.step_ms, r.lanes_ms,
               wall, r.phase_ms[0], r.phase_ms[1], r.phase_ms[2], r.phase_ms[3], r.phase_ms[4], r.phase_ms[5],
               other, r.scan_bytes / GB, r.row_bytes / GB, r.bits_per_token, best / floor_ms,
               h.idx_sets < needed ? " (rotated)" : "");
        jobj row;
        row.str("section", section);
        row.str("method", m.name);
        row.u64("context", n);
        row.u64("batch", N);
        row.str("transport", tr);
        row.str("keys", keys);
        row.num("step_ms", r.step_ms, 3);
        row.num("lanes_ms", r.lanes_ms, 3);
        row.num("best_ms", best, 3);
        row.num("wall_ms", wall, 3);
        row.num("plan_ms", r.phase_ms[0], 3);
        row.num("transfer_ms", r.phase_ms[1], 3);
        row.num("scan_ms", r.phase_ms[2], 3);
        row.num("topk_ms", r.phase_ms[3], 3);
        row.num("fetch_ms", r.phase_ms[4], 3);
        row.num("attend_ms", r.phase_ms[5], 3);
        row.num("other_ms", other, 3);
        row.num("scan_GB", r.scan_bytes / GB, 4);
        row.num("row_GB", r.row_bytes / GB, 4);
        row.num("bits_per_token", r.bits_per_token, 2);
        row.num("link_GBps", link, 2);
        row.num("floor_ms", floor_ms, 3);
        row.num("xfloor", best / floor_ms, 3);
        if (resident) row.num("scan_index_GBps", r.scan_bytes / (r.phase_ms[2] * 1e-3) / GB, 1);
        row.u64("idx_sets_held", h.idx_sets);
        row.u64("idx_sets_needed", needed);
        row.u64("lm_sets_held", h.lm_sets);
        row.u64("kv_sets_held", h.kv_sets);
        row.u64("rotated", h.idx_sets < needed);
        fprintf(csv, "%s,%s,%llu,%llu,%s,%s,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.4f,%.4f,%.2f,%.2f,%.3f,%.3f,%llu,%llu,%llu\n",
                section, m.name, (unsigned long long)n, (unsigned long long)N, tr, keys, r.step_ms,
                r.lanes_ms, wall, r.phase_ms[0], r.phase_ms[1], r.phase_ms[2], r.phase_ms[3], r.phase_ms[4], r.phase_ms[5], other,
                r.scan_bytes / GB, r.row_bytes / GB, r.bits_per_token, link, floor_ms, best / floor_ms,
                (unsigned long long)h.idx_sets, (unsigned long long)needed, (unsigned long long)h.kv_sets);
        if (r.pf_ms > 0) {
            const double pf_floor = ((resident ? 0 : r.pf_scan_bytes) + r.row_bytes) / (link * GB) * 1e3;
            if (b.prefetch_last_min > 1) printf("   (the last prefetched head: channels planned at depth >= %u)\n", b.prefetch_last_min);
            printf("   prefetch %u heads of the next layer: %.2f ms (pipelined without: %.2f), plane bytes %.3f GB "
                   "(plans %.3f), hit %.1f %%, waste %.1f %% of the planned bytes; x floor %.2f (%.2f of the "
                   "plans' floor)\n",
                   b.prefetch, r.pf_ms, r.lanes_ms, r.pf_scan_bytes / GB, r.scan_bytes / GB, 100 * r.pf_hit,
                   100 * r.pf_waste, r.pf_ms / pf_floor, r.pf_ms / floor_ms);
            fprintf(csv, "prefetch,%s,%llu,%llu,%s,%s,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.4f,%.4f,%.2f,%.2f,%.3f,%.3f,%llu,%llu,%llu\n",
                    m.name, (unsigned long long)n, (unsigned long long)N, tr, keys, r.step_ms, r.pf_ms,
                    r.pf_wall_ms, r.phase_ms[0], r.phase_ms[1], r.phase_ms[2], r.phase_ms[3], r.phase_ms[4],
                    r.phase_ms[5], other, r.pf_scan_bytes / GB, r.row_bytes / GB, r.bits_per_token, link,
                    pf_floor, r.pf_ms / pf_floor, (unsigned long long)h.idx_sets, (unsigned long long)needed,
                    (unsigned long long)h.kv_sets);
            jobj pf;
            pf.u64("heads", b.prefetch);
            pf.u64("last_min_depth", b.prefetch_last_min);
            pf.num("ms", r.pf_ms, 3);
            pf.num("wall_ms", r.pf_wall_ms, 3);
            pf.num("without_ms", r.lanes_ms, 3);
            pf.num("plane_GB", r.pf_scan_bytes / GB, 4);
            pf.num("plans_GB", r.scan_bytes / GB, 4);
            pf.num("hit_pct", 100 * r.pf_hit, 2);
            pf.num("waste_pct", 100 * r.pf_waste, 2);
            pf.num("floor_ms", pf_floor, 3);
            pf.num("xfloor", r.pf_ms / pf_floor, 3);
            pf.num("xfloor_of_plans", r.pf_ms / floor_ms, 3);
            row.raw("prefetch", pf.done());
        }
        g_json_rows.push_back(row.done());
        fflush(csv);
        fflush(stdout);
    };
    auto upload = [&](const std::vector<fathom_cuda_problem> &pv) {
        CK(cudaMemcpy(b.d_probs, pv.data(), pv.size() * sizeof pv[0], cudaMemcpyHostToDevice));
    };

    for (uint64_t N : batches) {
        const uint32_t P = (uint32_t)(N * KV_HEADS);
        if (resident_only) break;
        for (uint64_t n : contexts) {
            const uint64_t needed = (uint64_t)layers * P;
            held h = sets_for(&a, n, needed);
            held hs = h; /* K and V in separate arrays */
            hs.kv_sets = std::min<uint64_t>(needed, a.kv_cap / (n * DIM * 2));
            std::vector<fathom_cuda_problem> probs, probs_sep;
            build_problems(&a, n, layers, P, &h, probs, 1);
            build_problems(&a, n, layers, P, &hs, probs_sep, 0);
            upload(probs);
            printf("-- context %llu, batch %llu: index sets held %llu of %llu, landmark sets %llu, K/V sets %llu "
                   "interleaved (%llu separate)\n",
                   (unsigned long long)n, (unsigned long long)N, (unsigned long long)h.idx_sets,
                   (unsigned long long)needed, (unsigned long long)h.lm_sets, (unsigned long long)h.kv_sets,
                   (unsigned long long)hs.kv_sets);
            for (const method_spec &m : methods) {
                if (m.scan == FATHOM_CUDA_SCAN_ORACLE && (n > oracle_max || N != 1)) continue;
                std::vector<uint8_t> fixed((size_t)layers * P * DIM);
                make_fixed(&m, var.data(), layers * P, fixed.data());
                CK(cudaMemcpy(b.d_fixed, fixed.data(), fixed.size(), cudaMemcpyHostToDevice));
                const int r_reps = m.scan == FATHOM_CUDA_SCAN_ORACLE ? 2
                                   : n >= (512u << 10) ? (int)std::max(2u, reps / 2) : (int)reps;
                /* the oracle reads whole key rows: K and V in separate arrays */
                const bool sep = m.scan == FATHOM_CUDA_SCAN_ORACLE;
                if (sep) upload(probs_sep);
                const uint32_t stride = sep ? 0 : 2 * DIM;
                for (fathom_cuda_transport tr : {FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_DIRECT}) {
                    if (tr == FATHOM_CUDA_DIRECT && N != 1) continue; /* the staged gather is the default */
                    CK(cudaMemset(b.d_out, 0xff, (size_t)layers * P * GROUP * DIM * 4));
                    b.trace_next = &m == &methods[0] && n == n_max;
                    run_result r = run_config(&b, &m, n, P, tr, FATHOM_CUDA_KEYS_BF16, r_reps, stride);
                    report("step", m, n, N, tr == FATHOM_CUDA_DIRECT ? "direct" : "kernel", sep ? "sep" : "kv",
                           r, sep ? hs : h, needed);
                }
                if (sep) upload(probs);
            }
            if (!extras || N != 1) continue;
            /* transports on the plan of the first method, one run each */
            const method_spec &m0 = methods[0];
            if (m0.scan <= FATHOM_CUDA_SCAN_FIXED) {
                std::vector<uint8_t> fixed((size_t)layers * P * DIM);
                make_fixed(&m0, var.data(), layers * P, fixed.data());
                CK(cudaMemcpy(b.d_fixed, fixed.data(), fixed.size(), cudaMemcpyHostToDevice));
                run_result rk = run_config(&b, &m0, n, P, FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_KEYS_BF16, 3, 2 * DIM);
                /* cudaMemcpyBatchAsync over the same runs (plans from the last run) */
                const float batch_ms = time_batch_memcpy(&b, probs, n, P, (uint8_t *)b.ws);
                printf("   transfer of %s, %llu tokens, %u layers: kernel %.2f ms (%.1f GB/s), "
                       "cudaMemcpyBatchAsync %.2f ms (%.1f GB/s), link %.1f GB/s\n",
                       m0.name, (unsigned long long)n, layers, rk.phase_ms[1], rk.scan_bytes / (rk.phase_ms[1] * 1e-3) / GB,
                       batch_ms, rk.scan_bytes / (batch_ms * 1e-3) / GB, link);
                fprintf(csv, "gather,%s,%llu,1,kernel|batch,-,%.3f,0,%.3f,0,0,0,0,0,0,0,%.4f,0,0,%.2f,0,0,0,0,0\n",
                        m0.name, (unsigned long long)n, rk.phase_ms[1], batch_ms, rk.scan_bytes / GB, link);
                jobj tj;
                tj.str("method", m0.name);
                tj.u64("context", n);
                tj.u64("layers", layers);
                tj.num("scan_GB", rk.scan_bytes / GB, 4);
                tj.num("kernel_ms", rk.phase_ms[1], 3);
                tj.num("kernel_GBps", rk.scan_bytes / (rk.phase_ms[1] * 1e-3) / GB, 1);
                tj.num("batch_memcpy_ms", batch_ms > 0 ? batch_ms : NAN, 3); /* null: the call failed */
                tj.num("batch_memcpy_GBps", batch_ms > 0 ? rk.scan_bytes / (batch_ms * 1e-3) / GB : NAN, 1);
                tj.num("link_GBps", link, 2);
                g_json_transfers.push_back(tj.done());
                /* K and V in separate arrays (two reads per fetched token), and the bit
                 * planes as the primary K cache (winners decoded from all four planes,
                 * only V rows fetched) */
                upload(probs_sep);
                run_result rs = run_config(&b, &m0, n, P, FATHOM_CUDA_DIRECT, FATHOM_CUDA_KEYS_BF16, 3, 0);
                report("kv-separate", m0, n, N, "direct", "sep", rs, hs, needed);
                run_result rp = run_config(&b, &m0, n, P, FATHOM_CUDA_DIRECT, FATHOM_CUDA_KEYS_PLANES, 3, 0);
                report("primaryK", m0, n, N, "direct", "planes", rp, hs, needed);
                upload(probs);
            }
        }
    }

    /* HBM-resident index: copy the sets of one step into device memory */
    if (extras || resident_only) {
        printf("\n-- HBM-resident index (no gather); K/V rows still fetched from host\n");
        for (uint64_t n : contexts) {
            const uint32_t P = KV_HEADS;
            const uint64_t needed = (uint64_t)layers * P, nb = (n + 63) / 64;
            held h = sets_for(&a, n, needed);
            size_t free_b, total_b;
            CK(cudaMemGetInfo(&free_b, &total_b));
            const uint64_t per_set = nb * DIM * 34 + ((n + 7) / 8) * DIM * 2;
            uint64_t dev_sets = std::min<uint64_t>(needed, (uint64_t)((free_b - (4ull << 30)) / per_set));
            dev_sets = std::min(dev_sets, std::min(h.idx_sets, h.lm_sets));
            arenas d = a;
            CK(cudaMalloc(&d.planes, dev_sets * nb * DIM * 32));
            CK(cudaMalloc(&d.scales, dev_sets * nb * DIM * 2));
            CK(cudaMalloc(&d.lm, dev_sets * ((n + 7) / 8) * DIM * 2));
            CK(cudaMemcpy(d.planes, a.planes, dev_sets * nb * DIM * 32, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(d.scales, a.scales, dev_sets * nb * DIM * 2, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(d.lm, a.lm, dev_sets * ((n + 7) / 8) * DIM * 2, cudaMemcpyHostToDevice));
            held hd = h;
            hd.idx_sets = hd.lm_sets = dev_sets;
            std::vector<fathom_cuda_problem> probs;
            build_problems(&d, n, layers, P, &hd, probs, 1);
            CK(cudaMemcpy(b.d_probs, probs.data(), probs.size() * sizeof probs[0], cudaMemcpyHostToDevice));
            printf("-- context %llu: %llu index sets in HBM\n", (unsigned long long)n, (unsigned long long)dev_sets);
            std::vector<method_spec> rmethods = methods;
            /* the layouts the bit-plane scans are compared with: every channel as
             * nibbles, and each ds:c's channels as a nibble label cache (the
             * paper's "plain 4-bit scan", Table 17) */
            method_spec nib;
            parse_method("nibble4", &nib);
            rmethods.push_back(nib);
            for (const method_spec &m : methods)
                if (m.scan == FATHOM_CUDA_SCAN_FIXED && m.fixed_kind == 1) {
                    char name[32];
                    snprintf(name, sizeof name, "dsnib:%u", m.param);
                    parse_method(name, &nib);
                    rmethods.push_back(nib);
                }
            for (const method_spec &m : rmethods) {
                if (m.scan == FATHOM_CUDA_SCAN_ORACLE) continue;
                std::vector<uint8_t> fixed((size_t)layers * P * DIM);
                make_fixed(&m, var.data(), layers * P, fixed.data());
                CK(cudaMemcpy(b.d_fixed, fixed.data(), fixed.size(), cudaMemcpyHostToDevice));
                run_result r = run_config(&b, &m, n, P, FATHOM_CUDA_RESIDENT, FATHOM_CUDA_KEYS_BF16, 3, 2 * DIM, 5);
                report("resident", m, n, 1, "resident", "kv", r, hd, needed);
                printf("   scan kernel %s: %.3f ms, %.0f GB/s of index read\n", m.name, r.phase_ms[2],
                       r.scan_bytes / (r.phase_ms[2] * 1e-3) / GB);
                if (&m == &rmethods[0] && m.scan <= FATHOM_CUDA_SCAN_FIXED) {
                    run_result rp = run_config(&b, &m, n, P, FATHOM_CUDA_RESIDENT, FATHOM_CUDA_KEYS_PLANES, 3, 2 * DIM);
                    report("resident-primaryK", m, n, 1, "resident", "planes", rp, hd, needed);
                }
            }
            CK(cudaFree(d.planes));
            CK(cudaFree(d.scales));
            CK(cudaFree(d.lm));
        }
    }
    {
        /* the link again: the rate drifts between runs and within one */
        void *link_dev2;
        CK(cudaMalloc(&link_dev2, link_bytes));
        const double link_end = link_rate(a.planes, link_dev2, link_bytes, b.stream);
        CK(cudaFree(link_dev2));
        printf("link at the end: %.1f GB/s (start %.1f)\n", link_end, link);
        head.num("link_end_GBps", link_end, 2);
        fprintf(csv, "link-end,memcpy,0,0,copy,-,0,0,0,0,0,0,0,0,0,0,0,0,0,%.2f,0,0,0,0,0\n", link_end);
    }
    fclose(csv);
    printf("\nwrote %s\n", path);
    if (json_out) {
        head.raw("rows", jarray(g_json_rows));
        head.raw("transfers", jarray(g_json_transfers));
        head.raw("timelines", jarray(g_json_timelines));
        fprintf(json_out, "%s\n", head.done().c_str());
        if (fclose(json_out) != 0) { perror("--json"); return 1; }
    }
    return 0;
}

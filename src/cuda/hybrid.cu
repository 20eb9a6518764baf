/* hybrid — the host CPU selects a share of a tier step's (entry, KV head)
 * pairs where their planes live (pinned host memory), the GPU the rest
 * (fathom_cuda.h, "Hybrid step").
 *
 * Host side: fathom_plan_select_parallel (core/scan_select.c) over the
 * tier's host segments as fathom_segments views, on one thread pool: the
 * plan from the running sums, the scan, the selection; the scan with the
 * CPU's int8 kernels (FATHOM_SCAN_INT8) when the tier's scan mode is
 * FATHOM_CUDA_SCAN_INT8, whose scores the GPU's int8 scan gives bit for bit. Device side:
 * fathom_cuda_tier_step_given (its two halves: every check before anything
 * is enqueued, one workspace layout), which does not plan the host pairs
 * (their depths come with the selections). On a side stream: an export
 * kernel (session ids, lengths and queries of the host pairs into mapped
 * host memory), a host function that runs the host side, one H2D copy of
 * the selections and depths, then the host pairs' union, row fetch and
 * attention as soon as the step's plan is done, beside the GPU pairs'
 * work (the step's stream joins the side stream at its end). */
#include "tier_internal.cuh"

extern "C" {
#include "pool.h"
#include "store_internal.h"
}

#include <algorithm>
#include <chrono>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

/* What the export kernel leaves for the host function, per host pair. */
typedef struct hy_export {
    uint32_t session;
    uint32_t n; /* the session's length at the layer; 0 when the session id is out of range */
} hy_export;

/* One layer's buffers and the parameters of its last enqueued step. */
typedef struct hy_slot {
    fathom_cuda_hybrid *h;
    uint32_t layer, pairs, p0, budget, k, sink, local;
    fathom_scan_kernel kernel; /* the host scan's kernels: the tier's scan mode when the step was enqueued */
    hy_export *exp;     /* [max_pairs], mapped host */
    uint16_t *q;        /* [max_pairs][G][D] bf16, mapped host */
    hy_export *exp_dev; /* device views of the same */
    uint16_t *q_dev;
    uint8_t *sel_host;  /* pinned: a step's [pairs][G][k] selections, then at hy_depths_at its [pairs][D] depths */
    uint8_t *sel_dev;   /* device, the same layout */
} hy_slot;

/* Byte offset of the depths after the selections of `pairs` pairs at k. */
static size_t hy_depths_at(uint32_t pairs, uint32_t G, uint32_t k) {
    return ((size_t)pairs * G * k * sizeof(uint32_t) + 255) & ~(size_t)255;
}

struct fathom_cuda_hybrid {
    fathom_cuda_tier *tier;
    uint32_t layers, heads, G, D, S, max_pairs, max_k, threads;
    fathom_pool *pool;
    cudaStream_t side;
    cudaEvent_t fork, start, done; /* fork: the step's stream to the side one; start, done: its given lane */
    hy_slot *slots; /* [layers] */
    int status;     /* first failure of the host work, and its message */
    char message[512];
    fathom_cuda_hybrid_rates rates;
    bool calibrated;
    /* corr[c], c = 0..corr_most: the calibration's measured step with c host pairs over the rates'
       estimate of it (the sides slow each other down: they read the same host memory) */
    double *corr; /* [max_pairs + 1] */
    /* spread[c]: the relative spread of those replays (second largest less second smallest, over the median) */
    double *spread; /* [max_pairs + 1] */
    uint32_t corr_most;
};

/* ---- the host side ---- */

/* The CPU scan kernels whose scores equal the tier's GPU scan in its mode. */
static fathom_scan_kernel hy_kernel(const fathom_cuda_hybrid *h) {
    return fc_tier_scan_mode(h->tier) == FATHOM_CUDA_SCAN_INT8 ? FATHOM_SCAN_INT8 : FATHOM_SCAN_AUTO;
}

/* Plan, scan (with `kernel`) and select `count` pairs on the pool (see fathom_cuda_hybrid_select). */
static int hy_select(fathom_cuda_hybrid *h, fathom_scan_kernel kernel, uint32_t layer, uint32_t count,
                     const uint32_t *sessions, const uint32_t *heads, const uint64_t *lengths,
                     const float *queries, uint32_t budget, uint32_t k, uint32_t sink, uint32_t local,
                     uint8_t *depths, uint32_t *selected, uint32_t *selected_count) {
    const uint64_t seg_tokens = (uint64_t)h->S * FATHOM_BLOCK_TOKENS;
    uint64_t views_total = 0;
    for (uint32_t i = 0; i < count; i++) {
        FATHOM_CHECK_ARG(lengths[i] >= 1, "hybrid_select: pair %u has length 0", i);
        views_total += (lengths[i] + seg_tokens - 1) / seg_tokens;
    }
    fathom_segment_view *views = (fathom_segment_view *)fathom_calloc_array(views_total, sizeof *views);
    fathom_segments *segs = (fathom_segments *)fathom_calloc_array(count, sizeof *segs);
    fathom_plan_select_item *items = (fathom_plan_select_item *)fathom_calloc_array(count, sizeof *items);
    uint8_t *dep = depths ? depths : (uint8_t *)fathom_alloc_array(count, h->D);
    int status = views && segs && items && dep ? FATHOM_OK
                                               : fathom_fail(FATHOM_ERR_NOMEM, "hybrid_select: out of memory");
    fathom_segment_view *v = views;
    for (uint32_t i = 0; i < count && status == FATHOM_OK; i++) {
        const uint32_t nseg = (uint32_t)((lengths[i] + seg_tokens - 1) / seg_tokens);
        for (uint32_t g = 0; g < nseg && status == FATHOM_OK; g++) {
            fathom_cuda_tier_view tv;
            status = fathom_cuda_tier_segment(h->tier, sessions[i], layer, heads[i], g, &tv);
            v[g].planes = tv.planes;
            v[g].scales = tv.scales;
            v[g].first_token = tv.first_token;
        }
        const double *shift, *sum, *sum_sq;
        if (status == FATHOM_OK)
            status = fathom_cuda_tier_sums(h->tier, sessions[i], layer, heads[i], &shift, &sum, &sum_sq);
        if (status != FATHOM_OK) break;
        segs[i].dim = h->D;
        segs[i].segment_blocks = h->S;
        segs[i].length = lengths[i];
        segs[i].views = v;
        v += nseg;
        fathom_plan_select_item *it = &items[i];
        it->segments = &segs[i];
        it->sum = sum;
        it->sum_sq = sum_sq;
        it->queries = queries + (size_t)i * h->G * h->D;
        it->group = h->G;
        it->n = lengths[i];
        it->budget = budget;
        it->k = k;
        it->sink = sink;
        it->local = local;
        it->depths = dep + (size_t)i * h->D;
        it->idx = selected + (size_t)i * h->G * k;
        it->count = selected_count + (size_t)i * h->G;
    }
    /* token ranges: about two tasks per thread for a small share, 8192 to 16384 tokens each (shorter
       ranges cost more in the selection's candidate pools than they gain in balance) */
    uint64_t tokens = 0;
    for (uint32_t i = 0; i < count; i++) tokens += lengths[i];
    uint64_t range = tokens / (2 * (uint64_t)h->threads);
    range = range < 8192 ? 8192 : range > 16384 ? 16384 : (range + 63) / 64 * 64;
    if (status == FATHOM_OK)
        status = fathom_plan_select_parallel(h->pool, kernel, items, count, range);
    free(views);
    free(segs);
    free(items);
    if (dep != depths) free(dep);
    return status;
}

static int check_select_args(const fathom_cuda_hybrid *h, uint32_t layer, uint64_t count, uint32_t budget,
                             uint32_t k, uint32_t sink, uint32_t local, const char *who) {
    FATHOM_CHECK_ARG(layer < h->layers, "%s: layer %u >= %u", who, layer, h->layers);
    FATHOM_CHECK_ARG(count >= 1 && count <= h->max_pairs, "%s: %llu host pairs not in 1..max_pairs %u", who,
                     (unsigned long long)count, h->max_pairs);
    FATHOM_CHECK_ARG(k >= 1 && k <= h->max_k, "%s: k %u not in 1..max_k %u", who, k, h->max_k);
    FATHOM_CHECK_ARG((uint64_t)sink + local <= k, "%s: sink %u + local %u exceed k %u", who, sink, local, k);
    FATHOM_CHECK_ARG(budget >= 1 && budget <= FATHOM_PLANES * h->D, "%s: budget %u not in 1..%u", who, budget,
                     FATHOM_PLANES * h->D);
    return FATHOM_OK;
}

extern "C" int fathom_cuda_hybrid_select(fathom_cuda_hybrid *h, uint32_t layer, uint32_t count,
                                         const uint32_t *sessions, const uint32_t *heads,
                                         const uint64_t *lengths, const float *queries, uint32_t budget,
                                         uint32_t k, uint32_t sink, uint32_t local, uint8_t *depths,
                                         uint32_t *selected, uint32_t *selected_count) {
    FATHOM_CHECK_ARG(h != NULL, "hybrid_select: NULL hybrid");
    FATHOM_TRY(check_select_args(h, layer, count, budget, k, sink, local, "hybrid_select"));
    FATHOM_CHECK_ARG(sessions && heads && lengths && queries && selected && selected_count,
                     "hybrid_select: NULL sessions, heads, lengths, queries, selected or selected_count");
    const tier_dev *t = fc_tier_dev(h->tier);
    for (uint32_t i = 0; i < count; i++) {
        FATHOM_CHECK_ARG(heads[i] < h->heads, "hybrid_select: heads[%u] = %u >= %u", i, heads[i], h->heads);
        FATHOM_CHECK_ARG(fc_tier_live(h->tier, sessions[i]), "hybrid_select: sessions[%u] = %u is not a live "
                         "session", i, sessions[i]);
    }
    /* a step's host function in flight uses the same thread pool */
    FATHOM_CUDA_TRY(cudaStreamSynchronize(h->side));
    /* each pair's length against its session's at the layer, as the device holds it now */
    std::vector<uint32_t> len((size_t)t->max_sessions * t->layers);
    FATHOM_CUDA_TRY(cudaMemcpy(len.data(), t->len, len.size() * sizeof(uint32_t), cudaMemcpyDeviceToHost));
    for (uint32_t i = 0; i < count; i++) {
        const uint32_t have = len[(size_t)sessions[i] * t->layers + layer];
        FATHOM_CHECK_ARG(lengths[i] >= 1 && lengths[i] <= have, "hybrid_select: lengths[%u] = %llu not in 1..%u "
                         "(session %u's length at layer %u)", i, (unsigned long long)lengths[i], have, sessions[i],
                         layer);
    }
    return hy_select(h, hy_kernel(h), layer, count, sessions, heads, lengths, queries, budget, k, sink, local,
                     depths, selected, selected_count);
}

/* The host function of a step: the exported pairs, selected into sel_host. */
static int hy_run(hy_slot *sl) {
    fathom_cuda_hybrid *h = sl->h;
    const uint32_t c = sl->pairs, GD = h->G * h->D;
    uint32_t *ids = (uint32_t *)fathom_alloc_array(c, 2 * sizeof(uint32_t));
    uint64_t *lengths = (uint64_t *)fathom_alloc_array(c, sizeof(uint64_t));
    float *q = (float *)fathom_alloc_array((uint64_t)c * GD, sizeof(float));
    uint32_t *counts = (uint32_t *)fathom_alloc_array((uint64_t)c * h->G, sizeof(uint32_t));
    int status = ids && lengths && q && counts ? FATHOM_OK : fathom_fail(FATHOM_ERR_NOMEM, "hybrid: out of memory");
    for (uint32_t i = 0; i < c && status == FATHOM_OK; i++) {
        ids[i] = sl->exp[i].session;
        ids[c + i] = (sl->p0 + i) % h->heads;
        lengths[i] = sl->exp[i].n;
        if (lengths[i] == 0)
            status = fathom_fail(FATHOM_ERR_STATE, "hybrid: session %u is empty or out of range at layer %u",
                                 ids[i], sl->layer);
    }
    for (uint64_t e = 0; e < (uint64_t)c * GD && status == FATHOM_OK; e++) q[e] = fathom_bf16_to_f32(sl->q[e]);
    if (status == FATHOM_OK)
        status = hy_select(h, sl->kernel, sl->layer, c, ids, ids + c, lengths, q, sl->budget, sl->k, sl->sink,
                           sl->local, sl->sel_host + hy_depths_at(c, h->G, sl->k), (uint32_t *)sl->sel_host, counts);
    free(ids);
    free(lengths);
    free(q);
    free(counts);
    return status;
}

static void CUDART_CB hy_host_fn(void *arg) {
    hy_slot *sl = (hy_slot *)arg;
    fathom_cuda_hybrid *h = sl->h;
    const int status = hy_run(sl);
    if (status == FATHOM_OK) return;
    if (h->status == FATHOM_OK) {
        snprintf(h->message, sizeof h->message, "%s", fathom_last_error());
        h->status = status;
    }
    /* middle winners that exist at any length above k, so that the step's
       row fetch stays inside the session (its output is then meaningless) */
    const uint32_t m = sl->k - sl->sink - sl->local;
    uint32_t *sel = (uint32_t *)sl->sel_host;
    for (uint64_t r = 0; r < (uint64_t)sl->pairs * h->G; r++)
        for (uint32_t i = 0; i < m; i++) sel[r * sl->k + sl->sink + i] = sl->sink + i;
    memset(sl->sel_host + hy_depths_at(sl->pairs, h->G, sl->k), 0, (size_t)sl->pairs * h->D);
}

/* ---- the device side ---- */

/* Host pair i = p0 + blockIdx.x: its session, length and bf16 queries. */
static __global__ void hy_export_kernel(tier_dev t, uint32_t layer, const uint32_t *sessions, uint32_t p0,
                                        uint32_t GD, const uint16_t *queries, hy_export *exp, uint16_t *q) {
    const uint32_t i = blockIdx.x, p = p0 + i;
    const uint32_t s = sessions[p / t.heads];
    if (threadIdx.x == 0) {
        hy_export e = {s, s < t.max_sessions ? t.len[(size_t)s * t.layers + layer] : 0u};
        exp[i] = e;
    }
    for (uint32_t e = threadIdx.x; e < GD; e += blockDim.x) q[(size_t)i * GD + e] = queries[(size_t)p * GD + e];
}

/* ---- object ---- */

extern "C" void fathom_cuda_hybrid_destroy(fathom_cuda_hybrid *h) {
    if (!h) return;
    if (h->side) cudaStreamSynchronize(h->side);
    for (uint32_t l = 0; h->slots && l < h->layers; l++) {
        hy_slot *sl = &h->slots[l];
        cudaFreeHost(sl->exp);
        cudaFreeHost(sl->q);
        cudaFreeHost(sl->sel_host);
        cudaFree(sl->sel_dev);
    }
    free(h->slots);
    free(h->corr);
    free(h->spread);
    if (h->fork) cudaEventDestroy(h->fork);
    if (h->start) cudaEventDestroy(h->start);
    if (h->done) cudaEventDestroy(h->done);
    if (h->side) cudaStreamDestroy(h->side);
    fathom_pool_free(h->pool);
    free(h);
}

static int hy_create(fathom_cuda_hybrid *h) {
    FATHOM_TRY(fathom_pool_create(&h->pool, h->threads));
    FATHOM_CUDA_TRY(cudaStreamCreateWithFlags(&h->side, cudaStreamNonBlocking));
    FATHOM_CUDA_TRY(cudaEventCreateWithFlags(&h->fork, cudaEventDisableTiming));
    FATHOM_CUDA_TRY(cudaEventCreateWithFlags(&h->start, cudaEventDisableTiming));
    FATHOM_CUDA_TRY(cudaEventCreateWithFlags(&h->done, cudaEventDisableTiming));
    h->slots = (hy_slot *)fathom_calloc_array(h->layers, sizeof *h->slots);
    h->corr = (double *)fathom_calloc_array((uint64_t)h->max_pairs + 1, sizeof(double));
    h->spread = (double *)fathom_calloc_array((uint64_t)h->max_pairs + 1, sizeof(double));
    FATHOM_CHECK(!h->slots || !h->corr || !h->spread, FATHOM_ERR_NOMEM, "hybrid_create: out of memory");
    const size_t sel_bytes = hy_depths_at(h->max_pairs, h->G, h->max_k) + (size_t)h->max_pairs * h->D;
    for (uint32_t l = 0; l < h->layers; l++) {
        hy_slot *sl = &h->slots[l];
        sl->h = h;
        FATHOM_CUDA_TRY(cudaHostAlloc((void **)&sl->exp, h->max_pairs * sizeof(hy_export), cudaHostAllocMapped));
        FATHOM_CUDA_TRY(cudaHostAlloc((void **)&sl->q, (size_t)h->max_pairs * h->G * h->D * 2, cudaHostAllocMapped));
        FATHOM_CUDA_TRY(cudaHostGetDevicePointer((void **)&sl->exp_dev, sl->exp, 0));
        FATHOM_CUDA_TRY(cudaHostGetDevicePointer((void **)&sl->q_dev, sl->q, 0));
        FATHOM_CUDA_TRY(cudaHostAlloc((void **)&sl->sel_host, sel_bytes, cudaHostAllocDefault));
        memset(sl->sel_host, 0, sel_bytes);
        FATHOM_CUDA_TRY(cudaMalloc((void **)&sl->sel_dev, sel_bytes));
    }
    return FATHOM_OK;
}

extern "C" int fathom_cuda_hybrid_create(fathom_cuda_tier *tier, uint32_t threads, uint32_t max_pairs,
                                         uint32_t max_k, fathom_cuda_hybrid **out) {
    FATHOM_CHECK_ARG(tier && out, "hybrid_create: NULL tier or out");
    *out = NULL;
    FATHOM_CHECK_ARG(threads >= 1 && threads <= 1024, "hybrid_create: threads %u not in 1..1024", threads);
    FATHOM_CHECK_ARG(max_pairs >= 1 && max_pairs <= 65535, "hybrid_create: max_pairs %u not in 1..65535",
                     max_pairs);
    FATHOM_CHECK_ARG(max_k >= 1 && max_k <= FATHOM_CUDA_MAX_K, "hybrid_create: max_k %u not in 1..%d", max_k,
                     FATHOM_CUDA_MAX_K);
    fathom_cuda_hybrid *h = (fathom_cuda_hybrid *)calloc(1, sizeof *h);
    FATHOM_CHECK(!h, FATHOM_ERR_NOMEM, "hybrid_create: out of memory");
    const tier_dev *t = fc_tier_dev(tier);
    h->tier = tier;
    h->layers = t->layers;
    h->heads = t->heads;
    h->G = fc_tier_group(tier);
    h->D = t->dim;
    h->S = t->segment_blocks;
    h->max_pairs = max_pairs;
    h->max_k = max_k;
    h->threads = threads;
    const int status = hy_create(h);
    if (status < 0) {
        fathom_cuda_hybrid_destroy(h);
        return status;
    }
    *out = h;
    return FATHOM_OK;
}

/* Checks of a hybrid step with host_pairs >= 1, the step's workspace laid out in *w. */
static int hy_step_check(fathom_cuda_hybrid *h, const fathom_cuda_tier_step_args *a, uint32_t host_pairs,
                         const char *who, tier_ws *w) {
    const fathom_cuda_tier_given *none;
    FATHOM_TRY(fc_tier_step_prepare(h->tier, a, NULL, who, w, &none));
    FATHOM_CHECK_ARG(a->fixed_depths == NULL, "%s: fixed_depths is not NULL (water-filling only)", who);
    FATHOM_TRY(check_select_args(h, a->layer, host_pairs, a->budget, a->k, a->sink, a->local, who));
    FATHOM_CHECK_ARG((uint64_t)host_pairs <= (uint64_t)a->batch * h->heads, "%s: host_pairs %u > batch %u x "
                     "kv_heads %u", who, host_pairs, a->batch, h->heads);
    return FATHOM_OK;
}

/* Enqueue a checked hybrid step (hy_step_check's layout). */
static int hy_step(fathom_cuda_hybrid *h, const fathom_cuda_tier_step_args *a, uint32_t host_pairs, const tier_ws *w,
                   cudaStream_t stream) {
    hy_slot *sl = &h->slots[a->layer];
    const uint32_t P = a->batch * h->heads;
    sl->layer = a->layer;
    sl->pairs = host_pairs;
    sl->p0 = P - host_pairs;
    sl->budget = a->budget;
    sl->k = a->k;
    sl->sink = a->sink;
    sl->local = a->local;
    sl->kernel = hy_kernel(h);
    const size_t dep_at = hy_depths_at(host_pairs, h->G, a->k);
    FATHOM_CUDA_TRY(cudaEventRecord(h->fork, stream));
    FATHOM_CUDA_TRY(cudaStreamWaitEvent(h->side, h->fork, 0));
    hy_export_kernel<<<host_pairs, 128, 0, h->side>>>(*fc_tier_dev(h->tier), a->layer, a->sessions, sl->p0,
                                                      h->G * h->D, a->queries, sl->exp_dev, sl->q_dev);
    FATHOM_CUDA_LAUNCHED();
    FATHOM_CUDA_TRY(cudaLaunchHostFunc(h->side, hy_host_fn, sl));
    FATHOM_CUDA_TRY(cudaMemcpyAsync(sl->sel_dev, sl->sel_host, dep_at + (size_t)host_pairs * h->D,
                                    cudaMemcpyHostToDevice, h->side));
    /* the selections and depths are on the side stream, where the given pairs finish */
    const fathom_cuda_tier_given given = {host_pairs, (const uint32_t *)sl->sel_dev, NULL, sl->sel_dev + dep_at};
    const tier_given_lane lane = {h->side, h->start, h->done};
    return fc_tier_step_launch(h->tier, a, &given, &lane, w, stream);
}

extern "C" int fathom_cuda_hybrid_step(fathom_cuda_hybrid *h, const fathom_cuda_tier_step_args *a,
                                       uint32_t host_pairs, cudaStream_t stream) {
    FATHOM_CHECK_ARG(h && a, "hybrid_step: NULL hybrid or args");
    if (host_pairs == 0) return fathom_cuda_tier_step(h->tier, a, stream);
    /* every check of the step, and its workspace layout, before anything is enqueued on the side stream */
    tier_ws w;
    FATHOM_TRY(hy_step_check(h, a, host_pairs, "hybrid_step", &w));
    return hy_step(h, a, host_pairs, &w, stream);
}

extern "C" int fathom_cuda_hybrid_check(fathom_cuda_hybrid *h) {
    FATHOM_CHECK_ARG(h != NULL, "hybrid_check: NULL hybrid");
    FATHOM_CUDA_TRY(cudaStreamSynchronize(h->side));
    const int status = h->status;
    h->status = FATHOM_OK;
    if (status < 0) return fathom_fail(status, "hybrid: host work failed: %s", h->message);
    return FATHOM_OK;
}

/* ---- scheduler ---- */

/* Plane bytes of one pair at n tokens (the estimate of fathom_cuda_hybrid_share). */
static double hy_pair_bytes(uint64_t n, uint32_t budget, uint32_t dim) {
    const double active = budget < dim ? budget : dim;
    return (double)n * (budget + active / 4.0) / 8.0;
}

static double hy_now(void) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/* Events destroyed on every return path. */
struct hy_events {
    cudaEvent_t e[2] = {NULL, NULL};
    ~hy_events() {
        for (int i = 0; i < 2; i++)
            if (e[i]) cudaEventDestroy(e[i]);
    }
};

/* The rates' estimate of a step whose pairs have plane bytes pb[0..P), with the last c on the host:
   the later of the two sides (c = 0: the GPU side alone). */
static double hy_estimate(const fathom_cuda_hybrid_rates *r, const double *pb, uint32_t P, uint32_t c) {
    double host = 0, gpu = 0;
    for (uint32_t p = 0; p < P; p++) (p < P - c ? gpu : host) += pb[p];
    const double g = r->gpu_fixed_s + gpu / r->gpu_bytes_per_s;
    return c ? fmax(r->cpu_fixed_s + host / r->cpu_bytes_per_s, g) : g;
}

/* Device memory freed on every return path. */
struct hy_device_buffer {
    void *p = NULL;
    ~hy_device_buffer() { cudaFree(p); }
};

/* A captured graph and its instance, destroyed on every return path. */
struct hy_graph {
    cudaGraph_t g = NULL;
    cudaGraphExec_t exec = NULL;
    ~hy_graph() {
        if (exec) cudaGraphExecDestroy(exec);
        if (g) cudaGraphDestroy(g);
    }
};

/* The step `run` enqueues, captured into a graph on stream and replayed:
 * the median of HY_REPS replays after one warm-up replay, in seconds
 * (events): a step with host pairs has rare fast replays, and a share is
 * chosen for the typical step, not the best one. A round whose spread is
 * above HY_QUIET is timed again, up to HY_ROUNDS, and the quietest kept:
 * one spread stands in every share's margin (fathom_cuda_hybrid_share). A graph, as
 * callers run their steps: an eager step adds its host enqueue time, which
 * differs between the GPU-only and the hybrid step. */
#define HY_REPS 5      /* timed replays of each calibration graph (odd) */
#define HY_MARGIN 0.01 /* the least a host share must gain over the GPU side alone */
#define HY_QUIET 0.05  /* a spread above this is timed again (a host hiccup in two replays) */
#define HY_ROUNDS 3    /* rounds of HY_REPS replays at most; the quietest round is kept */

template <typename F>
static int hy_time(cudaStream_t stream, hy_events &ev, double *median, double *spread, F run) {
    hy_graph gr;
    double t[HY_REPS];
    *median = 0;
    *spread = 0;
    FATHOM_CUDA_TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    const int st = run();
    const cudaError_t end = cudaStreamEndCapture(stream, &gr.g); /* ends the capture on every path */
    FATHOM_TRY(st);
    FATHOM_CUDA_TRY(end);
    /* node priorities kept, as PyTorch instantiates its graphs: the pipeline's
     * link stream keeps its priority */
    FATHOM_CUDA_TRY(cudaGraphInstantiate(&gr.exec, gr.g, cudaGraphInstantiateFlagUseNodePriority));
    for (int round = 0; round < HY_ROUNDS; round++) {
        for (int rep = 0; rep <= HY_REPS; rep++) {
            FATHOM_CUDA_TRY(cudaEventRecord(ev.e[0], stream));
            FATHOM_CUDA_TRY(cudaGraphLaunch(gr.exec, stream));
            FATHOM_CUDA_TRY(cudaEventRecord(ev.e[1], stream));
            FATHOM_CUDA_TRY(cudaEventSynchronize(ev.e[1]));
            float ms = 0;
            FATHOM_CUDA_TRY(cudaEventElapsedTime(&ms, ev.e[0], ev.e[1]));
            if (rep > 0) t[rep - 1] = ms * 1e-3;
        }
        std::sort(t, t + HY_REPS);
        const double med = t[HY_REPS / 2], spr = med > 0 ? (t[HY_REPS - 2] - t[1]) / med : 0;
        if (round == 0 || spr < *spread) *median = med, *spread = spr;
        if (*spread <= HY_QUIET) break;
    }
    return FATHOM_OK;
}

extern "C" int fathom_cuda_hybrid_calibrate(fathom_cuda_hybrid *h, const fathom_cuda_tier_step_args *a,
                                            cudaStream_t stream, fathom_cuda_hybrid_rates *rates) {
    FATHOM_CHECK_ARG(h && a, "hybrid_calibrate: NULL hybrid or args");
    /* the batch's pairs all fit max_pairs: the host's rate is measured on every one */
    const uint32_t P = a->batch * h->heads, GD = h->G * h->D;
    tier_ws w;
    FATHOM_TRY(hy_step_check(h, a, P, "hybrid_calibrate", &w));
    FATHOM_CUDA_TRY(cudaDeviceSynchronize());
    std::vector<uint32_t> entry(a->batch), ids(2 * (size_t)P), sel((size_t)P * h->G * a->k), cnt((size_t)P * h->G);
    std::vector<uint64_t> lengths(P);
    std::vector<uint16_t> qb((size_t)P * GD);
    std::vector<float> q((size_t)P * GD);
    std::vector<uint8_t> dep((size_t)P * h->D);
    FATHOM_CUDA_TRY(cudaMemcpy(entry.data(), a->sessions, a->batch * sizeof(uint32_t), cudaMemcpyDeviceToHost));
    FATHOM_CUDA_TRY(cudaMemcpy(qb.data(), a->queries, qb.size() * 2, cudaMemcpyDeviceToHost));
    std::vector<double> pair_bytes(P);
    double bytes = 0;
    for (uint32_t p = 0; p < P; p++) {
        if (p % h->heads == 0) FATHOM_TRY(fathom_cuda_tier_length(h->tier, entry[p / h->heads], &lengths[p]));
        else lengths[p] = lengths[p - 1];
        ids[p] = entry[p / h->heads];
        ids[P + p] = p % h->heads;
        pair_bytes[p] = hy_pair_bytes(lengths[p], a->budget, h->D);
        bytes += pair_bytes[p];
    }
    for (size_t e = 0; e < q.size(); e++) q[e] = fathom_bf16_to_f32(qb[e]);
    hy_events ev;
    FATHOM_CUDA_TRY(cudaEventCreate(&ev.e[0]));
    FATHOM_CUDA_TRY(cudaEventCreate(&ev.e[1]));
    double cpu_s = 1e30;
    for (int rep = 0; rep < 3; rep++) { /* the host: one warm-up, best of 2 */
        const double t0 = hy_now();
        FATHOM_TRY(hy_select(h, hy_kernel(h), a->layer, P, ids.data(), ids.data() + P, lengths.data(), q.data(),
                             a->budget, a->k, a->sink, a->local, dep.data(), sel.data(), cnt.data()));
        const double dt = hy_now() - t0;
        if (rep > 0 && dt < cpu_s) cpu_s = dt;
    }
    /* the GPU side of a hybrid step with c pairs given: the host's selections of the last c pairs
       (made above) given at once, so the time is the GPU's alone (plan, the other pairs' gather,
       scan and top-k, every pair's union, fetch and attention); c = 0 .. most, at most 17 points */
    const uint32_t most = P < h->max_pairs ? P : h->max_pairs;
    hy_device_buffer d_sel, d_dep;
    FATHOM_CUDA_TRY(cudaMalloc(&d_sel.p, sel.size() * sizeof(uint32_t)));
    FATHOM_CUDA_TRY(cudaMalloc(&d_dep.p, dep.size()));
    FATHOM_CUDA_TRY(cudaMemcpy(d_sel.p, sel.data(), sel.size() * sizeof(uint32_t), cudaMemcpyHostToDevice));
    FATHOM_CUDA_TRY(cudaMemcpy(d_dep.p, dep.data(), dep.size(), cudaMemcpyHostToDevice));
    const uint32_t points = most < 16 ? most + 1 : 17;
    double sx = 0, sy = 0, sxx = 0, sxy = 0, gpu_s = 0, gpu_spread = 0;
    for (uint32_t i = 0; i < points; i++) {
        const uint32_t c = (uint32_t)(((uint64_t)most * i + (points - 1) / 2) / (points - 1));
        const fathom_cuda_tier_given given = {c, (const uint32_t *)d_sel.p + (size_t)(P - c) * h->G * a->k, NULL,
                                              (const uint8_t *)d_dep.p + (size_t)(P - c) * h->D};
        const tier_given_lane lane = {h->side, h->start, h->done};
        double t, spread;
        FATHOM_TRY(hy_time(stream, ev, &t, &spread, [&]() {
            return fc_tier_step_launch(h->tier, a, c ? &given : NULL, c ? &lane : NULL, &w, stream);
        }));
        double x = 0; /* the GPU's plane bytes: pairs [0, P - c) */
        for (uint32_t p = 0; p < P - c; p++) x += pair_bytes[p];
        if (c == 0) gpu_s = t, gpu_spread = spread;
        sx += x, sy += t, sxx += x * x, sxy += x * t;
    }
    FATHOM_TRY(fathom_cuda_tier_check(h->tier));
    /* least squares t = fixed + x / rate; no slope (the GPU's time does not fall with its bytes):
       the mean as its fixed time and no per-byte time */
    const double var = points * sxx - sx * sx, slope = var > 0 ? (points * sxy - sx * sy) / var : 0;
    double gpu_fixed = slope > 0 ? (sy - slope * sx) / points : sy / points;
    if (gpu_fixed < 0) gpu_fixed = 0;
    /* the hybrid step with c = 1 .. most pairs on the host (median of HY_REPS); with the most, its time beyond
       their scan at the host's rate is the host side's fixed latency (export, host function, pool
       wake-ups, H2D copy, the given pairs' union, fetch and attention after it) */
    std::vector<double> step_s(most + 1);
    step_s[0] = gpu_s;
    h->spread[0] = gpu_spread;
    for (uint32_t c = 1; c <= most; c++) {
        tier_ws wc;
        FATHOM_TRY(hy_step_check(h, a, c, "hybrid_calibrate", &wc));
        FATHOM_TRY(hy_time(stream, ev, &step_s[c], &h->spread[c], [&]() { return hy_step(h, a, c, &wc, stream); }));
        FATHOM_TRY(fathom_cuda_hybrid_check(h));
    }
    double host_bytes = 0;
    for (uint32_t p = P - most; p < P; p++) host_bytes += pair_bytes[p];
    const double fixed = step_s[most] - host_bytes / (bytes / cpu_s);
    h->rates.cpu_fixed_s = fixed > 0 ? fixed : 0;
    h->rates.cpu_s = cpu_s;
    h->rates.gpu_s = gpu_s;
    h->rates.cpu_bytes_per_s = bytes / cpu_s;
    h->rates.gpu_bytes_per_s = slope > 0 ? 1.0 / slope : INFINITY;
    h->rates.gpu_fixed_s = gpu_fixed;
    h->rates.noise = gpu_spread;
    for (uint32_t c = 0; c <= most; c++) {
        const double e = hy_estimate(&h->rates, pair_bytes.data(), P, c);
        h->corr[c] = e > 0 ? step_s[c] / e : 1.0;
    }
    h->corr_most = most;
    h->calibrated = true;
    if (rates) *rates = h->rates;
    return FATHOM_OK;
}

extern "C" int fathom_cuda_hybrid_share(const fathom_cuda_hybrid *h, const fathom_cuda_tier_step_args *a,
                                        const uint64_t *lengths, uint32_t *host_pairs) {
    FATHOM_CHECK_ARG(h && a && lengths && host_pairs, "hybrid_share: NULL hybrid, args, lengths or host_pairs");
    FATHOM_CHECK(!h->calibrated, FATHOM_ERR_STATE, "hybrid_share: not calibrated (fathom_cuda_hybrid_calibrate)");
    FATHOM_CHECK_ARG(a->batch >= 1 && (uint64_t)a->batch * h->heads <= 65535,
                     "hybrid_share: batch %u x kv_heads %u not in 1..65535", a->batch, h->heads);
    FATHOM_CHECK_ARG(a->budget >= 1 && a->budget <= FATHOM_PLANES * h->D, "hybrid_share: budget %u not in 1..%u",
                     a->budget, FATHOM_PLANES * h->D);
    const uint32_t P = a->batch * h->heads, most = P < h->max_pairs ? P : h->max_pairs;
    std::vector<double> pb(P);
    for (uint32_t p = 0; p < P; p++) pb[p] = hy_pair_bytes(lengths[p / h->heads], a->budget, h->D);
    /* a host share must beat the GPU side alone by more than the replays' spread (its own and the
       GPU-only step's) and HY_MARGIN: otherwise a difference within the noise would pick it */
    const double alone = hy_estimate(&h->rates, pb.data(), P, 0) * h->corr[0];
    double best = alone;
    uint32_t choice = 0;
    for (uint32_t c = 1; c <= most; c++) {
        const uint32_t m = c < h->corr_most ? c : h->corr_most;
        const double t = hy_estimate(&h->rates, pb.data(), P, c) * h->corr[m];
        const double margin = fmax(HY_MARGIN, fmax(h->spread[0], h->spread[m]));
        if (t < best && t < alone * (1 - margin)) best = t, choice = c;
    }
    *host_pairs = choice;
    return FATHOM_OK;
}

/* The public entry points: validation, workspace layout, the step. */
#include "cuda_internal.cuh"

#include <stdlib.h>
#include <string.h>

static int check_config(const fathom_cuda_config *c) {
    FATHOM_CHECK_ARG(c != NULL, "config is NULL");
    FATHOM_CHECK(c->dim != FC_DIM, FATHOM_ERR_UNSUPPORTED, "dim %u: the CUDA kernels need %d",
                 c->dim, FC_DIM);
    FATHOM_CHECK_ARG(c->group >= 1 && c->group <= FATHOM_CUDA_MAX_GROUP, "group %u not in 1..%d",
                     c->group, FATHOM_CUDA_MAX_GROUP);
    FATHOM_CHECK_ARG(c->problems >= 1 && c->problems <= 65535, "problems %u not in 1..65535",
                     c->problems);
    FATHOM_CHECK_ARG(c->tokens >= 1 && c->tokens <= 0xffffffffull - 64,
                     "tokens %llu not in 1..2^32-65", (unsigned long long)c->tokens);
    FATHOM_CHECK_ARG(c->k >= 1 && c->k <= FATHOM_CUDA_MAX_K, "k %u not in 1..%d", c->k,
                     FATHOM_CUDA_MAX_K);
    FATHOM_CHECK_ARG((uint64_t)c->sink + c->local <= c->k, "sink %u + local %u exceed k %u",
                     c->sink, c->local, c->k);
    FATHOM_CHECK_ARG((uint64_t)c->group * c->k <= 4096, "group*k %u exceeds 4096",
                     c->group * c->k);
    /* Enum fields are read as plain ints: in C++ loading an enum that holds
     * an undeclared value is undefined, and a bad value is exactly what this
     * check is for. */
    int scan_v, transport_v;
    memcpy(&scan_v, &c->scan, sizeof scan_v);
    memcpy(&transport_v, &c->transport, sizeof transport_v);
    FATHOM_CHECK_ARG(scan_v >= FATHOM_CUDA_SCAN_WATER_FILL && scan_v <= FATHOM_CUDA_SCAN_NIBBLE4,
                     "unknown scan kind %d", scan_v);
    FATHOM_CHECK_ARG(transport_v >= FATHOM_CUDA_GATHER_KERNEL && transport_v <= FATHOM_CUDA_DIRECT,
                     "unknown transport %d", transport_v);
    FATHOM_CHECK_ARG(c->key_rows == FATHOM_CUDA_KEYS_BF16 || c->key_rows == FATHOM_CUDA_KEYS_PLANES,
                     "unknown key rows %u", c->key_rows);
    if (c->scan == FATHOM_CUDA_SCAN_WATER_FILL)
        FATHOM_CHECK_ARG(c->param >= 1 && c->param <= FATHOM_PLANES * FC_DIM,
                         "water-fill budget %u not in 1..%d", c->param, FATHOM_PLANES * FC_DIM);
    if (c->scan == FATHOM_CUDA_SCAN_TOP_CHANNELS)
        FATHOM_CHECK_ARG(c->param >= 1 && c->param <= FC_DIM, "top-channels r %u not in 1..%d",
                         c->param, FC_DIM);
    FATHOM_CHECK_ARG(c->row_stride == 0 || c->row_stride == FC_DIM || c->row_stride == 2 * FC_DIM,
                     "row_stride %u: 0, %d or %d", c->row_stride, FC_DIM, 2 * FC_DIM);
    FATHOM_CHECK_ARG(!(c->scan == FATHOM_CUDA_SCAN_ORACLE && c->row_stride == 2 * FC_DIM),
                     "the oracle scan reads contiguous keys (row_stride dim)");
    FATHOM_CHECK_ARG(!(c->scan == FATHOM_CUDA_SCAN_NIBBLE4 && c->key_rows == FATHOM_CUDA_KEYS_PLANES),
                     "KEYS_PLANES decodes bit planes, not the nibble layout");
    return FATHOM_OK;
}

static int carve(uint8_t *base, size_t *off, uint64_t count, uint64_t size, void **out) {
    uint64_t bytes;
    FATHOM_CHECK(!fathom_mul_u64(count, size, &bytes) || bytes > (uint64_t)SIZE_MAX / 2,
                 FATHOM_ERR_NOMEM, "workspace size overflows");
    const size_t at = (*off + 255) & ~(size_t)255;
    FATHOM_CHECK(at < *off || (uint64_t)at + bytes > (uint64_t)SIZE_MAX / 2, FATHOM_ERR_NOMEM,
                 "workspace size overflows");
    *out = base ? base + at : NULL;
    *off = at + (size_t)bytes;
    return FATHOM_OK;
}

int fc_workspace_layout(const fathom_cuda_config *cfg, void *base_v, fc_workspace *ws) {
    uint8_t *base = (uint8_t *)base_v;
    const uint64_t P = cfg->problems, G = cfg->group, n = cfg->tokens, k = cfg->k;
    const uint64_t nb = fc_blocks_of(n), rows = P * G;
    const bool staged = fc_staged(cfg->transport);
    const bool dense = cfg->scan == FATHOM_CUDA_SCAN_LANDMARK || cfg->scan == FATHOM_CUDA_SCAN_ORACLE;
    uint64_t words = 0; /* staging per problem, in uint64 */
    if (staged) {
        if (cfg->scan == FATHOM_CUDA_SCAN_LANDMARK)
            words = ((n + FATHOM_LANDMARK_TOKENS - 1) / FATHOM_LANDMARK_TOKENS * FC_DIM * 2 + 7) / 8;
        else if (cfg->scan == FATHOM_CUDA_SCAN_ORACLE)
            words = n * FC_DIM * 2 / 8;
        else
            words = (uint64_t)FC_DIM * FATHOM_PLANES * nb;
        words = (words + 31) & ~(uint64_t)31; /* keep every problem's stage 256-byte aligned */
    }
    memset(ws, 0, sizeof *ws);
    size_t off = 0;
    ws->stage_words = words;
    FATHOM_TRY(carve(base, &off, P * FC_DIM, 1, (void **)&ws->depths));
    FATHOM_TRY(carve(base, &off, P * words, 8, (void **)&ws->stage));
    FATHOM_TRY(carve(base, &off, (staged && !dense) ? P * FC_DIM * nb : 0, 2,
                     (void **)&ws->stage_scales));
    FATHOM_TRY(carve(base, &off, rows * n, 4, (void **)&ws->scores));
    /* hist, counters and cand_fill are adjacent: one memset per step zeroes them */
    FATHOM_TRY(carve(base, &off, rows * 2 * FC_HIST_BINS, 4, (void **)&ws->hist));
    FATHOM_TRY(carve(base, &off, rows * FC_COUNTERS, 4, (void **)&ws->counters));
    FATHOM_TRY(carve(base, &off, rows, 4, (void **)&ws->cand_fill));
    ws->zero_bytes = (size_t)((uint8_t *)(ws->cand_fill + rows) - (uint8_t *)ws->hist);
    FATHOM_TRY(carve(base, &off, rows, sizeof(fc_select_state), (void **)&ws->state));
    FATHOM_TRY(carve(base, &off, rows * k, 4, (void **)&ws->mid));
    FATHOM_TRY(carve(base, &off, rows * FC_CAND_CAP, 8, (void **)&ws->cand));
    FATHOM_TRY(carve(base, &off, rows * k, 4, (void **)&ws->sel));
    FATHOM_TRY(carve(base, &off, rows, 4, (void **)&ws->sel_count));
    FATHOM_TRY(carve(base, &off, rows * k, 2, (void **)&ws->slot));
    FATHOM_TRY(carve(base, &off, rows * k, 4, (void **)&ws->uni));
    FATHOM_TRY(carve(base, &off, P, 4, (void **)&ws->uni_count));
    FATHOM_TRY(carve(base, &off, rows * k * FC_DIM, 4, (void **)&ws->rows_k));
    FATHOM_TRY(carve(base, &off, rows * k * FC_DIM, 2, (void **)&ws->rows_v));
    ws->total = off + 256;
    return FATHOM_OK;
}

extern "C" int fathom_cuda_workspace_size(const fathom_cuda_config *config, size_t *bytes) {
    FATHOM_CHECK_ARG(bytes != NULL, "bytes is NULL");
    FATHOM_TRY(check_config(config));
    fc_workspace ws;
    FATHOM_TRY(fc_workspace_layout(config, NULL, &ws));
    *bytes = ws.total;
    return FATHOM_OK;
}

extern "C" void fathom_cuda_lanes_destroy(fathom_cuda_lanes *l) {
    if (!l) return;
    if (l->link) cudaStreamDestroy(l->link);
    for (uint32_t i = 0; i < FATHOM_CUDA_MAX_LANES; i++) {
        if (l->stream[i]) cudaStreamDestroy(l->stream[i]);
        if (l->done[i]) cudaEventDestroy(l->done[i]);
    }
    for (uint32_t i = 0; i < FATHOM_CUDA_MAX_CHUNKS; i++) {
        if (l->moved[i]) cudaEventDestroy(l->moved[i]);
        if (l->scanned[i]) cudaEventDestroy(l->scanned[i]);
    }
    if (l->fork) cudaEventDestroy(l->fork);
    if (l->link_done) cudaEventDestroy(l->link_done);
    free(l);
}

#define LANES_TRY(call)                                                                            \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fathom_cuda_lanes_destroy(l);                                                          \
            return fathom_fail(FATHOM_ERR_DEVICE, "%s: %s", #call, cudaGetErrorName(e_));          \
        }                                                                                          \
    } while (0)

extern "C" int fathom_cuda_lanes_create(uint32_t count, fathom_cuda_lanes **out) {
    FATHOM_CHECK_ARG(out != NULL, "out is NULL");
    *out = NULL;
    FATHOM_CHECK_ARG(count >= 1 && count <= FATHOM_CUDA_MAX_LANES, "lanes %u not in 1..%d", count,
                     FATHOM_CUDA_MAX_LANES);
    fathom_cuda_lanes *l = (fathom_cuda_lanes *)calloc(1, sizeof *l);
    FATHOM_CHECK(l == NULL, FATHOM_ERR_NOMEM, "out of memory");
    l->count = count;
    /* the link stream gets the highest priority: when a chunk's scan and the
     * next chunk's gather become ready together, the gather's blocks go first
     * and the link never waits for SMs */
    int least = 0, greatest = 0;
    LANES_TRY(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    LANES_TRY(cudaStreamCreateWithPriority(&l->link, cudaStreamNonBlocking, greatest));
    const unsigned ev = cudaEventDisableTiming;
    for (uint32_t i = 0; i < count; i++) {
        LANES_TRY(cudaStreamCreateWithPriority(&l->stream[i], cudaStreamNonBlocking, least));
        LANES_TRY(cudaEventCreateWithFlags(&l->done[i], ev));
    }
    for (uint32_t i = 0; i < FATHOM_CUDA_MAX_CHUNKS; i++) {
        LANES_TRY(cudaEventCreateWithFlags(&l->moved[i], ev));
        LANES_TRY(cudaEventCreateWithFlags(&l->scanned[i], ev));
    }
    LANES_TRY(cudaEventCreateWithFlags(&l->fork, ev));
    LANES_TRY(cudaEventCreateWithFlags(&l->link_done, ev));
    *out = l;
    return FATHOM_OK;
}

extern "C" int fathom_cuda_lanes_set_chunk(fathom_cuda_lanes *l, uint32_t problems_per_chunk) {
    FATHOM_CHECK_ARG(l != NULL, "lanes is NULL");
    FATHOM_CHECK_ARG(problems_per_chunk <= 65535, "problems per chunk %u not in 0..65535",
                     problems_per_chunk);
    l->per_chunk = problems_per_chunk;
    return FATHOM_OK;
}

extern "C" uint32_t fathom_cuda_lanes_chunk(const fathom_cuda_lanes *l, const fathom_cuda_config *c) {
    if (!l || !c || c->problems == 0) return 0;
    return fc_chunk_size(l->per_chunk, c->problems, c->tokens);
}

uint32_t fc_chunk_size(uint32_t per_chunk, uint32_t P, uint64_t tokens) {
    uint32_t want = per_chunk;
    if (want == 0) want = tokens < 65536 ? P : tokens < 196608 ? 2 : 1;
    uint32_t per = (P + FATHOM_CUDA_MAX_CHUNKS - 1) / FATHOM_CUDA_MAX_CHUNKS;
    if (want > per) per = want < P ? want : P;
    return per;
}

extern "C" int fathom_cuda_lanes_trace(fathom_cuda_lanes *l, uint64_t *stamps, uint32_t steps) {
    FATHOM_CHECK_ARG(l != NULL, "lanes is NULL");
    FATHOM_CHECK_ARG((stamps == NULL) == (steps == 0), "stamps and steps: both or neither");
    l->trace = stamps;
    l->trace_cap = steps;
    l->trace_next = 0;
    return FATHOM_OK;
}

static __global__ void stamp_kernel(uint64_t *at) {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    *at = t;
}

static int stamp(uint64_t *trace, uint32_t slot, cudaStream_t s) {
    if (!trace) return FATHOM_OK;
    stamp_kernel<<<1, 1, 0, s>>>(trace + slot);
    FATHOM_CUDA_LAUNCHED();
    return FATHOM_OK;
}

/* What the phases read and write, with the caller's optional outputs
 * resolved to the workspace. */
typedef struct step_io {
    fathom_cuda_config cfg;
    const fathom_cuda_problem *problems;
    const float *queries;
    float *out, *scores;
    uint32_t *sel, *sel_count;
    const uint8_t *staged_depths; /* what a previous prefetch staged for the first staged_count problems */
    uint32_t staged_count;
    fc_workspace ws;
} step_io;

/* The problems [p0, p0 + count) of a step: every per-problem array offset
 * (each is laid out problem-major), so the phase launchers run unchanged. */
static step_io view_of(const step_io *all, uint32_t p0, uint32_t count) {
    step_io v = *all;
    const uint64_t G = all->cfg.group, n = all->cfg.tokens, k = all->cfg.k, p = p0;
    const uint64_t nb = fc_blocks_of(n), rows = p * G;
    fc_workspace *w = &v.ws;
    v.cfg.problems = count;
    v.problems += p;
    v.queries += rows * FC_DIM;
    v.out += rows * FC_DIM;
    v.scores += rows * n;
    v.sel += rows * k;
    v.sel_count += rows;
    v.staged_count = all->staged_count > p0 ? all->staged_count - p0 : 0;
    if (v.staged_count > count) v.staged_count = count;
    v.staged_depths = v.staged_count ? all->staged_depths + p * FC_DIM : NULL;
    w->depths += p * FC_DIM;
    w->stage += p * w->stage_words;       /* 0 words when nothing is staged */
    w->stage_scales += p * FC_DIM * nb;   /* read only by plane scans that stage */
    fc_topk_view(w, p, G, k);
    w->rows_k += p * G * k * FC_DIM;
    w->rows_v += p * G * k * FC_DIM;
    return v;
}

static int mark(const fathom_cuda_step_args *a, int phase, cudaStream_t stream) {
    if (a->phase_events) FATHOM_CUDA_TRY(cudaEventRecord(a->phase_events[phase], stream));
    return FATHOM_OK;
}

extern "C" int fathom_cuda_step(const fathom_cuda_config *config, const fathom_cuda_step_args *args,
                                cudaStream_t stream) {
    FATHOM_TRY(check_config(config));
    FATHOM_CHECK_ARG(args != NULL, "args is NULL");
    FATHOM_CHECK_ARG(args->problems != NULL, "problems is NULL");
    FATHOM_CHECK_ARG(args->queries != NULL, "queries is NULL");
    FATHOM_CHECK_ARG(args->out != NULL, "out is NULL");
    FATHOM_CHECK_ARG(args->workspace != NULL, "workspace is NULL");
    FATHOM_CHECK_ARG(((uintptr_t)args->workspace & 255) == 0, "workspace is not 256-byte aligned");
    FATHOM_CHECK_ARG(config->scan != FATHOM_CUDA_SCAN_WATER_FILL || args->variance != NULL,
                     "water-filling needs variance");
    FATHOM_CHECK_ARG(config->scan != FATHOM_CUDA_SCAN_FIXED || args->fixed_depths != NULL,
                     "a fixed scan needs fixed_depths");
    const fathom_cuda_lanes *lanes = args->lanes;
    FATHOM_CHECK_ARG(!lanes || !args->phase_events, "phase events time a one-stream step, not lanes");
    FATHOM_CHECK_ARG(!lanes || (lanes->count >= 1 && lanes->count <= FATHOM_CUDA_MAX_LANES),
                     "lanes object is not one fathom_cuda_lanes_create made");
    /* prefetch and staged planes: plane runs in HBM staging, ordered on the lanes' link stream */
    const bool prefix_scan = fc_uses_depths(config->scan) && config->scan != FATHOM_CUDA_SCAN_NIBBLE4;
    FATHOM_CHECK_ARG(args->prefetch_count <= config->problems, "prefetch_count %u exceeds problems %u",
                     args->prefetch_count, config->problems);
    FATHOM_CHECK_ARG(args->staged_count <= config->problems, "staged_count %u exceeds problems %u",
                     args->staged_count, config->problems);
    if (args->prefetch_count || args->staged_count) {
        FATHOM_CHECK_ARG(lanes != NULL, "a prefetch (and the step after it) needs lanes");
        FATHOM_CHECK_ARG(config->transport == FATHOM_CUDA_GATHER_KERNEL,
                         "a prefetch stages planes: the kernel transport only");
        FATHOM_CHECK_ARG(prefix_scan, "a prefetch stages plane prefixes: water-fill, top-channels or fixed scans");
    }
    FATHOM_CHECK_ARG(!args->prefetch_count || (args->prefetch_problems && args->prefetch_depths),
                     "prefetch_count %u with a NULL prefetch_problems or prefetch_depths",
                     args->prefetch_count);
    FATHOM_CHECK_ARG(!args->staged_count || args->staged_depths,
                     "staged_count %u with NULL staged_depths", args->staged_count);
    step_io io;
    FATHOM_TRY(fc_workspace_layout(config, NULL, &io.ws));
    FATHOM_CHECK_ARG(args->workspace_bytes >= io.ws.total, "workspace of %zu bytes, need %zu",
                     args->workspace_bytes, io.ws.total);
    FATHOM_TRY(fc_workspace_layout(config, args->workspace, &io.ws));
    io.cfg = *config;
    io.problems = args->problems;
    io.queries = args->queries;
    io.out = args->out;
    io.scores = args->scores ? args->scores : io.ws.scores;
    io.sel = args->selected ? args->selected : io.ws.sel;
    io.sel_count = args->selected_count ? args->selected_count : io.ws.sel_count;
    io.staged_depths = args->staged_count ? args->staged_depths : NULL;
    io.staged_count = args->staged_count;
    const bool planes = fc_uses_depths(config->scan);
    const bool staged = fc_staged(config->transport);

    FATHOM_TRY(mark(args, 0, stream));
    if (planes)
        FATHOM_TRY(fc_plan(config, args->queries, args->variance, args->fixed_depths, io.ws.depths,
                           stream));
    /* the top-k's histograms and counters start at zero (its kernels leave
     * them so for the next level, not for the next step: the workspace may
     * have served another config since) */
    FATHOM_CUDA_TRY(cudaMemsetAsync(io.ws.hist, 0, io.ws.zero_bytes, stream));
    FATHOM_TRY(mark(args, 1, stream));
    if (!lanes || (config->problems == 1 && !args->prefetch_count && !args->staged_count)) {
        FATHOM_TRY(fc_gather(config, io.problems, &io.ws, io.staged_depths, io.staged_count, false, false, stream));
        FATHOM_TRY(mark(args, 2, stream));
        FATHOM_TRY(fc_scan(config, io.problems, &io.ws, io.queries, io.scores, stream));
        FATHOM_TRY(mark(args, 3, stream));
        FATHOM_TRY(fc_topk(config, &io.ws, io.scores, io.sel, io.sel_count, stream));
        FATHOM_TRY(mark(args, 4, stream));
        FATHOM_TRY(fc_fetch(config, io.problems, &io.ws, stream));
        FATHOM_TRY(mark(args, 5, stream));
        FATHOM_TRY(fc_attend(config, &io.ws, io.queries, io.sel_count, io.out, stream));
        FATHOM_TRY(mark(args, 6, stream));
    } else {
        /* The pipeline: the link-bound phase of every chunk (the gather, or
         * the scan itself when nothing is staged) runs on the link stream,
         * chunk after chunk, so the chunks cross the link one after another
         * at its full rate instead of all together; chunk i's scan, top-k,
         * fetch and attention run on lane i % count as soon as its bytes
         * are in, beside chunk i+1's transfer. */
        const uint32_t P = config->problems;
        const uint32_t per = fathom_cuda_lanes_chunk(lanes, config);
        const uint32_t chunks = (P + per - 1) / per;
        fathom_cuda_lanes *L = (fathom_cuda_lanes *)lanes; /* the trace cursor moves */
        step_io views[FATHOM_CUDA_MAX_CHUNKS];
        for (uint32_t i = 0; i < chunks; i++)
            views[i] = view_of(&io, i * per, P - i * per < per ? P - i * per : per);
        uint64_t *tr = NULL;
        if (L->trace && L->trace_next < L->trace_cap)
            tr = L->trace + (size_t)L->trace_next++ * FATHOM_CUDA_TRACE_SLOTS;
        FATHOM_TRY(stamp(tr, 0, stream));
        FATHOM_CUDA_TRY(cudaEventRecord(L->fork, stream));
        FATHOM_CUDA_TRY(cudaStreamWaitEvent(L->link, L->fork, 0));
        for (uint32_t i = 0; i < chunks; i++) {
            const step_io &v = views[i];
            FATHOM_TRY(stamp(tr, 2 + i * 6 + 0, L->link));
            /* chunk i > 0 follows chunk i-1's gather on the link stream and may
             * overlap its last bytes; the first waits for this step's plan, and
             * a traced step has stamp kernels between the gathers */
            FATHOM_TRY(fc_gather(&v.cfg, v.problems, &v.ws, v.staged_depths, v.staged_count, i > 0 && !tr,
                                 i + 1 < chunks, L->link));
            if (!staged) FATHOM_TRY(fc_scan(&v.cfg, v.problems, &v.ws, v.queries, v.scores, L->link));
            FATHOM_TRY(stamp(tr, 2 + i * 6 + 1, L->link));
            FATHOM_CUDA_TRY(cudaEventRecord(L->moved[i], L->link));
        }
        FATHOM_CUDA_TRY(cudaEventRecord(L->link_done, L->link));
        for (uint32_t i = 0; i < chunks; i++) {
            cudaStream_t s = L->stream[i % L->count];
            const step_io &v = views[i];
            if (i < L->count) FATHOM_CUDA_TRY(cudaStreamWaitEvent(s, L->fork, 0));
            FATHOM_CUDA_TRY(cudaStreamWaitEvent(s, L->moved[i], 0));
            FATHOM_TRY(stamp(tr, 2 + i * 6 + 2, s));
            if (staged) FATHOM_TRY(fc_scan(&v.cfg, v.problems, &v.ws, v.queries, v.scores, s));
            if (args->prefetch_count && i * per < args->prefetch_count)
                FATHOM_CUDA_TRY(cudaEventRecord(L->scanned[i], s));
            FATHOM_TRY(fc_topk(&v.cfg, &v.ws, v.scores, v.sel, v.sel_count, s));
            FATHOM_TRY(stamp(tr, 2 + i * 6 + 3, s));
            FATHOM_TRY(fc_fetch(&v.cfg, v.problems, &v.ws, s));
            FATHOM_TRY(stamp(tr, 2 + i * 6 + 4, s));
            FATHOM_TRY(fc_attend(&v.cfg, &v.ws, v.queries, v.sel_count, v.out, s));
            FATHOM_TRY(stamp(tr, 2 + i * 6 + 5, s));
        }
        if (args->prefetch_count) {
            /* after link_done: the step's join does not wait for it; the next
             * step's gathers queue behind it on the link stream */
            for (uint32_t i = 0; i < chunks && i * per < args->prefetch_count; i++)
                FATHOM_CUDA_TRY(cudaStreamWaitEvent(L->link, L->scanned[i], 0));
            step_io pv = view_of(&io, 0, args->prefetch_count);
            pv.ws.depths = (uint8_t *)args->prefetch_depths;
            FATHOM_TRY(fc_gather(&pv.cfg, args->prefetch_problems, &pv.ws, NULL, 0, !tr, false, L->link));
        }
        FATHOM_CUDA_TRY(cudaStreamWaitEvent(stream, L->link_done, 0));
        const uint32_t used = chunks < L->count ? chunks : L->count;
        for (uint32_t l = 0; l < used; l++) {
            FATHOM_CUDA_TRY(cudaEventRecord(L->done[l], L->stream[l]));
            FATHOM_CUDA_TRY(cudaStreamWaitEvent(stream, L->done[l], 0));
        }
        FATHOM_TRY(stamp(tr, 1, stream));
    }
    if (args->depths && planes)
        FATHOM_CUDA_TRY(cudaMemcpyAsync(args->depths, io.ws.depths, (size_t)config->problems * FC_DIM,
                                        cudaMemcpyDeviceToDevice, stream));
    if (args->union_count)
        FATHOM_CUDA_TRY(cudaMemcpyAsync(args->union_count, io.ws.uni_count,
                                        (size_t)config->problems * sizeof(uint32_t),
                                        cudaMemcpyDeviceToDevice, stream));
    return FATHOM_OK;
}

extern "C" uint64_t fathom_cuda_plane_bytes(uint32_t dim, uint64_t tokens, const uint8_t *depths) {
    if (!depths) return 0;
    const uint64_t nb = (tokens + 63) / 64;
    uint64_t bytes = 0;
    for (uint32_t j = 0; j < dim; j++)
        if (depths[j]) bytes += (8u * depths[j] + 2u) * nb;
    return bytes;
}

extern "C" int fathom_cuda_device_present(void) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        fathom_fail(FATHOM_ERR_DEVICE, "no CUDA device: %s",
                    e != cudaSuccess ? cudaGetErrorName(e) : "count is 0");
        return 0;
    }
    return 1;
}

/* The KV tier's host side: segments in pinned mapped host memory, sessions,
 * reserve / truncate / fork / free, usage, views and the device tables.
 *
 * A segment holds S blocks (64*S tokens) of every (layer, head) of one
 * session, each slice laid out as [dim][4][S] plane words, [dim][S] fp16
 * scales, then [64*S][2][dim] bf16 K and V rows. A segment is written only
 * while it holds the session's open end; full segments are immutable, so a
 * fork shares them by reference count. */
#include "tier_internal.cuh"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct tier_segment {
    uint8_t *host; /* cudaHostAlloc, mapped */
    uint8_t *dev;  /* its device pointer */
    uint32_t refs;
} tier_segment;

typedef struct tier_session {
    int live;
    uint32_t count;       /* segments referenced: [0, count) */
    tier_segment **segs;  /* [max_segments] */
    double *sums;         /* [layers][heads][3][dim], mapped */
    double *sums_dev;
    float *center;        /* [layers][heads][dim], mapped; NULL: not centered */
    float *center_dev;
    int center_given;     /* the caller's center (else the first append's mean) */
} tier_session;

struct fathom_cuda_tier {
    fathom_cuda_tier_shape shape;
    uint64_t seg_tokens, seg_bytes, sums_bytes;
    tier_session *sessions;
    tier_dev dev;
    uint8_t **d_table;
    uint32_t *d_len, *d_cap, *d_error;
    double **d_sums;
    float **d_centers;       /* [max_sessions] */
    uint32_t *d_center_state; /* [max_sessions][layers] */
    int centering;           /* a session was ever centered: appends enqueue the centering kernel */
    tier_cache *caches;   /* [max_sessions] host copies of the HBM caches' descriptions */
    tier_cache *d_caches; /* [max_sessions] the same in device memory */
    uint32_t row_caches;  /* sessions with a direct-mapped row cache */
    uint32_t set_caches;  /* sessions with a row cache of ways > 1 */
    uint32_t plan_windows; /* sessions whose plane cache keeps a plan window */
    uint32_t ahead_sessions; /* sessions with read-ahead */
    cudaStream_t ahead;       /* the read-ahead's stream (non-blocking) */
    cudaEvent_t ahead_fork, ahead_join;
    unsigned long long ahead_pending; /* capture id whose graph holds a read-ahead not yet joined, 0 none */
    fathom_cuda_lanes *lanes; /* the step's pipeline; NULL: one stream */
    fathom_cuda_scan_mode scan_mode; /* fathom_cuda_tier_set_scan_mode; 0 (exact) from calloc */
    fathom_cuda_ahead_start ahead_start; /* fathom_cuda_tier_set_ahead_start; 0 (beside) from calloc */
};

const tier_dev *fc_tier_dev(const fathom_cuda_tier *t) { return &t->dev; }
uint32_t fc_tier_group(const fathom_cuda_tier *t) { return t->shape.group; }
tier_cache *fc_tier_caches(fathom_cuda_tier *t, tier_cache **device) {
    *device = t->d_caches;
    return t->caches;
}
uint32_t *fc_tier_row_caches(fathom_cuda_tier *t) { return &t->row_caches; }
uint32_t *fc_tier_set_caches(fathom_cuda_tier *t) { return &t->set_caches; }
uint32_t *fc_tier_plan_windows(fathom_cuda_tier *t) { return &t->plan_windows; }
uint32_t *fc_tier_ahead_sessions(fathom_cuda_tier *t) { return &t->ahead_sessions; }
cudaStream_t fc_tier_ahead_stream(const fathom_cuda_tier *t, cudaEvent_t *fork, cudaEvent_t *join) {
    *fork = t->ahead_fork;
    *join = t->ahead_join;
    return t->ahead;
}
unsigned long long *fc_tier_ahead_pending(fathom_cuda_tier *t) { return &t->ahead_pending; }
fathom_cuda_lanes *fc_tier_lanes(const fathom_cuda_tier *t) { return t->lanes; }
fathom_cuda_scan_mode fc_tier_scan_mode(const fathom_cuda_tier *t) { return t->scan_mode; }
fathom_cuda_ahead_start fc_tier_ahead_start(const fathom_cuda_tier *t) { return t->ahead_start; }
int fc_tier_live(const fathom_cuda_tier *t, uint32_t s) {
    return t && s < t->shape.max_sessions && t->sessions[s].live;
}

static uint64_t round256(uint64_t x) { return (x + 255) & ~(uint64_t)255; }

extern "C" void fathom_cuda_tier_destroy(fathom_cuda_tier *t) {
    if (!t) return;
    if (t->sessions) {
        for (uint32_t s = 0; s < t->shape.max_sessions; s++) {
            tier_session *se = &t->sessions[s];
            for (uint32_t i = 0; se->segs && i < se->count; i++)
                if (--se->segs[i]->refs == 0) {
                    cudaFreeHost(se->segs[i]->host);
                    free(se->segs[i]);
                }
            free(se->segs);
            if (se->sums) cudaFreeHost(se->sums);
            if (se->center) cudaFreeHost(se->center);
        }
        free(t->sessions);
    }
    if (t->caches)
        for (uint32_t s = 0; s < t->shape.max_sessions; s++) fc_tier_cache_release(&t->caches[s]);
    free(t->caches);
    cudaFree(t->d_caches);
    cudaFree(t->d_table);
    cudaFree(t->d_len);
    cudaFree(t->d_cap);
    cudaFree(t->d_error);
    cudaFree(t->d_sums);
    cudaFree(t->d_centers);
    cudaFree(t->d_center_state);
    fathom_cuda_lanes_destroy(t->lanes);
    if (t->ahead) {
        cudaStreamSynchronize(t->ahead);
        cudaStreamDestroy(t->ahead);
    }
    if (t->ahead_fork) cudaEventDestroy(t->ahead_fork);
    if (t->ahead_join) cudaEventDestroy(t->ahead_join);
    free(t);
}

#define TIER_TRY(call)                                                                             \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fathom_cuda_tier_destroy(t);                                                           \
            return fathom_fail(FATHOM_ERR_DEVICE, "tier_create: %s: %s", #call,                    \
                               cudaGetErrorName(e_));                                              \
        }                                                                                          \
    } while (0)

extern "C" int fathom_cuda_tier_create(const fathom_cuda_tier_shape *shape, fathom_cuda_tier **out) {
    FATHOM_CHECK_ARG(out != NULL, "tier_create: out is NULL");
    *out = NULL;
    FATHOM_CHECK_ARG(shape != NULL, "tier_create: shape is NULL");
    fathom_cuda_tier_shape sh = *shape;
    if (sh.segment_blocks == 0) sh.segment_blocks = 64;
    FATHOM_CHECK_ARG(sh.layers >= 1 && sh.layers <= 4096, "tier_create: layers %u not in 1..4096", sh.layers);
    FATHOM_CHECK_ARG(sh.kv_heads >= 1 && sh.kv_heads <= 4096, "tier_create: kv_heads %u not in 1..4096",
                     sh.kv_heads);
    FATHOM_CHECK_ARG(sh.group >= 1 && sh.group <= FATHOM_CUDA_TIER_MAX_GROUP,
                     "tier_create: group %u not in 1..%d", sh.group, FATHOM_CUDA_TIER_MAX_GROUP);
    FATHOM_CHECK(sh.dim != 64 && sh.dim != 128 && sh.dim != 256, FATHOM_ERR_UNSUPPORTED,
                 "tier_create: dim %u: the kernels are built for 64, 128 and 256", sh.dim);
    FATHOM_CHECK_ARG(sh.segment_blocks % 32 == 0 && sh.segment_blocks <= (1u << 20),
                     "tier_create: segment_blocks %u is not a multiple of 32 up to 2^20",
                     sh.segment_blocks);
    FATHOM_CHECK_ARG(sh.max_sessions >= 1 && sh.max_sessions <= (1u << 20),
                     "tier_create: max_sessions %u not in 1..2^20", sh.max_sessions);
    FATHOM_CHECK_ARG(sh.max_tokens >= 1 && sh.max_tokens <= 0xffffffffull - 64,
                     "tier_create: max_tokens %llu not in 1..2^32-65",
                     (unsigned long long)sh.max_tokens);
    fathom_cuda_tier *t = (fathom_cuda_tier *)calloc(1, sizeof *t);
    FATHOM_CHECK(t == NULL, FATHOM_ERR_NOMEM, "tier_create: out of memory");
    t->shape = sh;
    const uint64_t D = sh.dim, S = sh.segment_blocks;
    t->seg_tokens = S * FATHOM_BLOCK_TOKENS;
    tier_dev *d = &t->dev;
    d->layers = sh.layers;
    d->heads = sh.kv_heads;
    d->dim = sh.dim;
    d->segment_blocks = sh.segment_blocks;
    d->max_sessions = sh.max_sessions;
    d->max_segments = (uint32_t)((sh.max_tokens + t->seg_tokens - 1) / t->seg_tokens);
    d->scales_off = round256(D * FATHOM_PLANES * S * 8);
    d->kv_off = d->scales_off + round256(D * S * 2);
    d->head_bytes = d->kv_off + round256(t->seg_tokens * 2 * D * 2);
    uint64_t slices, tbl;
    if (!fathom_mul_u64((uint64_t)sh.layers, sh.kv_heads, &slices) ||
        !fathom_mul_u64(slices, d->head_bytes, &t->seg_bytes) ||
        !fathom_mul_u64((uint64_t)sh.max_sessions, d->max_segments, &tbl) || tbl > (1ull << 32)) {
        free(t);
        return fathom_fail(FATHOM_ERR_NOMEM, "tier_create: sizes overflow");
    }
    t->sums_bytes = slices * 3 * D * sizeof(double);
    t->sessions = (tier_session *)calloc(sh.max_sessions, sizeof *t->sessions);
    t->caches = (tier_cache *)calloc(sh.max_sessions, sizeof *t->caches);
    if (!t->sessions || !t->caches) {
        free(t->sessions);
        free(t->caches);
        free(t);
        return fathom_fail(FATHOM_ERR_NOMEM, "tier_create: out of memory for %u sessions",
                           sh.max_sessions);
    }
    TIER_TRY(cudaMalloc((void **)&t->d_table, tbl * sizeof(uint8_t *)));
    TIER_TRY(cudaMemset(t->d_table, 0, tbl * sizeof(uint8_t *)));
    TIER_TRY(cudaMalloc((void **)&t->d_len, (size_t)sh.max_sessions * sh.layers * 4));
    TIER_TRY(cudaMemset(t->d_len, 0, (size_t)sh.max_sessions * sh.layers * 4));
    TIER_TRY(cudaMalloc((void **)&t->d_cap, (size_t)sh.max_sessions * 4));
    TIER_TRY(cudaMemset(t->d_cap, 0, (size_t)sh.max_sessions * 4));
    TIER_TRY(cudaMalloc((void **)&t->d_error, 4));
    TIER_TRY(cudaMemset(t->d_error, 0, 4));
    TIER_TRY(cudaMalloc((void **)&t->d_sums, (size_t)sh.max_sessions * sizeof(double *)));
    TIER_TRY(cudaMemset(t->d_sums, 0, (size_t)sh.max_sessions * sizeof(double *)));
    TIER_TRY(cudaMalloc((void **)&t->d_centers, (size_t)sh.max_sessions * sizeof(float *)));
    TIER_TRY(cudaMemset(t->d_centers, 0, (size_t)sh.max_sessions * sizeof(float *)));
    TIER_TRY(cudaMalloc((void **)&t->d_center_state, (size_t)sh.max_sessions * sh.layers * 4));
    TIER_TRY(cudaMemset(t->d_center_state, 0, (size_t)sh.max_sessions * sh.layers * 4));
    TIER_TRY(cudaMalloc((void **)&t->d_caches, (size_t)sh.max_sessions * sizeof(tier_cache)));
    TIER_TRY(cudaMemset(t->d_caches, 0, (size_t)sh.max_sessions * sizeof(tier_cache)));
    d->caches = t->d_caches;
    d->table = t->d_table;
    d->len = t->d_len;
    d->cap = t->d_cap;
    d->sums = t->d_sums;
    d->centers = t->d_centers;
    d->center_state = t->d_center_state;
    d->error = t->d_error;
    /* the read-ahead's stream has the highest priority: started between two
     * layers' steps, its few CTAs go before the queued CTAs of the caller's
     * kernels there (a graph keeps it where instantiated with
     * cudaGraphInstantiateFlagUseNodePriority, as PyTorch's are) */
    int least = 0, greatest = 0;
    TIER_TRY(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    TIER_TRY(cudaStreamCreateWithPriority(&t->ahead, cudaStreamNonBlocking, greatest));
    TIER_TRY(cudaEventCreateWithFlags(&t->ahead_fork, cudaEventDisableTiming));
    TIER_TRY(cudaEventCreateWithFlags(&t->ahead_join, cudaEventDisableTiming));
    const int st = fathom_cuda_lanes_create(TIER_LANES, &t->lanes);
    if (st != FATHOM_OK) {
        fathom_cuda_tier_destroy(t);
        return st;
    }
    *out = t;
    return FATHOM_OK;
}

extern "C" int fathom_cuda_tier_set_scan_mode(fathom_cuda_tier *t, fathom_cuda_scan_mode mode) {
    FATHOM_CHECK_ARG(t != NULL, "tier_set_scan_mode: tier is NULL");
    FATHOM_CHECK_ARG(mode == FATHOM_CUDA_SCAN_EXACT || mode == FATHOM_CUDA_SCAN_INT8,
                     "tier_set_scan_mode: mode %d is neither FATHOM_CUDA_SCAN_EXACT nor FATHOM_CUDA_SCAN_INT8",
                     (int)mode);
    t->scan_mode = mode;
    return FATHOM_OK;
}

extern "C" int fathom_cuda_tier_set_ahead_start(fathom_cuda_tier *t, fathom_cuda_ahead_start start) {
    FATHOM_CHECK_ARG(t != NULL, "tier_set_ahead_start: tier is NULL");
    FATHOM_CHECK_ARG(start == FATHOM_CUDA_AHEAD_BESIDE || start == FATHOM_CUDA_AHEAD_BETWEEN ||
                         start == FATHOM_CUDA_AHEAD_ACROSS,
                     "tier_set_ahead_start: %d is not FATHOM_CUDA_AHEAD_BESIDE, _BETWEEN or _ACROSS", (int)start);
    t->ahead_start = start;
    return FATHOM_OK;
}

extern "C" int fathom_cuda_tier_set_lanes(fathom_cuda_tier *t, uint32_t lanes, uint32_t problems_per_chunk) {
    FATHOM_CHECK_ARG(t != NULL, "tier_set_lanes: tier is NULL");
    FATHOM_CHECK_ARG(lanes <= FATHOM_CUDA_MAX_LANES, "tier_set_lanes: lanes %u not in 0..%d", lanes,
                     FATHOM_CUDA_MAX_LANES);
    FATHOM_CHECK_ARG(problems_per_chunk <= 65535, "tier_set_lanes: problems per chunk %u not in 0..65535",
                     problems_per_chunk);
    fathom_cuda_lanes *l = NULL;
    if (lanes) {
        FATHOM_TRY(fathom_cuda_lanes_create(lanes, &l));
        l->per_chunk = problems_per_chunk;
    }
    fathom_cuda_lanes_destroy(t->lanes);
    t->lanes = l;
    return FATHOM_OK;
}

static int check_session(const fathom_cuda_tier *t, uint32_t s, const char *who) {
    FATHOM_CHECK_ARG(t != NULL, "%s: tier is NULL", who);
    FATHOM_CHECK_ARG(s < t->shape.max_sessions && t->sessions[s].live, "%s: no session %u", who, s);
    return FATHOM_OK;
}

/* Device tables of session s from its host state: segment pointers, capacity. */
static int publish(fathom_cuda_tier *t, uint32_t s) {
    tier_session *se = &t->sessions[s];
    const uint32_t M = t->dev.max_segments;
    uint8_t **row = (uint8_t **)calloc(M ? M : 1, sizeof *row);
    FATHOM_CHECK(row == NULL, FATHOM_ERR_NOMEM, "tier: out of memory");
    for (uint32_t i = 0; i < se->count; i++) row[i] = se->segs[i]->dev;
    const uint32_t cap = (uint32_t)((uint64_t)se->count * t->seg_tokens < t->shape.max_tokens
                                        ? (uint64_t)se->count * t->seg_tokens
                                        : t->shape.max_tokens);
    cudaError_t e = cudaMemcpy(t->d_table + (size_t)s * M, row, (size_t)M * sizeof *row,
                               cudaMemcpyHostToDevice);
    free(row);
    if (e == cudaSuccess) e = cudaMemcpy(t->d_cap + s, &cap, 4, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemcpy(t->d_sums + s, &se->sums_dev, sizeof(double *), cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(t->d_centers + s, &se->center_dev, sizeof(float *), cudaMemcpyHostToDevice);
    FATHOM_CHECK(e != cudaSuccess, FATHOM_ERR_DEVICE, "tier: updating the device tables: %s",
                 cudaGetErrorName(e));
    return FATHOM_OK;
}

static int set_lengths(fathom_cuda_tier *t, uint32_t s, uint64_t n) {
    const uint32_t L = t->shape.layers;
    uint32_t *v = (uint32_t *)malloc((size_t)L * 4);
    FATHOM_CHECK(v == NULL, FATHOM_ERR_NOMEM, "tier: out of memory");
    for (uint32_t l = 0; l < L; l++) v[l] = (uint32_t)n;
    cudaError_t e = cudaMemcpy(t->d_len + (size_t)s * L, v, (size_t)L * 4, cudaMemcpyHostToDevice);
    free(v);
    FATHOM_CHECK(e != cudaSuccess, FATHOM_ERR_DEVICE, "tier: setting lengths: %s", cudaGetErrorName(e));
    return FATHOM_OK;
}

/* Every layer's center state of session s (TIER_CENTER_*, 0: not centered). */
static int set_center_states(fathom_cuda_tier *t, uint32_t s, uint32_t state) {
    const uint32_t L = t->shape.layers;
    uint32_t *v = (uint32_t *)malloc((size_t)L * 4);
    FATHOM_CHECK(v == NULL, FATHOM_ERR_NOMEM, "tier: out of memory");
    for (uint32_t l = 0; l < L; l++) v[l] = state;
    cudaError_t e = cudaMemcpy(t->d_center_state + (size_t)s * L, v, (size_t)L * 4, cudaMemcpyHostToDevice);
    free(v);
    FATHOM_CHECK(e != cudaSuccess, FATHOM_ERR_DEVICE, "tier: setting center states: %s", cudaGetErrorName(e));
    return FATHOM_OK;
}

/* A session's centers: [layers][heads][dim] floats of pinned mapped memory. */
static int center_alloc(const fathom_cuda_tier *t, float **host, float **dev) {
    const size_t bytes = (size_t)t->shape.layers * t->shape.kv_heads * t->shape.dim * sizeof(float);
    *host = *dev = NULL;
    if (cudaHostAlloc((void **)host, bytes, cudaHostAllocMapped) != cudaSuccess ||
        cudaHostGetDevicePointer((void **)dev, *host, 0) != cudaSuccess) {
        cudaGetLastError();
        if (*host) cudaFreeHost(*host);
        *host = *dev = NULL;
        return fathom_fail(FATHOM_ERR_NOMEM, "tier: no pinned memory for %llu bytes of centers",
                           (unsigned long long)bytes);
    }
    memset(*host, 0, bytes);
    return FATHOM_OK;
}

static tier_segment *segment_new(const fathom_cuda_tier *t) {
    tier_segment *g = (tier_segment *)calloc(1, sizeof *g);
    if (!g) return NULL;
    if (cudaHostAlloc((void **)&g->host, t->seg_bytes, cudaHostAllocMapped) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky-free error state of a failed allocation */
        free(g);
        return NULL;
    }
    if (cudaHostGetDevicePointer((void **)&g->dev, g->host, 0) != cudaSuccess) {
        cudaGetLastError();
        cudaFreeHost(g->host);
        free(g);
        return NULL;
    }
    g->refs = 1;
    return g;
}

static void segment_release(tier_segment *g) {
    if (g && --g->refs == 0) {
        cudaFreeHost(g->host);
        free(g);
    }
}

extern "C" int fathom_cuda_tier_session_create(fathom_cuda_tier *t, uint32_t *session) {
    FATHOM_CHECK_ARG(t != NULL && session != NULL, "tier_session_create: NULL argument");
    uint32_t s = 0;
    while (s < t->shape.max_sessions && t->sessions[s].live) s++;
    FATHOM_CHECK(s == t->shape.max_sessions, FATHOM_ERR_NOMEM,
                 "tier_session_create: all %u sessions are in use", t->shape.max_sessions);
    tier_session se;
    memset(&se, 0, sizeof se);
    se.segs = (tier_segment **)calloc(t->dev.max_segments ? t->dev.max_segments : 1, sizeof *se.segs);
    if (!se.segs) return fathom_fail(FATHOM_ERR_NOMEM, "tier_session_create: out of memory");
    if (cudaHostAlloc((void **)&se.sums, t->sums_bytes, cudaHostAllocMapped) != cudaSuccess ||
        cudaHostGetDevicePointer((void **)&se.sums_dev, se.sums, 0) != cudaSuccess) {
        cudaGetLastError();
        if (se.sums) cudaFreeHost(se.sums);
        free(se.segs);
        return fathom_fail(FATHOM_ERR_NOMEM, "tier_session_create: no pinned memory for %llu bytes of sums",
                           (unsigned long long)t->sums_bytes);
    }
    memset(se.sums, 0, t->sums_bytes);
    se.live = 1;
    t->sessions[s] = se;
    int st = publish(t, s);
    if (st == FATHOM_OK) st = set_lengths(t, s, 0);
    if (st == FATHOM_OK) st = set_center_states(t, s, 0);
    if (st < 0) {
        cudaFreeHost(se.sums);
        free(se.segs);
        memset(&t->sessions[s], 0, sizeof t->sessions[s]);
        return st;
    }
    *session = s;
    return FATHOM_OK;
}

extern "C" int fathom_cuda_tier_session_free(fathom_cuda_tier *t, uint32_t s) {
    FATHOM_TRY(check_session(t, s, "tier_session_free"));
    tier_session *se = &t->sessions[s];
    const uint32_t count = se->count;
    se->count = 0;
    double *sums = se->sums, *sums_dev = se->sums_dev;
    float *center = se->center, *center_dev = se->center_dev;
    se->sums_dev = NULL;
    se->center_dev = NULL;
    int st = publish(t, s); /* the device no longer sees its segments */
    if (st == FATHOM_OK) st = set_lengths(t, s, 0);
    if (st == FATHOM_OK) st = set_center_states(t, s, 0);
    if (st < 0) {
        se->count = count;
        se->sums_dev = sums_dev;
        se->center_dev = center_dev;
        publish(t, s);
        return st;
    }
    for (uint32_t i = 0; i < count; i++) segment_release(se->segs[i]);
    free(se->segs);
    cudaFreeHost(sums);
    if (center) cudaFreeHost(center);
    memset(se, 0, sizeof *se);
    return fc_tier_cache_drop(t, s);
}

extern "C" int fathom_cuda_tier_reserve(fathom_cuda_tier *t, uint32_t s, uint64_t tokens) {
    FATHOM_TRY(check_session(t, s, "tier_reserve"));
    FATHOM_CHECK_ARG(tokens <= t->shape.max_tokens, "tier_reserve: %llu tokens exceed max_tokens %llu",
                     (unsigned long long)tokens, (unsigned long long)t->shape.max_tokens);
    tier_session *se = &t->sessions[s];
    const uint32_t need = (uint32_t)((tokens + t->seg_tokens - 1) / t->seg_tokens);
    if (need <= se->count) return FATHOM_OK;
    const uint32_t first = se->count;
    for (uint32_t i = first; i < need; i++) {
        se->segs[i] = segment_new(t);
        if (!se->segs[i]) {
            for (uint32_t r = first; r < i; r++) segment_release(se->segs[r]);
            return fathom_fail(FATHOM_ERR_NOMEM,
                               "tier_reserve: no pinned host memory for segment %u (%llu bytes)", i,
                               (unsigned long long)t->seg_bytes);
        }
    }
    se->count = need;
    int st = publish(t, s);
    if (st < 0) {
        for (uint32_t r = first; r < need; r++) segment_release(se->segs[r]);
        se->count = first;
        publish(t, s);
    }
    return st;
}

extern "C" int fathom_cuda_tier_length(fathom_cuda_tier *t, uint32_t s, uint64_t *length) {
    FATHOM_TRY(check_session(t, s, "tier_length"));
    FATHOM_CHECK_ARG(length != NULL, "tier_length: length is NULL");
    const uint32_t L = t->shape.layers;
    uint32_t *v = (uint32_t *)malloc((size_t)L * 4);
    FATHOM_CHECK(v == NULL, FATHOM_ERR_NOMEM, "tier_length: out of memory");
    cudaError_t e = cudaMemcpy(v, t->d_len + (size_t)s * L, (size_t)L * 4, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        free(v);
        return fathom_fail(FATHOM_ERR_DEVICE, "tier_length: %s", cudaGetErrorName(e));
    }
    uint32_t l = 1;
    while (l < L && v[l] == v[0]) l++;
    const uint32_t n0 = v[0], nl = l < L ? v[l] : 0;
    free(v);
    FATHOM_CHECK(l < L, FATHOM_ERR_STATE, "tier_length: session %u: layer 0 has %u tokens, layer %u %u",
                 s, n0, l, nl);
    *length = n0;
    return FATHOM_OK;
}

/* Slice of (layer, head) in segment i of a session, host side. */
static uint8_t *host_slice(const fathom_cuda_tier *t, const tier_session *se, uint32_t i,
                           uint32_t layer, uint32_t head) {
    return se->segs[i]->host + ((uint64_t)layer * t->shape.kv_heads + head) * t->dev.head_bytes;
}

static const uint16_t *host_row(const fathom_cuda_tier *t, const tier_session *se, uint64_t token,
                                uint32_t layer, uint32_t head) {
    const uint8_t *sl = host_slice(t, se, (uint32_t)(token / t->seg_tokens), layer, head);
    return (const uint16_t *)(sl + t->dev.kv_off) + (token % t->seg_tokens) * 2 * t->shape.dim;
}

/* After a truncation to n: the open block re-encoded from its K rows and
 * the sums recomputed over rows [0, n), for every layer and head. */
static void rebuild(fathom_cuda_tier *t, tier_session *se, uint64_t n) {
    const uint32_t D = t->shape.dim, S = t->shape.segment_blocks;
    memset(se->sums, 0, t->sums_bytes);
    for (uint32_t l = 0; l < t->shape.layers; l++)
        for (uint32_t h = 0; h < t->shape.kv_heads; h++) {
            double *shift = se->sums + ((uint64_t)l * t->shape.kv_heads + h) * 3 * D;
            double *sum = shift + D, *sum_sq = shift + 2 * D;
            /* a centered session (n > 0: its center is taken or given) stores k - mu */
            const float *mu = se->center ? se->center + ((uint64_t)l * t->shape.kv_heads + h) * D : NULL;
            for (uint64_t i = 0; i < n; i++) {
                const uint16_t *row = host_row(t, se, i, l, h);
                for (uint32_t j = 0; j < D; j++) {
                    const float v = mu ? fathom_bf16_to_f32(row[j]) - mu[j] : fathom_bf16_to_f32(row[j]);
                    if (i == 0) shift[j] = v;
                    tier_sums_add(v, shift[j], &sum[j], &sum_sq[j]);
                }
            }
            if (n % FATHOM_BLOCK_TOKENS == 0) continue;
            const uint64_t block = n / FATHOM_BLOCK_TOKENS, first = block * FATHOM_BLOCK_TOKENS;
            uint8_t *sl = host_slice(t, se, (uint32_t)(block / S), l, h);
            uint64_t *planes = (uint64_t *)sl;
            uint16_t *scales = (uint16_t *)(sl + t->dev.scales_off);
            const uint64_t b = block % S;
            for (uint32_t j = 0; j < D; j++) {
                uint64_t w[FATHOM_PLANES];
                float vals[FATHOM_BLOCK_TOKENS];
                for (uint64_t i = first; i < n; i++) {
                    const float k = fathom_bf16_to_f32(host_row(t, se, i, l, h)[j]);
                    vals[i - first] = mu ? k - mu[j] : k;
                }
                const tier_values value = {vals};
                tier_encode_channel(value, (uint32_t)(n - first), w, &scales[(uint64_t)j * S + b]);
                for (int p = 0; p < FATHOM_PLANES; p++) planes[((uint64_t)j * FATHOM_PLANES + p) * S + b] = w[p];
            }
        }
}

extern "C" int fathom_cuda_tier_truncate(fathom_cuda_tier *t, uint32_t s, uint64_t n) {
    uint64_t length;
    FATHOM_TRY(fathom_cuda_tier_length(t, s, &length));
    FATHOM_CHECK_ARG(n <= length, "tier_truncate: %llu is beyond the %llu tokens of session %u",
                     (unsigned long long)n, (unsigned long long)length, s);
    tier_session *se = &t->sessions[s];
    const uint32_t keep = (uint32_t)((n + t->seg_tokens - 1) / t->seg_tokens);
    const uint32_t open = (uint32_t)(n / t->seg_tokens); /* the segment appends write next */
    /* emptied, a session centered on its first append's mean takes the next one's */
    const bool repend = n == 0 && se->center && !se->center_given && length > 0;
    if (repend) FATHOM_TRY(set_center_states(t, s, TIER_CENTER_PENDING));
    tier_segment *copy = NULL;
    if (n % t->seg_tokens != 0 && se->segs[open]->refs > 1) {
        copy = segment_new(t);
        if (copy == NULL) {
            if (repend) set_center_states(t, s, TIER_CENTER_TAKEN);
            return fathom_fail(FATHOM_ERR_NOMEM, "tier_truncate: no pinned host memory to copy shared segment %u",
                               open);
        }
        memcpy(copy->host, se->segs[open]->host, t->seg_bytes);
    }
    const uint32_t count = se->count;
    tier_segment *old_open = copy ? se->segs[open] : NULL;
    if (copy) se->segs[open] = copy;
    se->count = keep;
    int st = publish(t, s);
    if (st == FATHOM_OK) st = set_lengths(t, s, n);
    if (st < 0) { /* back to the old tables */
        if (copy) {
            se->segs[open] = old_open;
            segment_release(copy);
        }
        se->count = count;
        publish(t, s);
        set_lengths(t, s, length);
        if (repend) set_center_states(t, s, TIER_CENTER_TAKEN);
        return st;
    }
    if (old_open) segment_release(old_open);
    for (uint32_t i = keep; i < count; i++) segment_release(se->segs[i]);
    rebuild(t, se, n);
    return fc_tier_cache_truncate(t, s, n);
}

extern "C" int fathom_cuda_tier_fork(fathom_cuda_tier *t, uint32_t src, uint32_t *session) {
    uint64_t n;
    FATHOM_TRY(fathom_cuda_tier_length(t, src, &n));
    FATHOM_CHECK_ARG(session != NULL, "tier_fork: session is NULL");
    const uint32_t full = (uint32_t)(n / t->seg_tokens);
    tier_segment *copy = NULL;
    if (n % t->seg_tokens != 0) {
        copy = segment_new(t);
        FATHOM_CHECK(copy == NULL, FATHOM_ERR_NOMEM, "tier_fork: no pinned host memory for segment %u",
                     full);
        memcpy(copy->host, t->sessions[src].segs[full]->host, t->seg_bytes);
    }
    uint32_t s;
    int st = fathom_cuda_tier_session_create(t, &s);
    if (st < 0) {
        segment_release(copy);
        return st;
    }
    tier_session *a = &t->sessions[src], *b = &t->sessions[s];
    for (uint32_t i = 0; i < full; i++) {
        b->segs[i] = a->segs[i];
        b->segs[i]->refs++;
    }
    if (copy) b->segs[full] = copy;
    b->count = full + (copy != NULL);
    memcpy(b->sums, a->sums, t->sums_bytes);
    if (a->center) { /* the center, its mode and every layer's state */
        st = center_alloc(t, &b->center, &b->center_dev);
        if (st == FATHOM_OK) {
            memcpy(b->center, a->center, (size_t)t->shape.layers * t->shape.kv_heads * t->shape.dim * sizeof(float));
            b->center_given = a->center_given;
        }
    }
    if (st == FATHOM_OK) st = publish(t, s);
    if (st == FATHOM_OK) st = set_lengths(t, s, n);
    if (st == FATHOM_OK && a->center) {
        const cudaError_t e = cudaMemcpy(t->d_center_state + (size_t)s * t->shape.layers,
                                         t->d_center_state + (size_t)src * t->shape.layers,
                                         (size_t)t->shape.layers * 4, cudaMemcpyDeviceToDevice);
        if (e != cudaSuccess) st = fathom_fail(FATHOM_ERR_DEVICE, "tier_fork: copying center states: %s",
                                               cudaGetErrorName(e));
    }
    if (st < 0) {
        fathom_cuda_tier_session_free(t, s);
        return st;
    }
    *session = s;
    return FATHOM_OK;
}

extern "C" int fathom_cuda_tier_usage_of(fathom_cuda_tier *t, uint32_t s, fathom_cuda_tier_usage *u) {
    FATHOM_CHECK_ARG(u != NULL, "tier_usage: usage is NULL");
    uint64_t n;
    FATHOM_TRY(fathom_cuda_tier_length(t, s, &n));
    const tier_session *se = &t->sessions[s];
    memset(u, 0, sizeof *u);
    u->length = n;
    u->capacity = (uint64_t)se->count * t->seg_tokens;
    if (u->capacity > t->shape.max_tokens) u->capacity = t->shape.max_tokens;
    u->segments = se->count;
    u->bytes = u->exclusive_bytes =
        t->sums_bytes + (se->center ? (uint64_t)t->shape.layers * t->shape.kv_heads * t->shape.dim * 4 : 0);
    for (uint32_t i = 0; i < se->count; i++) {
        u->bytes += t->seg_bytes;
        if (se->segs[i]->refs > 1) u->shared_segments++;
        else u->exclusive_bytes += t->seg_bytes;
    }
    return FATHOM_OK;
}

extern "C" int fathom_cuda_tier_segment(const fathom_cuda_tier *t, uint32_t s, uint32_t layer,
                                        uint32_t head, uint32_t segment, fathom_cuda_tier_view *v) {
    FATHOM_TRY(check_session(t, s, "tier_segment"));
    FATHOM_CHECK_ARG(v != NULL, "tier_segment: view is NULL");
    FATHOM_CHECK_ARG(layer < t->shape.layers && head < t->shape.kv_heads,
                     "tier_segment: layer %u / head %u out of range", layer, head);
    const tier_session *se = &t->sessions[s];
    FATHOM_CHECK_ARG(segment < se->count, "tier_segment: segment %u >= %u reserved", segment, se->count);
    const uint8_t *sl = host_slice(t, se, segment, layer, head);
    v->planes = (const uint64_t *)sl;
    v->scales = (const uint16_t *)(sl + t->dev.scales_off);
    v->kv = (const uint16_t *)(sl + t->dev.kv_off);
    v->first_token = (uint64_t)segment * t->seg_tokens;
    v->segment_blocks = t->shape.segment_blocks;
    return FATHOM_OK;
}

extern "C" int fathom_cuda_tier_sums(const fathom_cuda_tier *t, uint32_t s, uint32_t layer,
                                     uint32_t head, const double **shift, const double **sum,
                                     const double **sum_sq) {
    FATHOM_TRY(check_session(t, s, "tier_sums"));
    FATHOM_CHECK_ARG(shift && sum && sum_sq, "tier_sums: NULL argument");
    FATHOM_CHECK_ARG(layer < t->shape.layers && head < t->shape.kv_heads,
                     "tier_sums: layer %u / head %u out of range", layer, head);
    const uint32_t D = t->shape.dim;
    const double *base = t->sessions[s].sums + ((uint64_t)layer * t->shape.kv_heads + head) * 3 * D;
    *shift = base;
    *sum = base + D;
    *sum_sq = base + 2 * D;
    return FATHOM_OK;
}

extern "C" int fathom_cuda_tier_check(fathom_cuda_tier *t) {
    FATHOM_CHECK_ARG(t != NULL, "tier_check: tier is NULL");
    FATHOM_CUDA_TRY(cudaDeviceSynchronize());
    uint32_t code = 0;
    FATHOM_CUDA_TRY(cudaMemcpy(&code, t->d_error, 4, cudaMemcpyDeviceToHost));
    FATHOM_CUDA_TRY(cudaMemset(t->d_error, 0, 4));
    static const char *const why[] = {
        "", "a batch named a session id >= max_sessions (skipped)",
        "an append went beyond a session's reserved capacity (fathom_cuda_tier_reserve) (skipped)",
        "an append count exceeded max_count (skipped)",
        "a session's length exceeded the step's capacity_tokens (skipped)",
        "a given selection (fathom_cuda_tier_step_given) held a position outside [sink, n - local) or out of "
        "ascending order (its heads attended over placeholder positions)",
        "an append to a centered session found no center taken (an append captured into a graph before the "
        "tier's first fathom_cuda_tier_set_center lacks the kernel that takes it) (skipped)"};
    FATHOM_CHECK(code != 0, FATHOM_ERR_STATE, "tier: %s", code < 7 ? why[code] : "unknown error");
    return FATHOM_OK;
}

extern "C" int fathom_cuda_tier_append(fathom_cuda_tier *t, uint32_t layer, const uint32_t *sessions,
                                       uint32_t batch, const uint32_t *counts, uint32_t max_count,
                                       const uint16_t *keys, const uint16_t *values,
                                       cudaStream_t stream) {
    FATHOM_CHECK_ARG(t != NULL, "tier_append: tier is NULL");
    FATHOM_CHECK_ARG(layer < t->shape.layers, "tier_append: layer %u >= %u", layer, t->shape.layers);
    FATHOM_CHECK_ARG(sessions && counts && keys && values, "tier_append: NULL argument");
    FATHOM_CHECK_ARG(batch >= 1 && (uint64_t)batch * t->shape.kv_heads <= 65535,
                     "tier_append: batch %u x kv_heads %u not in 1..65535", batch, t->shape.kv_heads);
    FATHOM_CHECK_ARG(max_count >= 1 && max_count <= (1u << 24), "tier_append: max_count %u not in 1..2^24",
                     max_count);
    return fc_tier_append(&t->dev, layer, sessions, batch, counts, max_count, keys, values, t->centering != 0,
                          stream);
}

extern "C" int fathom_cuda_tier_set_center(fathom_cuda_tier *t, uint32_t s, const float *center) {
    FATHOM_TRY(check_session(t, s, "tier_set_center"));
    const uint32_t L = t->shape.layers, H = t->shape.kv_heads, D = t->shape.dim;
    uint32_t *len = (uint32_t *)malloc((size_t)L * 4);
    FATHOM_CHECK(len == NULL, FATHOM_ERR_NOMEM, "tier_set_center: out of memory");
    const cudaError_t e = cudaMemcpy(len, t->d_len + (size_t)s * L, (size_t)L * 4, cudaMemcpyDeviceToHost);
    uint32_t l = 0;
    while (e == cudaSuccess && l < L && len[l] == 0) l++;
    const uint32_t held = l < L ? len[l] : 0;
    free(len);
    FATHOM_CHECK(e != cudaSuccess, FATHOM_ERR_DEVICE, "tier_set_center: reading lengths: %s", cudaGetErrorName(e));
    FATHOM_CHECK(l < L, FATHOM_ERR_STATE,
                 "tier_set_center: session %u already holds %u tokens at layer %u (a center is set before the "
                 "first append)", s, held, l);
    if (center)
        for (uint64_t i = 0; i < (uint64_t)L * H * D; i++)
            FATHOM_CHECK(!isfinite(center[i]), FATHOM_ERR_NONFINITE,
                         "tier_set_center: layer %llu head %llu channel %llu is not finite",
                         (unsigned long long)(i / ((uint64_t)H * D)), (unsigned long long)(i / D % H),
                         (unsigned long long)(i % D));
    tier_session *se = &t->sessions[s];
    const bool fresh = se->center == NULL;
    if (fresh) {
        FATHOM_TRY(center_alloc(t, &se->center, &se->center_dev));
        int st = publish(t, s);
        if (st < 0) {
            cudaFreeHost(se->center);
            se->center = se->center_dev = NULL;
            publish(t, s);
            return st;
        }
    }
    const uint32_t was = se->center_given ? TIER_CENTER_GIVEN : TIER_CENTER_PENDING;
    int st = set_center_states(t, s, center ? TIER_CENTER_GIVEN : TIER_CENTER_PENDING);
    if (st < 0) {
        if (fresh) {
            se->center_dev = NULL;
            publish(t, s);
            cudaFreeHost(se->center);
            se->center = NULL;
        }
        set_center_states(t, s, fresh ? 0 : was);
        return st;
    }
    if (center) memcpy(se->center, center, (size_t)L * H * D * sizeof(float));
    se->center_given = center != NULL;
    t->centering = 1;
    return FATHOM_OK;
}

extern "C" int fathom_cuda_tier_center(const fathom_cuda_tier *t, uint32_t s, uint32_t layer, uint32_t head,
                                       const float **center) {
    FATHOM_TRY(check_session(t, s, "tier_center"));
    FATHOM_CHECK_ARG(center != NULL, "tier_center: center is NULL");
    FATHOM_CHECK_ARG(layer < t->shape.layers && head < t->shape.kv_heads,
                     "tier_center: layer %u / head %u out of range", layer, head);
    *center = NULL;
    const tier_session *se = &t->sessions[s];
    if (!se->center) return FATHOM_OK;
    uint32_t state = 0;
    FATHOM_CUDA_TRY(cudaMemcpy(&state, t->d_center_state + (size_t)s * t->shape.layers + layer, 4,
                               cudaMemcpyDeviceToHost));
    if (state == TIER_CENTER_TAKEN || state == TIER_CENTER_GIVEN)
        *center = se->center + ((uint64_t)layer * t->shape.kv_heads + head) * t->shape.dim;
    return FATHOM_OK;
}

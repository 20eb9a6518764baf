/* The KV tier's HBM cache per session (fathom_cuda.h): allocation, the
 * plan window, the plane lines' choice and copy, and invalidation on
 * truncation. The step's kernels (tier_step.cu) read it; the row cache is
 * filled by the step, which also notes its plans (fc_tier_cache_note). */
#include "tier_internal.cuh"

#include <string.h>

void fc_tier_cache_release(tier_cache *c) {
    cudaFree(c->words);
    cudaFree(c->scales);
    cudaFree(c->map);
    cudaFree(c->line_of);
    cudaFree(c->valid);
    cudaFree(c->plans);
    cudaFree(c->noted);
    cudaFree(c->rows);
    cudaFree(c->tags);
    cudaFree(c->stamps);
    cudaFree(c->steps);
    cudaFree(c->ahead_dep);
    cudaFree(c->ahead_uni);
    cudaFree(c->ahead_cnt);
    cudaFree(c->ahead_nb);
    cudaFree(c->ahead_map);
    cudaFree(c->stage_words);
    cudaFree(c->stage_scales);
    cudaFree(c->stage_rows);
    cudaFree(c->stage_layer);
    memset(c, 0, sizeof *c);
}

static int publish_cache(fathom_cuda_tier *tier, uint32_t s, const tier_cache *c) {
    tier_cache *dev;
    fc_tier_caches(tier, &dev);
    FATHOM_CUDA_TRY(cudaMemcpy(dev + s, c, sizeof *c, cudaMemcpyHostToDevice));
    return FATHOM_OK;
}

int fc_tier_cache_drop(fathom_cuda_tier *tier, uint32_t s) {
    tier_cache *dev, *host = fc_tier_caches(tier, &dev);
    if (!host[s].map && !host[s].tags && !host[s].stage_layer) return FATHOM_OK;
    const tier_cache none = {};
    FATHOM_TRY(publish_cache(tier, s, &none));
    if (host[s].slots) --*(host[s].ways > 1 ? fc_tier_set_caches(tier) : fc_tier_row_caches(tier));
    if (host[s].window) --*fc_tier_plan_windows(tier);
    if (host[s].stage_layer) --*fc_tier_ahead_sessions(tier);
    fc_tier_cache_release(&host[s]);
    return FATHOM_OK;
}

extern "C" int fathom_cuda_tier_cache_set(fathom_cuda_tier *tier, uint32_t s,
                                          const fathom_cuda_tier_cache_config *cfg) {
    FATHOM_CHECK_ARG(fc_tier_live(tier, s), "tier_cache_set: no session %u", s);
    FATHOM_CHECK_ARG(cfg != NULL, "tier_cache_set: config is NULL");
    const tier_dev *t = fc_tier_dev(tier);
    const uint64_t LH = (uint64_t)t->layers * t->heads, D = t->dim;
    FATHOM_CHECK_ARG(LH <= 65535, "tier_cache_set: layers x kv_heads %llu above 65535",
                     (unsigned long long)LH);
    FATHOM_CHECK_ARG((cfg->plane_bytes == 0 && cfg->ahead_lines == 0) ||
                         (cfg->tokens >= 1 && cfg->tokens <= 0xffffffffull - 64),
                     "tier_cache_set: tokens %llu not in 1..2^32-65", (unsigned long long)cfg->tokens);
    FATHOM_CHECK_ARG(cfg->ahead_lines <= FATHOM_PLANES * D, "tier_cache_set: ahead_lines %u above 4 x dim",
                     cfg->ahead_lines);
    FATHOM_CHECK_ARG(cfg->ahead_rows <= 4096, "tier_cache_set: ahead_rows %u above 4096 (a step's union)",
                     cfg->ahead_rows);
    FATHOM_CHECK_ARG(cfg->window <= FATHOM_CUDA_TIER_CACHE_MAX_WINDOW, "tier_cache_set: window %u above %d",
                     cfg->window, FATHOM_CUDA_TIER_CACHE_MAX_WINDOW);
    tier_cache c;
    memset(&c, 0, sizeof c);
    if (cfg->plane_bytes) {
        c.blocks = (uint32_t)((cfg->tokens + 63) / 64);
        const uint64_t lines = cfg->plane_bytes / LH / 10 / c.blocks;
        FATHOM_CHECK_ARG(lines >= 1, "tier_cache_set: plane_bytes %llu hold no line of %llu bytes per "
                         "(layer, head)", (unsigned long long)cfg->plane_bytes,
                         (unsigned long long)(10ull * c.blocks));
        c.lines = (uint32_t)(lines < FATHOM_PLANES * D ? lines : FATHOM_PLANES * D);
        c.window = cfg->window;
    }
    const uint32_t ways = cfg->row_ways ? cfg->row_ways : 1;
    FATHOM_CHECK_ARG(ways == 1 || ways == 2 || ways == 4 || ways == 8, "tier_cache_set: row_ways %u not 0, 1, "
                     "2, 4 or 8", cfg->row_ways);
    if (cfg->row_bytes) {
        /* bytes of a set: its rows and tags, and with ways > 1 a stamp per way */
        const uint64_t set_bytes = ways * (4 * D + (ways > 1 ? 8 : 4));
        const uint64_t slots = cfg->row_bytes / LH / set_bytes * ways;
        FATHOM_CHECK_ARG(slots >= 1, "tier_cache_set: row_bytes %llu hold no set of %u rows (%llu bytes) per "
                         "(layer, head)", (unsigned long long)cfg->row_bytes, ways, (unsigned long long)set_bytes);
        FATHOM_CHECK_ARG(slots <= 0xffffffffull, "tier_cache_set: row_bytes %llu: too many slots",
                         (unsigned long long)cfg->row_bytes);
        c.slots = (uint32_t)slots;
        c.ways = ways;
    }
    if (cfg->ahead_lines) c.blocks = (uint32_t)((cfg->tokens + 63) / 64);
    c.ahead_lines = cfg->ahead_lines;
    c.ahead_chans = cfg->ahead_lines < D ? cfg->ahead_lines : (uint32_t)D;
    c.ahead_rows = cfg->ahead_rows;
    FATHOM_CUDA_TRY(cudaDeviceSynchronize()); /* no step in flight reads the old cache */
    cudaError_t e = cudaSuccess;
    const uint64_t words = LH * c.lines * c.blocks;
    if (c.lines) {
        e = cudaMalloc((void **)&c.words, words * 8);
        if (e == cudaSuccess) e = cudaMalloc((void **)&c.scales, words * 2);
        if (e == cudaSuccess) e = cudaMalloc((void **)&c.map, LH * D * FATHOM_PLANES * 2);
        if (e == cudaSuccess) e = cudaMalloc((void **)&c.line_of, LH * c.lines * 4);
        if (e == cudaSuccess) e = cudaMalloc((void **)&c.valid, (size_t)t->layers * 4);
        if (e == cudaSuccess) e = cudaMemset(c.map, 0xff, LH * D * FATHOM_PLANES * 2); /* -1: none */
        if (e == cudaSuccess) e = cudaMemset(c.valid, 0, (size_t)t->layers * 4);
    }
    if (c.window && e == cudaSuccess) { /* an empty window: depths 0 count no line */
        e = cudaMalloc((void **)&c.plans, c.window * LH * D);
        if (e == cudaSuccess) e = cudaMalloc((void **)&c.noted, LH * 4);
        if (e == cudaSuccess) e = cudaMemset(c.plans, 0, c.window * LH * D);
        if (e == cudaSuccess) e = cudaMemset(c.noted, 0, LH * 4);
    }
    if (c.slots && e == cudaSuccess) {
        e = cudaMalloc((void **)&c.rows, LH * c.slots * 4 * D);
        if (e == cudaSuccess) e = cudaMalloc((void **)&c.tags, LH * c.slots * 4);
        if (e == cudaSuccess) e = cudaMemset(c.tags, 0, LH * c.slots * 4);
        if (c.ways > 1) {
            if (e == cudaSuccess) e = cudaMalloc((void **)&c.stamps, LH * c.slots * 4);
            if (e == cudaSuccess) e = cudaMalloc((void **)&c.steps, LH * 4);
            if (e == cudaSuccess) e = cudaMemset(c.stamps, 0, LH * c.slots * 4);
            if (e == cudaSuccess) e = cudaMemset(c.steps, 0, LH * 4);
        }
    }
    if ((c.ahead_lines || c.ahead_rows) && e == cudaSuccess) {
        const uint64_t H = t->heads, half_words = H * c.ahead_lines * c.blocks;
        const uint64_t half_scales = H * c.ahead_chans * c.blocks, half_rows = H * c.ahead_rows * 2 * D;
        e = cudaMalloc((void **)&c.ahead_dep, LH * D);
        if (e == cudaSuccess) e = cudaMemset(c.ahead_dep, 0, LH * D);
        if (e == cudaSuccess) e = cudaMalloc((void **)&c.ahead_cnt, LH * 4);
        if (e == cudaSuccess) e = cudaMemset(c.ahead_cnt, 0, LH * 4);
        if (e == cudaSuccess) e = cudaMalloc((void **)&c.ahead_nb, LH * 4);
        if (e == cudaSuccess) e = cudaMemset(c.ahead_nb, 0, LH * 4);
        if (e == cudaSuccess) e = cudaMalloc((void **)&c.ahead_map, H * TIER_AHEAD_MAP(D) * 2);
        if (e == cudaSuccess && c.ahead_rows) e = cudaMalloc((void **)&c.ahead_uni, LH * c.ahead_rows * 4);
        if (e == cudaSuccess && half_words) e = cudaMalloc((void **)&c.stage_words, 2 * half_words * 8);
        if (e == cudaSuccess && half_scales) e = cudaMalloc((void **)&c.stage_scales, 2 * half_scales * 2);
        if (e == cudaSuccess && half_rows) e = cudaMalloc((void **)&c.stage_rows, 2 * half_rows * 2);
        if (e == cudaSuccess) e = cudaMalloc((void **)&c.stage_layer, 20);
        if (e == cudaSuccess) e = cudaMemset(c.stage_layer, 0xff, 20); /* -1: empty */
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        fc_tier_cache_release(&c);
        return fathom_fail(e == cudaErrorMemoryAllocation ? FATHOM_ERR_NOMEM : FATHOM_ERR_DEVICE,
                           "tier_cache_set: %llu plane and %llu row bytes of device memory: %s",
                           (unsigned long long)cfg->plane_bytes, (unsigned long long)cfg->row_bytes,
                           cudaGetErrorName(e));
    }
    int st = fc_tier_cache_drop(tier, s);
    tier_cache *dev, *host = fc_tier_caches(tier, &dev);
    if (st == FATHOM_OK) st = publish_cache(tier, s, &c);
    if (st < 0) {
        fc_tier_cache_release(&c);
        return st;
    }
    host[s] = c;
    if (c.slots) ++*(c.ways > 1 ? fc_tier_set_caches(tier) : fc_tier_row_caches(tier));
    if (c.window) ++*fc_tier_plan_windows(tier);
    if (c.stage_layer) ++*fc_tier_ahead_sessions(tier);
    return FATHOM_OK;
}

extern "C" int fathom_cuda_tier_cache_bytes(const fathom_cuda_tier *tier, uint32_t s, uint64_t *bytes) {
    FATHOM_CHECK_ARG(fc_tier_live(tier, s) && bytes != NULL, "tier_cache_bytes: no session %u or NULL", s);
    tier_cache *dev;
    const tier_cache *c = fc_tier_caches((fathom_cuda_tier *)tier, &dev) + s;
    const tier_dev *t = fc_tier_dev(tier);
    const uint64_t LH = (uint64_t)t->layers * t->heads;
    *bytes = 0;
    if (c->lines) *bytes += LH * c->lines * c->blocks * 10 + LH * t->dim * FATHOM_PLANES * 2 + LH * c->lines * 4 + t->layers * 4;
    if (c->window) *bytes += (uint64_t)c->window * LH * t->dim + LH * 4;
    if (c->slots) *bytes += LH * c->slots * (4ull * t->dim + 4);
    if (c->ways > 1) *bytes += LH * (c->slots * 4ull + 4); /* stamps and the step count */
    if (c->stage_layer) /* the last plans and unions, the layouts, and the staging's two halves */
        *bytes += LH * (t->dim + 8ull + 4ull * c->ahead_rows) + 20 + 2ull * t->heads * TIER_AHEAD_MAP(t->dim) +
                  2ull * t->heads * (8ull * c->ahead_lines * c->blocks + 2ull * c->ahead_chans * c->blocks +
                                     4ull * t->dim * c->ahead_rows);
    return FATHOM_OK;
}

/* One CTA of 4*D threads per (layer, head): thread i is line (j, p) =
 * (i / 4, i % 4), counted by the plans that read it (p < depth_j): those of
 * the window (window > 0), else the depths argument's plan (NULL: none).
 * The ranking: counted lines first, by count descending; then the spare
 * lines (uncounted, of a channel with variance > 0); within equal counts,
 * key var_j / 4^p descending, ties to the lower i. A line's rank is its slot
 * if below `lines`. */
template <int D>
static __global__ void __launch_bounds__(D * FATHOM_PLANES)
cache_choose_kernel(tier_dev t, uint32_t s, tier_cache c, const uint8_t *depths) {
    __shared__ double key[D * FATHOM_PLANES];
    __shared__ uint16_t score[D * FATHOM_PLANES]; /* count + 1 if counted, 1 spare, 0 never kept */
    const uint32_t lh = blockIdx.x, layer = lh / t.heads, h = lh % t.heads, i = threadIdx.x;
    const uint32_t j = i / FATHOM_PLANES, p = i % FATHOM_PLANES;
    const uint32_t n = t.len[(size_t)s * t.layers + layer];
    float var = 0.0f;
    if (n > 0) { /* fathom_store_variance, as the step's plan */
        const double *base = t.sums[s] + (size_t)lh * 3 * D;
        var = tier_variance(__ldcv(&base[D + j]), __ldcv(&base[2 * D + j]), n);
    }
    uint32_t count = 0;
    if (c.window) {
        const size_t LH = (size_t)t.layers * t.heads;
        for (uint32_t w = 0; w < c.window; w++) count += p < c.plans[(w * LH + lh) * D + j];
    } else if (depths) {
        count = p < depths[(size_t)lh * D + j];
    }
    const uint16_t mine_score = count ? (uint16_t)(count + 1) : var > 0.0f ? 1 : 0;
    const double mine = (double)var / (double)(1u << (2 * p));
    key[i] = mine;
    score[i] = mine_score;
    __syncthreads();
    uint32_t rank = 0;
    for (uint32_t x = 0; x < D * FATHOM_PLANES; x++)
        rank += score[x] > mine_score || (score[x] == mine_score && (key[x] > mine || (key[x] == mine && x < i)));
    const bool kept = mine_score > 0 && rank < c.lines;
    c.map[(size_t)lh * D * FATHOM_PLANES + i] = kept ? (int16_t)rank : (int16_t)-1;
    if (rank < c.lines) c.line_of[(size_t)lh * c.lines + rank] = kept ? i : 0xffffffffu;
    if (i == 0 && h == 0) c.valid[layer] = min(n / FATHOM_BLOCK_TOKENS, c.blocks);
}

/* Copy the closed blocks of every kept line (and the scales of its channel)
 * from the host segments: grid (block chunks of 256, lines, layers*heads). */
static __global__ void cache_copy_kernel(tier_dev t, uint32_t s, tier_cache c) {
    const uint32_t lh = blockIdx.z, layer = lh / t.heads, h = lh % t.heads, slot = blockIdx.y;
    const uint32_t b = blockIdx.x * blockDim.x + threadIdx.x;
    const uint32_t line = c.line_of[(size_t)lh * c.lines + slot];
    const uint32_t n = t.len[(size_t)s * t.layers + layer];
    const uint32_t closed = min(n / FATHOM_BLOCK_TOKENS, c.blocks);
    if (line == 0xffffffffu || b >= closed) return;
    const uint32_t S = t.segment_blocks, j = line / FATHOM_PLANES, p = line % FATHOM_PLANES;
    const uint8_t *slice = tier_slice(t, s, b / S, layer, h);
    const size_t at = ((size_t)lh * c.lines + slot) * c.blocks + b;
    c.words[at] = __ldcv((const unsigned long long *)slice + ((size_t)j * FATHOM_PLANES + p) * S + b % S);
    if (p == 0) c.scales[at] = __ldcv((const unsigned short *)(slice + t.scales_off) + (size_t)j * S + b % S);
}

extern "C" int fathom_cuda_tier_cache_fill(fathom_cuda_tier *tier, uint32_t s, const uint8_t *depths,
                                           cudaStream_t stream) {
    FATHOM_CHECK_ARG(fc_tier_live(tier, s), "tier_cache_fill: no session %u", s);
    tier_cache *dev;
    const tier_cache c = fc_tier_caches(tier, &dev)[s];
    FATHOM_CHECK_ARG(!c.window || !depths, "tier_cache_fill: session %u ranks by its plan window: depths must "
                     "be NULL", s);
    if (c.stage_layer) { /* the staging skipped the lines the old map kept */
        FATHOM_TRY(fc_tier_ahead_join(tier, stream));
        FATHOM_CUDA_TRY(cudaMemsetAsync(c.stage_layer, 0xff, 8, stream));
    }
    if (!c.lines) return FATHOM_OK;
    const tier_dev *t = fc_tier_dev(tier);
    const uint32_t LH = t->layers * t->heads;
    switch (t->dim) {
    case 64: cache_choose_kernel<64><<<LH, 64 * FATHOM_PLANES, 0, stream>>>(*t, s, c, depths); break;
    case 128: cache_choose_kernel<128><<<LH, 128 * FATHOM_PLANES, 0, stream>>>(*t, s, c, depths); break;
    default: cache_choose_kernel<256><<<LH, 256 * FATHOM_PLANES, 0, stream>>>(*t, s, c, depths); break;
    }
    FATHOM_CUDA_LAUNCHED();
    cache_copy_kernel<<<dim3((c.blocks + 255) / 256, c.lines, LH), 256, 0, stream>>>(*t, s, c);
    FATHOM_CUDA_LAUNCHED();
    return FATHOM_OK;
}

/* One CTA of dim threads per pair p of the step's batch: its depths go to
 * slot noted % window of its session's window, then noted grows (the pair
 * owns its (session, layer, head)). */
static __global__ void cache_note_kernel(tier_dev t, uint32_t layer, const uint32_t *sessions,
                                         const uint8_t *depths) {
    const uint32_t p = blockIdx.x, s = sessions[p / t.heads], j = threadIdx.x;
    if (s >= t.max_sessions) return; /* the step records the error */
    const tier_cache c = t.caches[s];
    if (!c.window) return;
    const size_t LH = (size_t)t.layers * t.heads, lh = (size_t)layer * t.heads + p % t.heads;
    const uint32_t noted = c.noted[lh];
    c.plans[((noted % c.window) * LH + lh) * t.dim + j] = depths[(size_t)p * t.dim + j];
    __syncthreads(); /* every thread has read noted */
    if (j == 0) c.noted[lh] = noted + 1;
}

int fc_tier_cache_note(fathom_cuda_tier *tier, uint32_t layer, const uint32_t *sessions, uint32_t batch,
                       const uint8_t *depths, cudaStream_t stream) {
    const tier_dev *t = fc_tier_dev(tier);
    cache_note_kernel<<<batch * t->heads, t->dim, 0, stream>>>(*t, layer, sessions, depths);
    FATHOM_CUDA_LAUNCHED();
    return FATHOM_OK;
}

/* After a truncation to n tokens: valid blocks <= floor(n / 64), row tags
 * of tokens >= n emptied, the read-ahead's staging and last unions
 * forgotten. */
static __global__ void cache_truncate_kernel(tier_cache c, uint32_t layers, uint64_t tags, uint32_t n,
                                             uint32_t LH) {
    const uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c.valid && i < layers) c.valid[i] = min(c.valid[i], n / FATHOM_BLOCK_TOKENS);
    if (c.stage_layer && i < 2) c.stage_layer[i] = -1;
    if (c.ahead_cnt && i < LH) c.ahead_cnt[i] = 0, c.ahead_nb[i] = 0;
    for (uint64_t x = i; x < tags; x += (uint64_t)gridDim.x * blockDim.x)
        if (c.tags[x] > n) c.tags[x] = 0;
}

int fc_tier_cache_truncate(fathom_cuda_tier *tier, uint32_t s, uint64_t n) {
    tier_cache *dev;
    const tier_cache c = fc_tier_caches(tier, &dev)[s];
    if (!c.lines && !c.slots && !c.stage_layer) return FATHOM_OK;
    const tier_dev *t = fc_tier_dev(tier);
    const uint64_t tags = c.slots ? (uint64_t)t->layers * t->heads * c.slots : 0;
    cache_truncate_kernel<<<1024, 256>>>(c, t->layers, tags, (uint32_t)n, t->layers * t->heads);
    FATHOM_CUDA_LAUNCHED();
    FATHOM_CUDA_TRY(cudaDeviceSynchronize());
    return FATHOM_OK;
}

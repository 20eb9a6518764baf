/* The public entry points: validation, workspace layout, the step. */
#include "cuda_internal.cuh"

#include <string.h>

size_t fc_cub_temp_bytes(uint32_t runs);

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
    int scan_v, transport_v, key_rows_v;
    memcpy(&scan_v, &c->scan, sizeof scan_v);
    memcpy(&transport_v, &c->transport, sizeof transport_v);
    memcpy(&key_rows_v, &c->key_rows, sizeof key_rows_v);
    FATHOM_CHECK_ARG(scan_v >= FATHOM_CUDA_SCAN_WATER_FILL && scan_v <= FATHOM_CUDA_SCAN_NIBBLE4,
                     "unknown scan kind %d", scan_v);
    FATHOM_CHECK_ARG(transport_v >= FATHOM_CUDA_GATHER_KERNEL && transport_v <= FATHOM_CUDA_RESIDENT,
                     "unknown transport %d", transport_v);
    FATHOM_CHECK_ARG(key_rows_v == FATHOM_CUDA_KEYS_BF16 || key_rows_v == FATHOM_CUDA_KEYS_PLANES,
                     "unknown key rows %d", key_rows_v);
    if (c->scan == FATHOM_CUDA_SCAN_WATER_FILL)
        FATHOM_CHECK_ARG(c->param >= 1 && c->param <= FATHOM_PLANES * FC_DIM,
                         "water-fill budget %u not in 1..%d", c->param, FATHOM_PLANES * FC_DIM);
    if (c->scan == FATHOM_CUDA_SCAN_TOP_CHANNELS)
        FATHOM_CHECK_ARG(c->param >= 1 && c->param <= FC_DIM, "top-channels r %u not in 1..%d",
                         c->param, FC_DIM);
    FATHOM_CHECK_ARG(!(c->transport == FATHOM_CUDA_GATHER_CUB &&
                       (c->scan == FATHOM_CUDA_SCAN_LANDMARK || c->scan == FATHOM_CUDA_SCAN_ORACLE)),
                     "the CUB transport serves plane scans only");
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
    const bool staged = cfg->transport != FATHOM_CUDA_RESIDENT;
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
    const bool cub = cfg->transport == FATHOM_CUDA_GATHER_CUB;
    const uint64_t runs = P * FC_DIM * 2;
    memset(ws, 0, sizeof *ws);
    size_t off = 0;
    ws->stage_words = words;
    FATHOM_TRY(carve(base, &off, P * FC_DIM, 1, (void **)&ws->depths));
    FATHOM_TRY(carve(base, &off, P * words, 8, (void **)&ws->stage));
    FATHOM_TRY(carve(base, &off, (staged && !dense) ? P * FC_DIM * nb : 0, 2,
                     (void **)&ws->stage_scales));
    FATHOM_TRY(carve(base, &off, cub ? runs : 0, sizeof(void *), (void **)&ws->run_src));
    FATHOM_TRY(carve(base, &off, cub ? runs : 0, sizeof(void *), (void **)&ws->run_dst));
    FATHOM_TRY(carve(base, &off, cub ? runs : 0, sizeof(size_t), (void **)&ws->run_size));
    ws->cub_temp_bytes = 0;
    if (cub) {
        FATHOM_CHECK(runs > 0xffffffffu, FATHOM_ERR_INVALID_ARG, "too many runs for CUB");
        ws->cub_temp_bytes = fc_cub_temp_bytes((uint32_t)runs);
        FATHOM_CHECK(ws->cub_temp_bytes == 0, FATHOM_ERR_DEVICE, "cub::DeviceMemcpy::Batched size query failed");
    }
    FATHOM_TRY(carve(base, &off, ws->cub_temp_bytes, 1, &ws->cub_temp));
    FATHOM_TRY(carve(base, &off, rows * n, 4, (void **)&ws->scores));
    FATHOM_TRY(carve(base, &off, rows * FC_HIST_BINS, 4, (void **)&ws->hist));
    FATHOM_TRY(carve(base, &off, rows, sizeof(fc_select_state), (void **)&ws->state));
    FATHOM_TRY(carve(base, &off, rows * k, 4, (void **)&ws->mid));
    FATHOM_TRY(carve(base, &off, rows * FC_CAND_CAP, 8, (void **)&ws->cand));
    FATHOM_TRY(carve(base, &off, rows, 4, (void **)&ws->cand_fill));
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
    fc_workspace ws;
    FATHOM_TRY(fc_workspace_layout(config, NULL, &ws));
    FATHOM_CHECK_ARG(args->workspace_bytes >= ws.total, "workspace of %zu bytes, need %zu",
                     args->workspace_bytes, ws.total);
    FATHOM_TRY(fc_workspace_layout(config, args->workspace, &ws));
    float *scores = args->scores ? args->scores : ws.scores;
    uint32_t *sel = args->selected ? args->selected : ws.sel;
    uint32_t *sel_count = args->selected_count ? args->selected_count : ws.sel_count;
    const bool planes = fc_uses_depths(config->scan);

    FATHOM_TRY(mark(args, 0, stream));
    if (planes)
        FATHOM_TRY(fc_plan(config, args->queries, args->variance, args->fixed_depths, ws.depths,
                           stream));
    FATHOM_TRY(mark(args, 1, stream));
    FATHOM_TRY(fc_gather(config, args->problems, &ws, stream));
    FATHOM_TRY(mark(args, 2, stream));
    FATHOM_TRY(fc_scan(config, args->problems, &ws, args->queries, scores, stream));
    FATHOM_TRY(mark(args, 3, stream));
    FATHOM_TRY(fc_topk(config, &ws, scores, sel, sel_count, stream));
    FATHOM_TRY(mark(args, 4, stream));
    FATHOM_TRY(fc_fetch(config, args->problems, &ws, stream));
    FATHOM_TRY(mark(args, 5, stream));
    FATHOM_TRY(fc_attend(config, &ws, args->queries, sel_count, args->out, stream));
    FATHOM_TRY(mark(args, 6, stream));
    if (args->depths && planes)
        FATHOM_CUDA_TRY(cudaMemcpyAsync(args->depths, ws.depths, (size_t)config->problems * FC_DIM,
                                        cudaMemcpyDeviceToDevice, stream));
    if (args->union_count)
        FATHOM_CUDA_TRY(cudaMemcpyAsync(args->union_count, ws.uni_count,
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

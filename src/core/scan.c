/* scan (§3.3) — scores of every token from the first t_j planes of each
 * channel.
 *
 * fathom_store_scan_reference is the definition, written to be read: token
 * by token, channel by channel, in double. The fast kernels below (portable,
 * here; AVX2 and AVX-512 in scan_x86.c) compute the same scores in float and
 * are picked at run time through cpu.h. */
#include "internal.h"
#include "pool.h"
#include "scan_internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------- *
 * scan (§3.3): scores of every token from the first t_j planes
 * ---------------------------------------------------------------------- */

/* The index a tiled scan reads: a store, or caller-provided segments. */
typedef struct scan_source {
    const fathom_store *store; /* NULL: segs */
    const fathom_segments *segs;
    uint32_t dim, S;
    uint64_t length;
} scan_source;

static scan_source source_of_store(const fathom_store *st) {
    scan_source src = {st, NULL, 0, 0, 0};
    if (st) {
        src.dim = fathom_store_dim(st);
        src.S = fathom_store_segment_blocks(st);
        src.length = fathom_store_length(st);
    }
    return src;
}

static int source_segment(const scan_source *src, uint32_t seg, fathom_segment_view *view) {
    if (src->store) return fathom_store_segment(src->store, seg, view);
    *view = src->segs->views[seg];
    FATHOM_CHECK_ARG(view->planes && view->scales,
                     "segments_scan_range: views[%u] has NULL planes or scales", seg);
    return FATHOM_OK;
}

int fathom_segments_check(const fathom_segments *segments, const char *who) {
    FATHOM_CHECK_ARG(segments && segments->views, "%s: segments or segments->views is NULL", who);
    FATHOM_CHECK_ARG(segments->dim > 0, "%s: segments->dim is 0", who);
    FATHOM_CHECK_ARG(segments->segment_blocks > 0, "%s: segments->segment_blocks is 0", who);
    const uint64_t seg_tokens = (uint64_t)segments->segment_blocks * FATHOM_BLOCK_TOKENS;
    FATHOM_CHECK_ARG(segments->length / seg_tokens < UINT32_MAX,
                     "%s: segments->length %llu needs more than 2^32 - 1 segments of %u blocks", who,
                     (unsigned long long)segments->length, segments->segment_blocks);
    return FATHOM_OK;
}

static int check_source_args(const scan_source *src, const uint8_t *depths, const float *queries,
                             uint32_t group, uint64_t n, const float *scores,
                             uint64_t *bytes_read_out, const char *who) {
    FATHOM_CHECK_ARG((src->store || src->segs) && depths && queries && scores,
                     "%s: NULL store, depths, queries or scores", who);
    FATHOM_CHECK_ARG(group > 0, "%s: group is 0", who);
    FATHOM_CHECK_ARG(n > 0 && n <= src->length, "%s: n = %llu not in 1..length %llu", who,
                     (unsigned long long)n, (unsigned long long)src->length);
    uint64_t total;
    FATHOM_CHECK(!fathom_mul_u64(group, n, &total) || total > SIZE_MAX / sizeof(float),
                 FATHOM_ERR_NOMEM, "%s: group * n overflows", who);
    FATHOM_TRY(fathom_depths_check(src->dim, depths, who));
    /* bytes: sum over active channels of ceil(n/64) * (8 t_j + 2) */
    uint64_t per_block = 0;
    for (uint32_t j = 0; j < src->dim; j++)
        if (depths[j]) per_block += 8u * depths[j] + 2u;
    FATHOM_CHECK(!fathom_mul_u64(fathom_blocks_for(n), per_block, bytes_read_out), FATHOM_ERR_NOMEM,
                 "%s: byte count overflows", who);
    return FATHOM_OK;
}

int fathom_store_scan_check(const fathom_store *st, const uint8_t *depths, const float *queries,
                            uint32_t group, uint64_t n, const float *scores,
                            uint64_t *bytes_read_out) {
    const scan_source src = source_of_store(st);
    return check_source_args(&src, depths, queries, group, n, scores, bytes_read_out, "store_scan");
}

int fathom_store_scan_reference(const fathom_store *st, const uint8_t *depths, const float *queries,
                                uint32_t group, uint64_t n, float *scores, uint64_t *bytes_read) {
    uint64_t bytes;
    FATHOM_TRY(fathom_store_scan_check(st, depths, queries, group, n, scores, &bytes));
    const uint32_t dim = fathom_store_dim(st);
    for (uint32_t h = 0; h < group; h++) {
        const float *q = queries + (uint64_t)h * dim;
        for (uint64_t i = 0; i < n; i++) {
            double acc = 0.0;
            for (uint32_t j = 0; j < dim; j++)
                if (depths[j]) acc += (double)q[j] * fathom_store_token_value(st, i, j, depths[j]);
            scores[(uint64_t)h * n + i] = (float)acc;
        }
    }
    if (bytes_read) *bytes_read = bytes;
    return FATHOM_OK;
}

#define EXPAND_ROW(x)                                                                              \
    {                                                                                              \
        (float)((x)&1), (float)(((x) >> 1) & 1), (float)(((x) >> 2) & 1), (float)(((x) >> 3) & 1), \
            (float)(((x) >> 4) & 1), (float)(((x) >> 5) & 1), (float)(((x) >> 6) & 1),             \
            (float)(((x) >> 7) & 1)                                                                \
    }
#define EXPAND_4(x) EXPAND_ROW(x), EXPAND_ROW((x) + 1), EXPAND_ROW((x) + 2), EXPAND_ROW((x) + 3)
#define EXPAND_16(x) EXPAND_4(x), EXPAND_4((x) + 4), EXPAND_4((x) + 8), EXPAND_4((x) + 12)
#define EXPAND_64(x) EXPAND_16(x), EXPAND_16((x) + 16), EXPAND_16((x) + 32), EXPAND_16((x) + 48)

const float fathom_bit_expand[256][8]
    __attribute__((aligned(32))) = {EXPAND_64(0), EXPAND_64(64), EXPAND_64(128), EXPAND_64(192)};

/* ---- portable: GNU C vectors of 4 floats (SSE2, NEON, or scalar code) ----
 * 8 tokens x up to 4 heads of accumulators per pass over the channels. */

typedef float scan_v4 __attribute__((vector_size(16)));

SCAN_INLINE scan_v4 v4_load(const float *p) {
    scan_v4 v;
    memcpy(&v, p, sizeof v);
    return v;
}

SCAN_INLINE scan_v4 v4_splat(float x) { return (scan_v4){x, x, x, x}; }

SCAN_INLINE void portable_channels(const scan_job *job, const scan_tile *tile, uint32_t b,
                                   const uint32_t T, uint32_t h0, const uint32_t HC, uint32_t octet,
                                   scan_v4 acc[4][2]) {
    uint32_t r = job->row[T];
    for (uint32_t k = job->first[T - 1]; k < job->first[T]; k++, r += T) {
        const float *coef = tile->coef[k][b];
        scan_v4 v0 = v4_splat(coef[0]), v1 = v0;
        for (uint32_t p = 0; p < T; p++) {
            const float *e = bit_expand[(tile->words[r + p][b] >> (8 * octet)) & 0xffu];
            scan_v4 wp = v4_splat(coef[1 + p]);
            v0 += v4_load(e) * wp;
            v1 += v4_load(e + 4) * wp;
        }
        const float *q = job->queries + (uint64_t)h0 * job->dim + job->channels[k];
        for (uint32_t h = 0; h < HC; h++) {
            scan_v4 qh = v4_splat(q[(uint64_t)h * job->dim]);
            acc[h][0] += qh * v0;
            acc[h][1] += qh * v1;
        }
    }
}

SCAN_INLINE void portable_octet(const scan_job *job, const scan_tile *tile, uint32_t b, uint32_t h0,
                                const uint32_t HC, uint32_t octet, float *out) {
    scan_v4 acc[4][2];
    for (uint32_t h = 0; h < HC; h++) acc[h][0] = acc[h][1] = v4_splat(0.0f);
#define PORTABLE_DEPTH(T) portable_channels(job, tile, b, T, h0, HC, octet, acc)
    SCAN_FOR_EACH_DEPTH(PORTABLE_DEPTH);
#undef PORTABLE_DEPTH
    for (uint32_t h = 0; h < HC; h++) {
        memcpy(out + h * 8, &acc[h][0], sizeof acc[h][0]);
        memcpy(out + h * 8 + 4, &acc[h][1], sizeof acc[h][1]);
    }
}

static void portable_block(const scan_job *job, const scan_tile *tile, uint32_t b, uint32_t h0,
                           uint32_t hc, uint64_t first, uint32_t valid) {
    float out[4 * 8];
    for (uint32_t octet = 0; octet * 8 < valid; octet++) {
        uint32_t count = valid - octet * 8 < 8 ? valid - octet * 8 : 8;
#define PORTABLE_OCTET(HC) portable_octet(job, tile, b, h0, HC, octet, out)
        SCAN_HEAD_CHUNK(hc, PORTABLE_OCTET);
#undef PORTABLE_OCTET
        for (uint32_t h = 0; h < hc; h++)
            add_scores(job->scores + (uint64_t)(h0 + h) * job->n + first + octet * 8, out + h * 8,
                       count);
    }
}

static void scan_segment_portable(const scan_job *job, scan_tile *tile,
                                  const fathom_segment_view *view, uint64_t seg_n) {
#define PORTABLE_BLOCK(b, h0, hc, first, valid) portable_block(job, tile, b, h0, hc, first, valid)
    SCAN_SEGMENT_LOOP(job, tile, view, seg_n, fathom_f16_to_f32, PORTABLE_BLOCK);
#undef PORTABLE_BLOCK
}

/* ---- tiled portable kernel: decode with bit_expand, 8 tokens x up to 4
 * heads per GEMM step (a multiply then an add, as portable_channels) ---- */

static void portable2_decode(const scan2_pass *ps, const scan2_tile *tile, uint32_t b, float *dec) {
    for (uint32_t t = 1; t <= FATHOM_PLANES; t++) {
        uint32_t r = ps->row[t];
        for (uint32_t k = ps->first[t - 1]; k < ps->first[t]; k++, r += t) {
            const float a = fathom_f16_to_f32(tile->scales[k][b]);
            for (uint32_t octet = 0; octet < 8; octet++) {
                scan_v4 v0 = v4_splat(scan2_coef0(a, t)), v1 = v0;
                for (uint32_t p = 0; p < t; p++) {
                    const float *e = bit_expand[(tile->words[r + p][b] >> (8 * octet)) & 0xffu];
                    scan_v4 wp = v4_splat(scan2_coefp(a, p));
                    v0 += v4_load(e) * wp;
                    v1 += v4_load(e + 4) * wp;
                }
                memcpy(dec + (size_t)k * 64 + octet * 8, &v0, sizeof v0);
                memcpy(dec + (size_t)k * 64 + octet * 8 + 4, &v1, sizeof v1);
            }
        }
    }
}

SCAN_INLINE void portable2_gemm(const scan2_pass *ps, const float *dec, const uint32_t HC,
                                float *out, uint64_t ld, uint32_t valid) {
    for (uint32_t octet = 0; octet * 8 < valid; octet++) {
        scan_v4 acc[4][2];
        for (uint32_t h = 0; h < HC; h++) acc[h][0] = acc[h][1] = v4_splat(0.0f);
        for (uint32_t k = 0; k < ps->count; k++) {
            scan_v4 v0 = v4_load(dec + (size_t)k * 64 + octet * 8);
            scan_v4 v1 = v4_load(dec + (size_t)k * 64 + octet * 8 + 4);
            for (uint32_t h = 0; h < HC; h++) {
                scan_v4 qh = v4_splat(ps->q[k][h]);
                acc[h][0] += qh * v0;
                acc[h][1] += qh * v1;
            }
        }
        uint32_t n = valid - octet * 8 < 8 ? valid - octet * 8 : 8;
        for (uint32_t h = 0; h < HC; h++) {
            float a[8];
            memcpy(a, &acc[h][0], sizeof acc[h][0]);
            memcpy(a + 4, &acc[h][1], sizeof acc[h][1]);
            scan2_put(out + h * ld + octet * 8, a, n, ps->add);
        }
    }
}

static void portable2_block(const scan2_pass *ps, const scan2_tile *tile, uint32_t b, float *dec,
                            float *out, uint64_t ld, uint32_t valid) {
    portable2_decode(ps, tile, b, dec);
#define PORTABLE2_GEMM(HC) portable2_gemm(ps, dec, HC, out, ld, valid)
    SCAN_HEAD_CHUNK(ps->heads, PORTABLE2_GEMM);
#undef PORTABLE2_GEMM
}

/* The next pass: up to SCAN_PASS_CHANNELS active channels from channel j on,
 * bucketed by depth (see scan_job). Returns the channel after the pass;
 * *count = 0 when no active channel is left. */
uint32_t fathom_scan_next_pass(uint32_t dim, const uint8_t *depths, uint32_t j, uint32_t *count,
                               uint32_t first[FATHOM_PLANES + 1], uint32_t row[FATHOM_PLANES + 1],
                               uint32_t channels[SCAN_PASS_CHANNELS]) {
    uint32_t per_depth[FATHOM_PLANES + 1] = {0}, end = j, n = 0;
    for (; end < dim && n < SCAN_PASS_CHANNELS; end++)
        if (depths[end]) per_depth[depths[end]]++, n++;
    *count = n;
    first[0] = 0;
    row[0] = row[1] = 0;
    for (uint32_t t = 1; t <= FATHOM_PLANES; t++) {
        first[t] = first[t - 1] + per_depth[t];
        if (t > 1) row[t] = row[t - 1] + (t - 1) * per_depth[t - 1];
    }
    uint32_t fill[FATHOM_PLANES];
    for (uint32_t t = 0; t < FATHOM_PLANES; t++) fill[t] = first[t];
    for (; j < end; j++)
        if (depths[j]) channels[fill[depths[j] - 1]++] = j;
    return end;
}

int fathom_scan_kernel_available(fathom_scan_kernel kernel) {
    switch (kernel) {
    case FATHOM_SCAN_AUTO:
    case FATHOM_SCAN_REFERENCE:
    case FATHOM_SCAN_PORTABLE:
    case FATHOM_SCAN_TILED_PORTABLE:
    case FATHOM_SCAN_GROUPED_REFERENCE:
    case FATHOM_SCAN_GROUPED:
    case FATHOM_SCAN_GROUPED_PORTABLE:
    case FATHOM_SCAN_INT8_REFERENCE:
    case FATHOM_SCAN_INT8:
    case FATHOM_SCAN_INT8_PORTABLE:
    case FATHOM_SCAN_INT16_REFERENCE:
    case FATHOM_SCAN_INT16:
    case FATHOM_SCAN_INT16_PORTABLE: return 1;
#ifdef FATHOM_X86
    case FATHOM_SCAN_AVX2:
    case FATHOM_SCAN_TILED_AVX2: return fathom_cpu_has(FATHOM_CPU_AVX2);
    case FATHOM_SCAN_AVX512:
    case FATHOM_SCAN_TILED_AVX512: return fathom_cpu_has(FATHOM_CPU_AVX512);
    case FATHOM_SCAN_GROUPED_AVX512: return fathom_cpu_has(FATHOM_CPU_AVX512_TABLES);
    case FATHOM_SCAN_INT8_AVX512:
    case FATHOM_SCAN_INT16_AVX512: return fathom_cpu_has(FATHOM_CPU_AVX512_INT8);
#else
    case FATHOM_SCAN_GROUPED_AVX512:
    case FATHOM_SCAN_INT8_AVX512:
    case FATHOM_SCAN_INT16_AVX512:
    case FATHOM_SCAN_AVX2:
    case FATHOM_SCAN_AVX512:
    case FATHOM_SCAN_TILED_AVX2:
    case FATHOM_SCAN_TILED_AVX512: return 0;
#endif
    }
    return 0;
}

/* A scan call's working tables. */
typedef struct scan_work {
    scan_job job;
    scan_tile tile;
} scan_work;

static scan_segment_fn pick_kernel(fathom_scan_kernel kernel) {
#ifdef FATHOM_X86
    if (kernel == FATHOM_SCAN_AVX512 ||
        (kernel == FATHOM_SCAN_AUTO && fathom_cpu_has(FATHOM_CPU_AVX512)))
        return fathom_scan_segment_avx512;
    if (kernel == FATHOM_SCAN_AVX2 || (kernel == FATHOM_SCAN_AUTO && fathom_cpu_has(FATHOM_CPU_AVX2)))
        return fathom_scan_segment_avx2;
#endif
    (void)kernel;
    return scan_segment_portable;
}

/* A tiled kernel: what forms a tile's coefficients (NULL: the block
 * function does) and what scores one block of it. */
typedef struct scan2_kernel {
    scan2_coef_fn coef;
    scan2_block_fn block;
    scan2_load_fn load; /* NULL: scan2_stage, then coef */
    int grouped;        /* reads the pass's groups (scan_groups) */
} scan2_kernel;

#ifdef FATHOM_X86
/* Where the AVX-512 kernel reads its values from (scan_x86.c): 0 masks, 1
 * tables, 2 tables by nibble indices, 3 the same with each table formed in
 * the block loop (no stored tables). All give the same scores; which is
 * faster is the CPU's: on Zen 4 the tables (mask registers are slow to load
 * there), on Intel server cores the nibble indices (every 512-bit operation
 * there, mask loads included, takes one of the multiply-adds' two ports,
 * and the nibbles take the fewest). Default: tables on AMD CPUs, nibbles
 * elsewhere, where the CPU has their features (masks otherwise);
 * FATHOM_SCAN_TABLES=0 to 3 overrides (benchmarks), within the features. */
static int scan_values(void) {
    static atomic_int cached = -1;
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v < 0) {
        const char *e = getenv("FATHOM_SCAN_TABLES");
        v = e && *e >= '0' && *e <= '3' ? *e - '0' : fathom_cpu_is_amd() ? 1 : 2;
        if (!fathom_cpu_has(FATHOM_CPU_AVX512_TABLES)) v = 0;
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return v;
}
#endif

const char *fathom_scan_avx512_values(void) {
    static const char *const names[4] = {"masks", "tables", "nibbles", "nibbles-inloop"};
#ifdef FATHOM_X86
    return names[scan_values()];
#else
    return names[0];
#endif
}

/* The tiled kernel for `kernel`; AUTO takes the widest this CPU runs (their
 * scores are equal, operation for operation). The AVX-512 kernel reads its
 * values from masks, tables or nibble indices (scan_values); the mask kernel stages
 * its tile in one pass where the CPU has AVX-512 BW and VL. */
static scan2_kernel pick_tiled(fathom_scan_kernel kernel) {
    if (kernel == FATHOM_SCAN_GROUPED || kernel == FATHOM_SCAN_GROUPED_PORTABLE ||
        kernel == FATHOM_SCAN_GROUPED_AVX512) {
#ifdef FATHOM_X86
        if (kernel != FATHOM_SCAN_GROUPED_PORTABLE && fathom_cpu_has(FATHOM_CPU_AVX512_TABLES))
            return (scan2_kernel){NULL, fathom_scan2_block_avx512_grouped,
                                  fathom_scan2_load_avx512_grouped, 1};
#endif
        return (scan2_kernel){NULL, fathom_scan2_block_grouped_portable, NULL, 1};
    }
    if (kernel == FATHOM_SCAN_INT8 || kernel == FATHOM_SCAN_INT8_PORTABLE ||
        kernel == FATHOM_SCAN_INT8_AVX512) {
#ifdef FATHOM_X86
        if (kernel != FATHOM_SCAN_INT8_PORTABLE && fathom_cpu_has(FATHOM_CPU_AVX512_INT8))
            return (scan2_kernel){NULL, fathom_scan2_block_avx512_int8, fathom_scan2_load_avx512_int8,
                                  0};
#endif
        return (scan2_kernel){NULL, fathom_scan2_block_int8_portable, NULL, 0};
    }
    if (kernel == FATHOM_SCAN_INT16 || kernel == FATHOM_SCAN_INT16_PORTABLE ||
        kernel == FATHOM_SCAN_INT16_AVX512) {
#ifdef FATHOM_X86
        if (kernel != FATHOM_SCAN_INT16_PORTABLE && fathom_cpu_has(FATHOM_CPU_AVX512_INT8))
            return (scan2_kernel){NULL, fathom_scan2_block_avx512_int16,
                                  fathom_scan2_load_avx512_int16, 0};
#endif
        return (scan2_kernel){NULL, fathom_scan2_block_int16_portable, NULL, 0};
    }
#ifdef FATHOM_X86
    if (kernel == FATHOM_SCAN_TILED_AVX512 ||
        (kernel == FATHOM_SCAN_AUTO && fathom_cpu_has(FATHOM_CPU_AVX512))) {
        const int values = scan_values();
        if (values == 1)
            return (scan2_kernel){NULL, fathom_scan2_block_avx512_tab, fathom_scan2_load_avx512_tab, 0};
        if (values == 2)
            return (scan2_kernel){NULL, fathom_scan2_block_avx512_nib, fathom_scan2_load_avx512_nib, 0};
        if (values == 3)
            return (scan2_kernel){NULL, fathom_scan2_block_avx512_nib_inloop,
                                  fathom_scan2_load_avx512_nib_inloop, 0};
        return (scan2_kernel){fathom_scan2_coef_x86, fathom_scan2_block_avx512,
                              fathom_cpu_has(FATHOM_CPU_AVX512 | FATHOM_CPU_AVX512BW |
                                             FATHOM_CPU_AVX512VL)
                                  ? fathom_scan2_load_avx512_masks
                                  : NULL,
                              0};
    }
    if (kernel == FATHOM_SCAN_TILED_AVX2 ||
        (kernel == FATHOM_SCAN_AUTO && fathom_cpu_has(FATHOM_CPU_AVX2)))
        return (scan2_kernel){NULL, fathom_scan2_block_avx2, NULL, 0};
#endif
    (void)kernel;
    return (scan2_kernel){NULL, portable2_block, NULL, 0};
}

/* A tiled scan's working tables (about 90 KiB, on the caller's stack: a scan
 * allocates nothing). */
typedef struct scan2_work {
    scan2_pass pass;
    scan2_tile tile;
    float dec[SCAN_PASS_CHANNELS * FATHOM_BLOCK_TOKENS] __attribute__((aligned(64)));
} scan2_work;

/* Copies blocks [b0, b0 + nb) of the pass's plane rows and scales into tile
 * (a short tile's unused scales are zeroed), and prefetches the same rows
 * SCAN2_PREFETCH_TILES tiles further on within the segment. */
static void scan2_stage(const scan2_pass *ps, const fathom_segment_view *view, uint32_t b0,
                        uint32_t nb, scan2_tile *tile) {
    const uint64_t ahead = (uint64_t)SCAN2_PREFETCH_TILES * SCAN2_TILE_BLOCKS;
    const int prefetch = b0 + nb + ahead <= ps->S;
    for (uint32_t t = 1; t <= FATHOM_PLANES; t++) {
        uint32_t r = ps->row[t];
        for (uint32_t k = ps->first[t - 1]; k < ps->first[t]; k++) {
            const uint64_t j = ps->channels[k];
            for (uint32_t p = 0; p < t; p++, r++) {
                const uint64_t *src = view->planes + (j * FATHOM_PLANES + p) * ps->S + b0;
                if (prefetch) SCAN2_PREFETCH(src + ahead);
                if (nb == SCAN2_TILE_BLOCKS) /* a constant size: inlined moves */
                    memcpy(tile->words[r], src, sizeof tile->words[r]);
                else
                    memcpy(tile->words[r], src, nb * sizeof(uint64_t));
            }
            const uint16_t *scales = view->scales + j * ps->S + b0;
            if (prefetch) SCAN2_PREFETCH(scales + ahead);
            if (nb == SCAN2_TILE_BLOCKS)
                memcpy(tile->scales[k], scales, sizeof tile->scales[k]);
            else {
                memset(tile->scales[k], 0, sizeof tile->scales[k]);
                memcpy(tile->scales[k], scales, nb * sizeof(uint16_t));
            }
        }
    }
}

/* Scores heads [h0, h0 + pass->heads) over the range's blocks for one pass. */
static int scan2_chunk(scan2_kernel kern, scan2_work *w, const scan_source *src,
                       uint64_t first, uint64_t count, float *out, uint64_t ld) {
    const uint64_t S = w->pass.S, end = first + count;
    for (uint64_t blk = first / FATHOM_BLOCK_TOKENS; blk * FATHOM_BLOCK_TOKENS < end;) {
        fathom_segment_view view;
        FATHOM_TRY(source_segment(src, (uint32_t)(blk / S), &view));
        const uint32_t b0 = (uint32_t)(blk % S);
        uint64_t left = fathom_blocks_for(end) - blk;
        uint32_t nb = SCAN2_TILE_BLOCKS;
        if (S - b0 < nb) nb = (uint32_t)(S - b0);
        if (left < nb) nb = (uint32_t)left;
        const uint32_t ahead = SCAN2_PREFETCH_TILES * SCAN2_TILE_BLOCKS;
        if (kern.load)
            kern.load(&w->pass, &view, b0, nb, ahead, b0 + nb + ahead <= S, &w->tile);
        else {
            scan2_stage(&w->pass, &view, b0, nb, &w->tile);
            if (kern.coef) kern.coef(&w->pass, &w->tile);
        }
        for (uint32_t b = 0; b < nb; b++, blk++) {
            uint64_t offset = blk * FATHOM_BLOCK_TOKENS - first;
            uint32_t valid = count - offset < FATHOM_BLOCK_TOKENS ? (uint32_t)(count - offset)
                                                                  : FATHOM_BLOCK_TOKENS;
            kern.block(&w->pass, &w->tile, b, w->dec, out + offset, ld, valid);
        }
    }
    return FATHOM_OK;
}

/* stream: write the scores with non-temporal stores when one pass makes
 * them (they are not read again here). */
static int scan2_run(scan2_kernel kern, const scan_source *src, const uint8_t *depths,
                     const float *queries, uint32_t group, uint64_t first, uint64_t count,
                     float *scores, uint64_t ld, int stream) {
    scan2_work work, *w = &work;
    const uint32_t dim = src->dim;
    scan2_pass *ps = &w->pass;
    ps->S = src->S;
    int status = FATHOM_OK, first_pass = 1;
    for (uint32_t j = 0; j < dim && status == FATHOM_OK; first_pass = 0) {
        j = fathom_scan_next_pass(dim, depths, j, &ps->count, ps->first, ps->row, ps->channels);
        if (kern.grouped) fathom_scan_group_pass(ps->first, &ps->groups);
        if (!ps->count) {
            if (first_pass) /* no active channel: every score is 0 */
                for (uint32_t h = 0; h < group; h++)
                    memset(scores + h * ld, 0, (size_t)count * sizeof(float));
            break;
        }
        uint32_t rest = j;
        while (rest < dim && !depths[rest]) rest++;
        ps->stream = stream && first_pass && rest == dim;
        for (uint32_t h0 = 0; h0 < group && status == FATHOM_OK; h0 += 4) {
            ps->heads = group - h0 < 4 ? group - h0 : 4;
            ps->add = !first_pass;
            for (uint32_t k = 0; k < ps->count; k++)
                for (uint32_t h = 0; h < 4; h++)
                    ps->q[k][h] = h < ps->heads
                                      ? queries[(uint64_t)(h0 + h) * dim + ps->channels[k]]
                                      : 0.0f;
            status = scan2_chunk(kern, w, src, first, count, scores + h0 * ld, ld);
        }
    }
#ifdef FATHOM_X86
    if (stream) __builtin_ia32_sfence(); /* the non-temporal stores before what follows */
#endif
    return status;
}

/* The kernels that scan token ranges: the tiled ones and the grouped and
 * int8 ones but their references. */
static int is_tiled(fathom_scan_kernel kernel) {
    return kernel == FATHOM_SCAN_TILED_PORTABLE || kernel == FATHOM_SCAN_TILED_AVX2 ||
           kernel == FATHOM_SCAN_TILED_AVX512 || kernel == FATHOM_SCAN_GROUPED ||
           kernel == FATHOM_SCAN_GROUPED_PORTABLE || kernel == FATHOM_SCAN_GROUPED_AVX512 ||
           kernel == FATHOM_SCAN_INT8 || kernel == FATHOM_SCAN_INT8_PORTABLE ||
           kernel == FATHOM_SCAN_INT8_AVX512 || kernel == FATHOM_SCAN_INT16 ||
           kernel == FATHOM_SCAN_INT16_PORTABLE || kernel == FATHOM_SCAN_INT16_AVX512;
}

static int source_scan_range(fathom_scan_kernel kernel, const scan_source *src,
                             const uint8_t *depths, const float *queries, uint32_t group,
                             uint64_t first, uint64_t count, float *scores, uint64_t ld,
                             uint64_t *bytes_read, const char *who, int stream) {
    FATHOM_CHECK_ARG(kernel == FATHOM_SCAN_AUTO || is_tiled(kernel),
                     "%s: kernel %d is not a tiled kernel", who, (int)kernel);
    FATHOM_CHECK(!fathom_scan_kernel_available(kernel), FATHOM_ERR_UNSUPPORTED,
                 "%s: kernel %d is not available on this CPU", who, (int)kernel);
    FATHOM_CHECK_ARG((src->store || src->segs) && depths && queries && scores,
                     "%s: NULL store, depths, queries or scores", who);
    FATHOM_CHECK_ARG(group > 0, "%s: group is 0", who);
    const uint64_t length = src->length;
    FATHOM_CHECK_ARG(first % FATHOM_BLOCK_TOKENS == 0,
                     "%s: first %llu is not a multiple of %d", who,
                     (unsigned long long)first, FATHOM_BLOCK_TOKENS);
    FATHOM_CHECK_ARG(count > 0 && first < length && count <= length - first,
                     "%s: tokens [%llu, +%llu) not in 0..length %llu", who,
                     (unsigned long long)first, (unsigned long long)count,
                     (unsigned long long)length);
    uint64_t total;
    FATHOM_CHECK_ARG(ld >= count, "%s: ld %llu < count %llu", who,
                     (unsigned long long)ld, (unsigned long long)count);
    FATHOM_CHECK(!fathom_mul_u64(group, ld, &total) || total > SIZE_MAX / sizeof(float),
                 FATHOM_ERR_NOMEM, "%s: group * ld overflows", who);
    uint64_t bytes;
    FATHOM_TRY(check_source_args(src, depths, queries, group, count, scores, &bytes, who));
    FATHOM_TRY(scan2_run(pick_tiled(kernel), src, depths, queries, group, first, count, scores, ld,
                         stream));
    if (bytes_read) *bytes_read = bytes;
    return FATHOM_OK;
}

int fathom_store_scan_range(fathom_scan_kernel kernel, const fathom_store *st,
                            const uint8_t *depths, const float *queries, uint32_t group,
                            uint64_t first, uint64_t count, float *scores, uint64_t ld,
                            uint64_t *bytes_read) {
    const scan_source src = source_of_store(st);
    return source_scan_range(kernel, &src, depths, queries, group, first, count, scores, ld,
                             bytes_read, "store_scan_range", 0);
}

int fathom_segments_scan_range(fathom_scan_kernel kernel, const fathom_segments *segments,
                               const uint8_t *depths, const float *queries, uint32_t group,
                               uint64_t first, uint64_t count, float *scores, uint64_t ld,
                               uint64_t *bytes_read) {
    FATHOM_TRY(fathom_segments_check(segments, "segments_scan_range"));
    const scan_source src = {NULL, segments, segments->dim, segments->segment_blocks,
                             segments->length};
    return source_scan_range(kernel, &src, depths, queries, group, first, count, scores, ld,
                             bytes_read, "segments_scan_range", 0);
}

int fathom_store_scan_with(fathom_scan_kernel kernel, const fathom_store *st, const uint8_t *depths,
                           const float *queries, uint32_t group, uint64_t n, float *scores,
                           uint64_t *bytes_read) {
    if (kernel == FATHOM_SCAN_REFERENCE)
        return fathom_store_scan_reference(st, depths, queries, group, n, scores, bytes_read);
    if (kernel == FATHOM_SCAN_GROUPED_REFERENCE)
        return fathom_store_scan_grouped_reference(st, depths, queries, group, n, scores,
                                                   bytes_read);
    if (kernel == FATHOM_SCAN_INT8_REFERENCE)
        return fathom_store_scan_int8_reference(st, depths, queries, group, n, scores, bytes_read);
    if (kernel == FATHOM_SCAN_INT16_REFERENCE)
        return fathom_store_scan_int16_reference(st, depths, queries, group, n, scores, bytes_read);
    if (kernel == FATHOM_SCAN_AUTO || is_tiled(kernel)) {
        FATHOM_CHECK(!fathom_scan_kernel_available(kernel), FATHOM_ERR_UNSUPPORTED,
                     "store_scan: kernel %d is not available on this CPU", (int)kernel);
        uint64_t bytes;
        FATHOM_TRY(fathom_store_scan_check(st, depths, queries, group, n, scores, &bytes));
        return fathom_store_scan_range(kernel, st, depths, queries, group, 0, n, scores, n,
                                       bytes_read);
    }
    FATHOM_CHECK_ARG(kernel == FATHOM_SCAN_PORTABLE || kernel == FATHOM_SCAN_AVX2 ||
                         kernel == FATHOM_SCAN_AVX512,
                     "store_scan: unknown kernel %d", (int)kernel);
    FATHOM_CHECK(!fathom_scan_kernel_available(kernel), FATHOM_ERR_UNSUPPORTED,
                 "store_scan: kernel %d is not available on this CPU", (int)kernel);
    uint64_t bytes;
    FATHOM_TRY(fathom_store_scan_check(st, depths, queries, group, n, scores, &bytes));
    scan_work work;
    scan_job *job = &work.job;
    scan_segment_fn segment_fn = pick_kernel(kernel);
    memset(scores, 0, (size_t)(group * n) * sizeof(float));
    job->S = fathom_store_segment_blocks(st);
    job->dim = fathom_store_dim(st);
    job->group = group;
    job->n = n;
    job->queries = queries;
    job->scores = scores;
    const uint64_t seg_tokens = (uint64_t)fathom_store_segment_blocks(st) * FATHOM_BLOCK_TOKENS;
    /* Passes of up to SCAN_PASS_CHANNELS active channels; each adds into scores. */
    for (uint32_t j = 0; j < fathom_store_dim(st);) {
        j = fathom_scan_next_pass(fathom_store_dim(st), depths, j, &job->count, job->first,
                                  job->row, job->channels);
        if (!job->count) break;
        for (uint32_t seg = 0; (uint64_t)seg * seg_tokens < n; seg++) {
            fathom_segment_view view;
            int status = fathom_store_segment(st, seg, &view);
            if (status < 0) return status;
            uint64_t seg_n =
                n - view.first_token < view.tokens ? n - view.first_token : view.tokens;
            segment_fn(job, &work.tile, &view, seg_n);
        }
    }
    if (bytes_read) *bytes_read = bytes;
    return FATHOM_OK;
}

int fathom_store_scan(const fathom_store *st, const uint8_t *depths, const float *queries,
                      uint32_t group, uint64_t n, float *scores, uint64_t *bytes_read) {
    return fathom_store_scan_with(FATHOM_SCAN_AUTO, st, depths, queries, group, n, scores,
                                  bytes_read);
}

/* ---- the parallel driver: (item, token range) tasks on the pool ---- */

typedef struct scan_batch {
    fathom_scan_kernel kernel;
    const fathom_scan_item *items;
    const uint64_t *first_task; /* [count + 1] prefix sums of each item's ranges */
    uint32_t count;
    uint64_t range;
    int stream; /* the scores bypass the caches (scan2_run) */
} scan_batch;

/* A batch writing more scores than this (more than a last-level cache
 * holds) writes them with non-temporal stores: otherwise each line is read
 * from memory before it is written, a third more traffic. */
#define SCAN_STREAM_BYTES (32ull << 20)

static int scan_batch_task(void *arg, uint32_t task, uint32_t worker) {
    (void)worker;
    const scan_batch *b = arg;
    uint32_t i = 0;
    while (b->first_task[i + 1] <= task) i++; /* items are few: a linear search */
    const fathom_scan_item *it = &b->items[i];
    const uint64_t first = (task - b->first_task[i]) * b->range;
    const uint64_t count = it->n - first < b->range ? it->n - first : b->range;
    const scan_source src = source_of_store(it->store);
    return source_scan_range(b->kernel, &src, it->depths, it->queries, it->group, first, count,
                             it->scores + first, it->n, NULL, "store_scan_range", b->stream);
}

int fathom_scan_parallel(struct fathom_pool *pool, fathom_scan_kernel kernel,
                         const fathom_scan_item *items, uint32_t count, uint64_t range_tokens) {
    FATHOM_CHECK_ARG(pool && items && count > 0, "scan_parallel: NULL pool or no items");
    if (range_tokens == 0) range_tokens = 16384;
    FATHOM_CHECK_ARG(range_tokens % FATHOM_BLOCK_TOKENS == 0,
                     "scan_parallel: range %llu is not a multiple of %d",
                     (unsigned long long)range_tokens, FATHOM_BLOCK_TOKENS);
    uint64_t *first_task = fathom_alloc_array((uint64_t)count + 1, sizeof(uint64_t));
    if (!first_task) return fathom_fail(FATHOM_ERR_NOMEM, "scan_parallel: out of memory");
    first_task[0] = 0;
    uint64_t out_bytes = 0;
    for (uint32_t i = 0; i < count; i++) {
        const uint64_t n = items[i].n;
        first_task[i + 1] = first_task[i] + (n ? (n - 1) / range_tokens + 1 : 1);
        out_bytes += (uint64_t)items[i].group * n * sizeof(float); /* items checked per task */
    }
    int status;
    if (first_task[count] > UINT32_MAX)
        status = fathom_fail(FATHOM_ERR_INVALID_ARG, "scan_parallel: %llu tasks",
                             (unsigned long long)first_task[count]);
    else {
        const scan_batch batch = {kernel, items,        first_task,
                                  count,  range_tokens, out_bytes > SCAN_STREAM_BYTES};
        status = fathom_pool_run(pool, scan_batch_task, (void *)&batch, (uint32_t)first_task[count]);
    }
    free(first_task);
    return status;
}

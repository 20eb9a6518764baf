/* store — the bit-plane K store (§3.2, §3.5).
 *
 * Each key channel is quantized to a 4-bit mid-rise code per 64-token block
 * with one fp16 scale, and the codes are kept as four bit-planes, one uint64
 * word per (channel, plane, block). Reading the first t planes of a channel
 * gives exactly the t-bit quantizer of the same range, so a scan can choose
 * its read depth per channel (§3.3) and touch only t words per block.
 *
 * Memory never moves: blocks live in fixed-size segments allocated whole, and
 * the open (partly filled) block is kept as raw floats and re-quantized on
 * every append so that streaming and bulk appends produce identical bytes. */
#include "internal.h"
#include "store_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One segment: [dim][4][S] plane words and [dim][S] fp16 scales. */
typedef struct store_segment {
    uint64_t *planes;
    uint16_t *scales;
} store_segment;

struct fathom_store {
    uint32_t dim;
    uint32_t segment_blocks; /* S */
    const fathom_basis *basis;
    uint64_t length;
    store_segment *segments;
    uint32_t segment_count;
    uint32_t segment_capacity; /* entries of segments[] (the pointer array may move) */
    uint64_t segment_words;    /* dim * 4 * S */
    uint64_t segment_scales;   /* dim * S */
    float *open_rows;          /* [64][dim] stored coordinates of the open block */
    float *rotated;            /* [dim] scratch: one rotated key */
    /* Running sums of (x - shift) and (x - shift)^2, shift = the first stored
     * row: shifting keeps sum_sq - sum^2/n from cancelling when |mean| >> sd. */
    double *shift, *sum, *sum_sq;
};

/* ---------------------------------------------------------------------- *
 * create / free / getters
 * ---------------------------------------------------------------------- */

int fathom_store_create(fathom_store **out, uint32_t dim, uint32_t segment_blocks,
                        const fathom_basis *basis) {
    FATHOM_CHECK_ARG(out, "store_create: out is NULL");
    *out = NULL;
    FATHOM_CHECK_ARG(dim > 0, "store_create: dim is 0");
    if (segment_blocks == 0) segment_blocks = FATHOM_DEFAULT_SEGMENT_BLOCKS;
    FATHOM_CHECK_ARG(!basis || fathom_basis_dim(basis) == dim,
                     "store_create: basis dim %u differs from store dim %u",
                     fathom_basis_dim(basis), dim);
    uint64_t words, scales, open_values, bytes;
    FATHOM_CHECK(!fathom_mul_u64((uint64_t)dim * FATHOM_PLANES, segment_blocks, &words) ||
                     !fathom_mul_u64(dim, segment_blocks, &scales) ||
                     !fathom_mul_u64(words, sizeof(uint64_t), &bytes) ||
                     !fathom_mul_u64(dim, FATHOM_BLOCK_TOKENS, &open_values),
                 FATHOM_ERR_NOMEM, "store_create: segment size overflows (dim %u, %u blocks)", dim,
                 segment_blocks);
    fathom_store *st = calloc(1, sizeof *st);
    if (!st) return fathom_fail(FATHOM_ERR_NOMEM, "store_create: out of memory");
    st->dim = dim;
    st->segment_blocks = segment_blocks;
    st->basis = basis;
    st->segment_words = words;
    st->segment_scales = scales;
    st->open_rows = fathom_calloc_array(open_values, sizeof(float));
    st->rotated = fathom_alloc_array(dim, sizeof(float));
    st->shift = fathom_calloc_array(dim, sizeof(double));
    st->sum = fathom_calloc_array(dim, sizeof(double));
    st->sum_sq = fathom_calloc_array(dim, sizeof(double));
    if (!st->open_rows || !st->rotated || !st->shift || !st->sum || !st->sum_sq) {
        fathom_store_free(st);
        return fathom_fail(FATHOM_ERR_NOMEM, "store_create: out of memory for dim %u", dim);
    }
    *out = st;
    return FATHOM_OK;
}

void fathom_store_free(fathom_store *st) {
    if (!st) return;
    for (uint32_t s = 0; s < st->segment_count; s++) {
        free(st->segments[s].planes);
        free(st->segments[s].scales);
    }
    free(st->segments);
    free(st->open_rows);
    free(st->rotated);
    free(st->shift);
    free(st->sum);
    free(st->sum_sq);
    free(st);
}

uint64_t fathom_store_length(const fathom_store *st) { return st ? st->length : 0; }
uint32_t fathom_store_dim(const fathom_store *st) { return st ? st->dim : 0; }
uint32_t fathom_store_segment_blocks(const fathom_store *st) {
    return st ? st->segment_blocks : 0;
}
uint32_t fathom_store_segment_count(const fathom_store *st) { return st ? st->segment_count : 0; }
const fathom_basis *fathom_store_basis(const fathom_store *st) { return st ? st->basis : NULL; }

static uint64_t blocks_for(uint64_t tokens) {
    return tokens / FATHOM_BLOCK_TOKENS + (tokens % FATHOM_BLOCK_TOKENS != 0);
}

/* Plane words and scales per block: dim * (4*8 + 2) bytes. */
static uint64_t block_bytes(const fathom_store *st) {
    return (uint64_t)st->dim * (FATHOM_PLANES * sizeof(uint64_t) + sizeof(uint16_t));
}

uint64_t fathom_store_index_bytes(const fathom_store *st) {
    if (!st) return 0;
    return blocks_for(st->length) * block_bytes(st);
}

uint64_t fathom_store_allocated_bytes(const fathom_store *st) {
    if (!st) return 0;
    uint64_t segment = st->segment_words * sizeof(uint64_t) + st->segment_scales * sizeof(uint16_t);
    uint64_t open = (uint64_t)st->dim * FATHOM_BLOCK_TOKENS * sizeof(float);
    return (uint64_t)st->segment_count * segment + open;
}

/* ---------------------------------------------------------------------- *
 * quantization (§3.2)
 * ---------------------------------------------------------------------- */

/* The fp16 scale of a block: max |k| rounded to fp16, saturated at 65504
 * (the largest finite fp16) so huge keys clip instead of becoming inf. */
static uint16_t block_scale(float max_abs) {
    uint16_t h = fathom_f32_to_f16(max_abs);
    if ((h & 0x7c00u) == 0x7c00u) h = 0x7bffu;
    return h;
}

/* c = clip(floor(k/s) + 8, 0, 15), s = a/8; computed in float and clipped
 * before the integer conversion so no value can overflow it. */
static unsigned quantize_code(float k, float s) {
    float f = floorf(k / s) + 8.0f;
    if (!(f >= 0.0f)) return 0;
    if (f > 15.0f) return 15;
    return (unsigned)f;
}

/* Re-quantize block `block` (absolute) from its `count` rows of stored
 * coordinates [count][dim]; tokens count..63 get 0 bits. */
static void quantize_block(fathom_store *st, uint64_t block, const float *rows, uint32_t count) {
    const uint32_t dim = st->dim, S = st->segment_blocks;
    store_segment *seg = &st->segments[block / S];
    const uint64_t b = block % S;
    for (uint32_t j = 0; j < dim; j++) {
        float max_abs = 0.0f;
        for (uint32_t i = 0; i < count; i++) max_abs = fmaxf(max_abs, fabsf(rows[(size_t)i * dim + j]));
        uint16_t h = block_scale(max_abs);
        float a = fathom_f16_to_f32(h);
        uint64_t w[FATHOM_PLANES] = {0, 0, 0, 0};
        if (a > 0.0f) {
            float s = a / 8.0f;
            for (uint32_t i = 0; i < count; i++) {
                unsigned c = quantize_code(rows[(size_t)i * dim + j], s);
                for (uint32_t p = 0; p < FATHOM_PLANES; p++)
                    w[p] |= (uint64_t)((c >> (3 - p)) & 1u) << i;
            }
        } else {
            /* a == 0 (every value rounds to a zero scale): every code is 8 = 1000b */
            w[0] = count == 64 ? ~0ull : (1ull << count) - 1;
        }
        for (uint32_t p = 0; p < FATHOM_PLANES; p++)
            seg->planes[((uint64_t)j * FATHOM_PLANES + p) * S + b] = w[p];
        seg->scales[(uint64_t)j * S + b] = h;
    }
}

/* Make sure segments 0..needed-1 exist. On failure nothing changes. */
static int ensure_segments(fathom_store *st, uint64_t needed) {
    if (needed <= st->segment_count) return FATHOM_OK;
    FATHOM_CHECK(needed > UINT32_MAX, FATHOM_ERR_NOMEM, "store: %llu segments exceed 2^32-1",
                 (unsigned long long)needed);
    if (needed > st->segment_capacity) {
        uint64_t cap = st->segment_capacity ? (uint64_t)st->segment_capacity * 2 : 4;
        if (cap < needed) cap = needed;
        if (cap > UINT32_MAX) cap = UINT32_MAX;
        uint64_t bytes;
        FATHOM_CHECK(!fathom_mul_u64(cap, sizeof(store_segment), &bytes) || bytes > SIZE_MAX,
                     FATHOM_ERR_NOMEM, "store: segment table size overflows");
        store_segment *grown = realloc(st->segments, (size_t)bytes);
        FATHOM_CHECK(!grown, FATHOM_ERR_NOMEM, "store: out of memory for the segment table");
        st->segments = grown;
        st->segment_capacity = (uint32_t)cap;
    }
    uint32_t first_new = st->segment_count;
    for (uint64_t s = first_new; s < needed; s++) {
        /* calloc: bits of tokens not yet appended are 0 */
        uint64_t *planes = fathom_calloc_array(st->segment_words, sizeof(uint64_t));
        uint16_t *scales = fathom_calloc_array(st->segment_scales, sizeof(uint16_t));
        if (!planes || !scales) {
            free(planes);
            free(scales);
            for (uint64_t r = first_new; r < s; r++) {
                free(st->segments[r].planes);
                free(st->segments[r].scales);
            }
            return fathom_fail(FATHOM_ERR_NOMEM, "store: out of memory for segment %llu",
                               (unsigned long long)s);
        }
        st->segments[s].planes = planes;
        st->segments[s].scales = scales;
    }
    st->segment_count = (uint32_t)needed;
    return FATHOM_OK;
}

int fathom_store_append(fathom_store *st, const float *keys, uint64_t count) {
    FATHOM_CHECK_ARG(st, "store_append: store is NULL");
    FATHOM_CHECK_ARG(keys, "store_append: keys is NULL");
    FATHOM_CHECK_ARG(count > 0, "store_append: count is 0");
    const uint32_t dim = st->dim;
    uint64_t values, new_length;
    FATHOM_CHECK(!fathom_mul_u64(count, dim, &values), FATHOM_ERR_NOMEM,
                 "store_append: count * dim overflows");
    FATHOM_CHECK(!fathom_add_u64(st->length, count, &new_length), FATHOM_ERR_NOMEM,
                 "store_append: length overflows");
    for (uint64_t v = 0; v < values; v++)
        FATHOM_CHECK(!isfinite(keys[v]), FATHOM_ERR_NONFINITE,
                     "store_append: key %llu channel %llu is not finite",
                     (unsigned long long)(v / dim), (unsigned long long)(v % dim));
    if (st->basis) {
        /* A rotation of finite keys can still overflow; check before changing anything. */
        for (uint64_t r = 0; r < count; r++) {
            FATHOM_TRY(fathom_basis_rotate_key(st->basis, keys + r * dim, st->rotated));
            for (uint32_t j = 0; j < dim; j++)
                FATHOM_CHECK(!isfinite(st->rotated[j]), FATHOM_ERR_NONFINITE,
                             "store_append: rotated key %llu channel %u is not finite",
                             (unsigned long long)r, j);
        }
    }
    FATHOM_TRY(ensure_segments(st, blocks_for(new_length) / st->segment_blocks +
                                       (blocks_for(new_length) % st->segment_blocks != 0)));

    for (uint64_t r = 0; r < count; r++) {
        uint32_t pos = (uint32_t)(st->length % FATHOM_BLOCK_TOKENS);
        float *row = st->open_rows + (size_t)pos * dim;
        if (st->basis)
            (void)fathom_basis_rotate_key(st->basis, keys + r * dim, row); /* checked above */
        else
            memcpy(row, keys + r * dim, (size_t)dim * sizeof(float));
        if (st->length == 0)
            for (uint32_t j = 0; j < dim; j++) st->shift[j] = row[j];
        for (uint32_t j = 0; j < dim; j++) {
            double x = (double)row[j] - st->shift[j];
            st->sum[j] += x;
            st->sum_sq[j] += x * x;
        }
        st->length++;
        pos++;
        /* The block is re-quantized when it closes and after the last row, so
         * an open block's bytes are always those of a bulk append. */
        if (pos == FATHOM_BLOCK_TOKENS || r + 1 == count)
            quantize_block(st, (st->length - 1) / FATHOM_BLOCK_TOKENS, st->open_rows, pos);
    }
    return FATHOM_OK;
}

/* ---------------------------------------------------------------------- *
 * reading: views, words, decode, variance
 * ---------------------------------------------------------------------- */

int fathom_store_segment(const fathom_store *st, uint32_t seg, fathom_segment_view *out) {
    FATHOM_CHECK_ARG(st && out, "store_segment: NULL argument");
    FATHOM_CHECK_ARG(seg < st->segment_count, "store_segment: segment %u >= count %u", seg,
                     st->segment_count);
    const uint64_t S = st->segment_blocks;
    const uint64_t seg_tokens = S * FATHOM_BLOCK_TOKENS;
    uint64_t first = (uint64_t)seg * seg_tokens;
    uint64_t tokens = st->length - first < seg_tokens ? st->length - first : seg_tokens;
    out->planes = st->segments[seg].planes;
    out->scales = st->segments[seg].scales;
    out->first_token = first;
    out->tokens = (uint32_t)tokens;
    out->blocks = (uint32_t)blocks_for(tokens);
    return FATHOM_OK;
}

/* Word of plane p, channel j, absolute block; the caller checked the range. */
static inline uint64_t plane_word(const fathom_store *st, uint32_t j, uint32_t p, uint64_t block) {
    const uint64_t S = st->segment_blocks;
    return st->segments[block / S].planes[((uint64_t)j * FATHOM_PLANES + p) * S + block % S];
}

static inline uint16_t scale_word(const fathom_store *st, uint32_t j, uint64_t block) {
    const uint64_t S = st->segment_blocks;
    return st->segments[block / S].scales[(uint64_t)j * S + block % S];
}

int fathom_store_word(const fathom_store *st, uint32_t channel, uint32_t plane, uint64_t block,
                      uint64_t *word, uint16_t *scale) {
    FATHOM_CHECK_ARG(st && word && scale, "store_word: NULL argument");
    FATHOM_CHECK_ARG(channel < st->dim, "store_word: channel %u >= dim %u", channel, st->dim);
    FATHOM_CHECK_ARG(plane < FATHOM_PLANES, "store_word: plane %u >= %d", plane, FATHOM_PLANES);
    FATHOM_CHECK_ARG(block < blocks_for(st->length), "store_word: block %llu >= blocks in use %llu",
                     (unsigned long long)block, (unsigned long long)blocks_for(st->length));
    *word = plane_word(st, channel, plane, block);
    *scale = scale_word(st, channel, block);
    return FATHOM_OK;
}

/* The t-bit mid-rise value of prefix code c>>(4-t) for scale a: exact in
 * float (a has 11 significant bits, the factor at most 4). */
static inline float decode_value(uint32_t prefix, uint32_t t, float a) {
    float half = (float)(1u << (t - 1));
    return ((float)prefix + 0.5f - half) * (a / half);
}

/* Value of token i (absolute) at depth t >= 1 in channel j. */
static float decode_token(const fathom_store *st, uint64_t token, uint32_t j, uint32_t t) {
    uint64_t block = token / FATHOM_BLOCK_TOKENS;
    uint32_t bit = (uint32_t)(token % FATHOM_BLOCK_TOKENS);
    uint32_t prefix = 0;
    for (uint32_t p = 0; p < t; p++) prefix = (prefix << 1) | (uint32_t)((plane_word(st, j, p, block) >> bit) & 1u);
    return decode_value(prefix, t, fathom_f16_to_f32(scale_word(st, j, block)));
}

static int check_depths(uint32_t dim, const uint8_t *depths, const char *who) {
    for (uint32_t j = 0; j < dim; j++)
        FATHOM_CHECK_ARG(depths[j] <= FATHOM_PLANES, "%s: depths[%u] = %u > %d", who, j,
                         (unsigned)depths[j], FATHOM_PLANES);
    return FATHOM_OK;
}

int fathom_store_decode(const fathom_store *st, uint64_t first, uint64_t count,
                        const uint8_t *depths, float *out) {
    FATHOM_CHECK_ARG(st && depths && out, "store_decode: NULL argument");
    FATHOM_CHECK_ARG(count > 0, "store_decode: count is 0");
    FATHOM_CHECK_ARG(first <= st->length && count <= st->length - first,
                     "store_decode: tokens [%llu, +%llu) exceed length %llu",
                     (unsigned long long)first, (unsigned long long)count,
                     (unsigned long long)st->length);
    FATHOM_TRY(check_depths(st->dim, depths, "store_decode"));
    const uint32_t dim = st->dim;
    for (uint64_t i = 0; i < count; i++)
        for (uint32_t j = 0; j < dim; j++)
            out[i * dim + j] = depths[j] ? decode_token(st, first + i, j, depths[j]) : 0.0f;
    return FATHOM_OK;
}

int fathom_store_variance(const fathom_store *st, float *out) {
    FATHOM_CHECK_ARG(st && out, "store_variance: NULL argument");
    FATHOM_CHECK(st->length == 0, FATHOM_ERR_STATE, "store_variance: the store is empty");
    const double n = (double)st->length;
    for (uint32_t j = 0; j < st->dim; j++) {
        double mean = st->sum[j] / n;
        double var = st->sum_sq[j] / n - mean * mean;
        out[j] = var > 0.0 ? (float)var : 0.0f;
    }
    return FATHOM_OK;
}

/* ---------------------------------------------------------------------- *
 * scan (§3.3): scores of every token from the first t_j planes
 * ---------------------------------------------------------------------- */

static int check_scan_args(const fathom_store *st, const uint8_t *depths, const float *queries,
                           uint32_t group, uint64_t n, const float *scores,
                           uint64_t *bytes_read_out) {
    FATHOM_CHECK_ARG(st && depths && queries && scores, "store_scan: NULL argument");
    FATHOM_CHECK_ARG(group > 0, "store_scan: group is 0");
    FATHOM_CHECK_ARG(n > 0 && n <= st->length, "store_scan: n = %llu not in 1..length %llu",
                     (unsigned long long)n, (unsigned long long)st->length);
    uint64_t total;
    FATHOM_CHECK(!fathom_mul_u64(group, n, &total) || total > SIZE_MAX / sizeof(float),
                 FATHOM_ERR_NOMEM, "store_scan: group * n overflows");
    FATHOM_TRY(check_depths(st->dim, depths, "store_scan"));
    /* bytes: sum over active channels of ceil(n/64) * (8 t_j + 2) */
    uint64_t per_block = 0;
    for (uint32_t j = 0; j < st->dim; j++)
        if (depths[j]) per_block += 8u * depths[j] + 2u;
    FATHOM_CHECK(!fathom_mul_u64(blocks_for(n), per_block, bytes_read_out), FATHOM_ERR_NOMEM,
                 "store_scan: byte count overflows");
    return FATHOM_OK;
}

int fathom_store_scan_reference(const fathom_store *st, const uint8_t *depths,
                                const float *queries, uint32_t group, uint64_t n, float *scores,
                                uint64_t *bytes_read) {
    uint64_t bytes;
    FATHOM_TRY(check_scan_args(st, depths, queries, group, n, scores, &bytes));
    const uint32_t dim = st->dim;
    for (uint32_t h = 0; h < group; h++) {
        const float *q = queries + (uint64_t)h * dim;
        for (uint64_t i = 0; i < n; i++) {
            double acc = 0.0;
            for (uint32_t j = 0; j < dim; j++)
                if (depths[j]) acc += (double)q[j] * decode_token(st, i, j, depths[j]);
            scores[(uint64_t)h * n + i] = (float)acc;
        }
    }
    if (bytes_read) *bytes_read = bytes;
    return FATHOM_OK;
}

/* The fast kernel. For one channel and a run of blocks it decodes the 64
 * codes of each block from its t plane words (each token's bit picked with
 * a shift; two 32-token halves so the shifts are 32-bit and vectorize), then
 * adds q_h * value into each head's scores. The channel loop is inside a
 * tile of SCAN_TILE_BLOCKS blocks, so the tile's scores stay in L1 while
 * each channel's words are read as short contiguous runs. The body is
 * compiled once per ISA below; `fma` selects fused multiply-adds where the
 * ISA has them (ISO C mode does not contract a*b+c by itself). */
#define SCAN_TILE_BLOCKS 16

#if defined(__GNUC__)
#define SCAN_INLINE static inline __attribute__((always_inline))
#else
#define SCAN_INLINE static inline
#endif

SCAN_INLINE void decode_half(float *vals, const uint32_t *w, uint32_t t, float off, float scale) {
    for (uint32_t i = 0; i < 32; i++) {
        uint32_t c = 0;
        for (uint32_t p = 0; p < t; p++) c = (c << 1) | ((w[p] >> i) & 1u);
        vals[i] = ((float)(int32_t)c + off) * scale;
    }
}

/* Decode one block of one channel at depth t (a compile-time constant after
 * inlining into the switch below). */
SCAN_INLINE void decode_block(float *vals, const uint64_t *planes, uint64_t S, uint32_t t,
                              float a) {
    uint32_t lo[FATHOM_PLANES], hi[FATHOM_PLANES];
    for (uint32_t p = 0; p < t; p++) {
        uint64_t w = planes[p * S];
        lo[p] = (uint32_t)w;
        hi[p] = (uint32_t)(w >> 32);
    }
    float half = (float)(1u << (t - 1));
    float off = 0.5f - half, scale = a / half;
    decode_half(vals, lo, t, off, scale);
    decode_half(vals + 32, hi, t, off, scale);
}

SCAN_INLINE void scan_tile_body(const fathom_segment_view *view, uint64_t S, uint32_t dim,
                                const uint8_t *depths, const float *queries, uint32_t group,
                                uint64_t n, uint32_t b0, uint32_t blocks, uint64_t tile_first,
                                uint64_t tile_tokens, float *scores, int fma) {
    float vals[FATHOM_BLOCK_TOKENS];
    for (uint32_t j = 0; j < dim; j++) {
        uint32_t t = depths[j];
        if (!t) continue;
        const uint64_t *planes = view->planes + (uint64_t)j * FATHOM_PLANES * S + b0;
        const uint16_t *scales = view->scales + (uint64_t)j * S + b0;
        for (uint32_t b = 0; b < blocks; b++) {
            float a = fathom_f16_to_f32(scales[b]);
            switch (t) {
            case 1: decode_block(vals, planes + b, S, 1, a); break;
            case 2: decode_block(vals, planes + b, S, 2, a); break;
            case 3: decode_block(vals, planes + b, S, 3, a); break;
            default: decode_block(vals, planes + b, S, 4, a); break;
            }
            uint64_t off = (uint64_t)b * FATHOM_BLOCK_TOKENS;
            uint64_t left = tile_tokens - off;
            uint32_t count = left < FATHOM_BLOCK_TOKENS ? (uint32_t)left : FATHOM_BLOCK_TOKENS;
            for (uint32_t h = 0; h < group; h++) {
                float q = queries[(uint64_t)h * dim + j];
                float *s = scores + (uint64_t)h * n + tile_first + off;
                if (count == FATHOM_BLOCK_TOKENS) {
                    if (fma)
                        for (uint32_t i = 0; i < FATHOM_BLOCK_TOKENS; i++) s[i] = fmaf(q, vals[i], s[i]);
                    else
                        for (uint32_t i = 0; i < FATHOM_BLOCK_TOKENS; i++) s[i] += q * vals[i];
                } else {
                    for (uint32_t i = 0; i < count; i++) s[i] += q * vals[i];
                }
            }
        }
    }
}

typedef void (*scan_tile_fn)(const fathom_segment_view *, uint64_t, uint32_t, const uint8_t *,
                             const float *, uint32_t, uint64_t, uint32_t, uint32_t, uint64_t,
                             uint64_t, float *);

static void scan_tile_portable(const fathom_segment_view *view, uint64_t S, uint32_t dim,
                               const uint8_t *depths, const float *queries, uint32_t group,
                               uint64_t n, uint32_t b0, uint32_t blocks, uint64_t tile_first,
                               uint64_t tile_tokens, float *scores) {
    scan_tile_body(view, S, dim, depths, queries, group, n, b0, blocks, tile_first, tile_tokens,
                   scores, 0);
}

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define FATHOM_HAVE_AVX2_KERNEL 1
__attribute__((target("avx2,fma"))) static void
scan_tile_avx2(const fathom_segment_view *view, uint64_t S, uint32_t dim, const uint8_t *depths,
               const float *queries, uint32_t group, uint64_t n, uint32_t b0, uint32_t blocks,
               uint64_t tile_first, uint64_t tile_tokens, float *scores) {
    scan_tile_body(view, S, dim, depths, queries, group, n, b0, blocks, tile_first, tile_tokens,
                   scores, 1);
}

static int cpu_has_avx2(void) {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#endif

int fathom_scan_kernel_available(fathom_scan_kernel kernel) {
    switch (kernel) {
    case FATHOM_SCAN_AUTO:
    case FATHOM_SCAN_REFERENCE:
    case FATHOM_SCAN_PORTABLE: return 1;
    case FATHOM_SCAN_AVX2:
#ifdef FATHOM_HAVE_AVX2_KERNEL
        return cpu_has_avx2();
#else
        return 0;
#endif
    }
    return 0;
}

int fathom_store_scan_with(fathom_scan_kernel kernel, const fathom_store *st,
                           const uint8_t *depths, const float *queries, uint32_t group, uint64_t n,
                           float *scores, uint64_t *bytes_read) {
    if (kernel == FATHOM_SCAN_REFERENCE)
        return fathom_store_scan_reference(st, depths, queries, group, n, scores, bytes_read);
    FATHOM_CHECK_ARG(kernel == FATHOM_SCAN_AUTO || kernel == FATHOM_SCAN_PORTABLE ||
                         kernel == FATHOM_SCAN_AVX2,
                     "store_scan: unknown kernel %d", (int)kernel);
    FATHOM_CHECK(!fathom_scan_kernel_available(kernel), FATHOM_ERR_UNSUPPORTED,
                 "store_scan: kernel %d is not available on this CPU", (int)kernel);
    uint64_t bytes;
    FATHOM_TRY(check_scan_args(st, depths, queries, group, n, scores, &bytes));

    scan_tile_fn tile_fn = scan_tile_portable;
#ifdef FATHOM_HAVE_AVX2_KERNEL
    if (kernel == FATHOM_SCAN_AVX2 || (kernel == FATHOM_SCAN_AUTO && cpu_has_avx2()))
        tile_fn = scan_tile_avx2;
#endif
    memset(scores, 0, (size_t)(group * n) * sizeof(float));
    const uint64_t S = st->segment_blocks;
    const uint64_t seg_tokens = S * FATHOM_BLOCK_TOKENS;
    for (uint32_t seg = 0; (uint64_t)seg * seg_tokens < n; seg++) {
        fathom_segment_view view;
        FATHOM_TRY(fathom_store_segment(st, seg, &view));
        uint64_t seg_n = n - view.first_token < view.tokens ? n - view.first_token : view.tokens;
        uint32_t seg_blocks = (uint32_t)blocks_for(seg_n);
        for (uint32_t b0 = 0; b0 < seg_blocks; b0 += SCAN_TILE_BLOCKS) {
            uint32_t blocks = seg_blocks - b0 < SCAN_TILE_BLOCKS ? seg_blocks - b0 : SCAN_TILE_BLOCKS;
            uint64_t tile_first = view.first_token + (uint64_t)b0 * FATHOM_BLOCK_TOKENS;
            uint64_t tile_tokens = n - tile_first < (uint64_t)blocks * FATHOM_BLOCK_TOKENS
                                       ? n - tile_first
                                       : (uint64_t)blocks * FATHOM_BLOCK_TOKENS;
            tile_fn(&view, S, st->dim, depths, queries, group, n, b0, blocks, tile_first,
                    tile_tokens, scores);
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

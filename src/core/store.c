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
    float basis_max_abs; /* max |V[i,c]|: bounds a rotated key, see fathom_store_append */
    float *center;       /* [dim] stored coordinates are k - center, or NULL */
    uint64_t length;
    store_segment *segments;
    uint32_t segment_count;
    uint32_t segment_capacity; /* entries of segments[] (the pointer array may move) */
    uint64_t segment_words;    /* dim * 4 * S */
    uint64_t segment_scales;   /* dim * S */
    float *open_rows;          /* [64][dim] stored coordinates of the open block */
    float *rotated;            /* [dim] scratch: one rotated key */
    float *open_max;           /* [dim] max |x| over the open block's quantized rows */
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
    if (basis) {
        const float *v = fathom_basis_vectors(basis);
        for (uint64_t i = 0; i < (uint64_t)dim * dim; i++)
            st->basis_max_abs = fmaxf(st->basis_max_abs, fabsf(v[i]));
    }
    st->segment_words = words;
    st->segment_scales = scales;
    st->open_rows = fathom_calloc_array(open_values, sizeof(float));
    st->rotated = fathom_alloc_array(dim, sizeof(float));
    st->open_max = fathom_calloc_array(dim, sizeof(float));
    st->shift = fathom_calloc_array(dim, sizeof(double));
    st->sum = fathom_calloc_array(dim, sizeof(double));
    st->sum_sq = fathom_calloc_array(dim, sizeof(double));
    if (!st->open_rows || !st->rotated || !st->open_max || !st->shift || !st->sum || !st->sum_sq) {
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
    free(st->center);
    free(st->open_rows);
    free(st->rotated);
    free(st->open_max);
    free(st->shift);
    free(st->sum);
    free(st->sum_sq);
    free(st);
}

uint64_t fathom_store_length(const fathom_store *st) { return st ? st->length : 0; }
uint32_t fathom_store_dim(const fathom_store *st) { return st ? st->dim : 0; }
uint32_t fathom_store_segment_blocks(const fathom_store *st) { return st ? st->segment_blocks : 0; }
uint32_t fathom_store_segment_count(const fathom_store *st) { return st ? st->segment_count : 0; }
const fathom_basis *fathom_store_basis(const fathom_store *st) { return st ? st->basis : NULL; }
const float *fathom_store_center(const fathom_store *st) { return st ? st->center : NULL; }

int fathom_store_set_center(fathom_store *st, const float *center) {
    FATHOM_CHECK_ARG(st, "store_set_center: store is NULL");
    FATHOM_CHECK_ARG(center, "store_set_center: center is NULL");
    FATHOM_CHECK_ARG(!st->basis, "store_set_center: a rotated store is centered by its basis' mean");
    FATHOM_CHECK(st->length > 0, FATHOM_ERR_STATE, "store_set_center: the store already holds %llu keys",
                 (unsigned long long)st->length);
    for (uint32_t j = 0; j < st->dim; j++)
        FATHOM_CHECK(!isfinite(center[j]), FATHOM_ERR_NONFINITE, "store_set_center: channel %u is not finite", j);
    if (!st->center) {
        st->center = fathom_alloc_array(st->dim, sizeof(float));
        FATHOM_CHECK(!st->center, FATHOM_ERR_NOMEM, "store_set_center: out of memory for dim %u", st->dim);
    }
    memcpy(st->center, center, (size_t)st->dim * sizeof(float));
    return FATHOM_OK;
}

static uint64_t blocks_for(uint64_t tokens) { return fathom_blocks_for(tokens); }

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

/* Quantize the open block `block` (absolute) whose rows [0, count) are in
 * rows (stored coordinates, [count][dim]); rows [0, quantized) were already
 * quantized by an earlier append. A channel whose fp16 scale did not change
 * keeps those codes (a code depends only on its value and the scale) and
 * gets only the new rows; a channel whose scale grew is re-quantized whole.
 * Either way the bytes equal those of quantizing all rows at once. Tokens
 * count..63 have 0 bits. */
static void quantize_block(fathom_store *st, uint64_t block, const float *rows, uint32_t quantized,
                           uint32_t count) {
    const uint32_t dim = st->dim, S = st->segment_blocks;
    store_segment *seg = &st->segments[block / S];
    const uint64_t b = block % S;
    for (uint32_t j = 0; j < dim; j++) {
        float max_abs = quantized ? st->open_max[j] : 0.0f;
        for (uint32_t i = quantized; i < count; i++)
            max_abs = fmaxf(max_abs, fabsf(rows[(size_t)i * dim + j]));
        st->open_max[j] = max_abs;
        uint16_t h = block_scale(max_abs);
        uint64_t *word = seg->planes + (uint64_t)j * FATHOM_PLANES * S + b; /* plane p at p*S */
        uint32_t first = quantized && h == seg->scales[(uint64_t)j * S + b] ? quantized : 0;
        uint64_t w[FATHOM_PLANES] = {0, 0, 0, 0};
        if (first)
            for (uint32_t p = 0; p < FATHOM_PLANES; p++) w[p] = word[p * S];
        float a = fathom_f16_to_f32(h);
        if (a > 0.0f) {
            float s = a / 8.0f;
            for (uint32_t i = first; i < count; i++) {
                unsigned c = quantize_code(rows[(size_t)i * dim + j], s);
                for (uint32_t p = 0; p < FATHOM_PLANES; p++)
                    w[p] |= (uint64_t)((c >> (3 - p)) & 1u) << i;
            }
        } else {
            /* a == 0 (every value rounds to a zero scale): every code is 8 = 1000b */
            for (uint32_t i = first; i < count; i++) w[0] |= 1ull << i;
        }
        for (uint32_t p = 0; p < FATHOM_PLANES; p++) word[p * S] = w[p];
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
    if (st->center) /* k - center of finite values can still overflow */
        for (uint64_t v = 0; v < values; v++)
            FATHOM_CHECK(!isfinite(keys[v] - st->center[v % dim]), FATHOM_ERR_NONFINITE,
                         "store_append: key %llu channel %llu minus the center is not finite",
                         (unsigned long long)(v / dim), (unsigned long long)(v % dim));
    if (st->basis) {
        /* A rotation of finite keys can still overflow; check before changing
         * anything. |rotated_c| <= ||k - mean||_1 * max|V|, so only rows whose
         * bound comes near FLT_MAX are rotated here to find out. */
        const float *mean = fathom_basis_mean(st->basis);
        for (uint64_t r = 0; r < count; r++) {
            double l1 = 0.0;
            for (uint32_t j = 0; j < dim; j++) l1 += fabs((double)keys[r * dim + j] - mean[j]);
            if (l1 * st->basis_max_abs < 1e38) continue;
            FATHOM_TRY(fathom_basis_rotate_key(st->basis, keys + r * dim, st->rotated));
            for (uint32_t j = 0; j < dim; j++)
                FATHOM_CHECK(!isfinite(st->rotated[j]), FATHOM_ERR_NONFINITE,
                             "store_append: rotated key %llu channel %u is not finite",
                             (unsigned long long)r, j);
        }
    }
    FATHOM_TRY(ensure_segments(st, blocks_for(new_length) / st->segment_blocks +
                                       (blocks_for(new_length) % st->segment_blocks != 0)));

    uint32_t quantized = (uint32_t)(st->length % FATHOM_BLOCK_TOKENS); /* open rows already coded */
    for (uint64_t r = 0; r < count; r++) {
        uint32_t pos = (uint32_t)(st->length % FATHOM_BLOCK_TOKENS);
        float *row = st->open_rows + (size_t)pos * dim;
        if (st->basis)
            (void)fathom_basis_rotate_key(st->basis, keys + r * dim, row); /* checked above */
        else if (st->center)
            for (uint32_t j = 0; j < dim; j++) row[j] = keys[r * dim + j] - st->center[j];
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
        /* The block is quantized when it closes and after the last row, so an
         * open block's bytes are always those of a bulk append. */
        if (pos == FATHOM_BLOCK_TOKENS || r + 1 == count) {
            quantize_block(st, (st->length - 1) / FATHOM_BLOCK_TOKENS, st->open_rows, quantized,
                           pos);
            quantized = 0; /* the next block starts empty */
        }
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

float fathom_store_token_value(const fathom_store *st, uint64_t token, uint32_t j, uint32_t t) {
    uint64_t block = token / FATHOM_BLOCK_TOKENS;
    uint32_t bit = (uint32_t)(token % FATHOM_BLOCK_TOKENS);
    uint32_t prefix = 0;
    for (uint32_t p = 0; p < t; p++)
        prefix = (prefix << 1) | (uint32_t)((plane_word(st, j, p, block) >> bit) & 1u);
    return decode_value(prefix, t, fathom_f16_to_f32(scale_word(st, j, block)));
}

int fathom_depths_check(uint32_t dim, const uint8_t *depths, const char *who) {
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
    FATHOM_TRY(fathom_depths_check(st->dim, depths, "store_decode"));
    const uint32_t dim = st->dim;
    for (uint64_t i = 0; i < count; i++)
        for (uint32_t j = 0; j < dim; j++)
            out[i * dim + j] = depths[j] ? fathom_store_token_value(st, first + i, j, depths[j]) : 0.0f;
    return FATHOM_OK;
}

void fathom_variance_from_sums(uint32_t dim, uint64_t n, const double *sum, const double *sum_sq,
                               float *out) {
    const double count = (double)n;
    for (uint32_t j = 0; j < dim; j++) {
        double mean = sum[j] / count;
        double var = sum_sq[j] / count - mean * mean;
        out[j] = var > 0.0 ? (float)var : 0.0f;
    }
}

int fathom_store_variance(const fathom_store *st, float *out) {
    FATHOM_CHECK_ARG(st && out, "store_variance: NULL argument");
    FATHOM_CHECK(st->length == 0, FATHOM_ERR_STATE, "store_variance: the store is empty");
    fathom_variance_from_sums(st->dim, st->length, st->sum, st->sum_sq, out);
    return FATHOM_OK;
}

void fathom_store_sums(const fathom_store *st, const double **shift, const double **sum,
                       const double **sum_sq) {
    *shift = st ? st->shift : NULL;
    *sum = st ? st->sum : NULL;
    *sum_sq = st ? st->sum_sq : NULL;
}

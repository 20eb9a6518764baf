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

/* Value of token i (absolute) at depth t >= 1 in channel j. */
static float decode_token(const fathom_store *st, uint64_t token, uint32_t j, uint32_t t) {
    uint64_t block = token / FATHOM_BLOCK_TOKENS;
    uint32_t bit = (uint32_t)(token % FATHOM_BLOCK_TOKENS);
    uint32_t prefix = 0;
    for (uint32_t p = 0; p < t; p++)
        prefix = (prefix << 1) | (uint32_t)((plane_word(st, j, p, block) >> bit) & 1u);
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

void fathom_store_sums(const fathom_store *st, const double **shift, const double **sum,
                       const double **sum_sq) {
    *shift = st ? st->shift : NULL;
    *sum = st ? st->sum : NULL;
    *sum_sq = st ? st->sum_sq : NULL;
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

int fathom_store_scan_reference(const fathom_store *st, const uint8_t *depths, const float *queries,
                                uint32_t group, uint64_t n, float *scores, uint64_t *bytes_read) {
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

/* ---------------------------------------------------------------------- *
 * fast scan kernels
 *
 * Every kernel decodes a channel's value at depth t as
 *     v = a (2^-t - 1) + sum_{p < t} bit_p * a 2^-p,
 * which is the reference value (c_t + 1/2 - 2^(t-1)) a / 2^(t-1) rewritten
 * plane by plane. Every partial sum is a multiple of a 2^-t of at most 5
 * bits, so each step is exact in float and the kernels' decoded values are
 * bit-identical to decode_value(); only the order of the q * v sums differs.
 * The kernels then add q_h * v into every head's scores: G multiply-adds per
 * active channel and token, plus t cheap decode steps.
 *
 * Bit i of a plane word is token i. The kernels expand 8 bits at a time to
 * 8 floats 0/1 through bit_expand (portable, AVX2), or use 16 bits directly
 * as an AVX-512 lane mask.
 * ---------------------------------------------------------------------- */

#define EXPAND_ROW(x)                                                                              \
    {                                                                                              \
        (float)((x)&1), (float)(((x) >> 1) & 1), (float)(((x) >> 2) & 1), (float)(((x) >> 3) & 1), \
            (float)(((x) >> 4) & 1), (float)(((x) >> 5) & 1), (float)(((x) >> 6) & 1),             \
            (float)(((x) >> 7) & 1)                                                                \
    }
#define EXPAND_4(x) EXPAND_ROW(x), EXPAND_ROW((x) + 1), EXPAND_ROW((x) + 2), EXPAND_ROW((x) + 3)
#define EXPAND_16(x) EXPAND_4(x), EXPAND_4((x) + 4), EXPAND_4((x) + 8), EXPAND_4((x) + 12)
#define EXPAND_64(x) EXPAND_16(x), EXPAND_16((x) + 16), EXPAND_16((x) + 32), EXPAND_16((x) + 48)

/* bit_expand[b][l] = bit l of byte b, as a float. 8 KiB, stays in L1. */
static const float bit_expand[256][8]
    __attribute__((aligned(32))) = {EXPAND_64(0), EXPAND_64(64), EXPAND_64(128), EXPAND_64(192)};

/* Channels handled per pass and blocks per staged tile. The tile tables
 * (about 13 KiB) live on the stack, so a scan allocates nothing. */
#define SCAN_PASS_CHANNELS 64
#define SCAN_TILE_BLOCKS 4

/* One pass of the scan: up to SCAN_PASS_CHANNELS active channels, sorted by
 * depth so that each kernel runs four loops of constant depth (no
 * data-dependent loop exits to mispredict). Channels of depth t are
 * k in [first[t-1], first[t]); their staged plane rows start at row[t]. */
typedef struct scan_job {
    uint64_t S;
    uint32_t dim;
    uint32_t group;
    uint64_t n;
    const float *queries;
    float *scores;
    uint32_t count;                        /* active channels in this pass */
    uint32_t first[FATHOM_PLANES + 1];     /* first[0] = 0, first[4] = count */
    uint32_t row[FATHOM_PLANES + 1];       /* first staged row of each depth's channels */
    uint32_t channels[SCAN_PASS_CHANNELS]; /* their indices, by depth */
} scan_job;

/* A tile of up to SCAN_TILE_BLOCKS blocks, staged (§3.6): the plane words
 * of the active channels copied into one small contiguous buffer. Read in
 * place, the words of one block lie 8*S bytes apart per plane, and with S a
 * power of two every one of them falls in the same L1 set; staging turns
 * that into short sequential copies. Channel k of depth t has rows
 * row[t] + (k - first[t-1]) * t + p for p < t.
 * coef[k][b][0] = a (2^-t - 1); coef[k][b][1 + p] = a 2^-p. */
typedef struct scan_tile {
    uint64_t words[SCAN_PASS_CHANNELS * FATHOM_PLANES][SCAN_TILE_BLOCKS];
    float coef[SCAN_PASS_CHANNELS][SCAN_TILE_BLOCKS][1 + FATHOM_PLANES];
} scan_tile;

#if defined(__GNUC__)
#define SCAN_INLINE static inline __attribute__((always_inline))
#else
#define SCAN_INLINE static inline
#endif

/* Stage blocks [b0, b0+nb) (segment-relative) of the pass's channels into
 * tile, with F16_TO_F32 converting the scales. */
#define SCAN_STAGE_TILE(job, view, b0, nb, tile, F16_TO_F32)                                       \
    do {                                                                                           \
        for (uint32_t t_ = 1; t_ <= FATHOM_PLANES; t_++) {                                         \
            uint32_t r_ = (job)->row[t_];                                                          \
            for (uint32_t k_ = (job)->first[t_ - 1]; k_ < (job)->first[t_]; k_++) {                \
                uint64_t j_ = (job)->channels[k_];                                                 \
                for (uint32_t p_ = 0; p_ < t_; p_++, r_++) {                                       \
                    const uint64_t *src_ =                                                         \
                        (view)->planes + (j_ * FATHOM_PLANES + p_) * (job)->S + (b0);              \
                    for (uint32_t b_ = 0; b_ < (nb); b_++) (tile)->words[r_][b_] = src_[b_];       \
                }                                                                                  \
                for (uint32_t b_ = 0; b_ < (nb); b_++) {                                           \
                    float a_ = F16_TO_F32((view)->scales[j_ * (job)->S + (b0) + b_]);              \
                    float *c_ = (tile)->coef[k_][b_];                                              \
                    c_[0] = a_ * (1.0f / (float)(1u << t_) - 1.0f);                                \
                    for (uint32_t p_ = 0; p_ < FATHOM_PLANES; p_++)                                \
                        c_[1 + p_] = a_ * (1.0f / (float)(1u << p_));                              \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* Calls BODY(T) for each depth with T a constant. */
#define SCAN_FOR_EACH_DEPTH(BODY)                                                                  \
    do {                                                                                           \
        BODY(1);                                                                                   \
        BODY(2);                                                                                   \
        BODY(3);                                                                                   \
        BODY(4);                                                                                   \
    } while (0)

/* Calls CALL(HC) with HC = min(4, heads left) as a constant, so that a
 * kernel's accumulators for HC heads can live in registers. */
#define SCAN_HEAD_CHUNK(hc, CALL)                                                                  \
    do {                                                                                           \
        switch (hc) {                                                                              \
        case 4: CALL(4); break;                                                                    \
        case 3: CALL(3); break;                                                                    \
        case 2: CALL(2); break;                                                                    \
        default: CALL(1); break;                                                                   \
        }                                                                                          \
    } while (0)

/* The loop shared by every kernel: segment -> staged tiles -> blocks -> head
 * chunks; BLOCK(b, h0, hc, first, valid) scores block b of the tile for heads
 * [h0, h0+hc) and adds the first `valid` tokens into the scores. */
#define SCAN_SEGMENT_LOOP(job, tile, view, seg_n, F16_TO_F32, BLOCK)                               \
    do {                                                                                           \
        const uint32_t blocks_ = (uint32_t)blocks_for(seg_n);                                      \
        for (uint32_t b0_ = 0; b0_ < blocks_; b0_ += SCAN_TILE_BLOCKS) {                           \
            uint32_t nb_ = blocks_ - b0_ < SCAN_TILE_BLOCKS ? blocks_ - b0_ : SCAN_TILE_BLOCKS;    \
            SCAN_STAGE_TILE(job, view, b0_, nb_, tile, F16_TO_F32);                                \
            for (uint32_t b_ = 0; b_ < nb_; b_++) {                                                \
                uint64_t off_ = (uint64_t)(b0_ + b_) * FATHOM_BLOCK_TOKENS;                        \
                uint64_t first_ = (view)->first_token + off_;                                      \
                uint32_t valid_ = (seg_n)-off_ < FATHOM_BLOCK_TOKENS ? (uint32_t)((seg_n)-off_)    \
                                                                     : FATHOM_BLOCK_TOKENS;        \
                for (uint32_t h0_ = 0; h0_ < (job)->group; h0_ += 4) {                             \
                    uint32_t hc_ = (job)->group - h0_ < 4 ? (job)->group - h0_ : 4;                \
                    BLOCK(b_, h0_, hc_, first_, valid_);                                           \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* Add acc[0..count) to scores row s (count < 64 only at the end of n). */
SCAN_INLINE void add_scores(float *s, const float *acc, uint32_t count) {
    for (uint32_t i = 0; i < count; i++) s[i] += acc[i];
}

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

#if defined(__GNUC__) && defined(__x86_64__)
#define FATHOM_HAVE_X86_KERNELS 1
#include <cpuid.h>
#include <immintrin.h>
#include <stdatomic.h>

/* ---- AVX2 + FMA: 16 tokens x up to 4 heads of accumulators in registers ---- */

#define AVX2_TARGET __attribute__((target("avx2,fma,f16c")))

AVX2_TARGET SCAN_INLINE void avx2_channels(const scan_job *job, const scan_tile *tile, uint32_t b,
                                           const uint32_t T, uint32_t h0, const uint32_t HC,
                                           uint32_t quarter, __m256 acc[4][2]) {
    uint32_t r = job->row[T];
    for (uint32_t k = job->first[T - 1]; k < job->first[T]; k++, r += T) {
        const float *coef = tile->coef[k][b];
        __m256 v0 = _mm256_broadcast_ss(&coef[0]), v1 = v0;
        for (uint32_t p = 0; p < T; p++) {
            /* bytes 2*quarter, 2*quarter+1 of the word: tokens 16q .. 16q+15 (little endian) */
            const uint8_t *bytes = (const uint8_t *)&tile->words[r + p][b];
            __m256 wp = _mm256_broadcast_ss(&coef[1 + p]);
            v0 = _mm256_fmadd_ps(_mm256_load_ps(bit_expand[bytes[2 * quarter]]), wp, v0);
            v1 = _mm256_fmadd_ps(_mm256_load_ps(bit_expand[bytes[2 * quarter + 1]]), wp, v1);
        }
        const float *q = job->queries + (uint64_t)h0 * job->dim + job->channels[k];
        for (uint32_t h = 0; h < HC; h++) {
            __m256 qh = _mm256_broadcast_ss(q + (uint64_t)h * job->dim);
            acc[h][0] = _mm256_fmadd_ps(qh, v0, acc[h][0]);
            acc[h][1] = _mm256_fmadd_ps(qh, v1, acc[h][1]);
        }
    }
}

AVX2_TARGET SCAN_INLINE void avx2_quarter(const scan_job *job, const scan_tile *tile, uint32_t b,
                                          uint32_t h0, const uint32_t HC, uint32_t quarter,
                                          float *out) {
    __m256 acc[4][2];
    for (uint32_t h = 0; h < HC; h++) acc[h][0] = acc[h][1] = _mm256_setzero_ps();
#define AVX2_DEPTH(T) avx2_channels(job, tile, b, T, h0, HC, quarter, acc)
    SCAN_FOR_EACH_DEPTH(AVX2_DEPTH);
#undef AVX2_DEPTH
    for (uint32_t h = 0; h < HC; h++) {
        _mm256_storeu_ps(out + h * 16, acc[h][0]);
        _mm256_storeu_ps(out + h * 16 + 8, acc[h][1]);
    }
}

AVX2_TARGET static void avx2_block(const scan_job *job, const scan_tile *tile, uint32_t b,
                                   uint32_t h0, uint32_t hc, uint64_t first, uint32_t valid) {
    float out[4 * 16];
    for (uint32_t quarter = 0; quarter * 16 < valid; quarter++) {
        uint32_t count = valid - quarter * 16 < 16 ? valid - quarter * 16 : 16;
#define AVX2_QUARTER(HC) avx2_quarter(job, tile, b, h0, HC, quarter, out)
        SCAN_HEAD_CHUNK(hc, AVX2_QUARTER);
#undef AVX2_QUARTER
        for (uint32_t h = 0; h < hc; h++)
            add_scores(job->scores + (uint64_t)(h0 + h) * job->n + first + quarter * 16,
                       out + h * 16, count);
    }
}

AVX2_TARGET static void scan_segment_avx2(const scan_job *job, scan_tile *tile,
                                          const fathom_segment_view *view, uint64_t seg_n) {
#define AVX2_BLOCK(b, h0, hc, first, valid) avx2_block(job, tile, b, h0, hc, first, valid)
    SCAN_SEGMENT_LOOP(job, tile, view, seg_n, _cvtsh_ss, AVX2_BLOCK);
#undef AVX2_BLOCK
}

/* ---- AVX-512: a whole block (4 x 16 tokens) per head; plane bits are masks ---- */

#define AVX512_TARGET __attribute__((target("avx512f,fma,f16c")))

AVX512_TARGET SCAN_INLINE void avx512_channels(const scan_job *job, const scan_tile *tile,
                                               uint32_t b, const uint32_t T, uint32_t h0,
                                               const uint32_t HC, __m512 acc[4][4]) {
    uint32_t r = job->row[T];
    for (uint32_t k = job->first[T - 1]; k < job->first[T]; k++, r += T) {
        const float *coef = tile->coef[k][b];
        __m512 v[4];
        v[0] = v[1] = v[2] = v[3] = _mm512_set1_ps(coef[0]);
        for (uint32_t p = 0; p < T; p++) {
            uint64_t w = tile->words[r + p][b];
            __m512 wp = _mm512_set1_ps(coef[1 + p]);
            for (uint32_t g = 0; g < 4; g++)
                v[g] = _mm512_mask_add_ps(v[g], (__mmask16)(w >> (16 * g)), v[g], wp);
        }
        const float *q = job->queries + (uint64_t)h0 * job->dim + job->channels[k];
        for (uint32_t h = 0; h < HC; h++) {
            __m512 qh = _mm512_set1_ps(q[(uint64_t)h * job->dim]);
            for (uint32_t g = 0; g < 4; g++) acc[h][g] = _mm512_fmadd_ps(qh, v[g], acc[h][g]);
        }
    }
}

AVX512_TARGET SCAN_INLINE void avx512_heads(const scan_job *job, const scan_tile *tile, uint32_t b,
                                            uint32_t h0, const uint32_t HC, float *out) {
    __m512 acc[4][4];
    for (uint32_t h = 0; h < HC; h++)
        for (uint32_t g = 0; g < 4; g++) acc[h][g] = _mm512_setzero_ps();
#define AVX512_DEPTH(T) avx512_channels(job, tile, b, T, h0, HC, acc)
    SCAN_FOR_EACH_DEPTH(AVX512_DEPTH);
#undef AVX512_DEPTH
    for (uint32_t h = 0; h < HC; h++)
        for (uint32_t g = 0; g < 4; g++) _mm512_storeu_ps(out + h * 64 + g * 16, acc[h][g]);
}

AVX512_TARGET static void avx512_block(const scan_job *job, const scan_tile *tile, uint32_t b,
                                       uint32_t h0, uint32_t hc, uint64_t first, uint32_t valid) {
    float out[4 * 64];
#define AVX512_HEADS(HC) avx512_heads(job, tile, b, h0, HC, out)
    SCAN_HEAD_CHUNK(hc, AVX512_HEADS);
#undef AVX512_HEADS
    for (uint32_t h = 0; h < hc; h++)
        add_scores(job->scores + (uint64_t)(h0 + h) * job->n + first, out + h * 64, valid);
}

AVX512_TARGET static void scan_segment_avx512(const scan_job *job, scan_tile *tile,
                                              const fathom_segment_view *view, uint64_t seg_n) {
#define AVX512_BLOCK(b, h0, hc, first, valid) avx512_block(job, tile, b, h0, hc, first, valid)
    SCAN_SEGMENT_LOOP(job, tile, view, seg_n, _cvtsh_ss, AVX512_BLOCK);
#undef AVX512_BLOCK
}

/* CPU features from cpuid, with the OS's xgetbv check that it saves the
 * wider registers. Computed once (cpuid can trap to a hypervisor). */
enum { CPU_AVX2 = 1, CPU_AVX512 = 2, CPU_KNOWN = 4 };

static int cpu_detect(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return CPU_KNOWN;
    int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx || !fma || !f16c || __get_cpuid_max(0, NULL) < 7) return CPU_KNOWN;
    unsigned xcr0_lo, xcr0_hi;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    (void)xcr0_hi;
    if ((xcr0_lo & 0x6u) != 0x6u) return CPU_KNOWN; /* XMM and YMM state */
    __cpuid_count(7, 0, a, b, c, d);
    int flags = CPU_KNOWN;
    if ((b >> 5) & 1) flags |= CPU_AVX2;
    /* AVX-512F, and opmask + ZMM state saved by the OS */
    if ((flags & CPU_AVX2) && ((b >> 16) & 1) && (xcr0_lo & 0xe0u) == 0xe0u) flags |= CPU_AVX512;
    return flags;
}

static int cpu_flags(void) {
    static atomic_int cached; /* 0 until detected; racing threads store the same value */
    int flags = atomic_load_explicit(&cached, memory_order_relaxed);
    if (!flags) {
        flags = cpu_detect();
        atomic_store_explicit(&cached, flags, memory_order_relaxed);
    }
    return flags;
}

static int cpu_has_avx2(void) { return (cpu_flags() & CPU_AVX2) != 0; }
static int cpu_has_avx512(void) { return (cpu_flags() & CPU_AVX512) != 0; }
#endif /* x86-64 kernels */

int fathom_scan_kernel_available(fathom_scan_kernel kernel) {
    switch (kernel) {
    case FATHOM_SCAN_AUTO:
    case FATHOM_SCAN_REFERENCE:
    case FATHOM_SCAN_PORTABLE: return 1;
#ifdef FATHOM_HAVE_X86_KERNELS
    case FATHOM_SCAN_AVX2: return cpu_has_avx2();
    case FATHOM_SCAN_AVX512: return cpu_has_avx512();
#else
    case FATHOM_SCAN_AVX2:
    case FATHOM_SCAN_AVX512: return 0;
#endif
    }
    return 0;
}

typedef void (*scan_segment_fn)(const scan_job *, scan_tile *, const fathom_segment_view *,
                                uint64_t);

/* A scan call's working tables. */
typedef struct scan_work {
    scan_job job;
    scan_tile tile;
} scan_work;

static scan_segment_fn pick_kernel(fathom_scan_kernel kernel) {
#ifdef FATHOM_HAVE_X86_KERNELS
    if (kernel == FATHOM_SCAN_AVX512 || (kernel == FATHOM_SCAN_AUTO && cpu_has_avx512()))
        return scan_segment_avx512;
    if (kernel == FATHOM_SCAN_AVX2 || (kernel == FATHOM_SCAN_AUTO && cpu_has_avx2()))
        return scan_segment_avx2;
#endif
    (void)kernel;
    return scan_segment_portable;
}

int fathom_store_scan_with(fathom_scan_kernel kernel, const fathom_store *st, const uint8_t *depths,
                           const float *queries, uint32_t group, uint64_t n, float *scores,
                           uint64_t *bytes_read) {
    if (kernel == FATHOM_SCAN_REFERENCE)
        return fathom_store_scan_reference(st, depths, queries, group, n, scores, bytes_read);
    FATHOM_CHECK_ARG(kernel == FATHOM_SCAN_AUTO || kernel == FATHOM_SCAN_PORTABLE ||
                         kernel == FATHOM_SCAN_AVX2 || kernel == FATHOM_SCAN_AVX512,
                     "store_scan: unknown kernel %d", (int)kernel);
    FATHOM_CHECK(!fathom_scan_kernel_available(kernel), FATHOM_ERR_UNSUPPORTED,
                 "store_scan: kernel %d is not available on this CPU", (int)kernel);
    uint64_t bytes;
    FATHOM_TRY(check_scan_args(st, depths, queries, group, n, scores, &bytes));
    scan_work work;
    scan_job *job = &work.job;
    scan_segment_fn segment_fn = pick_kernel(kernel);
    memset(scores, 0, (size_t)(group * n) * sizeof(float));
    job->S = st->segment_blocks;
    job->dim = st->dim;
    job->group = group;
    job->n = n;
    job->queries = queries;
    job->scores = scores;
    const uint64_t seg_tokens = (uint64_t)st->segment_blocks * FATHOM_BLOCK_TOKENS;
    /* Passes of up to SCAN_PASS_CHANNELS active channels; each adds into scores. */
    for (uint32_t j = 0; j < st->dim;) {
        /* the next up to SCAN_PASS_CHANNELS active channels, bucketed by depth */
        uint32_t per_depth[FATHOM_PLANES + 1] = {0}, end = j, count = 0;
        for (; end < st->dim && count < SCAN_PASS_CHANNELS; end++)
            if (depths[end]) per_depth[depths[end]]++, count++;
        if (!count) break;
        job->count = count;
        job->first[0] = 0;
        job->row[0] = job->row[1] = 0;
        for (uint32_t t = 1; t <= FATHOM_PLANES; t++) {
            job->first[t] = job->first[t - 1] + per_depth[t];
            if (t > 1) job->row[t] = job->row[t - 1] + (t - 1) * per_depth[t - 1];
        }
        uint32_t fill[FATHOM_PLANES];
        for (uint32_t t = 0; t < FATHOM_PLANES; t++) fill[t] = job->first[t];
        for (; j < end; j++)
            if (depths[j]) job->channels[fill[depths[j] - 1]++] = j;
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

/* Shared parts of the scan kernels (scan.c, scan_x86.c): the pass and tile
 * tables and the loops every kernel runs. Not installed. */
#ifndef FATHOM_SCAN_INTERNAL_H
#define FATHOM_SCAN_INTERNAL_H

#include "cpu.h"
#include "internal.h"
#include "store_internal.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

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


/* bit_expand[b][l] = bit l of byte b, as a float. 8 KiB, stays in L1. */
extern const float fathom_bit_expand[256][8];
#define bit_expand fathom_bit_expand

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

#define SCAN_INLINE FATHOM_INLINE

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
        const uint32_t blocks_ = (uint32_t)fathom_blocks_for(seg_n);                                      \
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

/* ---- the tiled kernels: token ranges, one decode per block, then a GEMM ----
 *
 * For each pass and chunk of up to 4 heads, a tile of up to
 * SCAN2_TILE_BLOCKS blocks (one 64-byte line of every staged plane row) is
 * staged as above; each block is decoded once, shared by the chunk's heads
 * (the portable kernel: into dec[k][64], the exact values; the AVX2 kernel:
 * into code bytes, whose exact values it forms 8 at a time) and then
 * multiplied with the staged queries q[k][h]: for every token and head,
 * acc = fma(q[k][h], value, acc) over k in pass order from acc = 0 (the
 * portable kernel: a multiply then an add), exactly the operations and
 * order of the kernels above. The
 * first pass stores 0.0f + acc, later passes add acc into the score (the
 * older kernels' memset + add), so the scores are bit-identical to theirs. */
#define SCAN2_TILE_BLOCKS 8

/* ---- the grouped-table ("LUT") scan: the definition ----
 *
 * An opt-in mode (FATHOM_SCAN_GROUPED_*, store_internal.h) whose scores
 * differ from the exact kernels' in their float rounding, not in what they
 * sum. Per pass (scan_next_pass: up to SCAN_PASS_CHANNELS active channels,
 * ordered by depth, then index) the channels are packed into groups of at
 * most 4 plane rows by scan_group_pass, in this order:
 *   1. each depth-4 channel alone;
 *   2. each depth-3 channel, with the first unused depth-1 channel (if any);
 *   3. the depth-2 channels by pairs; an odd last one with up to two unused
 *      depth-1 channels;
 *   4. the unused depth-1 channels by fours.
 * Members keep that order; a member's planes p < t sit at nibble bits
 * bit + p, in member order from bit 0. For head h, block b and group g the
 * table entry of nibble v is
 *     T[v] = fma(q_hm, val_m(v), ... fma(q_h1, val_1(v), +0.0f))
 * over the members in order, val_m(v) = a_mb (2 c + 1 - 2^t) / 2^t, c the
 * member's depth-t code read from v (its exact decoded value, as in every
 * kernel). A token's pass sum acc starts at +0.0f and takes the groups in
 * order: acc = acc + T_g(v) at the token's nibble v, except that a group of
 * one channel (a table of one product) adds acc = fma(q_h1, val_1(v), acc),
 * as the exact kernels do, at the same cost; the score is 0.0f + acc
 * after the first pass and score + acc after each later one, as the exact
 * kernels combine passes. fathom_store_scan_grouped_reference computes
 * exactly that, token by token; every grouped kernel is bit-identical to it. */
#define SCAN_GROUP_ROWS 4

typedef struct scan_groups {
    uint32_t count;                         /* groups in the pass */
    uint32_t first[SCAN_PASS_CHANNELS + 1]; /* members of group g: [first[g], first[g + 1]) */
    uint8_t member[SCAN_PASS_CHANNELS];     /* pass index k of each member, group by group */
    uint8_t bit[SCAN_PASS_CHANNELS];        /* each member's first nibble bit */
    uint8_t depth[SCAN_PASS_CHANNELS];      /* each member's depth */
} scan_groups;

/* The groups of a pass whose depth-t channels are k in [first[t-1], first[t]). */
void fathom_scan_group_pass(const uint32_t first[FATHOM_PLANES + 1], scan_groups *groups);

/* The next pass (scan.c): up to SCAN_PASS_CHANNELS active channels from
 * channel j on, bucketed by depth (see scan_job). Returns the channel after
 * the pass; *count = 0 when no active channel is left. */
uint32_t fathom_scan_next_pass(uint32_t dim, const uint8_t *depths, uint32_t j, uint32_t *count,
                               uint32_t first[FATHOM_PLANES + 1], uint32_t row[FATHOM_PLANES + 1],
                               uint32_t channels[SCAN_PASS_CHANNELS]);

/* fathom_store_scan's argument checks (scan.c); *bytes_read gets the bytes
 * the scan reads. */
int fathom_store_scan_check(const fathom_store *store, const uint8_t *depths, const float *queries,
                            uint32_t group, uint64_t n, const float *scores, uint64_t *bytes_read);

/* The value at scale 1 of the depth-t code that nibble v holds at bits
 * bit .. bit + t - 1 (plane p at bit + p, the code's bit t - 1 - p):
 * (2 c + 1 - 2^t) / 2^t, at most 5 significant bits, so its product with an
 * fp16 scale is exact. */
FATHOM_INLINE float scan_group_unit(uint32_t v, uint32_t bit, uint32_t t) {
    uint32_t c = 0;
    for (uint32_t p = 0; p < t; p++) c |= ((v >> (bit + p)) & 1u) << (t - 1 - p);
    return (float)(2 * (int)c + 1 - (1 << t)) / (float)(1u << t);
}

/* ---- the integer ("VNNI") scan: the definition ----
 *
 * An opt-in mode (FATHOM_SCAN_INT8_*, store_internal.h) whose scores
 * approximate the exact ones. Per pass (scan_next_pass: channels k <
 * count in pass order), 64-token block b and head h, with a_k the block's
 * scale of channel k (fp16 to float) and t_k its depth:
 *   1. W_k = q_hk * a_k (a float multiply);
 *   2. m = max_k |W_k|. If some W_k is not finite, the pass adds NaN to
 *      every token of the block (s = NaN below). If m < 2^-100, every
 *      w_k = 0 and s = 0 (the pass adds +0).
 *   3. otherwise, with L = 127 levels (int8) or 32512 (the int16 variant),
 *      r = (float)L / m and s = m / (float)(16 L) (float divisions), and
 *      w_k = fmaf(W_k, r, 0x1.8p23f) - 0x1.8p23f, the exact product
 *      W_k r rounded to the nearest integer, ties to even (|w_k| <= L);
 *   4. per token, with c_k its depth-t_k code and d_k = (2 c_k + 1) 2^(4-t_k)
 *      - 16 (an integer in -15..15; the decoded value is a_k d_k / 16), the
 *      exact integer T = sum_k w_k d_k, and the pass's term P = s * (float)T
 *      (int8: |T| < 2^24, the conversion is exact; int16: |T| < 2^25, it
 *      rounds to nearest, ties to even);
 *   5. the score is 0.0f + P after the first pass, score + P after each
 *      later one (as the exact kernels combine passes).
 * Only steps 1-3 and 5 round, in one fixed way, so fathom_store_scan_int8_reference
 * (token by token) and every int8 kernel give the same scores, bit for bit.
 * Against the exact sum, channel k's term q_hk a_k d_k / 16 is replaced by
 * (m / L) w_k d_k / 16: off by at most (m / 2L)(1 + 2^-15) |d_k| / 16,
 * plus the roundings of s, (float)T and s * T (2^-24 of |P| each).
 * The int16 kernels run each dot product twice: w = 256 w_hi + w_lo with
 * w_lo the low byte of w as a signed byte and w_hi = (w - w_lo) / 256, both
 * in -127..127 since |w| <= 32512 = 127 * 256.
 *
 * The kernels split T as K + sum_k w_k 2 c'_k with c'_k = c_k 2^(4-t_k)
 * (the code filled to 4 bits with zeros: the first t_k planes at bits 3..0,
 * unread planes zero) and K = sum_k w_k (2^(4-t_k) - 16), per block and
 * head: the token sum is a dot product of u8 codes with s8 weights
 * (vpdpbusd). */
#define SCAN_INT8_MAGIC 0x1.8p23f /* 1.5 * 2^23: adding it rounds to an integer */
#define SCAN_INT8_TINY 0x1p-100f  /* below it a block's weights are all 0 */
#define SCAN_INT8_LEVELS 127
#define SCAN_INT16_LEVELS 32512

/* The weights of one pass, block and head at `levels` (SCAN_INT8_LEVELS or
 * SCAN_INT16_LEVELS): w[k] for k < count, K and the scale s (steps 1-3
 * above); a[k] the block's scales, q[k] the head's query values, t[k] the
 * depths. */
FATHOM_INLINE void scan_int8_weights(uint32_t count, const float *a, const float *q,
                                     const uint32_t *t, int32_t levels, int32_t *w, int32_t *K,
                                     float *s) {
    float m = 0.0f;
    int finite = 1;
    for (uint32_t k = 0; k < count; k++) {
        const float W = q[k] * a[k], x = fabsf(W);
        if (!(x <= 3.4028234663852886e38f)) finite = 0; /* inf or NaN */
        else if (x > m) m = x;
    }
    int32_t sum = 0;
    for (uint32_t k = 0; k < count; k++) w[k] = 0;
    if (!finite) {
        *K = 0;
        *s = __builtin_nanf("");
        return;
    }
    if (m < SCAN_INT8_TINY) {
        *K = 0;
        *s = 0.0f;
        return;
    }
    const float r = (float)levels / m;
    for (uint32_t k = 0; k < count; k++) {
        const float W = q[k] * a[k];
        const int32_t wk = (int32_t)(fmaf(W, r, SCAN_INT8_MAGIC) - SCAN_INT8_MAGIC);
        w[k] = wk;
        sum += wk * ((int32_t)(16u >> t[k]) - 16);
    }
    *K = sum;
    *s = m / (float)(16 * levels);
}

typedef struct scan2_pass {
    uint64_t S;                            /* segment blocks */
    uint32_t count;                        /* active channels in this pass */
    uint32_t first[FATHOM_PLANES + 1];     /* as scan_job */
    uint32_t row[FATHOM_PLANES + 1];       /* as scan_job */
    uint32_t channels[SCAN_PASS_CHANNELS]; /* as scan_job */
    uint32_t heads;                        /* heads in this chunk, 1..4 */
    int add;                               /* 0: store 0.0f + acc; 1: add acc to the score */
    int stream; /* with add 0: full blocks of 64-byte aligned rows go straight to memory */
    float q[SCAN_PASS_CHANNELS][4];        /* q[k][h] = query h's value of channels[k] */
    scan_groups groups;                    /* the grouped kernels' groups of this pass */
} scan2_pass;

/* Tiles ahead of the one being staged whose lines are prefetched: a pass
 * reads its plane rows as many short streams, one line per row and tile.
 * A prefetch stays inside the tile's segment, so a segment's first tiles
 * are never prefetched: in segments of 64 blocks (the KV tier's) 4 tiles
 * ahead leave 4 of its 8 tiles without one, 2 tiles ahead 2. 2 measured
 * faster there and the same at 1024 blocks (bench_scan --segment-blocks);
 * prefetching the next segment's first tiles as well measured no faster. */
#define SCAN2_PREFETCH_TILES 2

/* Prefetch into L2 (prefetcht1), not L1: a tile's rows lie S * 8 bytes
 * apart, a multiple of 4 KiB at the default S, so they all map to one L1
 * set and the 48-128 lines of a pass, prefetched into L1, evict each other
 * before the copy reads them. */
#define SCAN2_PREFETCH(p) __builtin_prefetch((p), 0, 2)

/* The staged plane words (rows as in scan_tile) and the raw fp16 scales of
 * a tile; the kernels form each block's coefficients from its scale
 * (products with powers of two and 2^-t - 1: exact, so equal to scan_tile's).
 * The AVX-512 kernel has them formed for the whole tile first, eight blocks
 * per vector (scan2_coef_fn), into coef[k][c][b]: c = 0 the value of code 0
 * (scan2_coef0), c = 1 + p what bit p adds (scan2_coefp), c = 5 the value
 * after the first plane's bit alone, coef0 + coefp(0), exact. */
#define SCAN2_COEFS 6
typedef struct scan2_tile {
    uint64_t words[SCAN_PASS_CHANNELS * FATHOM_PLANES][SCAN2_TILE_BLOCKS] __attribute__((aligned(64)));
    uint16_t scales[SCAN_PASS_CHANNELS][SCAN2_TILE_BLOCKS];
    union {
        float coef[SCAN_PASS_CHANNELS][SCAN2_COEFS][SCAN2_TILE_BLOCKS];
        /* the table kernel's (scan_x86.c): per channel k, in the form its
         * depth t reads them (words[k] holds a depth-1 channel's plane):
         * vals[k] the 2 (t = 1) or 4 (t = 2) values of each block, block
         * after block; codes[k][b] block b's 2-bit codes (t = 2, codes[k]
         * read as 16 bytes a block) or code bytes (t >= 3); tab[k][b] its
         * 16 values (t >= 3) */
        struct {
            float vals[SCAN_PASS_CHANNELS][4 * SCAN2_TILE_BLOCKS];
            uint8_t codes[SCAN_PASS_CHANNELS][SCAN2_TILE_BLOCKS][64];
            float tab[SCAN_PASS_CHANNELS][SCAN2_TILE_BLOCKS][16];
        } t;
        /* the nibble kernel's (scan_x86.c): channels packed in pass order
         * into quads of at most 4 plane rows; idx[q] quad q's nibbles (token
         * i's 4 row bits), 4 lines of 8 qwords (NIB_BLOCK_OFFSET); per
         * channel k: tab[k][b] its 16 values of block b by nibble (or,
         * formed in the loop, unit[k] its row of nib_unit times a[k][b]),
         * start[k] whether it is its quad's first, bit[k] its first row's
         * bit in the nibble, a[k] its scales by block */
        struct {
            float tab[SCAN_PASS_CHANNELS][SCAN2_TILE_BLOCKS][16];
            uint64_t idx[SCAN_PASS_CHANNELS][4][8];
            const float *unit[SCAN_PASS_CHANNELS];
            uint8_t start[SCAN_PASS_CHANNELS];
            uint8_t bit[SCAN_PASS_CHANNELS];
            float a[SCAN_PASS_CHANNELS][SCAN2_TILE_BLOCKS];
        } n;
        /* the AVX-512 int8 kernel's (scan_x86.c): codes, per quad of
         * channels (pass order; zero past the last quad's channels), block
         * and half its code dwords (scan_x86.c), a packed quad's (depth
         * <= 2) as [quad][block][0]; per quad, block and head the quad's 4
         * weights as one dword; per block and head s / 8 and 8 K; per
         * channel its scales by block (int16: w the weights' low bytes, wh
         * their high bytes) */
        struct {
            uint8_t codes[SCAN_PASS_CHANNELS / 4][SCAN2_TILE_BLOCKS][2][64];
            int32_t w[SCAN_PASS_CHANNELS / 4][SCAN2_TILE_BLOCKS][4];
            int32_t wh[SCAN_PASS_CHANNELS / 4][SCAN2_TILE_BLOCKS][4]; /* int16: high bytes */
            float s8[SCAN2_TILE_BLOCKS][4];
            int32_t k8[SCAN2_TILE_BLOCKS][4];
            float a[SCAN_PASS_CHANNELS][SCAN2_TILE_BLOCKS];
        } i;
    } __attribute__((aligned(64)));
} scan2_tile;

/* Forms tile->coef of the pass's channels from tile->scales (all
 * SCAN2_TILE_BLOCKS columns; those past a short tile's end are unused). */
typedef void (*scan2_coef_fn)(const scan2_pass *pass, scan2_tile *tile);

/* A kernel's own staging, in place of the staged words, scales and
 * coefficients: reads blocks [b0, b0 + nb) of the pass's channels from a
 * segment into the tile in the form its block function reads, and, when
 * prefetch is set, prefetches the same rows `ahead` blocks further on. */
typedef void (*scan2_load_fn)(const scan2_pass *pass, const fathom_segment_view *view, uint32_t b0,
                              uint32_t nb, uint32_t ahead, int prefetch, scan2_tile *tile);

/* coef0 = a (2^-t - 1), the value of code 0 at depth t, for scale a. */
FATHOM_INLINE float scan2_coef0(float a, uint32_t t) { return a * (1.0f / (float)(1u << t) - 1.0f); }
/* coef_p = a 2^-p, what bit p of the code adds. */
FATHOM_INLINE float scan2_coefp(float a, uint32_t p) { return a * (1.0f / (float)(1u << p)); }

/* Scores tokens [0, valid) of block b of the tile for the pass's heads into
 * out[h * ld + i]; dec is scratch of SCAN_PASS_CHANNELS * 64 floats, aligned
 * to 64 bytes (the portable kernel's values; the AVX2 kernel's codes). */
typedef void (*scan2_block_fn)(const scan2_pass *pass, const scan2_tile *tile, uint32_t b,
                               float *dec, float *out, uint64_t ld, uint32_t valid);

/* Writes acc[0..count) of one head to out: 0.0f + acc, or out + acc when add. */
FATHOM_INLINE void scan2_put(float *out, const float *acc, uint32_t count, int add) {
    if (add)
        for (uint32_t i = 0; i < count; i++) out[i] += acc[i];
    else
        for (uint32_t i = 0; i < count; i++) out[i] = 0.0f + acc[i];
}

/* A kernel: scores the pass's channels over the first seg_n tokens of a
 * segment and adds them into job->scores. */
typedef void (*scan_segment_fn)(const scan_job *, scan_tile *, const fathom_segment_view *,
                                uint64_t);

/* ---- the candidate filter of scan_select.c ----
 *
 * A candidate is fathom_score_key(score) << 32 | ~position: larger values
 * rank first by fathom_select's rule, and no two are equal. */
FATHOM_INLINE uint64_t scan_candidate(float score, uint64_t position) {
    return (uint64_t)fathom_score_key(score) << 32 | (uint32_t)~(uint32_t)position;
}

/* Appends to out the candidates of scores s[i..n) (position pos0 + index)
 * that pass the threshold: not below thr, or above it when strict; NaN
 * always passes. Returns how many. */
FATHOM_INLINE uint32_t scan_filter_tail(const float *s, uint32_t i, uint32_t n, float thr,
                                        int strict, uint64_t pos0, uint64_t *out) {
    uint32_t c = 0;
    for (; i < n; i++)
        if (strict ? !(s[i] <= thr) : !(s[i] < thr)) out[c++] = scan_candidate(s[i], pos0 + i);
    return c;
}

/* The portable grouped kernel (scan_grouped.c), on scan2_stage's tile. */
void fathom_scan2_block_grouped_portable(const scan2_pass *pass, const scan2_tile *tile,
                                         uint32_t b, float *dec, float *out, uint64_t ld,
                                         uint32_t valid);

/* The portable int8 kernel (scan_int8.c), on scan2_stage's tile. */
void fathom_scan2_block_int8_portable(const scan2_pass *pass, const scan2_tile *tile, uint32_t b,
                                      float *dec, float *out, uint64_t ld, uint32_t valid);
void fathom_scan2_block_int16_portable(const scan2_pass *pass, const scan2_tile *tile, uint32_t b,
                                       float *dec, float *out, uint64_t ld, uint32_t valid);

#ifdef FATHOM_X86
void fathom_scan2_load_avx512_int8(const scan2_pass *pass, const fathom_segment_view *view,
                                   uint32_t b0, uint32_t nb, uint32_t ahead, int prefetch,
                                   scan2_tile *tile);
void fathom_scan2_block_avx512_int8(const scan2_pass *pass, const scan2_tile *tile, uint32_t b,
                                    float *dec, float *out, uint64_t ld, uint32_t valid);
void fathom_scan2_load_avx512_int16(const scan2_pass *pass, const fathom_segment_view *view,
                                    uint32_t b0, uint32_t nb, uint32_t ahead, int prefetch,
                                    scan2_tile *tile);
void fathom_scan2_block_avx512_int16(const scan2_pass *pass, const scan2_tile *tile, uint32_t b,
                                     float *dec, float *out, uint64_t ld, uint32_t valid);
uint32_t fathom_scan_filter_avx2(const float *s, uint32_t n, float thr, int strict, uint64_t pos0,
                                 uint64_t *out);
uint32_t fathom_scan_filter_avx512(const float *s, uint32_t n, float thr, int strict,
                                   uint64_t pos0, uint64_t *out);
void fathom_scan_segment_avx2(const scan_job *job, scan_tile *tile,
                              const fathom_segment_view *view, uint64_t seg_n);
void fathom_scan_segment_avx512(const scan_job *job, scan_tile *tile,
                                const fathom_segment_view *view, uint64_t seg_n);
void fathom_scan2_block_avx2(const scan2_pass *pass, const scan2_tile *tile, uint32_t b,
                             float *dec, float *out, uint64_t ld, uint32_t valid);
void fathom_scan2_block_avx512(const scan2_pass *pass, const scan2_tile *tile, uint32_t b,
                               float *dec, float *out, uint64_t ld, uint32_t valid);
void fathom_scan2_load_avx512_masks(const scan2_pass *pass, const fathom_segment_view *view,
                                    uint32_t b0, uint32_t nb, uint32_t ahead, int prefetch,
                                    scan2_tile *tile);
void fathom_scan2_load_avx512_tab(const scan2_pass *pass, const fathom_segment_view *view,
                                  uint32_t b0, uint32_t nb, uint32_t ahead, int prefetch,
                                  scan2_tile *tile);
void fathom_scan2_load_avx512_nib(const scan2_pass *pass, const fathom_segment_view *view,
                                  uint32_t b0, uint32_t nb, uint32_t ahead, int prefetch,
                                  scan2_tile *tile);
void fathom_scan2_block_avx512_nib(const scan2_pass *pass, const scan2_tile *tile, uint32_t b,
                                   float *dec, float *out, uint64_t ld, uint32_t valid);
void fathom_scan2_load_avx512_nib_inloop(const scan2_pass *pass, const fathom_segment_view *view,
                                         uint32_t b0, uint32_t nb, uint32_t ahead, int prefetch,
                                         scan2_tile *tile);
void fathom_scan2_block_avx512_nib_inloop(const scan2_pass *pass, const scan2_tile *tile,
                                          uint32_t b, float *dec, float *out, uint64_t ld,
                                          uint32_t valid);
void fathom_scan2_block_avx512_tab(const scan2_pass *pass, const scan2_tile *tile, uint32_t b,
                                   float *dec, float *out, uint64_t ld, uint32_t valid);
void fathom_scan2_coef_x86(const scan2_pass *pass, scan2_tile *tile);
void fathom_scan2_load_avx512_grouped(const scan2_pass *pass, const fathom_segment_view *view,
                                      uint32_t b0, uint32_t nb, uint32_t ahead, int prefetch,
                                      scan2_tile *tile);
void fathom_scan2_block_avx512_grouped(const scan2_pass *pass, const scan2_tile *tile, uint32_t b,
                                       float *dec, float *out, uint64_t ld, uint32_t valid);
#endif

#endif /* FATHOM_SCAN_INTERNAL_H */

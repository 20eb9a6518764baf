/* scan_x86 — the AVX2 and AVX-512 scan kernels (see scan.c for the
 * contract). Each function carries its own target attribute, so this file
 * builds without -march flags; scan.c calls them only when cpu.h says the
 * CPU runs them. */
#include "scan_internal.h"

#ifdef FATHOM_X86
#include <immintrin.h>

/* ---- AVX2 + FMA: 16 tokens x up to 4 heads of accumulators in registers ---- */

#define AVX2_TARGET FATHOM_TARGET_AVX2

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

AVX2_TARGET void fathom_scan_segment_avx2(const scan_job *job, scan_tile *tile,
                                          const fathom_segment_view *view, uint64_t seg_n) {
#define AVX2_BLOCK(b, h0, hc, first, valid) avx2_block(job, tile, b, h0, hc, first, valid)
    SCAN_SEGMENT_LOOP(job, tile, view, seg_n, _cvtsh_ss, AVX2_BLOCK);
#undef AVX2_BLOCK
}

/* ---- AVX-512: a whole block (4 x 16 tokens) per head; plane bits are masks ---- */

#define AVX512_TARGET FATHOM_TARGET_AVX512

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

AVX512_TARGET void fathom_scan_segment_avx512(const scan_job *job, scan_tile *tile,
                                              const fathom_segment_view *view, uint64_t seg_n) {
#define AVX512_BLOCK(b, h0, hc, first, valid) avx512_block(job, tile, b, h0, hc, first, valid)
    SCAN_SEGMENT_LOOP(job, tile, view, seg_n, _cvtsh_ss, AVX512_BLOCK);
#undef AVX512_BLOCK
}
/* ---- tiled kernels: the coefficients of a tile, 8 blocks per vector ---- */

/* Channel k's coefficients from its 8 blocks' scales a, m0 = 2^-t - 1. */
AVX2_TARGET SCAN_INLINE void coef_store(scan2_tile *tile, uint32_t k, __m256 a, __m256 m0) {
    const __m256 c0 = _mm256_mul_ps(a, m0); /* scan2_coef0 */
    float(*c)[SCAN2_TILE_BLOCKS] = tile->coef[k];
    _mm256_store_ps(c[0], c0);
    for (uint32_t p = 0; p < FATHOM_PLANES; p++) /* scan2_coefp */
        _mm256_store_ps(c[1 + p], _mm256_mul_ps(a, _mm256_set1_ps(1.0f / (float)(1u << p))));
    _mm256_store_ps(c[5], _mm256_add_ps(c0, a));
}

AVX2_TARGET void fathom_scan2_coef_x86(const scan2_pass *ps, scan2_tile *tile) {
    for (uint32_t t = 1; t <= FATHOM_PLANES; t++) {
        const __m256 m0 = _mm256_set1_ps(1.0f / (float)(1u << t) - 1.0f);
        for (uint32_t k = ps->first[t - 1]; k < ps->first[t]; k++)
            coef_store(tile, k, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)tile->scales[k])), m0);
    }
}

/* ---- tiled AVX2: a block's codes as bytes, then convert and multiply ----
 *
 * The value of code c at depth t (plane 0 the code's top bit) is
 *     v = c * a 2^(1-t) + a (2^-t - 1) = a (2c + 1 - 2^t) / 2^t,
 * a multiple of a 2^-t (a: the fp16 scale, 11 significant bits) of at most
 * 15 significant bits: the product and the sum are exact, so one fused
 * multiply-add of the converted code gives the value of the other kernels
 * bit for bit (their plane-by-plane sums are exact too; the two can differ
 * only in the sign of a zero value when a = 0, which a fused multiply-add
 * into an accumulator that starts at +0 cannot see). Per block, each
 * channel's planes become 64 code bytes with byte shuffles and compares;
 * the multiply then takes 8 codes at a time (vpmovzxbd), converts them and
 * scales them with one multiply-add, the same for every depth, and adds
 * q_h * v into 16 tokens x 4 heads of accumulators in pass order. */

/* A block's scratch: each channel's 64 code bytes (byte i: token i) and
 * its step a 2^(1-t) and offset a (2^-t - 1). */
typedef struct avx2_scratch {
    uint8_t codes[SCAN_PASS_CHANNELS][FATHOM_BLOCK_TOKENS];
    float step[SCAN_PASS_CHANNELS], offset[SCAN_PASS_CHANNELS];
} avx2_scratch;

/* Codes and coefficients of block b for the pass's channels of depth T (a
 * constant, so that the loop over the planes unrolls). */
AVX2_TARGET SCAN_INLINE void avx2_prepare_depth(const scan2_pass *ps, const scan2_tile *tile,
                                                uint32_t b, const uint32_t T, avx2_scratch *sc) {
    /* byte i of the lower (upper) half takes the byte of token i (32 + i) of the plane word */
    const __m256i rep_lo = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202,
                                              0x0303030303030303);
    const __m256i rep_hi = _mm256_add_epi8(rep_lo, _mm256_set1_epi8(4));
    const __m256i sel = _mm256_set1_epi64x((long long)0x8040201008040201ull); /* bit i % 8 */
    uint32_t r = ps->row[T];
    for (uint32_t k = ps->first[T - 1]; k < ps->first[T]; k++, r += T) {
        const float a = _cvtsh_ss(tile->scales[k][b]);
        sc->step[k] = scan2_coefp(a, T - 1);
        sc->offset[k] = scan2_coef0(a, T);
        __m256i lo = _mm256_setzero_si256(), hi = lo;
        for (uint32_t p = 0; p < T; p++) {
            const __m256i x = _mm256_castpd_si256(
                _mm256_broadcast_sd((const double *)(const void *)&tile->words[r + p][b]));
            const __m256i w = _mm256_set1_epi8((char)(1 << (T - 1 - p)));
            const __m256i bl = _mm256_and_si256(_mm256_shuffle_epi8(x, rep_lo), sel);
            const __m256i bh = _mm256_and_si256(_mm256_shuffle_epi8(x, rep_hi), sel);
            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(bl, sel), w));
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(bh, sel), w));
        }
        _mm256_store_si256((__m256i *)(void *)sc->codes[k], lo);
        _mm256_store_si256((__m256i *)(void *)(sc->codes[k] + 32), hi);
    }
}

/* Codes and coefficients of block b for the pass's channels. */
AVX2_TARGET static void avx2_prepare(const scan2_pass *ps, const scan2_tile *tile, uint32_t b,
                                     avx2_scratch *sc) {
#define AVX2_PREPARE(T) avx2_prepare_depth(ps, tile, b, T, sc)
    SCAN_FOR_EACH_DEPTH(AVX2_PREPARE);
#undef AVX2_PREPARE
}

#define AVX2_GEMM_HEAD(i, acc0, acc1)                                                              \
    if (HC > i) {                                                                                  \
        const __m256 qh = _mm256_broadcast_ss(&ps->q[k][i]);                                       \
        acc0 = _mm256_fmadd_ps(qh, v0, acc0);                                                      \
        acc1 = _mm256_fmadd_ps(qh, v1, acc1);                                                      \
    }

/* Writes one head's 16 accumulated scores (n < 16: the first n). */
AVX2_TARGET SCAN_INLINE void avx2_put16(float *o, __m256 a0, __m256 a1, uint32_t n, int add) {
    if (n == 16) {
        __m256 base0 = add ? _mm256_loadu_ps(o) : _mm256_setzero_ps();
        __m256 base1 = add ? _mm256_loadu_ps(o + 8) : _mm256_setzero_ps();
        _mm256_storeu_ps(o, _mm256_add_ps(base0, a0));
        _mm256_storeu_ps(o + 8, _mm256_add_ps(base1, a1));
    } else {
        float a[16];
        _mm256_storeu_ps(a, a0);
        _mm256_storeu_ps(a + 8, a1);
        scan2_put(o, a, n, add);
    }
}

/* The 8 values of channel k, tokens i .. i + 7. */
AVX2_TARGET SCAN_INLINE __m256 avx2_values8(const avx2_scratch *sc, uint32_t k, uint32_t i,
                                            __m256 step, __m256 offset) {
    const __m128i c = _mm_loadl_epi64((const __m128i *)(const void *)(sc->codes[k] + i));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(c)), step, offset);
}

/* Tokens 16 g .. 16 g + 15 x HC heads; the accumulators are named variables
 * so that they stay in registers. */
AVX2_TARGET SCAN_INLINE void avx2_tquarter(const scan2_pass *ps, const avx2_scratch *sc, uint32_t g,
                                          const uint32_t HC, float *out, uint64_t ld,
                                          uint32_t valid) {
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00,
           a30 = a00, a31 = a00;
    const uint32_t count = ps->count; /* a local: not reloaded every channel */
#pragma GCC unroll 2
    for (uint32_t k = 0; k < count; k++) {
        const __m256 step = _mm256_broadcast_ss(&sc->step[k]);
        const __m256 offset = _mm256_broadcast_ss(&sc->offset[k]);
        const __m256 v0 = avx2_values8(sc, k, 16 * g, step, offset);
        const __m256 v1 = avx2_values8(sc, k, 16 * g + 8, step, offset);
        AVX2_GEMM_HEAD(0, a00, a01)
        AVX2_GEMM_HEAD(1, a10, a11)
        AVX2_GEMM_HEAD(2, a20, a21)
        AVX2_GEMM_HEAD(3, a30, a31)
    }
    const uint32_t n = valid - g * 16 < 16 ? valid - g * 16 : 16;
    float *o = out + g * 16;
    avx2_put16(o, a00, a01, n, ps->add);
    if (HC > 1) avx2_put16(o + ld, a10, a11, n, ps->add);
    if (HC > 2) avx2_put16(o + 2 * ld, a20, a21, n, ps->add);
    if (HC > 3) avx2_put16(o + 3 * ld, a30, a31, n, ps->add);
}
#undef AVX2_GEMM_HEAD

AVX2_TARGET SCAN_INLINE void avx2_tblock(const scan2_pass *ps, const avx2_scratch *sc,
                                        const uint32_t HC, float *out, uint64_t ld,
                                        uint32_t valid) {
    for (uint32_t g = 0; g * 16 < valid; g++) avx2_tquarter(ps, sc, g, HC, out, ld, valid);
}

AVX2_TARGET void fathom_scan2_block_avx2(const scan2_pass *ps, const scan2_tile *tile, uint32_t b,
                                         float *dec, float *out, uint64_t ld, uint32_t valid) {
    _Static_assert(sizeof(avx2_scratch) <= SCAN_PASS_CHANNELS * FATHOM_BLOCK_TOKENS * sizeof(float),
                   "the block's scratch fits in dec");
    avx2_scratch *sc = (avx2_scratch *)(void *)dec;
    avx2_prepare(ps, tile, b, sc);
#define AVX2_BLOCK(HC) avx2_tblock(ps, sc, HC, out, ld, valid)
    SCAN_HEAD_CHUNK(ps->heads, AVX2_BLOCK);
#undef AVX2_BLOCK
}

/* ---- tiled AVX-512: decode fused with the multiply, 64 tokens x 4 heads ----
 *
 * A plane's 16-bit piece for 16 tokens is loaded straight into a mask
 * register; the first plane picks coef0 or coef0 + coefp(0) (a blend), each
 * further plane adds its coefp under its mask: the values of the other
 * kernels, with one vector operation per plane and 16 tokens. */

/* The 16 bits of plane row r, block b, tokens 16 g .. 16 g + 15, loaded
 * straight into a mask register (kmovw from memory: a load, where the
 * compiler's movzx + kmovw from a general register would take the vector
 * ALU port that the multiply-adds need). */
AVX512_TARGET SCAN_INLINE __mmask16 tile_mask16(const scan2_tile *tile, uint32_t r, uint32_t b,
                                                uint32_t g) {
    typedef uint16_t __attribute__((may_alias)) u16_alias;
    const u16_alias *p = (const u16_alias *)((const unsigned char *)&tile->words[r][b] + 2 * g);
    __mmask16 m;
    __asm__("kmovw %1, %0" : "=Yk"(m) : "m"(*p));
    return m;
}

/* v = m ? c1 : c0, one vblendmps (the compiler's masked move needs a copy of c0 first). */
AVX512_TARGET SCAN_INLINE __m512 blend16(__mmask16 m, __m512 c0, __m512 c1) {
    __m512 v;
    __asm__("vblendmps %3, %2, %0%{%1%}" : "=v"(v) : "Yk"(m), "v"(c0), "v"(c1));
    return v;
}

/* v += w where m is set, in place. */
AVX512_TARGET SCAN_INLINE void mask_add16(__m512 *v, __mmask16 m, __m512 w) {
    __asm__("vaddps %2, %0, %0%{%1%}" : "+v"(*v) : "Yk"(m), "v"(w));
}

/* acc[h][g] = fma(q_h, v[g], acc[h][g]) for the chunk's heads: channel k's
 * multiply-adds, in pass order. */
AVX512_TARGET SCAN_INLINE void avx512_channel_fma(const scan2_pass *ps, uint32_t k, const uint32_t HC,
                                                  const __m512 v[4], __m512 acc[4][4]) {
#pragma GCC unroll 4
    for (uint32_t h = 0; h < HC; h++) {
        const __m512 qh = _mm512_set1_ps(ps->q[k][h]);
#pragma GCC unroll 4
        for (uint32_t g = 0; g < 4; g++) acc[h][g] = _mm512_fmadd_ps(qh, v[g], acc[h][g]);
    }
}

AVX512_TARGET SCAN_INLINE void avx512_fused_depth(const scan2_pass *ps, const scan2_tile *tile,
                                                  uint32_t b, const uint32_t T, const uint32_t HC,
                                                  __m512 acc[4][4]) {
    uint32_t r = ps->row[T];
    for (uint32_t k = ps->first[T - 1]; k < ps->first[T]; k++, r += T) {
        const float(*cf)[SCAN2_TILE_BLOCKS] = tile->coef[k];
        const __m512 c0 = _mm512_set1_ps(cf[0][b]), c1 = _mm512_set1_ps(cf[5][b]);
        __m512 v[4];
#pragma GCC unroll 4
        for (uint32_t g = 0; g < 4; g++)
            v[g] = blend16(tile_mask16(tile, r, b, g), c0, c1);
        for (uint32_t p = 1; p < T; p++) {
            const __m512 wp = _mm512_set1_ps(cf[1 + p][b]);
#pragma GCC unroll 4
            for (uint32_t g = 0; g < 4; g++)
                mask_add16(&v[g], tile_mask16(tile, r + p, b, g), wp);
        }
        avx512_channel_fma(ps, k, HC, v, acc);
    }
}

/* Writes the chunk's accumulated scores of a block (valid < 64: the first
 * valid tokens): 0.0f + acc, or the score + acc when the pass adds. */
AVX512_TARGET SCAN_INLINE void avx512_put_block(const scan2_pass *ps, const uint32_t HC,
                                                __m512 acc[4][4], float *out, uint64_t ld,
                                                uint32_t valid) {
#pragma GCC unroll 4
    for (uint32_t h = 0; h < HC; h++) {
        float *o = out + h * ld;
        if (ps->stream && valid == FATHOM_BLOCK_TOKENS && ((uintptr_t)o & 63) == 0) {
#pragma GCC unroll 4
            for (uint32_t g = 0; g < 4; g++)
                _mm512_stream_ps(o + g * 16, _mm512_add_ps(_mm512_setzero_ps(), acc[h][g]));
            continue;
        }
#pragma GCC unroll 4
        for (uint32_t g = 0; g < 4; g++) {
            if (g * 16 >= valid) break;
            uint32_t n = valid - g * 16 < 16 ? valid - g * 16 : 16;
            __mmask16 m = (__mmask16)((1u << n) - 1u);
            __m512 base = ps->add ? _mm512_maskz_loadu_ps(m, o + g * 16) : _mm512_setzero_ps();
            _mm512_mask_storeu_ps(o + g * 16, m, _mm512_add_ps(base, acc[h][g]));
        }
    }
}

/* Stamps NAME, an AVX-512 block function (scan2_block_fn) under TARGET:
 * the chunk's accumulators for 64 tokens in registers, the channels of
 * each depth T scored into them by DEPTH(ps, tile, b, T, HC, acc), then
 * written out. */
#define SCAN2_AVX512_BLOCK(NAME, TARGET, DEPTH)                                                    \
    TARGET SCAN_INLINE void NAME##_fused(const scan2_pass *ps, const scan2_tile *tile, uint32_t b, \
                                         const uint32_t HC, float *out, uint64_t ld,               \
                                         uint32_t valid) {                                         \
        __m512 acc[4][4];                                                                          \
        _Pragma("GCC unroll 4") for (uint32_t h = 0; h < HC; h++)                                  \
            _Pragma("GCC unroll 4") for (uint32_t g = 0; g < 4; g++)                               \
                acc[h][g] = _mm512_setzero_ps();                                                   \
        DEPTH(ps, tile, b, 1, HC, acc);                                                            \
        DEPTH(ps, tile, b, 2, HC, acc);                                                            \
        DEPTH(ps, tile, b, 3, HC, acc);                                                            \
        DEPTH(ps, tile, b, 4, HC, acc);                                                            \
        avx512_put_block(ps, HC, acc, out, ld, valid);                                             \
    }                                                                                              \
    TARGET void NAME(const scan2_pass *ps, const scan2_tile *tile, uint32_t b, float *dec,         \
                     float *out, uint64_t ld, uint32_t valid) {                                    \
        (void)dec;                                                                                 \
        switch (ps->heads) { /* SCAN_HEAD_CHUNK */                                                 \
        case 4: NAME##_fused(ps, tile, b, 4, out, ld, valid); break;                               \
        case 3: NAME##_fused(ps, tile, b, 3, out, ld, valid); break;                               \
        case 2: NAME##_fused(ps, tile, b, 2, out, ld, valid); break;                               \
        default: NAME##_fused(ps, tile, b, 1, out, ld, valid); break;                              \
        }                                                                                          \
    }

SCAN2_AVX512_BLOCK(fathom_scan2_block_avx512, AVX512_TARGET, avx512_fused_depth)

/* The mask kernel's staging and coefficients in one pass (AVX-512 BW + VL):
 * each plane row's line of the tile copied with one masked vector load (a
 * short tile reads only its blocks) and one store, the coefficients formed
 * from the scales by coef_store, as fathom_scan2_coef_x86 forms them. */
FATHOM_TARGET_AVX512_BW SCAN_INLINE void load_masks_body(const scan2_pass *ps,
                                                           const fathom_segment_view *view,
                                                           uint32_t b0, uint32_t nb, uint32_t ahead,
                                                           int prefetch, scan2_tile *tile) {
    const __mmask8 live = (__mmask8)((1u << nb) - 1u);
    const uint64_t S = ps->S;
    for (uint32_t t = 1; t <= FATHOM_PLANES; t++) {
        const __m256 m0 = _mm256_set1_ps(1.0f / (float)(1u << t) - 1.0f);
        uint32_t r = ps->row[t];
        for (uint32_t k = ps->first[t - 1]; k < ps->first[t]; k++) {
            const uint64_t j = ps->channels[k];
            const uint64_t *row = view->planes + j * FATHOM_PLANES * S + b0;
            for (uint32_t p = 0; p < t; p++, r++) {
                if (prefetch) SCAN2_PREFETCH(row + p * S + ahead);
                _mm512_store_si512((void *)tile->words[r], _mm512_maskz_loadu_epi64(live, row + p * S));
            }
            const uint16_t *scale = view->scales + j * S + b0;
            if (prefetch) SCAN2_PREFETCH(scale + ahead);
            coef_store(tile, k, _mm256_cvtph_ps(_mm_maskz_loadu_epi16(live, scale)), m0);
        }
    }
}

FATHOM_TARGET_AVX512_BW void fathom_scan2_load_avx512_masks(const scan2_pass *ps,
                                                            const fathom_segment_view *view,
                                                            uint32_t b0, uint32_t nb, uint32_t ahead,
                                                            int prefetch, scan2_tile *tile) {
    _Static_assert(SCAN2_TILE_BLOCKS == 8, "a tile is one 64-byte line of each plane row");
    load_masks_body(ps, view, b0, nb, ahead, prefetch, tile);
}

/* ---- tiled AVX-512 with tables: no mask registers ----
 *
 * Each channel's 16 values of tokens 16 g .. 16 g + 15 are read from a
 * 16-entry table of its values in the block (vpermps, which reads bits 0-3
 * of each lane's index): lane l's index holds token 16 g + l's code in its
 * low bits and anything above them, and the table repeats with the code's
 * period. Per depth t the indices come from
 *   t = 1: the plane's bits in place: a dword broadcast of bits 16 g and
 *          up, shifted right by l (table: coef0, coef0 + a, repeated);
 *   t = 2: 2-bit codes 2 b0 + b1 at bits 2 i, 2 i + 1 (the planes spread by
 *          carry-less squaring), shifted right by 2 l;
 *   t = 3, 4: code bytes (planes gathered by a byte permute, then each 8 x 8
 *          bit block transposed by gf2p8affineqb), zero-extended to lanes.
 * The value of code c at depth t is coef0 + c a 2^(1-t) (a: the fp16 scale,
 * 11 significant bits; c < 16; every partial sum a multiple of a 2^-t of at
 * most 5 bits): exact, so these are the other kernels' values bit for bit,
 * except that a block whose scale is 0 gives +0 for code 0 where the masks
 * give -0, which the multiply-adds into accumulators that start at +0 cannot
 * tell apart. A tile's codes and tables are formed once per tile, straight
 * from the segment (fathom_scan2_load_avx512_tab: no staged copy); per
 * channel and 16 tokens the kernel then issues two vector operations and
 * loads besides the multiply-adds, where the masks take a blend or masked
 * add per plane plus the mask loads. Which kernel is faster depends on the
 * CPU (scan.c's scan_values). */

#define TAB_TARGET FATHOM_TARGET_AVX512_TABLES

/* vpermt2b controls that gather blocks 2 l and 2 l + 1's planes from the
 * rows unpacked by pairs (lane l of the first source: planes 0, 1; of the
 * second: planes 2, 3): qword m, byte 4 + p <- byte m of plane p. */
static const uint8_t tab_gather[4][64] __attribute__((aligned(64))) = {
#define TAB_G(l, m) 0, 0, 0, 0, 16 * (l) + (m), 16 * (l) + 8 + (m), 64 + 16 * (l) + (m), 64 + 16 * (l) + 8 + (m)
#define TAB_GL(l) TAB_G(l, 0), TAB_G(l, 1), TAB_G(l, 2), TAB_G(l, 3), TAB_G(l, 4), TAB_G(l, 5), TAB_G(l, 6), TAB_G(l, 7)
    {TAB_GL(0)}, {TAB_GL(1)}, {TAB_GL(2)}, {TAB_GL(3)}
#undef TAB_GL
#undef TAB_G
};

/* Depth 1: the plane words as they are; pairs coef0, coef0 + a. */
TAB_TARGET SCAN_INLINE void tab_load1(scan2_tile *tile, uint32_t k, const __m512i r[4], __m256 a,
                                      __m256 c0) {
    _mm512_store_si512((void *)tile->words[k], r[0]);
    const __m256 c1 = _mm256_add_ps(c0, a);
    const __m256 lo = _mm256_unpacklo_ps(c0, c1), hi = _mm256_unpackhi_ps(c0, c1);
    _mm256_store_ps(tile->t.vals[k], _mm256_permute2f128_ps(lo, hi, 0x20));
    _mm256_store_ps(tile->t.vals[k] + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
}

/* Depth 2: 2-bit codes, plane 0's bit i at bit 2 i + 1 and plane 1's at
 * 2 i (a word's carry-less square spreads bit i to bit 2 i; unpacked by
 * pairs, lane l holds both planes of block 2 l, or 2 l + 1); the 4 values
 * coef0 + c a / 2 of each block (sums of multiples of a / 4: exact). */
TAB_TARGET SCAN_INLINE void tab_load2(scan2_tile *tile, uint32_t k, const __m512i r[4], __m256 a,
                                      __m256 c0) {
    const __m512i ev = _mm512_unpacklo_epi64(r[0], r[1]), od = _mm512_unpackhi_epi64(r[0], r[1]);
    const __m512i ce = _mm512_or_si512(_mm512_clmulepi64_epi128(ev, ev, 0x11),
                                       _mm512_slli_epi64(_mm512_clmulepi64_epi128(ev, ev, 0x00), 1));
    const __m512i co = _mm512_or_si512(_mm512_clmulepi64_epi128(od, od, 0x11),
                                       _mm512_slli_epi64(_mm512_clmulepi64_epi128(od, od, 0x00), 1));
    uint8_t *codes = tile->t.codes[k][0]; /* block b: bytes 16 b .. 16 b + 15 */
    _mm512_store_si512((void *)codes, _mm512_permutex2var_epi64(ce, _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), co));
    _mm512_store_si512((void *)(codes + 64), _mm512_permutex2var_epi64(ce, _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15), co));
    const __m256 half = _mm256_mul_ps(a, _mm256_set1_ps(0.5f));
    const __m256 e1 = _mm256_add_ps(c0, half), e2 = _mm256_add_ps(c0, a), e3 = _mm256_add_ps(e2, half);
    const __m256 t0 = _mm256_unpacklo_ps(c0, e1), t1 = _mm256_unpackhi_ps(c0, e1);
    const __m256 t2 = _mm256_unpacklo_ps(e2, e3), t3 = _mm256_unpackhi_ps(e2, e3);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
    float *o = tile->t.vals[k];
    _mm256_store_ps(o, _mm256_permute2f128_ps(u0, u1, 0x20));
    _mm256_store_ps(o + 8, _mm256_permute2f128_ps(u2, u3, 0x20));
    _mm256_store_ps(o + 16, _mm256_permute2f128_ps(u0, u1, 0x31));
    _mm256_store_ps(o + 24, _mm256_permute2f128_ps(u2, u3, 0x31));
}

/* Depth 3, 4: code bytes, plane p at bit 3 - p (the depth-t code c times
 * 2^(4-t)); the table coef0 + e a / 8, e < 16. */
TAB_TARGET SCAN_INLINE void tab_load34(scan2_tile *tile, uint32_t k, const uint32_t t,
                                       const __m512i r[4], __m256 a, __m256 c0) {
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i bits = _mm512_set1_epi64((long long)0x8040201008040201ull); /* byte j: 1 << j */
    const __mmask64 planes = ((1ull << t) - 1) * 0x0101010101010101ull << 4;  /* bytes 4 .. 3 + t */
    const __m512i u[2] = {_mm512_unpacklo_epi64(r[0], r[1]), _mm512_unpackhi_epi64(r[0], r[1])};
    const __m512i v[2] = {_mm512_unpacklo_epi64(r[2], r[3]), _mm512_unpackhi_epi64(r[2], r[3])};
    float c0s[8], steps[8];
    _mm256_storeu_ps(c0s, c0);
    _mm256_storeu_ps(steps, _mm256_mul_ps(a, _mm256_set1_ps(0.125f)));
    for (uint32_t b = 0; b < SCAN2_TILE_BLOCKS; b++) {
        _mm512_store_ps(tile->t.tab[k][b],
                        _mm512_fmadd_ps(iota, _mm512_set1_ps(steps[b]), _mm512_set1_ps(c0s[b])));
        const __m512i ctl = _mm512_load_si512((const void *)tab_gather[b >> 1]);
        const __m512i x = _mm512_maskz_permutex2var_epi8(planes, u[b & 1], ctl, v[b & 1]);
        /* byte j of qword m: bit 3 - p = bit j of plane p's byte m: token 8 m + j */
        _mm512_store_si512((void *)tile->t.codes[k][b], _mm512_gf2p8affine_epi64_epi8(bits, x, 0));
    }
}

TAB_TARGET void fathom_scan2_load_avx512_tab(const scan2_pass *ps, const fathom_segment_view *view,
                                             uint32_t b0, uint32_t nb, uint32_t ahead, int prefetch,
                                             scan2_tile *tile) {
    _Static_assert(SCAN2_TILE_BLOCKS == 8, "a tile is one 64-byte line of each plane row");
    const __mmask8 live = (__mmask8)((1u << nb) - 1u); /* a short tile reads only its blocks */
    const uint64_t S = ps->S;
    for (uint32_t t = 1; t <= FATHOM_PLANES; t++) {
        const __m256 zero = _mm256_set1_ps(1.0f / (float)(1u << t) - 1.0f); /* scan2_coef0 */
        for (uint32_t k = ps->first[t - 1]; k < ps->first[t]; k++) {
            const uint64_t j = ps->channels[k];
            const uint64_t *row = view->planes + j * FATHOM_PLANES * S + b0;
            const uint16_t *scale = view->scales + j * S + b0;
            __m512i r[FATHOM_PLANES];
            for (uint32_t p = 0; p < FATHOM_PLANES; p++) {
                r[p] = _mm512_setzero_si512();
                if (p < t) {
                    if (prefetch) SCAN2_PREFETCH(row + p * S + ahead);
                    r[p] = _mm512_maskz_loadu_epi64(live, row + p * S);
                }
            }
            if (prefetch) SCAN2_PREFETCH(scale + ahead);
            const __m256 a = _mm256_cvtph_ps(_mm_maskz_loadu_epi16(live, scale));
            const __m256 c0 = _mm256_mul_ps(a, zero);
            if (t == 1) tab_load1(tile, k, r, a, c0);
            else if (t == 2) tab_load2(tile, k, r, a, c0);
            else tab_load34(tile, k, t, r, a, c0);
        }
    }
}

/* The channels of depth T: values from their tables, then the multiply-adds. */
TAB_TARGET SCAN_INLINE void tab_depth(const scan2_pass *ps, const scan2_tile *tile, uint32_t b,
                                      const uint32_t T, const uint32_t HC, __m512 acc[4][4]) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (uint32_t k = ps->first[T - 1]; k < ps->first[T]; k++) {
        const float *vals = tile->t.vals[k];
        const __m512 table =
            T == 1   ? _mm512_castpd_ps(_mm512_broadcastsd_pd(_mm_load_sd((const double *)(const void *)(vals + 2 * b))))
            : T == 2 ? _mm512_broadcast_f32x4(_mm_load_ps(vals + 4 * b))
                     : _mm512_load_ps(tile->t.tab[k][b]);
        __m512 v[4];
#pragma GCC unroll 4
        for (uint32_t g = 0; g < 4; g++) {
            __m512i idx;
            int32_t x;
            if (T == 1) { /* bits 16 g .. 16 g + 31 of the plane (past 63: the next block's) */
                memcpy(&x, (const char *)tile->words[k] + 8 * b + 2 * g, sizeof x);
                idx = _mm512_srlv_epi32(_mm512_set1_epi32(x), lane);
            } else if (T == 2) {
                memcpy(&x, tile->t.codes[k][0] + 16 * b + 4 * g, sizeof x);
                idx = _mm512_srlv_epi32(_mm512_set1_epi32(x), _mm512_add_epi32(lane, lane));
            } else
                idx = _mm512_cvtepu8_epi32(
                    _mm_load_si128((const __m128i *)(const void *)(tile->t.codes[k][b] + 16 * g)));
            v[g] = _mm512_permutexvar_ps(idx, table);
        }
        avx512_channel_fma(ps, k, HC, v, acc);
    }
}

SCAN2_AVX512_BLOCK(fathom_scan2_block_avx512_tab, TAB_TARGET, tab_depth)

/* ---- tiled AVX-512 with nibble indices: one index for up to 4 plane rows ----
 *
 * The table kernel spends one vector operation per channel and 16 tokens on
 * its index (a shift, or a byte widening) besides the vpermps; on Intel
 * server cores every 512-bit operation issues on the two ports that also run
 * the multiply-adds (and the mask kernel's mask loads take port 5 too).
 * Here the channels, in pass order, are packed into quads of at most 4
 * plane rows (a channel never split), and one index serves the whole quad:
 * bit r of token i's nibble is row r's bit i. Per quad and 16 tokens that
 * index costs one shift of a broadcast qword; per channel and 16 tokens
 * one vpermps of its block's 16-entry table (its values by nibble, its code
 * read from its rows' bits) remains. The values are the table kernel's,
 * coef0 + c a 2^(1-t), formed as a times (2 c + 1 - 2^t) / 2^t: exact (see
 * nib_unit), so equal.
 *
 * A quad's nibbles of block b, tokens 16 g .. 16 g + 15 are one qword:
 * byte k holds token 16 g + j_k (high nibble) and 16 g + 8 + j_k (low
 * nibble), j = 0, 2, 4, 6, 1, 3, 5, 7, so that lane l of a qword broadcast
 * (dword l & 1) finds its nibble at bit nib_shift[l]. The qwords come from
 * the rows by two rounds of byte unpacks and one bit transpose
 * (gf2p8affineqb) per line of 8 qwords. */

/* Byte offset of block b's first qword within a quad (tokens 16 g on: + 0,
 * 8, 64, 72 for g = 0 .. 3): line 2 (b & 1) + (g >> 1), qword 2 (b >> 1) + (g & 1). */
#define NIB_BLOCK_OFFSET(b) (((b) & 1) * 128 + ((b) >> 1) * 16)

/* nib_unit[s][t][i]: the value at scale 1 of the depth-t code c of a
 * channel whose rows are bits s .. s + t - 1 of nibble i (plane p at bit
 * s + p, the code's bit t - 1 - p): (2 c + 1 - 2^t) / 2^t, at most 5
 * significant bits, so its product with the block's scale a is exact and
 * equals coef0 + c a 2^(1-t) of the other kernels. */
#define NIB_BIT(i, s, t, p) ((p) < (t) ? (((i) >> ((s) + (p))) & 1) << (((t) - 1 - (p)) & 3) : 0)
#define NIB_CODE(i, s, t)                                                                          \
    (NIB_BIT(i, s, t, 0) + NIB_BIT(i, s, t, 1) + NIB_BIT(i, s, t, 2) + NIB_BIT(i, s, t, 3))
#define NIB_UNIT(i, s, t) ((float)(2 * NIB_CODE(i, s, t) + 1 - (1 << (t))) / (float)(1 << (t)))
#define NIB_ROW(s, t)                                                                              \
    {NIB_UNIT(0, s, t),  NIB_UNIT(1, s, t),  NIB_UNIT(2, s, t),  NIB_UNIT(3, s, t),                \
     NIB_UNIT(4, s, t),  NIB_UNIT(5, s, t),  NIB_UNIT(6, s, t),  NIB_UNIT(7, s, t),                \
     NIB_UNIT(8, s, t),  NIB_UNIT(9, s, t),  NIB_UNIT(10, s, t), NIB_UNIT(11, s, t),               \
     NIB_UNIT(12, s, t), NIB_UNIT(13, s, t), NIB_UNIT(14, s, t), NIB_UNIT(15, s, t)}
#define NIB_ROWS(s) {NIB_ROW(s, 0), NIB_ROW(s, 1), NIB_ROW(s, 2), NIB_ROW(s, 3), NIB_ROW(s, 4)}
static const float nib_unit[4][FATHOM_PLANES + 1][16] __attribute__((aligned(64))) = {
    NIB_ROWS(0), NIB_ROWS(1), NIB_ROWS(2), NIB_ROWS(3)};
#undef NIB_ROWS
#undef NIB_ROW
#undef NIB_UNIT
#undef NIB_CODE
#undef NIB_BIT

/* Quad q's nibbles from its 4 rows (NULL: a zero row) of a tile. */
TAB_TARGET SCAN_INLINE void nib_quad(scan2_tile *tile, uint32_t q, const uint64_t *const rows[4],
                                     int full, __mmask8 live) {
    /* byte k of each qword selects bit j_k of the 8 bytes below */
    const __m512i sel = _mm512_set1_epi64((long long)0x8020080240100401ull);
    __m512i r[4];
    for (uint32_t i = 0; i < 4; i++)
        r[i] = !rows[i] ? _mm512_setzero_si512()
               : full   ? _mm512_loadu_si512((const void *)rows[i])
                        : _mm512_maskz_loadu_epi64(live, rows[i]);
    /* per 128-bit lane (blocks 2 m, 2 m + 1), qword by qword: byte 2 g of
     * rows 3, 2, 1, 0, then byte 2 g + 1 of the same; the transpose puts
     * row r's bit j_k of byte 2 g + 1 at bit r of byte k, of byte 2 g at
     * bit 4 + r */
    const __m512i ulo = _mm512_unpacklo_epi8(r[3], r[2]), uhi = _mm512_unpackhi_epi8(r[3], r[2]);
    const __m512i vlo = _mm512_unpacklo_epi8(r[1], r[0]), vhi = _mm512_unpackhi_epi8(r[1], r[0]);
    const __m512i w[4] = {_mm512_unpacklo_epi16(ulo, vlo), _mm512_unpackhi_epi16(ulo, vlo),
                          _mm512_unpacklo_epi16(uhi, vhi), _mm512_unpackhi_epi16(uhi, vhi)};
    for (uint32_t i = 0; i < 4; i++)
        _mm512_store_si512((void *)tile->n.idx[q][i], _mm512_gf2p8affine_epi64_epi8(sel, w[i], 0));
}

/* unit * a, a broadcast from memory (a load; the compiler's broadcast from
 * a register would take the shuffle port). */
TAB_TARGET SCAN_INLINE __m512 nib_table(__m512 unit, const float *a) {
    __m512 v;
    __asm__("vmulps %2%{1to16%}, %1, %0" : "=v"(v) : "v"(unit), "m"(*a));
    return v;
}

/* A tile's quads, scales and, with TABLES, tables (without: each channel's
 * row of nib_unit, which the block loop multiplies by the scale itself). */
TAB_TARGET SCAN_INLINE void nib_load(const scan2_pass *ps, const fathom_segment_view *view,
                                     uint32_t b0, uint32_t nb, uint32_t ahead, int prefetch,
                                     scan2_tile *tile, const int TABLES) {
    _Static_assert(SCAN2_TILE_BLOCKS == 8, "a tile is one 64-byte line of each plane row");
    const __mmask8 live = (__mmask8)((1u << nb) - 1u); /* a short tile reads only its blocks */
    const int full = nb == SCAN2_TILE_BLOCKS;
    const uint64_t S = ps->S;
    const uint64_t *rows[4] = {NULL, NULL, NULL, NULL};
    uint32_t q = 0, used = 0; /* the open quad and its rows */
    for (uint32_t t = 1; t <= FATHOM_PLANES; t++) {
        for (uint32_t k = ps->first[t - 1]; k < ps->first[t]; k++) {
            if (used + t > 4) {
                nib_quad(tile, q++, rows, full, live);
                rows[0] = rows[1] = rows[2] = rows[3] = NULL;
                used = 0;
            }
            tile->n.start[k] = used == 0;
            tile->n.bit[k] = (uint8_t)used;
            const uint64_t j = ps->channels[k];
            const uint64_t *row = view->planes + j * FATHOM_PLANES * S + b0;
            for (uint32_t p = 0; p < t; p++) {
                if (prefetch) SCAN2_PREFETCH(row + p * S + ahead);
                rows[used + p] = row + p * S;
            }
            const uint16_t *scale = view->scales + j * S + b0;
            if (prefetch) SCAN2_PREFETCH(scale + ahead);
            const __m128i a = full ? _mm_loadu_si128((const __m128i *)(const void *)scale)
                                   : _mm_maskz_loadu_epi16(live, scale);
            _mm256_store_ps(tile->n.a[k], _mm256_cvtph_ps(a));
            used += t;
        }
    }
    if (used) nib_quad(tile, q, rows, full, live);
    /* the tables, once every channel's scales are stored (read back by
     * broadcasts well after their stores) */
    for (uint32_t t = 1; t <= FATHOM_PLANES; t++)
        for (uint32_t k = ps->first[t - 1]; k < ps->first[t]; k++) {
            if (!TABLES) {
                tile->n.unit[k] = nib_unit[tile->n.bit[k]][t];
                continue;
            }
            const __m512 unit = _mm512_load_ps(nib_unit[tile->n.bit[k]][t]);
            for (uint32_t b = 0; b < SCAN2_TILE_BLOCKS; b++)
                _mm512_store_ps(tile->n.tab[k][b], nib_table(unit, &tile->n.a[k][b]));
        }
}

TAB_TARGET void fathom_scan2_load_avx512_nib(const scan2_pass *ps, const fathom_segment_view *view,
                                             uint32_t b0, uint32_t nb, uint32_t ahead, int prefetch,
                                             scan2_tile *tile) {
    nib_load(ps, view, b0, nb, ahead, prefetch, tile, 1);
}

TAB_TARGET void fathom_scan2_load_avx512_nib_inloop(const scan2_pass *ps,
                                                    const fathom_segment_view *view, uint32_t b0,
                                                    uint32_t nb, uint32_t ahead, int prefetch,
                                                    scan2_tile *tile) {
    nib_load(ps, view, b0, nb, ahead, prefetch, tile, 0);
}

/* vpermps into a register of its own: the compiler's intrinsic may write
 * over the index, which the quad's next channel reads again (and then
 * copies it first, one more vector operation per channel and 16 tokens). */
TAB_TARGET SCAN_INLINE __m512 nib_permute(__m512i idx, __m512 table) {
    __m512 v;
    __asm__("vpermps %2, %1, %0" : "=v"(v) : "v"(idx), "v"(table));
    return v;
}

TAB_TARGET SCAN_INLINE void nib_fused(const scan2_pass *ps, const scan2_tile *tile, uint32_t b,
                                      const uint32_t HC, float *out, uint64_t ld, uint32_t valid,
                                      const int TABLES) {
    /* lane l's nibble in dword l & 1 of its qword */
    const __m512i nib_shift =
        _mm512_setr_epi32(4, 4, 12, 12, 20, 20, 28, 28, 0, 0, 8, 8, 16, 16, 24, 24);
    /* the quads in order: the next quad's qwords one quad further on (no
     * load in their address) */
    const unsigned char *qw =
        (const unsigned char *)tile->n.idx + NIB_BLOCK_OFFSET(b) - sizeof tile->n.idx[0];
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (uint32_t h = 0; h < HC; h++)
#pragma GCC unroll 4
        for (uint32_t g = 0; g < 4; g++) acc[h][g] = _mm512_setzero_ps();
    __m512i idx[4];
    for (uint32_t g = 0; g < 4; g++) idx[g] = _mm512_setzero_si512();
    const uint32_t count = ps->count; /* a local: not reloaded every channel */
    for (uint32_t k = 0; k < count; k++) {
        if (tile->n.start[k]) {
            qw += sizeof tile->n.idx[0];
            static const uint32_t at[4] = {0, 8, 64, 72};
#pragma GCC unroll 4
            for (uint32_t g = 0; g < 4; g++) {
                int64_t x;
                memcpy(&x, qw + at[g], sizeof x);
                idx[g] = _mm512_srlv_epi32(_mm512_set1_epi64(x), nib_shift);
            }
        }
        const __m512 table = TABLES ? _mm512_load_ps(tile->n.tab[k][b])
                                    : nib_table(_mm512_load_ps(tile->n.unit[k]), &tile->n.a[k][b]);
        __m512 v[4];
#pragma GCC unroll 4
        for (uint32_t g = 0; g < 4; g++) v[g] = nib_permute(idx[g], table);
        avx512_channel_fma(ps, k, HC, v, acc);
    }
    avx512_put_block(ps, HC, acc, out, ld, valid);
}

TAB_TARGET void fathom_scan2_block_avx512_nib(const scan2_pass *ps, const scan2_tile *tile,
                                              uint32_t b, float *dec, float *out, uint64_t ld,
                                              uint32_t valid) {
    (void)dec;
#define NIB_FUSED(HC) nib_fused(ps, tile, b, HC, out, ld, valid, 1)
    SCAN_HEAD_CHUNK(ps->heads, NIB_FUSED);
#undef NIB_FUSED
}

/* The same with the tables formed in the loop: one multiply per channel
 * there in place of a stored table (fathom_scan2_load_avx512_nib_inloop). */
TAB_TARGET void fathom_scan2_block_avx512_nib_inloop(const scan2_pass *ps, const scan2_tile *tile,
                                                     uint32_t b, float *dec, float *out,
                                                     uint64_t ld, uint32_t valid) {
    (void)dec;
#define NIB_FUSED(HC) nib_fused(ps, tile, b, HC, out, ld, valid, 0)
    SCAN_HEAD_CHUNK(ps->heads, NIB_FUSED);
#undef NIB_FUSED
}

/* ---- tiled AVX-512, grouped tables: one lookup and add per group ----
 *
 * The grouped definition (scan_internal.h): the pass's groups' nibbles are
 * formed as the nibble kernel's quads (nib_quad), group g's in idx[g]; per
 * block and group the kernel forms each member's 16 values (nib_unit times
 * the scale: exact) and multiply-adds them into one table per head, in
 * member order from +0; per 16 tokens and head each group then costs one
 * vpermps and one add, in group order from +0 (a group of one channel: one
 * vpermps of its values per 16 tokens, a multiply-add per head). */

TAB_TARGET void fathom_scan2_load_avx512_grouped(const scan2_pass *ps,
                                                 const fathom_segment_view *view, uint32_t b0,
                                                 uint32_t nb, uint32_t ahead, int prefetch,
                                                 scan2_tile *tile) {
    _Static_assert(SCAN2_TILE_BLOCKS == 8, "a tile is one 64-byte line of each plane row");
    const __mmask8 live = (__mmask8)((1u << nb) - 1u); /* a short tile reads only its blocks */
    const int full = nb == SCAN2_TILE_BLOCKS;
    const uint64_t S = ps->S;
    const scan_groups *g = &ps->groups;
    for (uint32_t x = 0; x < g->count; x++) {
        const uint64_t *rows[4] = {NULL, NULL, NULL, NULL};
        for (uint32_t m = g->first[x]; m < g->first[x + 1]; m++) {
            const uint32_t k = g->member[m], t = g->depth[m];
            const uint64_t j = ps->channels[k];
            const uint64_t *row = view->planes + j * FATHOM_PLANES * S + b0;
            for (uint32_t p = 0; p < t; p++) {
                if (prefetch) SCAN2_PREFETCH(row + p * S + ahead);
                rows[g->bit[m] + p] = row + p * S;
            }
            const uint16_t *scale = view->scales + j * S + b0;
            if (prefetch) SCAN2_PREFETCH(scale + ahead);
            const __m128i a = full ? _mm_loadu_si128((const __m128i *)(const void *)scale)
                                   : _mm_maskz_loadu_epi16(live, scale);
            _mm256_store_ps(tile->n.a[k], _mm256_cvtph_ps(a));
            tile->n.unit[k] = nib_unit[g->bit[m]][t];
        }
        nib_quad(tile, x, rows, full, live);
    }
}

TAB_TARGET SCAN_INLINE void grouped_fused(const scan2_pass *ps, const scan2_tile *tile, uint32_t b,
                                          const uint32_t HC, float *out, uint64_t ld,
                                          uint32_t valid) {
    /* lane l's nibble in dword l & 1 of its qword (as nib_fused) */
    const __m512i nib_shift =
        _mm512_setr_epi32(4, 4, 12, 12, 20, 20, 28, 28, 0, 0, 8, 8, 16, 16, 24, 24);
    static const uint32_t at[4] = {0, 8, 64, 72};
    const scan_groups *gr = &ps->groups;
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (uint32_t h = 0; h < HC; h++)
#pragma GCC unroll 4
        for (uint32_t g = 0; g < 4; g++) acc[h][g] = _mm512_setzero_ps();
    const uint32_t groups = gr->count;
    for (uint32_t x = 0; x < groups; x++) {
        const unsigned char *qw = (const unsigned char *)tile->n.idx[x] + NIB_BLOCK_OFFSET(b);
        __m512i idx[4];
#pragma GCC unroll 4
        for (uint32_t g = 0; g < 4; g++) {
            int64_t w;
            memcpy(&w, qw + at[g], sizeof w);
            idx[g] = _mm512_srlv_epi32(_mm512_set1_epi64(w), nib_shift);
        }
        if (gr->first[x + 1] - gr->first[x] == 1) { /* one channel: its values, multiply-adds */
            const uint32_t k = gr->member[gr->first[x]];
            const __m512 val = nib_table(_mm512_load_ps(tile->n.unit[k]), &tile->n.a[k][b]);
            __m512 v[4];
#pragma GCC unroll 4
            for (uint32_t g = 0; g < 4; g++) v[g] = nib_permute(idx[g], val);
            avx512_channel_fma(ps, k, HC, v, acc);
            continue;
        }
        __m512 tab[4];
#pragma GCC unroll 4
        for (uint32_t h = 0; h < HC; h++) tab[h] = _mm512_setzero_ps();
        for (uint32_t m = gr->first[x]; m < gr->first[x + 1]; m++) {
            const uint32_t k = gr->member[m];
            const __m512 val = nib_table(_mm512_load_ps(tile->n.unit[k]), &tile->n.a[k][b]);
#pragma GCC unroll 4
            for (uint32_t h = 0; h < HC; h++)
                tab[h] = _mm512_fmadd_ps(_mm512_set1_ps(ps->q[k][h]), val, tab[h]);
        }
        if (x == 0) { /* +0 + T = T: a table entry is never -0 (a chain of fma from +0) */
#pragma GCC unroll 4
            for (uint32_t h = 0; h < HC; h++)
#pragma GCC unroll 4
                for (uint32_t g = 0; g < 4; g++) acc[h][g] = nib_permute(idx[g], tab[h]);
            continue;
        }
#pragma GCC unroll 4
        for (uint32_t h = 0; h < HC; h++)
#pragma GCC unroll 4
            for (uint32_t g = 0; g < 4; g++)
                acc[h][g] = _mm512_add_ps(acc[h][g], nib_permute(idx[g], tab[h]));
    }
    avx512_put_block(ps, HC, acc, out, ld, valid);
}

TAB_TARGET void fathom_scan2_block_avx512_grouped(const scan2_pass *ps, const scan2_tile *tile,
                                                  uint32_t b, float *dec, float *out, uint64_t ld,
                                                  uint32_t valid) {
    (void)dec;
#define GROUPED_FUSED(HC) grouped_fused(ps, tile, b, HC, out, ld, valid)
    SCAN_HEAD_CHUNK(ps->heads, GROUPED_FUSED);
#undef GROUPED_FUSED
}

/* ---- tiled AVX-512 VNNI, the int8 mode: integer dot products ----
 *
 * The int8 definition (scan_internal.h). Staging (per tile of 8 blocks):
 * each channel's filled codes c' (its first t planes at nibble bits 3..0,
 * unread planes zero) by one bit transpose (gf2p8affineqb) per two blocks:
 * its input qword holds planes 0-3 of tokens 8 o .. 8 o + 7 (bytes 0-3) and
 * of tokens 32 + 8 o .. (bytes 4-7), formed from the plane rows by byte
 * permutes (int8_direct for depth <= 2: one; int8_rows and int8_planes for
 * depth 3, 4: two levels); its output byte k (slot 8 o + k) holds token
 * 8 o + k's c' in the high nibble and token 32 + 8 o + k's in the low one.
 * Two levels of byte permutes (int8_rows, int8_quad) interleave a quad of
 * channels' slots into dwords in the staging (i.codes, [quad][block][half]).
 * The staging packs the quads whose channels all have depth <= 2 (the
 * first ones: a pass runs its channels in depth order): their GFNI input
 * qword holds planes 0, 1 of tokens 8 o .. 8 o + 7 and of tokens 16, 32
 * and 48 further on (int8_packed), so its output byte k holds the two
 * planes of four tokens (8 o + k + 16 i, bits 7-6, 5-4, 3-2, 1-0) and one
 * vector P a block holds the quad's dwords for all 64 tokens; the kernel
 * takes half 0's dwords as P & 0xcc and half 1's as (P << 2) & 0xcc (the
 * same values as unpacked: a depth-2 code's two planes at nibble bits 3,
 * 2). Half the transposes, permutes and stores of the unpacked layout. The
 * weights are formed 16 (block, head) pairs a vector (int8_weights).
 *
 * Per block, quad and half f the kernel forms the dwords D: with the quad's
 * weights as s8 (vpdpbusd, u8 codes), dot(D) = 16 I_hi + I_lo and
 * dot(D & 0x0f0f0f0f) = I_lo, I the sums of w c' of the tokens 16 f + i
 * (high nibbles) and 32 + 16 f + i (low ones); so with acc0 started at 8 K,
 * 8 T = acc0 - acc1 for the first and (acc1 << 4) + 8 K for the second, and
 * P = (s / 8) * (float)(8 T): the same real product as s * T, so the same
 * float (s / 8 = m / 16256, exact scaling of m / 2032: m >= 2^-100).
 *
 * The byte permutes' index tables (vpermt2b: 0-63 the first source's bytes,
 * 64-127 the second's; rows and tiles of 8 blocks, qword b = block b):
 * int8_direct[z]: from plane rows 0, 1, blocks 2 z, 2 z + 1's GFNI input
 *   qwords (planes 2, 3 zeroed by the mask);
 * int8_rows[x]: bytes 32 x .. 32 x + 31 of both sources interleaved as
 *   byte pairs: from rows (0, 1) or (2, 3), blocks 4 x .. 4 x + 3 (row r of
 *   octet o of block b at 32 (b / 2 & 1) + 16 (b & 1) + 2 o + r); from two
 *   channels' transposed bytes, block x's 32 slots;
 * int8_planes[z & 1]: from those of rows 0, 1 and rows 2, 3, the GFNI input
 *   qwords of blocks 2 z, 2 z + 1;
 * int8_quad[f]: from two such pairs, half f's 16 dwords;
 * int8_packed[u]: see its definition;
 * int8_wpair, int8_wquad: the same for the weights' low bytes of 16 lanes. */

#define INT8_TARGET FATHOM_TARGET_AVX512_INT8

static const uint8_t int8_direct[4][64] __attribute__((aligned(64))) = {
    {0, 64, 0, 0, 4, 68, 0, 0, 1, 65, 0, 0, 5, 69, 0, 0,
     2, 66, 0, 0, 6, 70, 0, 0, 3, 67, 0, 0, 7, 71, 0, 0,
     8, 72, 0, 0, 12, 76, 0, 0, 9, 73, 0, 0, 13, 77, 0, 0,
     10, 74, 0, 0, 14, 78, 0, 0, 11, 75, 0, 0, 15, 79, 0, 0},
    {16, 80, 0, 0, 20, 84, 0, 0, 17, 81, 0, 0, 21, 85, 0, 0,
     18, 82, 0, 0, 22, 86, 0, 0, 19, 83, 0, 0, 23, 87, 0, 0,
     24, 88, 0, 0, 28, 92, 0, 0, 25, 89, 0, 0, 29, 93, 0, 0,
     26, 90, 0, 0, 30, 94, 0, 0, 27, 91, 0, 0, 31, 95, 0, 0},
    {32, 96, 0, 0, 36, 100, 0, 0, 33, 97, 0, 0, 37, 101, 0, 0,
     34, 98, 0, 0, 38, 102, 0, 0, 35, 99, 0, 0, 39, 103, 0, 0,
     40, 104, 0, 0, 44, 108, 0, 0, 41, 105, 0, 0, 45, 109, 0, 0,
     42, 106, 0, 0, 46, 110, 0, 0, 43, 107, 0, 0, 47, 111, 0, 0},
    {48, 112, 0, 0, 52, 116, 0, 0, 49, 113, 0, 0, 53, 117, 0, 0,
     50, 114, 0, 0, 54, 118, 0, 0, 51, 115, 0, 0, 55, 119, 0, 0,
     56, 120, 0, 0, 60, 124, 0, 0, 57, 121, 0, 0, 61, 125, 0, 0,
     58, 122, 0, 0, 62, 126, 0, 0, 59, 123, 0, 0, 63, 127, 0, 0},
};
static const uint8_t int8_rows[2][64] __attribute__((aligned(64))) = {
    {0, 64, 1, 65, 2, 66, 3, 67, 4, 68, 5, 69, 6, 70, 7, 71,
     8, 72, 9, 73, 10, 74, 11, 75, 12, 76, 13, 77, 14, 78, 15, 79,
     16, 80, 17, 81, 18, 82, 19, 83, 20, 84, 21, 85, 22, 86, 23, 87,
     24, 88, 25, 89, 26, 90, 27, 91, 28, 92, 29, 93, 30, 94, 31, 95},
    {32, 96, 33, 97, 34, 98, 35, 99, 36, 100, 37, 101, 38, 102, 39, 103,
     40, 104, 41, 105, 42, 106, 43, 107, 44, 108, 45, 109, 46, 110, 47, 111,
     48, 112, 49, 113, 50, 114, 51, 115, 52, 116, 53, 117, 54, 118, 55, 119,
     56, 120, 57, 121, 58, 122, 59, 123, 60, 124, 61, 125, 62, 126, 63, 127},
};
static const uint8_t int8_planes[2][64] __attribute__((aligned(64))) = {
    {0, 1, 64, 65, 8, 9, 72, 73, 2, 3, 66, 67, 10, 11, 74, 75,
     4, 5, 68, 69, 12, 13, 76, 77, 6, 7, 70, 71, 14, 15, 78, 79,
     16, 17, 80, 81, 24, 25, 88, 89, 18, 19, 82, 83, 26, 27, 90, 91,
     20, 21, 84, 85, 28, 29, 92, 93, 22, 23, 86, 87, 30, 31, 94, 95},
    {32, 33, 96, 97, 40, 41, 104, 105, 34, 35, 98, 99, 42, 43, 106, 107,
     36, 37, 100, 101, 44, 45, 108, 109, 38, 39, 102, 103, 46, 47, 110, 111,
     48, 49, 112, 113, 56, 57, 120, 121, 50, 51, 114, 115, 58, 59, 122, 123,
     52, 53, 116, 117, 60, 61, 124, 125, 54, 55, 118, 119, 62, 63, 126, 127},
};
static const uint8_t int8_quad[2][64] __attribute__((aligned(64))) = {
    {0, 1, 64, 65, 2, 3, 66, 67, 4, 5, 68, 69, 6, 7, 70, 71,
     8, 9, 72, 73, 10, 11, 74, 75, 12, 13, 76, 77, 14, 15, 78, 79,
     16, 17, 80, 81, 18, 19, 82, 83, 20, 21, 84, 85, 22, 23, 86, 87,
     24, 25, 88, 89, 26, 27, 90, 91, 28, 29, 92, 93, 30, 31, 94, 95},
    {32, 33, 96, 97, 34, 35, 98, 99, 36, 37, 100, 101, 38, 39, 102, 103,
     40, 41, 104, 105, 42, 43, 106, 107, 44, 45, 108, 109, 46, 47, 110, 111,
     48, 49, 112, 113, 50, 51, 114, 115, 52, 53, 116, 117, 54, 55, 118, 119,
     56, 57, 120, 121, 58, 59, 122, 123, 60, 61, 124, 125, 62, 63, 126, 127},
};


/* int8_packed[u]: from plane rows 0, 1, blocks 4 u .. 4 u + 3's packed
 * GFNI input qwords (block b, octet o < 2 at qword 2 (b & 3) + o): rows
 * 0, 1 of octets o, o + 2, o + 4, o + 6. */
static const uint8_t int8_packed[2][64] __attribute__((aligned(64))) = {
    {0, 64, 2, 66, 4, 68, 6, 70, 1, 65, 3, 67, 5, 69, 7, 71,
     8, 72, 10, 74, 12, 76, 14, 78, 9, 73, 11, 75, 13, 77, 15, 79,
     16, 80, 18, 82, 20, 84, 22, 86, 17, 81, 19, 83, 21, 85, 23, 87,
     24, 88, 26, 90, 28, 92, 30, 94, 25, 89, 27, 91, 29, 93, 31, 95},
    {32, 96, 34, 98, 36, 100, 38, 102, 33, 97, 35, 99, 37, 101, 39, 103,
     40, 104, 42, 106, 44, 108, 46, 110, 41, 105, 43, 107, 45, 109, 47, 111,
     48, 112, 50, 114, 52, 116, 54, 118, 49, 113, 51, 115, 53, 117, 55, 119,
     56, 120, 58, 122, 60, 124, 62, 126, 57, 121, 59, 123, 61, 125, 63, 127},
};

static const uint8_t int8_wpair[64] __attribute__((aligned(64))) = {
    0, 64, 4, 68, 8, 72, 12, 76, 16, 80, 20, 84, 24, 88, 28, 92,
    32, 96, 36, 100, 40, 104, 44, 108, 48, 112, 52, 116, 56, 120, 60, 124,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
};
static const uint8_t int8_wquad[64] __attribute__((aligned(64))) = {
    0, 1, 64, 65, 2, 3, 66, 67, 4, 5, 68, 69, 6, 7, 70, 71,
    8, 9, 72, 73, 10, 11, 74, 75, 12, 13, 76, 77, 14, 15, 78, 79,
    16, 17, 80, 81, 18, 19, 82, 83, 20, 21, 84, 85, 22, 23, 86, 87,
    24, 25, 88, 89, 26, 27, 90, 91, 28, 29, 92, 93, 30, 31, 94, 95
};

/* r[p] = plane row p's line of the tile for p < n (zero past depth t), and
 * the prefetch of its line `ahead` blocks on. */
INT8_TARGET SCAN_INLINE void int8_plane_rows(const uint64_t *row, uint64_t S, uint32_t t,
                                             const uint32_t n, int full, __mmask8 live,
                                             uint32_t ahead, int prefetch, __m512i *r) {
    for (uint32_t p = 0; p < n; p++) {
        if (p >= t) {
            r[p] = _mm512_setzero_si512();
            continue;
        }
        if (prefetch) SCAN2_PREFETCH(row + p * S + ahead);
        r[p] = full ? _mm512_loadu_si512((const void *)(row + p * S))
                    : _mm512_maskz_loadu_epi64(live, row + p * S);
    }
}

/* Channel k's transposed codes of the tile: g[z] for blocks 2 z, 2 z + 1
 * (byte 32 (b & 1) + slot). */
INT8_TARGET SCAN_INLINE void int8_channel(const uint64_t *row, uint64_t S, uint32_t t, int full,
                                          __mmask8 live, uint32_t ahead, int prefetch,
                                          __m512i g[4]) {
    const __m512i sel = _mm512_set1_epi64((long long)0x8040201008040201ull);
    __m512i r[4];
    int8_plane_rows(row, S, t, 4, full, live, ahead, prefetch, r);
    if (t <= 2) {
        for (uint32_t z = 0; z < 4; z++) {
            const __m512i in = _mm512_maskz_permutex2var_epi8(
                0x3333333333333333ull, r[0], _mm512_load_si512((const void *)int8_direct[z]), r[1]);
            g[z] = _mm512_gf2p8affine_epi64_epi8(sel, in, 0);
        }
        return;
    }
    const __m512i l1a = _mm512_load_si512((const void *)int8_rows[0]);
    const __m512i l1b = _mm512_load_si512((const void *)int8_rows[1]);
    const __m512i u[2] = {_mm512_permutex2var_epi8(r[0], l1a, r[1]),
                          _mm512_permutex2var_epi8(r[0], l1b, r[1])};
    const __m512i v[2] = {_mm512_permutex2var_epi8(r[2], l1a, r[3]),
                          _mm512_permutex2var_epi8(r[2], l1b, r[3])};
    for (uint32_t z = 0; z < 4; z++) {
        const __m512i in = _mm512_permutex2var_epi8(
            u[z >> 1], _mm512_load_si512((const void *)int8_planes[z & 1]), v[z >> 1]);
        g[z] = _mm512_gf2p8affine_epi64_epi8(sel, in, 0);
    }
}

/* Channel k's packed codes of the tile (depth t <= 2): g[u] for blocks
 * 4 u .. 4 u + 3, byte 16 (b & 3) + s (s < 16) holding the first two
 * planes of tokens s, 16 + s, 32 + s, 48 + s at bits 7-6, 5-4, 3-2, 1-0. */
INT8_TARGET SCAN_INLINE void int8_channel_packed(const uint64_t *row, uint64_t S, uint32_t t,
                                                 int full, __mmask8 live, uint32_t ahead,
                                                 int prefetch, __m512i g[2]) {
    const __m512i sel = _mm512_set1_epi64((long long)0x8040201008040201ull);
    __m512i r[2];
    int8_plane_rows(row, S, t, 2, full, live, ahead, prefetch, r);
    for (uint32_t u = 0; u < 2; u++) {
        const __m512i in =
            _mm512_permutex2var_epi8(r[0], _mm512_load_si512((const void *)int8_packed[u]), r[1]);
        g[u] = _mm512_gf2p8affine_epi64_epi8(sel, in, 0);
    }
}

/* The quads whose channels all have depth <= 2 (the first ones: channels
 * run in depth order), staged packed. */
SCAN_INLINE uint32_t int8_packed_quads(const scan2_pass *ps) {
    return ps->first[2] >= ps->count ? (ps->count + 3) / 4 : ps->first[2] / 4;
}

/* The weights of the tile (steps 1-3 of the definition), 16 (block, head)
 * pairs a vector: lane 4 (b & 3) + h of half g holds block 4 g + (b & 3)
 * and head h, so a channel's query values are one 4-float broadcast and its
 * scales one permute; the maximum and K then run lane by lane over the
 * channels (no reduction across lanes). The weights' bytes (the low byte
 * of y = magic + w) go to quad dwords by two levels of byte permutes
 * (int8_wpair, int8_wquad); -K is one vpdpbusd of each quad's dword with
 * its channels' |2^(4-t) - 16| (int16: one on the high bytes, one on the
 * low ones). */
INT8_TARGET SCAN_INLINE void int8_weights(const scan2_pass *ps, scan2_tile *tile, const int WIDE) {
    const uint32_t count = ps->count, nq = (count + 3) / 4;
    __m512 wbuf[SCAN_PASS_CHANNELS][2];
    const __m512i absmask = _mm512_set1_epi32(0x7fffffff);
    const __m512i spread[2] = {_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                               _mm512_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7)};
    __m512i mx[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
    for (uint32_t k = 0; k < count; k++) {
        const __m512 a = _mm512_castps256_ps512(_mm256_load_ps(tile->i.a[k]));
        const __m512 q = _mm512_broadcast_f32x4(_mm_loadu_ps(ps->q[k]));
        for (uint32_t g = 0; g < 2; g++) {
            const __m512 W = _mm512_mul_ps(_mm512_permutexvar_ps(spread[g], a), q);
            wbuf[k][g] = W;
            mx[g] = _mm512_max_epu32(mx[g], _mm512_and_si512(_mm512_castps_si512(W), absmask));
        }
    }
    const __m512 magic = _mm512_set1_ps(SCAN_INT8_MAGIC);
    const __m512i inf = _mm512_set1_epi32(0x7f800000);
    __m512 r[2];
    for (uint32_t g = 0; g < 2; g++) {
        const __m512 m = _mm512_castsi512_ps(mx[g]);
        const __mmask16 bad = _mm512_cmpge_epu32_mask(mx[g], inf);
        const __mmask16 ok =
            (__mmask16)(~bad & _mm512_cmp_ps_mask(m, _mm512_set1_ps(SCAN_INT8_TINY), _CMP_GE_OQ));
        const float levels = WIDE ? (float)SCAN_INT16_LEVELS : (float)SCAN_INT8_LEVELS;
        r[g] = _mm512_maskz_div_ps(ok, _mm512_set1_ps(levels), m); /* 0: every w = 0 */
        const __m512 s = _mm512_maskz_div_ps(ok, m, _mm512_set1_ps(128.0f * levels)); /* s / 8 */
        const __m512 s8 = _mm512_mask_blend_ps(bad, s, _mm512_set1_ps(__builtin_nanf("")));
        _mm512_store_ps(&tile->i.s8[4 * g][0], s8);
    }
    /* -K: the quads' weight bytes times |2^(4-t) - 16| (u8), vpdpbusd */
    __m512i kacc[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
    __m512i khi[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
    const __m512i wpair = _mm512_load_si512((const void *)int8_wpair);
    const __m512i wquad = _mm512_load_si512((const void *)int8_wquad);
    uint32_t depth = 1;
    for (uint32_t Q = 0; Q < nq; Q++) {
        __m512i y[2][4], hi[2][4];
        uint32_t e = 0; /* the quad's |2^(4-t) - 16|, a byte each */
        for (uint32_t c = 0; c < 4; c++) {
            const uint32_t k = 4 * Q + c;
            if (k >= count) {
                y[0][c] = y[1][c] = hi[0][c] = hi[1][c] = _mm512_setzero_si512();
                continue;
            }
            while (k >= ps->first[depth]) depth++;
            e |= (16u - (16u >> depth)) << (8 * c);
            for (uint32_t g = 0; g < 2; g++) {
                y[g][c] = _mm512_castps_si512(_mm512_fmadd_ps(wbuf[k][g], r[g], magic));
                if (WIDE) /* w_hi = (w + 128) >> 8, w = y's bits - magic's */
                    hi[g][c] = _mm512_srai_epi32(
                        _mm512_sub_epi32(y[g][c], _mm512_set1_epi32(0x4b400000 - 128)), 8);
            }
        }
        const __m512i ev = _mm512_set1_epi32((int32_t)e);
        for (uint32_t g = 0; g < 2; g++) {
            const __m512i m01 = _mm512_permutex2var_epi8(y[g][0], wpair, y[g][1]);
            const __m512i m23 = _mm512_permutex2var_epi8(y[g][2], wpair, y[g][3]);
            const __m512i wq = _mm512_permutex2var_epi8(m01, wquad, m23);
            _mm512_store_si512((void *)tile->i.w[Q][4 * g], wq);
            kacc[g] = _mm512_dpbusd_epi32(kacc[g], ev, wq);
            if (!WIDE) continue;
            const __m512i h01 = _mm512_permutex2var_epi8(hi[g][0], wpair, hi[g][1]);
            const __m512i h23 = _mm512_permutex2var_epi8(hi[g][2], wpair, hi[g][3]);
            const __m512i hq = _mm512_permutex2var_epi8(h01, wquad, h23);
            _mm512_store_si512((void *)tile->i.wh[Q][4 * g], hq);
            khi[g] = _mm512_dpbusd_epi32(khi[g], ev, hq);
        }
    }
    for (uint32_t g = 0; g < 2; g++) { /* 8 K = -8 (256 khi + kacc) */
        const __m512i minus_k = _mm512_add_epi32(_mm512_slli_epi32(khi[g], 8), kacc[g]);
        _mm512_store_si512((void *)tile->i.k8[4 * g],
                           _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(minus_k, 3)));
    }
}

/* Stages quad Q of the tile: its channels' scales, and its codes packed
 * (PACKED: one vector a block, [Q][b][0]) or not ([Q][b][f]); depth: the
 * depth of channel 4 Q on entry, of the quad's last channel on exit. */
INT8_TARGET SCAN_INLINE void int8_stage_quad(const scan2_pass *ps,
                                             const fathom_segment_view *view, uint32_t b0,
                                             int full, __mmask8 live, uint32_t ahead, int prefetch,
                                             scan2_tile *tile, uint32_t Q, uint32_t *depth,
                                             const int PACKED) {
    const uint64_t S = ps->S;
    __m512i g[4][4];
    for (uint32_t c = 0; c < 4; c++) {
        const uint32_t k = 4 * Q + c;
        if (k >= ps->count) { /* the last quad's missing channels */
            for (uint32_t z = 0; z < 4; z++) g[c][z] = _mm512_setzero_si512();
        } else {
            while (k >= ps->first[*depth]) ++*depth;
            const uint64_t j = ps->channels[k];
            const uint64_t *row = view->planes + j * FATHOM_PLANES * S + b0;
            if (PACKED)
                int8_channel_packed(row, S, *depth, full, live, ahead, prefetch, g[c]);
            else
                int8_channel(row, S, *depth, full, live, ahead, prefetch, g[c]);
            const uint16_t *scale = view->scales + j * S + b0;
            if (prefetch) SCAN2_PREFETCH(scale + ahead);
            const __m128i a = full ? _mm_loadu_si128((const __m128i *)(const void *)scale)
                                   : _mm_maskz_loadu_epi16(live, scale);
            _mm256_store_ps(tile->i.a[k], _mm256_cvtph_ps(a));
        }
    }
    /* the quad's dwords, [Q][b][f]; packed: pairs of blocks 4 u + 2 v, + 1 */
    uint8_t(*dw)[SCAN2_TILE_BLOCKS][2][64] = tile->i.codes;
    const __m512i p0 = _mm512_load_si512((const void *)int8_rows[0]);
    const __m512i p1 = _mm512_load_si512((const void *)int8_rows[1]);
    const __m512i f0 = _mm512_load_si512((const void *)int8_quad[0]);
    const __m512i f1 = _mm512_load_si512((const void *)int8_quad[1]);
    for (uint32_t z = 0; z < (PACKED ? 2u : 4u); z++) {
        const __m512i m01[2] = {_mm512_permutex2var_epi8(g[0][z], p0, g[1][z]),
                                _mm512_permutex2var_epi8(g[0][z], p1, g[1][z])};
        const __m512i m23[2] = {_mm512_permutex2var_epi8(g[2][z], p0, g[3][z]),
                                _mm512_permutex2var_epi8(g[2][z], p1, g[3][z])};
        for (uint32_t v = 0; v < 2; v++) {
            const __m512i d0 = _mm512_permutex2var_epi8(m01[v], f0, m23[v]);
            const __m512i d1 = _mm512_permutex2var_epi8(m01[v], f1, m23[v]);
            if (PACKED) {
                _mm512_store_si512((void *)dw[Q][4 * z + 2 * v][0], d0);
                _mm512_store_si512((void *)dw[Q][4 * z + 2 * v + 1][0], d1);
            } else {
                _mm512_store_si512((void *)dw[Q][2 * z + v][0], d0);
                _mm512_store_si512((void *)dw[Q][2 * z + v][1], d1);
            }
        }
    }
}

INT8_TARGET SCAN_INLINE void int8_load(const scan2_pass *ps, const fathom_segment_view *view,
                                       uint32_t b0, uint32_t nb, uint32_t ahead, int prefetch,
                                       scan2_tile *tile, const int WIDE) {
    _Static_assert(SCAN2_TILE_BLOCKS == 8, "a tile is one 64-byte line of each plane row");
    const __mmask8 live = (__mmask8)((1u << nb) - 1u); /* a short tile reads only its blocks */
    const int full = nb == SCAN2_TILE_BLOCKS;
    const uint32_t nq = (ps->count + 3) / 4, np = int8_packed_quads(ps);
    uint32_t depth = 1;
    for (uint32_t Q = 0; Q < np; Q++)
        int8_stage_quad(ps, view, b0, full, live, ahead, prefetch, tile, Q, &depth, 1);
    for (uint32_t Q = np; Q < nq; Q++)
        int8_stage_quad(ps, view, b0, full, live, ahead, prefetch, tile, Q, &depth, 0);
    int8_weights(ps, tile, WIDE);
}

INT8_TARGET void fathom_scan2_load_avx512_int8(const scan2_pass *ps,
                                               const fathom_segment_view *view, uint32_t b0,
                                               uint32_t nb, uint32_t ahead, int prefetch,
                                               scan2_tile *tile) {
    int8_load(ps, view, b0, nb, ahead, prefetch, tile, 0);
}

INT8_TARGET void fathom_scan2_load_avx512_int16(const scan2_pass *ps,
                                                const fathom_segment_view *view, uint32_t b0,
                                                uint32_t nb, uint32_t ahead, int prefetch,
                                                scan2_tile *tile) {
    int8_load(ps, view, b0, nb, ahead, prefetch, tile, 1);
}

/* a[i] += dot(u8 code[i], s8 weights w broadcast from memory), i < 4, in
 * place (with the intrinsic the compiler copies accumulators around the
 * quad loop). */
INT8_TARGET SCAN_INLINE void int8_dot4(__m512i a[4], const __m512i code[4], const int32_t *w) {
    __asm__("vpdpbusd %8%{1to16%}, %4, %0\n\t"
            "vpdpbusd %8%{1to16%}, %5, %1\n\t"
            "vpdpbusd %8%{1to16%}, %6, %2\n\t"
            "vpdpbusd %8%{1to16%}, %7, %3"
            : "+v"(a[0]), "+v"(a[1]), "+v"(a[2]), "+v"(a[3])
            : "v"(code[0]), "v"(code[1]), "v"(code[2]), "v"(code[3]), "m"(*w));
}

/* The quad's dot products of one head's accumulators: a[0..3] with the
 * weights wl (int8: the weights; int16: their low bytes), a[4..7] with the
 * high bytes wh (int16). */
INT8_TARGET SCAN_INLINE void int8_head_dots(__m512i *a, const __m512i code[4], const int32_t *wl,
                                            const int32_t *wh, const int WIDE) {
    int8_dot4(a, code, wl);
    if (WIDE) int8_dot4(a + 4, code, wh);
}

/* Block b's products of heads h0 .. h0 + HC - 1 into f[h] (int8: HC <= 4;
 * int16: HC <= 2). Accumulators a[i] per head: a[0], a[1] from D0 and
 * D0 & 0x0f, a[2], a[3] from D1 and D1 & 0x0f (a[0], a[2] started at 8 K;
 * int16: a[4..7] the same of the high bytes); a packed quad's vector P
 * gives D0 = P & 0xcc and D1 = (P << 2) & 0xcc. So int8 8 T =
 * a0 - a1 for tokens 16 f + i and (a1 << 4) + 8 K for 32 + 16 f + i; int16
 * 8 T = ((a4 - a5) << 8) + a0 - a1 and (a5 << 12) + (a1 << 4) + 8 K. */
INT8_TARGET SCAN_INLINE void int8_heads(const scan2_pass *ps, const scan2_tile *tile, uint32_t b,
                                        uint32_t h0, const uint32_t HC, __m512 f[4][4],
                                        const int WIDE) {
    __m512i acc[4][8];
#pragma GCC unroll 4
    for (uint32_t x = 0; x < HC; x++)
#pragma GCC unroll 8
        for (uint32_t i = 0; i < 8; i++)
            acc[x][i] = i == 0 || i == 2 ? _mm512_set1_epi32(tile->i.k8[b][h0 + x])
                                         : _mm512_setzero_si512();
    const uint32_t nq = (ps->count + 3) / 4, np = int8_packed_quads(ps);
    const uint8_t(*dw)[SCAN2_TILE_BLOCKS][2][64] = tile->i.codes;
    const __m512i hi2 = _mm512_set1_epi8((char)0xcc), lo2 = _mm512_set1_epi8(0x0c);
    for (uint32_t Q = 0; Q < np; Q++) {
        const __m512i P = _mm512_load_si512((const void *)dw[Q][b][0]);
        const __m512i P2 = _mm512_slli_epi32(P, 2);
        const __m512i code[4] = {_mm512_and_si512(P, hi2), _mm512_and_si512(P, lo2),
                                 _mm512_and_si512(P2, hi2), _mm512_and_si512(P2, lo2)};
#pragma GCC unroll 4
        for (uint32_t x = 0; x < HC; x++)
            int8_head_dots(acc[x], code, &tile->i.w[Q][b][h0 + x], &tile->i.wh[Q][b][h0 + x], WIDE);
    }
    const __m512i low = _mm512_set1_epi8(0x0f);
    for (uint32_t Q = np; Q < nq; Q++) {
        const __m512i d[2] = {_mm512_load_si512((const void *)dw[Q][b][0]),
                              _mm512_load_si512((const void *)dw[Q][b][1])};
        const __m512i code[4] = {d[0], _mm512_and_si512(d[0], low), d[1],
                                 _mm512_and_si512(d[1], low)};
#pragma GCC unroll 4
        for (uint32_t x = 0; x < HC; x++)
            int8_head_dots(acc[x], code, &tile->i.w[Q][b][h0 + x], &tile->i.wh[Q][b][h0 + x], WIDE);
    }
#pragma GCC unroll 4
    for (uint32_t x = 0; x < HC; x++) {
        const uint32_t h = h0 + x;
        const __m512 s8 = _mm512_set1_ps(tile->i.s8[b][h]);
        const __m512i k8 = _mm512_set1_epi32(tile->i.k8[b][h]);
        const __m512i *a = acc[x];
        __m512i t[4] = {_mm512_sub_epi32(a[0], a[1]), _mm512_sub_epi32(a[2], a[3]),
                        _mm512_add_epi32(_mm512_slli_epi32(a[1], 4), k8),
                        _mm512_add_epi32(_mm512_slli_epi32(a[3], 4), k8)};
        if (WIDE) {
            t[0] = _mm512_add_epi32(t[0], _mm512_slli_epi32(_mm512_sub_epi32(a[4], a[5]), 8));
            t[1] = _mm512_add_epi32(t[1], _mm512_slli_epi32(_mm512_sub_epi32(a[6], a[7]), 8));
            t[2] = _mm512_add_epi32(t[2], _mm512_slli_epi32(a[5], 12));
            t[3] = _mm512_add_epi32(t[3], _mm512_slli_epi32(a[7], 12));
        }
#pragma GCC unroll 4
        for (uint32_t g = 0; g < 4; g++) f[h][g] = _mm512_mul_ps(s8, _mm512_cvtepi32_ps(t[g]));
    }
}

/* int8: the chunk's heads at once; int16: two at a time (8 accumulators
 * each). */
INT8_TARGET SCAN_INLINE void int8_fused(const scan2_pass *ps, const scan2_tile *tile, uint32_t b,
                                        const uint32_t HC, float *out, uint64_t ld,
                                        uint32_t valid, const int WIDE) {
    __m512 f[4][4];
    if (!WIDE)
        int8_heads(ps, tile, b, 0, HC, f, 0);
    else {
        int8_heads(ps, tile, b, 0, HC < 2 ? HC : 2, f, 1);
        if (HC > 2) int8_heads(ps, tile, b, 2, HC - 2, f, 1);
    }
    avx512_put_block(ps, HC, f, out, ld, valid);
}

INT8_TARGET SCAN_INLINE void int8_block(const scan2_pass *ps, const scan2_tile *tile, uint32_t b,
                                        float *out, uint64_t ld, uint32_t valid, const int WIDE) {
#define INT8_FUSED(HC) int8_fused(ps, tile, b, HC, out, ld, valid, WIDE)
    SCAN_HEAD_CHUNK(ps->heads, INT8_FUSED);
#undef INT8_FUSED
}

INT8_TARGET void fathom_scan2_block_avx512_int8(const scan2_pass *ps, const scan2_tile *tile,
                                                uint32_t b, float *dec, float *out, uint64_t ld,
                                                uint32_t valid) {
    (void)dec;
    int8_block(ps, tile, b, out, ld, valid, 0);
}

INT8_TARGET void fathom_scan2_block_avx512_int16(const scan2_pass *ps, const scan2_tile *tile,
                                                 uint32_t b, float *dec, float *out, uint64_t ld,
                                                 uint32_t valid) {
    (void)dec;
    int8_block(ps, tile, b, out, ld, valid, 1);
}

/* ---- the candidate filter (scan_internal.h), 16 or 64 scores per step ---- */

/* Appends the candidates of scores s[i + j], j < 64, whose bit is set in hits. */
SCAN_INLINE uint32_t filter_hits(const float *s, uint32_t i, uint64_t hits, uint64_t pos0,
                                 uint64_t *out) {
    uint32_t c = 0;
    for (; hits; hits &= hits - 1) {
        const uint32_t j = i + (uint32_t)__builtin_ctzll(hits);
        out[c++] = scan_candidate(s[j], pos0 + j);
    }
    return c;
}

AVX2_TARGET uint32_t fathom_scan_filter_avx2(const float *s, uint32_t n, float thr, int strict,
                                             uint64_t pos0, uint64_t *out) {
    const __m256 t = _mm256_set1_ps(thr);
    uint32_t c = 0, i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 a = _mm256_loadu_ps(s + i), b = _mm256_loadu_ps(s + i + 8);
        const __m256 pa = strict ? _mm256_cmp_ps(a, t, _CMP_NLE_UQ) : _mm256_cmp_ps(a, t, _CMP_NLT_UQ);
        const __m256 pb = strict ? _mm256_cmp_ps(b, t, _CMP_NLE_UQ) : _mm256_cmp_ps(b, t, _CMP_NLT_UQ);
        const uint32_t hits =
            (uint32_t)_mm256_movemask_ps(pa) | (uint32_t)_mm256_movemask_ps(pb) << 8;
        if (hits) c += filter_hits(s, i, hits, pos0, out + c);
    }
    return c + scan_filter_tail(s, i, n, thr, strict, pos0, out + c);
}

/* 64 scores an iteration and one branch on their four compare masks: most
 * scores are below the floor, so the branch is rarely taken. */
#define FILTER64_LOOP(PRED)                                                                        \
    for (; i + 64 <= n; i += 64) {                                                                 \
        const __mmask16 m0 = _mm512_cmp_ps_mask(_mm512_loadu_ps(s + i), t, PRED);                  \
        const __mmask16 m1 = _mm512_cmp_ps_mask(_mm512_loadu_ps(s + i + 16), t, PRED);             \
        const __mmask16 m2 = _mm512_cmp_ps_mask(_mm512_loadu_ps(s + i + 32), t, PRED);             \
        const __mmask16 m3 = _mm512_cmp_ps_mask(_mm512_loadu_ps(s + i + 48), t, PRED);             \
        const uint64_t hits = (uint64_t)m0 | (uint64_t)m1 << 16 | (uint64_t)m2 << 32 |             \
                              (uint64_t)m3 << 48;                                                  \
        if (hits) c += filter_hits(s, i, hits, pos0, out + c);                                     \
    }

AVX512_TARGET uint32_t fathom_scan_filter_avx512(const float *s, uint32_t n, float thr,
                                                 int strict, uint64_t pos0, uint64_t *out) {
    const __m512 t = _mm512_set1_ps(thr);
    uint32_t c = 0, i = 0;
    if (strict) {
        FILTER64_LOOP(_CMP_NLE_UQ)
    } else {
        FILTER64_LOOP(_CMP_NLT_UQ)
    }
    for (; i + 16 <= n; i += 16) {
        const __m512 a = _mm512_loadu_ps(s + i);
        const uint32_t hits = strict ? _mm512_cmp_ps_mask(a, t, _CMP_NLE_UQ)
                                     : _mm512_cmp_ps_mask(a, t, _CMP_NLT_UQ);
        if (hits) c += filter_hits(s, i, hits, pos0, out + c);
    }
    return c + scan_filter_tail(s, i, n, thr, strict, pos0, out + c);
}

#endif /* FATHOM_X86 */

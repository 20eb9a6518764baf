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

AVX2_TARGET void fathom_scan2_coef_x86(const scan2_pass *ps, scan2_tile *tile) {
    for (uint32_t t = 1; t <= FATHOM_PLANES; t++) {
        const __m256 m0 = _mm256_set1_ps(1.0f / (float)(1u << t) - 1.0f);
        for (uint32_t k = ps->first[t - 1]; k < ps->first[t]; k++) {
            const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)tile->scales[k]));
            const __m256 c0 = _mm256_mul_ps(a, m0); /* scan2_coef0 */
            float(*c)[SCAN2_TILE_BLOCKS] = tile->coef[k];
            _mm256_store_ps(c[0], c0);
            for (uint32_t p = 0; p < FATHOM_PLANES; p++) /* scan2_coefp */
                _mm256_store_ps(c[1 + p], _mm256_mul_ps(a, _mm256_set1_ps(1.0f / (float)(1u << p))));
            _mm256_store_ps(c[5], _mm256_add_ps(c0, a));
        }
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
#pragma GCC unroll 4
        for (uint32_t h = 0; h < HC; h++) {
            const __m512 qh = _mm512_set1_ps(ps->q[k][h]);
#pragma GCC unroll 4
            for (uint32_t g = 0; g < 4; g++) acc[h][g] = _mm512_fmadd_ps(qh, v[g], acc[h][g]);
        }
    }
}

AVX512_TARGET SCAN_INLINE void avx512_fused(const scan2_pass *ps, const scan2_tile *tile,
                                            uint32_t b, const uint32_t HC, float *out, uint64_t ld,
                                            uint32_t valid) {
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (uint32_t h = 0; h < HC; h++)
#pragma GCC unroll 4
        for (uint32_t g = 0; g < 4; g++) acc[h][g] = _mm512_setzero_ps();
#define AVX512_DEPTH(T) avx512_fused_depth(ps, tile, b, T, HC, acc)
    SCAN_FOR_EACH_DEPTH(AVX512_DEPTH);
#undef AVX512_DEPTH
#pragma GCC unroll 4
    for (uint32_t h = 0; h < HC; h++) {
        float *o = out + h * ld;
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

AVX512_TARGET void fathom_scan2_block_avx512(const scan2_pass *ps, const scan2_tile *tile,
                                             uint32_t b, float *dec, float *out, uint64_t ld,
                                             uint32_t valid) {
    (void)dec;
#define AVX512_FUSED(HC) avx512_fused(ps, tile, b, HC, out, ld, valid)
    SCAN_HEAD_CHUNK(ps->heads, AVX512_FUSED);
#undef AVX512_FUSED
}

/* ---- the candidate filter (scan_internal.h), 16 scores per step ---- */

/* Appends the candidates of scores s[i + j], j < 16, whose bit is set in hits. */
SCAN_INLINE uint32_t filter_hits(const float *s, uint32_t i, uint32_t hits, uint64_t pos0,
                                 uint64_t *out) {
    uint32_t c = 0;
    for (; hits; hits &= hits - 1) {
        const uint32_t j = i + (uint32_t)__builtin_ctz(hits);
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

AVX512_TARGET uint32_t fathom_scan_filter_avx512(const float *s, uint32_t n, float thr,
                                                 int strict, uint64_t pos0, uint64_t *out) {
    const __m512 t = _mm512_set1_ps(thr);
    uint32_t c = 0, i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 a = _mm512_loadu_ps(s + i);
        const uint32_t hits = strict ? _mm512_cmp_ps_mask(a, t, _CMP_NLE_UQ)
                                     : _mm512_cmp_ps_mask(a, t, _CMP_NLT_UQ);
        if (hits) c += filter_hits(s, i, hits, pos0, out + c);
    }
    return c + scan_filter_tail(s, i, n, thr, strict, pos0, out + c);
}

#endif /* FATHOM_X86 */

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

/* The 16 bits of plane row r, block b that are tokens 16 g .. 16 g + 15. */
SCAN_INLINE uint16_t tile_bits16(const scan2_tile *tile, uint32_t r, uint32_t b, uint32_t g) {
    uint16_t m;
    memcpy(&m, (const unsigned char *)&tile->words[r][b] + 2 * g, sizeof m);
    return m;
}

/* ---- tiled AVX2: decode fused with the multiply, 16 tokens x 4 heads ----
 *
 * A channel's value for 8 tokens is coef0 plus, plane by plane, coefp AND a
 * lane mask of the plane's bits (fathom_bit_mask): the adds of the decode in
 * the order of the other kernels (bit 0: + 0.0f, which leaves the scores
 * as they are), on the vector adders and logic units, so that the fused
 * multiply-add units do only the G multiply-adds per channel and token. */

#define AVX2_GEMM_HEAD(i, acc0, acc1)                                                              \
    if (HC > i) {                                                                                  \
        const __m256 qh = _mm256_broadcast_ss(q + i);                                              \
        acc0 = _mm256_fmadd_ps(qh, v0, acc0);                                                      \
        acc1 = _mm256_fmadd_ps(qh, v1, acc1);                                                      \
    }

/* The channels of depth T, in pass order, into the accumulators. */
#define AVX2_FUSED_DEPTH(T)                                                                        \
    for (uint32_t k = ps->first[(T)-1], r = ps->row[T]; k < ps->first[T]; k++, r += (T)) {         \
        const float(*cf)[SCAN2_TILE_BLOCKS] = tile->coef[k];                                       \
        __m256 v0 = _mm256_broadcast_ss(&cf[0][b]), v1 = v0;                                       \
        for (uint32_t p = 0; p < (T); p++) {                                                       \
            const __m256 wp = _mm256_broadcast_ss(&cf[1 + p][b]);                                  \
            const uint32_t bits = tile_bits16(tile, r + p, b, quarter);                            \
            v0 = _mm256_add_ps(v0, _mm256_and_ps(wp, _mm256_load_ps(bit_mask[bits & 0xffu])));     \
            v1 = _mm256_add_ps(v1, _mm256_and_ps(wp, _mm256_load_ps(bit_mask[bits >> 8])));        \
        }                                                                                          \
        const float *q = ps->q[k];                                                                 \
        AVX2_GEMM_HEAD(0, a00, a01)                                                                \
        AVX2_GEMM_HEAD(1, a10, a11)                                                                \
        AVX2_GEMM_HEAD(2, a20, a21)                                                                \
        AVX2_GEMM_HEAD(3, a30, a31)                                                                \
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

/* 16 tokens x HC heads; the accumulators are named variables so that they
 * stay in registers (an array of them was spilled to the stack). */
AVX2_TARGET SCAN_INLINE void avx2_fused(const scan2_pass *ps, const scan2_tile *tile, uint32_t b,
                                        const uint32_t HC, float *out, uint64_t ld,
                                        uint32_t valid) {
    const float(*bit_mask)[8] = (const float(*)[8])fathom_bit_mask;
    for (uint32_t quarter = 0; quarter * 16 < valid; quarter++) {
        __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00,
               a30 = a00, a31 = a00;
        AVX2_FUSED_DEPTH(1)
        AVX2_FUSED_DEPTH(2)
        AVX2_FUSED_DEPTH(3)
        AVX2_FUSED_DEPTH(4)
        const uint32_t n = valid - quarter * 16 < 16 ? valid - quarter * 16 : 16;
        float *o = out + quarter * 16;
        avx2_put16(o, a00, a01, n, ps->add);
        if (HC > 1) avx2_put16(o + ld, a10, a11, n, ps->add);
        if (HC > 2) avx2_put16(o + 2 * ld, a20, a21, n, ps->add);
        if (HC > 3) avx2_put16(o + 3 * ld, a30, a31, n, ps->add);
    }
}
#undef AVX2_FUSED_DEPTH
#undef AVX2_GEMM_HEAD

AVX2_TARGET void fathom_scan2_block_avx2(const scan2_pass *ps, const scan2_tile *tile, uint32_t b,
                                         float *dec, float *out, uint64_t ld, uint32_t valid) {
    (void)dec;
#define AVX2_FUSED(HC) avx2_fused(ps, tile, b, HC, out, ld, valid)
    SCAN_HEAD_CHUNK(ps->heads, AVX2_FUSED);
#undef AVX2_FUSED
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

/* Dequantization against values computed independently: each test picks the
 * quantized integers and scales first, packs them into ggml's block layout
 * the way ggml's quantizers do (the inverse direction of the decoder), and
 * expects the per-element formula of the format computed in double from the
 * chosen values. Scales are dyadic (few mantissa bits, incl. negative, zero
 * and f16 subnormals) so that the float arithmetic of the decoder is exact
 * up to its single final rounding, which the expected (float)(double)
 * reproduces: results must be equal, not near. */
#include "check.h"
#include "fathom_model.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static uint32_t rng_state = 12345;
static uint32_t rnd(uint32_t n) { /* uniform-ish in [0, n) */
    rng_state = rng_state * 1664525u + 1013904223u;
    return (rng_state >> 8) % n;
}

/* f16 values chosen by bits, with their exact values written out. */
typedef struct half_case {
    uint16_t bits;
    double value;
} half_case;
static const half_case scales[] = {
    {0x3800, 0.5},          {0xb400, -0.25},       {0x0000, 0.0},
    {0x8000, -0.0},         {0x0001, 0x1p-24},     {0x8200, -0x1p-15}, /* subnormals */
    {0x4b00, 14.0},         {0x3c00, 1.0},         {0x1400, 0x1p-10},
    {0x3e00, 1.5},
};
#define N_SCALES (sizeof scales / sizeof scales[0])

static void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static int all_equal(const float *got, const double *want, uint64_t n, const char *what) {
    for (uint64_t i = 0; i < n; i++) {
        if (!(got[i] == (float)want[i]) && !(isnan(got[i]) && isnan(want[i]))) {
            fprintf(stderr, "%s: element %llu = %.9g, expected %.9g\n", what, (unsigned long long)i,
                    got[i], (float)want[i]);
            return 0;
        }
    }
    return 1;
}

#define NB 20 /* blocks per test: every scale appears as d and as m */

/* ---- 32-element types ---------------------------------------------------- */

static void test_q4_0_q5_0_q8_0(void) {
    static uint8_t q4[NB * 18], q5[NB * 22], q8[NB * 34];
    static double e4[NB * 32], e5[NB * 32], e8[NB * 32];
    static float out[NB * 32];
    for (int b = 0; b < NB; b++) {
        const half_case d = scales[b % N_SCALES];
        uint8_t *p4 = q4 + 18 * b, *p5 = q5 + 22 * b, *p8 = q8 + 34 * b;
        put16(p4, d.bits), put16(p5, d.bits), put16(p8, d.bits);
        uint32_t qh = 0;
        memset(p4 + 2, 0, 16), memset(p5 + 6, 0, 16);
        for (int k = 0; k < 32; k++) {
            /* chosen integers, extremes included */
            const int v4 = k == 0 ? 0 : k == 1 ? 15 : (int)rnd(16);
            const int v5 = k == 0 ? 0 : k == 1 ? 31 : (int)rnd(32);
            const int v8 = k == 0 ? -128 : k == 1 ? 127 : (int)rnd(256) - 128;
            /* element k lives in byte k % 16, low nibble for k < 16 */
            p4[2 + k % 16] |= (uint8_t)(v4 << (k < 16 ? 0 : 4));
            p5[6 + k % 16] |= (uint8_t)((v5 & 15) << (k < 16 ? 0 : 4));
            qh |= (uint32_t)(v5 >> 4) << k; /* fifth bit of element k is bit k */
            p8[2 + k] = (uint8_t)(int8_t)v8;
            e4[32 * b + k] = (v4 - 8) * d.value;
            e5[32 * b + k] = (v5 - 16) * d.value;
            e8[32 * b + k] = v8 * d.value;
        }
        for (int i = 0; i < 4; i++) p5[2 + i] = (uint8_t)(qh >> (8 * i));
    }
    CHECK_OK(fathom_dequantize(FATHOM_GGML_TYPE_Q4_0, q4, sizeof q4, NB * 32, out));
    CHECK(all_equal(out, e4, NB * 32, "q4_0"));
    CHECK_OK(fathom_dequantize(FATHOM_GGML_TYPE_Q5_0, q5, sizeof q5, NB * 32, out));
    CHECK(all_equal(out, e5, NB * 32, "q5_0"));
    CHECK_OK(fathom_dequantize(FATHOM_GGML_TYPE_Q8_0, q8, sizeof q8, NB * 32, out));
    CHECK(all_equal(out, e8, NB * 32, "q8_0"));
    /* spot values: block 0 has d = 0.5, element 0 is quant 0, element 1 the top */
    CHECK(out[0] == -64.0f && out[1] == 63.5f);
    CHECK_OK(fathom_dequantize(FATHOM_GGML_TYPE_Q4_0, q4, sizeof q4, 32, out));
    CHECK(out[0] == -4.0f && out[1] == 3.5f);
}

static void test_q4_1_q5_1(void) {
    static uint8_t q4[NB * 20], q5[NB * 24];
    static double e4[NB * 32], e5[NB * 32];
    static float out[NB * 32];
    for (int b = 0; b < NB; b++) {
        const half_case d = scales[b % N_SCALES], m = scales[(b / 2 + 3) % N_SCALES];
        uint8_t *p4 = q4 + 20 * b, *p5 = q5 + 24 * b;
        put16(p4, d.bits), put16(p4 + 2, m.bits);
        put16(p5, d.bits), put16(p5 + 2, m.bits);
        memset(p4 + 4, 0, 16), memset(p5 + 8, 0, 16);
        uint32_t qh = 0;
        for (int k = 0; k < 32; k++) {
            const int v4 = k == 0 ? 0 : k == 1 ? 15 : (int)rnd(16);
            const int v5 = k == 0 ? 0 : k == 1 ? 31 : (int)rnd(32);
            p4[4 + k % 16] |= (uint8_t)(v4 << (k < 16 ? 0 : 4));
            p5[8 + k % 16] |= (uint8_t)((v5 & 15) << (k < 16 ? 0 : 4));
            qh |= (uint32_t)(v5 >> 4) << k;
            e4[32 * b + k] = v4 * d.value + m.value; /* one rounding, as the decoder */
            e5[32 * b + k] = v5 * d.value + m.value;
        }
        for (int i = 0; i < 4; i++) p5[4 + i] = (uint8_t)(qh >> (8 * i));
    }
    CHECK_OK(fathom_dequantize(FATHOM_GGML_TYPE_Q4_1, q4, sizeof q4, NB * 32, out));
    CHECK(all_equal(out, e4, NB * 32, "q4_1"));
    CHECK(out[0] == 0.0f && out[1] == 7.5f); /* block 0: d 0.5, m -0 */
    CHECK_OK(fathom_dequantize(FATHOM_GGML_TYPE_Q5_1, q5, sizeof q5, NB * 32, out));
    CHECK(all_equal(out, e5, NB * 32, "q5_1"));
    CHECK(out[1] == 15.5f);
}

/* ---- k-quants ------------------------------------------------------------ */

/* Pack eight 6-bit scales and mins as ggml's quantize_row_q4_K does. */
static void pack_scales_k4(const int *ls, const int *lm, uint8_t *out) {
    memset(out, 0, 12);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            out[j] = (uint8_t)ls[j];
            out[j + 4] = (uint8_t)lm[j];
        } else {
            out[j + 4] = (uint8_t)((ls[j] & 0xf) | ((lm[j] & 0xf) << 4));
            out[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            out[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

#define NBK 10

static void test_q4_k_q5_k(void) {
    static uint8_t q4[NBK * 144], q5[NBK * 176];
    static double e4[NBK * 256], e5[NBK * 256];
    static float out[NBK * 256];
    for (int b = 0; b < NBK; b++) {
        const half_case d = scales[b % N_SCALES], dmin = scales[(b + 4) % N_SCALES];
        int ls[8], lm[8];
        for (int s = 0; s < 8; s++) {
            ls[s] = s == 0 ? 63 : (int)rnd(64);
            lm[s] = s == 7 ? 63 : (int)rnd(64); /* high bits of sub-block 4..7 exercised */
        }
        uint8_t *p4 = q4 + 144 * b, *p5 = q5 + 176 * b;
        put16(p4, d.bits), put16(p4 + 2, dmin.bits);
        put16(p5, d.bits), put16(p5 + 2, dmin.bits);
        pack_scales_k4(ls, lm, p4 + 4);
        pack_scales_k4(ls, lm, p5 + 4);
        memset(p4 + 16, 0, 128), memset(p5 + 16, 0, 160);
        for (int k = 0; k < 256; k++) {
            const int v4 = k == 0 ? 15 : (int)rnd(16);
            const int v5 = k == 0 ? 31 : (int)rnd(32);
            /* 64-element chunk c: its first 32 in the low nibbles of bytes
             * 32c..32c+31, its second 32 in the high nibbles */
            const int c = k / 64, l = k % 32, high = (k % 64) >= 32;
            p4[16 + 32 * c + l] |= (uint8_t)(v4 << (high ? 4 : 0));
            p5[48 + 32 * c + l] |= (uint8_t)((v5 & 15) << (high ? 4 : 0));
            p5[16 + l] |= (uint8_t)((v5 >> 4) << (2 * c + high)); /* qh bit 2c (+1) */
            const int s = k / 32;
            e4[256 * b + k] = d.value * ls[s] * v4 - dmin.value * lm[s];
            e5[256 * b + k] = d.value * ls[s] * v5 - dmin.value * lm[s];
        }
    }
    CHECK_OK(fathom_dequantize(FATHOM_GGML_TYPE_Q4_K, q4, sizeof q4, NBK * 256, out));
    CHECK(all_equal(out, e4, NBK * 256, "q4_k"));
    CHECK(out[0] == 0.5f * 63 * 15 - 0.0f); /* block 0: d 0.5, dmin 0x1p-24 * lm[0] */
    CHECK_OK(fathom_dequantize(FATHOM_GGML_TYPE_Q5_K, q5, sizeof q5, NBK * 256, out));
    CHECK(all_equal(out, e5, NBK * 256, "q5_k"));
}

/* Q2_K/Q3_K: element k's 2-bit field sits in byte 32*(k/128) + k%32 of qs,
 * at bit 2*((k%128)/32), as ggml's quantize_row_q2_K/q3_K pack it. */
static void put_2bit(uint8_t *qs, int k, unsigned v) {
    qs[32 * (k / 128) + k % 32] |= (uint8_t)(v << (2 * ((k % 128) / 32)));
}

static void test_q2_k_q3_k(void) {
    static uint8_t q2[NBK * 84], q3[NBK * 110];
    static double e2[NBK * 256], e3[NBK * 256];
    static float out[NBK * 256];
    for (int b = 0; b < NBK; b++) {
        const half_case d = scales[b % N_SCALES], dmin = scales[(b + 7) % N_SCALES];
        uint8_t *p2 = q2 + 84 * b, *p3 = q3 + 110 * b;
        memset(p2, 0, 84), memset(p3, 0, 110);
        put16(p2 + 80, d.bits), put16(p2 + 82, dmin.bits), put16(p3 + 108, d.bits);
        int ls2[16], lm2[16], ls3[16];
        for (int j = 0; j < 16; j++) {
            ls2[j] = j == 0 ? 15 : (int)rnd(16);
            lm2[j] = j == 1 ? 15 : (int)rnd(16);
            ls3[j] = j == 0 ? 0 : j == 15 ? 63 : (int)rnd(64); /* scale - 32: -32..31 */
            p2[j] = (uint8_t)(ls2[j] | (lm2[j] << 4));
            /* ggml: low nibbles in bytes 0-7 then high nibbles, 2 high bits in 8-11 */
            if (j < 8) p3[96 + j] |= (uint8_t)(ls3[j] & 15);
            else p3[96 + j - 8] |= (uint8_t)((ls3[j] & 15) << 4);
            p3[96 + 8 + j % 4] |= (uint8_t)((ls3[j] >> 4) << (2 * (j / 4)));
        }
        for (int k = 0; k < 256; k++) {
            const int v2 = k == 0 ? 3 : (int)rnd(4);
            const int v3 = k == 0 ? -4 : k == 1 ? 3 : (int)rnd(8) - 4; /* -4..3 */
            put_2bit(p2 + 16, k, (unsigned)v2);
            const unsigned L = (unsigned)(v3 + 4); /* 0..7; bit 2 to hmask */
            put_2bit(p3 + 32, k, L & 3);
            if (L & 4) p3[k % 32] |= (uint8_t)(1u << (k / 32)); /* set: no -4 */
            e2[256 * b + k] = d.value * (ls2[k / 16]) * v2 - dmin.value * lm2[k / 16];
            e3[256 * b + k] = d.value * (ls3[k / 16] - 32) * v3;
        }
    }
    CHECK_OK(fathom_dequantize(FATHOM_GGML_TYPE_Q2_K, q2, sizeof q2, NBK * 256, out));
    CHECK(all_equal(out, e2, NBK * 256, "q2_k"));
    CHECK(out[0] == 0.5f * 15 * 3 - 1.0f * (q2[0] >> 4)); /* block 0: d 0.5, dmin 1 */
    CHECK_OK(fathom_dequantize(FATHOM_GGML_TYPE_Q3_K, q3, sizeof q3, NBK * 256, out));
    CHECK(all_equal(out, e3, NBK * 256, "q3_k"));
    CHECK(out[0] == 0.5f * -32 * -4 && out[1] == 0.5f * -32 * 3);
}

static void test_q6_k(void) {
    static uint8_t q6[NBK * 210];
    static double e6[NBK * 256];
    static float out[NBK * 256];
    for (int b = 0; b < NBK; b++) {
        const half_case d = scales[(b + 1) % N_SCALES];
        uint8_t *p = q6 + 210 * b;
        memset(p, 0, 210);
        int sc[16];
        for (int s = 0; s < 16; s++) {
            sc[s] = s == 0 ? -128 : s == 1 ? 127 : (int)rnd(256) - 128;
            p[192 + s] = (uint8_t)(int8_t)sc[s];
        }
        put16(p + 208, d.bits);
        for (int k = 0; k < 256; k++) {
            const int v = k == 0 ? -32 : k == 1 ? 31 : (int)rnd(64) - 32;
            const unsigned L = (unsigned)(v + 32); /* 6 bits */
            /* 128-element half h; inside it quarter r = (k%128)/32, lane l */
            const int h = k / 128, r = (k % 128) / 32, l = k % 32;
            p[64 * h + l + 32 * (r & 1)] |= (uint8_t)((L & 15) << (r >= 2 ? 4 : 0));
            p[128 + 32 * h + l] |= (uint8_t)((L >> 4) << (2 * r));
            e6[256 * b + k] = d.value * sc[k / 16] * v;
        }
    }
    CHECK_OK(fathom_dequantize(FATHOM_GGML_TYPE_Q6_K, q6, sizeof q6, NBK * 256, out));
    CHECK(all_equal(out, e6, NBK * 256, "q6_k"));
    CHECK(out[0] == -0.25f * -128 * -32 && out[1] == -0.25f * -128 * 31);
}

/* ---- plain types --------------------------------------------------------- */

/* binary16 by its definition: (-1)^s 2^(e-15) (1 + f/1024), subnormal 2^-14 f/1024. */
static double half_value(uint16_t h) {
    const int s = h >> 15, e = (h >> 10) & 31, f = h & 1023;
    double v = e == 0 ? ldexp(f, -24) : e == 31 ? (f ? NAN : INFINITY) : ldexp(1024 + f, e - 25);
    return s ? -v : v;
}

/* bfloat16: the top half of a float32: 2^(e-127) (1 + f/128), subnormal 2^-126 f/128. */
static double bf16_value(uint16_t h) {
    const int s = h >> 15, e = (h >> 7) & 255, f = h & 127;
    double v = e == 0 ? ldexp(f, -133) : e == 255 ? (f ? NAN : INFINITY) : ldexp(128 + f, e - 134);
    return s ? -v : v;
}

static void test_plain(void) {
    enum { N = 65536 };
    static uint8_t src[N * 4];
    static double want[N];
    static float out[N];
    for (uint32_t h = 0; h < N; h++) put16(src + 2 * h, (uint16_t)h), want[h] = half_value((uint16_t)h);
    CHECK_OK(fathom_dequantize(FATHOM_GGML_TYPE_F16, src, 2 * N, N, out));
    CHECK(all_equal(out, want, N, "f16 (every value)"));
    for (uint32_t h = 0; h < N; h++) want[h] = bf16_value((uint16_t)h);
    CHECK_OK(fathom_dequantize(FATHOM_GGML_TYPE_BF16, src, 2 * N, N, out));
    CHECK(all_equal(out, want, N, "bf16 (every value)"));
    /* f32: little-endian bytes, unaligned source */
    const uint8_t f32[9] = {0xff, 0x00, 0x00, 0xc0, 0x3f, 0x01, 0x00, 0x80, 0x00}; /* 1.5, 0x00800001 */
    CHECK_OK(fathom_dequantize(FATHOM_GGML_TYPE_F32, f32 + 1, 8, 2, out));
    CHECK(out[0] == 1.5f && out[1] == (float)ldexp(0x800001, -149));
}

/* ---- table, sizes and arguments ------------------------------------------ */

static void test_table_and_args(void) {
    uint32_t be, bb;
    uint64_t bytes;
    const struct {
        fathom_ggml_type t;
        uint32_t be, bb;
        const char *name;
    } known[] = {
        {FATHOM_GGML_TYPE_F32, 1, 4, "f32"},      {FATHOM_GGML_TYPE_F16, 1, 2, "f16"},
        {FATHOM_GGML_TYPE_BF16, 1, 2, "bf16"},    {FATHOM_GGML_TYPE_Q4_0, 32, 18, "q4_0"},
        {FATHOM_GGML_TYPE_Q4_1, 32, 20, "q4_1"},  {FATHOM_GGML_TYPE_Q5_0, 32, 22, "q5_0"},
        {FATHOM_GGML_TYPE_Q5_1, 32, 24, "q5_1"},  {FATHOM_GGML_TYPE_Q8_0, 32, 34, "q8_0"},
        {FATHOM_GGML_TYPE_Q2_K, 256, 84, "q2_k"}, {FATHOM_GGML_TYPE_Q3_K, 256, 110, "q3_k"},
        {FATHOM_GGML_TYPE_Q4_K, 256, 144, "q4_k"}, {FATHOM_GGML_TYPE_Q5_K, 256, 176, "q5_k"},
        {FATHOM_GGML_TYPE_Q6_K, 256, 210, "q6_k"}, {FATHOM_GGML_TYPE_IQ4_XS, 256, 136, "iq4_xs"},
        {FATHOM_GGML_TYPE_I64, 1, 8, "i64"},      {FATHOM_GGML_TYPE_MXFP4, 32, 17, "mxfp4"},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        CHECK_OK(fathom_ggml_type_block(known[i].t, &be, &bb));
        CHECK(be == known[i].be && bb == known[i].bb);
        CHECK(strcmp(fathom_ggml_type_name(known[i].t), known[i].name) == 0);
        CHECK_OK(fathom_ggml_row_bytes(known[i].t, 3 * (uint64_t)known[i].be, &bytes));
        CHECK(bytes == 3 * (uint64_t)known[i].bb);
    }
    CHECK_OK(fathom_ggml_type_block(FATHOM_GGML_TYPE_Q8_0, NULL, NULL));
    const int removed[] = {4, 5, 31, 32, 33, 36, 37, 38, FATHOM_GGML_TYPE_COUNT, -1, 1 << 30};
    for (size_t i = 0; i < sizeof removed / sizeof removed[0]; i++) {
        CHECK_STATUS(fathom_ggml_type_block((fathom_ggml_type)removed[i], &be, &bb),
                     FATHOM_ERR_UNSUPPORTED);
        CHECK(strcmp(fathom_ggml_type_name((fathom_ggml_type)removed[i]), "unknown") == 0);
        CHECK_STATUS(fathom_ggml_row_bytes((fathom_ggml_type)removed[i], 32, &bytes),
                     FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fathom_dequantize((fathom_ggml_type)removed[i], "x", 1, 0, NULL),
                     FATHOM_ERR_INVALID_ARG);
    }
    CHECK_OK(fathom_ggml_row_bytes(FATHOM_GGML_TYPE_Q4_1, 576, &bytes));
    CHECK(bytes == 360);
    CHECK_OK(fathom_ggml_row_bytes(FATHOM_GGML_TYPE_Q4_1, 0, &bytes));
    CHECK(bytes == 0);
    CHECK_STATUS(fathom_ggml_row_bytes(FATHOM_GGML_TYPE_Q4_1, 33, &bytes), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_ggml_row_bytes(FATHOM_GGML_TYPE_Q4_K, 128, &bytes), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_ggml_row_bytes(FATHOM_GGML_TYPE_Q4_1, 32, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_ggml_row_bytes(FATHOM_GGML_TYPE_F64, UINT64_MAX / 4, &bytes),
                 FATHOM_ERR_INVALID_ARG); /* size overflows */
    CHECK_OK(fathom_ggml_row_bytes(FATHOM_GGML_TYPE_I8, UINT64_MAX, &bytes));
    CHECK(bytes == UINT64_MAX);

    uint8_t block[34] = {0};
    float out[32];
    CHECK_OK(fathom_dequantize(FATHOM_GGML_TYPE_Q8_0, NULL, 0, 0, NULL));
    CHECK_STATUS(fathom_dequantize(FATHOM_GGML_TYPE_Q8_0, NULL, 34, 32, out), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_dequantize(FATHOM_GGML_TYPE_Q8_0, block, 34, 32, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_dequantize(FATHOM_GGML_TYPE_Q8_0, block, 33, 32, out), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_dequantize(FATHOM_GGML_TYPE_Q8_0, block, 34, 16, out), FATHOM_ERR_INVALID_ARG);
    CHECK_OK(fathom_dequantize(FATHOM_GGML_TYPE_Q8_0, block, 100, 32, out)); /* more is fine */
    CHECK(out[0] == 0.0f && out[31] == 0.0f);
    const fathom_ggml_type unsupported[] = {FATHOM_GGML_TYPE_Q8_K, FATHOM_GGML_TYPE_IQ2_XXS,
                                            FATHOM_GGML_TYPE_Q8_1, FATHOM_GGML_TYPE_IQ4_NL,
                                            FATHOM_GGML_TYPE_I32, FATHOM_GGML_TYPE_F64};
    static uint8_t big[4096];
    static float big_out[1024];
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++) {
        CHECK_OK(fathom_ggml_type_block(unsupported[i], &be, &bb));
        CHECK_STATUS(fathom_dequantize(unsupported[i], big, sizeof big, be, big_out),
                     FATHOM_ERR_UNSUPPORTED);
    }
}

int main(void) {
    test_q4_0_q5_0_q8_0();
    test_q4_1_q5_1();
    test_q4_k_q5_k();
    test_q6_k();
    test_q2_k_q3_k();
    test_plain();
    test_table_and_args();
    return check_summary("test_quant");
}

/* ggml tensor types: block sizes and reference dequantization.
 *
 * Every decoder follows ggml's dequantize_row_* reference code (ggml-quants.c)
 * with the same float operations in the same order, so results match ggml
 * and the Python gguf package bit for bit. Blocks are read with memcpy: tensor data in a
 * file need not be aligned, and multi-byte fields are little-endian. */
#include "internal.h"
#include "fathom_model.h"

#include <string.h>

/* Bit-exact with ggml needs y = d*q - m rounded twice, not fused into an FMA
 * (GCC does not contract in ISO C mode; clang does unless told). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define QK 32   /* elements per block of the 32-element types */
#define QK_K 256 /* elements per super-block of the k-quants */

typedef struct type_traits {
    const char *name;
    uint32_t block_elements; /* 0: id not defined by ggml */
    uint32_t block_bytes;
} type_traits;

static const type_traits traits[FATHOM_GGML_TYPE_COUNT] = {
    [FATHOM_GGML_TYPE_F32] = {"f32", 1, 4},
    [FATHOM_GGML_TYPE_F16] = {"f16", 1, 2},
    [FATHOM_GGML_TYPE_Q4_0] = {"q4_0", QK, 2 + QK / 2},
    [FATHOM_GGML_TYPE_Q4_1] = {"q4_1", QK, 4 + QK / 2},
    [FATHOM_GGML_TYPE_Q5_0] = {"q5_0", QK, 2 + 4 + QK / 2},
    [FATHOM_GGML_TYPE_Q5_1] = {"q5_1", QK, 4 + 4 + QK / 2},
    [FATHOM_GGML_TYPE_Q8_0] = {"q8_0", QK, 2 + QK},
    [FATHOM_GGML_TYPE_Q8_1] = {"q8_1", QK, 4 + QK},
    [FATHOM_GGML_TYPE_Q2_K] = {"q2_k", QK_K, 84},
    [FATHOM_GGML_TYPE_Q3_K] = {"q3_k", QK_K, 110},
    [FATHOM_GGML_TYPE_Q4_K] = {"q4_k", QK_K, 144},
    [FATHOM_GGML_TYPE_Q5_K] = {"q5_k", QK_K, 176},
    [FATHOM_GGML_TYPE_Q6_K] = {"q6_k", QK_K, 210},
    [FATHOM_GGML_TYPE_Q8_K] = {"q8_k", QK_K, 292},
    [FATHOM_GGML_TYPE_IQ2_XXS] = {"iq2_xxs", QK_K, 66},
    [FATHOM_GGML_TYPE_IQ2_XS] = {"iq2_xs", QK_K, 74},
    [FATHOM_GGML_TYPE_IQ3_XXS] = {"iq3_xxs", QK_K, 98},
    [FATHOM_GGML_TYPE_IQ1_S] = {"iq1_s", QK_K, 50},
    [FATHOM_GGML_TYPE_IQ4_NL] = {"iq4_nl", QK, 18},
    [FATHOM_GGML_TYPE_IQ3_S] = {"iq3_s", QK_K, 110},
    [FATHOM_GGML_TYPE_IQ2_S] = {"iq2_s", QK_K, 82},
    [FATHOM_GGML_TYPE_IQ4_XS] = {"iq4_xs", QK_K, 136},
    [FATHOM_GGML_TYPE_I8] = {"i8", 1, 1},
    [FATHOM_GGML_TYPE_I16] = {"i16", 1, 2},
    [FATHOM_GGML_TYPE_I32] = {"i32", 1, 4},
    [FATHOM_GGML_TYPE_I64] = {"i64", 1, 8},
    [FATHOM_GGML_TYPE_F64] = {"f64", 1, 8},
    [FATHOM_GGML_TYPE_IQ1_M] = {"iq1_m", QK_K, 56},
    [FATHOM_GGML_TYPE_BF16] = {"bf16", 1, 2},
    [FATHOM_GGML_TYPE_TQ1_0] = {"tq1_0", QK_K, 54},
    [FATHOM_GGML_TYPE_TQ2_0] = {"tq2_0", QK_K, 66},
    [FATHOM_GGML_TYPE_MXFP4] = {"mxfp4", QK, 17},
    [FATHOM_GGML_TYPE_NVFP4] = {"nvfp4", 64, 36},
    [FATHOM_GGML_TYPE_Q1_0] = {"q1_0", 128, 18},
};

static const type_traits *lookup(fathom_ggml_type type) {
    if ((int)type < 0 || (int)type >= FATHOM_GGML_TYPE_COUNT) return NULL;
    const type_traits *t = &traits[type];
    return t->block_elements ? t : NULL;
}

int fathom_ggml_type_block(fathom_ggml_type type, uint32_t *block_elements, uint32_t *block_bytes) {
    const type_traits *t = lookup(type);
    FATHOM_CHECK(!t, FATHOM_ERR_UNSUPPORTED, "ggml type %d is not defined", (int)type);
    if (block_elements) *block_elements = t->block_elements;
    if (block_bytes) *block_bytes = t->block_bytes;
    return FATHOM_OK;
}

const char *fathom_ggml_type_name(fathom_ggml_type type) {
    const type_traits *t = lookup(type);
    return t ? t->name : "unknown";
}

int fathom_ggml_row_bytes(fathom_ggml_type type, uint64_t n_elements, uint64_t *bytes) {
    const type_traits *t = lookup(type);
    FATHOM_CHECK_ARG(t, "ggml type %d is not defined", (int)type);
    FATHOM_CHECK_ARG(bytes, "bytes is NULL");
    FATHOM_CHECK_ARG(n_elements % t->block_elements == 0,
                     "%llu elements of %s: not a multiple of its block of %u",
                     (unsigned long long)n_elements, t->name, t->block_elements);
    FATHOM_CHECK_ARG(fathom_mul_u64(n_elements / t->block_elements, t->block_bytes, bytes),
                     "%llu elements of %s: size overflows", (unsigned long long)n_elements,
                     t->name);
    return FATHOM_OK;
}

/* ---- little-endian field reads ---------------------------------------- */

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static float half(const uint8_t *p) { return fathom_f16_to_f32(le16(p)); }

/* ---- plain types ------------------------------------------------------- */

static void dequant_f32(const uint8_t *src, uint64_t n, float *dst) {
    for (uint64_t i = 0; i < n; i++) {
        uint32_t u = le32(src + 4 * i);
        memcpy(&dst[i], &u, 4);
    }
}

static void dequant_f16(const uint8_t *src, uint64_t n, float *dst) {
    for (uint64_t i = 0; i < n; i++) dst[i] = half(src + 2 * i);
}

static void dequant_bf16(const uint8_t *src, uint64_t n, float *dst) {
    for (uint64_t i = 0; i < n; i++) dst[i] = fathom_bf16_to_f32(le16(src + 2 * i));
}

/* ---- 32-element blocks ---------------------------------------------------
 * Byte j of qs holds element j (low nibble) and element j + 16 (high nibble).
 * Q5 types keep the fifth bit of element j in bit j of the 32-bit qh. */

static void dequant_q4_0(const uint8_t *src, uint64_t blocks, float *y) {
    for (uint64_t b = 0; b < blocks; b++, src += 18, y += QK) {
        const float d = half(src);
        const uint8_t *qs = src + 2;
        for (int j = 0; j < QK / 2; j++) {
            const int x0 = (qs[j] & 0x0f) - 8;
            const int x1 = (qs[j] >> 4) - 8;
            y[j] = (float)x0 * d;
            y[j + QK / 2] = (float)x1 * d;
        }
    }
}

static void dequant_q4_1(const uint8_t *src, uint64_t blocks, float *y) {
    for (uint64_t b = 0; b < blocks; b++, src += 20, y += QK) {
        const float d = half(src), m = half(src + 2);
        const uint8_t *qs = src + 4;
        for (int j = 0; j < QK / 2; j++) {
            const int x0 = qs[j] & 0x0f;
            const int x1 = qs[j] >> 4;
            y[j] = (float)x0 * d + m;
            y[j + QK / 2] = (float)x1 * d + m;
        }
    }
}

static void dequant_q5_0(const uint8_t *src, uint64_t blocks, float *y) {
    for (uint64_t b = 0; b < blocks; b++, src += 22, y += QK) {
        const float d = half(src);
        const uint32_t qh = le32(src + 2);
        const uint8_t *qs = src + 6;
        for (int j = 0; j < QK / 2; j++) {
            const uint8_t xh0 = (uint8_t)(((qh >> j) << 4) & 0x10);
            const uint8_t xh1 = (uint8_t)((qh >> (j + 12)) & 0x10);
            const int x0 = ((qs[j] & 0x0f) | xh0) - 16;
            const int x1 = ((qs[j] >> 4) | xh1) - 16;
            y[j] = (float)x0 * d;
            y[j + QK / 2] = (float)x1 * d;
        }
    }
}

static void dequant_q5_1(const uint8_t *src, uint64_t blocks, float *y) {
    for (uint64_t b = 0; b < blocks; b++, src += 24, y += QK) {
        const float d = half(src), m = half(src + 2);
        const uint32_t qh = le32(src + 4);
        const uint8_t *qs = src + 8;
        for (int j = 0; j < QK / 2; j++) {
            const uint8_t xh0 = (uint8_t)(((qh >> j) << 4) & 0x10);
            const uint8_t xh1 = (uint8_t)((qh >> (j + 12)) & 0x10);
            const int x0 = (qs[j] & 0x0f) | xh0;
            const int x1 = (qs[j] >> 4) | xh1;
            y[j] = (float)x0 * d + m;
            y[j + QK / 2] = (float)x1 * d + m;
        }
    }
}

static void dequant_q8_0(const uint8_t *src, uint64_t blocks, float *y) {
    for (uint64_t b = 0; b < blocks; b++, src += 34, y += QK) {
        const float d = half(src);
        for (int j = 0; j < QK; j++) y[j] = (float)(int8_t)src[2 + j] * d;
    }
}

/* ---- k-quants (256-element super-blocks) --------------------------------
 * Q2_K/Q3_K: sixteen sub-blocks of 16. Quants are 2-bit fields: byte
 * 32h + l of qs holds, at bits 2r, element 128h + 32r + l. */

static void dequant_q2_k(const uint8_t *src, uint64_t blocks, float *y) {
    for (uint64_t b = 0; b < blocks; b++, src += 84) {
        const uint8_t *scales = src, *q = src + 16;
        const float d = half(src + 80), dmin = half(src + 82);
        int is = 0;
        for (int n = 0; n < QK_K; n += 128, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                /* scale byte: low nibble scales d, high nibble scales dmin */
                uint8_t sc = scales[is++];
                float dl = d * (sc & 0x0f), ml = dmin * (sc >> 4);
                for (int l = 0; l < 16; l++) *y++ = dl * ((q[l] >> shift) & 3) - ml;
                sc = scales[is++];
                dl = d * (sc & 0x0f), ml = dmin * (sc >> 4);
                for (int l = 0; l < 16; l++) *y++ = dl * ((q[l + 16] >> shift) & 3) - ml;
            }
        }
    }
}

/* Q3_K: 2 low bits in qs, the third in hmask (bit 2^(k/32) of byte k%32;
 * set means +0, clear means -4), 6-bit scales biased by 32: sixteen low
 * nibbles in bytes 0-7, 2-bit high parts in bytes 8-11. */
static void dequant_q3_k(const uint8_t *src, uint64_t blocks, float *y) {
    for (uint64_t b = 0; b < blocks; b++, src += 110) {
        const uint8_t *hm = src, *q = src + 32, *packed = src + 96;
        const float d_all = half(src + 108);
        int scales[16];
        for (int j = 0; j < 16; j++) {
            const int low = j < 8 ? packed[j] & 0x0f : packed[j - 8] >> 4;
            const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
            scales[j] = (low | (high << 4)) - 32;
        }
        int is = 0;
        uint8_t m = 1;
        for (int n = 0; n < QK_K; n += 128, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
                float dl = d_all * scales[is++];
                for (int l = 0; l < 16; l++)
                    *y++ = dl * (((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
                dl = d_all * scales[is++];
                for (int l = 0; l < 16; l++)
                    *y++ = dl * (((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
            }
        }
    }
}

/* Q4_K/Q5_K: eight sub-blocks of 32, each with a 6-bit scale and a 6-bit min
 * packed into 12 bytes; y = d*scale*q - dmin*min. */

static void scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

static void dequant_q4_k(const uint8_t *src, uint64_t blocks, float *y) {
    for (uint64_t b = 0; b < blocks; b++, src += 144) {
        const float d = half(src), dmin = half(src + 2);
        const uint8_t *scales = src + 4;
        const uint8_t *q = src + 16;
        int is = 0;
        for (int j = 0; j < QK_K; j += 64, q += 32, is += 2) {
            uint8_t sc, m;
            scale_min_k4(is + 0, scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            scale_min_k4(is + 1, scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (q[l] & 0x0f) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

static void dequant_q5_k(const uint8_t *src, uint64_t blocks, float *y) {
    for (uint64_t b = 0; b < blocks; b++, src += 176) {
        const float d = half(src), dmin = half(src + 2);
        const uint8_t *scales = src + 4;
        const uint8_t *qh = src + 16;
        const uint8_t *ql = src + 48;
        int is = 0;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < QK_K; j += 64, ql += 32, is += 2, u1 <<= 2, u2 <<= 2) {
            uint8_t sc, m;
            scale_min_k4(is + 0, scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            scale_min_k4(is + 1, scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * ((ql[l] & 0x0f) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

/* Q6_K: 6-bit quants (4 low bits in ql, 2 high in qh) minus 32, sixteen
 * sub-blocks of 16 with int8 scales; y = d*scale*q. */
static void dequant_q6_k(const uint8_t *src, uint64_t blocks, float *y) {
    for (uint64_t b = 0; b < blocks; b++, src += 210) {
        const uint8_t *ql = src, *qh = src + 128;
        const int8_t *sc = (const int8_t *)(src + 192);
        const float d = half(src + 208);
        for (int n = 0; n < QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l + 0] = d * sc[is + 0] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

int fathom_dequantize(fathom_ggml_type type, const void *src, uint64_t src_bytes,
                      uint64_t n_elements, float *dst) {
    uint64_t need;
    FATHOM_TRY(fathom_ggml_row_bytes(type, n_elements, &need));
    FATHOM_CHECK_ARG(src || n_elements == 0, "src is NULL");
    FATHOM_CHECK_ARG(dst || n_elements == 0, "dst is NULL");
    FATHOM_CHECK_ARG(src_bytes >= need, "%llu elements of %s need %llu bytes, src has %llu",
                     (unsigned long long)n_elements, fathom_ggml_type_name(type),
                     (unsigned long long)need, (unsigned long long)src_bytes);
    const uint8_t *s = src;
    const uint64_t blocks = n_elements / traits[type].block_elements;
    switch (type) {
    case FATHOM_GGML_TYPE_F32: dequant_f32(s, n_elements, dst); break;
    case FATHOM_GGML_TYPE_F16: dequant_f16(s, n_elements, dst); break;
    case FATHOM_GGML_TYPE_BF16: dequant_bf16(s, n_elements, dst); break;
    case FATHOM_GGML_TYPE_Q4_0: dequant_q4_0(s, blocks, dst); break;
    case FATHOM_GGML_TYPE_Q4_1: dequant_q4_1(s, blocks, dst); break;
    case FATHOM_GGML_TYPE_Q5_0: dequant_q5_0(s, blocks, dst); break;
    case FATHOM_GGML_TYPE_Q5_1: dequant_q5_1(s, blocks, dst); break;
    case FATHOM_GGML_TYPE_Q8_0: dequant_q8_0(s, blocks, dst); break;
    case FATHOM_GGML_TYPE_Q2_K: dequant_q2_k(s, blocks, dst); break;
    case FATHOM_GGML_TYPE_Q3_K: dequant_q3_k(s, blocks, dst); break;
    case FATHOM_GGML_TYPE_Q4_K: dequant_q4_k(s, blocks, dst); break;
    case FATHOM_GGML_TYPE_Q5_K: dequant_q5_k(s, blocks, dst); break;
    case FATHOM_GGML_TYPE_Q6_K: dequant_q6_k(s, blocks, dst); break;
    default:
        return fathom_fail(FATHOM_ERR_UNSUPPORTED, "dequantization of %s is not implemented",
                           fathom_ggml_type_name(type));
    }
    return FATHOM_OK;
}

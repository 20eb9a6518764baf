/* The bit-plane K store against the paper's worked example, an independent
 * t-bit quantizer, bulk-vs-streaming byte equality, byte accounting, and the
 * fast scan against the reference scan and against decode. */
#include "check.h"
#include "fathom.h"
#include "store_internal.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers written for the test, independent of the library ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng_u64(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static double rng_uniform(void) { return (double)(rng_u64() >> 11) * (1.0 / 9007199254740992.0); }
static float rng_normal(void) {
    double u = rng_uniform(), v = rng_uniform();
    if (u < 1e-300) u = 1e-300;
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}
static uint32_t rng_below(uint32_t n) { return (uint32_t)(rng_u64() % n); }

/* keys[n x dim] ~ N(0,1) * per-channel magnitude (spanning 1e-6 .. 1e3). */
static float *random_keys(uint64_t n, uint32_t dim) {
    float *k = malloc(sizeof(float) * n * dim);
    for (uint32_t j = 0; j < dim; j++) {
        float mag = (float)pow(10.0, (double)(j % 10) - 6.0 + 3.0 * (double)(j % 3 == 0));
        for (uint64_t i = 0; i < n; i++) k[i * dim + j] = rng_normal() * mag;
    }
    return k;
}

static fathom_store *make_store(uint32_t dim, uint32_t seg_blocks, const fathom_basis *basis,
                                const float *keys, uint64_t n) {
    fathom_store *st = NULL;
    CHECK_OK(fathom_store_create(&st, dim, seg_blocks, basis));
    if (st && n) CHECK_OK(fathom_store_append(st, keys, n));
    return st;
}

/* 1 when every plane word and scale of both stores is the same. */
static int stores_equal(const fathom_store *a, const fathom_store *b) {
    if (fathom_store_length(a) != fathom_store_length(b)) return 0;
    if (fathom_store_dim(a) != fathom_store_dim(b)) return 0;
    uint64_t blocks = (fathom_store_length(a) + 63) / 64;
    for (uint32_t j = 0; j < fathom_store_dim(a); j++)
        for (uint64_t blk = 0; blk < blocks; blk++)
            for (uint32_t p = 0; p < 4; p++) {
                uint64_t wa, wb;
                uint16_t sa, sb;
                if (fathom_store_word(a, j, p, blk, &wa, &sa) ||
                    fathom_store_word(b, j, p, blk, &wb, &sb))
                    return 0;
                if (wa != wb || sa != sb) return 0;
            }
    return 1;
}

/* The code of token i from its 4 plane words, written bit by bit. */
static unsigned code_of(const fathom_store *st, uint32_t j, uint64_t token) {
    unsigned c = 0;
    for (uint32_t p = 0; p < 4; p++) {
        uint64_t w;
        uint16_t s;
        fathom_store_word(st, j, p, token / 64, &w, &s);
        c = c * 2 + (unsigned)((w >> (token % 64)) & 1);
    }
    return c;
}

/* The fp16 block scale as the test computes it: max |k| rounded, saturated. */
static float test_scale(const float *keys, uint64_t n, uint32_t dim, uint32_t j, uint64_t block) {
    float m = 0.0f;
    for (uint64_t i = block * 64; i < n && i < block * 64 + 64; i++)
        if (fabsf(keys[i * dim + j]) > m) m = fabsf(keys[i * dim + j]);
    float a = fathom_f16_to_f32(fathom_f32_to_f16(m));
    return isinf(a) ? 65504.0f : a;
}

/* An independent t-bit mid-rise quantizer of [-a, a): cell width a/2^(t-1),
 * 2^t cells, value at the cell midpoint written as -a + (q + 1/2) * width. */
static float quantize_t(float k, float a, int t) {
    if (a == 0.0f) return 0.0f;
    float cells = (float)(1 << t), width = a / (float)(1 << (t - 1));
    float q = floorf(k / width) + cells / 2;
    if (q < 0) q = 0;
    if (q > cells - 1) q = cells - 1;
    return -a + (q + 0.5f) * width;
}

/* ---- tests ---- */

static void test_appendix_a(void) {
    /* §A: channel 2 of the toy keys, block maximum 0.5, s = 0.0625. */
    const float ch[6] = {-0.2f, 0.3f, 0.1f, 0.4f, -0.5f, -0.3f};
    const unsigned want_codes[6] = {4, 12, 9, 14, 0, 3};
    const float want_1plane[6] = {-0.25f, 0.25f, 0.25f, 0.25f, -0.25f, -0.25f};
    float keys[6 * 3];
    for (int i = 0; i < 6; i++) {
        keys[i * 3 + 0] = 1.0f + (float)i; /* neighbours make a wrong channel index visible */
        keys[i * 3 + 1] = ch[i];
        keys[i * 3 + 2] = -7.0f;
    }
    fathom_store *st = make_store(3, 0, NULL, keys, 6);
    uint64_t w;
    uint16_t s;
    CHECK_OK(fathom_store_word(st, 1, 0, 0, &w, &s));
    CHECK(s == 0x3800); /* fp16(0.5) */
    for (int i = 0; i < 6; i++) CHECK(code_of(st, 1, (uint64_t)i) == want_codes[i]);
    for (uint32_t p = 0; p < 4; p++) {
        CHECK_OK(fathom_store_word(st, 1, p, 0, &w, &s));
        CHECK((w >> 6) == 0); /* tokens not appended have 0 bits */
    }
    /* plane 0 is the sign: tokens 1, 2, 3 */
    CHECK_OK(fathom_store_word(st, 1, 0, 0, &w, &s));
    CHECK(w == 0xeull);
    uint8_t depths[3] = {0, 1, 0};
    float out[6 * 3];
    CHECK_OK(fathom_store_decode(st, 0, 6, depths, out));
    for (int i = 0; i < 6; i++) {
        CHECK(out[i * 3 + 1] == want_1plane[i]);
        CHECK(out[i * 3 + 0] == 0.0f && out[i * 3 + 2] == 0.0f);
    }
    /* full depth: (c - 8 + 0.5) * s */
    depths[1] = 4;
    CHECK_OK(fathom_store_decode(st, 0, 6, depths, out));
    for (int i = 0; i < 6; i++) CHECK(out[i * 3 + 1] == ((float)want_codes[i] - 7.5f) * 0.0625f);
    fathom_store_free(st);
}

static void test_prefix_exact(void) {
    const uint32_t dim = 20;
    const uint64_t n = 64 * 3 + 37;
    float *keys = random_keys(n, dim);
    for (uint64_t i = 0; i < n; i++) keys[i * dim + 5] = 0.0f;     /* an all-zero channel */
    for (uint64_t i = 64; i < 128; i++) keys[i * dim + 6] = 1e-9f; /* rounds to a zero scale */
    for (uint64_t i = 0; i < 64; i++) keys[i * dim + 7] = 0.2f * rng_normal() / 5.0f;
    keys[3 * dim + 7] = 0.3001f; /* fp16(max) = 0.300048 rounds down: the code clips at 15 */
    keys[4 * dim + 7] = -0.3001f;
    fathom_store *st = make_store(dim, 2, NULL, keys, n);
    float *out = malloc(sizeof(float) * n * dim);
    uint8_t depths[20];
    int bad = 0, checked = 0;
    for (int t = 1; t <= 4; t++) {
        memset(depths, t, sizeof depths);
        CHECK_OK(fathom_store_decode(st, 0, n, depths, out));
        for (uint64_t i = 0; i < n; i++)
            for (uint32_t j = 0; j < dim; j++) {
                float a = test_scale(keys, n, dim, j, i / 64);
                float want = quantize_t(keys[i * dim + j], a, t);
                if (memcmp(&want, &out[i * dim + j], sizeof want) != 0 &&
                    !(want == 0 && out[i * dim + j] == 0))
                    bad++;
                checked++;
            }
    }
    CHECK(bad == 0);
    CHECK(checked == 4 * (int)(n * dim));
    /* mixed depths, decoded from the middle of the store */
    for (uint32_t j = 0; j < dim; j++) depths[j] = (uint8_t)(j % 5);
    CHECK_OK(fathom_store_decode(st, 50, 100, depths, out));
    bad = 0;
    for (uint64_t i = 0; i < 100; i++)
        for (uint32_t j = 0; j < dim; j++) {
            uint64_t tok = 50 + i;
            float want = depths[j] ? quantize_t(keys[tok * dim + j],
                                                test_scale(keys, n, dim, j, tok / 64), depths[j])
                                   : 0.0f;
            if (want != out[i * dim + j]) bad++;
        }
    CHECK(bad == 0);
    /* the code of the clipped value is 15, and the zero-scale block has scale 0, codes 8 */
    CHECK(code_of(st, 7, 3) == 15 && code_of(st, 7, 4) == 0);
    CHECK(test_scale(keys, n, dim, 7, 0) < 0.3001f);
    CHECK(code_of(st, 6, 64) == 8 && code_of(st, 6, 127) == 8);
    CHECK(code_of(st, 5, 0) == 8);
    fathom_store_free(st);
    free(out);
    free(keys);
}

static void test_append_equals_bulk(void) {
    const uint32_t dims[3] = {1, 7, 33};
    for (int trial = 0; trial < 12; trial++) {
        uint32_t dim = dims[trial % 3];
        uint64_t n = 1 + rng_below(trial < 4 ? 63 : 400); /* n < 64 too */
        uint32_t seg_blocks = 1 + rng_below(3);           /* crosses segments */
        float *keys = random_keys(n, dim);
        fathom_store *bulk = make_store(dim, seg_blocks, NULL, keys, n);
        fathom_store *stream = make_store(dim, seg_blocks, NULL, NULL, 0);
        for (uint64_t done = 0; done < n;) {
            uint64_t chunk = trial % 2 ? 1 : 1 + rng_below(90);
            if (chunk > n - done) chunk = n - done;
            CHECK_OK(fathom_store_append(stream, keys + done * dim, chunk));
            done += chunk;
        }
        CHECK(stores_equal(bulk, stream));
        CHECK(fathom_store_segment_count(bulk) == fathom_store_segment_count(stream));
        CHECK(fathom_store_segment_count(bulk) ==
              (uint32_t)(((n + 63) / 64 + seg_blocks - 1) / seg_blocks));
        /* whole segments, unused words included, byte for byte */
        for (uint32_t s = 0; s < fathom_store_segment_count(bulk); s++) {
            fathom_segment_view va, vb;
            CHECK_OK(fathom_store_segment(bulk, s, &va));
            CHECK_OK(fathom_store_segment(stream, s, &vb));
            CHECK(memcmp(va.planes, vb.planes, sizeof(uint64_t) * dim * 4 * seg_blocks) == 0);
            CHECK(memcmp(va.scales, vb.scales, sizeof(uint16_t) * dim * seg_blocks) == 0);
            CHECK(va.tokens == vb.tokens && va.blocks == vb.blocks &&
                  va.first_token == vb.first_token);
        }
        float va_[33], vb_[33];
        CHECK_OK(fathom_store_variance(bulk, va_));
        CHECK_OK(fathom_store_variance(stream, vb_));
        CHECK(memcmp(va_, vb_, sizeof(float) * dim) == 0);
        fathom_store_free(bulk);
        fathom_store_free(stream);
        free(keys);
    }

    /* A growing scale in the open block: each new token is the largest, so
     * every append re-quantizes the earlier tokens; compare after each. */
    const uint32_t dim = 3;
    const uint64_t n = 140;
    float keys[140 * 3];
    for (uint64_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < dim; j++)
            keys[i * dim + j] =
                (float)(i % 64 + 1) * (j == 1 ? -0.37f : 0.11f) * (i % 2 ? 1.0f : -1.0f);
    for (uint64_t i = 0; i < 30; i++) /* channel 2: zeros, then a zero scale (1e-9), then values */
        keys[i * dim + 2] = i < 10 ? 0.0f : i < 20 ? 1e-9f * (float)(i % 3) : keys[i * dim + 2];
    for (uint64_t i = 70; i < 140; i++)
        keys[i * dim + 0] = 0.5f * (float)(i % 2) - 0.25f; /* flat */
    fathom_store *stream = make_store(dim, 1, NULL, NULL, 0);
    int all_equal = 1;
    uint16_t prev_scale = 0;
    int scale_grew = 0;
    for (uint64_t i = 0; i < n; i++) {
        CHECK_OK(fathom_store_append(stream, keys + i * dim, 1));
        fathom_store *bulk = make_store(dim, 1, NULL, keys, i + 1);
        if (!stores_equal(bulk, stream)) all_equal = 0;
        fathom_store_free(bulk);
        uint64_t w;
        uint16_t s;
        CHECK_OK(fathom_store_word(stream, 0, 0, i / 64, &w, &s));
        if (i % 64 && s != prev_scale) scale_grew++;
        prev_scale = s;
    }
    CHECK(all_equal);
    CHECK(scale_grew > 50); /* the open block's scale really changed as tokens came */
    fathom_store_free(stream);
}

static void test_bytes_and_segments(void) {
    float *keys = random_keys(64 * 10, 128);
    fathom_store *st = make_store(128, 0, NULL, keys, 640);
    CHECK(fathom_store_index_bytes(st) == 68ull * 640);
    CHECK(fathom_store_segment_blocks(st) == FATHOM_DEFAULT_SEGMENT_BLOCKS);
    CHECK(fathom_store_segment_count(st) == 1);
    CHECK(fathom_store_allocated_bytes(st) ==
          128ull * 1024 * (4 * 8 + 2) + 64ull * 128 * sizeof(float));
    fathom_store_free(st);
    st = make_store(128, 0, NULL, keys, 100); /* rounds up to 2 blocks */
    CHECK(fathom_store_index_bytes(st) == 68ull * 128);
    fathom_store_free(st);
    st = make_store(64, 0, NULL, keys, 640);
    CHECK(fathom_store_index_bytes(st) == 34ull * 640);
    fathom_store_free(st);

    /* Pointer stability: segments never move or change once closed. */
    const uint32_t dim = 16, S = 2;
    st = make_store(dim, S, NULL, keys, 150); /* 3 blocks: segment 1 half full */
    CHECK(fathom_store_segment_count(st) == 2);
    fathom_segment_view v0, v1;
    CHECK_OK(fathom_store_segment(st, 0, &v0));
    CHECK_OK(fathom_store_segment(st, 1, &v1));
    CHECK(v0.first_token == 0 && v0.tokens == 128 && v0.blocks == 2);
    CHECK(v1.first_token == 128 && v1.tokens == 22 && v1.blocks == 1);
    uint64_t *copy0 = malloc(sizeof(uint64_t) * dim * 4 * S);
    memcpy(copy0, v0.planes, sizeof(uint64_t) * dim * 4 * S);
    for (int r = 0; r < 20; r++) CHECK_OK(fathom_store_append(st, keys + 150 * dim, 29));
    CHECK(fathom_store_length(st) == 150 + 20 * 29);
    CHECK(fathom_store_segment_count(st) == (uint32_t)(((150 + 20 * 29 + 63) / 64 + 1) / 2));
    fathom_segment_view w0, w1, last;
    CHECK_OK(fathom_store_segment(st, 0, &w0));
    CHECK_OK(fathom_store_segment(st, 1, &w1));
    CHECK(w0.planes == v0.planes && w0.scales == v0.scales);
    CHECK(w1.planes == v1.planes && w1.scales == v1.scales);
    CHECK(memcmp(copy0, w0.planes, sizeof(uint64_t) * dim * 4 * S) == 0);
    CHECK(w1.tokens == 128);
    CHECK_OK(fathom_store_segment(st, fathom_store_segment_count(st) - 1, &last));
    CHECK(last.first_token + last.tokens == fathom_store_length(st));
    CHECK(fathom_store_allocated_bytes(st) ==
          (uint64_t)fathom_store_segment_count(st) * dim * S * 34 + 64ull * dim * 4);
    /* the layout promised in the header: word (j, p, b) at planes[(j*4+p)*S + b] */
    uint64_t w;
    uint16_t s;
    CHECK_OK(fathom_store_word(st, 5, 2, 3, &w, &s));
    CHECK(w == w1.planes[(5 * 4 + 2) * S + 1] && s == w1.scales[5 * S + 1]);
    free(copy0);
    fathom_store_free(st);
    free(keys);
}

static void test_variance(void) {
    const uint32_t dim = 9;
    const uint64_t n = 777;
    float *keys = random_keys(n, dim);
    for (uint64_t i = 0; i < n; i++) keys[i * dim + 2] += 5000.0f; /* mean >> sd */
    fathom_store *st = make_store(dim, 3, NULL, keys, 300);
    CHECK_OK(fathom_store_append(st, keys + 300 * dim, n - 300));
    float var[9];
    CHECK_OK(fathom_store_variance(st, var));
    for (uint32_t j = 0; j < dim; j++) {
        double mean = 0, ss = 0;
        for (uint64_t i = 0; i < n; i++) mean += keys[i * dim + j];
        mean /= (double)n;
        for (uint64_t i = 0; i < n; i++)
            ss += (keys[i * dim + j] - mean) * (keys[i * dim + j] - mean);
        double want = ss / (double)n;
        CHECK_NEAR(var[j], want, 1e-5 * want);
    }
    fathom_store_free(st);
    /* one token: variance 0 */
    st = make_store(dim, 0, NULL, keys, 1);
    CHECK_OK(fathom_store_variance(st, var));
    for (uint32_t j = 0; j < dim; j++) CHECK(var[j] == 0.0f);
    fathom_store_free(st);
    free(keys);
}

/* A random orthogonal matrix (Gram-Schmidt in double), column-major. */
static void random_orthogonal(uint32_t dim, float *v) {
    double *m = malloc(sizeof(double) * dim * dim);
    for (uint32_t i = 0; i < dim * dim; i++) m[i] = rng_normal();
    for (uint32_t c = 0; c < dim; c++) {
        double *col = m + (size_t)c * dim;
        for (uint32_t k = 0; k < c; k++) {
            double *prev = m + (size_t)k * dim, dot = 0;
            for (uint32_t i = 0; i < dim; i++) dot += col[i] * prev[i];
            for (uint32_t i = 0; i < dim; i++) col[i] -= dot * prev[i];
        }
        double norm = 0;
        for (uint32_t i = 0; i < dim; i++) norm += col[i] * col[i];
        for (uint32_t i = 0; i < dim; i++) col[i] /= sqrt(norm);
    }
    for (uint32_t i = 0; i < dim * dim; i++) v[i] = (float)m[i];
    free(m);
}

static void test_rotated_store(void) {
    const uint32_t dim = 12;
    const uint64_t n = 300;
    float vec[144], mean[12], eig[12];
    random_orthogonal(dim, vec);
    for (uint32_t j = 0; j < dim; j++) {
        mean[j] = 0.5f * (float)j - 2.0f;
        eig[j] = 1.0f;
    }
    fathom_basis *basis = NULL;
    CHECK_OK(fathom_basis_create(&basis, dim, mean, vec, eig));
    float *keys = random_keys(n, dim);
    float *rotated = malloc(sizeof(float) * n * dim);
    for (uint64_t i = 0; i < n; i++)
        CHECK_OK(fathom_basis_rotate_key(basis, keys + i * dim, rotated + i * dim));
    fathom_store *rot = make_store(dim, 2, basis, NULL, 0);
    for (uint64_t done = 0; done < n; done += 50)
        CHECK_OK(fathom_store_append(rot, keys + done * dim, 50));
    fathom_store *raw = make_store(dim, 2, NULL, rotated, n);
    CHECK(fathom_store_basis(rot) == basis && fathom_store_basis(raw) == NULL);
    CHECK(stores_equal(rot, raw));
    float var_rot[12], var_raw[12];
    CHECK_OK(fathom_store_variance(rot, var_rot));
    CHECK_OK(fathom_store_variance(raw, var_raw));
    for (uint32_t j = 0; j < dim; j++) CHECK_NEAR(var_rot[j], var_raw[j], 1e-6 * var_raw[j]);
    /* a rotation that overflows float is rejected and changes nothing */
    float huge[12];
    for (uint32_t j = 0; j < dim; j++) huge[j] = 3.0e38f * (vec[j] >= 0 ? 1.0f : -1.0f);
    CHECK_STATUS(fathom_store_append(rot, huge, 1), FATHOM_ERR_NONFINITE);
    CHECK(fathom_store_length(rot) == n);
    CHECK(stores_equal(rot, raw));
    /* a basis of another dim is refused */
    fathom_store *bad = NULL;
    CHECK_STATUS(fathom_store_create(&bad, dim + 1, 0, basis), FATHOM_ERR_INVALID_ARG);
    CHECK(bad == NULL);
    fathom_store_free(rot);
    fathom_store_free(raw);
    fathom_basis_free(basis);
    free(keys);
    free(rotated);
}

/* A centered store holds the bytes of a plain store of k - mu (the
 * difference taken in float, as the test writes it), streamed or bulk; its
 * variance is the raw keys'; the center is fixed before the first append. */
static void test_centered_store(void) {
    const uint32_t dim = 10;
    const uint64_t n = 333;
    float *keys = random_keys(n, dim), mu[10];
    for (uint32_t j = 0; j < dim; j++) mu[j] = (float)j * 0.75f - 3.0f;
    for (uint64_t i = 0; i < n; i++) keys[i * dim + 4] += 40.0f; /* an offset channel */
    mu[4] = 40.0f;
    float *shifted = malloc(sizeof(float) * n * dim);
    for (uint64_t v = 0; v < n * dim; v++) shifted[v] = keys[v] - mu[v % dim];
    fathom_store *cen = make_store(dim, 2, NULL, NULL, 0);
    CHECK(fathom_store_center(cen) == NULL);
    float other[10] = {0};
    CHECK_OK(fathom_store_set_center(cen, other));
    CHECK_OK(fathom_store_set_center(cen, mu)); /* a second call replaces the first */
    CHECK(fathom_store_center(cen) && memcmp(fathom_store_center(cen), mu, sizeof mu) == 0);
    for (uint64_t done = 0; done < n; done += 37)
        CHECK_OK(fathom_store_append(cen, keys + done * dim, done + 37 <= n ? 37 : n - done));
    fathom_store *plain = make_store(dim, 2, NULL, shifted, n);
    CHECK(stores_equal(cen, plain));
    fathom_store *raw = make_store(dim, 2, NULL, keys, n);
    CHECK(!stores_equal(cen, raw)); /* the shift changes the codes */
    float var_cen[10], var_raw[10];
    CHECK_OK(fathom_store_variance(cen, var_cen));
    CHECK_OK(fathom_store_variance(raw, var_raw));
    /* k - mu rounds to float: an error up to ulp(|mu|) per key moves the
     * variance by about 2 sd ulp(|mu|) */
    for (uint32_t j = 0; j < dim; j++)
        CHECK_NEAR(var_cen[j], var_raw[j], 1e-5 * var_raw[j] + 4.0 * sqrt(var_raw[j]) * ldexp(fabs(mu[j]), -23));
    /* the offset channel: its centered 1-plane error is below the raw one's */
    uint8_t depths[10] = {0};
    depths[4] = 1;
    float *dec_cen = malloc(sizeof(float) * n * dim), *dec_raw = malloc(sizeof(float) * n * dim);
    CHECK_OK(fathom_store_decode(cen, 0, n, depths, dec_cen));
    CHECK_OK(fathom_store_decode(raw, 0, n, depths, dec_raw));
    double err_cen = 0, err_raw = 0;
    for (uint64_t i = 0; i < n; i++) {
        err_cen += pow(dec_cen[i * dim + 4] - shifted[i * dim + 4], 2);
        err_raw += pow(dec_raw[i * dim + 4] - keys[i * dim + 4], 2);
    }
    CHECK(err_cen < 0.5 * err_raw);
    /* after the first append the center is fixed */
    CHECK_STATUS(fathom_store_set_center(cen, other), FATHOM_ERR_STATE);
    /* k - mu that overflows float is rejected and changes nothing */
    fathom_store *big = make_store(dim, 0, NULL, NULL, 0);
    float far[10], row[10];
    for (uint32_t j = 0; j < dim; j++) far[j] = row[j] = 0.0f;
    far[3] = -3.0e38f;
    row[3] = 3.0e38f;
    CHECK_OK(fathom_store_set_center(big, far));
    CHECK_STATUS(fathom_store_append(big, row, 1), FATHOM_ERR_NONFINITE);
    CHECK(fathom_store_length(big) == 0);
    row[3] = 1.0f;
    CHECK_OK(fathom_store_append(big, row, 1));
    /* bad centers and rotated stores are refused */
    far[3] = NAN;
    fathom_store *fresh = make_store(dim, 0, NULL, NULL, 0);
    CHECK_STATUS(fathom_store_set_center(fresh, far), FATHOM_ERR_NONFINITE);
    CHECK(fathom_store_center(fresh) == NULL);
    CHECK_STATUS(fathom_store_set_center(fresh, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_store_set_center(NULL, mu), FATHOM_ERR_INVALID_ARG);
    float vec[100], eig[10];
    random_orthogonal(dim, vec);
    for (uint32_t j = 0; j < dim; j++) eig[j] = 1.0f;
    fathom_basis *basis = NULL;
    CHECK_OK(fathom_basis_create(&basis, dim, mu, vec, eig));
    fathom_store *rot = make_store(dim, 0, basis, NULL, 0);
    CHECK_STATUS(fathom_store_set_center(rot, mu), FATHOM_ERR_INVALID_ARG);
    fathom_store_free(rot);
    fathom_basis_free(basis);
    fathom_store_free(fresh);
    fathom_store_free(big);
    fathom_store_free(cen);
    fathom_store_free(plain);
    fathom_store_free(raw);
    free(dec_cen);
    free(dec_raw);
    free(shifted);
    free(keys);
}

/* sum_j q_hj * decode(i, j) from fathom_store_decode, in double. */
static void decode_scores(const fathom_store *st, const uint8_t *depths, const float *q,
                          uint32_t group, uint64_t n, double *want, double *mag) {
    uint32_t dim = fathom_store_dim(st);
    float *dec = malloc(sizeof(float) * n * dim);
    CHECK_OK(fathom_store_decode(st, 0, n, depths, dec));
    for (uint32_t h = 0; h < group; h++)
        for (uint64_t i = 0; i < n; i++) {
            double acc = 0, m = 0;
            for (uint32_t j = 0; j < dim; j++) {
                acc += (double)q[h * dim + j] * dec[i * dim + j];
                m += fabs((double)q[h * dim + j] * dec[i * dim + j]);
            }
            want[h * n + i] = acc;
            mag[h * n + i] = m;
        }
    free(dec);
}

static void test_scan(void) {
    const uint32_t dim = 40, group = 3;
    const uint64_t len = 64 * 9 + 13;
    float *keys = random_keys(len, dim);
    float q[3 * 40];
    for (uint32_t i = 0; i < group * dim; i++) q[i] = rng_normal();
    fathom_store *st = make_store(dim, 4, NULL, keys, len);
    float *scores = malloc(sizeof(float) * group * len);
    double *want = malloc(sizeof(double) * group * len),
           *mag = malloc(sizeof(double) * group * len);
    const uint64_t ns[7] = {1, 35, 63, 64, 65, 64 * 4 + 1, len};
    const fathom_scan_kernel kernels[5] = {FATHOM_SCAN_AUTO, FATHOM_SCAN_REFERENCE,
                                           FATHOM_SCAN_PORTABLE, FATHOM_SCAN_AVX2,
                                           FATHOM_SCAN_AVX512};
    int kernels_run = 0;
    for (int pattern = 0; pattern < 9; pattern++) {
        uint8_t depths[40];
        for (uint32_t j = 0; j < dim; j++) {
            if (pattern <= 4)
                depths[j] = (uint8_t)pattern; /* every channel at t */
            else if (pattern == 5)
                depths[j] = (uint8_t)(j % 5);
            else if (pattern == 6)
                depths[j] = j == 17 ? 3 : 0; /* one channel */
            else
                depths[j] = (uint8_t)rng_below(5);
        }
        uint64_t want_bytes_per_block = 0;
        for (uint32_t j = 0; j < dim; j++)
            if (depths[j]) want_bytes_per_block += 8u * depths[j] + 2;
        for (int ni = 0; ni < 7; ni++) {
            uint64_t n = ns[ni];
            decode_scores(st, depths, q, group, n, want, mag);
            for (int k = 0; k < 5; k++) {
                if (!fathom_scan_kernel_available(kernels[k])) continue;
                kernels_run++;
                uint64_t bytes = 12345;
                for (uint64_t i = 0; i < group * n; i++)
                    scores[i] = NAN; /* every score must be written */
                CHECK_OK(
                    fathom_store_scan_with(kernels[k], st, depths, q, group, n, scores, &bytes));
                CHECK(bytes == (n + 63) / 64 * want_bytes_per_block);
                int bad = 0;
                for (uint64_t i = 0; i < group * n; i++)
                    if (!(fabs(scores[i] - want[i]) <= 2e-6 * mag[i] + 1e-30)) bad++;
                if (bad)
                    fprintf(stderr, "kernel %d pattern %d n %llu: %d bad scores\n", k, pattern,
                            (unsigned long long)n, bad);
                CHECK(bad == 0);
                if (pattern == 0) {
                    int nonzero = 0;
                    for (uint64_t i = 0; i < group * n; i++) nonzero += scores[i] != 0.0f;
                    CHECK(nonzero == 0 && bytes == 0);
                }
            }
        }
    }
    CHECK(kernels_run >= 9 * 7 * 3);
    /* bytes_read may be NULL; the public entry point agrees with the reference */
    uint8_t depths[40];
    for (uint32_t j = 0; j < dim; j++) depths[j] = (uint8_t)((j * 7) % 5);
    float *ref = malloc(sizeof(float) * group * len);
    CHECK_OK(fathom_store_scan(st, depths, q, group, len, scores, NULL));
    CHECK_OK(fathom_store_scan_reference(st, depths, q, group, len, ref, NULL));
    decode_scores(st, depths, q, group, len, want, mag);
    int bad = 0;
    for (uint64_t i = 0; i < group * len; i++)
        if (!(fabs(scores[i] - ref[i]) <= 2e-6 * mag[i] + 1e-30)) bad++;
    CHECK(bad == 0);
    free(ref);
    free(scores);
    free(want);
    free(mag);
    fathom_store_free(st);
    free(keys);
}

/* More active channels than one kernel pass holds (256) and head counts
 * that do not divide into the kernels' chunks of 4. */
static void test_scan_wide(void) {
    const uint32_t dim = 300;
    const uint64_t len = 64 * 3 + 5;
    float *keys = random_keys(len, dim);
    float *q = malloc(sizeof(float) * 7 * dim);
    for (uint32_t i = 0; i < 7 * dim; i++) q[i] = rng_normal();
    fathom_store *st =
        make_store(dim, 3, NULL, keys, len); /* 3 blocks per segment: partial tiles */
    float *scores = malloc(sizeof(float) * 7 * len);
    double *want = malloc(sizeof(double) * 7 * len), *mag = malloc(sizeof(double) * 7 * len);
    uint8_t depths[300];
    for (uint32_t j = 0; j < dim; j++) depths[j] = (uint8_t)(j < 290 ? 1 + rng_below(4) : 0);
    const fathom_scan_kernel kernels[4] = {FATHOM_SCAN_AUTO, FATHOM_SCAN_PORTABLE, FATHOM_SCAN_AVX2,
                                           FATHOM_SCAN_AVX512};
    for (uint32_t group = 1; group <= 7; group += 2) {
        decode_scores(st, depths, q, group, len, want, mag);
        for (int k = 0; k < 4; k++) {
            if (!fathom_scan_kernel_available(kernels[k])) continue;
            for (uint64_t i = 0; i < group * len; i++) scores[i] = NAN;
            CHECK_OK(fathom_store_scan_with(kernels[k], st, depths, q, group, len, scores, NULL));
            int bad = 0;
            for (uint64_t i = 0; i < group * len; i++)
                if (!(fabs(scores[i] - want[i]) <= 2e-6 * mag[i] + 1e-30)) bad++;
            CHECK(bad == 0);
        }
    }
    free(scores);
    free(want);
    free(mag);
    free(q);
    fathom_store_free(st);
    free(keys);
}

static void test_edges(void) {
    /* all-zero block: scale 0, every code 8, decodes to 0 */
    float zeros[10 * 4] = {0};
    fathom_store *st = make_store(4, 0, NULL, zeros, 10);
    uint64_t w;
    uint16_t s;
    CHECK_OK(fathom_store_word(st, 2, 0, 0, &w, &s));
    CHECK(w == 0x3ffull && s == 0);
    CHECK_OK(fathom_store_word(st, 2, 3, 0, &w, &s));
    CHECK(w == 0);
    uint8_t d4[4] = {4, 3, 2, 1};
    float out[40];
    CHECK_OK(fathom_store_decode(st, 0, 10, d4, out));
    int nonzero = 0;
    for (int i = 0; i < 40; i++) nonzero += out[i] != 0.0f;
    CHECK(nonzero == 0);
    fathom_store_free(st);

    /* huge values saturate the scale at 65504 and clip the codes */
    float big[4 * 2] = {1e6f, 65504.0f, 65520.0f, 1.0f, -1e6f, 100.0f, 1.0f, -3e38f};
    st = make_store(2, 0, NULL, big, 4);
    CHECK_OK(fathom_store_word(st, 0, 0, 0, &w, &s));
    CHECK(s == 0x7bff);
    CHECK(code_of(st, 0, 0) == 15); /* 1e6 */
    CHECK(code_of(st, 0, 1) == 15); /* 65520: floor(8.002) + 8 clips */
    CHECK(code_of(st, 0, 2) == 0);  /* -1e6 */
    CHECK(code_of(st, 0, 3) == 8);  /* 1 / 8188 rounds down to 0 */
    CHECK_OK(fathom_store_word(st, 1, 0, 0, &w, &s));
    CHECK(s == 0x7bff);
    CHECK(code_of(st, 1, 0) == 15); /* 65504 / 8188 = 8 exactly -> 16 -> 15 */
    CHECK(code_of(st, 1, 3) == 0);  /* -3e38 */
    CHECK(code_of(st, 1, 2) == 8);  /* 100 */
    uint8_t full[2] = {4, 4};
    float dec[8];
    CHECK_OK(fathom_store_decode(st, 0, 4, full, dec));
    CHECK(dec[0] == 7.5f * 8188.0f && dec[4] == -7.5f * 8188.0f);
    fathom_store_free(st);

    /* NaN / Inf: rejected, nothing appended */
    float ok[3 * 2] = {1, 2, 3, 4, 5, 6};
    st = make_store(2, 1, NULL, ok, 3);
    float bad_rows[4 * 2] = {1, 2, 3, 4, NAN, 6, 7, 8};
    CHECK_STATUS(fathom_store_append(st, bad_rows, 4), FATHOM_ERR_NONFINITE);
    bad_rows[4] = INFINITY;
    CHECK_STATUS(fathom_store_append(st, bad_rows, 4), FATHOM_ERR_NONFINITE);
    bad_rows[4] = -INFINITY;
    CHECK_STATUS(fathom_store_append(st, bad_rows, 4), FATHOM_ERR_NONFINITE);
    CHECK(fathom_store_length(st) == 3);
    fathom_store *fresh = make_store(2, 1, NULL, ok, 3);
    CHECK(stores_equal(st, fresh));
    fathom_store_free(fresh);
    fathom_store_free(st);
}

static void test_bad_args(void) {
    fathom_store *st = NULL;
    CHECK_STATUS(fathom_store_create(NULL, 4, 0, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_store_create(&st, 0, 0, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK(st == NULL);
    CHECK_STATUS(fathom_store_create(&st, UINT32_MAX, UINT32_MAX, NULL), FATHOM_ERR_NOMEM);
    fathom_store_free(NULL);
    CHECK(fathom_store_length(NULL) == 0 && fathom_store_dim(NULL) == 0);
    CHECK(fathom_store_segment_blocks(NULL) == 0 && fathom_store_segment_count(NULL) == 0);
    CHECK(fathom_store_basis(NULL) == NULL);
    CHECK(fathom_store_index_bytes(NULL) == 0 && fathom_store_allocated_bytes(NULL) == 0);

    float keys[100 * 4];
    for (int i = 0; i < 400; i++) keys[i] = (float)(i % 13) - 6.0f;
    st = make_store(4, 1, NULL, NULL, 0);
    float var[4];
    CHECK_STATUS(fathom_store_variance(st, var), FATHOM_ERR_STATE); /* empty */
    uint8_t depths[4] = {1, 2, 3, 4};
    float q[8] = {1, 1, 1, 1, 1, 1, 1, 1}, scores[200], out[400];
    CHECK_STATUS(fathom_store_scan(st, depths, q, 1, 1, scores, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_store_append(NULL, keys, 1), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_store_append(st, NULL, 1), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_store_append(st, keys, 0), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_store_append(st, keys, UINT64_MAX),
                 FATHOM_ERR_NOMEM); /* count*dim overflows */
    CHECK_OK(fathom_store_append(st, keys, 100));
    CHECK(fathom_store_length(st) == 100 && fathom_store_segment_count(st) == 2);

    fathom_segment_view view;
    CHECK_STATUS(fathom_store_segment(NULL, 0, &view), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_store_segment(st, 0, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_store_segment(st, 2, &view), FATHOM_ERR_INVALID_ARG);

    uint64_t w;
    uint16_t s;
    CHECK_STATUS(fathom_store_word(NULL, 0, 0, 0, &w, &s), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_store_word(st, 0, 0, 0, NULL, &s), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_store_word(st, 0, 0, 0, &w, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_store_word(st, 4, 0, 0, &w, &s), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_store_word(st, 0, 4, 0, &w, &s), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_store_word(st, 0, 0, 2, &w, &s), FATHOM_ERR_INVALID_ARG);
    CHECK_OK(fathom_store_word(st, 3, 3, 1, &w, &s));

    CHECK_STATUS(fathom_store_decode(NULL, 0, 1, depths, out), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_store_decode(st, 0, 1, NULL, out), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_store_decode(st, 0, 1, depths, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_store_decode(st, 0, 0, depths, out), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_store_decode(st, 0, 101, depths, out), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_store_decode(st, 99, 2, depths, out), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_store_decode(st, 101, 1, depths, out), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_store_decode(st, UINT64_MAX, 2, depths, out), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_store_decode(st, 1, UINT64_MAX, depths, out), FATHOM_ERR_INVALID_ARG);
    uint8_t deep[4] = {1, 5, 0, 0};
    CHECK_STATUS(fathom_store_decode(st, 0, 1, deep, out), FATHOM_ERR_INVALID_ARG);
    CHECK_OK(fathom_store_decode(st, 99, 1, depths, out));

    CHECK_STATUS(fathom_store_variance(NULL, var), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_store_variance(st, NULL), FATHOM_ERR_INVALID_ARG);

    const fathom_scan_kernel kernels[5] = {FATHOM_SCAN_AUTO, FATHOM_SCAN_REFERENCE,
                                           FATHOM_SCAN_PORTABLE, FATHOM_SCAN_AVX2,
                                           FATHOM_SCAN_AVX512};
    for (int k = 0; k < 5; k++) {
        if (!fathom_scan_kernel_available(kernels[k])) continue;
        fathom_scan_kernel K = kernels[k];
        CHECK_STATUS(fathom_store_scan_with(K, NULL, depths, q, 2, 100, scores, NULL),
                     FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fathom_store_scan_with(K, st, NULL, q, 2, 100, scores, NULL),
                     FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fathom_store_scan_with(K, st, depths, NULL, 2, 100, scores, NULL),
                     FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fathom_store_scan_with(K, st, depths, q, 2, 100, NULL, NULL),
                     FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fathom_store_scan_with(K, st, depths, q, 0, 100, scores, NULL),
                     FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fathom_store_scan_with(K, st, depths, q, 2, 0, scores, NULL),
                     FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fathom_store_scan_with(K, st, depths, q, 2, 101, scores, NULL),
                     FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fathom_store_scan_with(K, st, deep, q, 2, 100, scores, NULL),
                     FATHOM_ERR_INVALID_ARG);
        CHECK_OK(fathom_store_scan_with(K, st, depths, q, 2, 100, scores, NULL));
    }
    CHECK_STATUS(
        fathom_store_scan_with((fathom_scan_kernel)99, st, depths, q, 2, 100, scores, NULL),
        FATHOM_ERR_INVALID_ARG);
    CHECK(fathom_scan_kernel_available((fathom_scan_kernel)99) == 0);
    for (int k = 3; k < 5; k++)
        if (!fathom_scan_kernel_available(kernels[k]))
            CHECK_STATUS(fathom_store_scan_with(kernels[k], st, depths, q, 2, 100, scores, NULL),
                         FATHOM_ERR_UNSUPPORTED);
    /* failing calls leave a message */
    CHECK_STATUS(fathom_store_scan(st, depths, q, 2, 101, scores, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK(strlen(fathom_last_error()) > 0);
    fathom_store_free(st);
}

int main(void) {
    test_appendix_a();
    test_prefix_exact();
    test_append_equals_bulk();
    test_bytes_and_segments();
    test_variance();
    test_rotated_store();
    test_centered_store();
    test_scan();
    test_scan_wide();
    test_edges();
    test_bad_args();
    return check_summary("test_store");
}

/* The tiled scan kernels and token ranges (core/scan.c, core/scan_x86.c):
 * every tiled kernel's scores are bit-identical to the untiled kernel of the
 * same instruction set (which test_store checks against the reference and
 * decode), and the tiled AVX2 and AVX-512 kernels equal each other, over
 * full ranges, model shapes (dims 64/128/256, G 1..16, every depth 0..4),
 * sub-ranges with a row stride, several passes, head counts that are not
 * multiples of 4 and tiles cut by segment ends; range arguments are
 * validated; the pool driver gives the same scores; cpu.h's feature bits
 * agree with the compiler's own cpuid reading. Kernels this CPU cannot run
 * are compiled in and reported as skipped, never as passing. The grouped
 * ("LUT") mode: its groups, every grouped kernel against its reference bit
 * for bit, and its scores against the exact ones within a derived bound.
 * The int8 ("VNNI") mode and its int16 variant: every kernel against its
 * reference bit for bit (ranges, the pool driver, scan + select, degenerate
 * weights), and the scores against the exact sums within the bound the
 * definition gives. */
#include "check.h"
#include "cpu.h"
#include "fathom.h"
#include "pool.h"
#include "scan_internal.h"
#include "store_internal.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint64_t rng_u64(void) { /* Knuth's MMIX LCG, high bits folded down */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return rng_state ^ (rng_state >> 29);
}
static uint32_t rng_below(uint32_t n) { return (uint32_t)(rng_u64() % n); }
/* uniform in [-m, m) with m spanning 1e-3 .. 1e3 by channel */
static float rng_key(uint32_t j) {
    float m = (float)pow(10.0, (double)(j % 7) - 3.0);
    return m * (float)((double)(rng_u64() >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

static const struct {
    fathom_scan_kernel untiled, tiled;
    const char *name;
} pairs[3] = {{FATHOM_SCAN_PORTABLE, FATHOM_SCAN_TILED_PORTABLE, "portable"},
              {FATHOM_SCAN_AVX2, FATHOM_SCAN_TILED_AVX2, "AVX2"},
              {FATHOM_SCAN_AVX512, FATHOM_SCAN_TILED_AVX512, "AVX-512"}};

static int pairs_run[3];

static fathom_store *make_store(uint32_t dim, uint32_t seg_blocks, uint64_t n) {
    float *keys = malloc(sizeof(float) * n * dim);
    for (uint64_t i = 0; i < n * dim; i++) keys[i] = rng_key((uint32_t)(i % dim));
    fathom_store *st = NULL;
    CHECK_OK(fathom_store_create(&st, dim, seg_blocks, NULL));
    CHECK_OK(fathom_store_append(st, keys, n));
    free(keys);
    return st;
}

/* Tiled AVX2 and AVX-512 scores compared bit for bit (both run one fused
 * multiply-add per head, channel and token in pass order), and how many
 * scores were compared. */
static uint64_t fma_pairs_compared;

/* Full scans: tiled == untiled, bit for bit, and the same bytes_read; the
 * tiled AVX2 and AVX-512 kernels equal each other where both run. */
static void check_full(fathom_store *st, const uint8_t *depths, const float *q, uint32_t group,
                       uint64_t n) {
    float *a = malloc(sizeof(float) * group * n), *b = malloc(sizeof(float) * group * n);
    float *wide = malloc(sizeof(float) * group * n);
    int have_avx2 = 0;
    for (int k = 0; k < 3; k++) {
        if (!fathom_scan_kernel_available(pairs[k].tiled)) {
            CHECK(!fathom_scan_kernel_available(pairs[k].untiled));
            continue;
        }
        pairs_run[k]++;
        for (uint64_t i = 0; i < group * n; i++) a[i] = b[i] = NAN; /* every score is written */
        uint64_t ba = 1, bb = 2;
        CHECK_OK(fathom_store_scan_with(pairs[k].untiled, st, depths, q, group, n, a, &ba));
        CHECK_OK(fathom_store_scan_with(pairs[k].tiled, st, depths, q, group, n, b, &bb));
        CHECK(ba == bb);
        int differ = memcmp(a, b, sizeof(float) * group * n) != 0;
        if (differ)
            fprintf(stderr, "%s: tiled scores differ (group %u, n %llu)\n", pairs[k].name, group,
                    (unsigned long long)n);
        CHECK(!differ);
        if (pairs[k].tiled == FATHOM_SCAN_TILED_AVX2) {
            memcpy(wide, b, sizeof(float) * group * n);
            have_avx2 = 1;
        } else if (pairs[k].tiled == FATHOM_SCAN_TILED_AVX512 && have_avx2) {
            int cross = memcmp(wide, b, sizeof(float) * group * n) != 0;
            if (cross)
                fprintf(stderr, "tiled AVX2 and AVX-512 scores differ (group %u, n %llu)\n", group,
                        (unsigned long long)n);
            CHECK(!cross);
            fma_pairs_compared += group * n;
        }
    }
    free(a);
    free(b);
    free(wide);
}

/* The shapes of real models: dims 64, 128 and 256, G from 1 to 16 (chunks
 * of 4 heads and remainders), every depth 0..4 in one plan and plans of one
 * depth, and lengths that end in partial blocks and partial 16-token
 * quarters. */
static void test_model_shapes(void) {
    const uint32_t dims[3] = {64, 128, 256}, groups[7] = {1, 2, 3, 4, 5, 8, 16};
    const uint64_t len = 64 * 6 + 37, ns[3] = {len, 64 * 2 + 16, 9};
    for (int di = 0; di < 3; di++) {
        const uint32_t dim = dims[di];
        fathom_store *st = make_store(dim, 0, len);
        float *q = malloc(sizeof(float) * 16 * dim);
        for (uint32_t i = 0; i < 16 * dim; i++) q[i] = rng_key(i) * 10.0f;
        uint8_t *depths = malloc(dim);
        for (int pattern = 0; pattern < 7; pattern++) {
            int seen[5] = {0};
            for (uint32_t j = 0; j < dim; j++) {
                depths[j] = pattern < 5    ? (uint8_t)pattern /* every channel at one depth */
                            : pattern == 5 ? (uint8_t)((j * 7 + 3) % 5)
                                           : (uint8_t)rng_below(5);
                seen[depths[j]]++;
            }
            if (pattern >= 5) CHECK(seen[0] && seen[1] && seen[2] && seen[3] && seen[4]);
            for (int gi = 0; gi < 7; gi++)
                for (int ni = 0; ni < 3; ni++) check_full(st, depths, q, groups[gi], ns[ni]);
        }
        free(depths);
        free(q);
        fathom_store_free(st);
    }
}

static void test_tiled_identical(void) {
    /* dim 40: one pass; dim 300: 290 active channels, five passes. Three
     * blocks per segment: tiles end at segment ends, not only at 8 blocks. */
    const uint32_t dims[2] = {40, 300};
    for (int di = 0; di < 2; di++) {
        const uint32_t dim = dims[di];
        const uint64_t len = 64 * 11 + 29;
        fathom_store *st = make_store(dim, 3, len);
        float *q = malloc(sizeof(float) * 7 * dim);
        for (uint32_t i = 0; i < 7 * dim; i++) q[i] = rng_key(i) * 100.0f;
        uint8_t *depths = malloc(dim);
        for (int pattern = 0; pattern < 6; pattern++) {
            for (uint32_t j = 0; j < dim; j++)
                depths[j] = pattern < 5 ? (uint8_t)((j + (uint32_t)pattern) % 5)
                                        : (uint8_t)(j < dim - 10 ? 1 + rng_below(4) : 0);
            for (uint32_t group = 1; group <= 7; group += 2)
                for (uint64_t n = 1; n <= len; n = n * 3 + 17) check_full(st, depths, q, group, n);
            check_full(st, depths, q, 4, len);
        }
        free(depths);
        free(q);
        fathom_store_free(st);
    }
}

/* Extreme fp16 scales: 0 (all keys of a block zero; the values are zeros of
 * either sign, depending on how a kernel forms them, and the scores stay
 * bit-identical since a fused multiply-add of a zero product into an
 * accumulator that starts at +0 gives the same sum), subnormal (keys near
 * 1e-6) and near the largest (keys near 6e4). Queries of both signs, -0.0f
 * and exact zeros included. */
static void test_extreme_scales(void) {
    const uint32_t dim = 24;
    const uint64_t len = 64 * 4 + 9;
    float *keys = malloc(sizeof(float) * len * dim);
    for (uint64_t i = 0; i < len; i++)
        for (uint32_t j = 0; j < dim; j++) { /* channels 0, 3, ... and tokens 64..127: zero */
            const float u = rng_key(3) * 2.0f; /* uniform in [-2, 2) */
            keys[i * dim + j] = j % 3 == 0 || (i >= 64 && i < 128) ? 0.0f
                                : j % 3 == 1                     ? 1e-6f * u
                                                                 : 3e4f * u;
        }
    fathom_store *st = NULL;
    CHECK_OK(fathom_store_create(&st, dim, 0, NULL));
    CHECK_OK(fathom_store_append(st, keys, len));
    free(keys);
    uint64_t word;
    uint16_t zero = 1, tiny = 0, huge = 0;
    CHECK_OK(fathom_store_word(st, 0, 0, 0, &word, &zero));
    CHECK_OK(fathom_store_word(st, 1, 0, 0, &word, &tiny));
    CHECK_OK(fathom_store_word(st, 2, 0, 0, &word, &huge));
    /* fp16 bits: 0; a subnormal (exponent field 0); an exponent of 2^14 or more */
    CHECK(zero == 0 && tiny != 0 && (tiny & 0x7c00) == 0 && (huge & 0x7c00) >= 0x7400);
    float q[5 * 24];
    for (uint32_t i = 0; i < 5 * dim; i++)
        q[i] = i % 7 == 0 ? -0.0f : i % 11 == 0 ? 0.0f : (i % 2 ? -1.0f : 1.0f) * rng_key(i);
    uint8_t depths[24];
    for (int pattern = 0; pattern < 4; pattern++) {
        for (uint32_t j = 0; j < dim; j++) depths[j] = (uint8_t)(1 + (j + (uint32_t)pattern) % 4);
        for (uint32_t group = 1; group <= 5; group += 2) check_full(st, depths, q, group, len);
    }
    fathom_store_free(st);
}

/* Ranges: scores[h * ld + i] of tokens first + i equal the full scan's; the
 * stride padding is untouched; bytes_read counts the range's blocks. */
static void test_ranges(void) {
    const uint32_t dim = 150, group = 5; /* about 120 active channels: two passes */
    const uint64_t len = 64 * 20 + 7;
    fathom_store *st = make_store(dim, 4, len);
    float q[5 * 150];
    for (uint32_t i = 0; i < group * dim; i++) q[i] = rng_key(i);
    uint8_t depths[150];
    uint64_t per_block = 0;
    for (uint32_t j = 0; j < dim; j++) {
        depths[j] = (uint8_t)rng_below(5);
        if (depths[j]) per_block += 8u * depths[j] + 2;
    }
    float *full = malloc(sizeof(float) * group * len);
    float *part = malloc(sizeof(float) * group * (len + 9));
    for (int k = 0; k < 3; k++) {
        if (!fathom_scan_kernel_available(pairs[k].tiled)) continue;
        pairs_run[k]++;
        CHECK_OK(fathom_store_scan_with(pairs[k].untiled, st, depths, q, group, len, full, NULL));
        for (int trial = 0; trial < 40; trial++) {
            uint64_t first = 64 * (uint64_t)rng_below((uint32_t)(len / 64) + 1);
            if (first >= len) first = 0;
            uint64_t count = 1 + rng_below((uint32_t)(len - first));
            if (trial == 0) first = 0, count = len;
            uint64_t ld = count + rng_below(10);
            for (uint64_t i = 0; i < group * ld; i++) part[i] = -7.0f;
            uint64_t bytes = 0;
            CHECK_OK(fathom_store_scan_range(pairs[k].tiled, st, depths, q, group, first, count,
                                             part, ld, &bytes));
            CHECK(bytes == (count + 63) / 64 * per_block);
            int bad = 0, pad = 0;
            for (uint32_t h = 0; h < group; h++) {
                bad += memcmp(part + h * ld, full + h * len + first, sizeof(float) * count) != 0;
                for (uint64_t i = count; i < ld; i++) pad += part[h * ld + i] != -7.0f;
            }
            CHECK(bad == 0 && pad == 0);
        }
    }
    /* AUTO is the widest tiled kernel */
    uint64_t first = 128, count = 300;
    CHECK_OK(fathom_store_scan_range(FATHOM_SCAN_AUTO, st, depths, q, group, first, count, part,
                                     count, NULL));
    int bad = 0;
    for (uint32_t h = 0; h < group; h++)
        bad += memcmp(part + h * count, full + h * len + first, sizeof(float) * count) != 0;
    CHECK(bad == 0);
    free(full);
    free(part);
    fathom_store_free(st);
}

static void test_range_args(void) {
    const uint32_t dim = 8;
    fathom_store *st = make_store(dim, 0, 200);
    float q[8] = {1, 2, 3, 4, 5, 6, 7, 8}, s[400];
    uint8_t depths[8] = {1, 2, 3, 4, 0, 1, 2, 3}, deep[8] = {5, 0, 0, 0, 0, 0, 0, 0};
    const fathom_scan_kernel K = FATHOM_SCAN_AUTO;
    CHECK_OK(fathom_store_scan_range(K, st, depths, q, 1, 192, 8, s, 8, NULL));
    CHECK_STATUS(fathom_store_scan_range(K, st, depths, q, 1, 100, 8, s, 8, NULL),
                 FATHOM_ERR_INVALID_ARG); /* first not a block start */
    CHECK_STATUS(fathom_store_scan_range(K, st, depths, q, 1, 192, 9, s, 9, NULL),
                 FATHOM_ERR_INVALID_ARG); /* past the length */
    CHECK_STATUS(fathom_store_scan_range(K, st, depths, q, 1, 256, 1, s, 1, NULL),
                 FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_store_scan_range(K, st, depths, q, 1, 0, 0, s, 1, NULL),
                 FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_store_scan_range(K, st, depths, q, 2, 0, 100, s, 99, NULL),
                 FATHOM_ERR_INVALID_ARG); /* ld < count */
    CHECK_STATUS(fathom_store_scan_range(K, st, depths, q, 0, 0, 100, s, 100, NULL),
                 FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_store_scan_range(K, st, deep, q, 1, 0, 100, s, 100, NULL),
                 FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_store_scan_range(K, NULL, depths, q, 1, 0, 100, s, 100, NULL),
                 FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_store_scan_range(K, st, depths, q, 1, 0, 100, NULL, 100, NULL),
                 FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_store_scan_range(K, st, depths, q, 1, 0, 100, s, UINT64_MAX, NULL),
                 FATHOM_ERR_NOMEM); /* group * ld overflows */
    CHECK_STATUS(fathom_store_scan_range(FATHOM_SCAN_AVX2, st, depths, q, 1, 0, 100, s, 100, NULL),
                 FATHOM_ERR_INVALID_ARG); /* not a tiled kernel */
    CHECK_STATUS(fathom_store_scan_range(FATHOM_SCAN_REFERENCE, st, depths, q, 1, 0, 100, s, 100,
                                         NULL),
                 FATHOM_ERR_INVALID_ARG);
    for (int k = 0; k < 3; k++)
        if (!fathom_scan_kernel_available(pairs[k].tiled))
            CHECK_STATUS(
                fathom_store_scan_range(pairs[k].tiled, st, depths, q, 1, 0, 100, s, 100, NULL),
                FATHOM_ERR_UNSUPPORTED);
    /* no active channel: every score 0 */
    uint8_t none[8] = {0};
    for (int i = 0; i < 400; i++) s[i] = 5.0f;
    CHECK_OK(fathom_store_scan_range(K, st, none, q, 2, 64, 100, s, 100, NULL));
    int zero = 0;
    for (int i = 0; i < 200; i++) zero += s[i] == 0.0f;
    CHECK(zero == 200 && s[200] == 5.0f);
    fathom_store_free(st);
}

/* fathom_scan_parallel: (item, token range) tasks on a pool give every
 * item's scores bit for bit; a failing item's status comes back. */
static void test_parallel(void) {
    const uint32_t dim = 24;
    fathom_store *a = make_store(dim, 2, 64 * 9 + 5), *b = make_store(dim, 0, 300);
    float q[3 * 24];
    for (uint32_t i = 0; i < 3 * dim; i++) q[i] = rng_key(i);
    uint8_t da[24], db[24], bad[24];
    for (uint32_t j = 0; j < dim; j++) da[j] = (uint8_t)rng_below(5), db[j] = (uint8_t)(j % 5), bad[j] = 0;
    bad[3] = 9;
    float *sa = malloc(sizeof(float) * 3 * 581), *sb = malloc(sizeof(float) * 2 * 300);
    float *ra = malloc(sizeof(float) * 3 * 581), *rb = malloc(sizeof(float) * 2 * 300);
    CHECK_OK(fathom_store_scan(a, da, q, 3, 581, ra, NULL));
    CHECK_OK(fathom_store_scan(b, db, q, 2, 299, rb, NULL));
    fathom_pool *pool = NULL;
    CHECK_OK(fathom_pool_create(&pool, 3));
    if (pool) {
        const uint64_t ranges[3] = {64, 128, 0};
        for (int r = 0; r < 3; r++) {
            for (uint32_t i = 0; i < 3 * 581; i++) sa[i] = NAN;
            for (uint32_t i = 0; i < 2 * 300; i++) sb[i] = NAN;
            fathom_scan_item items[2] = {{a, da, q, 3, 581, sa}, {b, db, q, 2, 299, sb}};
            CHECK_OK(fathom_scan_parallel(pool, FATHOM_SCAN_AUTO, items, 2, ranges[r]));
            CHECK(memcmp(sa, ra, sizeof(float) * 3 * 581) == 0);
            CHECK(memcmp(sb, rb, sizeof(float) * 2 * 299) == 0);
        }
        fathom_scan_item items[2] = {{a, da, q, 3, 581, sa}, {b, bad, q, 2, 299, sb}};
        CHECK_STATUS(fathom_scan_parallel(pool, FATHOM_SCAN_AUTO, items, 2, 64), FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fathom_scan_parallel(pool, FATHOM_SCAN_AUTO, items, 2, 100), FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fathom_scan_parallel(pool, FATHOM_SCAN_AUTO, items, 0, 64), FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fathom_scan_parallel(NULL, FATHOM_SCAN_AUTO, items, 1, 64), FATHOM_ERR_INVALID_ARG);
    }
    fathom_pool_free(pool);
    free(sa);
    free(sb);
    free(ra);
    free(rb);
    fathom_store_free(a);
    fathom_store_free(b);
}

/* A batch with more than 32 MiB of scores writes them with non-temporal
 * stores where rows are 64-byte aligned and one pass makes them (scan.c):
 * the same scores as the single scans. Item a: 5 heads (a chunk of 4 and
 * one of 1), aligned rows, one pass; item b: a row stride that is not a
 * multiple of 16 floats and two passes. */
static void test_parallel_stream(void) {
    const uint32_t da_dim = 8, db_dim = 100;
    const uint64_t na = 1700000, nb = 3001; /* 5 * na floats: just over 32 MiB */
    fathom_store *a = NULL;
    CHECK_OK(fathom_store_create(&a, da_dim, 0, NULL));
    float *keys = malloc(sizeof(float) * 65536 * da_dim);
    for (uint64_t done = 0; a && keys && done < na; done += 65536) {
        const uint64_t m = na - done < 65536 ? na - done : 65536;
        for (uint64_t i = 0; i < m * da_dim; i++) keys[i] = rng_key((uint32_t)(i % da_dim));
        CHECK_OK(fathom_store_append(a, keys, m));
    }
    free(keys);
    fathom_store *b = make_store(db_dim, 0, nb);
    float qa[5 * 8], qb[3 * 100];
    for (uint32_t i = 0; i < 5 * da_dim; i++) qa[i] = rng_key(i);
    for (uint32_t i = 0; i < 3 * db_dim; i++) qb[i] = rng_key(i);
    uint8_t depa[8], depb[100];
    for (uint32_t j = 0; j < da_dim; j++) depa[j] = (uint8_t)(1 + j % 4);
    for (uint32_t j = 0; j < db_dim; j++) depb[j] = (uint8_t)(1 + rng_below(4));
    float *sa = aligned_alloc(64, sizeof(float) * 5 * na), *ra = malloc(sizeof(float) * 5 * na);
    float *sb = aligned_alloc(64, sizeof(float) * 3 * 3008), *rb = malloc(sizeof(float) * 3 * nb);
    fathom_pool *pool = NULL;
    CHECK_OK(fathom_pool_create(&pool, 2));
    if (a && b && sa && ra && sb && rb && pool) {
        CHECK_OK(fathom_store_scan(a, depa, qa, 5, na, ra, NULL));
        CHECK_OK(fathom_store_scan(b, depb, qb, 3, nb, rb, NULL));
        fathom_scan_item items[2] = {{a, depa, qa, 5, na, sa}, {b, depb, qb, 3, nb, sb}};
        CHECK_OK(fathom_scan_parallel(pool, FATHOM_SCAN_AUTO, items, 2, 0));
        CHECK(memcmp(sa, ra, sizeof(float) * 5 * na) == 0);
        CHECK(memcmp(sb, rb, sizeof(float) * 3 * nb) == 0);
    }
    fathom_pool_free(pool);
    free(sa);
    free(ra);
    free(sb);
    free(rb);
    fathom_store_free(a);
    fathom_store_free(b);
}

/* fathom_scan_select_parallel: the selections of fathom_select on
 * fathom_store_scan's scores, head by head, for windows that cover the
 * edge cases (n <= k, sink + local >= k, tiny and huge m), ranges that
 * force the candidate compaction, all-tied scores (depths 0: every score
 * 0, the lowest positions win), NaN scores and a mix of +-inf and NaN. */
static int scan_select_cases, scan_select_bad;

static void check_scan_select(fathom_pool *pool, fathom_store *a, fathom_store *b,
                              const uint8_t *da, const uint8_t *db, const float *q, uint64_t range) {
    static const uint32_t ks[5] = {1, 8, 64, 300, 3000}, sinks[2] = {0, 4}, locals[3] = {0, 16, 100};
    const uint64_t ns[4] = {1, 50, 700, fathom_store_length(a)};
    const uint32_t ga = 3, gb = 5, dim = fathom_store_dim(a);
    uint64_t *work = malloc(fathom_select_work_size(fathom_store_length(a)));
    float *scores = malloc(sizeof(float) * gb * fathom_store_length(a));
    uint32_t *ref = malloc(sizeof(uint32_t) * 3000), *ia = malloc(sizeof(uint32_t) * ga * 3000),
             *ib = malloc(sizeof(uint32_t) * gb * 3000);
    for (int ni = 0; ni < 4; ni++)
        for (int ki = 0; ki < 5; ki++)
            for (int si = 0; si < 2; si++)
                for (int li = 0; li < 3; li++) {
                    const uint64_t n = ns[ni];
                    const uint32_t k = ks[ki], sink = sinks[si], local = locals[li];
                    uint32_t ca[3] = {0}, cb[5] = {0};
                    const uint64_t nb = n < fathom_store_length(b) ? n : fathom_store_length(b);
                    fathom_scan_select_item items[2] = {
                        {a, da, q, ga, n, k, sink, local, ia, ca, NULL},
                        {b, db, q + dim, gb, nb, k, sink, local, ib, cb, NULL}};
                    CHECK_OK(fathom_scan_select_parallel(pool, FATHOM_SCAN_AUTO, items, 2, range));
                    for (int it = 0; it < 2; it++) {
                        const fathom_scan_select_item *x = &items[it];
                        CHECK_OK(fathom_store_scan(x->store, x->depths, x->queries, x->group, x->n,
                                                   scores, NULL));
                        for (uint32_t h = 0; h < x->group; h++) {
                            uint32_t c = 0;
                            CHECK_OK(fathom_select(scores + h * x->n, x->n, k, sink, local, work,
                                                   ref, &c));
                            scan_select_cases++;
                            if (c != x->count[h] ||
                                memcmp(ref, x->idx + (uint64_t)h * k, sizeof(uint32_t) * c) != 0) {
                                scan_select_bad++;
                                fprintf(stderr,
                                        "scan_select differs: n %llu k %u sink %u local %u range "
                                        "%llu item %d head %u\n",
                                        (unsigned long long)x->n, k, sink, local,
                                        (unsigned long long)range, it, h);
                            }
                        }
                    }
                }
    free(work);
    free(scores);
    free(ref);
    free(ia);
    free(ib);
}

static void test_scan_select(void) {
    const uint32_t dim = 24;
    fathom_store *a = make_store(dim, 2, 64 * 40 + 13), *b = make_store(dim, 0, 1500);
    float q[6 * 24];
    for (uint32_t i = 0; i < 6 * dim; i++) q[i] = rng_key(i);
    uint8_t da[24], db[24], zero[24] = {0};
    for (uint32_t j = 0; j < dim; j++) da[j] = (uint8_t)rng_below(5), db[j] = (uint8_t)(j % 3);
    fathom_pool *pool = NULL;
    CHECK_OK(fathom_pool_create(&pool, 3));
    if (pool) {
        const uint64_t ranges[3] = {64, 192, 0};
        for (int r = 0; r < 3; r++) check_scan_select(pool, a, b, da, db, q, ranges[r]);
        check_scan_select(pool, a, b, zero, da, q, 128); /* all scores of item a tie */
        float qnan[6 * 24];
        memcpy(qnan, q, sizeof qnan);
        qnan[5] = NAN; /* head 0 of item a: every score NaN */
        check_scan_select(pool, a, b, da, db, qnan, 64);
        float qinf[6 * 24];
        memcpy(qinf, q, sizeof qinf);
        for (int j = 7; j < 24; j += 3) /* head 0 of item a: mostly NaN, some +-inf */
            qinf[j] = j % 2 ? INFINITY : -INFINITY;
        check_scan_select(pool, a, b, db, da, qinf, 0);
        /* ranges long enough for a task's own bound before any floor (16 groups of
           16 per 256 tokens; m up to 300 here) */
        fathom_store *c = make_store(dim, 0, 64 * 700);
        check_scan_select(pool, c, b, da, db, q, 0);
        check_scan_select(pool, c, b, db, da, q, 8192);
        fathom_store_free(c);
        /* argument errors */
        uint32_t idx[8], cnt[3];
        fathom_scan_select_item it = {a, da, q, 3, 100, 2, 0, 0, idx, cnt, NULL};
        CHECK_STATUS(fathom_scan_select_parallel(pool, FATHOM_SCAN_AUTO, &it, 1, 100),
                     FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fathom_scan_select_parallel(NULL, FATHOM_SCAN_AUTO, &it, 1, 64),
                     FATHOM_ERR_INVALID_ARG);
        it.n = fathom_store_length(a) + 1;
        CHECK_STATUS(fathom_scan_select_parallel(pool, FATHOM_SCAN_AUTO, &it, 1, 64),
                     FATHOM_ERR_INVALID_ARG);
        it.n = 100, it.k = 0;
        CHECK_STATUS(fathom_scan_select_parallel(pool, FATHOM_SCAN_AUTO, &it, 1, 64),
                     FATHOM_ERR_INVALID_ARG);
        it.k = 2, it.idx = NULL;
        CHECK_STATUS(fathom_scan_select_parallel(pool, FATHOM_SCAN_AUTO, &it, 1, 64),
                     FATHOM_ERR_INVALID_ARG);
        /* ranges that fail inside the call (a depth of 5, which only the
           scan checks): the selections waiting on them skip their work */
        uint8_t dbad[24];
        memcpy(dbad, da, sizeof dbad);
        dbad[7] = 5;
        uint32_t ia[3 * 64], ib[5 * 64], ca[3], cb[5];
        for (int first = 0; first < 2; first++) {
            fathom_scan_select_item two[2] = {
                {a, first ? dbad : da, q, 3, fathom_store_length(a), 64, 4, 16, ia, ca, NULL},
                {b, first ? db : dbad, q + dim, 5, fathom_store_length(b), 64, 4, 16, ib, cb, NULL}};
            CHECK_STATUS(fathom_scan_select_parallel(pool, FATHOM_SCAN_AUTO, two, 2, 64),
                         FATHOM_ERR_INVALID_ARG);
        }
    }
    CHECK(scan_select_cases == 8 * 4 * 5 * 2 * 3 * 8 && scan_select_bad == 0);
    printf("test_scan: scan_select checked against fathom_select (%d head selections)\n",
           scan_select_cases);
    fathom_pool_free(pool);
    fathom_store_free(a);
    fathom_store_free(b);
}

/* The vector candidate filters (scan_select.c's) against the portable one:
 * the same candidates in the same order, over lengths around the vectors'
 * 16 and 64, thresholds at special values (-inf, -0, 0, +inf, a score),
 * strict or not, scores with NaN, signed zeros and infinities, and
 * positions that end at 2^32 - 1; nothing written past the last one. */
static int filters_run[2];
static void test_filters(void) {
#ifdef FATHOM_X86
    static const struct {
        const char *name;
        uint32_t feature;
        uint32_t (*fn)(const float *, uint32_t, float, int, uint64_t, uint64_t *);
    } vf[2] = {{"AVX2", FATHOM_CPU_AVX2, fathom_scan_filter_avx2},
               {"AVX-512", FATHOM_CPU_AVX512, fathom_scan_filter_avx512}};
    enum { N = 300 };
    const uint64_t saved = rng_state; /* the later tests' data stay as they were */
    float s[N];
    uint64_t want[N], got[N + 1];
    const float specials[] = {NAN, -0.0f, 0.0f, INFINITY, -INFINITY, 1e-40f, -1e-40f};
    for (int k = 0; k < 2; k++) {
        if (!fathom_cpu_has(vf[k].feature)) continue;
        for (int round = 0; round < 400; round++) {
            const uint32_t n = round < 130 ? (uint32_t)round : 1 + rng_below(N);
            for (uint32_t i = 0; i < n; i++)
                s[i] = rng_below(8) == 0 ? specials[rng_below(7)] : rng_key(i) * 1e3f;
            const float thr = round % 5 == 0   ? -INFINITY
                              : round % 5 == 1 ? (rng_below(2) ? 0.0f : -0.0f)
                              : round % 5 == 2 ? INFINITY
                              : n              ? s[rng_below(n)]
                                               : 1.0f;
            const int strict = (round / 5) % 2;
            const uint64_t pos0 = round % 3 == 0 ? (uint64_t)UINT32_MAX + 1 - n : rng_below(1u << 20);
            const uint32_t cw = scan_filter_tail(s, 0, n, thr, strict, pos0, want);
            for (uint32_t i = 0; i < N + 1; i++) got[i] = 0x5a5a5a5a5a5a5a5aull;
            const uint32_t cg = vf[k].fn(s, n, thr, strict, pos0, got);
            CHECK(cg == cw && !memcmp(got, want, cw * sizeof *want));
            CHECK(got[cw] == 0x5a5a5a5a5a5a5a5aull);
            filters_run[k]++;
        }
    }
    rng_state = saved;
#endif
}

/* cpu.h against the compiler's own cpuid reading. */
static void test_cpu_features(void) {
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
    __builtin_cpu_init();
    if (getenv("FATHOM_CPU_MASK")) {
        printf("test_scan: FATHOM_CPU_MASK set, feature cross-check skipped\n");
        return;
    }
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    CHECK(fathom_cpu_has(FATHOM_CPU_AVX2) == (avx2 != 0));
    CHECK(fathom_cpu_has(FATHOM_CPU_AVX512) == (avx2 && __builtin_cpu_supports("avx512f")));
    CHECK(fathom_cpu_has(FATHOM_CPU_BMI2) == (__builtin_cpu_supports("bmi2") != 0));
    CHECK(fathom_scan_kernel_available(FATHOM_SCAN_AVX2) == fathom_cpu_has(FATHOM_CPU_AVX2));
    CHECK(fathom_scan_kernel_available(FATHOM_SCAN_AVX512) == fathom_cpu_has(FATHOM_CPU_AVX512));
#else
    printf("test_scan: no x86-64 GCC, feature cross-check skipped\n");
#endif
}

/* Caller-provided segments: copies of a store's segments in separate
 * buffers (the CUDA tier's host segments have this layout), scanned in
 * place. fathom_segments_scan_range gives fathom_store_scan_range's scores
 * bit for bit; fathom_plan_select_parallel gives, per item, the depths of
 * fathom_store_variance + fathom_importance + fathom_water_fill and the
 * selections of fathom_select over fathom_store_scan's scores. */
typedef struct seg_copy {
    fathom_segments segs;
    fathom_segment_view *views;
    uint64_t *words;
    uint16_t *scales;
} seg_copy;

static seg_copy copy_segments(const fathom_store *st) {
    seg_copy c;
    const uint32_t dim = fathom_store_dim(st), S = fathom_store_segment_blocks(st);
    const uint32_t count = fathom_store_segment_count(st);
    c.views = calloc(count, sizeof *c.views);
    c.words = malloc(sizeof(uint64_t) * count * dim * 4 * S);
    c.scales = malloc(sizeof(uint16_t) * count * dim * S);
    for (uint32_t i = 0; i < count; i++) {
        fathom_segment_view v;
        CHECK_OK(fathom_store_segment(st, i, &v));
        uint64_t *w = c.words + (uint64_t)i * dim * 4 * S;
        uint16_t *sc = c.scales + (uint64_t)i * dim * S;
        memcpy(w, v.planes, sizeof(uint64_t) * dim * 4 * S);
        memcpy(sc, v.scales, sizeof(uint16_t) * dim * S);
        c.views[i].planes = w;
        c.views[i].scales = sc;
        c.views[i].first_token = v.first_token;
    }
    c.segs.dim = dim;
    c.segs.segment_blocks = S;
    c.segs.length = fathom_store_length(st);
    c.segs.views = c.views;
    return c;
}

static void free_segments(seg_copy *c) {
    free(c->views);
    free(c->words);
    free(c->scales);
}

static void test_segments(void) {
    const uint32_t dim = 32, G = 4;
    const uint64_t lengths[3] = {64 * 9 + 17, 64 * 4, 200}; /* partial block, several segments */
    fathom_store *st[3];
    seg_copy sc[3];
    for (int i = 0; i < 3; i++) {
        st[i] = make_store(dim, i == 2 ? 0 : 2, lengths[i]);
        sc[i] = copy_segments(st[i]);
    }
    float q[3 * 4 * 32];
    for (uint32_t i = 0; i < 3 * G * dim; i++) q[i] = rng_key(i % dim);
    /* scores over ranges: bit-identical to the store's */
    int scans = 0, scan_bad = 0;
    float *a = malloc(sizeof(float) * G * 700), *b = malloc(sizeof(float) * G * 700);
    uint8_t depths[32];
    for (uint32_t j = 0; j < dim; j++) depths[j] = (uint8_t)rng_below(5);
    const uint64_t firsts[3] = {0, 128, 320}, counts[3] = {lengths[0], 17, 64 * 4 + 17};
    for (int r = 0; r < 3; r++) {
        uint64_t ba = 0, bb = 0;
        CHECK_OK(fathom_store_scan_range(FATHOM_SCAN_AUTO, st[0], depths, q, G, firsts[r], counts[r], a,
                                         700, &ba));
        CHECK_OK(fathom_segments_scan_range(FATHOM_SCAN_AUTO, &sc[0].segs, depths, q, G, firsts[r],
                                            counts[r], b, 700, &bb));
        for (uint32_t h = 0; h < G; h++, scans++)
            scan_bad += memcmp(a + h * 700, b + h * 700, sizeof(float) * counts[r]) != 0;
        CHECK(ba == bb && ba > 0);
    }
    CHECK(scans == 12 && scan_bad == 0);
    /* argument checks of the segments scan */
    CHECK_STATUS(fathom_segments_scan_range(FATHOM_SCAN_AUTO, NULL, depths, q, G, 0, 64, a, 700, NULL),
                 FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_segments_scan_range(FATHOM_SCAN_AUTO, &sc[0].segs, depths, q, G, 0,
                                            lengths[0] + 1, a, lengths[0] + 1, NULL),
                 FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_segments_scan_range(FATHOM_SCAN_REFERENCE, &sc[0].segs, depths, q, G, 0, 64, a,
                                            700, NULL),
                 FATHOM_ERR_INVALID_ARG);
    /* plan + scan + select of a batch against the library's steps */
    fathom_pool *pool = NULL;
    CHECK_OK(fathom_pool_create(&pool, 3));
    uint64_t *work = malloc(fathom_select_work_size(700));
    uint32_t ref[64];
    int heads = 0, head_bad = 0, depth_bad = 0;
    static const uint32_t budgets[3] = {1, 48, 128}, ks[3] = {8, 40, 64};
    for (int cfg = 0; cfg < 3 && pool; cfg++) {
        const uint32_t k = ks[cfg], sink = cfg == 0 ? 0 : 4, local = cfg == 0 ? 0 : cfg == 1 ? 32 : 16;
        const uint64_t *ns = lengths;
        fathom_plan_select_item items[3];
        uint8_t dep[3][32];
        uint32_t idx[3][4 * 64], cnt[3][4];
        const double *shift, *sum[3], *sum_sq[3];
        for (int i = 0; i < 3; i++) {
            fathom_store_sums(st[i], &shift, &sum[i], &sum_sq[i]);
            const fathom_plan_select_item it = {&sc[i].segs, sum[i], sum_sq[i], q + i * G * dim, G,
                                                ns[i], budgets[(cfg + i) % 3], k, sink, local,
                                                dep[i], idx[i], cnt[i]};
            items[i] = it;
        }
        CHECK_OK(fathom_plan_select_parallel(pool, FATHOM_SCAN_AUTO, items, 3, cfg == 1 ? 0 : 64));
        for (int i = 0; i < 3; i++) {
            const fathom_plan_select_item *it = &items[i];
            float var[32];
            double g[32];
            uint8_t want[32];
            CHECK_OK(fathom_store_variance(st[i], var));
            CHECK_OK(fathom_importance(dim, G, it->queries, var, g));
            CHECK_OK(fathom_water_fill(dim, g, it->budget, want, NULL));
            depth_bad += memcmp(want, it->depths, dim) != 0;
            CHECK_OK(fathom_store_scan(st[i], want, it->queries, G, it->n, a, NULL));
            for (uint32_t h = 0; h < G; h++, heads++) {
                uint32_t c = 0;
                CHECK_OK(fathom_select(a + h * it->n, it->n, k, sink, local, work, ref, &c));
                if (c != it->count[h] || memcmp(ref, it->idx + h * k, sizeof(uint32_t) * c) != 0) {
                    head_bad++;
                    fprintf(stderr, "plan_select differs: item %d head %u k %u\n", i, h, k);
                }
            }
        }
    }
    CHECK(heads == 3 * 3 * 4 && head_bad == 0 && depth_bad == 0);
    /* argument checks of the batch */
    {
        uint8_t dep[32];
        uint32_t idx[4 * 8], cnt[4];
        const double *shift, *sum, *sum_sq;
        fathom_store_sums(st[0], &shift, &sum, &sum_sq);
        fathom_plan_select_item it = {&sc[0].segs, sum, sum_sq, q, G, lengths[0], 48, 8, 0, 0, dep, idx, cnt};
        CHECK_STATUS(fathom_plan_select_parallel(NULL, FATHOM_SCAN_AUTO, &it, 1, 0), FATHOM_ERR_INVALID_ARG);
        it.budget = 0;
        CHECK_STATUS(fathom_plan_select_parallel(pool, FATHOM_SCAN_AUTO, &it, 1, 0), FATHOM_ERR_INVALID_ARG);
        it.budget = 4 * dim + 1;
        CHECK_STATUS(fathom_plan_select_parallel(pool, FATHOM_SCAN_AUTO, &it, 1, 0), FATHOM_ERR_INVALID_ARG);
        it.budget = 48, it.n = lengths[0] + 1;
        CHECK_STATUS(fathom_plan_select_parallel(pool, FATHOM_SCAN_AUTO, &it, 1, 0), FATHOM_ERR_INVALID_ARG);
        it.n = lengths[0], it.sum = NULL;
        CHECK_STATUS(fathom_plan_select_parallel(pool, FATHOM_SCAN_AUTO, &it, 1, 0), FATHOM_ERR_INVALID_ARG);
        /* a plan that fails inside the call (a NaN query): its ranges and
           selections, waiting on it, skip their work and the call returns */
        it.sum = sum;
        float qbad[4 * 32];
        memcpy(qbad, q, sizeof(float) * G * dim);
        qbad[dim + 3] = NAN;
        fathom_plan_select_item two[2] = {it, it};
        for (int first = 0; first < 2; first++) {
            two[0].queries = first ? qbad : q, two[1].queries = first ? q : qbad;
            CHECK_STATUS(fathom_plan_select_parallel(pool, FATHOM_SCAN_AUTO, two, 2, 64),
                         FATHOM_ERR_NONFINITE);
        }
    }
    printf("test_scan: caller-provided segments: %d range scans bit-identical, %d head selections and "
           "%d plans equal to the library's\n", scans, heads, 3 * 3);
    free(work);
    free(a);
    free(b);
    fathom_pool_free(pool);
    for (int i = 0; i < 3; i++) {
        free_segments(&sc[i]);
        fathom_store_free(st[i]);
    }
}

/* Invalid arguments of the segments scan and of fathom_plan_select_parallel:
 * each call fails with FATHOM_ERR_INVALID_ARG, its message names the
 * function and the argument, and the batch writes no depths. */
static int args_rejected;

static void expect_invalid(int status, const char *who, const char *what, const uint8_t *dep,
                           uint32_t dim) {
    CHECK_STATUS(status, FATHOM_ERR_INVALID_ARG);
    const char *msg = fathom_last_error();
    const int named = strstr(msg, who) != NULL && strstr(msg, what) != NULL;
    if (!named) fprintf(stderr, "message \"%s\" does not name %s and %s\n", msg, who, what);
    CHECK(named);
    uint32_t untouched = 0;
    for (uint32_t j = 0; dep && j < dim; j++) untouched += dep[j] == 0xAA;
    CHECK(!dep || untouched == dim);
    args_rejected++;
}

static void test_segments_args(void) {
    const uint32_t dim = 32, G = 4, k = 8;
    const uint64_t len = 64 * 9 + 17;
    fathom_store *st = make_store(dim, 2, len);
    seg_copy sc = copy_segments(st);
    float q[4 * 32], scores[4 * 640];
    for (uint32_t i = 0; i < G * dim; i++) q[i] = rng_key(i % dim);
    uint8_t depths[32];
    for (uint32_t j = 0; j < dim; j++) depths[j] = 2;
    const char *sr = "segments_scan_range";
    /* the segments scan */
    fathom_segments bad = sc.segs;
    expect_invalid(fathom_segments_scan_range(FATHOM_SCAN_AUTO, NULL, depths, q, G, 0, 64, scores,
                                              640, NULL),
                   sr, "segments", NULL, 0);
    bad.views = NULL;
    expect_invalid(fathom_segments_scan_range(FATHOM_SCAN_AUTO, &bad, depths, q, G, 0, 64, scores,
                                              640, NULL),
                   sr, "views", NULL, 0);
    bad = sc.segs, bad.dim = 0;
    expect_invalid(fathom_segments_scan_range(FATHOM_SCAN_AUTO, &bad, depths, q, G, 0, 64, scores,
                                              640, NULL),
                   sr, "dim", NULL, 0);
    bad = sc.segs, bad.segment_blocks = 0;
    expect_invalid(fathom_segments_scan_range(FATHOM_SCAN_AUTO, &bad, depths, q, G, 0, 64, scores,
                                              640, NULL),
                   sr, "segment_blocks", NULL, 0);
    /* 2^32 segments of one block: their indexes would not fit the scan's 32 bits */
    bad = sc.segs, bad.segment_blocks = 1, bad.length = (uint64_t)64 << 32;
    expect_invalid(fathom_segments_scan_range(FATHOM_SCAN_AUTO, &bad, depths, q, G, 0, 64, scores,
                                              640, NULL),
                   sr, "length", NULL, 0);
    /* a view without planes, read by a range that reaches its segment */
    fathom_segment_view views[5];
    memcpy(views, sc.views, sizeof(fathom_segment_view) * 5);
    views[1].planes = NULL;
    bad = sc.segs, bad.views = views;
    CHECK_OK(fathom_segments_scan_range(FATHOM_SCAN_AUTO, &bad, depths, q, G, 0, 128, scores, 640,
                                        NULL)); /* segment 0 only */
    expect_invalid(fathom_segments_scan_range(FATHOM_SCAN_AUTO, &bad, depths, q, G, 0, 256, scores,
                                              640, NULL),
                   sr, "views[1]", NULL, 0);
    expect_invalid(fathom_segments_scan_range(FATHOM_SCAN_AUTO, &sc.segs, depths, q, 0, 0, 64,
                                              scores, 640, NULL),
                   sr, "group", NULL, 0);
    expect_invalid(fathom_segments_scan_range(FATHOM_SCAN_AUTO, &sc.segs, NULL, q, G, 0, 64, scores,
                                              640, NULL),
                   sr, "NULL", NULL, 0);

    /* the plan + scan + select batch */
    fathom_pool *pool = NULL;
    CHECK_OK(fathom_pool_create(&pool, 2));
    if (!pool) return;
    const double *shift, *sum, *sum_sq;
    fathom_store_sums(st, &shift, &sum, &sum_sq);
    uint8_t dep[32];
    uint32_t idx[4 * 8], cnt[4];
    const fathom_plan_select_item good = {&sc.segs, sum, sum_sq, q, G, len, 48, k, 0, 0, dep, idx, cnt};
    fathom_plan_select_item it = good;
    const char *ps = "plan_select";
#define PS_REJECTS(what, range)                                                                    \
    do {                                                                                           \
        memset(dep, 0xAA, sizeof dep);                                                             \
        expect_invalid(fathom_plan_select_parallel(pool, FATHOM_SCAN_AUTO, &it, 1, range), ps,      \
                       what, dep, dim);                                                            \
        it = good;                                                                                 \
        bad = sc.segs;                                                                             \
    } while (0)
    memset(dep, 0xAA, sizeof dep);
    expect_invalid(fathom_plan_select_parallel(NULL, FATHOM_SCAN_AUTO, &it, 1, 0), ps, "pool", dep,
                   dim);
    expect_invalid(fathom_plan_select_parallel(pool, FATHOM_SCAN_AUTO, NULL, 1, 0), ps, "items", dep,
                   dim);
    expect_invalid(fathom_plan_select_parallel(pool, FATHOM_SCAN_AUTO, &it, 0, 0), ps, "count", dep,
                   dim);
    it.segments = NULL;
    PS_REJECTS("segments", 0);
    bad.views = NULL, it.segments = &bad;
    PS_REJECTS("views", 0);
    bad.dim = 0, it.segments = &bad;
    PS_REJECTS("dim is 0", 0);
    bad.segment_blocks = 0, it.segments = &bad;
    PS_REJECTS("segment_blocks", 0);
    bad.segment_blocks = 1, bad.length = (uint64_t)64 << 32, it.segments = &bad;
    PS_REJECTS("length", 0);
    it.sum = NULL;
    PS_REJECTS("sum is NULL", 0);
    it.sum_sq = NULL;
    PS_REJECTS("sum_sq", 0);
    it.queries = NULL;
    PS_REJECTS("queries is NULL", 0);
    it.depths = NULL;
    expect_invalid(fathom_plan_select_parallel(pool, FATHOM_SCAN_AUTO, &it, 1, 0), ps,
                   "depths is NULL", NULL, 0);
    it = good;
    it.idx = NULL;
    PS_REJECTS("idx is NULL", 0);
    it.count = NULL;
    PS_REJECTS("count is NULL", 0);
    it.group = 0;
    PS_REJECTS("group is 0", 0);
    it.k = 0;
    PS_REJECTS("k is 0", 0);
    it.budget = 0;
    PS_REJECTS("budget", 0);
    it.budget = 4 * dim + 1;
    PS_REJECTS("budget", 0);
    it.n = 0;
    PS_REJECTS("n = 0", 0);
    it.n = len + 1;
    PS_REJECTS("n = ", 0);
    /* n above 2^32 in segments that claim to hold it (nothing is read) */
    bad.length = (uint64_t)1 << 33, it.segments = &bad, it.n = ((uint64_t)1 << 32) + 1;
    PS_REJECTS("n = ", 0);
    PS_REJECTS("range_tokens", 100); /* checked before the plan writes depths */
    /* a second item's error: the first item's depths are not written either */
    fathom_plan_select_item two[2] = {good, good};
    uint8_t dep2[32];
    two[1].depths = dep2, two[1].k = 0;
    memset(dep, 0xAA, sizeof dep);
    expect_invalid(fathom_plan_select_parallel(pool, FATHOM_SCAN_AUTO, two, 2, 0), ps, "item 1", dep,
                   dim);
    /* the valid item still runs */
    CHECK_OK(fathom_plan_select_parallel(pool, FATHOM_SCAN_AUTO, &it, 1, 0));
    CHECK(dep[0] <= FATHOM_PLANES && cnt[0] == k);
#undef PS_REJECTS
    /* fathom_scan_select_parallel: an item without store or segments */
    fathom_scan_select_item si = {NULL, depths, q, G, len, k, 0, 0, idx, cnt, NULL};
    expect_invalid(fathom_scan_select_parallel(pool, FATHOM_SCAN_AUTO, &si, 1, 0), "scan_select",
                   "store and segments", NULL, 0);
    CHECK(args_rejected == 32); /* 8 scans, 22 batches, 2 more */
    printf("test_scan: %d invalid argument sets of the segments scan and the plan + select batch "
           "rejected with their names, no depths written\n", args_rejected);
    fathom_pool_free(pool);
    free_segments(&sc);
    fathom_store_free(st);
}

/* ---- the grouped-table mode ---- */

static const struct {
    fathom_scan_kernel kernel;
    const char *name;
} grouped[3] = {{FATHOM_SCAN_GROUPED_PORTABLE, "grouped portable"},
                {FATHOM_SCAN_GROUPED_AVX512, "grouped AVX-512"},
                {FATHOM_SCAN_GROUPED, "grouped (widest)"}};
static int grouped_run[3];
static uint64_t grouped_scores_equal, grouped_scores_total, grouped_scores_bounded, grouped_scores_differ;

/* scan_group_pass on a known pass, and its invariants on random ones. */
static void test_grouped_formation(void) {
    /* depth 1: k 0..4, depth 2: 5..7, depth 3: 8..9, depth 4: 10 */
    const uint32_t first[5] = {0, 5, 8, 10, 11};
    scan_groups g;
    fathom_scan_group_pass(first, &g);
    const uint32_t want_first[7] = {0, 1, 3, 5, 7, 10, 11};
    const uint8_t member[11] = {10, 8, 0, 9, 1, 5, 6, 7, 2, 3, 4};
    const uint8_t bit[11] = {0, 0, 3, 0, 3, 0, 2, 0, 2, 3, 0};
    CHECK(g.count == 6);
    for (uint32_t x = 0; x <= 6; x++) CHECK(g.first[x] == want_first[x]);
    for (uint32_t m = 0; m < 11; m++) CHECK(g.member[m] == member[m] && g.bit[m] == bit[m]);
    for (int trial = 0; trial < 500; trial++) {
        uint32_t f[5] = {0}, left = 1 + rng_below(SCAN_PASS_CHANNELS);
        for (uint32_t t = 1; t <= 4; t++) {
            uint32_t c = t == 4 ? left : rng_below(left + 1);
            f[t] = f[t - 1] + c, left -= c;
        }
        fathom_scan_group_pass(f, &g);
        int seen[SCAN_PASS_CHANNELS] = {0}, ok = 1;
        uint32_t rows = 0;
        for (uint32_t x = 0; x < g.count; x++) {
            uint32_t bits = 0;
            for (uint32_t m = g.first[x]; m < g.first[x + 1]; m++) {
                const uint32_t k = g.member[m], t = g.depth[m];
                ok &= k < f[4] && k >= f[t - 1] && k < f[t] && g.bit[m] == bits;
                seen[k < SCAN_PASS_CHANNELS ? k : 0]++;
                bits += t;
            }
            ok &= bits >= 1 && bits <= SCAN_GROUP_ROWS;
            rows += bits;
        }
        for (uint32_t k = 0; k < f[4]; k++) ok &= seen[k] == 1;
        /* no group is left without a depth-1 channel it could take */
        const uint32_t n1 = f[1], n2 = f[2] - f[1], n3 = f[3] - f[2], n4 = f[4] - f[3];
        const uint32_t pair1 = n3 + (n2 % 2 ? 2 : 0), rest1 = n1 > pair1 ? n1 - pair1 : 0;
        ok &= g.count == n4 + n3 + (n2 + 1) / 2 + (rest1 + 3) / 4;
        ok &= rows == n1 + 2 * n2 + 3 * n3 + 4 * n4 && g.count * SCAN_GROUP_ROWS >= rows;
        CHECK(ok);
    }
}

/* Sum of |q v| over the active channels of head h and token i, in double. */
static double abs_terms(const fathom_store *st, const uint8_t *depths, const float *q,
                        uint32_t dim, uint64_t i) {
    double s = 0;
    for (uint32_t j = 0; j < dim; j++)
        if (depths[j]) s += fabs((double)q[j] * fathom_store_token_value(st, i, j, depths[j]));
    return s;
}

/* The number of groups over all passes and the number of passes. */
static void count_groups(uint32_t dim, const uint8_t *depths, uint32_t *groups, uint32_t *passes) {
    *groups = *passes = 0;
    for (uint32_t j = 0; j < dim;) {
        uint32_t per[5] = {0}, n = 0;
        for (; j < dim && n < SCAN_PASS_CHANNELS; j++)
            if (depths[j]) per[depths[j]]++, n++;
        if (!n) break;
        uint32_t f[5] = {0};
        for (uint32_t t = 1; t <= 4; t++) f[t] = f[t - 1] + per[t];
        scan_groups g;
        fathom_scan_group_pass(f, &g);
        *groups += g.count, (*passes)++;
    }
}

/* gamma_m = m u / (1 - m u), u = 2^-24: the bound on the relative error of
 * a chain of m float roundings. */
static double gamma_m(uint32_t m) { return m * 0x1p-24 / (1 - m * 0x1p-24); }

/* How many of the scores s [group x n] lie farther from the exact sums
 * than `factor` times sum |q v| (computed in double). */
static uint64_t bound_violations(const fathom_store *st, const uint8_t *depths, const float *q,
                                 uint32_t group, uint64_t n, const float *s, double factor) {
    const uint32_t dim = fathom_store_dim(st);
    uint64_t bad = 0;
    for (uint32_t h = 0; h < group; h++)
        for (uint64_t i = 0; i < n; i++) {
            double exact = 0;
            for (uint32_t j = 0; j < dim; j++)
                if (depths[j])
                    exact += (double)q[h * dim + j] * fathom_store_token_value(st, i, j, depths[j]);
            bad += fabs((double)s[h * n + i] - exact) >
                   factor * abs_terms(st, depths, q + h * dim, dim, i);
        }
    return bad;
}

/* Every grouped kernel equals the grouped reference bit for bit (full scans
 * and a sub-range with a row stride); the grouped and the exact scores lie
 * within their derived bounds of the exact sums: a chain of m roundings
 * (each a fused multiply-add or an add) is within gamma_m sum |q v|. Grouped:
 * at most 4 table multiply-adds, one add per group, one per pass: gamma of
 * 4 + groups + passes. Exact: one multiply-add per active channel and one
 * add per pass: gamma of active + passes. */
static void check_grouped(fathom_store *st, const uint8_t *depths, const float *q, uint32_t group,
                          uint64_t n) {
    const uint32_t dim = fathom_store_dim(st);
    float *ref = malloc(sizeof(float) * group * n), *b = malloc(sizeof(float) * group * n);
    float *exact = malloc(sizeof(float) * group * n);
    uint64_t br = 1, bb = 2;
    CHECK_OK(fathom_store_scan_with(FATHOM_SCAN_GROUPED_REFERENCE, st, depths, q, group, n, ref, &br));
    for (int k = 0; k < 3; k++) {
        if (!fathom_scan_kernel_available(grouped[k].kernel)) continue;
        grouped_run[k]++;
        for (uint64_t i = 0; i < group * n; i++) b[i] = NAN; /* every score is written */
        CHECK_OK(fathom_store_scan_with(grouped[k].kernel, st, depths, q, group, n, b, &bb));
        CHECK(br == bb);
        const int differ = memcmp(ref, b, sizeof(float) * group * n) != 0;
        if (differ)
            fprintf(stderr, "%s: scores differ from the grouped reference (dim %u, group %u, n %llu)\n",
                    grouped[k].name, dim, group, (unsigned long long)n);
        CHECK(!differ);
        grouped_scores_equal += differ ? 0 : group * n;
        if (n > 64) { /* blocks [1, ...) into rows of stride n + 3 */
            const uint64_t count = n - 64, ld = n + 3;
            float *part = malloc(sizeof(float) * group * ld);
            CHECK_OK(fathom_store_scan_range(grouped[k].kernel, st, depths, q, group, 64, count,
                                             part, ld, NULL));
            int bad = 0;
            for (uint32_t h = 0; h < group; h++)
                bad += memcmp(part + h * ld, ref + h * n + 64, sizeof(float) * count) != 0;
            CHECK(bad == 0);
            free(part);
        }
    }
    uint32_t active = 0, groups, passes;
    for (uint32_t j = 0; j < dim; j++) active += depths[j] != 0;
    count_groups(dim, depths, &groups, &passes);
    const double bound_g = gamma_m(4 + groups + passes), bound_e = gamma_m(active + passes);
    CHECK_OK(fathom_store_scan_with(FATHOM_SCAN_AUTO, st, depths, q, group, n, exact, NULL));
    CHECK(bound_violations(st, depths, q, group, n, ref, bound_g) == 0);
    CHECK(bound_violations(st, depths, q, group, n, exact, bound_e) == 0);
    for (uint32_t h = 0; h < group; h++)
        for (uint64_t i = 0; i < n; i++) {
            const double d = fabs((double)ref[h * n + i] - exact[h * n + i]);
            const int ok = d <= (bound_g + bound_e) * abs_terms(st, depths, q + h * dim, dim, i);
            CHECK(ok);
            grouped_scores_bounded += ok;
            grouped_scores_total++;
            grouped_scores_differ += ref[h * n + i] != exact[h * n + i];
        }
    free(ref);
    free(b);
    free(exact);
}

static void test_grouped_scores(void) {
    const uint32_t dims[4] = {40, 64, 128, 300}, groups[4] = {1, 3, 4, 7};
    for (int di = 0; di < 4; di++) {
        const uint32_t dim = dims[di];
        const uint64_t len = 64 * 5 + 23;
        fathom_store *st = make_store(dim, di == 3 ? 3 : 0, len); /* dim 300: tiles cut by segments */
        float *q = malloc(sizeof(float) * 7 * dim);
        for (uint32_t i = 0; i < 7 * dim; i++) q[i] = rng_key(i) * 10.0f;
        uint8_t *depths = malloc(dim);
        for (int pattern = 0; pattern < 6; pattern++) {
            for (uint32_t j = 0; j < dim; j++)
                depths[j] = pattern == 0   ? 4                        /* all-4 */
                            : pattern == 1 ? (uint8_t)(j % 3 ? 0 : 1) /* depth 0 and 1 only */
                            : pattern == 2 ? (uint8_t)((j * 7 + 3) % 5)
                                           : (uint8_t)rng_below(5);
            if (pattern == 5) memset(depths, 0, dim); /* no active channel: every score 0 */
            const uint64_t ns[3] = {len, 64 * 2 + 16, 9};
            for (int gi = 0; gi < 4; gi++)
                for (int ni = 0; ni < 3; ni++) check_grouped(st, depths, q, groups[gi], ns[ni]);
        }
        free(depths);
        free(q);
        fathom_store_free(st);
    }
    CHECK(grouped_scores_differ > 0); /* the orders differ: the bound is not vacuous */
}

/* The checks above can fail: a grouped score off by one unit in the last
 * place fails the bit-for-bit comparison, and a wrong table (group 0's
 * first member reading its code with the lowest plane's bit flipped)
 * fails the bound. */
static void test_grouped_checks_fail(void) {
    const uint32_t dim = 64, group = 2;
    const uint64_t n = 64 * 3 + 5;
    fathom_store *st = make_store(dim, 0, n);
    float q[2 * 64];
    for (uint32_t i = 0; i < group * dim; i++) q[i] = rng_key(i) * 10.0f;
    uint8_t depths[64];
    for (uint32_t j = 0; j < dim; j++) depths[j] = (uint8_t)(j % 5);
    float *ref = malloc(sizeof(float) * group * n), *wrong = malloc(sizeof(float) * group * n);
    CHECK_OK(fathom_store_scan_with(FATHOM_SCAN_GROUPED_REFERENCE, st, depths, q, group, n, ref, NULL));
    memcpy(wrong, ref, sizeof(float) * group * n);
    wrong[7] = nextafterf(wrong[7], INFINITY);
    CHECK(memcmp(wrong, ref, sizeof(float) * group * n) != 0);
    /* group 0 is the first depth-4 channel alone (scan_group_pass): j = 4 */
    const uint32_t j = 4;
    for (uint32_t h = 0; h < group; h++)
        for (uint64_t i = 0; i < n; i++) {
            uint64_t w;
            uint16_t a16;
            CHECK_OK(fathom_store_word(st, j, 3, i / 64, &w, &a16)); /* the last plane: code bit 0 */
            (void)a16;
            /* a 2^(1-t) at t = 4, the scale a being twice |depth-1 value| */
            const double step = 0.25 * fabsf(fathom_store_token_value(st, i, j, 1));
            const double flip = ((w >> (i % 64)) & 1) ? -step : step;
            wrong[h * n + i] = (float)((double)ref[h * n + i] + (double)q[h * dim + j] * flip);
        }
    uint32_t groups, passes;
    count_groups(dim, depths, &groups, &passes);
    const uint64_t bad = bound_violations(st, depths, q, group, n, wrong, gamma_m(4 + groups + passes));
    CHECK(bad > group * n / 2);
    CHECK(bound_violations(st, depths, q, group, n, ref, gamma_m(4 + groups + passes)) == 0);
    printf("test_scan: a wrong grouped table fails the bound at %llu of %llu scores\n",
           (unsigned long long)bad, (unsigned long long)(group * n));
    free(ref);
    free(wrong);
    fathom_store_free(st);
}

/* The grouped kernels through the pool driver and the fused scan + select:
 * the scores of one scan, and the selections of fathom_select on them. */
static void test_grouped_parallel(void) {
    const uint32_t dim = 96, group = 5;
    const uint64_t n = 64 * 40 + 17;
    fathom_store *st = make_store(dim, 8, n);
    float *q = malloc(sizeof(float) * group * dim);
    for (uint32_t i = 0; i < group * dim; i++) q[i] = rng_key(i);
    uint8_t depths[96];
    for (uint32_t j = 0; j < dim; j++) depths[j] = (uint8_t)rng_below(5);
    float *ref = malloc(sizeof(float) * group * n), *s = malloc(sizeof(float) * group * n);
    CHECK_OK(fathom_store_scan_with(FATHOM_SCAN_GROUPED_REFERENCE, st, depths, q, group, n, ref, NULL));
    fathom_pool *pool = NULL;
    CHECK_OK(fathom_pool_create(&pool, 3));
    const uint32_t K = 40;
    uint32_t idx[5 * 40], cnt[5], ridx[40], rcnt;
    uint64_t *work = malloc(fathom_select_work_size(n));
    for (int k = 0; pool && k < 3; k++) {
        if (!fathom_scan_kernel_available(grouped[k].kernel)) continue;
        for (uint64_t i = 0; i < group * n; i++) s[i] = NAN;
        fathom_scan_item item = {st, depths, q, group, n, s};
        CHECK_OK(fathom_scan_parallel(pool, grouped[k].kernel, &item, 1, 256));
        CHECK(memcmp(s, ref, sizeof(float) * group * n) == 0);
        fathom_scan_select_item si = {st, depths, q, group, n, K, 4, 8, idx, cnt, NULL};
        CHECK_OK(fathom_scan_select_parallel(pool, grouped[k].kernel, &si, 1, 256));
        for (uint32_t h = 0; h < group; h++) {
            CHECK_OK(fathom_select(ref + h * n, n, K, 4, 8, work, ridx, &rcnt));
            CHECK(cnt[h] == rcnt && memcmp(idx + h * K, ridx, rcnt * sizeof(uint32_t)) == 0);
        }
    }
    CHECK_STATUS(fathom_store_scan_range(FATHOM_SCAN_GROUPED_REFERENCE, st, depths, q, 1, 0, 64, s, 64,
                                         NULL),
                 FATHOM_ERR_INVALID_ARG); /* the reference scans whole stores only */
    fathom_pool_free(pool);
    free(work);
    free(q);
    free(ref);
    free(s);
    fathom_store_free(st);
}

/* ---- the int8 ("VNNI") mode ---- */

/* The int8 kernels (family 0) and the int16 ones (family 1): kernels
 * [3 f, 3 f + 3) against the reference of family f. */
static const struct {
    fathom_scan_kernel kernel;
    const char *name;
} int8k[6] = {{FATHOM_SCAN_INT8_PORTABLE, "int8 portable"},
              {FATHOM_SCAN_INT8_AVX512, "int8 AVX-512 VNNI"},
              {FATHOM_SCAN_INT8, "int8 (widest)"},
              {FATHOM_SCAN_INT16_PORTABLE, "int16 portable"},
              {FATHOM_SCAN_INT16_AVX512, "int16 AVX-512 VNNI"},
              {FATHOM_SCAN_INT16, "int16 (widest)"}};
static const fathom_scan_kernel int8_ref[2] = {FATHOM_SCAN_INT8_REFERENCE, FATHOM_SCAN_INT16_REFERENCE};
static const int32_t int8_levels[2] = {SCAN_INT8_LEVELS, SCAN_INT16_LEVELS};
static int int8_run[6];
static uint64_t int8_scores_total[2], int8_scores_bounded[2], int8_scores_differ[2];
static double int8_worst_rel[2]; /* the largest error over its bound */

/* The int8 definition's bound (scan_internal.h) on |int8 score - exact sum|
 * of head h and token i: per pass, half a quantization step m / L per
 * channel times |d_k| / 16 (with slack for the float roundings of W and r),
 * plus 2^-20 of sum |q v| and of the passes' terms for the roundings of
 * W, s, s * T and the pass sums. */
static double int8_bound(const fathom_store *st, const uint8_t *depths, const float *q,
                         uint32_t dim, uint64_t i, int32_t levels) {
    uint32_t count, first[5], row[5], channels[SCAN_PASS_CHANNELS];
    double bound = 0, terms = 0;
    const uint64_t block = i / 64;
    for (uint32_t j = 0; j < dim;) {
        j = fathom_scan_next_pass(dim, depths, j, &count, first, row, channels);
        if (!count) break;
        float m = 0;
        double sd = 0;
        for (uint32_t k = 0; k < count; k++) {
            const uint32_t c = channels[k];
            uint64_t w;
            uint16_t a16;
            CHECK_OK(fathom_store_word(st, c, 0, block, &w, &a16));
            const float a = fathom_f16_to_f32(a16), W = fabsf(q[c] * a);
            if (W > m) m = W;
            const float v = fathom_store_token_value(st, i, c, depths[c]);
            sd += a > 0 ? fabs(16.0 * (double)v / (double)a) : 0.0;
            terms += fabs((double)q[c] * v);
        }
        bound += (double)m / (2.0 * levels) * (1 + 0x1p-14) * sd / 16.0 +
                 0x1p-20 * (double)m / levels * sd;
    }
    return bound + 0x1p-20 * 2 * terms;
}

/* Every int8 kernel equals the int8 reference bit for bit (full scans and a
 * sub-range with a row stride); the int8 scores lie within int8_bound of
 * the exact sums (in double). */
static void check_int8(fathom_store *st, const uint8_t *depths, const float *q, uint32_t group,
                       uint64_t n, int fam) {
    const uint32_t dim = fathom_store_dim(st);
    float *ref = malloc(sizeof(float) * group * n), *b = malloc(sizeof(float) * group * n);
    uint64_t br = 1, bb = 2;
    CHECK_OK(fathom_store_scan_with(int8_ref[fam], st, depths, q, group, n, ref, &br));
    for (int k = 3 * fam; k < 3 * fam + 3; k++) {
        if (!fathom_scan_kernel_available(int8k[k].kernel)) continue;
        int8_run[k]++;
        for (uint64_t i = 0; i < group * n; i++) b[i] = NAN; /* every score is written */
        CHECK_OK(fathom_store_scan_with(int8k[k].kernel, st, depths, q, group, n, b, &bb));
        CHECK(br == bb);
        const int differ = memcmp(ref, b, sizeof(float) * group * n) != 0;
        if (differ)
            fprintf(stderr, "%s: scores differ from the int8 reference (dim %u, group %u, n %llu)\n",
                    int8k[k].name, dim, group, (unsigned long long)n);
        CHECK(!differ);
        if (n > 64) { /* blocks [1, ...) into rows of stride n + 3 */
            const uint64_t count = n - 64, ld = n + 3;
            float *part = malloc(sizeof(float) * group * ld);
            CHECK_OK(fathom_store_scan_range(int8k[k].kernel, st, depths, q, group, 64, count,
                                             part, ld, NULL));
            int bad = 0;
            for (uint32_t h = 0; h < group; h++)
                bad += memcmp(part + h * ld, ref + h * n + 64, sizeof(float) * count) != 0;
            CHECK(bad == 0);
            free(part);
        }
    }
    for (uint32_t h = 0; h < group; h++)
        for (uint64_t i = 0; i < n; i++) {
            double exact = 0;
            for (uint32_t j = 0; j < dim; j++)
                if (depths[j])
                    exact += (double)q[h * dim + j] * fathom_store_token_value(st, i, j, depths[j]);
            const double d = fabs((double)ref[h * n + i] - exact);
            const double bound = int8_bound(st, depths, q + h * dim, dim, i, int8_levels[fam]);
            const int ok = d <= bound;
            if (!ok)
                fprintf(stderr, "int8: score %g, exact %g, bound %g (dim %u, h %u, i %llu)\n",
                        ref[h * n + i], exact, bound, dim, h, (unsigned long long)i);
            CHECK(ok);
            if (bound > 0 && d / bound > int8_worst_rel[fam]) int8_worst_rel[fam] = d / bound;
            int8_scores_bounded[fam] += ok;
            int8_scores_total[fam]++;
            int8_scores_differ[fam] += (float)exact != ref[h * n + i];
        }
    free(ref);
    free(b);
}

static void test_int8_scores(void) {
    const uint32_t dims[4] = {40, 64, 128, 300}, groups[4] = {1, 3, 4, 7};
    for (int di = 0; di < 4; di++) {
        const uint32_t dim = dims[di];
        const uint64_t len = 64 * 5 + 23;
        fathom_store *st = make_store(dim, di == 3 ? 3 : 0, len); /* dim 300: tiles cut by segments */
        float *q = malloc(sizeof(float) * 7 * dim);
        for (uint32_t i = 0; i < 7 * dim; i++) q[i] = rng_key(i) * 10.0f;
        uint8_t *depths = malloc(dim);
        for (int pattern = 0; pattern < 8; pattern++) {
            for (uint32_t j = 0; j < dim; j++)
                depths[j] = pattern == 0   ? 4                        /* all-4 */
                            : pattern == 1 ? (uint8_t)(j % 3 ? 0 : 1) /* depth 0 and 1 only */
                            : pattern == 2 ? (uint8_t)((j * 7 + 3) % 5)
                            : pattern == 6 ? (uint8_t)(1 + j % 2) /* 1 and 2: every quad packed */
                            : pattern == 7 ? (uint8_t)(j % 11 ? 1 + j % 2 : 3 + j % 2) /* mostly <= 2 */
                                           : (uint8_t)rng_below(5);
            if (pattern == 5) memset(depths, 0, dim); /* no active channel: every score 0 */
            const uint64_t ns[3] = {len, 64 * 2 + 16, 9};
            for (int gi = 0; gi < 4; gi++)
                for (int ni = 0; ni < 3; ni++)
                    for (int fam = 0; fam < 2; fam++) check_int8(st, depths, q, groups[gi], ns[ni], fam);
        }
        free(depths);
        free(q);
        fathom_store_free(st);
    }
    CHECK(int8_scores_differ[0] > 0 && int8_scores_differ[1] > 0); /* the bound is used */
}

/* Queries that make the weights degenerate: all zero (every score +0), tiny
 * (below 2^-100 after the scale: +0), one infinite or NaN value (that
 * pass's blocks NaN): every int8 kernel as the reference. */
static void test_int8_special(void) {
    const uint32_t dim = 80, group = 4;
    const uint64_t n = 64 * 3 + 11;
    fathom_store *st = make_store(dim, 0, n);
    float q[4 * 80];
    uint8_t depths[80];
    for (uint32_t j = 0; j < dim; j++) depths[j] = (uint8_t)(1 + j % 4);
    for (uint32_t i = 0; i < group * dim; i++) q[i] = rng_key(i);
    for (uint32_t j = 0; j < dim; j++) q[j] = 0.0f;                /* head 0: zero */
    for (uint32_t j = 0; j < dim; j++) q[dim + j] = 1e-38f * (j % 2 ? 1 : -1); /* head 1: tiny */
    q[2 * dim + 70] = INFINITY;                                     /* head 2: second pass */
    q[3 * dim + 5] = NAN;                                           /* head 3: first pass */
    float *ref = malloc(sizeof(float) * group * n), *b = malloc(sizeof(float) * group * n);
    for (int fam = 0; fam < 2; fam++) {
        CHECK_OK(fathom_store_scan_with(int8_ref[fam], st, depths, q, group, n, ref, NULL));
        for (uint64_t i = 0; i < n; i++) {
            CHECK(ref[i] == 0.0f && !signbit(ref[i]));
            CHECK(ref[n + i] == 0.0f);
            CHECK(isnan(ref[2 * n + i]) && isnan(ref[3 * n + i]));
        }
        for (int k = 3 * fam; k < 3 * fam + 3; k++) {
            if (!fathom_scan_kernel_available(int8k[k].kernel)) continue;
            CHECK_OK(fathom_store_scan_with(int8k[k].kernel, st, depths, q, group, n, b, NULL));
            int bad = 0;
            for (uint64_t i = 0; i < group * n; i++)
                bad += isnan(ref[i]) ? !isnan(b[i]) : memcmp(&ref[i], &b[i], sizeof(float)) != 0;
            CHECK(bad == 0);
        }
    }
    free(ref);
    free(b);
    fathom_store_free(st);
}

/* The bit-for-bit check can fail: an int8 score one unit in the last place
 * off differs. */
static void test_int8_checks_fail(void) {
    const uint32_t dim = 64, group = 2;
    const uint64_t n = 64 * 3 + 5;
    fathom_store *st = make_store(dim, 0, n);
    float q[2 * 64];
    for (uint32_t i = 0; i < group * dim; i++) q[i] = rng_key(i) * 10.0f;
    uint8_t depths[64];
    for (uint32_t j = 0; j < dim; j++) depths[j] = (uint8_t)(j % 5);
    float *ref = malloc(sizeof(float) * group * n), *b = malloc(sizeof(float) * group * n);
    for (int fam = 0; fam < 2; fam++) {
        CHECK_OK(fathom_store_scan_with(int8_ref[fam], st, depths, q, group, n, ref, NULL));
        CHECK_OK(fathom_store_scan_with(int8k[3 * fam + 2].kernel, st, depths, q, group, n, b, NULL));
        CHECK(memcmp(b, ref, sizeof(float) * group * n) == 0);
        b[7] = nextafterf(b[7], INFINITY);
        CHECK(memcmp(b, ref, sizeof(float) * group * n) != 0);
    }
    free(ref);
    free(b);
    fathom_store_free(st);
}

/* The int8 kernels through the pool driver and the fused scan + select:
 * the scores of one scan, and the selections of fathom_select on them. */
static void test_int8_parallel(void) {
    const uint32_t dim = 96, group = 5;
    const uint64_t n = 64 * 40 + 17;
    fathom_store *st = make_store(dim, 8, n);
    float *q = malloc(sizeof(float) * group * dim);
    for (uint32_t i = 0; i < group * dim; i++) q[i] = rng_key(i);
    uint8_t depths[96];
    for (uint32_t j = 0; j < dim; j++) depths[j] = (uint8_t)rng_below(5);
    float *ref = malloc(sizeof(float) * 2 * group * n), *s = malloc(sizeof(float) * group * n);
    CHECK_OK(fathom_store_scan_with(FATHOM_SCAN_INT8_REFERENCE, st, depths, q, group, n, ref, NULL));
    CHECK_OK(fathom_store_scan_with(FATHOM_SCAN_INT16_REFERENCE, st, depths, q, group, n, ref + group * n,
                                    NULL));
    fathom_pool *pool = NULL;
    CHECK_OK(fathom_pool_create(&pool, 3));
    const uint32_t K = 40;
    uint32_t idx[5 * 40], cnt[5], ridx[40], rcnt;
    uint64_t *work = malloc(fathom_select_work_size(n));
    for (int k = 0; pool && k < 6; k++) {
        if (!fathom_scan_kernel_available(int8k[k].kernel)) continue;
        const float *want = ref + (k / 3) * group * n;
        for (uint64_t i = 0; i < group * n; i++) s[i] = NAN;
        fathom_scan_item item = {st, depths, q, group, n, s};
        CHECK_OK(fathom_scan_parallel(pool, int8k[k].kernel, &item, 1, 256));
        CHECK(memcmp(s, want, sizeof(float) * group * n) == 0);
        fathom_scan_select_item si = {st, depths, q, group, n, K, 4, 8, idx, cnt, NULL};
        CHECK_OK(fathom_scan_select_parallel(pool, int8k[k].kernel, &si, 1, 256));
        for (uint32_t h = 0; h < group; h++) {
            CHECK_OK(fathom_select(want + h * n, n, K, 4, 8, work, ridx, &rcnt));
            CHECK(cnt[h] == rcnt && memcmp(idx + h * K, ridx, rcnt * sizeof(uint32_t)) == 0);
        }
    }
    CHECK_STATUS(fathom_store_scan_range(FATHOM_SCAN_INT8_REFERENCE, st, depths, q, 1, 0, 64, s, 64,
                                         NULL),
                 FATHOM_ERR_INVALID_ARG); /* the reference scans whole stores only */
    fathom_pool_free(pool);
    free(work);
    free(q);
    free(ref);
    free(s);
    fathom_store_free(st);
}

int main(void) {
    test_cpu_features();
    test_tiled_identical();
    test_extreme_scales();
    test_model_shapes();
    test_ranges();
    test_range_args();
    test_parallel();
    test_parallel_stream();
    test_scan_select();
    test_filters();
    for (int k = 0; k < 2; k++)
        if (filters_run[k])
            printf("test_scan: %s candidate filter equals the portable one (%d arrays)\n",
                   k ? "AVX-512" : "AVX2", filters_run[k]);
        else
            printf("test_scan: %s candidate filter skipped: not on this CPU\n", k ? "AVX-512" : "AVX2");
    test_segments();
    test_segments_args();
    test_grouped_formation();
    test_grouped_scores();
    test_grouped_checks_fail();
    test_grouped_parallel();
    CHECK(grouped_run[0] > 0);
    for (int k = 0; k < 3; k++)
        if (grouped_run[k])
            printf("test_scan: %s kernel equals the grouped reference bit for bit (%d scans)\n",
                   grouped[k].name, grouped_run[k]);
        else
            printf("test_scan: %s kernel skipped: not on this CPU\n", grouped[k].name);
    printf("test_scan: grouped scores within the derived bound of the exact ones: %llu of %llu "
           "(%llu of them differ)\n", (unsigned long long)grouped_scores_bounded,
           (unsigned long long)grouped_scores_total, (unsigned long long)grouped_scores_differ);
    test_int8_scores();
    test_int8_special();
    test_int8_checks_fail();
    test_int8_parallel();
    CHECK(int8_run[0] > 0 && int8_run[3] > 0);
    for (int k = 0; k < 6; k++)
        if (int8_run[k])
            printf("test_scan: %s kernel equals the %s reference bit for bit (%d scans)\n",
                   int8k[k].name, k < 3 ? "int8" : "int16", int8_run[k]);
        else
            printf("test_scan: %s kernel skipped: not on this CPU\n", int8k[k].name);
    for (int fam = 0; fam < 2; fam++)
        printf("test_scan: %s scores within the derived bound of the exact sums: %llu of %llu "
               "(%llu differ from the exact float; worst error / bound %.3f)\n",
               fam ? "int16" : "int8", (unsigned long long)int8_scores_bounded[fam],
               (unsigned long long)int8_scores_total[fam], (unsigned long long)int8_scores_differ[fam],
               int8_worst_rel[fam]);
    CHECK(pairs_run[0] > 0); /* the portable pair runs everywhere */
    for (int k = 0; k < 3; k++)
        if (pairs_run[k])
            printf("test_scan: tiled %s kernel checked (%d comparisons)\n", pairs[k].name,
                   pairs_run[k]);
        else
            printf("test_scan: tiled %s kernel skipped: no %s on this CPU\n", pairs[k].name,
                   pairs[k].name);
    if (pairs_run[1] && pairs_run[2]) {
        CHECK(fma_pairs_compared > 0);
        printf("test_scan: tiled AVX2 and AVX-512 scores equal bit for bit (%llu scores)\n",
               (unsigned long long)fma_pairs_compared);
    } else
        printf("test_scan: tiled AVX2 against AVX-512 skipped: this CPU lacks one of them\n");
    return check_summary("test_scan");
}

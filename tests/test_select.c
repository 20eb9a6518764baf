/* select: against a full-sort reference on random scores with ties, NaN and
 * signed zeros; the causal edge cases of the protocol (§2); union sizes
 * against a mark array; every bad argument. */
#include "check.h"
#include "fathom.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 12345;
static uint64_t rng_next(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Reference ranking on the floats themselves: NaN last, higher score first
 * (-0 == +0 as floats compare), lower position first on a tie. */
static const float *ref_scores;
static int ref_compare(const void *a, const void *b) {
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    float x = ref_scores[i], y = ref_scores[j];
    int xn = isnan(x), yn = isnan(y);
    if (xn != yn) return xn ? 1 : -1;
    if (!xn && x != y) return x > y ? -1 : 1;
    return i < j ? -1 : 1;
}

/* Full-sort reference of the protocol; returns the count, out ascending. */
static uint32_t ref_select(const float *scores, uint32_t n, uint32_t k, uint32_t sink,
                           uint32_t local, uint32_t *out) {
    char *chosen = calloc(n, 1);
    uint32_t *cand = malloc(n * sizeof *cand);
    uint32_t forced = 0, m = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (n <= k || i < sink || i + local >= n) {
            chosen[i] = 1;
            forced++;
        } else {
            cand[m++] = i;
        }
    }
    if (forced > k) { /* truncate: sink first, then the most recent */
        memset(chosen, 0, n);
        uint32_t taken = 0;
        for (uint32_t i = 0; i < n && i < sink && taken < k; i++, taken++) chosen[i] = 1;
        for (uint32_t i = n; i-- > 0 && taken < k;)
            if (!chosen[i]) chosen[i] = 1, taken++;
    } else {
        ref_scores = scores;
        qsort(cand, m, sizeof *cand, ref_compare);
        for (uint32_t i = 0; i < k - forced && i < m; i++) chosen[cand[i]] = 1;
    }
    uint32_t c = 0;
    for (uint32_t i = 0; i < n; i++)
        if (chosen[i]) out[c++] = i;
    free(chosen);
    free(cand);
    return c;
}

/* Run fathom_select with buffers of exactly the documented sizes (so ASan
 * catches any overrun) and compare with the reference. */
static int select_matches(const float *scores, uint32_t n, uint32_t k, uint32_t sink,
                          uint32_t local) {
    uint32_t cap = k < n ? k : n;
    uint64_t *work = malloc(fathom_select_work_size(n));
    uint32_t *got = malloc(cap * sizeof *got), *want = malloc(n * sizeof *want);
    uint32_t count = 0;
    int ok = fathom_select(scores, n, k, sink, local, work, got, &count) == FATHOM_OK;
    uint32_t want_count = ref_select(scores, n, k, sink, local, want);
    ok = ok && count == want_count && count == cap && !memcmp(got, want, count * sizeof *got);
    free(work);
    free(got);
    free(want);
    return ok;
}

static float random_score(int mode) {
    uint64_t r = rng_next();
    switch (mode) {
    case 0: return (float)((double)(r >> 11) / 9007199254740992.0 * 2 - 1); /* distinct */
    case 1: return (float)(r % 5) - 2.0f;                                   /* many ties */
    default: {                                                              /* specials */
        switch (r % 8) {
        case 0: return NAN;
        case 1: return -0.0f;
        case 2: return 0.0f;
        case 3: return -INFINITY;
        case 4: return INFINITY;
        default: return (float)((r >> 8) % 7) - 3.0f;
        }
    }
    }
}

static void test_random_against_reference(void) {
    int bad = 0, runs = 0;
    float scores[400];
    for (int it = 0; it < 3000; it++) {
        uint32_t n = 1 + (uint32_t)(rng_next() % 400);
        uint32_t k = 1 + (uint32_t)(rng_next() % 120);
        uint32_t sink = (uint32_t)(rng_next() % 7), local = (uint32_t)(rng_next() % 41);
        int mode = (int)(rng_next() % 3);
        for (uint32_t i = 0; i < n; i++) scores[i] = random_score(mode);
        bad += !select_matches(scores, n, k, sink, local);
        runs++;
    }
    CHECK(bad == 0);
    CHECK(runs == 3000);
}

static void test_large_and_adversarial(void) {
    enum { N = 100000 };
    float *s = malloc(N * sizeof *s);
    const uint32_t ks[3] = {512, 37, 40000};
    for (int pattern = 0; pattern < 5; pattern++) {
        for (uint32_t i = 0; i < N; i++) {
            switch (pattern) {
            case 0: s[i] = random_score(0); break;
            case 1: s[i] = (float)i; break;             /* ascending: best at the end */
            case 2: s[i] = (float)(N - i); break;       /* descending */
            case 3: s[i] = 1.0f; break;                 /* all tied: lowest positions win */
            default: s[i] = (float)(i < N / 2 ? i : N - i); /* organ pipe */
            }
        }
        for (int j = 0; j < 3; j++) CHECK(select_matches(s, N, ks[j], 4, 32));
    }
    /* All tied: exactly the lowest middle positions 4..(k-32-1) are chosen. */
    for (uint32_t i = 0; i < N; i++) s[i] = 1.0f;
    uint64_t *work = malloc(fathom_select_work_size(N));
    uint32_t idx[64], count;
    CHECK_OK(fathom_select(s, N, 64, 4, 32, work, idx, &count));
    CHECK(count == 64 && idx[0] == 0 && idx[31] == 31 && idx[32] == N - 32 && idx[63] == N - 1);
    /* NaN ranks below -inf. */
    for (uint32_t i = 0; i < N; i++) s[i] = NAN;
    s[500] = -INFINITY;
    CHECK_OK(fathom_select(s, N, 37, 4, 32, work, idx, &count));
    CHECK(count == 37 && idx[4] == 500);
    free(work);
    free(s);
}

static void test_edge_cases(void) {
    float s[100];
    uint64_t work[100];
    uint32_t idx[100], count = 0;
    for (int i = 0; i < 100; i++) s[i] = (float)((i * 37) % 100);

    /* n < 36 and n <= k: everything, whatever sink/local say. */
    CHECK_OK(fathom_select(s, 20, 64, 4, 32, work, idx, &count));
    CHECK(count == 20 && idx[0] == 0 && idx[19] == 19);
    CHECK_OK(fathom_select(s, 64, 64, 4, 32, work, idx, &count));
    CHECK(count == 64 && idx[63] == 63);
    CHECK_OK(fathom_select(s, 1, 1, 0, 0, work, idx, &count));
    CHECK(count == 1 && idx[0] == 0);

    /* n = k + 1 with k = 36: sink + local fill k exactly, one position left out. */
    CHECK_OK(fathom_select(s, 37, 36, 4, 32, work, idx, &count));
    CHECK(count == 36 && idx[3] == 3 && idx[4] == 5 && idx[35] == 36);

    /* k < sink + local (k = 10): the sink, then the 6 most recent. */
    CHECK_OK(fathom_select(s, 100, 10, 4, 32, work, idx, &count));
    CHECK(count == 10 && idx[3] == 3 && idx[4] == 94 && idx[9] == 99);
    /* k < sink: the first k positions. */
    CHECK_OK(fathom_select(s, 100, 3, 4, 32, work, idx, &count));
    CHECK(count == 3 && idx[0] == 0 && idx[2] == 2);

    /* Sink and local overlap (n = 30 < 36) with k = 20 < n: sink + 16 most recent. */
    CHECK_OK(fathom_select(s, 30, 20, 4, 32, work, idx, &count));
    CHECK(count == 20 && idx[3] == 3 && idx[4] == 14 && idx[19] == 29);

    /* No sink, no local: pure top-k. s[i] = 37i mod 100, a permutation of
     * 0..99: the top 3 are the positions holding 99, 98, 97. */
    CHECK_OK(fathom_select(s, 100, 3, 0, 0, work, idx, &count));
    CHECK(count == 3);
    for (uint32_t i = 0; i < count; i++) CHECK(s[idx[i]] >= 97.0f);
    CHECK(idx[0] < idx[1] && idx[1] < idx[2]);

    /* Middle of one candidate left after sink and local. */
    CHECK(select_matches(s, 37, 36, 4, 32) && select_matches(s, 38, 37, 4, 32));
    CHECK(select_matches(s, 40, 37, 4, 32));
}

static void test_union(void) {
    const uint32_t a[4] = {1, 5, 9, 12}, b[3] = {0, 5, 12}, c[2] = {2, 9};
    const uint32_t *sets[3] = {a, b, c};
    const uint32_t counts[3] = {4, 3, 2};
    uint32_t u = 0;
    CHECK_OK(fathom_union_size(3, sets, counts, &u));
    CHECK(u == 6); /* 0 1 2 5 9 12 */
    CHECK_OK(fathom_union_size(1, sets, counts, &u));
    CHECK(u == 4);
    CHECK_OK(fathom_union_size(0, NULL, NULL, &u));
    CHECK(u == 0);
    const uint32_t *with_empty[2] = {a, NULL};
    const uint32_t counts_empty[2] = {4, 0};
    CHECK_OK(fathom_union_size(2, with_empty, counts_empty, &u));
    CHECK(u == 4);

    /* Random groups of selections against a mark array. */
    int bad = 0;
    static uint32_t lists[8][200];
    for (int it = 0; it < 300; it++) {
        uint32_t n_sets = 1 + (uint32_t)(rng_next() % 8), cnt[8];
        const uint32_t *ptr[8];
        char mark[1000] = {0};
        uint32_t want = 0;
        for (uint32_t s = 0; s < n_sets; s++) {
            cnt[s] = 0;
            uint32_t range = 50 + (uint32_t)(rng_next() % 950);
            for (uint32_t x = 0; x < range && cnt[s] < 200; x++)
                if (rng_next() % 5 == 0) lists[s][cnt[s]++] = x;
            for (uint32_t i = 0; i < cnt[s]; i++)
                if (!mark[lists[s][i]]) mark[lists[s][i]] = 1, want++;
            ptr[s] = lists[s];
        }
        CHECK_OK(fathom_union_size(n_sets, ptr, cnt, &u));
        bad += u != want;
    }
    CHECK(bad == 0);

    const uint32_t unsorted[3] = {3, 1, 2}, dup[3] = {1, 1, 2};
    const uint32_t *bad_sets[1] = {unsorted}, *dup_sets[1] = {dup}, *null_set[1] = {NULL};
    const uint32_t three[1] = {3};
    CHECK_STATUS(fathom_union_size(1, bad_sets, three, &u), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_union_size(1, dup_sets, three, &u), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_union_size(1, null_set, three, &u), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_union_size(3, NULL, counts, &u), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_union_size(3, sets, NULL, &u), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_union_size(3, sets, counts, NULL), FATHOM_ERR_INVALID_ARG);
}

static void test_bad_args(void) {
    float s[8] = {0};
    uint64_t work[8];
    uint32_t idx[8], count;
    CHECK_STATUS(fathom_select(NULL, 8, 4, 1, 1, work, idx, &count), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_select(s, 8, 4, 1, 1, NULL, idx, &count), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_select(s, 8, 4, 1, 1, work, NULL, &count), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_select(s, 8, 4, 1, 1, work, idx, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_select(s, 0, 4, 1, 1, work, idx, &count), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_select(s, 8, 0, 1, 1, work, idx, &count), FATHOM_ERR_INVALID_ARG);
    /* Positions must fit uint32 (checked before anything is read). */
    CHECK_STATUS(fathom_select(s, (uint64_t)UINT32_MAX + 2, 4, 1, 1, work, idx, &count),
                 FATHOM_ERR_INVALID_ARG);
    CHECK(fathom_select_work_size(10) == 80);
    CHECK(fathom_select_work_size(0) == 0);
    CHECK(fathom_select_work_size(UINT64_MAX / 4) == SIZE_MAX);
}

int main(void) {
    test_random_against_reference();
    test_large_and_adversarial();
    test_edge_cases();
    test_union();
    test_bad_args();
    return check_summary("test_select");
}

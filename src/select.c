/* select — the paper's selection protocol (§2): the first `sink` and last
 * `local` positions always, the highest-scoring of the rest up to k.
 *
 * The scored part is a top-m selection over the middle positions. Each
 * candidate becomes one unique uint64 key, order-preserving float bits in
 * the high half and (0xffffffff - position) in the low half, so a larger key
 * is a higher score, or an equal score at a lower position. With unique keys
 * the chosen set is exactly {keys >= the m-th largest key}; one quickselect
 * finds that threshold in the caller's work array and one ascending pass
 * writes the output in order, with no sort and no allocation.
 *
 * Edge cases, in order: n_visible <= k keeps everything. Sink and local may
 * overlap (short prefixes); their union is the forced set. If the forced set
 * alone reaches k (only possible when sink + local >= k) it is cut to k: the
 * sink positions first, then the most recent ones, and nothing is scored.
 * n_visible == 0 and k == 0 are invalid arguments (softmax over nothing).
 */
#include "internal.h"

#include <math.h>
#include <string.h>

/* Monotone map of a float score to 32 bits: NaN lowest (0), -0 == +0. */
static uint32_t score_order(float s) {
    if (isnan(s)) return 0;
    if (s == 0.0f) s = 0.0f; /* -0 ties with +0 */
    uint32_t u;
    memcpy(&u, &s, sizeof u);
    /* negative: flip all bits (larger magnitude sorts lower); positive: set the sign bit.
     * -inf maps to 0x007fffff > 0, so NaN stays strictly below everything. */
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

static uint64_t select_key(float score, uint64_t pos) {
    return ((uint64_t)score_order(score) << 32) | (0xffffffffu - (uint32_t)pos);
}

static void swap_u64(uint64_t *a, uint64_t *b) {
    uint64_t t = *a;
    *a = *b;
    *b = t;
}

/* Min-heap sift-down on v[0..n) (used only by the worst-case fallback). */
static void sift_down_min(uint64_t *v, uint64_t n, uint64_t i) {
    for (;;) {
        uint64_t c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && v[c + 1] < v[c]) c++;
        if (v[i] <= v[c]) return;
        swap_u64(&v[i], &v[c]);
        i = c;
    }
}

/* Heapsort descending, in place: the fallback that keeps quickselect
 * O(n log n) on inputs its deterministic pivot handles badly. */
static void sort_descending(uint64_t *v, uint64_t n) {
    if (n < 2) return;
    for (uint64_t i = n / 2; i-- > 0;) sift_down_min(v, n, i);
    for (uint64_t end = n - 1; end > 0; end--) {
        swap_u64(&v[0], &v[end]); /* smallest goes last */
        sift_down_min(v, end, 0);
    }
}

static uint64_t median3(uint64_t a, uint64_t b, uint64_t c) {
    if (a < b) {
        if (b < c) return b;
        return a < c ? c : a;
    }
    if (a < c) return a;
    return b < c ? c : b;
}

/* Reorder v[0..n) (unique keys) so that v[m-1] is the m-th largest and
 * v[0..m-1) are larger; returns v[m-1]. 1 <= m <= n. Introselect: median of
 * three pivots, heapsort once the range has not shrunk enough. */
static uint64_t kth_largest(uint64_t *v, uint64_t n, uint64_t m) {
    uint64_t lo = 0, hi = n, target = m - 1;
    int budget = 2;
    for (uint64_t s = n; s > 1; s >>= 1) budget += 2;
    while (hi - lo > 1) {
        if (budget-- == 0) {
            sort_descending(v + lo, hi - lo);
            return v[target];
        }
        uint64_t pivot = median3(v[lo], v[lo + (hi - lo) / 2], v[hi - 1]);
        /* Partition [lo, hi) into > pivot | == pivot | < pivot (keys are unique,
         * so the middle is the pivot alone). */
        uint64_t gt = lo, i = lo, lt = hi;
        while (i < lt) {
            if (v[i] > pivot)
                swap_u64(&v[gt++], &v[i++]);
            else if (v[i] < pivot)
                swap_u64(&v[i], &v[--lt]);
            else
                i++;
        }
        if (target < gt)
            hi = gt;
        else if (target >= lt)
            lo = lt;
        else
            return pivot;
    }
    return v[target];
}

int fathom_select(const float *scores, uint64_t n_visible, uint32_t k, uint32_t sink,
                  uint32_t local, uint64_t *work, uint32_t *idx_out, uint32_t *count) {
    FATHOM_CHECK_ARG(scores && work && idx_out && count, "fathom_select: NULL pointer");
    FATHOM_CHECK_ARG(n_visible > 0, "fathom_select: n_visible is 0");
    FATHOM_CHECK_ARG(k > 0, "fathom_select: k is 0");
    FATHOM_CHECK_ARG(n_visible <= (uint64_t)UINT32_MAX + 1,
                     "fathom_select: n_visible %llu exceeds 32-bit positions",
                     (unsigned long long)n_visible);
    const uint64_t n = n_visible;

    if (n <= k) { /* everything is chosen */
        for (uint64_t i = 0; i < n; i++) idx_out[i] = (uint32_t)i;
        *count = (uint32_t)n;
        return FATHOM_OK;
    }
    /* Forced window: [0, sink_end) and [local_begin, n); they may overlap. */
    const uint64_t sink_end = sink < n ? sink : n;
    const uint64_t local_begin = local < n ? n - local : 0;
    const uint64_t forced = local_begin > sink_end ? sink_end + (n - local_begin) : n;

    if (forced >= k) {
        /* The forced positions alone fill k (only when sink + local >= k):
         * the sink goes first, then the most recent local positions. */
        uint32_t c = 0;
        uint64_t from_sink = sink_end < k ? sink_end : k;
        for (uint64_t i = 0; i < from_sink; i++) idx_out[c++] = (uint32_t)i;
        uint64_t rest = k - from_sink;
        uint64_t start = n - rest > from_sink ? n - rest : from_sink;
        for (uint64_t i = start; i < n; i++) idx_out[c++] = (uint32_t)i;
        *count = c;
        return FATHOM_OK;
    }

    /* forced < k < n, so the middle [sink_end, local_begin) is non-empty and
     * m = k - forced of its positions are chosen, 1 <= m < middle. */
    const uint64_t middle = local_begin - sink_end;
    const uint64_t m = k - forced;
    for (uint64_t i = 0; i < middle; i++)
        work[i] = select_key(scores[sink_end + i], sink_end + i);
    const uint64_t threshold = kth_largest(work, middle, m);

    uint32_t c = 0;
    for (uint64_t i = 0; i < n; i++)
        if (i < sink_end || i >= local_begin || select_key(scores[i], i) >= threshold)
            idx_out[c++] = (uint32_t)i;
    *count = c;
    return FATHOM_OK;
}

size_t fathom_select_work_size(uint64_t n_visible) {
    uint64_t bytes;
    /* Saturate: an impossible size makes the caller's allocation fail cleanly. */
    if (!fathom_mul_u64(n_visible, sizeof(uint64_t), &bytes) || bytes > SIZE_MAX) return SIZE_MAX;
    return (size_t)bytes;
}

/* Whether x is in the strictly ascending list s[0..n). */
static int contains(const uint32_t *s, uint32_t n, uint32_t x) {
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (s[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && s[lo] == x;
}

/* Counts an element when no earlier set holds it: no allocation, and for a
 * query group (a handful of sets of k positions) a few binary searches each. */
int fathom_union_size(uint32_t n_sets, const uint32_t *const *sets, const uint32_t *counts,
                      uint32_t *union_count) {
    FATHOM_CHECK_ARG(union_count, "fathom_union_size: NULL union_count");
    FATHOM_CHECK_ARG(n_sets == 0 || (sets && counts), "fathom_union_size: NULL sets or counts");
    for (uint32_t s = 0; s < n_sets; s++) {
        FATHOM_CHECK_ARG(counts[s] == 0 || sets[s], "fathom_union_size: set %u is NULL", s);
        for (uint32_t i = 1; i < counts[s]; i++)
            FATHOM_CHECK_ARG(sets[s][i] > sets[s][i - 1],
                             "fathom_union_size: set %u is not strictly ascending at %u", s, i);
    }
    uint64_t total = 0;
    for (uint32_t s = 0; s < n_sets; s++)
        for (uint32_t i = 0; i < counts[s]; i++) {
            uint32_t x = sets[s][i];
            int seen = 0;
            for (uint32_t t = 0; t < s && !seen; t++) seen = contains(sets[t], counts[t], x);
            total += !seen;
        }
    FATHOM_CHECK_ARG(total <= UINT32_MAX, "fathom_union_size: union of %llu exceeds uint32",
                     (unsigned long long)total);
    *union_count = (uint32_t)total;
    return FATHOM_OK;
}

/* select — the paper's selection protocol (§2): the first `sink` and last
 * `local` positions always, the highest-scoring of the rest up to k.
 *
 * The scored part is a top-m selection over the middle positions. Each
 * score becomes an order-preserving 32-bit key (NaN lowest, -0 == +0); a
 * radix select finds the m-th largest key T and how many keys equal to T
 * are taken, and one ascending pass writes the output: keys above T, and
 * the lowest positions among keys equal to T (ties go to the lower index).
 * No sort and no allocation: the keys live in the caller's work array.
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

/* The value T of the m-th largest of keys[0..n) and how many keys equal to
 * T belong to the top m (*take_equal >= 1). Radix select, most significant
 * digit first (11 + 11 + 10 bits). The first level histograms every key and
 * copies the keys that share the winning digit into `rest` (capacity n);
 * the later levels only see those, so the cost is about two linear passes.
 * 1 <= m <= n. */
static uint32_t radix_threshold(const uint32_t *keys, uint64_t n, uint64_t m, uint64_t *take_equal,
                                uint32_t *rest) {
    static const unsigned shifts[3] = {21, 10, 0};
    static const unsigned widths[3] = {11, 11, 10};
    uint32_t hist[2048];
    uint32_t prefix = 0, mask = 0;
    uint64_t need = m, n_rest = 0;
    for (int level = 0; level < 3; level++) {
        const unsigned shift = shifts[level], bins = 1u << widths[level];
        memset(hist, 0, bins * sizeof hist[0]);
        if (level == 0) {
            for (uint64_t i = 0; i < n; i++) hist[keys[i] >> shift]++;
        } else {
            for (uint64_t i = 0; i < n_rest; i++)
                if ((rest[i] & mask) == prefix) hist[(rest[i] >> shift) & (bins - 1)]++;
        }
        uint32_t b = bins;
        while (b-- > 0) {
            if (need <= hist[b]) break;
            need -= hist[b];
        }
        prefix |= b << shift;
        mask |= (bins - 1) << shift;
        if (level == 0)
            for (uint64_t i = 0; i < n; i++)
                if ((keys[i] >> shift) == b) rest[n_rest++] = keys[i];
    }
    *take_equal = need;
    return prefix;
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
     * m = k - forced of its positions are chosen, 1 <= m < middle. The
     * caller's work array (n uint64 = 2n uint32) holds the middle's 32-bit
     * score keys and the radix select's scratch. */
    const uint64_t middle = local_begin - sink_end;
    const uint64_t m = k - forced;
    uint32_t *keys = (uint32_t *)work;
    for (uint64_t i = 0; i < middle; i++) keys[i] = score_order(scores[sink_end + i]);
    uint64_t take_equal;
    /* keys use the first half of work, the radix select the second */
    const uint32_t threshold = radix_threshold(keys, middle, m, &take_equal, keys + n);

    /* Ascending output; among scores equal to the threshold the lower
     * positions come first, which is the tie rule. */
    uint32_t c = 0;
    for (uint64_t i = 0; i < sink_end; i++) idx_out[c++] = (uint32_t)i;
    for (uint64_t i = 0; i < middle; i++) {
        const uint32_t key = keys[i];
        if (key > threshold || (key == threshold && take_equal > 0 && take_equal--))
            idx_out[c++] = (uint32_t)(sink_end + i);
    }
    for (uint64_t i = local_begin; i < n; i++) idx_out[c++] = (uint32_t)i;
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

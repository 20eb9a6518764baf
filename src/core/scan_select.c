/* scan_select — scan and select in one pass over the planes.
 *
 * fathom_scan_select_parallel gives, for every query head of every item,
 * the selection fathom_select makes from the scan's scores, without writing
 * the [group x n] scores out: at long contexts writing them costs more
 * memory traffic than reading the planes. Tasks of one item and token range
 * scan into a scratch of the worker (in its cache) and keep only the
 * candidates that may be among the head's top m; a second round selects the
 * top m of the candidates per head.
 *
 * A candidate packs the score's order key (fathom_score_key) above the
 * complement of its position, so the packed values are distinct and rank
 * exactly as fathom_select ranks (higher key first; among equal keys the
 * lower position). A range keeps its own top m (any of the head's top m in
 * the range is among them) and drops scores below a threshold: the m-th
 * largest value of its candidates so far, or of any finished range (each
 * range holds m values at least that large, so the head's m-th largest is
 * not below it). Which task raises the shared threshold first changes how
 * many candidates are kept, never the selection. */
#include "internal.h"
#include "pool.h"
#include "scan_internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Moves the m largest of c[0..n) to c[0..m), in any order; 1 <= m <= n.
 * Quickselect with a median-of-three pivot. */
static void top_m(uint64_t *c, uint64_t n, uint64_t m) {
    uint64_t lo = 0, hi = n;
    while (hi - lo > 1 && lo < m && m < hi) {
        const uint64_t mid = lo + (hi - lo) / 2;
        uint64_t p = hi - 1;
        const uint64_t a = c[lo], b = c[mid], d = c[hi - 1];
        if ((a <= b && b <= d) || (d <= b && b <= a)) p = mid;
        else if ((b <= a && a <= d) || (d <= a && a <= b)) p = lo;
        uint64_t t = c[p];
        c[p] = c[hi - 1];
        c[hi - 1] = t;
        const uint64_t pivot = c[hi - 1];
        uint64_t w = lo;
        for (uint64_t r = lo; r + 1 < hi; r++)
            if (c[r] > pivot) t = c[w], c[w] = c[r], c[r] = t, w++;
        c[hi - 1] = c[w];
        c[w] = pivot; /* [lo, w) > pivot: the pivot ranks w-th */
        if (m == w || m == w + 1) return;
        if (m < w) hi = w;
        else lo = w + 1;
    }
}

static uint64_t min_u64(const uint64_t *c, uint64_t n) {
    uint64_t v = c[0];
    for (uint64_t i = 1; i < n; i++) v = c[i] < v ? c[i] : v;
    return v;
}

/* The lowest float score whose key is the candidate's key (keys of NaN and
 * -inf: -inf, which the filters let everything through). */
static float key_floor(uint64_t cand) {
    const uint32_t key = (uint32_t)(cand >> 32);
    if (key <= 0x007fffffu) return -__builtin_inff();
    uint32_t u = (key & 0x80000000u) ? key & 0x7fffffffu : ~key;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void atomic_max_u64(_Atomic uint64_t *a, uint64_t v) {
    uint64_t cur = atomic_load_explicit(a, memory_order_relaxed);
    while (cur < v && !atomic_compare_exchange_weak_explicit(a, &cur, v, memory_order_relaxed,
                                                              memory_order_relaxed)) {
    }
}

static uint32_t filter_portable(const float *s, uint32_t n, float thr, int strict, uint64_t pos0,
                                uint64_t *out) {
    return scan_filter_tail(s, 0, n, thr, strict, pos0, out);
}

typedef uint32_t (*filter_fn)(const float *, uint32_t, float, int, uint64_t, uint64_t *);

static filter_fn pick_filter(void) {
#ifdef FATHOM_X86
    if (fathom_cpu_has(FATHOM_CPU_AVX512)) return fathom_scan_filter_avx512;
    if (fathom_cpu_has(FATHOM_CPU_AVX2)) return fathom_scan_filter_avx2;
#endif
    return filter_portable;
}

/* Per item: the forced window, m, and the candidate slots. */
typedef struct ss_item {
    uint64_t sink_end, local_begin, m; /* m == 0: nothing to score */
    uint64_t ranges, first_task;
    uint64_t *cand;           /* [group][ranges][cap] */
    uint64_t *cand_n;         /* [group][ranges] */
    _Atomic uint64_t *tau;    /* [group] */
} ss_item;

typedef struct ss_batch {
    fathom_scan_kernel kernel;
    const fathom_scan_select_item *items;
    ss_item *st;
    uint32_t count;
    uint64_t range, cap;
    float *scratch; /* [threads][max_group * range] */
    uint64_t scratch_per_worker;
    filter_fn filter;
} ss_batch;

static int ss_scan_task(void *arg, uint32_t task, uint32_t worker) {
    const ss_batch *bt = arg;
    uint32_t i = 0;
    while (bt->st[i].m == 0 || task >= bt->st[i].first_task + bt->st[i].ranges) i++;
    const fathom_scan_select_item *it = &bt->items[i];
    const ss_item *si = &bt->st[i];
    const uint64_t r = task - si->first_task, first = r * bt->range;
    const uint64_t end = it->n - first < bt->range ? it->n : first + bt->range;
    const uint64_t lo = first > si->sink_end ? first : si->sink_end;
    const uint64_t hi = end < si->local_begin ? end : si->local_begin;
    for (uint32_t h = 0; h < it->group; h++) si->cand_n[h * si->ranges + r] = 0;
    if (lo >= hi) return FATHOM_OK;
    const uint64_t s0 = lo - lo % FATHOM_BLOCK_TOKENS;
    float *scores = bt->scratch + worker * bt->scratch_per_worker;
    FATHOM_TRY(fathom_store_scan_range(bt->kernel, it->store, it->depths, it->queries, it->group,
                                       s0, hi - s0, scores, bt->range, NULL));
    const uint64_t m = si->m;
    for (uint32_t h = 0; h < it->group; h++) {
        uint64_t *out = si->cand + (h * si->ranges + r) * bt->cap;
        uint64_t c = 0;
        float thr = key_floor(atomic_load_explicit(&si->tau[h], memory_order_relaxed));
        int strict = 0;
        for (uint64_t b = lo; b < hi;) {
            const uint64_t next = (b / FATHOM_BLOCK_TOKENS + 1) * FATHOM_BLOCK_TOKENS < hi
                                      ? (b / FATHOM_BLOCK_TOKENS + 1) * FATHOM_BLOCK_TOKENS
                                      : hi;
            c += bt->filter(scores + h * bt->range + (b - s0), (uint32_t)(next - b), thr, strict, b,
                            out + c);
            b = next;
            if (c > 2 * m) { /* keep the range's top m; later positions must beat the m-th */
                top_m(out, c, m);
                c = m;
                const uint64_t v = min_u64(out, m);
                atomic_max_u64(&si->tau[h], v);
                const uint64_t shared = atomic_load_explicit(&si->tau[h], memory_order_relaxed);
                thr = key_floor(shared > v ? shared : v);
                strict = shared <= v; /* the shared value may tie on the key with a later position */
            }
        }
        if (c >= m) {
            top_m(out, c, m);
            c = m;
            atomic_max_u64(&si->tau[h], min_u64(out, m));
        }
        si->cand_n[h * si->ranges + r] = c;
    }
    return FATHOM_OK;
}

static int cmp_u32(const void *a, const void *b) {
    const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static int ss_select_task(void *arg, uint32_t task, uint32_t worker) {
    (void)worker;
    const ss_batch *bt = arg;
    uint32_t i = 0;
    while (task >= bt->items[i].group) task -= bt->items[i++].group;
    const fathom_scan_select_item *it = &bt->items[i];
    const ss_item *si = &bt->st[i];
    const uint32_t h = task;
    uint32_t *idx = it->idx + (uint64_t)h * it->k;
    if (si->m == 0) { /* fathom_select scores nothing here */
        const float none = 0.0f;
        uint64_t work = 0;
        return fathom_select(&none, it->n, it->k, it->sink, it->local, &work, idx, &it->count[h]);
    }
    uint64_t *c = si->cand + h * si->ranges * bt->cap, w = 0;
    const uint64_t tau = atomic_load_explicit(&si->tau[h], memory_order_relaxed);
    for (uint64_t r = 0; r < si->ranges; r++) {
        const uint64_t *src = si->cand + (h * si->ranges + r) * bt->cap;
        for (uint64_t j = 0; j < si->cand_n[h * si->ranges + r]; j++)
            if (src[j] >= tau) c[w++] = src[j];
    }
    FATHOM_CHECK(w < si->m, FATHOM_ERR_STATE, "scan_select: %llu candidates for %llu",
                 (unsigned long long)w, (unsigned long long)si->m);
    top_m(c, w, si->m);
    uint32_t n_out = 0;
    for (uint64_t p = 0; p < si->sink_end; p++) idx[n_out++] = (uint32_t)p;
    uint32_t *mid = idx + n_out;
    for (uint64_t j = 0; j < si->m; j++) mid[j] = ~(uint32_t)c[j];
    qsort(mid, si->m, sizeof *mid, cmp_u32);
    n_out += (uint32_t)si->m;
    for (uint64_t p = si->local_begin; p < it->n; p++) idx[n_out++] = (uint32_t)p;
    it->count[h] = n_out;
    return FATHOM_OK;
}

int fathom_scan_select_parallel(struct fathom_pool *pool, fathom_scan_kernel kernel,
                                const fathom_scan_select_item *items, uint32_t count,
                                uint64_t range_tokens) {
    FATHOM_CHECK_ARG(pool && items && count > 0, "scan_select: NULL pool or no items");
    if (range_tokens == 0) range_tokens = 16384;
    FATHOM_CHECK_ARG(range_tokens % FATHOM_BLOCK_TOKENS == 0 && range_tokens <= UINT32_MAX,
                     "scan_select: range %llu is not a multiple of %d",
                     (unsigned long long)range_tokens, FATHOM_BLOCK_TOKENS);
    uint64_t max_k = 0, max_group = 0;
    for (uint32_t i = 0; i < count; i++) {
        const fathom_scan_select_item *it = &items[i];
        FATHOM_CHECK_ARG(it->store && it->depths && it->queries && it->idx && it->count,
                         "scan_select: item %u has a NULL pointer", i);
        FATHOM_CHECK_ARG(it->group > 0 && it->k > 0, "scan_select: item %u: group or k is 0", i);
        FATHOM_CHECK_ARG(it->n > 0 && it->n <= fathom_store_length(it->store) &&
                             it->n <= (uint64_t)UINT32_MAX + 1,
                         "scan_select: item %u: n = %llu not in 1..length %llu", i,
                         (unsigned long long)it->n,
                         (unsigned long long)fathom_store_length(it->store));
        max_k = it->k > max_k ? it->k : max_k;
        max_group = it->group > max_group ? it->group : max_group;
    }
    const uint64_t cap = 2 * max_k + FATHOM_BLOCK_TOKENS;
    const uint32_t threads = fathom_pool_threads(pool);
    ss_item *st = calloc(count, sizeof *st);
    uint64_t scratch_floats, cand_total = 0, n_scan = 0, n_select = 0;
    int ok = st && fathom_mul_u64(max_group, range_tokens, &scratch_floats);
    for (uint32_t i = 0; ok && i < count; i++) { /* the windows, as fathom_select */
        const fathom_scan_select_item *it = &items[i];
        ss_item *si = &st[i];
        const uint64_t n = it->n;
        si->sink_end = it->sink < n ? it->sink : n;
        si->local_begin = it->local < n ? n - it->local : 0;
        const uint64_t forced = si->local_begin > si->sink_end ? si->sink_end + (n - si->local_begin) : n;
        si->m = n > it->k && forced < it->k ? it->k - forced : 0;
        si->ranges = (n - 1) / range_tokens + 1;
        si->first_task = n_scan;
        uint64_t slots;
        if (si->m) {
            n_scan += si->ranges;
            ok = fathom_mul_u64((uint64_t)it->group * si->ranges, cap, &slots) &&
                 fathom_add_u64(cand_total, slots, &cand_total);
        }
        n_select += it->group;
    }
    uint64_t *cand = NULL;
    uint64_t *cand_n = NULL;
    _Atomic uint64_t *tau = NULL;
    float *scratch = NULL;
    uint64_t slot_total = 0;
    for (uint32_t i = 0; ok && i < count; i++)
        if (st[i].m) slot_total += (uint64_t)items[i].group * st[i].ranges;
    if (ok) {
        cand = fathom_alloc_array(cand_total ? cand_total : 1, sizeof *cand);
        cand_n = fathom_alloc_array(slot_total ? slot_total : 1, sizeof *cand_n);
        tau = fathom_calloc_array(n_select, sizeof *tau);
        scratch = n_scan ? fathom_alloc_array((uint64_t)threads * scratch_floats, sizeof(float)) : NULL;
        ok = cand && cand_n && tau && (scratch || !n_scan) && n_scan <= UINT32_MAX &&
             n_select <= UINT32_MAX;
    }
    int status = FATHOM_OK;
    if (!ok)
        status = fathom_fail(FATHOM_ERR_NOMEM, "scan_select: out of memory for the candidates");
    else {
        uint64_t c_off = 0, n_off = 0, t_off = 0;
        for (uint32_t i = 0; i < count; i++) {
            st[i].tau = tau + t_off;
            for (uint32_t h = 0; h < items[i].group; h++) atomic_init(&st[i].tau[h], 0);
            t_off += items[i].group;
            if (!st[i].m) continue;
            st[i].cand = cand + c_off;
            st[i].cand_n = cand_n + n_off;
            c_off += (uint64_t)items[i].group * st[i].ranges * cap;
            n_off += (uint64_t)items[i].group * st[i].ranges;
        }
        const ss_batch batch = {kernel, items, st, count, range_tokens, cap, scratch,
                                scratch_floats, pick_filter()};
        if (n_scan) status = fathom_pool_run(pool, ss_scan_task, (void *)&batch, (uint32_t)n_scan);
        if (status == FATHOM_OK)
            status = fathom_pool_run(pool, ss_select_task, (void *)&batch, (uint32_t)n_select);
    }
    free(cand);
    free(cand_n);
    free((void *)tau);
    free(scratch);
    free(st);
    return status;
}

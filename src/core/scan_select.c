/* scan_select — scan and select in one pass over the planes.
 *
 * fathom_scan_select_parallel gives, for every query head of every item,
 * the selection fathom_select makes from the scan's scores, without writing
 * the [group x n] scores out: at long contexts writing them costs more
 * memory traffic than reading the planes. Tasks of one item and token range
 * scan into a scratch of the worker (in its cache) and offer only the
 * scores that may be among the head's top m to the head's shared pool.
 *
 * A candidate packs the score's order key (fathom_score_key) above the
 * complement of its position, so the packed values are distinct and rank
 * exactly as fathom_select ranks (higher key first; among equal keys the
 * lower position). A pool takes what is offered above its floor and, when
 * it holds more than 2m, is cut to its top m, whose m-th the floor rises
 * to: m values of the data are at least that large, so the head's m-th
 * largest is not below it. A task drops scores below the floor as it
 * filters, and cuts its own candidates to their top m the same way when
 * they pass 2m (later positions must then beat the m-th of them; the floor
 * rises to just under it). Every one of the
 * head's top m is offered and survives every cut, so the pool's top m at
 * the end is the selection whatever order the tasks ran in. Tasks go
 * range-major over the items, so that most ranges start with a floor.
 *
 * A call is one pool run: the plans of fathom_plan_select_parallel (one
 * task per item), the range tasks, then one selection task per head. A
 * task waits for what it reads (a range for its item's plan, a selection
 * for its item's ranges). The pool hands tasks out in order, so what a task
 * waits for has been handed out and is running; a task that fails still
 * counts as done, and the tasks after it then skip their work (the call
 * returns the first failure). */
#include "internal.h"
#include "pool.h"
#include "scan_internal.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Moves the m largest of c[0..n) to c[0..m), in any order; 1 <= m <= n.
 * Quickselect with a median-of-three pivot and a branch-free partition. */
static void top_m(uint64_t *c, uint64_t n, uint64_t m) {
    uint64_t lo = 0, hi = n;
    while (hi - lo > 1 && lo < m && m < hi) {
        const uint64_t mid = lo + (hi - lo) / 2;
        uint64_t p = hi - 1;
        const uint64_t a = c[lo], b = c[mid], d = c[hi - 1];
        if ((a <= b && b <= d) || (d <= b && b <= a)) p = mid;
        else if ((b <= a && a <= d) || (d <= a && a <= b)) p = lo;
        const uint64_t pivot = c[p];
        c[p] = c[hi - 1];
        c[hi - 1] = pivot;
        uint64_t w = lo;
        for (uint64_t r = lo; r + 1 < hi; r++) {
            const uint64_t x = c[r];
            c[r] = c[w];
            c[w] = x;
            w += x > pivot;
        }
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

/* Scores per group of range_floor: a token's group is its index within its
 * run of 256 tokens, modulo 16. */
#define SS_GROUP_RUN 256
#define SS_GROUPS_PER_RUN 16

/* Groups of range_floor for len scores. */
static uint64_t floor_groups(uint64_t len) {
    return (len + SS_GROUP_RUN - 1) / SS_GROUP_RUN * SS_GROUPS_PER_RUN;
}

/* The filter threshold for candidates above (strict) or not below floor:
 * the float of floor's key; for the keys of NaN and -inf, -inf and not
 * strict, which lets everything through. */
static float floor_threshold(uint64_t floor, int *strict) {
    const uint32_t key = (uint32_t)(floor >> 32);
    if (key <= 0x007fffffu) {
        *strict = 0;
        return -__builtin_inff();
    }
    uint32_t u = (key & 0x80000000u) ? key & 0x7fffffffu : ~key;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* A threshold at least m of s[0..len) are not below, for a range whose
 * task has no floor yet: the m-th largest of the maxima of disjoint groups
 * of scores (floor_groups; each maximum is one of the scores, so m scores
 * are not below it, and the range's top m are not below it either). NaN
 * scores are in no maximum. -inf when the groups are fewer than 2m (the
 * bound would be loose). mx and keys hold floor_groups(len) values. */
static float range_floor(const float *s, uint64_t len, uint64_t m, float *mx, uint64_t *keys) {
    const uint64_t groups = floor_groups(len);
    if (groups < 2 * m) return -__builtin_inff();
    for (uint64_t b = 0; b * SS_GROUP_RUN < len; b++) {
        const float *r = s + b * SS_GROUP_RUN;
        float g[SS_GROUPS_PER_RUN];
        for (int j = 0; j < SS_GROUPS_PER_RUN; j++) g[j] = -__builtin_inff();
        const uint64_t left = len - b * SS_GROUP_RUN;
        if (left >= SS_GROUP_RUN) {
            for (int i = 0; i < SS_GROUP_RUN / SS_GROUPS_PER_RUN; i++)
                for (int j = 0; j < SS_GROUPS_PER_RUN; j++) {
                    const float v = r[i * SS_GROUPS_PER_RUN + j];
                    g[j] = v > g[j] ? v : g[j];
                }
        } else {
            for (uint64_t t = 0; t < left; t++) {
                const float v = r[t];
                g[t % SS_GROUPS_PER_RUN] = v > g[t % SS_GROUPS_PER_RUN] ? v : g[t % SS_GROUPS_PER_RUN];
            }
        }
        for (int j = 0; j < SS_GROUPS_PER_RUN; j++) mx[b * SS_GROUPS_PER_RUN + j] = g[j];
    }
    for (uint64_t i = 0; i < groups; i++) keys[i] = (uint64_t)fathom_score_key(mx[i]) << 32 | i;
    top_m(keys, groups, m);
    int strict = 0;
    return floor_threshold(min_u64(keys, m) & ~(uint64_t)UINT32_MAX, &strict);
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

/* Scores filtered per call; a buffer of 2m + SS_CHUNK candidates is cut to
 * m when it holds more than 2m. */
#define SS_CHUNK 1024

/* Spins (then yields) until *word is 0, or, with take set, until this
 * thread has swapped a 0 there for a 1 (the waiters read, they do not
 * write, while it is held). */
static void spin_until(atomic_uint *word, int take) {
    for (unsigned spin = 0;; spin++) {
        if (atomic_load_explicit(word, memory_order_acquire) == 0 &&
            (!take || !atomic_exchange_explicit(word, 1, memory_order_acquire)))
            return;
        if (spin < 64) {
#ifdef FATHOM_X86
            __builtin_ia32_pause();
#endif
        } else
            sched_yield(); /* what it waits for may need this core when threads outnumber cores */
    }
}

/* A head's pool of candidates (capacity 2m + SS_CHUNK): everything
 * offered that is above its floor; cut to its top m when it fills, and the
 * floor raised to their m-th (0 until a floor is known: nothing is
 * dropped). A task
 * raises the floor as soon as it knows m of its range's values are not
 * below a value v (its own cut, its range's bound) to just under v: the
 * head's m-th largest is not below v either, so every one of the head's
 * top m stays above the floor, and the head's other tasks running at the
 * same time filter at it from their next chunk on. The floor has a cache
 * line of its own (every task of the head reads it at every chunk), the
 * lock and size another (written while a task offers). */
typedef struct ss_pool {
    _Alignas(64) _Atomic uint64_t floor;
    _Alignas(64) atomic_uint locked;
    uint64_t size;
    uint64_t *v;
} ss_pool;

/* Raises the pool's floor to v if it is lower. */
static void raise_floor(ss_pool *pl, uint64_t v) {
    uint64_t cur = atomic_load_explicit(&pl->floor, memory_order_relaxed);
    while (v > cur && !atomic_compare_exchange_weak_explicit(&pl->floor, &cur, v, memory_order_relaxed,
                                                             memory_order_relaxed)) {
    }
}

/* Offers c[0..n) to the pool of a head whose top is m. */
static void pool_offer(ss_pool *pl, uint64_t m, const uint64_t *c, uint64_t n) {
    spin_until(&pl->locked, 1);
    const uint64_t floor = atomic_load_explicit(&pl->floor, memory_order_relaxed);
    uint64_t size = pl->size;
    for (uint64_t i = 0; i < n; i++) {
        pl->v[size] = c[i];
        size += c[i] > floor || floor == 0; /* 0: nothing cut yet */
        if (size > 2 * m) {
            top_m(pl->v, size, m);
            size = m;
            raise_floor(pl, min_u64(pl->v, m)); /* a task may have raised it higher */
        }
    }
    pl->size = size;
    atomic_store_explicit(&pl->locked, 0, memory_order_release);
}

/* Per item: the forced window as fathom_select sets it, m, the pools, and
 * the tasks the item's later tasks wait for. */
typedef struct ss_item {
    uint64_t sink_end, local_begin, m; /* m == 0: nothing to score */
    uint64_t ranges;
    ss_pool *pools;         /* [group] */
    atomic_uint plan_left;  /* 1 until the item's plan is done (0 without a plan phase) */
    atomic_uint scans_left; /* range tasks not done */
} ss_item;

/* The plans of fathom_plan_select_parallel: one task per item. */
typedef struct ps_batch {
    const fathom_plan_select_item *items;
    float *var;  /* [count][dim] */
    double *g;   /* [count][dim] */
    uint32_t dim;
} ps_batch;

static int ps_plan_task(const ps_batch *b, uint32_t task) {
    const fathom_plan_select_item *it = &b->items[task];
    const uint32_t dim = it->segments->dim;
    float *var = b->var + (uint64_t)task * b->dim;
    double *g = b->g + (uint64_t)task * b->dim;
    fathom_variance_from_sums(dim, it->n, it->sum, it->sum_sq, var);
    FATHOM_TRY(fathom_importance(dim, it->group, it->queries, var, g));
    return fathom_water_fill(dim, g, it->budget, it->depths, NULL);
}

typedef struct ss_batch {
    fathom_scan_kernel kernel;
    const fathom_scan_select_item *items;
    ss_item *st;
    const uint64_t *tasks; /* item << 32 | range, range-major */
    uint64_t range, cap;
    float *scratch;   /* [threads][max_group * range] */
    uint64_t *buf;    /* [threads][cap] */
    uint64_t scratch_per_worker;
    filter_fn filter;
    float *group_max;     /* [threads][floor_groups(range)] */
    uint64_t *group_keys; /* the same */
    const ps_batch *plan; /* the plan phase, or NULL */
    uint32_t n_plan, n_scan;
    atomic_int failed; /* a task failed: the later ones skip their work */
} ss_batch;

static int ss_scan_task(const ss_batch *bt, uint32_t task, uint32_t worker) {
    const uint32_t i = (uint32_t)(bt->tasks[task] >> 32);
    const uint64_t r = (uint32_t)bt->tasks[task];
    const fathom_scan_select_item *it = &bt->items[i];
    const ss_item *si = &bt->st[i];
    const uint64_t first = r * bt->range;
    const uint64_t end = it->n - first < bt->range ? it->n : first + bt->range;
    const uint64_t lo = first > si->sink_end ? first : si->sink_end;
    const uint64_t hi = end < si->local_begin ? end : si->local_begin;
    if (lo >= hi) return FATHOM_OK;
    const uint64_t s0 = lo - lo % FATHOM_BLOCK_TOKENS, m = si->m;
    float *scores = bt->scratch + worker * bt->scratch_per_worker;
    uint64_t *out = bt->buf + worker * bt->cap;
    if (it->store)
        FATHOM_TRY(fathom_store_scan_range(bt->kernel, it->store, it->depths, it->queries,
                                           it->group, s0, hi - s0, scores, bt->range, NULL));
    else
        FATHOM_TRY(fathom_segments_scan_range(bt->kernel, it->segments, it->depths, it->queries,
                                              it->group, s0, hi - s0, scores, bt->range, NULL));
    const uint64_t ng = floor_groups(bt->range);
    for (uint32_t hh = 0; hh < it->group; hh++) {
        const uint32_t h = (hh + task) % it->group; /* tasks that end together offer to different pools */
        ss_pool *pl = &si->pools[h];
        /* the filter passes at least every value above eff: the pool's floor
           (not strict: it may tie on the key with a later position), the
           range's own bound (not strict), or the task's own m-th after a cut
           (strict: later positions must beat it) */
        uint64_t c = 0, eff = atomic_load_explicit(&pl->floor, memory_order_relaxed);
        int strict = 0;
        float thr = floor_threshold(eff, &strict);
        if (eff == 0) { /* no floor yet: the range's own bound */
            const float f = range_floor(scores + h * bt->range + (lo - s0), hi - lo, m,
                                        bt->group_max + worker * ng, bt->group_keys + worker * ng);
            const uint64_t fk = (uint64_t)fathom_score_key(f) << 32;
            if (f > thr && fk) thr = f, strict = 0, eff = fk - 1, raise_floor(pl, eff);
        }
        for (uint64_t b = lo; b < hi;) {
            const uint64_t next = hi - b < SS_CHUNK ? hi : b + SS_CHUNK;
            c += bt->filter(scores + h * bt->range + (b - s0), (uint32_t)(next - b), thr, strict, b,
                            out + c);
            b = next;
            if (c > 2 * m) { /* keep the range's top m */
                top_m(out, c, m);
                c = m;
                const uint64_t v = min_u64(out, m);
                if (v > eff) {
                    strict = 1, thr = floor_threshold(v, &strict), eff = v;
                    raise_floor(pl, v - 1);
                }
            }
            /* what the head's other tasks have raised the floor to meanwhile */
            const uint64_t shared = atomic_load_explicit(&pl->floor, memory_order_relaxed);
            if (shared > eff) strict = 0, thr = floor_threshold(shared, &strict), eff = shared;
        }
        /* offer what may still enter the pool */
        const uint64_t floor = atomic_load_explicit(&pl->floor, memory_order_relaxed);
        uint64_t kept = 0;
        for (uint64_t j = 0; j < c; j++)
            if (out[j] > floor || floor == 0) out[kept++] = out[j];
        if (kept) pool_offer(pl, m, out, kept);
    }
    return FATHOM_OK;
}

/* Sorts x[0..n) ascending: four byte-wise counting passes through tmp[n]. */
static void sort_u32(uint32_t *x, uint64_t n, uint32_t *tmp) {
    for (unsigned shift = 0; shift < 32; shift += 8) {
        uint64_t count[257] = {0};
        for (uint64_t i = 0; i < n; i++) count[((x[i] >> shift) & 0xffu) + 1]++;
        for (unsigned b = 0; b < 256; b++) count[b + 1] += count[b];
        for (uint64_t i = 0; i < n; i++) tmp[count[(x[i] >> shift) & 0xffu]++] = x[i];
        memcpy(x, tmp, n * sizeof *x);
    }
}

static int ss_select_task(ss_batch *bt, uint32_t task) {
    uint32_t i = 0;
    while (task >= bt->items[i].group) task -= bt->items[i++].group;
    const fathom_scan_select_item *it = &bt->items[i];
    ss_item *si = &bt->st[i];
    spin_until(&si->scans_left, 0);
    if (atomic_load(&bt->failed)) return FATHOM_OK;
    const uint32_t h = task;
    uint32_t *idx = it->idx + (uint64_t)h * it->k;
    if (si->m == 0) { /* fathom_select scores nothing here */
        const float none = 0.0f;
        uint64_t work = 0;
        return fathom_select(&none, it->n, it->k, it->sink, it->local, &work, idx, &it->count[h]);
    }
    ss_pool *pl = &si->pools[h];
    FATHOM_CHECK(pl->size < si->m, FATHOM_ERR_STATE, "scan_select: %llu candidates for %llu",
                 (unsigned long long)pl->size, (unsigned long long)si->m);
    top_m(pl->v, pl->size, si->m);
    uint32_t n_out = 0;
    for (uint64_t p = 0; p < si->sink_end; p++) idx[n_out++] = (uint32_t)p;
    uint32_t *mid = idx + n_out;
    for (uint64_t j = 0; j < si->m; j++) mid[j] = ~(uint32_t)pl->v[j];
    sort_u32(mid, si->m, (uint32_t *)(pl->v + si->m));
    n_out += (uint32_t)si->m;
    for (uint64_t p = si->local_begin; p < it->n; p++) idx[n_out++] = (uint32_t)p;
    it->count[h] = n_out;
    return FATHOM_OK;
}

/* Every task of a call: plans, ranges, selections (see the top). */
static int ss_task(void *arg, uint32_t task, uint32_t worker) {
    ss_batch *bt = arg;
    int status = FATHOM_OK;
    if (task < bt->n_plan) {
        status = ps_plan_task(bt->plan, task);
        if (status != FATHOM_OK) atomic_store(&bt->failed, 1);
        atomic_fetch_sub_explicit(&bt->st[task].plan_left, 1, memory_order_release);
    } else if ((task -= bt->n_plan) < bt->n_scan) {
        ss_item *si = &bt->st[bt->tasks[task] >> 32];
        spin_until(&si->plan_left, 0);
        if (!atomic_load(&bt->failed)) status = ss_scan_task(bt, task, worker);
        if (status != FATHOM_OK) atomic_store(&bt->failed, 1);
        atomic_fetch_sub_explicit(&si->scans_left, 1, memory_order_release);
    } else
        status = ss_select_task(bt, task - bt->n_scan);
    return status;
}

/* The arguments of fathom_scan_select_parallel (who names the caller in the
 * messages); *range_tokens 0 becomes the default. */
static int ss_check(const fathom_scan_select_item *items, uint32_t count, uint64_t *range_tokens,
                    const char *who) {
    if (*range_tokens == 0) *range_tokens = 16384;
    FATHOM_CHECK_ARG(*range_tokens % FATHOM_BLOCK_TOKENS == 0 && *range_tokens <= UINT32_MAX,
                     "%s: range_tokens %llu is not a multiple of %d below 2^32", who,
                     (unsigned long long)*range_tokens, FATHOM_BLOCK_TOKENS);
    for (uint32_t i = 0; i < count; i++) {
        const fathom_scan_select_item *it = &items[i];
        FATHOM_CHECK_ARG(it->store || it->segments, "%s: item %u: store and segments are NULL", who,
                         i);
        if (!it->store)
            FATHOM_TRY(fathom_segments_check(it->segments, who));
        FATHOM_CHECK_ARG(it->depths, "%s: item %u: depths is NULL", who, i);
        FATHOM_CHECK_ARG(it->queries, "%s: item %u: queries is NULL", who, i);
        FATHOM_CHECK_ARG(it->idx, "%s: item %u: idx is NULL", who, i);
        FATHOM_CHECK_ARG(it->count, "%s: item %u: count is NULL", who, i);
        FATHOM_CHECK_ARG(it->group > 0, "%s: item %u: group is 0", who, i);
        FATHOM_CHECK_ARG(it->k > 0, "%s: item %u: k is 0", who, i);
        const uint64_t length =
            it->store ? fathom_store_length(it->store) : it->segments->length;
        FATHOM_CHECK_ARG(it->n > 0 && it->n <= length && it->n <= (uint64_t)UINT32_MAX + 1,
                         "%s: item %u: n = %llu not in 1..length %llu (at most 2^32)", who, i,
                         (unsigned long long)it->n, (unsigned long long)length);
    }
    return FATHOM_OK;
}

/* One call (arguments checked): the plans of plan (NULL: none), then the
 * scans and selections of items. */
static int ss_run(struct fathom_pool *pool, fathom_scan_kernel kernel,
                  const fathom_scan_select_item *items, uint32_t count, uint64_t range_tokens,
                  const ps_batch *plan) {
    uint64_t max_k = 0, max_group = 0;
    for (uint32_t i = 0; i < count; i++) {
        max_k = items[i].k > max_k ? items[i].k : max_k;
        max_group = items[i].group > max_group ? items[i].group : max_group;
    }
    const uint64_t cap = 2 * max_k + SS_CHUNK;
    const uint32_t threads = fathom_pool_threads(pool);
    ss_item *st = calloc(count, sizeof *st);
    uint64_t scratch_floats = 0, n_scan = 0, n_select = 0, pool_values = 0, max_ranges = 0;
    int ok = st && fathom_mul_u64(max_group, range_tokens, &scratch_floats);
    for (uint32_t i = 0; ok && i < count; i++) { /* the windows, as fathom_select */
        const fathom_scan_select_item *it = &items[i];
        ss_item *si = &st[i];
        const uint64_t n = it->n;
        si->sink_end = it->sink < n ? it->sink : n;
        si->local_begin = it->local < n ? n - it->local : 0;
        const uint64_t forced =
            si->local_begin > si->sink_end ? si->sink_end + (n - si->local_begin) : n;
        si->m = n > it->k && forced < it->k ? it->k - forced : 0;
        si->ranges = (n - 1) / range_tokens + 1;
        uint64_t values;
        if (si->m) {
            n_scan += si->ranges;
            ok = fathom_mul_u64(it->group, 2 * si->m + SS_CHUNK, &values) &&
                 fathom_add_u64(pool_values, values, &pool_values);
            max_ranges = si->ranges > max_ranges ? si->ranges : max_ranges;
        }
        n_select += it->group;
    }
    const uint32_t n_plan = plan ? count : 0;
    const uint64_t n_tasks = n_plan + n_scan + n_select;
    if (ok && (n_scan > UINT32_MAX || n_select > UINT32_MAX || n_tasks > UINT32_MAX)) {
        free(st);
        return fathom_fail(FATHOM_ERR_INVALID_ARG,
                           "scan_select: %llu tasks (plans, token ranges, heads), more than 2^32 - 1",
                           (unsigned long long)n_tasks);
    }
    uint64_t *tasks = NULL, *values = NULL, *buf = NULL, *group_keys = NULL;
    ss_pool *pools = NULL;
    float *scratch = NULL, *group_max = NULL;
    const uint64_t ng = floor_groups(range_tokens);
    if (ok) {
        tasks = fathom_alloc_array(n_scan ? n_scan : 1, sizeof *tasks);
        values = fathom_alloc_array(pool_values ? pool_values : 1, sizeof *values);
        uint64_t pool_bytes; /* sizeof *pools is a multiple of its 64-byte alignment */
        if (fathom_mul_u64(n_select ? n_select : 1, sizeof *pools, &pool_bytes) && pool_bytes <= SIZE_MAX)
            pools = aligned_alloc(_Alignof(ss_pool), (size_t)pool_bytes);
        buf = fathom_alloc_array((uint64_t)threads * cap, sizeof *buf);
        scratch = fathom_alloc_array((uint64_t)threads * scratch_floats, sizeof(float));
        group_max = fathom_alloc_array((uint64_t)threads * ng, sizeof(float));
        group_keys = fathom_alloc_array((uint64_t)threads * ng, sizeof(uint64_t));
        ok = tasks && values && pools && buf && scratch && group_max && group_keys;
    }
    int status = FATHOM_OK;
    if (!ok)
        status = fathom_fail(FATHOM_ERR_NOMEM, "scan_select: out of memory");
    else {
        uint64_t v_off = 0, h_off = 0, t = 0;
        for (uint32_t i = 0; i < count; i++) {
            st[i].pools = pools + h_off;
            atomic_init(&st[i].plan_left, plan != NULL);
            atomic_init(&st[i].scans_left, st[i].m ? (unsigned)st[i].ranges : 0u);
            for (uint32_t h = 0; h < items[i].group; h++) {
                ss_pool *pl = &st[i].pools[h];
                atomic_init(&pl->locked, 0u);
                atomic_init(&pl->floor, 0);
                pl->size = 0;
                pl->v = values + v_off;
                v_off += st[i].m ? 2 * st[i].m + SS_CHUNK : 0;
            }
            h_off += items[i].group;
        }
        for (uint64_t r = 0; r < max_ranges; r++) /* range-major */
            for (uint32_t i = 0; i < count; i++)
                if (st[i].m && r < st[i].ranges) tasks[t++] = (uint64_t)i << 32 | r;
        ss_batch batch = {kernel,    items,      st,      tasks,          range_tokens,
                          cap,       scratch,    buf,     scratch_floats, pick_filter(),
                          group_max, group_keys, plan,    n_plan,         (uint32_t)n_scan,
                          0};
        status = fathom_pool_run(pool, ss_task, &batch, (uint32_t)n_tasks);
    }
    free(tasks);
    free(values);
    free(pools);
    free(buf);
    free(scratch);
    free(group_max);
    free(group_keys);
    free(st);
    return status;
}

int fathom_scan_select_parallel(struct fathom_pool *pool, fathom_scan_kernel kernel,
                                const fathom_scan_select_item *items, uint32_t count,
                                uint64_t range_tokens) {
    FATHOM_CHECK_ARG(pool && items && count > 0, "scan_select: NULL pool or items, or count 0");
    FATHOM_TRY(ss_check(items, count, &range_tokens, "scan_select"));
    return ss_run(pool, kernel, items, count, range_tokens, NULL);
}

int fathom_plan_select_parallel(struct fathom_pool *pool, fathom_scan_kernel kernel,
                                const fathom_plan_select_item *items, uint32_t count,
                                uint64_t range_tokens) {
    FATHOM_CHECK_ARG(pool && items && count > 0, "plan_select: NULL pool or items, or count 0");
    fathom_scan_select_item *sel = fathom_calloc_array(count, sizeof *sel);
    FATHOM_CHECK(!sel, FATHOM_ERR_NOMEM, "plan_select: out of memory");
    uint32_t max_dim = 0;
    int status = FATHOM_OK;
    for (uint32_t i = 0; i < count && status == FATHOM_OK; i++) {
        const fathom_plan_select_item *it = &items[i];
        sel[i].segments = it->segments;
        sel[i].depths = it->depths;
        sel[i].queries = it->queries;
        sel[i].group = it->group;
        sel[i].n = it->n;
        sel[i].k = it->k;
        sel[i].sink = it->sink;
        sel[i].local = it->local;
        sel[i].idx = it->idx;
        sel[i].count = it->count;
        if (!it->segments)
            status = fathom_fail(FATHOM_ERR_INVALID_ARG, "plan_select: item %u: segments is NULL", i);
        else if ((status = fathom_segments_check(it->segments, "plan_select")) != FATHOM_OK)
            break;
        else if (!it->sum)
            status = fathom_fail(FATHOM_ERR_INVALID_ARG, "plan_select: item %u: sum is NULL", i);
        else if (!it->sum_sq)
            status = fathom_fail(FATHOM_ERR_INVALID_ARG, "plan_select: item %u: sum_sq is NULL", i);
        else if (it->budget < 1 || it->budget > (uint64_t)FATHOM_PLANES * it->segments->dim)
            status = fathom_fail(FATHOM_ERR_INVALID_ARG, "plan_select: item %u: budget %u not in 1..%llu",
                                 i, it->budget,
                                 (unsigned long long)FATHOM_PLANES * it->segments->dim);
        else
            max_dim = it->segments->dim > max_dim ? it->segments->dim : max_dim;
    }
    /* everything the scan and selection check, before any depths are written */
    if (status == FATHOM_OK) status = ss_check(sel, count, &range_tokens, "plan_select");
    float *var = NULL;
    double *g = NULL;
    if (status == FATHOM_OK) {
        var = fathom_alloc_array((uint64_t)count * max_dim, sizeof(float));
        g = fathom_alloc_array((uint64_t)count * max_dim, sizeof(double));
        if (!var || !g) status = fathom_fail(FATHOM_ERR_NOMEM, "plan_select: out of memory");
    }
    if (status == FATHOM_OK) {
        const ps_batch plan = {items, var, g, max_dim};
        status = ss_run(pool, kernel, sel, count, range_tokens, &plan);
    }
    free(var);
    free(g);
    free(sel);
    return status;
}

/* bench_scan — CPU scan throughput: today's kernel against the tiled one,
 * fathom:48 against the 4-bit channel scan of Double Sparsity (ds:32), on
 * the same stores, with real plans from real (synthetic Qwen3-8B) queries,
 * and the scaling with threads of a split over (head, token range) tasks.
 * The machine's memory read bandwidth is measured in the same run. Runs are
 * interleaved (A B A B ...) and each figure is the median of its repeats.
 *
 *   bench_scan [--context N] [--heads H] [--queries Q] [--repeats R]
 *              [--threads T] [--range TOKENS] [--json]
 *
 * --json: one JSON object on stdout (the table goes to stderr;
 * scripts/record-result adds the machine, date and commit).
 *
 * "old" is the untiled kernel of the widest instruction set this CPU runs
 * (what fathom_store_scan ran before the tiled kernels; one call per head, a
 * thread per head at most); "new" is fathom_store_scan_range with a tiled
 * kernel (--tiled auto|avx2|avx512|portable; auto: fathom_store_scan's),
 * whose scores are bit-identical (checked here before timing). Both run on
 * the library's pool (pool.h), one query step at a time: old with a task per
 * head, new through fathom_scan_parallel's (head, token range) tasks. Plane
 * bytes are those a scan
 * reads (planes and fp16 scales).
 *
 * The scan feeds a selection (k = 512, sink 4, local 32 per query head, as
 * bench_cuda_tier): "scan then select" runs fathom_scan_parallel into the
 * [head][G][n] scores, then fathom_select per query head on the pool;
 * "scan+select" is fathom_scan_select_parallel, which keeps only candidates
 * and never writes the scores out. Their selections are checked equal. The
 * fused path is also timed with every head alone in turn ("heads alone":
 * calls of one item each, the share of one (layer, KV head) pair that the
 * hybrid CUDA step gives the host), with their summed time over the time of
 * the call with all heads at once.
 *
 * --grouped: also times the grouped-table kernel (FATHOM_SCAN_GROUPED, an
 * opt-in mode whose scores differ from the exact ones in rounding) on the
 * same scans, and counts how many of its top-k rows equal the exact
 * kernel's.
 *
 * --int8: the same for the integer ("VNNI") kernel (FATHOM_SCAN_INT8, an
 * opt-in mode whose scores are quantized approximations of the exact ones),
 * plus its thread scaling and its fused scan + select
 * (fathom_scan_select_parallel with the int8 kernel). --int16: the same
 * with the int16 variant (FATHOM_SCAN_INT16) in its place.
 *
 * --segment-blocks S: the stores' segment size (default the store's, 1024
 * blocks; the KV tier's sessions default to 64). */
#include "bench_fma.h"
#include "cpu.h"
#include "fathom.h"
#include "pool.h"
#include "store_internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_HEADS 8
#define MAX_THREADS 256
#define MAX_REPEATS 64

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n) {
    double s[MAX_REPEATS];
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

/* ---- timing a pool run ---- */

/* Runs task(ctx, i, worker) for i < tasks on the pool; returns seconds. */
static double pool_time(fathom_pool *pool, fathom_task_fn task, void *ctx, uint32_t tasks) {
    double t0 = now_s();
    int st = fathom_pool_run(pool, task, ctx, tasks);
    double dt = now_s() - t0;
    if (st < 0) fprintf(stderr, "bench_scan: %s: %s\n", fathom_status_name(st), fathom_last_error());
    return st < 0 ? NAN : dt;
}

/* ---- memory read bandwidth: sum of uint64 over a buffer larger than cache ---- */

typedef struct read_ctx {
    const uint64_t *p;
    uint64_t per_task;
    _Atomic uint64_t sink;
} read_ctx;

static int read_task(void *c_, uint32_t i, uint32_t thread) {
    (void)thread;
    read_ctx *c = c_;
    const uint64_t *p = c->p + i * c->per_task;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (uint64_t k = 0; k + 4 <= c->per_task; k += 4) {
        s0 += p[k];
        s1 += p[k + 1];
        s2 += p[k + 2];
        s3 += p[k + 3];
    }
    atomic_fetch_add(&c->sink, s0 + s1 + s2 + s3);
    return FATHOM_OK;
}

static double read_bandwidth(fathom_pool *pool, const uint64_t *buf, uint64_t words) {
    const uint32_t threads = fathom_pool_threads(pool);
    read_ctx c = {buf, words / threads, 0};
    double dt = pool_time(pool, read_task, &c, threads);
    return (double)(c.per_task * threads * 8) / dt;
}

/* ---- multiply-adds per ns per thread, one thread alone and all at once ----
 * The scan's rate per thread can fall with the thread count for reasons
 * outside the code (a lower clock with every core running wide vectors);
 * this rate, timed the same way, shows how much. */

#ifdef FATHOM_X86
typedef struct fma_ctx {
    long n;
    double rate[MAX_THREADS]; /* per worker */
} fma_ctx;

static int fma_task(void *c_, uint32_t i, uint32_t worker) {
    (void)i;
    fma_ctx *c = c_;
    c->rate[worker] = bench_fma_rate_zmm(c->n);
    return FATHOM_OK;
}
#endif

/* 16-lane multiply-adds per ns per thread, the mean over the pool's threads
 * each running one task at once (0 without AVX-512). */
static double fma_rate_per_thread(fathom_pool *pool) {
#ifdef FATHOM_X86
    if (!fathom_cpu_has(FATHOM_CPU_AVX512)) return 0;
    static fma_ctx c;
    c.n = 4000000;
    const uint32_t t = fathom_pool_threads(pool);
    for (int warm = 0; warm < 2; warm++) /* the second run is the one kept */
        if (isnan(pool_time(pool, fma_task, &c, t))) return 0;
    double sum = 0;
    for (uint32_t i = 0; i < t; i++) sum += c.rate[i];
    return sum / t;
#else
    (void)pool;
    return 0;
#endif
}

/* ---- the scans ---- */

typedef struct scan_ctx {
    fathom_scan_kernel old_kernel, new_kernel;
    uint32_t heads, queries, G, d;
    uint64_t n, range; /* tokens per task of the tiled split */
    fathom_store **stores;
    const float *q;           /* [head][G][query][d] as the source gives them */
    const uint8_t *depths;    /* [head][query][d], or */
    const uint8_t *ds_depths; /* [head][d] (one set for every query) */
    float *scores;            /* [head][G][n] */
    float *qg;                /* [head][query][G][d] staged groups */
    int status;
} scan_ctx;

static const uint8_t *task_depths(const scan_ctx *c, uint32_t h, uint32_t p) {
    return c->ds_depths ? c->ds_depths + (size_t)h * c->d : c->depths + ((size_t)h * c->queries + p) * c->d;
}

/* old: per query step, one task per head: fathom_store_scan_with over all n */
typedef struct old_step {
    scan_ctx *c;
    uint32_t p;
} old_step;

static int old_task(void *s_, uint32_t h, uint32_t worker) {
    (void)worker;
    const old_step *s = s_;
    const scan_ctx *c = s->c;
    const float *qg = c->qg + ((size_t)h * c->queries + s->p) * c->G * c->d;
    return fathom_store_scan_with(c->old_kernel, c->stores[h], task_depths(c, h, s->p), qg, c->G, c->n,
                                  c->scores + (size_t)h * c->G * c->n, NULL);
}

static double run_old(scan_ctx *c, fathom_pool *pool) {
    double total = 0;
    for (uint32_t p = 0; p < c->queries; p++) {
        old_step s = {c, p};
        total += pool_time(pool, old_task, &s, c->heads);
    }
    return total;
}

/* new: query step p through fathom_scan_parallel over (head, token range) tasks;
 * returns 0 (the caller times it) */
static double run_new_step(scan_ctx *c, fathom_pool *pool, uint32_t p) {
    fathom_scan_item items[MAX_HEADS];
    for (uint32_t h = 0; h < c->heads; h++)
        items[h] = (fathom_scan_item){c->stores[h], task_depths(c, h, p),
                                      c->qg + ((size_t)h * c->queries + p) * c->G * c->d, c->G, c->n,
                                      c->scores + (size_t)h * c->G * c->n};
    int st = fathom_scan_parallel(pool, c->new_kernel, items, c->heads, c->range);
    if (st < 0) c->status = st;
    return 0;
}

static double run_new(scan_ctx *c, fathom_pool *pool) {
    double total = 0;
    for (uint32_t p = 0; p < c->queries; p++) {
        double t0 = now_s();
        run_new_step(c, pool, p);
        total += now_s() - t0;
    }
    return total;
}

/* ---- scan + select: unfused (scores written, then fathom_select) and fused ---- */

#define SEL_K 512
#define SEL_SINK 4
#define SEL_LOCAL 32

typedef struct sel_ctx {
    scan_ctx *c;
    uint32_t *idx;    /* [head][G][SEL_K] */
    uint32_t *count;  /* [head][G] */
    uint64_t **work;  /* [threads] fathom_select work arrays */
} sel_ctx;

static int select_task(void *s_, uint32_t t, uint32_t worker) {
    const sel_ctx *s = s_;
    const scan_ctx *c = s->c;
    return fathom_select(c->scores + (size_t)t * c->n, c->n, SEL_K, SEL_SINK, SEL_LOCAL, s->work[worker],
                         s->idx + (size_t)t * SEL_K, s->count + t);
}

static double run_select(sel_ctx *s, fathom_pool *pool, int fused) {
    scan_ctx *c = s->c;
    fathom_scan_select_item items[MAX_HEADS];
    double total = 0;
    for (uint32_t p = 0; p < c->queries; p++) {
        double t0 = now_s();
        int st;
        if (fused) {
            for (uint32_t h = 0; h < c->heads; h++)
                items[h] = (fathom_scan_select_item){c->stores[h], task_depths(c, h, p),
                                                     c->qg + ((size_t)h * c->queries + p) * c->G * c->d,
                                                     c->G, c->n, SEL_K, SEL_SINK, SEL_LOCAL,
                                                     s->idx + (size_t)h * c->G * SEL_K, s->count + h * c->G,
                                                     NULL};
            st = fathom_scan_select_parallel(pool, c->new_kernel, items, c->heads, c->range);
        } else {
            total -= run_new_step(c, pool, p);
            st = c->status < 0 ? c->status : fathom_pool_run(pool, select_task, s, c->heads * c->G);
        }
        total += now_s() - t0;
        if (st < 0) c->status = st;
    }
    return total;
}

/* The fused path once per head, each a call of one item; their summed time. */
static double run_select_alone(sel_ctx *s, fathom_pool *pool) {
    scan_ctx *c = s->c;
    double total = 0;
    for (uint32_t h = 0; h < c->heads; h++) {
        scan_ctx one = *c;
        one.heads = 1;
        one.stores = c->stores + h;
        if (one.depths) one.depths += (size_t)h * c->queries * c->d;
        if (one.ds_depths) one.ds_depths += (size_t)h * c->d;
        one.qg = c->qg + (size_t)h * c->queries * c->G * c->d;
        sel_ctx alone = *s;
        alone.c = &one;
        total += run_select(&alone, pool, 1);
        if (one.status < 0) c->status = one.status;
    }
    return total;
}

static int fail(const char *what, int st) {
    fprintf(stderr, "bench_scan: %s: %s: %s\n", what, fathom_status_name(st), fathom_last_error());
    return 1;
}

static void cpu_model(char *out, size_t cap) {
    snprintf(out, cap, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            char *v = strchr(line, ':');
            if (v) {
                v += 1 + (v[1] == ' ');
                v[strcspn(v, "\n")] = 0;
                snprintf(out, cap, "%s", v);
            }
            break;
        }
    fclose(f);
}

/* Plane bytes one scan of each (head, query) reads, summed. */
static double plan_bytes(const scan_ctx *c) {
    double total = 0;
    for (uint32_t h = 0; h < c->heads; h++)
        for (uint32_t p = 0; p < c->queries; p++) {
            const uint8_t *dep = task_depths(c, h, p);
            uint64_t per_block = 0;
            for (uint32_t j = 0; j < c->d; j++)
                if (dep[j]) per_block += 8u * dep[j] + 2u;
            total += (double)(per_block * ((c->n + 63) / 64));
        }
    return total;
}

/* Checks the tiled scan's scores against fathom_store_scan's, bit for bit. */
static int check_identical(scan_ctx *c) {
    float *a = malloc((size_t)c->G * c->n * sizeof(float));
    if (!a) return -1;
    int same = 1;
    for (uint32_t h = 0; h < c->heads && same; h++) {
        const float *qg = c->qg + (size_t)h * c->queries * c->G * c->d;
        float *b = c->scores + (size_t)h * c->G * c->n;
        if (fathom_store_scan_with(c->old_kernel, c->stores[h], task_depths(c, h, 0), qg, c->G, c->n, a,
                                   NULL) < 0 ||
            fathom_store_scan_range(c->new_kernel, c->stores[h], task_depths(c, h, 0), qg, c->G, 0, c->n, b,
                                    c->n, NULL) < 0)
            same = -1;
        else
            same = !memcmp(a, b, (size_t)c->G * c->n * sizeof(float));
    }
    free(a);
    return same;
}

int main(int argc, char **argv) {
    uint64_t context = 32768, range = 16384;
    uint32_t heads = 8, queries = 16, repeats = 7, threads = 2, segment_blocks = 0;
    int json = 0, grouped = 0, int8 = 0;
    const char *tiled = "auto";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) { json = 1; continue; }
        if (!strcmp(a, "--grouped")) { grouped = 1; continue; }
        if (!strcmp(a, "--int8")) { int8 = 1; continue; }
        if (!strcmp(a, "--int16")) { int8 = 2; continue; }
        if (!v) a = "";
        if (!strcmp(a, "--context")) context = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--heads")) heads = (uint32_t)atoi(v);
        else if (!strcmp(a, "--queries")) queries = (uint32_t)atoi(v);
        else if (!strcmp(a, "--repeats")) repeats = (uint32_t)atoi(v);
        else if (!strcmp(a, "--threads")) threads = (uint32_t)atoi(v);
        else if (!strcmp(a, "--range")) range = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--segment-blocks")) segment_blocks = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--tiled")) tiled = v;
        else {
            fprintf(stderr, "usage: bench_scan [--context N] [--heads H<=8] [--queries Q] [--repeats R<=64] "
                            "[--threads T] [--range TOKENS (multiple of 64)] [--segment-blocks S] [--tiled auto|avx2|avx512|portable] [--grouped] [--int8|--int16] [--json]\n");
            return 2;
        }
        i++;
    }
    const fathom_scan_kernel old_kernel = fathom_scan_kernel_available(FATHOM_SCAN_AVX512) ? FATHOM_SCAN_AVX512
                                          : fathom_scan_kernel_available(FATHOM_SCAN_AVX2)   ? FATHOM_SCAN_AVX2
                                                                                           : FATHOM_SCAN_PORTABLE;
    fathom_scan_kernel new_kernel = FATHOM_SCAN_AUTO;
    if (!strcmp(tiled, "avx2")) new_kernel = FATHOM_SCAN_TILED_AVX2;
    else if (!strcmp(tiled, "avx512")) new_kernel = FATHOM_SCAN_TILED_AVX512;
    else if (!strcmp(tiled, "portable")) new_kernel = FATHOM_SCAN_TILED_PORTABLE;
    else if (strcmp(tiled, "auto")) range = 0; /* rejected below */
    if (!fathom_scan_kernel_available(new_kernel)) {
        fprintf(stderr, "bench_scan: skipped: the tiled %s kernel does not run on this CPU\n", tiled);
        return 77;
    }
    if (!context || !heads || heads > MAX_HEADS || !queries || !repeats || repeats > MAX_REPEATS || !threads ||
        threads > MAX_THREADS || !range || range % 64) {
        fprintf(stderr, "bench_scan: bad arguments\n");
        return 2;
    }

    fathom_source *src;
    int st = fathom_synth_open(&src, "qwen3-8b", context, queries, 1);
    if (st < 0) return fail("synthetic source", st);
    fathom_source_info info;
    fathom_source_get_info(src, &info);
    const uint32_t d = info.dim, G = info.q_heads / info.kv_heads;
    if (heads > info.kv_heads || d > 512) return fail("source shape", FATHOM_ERR_UNSUPPORTED);
    float *q = malloc((size_t)info.q_heads * queries * d * sizeof(float));
    float *k = malloc((size_t)info.kv_heads * context * d * sizeof(float));
    float *qg = malloc((size_t)heads * queries * G * d * sizeof(float));
    /* 64-byte rows: a large scan writes its scores with non-temporal stores (scan.c) */
    float *scores = aligned_alloc(64, ((size_t)heads * G * context * sizeof(float) + 63) / 64 * 64);
    uint8_t *fathom_depths = malloc((size_t)heads * queries * d);
    uint8_t *ds_depths = calloc((size_t)heads, d);
    if (!q || !k || !qg || !scores || !fathom_depths || !ds_depths) return fail("allocation", FATHOM_ERR_NOMEM);
    if ((st = fathom_source_layer(src, info.layers / 2, q, k, NULL)) < 0) return fail("layer", st);

    /* One store per KV head: heads * 68 B * n, past the last-level cache at large n. */
    fathom_store *stores[MAX_HEADS];
    for (uint32_t h = 0; h < heads; h++) {
        if ((st = fathom_store_create(&stores[h], d, segment_blocks, NULL)) < 0) return fail("store", st);
        if ((st = fathom_store_append(stores[h], k + (size_t)h * context * d, context)) < 0) return fail("append", st);
        float var[512];
        double g[512], stat[512];
        fathom_store_variance(stores[h], var);
        for (uint32_t p = 0; p < queries; p++)
            for (uint32_t hh = 0; hh < G; hh++)
                memcpy(qg + (((size_t)h * queries + p) * G + hh) * d, q + (((size_t)h * G + hh) * queries + p) * d,
                       d * sizeof(float));
        /* ds:32: channels by mean|q| * mean|k| over this window. */
        for (uint32_t j = 0; j < d; j++) {
            double mq = 0, mk = 0;
            for (uint32_t i = 0; i < G * queries; i++) mq += fabs(qg[((size_t)h * queries * G + i) * d + j]);
            for (uint64_t i = 0; i < context; i++) mk += fabs(k[((size_t)h * context + i) * d + j]);
            stat[j] = mq * mk;
        }
        for (int c = 0; c < 32; c++) {
            int best = -1;
            for (uint32_t j = 0; j < d; j++)
                if (!ds_depths[h * d + j] && (best < 0 || stat[j] > stat[best])) best = (int)j;
            ds_depths[h * d + best] = 4;
        }
        /* fathom:48: a real plan per query group. */
        for (uint32_t p = 0; p < queries; p++) {
            fathom_importance(d, G, qg + ((size_t)h * queries + p) * G * d, var, g);
            fathom_water_fill(d, g, 48, fathom_depths + ((size_t)h * queries + p) * d, NULL);
        }
    }
    free(k);
    const uint32_t store_segment_blocks = fathom_store_segment_blocks(stores[0]);

    scan_ctx cf = {old_kernel, new_kernel, heads, queries, G, d, context, range, stores, q, fathom_depths, NULL, scores, qg, 0};
    scan_ctx cd = cf;
    cd.depths = NULL;
    cd.ds_depths = ds_depths;
    int same_f = check_identical(&cf), same_d = check_identical(&cd);
    if (same_f < 0 || same_d < 0) return fail("scan", FATHOM_ERR_INVALID_ARG);
    const double bytes_f = plan_bytes(&cf), bytes_d = plan_bytes(&cd);
    double bits_f = 0;
    for (uint32_t i = 0; i < heads * queries; i++) bits_f += fathom_depth_bits(d, fathom_depths + (size_t)i * d);
    bits_f /= (double)heads * queries;

    /* thread counts for the scaling table: 1, 2, 4, ... and T */
    uint32_t tc[16], ntc = 0;
    for (uint32_t t = 1; t < threads && ntc < 15; t *= 2) tc[ntc++] = t;
    tc[ntc++] = threads;

    size_t words = (size_t)1 << 27; /* 1 GiB */
    uint64_t *buf = malloc(words * 8);
    if (!buf) return fail("bandwidth buffer", FATHOM_ERR_NOMEM);
    for (size_t i = 0; i < words; i++) buf[i] = i;

    static double fma1[MAX_REPEATS], fmaT[MAX_REPEATS];
    static double bw1[MAX_REPEATS], bwT[MAX_REPEATS], old_f[MAX_REPEATS], old_d[MAX_REPEATS], new_f[MAX_REPEATS],
        new_d[MAX_REPEATS], sc_new[16][MAX_REPEATS], sc_old[16][MAX_REPEATS], sc_sel[16][MAX_REPEATS],
        sc_fused[16][MAX_REPEATS], grp_f[MAX_REPEATS], grp_d[MAX_REPEATS], sc_grp[16][MAX_REPEATS];
    /* --grouped: the same scans with the grouped-table kernel (other scores) */
    scan_ctx gf = cf, gd = cd;
    gf.new_kernel = gd.new_kernel = FATHOM_SCAN_GROUPED;
    double agree = 0, agree_min = 1, agree8 = 0, agree8_min = 1;
    scan_ctx i8f = cf, i8d = cd;
    const fathom_scan_kernel int_kernel = int8 == 2 ? FATHOM_SCAN_INT16 : FATHOM_SCAN_INT8;
    const char *iname = int8 == 2 ? "int16" : "int8";
    i8f.new_kernel = i8d.new_kernel = int_kernel;
    for (int mode = 0; mode < 2; mode++) {
        if (mode == 0 ? !grouped : !int8) continue;
        const fathom_scan_kernel other = mode == 0 ? FATHOM_SCAN_GROUPED : int_kernel;
        double *am = mode == 0 ? &agree : &agree8, *amin = mode == 0 ? &agree_min : &agree8_min;
        /* top-k agreement with the exact scores, query group 0, every head and query */
        float *gs = malloc((size_t)G * context * sizeof(float));
        float *es = malloc((size_t)G * context * sizeof(float));
        uint64_t *wk = malloc(fathom_select_work_size(context));
        uint32_t ia[SEL_K], ib[SEL_K], na, nb;
        if (!gs || !es || !wk) return fail("allocation", FATHOM_ERR_NOMEM);
        for (uint32_t h = 0; h < heads; h++) {
            const float *qh = qg + (size_t)h * queries * G * d;
            if ((st = fathom_store_scan_range(new_kernel, stores[h], task_depths(&cf, h, 0), qh, G, 0, context,
                                              es, context, NULL)) < 0 ||
                (st = fathom_store_scan_range(other, stores[h], task_depths(&cf, h, 0), qh, G, 0,
                                              context, gs, context, NULL)) < 0)
                return fail(mode == 0 ? "grouped scan" : "int8 scan", st);
            for (uint32_t g = 0; g < G; g++) {
                fathom_select(es + (size_t)g * context, context, SEL_K, SEL_SINK, SEL_LOCAL, wk, ia, &na);
                fathom_select(gs + (size_t)g * context, context, SEL_K, SEL_SINK, SEL_LOCAL, wk, ib, &nb);
                uint32_t same = 0; /* both ascending: a merge */
                for (uint32_t x = 0, y = 0; x < na && y < nb;)
                    if (ia[x] == ib[y]) same++, x++, y++;
                    else if (ia[x] < ib[y]) x++;
                    else y++;
                const double f = na ? (double)same / na : 1;
                *am += f / (heads * G);
                if (f < *amin) *amin = f;
            }
        }
        free(gs);
        free(es);
        free(wk);
    }
    /* scan + select: selections of the fused path against the unfused one */
    sel_ctx sel = {&cf, malloc((size_t)heads * G * SEL_K * sizeof(uint32_t)),
                   malloc((size_t)heads * G * sizeof(uint32_t)), calloc(threads, sizeof(uint64_t *))};
    uint32_t *idx_ref = malloc((size_t)heads * G * SEL_K * sizeof(uint32_t));
    uint32_t *count_ref = malloc((size_t)heads * G * sizeof(uint32_t));
    if (!sel.idx || !sel.count || !sel.work || !idx_ref || !count_ref) return fail("allocation", FATHOM_ERR_NOMEM);
    for (uint32_t t = 0; t < threads; t++)
        if (!(sel.work[t] = malloc(fathom_select_work_size(context)))) return fail("allocation", FATHOM_ERR_NOMEM);
    fathom_pool *pools[16];
    for (uint32_t i = 0; i < ntc; i++)
        if ((st = fathom_pool_create(&pools[i], tc[i])) < 0) return fail("pool", st);
    /* --int8: the fused scan + select with the int8 kernel */
    sel_ctx sel8 = {&i8f, malloc((size_t)heads * G * SEL_K * sizeof(uint32_t)),
                    malloc((size_t)heads * G * sizeof(uint32_t)), sel.work};
    if (!sel8.idx || !sel8.count) return fail("allocation", FATHOM_ERR_NOMEM);
    static double i8_f[MAX_REPEATS], i8_d[MAX_REPEATS], sc_i8[16][MAX_REPEATS], sc_i8sel[16][MAX_REPEATS];
    /* the fused scan + select of every head alone, both kernels */
    static double sc_one[16][MAX_REPEATS], sc_i8one[16][MAX_REPEATS];
    int same_sel = 1;
    {
        const uint32_t saved = cf.queries;
        cf.queries = 1; /* query group 0 */
        run_select(&sel, pools[ntc - 1], 0);
        memcpy(idx_ref, sel.idx, (size_t)heads * G * SEL_K * sizeof(uint32_t));
        memcpy(count_ref, sel.count, (size_t)heads * G * sizeof(uint32_t));
        run_select(&sel, pools[ntc - 1], 1);
        same_sel = !memcmp(idx_ref, sel.idx, (size_t)heads * G * SEL_K * sizeof(uint32_t)) &&
                   !memcmp(count_ref, sel.count, (size_t)heads * G * sizeof(uint32_t));
        cf.queries = saved;
    }
    for (uint32_t r = 0; r < repeats; r++) {
        bw1[r] = read_bandwidth(pools[0], buf, words);
        bwT[r] = read_bandwidth(pools[ntc - 1], buf, words);
        fma1[r] = fma_rate_per_thread(pools[0]);
        fmaT[r] = fma_rate_per_thread(pools[ntc - 1]);
        old_f[r] = run_old(&cf, pools[0]);
        new_f[r] = run_new(&cf, pools[0]);
        old_d[r] = run_old(&cd, pools[0]);
        new_d[r] = run_new(&cd, pools[0]);
        if (grouped) {
            grp_f[r] = run_new(&gf, pools[0]);
            grp_d[r] = run_new(&gd, pools[0]);
        }
        if (int8) {
            i8_f[r] = run_new(&i8f, pools[0]);
            i8_d[r] = run_new(&i8d, pools[0]);
        }
        for (uint32_t i = 0; i < ntc; i++) {
            if (grouped) sc_grp[i][r] = run_new(&gf, pools[i]);
            if (int8) {
                sc_i8[i][r] = run_new(&i8f, pools[i]);
                sc_i8sel[i][r] = run_select(&sel8, pools[i], 1);
                sc_i8one[i][r] = run_select_alone(&sel8, pools[i]);
            }
            sc_new[i][r] = run_new(&cf, pools[i]);
            sc_old[i][r] = run_old(&cf, pools[i]);
            sc_sel[i][r] = run_select(&sel, pools[i], 0);
            sc_fused[i][r] = run_select(&sel, pools[i], 1);
            sc_one[i][r] = run_select_alone(&sel, pools[i]);
        }
    }
    for (uint32_t i = 0; i < ntc; i++) fathom_pool_free(pools[i]);
    if (cf.status < 0 || cd.status < 0) return fail("scan", cf.status < 0 ? cf.status : cd.status);
    if (gf.status < 0 || gd.status < 0) return fail("grouped scan", gf.status < 0 ? gf.status : gd.status);
    if (i8f.status < 0 || i8d.status < 0) return fail(iname, i8f.status < 0 ? i8f.status : i8d.status);
    const double t8f = int8 ? median(i8_f, (int)repeats) : 0, t8d = int8 ? median(i8_d, (int)repeats) : 0;
    double s8[16], s8sel[16], s8one[16], sone[16];
    for (uint32_t i = 0; i < ntc; i++) {
        s8[i] = int8 ? median(sc_i8[i], (int)repeats) : 0;
        s8sel[i] = int8 ? median(sc_i8sel[i], (int)repeats) : 0;
        s8one[i] = int8 ? median(sc_i8one[i], (int)repeats) : 0;
        sone[i] = median(sc_one[i], (int)repeats);
    }
    const double b1 = median(bw1, (int)repeats), bT = median(bwT, (int)repeats);
    const double f1 = median(fma1, (int)repeats), fT = median(fmaT, (int)repeats);
    const double tof = median(old_f, (int)repeats), tnf = median(new_f, (int)repeats);
    const double tod = median(old_d, (int)repeats), tnd = median(new_d, (int)repeats);
    const double tgf = grouped ? median(grp_f, (int)repeats) : 0, tgd = grouped ? median(grp_d, (int)repeats) : 0;
    double sn[16], so[16], ss[16], sf[16], sg[16];
    for (uint32_t i = 0; i < ntc; i++) {
        sg[i] = grouped ? median(sc_grp[i], (int)repeats) : 0;
        sn[i] = median(sc_new[i], (int)repeats), so[i] = median(sc_old[i], (int)repeats);
        ss[i] = median(sc_sel[i], (int)repeats), sf[i] = median(sc_fused[i], (int)repeats);
    }
    const double Q = queries;
    char cpu[256];
    cpu_model(cpu, sizeof cpu);
    static const char *isa[] = {"auto", "reference", "portable", "avx2", "avx512", "portable", "avx2", "avx512"};
    /* AUTO runs the widest tiled kernel this CPU runs (scan.c's pick_tiled) */
    const fathom_scan_kernel auto_kernel = fathom_scan_kernel_available(FATHOM_SCAN_TILED_AVX512) ? FATHOM_SCAN_TILED_AVX512
                                           : fathom_scan_kernel_available(FATHOM_SCAN_TILED_AVX2) ? FATHOM_SCAN_TILED_AVX2
                                                                                                   : FATHOM_SCAN_TILED_PORTABLE;
    const char *kern = isa[new_kernel == FATHOM_SCAN_AUTO ? auto_kernel : new_kernel];
    /* how the AVX-512 kernel forms its values (scan.c's pick_tiled) */
    const char *avx512_values = fathom_scan_avx512_values();
    const char *old_isa = isa[old_kernel];
    /* per core: plane bytes / s on one thread; all: on the largest thread count */
    const double pc_old = bytes_f / tof, pc_new = bytes_f / tnf, all_new = bytes_f / sn[ntc - 1];

    if (json) {
        /* bench, scans and ratio_fathom_to_ds keep the schema of the recorded
         * bench-scan table (the untiled kernel, fathom_store_scan); the rest adds
         * the tiled kernel, the ratios and the thread scaling */
        const char *names[2] = {"fathom:48", "ds:32"};
        const double bits[2] = {bits_f, fathom_depth_bits(d, ds_depths)}, bytes[2] = {bytes_f, bytes_d},
                     t_old[2] = {tof, tod}, t_new[2] = {tnf, tnd};
        printf("{\"bench\":\"bench_scan\",\"source\":\"qwen3-8b\",\"cpu\":\"%s\",\"tiled_isa\":\"%s\","
               "\"old_isa\":\"%s\",\"context\":%llu,\"heads\":%u,\"group\":%u,\"queries\":%u,\"repeats\":%u,\"threads\":%u,"
               "\"range_tokens\":%llu,\"segment_blocks\":%u,\"read_GBps_1core\":%.3f,\"read_GBps_threads\":%.3f,"
               "\"identical_scores\":%s,\"avx512_values\":\"%s\",\"fma_zmm_per_ns_1thread\":%.3f,"
               "\"fma_zmm_per_ns_per_thread_all\":%.3f,",
               cpu, kern, old_isa, (unsigned long long)context, heads, G, queries, repeats, threads,
               (unsigned long long)range, store_segment_blocks, b1 / 1e9, bT / 1e9,
               same_f && same_d ? "true" : "false",
               avx512_values, f1, fT);
        for (int tl = 0; tl < 2; tl++) {
            printf("\"%s\":[", tl ? "scans_tiled" : "scans");
            for (int s = 0; s < 2; s++) {
                const double t = tl ? t_new[s] : t_old[s];
                printf("%s{\"name\":\"%s\",\"bits_per_token\":%.3f,\"plane_MB_per_step\":%.4f,"
                       "\"ms_per_step\":%.4f,\"plane_GBps_per_core\":%.4f,\"of_1core_read_pct\":%.2f}",
                       s ? "," : "", names[s], bits[s], bytes[s] / 1e6 / Q, 1e3 * t / Q, bytes[s] / t / 1e9,
                       100 * bytes[s] / t / b1);
            }
            printf("],");
        }
        printf("\"ratio_fathom_to_ds\":{\"bytes\":%.4f,\"time\":%.4f,\"throughput\":%.4f},"
               "\"ratio_fathom_to_ds_tiled\":{\"bytes\":%.4f,\"time\":%.4f,\"throughput\":%.4f},"
               "\"ratio_tiled_to_old_fathom_per_core\":%.4f,\"scaling_fathom\":[",
               bytes_f / bytes_d, tof / tod, (bytes_f / tof) / (bytes_d / tod), bytes_f / bytes_d, tnf / tnd,
               (bytes_f / tnf) / (bytes_d / tnd), pc_new / pc_old);
        for (uint32_t i = 0; i < ntc; i++)
            printf("%s{\"threads\":%u,\"tiled_GBps\":%.4f,\"tiled_GBps_per_thread\":%.4f,\"old_GBps\":%.4f}",
                   i ? "," : "", tc[i], bytes_f / sn[i] / 1e9, bytes_f / sn[i] / 1e9 / tc[i],
                   bytes_f / so[i] / 1e9);
        printf("],\"scan_select\":{\"k\":%d,\"sink\":%d,\"local\":%d,\"identical_selections\":%s,"
               "\"scaling\":[",
               SEL_K, SEL_SINK, SEL_LOCAL, same_sel ? "true" : "false");
        for (uint32_t i = 0; i < ntc; i++)
            printf("%s{\"threads\":%u,\"scan_then_select_ms\":%.4f,\"scan_select_ms\":%.4f,"
                   "\"scan_then_select_GBps\":%.4f,\"scan_select_GBps\":%.4f,"
                   "\"heads_alone_scan_select_ms\":%.4f,\"heads_alone_scan_select_GBps\":%.4f,"
                   "\"heads_alone_over_together\":%.4f}",
                   i ? "," : "", tc[i], 1e3 * ss[i] / Q, 1e3 * sf[i] / Q, bytes_f / ss[i] / 1e9,
                   bytes_f / sf[i] / 1e9, 1e3 * sone[i] / Q, bytes_f / sone[i] / 1e9, sone[i] / sf[i]);
        printf("]},");
        if (grouped) {
            printf("\"grouped\":{\"fathom_ms_per_step\":%.4f,\"ds_ms_per_step\":%.4f,"
                   "\"fathom_GBps_per_core\":%.4f,\"ds_GBps_per_core\":%.4f,"
                   "\"ratio_grouped_fathom_to_exact_ds\":%.4f,\"ratio_grouped_fathom_to_grouped_ds\":%.4f,"
                   "\"ratio_grouped_to_old_fathom_per_core\":%.4f,\"ratio_grouped_to_tiled_fathom\":%.4f,"
                   "\"topk_agreement_mean\":%.6f,\"topk_agreement_min\":%.6f,\"scaling\":[",
                   1e3 * tgf / Q, 1e3 * tgd / Q, bytes_f / tgf / 1e9, bytes_d / tgd / 1e9, tgf / tnd, tgf / tgd,
                   (bytes_f / tgf) / pc_old, tgf / tnf, agree, agree_min);
            for (uint32_t i = 0; i < ntc; i++)
                printf("%s{\"threads\":%u,\"GBps\":%.4f}", i ? "," : "", tc[i], bytes_f / sg[i] / 1e9);
            printf("]},");
        }
        if (int8) {
            printf("\"%s\":{\"fathom_ms_per_step\":%.4f,\"ds_ms_per_step\":%.4f,"
                   "\"fathom_GBps_per_core\":%.4f,\"ds_GBps_per_core\":%.4f,"
                   "\"ratio_int8_fathom_to_exact_ds\":%.4f,\"ratio_int8_fathom_to_int8_ds\":%.4f,"
                   "\"ratio_int8_to_old_fathom_per_core\":%.4f,\"ratio_int8_to_tiled_fathom\":%.4f,"
                   "\"topk_agreement_mean\":%.6f,\"topk_agreement_min\":%.6f,\"scaling\":[",
                   iname, 1e3 * t8f / Q, 1e3 * t8d / Q, bytes_f / t8f / 1e9, bytes_d / t8d / 1e9, t8f / tnd, t8f / t8d,
                   (bytes_f / t8f) / pc_old, t8f / tnf, agree8, agree8_min);
            for (uint32_t i = 0; i < ntc; i++)
                printf("%s{\"threads\":%u,\"GBps\":%.4f,\"scan_select_GBps\":%.4f,"
                       "\"heads_alone_scan_select_GBps\":%.4f,\"heads_alone_over_together\":%.4f}",
                       i ? "," : "", tc[i], bytes_f / s8[i] / 1e9, bytes_f / s8sel[i] / 1e9,
                       bytes_f / s8one[i] / 1e9, s8one[i] / s8sel[i]);
            printf("]},");
        }
        printf("\"gpu_host_check\":{\"per_core_GBps\":%.4f,\"per_core_target_GBps\":3,"
               "\"all_threads_GBps\":%.4f,\"all_threads_scan_select_GBps\":%.4f,"
               "\"all_threads_target_GBps\":40,\"applies\":%s}}\n",
               pc_new / 1e9, all_new / 1e9, bytes_f / sf[ntc - 1] / 1e9,
               context >= 1000000 && threads >= 16 ? "true" : "false");
    }
    FILE *out = json ? stderr : stdout; /* the human table */
    fprintf(out, "bench_scan: %s, qwen3-8b synthetic, n = %llu, %u KV heads, G = %u, %u query groups each, "
           "%u repeats (median), old kernel %s, tiled kernel %s (AVX-512 values from %s), tasks of %llu tokens\n",
           cpu, (unsigned long long)context, heads, G, queries, repeats, old_isa, kern, avx512_values, (unsigned long long)range);
    fprintf(out, "scores of the tiled kernel identical to the untiled one's: fathom:48 %s, ds:32 %s\n",
           same_f ? "yes" : "NO", same_d ? "yes" : "NO");
    fprintf(out, "memory read bandwidth: %.2f GB/s on 1 core, %.2f GB/s on %u threads\n", b1 / 1e9, bT / 1e9, threads);
    fprintf(out, "16-lane multiply-adds per ns per thread: %.2f alone, %.2f with %u threads running (%.2fx)\n", f1,
            fT, threads, f1 > 0 ? fT / f1 : 0);
    fprintf(out, "%-10s %9s %13s %11s %11s %14s %14s\n", "scan (1 core)", "bits/tok", "plane MB/step", "old ms/step",
           "new ms/step", "old GB/s/core", "new GB/s/core");
    fprintf(out, "%-13s %6.1f %13.2f %11.3f %11.3f %14.3f %14.3f\n", "fathom:48", bits_f, bytes_f / 1e6 / Q,
           1e3 * tof / Q, 1e3 * tnf / Q, pc_old / 1e9, pc_new / 1e9);
    fprintf(out, "%-13s %6.1f %13.2f %11.3f %11.3f %14.3f %14.3f\n", "ds:32", fathom_depth_bits(d, ds_depths),
           bytes_d / 1e6 / Q, 1e3 * tod / Q, 1e3 * tnd / Q, bytes_d / tod / 1e9, bytes_d / tnd / 1e9);
    fprintf(out, "ratio new / old, fathom:48 plane GB/s per core: %.3f (target >= 2.5)\n", pc_new / pc_old);
    fprintf(out, "ratio fathom:48 / ds:32 time: new %.3f, old %.3f (target <= 0.5); bytes %.3f\n", tnf / tnd,
           tof / tod, bytes_f / bytes_d);
    fprintf(out, "scaling, fathom:48: %7s %14s %16s %14s\n", "threads", "new GB/s", "new GB/s/thread",
           "old GB/s");
    for (uint32_t i = 0; i < ntc; i++)
        fprintf(out, "                    %7u %14.3f %16.3f %14.3f\n", tc[i], bytes_f / sn[i] / 1e9,
               bytes_f / sn[i] / 1e9 / tc[i], bytes_f / so[i] / 1e9);
    fprintf(out, "scan + select (k %d, sink %d, local %d), fathom:48; selections identical: %s\n", SEL_K, SEL_SINK,
            SEL_LOCAL, same_sel ? "yes" : "NO");
    fprintf(out, "  %7s %16s %16s %18s %18s %16s %14s\n", "threads", "then-select ms", "fused ms",
            "then-select GB/s", "fused GB/s", "alone GB/s", "alone/together");
    for (uint32_t i = 0; i < ntc; i++)
        fprintf(out, "  %7u %16.3f %16.3f %18.3f %18.3f %16.3f %13.2fx\n", tc[i], 1e3 * ss[i] / Q, 1e3 * sf[i] / Q,
                bytes_f / ss[i] / 1e9, bytes_f / sf[i] / 1e9, bytes_f / sone[i] / 1e9, sone[i] / sf[i]);
    if (grouped) {
        fprintf(out, "grouped-table kernel (FATHOM_SCAN_GROUPED, opt-in: other scores), 1 core: fathom:48 %.3f "
                     "ms/step, %.3f GB/s/core; ds:32 %.3f ms/step, %.3f GB/s/core\n",
                1e3 * tgf / Q, bytes_f / tgf / 1e9, 1e3 * tgd / Q, bytes_d / tgd / 1e9);
        fprintf(out, "grouped ratios: fathom:48 grouped / ds:32 exact time %.3f (target <= 0.5); grouped / old "
                     "fathom:48 GB/s per core %.3f (target >= 2.5); grouped / tiled fathom:48 time %.3f\n",
                tgf / tnd, (bytes_f / tgf) / pc_old, tgf / tnf);
        fprintf(out, "grouped top-%d selections (sink %d, local %d) equal to the exact ones: %.4f of rows on "
                     "average, %.4f at worst (query group 0, %u heads x %u)\n",
                SEL_K, SEL_SINK, SEL_LOCAL, agree, agree_min, heads, G);
        fprintf(out, "grouped scaling, fathom:48: threads / GB/s:");
        for (uint32_t i = 0; i < ntc; i++) fprintf(out, " %u %.3f%s", tc[i], bytes_f / sg[i] / 1e9, i + 1 < ntc ? "," : "\n");
    }
    if (int8) {
        fprintf(out, "%s kernel (FATHOM_SCAN_%s, opt-in: quantized scores), 1 core: "
                     "fathom:48 %.3f ms/step, %.3f GB/s/core; ds:32 %.3f ms/step, %.3f GB/s/core\n",
                iname, int8 == 2 ? "INT16" : "INT8", 1e3 * t8f / Q, bytes_f / t8f / 1e9, 1e3 * t8d / Q, bytes_d / t8d / 1e9);
        fprintf(out, "%s ratios: %s fathom:48 / exact ds:32 time %.3f (target <= 0.5); %s fathom:48 / "
                     "%s ds:32 %.3f; %s / old fathom:48 GB/s per core %.3f; %s / tiled fathom:48 time %.3f\n",
                iname, iname, t8f / tnd, iname, iname, t8f / t8d, iname, (bytes_f / t8f) / pc_old, iname,
                t8f / tnf);
        fprintf(out, "%s top-%d selections (sink %d, local %d) equal to the exact ones: %.4f of rows on "
                     "average, %.4f at worst (query group 0, %u heads x %u)\n",
                iname, SEL_K, SEL_SINK, SEL_LOCAL, agree8, agree8_min, heads, G);
        fprintf(out, "%s scaling, fathom:48: threads / scan GB/s / scan+select (fused) GB/s / scan+select of "
                     "each head alone GB/s (their time over the time of all heads at once):", iname);
        for (uint32_t i = 0; i < ntc; i++)
            fprintf(out, " %u %.3f %.3f %.3f (%.2fx)%s", tc[i], bytes_f / s8[i] / 1e9, bytes_f / s8sel[i] / 1e9,
                    bytes_f / s8one[i] / 1e9, s8one[i] / s8sel[i], i + 1 < ntc ? "," : "\n");
        fprintf(out, "%s GPU-host check: %.2f GB/s per core (target >= 3), %.2f GB/s scan and %.2f GB/s "
                     "scan+select on %u threads (target >= 40)%s\n",
                iname, bytes_f / t8f / 1e9, bytes_f / s8[ntc - 1] / 1e9, bytes_f / s8sel[ntc - 1] / 1e9, threads,
                context >= 1000000 && threads >= 16 ? "" : " [not that configuration]");
    }
    fprintf(out, "GPU-host check (n >= 1M, 16 threads: --context 1048576 --threads 16): %.2f GB/s per core "
           "(target >= 3), %.2f GB/s on %u threads (target >= 40)%s\n",
           pc_new / 1e9, all_new / 1e9, threads,
           context >= 1000000 && threads >= 16 ? "" : " [not that configuration]");

    for (uint32_t h = 0; h < heads; h++) fathom_store_free(stores[h]);
    fathom_source_free(src);
    free(buf);
    free(q);
    free(qg);
    free(scores);
    free(fathom_depths);
    free(ds_depths);
    for (uint32_t t = 0; t < threads; t++) free(sel.work[t]);
    free(sel.work);
    free(sel.idx);
    free(sel8.idx);
    free(sel8.count);
    free(sel.count);
    free(idx_ref);
    free(count_ref);
    return same_f && same_d && same_sel ? 0 : 1;
}

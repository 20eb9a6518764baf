/* bench_scan — CPU scan throughput of fathom:48 against the 4-bit channel
 * scan of Double Sparsity (ds:32), on the same store, with real plans from
 * real (synthetic Qwen3-8B) queries, and the machine's memory read
 * bandwidth measured in the same run. Runs are interleaved (A B A B ...)
 * and each figure is the median of its repeats.
 *
 *   bench_scan [--context N] [--heads H] [--queries Q] [--repeats R] [--threads T] [--json]
 *
 * Prints plane bytes per second per core for each scan, the ratio of the two
 * and the fraction of the single-core and all-core read bandwidth. --json:
 * the same numbers as one JSON object on stdout (the table goes to stderr;
 * scripts/record-result adds the machine, date and commit). */
#include "fathom.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- memory read bandwidth: sum of uint64 over a buffer larger than cache ---- */
typedef struct read_arg {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} read_arg;

static void *read_worker(void *a_) {
    read_arg *a = a_;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= a->n; i += 4) {
        s0 += a->p[i];
        s1 += a->p[i + 1];
        s2 += a->p[i + 2];
        s3 += a->p[i + 3];
    }
    a->sum = s0 + s1 + s2 + s3;
    return NULL;
}

static double read_bandwidth(const uint64_t *buf, size_t words, int threads) {
    pthread_t tid[64];
    read_arg args[64];
    size_t per = words / (size_t)threads;
    double t0 = now_s();
    for (int t = 0; t < threads; t++) {
        args[t] = (read_arg){buf + (size_t)t * per, per, 0};
        if (t) pthread_create(&tid[t], NULL, read_worker, &args[t]);
    }
    read_worker(&args[0]);
    for (int t = 1; t < threads; t++) pthread_join(tid[t], NULL);
    double dt = now_s() - t0;
    volatile uint64_t sink = 0;
    for (int t = 0; t < threads; t++) sink += args[t].sum;
    (void)sink;
    return (double)(per * (size_t)threads * 8) / dt;
}

static int fail(const char *what, int st) {
    fprintf(stderr, "bench_scan: %s: %s: %s\n", what, fathom_status_name(st), fathom_last_error());
    return 1;
}

int main(int argc, char **argv) {
    uint64_t context = 32768;
    uint32_t heads = 8, queries = 16, repeats = 7, threads = 2;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const int has_value = i + 1 < argc;
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (has_value && !strcmp(argv[i], "--context")) context = strtoull(argv[++i], NULL, 10);
        else if (has_value && !strcmp(argv[i], "--heads")) heads = (uint32_t)atoi(argv[++i]);
        else if (has_value && !strcmp(argv[i], "--queries")) queries = (uint32_t)atoi(argv[++i]);
        else if (has_value && !strcmp(argv[i], "--repeats")) repeats = (uint32_t)atoi(argv[++i]);
        else if (has_value && !strcmp(argv[i], "--threads")) threads = (uint32_t)atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_scan [--context N] [--heads H<=8] [--queries Q] [--repeats R] [--threads T] [--json]\n");
            return 2;
        }
    }
    FILE *out = json ? stderr : stdout; /* the human table */
    if (!context || !heads || heads > 8 || !queries || !repeats || repeats > 64 || !threads || threads > 64) {
        fprintf(stderr, "bench_scan: bad arguments\n");
        return 2;
    }

    fathom_source *src;
    int st = fathom_synth_open(&src, "qwen3-8b", context, queries, 1);
    if (st < 0) return fail("synthetic source", st);
    fathom_source_info info;
    fathom_source_get_info(src, &info);
    const uint32_t d = info.dim, G = info.q_heads / info.kv_heads;
    float *q = malloc((size_t)info.q_heads * queries * d * sizeof(float));
    float *k = malloc((size_t)info.kv_heads * context * d * sizeof(float));
    float *scores = malloc((size_t)G * context * sizeof(float));
    if (!q || !k || !scores) return fail("allocation", FATHOM_ERR_NOMEM);
    if ((st = fathom_source_layer(src, info.layers / 2, q, k, NULL)) < 0) return fail("layer", st);

    /* One store per KV head: heads * 68 B * n, well past the last-level cache. */
    fathom_store *stores[8];
    uint8_t *fathom_depths = malloc((size_t)heads * queries * d);
    uint8_t ds_depths[8][512];
    float qg[8 * 128];
    for (uint32_t h = 0; h < heads; h++) {
        if ((st = fathom_store_create(&stores[h], d, 0, NULL)) < 0) return fail("store", st);
        if ((st = fathom_store_append(stores[h], k + (size_t)h * context * d, context)) < 0) return fail("append", st);
        float var[512];
        double g[512];
        fathom_store_variance(stores[h], var);
        /* ds:32: channels by mean|q| * mean|k| over this window. */
        double stat[512];
        for (uint32_t j = 0; j < d; j++) {
            double mq = 0, mk = 0;
            for (uint32_t hh = 0; hh < G; hh++)
                for (uint32_t p = 0; p < queries; p++) mq += fabs(q[(((size_t)h * G + hh) * queries + p) * d + j]);
            for (uint64_t i = 0; i < context; i++) mk += fabs(k[((size_t)h * context + i) * d + j]);
            stat[j] = mq * mk;
        }
        memset(ds_depths[h], 0, d);
        for (int c = 0; c < 32; c++) {
            int best = -1;
            for (uint32_t j = 0; j < d; j++)
                if (!ds_depths[h][j] && (best < 0 || stat[j] > stat[best])) best = (int)j;
            ds_depths[h][best] = 4;
        }
        /* fathom:48: a real plan per query group. */
        for (uint32_t p = 0; p < queries; p++) {
            for (uint32_t hh = 0; hh < G; hh++)
                memcpy(qg + hh * d, q + (((size_t)h * G + hh) * queries + p) * d, d * sizeof(float));
            fathom_importance(d, G, qg, var, g);
            fathom_water_fill(d, g, 48, fathom_depths + ((size_t)h * queries + p) * d, NULL);
        }
    }

    /* Memory bandwidth, measured in this run: 1 GiB, 1 thread and T threads. */
    size_t words = (size_t)1 << 27;
    uint64_t *buf = malloc(words * 8);
    if (!buf) return fail("bandwidth buffer", FATHOM_ERR_NOMEM);
    for (size_t i = 0; i < words; i++) buf[i] = i;

    double t_fathom[64], t_ds[64], bw1[64], bwT[64];
    double bytes_fathom = 0, bytes_ds = 0, bits_fathom = 0;
    for (uint32_t r = 0; r < repeats; r++) {
        bw1[r] = read_bandwidth(buf, words, 1);
        bwT[r] = read_bandwidth(buf, words, (int)threads);
        for (int which = 0; which < 2; which++) {
            double t0 = now_s();
            uint64_t total = 0;
            for (uint32_t h = 0; h < heads; h++)
                for (uint32_t p = 0; p < queries; p++) {
                    for (uint32_t hh = 0; hh < G; hh++)
                        memcpy(qg + hh * d, q + (((size_t)h * G + hh) * queries + p) * d, d * sizeof(float));
                    const uint8_t *dep = which == 0 ? fathom_depths + ((size_t)h * queries + p) * d : ds_depths[h];
                    uint64_t b;
                    fathom_store_scan(stores[h], dep, qg, G, context, scores, &b);
                    total += b;
                    if (r == 0 && which == 0) bits_fathom += fathom_depth_bits(d, dep);
                }
            double dt = now_s() - t0;
            if (which == 0) t_fathom[r] = dt, bytes_fathom = (double)total;
            else t_ds[r] = dt, bytes_ds = (double)total;
        }
    }
    bits_fathom /= (double)heads * queries;
    double tf = median(t_fathom, (int)repeats), td = median(t_ds, (int)repeats);
    double b1 = median(bw1, (int)repeats), bT = median(bwT, (int)repeats);
    double rf = bytes_fathom / tf, rd = bytes_ds / td;

    fprintf(out, "bench_scan: qwen3-8b synthetic, n = %llu, %u KV heads, G = %u, %u query groups each, %u repeats (median)\n",
            (unsigned long long)context, heads, G, queries, repeats);
    fprintf(out, "memory read bandwidth: %.2f GB/s on 1 core, %.2f GB/s on %u threads\n", b1 / 1e9, bT / 1e9, threads);
    fprintf(out, "%-10s %10s %14s %12s %16s %14s\n", "scan", "bits/tok", "plane MB/step", "ms/step", "plane GB/s/core",
            "of 1-core BW");
    const char *names[2] = {"fathom:48", "ds:32"};
    const double bits[2] = {bits_fathom, fathom_depth_bits(d, ds_depths[0])}, bytes[2] = {bytes_fathom, bytes_ds},
                 secs[2] = {tf, td}, rate[2] = {rf, rd};
    for (int s = 0; s < 2; s++)
        fprintf(out, "%-10s %10.1f %14.2f %12.2f %16.2f %13.1f%%\n", names[s], bits[s], bytes[s] / 1e6 / queries,
                1e3 * secs[s] / queries, rate[s] / 1e9, 100 * rate[s] / b1);
    fprintf(out, "ratio fathom:48 / ds:32: bytes %.3f, time %.3f, throughput %.3f\n", bytes_fathom / bytes_ds, tf / td,
            rf / rd);
    if (json) {
        printf("{\"bench\":\"bench_scan\",\"source\":\"qwen3-8b\",\"context\":%llu,\"heads\":%u,\"group\":%u,"
               "\"queries\":%u,\"repeats\":%u,\"threads\":%u,\"read_GBps_1core\":%.3f,\"read_GBps_threads\":%.3f,"
               "\"scans\":[",
               (unsigned long long)context, heads, G, queries, repeats, threads, b1 / 1e9, bT / 1e9);
        for (int s = 0; s < 2; s++)
            printf("%s{\"name\":\"%s\",\"bits_per_token\":%.3f,\"plane_MB_per_step\":%.4f,\"ms_per_step\":%.4f,"
                   "\"plane_GBps_per_core\":%.4f,\"of_1core_read_pct\":%.2f}",
                   s ? "," : "", names[s], bits[s], bytes[s] / 1e6 / queries, 1e3 * secs[s] / queries, rate[s] / 1e9,
                   100 * rate[s] / b1);
        printf("],\"ratio_fathom_to_ds\":{\"bytes\":%.4f,\"time\":%.4f,\"throughput\":%.4f}}\n",
               bytes_fathom / bytes_ds, tf / td, rf / rd);
    }

    for (uint32_t h = 0; h < heads; h++) fathom_store_free(stores[h]);
    fathom_source_free(src);
    free(buf);
    free(q);
    free(k);
    free(scores);
    free(fathom_depths);
    return 0;
}

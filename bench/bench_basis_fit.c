/* bench_basis_fit — what the rotated store without a calibration file costs
 * at the end of a prefill: fathom_basis_fit (mean, covariance, LAPACK
 * eigensolve) on a capture's own keys, per layer and KV head, as the index
 * does it without --calib (every key, or the first N with --keys; the index
 * strides to at most 16384 keys, --keys 16384 times that).
 *
 *   bench_basis_fit CAPTURE [--keys N] [--repeats R] [--json]
 *
 * Prints each (layer, KV head)'s best time over R repeats (wall clock,
 * one thread) and their median. */
#include "bench_clock.h"
#include "fathom.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int fail(const char *what) {
    fprintf(stderr, "bench_basis_fit: %s: %s\n", what, fathom_last_error());
    return 1;
}

/* s as a JSON string. */
static void print_json_string(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

int main(int argc, char **argv) {
    const char *path = NULL;
    unsigned long long keys_wanted = 0;
    int repeats = 3, json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--keys") && i + 1 < argc) keys_wanted = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json")) json = 1;
        else if (argv[i][0] != '-' && !path) path = argv[i];
        else {
            fprintf(stderr, "usage: bench_basis_fit CAPTURE [--keys N] [--repeats R] [--json]\n");
            return 2;
        }
    }
    if (!path || repeats < 1) {
        fprintf(stderr, "usage: bench_basis_fit CAPTURE [--keys N] [--repeats R] [--json]\n");
        return 2;
    }
    fathom_source *src = NULL;
    int st = fathom_capture_open(&src, path);
    if (st < 0) return fail(path);
    fathom_source_info info;
    fathom_source_get_info(src, &info);
    const uint64_t n = keys_wanted && keys_wanted < info.tokens ? keys_wanted : info.tokens;
    const uint64_t per_head = info.tokens * info.dim;
    float *k = malloc((size_t)info.kv_heads * per_head * sizeof *k);
    double *ms = malloc((size_t)info.layers * info.kv_heads * sizeof *ms);
    if (!k || !ms) {
        fprintf(stderr, "bench_basis_fit: out of memory\n");
        return 1;
    }
    uint32_t fits = 0;
    for (uint32_t L = 0; L < info.layers; L++) {
        if ((st = fathom_source_layer(src, L, NULL, k, NULL)) < 0) return fail("layer");
        for (uint32_t h = 0; h < info.kv_heads; h++) {
            double best = 1e30;
            for (int r = 0; r < repeats; r++) {
                fathom_basis *b = NULL;
                const double t0 = now_s();
                st = fathom_basis_fit(&b, info.dim, k + h * per_head, n, NULL, 0);
                const double t = now_s() - t0;
                fathom_basis_free(b);
                if (st < 0) return fail("basis_fit");
                if (t < best) best = t;
            }
            ms[fits++] = 1e3 * best;
        }
    }
    double *sorted = malloc(fits * sizeof *sorted);
    if (!sorted) return 1;
    memcpy(sorted, ms, fits * sizeof *sorted);
    qsort(sorted, fits, sizeof *sorted, compare_double);
    const double median = fits % 2 ? sorted[fits / 2] : 0.5 * (sorted[fits / 2 - 1] + sorted[fits / 2]);
    if (json) {
        printf("{\"source\": ");
        print_json_string(path);
        printf(", \"tokens\": %llu, \"keys\": %llu, \"dim\": %u, \"fits\": %u, \"repeats\": %d, "
               "\"median_ms\": %.3f, \"min_ms\": %.3f, \"max_ms\": %.3f}\n",
               (unsigned long long)info.tokens, (unsigned long long)n, info.dim, fits, repeats, median,
               sorted[0], sorted[fits - 1]);
    } else {
        printf("%s: %u fits of %llu keys x %u channels: median %.3f ms (min %.3f, max %.3f)\n", path, fits,
               (unsigned long long)n, info.dim, median, sorted[0], sorted[fits - 1]);
    }
    free(sorted);
    free(ms);
    free(k);
    fathom_source_free(src);
    return 0;
}

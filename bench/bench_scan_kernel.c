/* bench_scan_kernel — one core's time per 64-token block of each tiled scan
 * kernel, against the floor set by its multiply-adds.
 *
 *   bench_scan_kernel [--context N] [--repeats R] [--int8] [--json]
 *
 * One store of N tokens (dim 128, random keys), G = 4 query heads and two
 * plans: fathom:48's shape on the bench_scan setup (18 channels of depth 1,
 * 9 of depth 2, 4 of depth 3: 48 bits over 31 channels) and ds:32's (32
 * channels of depth 4). Each tiled kernel this CPU runs scans the whole
 * store R times per round (fathom_store_scan_range, one thread), rounds
 * interleaved over kernels and plans, the fastest round kept. N = 16384
 * keeps the store in L2; 1M puts it in L3 or memory.
 *
 * The floor: every tiled kernel issues one fused multiply-add per query
 * head, active channel and token (the GPU's operations), G * C * 64 lanes
 * per block, so its time cannot fall below those vectors at this core's
 * multiply-add rate, which is timed here (12 independent chains of 16-lane
 * or 8-lane multiply-adds). "of floor" is the kernel's time over that floor;
 * what the kernel spends beyond it is forming the values from the planes,
 * staging and the memory.
 *
 * The grouped-table kernels (FATHOM_SCAN_GROUPED_*: other scores, opt-in)
 * run beside them, "grp512" and "grp-port" (the latter one round, at
 * N <= 65536 only); their floor column is that of the exact kernels'
 * multiply-adds, which they replace by one table lookup and add per group.
 *
 * --int8: the integer ("VNNI") kernels (FATHOM_SCAN_INT8_*: other scores,
 * opt-in) as well, "int8-512" and "int8-port" (one round, N <= 65536), the
 * int16 variant's "int16-512" (FATHOM_SCAN_INT16_AVX512), and the line
 * "int8 ratios": int8 fathom:48 / exact ds:32 time, int8 fathom:48 / int8
 * ds:32, int8 / exact per plan (and "int16 ratios" likewise). Their floor
 * column is the exact kernels' multiply-adds, which they replace by one
 * integer dot product (vpdpbusd) per 4 channels, 16 tokens and head.
 *
 * --json: one JSON object on stdout (scripts/record-result adds the machine,
 * date and commit). */
#include "bench_fma.h"
#include "cpu.h"
#include "fathom.h"
#include "store_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DIM 128
#define GROUP 4
#define ROUNDS 7
#define NK 8 /* kernels */

static uint64_t rng = 88172645463325252ull;
static float rng_unit(void) { /* xorshift64, uniform in [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

/* ---- this core's multiply-add rate (bench_fma.h) ---- */

/* The best of 5 timings of the rate for 16 or 8 lanes (0 where this CPU
 * lacks the width). */
static double fma_rate(int lanes) {
    double best = 0;
#ifdef FATHOM_X86
    for (int r = 0; r < 5; r++) {
        double x = lanes == 16 ? (fathom_cpu_has(FATHOM_CPU_AVX512) ? bench_fma_rate_zmm(20000000) : 0)
                               : (fathom_cpu_has(FATHOM_CPU_AVX2) ? bench_fma_rate_ymm(20000000) : 0);
        if (x > best) best = x;
    }
#else
    (void)lanes;
#endif
    return best;
}

/* ---- the kernels ---- */

static const struct {
    fathom_scan_kernel kernel;
    const char *name;
    int lanes; /* of its multiply-adds; 0: a multiply then an add, no floor */
} kernels[NK] = {{FATHOM_SCAN_TILED_AVX512, "avx512", 16},
                 {FATHOM_SCAN_TILED_AVX2, "avx2", 8},
                 {FATHOM_SCAN_TILED_PORTABLE, "portable", 0},
                 {FATHOM_SCAN_GROUPED_AVX512, "grp512", 16},
                 {FATHOM_SCAN_GROUPED_PORTABLE, "grp-port", 0},
                 {FATHOM_SCAN_INT8_AVX512, "int8-512", 16},
                 {FATHOM_SCAN_INT8_PORTABLE, "int8-port", 0},
                 {FATHOM_SCAN_INT16_AVX512, "int16-512", 16}};

static const char *plan_names[2] = {"fathom:48", "ds:32"};

int main(int argc, char **argv) {
    uint64_t n = 16384;
    int repeats = 0, json = 0, int8 = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) {
            json = 1;
            continue;
        }
        if (!strcmp(a, "--int8")) {
            int8 = 1;
            continue;
        }
        if (v && !strcmp(a, "--context")) n = strtoull(v, NULL, 10);
        else if (v && !strcmp(a, "--repeats")) repeats = atoi(v);
        else {
            fprintf(stderr, "usage: bench_scan_kernel [--context N] [--repeats R] [--int8] [--json]\n");
            return 2;
        }
        i++;
    }
    if (n < 64 || n > ((uint64_t)1 << 26) || repeats < 0) {
        fprintf(stderr, "bench_scan_kernel: bad arguments\n");
        return 2;
    }
    if (!repeats) repeats = (int)(((uint64_t)1 << 22) / n) + 1; /* ~4M tokens per round */

    fathom_store *st = NULL;
    const uint64_t chunk = 65536;
    float *keys = malloc(sizeof(float) * chunk * DIM), q[GROUP * DIM];
    float *scores = malloc(sizeof(float) * GROUP * n);
    int status = keys && scores ? fathom_store_create(&st, DIM, 0, NULL) : FATHOM_ERR_NOMEM;
    for (uint64_t done = 0; status >= 0 && done < n; done += chunk) {
        const uint64_t m = n - done < chunk ? n - done : chunk;
        for (uint64_t i = 0; i < m * DIM; i++) keys[i] = rng_unit() * (float)(1 + i % DIM % 5);
        status = fathom_store_append(st, keys, m);
    }
    if (status < 0) {
        fprintf(stderr, "bench_scan_kernel: %s: %s\n", fathom_status_name(status), fathom_last_error());
        return 1;
    }
    for (int i = 0; i < GROUP * DIM; i++) q[i] = rng_unit();
    uint8_t depths[2][DIM] = {{0}};
    uint32_t channels[2] = {31, 32}, bits[2] = {0, 0};
    for (uint32_t j = 0; j < 31; j++) depths[0][(j * 37) % DIM] = (uint8_t)(j < 18 ? 1 : j < 27 ? 2 : 3);
    for (uint32_t j = 0; j < 32; j++) depths[1][(j * 4 + 1) % DIM] = 4;
    for (int p = 0; p < 2; p++)
        for (uint32_t j = 0; j < DIM; j++) bits[p] += depths[p][j];

    double best[NK][2];
    for (int k = 0; k < NK; k++) best[k][0] = best[k][1] = 1e30;
    for (int r = 0; r < ROUNDS; r++)
        for (int k = 0; k < NK; k++) {
            const int portable = kernels[k].kernel == FATHOM_SCAN_GROUPED_PORTABLE ||
                                 kernels[k].kernel == FATHOM_SCAN_INT8_PORTABLE;
            if (portable && (r || n > 65536)) continue; /* slow: once */
            if (!int8 && (kernels[k].kernel == FATHOM_SCAN_INT8_AVX512 ||
                          kernels[k].kernel == FATHOM_SCAN_INT8_PORTABLE ||
                          kernels[k].kernel == FATHOM_SCAN_INT16_AVX512))
                continue;
            if (!fathom_scan_kernel_available(kernels[k].kernel)) continue;
            for (int p = 0; p < 2; p++) {
                const double t0 = now_s();
                for (int i = 0; i < repeats && status >= 0; i++)
                    status = fathom_store_scan_range(kernels[k].kernel, st, depths[p], q, GROUP, 0, n,
                                                     scores, n, NULL);
                const double dt = (now_s() - t0) / repeats;
                if (dt < best[k][p]) best[k][p] = dt;
            }
        }
    if (status < 0) {
        fprintf(stderr, "bench_scan_kernel: %s: %s\n", fathom_status_name(status), fathom_last_error());
        return 1;
    }
    const double r16 = fma_rate(16), rate[NK] = {r16, fma_rate(8), 0, r16, 0, r16, 0, r16};
    const double blocks = (double)((n + 63) / 64);

    /* how the AVX-512 kernel forms its values (scan.c's pick_tiled) */
    const char *avx512_values = fathom_scan_avx512_values();
    if (json)
        printf("{\"bench\": \"bench_scan_kernel\", \"context\": %llu, \"dim\": %d, \"group\": %d, "
               "\"repeats\": %d, \"fma_zmm_per_ns\": %.4f, \"fma_ymm_per_ns\": %.4f, "
               "\"avx512_values\": \"%s\", \"kernels\": [",
               (unsigned long long)n, DIM, GROUP, repeats, rate[0], rate[1], avx512_values);
    fprintf(stderr, "bench_scan_kernel: n = %llu, dim %d, G = %d, one core, %d scans per round, best of %d; "
                    "multiply-adds per ns: %.2f (16 lanes), %.2f (8 lanes); AVX-512 values from %s\n",
            (unsigned long long)n, DIM, GROUP, repeats, ROUNDS, rate[0], rate[1], avx512_values);
    fprintf(stderr, "%-9s %-10s %8s %10s %14s %9s %13s %9s\n", "kernel", "plan", "channels", "ns/block",
            "ns/chan/block", "GB/s", "floor ns/blk", "of floor");
    int first = 1;
    for (int k = 0; k < NK; k++) {
        if (!fathom_scan_kernel_available(kernels[k].kernel) || best[k][0] >= 1e30) continue;
        if (json) printf("%s{\"kernel\": \"%s\", \"plans\": [", first ? "" : ", ", kernels[k].name);
        first = 0;
        for (int p = 0; p < 2; p++) {
            const double ns = best[k][p] * 1e9 / blocks;
            /* plane bytes per block: 8 per plane word and 2 per scale */
            const double bytes = 8.0 * bits[p] + 2.0 * channels[p];
            const double floor_ns = kernels[k].lanes && rate[k] > 0
                                        ? (double)GROUP * channels[p] * 64 / kernels[k].lanes / rate[k]
                                        : 0;
            fprintf(stderr, "%-9s %-10s %8u %10.2f %14.3f %9.3f %13.2f %9.2f\n", kernels[k].name,
                    plan_names[p], channels[p], ns, ns / channels[p], bytes / ns, floor_ns,
                    floor_ns > 0 ? ns / floor_ns : 0);
            if (json)
                printf("%s{\"plan\": \"%s\", \"channels\": %u, \"bits\": %u, \"ns_per_block\": %.3f, "
                       "\"ns_per_channel_block\": %.4f, \"plane_GBps\": %.4f, \"fma_floor_ns_per_block\": "
                       "%.3f, \"of_floor\": %.3f}",
                       p ? ", " : "", plan_names[p], channels[p], bits[p], ns, ns / channels[p],
                       bytes / ns, floor_ns, floor_ns > 0 ? ns / floor_ns : 0);
        }
        if (json) printf("]}");
    }
    /* the grouped mode against the exact kernel of the same instruction set,
     * and each plan's ratio fathom:48 / ds:32 (the issue: <= 0.5) */
    const double b00 = best[0][0], b01 = best[0][1], b30 = best[3][0], b31 = best[3][1];
    const int have = fathom_scan_kernel_available(FATHOM_SCAN_GROUPED_AVX512) && b00 < 1e30;
    if (have)
        fprintf(stderr, "ratio fathom:48 / ds:32 time: exact avx512 %.3f, grouped avx512 %.3f, "
                        "grouped fathom:48 / exact ds:32 %.3f; grouped / exact: fathom:48 %.3f, "
                        "ds:32 %.3f\n",
                b00 / b01, b30 / b31, b30 / b01, b30 / b00, b31 / b01);
    const double b50 = best[5][0], b51 = best[5][1];
    const int have8 = int8 && fathom_scan_kernel_available(FATHOM_SCAN_INT8_AVX512) && b00 < 1e30;
    if (have8)
        fprintf(stderr, "int8 ratios: int8 fathom:48 / exact ds:32 time %.3f (target <= 0.5), "
                        "int8 fathom:48 / int8 ds:32 %.3f; int8 / exact: fathom:48 %.3f, ds:32 %.3f; "
                        "int8 / grouped fathom:48 %.3f\n",
                b50 / b01, b50 / b51, b50 / b00, b51 / b01, b50 / b30);
    const double b70 = best[7][0], b71 = best[7][1];
    if (have8)
        fprintf(stderr, "int16 ratios: int16 fathom:48 / exact ds:32 time %.3f, int16 fathom:48 / int16 ds:32 "
                        "%.3f; int16 / exact: fathom:48 %.3f, ds:32 %.3f; int16 / int8 fathom:48 %.3f\n",
                b70 / b01, b70 / b71, b70 / b00, b71 / b01, b70 / b50);
    if (json) {
        printf("]");
        if (have8)
            printf(", \"ratio_int8_fathom_to_exact_ds\": %.4f, \"ratio_int8_fathom_to_ds\": %.4f, "
                   "\"ratio_int8_to_exact_fathom\": %.4f",
                   b50 / b01, b50 / b51, b50 / b00);
        if (have8)
            printf(", \"ratio_int16_fathom_to_exact_ds\": %.4f, \"ratio_int16_fathom_to_ds\": %.4f, "
                   "\"ratio_int16_to_exact_fathom\": %.4f",
                   b70 / b01, b70 / b71, b70 / b00);
        if (have)
            printf(", \"ratio_fathom_to_ds_exact\": %.4f, \"ratio_fathom_to_ds_grouped\": %.4f, "
                   "\"ratio_grouped_fathom_to_exact_ds\": %.4f, \"ratio_grouped_to_exact_fathom\": %.4f",
                   b00 / b01, b30 / b31, b30 / b01, b30 / b00);
        printf("}\n");
    }
    fathom_store_free(st);
    free(keys);
    free(scores);
    return 0;
}

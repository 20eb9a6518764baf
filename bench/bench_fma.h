/* bench_fma — this thread's rate of vector multiply-adds (12 independent
 * chains of vfmadd231ps), the floor the CPU scan benches measure against. */
#ifndef FATHOM_BENCH_FMA_H
#define FATHOM_BENCH_FMA_H

#include "bench_clock.h"
#include "cpu.h"

#ifdef FATHOM_X86
#include <immintrin.h>

#define BENCH_FMA12                                                                                \
    "vfmadd231ps %[x], %[y], %[a0]\n\tvfmadd231ps %[x], %[y], %[a1]\n\t"                           \
    "vfmadd231ps %[x], %[y], %[a2]\n\tvfmadd231ps %[x], %[y], %[a3]\n\t"                           \
    "vfmadd231ps %[x], %[y], %[a4]\n\tvfmadd231ps %[x], %[y], %[a5]\n\t"                           \
    "vfmadd231ps %[x], %[y], %[a6]\n\tvfmadd231ps %[x], %[y], %[a7]\n\t"                           \
    "vfmadd231ps %[x], %[y], %[a8]\n\tvfmadd231ps %[x], %[y], %[a9]\n\t"                           \
    "vfmadd231ps %[x], %[y], %[a10]\n\tvfmadd231ps %[x], %[y], %[a11]\n\t"
#define BENCH_FMA12_OPERANDS                                                                       \
    : [a0] "+v"(a0), [a1] "+v"(a1), [a2] "+v"(a2), [a3] "+v"(a3), [a4] "+v"(a4), [a5] "+v"(a5),    \
      [a6] "+v"(a6), [a7] "+v"(a7), [a8] "+v"(a8), [a9] "+v"(a9), [a10] "+v"(a10),                 \
      [a11] "+v"(a11)                                                                              \
    : [x] "v"(x), [y] "v"(y)

/* Vector multiply-adds per nanosecond over n rounds of 12, 16 lanes each
 * (named accumulators: an array would live in memory). */
FATHOM_TARGET_AVX512 static inline double bench_fma_rate_zmm(long n) {
    const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-7f);
    __m512 a0 = _mm512_set1_ps(1.0f), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
           a7 = a0, a8 = a0, a9 = a0, a10 = a0, a11 = a0;
    const double t0 = now_s();
    for (long i = 0; i < n; i++) __asm__ volatile(BENCH_FMA12 BENCH_FMA12_OPERANDS);
    const double dt = now_s() - t0;
    volatile float sink = _mm512_reduce_add_ps(_mm512_add_ps(a0, a11));
    (void)sink;
    return 12.0 * (double)n / dt * 1e-9;
}

/* The same, 8 lanes each. */
FATHOM_TARGET_AVX2 static inline double bench_fma_rate_ymm(long n) {
    const __m256 x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(1e-7f);
    __m256 a0 = _mm256_set1_ps(1.0f), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
           a7 = a0, a8 = a0, a9 = a0, a10 = a0, a11 = a0;
    const double t0 = now_s();
    for (long i = 0; i < n; i++) __asm__ volatile(BENCH_FMA12 BENCH_FMA12_OPERANDS);
    const double dt = now_s() - t0;
    float s[8];
    _mm256_storeu_ps(s, _mm256_add_ps(a0, a11));
    volatile float sink = s[0];
    (void)sink;
    return 12.0 * (double)n / dt * 1e-9;
}
#endif

#endif

/* bench_clock — the clock the CPU benches time with. */
#ifndef FATHOM_BENCH_CLOCK_H
#define FATHOM_BENCH_CLOCK_H

#include <time.h>

/* Seconds on the monotonic clock. */
static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif

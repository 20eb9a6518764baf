/* Internal helpers shared by the library's modules. Not installed. */
#ifndef FATHOM_INTERNAL_H
#define FATHOM_INTERNAL_H

#include "fathom.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define FATHOM_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define FATHOM_PRINTF(a, b)
#endif

/* Record a message for fathom_last_error() and return status. */
int fathom_fail(int status, const char *fmt, ...) FATHOM_PRINTF(2, 3);

/* Return an error with a message when cond holds. */
#define FATHOM_CHECK(cond, status, ...)                                                            \
    do {                                                                                           \
        if (cond) return fathom_fail((status), __VA_ARGS__);                                      \
    } while (0)

#define FATHOM_CHECK_ARG(cond, ...) FATHOM_CHECK(!(cond), FATHOM_ERR_INVALID_ARG, __VA_ARGS__)

/* Forward a failing status unchanged (the callee set the message). */
#define FATHOM_TRY(expr)                                                                           \
    do {                                                                                           \
        int fathom_try_status_ = (expr);                                                           \
        if (fathom_try_status_ < 0) return fathom_try_status_;                                     \
    } while (0)

/* Overflow-checked size arithmetic: false on overflow. */
static inline bool fathom_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool fathom_add_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* True when every x[i], i < n, is finite (neither NaN nor infinite). */
static inline bool fathom_all_finite(const float *x, uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        if (!__builtin_isfinite(x[i])) return false;
    return true;
}

/* malloc/calloc of count*size with overflow check; NULL on failure. */
void *fathom_alloc_array(uint64_t count, uint64_t size);
void *fathom_calloc_array(uint64_t count, uint64_t size);

/* The order fathom_select ranks scores by (core/select.c), as 32 bits: NaN
 * lowest (0), -0 == +0, otherwise the order of the floats. */
static inline uint32_t fathom_score_key(float s) {
    uint32_t u;
    __builtin_memcpy(&u, &s, sizeof u);
    if (s != s) return 0;
    if (s == 0.0f) return 0x80000000u;
    return u >> 31 ? ~u : u | 0x80000000u;
}

/* Number of worker threads for "0 = one per core". */
uint32_t fathom_default_threads(void);

#endif /* FATHOM_INTERNAL_H */

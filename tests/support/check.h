/* A minimal test harness: CHECK macros that count, and a summary line
 * "N passed, N failed" that CI reads. Exit 1 on any failure, 77 to skip. */
#ifndef FATHOM_CHECK_H
#define FATHOM_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int check_passed_, check_failed_;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (cond) {                                                                                \
            check_passed_++;                                                                       \
        } else {                                                                                   \
            check_failed_++;                                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

/* |a - b| <= tol, printing both values on failure. */
#define CHECK_NEAR(a, b, tol)                                                                      \
    do {                                                                                           \
        double ca_ = (double)(a), cb_ = (double)(b);                                               \
        if (fabs(ca_ - cb_) <= (tol)) {                                                            \
            check_passed_++;                                                                       \
        } else {                                                                                   \
            check_failed_++;                                                                       \
            fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s = %.9g, %s = %.9g, tol %g\n", __FILE__,  \
                    __LINE__, #a, ca_, #b, cb_, (double)(tol));                                   \
        }                                                                                          \
    } while (0)

/* A call returns the expected status (FATHOM_OK or an error code). */
#define CHECK_STATUS(expr, expected)                                                               \
    do {                                                                                           \
        int cs_ = (expr);                                                                          \
        if (cs_ == (expected)) {                                                                   \
            check_passed_++;                                                                       \
        } else {                                                                                   \
            check_failed_++;                                                                       \
            fprintf(stderr, "%s:%d: %s returned %d (%s: %s), expected %d\n", __FILE__, __LINE__,   \
                    #expr, cs_, fathom_status_name(cs_), fathom_last_error(), (int)(expected));    \
        }                                                                                          \
    } while (0)

#define CHECK_OK(expr) CHECK_STATUS(expr, FATHOM_OK)

static inline int check_summary(const char *name) {
    printf("%s: %d passed, %d failed\n", name, check_passed_, check_failed_);
    return check_failed_ ? 1 : 0;
}

#endif

/* Status codes, thread-local error messages and small shared helpers. */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static _Thread_local char last_error[512];

const char *fathom_status_name(int status) {
    switch (status) {
    case FATHOM_OK: return "ok";
    case FATHOM_ERR_INVALID_ARG: return "invalid argument";
    case FATHOM_ERR_NOMEM: return "out of memory";
    case FATHOM_ERR_IO: return "i/o error";
    case FATHOM_ERR_FORMAT: return "malformed file";
    case FATHOM_ERR_NONFINITE: return "non-finite value";
    case FATHOM_ERR_UNSUPPORTED: return "unsupported";
    case FATHOM_ERR_NUMERIC: return "numeric failure";
    case FATHOM_ERR_STATE: return "invalid state";
    case FATHOM_ERR_DEVICE: return "device error";
    default: return "unknown status";
    }
}

const char *fathom_last_error(void) { return last_error; }

int fathom_fail(int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

void *fathom_alloc_array(uint64_t count, uint64_t size) {
    uint64_t bytes;
    if (!fathom_mul_u64(count, size, &bytes) || bytes > (uint64_t)SIZE_MAX) return NULL;
    return malloc(bytes ? (size_t)bytes : 1);
}

void *fathom_calloc_array(uint64_t count, uint64_t size) {
    uint64_t bytes;
    if (!fathom_mul_u64(count, size, &bytes) || bytes > (uint64_t)SIZE_MAX) return NULL;
    return calloc(bytes ? (size_t)count : 1, bytes ? (size_t)size : 1);
}

uint32_t fathom_default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) return 1;
    if (n > 256) return 256;
    return (uint32_t)n;
}

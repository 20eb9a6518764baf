/* pool — one thread pool for the library (internal).
 *
 * A pool keeps threads - 1 worker threads; the caller of fathom_pool_run is
 * the last worker. Tasks 0..n-1 are taken from a shared counter, so which
 * worker runs which task is not fixed: a task that writes only its own
 * output (or its worker's scratch) gives the same result at any thread
 * count.
 *
 * Errors go back per call: the first failing task's status and message
 * (fathom_last_error() on the thread that ran it) are kept in the call's own
 * record and set on the calling thread when fathom_pool_run returns, so two
 * pools used at once from two threads never see each other's failures.
 * After a failure the tasks not yet started are skipped. One pool serves one
 * fathom_pool_run at a time (the caller of a pool is one thread). */
#ifndef FATHOM_POOL_H
#define FATHOM_POOL_H

#include <stdint.h>

typedef struct fathom_pool fathom_pool;

/* A task: FATHOM_OK or a negative status with fathom_fail's message.
 * worker is in [0, fathom_pool_threads()): 0 is the calling thread. */
typedef int (*fathom_task_fn)(void *arg, uint32_t task, uint32_t worker);

/* threads >= 1 (1: everything runs on the caller, no thread is started). */
int fathom_pool_create(fathom_pool **out, uint32_t threads);
void fathom_pool_free(fathom_pool *pool); /* NULL is fine; joins the workers */
uint32_t fathom_pool_threads(const fathom_pool *pool);

/* Run fn(arg, t, worker) for t in [0, n_tasks) and wait for all of them.
 * Returns FATHOM_OK, or the first failure's status with its message. */
int fathom_pool_run(fathom_pool *pool, fathom_task_fn fn, void *arg, uint32_t n_tasks);

#endif /* FATHOM_POOL_H */

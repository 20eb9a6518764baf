/* pool — see pool.h. Workers sleep on a condition variable between calls;
 * each call bumps a generation counter that wakes them. A call waits for
 * the workers that joined it, not for every worker to wake: one that wakes
 * after the call has ended finds no call and sleeps again, so a short call
 * does not pay the slowest wake-up. */
#include "pool.h"

#include "internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* One fathom_pool_run: its tasks and its first failure. Lives on the
 * caller's stack for the duration of the call. */
typedef struct pool_call {
    fathom_task_fn fn;
    void *arg;
    uint32_t n_tasks;
    atomic_uint next;
    atomic_int status; /* 0, or the first failure's status */
    char message[512]; /* that failure's message, written by the task that won status */
} pool_call;

typedef struct pool_worker {
    fathom_pool *pool;
    uint32_t id;
} pool_worker;

struct fathom_pool {
    uint32_t threads;     /* workers + the caller */
    pthread_t *tids;      /* [threads - 1] */
    pool_worker *workers; /* [threads - 1] */
    uint32_t started;
    pthread_mutex_t lock;
    pthread_cond_t wake, idle;
    uint64_t generation; /* bumped by every call that uses the workers */
    uint32_t active;     /* workers that joined the current call and are still in it */
    int stop;
    pool_call *call; /* the current call */
};

static void call_drain(pool_call *c, uint32_t worker) {
    while (atomic_load(&c->status) == 0) {
        const uint32_t t = atomic_fetch_add(&c->next, 1);
        if (t >= c->n_tasks) break;
        const int st = c->fn(c->arg, t, worker);
        if (st < 0) {
            int expected = 0;
            if (atomic_compare_exchange_strong(&c->status, &expected, st))
                snprintf(c->message, sizeof c->message, "%s", fathom_last_error());
            break;
        }
    }
}

static void *pool_main(void *arg) {
    const pool_worker *w = arg;
    fathom_pool *p = w->pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stop && p->generation == seen) pthread_cond_wait(&p->wake, &p->lock);
        if (p->stop) break;
        seen = p->generation;
        pool_call *c = p->call; /* NULL: the call ended before this worker woke */
        if (!c) continue;
        p->active++;
        pthread_mutex_unlock(&p->lock);
        call_drain(c, w->id);
        pthread_mutex_lock(&p->lock);
        if (--p->active == 0) pthread_cond_signal(&p->idle);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

void fathom_pool_free(fathom_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (uint32_t i = 0; i < p->started; i++) pthread_join(p->tids[i], NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->idle);
    free(p->tids);
    free(p->workers);
    free(p);
}

int fathom_pool_create(fathom_pool **out, uint32_t threads) {
    FATHOM_CHECK_ARG(out, "fathom_pool_create: out is NULL");
    *out = NULL;
    FATHOM_CHECK_ARG(threads >= 1, "fathom_pool_create: threads is 0");
    fathom_pool *p = calloc(1, sizeof *p);
    FATHOM_CHECK(!p, FATHOM_ERR_NOMEM, "pool: out of memory");
    p->threads = threads;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->idle, NULL);
    if (threads > 1) {
        p->tids = fathom_calloc_array(threads - 1, sizeof *p->tids);
        p->workers = fathom_calloc_array(threads - 1, sizeof *p->workers);
        if (!p->tids || !p->workers) {
            fathom_pool_free(p);
            return fathom_fail(FATHOM_ERR_NOMEM, "pool: out of memory for %u threads", threads);
        }
        for (uint32_t i = 0; i + 1 < threads; i++) {
            p->workers[i] = (pool_worker){p, i + 1};
            if (pthread_create(&p->tids[i], NULL, pool_main, &p->workers[i]) != 0) {
                fathom_pool_free(p);
                return fathom_fail(FATHOM_ERR_NOMEM, "pool: cannot start worker thread %u", i + 1);
            }
            p->started++;
        }
    }
    *out = p;
    return FATHOM_OK;
}

uint32_t fathom_pool_threads(const fathom_pool *p) { return p ? p->threads : 0; }

int fathom_pool_run(fathom_pool *p, fathom_task_fn fn, void *arg, uint32_t n_tasks) {
    FATHOM_CHECK_ARG(p && fn, "fathom_pool_run: NULL argument");
    pool_call c = {.fn = fn, .arg = arg, .n_tasks = n_tasks};
    atomic_init(&c.next, 0);
    atomic_init(&c.status, 0);
    if (p->threads <= 1 || n_tasks <= 1) {
        call_drain(&c, 0);
    } else {
        pthread_mutex_lock(&p->lock);
        p->call = &c;
        p->generation++;
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);
        call_drain(&c, 0);
        pthread_mutex_lock(&p->lock);
        /* every task has been taken; those still running are in joined workers */
        while (p->active) pthread_cond_wait(&p->idle, &p->lock);
        p->call = NULL;
        pthread_mutex_unlock(&p->lock);
    }
    const int st = atomic_load(&c.status);
    return st < 0 ? fathom_fail(st, "%s", c.message) : FATHOM_OK;
}

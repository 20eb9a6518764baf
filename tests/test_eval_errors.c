/* fathom_eval_run's failures and extremes:
 * - finite but extreme keys (3e38) overflow q.k: FATHOM_ERR_NONFINITE with a
 *   message naming the layer and KV head, never a NaN error and FATHOM_OK;
 * - k far above n (4294967295) runs with scratch sized by n, and gives
 *   exactly the results of k = n;
 * - two fathom_eval_run calls at once from two threads each get their own
 *   status and message (the worker's error goes back to its own call): one
 *   failing and one succeeding, and two failing in different layers. */
#include "check.h"
#include "fathom.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LAYERS 2
#define QH 4
#define KVH 2
#define DIM 16
#define TOKENS 96
#define POSITIONS 8

static char tmpdir[64];

/* A capture of LAYERS layers with small random q, k, v; when huge_layer is
 * in range, KV head 1 of that layer has one key of 3e38 in every channel
 * (token 50, seen by every queried position). Queries are positive, so q.k
 * with that key overflows float. */
static void write_capture(const char *path, int huge_layer, uint64_t seed) {
    const fathom_source_info info = {"extreme", LAYERS, QH, KVH, DIM, TOKENS, POSITIONS, TOKENS - POSITIONS};
    float *q = malloc(sizeof(float) * QH * POSITIONS * DIM);
    float *k = malloc(sizeof(float) * KVH * TOKENS * DIM);
    float *v = malloc(sizeof(float) * KVH * TOKENS * DIM);
    fathom_capture_writer *w = NULL;
    CHECK_OK(fathom_capture_writer_open(&w, path, &info, FATHOM_DTYPE_F32));
    uint64_t s = seed;
    for (uint32_t l = 0; l < LAYERS; l++) {
        for (uint64_t i = 0; i < (uint64_t)QH * POSITIONS * DIM; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            q[i] = 0.5f + (float)(s >> 40) / (float)(1u << 24);
        }
        for (uint64_t i = 0; i < (uint64_t)KVH * TOKENS * DIM; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            k[i] = (float)(s >> 40) / (float)(1u << 24) - 0.5f;
            v[i] = (float)((s >> 20) & 0xfffff) / (float)(1u << 20) - 0.5f;
        }
        if ((int)l == huge_layer)
            for (uint32_t j = 0; j < DIM; j++) k[((uint64_t)1 * TOKENS + 50) * DIM + j] = 3e38f;
        CHECK_OK(fathom_capture_writer_layer(w, l, q, k, v));
    }
    CHECK_OK(fathom_capture_writer_close(w));
    free(q);
    free(k);
    free(v);
}

static fathom_source *open_capture(const char *name, int huge_layer, uint64_t seed) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    write_capture(path, huge_layer, seed);
    fathom_source *src = NULL;
    CHECK_OK(fathom_capture_open(&src, path));
    unlink(path); /* mapped: stays readable */
    return src;
}

static const char *METHODS = "fathom:16,sparq:4,thumb,landmark,oracle,dense";

/* One fathom_eval_run on its own thread; status, message and results are
 * kept for the main thread to check (check.h's counters are not atomic). */
typedef struct run {
    const fathom_source *src;
    uint32_t k;
    int status;
    char message[512];
    fathom_method_result results[8];
    uint32_t n;
} run;

static void *run_eval(void *arg) {
    run *r = arg;
    fathom_method m[8];
    r->status = fathom_method_parse_list(METHODS, m, 8, &r->n);
    if (r->status == FATHOM_OK) {
        fathom_eval_config cfg = {0};
        cfg.k = r->k;
        cfg.threads = 2;
        r->status = fathom_eval_run(r->src, m, r->n, &cfg, r->results);
    }
    snprintf(r->message, sizeof r->message, "%s", r->status < 0 ? fathom_last_error() : "");
    return NULL;
}

static void check_failure(const run *r, const char *expect) {
    CHECK_STATUS(r->status, FATHOM_ERR_NONFINITE);
    if (!strstr(r->message, expect)) {
        fprintf(stderr, "message \"%s\" lacks \"%s\"\n", r->message, expect);
        CHECK(0);
    }
}

static void test_extreme_keys(const fathom_source *huge0, const fathom_source *huge1) {
    run a = {.src = huge0, .k = 40}, b = {.src = huge1, .k = 40};
    run_eval(&a);
    run_eval(&b);
    check_failure(&a, "eval: layer 0, KV head 1, position ");
    check_failure(&b, "eval: layer 1, KV head 1, position ");
    CHECK(strstr(a.message, "dense attention is not finite") != NULL);
}

static void test_huge_k(const fathom_source *good) {
    run all = {.src = good, .k = TOKENS}, huge = {.src = good, .k = 4294967295u};
    run_eval(&all);
    run_eval(&huge);
    CHECK_OK(all.status);
    CHECK_OK(huge.status);
    CHECK(all.n == 6 && memcmp(all.results, huge.results, sizeof all.results[0] * all.n) == 0);
    /* every key selected: each method is exact */
    for (uint32_t i = 0; i < all.n; i++) {
        CHECK(all.results[i].rel_error < 1e-6);
        CHECK(all.results[i].selection_ratio == 1.0);
    }
}

static void test_concurrent(const fathom_source *good, const fathom_source *huge0, const fathom_source *huge1) {
    run ref = {.src = good, .k = 40};
    run_eval(&ref);
    CHECK_OK(ref.status);
    for (int round = 0; round < 4; round++) {
        /* one fails inside a worker, the other succeeds */
        run a = {.src = huge1, .k = 40}, b = {.src = good, .k = 40};
        pthread_t ta, tb;
        CHECK(pthread_create(&ta, NULL, run_eval, &a) == 0);
        CHECK(pthread_create(&tb, NULL, run_eval, &b) == 0);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        check_failure(&a, "eval: layer 1, KV head 1, position ");
        CHECK_OK(b.status);
        CHECK(b.message[0] == 0);
        CHECK(memcmp(b.results, ref.results, sizeof ref.results[0] * ref.n) == 0);
        /* both fail, in different layers: each gets its own message */
        run c = {.src = huge0, .k = 40}, d = {.src = huge1, .k = 40};
        CHECK(pthread_create(&ta, NULL, run_eval, &c) == 0);
        CHECK(pthread_create(&tb, NULL, run_eval, &d) == 0);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        check_failure(&c, "eval: layer 0, KV head 1, position ");
        check_failure(&d, "eval: layer 1, KV head 1, position ");
    }
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/fathom-eval-errors-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    fathom_source *good = open_capture("good.safetensors", -1, 1);
    fathom_source *huge0 = open_capture("huge0.safetensors", 0, 2);
    fathom_source *huge1 = open_capture("huge1.safetensors", 1, 3);
    if (good && huge0 && huge1) {
        test_extreme_keys(huge0, huge1);
        test_huge_k(good);
        test_concurrent(good, huge0, huge1);
    }
    fathom_source_free(good);
    fathom_source_free(huge0);
    fathom_source_free(huge1);
    rmdir(tmpdir);
    return check_summary("test_eval_errors");
}

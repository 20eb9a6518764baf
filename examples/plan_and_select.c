/* The index core of libfathom on one page, on random keys: build a bit-plane
 * store, plan per-channel read depths for one query with reverse
 * water-filling (fathom_water_fill, 48 code bits), score every key from the
 * planned planes only, keep sink + local + top-k, attend exactly over those
 * keys and compare with dense attention over all of them.
 *
 * Build it against an installed libfathom (examples/CMakeLists.txt):
 *   cmake -S examples -B build-example -DCMAKE_PREFIX_PATH=<prefix>
 *   cmake --build build-example && build-example/plan_and_select
 * or with pkg-config:
 *   cc examples/plan_and_select.c $(pkg-config --cflags --libs --static fathom)
 */
#include <fathom.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { N = 8192, D = 128, BUDGET = 48, K = 256 };

#define TRY(call)                                                                        \
    do {                                                                                 \
        if ((call) != FATHOM_OK) {                                                       \
            fprintf(stderr, "plan_and_select: %s: %s\n", #call, fathom_last_error());   \
            return 1;                                                                    \
        }                                                                                \
    } while (0)

static float uniform(uint64_t *state) { /* [-0.5, 0.5) */
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)(*state >> 40) / (float)(1ull << 24) - 0.5f;
}

int main(void) {
    static float keys[N * D], values[N * D], scores[N];
    static uint64_t work[N];
    float query[D], var[D], sparse[D], dense[D];
    double g[D];
    uint8_t depths[D];
    uint32_t idx[K], count = 0;
    uint64_t state = 1, bytes = 0;

    /* channel j has spread exp(-j/24): a few channels carry most of q.k */
    for (uint32_t i = 0; i < N; i++)
        for (uint32_t j = 0; j < D; j++) {
            keys[i * D + j] = uniform(&state) * expf(-(float)j / 24.0f);
            values[i * D + j] = uniform(&state);
        }
    const uint32_t target = N / 3; /* the query looks for this key */
    for (uint32_t j = 0; j < D; j++) query[j] = 300.0f * keys[target * D + j];

    fathom_store *store = NULL;
    TRY(fathom_store_create(&store, D, 0, NULL));
    TRY(fathom_store_append(store, keys, N));
    TRY(fathom_store_variance(store, var));
    TRY(fathom_importance(D, 1, query, var, g));
    TRY(fathom_water_fill(D, g, BUDGET, depths, NULL));
    TRY(fathom_store_scan(store, depths, query, 1, N, scores, &bytes));
    TRY(fathom_select(scores, N, K, FATHOM_SINK_TOKENS, FATHOM_LOCAL_TOKENS, work, idx, &count));
    TRY(fathom_attend(D, query, keys, values, idx, count, sparse));
    TRY(fathom_attend(D, query, keys, values, NULL, N, dense));

    int found = 0;
    for (uint32_t i = 0; i < count; i++) found |= idx[i] == target;
    printf("keys %u, dim %u: read %.1f bits per key (%llu bytes of planes and scales)\n", N, D,
           fathom_depth_bits(D, depths), (unsigned long long)bytes);
    printf("selected %u keys (key %u %s), attention error vs dense %.4f\n", count, target,
           found ? "among them" : "missed", fathom_rel_l2(D, sparse, dense));
    fathom_store_free(store);
    return found ? 0 : 1;
}

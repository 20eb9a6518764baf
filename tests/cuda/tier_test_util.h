/* Shared by test_cuda_tier.cu and test_cuda_centered.cu: a head's keys as
 * floats, copies to the device, the tier-against-CPU-store comparison and
 * batched appends. Include after check.h, fathom_cuda.h, store_internal.h
 * and cuda/cuda_check.cuh. */
#ifndef FATHOM_TIER_TEST_UTIL_H
#define FATHOM_TIER_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <vector>

/* One head's keys as float [n][dim] from rows [..][heads][dim], from row first. */
static inline std::vector<float> head_floats(const std::vector<uint16_t> &rows, uint64_t first, uint64_t n,
                                             uint32_t heads, uint32_t dim, uint32_t h) {
    std::vector<float> out(n * dim);
    for (uint64_t t = 0; t < n; t++)
        for (uint32_t j = 0; j < dim; j++)
            out[t * dim + j] = fathom_bf16_to_f32(rows[((first + t) * heads + h) * dim + j]);
    return out;
}

template <typename T>
static inline T *to_device(const T *host, size_t count) {
    T *d = NULL;
    CK(cudaMalloc((void **)&d, count * sizeof(T) + 16));
    if (count) CK(cudaMemcpy(d, host, count * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

/* Totals of a check over a test: values compared and how many differed. */
typedef struct tally {
    uint64_t compared, bad;
} tally;

/* The tier's (session, layer, head) equals a CPU store centered on mu
 * (NULL: uncentered) and fed keys [n][dim]: plane words and scales of
 * every block in use, the sums, the raw K rows. */
static inline void compare_store(fathom_cuda_tier *tier, uint32_t s, uint32_t layer, uint32_t h, uint32_t dim,
                                 uint32_t S, const float *mu, const float *keys, uint64_t n, const char *what,
                                 tally *t) {
    fathom_store *st = NULL;
    CHECK_OK(fathom_store_create(&st, dim, S, NULL));
    if (mu) CHECK_OK(fathom_store_set_center(st, mu));
    CHECK_OK(fathom_store_append(st, keys, n));
    uint64_t bad = 0, compared = 0;
    const uint64_t nb = (n + 63) / 64;
    for (uint32_t seg = 0; (uint64_t)seg * S < nb; seg++) {
        fathom_cuda_tier_view v;
        fathom_segment_view c;
        CHECK_OK(fathom_cuda_tier_segment(tier, s, layer, h, seg, &v));
        CHECK_OK(fathom_store_segment(st, seg, &c));
        for (uint32_t j = 0; j < dim; j++)
            for (uint32_t b = 0; b < c.blocks; b++) {
                for (uint32_t p = 0; p < 4; p++)
                    bad += v.planes[((uint64_t)j * 4 + p) * S + b] != c.planes[((uint64_t)j * 4 + p) * S + b];
                bad += v.scales[(uint64_t)j * S + b] != c.scales[(uint64_t)j * S + b];
                compared += 5;
            }
        for (uint32_t i = 0; i < c.tokens; i++)
            for (uint32_t j = 0; j < dim; j++, compared++)
                bad += fathom_bf16_to_f32(v.kv[(uint64_t)i * 2 * dim + j]) != keys[(c.first_token + i) * dim + j];
    }
    const double *a[3], *b[3];
    CHECK_OK(fathom_cuda_tier_sums(tier, s, layer, h, &a[0], &a[1], &a[2]));
    fathom_store_sums(st, &b[0], &b[1], &b[2]);
    for (int x = 0; x < 3; x++)
        for (uint32_t j = 0; j < dim; j++, compared++) bad += memcmp(&a[x][j], &b[x][j], sizeof(double)) != 0;
    if (bad)
        fprintf(stderr, "%s: session %u layer %u head %u n %llu: %llu of %llu values differ\n", what, s, layer, h,
                (unsigned long long)n, (unsigned long long)bad, (unsigned long long)compared);
    t->compared += compared;
    t->bad += bad;
    fathom_store_free(st);
}

/* Append calls[call][entry] tokens per call to the batch's sessions at
 * every layer; entry e's tokens come from src[e] in order. */
static inline void append_calls(fathom_cuda_tier *tier, uint32_t layers, uint32_t heads, uint32_t dim,
                                const std::vector<uint32_t> &sessions, const std::vector<std::vector<uint32_t>> &calls,
                                const std::vector<const std::vector<uint16_t> *> &src, std::vector<uint64_t> &done,
                                cudaStream_t stream = 0) {
    const uint32_t B = (uint32_t)sessions.size();
    uint32_t *d_s = to_device(sessions.data(), B);
    uint32_t *d_c = NULL;
    CK(cudaMalloc((void **)&d_c, B * 4));
    uint32_t maxc = 1;
    for (auto &c : calls)
        for (uint32_t x : c) maxc = x > maxc ? x : maxc;
    uint16_t *d_k = NULL, *d_v = NULL;
    const size_t row = (size_t)heads * dim;
    CK(cudaMalloc((void **)&d_k, (size_t)maxc * B * row * 2));
    CK(cudaMalloc((void **)&d_v, (size_t)maxc * B * row * 2));
    std::vector<uint16_t> hk, hv;
    for (auto &c : calls) {
        hk.clear();
        hv.clear();
        for (uint32_t e = 0; e < B; e++) {
            const uint16_t *r = src[e]->data() + done[e] * row;
            hk.insert(hk.end(), r, r + (size_t)c[e] * row);
            for (size_t i = 0; i < (size_t)c[e] * row; i++) hv.push_back((uint16_t)(r[i] ^ 0x8000u)); /* V = -K */
        }
        CK(cudaStreamSynchronize(stream));
        if (!hk.empty()) {
            CK(cudaMemcpy(d_k, hk.data(), hk.size() * 2, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(d_v, hv.data(), hv.size() * 2, cudaMemcpyHostToDevice));
        }
        CK(cudaMemcpy(d_c, c.data(), B * 4, cudaMemcpyHostToDevice));
        for (uint32_t l = 0; l < layers; l++)
            CHECK_OK(fathom_cuda_tier_append(tier, l, d_s, B, d_c, maxc, d_k, d_v, stream));
        for (uint32_t e = 0; e < B; e++) done[e] += c[e];
    }
    CK(cudaDeviceSynchronize());
    cudaFree(d_s);
    cudaFree(d_c);
    cudaFree(d_k);
    cudaFree(d_v);
}

/* compare_store on an uncentered session, checked on its own: something
 * compared, nothing differs. */
static inline void compare_plain_store(fathom_cuda_tier *tier, uint32_t s, uint32_t layer, uint32_t h, uint32_t dim,
                                       uint32_t S, const float *keys, uint64_t n, const char *what) {
    tally t = {0, 0};
    compare_store(tier, s, layer, h, dim, S, NULL, keys, n, what, &t);
    CHECK(t.compared > 0);
    CHECK(t.bad == 0);
}

#endif /* FATHOM_TIER_TEST_UTIL_H */

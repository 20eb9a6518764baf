/* The GPU step against the CPU library and an independent host reference:
 * depths equal fathom_water_fill / the top-r rule exactly; plane and
 * landmark scores are bit-identical to a host emulation of the CPU kernels'
 * arithmetic (oracle scores within a stated tolerance); the winners equal
 * fathom_select over the GPU's own scores; the output matches fathom_attend
 * over the GPU's winners. Every output is poisoned before each step.
 * Every printed check says how many values it compared, and fails if it
 * compared none where the case must compare some. Argument checks run
 * without a GPU; the rest exits 77 when none is present. FATHOM_TEST_QUICK
 * set (compute-sanitizer runs) keeps the cases of at most 20000 tokens
 * over all problems. */
#include "check.h"
#define FATHOM_CUDA_EXPERIMENTAL /* nibble scans, planes as K, direct transport, traces */
#include "fathom_cuda.h"
extern "C" {
#include "store_internal.h"
}

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_check.cuh"
#include "cuda/cuda_internal.cuh" /* FC_HIST_BITS, FC_CAND_CAP: where the radix select ends */

#define DIM 128


#include "test_rng.h"

/* ---- an independent encoder of the documented store layout ---- */
static void encode_planes(const float *keys, uint64_t n, uint64_t *planes, uint16_t *scales) {
    const uint64_t nb = (n + 63) / 64;
    memset(planes, 0, nb * DIM * 4 * sizeof(uint64_t));
    for (uint64_t b = 0; b < nb; b++) {
        const uint64_t first = b * 64, count = n - first < 64 ? n - first : 64;
        for (uint32_t j = 0; j < DIM; j++) {
            float mx = 0.0f;
            for (uint64_t i = 0; i < count; i++) mx = fmaxf(mx, fabsf(keys[(first + i) * DIM + j]));
            const uint16_t h = fathom_f32_to_f16(mx);
            const float a = fathom_f16_to_f32(h), s = a / 8.0f;
            scales[j * nb + b] = h;
            for (uint64_t i = 0; i < count; i++) {
                int c = 8;
                if (a > 0.0f) {
                    float f = floorf(keys[(first + i) * DIM + j] / s) + 8.0f;
                    c = f < 0.0f ? 0 : f > 15.0f ? 15 : (int)f;
                }
                for (int p = 0; p < 4; p++)
                    planes[(j * 4 + p) * nb + b] |= (uint64_t)((c >> (3 - p)) & 1) << i;
            }
        }
    }
}

static uint32_t code_of(const uint64_t *planes, uint64_t nb, uint32_t j, uint64_t i) {
    uint32_t c = 0;
    for (int p = 0; p < 4; p++) c = (c << 1) | (uint32_t)((planes[(j * 4 + p) * nb + i / 64] >> (i % 64)) & 1);
    return c;
}

/* The CPU plane kernels' arithmetic, written per token: active channels in
 * passes of 64 (index order), inside a pass by depth then index, fused
 * multiply-adds from 0, each pass's sum added to the score. */
static float ref_plane_score(const uint64_t *planes, const uint16_t *scales, uint64_t n, uint64_t i,
                             const uint8_t *depths, const float *q) {
    const uint64_t nb = (n + 63) / 64, b = i / 64;
    uint32_t active[DIM], count = 0;
    for (uint32_t j = 0; j < DIM; j++)
        if (depths[j]) active[count++] = j;
    float score = 0.0f;
    for (uint32_t first = 0; first < count; first += 64) {
        float acc = 0.0f;
        for (uint32_t t = 1; t <= 4; t++)
            for (uint32_t c = first; c < count && c < first + 64; c++) {
                const uint32_t j = active[c];
                if (depths[j] != t) continue;
                const float half = (float)(1u << (t - 1));
                const float val = ((float)(code_of(planes, nb, j, i) >> (4 - t)) + (0.5f - half)) *
                                  (fathom_f16_to_f32(scales[j * nb + b]) / half);
                acc = fmaf(q[j], val, acc);
            }
        score = score + acc;
    }
    return score;
}

/* fathom_landmarks_scan's sum order: 8 partial sums, then pairs. */
static float ref_landmark_score(const uint16_t *mean, const float *q) {
    float part[8] = {0};
    for (uint32_t j = 0; j < DIM; j++) {
        volatile float prod = q[j] * fathom_f16_to_f32(mean[j]);
        part[j % 8] = part[j % 8] + prod;
    }
    return ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
}

static float bf16_to_f32(uint16_t h) { return fathom_bf16_to_f32(h); }

/* zero_queries = SCORES_NARROW: channel 0 of every key is about 50 and of
 * every query 66, so all scores lie near 3300, in one bin of the top-k's
 * first 11-bit digit ([3072, 3584) there): the select needs its second digit. */
#define SCORES_NARROW 2
static uint64_t top_paths[2]; /* rows whose boundary bin fits / overflows FC_CAND_CAP */

/* The number of middle scores [sink, n - local) in the bin of the first
 * 11-bit digit (of topk.cu's score order) that holds the m-th largest. */
static uint64_t boundary_bin_count(const float *row, uint64_t n, uint32_t sink, uint32_t local, uint32_t m) {
    static uint64_t hist[FC_HIST_BINS];
    memset(hist, 0, sizeof hist);
    for (uint64_t i = sink; i < n - local; i++) {
        float s = row[i];
        uint32_t b, key = 0;
        if (s == s) {
            if (s == 0.0f) s = 0.0f;
            memcpy(&b, &s, 4);
            key = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
        }
        hist[key >> (32 - FC_HIST_BITS)]++;
    }
    uint64_t above = 0;
    for (int d = FC_HIST_BINS - 1; d >= 0; d--) {
        if (above + hist[d] >= m) return hist[d];
        above += hist[d];
    }
    return 0;
}

typedef struct test_case {
    const char *name;
    uint64_t n;
    uint32_t problems, group, k, sink, local;
    fathom_cuda_scan_kind scan;
    uint32_t param;
    fathom_cuda_transport transport;
    fathom_cuda_key_rows key_rows;
    int zero_queries;    /* 1: every score ties (the tie rule, the overflow path); 2: SCORES_NARROW */
    uint32_t row_stride; /* 2*DIM: K and V interleaved per token */
    uint32_t lanes;      /* >= 1: a pipelined step over that many streams */
    uint32_t chunk;      /* problems per pipeline chunk (fathom_cuda_lanes_set_chunk) */
    uint32_t prefetch;   /* > 0: a step over other problems first prefetches this many */
} test_case;

/* The default chunking by context, and its floor of ceil(P / MAX_CHUNKS). */
static void check_chunk_rule(void) {
    fathom_cuda_lanes *lanes = NULL;
    CHECK_OK(fathom_cuda_lanes_create(2, &lanes));
    fathom_cuda_config c;
    memset(&c, 0, sizeof c);
    c.problems = 8;
    const struct { uint64_t tokens; uint32_t problems, set, per; } rule[] = {
        {65535, 8, 0, 8}, {65536, 8, 0, 2}, {196607, 8, 0, 2}, {196608, 8, 0, 1}, {1u << 20, 8, 0, 1},
        {1u << 20, 40, 0, 3}, {1000, 40, 0, 40}, {1u << 20, 8, 3, 3}, {1u << 20, 8, 100, 8},
        {1000, 33, 1, 3},
    };
    for (size_t i = 0; i < sizeof rule / sizeof rule[0]; i++) {
        c.tokens = rule[i].tokens;
        c.problems = rule[i].problems;
        CHECK_OK(fathom_cuda_lanes_set_chunk(lanes, rule[i].set));
        CHECK(fathom_cuda_lanes_chunk(lanes, &c) == rule[i].per);
    }
    CHECK(fathom_cuda_lanes_chunk(NULL, &c) == 0 && fathom_cuda_lanes_chunk(lanes, NULL) == 0);
    fathom_cuda_lanes_destroy(lanes);
}

typedef struct host_problem {
    float *keys_f;      /* [n][DIM] original keys */
    uint64_t *planes;   /* pinned */
    uint64_t *nibbles;  /* pinned, the same codes as [dim][nb][4] nibble words */
    uint16_t *scales;   /* pinned */
    uint16_t *landmarks;
    uint16_t *keys;     /* bf16, pinned */
    uint16_t *values;   /* bf16, pinned */
    uint16_t *kv;       /* pinned, K and V rows interleaved per token (row_stride 2*DIM) */
    float *var;
} host_problem;

static void *pinned(size_t bytes) {
    void *p = NULL;
    CK(cudaHostAlloc(&p, bytes ? bytes : 16, cudaHostAllocMapped | cudaHostAllocPortable));
    return p;
}

static void *to_device(const void *src, size_t bytes) {
    void *d = NULL;
    CK(cudaMalloc(&d, bytes ? bytes : 16));
    CK(cudaMemcpy(d, src, bytes, cudaMemcpyHostToDevice));
    return d;
}

static void run_case(const test_case *tc) {
    const uint64_t n = tc->n, nb = (n + 63) / 64, nl = (n + 7) / 8;
    const uint32_t P = tc->problems, G = tc->group, rows = P * G;
    fathom_cuda_config cfg = {DIM, G, P, n, tc->k, tc->sink, tc->local, tc->scan, tc->param,
                              tc->transport, tc->row_stride, (uint32_t)tc->key_rows};
    host_problem *hp = (host_problem *)calloc(P, sizeof *hp);
    fathom_cuda_problem *probs = (fathom_cuda_problem *)calloc(P, sizeof *probs);
    float *queries = (float *)malloc((size_t)rows * DIM * sizeof(float));
    float *var = (float *)malloc((size_t)P * DIM * sizeof(float));
    uint8_t *fixed = (uint8_t *)malloc((size_t)P * DIM);
    void **device_copies = (void **)calloc((size_t)P * 5, sizeof(void *));
    for (uint32_t p = 0; p < P; p++) {
        host_problem *h = &hp[p];
        float chan_scale[DIM];
        for (uint32_t j = 0; j < DIM; j++) chan_scale[j] = expf(rng_normal());
        if (tc->zero_queries == SCORES_NARROW) chan_scale[0] = 50.0f; /* the water-fill reads channel 0 in full */
        h->keys_f = (float *)malloc(n * DIM * sizeof(float));
        for (uint64_t i = 0; i < n * DIM; i++) h->keys_f[i] = rng_normal() * chan_scale[i % DIM];
        if (tc->zero_queries == SCORES_NARROW)
            for (uint64_t i = 0; i < n; i++) h->keys_f[i * DIM] = 50.0f + 0.01f * rng_normal();
        h->planes = (uint64_t *)pinned(nb * DIM * 4 * 8);
        h->scales = (uint16_t *)pinned(nb * DIM * 2);
        encode_planes(h->keys_f, n, h->planes, h->scales);
        h->nibbles = (uint64_t *)pinned(nb * DIM * 4 * 8);
        memset(h->nibbles, 0, nb * DIM * 32);
        for (uint32_t j = 0; j < DIM; j++)
            for (uint64_t i = 0; i < n; i++)
                h->nibbles[(j * nb + i / 64) * 4 + (i % 64) / 16] |= (uint64_t)code_of(h->planes, nb, j, i)
                                                                     << (4 * (i % 16));
        h->landmarks = (uint16_t *)pinned(nl * DIM * 2);
        for (uint64_t l = 0; l < nl; l++)
            for (uint32_t j = 0; j < DIM; j++) {
                double s = 0;
                uint64_t c = 0;
                for (uint64_t i = l * 8; i < n && i < l * 8 + 8; i++, c++) s += h->keys_f[i * DIM + j];
                h->landmarks[l * DIM + j] = fathom_f32_to_f16((float)(s / (double)c));
            }
        h->keys = (uint16_t *)pinned(n * DIM * 2);
        h->values = (uint16_t *)pinned(n * DIM * 2);
        for (uint64_t i = 0; i < n * DIM; i++) {
            h->keys[i] = fathom_f32_to_bf16(h->keys_f[i]);
            h->values[i] = fathom_f32_to_bf16(rng_normal());
        }
        h->kv = (uint16_t *)pinned(n * DIM * 4);
        for (uint64_t i = 0; i < n; i++) {
            memcpy(h->kv + i * 2 * DIM, h->keys + i * DIM, DIM * 2);
            memcpy(h->kv + i * 2 * DIM + DIM, h->values + i * DIM, DIM * 2);
        }
        for (uint32_t j = 0; j < DIM; j++) {
            var[p * DIM + j] = chan_scale[j] * chan_scale[j];
            fixed[p * DIM + j] = (uint8_t)(rng_u64() % 5);
        }
        for (uint32_t i = 0; i < G * DIM; i++)
            queries[(size_t)p * G * DIM + i] = tc->zero_queries == 1 ? 0.0f
                                               : tc->zero_queries == SCORES_NARROW && i % DIM == 0 ? 66.0f
                                                                                                   : rng_normal();
        fathom_cuda_problem *pr = &probs[p];
        uint64_t *index = tc->scan == FATHOM_CUDA_SCAN_NIBBLE4 ? h->nibbles : h->planes;
        if (tc->transport == FATHOM_CUDA_RESIDENT) {
            pr->planes = (const uint64_t *)(device_copies[p * 5 + 0] = to_device(index, nb * DIM * 32));
            pr->scales = (const uint16_t *)(device_copies[p * 5 + 1] = to_device(h->scales, nb * DIM * 2));
            pr->landmarks = (const uint16_t *)(device_copies[p * 5 + 2] = to_device(h->landmarks, nl * DIM * 2));
            pr->keys = (const uint16_t *)(device_copies[p * 5 + 3] = to_device(h->keys, n * DIM * 2));
            pr->values = (const uint16_t *)(device_copies[p * 5 + 4] = to_device(h->values, n * DIM * 2));
        } else {
            pr->planes = index;
            pr->scales = h->scales;
            pr->landmarks = h->landmarks;
            pr->keys = h->keys;
            pr->values = h->values;
            if (tc->row_stride == 2 * DIM) {
                pr->keys = h->kv;
                pr->values = h->kv + DIM;
            }
        }
    }
    size_t ws_bytes = 0;
    CHECK_OK(fathom_cuda_workspace_size(&cfg, &ws_bytes));
    void *ws, *d_probs, *d_q, *d_var, *d_fixed, *d_out, *d_sel, *d_cnt, *d_depths, *d_scores, *d_uni;
    CK(cudaMalloc(&ws, ws_bytes));
    d_probs = to_device(probs, P * sizeof *probs);
    d_q = to_device(queries, (size_t)rows * DIM * 4);
    d_var = to_device(var, (size_t)P * DIM * 4);
    d_fixed = to_device(fixed, (size_t)P * DIM);
    CK(cudaMalloc(&d_out, (size_t)rows * DIM * 4));
    CK(cudaMalloc(&d_sel, (size_t)rows * tc->k * 4));
    CK(cudaMalloc(&d_cnt, (size_t)rows * 4));
    CK(cudaMalloc(&d_depths, (size_t)P * DIM));
    CK(cudaMalloc(&d_scores, (size_t)rows * n * 4));
    CK(cudaMalloc(&d_uni, (size_t)P * 4));
    cudaStream_t stream;
    CK(cudaStreamCreate(&stream));
    /* poison every output and the workspace: all-ones bytes are NaN / UINT_MAX / depth 255 */
    CK(cudaMemset(ws, 0xff, ws_bytes));
    auto poison_outputs = [&]() {
        CK(cudaMemset(d_out, 0xff, (size_t)rows * DIM * 4));
        CK(cudaMemset(d_sel, 0xff, (size_t)rows * tc->k * 4));
        CK(cudaMemset(d_cnt, 0xff, (size_t)rows * 4));
        CK(cudaMemset(d_depths, 0xff, (size_t)P * DIM));
        CK(cudaMemset(d_scores, 0xff, (size_t)rows * n * 4));
        CK(cudaMemset(d_uni, 0xff, (size_t)P * 4));
    };
    poison_outputs();
    fathom_cuda_step_args args;
    memset(&args, 0, sizeof args);
    args.problems = (const fathom_cuda_problem *)d_probs;
    args.queries = (const float *)d_q;
    args.variance = (const float *)d_var;
    /* NIBBLE4 with param 1: a nibble label cache of the fixed channels */
    const bool nibble_subset = tc->scan == FATHOM_CUDA_SCAN_NIBBLE4 && tc->param;
    args.fixed_depths = tc->scan == FATHOM_CUDA_SCAN_FIXED || nibble_subset ? (const uint8_t *)d_fixed : NULL;
    args.out = (float *)d_out;
    args.selected = (uint32_t *)d_sel;
    args.selected_count = (uint32_t *)d_cnt;
    args.depths = (uint8_t *)d_depths;
    args.scores = (float *)d_scores;
    args.union_count = (uint32_t *)d_uni;
    args.workspace = ws;
    args.workspace_bytes = ws_bytes;
    fathom_cuda_lanes *lanes = NULL;
    uint64_t *d_trace = NULL;
    void *d_rot = NULL, *d_guess = NULL;
    if (tc->lanes) {
        CHECK_OK(fathom_cuda_lanes_create(tc->lanes, &lanes));
        CHECK_STATUS(fathom_cuda_lanes_set_chunk(lanes, 65536), FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fathom_cuda_lanes_set_chunk(NULL, 1), FATHOM_ERR_INVALID_ARG);
        CHECK_OK(fathom_cuda_lanes_set_chunk(lanes, tc->chunk));
        if (tc->prefetch) {
            /* step A runs over the problems rotated by one (every staging slot
             * then holds another problem's planes) and prefetches random
             * guessed depths for this step's first problems; this step is
             * told what was staged and must still match the CPU library */
            fathom_cuda_problem *rot = (fathom_cuda_problem *)malloc(P * sizeof *rot);
            for (uint32_t p = 0; p < P; p++) rot[p] = probs[(p + 1) % P];
            d_rot = to_device(rot, P * sizeof *rot);
            free(rot);
            uint8_t *guess = (uint8_t *)malloc((size_t)tc->prefetch * DIM);
            for (size_t i = 0; i < (size_t)tc->prefetch * DIM; i++) guess[i] = (uint8_t)(rng_u64() % 5);
            d_guess = to_device(guess, (size_t)tc->prefetch * DIM);
            free(guess);
            fathom_cuda_step_args pa = args;
            pa.problems = (const fathom_cuda_problem *)d_rot;
            pa.lanes = lanes;
            pa.prefetch_problems = (const fathom_cuda_problem *)d_probs;
            pa.prefetch_depths = (const uint8_t *)d_guess;
            pa.prefetch_count = tc->prefetch;
            fathom_cuda_step_args bad = pa;
            bad.prefetch_count = P + 1;
            CHECK_STATUS(fathom_cuda_step(&cfg, &bad, stream), FATHOM_ERR_INVALID_ARG);
            CHECK_OK(fathom_cuda_step(&cfg, &pa, stream));
            CK(cudaStreamSynchronize(stream));
            poison_outputs(); /* not the workspace: its staging holds the prefetch */
            args.staged_depths = (const uint8_t *)d_guess;
            args.staged_count = tc->prefetch;
        }
        CK(cudaMalloc(&d_trace, FATHOM_CUDA_TRACE_SLOTS * 8));
        CK(cudaMemset(d_trace, 0, FATHOM_CUDA_TRACE_SLOTS * 8));
        CHECK_STATUS(fathom_cuda_lanes_trace(lanes, d_trace, 0), FATHOM_ERR_INVALID_ARG);
        CHECK_OK(fathom_cuda_lanes_trace(lanes, d_trace, 1));
        args.lanes = lanes;
    }
    CHECK_OK(fathom_cuda_step(&cfg, &args, stream));
    CK(cudaStreamSynchronize(stream));
    CK(cudaGetLastError());
    if (lanes && P > 1) {
        /* the timeline shows the pipeline's order: chunks cross the link one
         * after another, and a chunk's lane starts only after its bytes are in */
        uint64_t t[FATHOM_CUDA_TRACE_SLOTS];
        CK(cudaMemcpy(t, d_trace, sizeof t, cudaMemcpyDeviceToHost));
        uint32_t per = (P + FATHOM_CUDA_MAX_CHUNKS - 1) / FATHOM_CUDA_MAX_CHUNKS;
        if (tc->chunk > per) per = tc->chunk < P ? tc->chunk : P;
        if (tc->chunk == 0) per = P; /* the default below 64k tokens: one chunk */
        CHECK(fathom_cuda_lanes_chunk(lanes, &cfg) == per);
        const uint32_t chunks = (P + per - 1) / per;
        int order_bad = t[0] == 0 || t[1] < t[0];
        for (uint32_t c = 0; c < chunks; c++) {
            const uint64_t *e = t + 2 + 6 * c;
            order_bad += e[0] < t[0] || e[1] < e[0] || e[2] < e[1] || e[3] < e[2] || e[4] < e[3] ||
                         e[5] < e[4] || t[1] < e[5];
            if (c > 0) order_bad += e[0] < e[-6 + 1];
        }
        for (uint32_t c = chunks; c < FATHOM_CUDA_MAX_CHUNKS; c++)
            for (int e = 0; e < 6; e++) order_bad += t[2 + 6 * c + e] != 0; /* unused slots untouched */
        printf("%-34s pipeline timeline of %u chunks: %d out of order, %.1f us\n", tc->name, chunks,
               order_bad, (t[1] - t[0]) * 1e-3);
        CHECK(order_bad == 0);
    }
    fathom_cuda_lanes_destroy(lanes);
    if (d_trace) CK(cudaFree(d_trace));
    if (d_rot) CK(cudaFree(d_rot));
    if (d_guess) CK(cudaFree(d_guess));

    float *out = (float *)malloc((size_t)rows * DIM * 4);
    uint32_t *sel = (uint32_t *)malloc((size_t)rows * tc->k * 4);
    uint32_t *cnt = (uint32_t *)malloc((size_t)rows * 4);
    uint8_t *depths = (uint8_t *)malloc((size_t)P * DIM);
    float *scores = (float *)malloc((size_t)rows * n * 4);
    uint32_t *uni = (uint32_t *)malloc((size_t)P * 4);
    CK(cudaMemcpy(uni, d_uni, (size_t)P * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(out, d_out, (size_t)rows * DIM * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(sel, d_sel, (size_t)rows * tc->k * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(cnt, d_cnt, (size_t)rows * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(depths, d_depths, (size_t)P * DIM, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(scores, d_scores, (size_t)rows * n * 4, cudaMemcpyDeviceToHost));

    int depth_bad = 0, score_bad = 0, sel_bad = 0, out_bad = 0, union_bad = 0;
    int layout_bad = 0, cpu_bad = 0, cpu_checked = 0;
    /* comparisons made, per check */
    uint64_t depth_n = 0, score_n = 0, sel_n = 0, out_n = 0, union_n = 0, layout_n = 0;
    /* the CPU kernels that fathom_store_scan picks on x86-64 with AVX2 or AVX-512 use fused
     * multiply-adds, as the GPU does; the portable one does not (then a tolerance applies) */
    const int cpu_exact = fathom_scan_kernel_available(FATHOM_SCAN_AVX2) ||
                          fathom_scan_kernel_available(FATHOM_SCAN_AVX512);
    float *cpu_scores = (float *)malloc((size_t)G * n * 4);
    double worst_rel = 0, worst_score = 0;
    uint64_t *work = (uint64_t *)malloc(fathom_select_work_size(n));
    uint32_t *want = (uint32_t *)malloc((size_t)tc->k * 4);
    float *kf = (float *)malloc(n * DIM * 4), *vf = (float *)malloc(n * DIM * 4);
    const int planes_scan = tc->scan <= FATHOM_CUDA_SCAN_FIXED || tc->scan == FATHOM_CUDA_SCAN_NIBBLE4;
    for (uint32_t p = 0; p < P; p++) {
        host_problem *h = &hp[p];
        const float *qg = queries + (size_t)p * G * DIM;
        uint8_t wdepth[DIM];
        if (tc->scan == FATHOM_CUDA_SCAN_WATER_FILL) {
            double g[DIM];
            CHECK_OK(fathom_importance(DIM, G, qg, var + p * DIM, g));
            CHECK_OK(fathom_water_fill(DIM, g, tc->param, wdepth, NULL));
        } else if (tc->scan == FATHOM_CUDA_SCAN_TOP_CHANNELS) {
            double mass[DIM];
            for (uint32_t j = 0; j < DIM; j++) {
                mass[j] = 0;
                for (uint32_t hh = 0; hh < G; hh++) mass[j] += fabs((double)qg[hh * DIM + j]);
            }
            /* rank by (mass desc, channel asc), written as a selection loop */
            memset(wdepth, 0, DIM);
            for (uint32_t c = 0; c < tc->param; c++) {
                int best = -1;
                for (uint32_t j = 0; j < DIM; j++)
                    if (!wdepth[j] && (best < 0 || mass[j] > mass[best])) best = (int)j;
                wdepth[best] = 4;
            }
        } else if (tc->scan == FATHOM_CUDA_SCAN_NIBBLE4) {
            for (uint32_t j = 0; j < DIM; j++) wdepth[j] = !tc->param || fixed[p * DIM + j] ? 4 : 0;
        } else {
            memcpy(wdepth, fixed + p * DIM, DIM);
        }
        if (planes_scan)
            for (uint32_t j = 0; j < DIM; j++, depth_n++) depth_bad += depths[p * DIM + j] != wdepth[j];
        if (tc->scan <= FATHOM_CUDA_SCAN_FIXED || tc->scan == FATHOM_CUDA_SCAN_LANDMARK) {
            /* the CPU library on the same keys: the store's bytes are this test's layout, and
             * fathom_store_scan / fathom_landmarks_scan give the GPU's scores */
            if (tc->scan == FATHOM_CUDA_SCAN_LANDMARK) {
                fathom_landmarks *lm = NULL;
                CHECK_OK(fathom_landmarks_create(&lm, DIM));
                CHECK_OK(fathom_landmarks_append(lm, h->keys_f, n));
                CHECK_OK(fathom_landmarks_scan(lm, qg, G, n, cpu_scores, NULL));
                fathom_landmarks_free(lm);
            } else {
                fathom_store *st = NULL;
                CHECK_OK(fathom_store_create(&st, DIM, (uint32_t)nb, NULL));
                CHECK_OK(fathom_store_append(st, h->keys_f, n));
                fathom_segment_view view;
                CHECK_OK(fathom_store_segment(st, 0, &view));
                layout_bad += memcmp(view.planes, h->planes, nb * DIM * 32) != 0;
                layout_bad += memcmp(view.scales, h->scales, nb * DIM * 2) != 0;
                layout_n += 2;
                CHECK_OK(fathom_store_scan(st, wdepth, qg, G, n, cpu_scores, NULL));
                fathom_store_free(st);
            }
            for (uint64_t i = 0; i < (uint64_t)G * n; i++) {
                const float g = scores[(size_t)p * G * n + i], c = cpu_scores[i];
                cpu_checked++;
                if (cpu_exact || tc->scan == FATHOM_CUDA_SCAN_LANDMARK)
                    cpu_bad += memcmp(&g, &c, 4) != 0;
                else
                    cpu_bad += !(fabsf(g - c) <= 1e-5f * (1.0f + fabsf(c)));
            }
        }
        {
            /* the fetch moved exactly the union of the group's winners */
            const uint32_t *sets[FATHOM_CUDA_MAX_GROUP];
            uint32_t counts[FATHOM_CUDA_MAX_GROUP], want_union = 0;
            for (uint32_t hh = 0; hh < G; hh++) {
                sets[hh] = sel + (size_t)(p * G + hh) * tc->k;
                counts[hh] = cnt[p * G + hh] <= tc->k ? cnt[p * G + hh] : 0;
            }
            CHECK_OK(fathom_union_size(G, sets, counts, &want_union));
            union_bad += uni[p] != want_union;
            union_n++;
        }
        if (n > tc->k && tc->k > tc->sink + tc->local)
            for (uint32_t hh = 0; hh < G; hh++) {
                const uint64_t c = boundary_bin_count(scores + (size_t)(p * G + hh) * n, n, tc->sink, tc->local,
                                                      tc->k - tc->sink - tc->local);
                top_paths[c > FC_CAND_CAP]++;
                if (tc->zero_queries == SCORES_NARROW) {
                    if (hh == 0) printf("%-34s boundary bin of head 0: %llu keys\n", tc->name, (unsigned long long)c);
                    CHECK(c > FC_CAND_CAP); /* the case is there for the second digit */
                }
            }
        for (uint32_t hh = 0; hh < G; hh++) {
            const uint32_t r = p * G + hh;
            const float *q = qg + hh * DIM;
            const float *sc = scores + (size_t)r * n;
            for (uint64_t i = 0; i < n; i++, score_n++) {
                float ref;
                if (planes_scan) {
                    ref = ref_plane_score(h->planes, h->scales, n, i, wdepth, q);
                    score_bad += memcmp(&ref, &sc[i], 4) != 0;
                } else if (tc->scan == FATHOM_CUDA_SCAN_LANDMARK) {
                    const float ref = ref_landmark_score(h->landmarks + (i / 8) * DIM, q);
                    score_bad += memcmp(&ref, &sc[i], 4) != 0;
                } else {
                    /* oracle: float products summed in another order; tolerance
                     * 1e-5 of sum |q_j k_j| covers float rounding of 128 terms */
                    double exact = 0, mag = 0;
                    for (uint32_t j = 0; j < DIM; j++) {
                        double x = (double)q[j] * bf16_to_f32(h->keys[i * DIM + j]);
                        exact += x;
                        mag += fabs(x);
                    }
                    double err = fabs(sc[i] - exact) / (mag + 1e-30);
                    if (err > worst_score) worst_score = err;
                    score_bad += !(err <= 1e-5);
                }
            }
            uint32_t wc = 0;
            CHECK_OK(fathom_select(sc, n, tc->k, tc->sink, tc->local, work, want, &wc));
            if (cnt[r] != wc || memcmp(want, sel + (size_t)r * tc->k, wc * 4) != 0) sel_bad++;
            sel_n++;
            /* attention over the GPU's winners, keys as the GPU reads them */
            const uint32_t c = cnt[r] <= tc->k ? cnt[r] : 0;
            for (uint32_t s = 0; s < c; s++) {
                const uint64_t i = sel[(size_t)r * tc->k + s];
                if (i >= n) { sel_bad++; continue; }
                for (uint32_t j = 0; j < DIM; j++) {
                    float key = bf16_to_f32(h->keys[i * DIM + j]);
                    if (tc->key_rows == FATHOM_CUDA_KEYS_PLANES)
                        key = ((float)code_of(h->planes, nb, j, i) - 7.5f) *
                              (fathom_f16_to_f32(h->scales[j * nb + i / 64]) * 0.125f);
                    kf[i * DIM + j] = key;
                    vf[i * DIM + j] = bf16_to_f32(h->values[i * DIM + j]);
                }
            }
            float ref_out[DIM];
            if (c == 0) { out_bad++; continue; }
            CHECK_OK(fathom_attend(DIM, q, kf, vf, sel + (size_t)r * tc->k, c, ref_out));
            for (uint32_t j = 0; j < DIM; j++) out_bad += !isfinite(out[(size_t)r * DIM + j]);
            double rel = fathom_rel_l2(DIM, out + (size_t)r * DIM, ref_out);
            out_n++;
            if (!(rel <= worst_rel)) worst_rel = rel;
        }
    }
    /* the CPU library has kernels for the plane and landmark scans only; the
     * store's layout is compared where the store is built (plane scans) */
    const int want_cpu = tc->scan <= FATHOM_CUDA_SCAN_FIXED || tc->scan == FATHOM_CUDA_SCAN_LANDMARK;
    const char *cpu_how = cpu_checked == 0 ? ""
                          : cpu_exact || tc->scan == FATHOM_CUDA_SCAN_LANDMARK ? " bit-exact"
                                                                               : " within 1e-5";
    printf("%-34s depths %d bad of %llu, scores %d bad of %llu (worst %.2g), vs CPU library %d bad "
           "of %d%s, layout %d bad of %llu, selections %d bad of %llu, unions %d bad of %llu, "
           "out %d bad of %llu rows, worst rel %.2g\n",
           tc->name, depth_bad, (unsigned long long)depth_n, score_bad, (unsigned long long)score_n,
           worst_score, cpu_bad, cpu_checked, cpu_how, layout_bad, (unsigned long long)layout_n,
           sel_bad, (unsigned long long)sel_n, union_bad, (unsigned long long)union_n, out_bad,
           (unsigned long long)out_n, worst_rel);
    /* every check that applies to this case compared something */
    CHECK(!planes_scan || depth_n == (uint64_t)P * DIM);
    CHECK(score_n == (uint64_t)rows * n);
    CHECK(!want_cpu || cpu_checked == (int)(rows * n));
    CHECK(!(want_cpu && tc->scan != FATHOM_CUDA_SCAN_LANDMARK) || layout_n == 2ull * P);
    CHECK(sel_n == rows && union_n == P && out_n == rows);
    CHECK(cpu_bad == 0);
    CHECK(layout_bad == 0);
    CHECK(union_bad == 0);
    CHECK(depth_bad == 0);
    CHECK(score_bad == 0);
    CHECK(sel_bad == 0);
    CHECK(out_bad == 0);
    /* double accumulation on both sides; float output: a few ulp */
    CHECK(worst_rel <= 1e-6);

    free(cpu_scores); free(uni); free(out); free(sel); free(cnt); free(depths); free(scores); free(work); free(want); free(kf); free(vf);
    CK(cudaStreamDestroy(stream));
    void *dev[] = {ws, d_probs, d_q, d_var, d_fixed, d_out, d_sel, d_cnt, d_depths, d_scores, d_uni};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) CK(cudaFree(dev[i]));
    for (uint32_t i = 0; i < P * 5; i++)
        if (device_copies[i]) CK(cudaFree(device_copies[i]));
    for (uint32_t p = 0; p < P; p++) {
        free(hp[p].keys_f);
        CK(cudaFreeHost(hp[p].planes));
        CK(cudaFreeHost(hp[p].nibbles));
        CK(cudaFreeHost(hp[p].scales));
        CK(cudaFreeHost(hp[p].landmarks));
        CK(cudaFreeHost(hp[p].keys));
        CK(cudaFreeHost(hp[p].values));
        CK(cudaFreeHost(hp[p].kv));
    }
    free(hp); free(probs); free(queries); free(var); free(fixed); free(device_copies);
}

static void check_bad_arguments(void) {
    const fathom_cuda_config good = {DIM, 4, 2, 1000, 64, 4, 8, FATHOM_CUDA_SCAN_WATER_FILL, 48,
                                     FATHOM_CUDA_GATHER_KERNEL, 0, FATHOM_CUDA_KEYS_BF16};
    size_t bytes = 0;
    CHECK_OK(fathom_cuda_workspace_size(&good, &bytes));
    CHECK(bytes > 0);
    CHECK_STATUS(fathom_cuda_workspace_size(NULL, &bytes), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_cuda_workspace_size(&good, NULL), FATHOM_ERR_INVALID_ARG);
    fathom_cuda_config c;
#define BAD(field, value, status)                                                                  \
    do {                                                                                           \
        c = good;                                                                                  \
        c.field = value;                                                                           \
        CHECK_STATUS(fathom_cuda_workspace_size(&c, &bytes), status);                              \
        CHECK_STATUS(fathom_cuda_step(&c, NULL, 0), status);                                       \
    } while (0)
    BAD(dim, 64, FATHOM_ERR_UNSUPPORTED);
    BAD(group, 0, FATHOM_ERR_INVALID_ARG);
    BAD(group, 9, FATHOM_ERR_INVALID_ARG);
    BAD(problems, 0, FATHOM_ERR_INVALID_ARG);
    BAD(problems, 70000, FATHOM_ERR_INVALID_ARG);
    BAD(tokens, 0, FATHOM_ERR_INVALID_ARG);
    BAD(tokens, 1ull << 33, FATHOM_ERR_INVALID_ARG);
    BAD(k, 0, FATHOM_ERR_INVALID_ARG);
    BAD(k, 2048, FATHOM_ERR_INVALID_ARG);
    BAD(sink, 60, FATHOM_ERR_INVALID_ARG);
    BAD(scan, (fathom_cuda_scan_kind)8, FATHOM_ERR_INVALID_ARG);
    BAD(param, 0, FATHOM_ERR_INVALID_ARG);
    BAD(param, 513, FATHOM_ERR_INVALID_ARG);
    BAD(transport, (fathom_cuda_transport)5, FATHOM_ERR_INVALID_ARG);
    BAD(transport, (fathom_cuda_transport)3, FATHOM_ERR_INVALID_ARG); /* the removed CUB transport's place */
    BAD(key_rows, 3, FATHOM_ERR_INVALID_ARG);
    BAD(key_rows, 2, FATHOM_ERR_INVALID_ARG);
    BAD(row_stride, 64, FATHOM_ERR_INVALID_ARG);
    BAD(row_stride, 3 * DIM, FATHOM_ERR_INVALID_ARG);
    c = good;
    c.scan = FATHOM_CUDA_SCAN_ORACLE;
    c.row_stride = 2 * DIM;
    CHECK_STATUS(fathom_cuda_workspace_size(&c, &bytes), FATHOM_ERR_INVALID_ARG);
    c = good;
    c.group = 8;
    c.k = 1024; /* group*k above 4096 */
    CHECK_STATUS(fathom_cuda_workspace_size(&c, &bytes), FATHOM_ERR_INVALID_ARG);
    c = good;
    c.scan = FATHOM_CUDA_SCAN_TOP_CHANNELS;
    c.param = 129;
    CHECK_STATUS(fathom_cuda_workspace_size(&c, &bytes), FATHOM_ERR_INVALID_ARG);
    c = good;
    c.scan = FATHOM_CUDA_SCAN_NIBBLE4;
    c.key_rows = FATHOM_CUDA_KEYS_PLANES;
    CHECK_STATUS(fathom_cuda_workspace_size(&c, &bytes), FATHOM_ERR_INVALID_ARG);
    /* step arguments: each missing pointer, a small or misaligned workspace */
    fathom_cuda_step_args a;
    memset(&a, 0, sizeof a);
    static float dummy[64] __attribute__((aligned(256)));
    a.problems = (const fathom_cuda_problem *)dummy;
    a.queries = dummy;
    a.variance = dummy;
    a.out = dummy;
    a.workspace = dummy;
    a.workspace_bytes = bytes;
    fathom_cuda_step_args b;
#define BAD_ARG(field, value)                                                                      \
    do {                                                                                           \
        b = a;                                                                                     \
        b.field = value;                                                                           \
        CHECK_STATUS(fathom_cuda_step(&good, &b, 0), FATHOM_ERR_INVALID_ARG);                      \
    } while (0)
    BAD_ARG(problems, NULL);
    BAD_ARG(queries, NULL);
    BAD_ARG(variance, NULL);
    BAD_ARG(out, NULL);
    BAD_ARG(workspace, NULL);
    BAD_ARG(workspace, (void *)((char *)dummy + 4));
    BAD_ARG(workspace_bytes, 100);
    c = good;
    c.scan = FATHOM_CUDA_SCAN_FIXED;
    CHECK_STATUS(fathom_cuda_step(&c, &a, 0), FATHOM_ERR_INVALID_ARG); /* no fixed_depths */
    /* prefetch and staged planes: need lanes, counts within problems, depths */
    BAD_ARG(prefetch_count, 1);
    BAD_ARG(prefetch_count, good.problems + 1);
    BAD_ARG(staged_count, 1);
    BAD_ARG(staged_count, good.problems + 1);
    /* lanes: not with phase events; 1..8 streams */
    b = a;
    b.lanes = (const fathom_cuda_lanes *)dummy;
    cudaEvent_t no_events[FATHOM_CUDA_PHASES + 1];
    b.phase_events = no_events;
    CHECK_STATUS(fathom_cuda_step(&good, &b, 0), FATHOM_ERR_INVALID_ARG);
    fathom_cuda_lanes *l = (fathom_cuda_lanes *)dummy;
    CHECK_STATUS(fathom_cuda_lanes_create(0, &l), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_cuda_lanes_trace(NULL, NULL, 0), FATHOM_ERR_INVALID_ARG);
    CHECK(l == NULL);
    CHECK_STATUS(fathom_cuda_lanes_create(FATHOM_CUDA_MAX_LANES + 1, &l), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_cuda_lanes_create(2, NULL), FATHOM_ERR_INVALID_ARG);
    fathom_cuda_lanes_destroy(NULL);
    BAD(transport, (fathom_cuda_transport)4, FATHOM_ERR_INVALID_ARG);
    uint8_t d[DIM] = {0};
    d[0] = 4;
    d[5] = 1;
    CHECK(fathom_cuda_plane_bytes(DIM, 1000, d) == (34u + 10u) * 16u);
    CHECK(fathom_cuda_plane_bytes(DIM, 1000, NULL) == 0);
}

int main(void) {
    check_bad_arguments();
    if (!fathom_cuda_device_present()) {
        printf("test_cuda_step: %s; skipped\n", fathom_last_error());
        check_summary("test_cuda_step");
        return 77;
    }
    check_chunk_rule();
    const test_case cases[] = {
        {"water-fill B=48, kernel, n=5000", 5000, 3, 4, 512, 4, 32, FATHOM_CUDA_SCAN_WATER_FILL, 48,
         FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_KEYS_BF16, 0, 0, 0, 0, 0},
        {"water-fill B=20, kernel, n=1000 g=3", 1000, 2, 3, 64, 4, 8, FATHOM_CUDA_SCAN_WATER_FILL, 20,
         FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_KEYS_BF16, 0, 0, 0, 0, 0},
        {"water-fill B=300, resident, planes", 3001, 2, 4, 128, 4, 32, FATHOM_CUDA_SCAN_WATER_FILL,
         300, FATHOM_CUDA_RESIDENT, FATHOM_CUDA_KEYS_PLANES, 0, 0, 0, 0, 0},
        {"top-channels r=16, kernel, n=4099", 4099, 2, 4, 512, 4, 32, FATHOM_CUDA_SCAN_TOP_CHANNELS,
         16, FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_KEYS_PLANES, 0, 0, 0, 0, 0},
        {"fixed random depths, kernel, n=700", 700, 2, 2, 100, 4, 32, FATHOM_CUDA_SCAN_FIXED, 0,
         FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_KEYS_BF16, 0, 0, 0, 0, 0},
        {"landmark, kernel, n=2047", 2047, 2, 4, 256, 4, 32, FATHOM_CUDA_SCAN_LANDMARK, 0,
         FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_KEYS_BF16, 0, 0, 0, 0, 0},
        {"oracle, resident, n=3000", 3000, 1, 4, 512, 4, 32, FATHOM_CUDA_SCAN_ORACLE, 0,
         FATHOM_CUDA_RESIDENT, FATHOM_CUDA_KEYS_BF16, 0, 0, 0, 0, 0},
        {"oracle, kernel, n=1500 g=1", 1500, 2, 1, 64, 0, 0, FATHOM_CUDA_SCAN_ORACLE, 0,
         FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_KEYS_BF16, 0, 0, 0, 0, 0},
        {"n <= k (everything kept)", 300, 2, 4, 512, 4, 32, FATHOM_CUDA_SCAN_WATER_FILL, 48,
         FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_KEYS_BF16, 0, 0, 0, 0, 0},
        {"k = sink + local", 2000, 1, 4, 36, 4, 32, FATHOM_CUDA_SCAN_WATER_FILL, 48,
         FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_KEYS_BF16, 0, 0, 0, 0, 0},
        /* a middle of 70000 keys and nothing to pick from it (found by the bench at 1M, k = 36) */
        {"k = sink + local, n=70000, lanes 2", 70000, 3, 4, 36, 4, 32, FATHOM_CUDA_SCAN_TOP_CHANNELS, 16,
         FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_KEYS_BF16, 0, 2 * DIM, 2, 1, 0},
        {"K/V interleaved rows (stride 256)", 4100, 2, 4, 512, 4, 32, FATHOM_CUDA_SCAN_WATER_FILL, 48,
         FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_KEYS_BF16, 0, 2 * DIM, 0, 0, 0},
        {"nibble4 (the full4 codes), kernel", 3001, 2, 4, 512, 4, 32, FATHOM_CUDA_SCAN_NIBBLE4, 0,
         FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_KEYS_BF16, 0, 0, 0, 0, 0},
        {"nibble4, resident, g=8", 1000, 1, 8, 256, 4, 32, FATHOM_CUDA_SCAN_NIBBLE4, 0,
         FATHOM_CUDA_RESIDENT, FATHOM_CUDA_KEYS_BF16, 0, 0, 0, 0, 0},
        {"nibble label cache of the fixed channels, kernel", 4100, 2, 4, 512, 4, 32, FATHOM_CUDA_SCAN_NIBBLE4, 1,
         FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_KEYS_BF16, 0, 0, 0, 0, 0},
        {"nibble label cache, resident, lanes 2, g=3", 2000, 3, 3, 256, 4, 32, FATHOM_CUDA_SCAN_NIBBLE4, 1,
         FATHOM_CUDA_RESIDENT, FATHOM_CUDA_KEYS_BF16, 0, 0, 2, 1, 0},
        {"water-fill B=64, g=8 (8-token lanes)", 2100, 1, 8, 256, 4, 32, FATHOM_CUDA_SCAN_WATER_FILL, 64,
         FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_KEYS_BF16, 0, 0, 0, 0, 0},
        /* rows of at most 163840 tokens sort and unite by a bitmap of positions, longer ones by CUB's radix
         * sort and a merge by rank */
        {"n=163840: the largest bitmap", 163840, 1, 4, 512, 4, 32, FATHOM_CUDA_SCAN_TOP_CHANNELS, 16,
         FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_KEYS_BF16, 0, 0, 0, 0, 0},
        {"n=170000: past the bitmap (radix sort, merge)", 170000, 1, 4, 512, 4, 32, FATHOM_CUDA_SCAN_WATER_FILL, 48,
         FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_KEYS_BF16, 0, 0, 0, 0, 0},
        {"all scores tie past the bitmap (overflow path)", 170000, 1, 2, 512, 4, 32, FATHOM_CUDA_SCAN_FIXED, 0,
         FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_KEYS_BF16, 1, 0, 0, 0, 0},
        /* one first digit holds every score: the select's second digit, in quick mode too */
        {"scores in one first-digit bin", 20000, 1, 4, 512, 4, 32, FATHOM_CUDA_SCAN_WATER_FILL, 48,
         FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_KEYS_BF16, SCORES_NARROW, 0, 0, 0, 0},
        {"all scores tie (overflow path)", 9000, 1, 4, 512, 4, 32, FATHOM_CUDA_SCAN_FIXED, 0,
         FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_KEYS_BF16, 1, 0, 0, 0, 0},
        {"all scores tie, fits the buffer", 3000, 1, 2, 512, 4, 32, FATHOM_CUDA_SCAN_FIXED, 0,
         FATHOM_CUDA_RESIDENT, FATHOM_CUDA_KEYS_BF16, 1, 0, 0, 0, 0},
        /* pipelined steps (lanes) and scans of host memory in place (direct) */
        {"lanes 3, water-fill B=48, P=5", 5000, 5, 4, 512, 4, 32, FATHOM_CUDA_SCAN_WATER_FILL, 48,
         FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_KEYS_BF16, 0, 2 * DIM, 3, 1, 0},
        {"lanes 4, P=20 (chunks of 2 heads)", 700, 20, 4, 64, 4, 8, FATHOM_CUDA_SCAN_FIXED, 0,
         FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_KEYS_BF16, 0, 0, 4, 1, 0},
        {"direct, water-fill B=48, lanes 2", 4099, 3, 4, 512, 4, 32, FATHOM_CUDA_SCAN_WATER_FILL, 48,
         FATHOM_CUDA_DIRECT, FATHOM_CUDA_KEYS_BF16, 0, 2 * DIM, 2, 1, 0},
        {"direct, top-channels r=16, planes", 3001, 2, 4, 256, 4, 32, FATHOM_CUDA_SCAN_TOP_CHANNELS,
         16, FATHOM_CUDA_DIRECT, FATHOM_CUDA_KEYS_PLANES, 0, 0, 0, 0, 0},
        {"direct, landmark, lanes 2", 2047, 3, 4, 256, 4, 32, FATHOM_CUDA_SCAN_LANDMARK, 0,
         FATHOM_CUDA_DIRECT, FATHOM_CUDA_KEYS_BF16, 0, 0, 2, 1, 0},
        {"direct, oracle, lanes 2", 1500, 2, 4, 128, 4, 32, FATHOM_CUDA_SCAN_ORACLE, 0,
         FATHOM_CUDA_DIRECT, FATHOM_CUDA_KEYS_BF16, 0, 0, 2, 1, 0},
        {"resident, lanes 2, nibble4 (default chunk: one)", 1000, 3, 4, 256, 4, 32, FATHOM_CUDA_SCAN_NIBBLE4, 0,
         FATHOM_CUDA_RESIDENT, FATHOM_CUDA_KEYS_BF16, 0, 0, 2, 0, 0},
        {"lanes 1, sparq r=8, P=17 (chunks of 2)", 900, 17, 2, 128, 4, 32, FATHOM_CUDA_SCAN_TOP_CHANNELS, 8,
         FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_KEYS_BF16, 0, 2 * DIM, 1, 1, 0},
        {"lanes 2, chunks of 3 heads, P=7", 2500, 7, 4, 256, 4, 32, FATHOM_CUDA_SCAN_WATER_FILL, 40,
         FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_KEYS_BF16, 0, 2 * DIM, 2, 3, 0},
        {"lanes 3, one chunk of all heads, P=4", 1800, 4, 4, 256, 4, 32, FATHOM_CUDA_SCAN_TOP_CHANNELS, 16,
         FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_KEYS_BF16, 0, 2 * DIM, 3, 9, 0},
        /* a step over other problems prefetches guessed depths for these first */
        {"prefetch 3 of 5 heads, water-fill, lanes 2", 5000, 5, 4, 512, 4, 32, FATHOM_CUDA_SCAN_WATER_FILL, 48,
         FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_KEYS_BF16, 0, 2 * DIM, 2, 1, 3},
        {"prefetch all 4, fixed depths, chunks of 2", 3001, 4, 4, 256, 4, 32, FATHOM_CUDA_SCAN_FIXED, 0,
         FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_KEYS_BF16, 0, 0, 3, 2, 4},
        {"prefetch, one head, top-channels", 2000, 1, 4, 256, 4, 32, FATHOM_CUDA_SCAN_TOP_CHANNELS, 16,
         FATHOM_CUDA_GATHER_KERNEL, FATHOM_CUDA_KEYS_BF16, 0, 2 * DIM, 1, 0, 1},
    };
    const size_t total = sizeof cases / sizeof cases[0];
    const char *quick_env = getenv("FATHOM_TEST_QUICK");
    const int quick = quick_env && *quick_env && strcmp(quick_env, "0") != 0;
    size_t ran = 0;
    for (size_t i = 0; i < total; i++) {
        if (quick && cases[i].n * cases[i].problems > 20000) continue;
        run_case(&cases[i]);
        ran++;
    }
    printf("test_cuda_step: %zu of %zu cases%s; rows selected after the first digit %llu, the second %llu\n", ran,
           total, quick ? " (FATHOM_TEST_QUICK)" : "", (unsigned long long)top_paths[0],
           (unsigned long long)top_paths[1]);
    CHECK(ran > 0);
    CHECK(top_paths[0] > 0 && top_paths[1] > 0); /* both ends of the radix select ran */
    return check_summary("test_cuda_step");
}

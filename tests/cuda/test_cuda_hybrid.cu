/* The hybrid CPU/GPU step against the GPU-only tier step.
 *   select: fathom_cuda_hybrid_select (host plan + scan + select over the
 *           tier's pinned host segments) gives the GPU step's depths,
 *           selections and counts for every pair;
 *   step:   fathom_cuda_hybrid_step with 0, 1, half and all of the pairs on
 *           the host gives depths, selections, counts, unions, outputs and
 *           LSE bit-identical to fathom_cuda_tier_step, on one stream and
 *           pipelined (one KV head per chunk), eager and replayed from a
 *           captured graph (the host work as a host node);
 *   given:  fathom_cuda_tier_step_given with the host's selections, with
 *           and without their depths, bit-identical; two deliberately bad
 *           selections (a position beyond the session, a repeated one) are
 *           reported by fathom_cuda_tier_check, their head gets the
 *           placeholder winners and every other row is unchanged;
 *           hybrid_select refuses a length beyond the session's and a
 *           session that is not live;
 *   scheduler: calibrated rates are positive (the GPU's fixed time finite)
 *           and the share is in range.
 * All of it twice: in the exact scan mode and in the int8 one
 * (fathom_cuda_tier_set_scan_mode: the GPU's int8 scan, the host's int8
 * kernels), where the GPU-only step's selections differ from the exact
 * mode's in some rows (the int8 scan ran).
 * Sessions: lengths with a partial block, several segments, and one at or
 * below k (every token selected); G = 4, d = 128.
 * Argument checks run without a GPU; the rest exits 77 when none is present. */
#include "check.h"
#define FATHOM_CUDA_EXPERIMENTAL /* fathom_cuda_tier_set_lanes */
#include "fathom_cuda.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "cuda/cuda_check.cuh"

#define TEST_RNG_SEED 0x9e3779b97f4a7c15ull
#include "test_rng.h"

static const uint32_t L = 2, H = 2, G = 4, D = 128, S = 32, K = 128;

/* bf16 rows [n][H][D]: channel scales log-normal, a few offset channels. */
static std::vector<uint16_t> make_rows(uint64_t n, uint64_t seed) {
    rng_state = seed;
    std::vector<float> sd(H * D), mean(H * D);
    for (uint32_t i = 0; i < H * D; i++) {
        sd[i] = (float)exp(rng_normal());
        mean[i] = i % 13 == 2 ? 20.0f * rng_normal() : 0.0f;
    }
    std::vector<uint16_t> rows(n * H * D);
    for (uint64_t t = 0; t < n; t++)
        for (uint32_t i = 0; i < H * D; i++) rows[t * H * D + i] = fathom_f32_to_bf16(mean[i] + sd[i] * rng_normal());
    return rows;
}

template <typename T>
static T *dev_alloc(size_t count) {
    T *d = NULL;
    CK(cudaMalloc((void **)&d, count * sizeof(T) + 16));
    CK(cudaMemset(d, 0, count * sizeof(T) + 16));
    return d;
}

template <typename T>
static std::vector<T> to_host(const T *d, size_t count) {
    std::vector<T> h(count);
    CK(cudaMemcpy(h.data(), d, count * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

/* Everything a step writes, on the device, and its copy on the host. */
struct outputs {
    uint16_t *out;
    float *lse;
    uint32_t *sel, *sel_count, *uni;
    uint8_t *depths;
};
struct host_outputs {
    std::vector<uint16_t> out;
    std::vector<float> lse;
    std::vector<uint32_t> sel, sel_count, uni;
    std::vector<uint8_t> depths;
};

static outputs alloc_outputs(uint32_t P) {
    outputs o;
    o.out = dev_alloc<uint16_t>((size_t)P * G * D);
    o.lse = dev_alloc<float>((size_t)P * G);
    o.sel = dev_alloc<uint32_t>((size_t)P * G * K);
    o.sel_count = dev_alloc<uint32_t>((size_t)P * G);
    o.uni = dev_alloc<uint32_t>(P);
    o.depths = dev_alloc<uint8_t>((size_t)P * D);
    return o;
}

static void free_outputs(outputs &o) {
    cudaFree(o.out);
    cudaFree(o.lse);
    cudaFree(o.sel);
    cudaFree(o.sel_count);
    cudaFree(o.uni);
    cudaFree(o.depths);
}

static host_outputs fetch(const outputs &o, uint32_t P) {
    host_outputs h;
    h.out = to_host(o.out, (size_t)P * G * D);
    h.lse = to_host(o.lse, (size_t)P * G);
    h.sel = to_host(o.sel, (size_t)P * G * K);
    h.sel_count = to_host(o.sel_count, (size_t)P * G);
    h.uni = to_host(o.uni, P);
    h.depths = to_host(o.depths, (size_t)P * D);
    return h;
}

static int compared_rows, bad_rows;

/* Every row of b equals a's: counts, the counted positions, out and lse bits, depths, unions. */
static void compare(const host_outputs &a, const host_outputs &b, uint32_t P, const char *what) {
    for (uint32_t r = 0; r < P * G; r++) {
        const uint32_t c = a.sel_count[r];
        bool ok = c == b.sel_count[r] && c <= K && c > 0 &&
                  memcmp(&a.sel[(size_t)r * K], &b.sel[(size_t)r * K], c * 4) == 0 &&
                  memcmp(&a.out[(size_t)r * D], &b.out[(size_t)r * D], D * 2) == 0 &&
                  memcmp(&a.lse[r], &b.lse[r], 4) == 0 && isfinite(a.lse[r]);
        if (r % G == 0) {
            const uint32_t p = r / G;
            ok = ok && memcmp(&a.depths[(size_t)p * D], &b.depths[(size_t)p * D], D) == 0 && a.uni[p] == b.uni[p] &&
                 a.uni[p] >= c;
        }
        compared_rows++;
        if (!ok) {
            bad_rows++;
            if (bad_rows < 10) fprintf(stderr, "%s: row %u (pair %u) differs\n", what, r, r / G);
        }
    }
}

static fathom_cuda_tier_step_args args_of(uint32_t layer, uint32_t batch, uint64_t capacity, const uint32_t *sessions,
                                          const uint16_t *q, const outputs &o, void *ws, size_t ws_bytes) {
    fathom_cuda_tier_step_args a;
    memset(&a, 0, sizeof a);
    a.layer = layer;
    a.sessions = sessions;
    a.batch = batch;
    a.capacity_tokens = capacity;
    a.k = K;
    a.sink = FATHOM_SINK_TOKENS;
    a.local = FATHOM_LOCAL_TOKENS;
    a.budget = 48;
    a.scale = 0.08838834764831845f; /* 1/sqrt(128) */
    a.queries = q;
    a.out = o.out;
    a.lse = o.lse;
    a.selected = o.sel;
    a.selected_count = o.sel_count;
    a.depths = o.depths;
    a.union_count = o.uni;
    a.workspace = ws;
    a.workspace_bytes = ws_bytes;
    return a;
}

static void test_args(void) {
    fathom_cuda_hybrid *h = (fathom_cuda_hybrid *)1;
    CHECK_STATUS(fathom_cuda_hybrid_create(NULL, 1, 1, 1, &h), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_cuda_hybrid_step(NULL, NULL, 1, 0), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_cuda_hybrid_check(NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_cuda_hybrid_calibrate(NULL, NULL, 0, NULL), FATHOM_ERR_INVALID_ARG);
    uint32_t c = 0;
    CHECK_STATUS(fathom_cuda_hybrid_share(NULL, NULL, NULL, &c), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_cuda_tier_step_given(NULL, NULL, NULL, 0), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_cuda_tier_set_scan_mode(NULL, FATHOM_CUDA_SCAN_EXACT), FATHOM_ERR_INVALID_ARG);
    fathom_cuda_hybrid_destroy(NULL);
}

static int given_steps, given_rows;

/* fathom_cuda_tier_step_given with the host's selections of the last 3
 * pairs (the first of them of a session with n > k): without and with their
 * depths, bit-identical to the GPU-only step; then each of two deliberately
 * bad selections of one head (a position beyond the session, a repeated
 * position) runs, reads nothing outside the session (compute-sanitizer),
 * gives that head the placeholder winners sink, sink + 1, .., leaves every
 * other row as the GPU-only step's, and fathom_cuda_tier_check reports it.
 * Also hybrid_select's checks of sessions and lengths against the tier. */
static void given_checks(fathom_cuda_tier *tier, fathom_cuda_hybrid *hy, const std::vector<uint32_t> &ids,
                         const uint64_t *lens, const std::vector<uint32_t> &sess, const std::vector<uint32_t> &heads,
                         const std::vector<float> &qf, const std::vector<uint32_t> &sel,
                         const std::vector<uint8_t> &dep, const host_outputs &want, const outputs &got,
                         uint64_t capacity, const uint32_t *d_ids, const uint16_t *q, void *ws, size_t ws_bytes,
                         cudaStream_t s) {
    const uint32_t batch = (uint32_t)ids.size(), P = batch * H, C = 3, p0 = P - C;
    CHECK(lens[p0 / H] > K && lens[P / H - 1] <= K);
    uint32_t *d_sel = dev_alloc<uint32_t>((size_t)C * G * K);
    uint8_t *d_dep = dev_alloc<uint8_t>((size_t)C * D);
    CK(cudaMemcpy(d_dep, dep.data() + (size_t)p0 * D, (size_t)C * D, cudaMemcpyHostToDevice));
    fathom_cuda_tier_step_args a = args_of(0, batch, capacity, d_ids, q, got, ws, ws_bytes);
    for (int with_depths = 0; with_depths < 2; with_depths++) {
        CK(cudaMemcpy(d_sel, sel.data() + (size_t)p0 * G * K, (size_t)C * G * K * 4, cudaMemcpyHostToDevice));
        CK(cudaMemset(got.out, 0, (size_t)P * G * D * 2));
        CK(cudaMemset(got.depths, 0xff, (size_t)P * D));
        const fathom_cuda_tier_given given = {C, d_sel, NULL, with_depths ? d_dep : NULL};
        CHECK_OK(fathom_cuda_tier_step_given(tier, &a, &given, s));
        CHECK_OK(fathom_cuda_tier_check(tier));
        compare(want, fetch(got, P), P, with_depths ? "given with depths" : "given");
        given_steps++;
        given_rows += P * G;
    }
    const uint32_t bad_row = 1, m = K - FATHOM_SINK_TOKENS - FATHOM_LOCAL_TOKENS; /* pair p0, query head 1 */
    for (int kind = 0; kind < 2; kind++) {
        std::vector<uint32_t> b(sel.begin() + (size_t)p0 * G * K, sel.begin() + (size_t)P * G * K);
        uint32_t *mid = &b[(size_t)bad_row * K + FATHOM_SINK_TOKENS];
        if (kind == 0) mid[m / 2] = 0x7fffffffu; /* far beyond the session's segments */
        else mid[m / 2] = mid[m / 2 - 1];        /* a repeated position */
        CK(cudaMemcpy(d_sel, b.data(), b.size() * 4, cudaMemcpyHostToDevice));
        const fathom_cuda_tier_given given = {C, d_sel, NULL, d_dep};
        CHECK_OK(fathom_cuda_tier_step_given(tier, &a, &given, s));
        CHECK_STATUS(fathom_cuda_tier_check(tier), FATHOM_ERR_STATE);
        CHECK(strstr(fathom_last_error(), "given selection") != NULL);
        const host_outputs h = fetch(got, P);
        const uint32_t r = p0 * G + bad_row;
        bool placeholder = h.sel_count[r] == K;
        for (uint32_t i = 0; i < K && placeholder; i++) placeholder = h.sel[(size_t)r * K + i] ==
            (i < FATHOM_SINK_TOKENS + m ? i : want.sel[(size_t)r * K + i]); /* local: as the GPU's */
        CHECK(placeholder);
        /* every other row as the GPU-only step's */
        host_outputs others = h;
        memcpy(&others.sel[(size_t)r * K], &want.sel[(size_t)r * K], K * 4);
        memcpy(&others.out[(size_t)r * D], &want.out[(size_t)r * D], D * 2);
        others.lse[r] = want.lse[r];
        others.uni[p0] = want.uni[p0];
        compare(want, others, P, kind ? "given, repeated position" : "given, position beyond the session");
        compared_rows -= 1; /* the bad row itself is not a comparison */
        given_steps++;
        given_rows += P * G - 1;
    }
    CHECK_OK(fathom_cuda_tier_check(tier)); /* reported once */
    /* hybrid_select: each length at most the session's at the layer, live sessions only */
    std::vector<uint64_t> n(P);
    std::vector<uint32_t> hs((size_t)P * G * K), hc((size_t)P * G);
    for (uint32_t p = 0; p < P; p++) n[p] = lens[p / H];
    n[1] = lens[0] + 1;
    CHECK_STATUS(fathom_cuda_hybrid_select(hy, 0, P, sess.data(), heads.data(), n.data(), qf.data(), 48, K,
                                           FATHOM_SINK_TOKENS, FATHOM_LOCAL_TOKENS, NULL, hs.data(), hc.data()),
                 FATHOM_ERR_INVALID_ARG);
    CHECK(strstr(fathom_last_error(), "hybrid_select: lengths[1]") != NULL);
    n[1] = lens[0];
    std::vector<uint32_t> bad_sess = sess;
    bad_sess[2] = 1000;
    CHECK_STATUS(fathom_cuda_hybrid_select(hy, 0, P, bad_sess.data(), heads.data(), n.data(), qf.data(), 48, K,
                                           FATHOM_SINK_TOKENS, FATHOM_LOCAL_TOKENS, NULL, hs.data(), hc.data()),
                 FATHOM_ERR_INVALID_ARG);
    CHECK(strstr(fathom_last_error(), "hybrid_select: sessions[2]") != NULL);
    cudaFree(d_sel);
    cudaFree(d_dep);
}

/* The exact mode's GPU-only step of each layer (one stream), for the int8 run to differ from. */
static std::vector<host_outputs> exact_wants;

static void test_hybrid(fathom_cuda_scan_mode mode) {
    const bool int8 = mode == FATHOM_CUDA_SCAN_INT8;
    compared_rows = bad_rows = given_steps = given_rows = 0;
    uint32_t differ_exact = 0;
    const uint64_t lens[3] = {3 * 64 * S + 17, 64 * S + 700, 100}; /* 4 segments + partial block; 2; <= k */
    const uint32_t batch = 3, P = batch * H;
    const uint64_t capacity = 4 * 64 * S;
    fathom_cuda_tier_shape shape = {L, H, G, D, S, 4, capacity};
    fathom_cuda_tier *tier = NULL;
    CHECK_OK(fathom_cuda_tier_create(&shape, &tier));
    if (!tier) return;
    CHECK_OK(fathom_cuda_tier_set_scan_mode(tier, mode));
    std::vector<uint32_t> ids(batch);
    uint32_t *d_one = dev_alloc<uint32_t>(1), *d_count = dev_alloc<uint32_t>(1);
    for (uint32_t b = 0; b < batch; b++) {
        CHECK_OK(fathom_cuda_tier_session_create(tier, &ids[b]));
        CHECK_OK(fathom_cuda_tier_reserve(tier, ids[b], lens[b]));
        CK(cudaMemcpy(d_one, &ids[b], 4, cudaMemcpyHostToDevice));
        const uint32_t n = (uint32_t)lens[b];
        CK(cudaMemcpy(d_count, &n, 4, cudaMemcpyHostToDevice));
        for (uint32_t l = 0; l < L; l++) {
            const std::vector<uint16_t> k = make_rows(n, 100 + 10 * b + l), v = make_rows(n, 900 + 10 * b + l);
            uint16_t *dk = dev_alloc<uint16_t>(k.size()), *dv = dev_alloc<uint16_t>(v.size());
            CK(cudaMemcpy(dk, k.data(), k.size() * 2, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dv, v.data(), v.size() * 2, cudaMemcpyHostToDevice));
            CHECK_OK(fathom_cuda_tier_append(tier, l, d_one, 1, d_count, n, dk, dv, 0));
            CK(cudaDeviceSynchronize());
            cudaFree(dk);
            cudaFree(dv);
        }
    }
    CHECK_OK(fathom_cuda_tier_check(tier));
    uint32_t *d_ids = dev_alloc<uint32_t>(batch);
    CK(cudaMemcpy(d_ids, ids.data(), batch * 4, cudaMemcpyHostToDevice));
    std::vector<uint16_t> qh((size_t)L * P * G * D);
    rng_state = 77;
    for (size_t i = 0; i < qh.size(); i++) qh[i] = fathom_f32_to_bf16((float)rng_normal());
    uint16_t *d_q = dev_alloc<uint16_t>(qh.size());
    CK(cudaMemcpy(d_q, qh.data(), qh.size() * 2, cudaMemcpyHostToDevice));
    outputs ref = alloc_outputs(P), got = alloc_outputs(P);
    fathom_cuda_hybrid *hy = NULL, *bad_hy = NULL;
    CHECK_STATUS(fathom_cuda_hybrid_create(tier, 0, P, K, &bad_hy), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_cuda_hybrid_create(tier, 1, P, FATHOM_CUDA_MAX_K + 1, &bad_hy), FATHOM_ERR_INVALID_ARG);
    CHECK(bad_hy == NULL);
    CHECK_OK(fathom_cuda_hybrid_create(tier, 3, P, K, &hy));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int steps = 0;
    for (int piped = 0; piped < 2 && hy; piped++) {
        CHECK_OK(fathom_cuda_tier_set_lanes(tier, piped ? 3 : 0, piped ? 1 : 0));
        fathom_cuda_tier_step_args a0 = args_of(0, batch, capacity, d_ids, d_q, ref, NULL, 0);
        size_t ws_bytes = 0;
        CHECK_OK(fathom_cuda_tier_workspace_size(tier, &a0, &ws_bytes));
        void *ws = NULL;
        CK(cudaMalloc(&ws, ws_bytes));
        for (uint32_t l = 0; l < L; l++) {
            const uint16_t *q = d_q + (size_t)l * P * G * D;
            fathom_cuda_tier_step_args ar = args_of(l, batch, capacity, d_ids, q, ref, ws, ws_bytes);
            CHECK_OK(fathom_cuda_tier_step(tier, &ar, s));
            CK(cudaStreamSynchronize(s));
            const host_outputs want = fetch(ref, P);
            if (!piped && !int8) exact_wants.push_back(want);
            if (!piped && int8 && l < exact_wants.size())
                for (uint32_t r = 0; r < P * G; r++)
                    differ_exact += want.sel_count[r] != exact_wants[l].sel_count[r] ||
                                    memcmp(&want.sel[(size_t)r * K], &exact_wants[l].sel[(size_t)r * K],
                                           want.sel_count[r] * 4) != 0;
            /* the host's own selection of every pair */
            if (!piped) {
                std::vector<uint32_t> sess(P), heads(P), sel((size_t)P * G * K), cnt((size_t)P * G);
                std::vector<uint64_t> n(P);
                std::vector<float> qf((size_t)P * G * D);
                std::vector<uint8_t> dep((size_t)P * D);
                for (uint32_t p = 0; p < P; p++) sess[p] = ids[p / H], heads[p] = p % H, n[p] = lens[p / H];
                for (size_t i = 0; i < qf.size(); i++) qf[i] = fathom_bf16_to_f32(qh[(size_t)l * P * G * D + i]);
                CHECK_OK(fathom_cuda_hybrid_select(hy, l, P, sess.data(), heads.data(), n.data(), qf.data(), 48, K,
                                                   FATHOM_SINK_TOKENS, FATHOM_LOCAL_TOKENS, dep.data(), sel.data(),
                                                   cnt.data()));
                host_outputs host = want; /* host selection in place of the GPU's; out/lse/unions as wanted */
                host.sel = sel;
                host.sel_count = cnt;
                host.depths = dep;
                compare(want, host, P, "hybrid_select");
                if (l == 0) given_checks(tier, hy, ids, lens, sess, heads, qf, sel, dep, want, got, capacity, d_ids, q,
                                         ws, ws_bytes, s);
            }
            const uint32_t shares[4] = {0, 1, P / 2, P};
            for (int c = 0; c < 4; c++) {
                CK(cudaMemset(got.out, 0, (size_t)P * G * D * 2));
                CK(cudaMemset(got.sel, 0xff, (size_t)P * G * K * 4));
                fathom_cuda_tier_step_args ag = args_of(l, batch, capacity, d_ids, q, got, ws, ws_bytes);
                CHECK_OK(fathom_cuda_hybrid_step(hy, &ag, shares[c], s));
                CK(cudaStreamSynchronize(s));
                CHECK_OK(fathom_cuda_hybrid_check(hy));
                char what[64];
                snprintf(what, sizeof what, "%s layer %u host pairs %u", piped ? "pipelined" : "one stream", l,
                         shares[c]);
                compare(want, fetch(got, P), P, what);
                steps++;
            }
            /* captured: the host work becomes a host node; two replays */
            cudaGraph_t g;
            cudaGraphExec_t exec;
            fathom_cuda_tier_step_args ag = args_of(l, batch, capacity, d_ids, q, got, ws, ws_bytes);
            CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
            CHECK_OK(fathom_cuda_hybrid_step(hy, &ag, P / 2 + 1, s));
            CK(cudaStreamEndCapture(s, &g));
            CK(cudaGraphInstantiate(&exec, g, 0));
            for (int rep = 0; rep < 2; rep++) {
                CK(cudaMemset(got.out, 0, (size_t)P * G * D * 2));
                CK(cudaGraphLaunch(exec, s));
                CK(cudaStreamSynchronize(s));
                CHECK_OK(fathom_cuda_hybrid_check(hy));
                compare(want, fetch(got, P), P, "graph");
                steps++;
            }
            CK(cudaGraphExecDestroy(exec));
            CK(cudaGraphDestroy(g));
            /* argument checks that need a tier */
            CHECK_STATUS(fathom_cuda_hybrid_step(hy, &ag, P + 1, s), FATHOM_ERR_INVALID_ARG);
            fathom_cuda_tier_step_args af = ag;
            af.fixed_depths = ref.depths;
            CHECK_STATUS(fathom_cuda_hybrid_step(hy, &af, 1, s), FATHOM_ERR_INVALID_ARG);
            const fathom_cuda_tier_given bad = {P + 1, got.sel, NULL, NULL};
            CHECK_STATUS(fathom_cuda_tier_step_given(tier, &ag, &bad, s), FATHOM_ERR_INVALID_ARG);
            CHECK(strstr(fathom_last_error(), "tier_step_given: given->pairs") != NULL);
            /* an invalid step is refused before anything is enqueued on the side
               stream: a capture around it ends without unjoined work */
            fathom_cuda_tier_step_args aw = ag;
            aw.workspace = (char *)ws + 16;
            aw.workspace_bytes = ws_bytes - 16;
            CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
            CHECK_STATUS(fathom_cuda_hybrid_step(hy, &aw, 1, s), FATHOM_ERR_INVALID_ARG);
            CHECK(strstr(fathom_last_error(), "hybrid_step: workspace") != NULL);
            cudaGraph_t g_bad = NULL;
            CHECK(cudaStreamEndCapture(s, &g_bad) == cudaSuccess);
            if (g_bad) CK(cudaGraphDestroy(g_bad));
            CHECK_OK(fathom_cuda_hybrid_check(hy));
        }
        /* the scheduler: rates from the batch, a share in range */
        fathom_cuda_tier_step_args ac = args_of(0, batch, capacity, d_ids, d_q, got, ws, ws_bytes);
        fathom_cuda_hybrid_rates rates;
        uint32_t share = P + 1;
        CHECK_STATUS(fathom_cuda_hybrid_share(hy, &ac, lens, &share), piped ? FATHOM_OK : FATHOM_ERR_STATE);
        CHECK_OK(fathom_cuda_hybrid_calibrate(hy, &ac, s, &rates));
        CHECK(rates.cpu_bytes_per_s > 0 && rates.gpu_bytes_per_s > 0 && rates.cpu_s > 0 && rates.gpu_s > 0 &&
              rates.cpu_fixed_s >= 0 && rates.gpu_fixed_s >= 0 && isfinite(rates.gpu_fixed_s) &&
              rates.gpu_fixed_s < 10 * rates.gpu_s && rates.noise >= 0 && rates.noise < 1);
        CHECK_OK(fathom_cuda_hybrid_share(hy, &ac, lens, &share));
        CHECK(share <= P);
        fathom_cuda_tier_step_args ab = ac;
        ab.budget = FATHOM_PLANES * D + 1;
        CHECK_STATUS(fathom_cuda_hybrid_share(hy, &ab, lens, &share), FATHOM_ERR_INVALID_ARG);
        CHECK(strstr(fathom_last_error(), "hybrid_share: budget") != NULL);
        printf("test_cuda_hybrid: %s %s: cpu %.2f GB/s (%.3f ms, fixed %.3f ms), gpu %.2f GB/s + %.3f ms (GPU-only %.3f "
               "ms, noise %.1f%%), share %u of %u pairs\n",
               int8 ? "int8" : "exact", piped ? "pipelined" : "one stream", rates.cpu_bytes_per_s / 1e9, rates.cpu_s * 1e3, rates.cpu_fixed_s * 1e3,
               rates.gpu_bytes_per_s / 1e9, rates.gpu_fixed_s * 1e3, rates.gpu_s * 1e3, 100 * rates.noise, share, P);
        cudaFree(ws);
    }
    CHECK(steps == 2 * (int)L * 6);
    CHECK(given_steps == 4 && given_rows == 2 * (int)(P * G) + 2 * (int)(P * G - 1));
    CHECK(bad_rows == 0 && compared_rows == (2 * (int)L * 6 + (int)L) * (int)(P * G) + given_rows);
    printf("test_cuda_hybrid: %s: %d hybrid steps, %d rows bit-identical to the GPU-only step (%d differ)\n",
           int8 ? "int8" : "exact", steps, compared_rows, bad_rows);
    if (int8) {
        printf("test_cuda_hybrid: int8: %u of %u selections differ from the exact mode's\n", differ_exact,
               (uint32_t)(L * P * G));
        CHECK(exact_wants.size() == L && differ_exact > 0);
    }
    CK(cudaStreamDestroy(s));
    fathom_cuda_hybrid_destroy(hy);
    free_outputs(ref);
    free_outputs(got);
    cudaFree(d_ids);
    cudaFree(d_q);
    cudaFree(d_one);
    cudaFree(d_count);
    fathom_cuda_tier_destroy(tier);
}

int main(void) {
    test_args();
    if (!fathom_cuda_device_present()) {
        check_summary("test_cuda_hybrid (argument checks only)");
        printf("no CUDA device: skipping the GPU tests\n");
        return 77;
    }
    test_hybrid(FATHOM_CUDA_SCAN_EXACT);
    test_hybrid(FATHOM_CUDA_SCAN_INT8);
    return check_summary("test_cuda_hybrid");
}

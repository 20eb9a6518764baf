/* fathom-centered on the GPU against the CPU library.
 *   append: tier sessions centered on their first append's mean (the
 *           center taken on the GPU) and on a caller's center, appended in
 *           ragged chunks beside an uncentered session of the same batch,
 *           leave planes, scales and running sums byte-identical to a CPU
 *           store given the same center by fathom_store_set_center and fed
 *           the same keys (the uncentered one: to a plain store); the taken
 *           center equals an independent double-sum mean bit for bit;
 *   life:   fork copies the center, truncation keeps it (n > 0: the kept
 *           bytes are those of a store centered on it), truncation to 0
 *           drops a taken center (the next first append takes a new one)
 *           and keeps a given one, a freed session's id comes back
 *           uncentered; a graph captured before the tier's first center
 *           skips a centered session's append and says so;
 *   step:   the tier step's depths and selections equal the CPU's
 *           fathom-centered:48 (fathom_index_scores + fathom_select over
 *           the same appends), its outputs fathom_attend over them, and its
 *           selections differ from fathom:48's on these offset keys;
 *   fixed:  fathom_cuda_step over a centered CPU store's segment: depths,
 *           scores (bit-exact where the CPU scan uses FMA) and selections
 *           equal fathom_index_scores / fathom_select of fathom-centered:48;
 *   errors: a center for a non-empty session, a non-finite center, bad
 *           sessions, layers and pointers.
 * Every check states how many values it compared and fails if none.
 * FATHOM_TEST_QUICK=1 shrinks the lengths (for compute-sanitizer).
 * NULL-argument checks run without a GPU; the rest exits 77 when none is
 * present. */
#include "check.h"
#include "fathom_cuda.h"
extern "C" {
#include "store_internal.h"
}

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "cuda/cuda_check.cuh"

static bool quick;

#define TEST_RNG_SEED 0x9e3779b97f4a7c15ull
#include "test_rng.h"
#include "tier_test_util.h"

/* bf16 rows [n][heads][dim]: channel i ~ N(mean_i, sd_i) with offsets of a
 * few standard deviations on every channel (RoPE'd keys have them: what
 * centering is for) and some huge rows. */
static std::vector<uint16_t> make_rows(uint64_t n, uint32_t heads, uint32_t dim, uint64_t seed) {
    rng_state = seed;
    std::vector<float> sd(heads * dim), mean(heads * dim);
    for (uint32_t i = 0; i < heads * dim; i++) {
        sd[i] = (float)exp(0.5 * rng_normal());
        mean[i] = sd[i] * 3.0f * rng_normal();
    }
    std::vector<uint16_t> rows(n * heads * dim);
    for (uint64_t t = 0; t < n; t++)
        for (uint32_t i = 0; i < heads * dim; i++) {
            float x = mean[i] + sd[i] * rng_normal();
            if (t % 997 == 5 && i % 5 == 0) x *= 8.0f;
            rows[t * heads * dim + i] = fathom_f32_to_bf16(x);
        }
    return rows;
}

/* The reference center: per channel the double sum of n rows in order,
 * divided by n, rounded once to float. */
static std::vector<float> mean_of(const float *keys, uint64_t n, uint32_t dim) {
    std::vector<double> s(dim, 0.0);
    for (uint64_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < dim; j++) s[j] += keys[i * dim + j];
    std::vector<float> mu(dim);
    for (uint32_t j = 0; j < dim; j++) mu[j] = (float)(s[j] / (double)n);
    return mu;
}

/* The tier's center of (s, layer, h) is mu bit for bit (mu NULL: none). */
static void compare_center(fathom_cuda_tier *tier, uint32_t s, uint32_t layer, uint32_t h, uint32_t dim,
                           const float *mu, tally *t) {
    const float *c = (const float *)1;
    CHECK_OK(fathom_cuda_tier_center(tier, s, layer, h, &c));
    t->compared++;
    if (!mu || !c) {
        t->bad += (mu == NULL) != (c == NULL);
        return;
    }
    t->compared += dim;
    t->bad += memcmp(c, mu, dim * sizeof(float)) != 0;
}

/* ---- append, fork, truncate, free ---- */

static void test_append_and_life(uint32_t dim) {
    const uint32_t L = 2, H = 2, S = 32, seg_tokens = S * 64;
    fathom_cuda_tier_shape sh = {L, H, 2, dim, S, 6, 1u << 16};
    fathom_cuda_tier *tier = NULL;
    CHECK_OK(fathom_cuda_tier_create(&sh, &tier));
    if (!tier) return;
    const uint64_t total = quick ? seg_tokens + 300 : 2 * seg_tokens + 1500;
    const uint32_t first = 700; /* session a's first append: its center */
    std::vector<uint16_t> ka = make_rows(total, H, dim, 11 + dim), kb = make_rows(total, H, dim, 12 + dim),
                          kp = make_rows(total, H, dim, 13 + dim);
    uint32_t a, b, p;
    CHECK_OK(fathom_cuda_tier_session_create(tier, &a));
    CHECK_OK(fathom_cuda_tier_session_create(tier, &b));
    CHECK_OK(fathom_cuda_tier_session_create(tier, &p));
    for (uint32_t s : {a, b, p}) CHECK_OK(fathom_cuda_tier_reserve(tier, s, total));
    /* a: its first append's mean; b: the caller's center, replacing a first
     * request for the mean; p: plain, in the same batches */
    CHECK_OK(fathom_cuda_tier_set_center(tier, a, NULL));
    CHECK_OK(fathom_cuda_tier_set_center(tier, b, NULL));
    std::vector<float> given((size_t)L * H * dim);
    rng_state = 5 + dim;
    for (float &x : given) x = 2.0f * rng_normal();
    CHECK_OK(fathom_cuda_tier_set_center(tier, b, given.data()));
    tally centers = {0, 0}, bytes = {0, 0};
    for (uint32_t l = 0; l < L; l++)
        for (uint32_t h = 0; h < H; h++) {
            compare_center(tier, a, l, h, dim, NULL, &centers); /* not taken yet */
            compare_center(tier, b, l, h, dim, given.data() + ((size_t)l * H + h) * dim, &centers);
            compare_center(tier, p, l, h, dim, NULL, &centers);
        }
    /* ragged calls: a's first is 700 tokens, b crawls one token at a time for a while */
    static const uint32_t sizes[] = {5, 64, 63, 130, 2000, 3, 61, 1, 1500};
    std::vector<std::vector<uint32_t>> calls;
    uint64_t na = 0, nb = 0, np = 0;
    const uint64_t slow = quick ? 100 : 300;
    for (uint32_t i = 0; na < total || nb < total || np < total; i++) {
        uint32_t ca = i == 0 ? first : (uint32_t)(total - na < sizes[i % 9] ? total - na : sizes[i % 9]);
        uint32_t cb = nb < slow ? 1 : (uint32_t)(total - nb < 1200 ? total - nb : 1200);
        uint32_t cp = (uint32_t)(total - np < 900 ? total - np : 900);
        calls.push_back({ca, cb, cp});
        na += ca;
        nb += cb;
        np += cp;
    }
    std::vector<uint64_t> done = {0, 0, 0};
    append_calls(tier, L, H, dim, {a, b, p}, calls, {&ka, &kb, &kp}, done);
    CHECK_OK(fathom_cuda_tier_check(tier));
    std::vector<std::vector<float>> mu_a(L * H);
    for (uint32_t l = 0; l < L; l++)
        for (uint32_t h = 0; h < H; h++) {
            std::vector<float> fa = head_floats(ka, 0, total, H, dim, h), fb = head_floats(kb, 0, total, H, dim, h),
                               fp = head_floats(kp, 0, total, H, dim, h);
            mu_a[l * H + h] = mean_of(fa.data(), first, dim);
            const float *mu_b = given.data() + ((size_t)l * H + h) * dim;
            compare_center(tier, a, l, h, dim, mu_a[l * H + h].data(), &centers);
            compare_center(tier, b, l, h, dim, mu_b, &centers);
            compare_center(tier, p, l, h, dim, NULL, &centers);
            compare_store(tier, a, l, h, dim, S, mu_a[l * H + h].data(), fa.data(), total, "centered on its mean",
                          &bytes);
            compare_store(tier, b, l, h, dim, S, mu_b, fb.data(), total, "centered on a given center", &bytes);
            compare_store(tier, p, l, h, dim, S, NULL, fp.data(), total, "plain beside centered", &bytes);
        }
    /* a center for a session that holds keys: refused, nothing changed */
    CHECK_STATUS(fathom_cuda_tier_set_center(tier, a, NULL), FATHOM_ERR_STATE);
    CHECK(strstr(fathom_last_error(), "already holds") != NULL);
    CHECK_STATUS(fathom_cuda_tier_set_center(tier, p, given.data()), FATHOM_ERR_STATE);
    compare_center(tier, a, 0, 0, dim, mu_a[0].data(), &centers);
    compare_center(tier, p, 0, 0, dim, NULL, &centers);

    /* fork a, truncate the fork inside its shared segment, append: the bytes
     * of a store centered on a's center fed the kept and the new keys */
    uint32_t c;
    CHECK_OK(fathom_cuda_tier_fork(tier, a, &c));
    const uint64_t cut = seg_tokens + 37;
    CHECK_OK(fathom_cuda_tier_truncate(tier, c, cut));
    const uint64_t extra = quick ? 200 : 900;
    std::vector<uint16_t> kc = make_rows(extra, H, dim, 99 + dim);
    CHECK_OK(fathom_cuda_tier_reserve(tier, c, cut + extra));
    std::vector<uint64_t> dc = {0};
    append_calls(tier, L, H, dim, {c}, {{1}, {7}, {(uint32_t)(extra - 8)}}, {&kc}, dc);
    CHECK_OK(fathom_cuda_tier_check(tier));
    for (uint32_t l = 0; l < L; l++)
        for (uint32_t h = 0; h < H; h++) {
            std::vector<float> f = head_floats(ka, 0, cut, H, dim, h), g = head_floats(kc, 0, extra, H, dim, h);
            f.insert(f.end(), g.begin(), g.end());
            compare_center(tier, c, l, h, dim, mu_a[l * H + h].data(), &centers);
            compare_store(tier, c, l, h, dim, S, mu_a[l * H + h].data(), f.data(), cut + extra,
                          "fork+truncate+append", &bytes);
            std::vector<float> fa = head_floats(ka, 0, total, H, dim, h);
            compare_store(tier, a, l, h, dim, S, mu_a[l * H + h].data(), fa.data(), total, "fork source", &bytes);
        }
    /* emptied: the fork's taken center goes, the next first append takes a new one */
    CHECK_OK(fathom_cuda_tier_truncate(tier, c, 0));
    compare_center(tier, c, 1, 1, dim, NULL, &centers);
    std::vector<uint16_t> kd = make_rows(500, H, dim, 77 + dim);
    CHECK_OK(fathom_cuda_tier_reserve(tier, c, 500)); /* emptied, it holds no segment */
    dc = {0};
    append_calls(tier, L, H, dim, {c}, {{321}, {179}}, {&kd}, dc);
    CHECK_OK(fathom_cuda_tier_check(tier));
    for (uint32_t l = 0; l < L; l++)
        for (uint32_t h = 0; h < H; h++) {
            std::vector<float> f = head_floats(kd, 0, 500, H, dim, h);
            std::vector<float> mu = mean_of(f.data(), 321, dim);
            compare_center(tier, c, l, h, dim, mu.data(), &centers);
            compare_store(tier, c, l, h, dim, S, mu.data(), f.data(), 500, "emptied, re-centered", &bytes);
        }
    /* a given center survives truncation to 0 */
    CHECK_OK(fathom_cuda_tier_truncate(tier, b, 0));
    compare_center(tier, b, 1, 0, dim, given.data() + (size_t)H * dim, &centers);
    CHECK_OK(fathom_cuda_tier_reserve(tier, b, 130));
    dc = {0};
    append_calls(tier, L, H, dim, {b}, {{130}}, {&kd}, dc);
    {
        std::vector<float> f = head_floats(kd, 0, 130, H, dim, 1);
        compare_store(tier, b, 1, 1, dim, S, given.data() + ((size_t)H + 1) * dim, f.data(), 130,
                      "given center after truncation to 0", &bytes);
    }
    /* a freed centered session's id comes back plain */
    CHECK_OK(fathom_cuda_tier_session_free(tier, c));
    uint32_t e;
    CHECK_OK(fathom_cuda_tier_session_create(tier, &e));
    CHECK(e == c);
    compare_center(tier, e, 0, 0, dim, NULL, &centers);
    CHECK_OK(fathom_cuda_tier_reserve(tier, e, 200));
    dc = {0};
    append_calls(tier, L, H, dim, {e}, {{200}}, {&kd}, dc);
    {
        std::vector<float> f = head_floats(kd, 0, 200, H, dim, 0);
        compare_store(tier, e, 1, 0, dim, S, NULL, f.data(), 200, "freed id, plain again", &bytes);
    }
    CHECK_OK(fathom_cuda_tier_check(tier));
    printf("append d=%u: centers %llu values, %llu bad; stores %llu values, %llu bad\n", dim,
           (unsigned long long)centers.compared, (unsigned long long)centers.bad,
           (unsigned long long)bytes.compared, (unsigned long long)bytes.bad);
    CHECK(centers.compared > 0 && bytes.compared > 0);
    CHECK(centers.bad == 0);
    CHECK(bytes.bad == 0);
    fathom_cuda_tier_destroy(tier);
}

/* An append captured into a graph before the tier had a centered session
 * lacks the centering kernel: replayed for a session centered since, it is
 * skipped and reported, never encoded around a center not taken. */
static void test_stale_graph(void) {
    const uint32_t H = 2, D = 64;
    fathom_cuda_tier_shape sh = {1, H, 1, D, 32, 2, 4096};
    fathom_cuda_tier *tier = NULL;
    CHECK_OK(fathom_cuda_tier_create(&sh, &tier));
    if (!tier) return;
    uint32_t s;
    CHECK_OK(fathom_cuda_tier_session_create(tier, &s));
    CHECK_OK(fathom_cuda_tier_reserve(tier, s, 100));
    std::vector<uint16_t> k = make_rows(10, H, D, 3);
    uint16_t *d_k = to_device(k.data(), k.size());
    const uint32_t count = 10;
    uint32_t *d_s = to_device(&s, 1), *d_c = to_device(&count, 1);
    cudaStream_t stream;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    CHECK_OK(fathom_cuda_tier_append(tier, 0, d_s, 1, d_c, 10, d_k, d_k, stream));
    CK(cudaStreamEndCapture(stream, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    CHECK_OK(fathom_cuda_tier_set_center(tier, s, NULL));
    CK(cudaGraphLaunch(exec, stream));
    CK(cudaStreamSynchronize(stream));
    CHECK_STATUS(fathom_cuda_tier_check(tier), FATHOM_ERR_STATE);
    CHECK(strstr(fathom_last_error(), "center") != NULL);
    uint64_t n = 1;
    CHECK_OK(fathom_cuda_tier_length(tier, s, &n));
    CHECK(n == 0);
    /* an eager append now takes the center */
    std::vector<uint64_t> done = {0};
    append_calls(tier, 1, H, D, {s}, {{10}}, {&k}, done);
    CHECK_OK(fathom_cuda_tier_check(tier));
    CHECK_OK(fathom_cuda_tier_length(tier, s, &n));
    CHECK(n == 10);
    tally t = {0, 0};
    std::vector<float> f = head_floats(k, 0, 10, H, D, 1), mu = mean_of(f.data(), 10, D);
    compare_center(tier, s, 0, 1, D, mu.data(), &t);
    CHECK(t.compared == D + 1 && t.bad == 0);
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    CK(cudaStreamDestroy(stream));
    cudaFree(d_k);
    cudaFree(d_s);
    cudaFree(d_c);
    fathom_cuda_tier_destroy(tier);
}

/* ---- the tier step ---- */

static void test_tier_step(void) {
    const uint32_t L = 2, H = 2, G = 4, D = 128, S = 32, K = 256;
    const uint64_t n = quick ? 3000 : 9000, first = quick ? 1200 : 5000, cap = 16384;
    fathom_cuda_tier_shape sh = {L, H, G, D, S, 1, cap};
    fathom_cuda_tier *tier = NULL;
    CHECK_OK(fathom_cuda_tier_create(&sh, &tier));
    if (!tier) return;
    uint32_t s;
    CHECK_OK(fathom_cuda_tier_session_create(tier, &s));
    CHECK_OK(fathom_cuda_tier_reserve(tier, s, n));
    CHECK_OK(fathom_cuda_tier_set_center(tier, s, NULL));
    std::vector<uint16_t> rows = make_rows(n, H, D, 400);
    std::vector<uint64_t> done = {0};
    append_calls(tier, L, H, D, {s}, {{(uint32_t)first}, {1}, {(uint32_t)(n - first - 1)}}, {&rows}, done);
    CHECK_OK(fathom_cuda_tier_check(tier));
    const size_t R = (size_t)H * G;
    std::vector<uint16_t> q(L * R * D);
    rng_state = 401;
    for (auto &x : q) x = fathom_f32_to_bf16(0.3f * rng_normal());
    uint16_t *d_q = to_device(q.data(), q.size()), *d_out = NULL;
    uint32_t *d_sel = NULL, *d_cnt = NULL, *d_s = to_device(&s, 1);
    uint8_t *d_dep = NULL;
    float *d_lse = NULL;
    CK(cudaMalloc((void **)&d_out, L * R * D * 2));
    CK(cudaMalloc((void **)&d_sel, L * R * K * 4));
    CK(cudaMalloc((void **)&d_cnt, L * R * 4));
    CK(cudaMalloc((void **)&d_dep, L * H * D));
    CK(cudaMalloc((void **)&d_lse, L * R * 4));
    CK(cudaMemset(d_sel, 0xff, L * R * K * 4));
    CK(cudaMemset(d_out, 0xff, L * R * D * 2));
    fathom_cuda_tier_step_args a;
    memset(&a, 0, sizeof a);
    a.sessions = d_s;
    a.batch = 1;
    a.capacity_tokens = cap;
    a.k = K;
    a.sink = FATHOM_SINK_TOKENS;
    a.local = FATHOM_LOCAL_TOKENS;
    a.budget = 48;
    a.scale = 0.08838834764831845f; /* 1/sqrt(128) */
    size_t ws_bytes = 0;
    a.queries = d_q;
    a.out = d_out;
    CHECK_OK(fathom_cuda_tier_workspace_size(tier, &a, &ws_bytes));
    void *ws = NULL;
    CK(cudaMalloc(&ws, ws_bytes));
    for (uint32_t l = 0; l < L; l++) {
        a.layer = l;
        a.queries = d_q + l * R * D;
        a.out = d_out + l * R * D;
        a.lse = d_lse + l * R;
        a.selected = d_sel + l * R * K;
        a.selected_count = d_cnt + l * R;
        a.depths = d_dep + (size_t)l * H * D;
        a.workspace = ws;
        a.workspace_bytes = ws_bytes;
        CHECK_OK(fathom_cuda_tier_step(tier, &a, 0));
    }
    CHECK_OK(fathom_cuda_tier_check(tier));
    std::vector<uint16_t> out(L * R * D);
    std::vector<uint32_t> sel(L * R * K), cnt(L * R);
    std::vector<uint8_t> dep(L * H * D);
    CK(cudaMemcpy(out.data(), d_out, out.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(sel.data(), d_sel, sel.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(cnt.data(), d_cnt, cnt.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(dep.data(), d_dep, dep.size(), cudaMemcpyDeviceToHost));
    /* the CPU: one index per (layer, head) with fathom-centered:48 and fathom:48, the same appends */
    fathom_method m[2];
    CHECK_OK(fathom_method_parse("fathom-centered:48", &m[0]));
    CHECK_OK(fathom_method_parse("fathom:48", &m[1]));
    uint64_t dep_n = 0, dep_bad = 0, sel_n = 0, sel_bad = 0, raw_differs = 0, outs = 0, out_bad = 0;
    double worst = 0.0;
    std::vector<float> scores(G * n), raw(G * n);
    std::vector<uint64_t> work(n);
    void *scratch = malloc(fathom_index_scratch_size(D, G));
    for (uint32_t l = 0; l < L; l++)
        for (uint32_t h = 0; h < H; h++) {
            std::vector<float> keys = head_floats(rows, 0, n, H, D, h), vals(keys.size());
            for (size_t x = 0; x < keys.size(); x++) vals[x] = -keys[x];
            fathom_index *ix = NULL;
            CHECK_OK(fathom_index_create(&ix, m, 2, D, 0));
            CHECK_OK(fathom_index_append(ix, keys.data(), first));
            CHECK_OK(fathom_index_append(ix, keys.data() + first * D, 1));
            CHECK_OK(fathom_index_append(ix, keys.data() + (first + 1) * D, n - first - 1));
            const size_t p = (size_t)l * H + h;
            std::vector<float> qf(G * D);
            for (uint32_t x = 0; x < G * D; x++) qf[x] = fathom_bf16_to_f32(q[p * G * D + x]);
            CHECK_OK(fathom_index_scores(ix, &m[1], 48, G, qf.data(), n, raw.data(), scratch, NULL, NULL));
            CHECK_OK(fathom_index_scores(ix, &m[0], 48, G, qf.data(), n, scores.data(), scratch, NULL, NULL));
            const uint8_t *want_dep = fathom_index_scratch_depths(scratch, D, G);
            for (uint32_t j = 0; j < D; j++, dep_n++) dep_bad += want_dep[j] != dep[p * D + j];
            for (uint32_t g = 0; g < G; g++) {
                const size_t r = p * G + g;
                std::vector<uint32_t> idx(K), idx_raw(K);
                uint32_t c = 0, c_raw = 0;
                CHECK_OK(fathom_select(scores.data() + g * n, n, K, FATHOM_SINK_TOKENS, FATHOM_LOCAL_TOKENS,
                                       work.data(), idx.data(), &c));
                CHECK_OK(fathom_select(raw.data() + g * n, n, K, FATHOM_SINK_TOKENS, FATHOM_LOCAL_TOKENS,
                                       work.data(), idx_raw.data(), &c_raw));
                sel_n++;
                sel_bad += c != cnt[r] || memcmp(idx.data(), sel.data() + r * K, c * 4) != 0;
                raw_differs += c_raw != c || memcmp(idx.data(), idx_raw.data(), c * 4) != 0;
                std::vector<float> ref(D);
                CHECK_OK(fathom_attend(D, qf.data() + g * D, keys.data(), vals.data(), idx.data(), c, ref.data()));
                for (uint32_t x = 0; x < D; x++, outs++) {
                    const double err = fabs(fathom_bf16_to_f32(out[r * D + x]) - ref[x]);
                    worst = err > worst ? err : worst;
                    out_bad += err > 0.0079 * fabs(ref[x]) + 1e-6; /* bf16 output rounding */
                }
            }
            fathom_index_free(ix);
        }
    free(scratch);
    printf("tier step fathom-centered:48, n=%llu: depths %llu bad of %llu, selections %llu bad of %llu "
           "(%llu differ from fathom:48's), outputs %llu bad of %llu (worst %.3g)\n",
           (unsigned long long)n, (unsigned long long)dep_bad, (unsigned long long)dep_n,
           (unsigned long long)sel_bad, (unsigned long long)sel_n, (unsigned long long)raw_differs,
           (unsigned long long)out_bad, (unsigned long long)outs, worst);
    CHECK(dep_n == (uint64_t)L * H * D && sel_n == (uint64_t)L * R && outs == (uint64_t)L * R * D);
    CHECK(dep_bad == 0);
    CHECK(sel_bad == 0);
    CHECK(out_bad == 0);
    CHECK(raw_differs > 0); /* the centering changed what was selected */
    void *bufs[] = {d_q, d_out, d_sel, d_cnt, d_s, d_dep, d_lse, ws};
    for (void *b : bufs) cudaFree(b);
    fathom_cuda_tier_destroy(tier);
}

/* ---- the fixed-context step over a centered CPU store ---- */

static void test_fixed_step(void) {
    const uint32_t D = 128, P = 2, G = 4, K = 256;
    const uint64_t n = quick ? 2500 : 12000, nb = (n + 63) / 64;
    fathom_method m;
    CHECK_OK(fathom_method_parse("fathom-centered:48", &m));
    fathom_cuda_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.dim = D;
    cfg.group = G;
    cfg.problems = P;
    cfg.tokens = n;
    cfg.k = K;
    cfg.sink = FATHOM_SINK_TOKENS;
    cfg.local = FATHOM_LOCAL_TOKENS;
    cfg.scan = FATHOM_CUDA_SCAN_WATER_FILL;
    cfg.param = 48;
    cfg.transport = FATHOM_CUDA_GATHER_KERNEL;
    std::vector<fathom_cuda_problem> probs(P);
    std::vector<float> var(P * D), queries(P * G * D);
    std::vector<std::vector<float>> keys(P);
    std::vector<fathom_store *> stores(P);
    std::vector<void *> pinned;
    auto pin = [&](const void *src, size_t bytes) {
        void *p = NULL;
        CK(cudaHostAlloc(&p, bytes, cudaHostAllocMapped));
        memcpy(p, src, bytes);
        pinned.push_back(p);
        return p;
    };
    rng_state = 600;
    for (uint32_t p = 0; p < P; p++) {
        std::vector<uint16_t> rows = make_rows(n, 1, D, 601 + p);
        keys[p] = head_floats(rows, 0, n, 1, D, 0);
        /* a store centered on its keys' mean, as fathom_index's first append makes it */
        std::vector<float> mu = mean_of(keys[p].data(), n, D);
        CHECK_OK(fathom_store_create(&stores[p], D, (uint32_t)nb, NULL));
        CHECK_OK(fathom_store_set_center(stores[p], mu.data()));
        CHECK_OK(fathom_store_append(stores[p], keys[p].data(), n));
        CHECK_OK(fathom_store_variance(stores[p], var.data() + p * D));
        fathom_segment_view v;
        CHECK_OK(fathom_store_segment(stores[p], 0, &v));
        probs[p].planes = (const uint64_t *)pin(v.planes, nb * D * 4 * 8);
        probs[p].scales = (const uint16_t *)pin(v.scales, nb * D * 2);
        std::vector<uint16_t> vals(n * D);
        for (uint64_t i = 0; i < n * D; i++) vals[i] = fathom_f32_to_bf16(rng_normal());
        probs[p].keys = (const uint16_t *)pin(rows.data(), n * D * 2);
        probs[p].values = (const uint16_t *)pin(vals.data(), n * D * 2);
        for (uint32_t x = 0; x < G * D; x++) queries[p * G * D + x] = 0.3f * rng_normal();
    }
    size_t ws_bytes = 0;
    CHECK_OK(fathom_cuda_workspace_size(&cfg, &ws_bytes));
    void *ws = NULL;
    CK(cudaMalloc(&ws, ws_bytes));
    fathom_cuda_problem *d_probs = to_device(probs.data(), P);
    float *d_q = to_device(queries.data(), queries.size()), *d_var = to_device(var.data(), var.size());
    float *d_out = NULL, *d_scores = NULL;
    uint32_t *d_sel = NULL, *d_cnt = NULL;
    uint8_t *d_dep = NULL;
    CK(cudaMalloc((void **)&d_out, P * G * D * 4));
    CK(cudaMalloc((void **)&d_scores, P * G * n * 4));
    CK(cudaMalloc((void **)&d_sel, P * G * K * 4));
    CK(cudaMalloc((void **)&d_cnt, P * G * 4));
    CK(cudaMalloc((void **)&d_dep, P * D));
    CK(cudaMemset(d_scores, 0xff, P * G * n * 4));
    CK(cudaMemset(d_sel, 0xff, P * G * K * 4));
    fathom_cuda_step_args args;
    memset(&args, 0, sizeof args);
    args.problems = d_probs;
    args.queries = d_q;
    args.variance = d_var;
    args.out = d_out;
    args.selected = d_sel;
    args.selected_count = d_cnt;
    args.depths = d_dep;
    args.scores = d_scores;
    args.workspace = ws;
    args.workspace_bytes = ws_bytes;
    CHECK_OK(fathom_cuda_step(&cfg, &args, 0));
    CK(cudaDeviceSynchronize());
    std::vector<float> out(P * G * D), scores(P * G * n);
    std::vector<uint32_t> sel(P * G * K), cnt(P * G);
    std::vector<uint8_t> dep(P * D);
    CK(cudaMemcpy(out.data(), d_out, out.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(scores.data(), d_scores, scores.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(sel.data(), d_sel, sel.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(cnt.data(), d_cnt, cnt.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(dep.data(), d_dep, dep.size(), cudaMemcpyDeviceToHost));
    /* the CPU kernels on x86-64 with AVX2 or AVX-512 use fused multiply-adds as the GPU does */
    const int exact = fathom_scan_kernel_available(FATHOM_SCAN_AVX2) ||
                      fathom_scan_kernel_available(FATHOM_SCAN_AVX512);
    uint64_t dep_bad = 0, score_bad = 0, score_n = 0, sel_bad = 0, sel_n = 0, out_n = 0;
    double worst_rel = 0.0;
    void *scratch = malloc(fathom_index_scratch_size(D, G));
    std::vector<float> cpu(G * n), kf(n * D), vf(n * D);
    std::vector<uint64_t> work(n);
    for (uint32_t p = 0; p < P; p++) {
        /* fathom-centered:48 of an index fed the keys in one append (its center: their mean) */
        fathom_index *ix = NULL;
        CHECK_OK(fathom_index_create(&ix, &m, 1, D, 0));
        CHECK_OK(fathom_index_append(ix, keys[p].data(), n));
        CHECK_OK(fathom_index_scores(ix, &m, 48, G, queries.data() + p * G * D, n, cpu.data(), scratch, NULL, NULL));
        const uint8_t *want = fathom_index_scratch_depths(scratch, D, G);
        for (uint32_t j = 0; j < D; j++) dep_bad += want[j] != dep[p * D + j];
        for (uint64_t i = 0; i < G * n; i++, score_n++) {
            const float g = scores[(size_t)p * G * n + i], c = cpu[i];
            score_bad += exact ? memcmp(&g, &c, 4) != 0 : !(fabsf(g - c) <= 1e-5f * (1.0f + fabsf(c)));
        }
        for (uint64_t i = 0; i < n * D; i++) {
            kf[i] = fathom_bf16_to_f32(probs[p].keys[i]);
            vf[i] = fathom_bf16_to_f32(probs[p].values[i]);
        }
        for (uint32_t g = 0; g < G; g++) {
            const size_t r = (size_t)p * G + g;
            std::vector<uint32_t> idx(K);
            uint32_t c = 0;
            /* the selection over the GPU's scores (equal to the CPU's where exact) */
            CHECK_OK(fathom_select(exact ? cpu.data() + g * n : scores.data() + r * n, n, K, FATHOM_SINK_TOKENS,
                                   FATHOM_LOCAL_TOKENS, work.data(), idx.data(), &c));
            sel_n++;
            sel_bad += c != cnt[r] || memcmp(idx.data(), sel.data() + r * K, c * 4) != 0;
            float ref[128];
            CHECK_OK(fathom_attend(D, queries.data() + r * D, kf.data(), vf.data(), idx.data(), c, ref));
            const double rel = fathom_rel_l2(D, out.data() + r * D, ref);
            worst_rel = rel > worst_rel || rel != rel ? rel : worst_rel;
            out_n++;
        }
        fathom_index_free(ix);
        fathom_store_free(stores[p]);
    }
    free(scratch);
    printf("fixed step over centered stores, n=%llu: depths %llu bad of %u, scores %llu bad of %llu (%s), "
           "selections %llu bad of %llu, %llu outputs, worst rel %.2g\n",
           (unsigned long long)n, (unsigned long long)dep_bad, P * D, (unsigned long long)score_bad,
           (unsigned long long)score_n, exact ? "bit-exact" : "within 1e-5", (unsigned long long)sel_bad,
           (unsigned long long)sel_n, (unsigned long long)out_n, worst_rel);
    CHECK(score_n == (uint64_t)P * G * n && sel_n == (uint64_t)P * G && out_n == sel_n);
    CHECK(dep_bad == 0);
    CHECK(score_bad == 0);
    CHECK(sel_bad == 0);
    CHECK(worst_rel <= 1e-6); /* double accumulation on both sides, float output */
    void *dev[] = {ws, d_probs, d_q, d_var, d_out, d_scores, d_sel, d_cnt, d_dep};
    for (void *d : dev) cudaFree(d);
    for (void *p : pinned) cudaFreeHost(p);
}

/* ---- arguments ---- */

static void test_args(void) {
    const float *c = NULL;
    float one = 0.0f;
    CHECK_STATUS(fathom_cuda_tier_set_center(NULL, 0, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_cuda_tier_set_center(NULL, 0, &one), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_cuda_tier_center(NULL, 0, 0, 0, &c), FATHOM_ERR_INVALID_ARG);
}

static void test_args_gpu(void) {
    const uint32_t L = 2, H = 2, D = 64;
    fathom_cuda_tier_shape sh = {L, H, 1, D, 32, 2, 4096};
    fathom_cuda_tier *tier = NULL;
    CHECK_OK(fathom_cuda_tier_create(&sh, &tier));
    if (!tier) return;
    uint32_t s;
    CHECK_OK(fathom_cuda_tier_session_create(tier, &s));
    const float *c = (const float *)1;
    CHECK_STATUS(fathom_cuda_tier_set_center(tier, s + 1, NULL), FATHOM_ERR_INVALID_ARG); /* not live */
    CHECK_STATUS(fathom_cuda_tier_set_center(tier, 2, NULL), FATHOM_ERR_INVALID_ARG);     /* >= max_sessions */
    CHECK_STATUS(fathom_cuda_tier_center(tier, s, L, 0, &c), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_cuda_tier_center(tier, s, 0, H, &c), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_cuda_tier_center(tier, s, 0, 0, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_OK(fathom_cuda_tier_center(tier, s, 0, 0, &c));
    CHECK(c == NULL);
    /* a non-finite center anywhere: refused by name, the session stays plain */
    std::vector<float> mu((size_t)L * H * D, 1.0f);
    const float bad[] = {NAN, INFINITY, -INFINITY};
    for (float x : bad) {
        mu[(size_t)(1 * H + 1) * D + 5] = x;
        CHECK_STATUS(fathom_cuda_tier_set_center(tier, s, mu.data()), FATHOM_ERR_NONFINITE);
        CHECK(strstr(fathom_last_error(), "layer 1 head 1 channel 5") != NULL);
    }
    CHECK_OK(fathom_cuda_tier_center(tier, s, 1, 1, &c));
    CHECK(c == NULL);
    /* a second call replaces the center: given, then the first append's mean */
    mu[(size_t)(1 * H + 1) * D + 5] = 3.0f;
    CHECK_OK(fathom_cuda_tier_set_center(tier, s, mu.data()));
    CHECK_OK(fathom_cuda_tier_center(tier, s, 1, 1, &c));
    CHECK(c != NULL && c[5] == 3.0f && c[4] == 1.0f);
    CHECK_OK(fathom_cuda_tier_set_center(tier, s, NULL));
    CHECK_OK(fathom_cuda_tier_center(tier, s, 1, 1, &c));
    CHECK(c == NULL);
    /* one layer holding keys makes the session non-empty */
    CHECK_OK(fathom_cuda_tier_reserve(tier, s, 64));
    std::vector<uint16_t> k = make_rows(3, H, D, 8);
    std::vector<uint64_t> done = {0};
    append_calls(tier, 1, H, D, {s}, {{3}}, {&k}, done); /* layer 0 only */
    CHECK_OK(fathom_cuda_tier_check(tier));
    CHECK_STATUS(fathom_cuda_tier_set_center(tier, s, mu.data()), FATHOM_ERR_STATE);
    CHECK(strstr(fathom_last_error(), "3 tokens at layer 0") != NULL);
    CHECK_OK(fathom_cuda_tier_center(tier, s, 0, 1, &c));
    CHECK(c != NULL);
    CHECK_OK(fathom_cuda_tier_center(tier, s, 1, 1, &c));
    CHECK(c == NULL); /* layer 1 has had no append yet */
    fathom_cuda_tier_destroy(tier);
}

int main(void) {
    quick = getenv("FATHOM_TEST_QUICK") && atoi(getenv("FATHOM_TEST_QUICK")) > 0;
    test_args();
    if (!fathom_cuda_device_present()) {
        check_summary("test_cuda_centered (argument checks only)");
        printf("no CUDA device: skipping the GPU tests\n");
        return 77;
    }
    test_args_gpu();
    test_append_and_life(128);
    if (!quick) {
        test_append_and_life(64);
        test_append_and_life(256);
    }
    test_stale_graph();
    test_tier_step();
    test_fixed_step();
    return check_summary("test_cuda_centered");
}

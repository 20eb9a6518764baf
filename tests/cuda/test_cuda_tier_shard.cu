/* The KV tier over several ranks (fathom_cuda_shard) against ONE tier of
 * the whole model, every rank simulated on device 0:
 *   head sharding (tp = 1, tp = 2 over 2 KV heads): selections, depths,
 *     outputs and LSE bit-identical to the plain tier's;
 *   token split (tp = 4, 8 over 2 KV heads: 2 and 4 parts per head):
 *     every part's planes and scales equal the plain tier's segments it
 *     holds; selections, counts and depths identical; outputs within one
 *     bf16 step and LSE within 1e-5 relative (the parts' softmax sums are
 *     added in another order), the count of bit-identical values printed;
 *     eager on one stream, eager on a stream per rank (the events), and
 *     replaying one captured graph of appends + steps;
 *   sessions: ragged prefill chunks (1,500 tokens) across segment
 *     boundaries, one session shorter than k, decode appends crossing a
 *     segment boundary, a part with no tokens yet.
 * FATHOM_TEST_QUICK=1 runs fewer decode steps. Argument checks run without
 * a GPU; the rest exits 77 when none is present. */
#include "check.h"
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

enum { L = 2, H = 2, G = 4, D = 128, S = 32, B = 3, K = 256 };
static const uint64_t T = (uint64_t)S * 64;
static const uint32_t target[B] = {3 * 2048 - 3, 4000, 150};
static const uint64_t CAP = 8192;

/* bf16 values ~ N(mean_c, sd_c) per channel c of a [n][H][D] array. */
static std::vector<uint16_t> gen(uint64_t n, uint64_t seed) {
    rng_state = seed;
    std::vector<float> sd(H * D), mean(H * D);
    for (uint32_t i = 0; i < H * D; i++) {
        sd[i] = (float)exp(rng_normal());
        mean[i] = i % 13 == 5 ? 20.0f * rng_normal() : 0.0f;
    }
    std::vector<uint16_t> v(n * H * D);
    for (uint64_t t = 0; t < n; t++)
        for (uint32_t i = 0; i < H * D; i++) v[t * H * D + i] = fathom_f32_to_bf16(mean[i] + sd[i] * rng_normal());
    return v;
}

/* Heads [first, first + count) of rows [n][H][w] as [n][count][w]. */
static std::vector<uint16_t> heads_of(const std::vector<uint16_t> &a, uint64_t n, uint32_t w, uint32_t first,
                                      uint32_t count) {
    std::vector<uint16_t> o(n * count * w);
    for (uint64_t t = 0; t < n; t++)
        memcpy(&o[t * count * w], &a[(t * H + first) * w], (size_t)count * w * 2);
    return o;
}

/* Device buffers of one rank (or the plain tier) for one layer. */
struct bufs {
    uint32_t first, heads;
    uint16_t *q, *out, *k, *v;
    float *lse;
    uint32_t *sel, *cnt, *sess, *counts;
    uint8_t *dep;
    void *ws;
    size_t ws_bytes;
};

static fathom_cuda_tier_step_args args_of(const bufs &b, uint32_t layer) {
    fathom_cuda_tier_step_args a;
    memset(&a, 0, sizeof a);
    a.layer = layer;
    a.sessions = b.sess;
    a.batch = B;
    a.capacity_tokens = CAP;
    a.k = K;
    a.sink = 4;
    a.local = 32;
    a.budget = 48;
    a.scale = 0.08838834764831845f;
    a.queries = b.q;
    a.out = b.out;
    a.lse = b.lse;
    a.selected = b.sel;
    a.selected_count = b.cnt;
    a.depths = b.dep;
    a.workspace = b.ws;
    a.workspace_bytes = b.ws_bytes;
    return a;
}

static bufs make_bufs(uint32_t first, uint32_t heads, uint32_t max_rows) {
    bufs b;
    b.first = first;
    b.heads = heads;
    const size_t R = (size_t)B * heads * G;
    CK(cudaMalloc((void **)&b.q, R * D * 2));
    CK(cudaMalloc((void **)&b.out, R * D * 2));
    CK(cudaMalloc((void **)&b.lse, R * 4));
    CK(cudaMalloc((void **)&b.sel, R * K * 4));
    CK(cudaMalloc((void **)&b.cnt, R * 4));
    CK(cudaMalloc((void **)&b.dep, (size_t)B * heads * D));
    CK(cudaMalloc((void **)&b.sess, B * 4));
    CK(cudaMalloc((void **)&b.counts, B * 4));
    CK(cudaMalloc((void **)&b.k, (size_t)max_rows * heads * D * 2));
    CK(cudaMalloc((void **)&b.v, (size_t)max_rows * heads * D * 2));
    const uint32_t ids[B] = {0, 1, 2};
    CK(cudaMemcpy(b.sess, ids, sizeof ids, cudaMemcpyHostToDevice));
    b.ws = NULL;
    b.ws_bytes = 0;
    return b;
}

static void free_bufs(bufs &b) {
    void *p[] = {b.q, b.out, b.lse, b.sel, b.cnt, b.dep, b.sess, b.counts, b.k, b.v, b.ws};
    for (void *x : p) cudaFree(x);
}

struct result {
    std::vector<uint16_t> out;
    std::vector<float> lse;
    std::vector<uint32_t> sel, cnt;
    std::vector<uint8_t> dep;
};

static result read(const bufs &b) {
    const size_t R = (size_t)B * b.heads * G;
    result r;
    r.out.resize(R * D);
    r.lse.resize(R);
    r.sel.resize(R * K);
    r.cnt.resize(R);
    r.dep.resize((size_t)B * b.heads * D);
    CK(cudaMemcpy(r.out.data(), b.out, R * D * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(r.lse.data(), b.lse, R * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(r.sel.data(), b.sel, R * K * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(r.cnt.data(), b.cnt, R * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(r.dep.data(), b.dep, r.dep.size(), cudaMemcpyDeviceToHost));
    return r;
}

static int32_t bf16_order(uint16_t x) { return (x & 0x8000) ? -(int32_t)(x & 0x7fff) : (int32_t)x; }

struct tally {
    uint64_t values, identical, rows;
    int32_t max_ulp;
    double max_lse;
};

/* A rank's rows against the plain tier's rows of the same heads. */
static void compare(const result &ref, const result &got, const bufs &rk, bool exact, tally *t) {
    uint64_t bad_sel = 0, bad_dep = 0, bad_out = 0, bad_lse = 0;
    for (uint32_t b = 0; b < B; b++)
        for (uint32_t hl = 0; hl < rk.heads; hl++) {
            const size_t pr = (size_t)b * H + rk.first + hl, pg = (size_t)b * rk.heads + hl;
            bad_dep += memcmp(&ref.dep[pr * D], &got.dep[pg * D], D) != 0;
            for (uint32_t g = 0; g < G; g++) {
                const size_t rr = pr * G + g, rg = pg * G + g;
                const uint32_t c = ref.cnt[rr];
                bad_sel += c != got.cnt[rg] || memcmp(&ref.sel[rr * K], &got.sel[rg * K], (size_t)(c < (uint32_t)K ? c : (uint32_t)K) * 4) != 0;
                for (uint32_t j = 0; j < D; j++) {
                    const uint16_t x = ref.out[rr * D + j], y = got.out[rg * D + j];
                    const int32_t ulp = abs(bf16_order(x) - bf16_order(y));
                    t->values++;
                    t->identical += x == y;
                    if (ulp > t->max_ulp) t->max_ulp = ulp;
                    bad_out += exact ? x != y : ulp > 1;
                }
                const double dl = fabs((double)ref.lse[rr] - got.lse[rg]);
                const double rel = isinf(ref.lse[rr]) ? (ref.lse[rr] == got.lse[rg] ? 0.0 : 1.0)
                                                      : dl / fmax(1.0, fabs((double)ref.lse[rr]));
                if (rel > t->max_lse) t->max_lse = rel;
                bad_lse += exact ? memcmp(&ref.lse[rr], &got.lse[rg], 4) != 0 : !(rel <= 1e-5);
                t->rows++;
            }
        }
    CHECK(bad_sel == 0);
    CHECK(bad_dep == 0);
    CHECK(bad_out == 0);
    CHECK(bad_lse == 0);
    if (bad_sel || bad_dep || bad_out || bad_lse)
        fprintf(stderr, "rank heads %u+%u: %llu selections, %llu depth rows, %llu outputs, %llu lse differ\n", rk.first,
                rk.heads, (unsigned long long)bad_sel, (unsigned long long)bad_dep, (unsigned long long)bad_out,
                (unsigned long long)bad_lse);
}

/* Every part's planes and scales equal the plain tier's segment it holds. */
static void compare_segments(fathom_cuda_tier *ref, fathom_cuda_shard *sh, uint32_t tp) {
    uint64_t bad = 0, compared = 0;
    for (uint32_t r = 0; r < tp; r++) {
        fathom_cuda_shard_rank ri;
        CHECK_OK(fathom_cuda_shard_rank_of(sh, r, &ri));
        for (uint32_t s = 0; s < B; s++)
            for (uint64_t seg = ri.part; seg * T < target[s]; seg += ri.parts) {
                const uint64_t blocks = (target[s] - seg * T + 63) / 64;
                const uint32_t nb = (uint32_t)(blocks < (uint64_t)S ? blocks : (uint64_t)S);
                for (uint32_t l = 0; l < L; l++)
                    for (uint32_t h = 0; h < ri.heads; h++) {
                        fathom_cuda_tier_view a, b;
                        CHECK_OK(fathom_cuda_tier_segment(ref, s, l, ri.first_head + h, (uint32_t)seg, &a));
                        CHECK_OK(fathom_cuda_tier_segment(ri.tier, s, l, h, (uint32_t)(seg / ri.parts), &b));
                        for (uint32_t j = 0; j < D; j++)
                            for (uint32_t x = 0; x < nb; x++) {
                                for (uint32_t p = 0; p < 4; p++)
                                    bad += a.planes[((size_t)j * 4 + p) * S + x] != b.planes[((size_t)j * 4 + p) * S + x];
                                bad += a.scales[(size_t)j * S + x] != b.scales[(size_t)j * S + x];
                                compared += 5;
                            }
                    }
            }
    }
    CHECK(compared > 0);
    CHECK(bad == 0);
}

enum mode { ONE_STREAM, RANK_STREAMS, GRAPH };

static void run_case(uint32_t tp, mode md, uint32_t decode_steps) {
    const bool split = tp > H;
    fathom_cuda_tier_shape shape = {L, H, G, D, S, B, CAP};
    fathom_cuda_tier *ref = NULL;
    CHECK_OK(fathom_cuda_tier_create(&shape, &ref));
    std::vector<int> devices(tp, 0);
    fathom_cuda_shard_config cfg = {shape, tp, devices.data(), 0};
    fathom_cuda_shard *sh = NULL;
    CHECK_OK(fathom_cuda_shard_create(&cfg, &sh));
    const uint32_t chunk = 1500, max_rows = B * chunk;
    for (uint32_t s = 0; s < B; s++) {
        uint32_t a, b;
        CHECK_OK(fathom_cuda_tier_session_create(ref, &a));
        CHECK_OK(fathom_cuda_shard_session_create(sh, &b));
        CHECK(a == s && b == s);
        CHECK_OK(fathom_cuda_tier_reserve(ref, s, target[s] + decode_steps));
        CHECK_OK(fathom_cuda_shard_reserve(sh, s, target[s] + decode_steps));
    }
    /* per layer: the plain tier's buffers and every rank's */
    std::vector<bufs> rb(L);
    std::vector<std::vector<bufs>> kb(L);
    std::vector<cudaStream_t> streams(tp);
    cudaStream_t main_stream;
    CK(cudaStreamCreate(&main_stream));
    for (uint32_t r = 0; r < tp; r++) {
        if (md == RANK_STREAMS) CK(cudaStreamCreate(&streams[r]));
        else streams[r] = main_stream;
    }
    for (uint32_t l = 0; l < L; l++) {
        rb[l] = make_bufs(0, H, max_rows);
        fathom_cuda_tier_step_args a = args_of(rb[l], l);
        CHECK_OK(fathom_cuda_tier_workspace_size(ref, &a, &rb[l].ws_bytes));
        CK(cudaMalloc(&rb[l].ws, rb[l].ws_bytes));
        for (uint32_t r = 0; r < tp; r++) {
            fathom_cuda_shard_rank ri;
            CHECK_OK(fathom_cuda_shard_rank_of(sh, r, &ri));
            CHECK(ri.parts == (split ? tp / H : 1) && ri.heads == (split ? 1 : H / tp));
            bufs b = make_bufs(ri.first_head, ri.heads, max_rows);
            fathom_cuda_tier_step_args ba = args_of(b, l);
            CHECK_OK(fathom_cuda_shard_workspace_size(sh, r, &ba, &b.ws_bytes));
            CK(cudaMalloc(&b.ws, b.ws_bytes));
            kb[l].push_back(b);
        }
    }
    /* the sessions' keys, values and per-step queries */
    std::vector<std::vector<uint16_t>> keys(B * L), vals(B * L);
    for (uint32_t s = 0; s < B; s++)
        for (uint32_t l = 0; l < L; l++) {
            keys[s * L + l] = gen(target[s] + decode_steps, 1000 + 10 * s + l);
            vals[s * L + l] = gen(target[s] + decode_steps, 5000 + 10 * s + l);
        }
    uint32_t len[B] = {0, 0, 0};
    tally t = {0, 0, 0, 0, 0.0};
    cudaGraphExec_t exec = NULL;
    const uint32_t prefill_rounds = (target[0] + chunk - 1) / chunk;
    for (uint32_t round = 0; round < prefill_rounds + 1 + decode_steps; round++) {
        const bool decode = round > prefill_rounds;
        const bool step = round >= prefill_rounds;
        uint32_t counts[B], total = 0;
        for (uint32_t s = 0; s < B; s++) {
            const uint32_t want = decode ? target[s] + (round - prefill_rounds) : target[s];
            counts[s] = round == prefill_rounds ? 0 : want - len[s] < chunk ? want - len[s] : chunk;
            total += counts[s];
        }
        for (uint32_t l = 0; l < L; l++) {
            std::vector<uint16_t> k_rows, v_rows;
            for (uint32_t s = 0; s < B; s++) {
                const std::vector<uint16_t> &ks = keys[s * L + l], &vs = vals[s * L + l];
                k_rows.insert(k_rows.end(), ks.begin() + (size_t)len[s] * H * D, ks.begin() + (size_t)(len[s] + counts[s]) * H * D);
                v_rows.insert(v_rows.end(), vs.begin() + (size_t)len[s] * H * D, vs.begin() + (size_t)(len[s] + counts[s]) * H * D);
            }
            const std::vector<uint16_t> q = gen(B * G, 77 + 31 * round + l); /* read as [B][H][G*D] */
            std::vector<bufs *> all = {&rb[l]};
            for (bufs &b : kb[l]) all.push_back(&b);
            for (bufs *b : all) {
                const std::vector<uint16_t> kh = heads_of(k_rows, total, D, b->first, b->heads);
                const std::vector<uint16_t> vh = heads_of(v_rows, total, D, b->first, b->heads);
                /* queries [B][H][G][D] as [B][H][G*D] rows */
                const std::vector<uint16_t> qh = heads_of(q, B, G * D, b->first, b->heads);
                if (total) {
                    CK(cudaMemcpy(b->k, kh.data(), kh.size() * 2, cudaMemcpyHostToDevice));
                    CK(cudaMemcpy(b->v, vh.data(), vh.size() * 2, cudaMemcpyHostToDevice));
                }
                CK(cudaMemcpy(b->q, qh.data(), qh.size() * 2, cudaMemcpyHostToDevice));
                CK(cudaMemcpy(b->counts, counts, sizeof counts, cudaMemcpyHostToDevice));
            }
        }
        const uint32_t max_count = decode ? 1 : chunk;
        for (uint32_t l = 0; l < L; l++) {
            CHECK_OK(fathom_cuda_tier_append(ref, l, rb[l].sess, B, rb[l].counts, max_count, rb[l].k, rb[l].v, main_stream));
            if (step) {
                const fathom_cuda_tier_step_args a = args_of(rb[l], l);
                CHECK_OK(fathom_cuda_tier_step(ref, &a, main_stream));
            }
        }
        /* the shard's round: recorded once into a graph when decoding in GRAPH mode */
        const bool capture = md == GRAPH && decode && !exec;
        if (capture) CK(cudaStreamBeginCapture(main_stream, cudaStreamCaptureModeThreadLocal));
        if (!(md == GRAPH && decode && exec) || capture)
            for (uint32_t l = 0; l < L; l++) {
                std::vector<const uint32_t *> ss(tp), cs(tp);
                std::vector<const uint16_t *> ks(tp), vs(tp);
                std::vector<fathom_cuda_tier_step_args> as(tp);
                for (uint32_t r = 0; r < tp; r++) {
                    ss[r] = kb[l][r].sess;
                    cs[r] = kb[l][r].counts;
                    ks[r] = kb[l][r].k;
                    vs[r] = kb[l][r].v;
                    as[r] = args_of(kb[l][r], l);
                }
                CHECK_OK(fathom_cuda_shard_append(sh, l, ss.data(), B, cs.data(), max_count, ks.data(), vs.data(), streams.data()));
                if (step) CHECK_OK(fathom_cuda_shard_step(sh, as.data(), streams.data()));
            }
        if (capture) {
            cudaGraph_t g;
            CK(cudaStreamEndCapture(main_stream, &g));
            CK(cudaGraphInstantiate(&exec, g, 0));
            CK(cudaGraphDestroy(g));
        }
        if (md == GRAPH && decode) CK(cudaGraphLaunch(exec, main_stream));
        CK(cudaDeviceSynchronize());
        for (uint32_t s = 0; s < B; s++) len[s] += counts[s];
        if (round == prefill_rounds) compare_segments(ref, sh, tp);
        if (!step) continue;
        for (uint32_t l = 0; l < L; l++) {
            const result want = read(rb[l]);
            for (uint32_t r = 0; r < tp; r++) compare(want, read(kb[l][r]), kb[l][r], !split, &t);
        }
        CHECK_OK(fathom_cuda_tier_check(ref));
        CHECK_OK(fathom_cuda_shard_check(sh));
    }
    for (uint32_t s = 0; s < B; s++) {
        uint64_t n = 0;
        CHECK_OK(fathom_cuda_shard_length(sh, s, &n));
        CHECK(n == len[s]);
    }
    printf("tp %u (%s, %s): %llu rows, %llu of %llu output values bit-identical, max %d bf16 steps, max lse rel %.2e\n",
           tp, split ? "token split" : "head sharding", md == GRAPH ? "graph" : md == RANK_STREAMS ? "stream per rank" : "one stream",
           (unsigned long long)t.rows, (unsigned long long)t.identical, (unsigned long long)t.values, t.max_ulp, t.max_lse);
    CHECK(t.rows > 0);
    if (exec) cudaGraphExecDestroy(exec);
    for (uint32_t l = 0; l < L; l++) {
        free_bufs(rb[l]);
        for (bufs &b : kb[l]) free_bufs(b);
    }
    for (uint32_t r = 0; r < tp; r++)
        if (md == RANK_STREAMS) cudaStreamDestroy(streams[r]);
    cudaStreamDestroy(main_stream);
    fathom_cuda_shard_destroy(sh);
    fathom_cuda_tier_destroy(ref);
}

static void test_args(bool gpu) {
    fathom_cuda_shard *sh = NULL;
    CHECK_STATUS(fathom_cuda_shard_create(NULL, &sh), FATHOM_ERR_INVALID_ARG);
    fathom_cuda_tier_shape shape = {L, H, G, D, S, B, CAP};
    int devices[8] = {0};
    fathom_cuda_shard_config cfg = {shape, 3, devices, 0};
    CHECK_STATUS(fathom_cuda_shard_create(&cfg, &sh), FATHOM_ERR_INVALID_ARG); /* 3 vs 2 heads */
    CHECK(sh == NULL);
    cfg.tp = 0;
    CHECK_STATUS(fathom_cuda_shard_create(&cfg, &sh), FATHOM_ERR_INVALID_ARG);
    if (!gpu) return;
    cfg.tp = 4;
    devices[2] = 99;
    CHECK_STATUS(fathom_cuda_shard_create(&cfg, &sh), FATHOM_ERR_INVALID_ARG); /* no device 99 */
    devices[2] = 0;
    CHECK_OK(fathom_cuda_shard_create(&cfg, &sh));
    fathom_cuda_shard_rank ri;
    CHECK_STATUS(fathom_cuda_shard_rank_of(sh, 4, &ri), FATHOM_ERR_INVALID_ARG);
    CHECK_OK(fathom_cuda_shard_rank_of(sh, 3, &ri));
    CHECK(ri.first_head == 1 && ri.heads == 1 && ri.part == 1 && ri.parts == 2);
    printf("rank 3: device %d, NUMA node %d\n", ri.device, ri.numa_node);
    bufs b = make_bufs(0, 1, 1);
    fathom_cuda_tier_step_args as[4];
    for (int r = 0; r < 4; r++) as[r] = args_of(b, 0);
    cudaStream_t st[4] = {0, 0, 0, 0};
    as[2].k = 128;
    CHECK_STATUS(fathom_cuda_shard_step(sh, as, st), FATHOM_ERR_INVALID_ARG); /* ranks disagree */
    as[2].k = K;
    uint32_t uc;
    as[1].union_count = &uc;
    CHECK_STATUS(fathom_cuda_shard_step(sh, as, st), FATHOM_ERR_INVALID_ARG); /* not provided */
    as[1].union_count = NULL;
    CHECK_STATUS(fathom_cuda_shard_step(sh, as, st), FATHOM_ERR_INVALID_ARG); /* no workspace */
    CHECK_STATUS(fathom_cuda_shard_reserve(sh, 0, CAP + 1), FATHOM_ERR_INVALID_ARG);
    free_bufs(b);
    fathom_cuda_shard_destroy(sh);
}

int main(void) {
    int n = 0;
    const bool gpu = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
    cudaGetLastError();
    test_args(gpu);
    if (!gpu) {
        printf("test_cuda_tier_shard: no CUDA device, skipped after %d argument checks\n", check_passed_);
        return 77;
    }
    const char *qv = getenv("FATHOM_TEST_QUICK");
    const uint32_t steps = qv && *qv == '1' ? 4 : 8;
    run_case(1, ONE_STREAM, steps);
    run_case(2, RANK_STREAMS, steps);
    run_case(4, ONE_STREAM, steps);
    run_case(8, RANK_STREAMS, steps);
    run_case(4, GRAPH, steps);
    run_case(8, GRAPH, steps);
    return check_summary("test_cuda_tier_shard");
}

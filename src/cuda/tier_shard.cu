/* The KV tier over several GPUs (fathom_cuda.h, "KV tier over several
 * GPUs"): one tier per rank, head sharding or a token split.
 *
 * Token split of a KV head over Q parts: global token g lies in segment
 * g / T (T = 64*S tokens); part q holds the segments i with i % Q == q, in
 * order, so its local token l is global token (l/T*Q + q)*T + l%T and the
 * map is monotone (a global prefix or suffix is a local prefix or suffix,
 * and the lower local position is the lower global one).
 *
 * A step of a token-split rank, on its stream:
 *   depths   water-filling from the rank's sums over EVERY token of the
 *            session (shard_append keeps them as the tier's append keeps
 *            its own: the same operations in the same order, so the same
 *            bits as one tier's);
 *   local    the rank's tier step with those depths as fixed depths, sink
 *            and local 0: its top k of its own tokens by (score, position),
 *            which holds every token of the global middle top m = k -
 *            forced that lies in this part (fewer than m middle tokens and
 *            at most sink + local forced ones beat it); its scores are read
 *            from the step's workspace (fc_tier_step_scores);
 *   exchange the candidates' 64-bit keys (topk.cu's: score order, then the
 *            lower global position) to every rank of the head;
 *   select   every rank applies fathom_select's rule to the union: the
 *            forced positions of the whole session, then the m largest
 *            middle keys (rank by counting: the keys are distinct);
 *   attend   softmax sums over its own winners (logits as tier_step's, in
 *            double), partial (max, sum, sum of e*v);
 *   merge    every rank combines the parts' partials by their maxima. */
#include "tier_internal.cuh"

#include <cuda_bf16.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { SHARD_ERR_NONE = 0, SHARD_ERR_ROWS = 1, SHARD_ERR_LENGTH = 2, SHARD_ERR_COUNT = 3 };
static const char *const shard_errors[] = {"", "an append beyond max_append_rows",
                                           "a length above the step's capacity_tokens",
                                           "an append count above max_count"};

#define ATT_THREADS 256
#define MERGE_THREADS 1024

/* ---- the part map ---- */

typedef struct part_map {
    uint64_t T;  /* tokens per segment */
    uint32_t Q;  /* parts */
    uint32_t q;  /* this part */
} part_map;

/* Tokens of [0, n) in part q. */
static __host__ __device__ uint64_t part_tokens(part_map m, uint64_t n) {
    const uint64_t full = n / m.T, rem = n % m.T;
    const uint64_t segs = full / m.Q + (full % m.Q > m.q ? 1 : 0);
    return segs * m.T + (full % m.Q == m.q ? rem : 0);
}
static __device__ __forceinline__ uint64_t global_of(part_map m, uint64_t l) {
    return (l / m.T * m.Q + m.q) * m.T + l % m.T;
}
static __device__ __forceinline__ bool in_part(part_map m, uint64_t g) { return (g / m.T) % m.Q == m.q; }
static __device__ __forceinline__ uint64_t local_of(part_map m, uint64_t g) {
    return g / m.T / m.Q * m.T + g % m.T;
}

/* ---- the object ---- */

typedef struct shard_rank {
    int device, numa;
    uint32_t first_head, heads, part;
    fathom_cuda_tier *tier;
    /* token split only, on the rank's device */
    uint32_t *glen;              /* [max_sessions][layers] tokens of the whole session */
    double *gsums;               /* [max_sessions][layers][heads][3][dim] sums over every token */
    uint32_t *lcount, *newlen;   /* [max_sessions] an append's local counts, new lengths (~0 skip) */
    uint16_t *stage_k, *stage_v; /* [max_rows][heads][dim] the rows this part keeps */
    uint32_t *error;
    cudaEvent_t ev_cand, ev_part;
} shard_rank;

struct fathom_cuda_shard {
    fathom_cuda_tier_shape shape;
    uint32_t tp, parts, max_rows;
    uint64_t seg_tokens;
    int multi_node;
    shard_rank *ranks;
    uint8_t *peer; /* [tp][tp] rank a reads rank b's device memory directly (same device or peer access) */
};

/* What the token-split kernels see of a rank. */
typedef struct shard_dev {
    tier_dev t; /* the rank's tier */
    part_map m;
    uint32_t *glen;
    double *gsums;
    uint32_t *lcount, *newlen;
    uint16_t *stage_k, *stage_v;
    uint32_t *error;
    uint32_t max_rows;
} shard_dev;

static shard_dev dev_of(const fathom_cuda_shard *sh, const shard_rank *r) {
    shard_dev d;
    d.t = *fc_tier_dev(r->tier);
    d.m.T = sh->seg_tokens;
    d.m.Q = sh->parts;
    d.m.q = r->part;
    d.glen = r->glen;
    d.gsums = r->gsums;
    d.lcount = r->lcount;
    d.newlen = r->newlen;
    d.stage_k = r->stage_k;
    d.stage_v = r->stage_v;
    d.error = r->error;
    d.max_rows = sh->max_rows;
    return d;
}

static __device__ __forceinline__ void shard_fail(const shard_dev &d, uint32_t code) {
    atomicCAS(d.error, 0u, code);
}

/* ---- NUMA placement ---- */

/* The NUMA node of a device's PCI function, -1 when the host does not say. */
static int numa_node_of(int device) {
    char bus[32], path[96];
    if (cudaDeviceGetPCIBusId(bus, (int)sizeof bus, device) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    for (char *c = bus; *c; c++) *c = (char)tolower((unsigned char)*c);
    snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/numa_node", bus);
    FILE *f = fopen(path, "r");
    int node = -1;
    if (f) {
        if (fscanf(f, "%d", &node) != 1) node = -1;
        fclose(f);
    }
    return node;
}

/* While a rank allocates host memory on a host of several nodes, prefer its
 * GPU's node (set_mempolicy: MPOL_PREFERRED = 1, MPOL_DEFAULT = 0). Pinned
 * pages are placed when cudaHostAlloc faults them in, under this policy. */
static void numa_prefer(const fathom_cuda_shard *sh, int node) {
#ifdef SYS_set_mempolicy
    if (!sh->multi_node || node < 0 || node >= 64) return;
    unsigned long mask = 1ul << node;
    syscall(SYS_set_mempolicy, 1, &mask, 64ul);
#else
    (void)sh;
    (void)node;
#endif
}
static void numa_reset(const fathom_cuda_shard *sh) {
#ifdef SYS_set_mempolicy
    if (sh->multi_node) syscall(SYS_set_mempolicy, 0, NULL, 0ul);
#else
    (void)sh;
#endif
}

/* ---- append ---- */

/* Entry e of an append: its session, count, old length, input row offset,
 * local rows and their offset in the stage; false when it is skipped (the
 * same decision in every CTA: it depends on entries <= e only). */
typedef struct shard_entry {
    uint32_t s, count, old, lc;
    uint64_t off, loff;
} shard_entry;

static __device__ bool shard_entry_of(const shard_dev &d, uint32_t layer, const uint32_t *sessions,
                                      const uint32_t *counts, uint32_t max_count, uint32_t e,
                                      shard_entry *x) {
    uint64_t off = 0, loff = 0;
    for (uint32_t i = 0; i <= e; i++) {
        const uint32_t s = sessions[i], c = counts[i];
        bool ok = s < d.t.max_sessions && c <= max_count;
        uint32_t old = 0, lc = 0;
        if (ok) {
            old = d.glen[(size_t)s * d.t.layers + layer];
            lc = (uint32_t)(part_tokens(d.m, (uint64_t)old + c) - part_tokens(d.m, old));
            ok = (uint64_t)old + c <= 0xffffffffull - 64 && loff + lc <= d.max_rows;
        }
        if (i == e) {
            x->s = s;
            x->count = c;
            x->old = old;
            x->lc = ok ? lc : 0;
            x->off = off;
            x->loff = loff;
            return ok;
        }
        off += c;
        loff += ok ? lc : 0;
    }
    return false;
}

/* One CTA per (entry, head), a thread per channel: the part's rows into the
 * stage, the sums over every row (tier_sums_add in token order, shift = the
 * session's first row, as append.cu), the local count and new length. */
template <int D>
static __global__ void __launch_bounds__(D)
shard_append_kernel(shard_dev d, uint32_t layer, const uint32_t *sessions, const uint32_t *counts,
                    uint32_t max_count, const uint16_t *keys, const uint16_t *values) {
    const uint32_t H = d.t.heads, e = blockIdx.x / H, h = blockIdx.x % H, j = threadIdx.x;
    shard_entry x;
    const bool ok = shard_entry_of(d, layer, sessions, counts, max_count, e, &x);
    if (h == 0 && j == 0) {
        d.lcount[e] = x.lc;
        d.newlen[e] = ok ? x.old + x.count : 0xffffffffu;
        if (!ok && x.s < d.t.max_sessions) shard_fail(d, x.count > max_count ? SHARD_ERR_COUNT : SHARD_ERR_ROWS);
    }
    if (!ok || x.count == 0) return;
    double *base = d.gsums + (((size_t)x.s * d.t.layers + layer) * H + h) * 3 * D;
    double shift = base[j], sum = base[D + j], sum_sq = base[2 * D + j];
    const uint64_t first_local = part_tokens(d.m, x.old);
    for (uint32_t i = 0; i < x.count; i++) {
        const size_t in = ((x.off + i) * H + h) * D + j;
        const uint16_t kb = keys[in];
        const uint64_t g = (uint64_t)x.old + i;
        if (in_part(d.m, g)) {
            const size_t at = ((x.loff + part_tokens(d.m, g) - first_local) * H + h) * D + j;
            d.stage_k[at] = kb;
            d.stage_v[at] = values[in];
        }
        const float v = tier_bf16(kb);
        if (g == 0) shift = v;
        tier_sums_add(v, shift, &sum, &sum_sq);
    }
    base[j] = shift;
    base[D + j] = sum;
    base[2 * D + j] = sum_sq;
}

static __global__ void shard_lengths_kernel(shard_dev d, uint32_t layer, const uint32_t *sessions,
                                            uint32_t batch) {
    for (uint32_t e = threadIdx.x; e < batch; e += blockDim.x)
        if (d.newlen[e] != 0xffffffffu) d.glen[(size_t)sessions[e] * d.t.layers + layer] = d.newlen[e];
}

/* ---- step kernels ---- */

/* The whole session's length of problem p (0 and an error when it exceeds
 * the step's capacity or the id is out of range). */
static __device__ uint32_t shard_len(const shard_dev &d, uint32_t layer, uint32_t s, uint64_t cap,
                                     bool report) {
    if (s >= d.t.max_sessions) return 0;
    const uint32_t n = d.glen[(size_t)s * d.t.layers + layer];
    if (n > cap) {
        if (report) shard_fail(d, SHARD_ERR_LENGTH);
        return 0;
    }
    return n;
}

/* Water-filling depths from the sums over every token (tier_step.cu's prep). */
template <int D>
static __global__ void __launch_bounds__(D)
shard_depths_kernel(shard_dev d, uint32_t layer, const uint32_t *sessions, uint32_t G, uint32_t budget,
                    uint64_t cap, const uint16_t *queries, uint8_t *depths) {
    const uint32_t p = blockIdx.x, j = threadIdx.x, H = d.t.heads;
    const uint32_t s = sessions[p / H], h = p % H;
    const uint32_t n = shard_len(d, layer, s, cap, h == 0 && j == 0);
    double q2 = 0.0;
    for (uint32_t g = 0; g < G; g++) {
        const double q = (double)tier_bf16(queries[((size_t)p * G + g) * D + j]);
        q2 = __dadd_rn(q2, __dmul_rn(q, q));
    }
    float var = 0.0f;
    if (n > 0) {
        const double *base = d.gsums + (((size_t)s * d.t.layers + layer) * H + h) * 3 * D;
        var = tier_variance(base[D + j], base[2 * D + j], n);
    }
    depths[(size_t)p * D + j] = (uint8_t)fc_water_fill_depth<D>(__dmul_rn(q2, (double)var), budget);
}

/* The exchange area of one part: its candidates' keys and counts. */
typedef struct cand_slot {
    uint64_t *keys;  /* [R][k] */
    uint32_t *count; /* [R] */
} cand_slot;

/* Each row's local winners as keys of (score, global position). */
static __global__ void shard_cand_kernel(part_map m, uint32_t k, const uint32_t *lsel, const uint32_t *lcnt,
                                         const float *scores, uint64_t stride, cand_slot out) {
    const uint32_t r = blockIdx.x, c = lcnt[r];
    for (uint32_t i = threadIdx.x; i < c; i += blockDim.x) {
        const uint32_t l = lsel[(size_t)r * k + i];
        const uint64_t g = global_of(m, l);
        out.keys[(size_t)r * k + i] =
            ((uint64_t)fc_score_order(scores[(size_t)r * stride + l]) << 32) | (0xffffffffu - (uint32_t)g);
    }
    if (threadIdx.x == 0) out.count[r] = c;
}

/* fathom_select on the union of the parts' candidates (one CTA per row). */
static __global__ void __launch_bounds__(MERGE_THREADS)
shard_select_kernel(shard_dev d, uint32_t layer, const uint32_t *sessions, uint32_t G, uint32_t k,
                    uint32_t sink, uint32_t local, uint64_t cap, const uint8_t *slots, uint64_t slot_bytes,
                    uint32_t *sel, uint32_t *sel_count) {
    extern __shared__ uint64_t s_key[]; /* [Q*k], then Q*k flags */
    __shared__ uint32_t s_off[65];
    const uint32_t r = blockIdx.x, R = gridDim.x, Q = d.m.Q, tid = threadIdx.x;
    const uint64_t n = shard_len(d, layer, sessions[r / G / d.t.heads], cap, false);
    uint32_t *out = sel + (size_t)r * k;
    if (n <= k) {
        for (uint32_t i = tid; i < n; i += blockDim.x) out[i] = i;
        if (tid == 0) sel_count[r] = (uint32_t)n;
        return;
    }
    const uint64_t sink_end = sink < n ? sink : n, local_begin = local < n ? n - local : 0;
    const uint64_t forced = local_begin > sink_end ? sink_end + (n - local_begin) : n;
    if (forced >= k) { /* fathom_select: the sink first, then the latest positions */
        const uint64_t from_sink = sink_end < k ? sink_end : k, rest = k - from_sink;
        const uint64_t start = n - rest > from_sink ? n - rest : from_sink;
        for (uint64_t i = tid; i < from_sink; i += blockDim.x) out[i] = (uint32_t)i;
        for (uint64_t i = start + tid; i < n; i += blockDim.x) out[from_sink + (i - start)] = (uint32_t)i;
        if (tid == 0) sel_count[r] = (uint32_t)(from_sink + (n - start));
        return;
    }
    const uint32_t m = (uint32_t)(k - forced);
    if (tid == 0) {
        uint32_t o = 0;
        for (uint32_t q = 0; q < Q; q++) {
            s_off[q] = o;
            o += ((const uint32_t *)(slots + q * slot_bytes + (((uint64_t)R * k * 8 + 255) & ~(uint64_t)255)))[r];
        }
        s_off[Q] = o;
    }
    __syncthreads();
    const uint32_t C = s_off[Q];
    uint8_t *flag = (uint8_t *)(s_key + (size_t)Q * k);
    for (uint32_t q = 0; q < Q; q++) {
        const uint64_t *keys = (const uint64_t *)(slots + q * slot_bytes) + (size_t)r * k;
        for (uint32_t i = tid; i < s_off[q + 1] - s_off[q]; i += blockDim.x) s_key[s_off[q] + i] = keys[i];
    }
    __syncthreads();
    /* a middle key wins when fewer than m middle keys are larger */
    for (uint32_t c = tid; c < C; c += blockDim.x) {
        const uint64_t key = s_key[c], g = 0xffffffffu - (uint32_t)key;
        uint32_t above = 0;
        if (g >= sink_end && g < local_begin)
            for (uint32_t o = 0; o < C && above < m; o++) {
                const uint64_t g2 = 0xffffffffu - (uint32_t)s_key[o];
                above += s_key[o] > key && g2 >= sink_end && g2 < local_begin;
            }
        flag[c] = g >= sink_end && g < local_begin && above < m;
    }
    __syncthreads();
    for (uint32_t c = tid; c < C; c += blockDim.x) {
        if (!flag[c]) continue;
        const uint32_t g = 0xffffffffu - (uint32_t)s_key[c];
        uint32_t pos = 0;
        for (uint32_t o = 0; o < C; o++) pos += flag[o] && 0xffffffffu - (uint32_t)s_key[o] < g;
        out[sink_end + pos] = g;
    }
    for (uint64_t i = tid; i < sink_end; i += blockDim.x) out[i] = (uint32_t)i;
    for (uint64_t i = local_begin + tid; i < n; i += blockDim.x) out[sink_end + m + (i - local_begin)] = (uint32_t)i;
    if (tid == 0) sel_count[r] = (uint32_t)k;
}

/* Softmax sums of one row over the winners in this part: [max, sum, acc[D]]
 * into out (D + 2 doubles). Logits as tier_step.cu's attention: q.k in
 * double, two interleaved partial sums, times scale. */
template <int D>
static __global__ void __launch_bounds__(ATT_THREADS)
shard_attend_kernel(shard_dev d, uint32_t layer, const uint32_t *sessions, uint32_t G, uint32_t k,
                    double scale, const uint16_t *queries, const uint32_t *sel, const uint32_t *sel_count,
                    double *partial) {
    constexpr int SPLIT = ATT_THREADS / D > 0 ? ATT_THREADS / D : 1;
    __shared__ double logit[FATHOM_CUDA_MAX_K];
    __shared__ double part[ATT_THREADS / 32];
    __shared__ double s_acc[SPLIT][D];
    __shared__ float s_q[D];
    const uint32_t r = blockIdx.x, p = r / G, H = d.t.heads, tid = threadIdx.x;
    const uint32_t s = sessions[p / H], h = p % H, count = sel_count[r];
    const uint64_t T = d.m.T;
    for (uint32_t c = tid; c < D; c += ATT_THREADS) s_q[c] = tier_bf16(queries[(size_t)r * D + c]);
    __syncthreads();
    double mx = -INFINITY;
    for (uint32_t i = tid; i < count; i += ATT_THREADS) {
        const uint32_t g = sel[(size_t)r * k + i];
        double l = -INFINITY;
        if (in_part(d.m, g)) {
            const uint64_t lo = local_of(d.m, g);
            const uint4 *row = (const uint4 *)((const uint16_t *)(tier_slice(d.t, s, (uint32_t)(lo / T), layer, h) +
                                                                  d.t.kv_off) + (lo % T) * 2 * D);
            double d0 = 0.0, d1 = 0.0;
            for (int c8 = 0; c8 < D / 8; c8++) {
                float kf[8];
                fc_bf16x8_to_float(__ldcv(row + c8), kf);
                for (int u = 0; u < 8; u += 4) {
                    const int c = c8 * 8 + u;
                    d0 += (double)s_q[c] * kf[u] + (double)s_q[c + 1] * kf[u + 1];
                    d1 += (double)s_q[c + 2] * kf[u + 2] + (double)s_q[c + 3] * kf[u + 3];
                }
            }
            l = (d0 + d1) * scale;
            mx = fmax(mx, l);
        }
        logit[i] = l;
    }
    mx = fc_block_reduce(mx, true, part);
    double sum = 0.0;
    for (uint32_t i = tid; i < count; i += ATT_THREADS) {
        const double e = logit[i] == -INFINITY ? 0.0 : exp(logit[i] - mx);
        logit[i] = e;
        sum += e;
    }
    sum = fc_block_reduce(sum, false, part); /* its barriers publish logit[] */
    for (uint32_t x = tid; x < SPLIT * D; x += ATT_THREADS) {
        const uint32_t c = x % D, sub = x / D;
        double a = 0.0;
        for (uint32_t i = sub; i < count; i += SPLIT) {
            if (logit[i] == 0.0) continue;
            const uint32_t g = sel[(size_t)r * k + i];
            const uint64_t lo = local_of(d.m, g);
            const uint16_t *v = (const uint16_t *)(tier_slice(d.t, s, (uint32_t)(lo / T), layer, h) + d.t.kv_off) +
                                (lo % T) * 2 * D + D;
            a += logit[i] * (double)tier_bf16(__ldcv(v + c));
        }
        s_acc[sub][c] = a;
    }
    __syncthreads();
    double *out = partial + (size_t)r * (D + 2);
    for (uint32_t c = tid; c < D; c += ATT_THREADS) {
        double a = 0.0;
        for (int sub = 0; sub < SPLIT; sub++) a += s_acc[sub][c];
        out[2 + c] = a;
    }
    if (tid == 0) {
        out[0] = mx;
        out[1] = sum;
    }
}

/* out = sum_q acc_q e^(max_q - M) / sum_q sum_q e^(max_q - M), lse = M + log of the denominator. */
static __global__ void shard_merge_kernel(uint32_t Q, uint32_t D, const uint8_t *slots, uint64_t slot_bytes,
                                          uint16_t *out, float *lse) {
    const uint32_t r = blockIdx.x;
    double M = -INFINITY;
    for (uint32_t q = 0; q < Q; q++)
        M = fmax(M, ((const double *)(slots + q * slot_bytes))[(size_t)r * (D + 2)]);
    double S = 0.0;
    for (uint32_t q = 0; q < Q; q++) {
        const double *pq = (const double *)(slots + q * slot_bytes) + (size_t)r * (D + 2);
        if (pq[0] != -INFINITY) S += pq[1] * exp(pq[0] - M);
    }
    for (uint32_t c = threadIdx.x; c < D; c += blockDim.x) {
        double a = 0.0;
        for (uint32_t q = 0; q < Q; q++) {
            const double *pq = (const double *)(slots + q * slot_bytes) + (size_t)r * (D + 2);
            if (pq[0] != -INFINITY) a += pq[2 + c] * exp(pq[0] - M);
        }
        const float o = M != -INFINITY ? (float)(a / S) : 0.0f;
        out[(size_t)r * D + c] = __bfloat16_as_ushort(__float2bfloat16_rn(o));
    }
    if (lse && threadIdx.x == 0) lse[r] = M != -INFINITY ? (float)(M + log(S)) : -INFINITY;
}

/* ---- the token-split workspace ---- */

typedef struct split_ws {
    fathom_cuda_tier_step_args local; /* the rank's own tier step */
    uint8_t *depths;                  /* [P][D] */
    uint32_t *lsel, *lcnt;            /* [R][k], [R] */
    uint16_t *scratch;                /* [R][D] the local step's output, unused */
    uint8_t *cands;                   /* Q slots of cand_bytes: keys [R][k], counts [R] */
    uint64_t cand_bytes;
    uint32_t *sel, *sel_count;        /* when the caller gives none */
    uint8_t *partials;                /* Q slots of part_bytes: [R][D + 2] doubles */
    uint64_t part_bytes;
    size_t total;
} split_ws;

static uint64_t up256(uint64_t x) { return (x + 255) & ~(uint64_t)255; }

/* The local step's capacity: the largest share of `cap` tokens a part holds. */
static uint64_t local_capacity(const fathom_cuda_shard *sh, uint64_t cap) {
    const uint64_t segs = (cap + sh->seg_tokens - 1) / sh->seg_tokens;
    const uint64_t local = (segs + sh->parts - 1) / sh->parts * sh->seg_tokens;
    return local < cap ? local : cap;
}

static int split_layout(const fathom_cuda_shard *sh, const shard_rank *rk,
                        const fathom_cuda_tier_step_args *a, uint8_t *base, split_ws *w) {
    const uint64_t G = sh->shape.group, D = sh->shape.dim, P = (uint64_t)a->batch * rk->heads, R = P * G;
    const uint64_t k = a->k, Q = sh->parts;
    memset(w, 0, sizeof *w);
    w->local = *a;
    w->local.capacity_tokens = local_capacity(sh, a->capacity_tokens);
    w->local.sink = w->local.local = 0;
    w->local.lse = NULL;
    w->local.depths = NULL;
    w->local.union_count = NULL;
    w->local.workspace = NULL;
    size_t tier_bytes;
    FATHOM_TRY(fathom_cuda_tier_workspace_size(rk->tier, &w->local, &tier_bytes));
    w->cand_bytes = up256(R * k * 8) + up256(R * 4);
    w->part_bytes = up256(R * (D + 2) * 8);
    uint64_t off = up256(tier_bytes);
    uint64_t at[8];
    const uint64_t sizes[8] = {P * D, R * k * 4, R * 4, R * D * 2, Q * w->cand_bytes, R * k * 4, R * 4,
                               Q * w->part_bytes};
    for (int i = 0; i < 8; i++) {
        at[i] = off;
        off = up256(off + sizes[i]);
    }
    w->total = (size_t)off + 256;
    if (!base) return FATHOM_OK;
    w->local.workspace = base;
    w->local.workspace_bytes = tier_bytes;
    w->depths = base + at[0];
    w->lsel = (uint32_t *)(base + at[1]);
    w->lcnt = (uint32_t *)(base + at[2]);
    w->scratch = (uint16_t *)(base + at[3]);
    w->cands = base + at[4];
    w->sel = (uint32_t *)(base + at[5]);
    w->sel_count = (uint32_t *)(base + at[6]);
    w->partials = base + at[7];
    w->local.fixed_depths = a->fixed_depths ? a->fixed_depths : w->depths;
    w->local.selected = w->lsel;
    w->local.selected_count = w->lcnt;
    w->local.out = w->scratch;
    return FATHOM_OK;
}

/* ---- host API ---- */

/* Runs f with the caller's current device restored afterwards. */
template <typename F>
static int on_devices(F f) {
    int saved = 0;
    FATHOM_CUDA_TRY(cudaGetDevice(&saved));
    const int st = f();
    cudaSetDevice(saved);
    return st;
}

extern "C" void fathom_cuda_shard_destroy(fathom_cuda_shard *sh) {
    if (!sh) return;
    int saved = 0;
    cudaGetDevice(&saved);
    for (uint32_t r = 0; sh->ranks && r < sh->tp; r++) {
        shard_rank *rk = &sh->ranks[r];
        cudaSetDevice(rk->device);
        fathom_cuda_tier_destroy(rk->tier);
        cudaFree(rk->glen);
        cudaFree(rk->gsums);
        cudaFree(rk->lcount);
        cudaFree(rk->newlen);
        cudaFree(rk->stage_k);
        cudaFree(rk->stage_v);
        cudaFree(rk->error);
        if (rk->ev_cand) cudaEventDestroy(rk->ev_cand);
        if (rk->ev_part) cudaEventDestroy(rk->ev_part);
    }
    cudaSetDevice(saved);
    free(sh->ranks);
    free(sh->peer);
    free(sh);
}

static int create_rank(fathom_cuda_shard *sh, uint32_t r, const int *devices) {
    shard_rank *rk = &sh->ranks[r];
    const fathom_cuda_tier_shape *s = &sh->shape;
    rk->device = devices[r];
    rk->numa = numa_node_of(rk->device);
    FATHOM_CUDA_TRY(cudaSetDevice(rk->device));
    rk->heads = sh->parts > 1 ? 1 : s->kv_heads / sh->tp;
    rk->first_head = sh->parts > 1 ? r / sh->parts : r * rk->heads;
    rk->part = r % sh->parts;
    fathom_cuda_tier_shape local = *s;
    local.kv_heads = rk->heads;
    const part_map m = {sh->seg_tokens, sh->parts, 0};
    local.max_tokens = part_tokens(m, s->max_tokens); /* part 0 holds the most */
    if (local.max_tokens == 0) local.max_tokens = 1;
    FATHOM_TRY(fathom_cuda_tier_create(&local, &rk->tier));
    if (sh->parts == 1) return FATHOM_OK;
    const size_t S = s->max_sessions, L = s->layers, D = s->dim;
    FATHOM_CUDA_TRY(cudaMalloc((void **)&rk->glen, S * L * 4));
    FATHOM_CUDA_TRY(cudaMemset(rk->glen, 0, S * L * 4));
    FATHOM_CUDA_TRY(cudaMalloc((void **)&rk->gsums, S * L * 3 * D * 8));
    FATHOM_CUDA_TRY(cudaMalloc((void **)&rk->lcount, S * 4));
    FATHOM_CUDA_TRY(cudaMalloc((void **)&rk->newlen, S * 4));
    FATHOM_CUDA_TRY(cudaMalloc((void **)&rk->stage_k, (size_t)sh->max_rows * D * 2));
    FATHOM_CUDA_TRY(cudaMalloc((void **)&rk->stage_v, (size_t)sh->max_rows * D * 2));
    FATHOM_CUDA_TRY(cudaMalloc((void **)&rk->error, 4));
    FATHOM_CUDA_TRY(cudaMemset(rk->error, 0, 4));
    FATHOM_CUDA_TRY(cudaEventCreateWithFlags(&rk->ev_cand, cudaEventDisableTiming));
    FATHOM_CUDA_TRY(cudaEventCreateWithFlags(&rk->ev_part, cudaEventDisableTiming));
    return FATHOM_OK;
}

extern "C" int fathom_cuda_shard_create(const fathom_cuda_shard_config *c, fathom_cuda_shard **out) {
    FATHOM_CHECK_ARG(c != NULL && out != NULL, "shard_create: NULL config or out");
    *out = NULL;
    const fathom_cuda_tier_shape *s = &c->shape;
    FATHOM_CHECK_ARG(c->tp >= 1 && c->devices != NULL, "shard_create: tp %u or devices NULL", c->tp);
    FATHOM_CHECK_ARG(s->kv_heads >= 1 && (s->kv_heads % c->tp == 0 || c->tp % s->kv_heads == 0),
                     "shard_create: tp %u neither divides nor is a multiple of kv_heads %u", c->tp,
                     s->kv_heads);
    FATHOM_CHECK_ARG(c->tp / s->kv_heads <= 64, "shard_create: more than 64 parts per head");
    int ndev = 0;
    FATHOM_CUDA_TRY(cudaGetDeviceCount(&ndev));
    for (uint32_t r = 0; r < c->tp; r++)
        FATHOM_CHECK_ARG(c->devices[r] >= 0 && c->devices[r] < ndev, "shard_create: rank %u device %d of %d",
                         r, c->devices[r], ndev);
    fathom_cuda_shard *sh = (fathom_cuda_shard *)calloc(1, sizeof *sh);
    FATHOM_CHECK(sh == NULL, FATHOM_ERR_NOMEM, "shard_create: out of memory");
    sh->shape = *s;
    sh->tp = c->tp;
    sh->parts = c->tp > s->kv_heads ? c->tp / s->kv_heads : 1;
    sh->max_rows = c->max_append_rows ? c->max_append_rows : 4096;
    sh->seg_tokens = (uint64_t)(s->segment_blocks ? s->segment_blocks : 64) * FATHOM_BLOCK_TOKENS;
    sh->multi_node = access("/sys/devices/system/node/node1", F_OK) == 0;
    sh->ranks = (shard_rank *)calloc(c->tp, sizeof *sh->ranks);
    sh->peer = (uint8_t *)calloc((size_t)c->tp * c->tp, 1);
    int st = sh->ranks && sh->peer ? FATHOM_OK : fathom_fail(FATHOM_ERR_NOMEM, "shard_create: out of memory");
    st = st ? st : on_devices([&]() -> int {
        for (uint32_t r = 0; r < sh->tp; r++) FATHOM_TRY(create_rank(sh, r, c->devices));
        /* peer access between the devices of one head's parts, where the hardware has it */
        for (uint32_t a = 0; a < sh->tp; a++)
            for (uint32_t b = 0; b < sh->tp; b++) {
                const int da = sh->ranks[a].device, db = sh->ranks[b].device;
                int can = 0;
                if (sh->parts == 1 || a / sh->parts != b / sh->parts) continue;
                sh->peer[(size_t)a * sh->tp + b] = da == db;
                if (da == db) continue;
                FATHOM_CUDA_TRY(cudaDeviceCanAccessPeer(&can, da, db));
                if (!can) continue;
                sh->peer[(size_t)a * sh->tp + b] = 1;
                FATHOM_CUDA_TRY(cudaSetDevice(da));
                const cudaError_t e = cudaDeviceEnablePeerAccess(db, 0);
                if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
                else FATHOM_CUDA_TRY(e);
            }
        return FATHOM_OK;
    });
    if (st) {
        fathom_cuda_shard_destroy(sh);
        return st;
    }
    *out = sh;
    return FATHOM_OK;
}

extern "C" int fathom_cuda_shard_rank_of(const fathom_cuda_shard *sh, uint32_t rank, fathom_cuda_shard_rank *out) {
    FATHOM_CHECK_ARG(sh && out && rank < sh->tp, "shard_rank_of: NULL shard/out or rank out of range");
    const shard_rank *rk = &sh->ranks[rank];
    out->device = rk->device;
    out->numa_node = rk->numa;
    out->first_head = rk->first_head;
    out->heads = rk->heads;
    out->part = rk->part;
    out->parts = sh->parts;
    out->tier = rk->tier;
    return FATHOM_OK;
}

extern "C" int fathom_cuda_shard_session_create(fathom_cuda_shard *sh, uint32_t *session) {
    FATHOM_CHECK_ARG(sh && session, "shard_session_create: NULL shard or session");
    return on_devices([&]() -> int {
        uint32_t id = 0;
        for (uint32_t r = 0; r < sh->tp; r++) {
            shard_rank *rk = &sh->ranks[r];
            uint32_t got;
            FATHOM_CUDA_TRY(cudaSetDevice(rk->device));
            numa_prefer(sh, rk->numa);
            int st = fathom_cuda_tier_session_create(rk->tier, &got);
            numa_reset(sh);
            if (st == FATHOM_OK && r > 0 && got != id) {
                fathom_cuda_tier_session_free(rk->tier, got);
                st = fathom_fail(FATHOM_ERR_STATE, "shard_session_create: rank %u gave id %u, rank 0 %u", r, got, id);
            }
            if (st == FATHOM_OK && sh->parts > 1) {
                const size_t L = sh->shape.layers, D = sh->shape.dim;
                if (cudaMemset(rk->glen + (size_t)got * L, 0, L * 4) != cudaSuccess ||
                    cudaMemset(rk->gsums + (size_t)got * L * 3 * D, 0, L * 3 * D * 8) != cudaSuccess)
                    st = fathom_fail(FATHOM_ERR_DEVICE, "shard_session_create: cudaMemset failed");
            }
            if (st) { /* undo the ranks before */
                for (uint32_t o = 0; o < r; o++) {
                    cudaSetDevice(sh->ranks[o].device);
                    fathom_cuda_tier_session_free(sh->ranks[o].tier, id);
                }
                return st;
            }
            id = got;
        }
        *session = id;
        return FATHOM_OK;
    });
}

extern "C" int fathom_cuda_shard_session_free(fathom_cuda_shard *sh, uint32_t s) {
    FATHOM_CHECK_ARG(sh, "shard_session_free: NULL shard");
    return on_devices([&]() -> int {
        int first = FATHOM_OK;
        for (uint32_t r = 0; r < sh->tp; r++) {
            FATHOM_CUDA_TRY(cudaSetDevice(sh->ranks[r].device));
            const int st = fathom_cuda_tier_session_free(sh->ranks[r].tier, s);
            if (!first) first = st;
        }
        return first;
    });
}

extern "C" int fathom_cuda_shard_reserve(fathom_cuda_shard *sh, uint32_t s, uint64_t tokens) {
    FATHOM_CHECK_ARG(sh, "shard_reserve: NULL shard");
    FATHOM_CHECK_ARG(tokens <= sh->shape.max_tokens, "shard_reserve: %llu tokens above max_tokens %llu",
                     (unsigned long long)tokens, (unsigned long long)sh->shape.max_tokens);
    return on_devices([&]() -> int {
        for (uint32_t r = 0; r < sh->tp; r++) {
            shard_rank *rk = &sh->ranks[r];
            const part_map m = {sh->seg_tokens, sh->parts, rk->part};
            FATHOM_CUDA_TRY(cudaSetDevice(rk->device));
            numa_prefer(sh, rk->numa);
            const int st = fathom_cuda_tier_reserve(rk->tier, s, part_tokens(m, tokens));
            numa_reset(sh);
            FATHOM_TRY(st);
        }
        return FATHOM_OK;
    });
}

extern "C" int fathom_cuda_shard_length(fathom_cuda_shard *sh, uint32_t s, uint64_t *length) {
    FATHOM_CHECK_ARG(sh && length, "shard_length: NULL shard or length");
    return on_devices([&]() -> int {
        shard_rank *rk = &sh->ranks[0];
        FATHOM_CUDA_TRY(cudaSetDevice(rk->device));
        if (sh->parts == 1) return fathom_cuda_tier_length(rk->tier, s, length);
        FATHOM_CHECK_ARG(fc_tier_live(rk->tier, s), "shard_length: session %u is not live", s);
        const uint32_t L = sh->shape.layers;
        uint32_t *lens = (uint32_t *)malloc((size_t)L * 4);
        FATHOM_CHECK(lens == NULL, FATHOM_ERR_NOMEM, "shard_length: out of memory");
        const cudaError_t e = cudaMemcpy(lens, rk->glen + (size_t)s * L, (size_t)L * 4, cudaMemcpyDeviceToHost);
        uint32_t differ = 0;
        for (uint32_t l = 1; l < L; l++) differ += lens[l] != lens[0];
        *length = lens[0];
        free(lens);
        FATHOM_CUDA_TRY(e);
        FATHOM_CHECK(differ, FATHOM_ERR_STATE, "shard_length: session %u's layers disagree", s);
        return FATHOM_OK;
    });
}

extern "C" int fathom_cuda_shard_check(fathom_cuda_shard *sh) {
    FATHOM_CHECK_ARG(sh, "shard_check: NULL shard");
    return on_devices([&]() -> int {
        for (uint32_t r = 0; r < sh->tp; r++) {
            shard_rank *rk = &sh->ranks[r];
            FATHOM_CUDA_TRY(cudaSetDevice(rk->device));
            FATHOM_TRY(fathom_cuda_tier_check(rk->tier));
            if (!rk->error) continue;
            uint32_t code = 0;
            FATHOM_CUDA_TRY(cudaMemcpy(&code, rk->error, 4, cudaMemcpyDeviceToHost));
            FATHOM_CUDA_TRY(cudaMemset(rk->error, 0, 4));
            FATHOM_CHECK(code != 0, FATHOM_ERR_STATE, "shard: rank %u: %s", r,
                         shard_errors[code < 4 ? code : 0]);
        }
        return FATHOM_OK;
    });
}

extern "C" int fathom_cuda_shard_append(fathom_cuda_shard *sh, uint32_t layer, const uint32_t *const *sessions,
                                        uint32_t batch, const uint32_t *const *counts, uint32_t max_count,
                                        const uint16_t *const *keys, const uint16_t *const *values,
                                        const cudaStream_t *streams) {
    FATHOM_CHECK_ARG(sh && sessions && counts && keys && values && streams, "shard_append: NULL argument");
    FATHOM_CHECK_ARG(batch >= 1 && batch <= sh->shape.max_sessions, "shard_append: batch %u not in 1..%u",
                     batch, sh->shape.max_sessions);
    FATHOM_CHECK_ARG(layer < sh->shape.layers, "shard_append: layer %u >= %u", layer, sh->shape.layers);
    return on_devices([&]() -> int {
        for (uint32_t r = 0; r < sh->tp; r++) {
            shard_rank *rk = &sh->ranks[r];
            FATHOM_CUDA_TRY(cudaSetDevice(rk->device));
            if (sh->parts == 1) {
                FATHOM_TRY(fathom_cuda_tier_append(rk->tier, layer, sessions[r], batch, counts[r], max_count,
                                                   keys[r], values[r], streams[r]));
                continue;
            }
            FATHOM_CHECK_ARG(sessions[r] && counts[r] && keys[r] && values[r], "shard_append: NULL rank %u input", r);
            const shard_dev d = dev_of(sh, rk);
            const uint32_t D = sh->shape.dim;
            switch (D) {
            case 64: shard_append_kernel<64><<<batch * rk->heads, 64, 0, streams[r]>>>(d, layer, sessions[r], counts[r], max_count, keys[r], values[r]); break;
            case 128: shard_append_kernel<128><<<batch * rk->heads, 128, 0, streams[r]>>>(d, layer, sessions[r], counts[r], max_count, keys[r], values[r]); break;
            default: shard_append_kernel<256><<<batch * rk->heads, 256, 0, streams[r]>>>(d, layer, sessions[r], counts[r], max_count, keys[r], values[r]); break;
            }
            FATHOM_CUDA_LAUNCHED();
            FATHOM_TRY(fathom_cuda_tier_append(rk->tier, layer, sessions[r], batch, rk->lcount, max_count,
                                               rk->stage_k, rk->stage_v, streams[r]));
            shard_lengths_kernel<<<1, 256, 0, streams[r]>>>(d, layer, sessions[r], batch);
            FATHOM_CUDA_LAUNCHED();
        }
        return FATHOM_OK;
    });
}

static int check_step(const fathom_cuda_shard *sh, const fathom_cuda_tier_step_args *args) {
    FATHOM_CHECK_ARG(sh && args, "shard_step: NULL shard or args");
    const fathom_cuda_tier_step_args *a = &args[0];
    for (uint32_t r = 1; r < sh->tp; r++) {
        const fathom_cuda_tier_step_args *b = &args[r];
        FATHOM_CHECK_ARG(b->layer == a->layer && b->batch == a->batch && b->capacity_tokens == a->capacity_tokens &&
                             b->k == a->k && b->sink == a->sink && b->local == a->local && b->budget == a->budget &&
                             b->scale == a->scale && !b->fixed_depths == !a->fixed_depths,
                         "shard_step: rank %u's arguments disagree with rank 0's", r);
    }
    if (sh->parts > 1) {
        FATHOM_CHECK_ARG(a->sink + (uint64_t)a->local <= a->k, "shard_step: sink + local exceed k");
        FATHOM_CHECK_ARG((uint64_t)sh->parts * a->k * 9 <= 200 * 1024,
                         "shard_step: %u parts x k %u candidates exceed the select's shared memory", sh->parts, a->k);
        for (uint32_t r = 0; r < sh->tp; r++)
            FATHOM_CHECK_ARG(args[r].union_count == NULL, "shard_step: union_count is not provided by the token split");
    }
    return FATHOM_OK;
}

extern "C" int fathom_cuda_shard_workspace_size(const fathom_cuda_shard *sh, uint32_t rank,
                                                const fathom_cuda_tier_step_args *a, size_t *bytes) {
    FATHOM_CHECK_ARG(sh && a && bytes && rank < sh->tp, "shard_workspace_size: NULL argument or rank out of range");
    if (sh->parts == 1) return fathom_cuda_tier_workspace_size(sh->ranks[rank].tier, a, bytes);
    split_ws w;
    FATHOM_TRY(split_layout(sh, &sh->ranks[rank], a, NULL, &w));
    *bytes = w.total;
    return FATHOM_OK;
}

/* Phase 1 of a token-split rank: depths, the local step, its candidates. */
static int split_local(const fathom_cuda_shard *sh, const shard_rank *rk, const fathom_cuda_tier_step_args *a,
                       const split_ws *w, cudaStream_t stream) {
    const shard_dev d = dev_of(sh, rk);
    const uint32_t G = sh->shape.group, P = a->batch * rk->heads;
    if (!a->fixed_depths) {
        switch (sh->shape.dim) {
        case 64: shard_depths_kernel<64><<<P, 64, 0, stream>>>(d, a->layer, a->sessions, G, a->budget, a->capacity_tokens, a->queries, w->depths); break;
        case 128: shard_depths_kernel<128><<<P, 128, 0, stream>>>(d, a->layer, a->sessions, G, a->budget, a->capacity_tokens, a->queries, w->depths); break;
        default: shard_depths_kernel<256><<<P, 256, 0, stream>>>(d, a->layer, a->sessions, G, a->budget, a->capacity_tokens, a->queries, w->depths); break;
        }
        FATHOM_CUDA_LAUNCHED();
    }
    FATHOM_TRY(fathom_cuda_tier_step(rk->tier, &w->local, stream));
    const float *scores;
    uint64_t stride;
    FATHOM_TRY(fc_tier_step_scores(rk->tier, &w->local, &scores, &stride));
    uint8_t *own = w->cands + rk->part * w->cand_bytes;
    const cand_slot slot = {(uint64_t *)own, (uint32_t *)(own + up256((uint64_t)P * G * a->k * 8))};
    shard_cand_kernel<<<P * G, 256, 0, stream>>>(d.m, a->k, w->lsel, w->lcnt, scores, stride, slot);
    FATHOM_CUDA_LAUNCHED();
    if (a->depths && !a->fixed_depths)
        FATHOM_CUDA_TRY(cudaMemcpyAsync(a->depths, w->depths, (size_t)P * sh->shape.dim, cudaMemcpyDeviceToDevice, stream));
    return FATHOM_OK;
}

/* Pull the other parts' slots of an exchange area into this rank's copy,
 * after their events. */
static int pull(const fathom_cuda_shard *sh, uint32_t r, const split_ws *ws, bool partials,
                const cudaStream_t *streams) {
    const shard_rank *rk = &sh->ranks[r];
    const uint32_t first = r / sh->parts * sh->parts;
    for (uint32_t o = first; o < first + sh->parts; o++) {
        if (o == r) continue;
        const shard_rank *ro = &sh->ranks[o];
        if (streams[o] != streams[r])
            FATHOM_CUDA_TRY(cudaStreamWaitEvent(streams[r], partials ? ro->ev_part : ro->ev_cand, 0));
        const uint64_t bytes = partials ? ws[r].part_bytes : ws[r].cand_bytes;
        const uint8_t *src = (partials ? ws[o].partials : ws[o].cands) + ro->part * bytes;
        uint8_t *dst = (partials ? ws[r].partials : ws[r].cands) + ro->part * bytes;
        /* a plain copy between devices that reach each other (capturable); else through the host */
        if (sh->peer[(size_t)r * sh->tp + o])
            FATHOM_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, streams[r]));
        else
            FATHOM_CUDA_TRY(cudaMemcpyPeerAsync(dst, rk->device, src, ro->device, bytes, streams[r]));
    }
    return FATHOM_OK;
}

static int split_select_attend(const fathom_cuda_shard *sh, const shard_rank *rk, const fathom_cuda_tier_step_args *a,
                               const split_ws *w, cudaStream_t stream) {
    const shard_dev d = dev_of(sh, rk);
    const uint32_t G = sh->shape.group, R = a->batch * rk->heads * G;
    uint32_t *sel = a->selected ? a->selected : w->sel;
    uint32_t *cnt = a->selected_count ? a->selected_count : w->sel_count;
    const size_t smem = (size_t)sh->parts * a->k * 9;
    if (smem > 48 * 1024)
        FATHOM_CUDA_TRY(cudaFuncSetAttribute(shard_select_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    shard_select_kernel<<<R, MERGE_THREADS, smem, stream>>>(d, a->layer, a->sessions, G, a->k, a->sink, a->local,
                                                            a->capacity_tokens, w->cands, w->cand_bytes, sel, cnt);
    FATHOM_CUDA_LAUNCHED();
    double *own = (double *)(w->partials + rk->part * w->part_bytes);
    switch (sh->shape.dim) {
    case 64: shard_attend_kernel<64><<<R, ATT_THREADS, 0, stream>>>(d, a->layer, a->sessions, G, a->k, a->scale, a->queries, sel, cnt, own); break;
    case 128: shard_attend_kernel<128><<<R, ATT_THREADS, 0, stream>>>(d, a->layer, a->sessions, G, a->k, a->scale, a->queries, sel, cnt, own); break;
    default: shard_attend_kernel<256><<<R, ATT_THREADS, 0, stream>>>(d, a->layer, a->sessions, G, a->k, a->scale, a->queries, sel, cnt, own); break;
    }
    FATHOM_CUDA_LAUNCHED();
    return FATHOM_OK;
}

extern "C" int fathom_cuda_shard_step(fathom_cuda_shard *sh, const fathom_cuda_tier_step_args *args,
                                      const cudaStream_t *streams) {
    FATHOM_TRY(check_step(sh, args));
    FATHOM_CHECK_ARG(streams != NULL, "shard_step: NULL streams");
    return on_devices([&]() -> int {
        if (sh->parts == 1) {
            for (uint32_t r = 0; r < sh->tp; r++) {
                FATHOM_CUDA_TRY(cudaSetDevice(sh->ranks[r].device));
                FATHOM_TRY(fathom_cuda_tier_step(sh->ranks[r].tier, &args[r], streams[r]));
            }
            return FATHOM_OK;
        }
        split_ws *ws = (split_ws *)calloc(sh->tp, sizeof *ws);
        FATHOM_CHECK(ws == NULL, FATHOM_ERR_NOMEM, "shard_step: out of memory");
        int st = FATHOM_OK;
        for (uint32_t r = 0; r < sh->tp && !st; r++) {
            const fathom_cuda_tier_step_args *a = &args[r];
            split_ws probe;
            st = split_layout(sh, &sh->ranks[r], a, NULL, &probe);
            if (!st && (!a->workspace || ((uintptr_t)a->workspace & 255) || a->workspace_bytes < probe.total))
                st = fathom_fail(FATHOM_ERR_INVALID_ARG, "shard_step: rank %u's workspace is NULL, unaligned or under %zu bytes",
                                 r, probe.total);
            if (!st) st = split_layout(sh, &sh->ranks[r], a, (uint8_t *)a->workspace, &ws[r]);
        }
        for (uint32_t r = 0; r < sh->tp && !st; r++) {
            const shard_rank *rk = &sh->ranks[r];
            st = cudaSetDevice(rk->device) != cudaSuccess ? fathom_fail(FATHOM_ERR_DEVICE, "shard_step: cudaSetDevice")
                                                          : split_local(sh, rk, &args[r], &ws[r], streams[r]);
            if (!st && cudaEventRecord(rk->ev_cand, streams[r]) != cudaSuccess)
                st = fathom_fail(FATHOM_ERR_DEVICE, "shard_step: cudaEventRecord");
        }
        for (uint32_t r = 0; r < sh->tp && !st; r++) {
            const shard_rank *rk = &sh->ranks[r];
            cudaSetDevice(rk->device);
            st = pull(sh, r, ws, false, streams);
            if (!st) st = split_select_attend(sh, rk, &args[r], &ws[r], streams[r]);
            if (!st && cudaEventRecord(rk->ev_part, streams[r]) != cudaSuccess)
                st = fathom_fail(FATHOM_ERR_DEVICE, "shard_step: cudaEventRecord");
        }
        for (uint32_t r = 0; r < sh->tp && !st; r++) {
            const fathom_cuda_tier_step_args *a = &args[r];
            cudaSetDevice(sh->ranks[r].device);
            st = pull(sh, r, ws, true, streams);
            if (st) break;
            shard_merge_kernel<<<a->batch * sh->ranks[r].heads * sh->shape.group, 128, 0, streams[r]>>>(
                sh->parts, sh->shape.dim, ws[r].partials, ws[r].part_bytes, a->out, a->lse);
            const cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess) st = fathom_fail(FATHOM_ERR_DEVICE, "shard_step: merge launch: %s", cudaGetErrorName(e));
        }
        free(ws);
        return st;
    });
}

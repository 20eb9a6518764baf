/* Internal declarations of the CUDA backend: the workspace layout, the
 * kernels' launchers (one file per phase) and the error macro. */
#ifndef FATHOM_CUDA_INTERNAL_CUH
#define FATHOM_CUDA_INTERNAL_CUH

/* the library implements the experimental switches too */
#define FATHOM_CUDA_EXPERIMENTAL
#include "fathom_cuda.h"

extern "C" {
#include "internal.h"
}

#include <cub/block/block_merge_sort.cuh>
#include <cuda_fp16.h>
#include <stdint.h>

/* Check a CUDA runtime call; on failure return FATHOM_ERR_DEVICE with its name. */
#define FATHOM_CUDA_TRY(call)                                                                      \
    do {                                                                                           \
        cudaError_t fathom_cuda_err_ = (call);                                                     \
        if (fathom_cuda_err_ != cudaSuccess)                                                       \
            return fathom_fail(FATHOM_ERR_DEVICE, "%s: %s (%s:%d)", #call,                         \
                               cudaGetErrorName(fathom_cuda_err_), __FILE__, __LINE__);            \
    } while (0)

/* After a kernel launch: a bad configuration shows up here. */
#define FATHOM_CUDA_LAUNCHED() FATHOM_CUDA_TRY(cudaGetLastError())

#define FC_DIM 128
#define FC_HIST_BITS 11 /* first radix digit: sign + exponent + 2 mantissa bits */
#define FC_HIST_BINS (1u << FC_HIST_BITS)
#define FC_CAND_CAP 4096 /* candidates the final select holds in shared memory */
#define FC_COUNTERS 3    /* per query head: blocks done in histogram level 1, in compact; rows of its KV head done */

/* A score's place in unsigned order (NaN lowest, -0 as +0): the top-k's
 * radix digits, shared with the plane scans that count its first level. */
static __device__ __forceinline__ uint32_t fc_score_order(float s) {
    if (s != s) return 0;
    if (s == 0.0f) s = 0.0f;
    const uint32_t b = __float_as_uint(s);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

/* Plane decoding shared by the plane scans (scan.cu, tier_step.cu); scan.cu's
 * header explains the nibble codes and why khat is exact. */

/* bit i of the low byte of x -> bit 4i */
static __host__ __device__ __forceinline__ uint32_t fc_spread8(uint32_t x) {
    x &= 0xffu;
    x = (x | (x << 12)) & 0x000f000fu;
    x = (x | (x << 6)) & 0x03030303u;
    x = (x | (x << 3)) & 0x11111111u;
    return x;
}

/* One more plane (MSB first) into a lane's codes: bits holds the plane's
 * bits of the lane's tokens from bit 0; nib[k] bits [4m, 4m + 4) hold the
 * code of token 8k + m. spread: fc_spread8 of every byte (shared memory). */
template <int WORDS>
static __device__ __forceinline__ void fc_codes_add_plane(uint32_t (&nib)[WORDS], uint32_t bits,
                                                          const uint32_t *spread) {
    /* a code has at most 3 bits before its last plane, so bit 4m of nib << 1
       is 0 and + is | (one multiply-add instead of a shift and an or) */
#pragma unroll
    for (int k = 0; k < WORDS; k++) nib[k] = (nib[k] << 1) + spread[(bits >> (8 * k)) & 0xffu];
}

/* (a & mask) | bits in one lop3 (the compiler's two immediates take two) */
template <uint32_t MASK>
static __device__ __forceinline__ uint32_t fc_and_or(uint32_t a, uint32_t bits) {
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "n"(MASK), "r"(bits));
    return d;
}

/* What fc_codes_accumulate needs of a depth t in 1..4: 2^-(t-1) and the
 * offsets -(2^11 + 2^(t-1) - 1/2), -(2^7 + 2^(t-1) - 1/2) (exact in float). */
typedef struct fc_depth_consts {
    float unit, off12, off16, pad; /* pad: 16 bytes, one vector load from a table */
} fc_depth_consts;

static __device__ __forceinline__ fc_depth_consts fc_depth_consts_of(uint32_t t) {
    const float half_t = (float)(1u << (t - 1)) - 0.5f;
    const fc_depth_consts c = {__int_as_float((127 + 1 - (int)t) << 23), -(2048.0f + half_t), -(128.0f + half_t),
                               0.0f};
    return c;
}

/* acc[i][h] = fmaf(q(h), khat_i, acc[i][h]) for the lane's TOK tokens of a
 * channel read to depth t >= 1 (dc = fc_depth_consts_of(t)) with fp16 scale `scale`, codes in nib as
 * fc_codes_add_plane leaves them (TOK even). khat in one fma from a float
 * whose mantissa holds the code: (2^(23-r) + c) * a - (2^(23-r) + 2^(t-1) -
 * 1/2) * a, for a code at bits [r, r+4) with r = 12 or 16. Both constants
 * have at most 13 significant bits, so their products with a (11) are exact
 * in float, and so is the fma's result. */
template <int G, int TOK, typename Q>
static __device__ __forceinline__ void fc_codes_accumulate(float (&acc)[TOK][G], Q q, fc_depth_consts dc,
                                                           uint16_t scale, const uint32_t (&nib)[(TOK + 7) / 8]) {
    const float a = __half2float(__ushort_as_half(scale)) * dc.unit;
    const float k12 = dc.off12 * a, k16 = dc.off16 * a;
#pragma unroll
    for (int i = 0; i < TOK; i += 2) {
        /* codes i and i+1 (nibbles 2m and 2m+1 of a word) to bits 12 and 16:
         * one shift per pair, one mask-and-or per code */
        const uint32_t w = nib[i / 8], m = (i % 8) / 2;
        const uint32_t s2 = m == 0 ? w << 12 : m == 1 ? w << 4 : m == 2 ? w >> 4 : w >> 12;
        const float x0 = __int_as_float(fc_and_or<0x0000f000u>(s2, 0x45000000u)); /* 2^11 + c_i */
        const float x1 = __int_as_float(fc_and_or<0x000f0000u>(s2, 0x43000000u)); /* 2^7 + c_i+1 */
        const float khat0 = fmaf(x0, a, k12), khat1 = fmaf(x1, a, k16);
#pragma unroll
        for (int h = 0; h < G; h++) {
            acc[i][h] = fmaf(q(h), khat0, acc[i][h]);
            acc[i + 1][h] = fmaf(q(h), khat1, acc[i + 1][h]);
        }
    }
}

/* fathom_water_fill's depth of channel j = threadIdx.x in a CTA of D
 * threads, from g = its importance (fathom_importance, in double).
 * t_j(theta) counts the breakpoints g_j / 4^(m - 1/2), m = 1..4 (g_j/2,
 * g_j/8, g_j/32, g_j/128: exact in double), at or above theta; the sum over
 * j is the number of breakpoints >= theta, so the smallest admissible theta
 * lies just above the largest breakpoint v whose count #{bp >= v} exceeds
 * the budget (0 when none); ties enter together. Sorted in descending
 * order (CUB's block merge sort of the 4*D breakpoints, four a thread),
 * that v is the breakpoint at index `budget` when it is positive: the count
 * of every breakpoint at or below it exceeds the budget, of every one above
 * it not. (Counting each thread's four against all 4*D breakpoints instead
 * is 16*D dependent shared loads a thread.) Contains barriers: every
 * thread of the CTA calls it. */
struct fc_descending {
    __device__ bool operator()(const double &a, const double &b) const { return a > b; }
};

template <int D>
static __device__ __forceinline__ uint32_t fc_water_fill_depth(double g, uint32_t budget) {
    typedef cub::BlockMergeSort<double, D, FATHOM_PLANES> sort_t;
    __shared__ typename sort_t::TempStorage tmp;
    __shared__ double s_theta;
    const uint32_t j = threadIdx.x;
    double mine[FATHOM_PLANES], keys[FATHOM_PLANES];
    for (int m = 0; m < FATHOM_PLANES; m++) {
        /* g / 4^(m + 1/2) = g / 2^(2m + 1): exact scaling by a power of two */
        mine[m] = g > 0.0 ? g / (double)(2u << (2 * m)) : -1.0;
        keys[m] = mine[m];
    }
    constexpr uint32_t N = D * FATHOM_PLANES;
    if (j == 0) s_theta = 0.0;
    __syncthreads();
    sort_t(tmp).Sort(keys, fc_descending()); /* thread t: ranks 4t .. 4t + 3 */
    if (budget < N && j == budget / FATHOM_PLANES) {
        double v = keys[0];
#pragma unroll
        for (int m = 1; m < FATHOM_PLANES; m++) /* constant indices: keys stays in registers */
            if ((uint32_t)m == budget % FATHOM_PLANES) v = keys[m];
        if (v > 0.0) s_theta = v;
    }
    __syncthreads();
    const double theta = s_theta;
    __syncthreads(); /* s_theta is read by every thread before a later call writes it */
    uint32_t t = 0;
    for (int m = 0; m < FATHOM_PLANES; m++) t += mine[m] > theta;
    return t;
}

/* Deterministic CTA reduction (max or sum) of one double per thread, in a
 * fixed order (warp butterflies, then warps 0, 1, ...); part holds
 * blockDim.x / 32 doubles of shared memory. Every thread gets the result. */
static __device__ __forceinline__ double fc_block_reduce(double x, bool is_max, double *part) {
    for (int off = 16; off > 0; off >>= 1) {
        const double y = __shfl_xor_sync(0xffffffffu, x, off);
        x = is_max ? fmax(x, y) : x + y;
    }
    __syncthreads(); /* part may still be read from the last call */
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = x;
    __syncthreads();
    double acc = part[0];
    for (uint32_t w = 1; w < blockDim.x / 32; w++) acc = is_max ? fmax(acc, part[w]) : acc + part[w];
    return acc;
}

/* q . k in double of a query (shared memory) and one fp32 K row of D
 * channels: two chains, channels 4c, 4c+1 and 4c+2, 4c+3 of each 16-byte
 * piece, summed last. The step's attention and the tier's logits share it,
 * so their logits have the same bits. */
template <int D>
static __device__ __forceinline__ double fc_qk_dot(const float *q, const float4 *row) {
    double d0 = 0.0, d1 = 0.0;
#pragma unroll 16
    for (int c = 0; c < D / 4; c++) {
        const float4 kv = row[c];
        d0 += (double)q[4 * c] * kv.x + (double)q[4 * c + 1] * kv.y;
        d1 += (double)q[4 * c + 2] * kv.z + (double)q[4 * c + 3] * kv.w;
    }
    return d0 + d1;
}

/* bf16 x 8 (one 16-byte load) to float, exactly. */
static __device__ __forceinline__ void fc_bf16x8_to_float(uint4 v, float *dst) {
    *(float4 *)dst = make_float4(__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xffff0000u),
                                 __uint_as_float(v.y << 16), __uint_as_float(v.y & 0xffff0000u));
    *(float4 *)(dst + 4) = make_float4(__uint_as_float(v.z << 16), __uint_as_float(v.z & 0xffff0000u),
                                       __uint_as_float(v.w << 16), __uint_as_float(v.w & 0xffff0000u));
}

/* Per query-head state of the radix select. */
typedef struct fc_select_state {
    uint32_t digit;   /* the key's top `bits` bits holding the boundary */
    uint32_t need;    /* winners still to take from that digit's bin */
    uint32_t nsel;    /* middle winners written so far */
    uint32_t ncand;   /* elements in the boundary bin */
    uint32_t bits;    /* FC_HIST_BITS (level 0's bin fits the candidate buffer) or 2 FC_HIST_BITS */
} fc_select_state;

/* Carved out of the caller's workspace; sizes follow from the config only. */
typedef struct fc_workspace {
    uint8_t *depths;       /* [P][dim] */
    uint64_t *stage;       /* staging: plane words / landmarks / bf16 keys, [P][stage_words] */
    uint16_t *stage_scales;/* [P][dim][nb] */
    uint64_t stage_words;  /* per problem, in uint64 */
    float *scores;         /* [P][G][n] */
    uint32_t *hist;        /* [P*G][2][FC_HIST_BINS]: the select's two histogram levels */
    uint32_t *counters;    /* [P*G][FC_COUNTERS] blocks finished: histogram level 1, compact; rows finished */
    size_t zero_bytes;     /* hist .. cand_fill, zeroed at the start of a step */
    fc_select_state *state;/* [P*G] */
    uint32_t *mid;         /* [P*G][k] middle winners, unsorted */
    uint64_t *cand;        /* [P*G][FC_CAND_CAP] */
    uint32_t *cand_fill;   /* [P*G] candidates written */
    uint32_t *sel;         /* [P*G][k] sorted */
    uint32_t *sel_count;   /* [P*G] */
    uint16_t *slot;        /* [P*G][k] position of each winner in the union */
    uint32_t *uni;         /* [P][G*k] union of the group's winners */
    uint32_t *uni_count;   /* [P] */
    float *rows_k;         /* [P][G*k][dim] */
    uint16_t *rows_v;      /* [P][G*k][dim] bf16 */
    size_t total;
} fc_workspace;

/* Offset the top-k's arrays of w (hist .. uni_count, all laid out problem
 * by problem) to those of problem p: a chunk's top-k over problems
 * [p, p + count) then runs on the view unchanged. */
static inline void fc_topk_view(fc_workspace *w, uint64_t p, uint64_t G, uint64_t k) {
    const uint64_t rows = p * G;
    w->hist += rows * 2 * FC_HIST_BINS;
    w->counters += rows * FC_COUNTERS;
    w->state += rows;
    w->mid += rows * k;
    w->cand += rows * FC_CAND_CAP;
    w->cand_fill += rows;
    w->slot += rows * k;
    w->uni += p * G * k;
    w->uni_count += p;
}

/* Lay the workspace out at base (NULL: sizes only, total in ws->total). */
int fc_workspace_layout(const fathom_cuda_config *cfg, void *base, fc_workspace *ws);

/* Scans that read bit planes or nibbles through a depth vector. */
static inline bool fc_uses_depths(fathom_cuda_scan_kind s) {
    return s <= FATHOM_CUDA_SCAN_FIXED || s == FATHOM_CUDA_SCAN_NIBBLE4;
}

/* Plane scans count the top-k's first histogram level as they write the
 * final scores (one pass over the scores less); the other scans leave it
 * to the top-k. */
static inline bool fc_scan_counts_level0(fathom_cuda_scan_kind s) { return fc_uses_depths(s); }

/* Transports that copy the index into HBM staging before the scan. */
static inline bool fc_staged(fathom_cuda_transport t) {
    return t == FATHOM_CUDA_GATHER_KERNEL;
}

static inline uint32_t fc_blocks_of(uint64_t n) { return (uint32_t)((n + 63) / 64); }

/* Lengths of a top-k's rows: n for every row, or, with n_of, n_of[row /
 * group] read from device memory (ragged batches); a row's scores start
 * stride floats after the previous row's. */
typedef struct fc_rows {
    uint64_t n;
    const uint32_t *n_of;
    uint32_t group;
    uint64_t stride;
} fc_rows;

static __device__ __forceinline__ uint64_t fc_row_len(const fc_rows &r, uint32_t row) {
    return r.n_of ? r.n_of[row / r.group] : r.n;
}

/* A lanes object (step.cu creates it; the KV tier's step uses one too). */
struct fathom_cuda_lanes {
    uint32_t count;
    cudaStream_t link;                         /* link-bound phases, chunk after chunk; high priority */
    cudaStream_t stream[FATHOM_CUDA_MAX_LANES]; /* the rest of each chunk */
    cudaEvent_t fork;                          /* the plan is done */
    cudaEvent_t moved[FATHOM_CUDA_MAX_CHUNKS]; /* chunk i's link-bound phase is done */
    cudaEvent_t scanned[FATHOM_CUDA_MAX_CHUNKS]; /* chunk i's staging is read (a prefetch may refill it) */
    cudaEvent_t link_done;
    cudaEvent_t done[FATHOM_CUDA_MAX_LANES];   /* a lane's last chunk is done */
    uint32_t per_chunk;                        /* problems per chunk; 0: by context */
    uint64_t *trace;                           /* device timestamps, or NULL */
    uint32_t trace_cap, trace_next;            /* in steps of FATHOM_CUDA_TRACE_SLOTS */
};

/* Problems per pipeline chunk: per_chunk (0: by context, see
 * fathom_cuda_lanes_set_chunk), at least ceil(P / FATHOM_CUDA_MAX_CHUNKS),
 * at most P. */
uint32_t fc_chunk_size(uint32_t per_chunk, uint32_t P, uint64_t tokens);

/* Launchers (stream last). */
int fc_plan(const fathom_cuda_config *cfg, const float *queries, const float *variance,
            const uint8_t *fixed_depths, uint8_t *depths, cudaStream_t stream);
/* staged: [staged_count][dim] depths already in staging for the first
 * staged_count problems (a previous step's prefetch), or NULL. behind: the
 * previous work on the stream is another plane gather, whose last bytes
 * this one may overlap (programmatic dependent launch). chunk_follows: the
 * next gather on the stream is another chunk's (it may start earlier than
 * a prefetch may). */
int fc_gather(const fathom_cuda_config *cfg, const fathom_cuda_problem *problems,
              const fc_workspace *ws, const uint8_t *staged, uint32_t staged_count,
              bool behind, bool chunk_follows, cudaStream_t stream);
int fc_scan(const fathom_cuda_config *cfg, const fathom_cuda_problem *problems,
            const fc_workspace *ws, const float *queries, float *scores, cudaStream_t stream);
int fc_topk(const fathom_cuda_config *cfg, const fc_workspace *ws, const float *scores,
            uint32_t *sel, uint32_t *sel_count, cudaStream_t stream);
/* The top-k for `problems` KV heads of `group` rows each with lengths from
 * rows_n (each <= max_n, which sizes the grid); level0_counted: the scan
 * already counted the first histogram level. */
int fc_topk_rows(uint32_t problems, uint32_t group, uint32_t k, uint32_t sink, uint32_t local,
                 fc_rows rows_n, uint64_t max_n, bool level0_counted, const fc_workspace *ws,
                 const float *scores, uint32_t *sel, uint32_t *sel_count, cudaStream_t stream);
/* The top-k's last phase alone: each head's winners from ws->mid (its
 * k - sink - local middle winners, any order) plus sink and local, sorted
 * into sel, and the group's union and slots, as fc_topk_rows leaves them.
 * For selections made elsewhere (the tier's host-given pairs). */
int fc_topk_union(uint32_t problems, uint32_t group, uint32_t k, uint32_t sink, uint32_t local,
                  fc_rows rows_n, const fc_workspace *ws, uint32_t *sel, uint32_t *sel_count,
                  cudaStream_t stream);
int fc_fetch(const fathom_cuda_config *cfg, const fathom_cuda_problem *problems,
             const fc_workspace *ws, cudaStream_t stream);
int fc_attend(const fathom_cuda_config *cfg, const fc_workspace *ws, const float *queries,
              const uint32_t *sel_count, float *out, cudaStream_t stream);

#endif

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
#define FC_COUNTERS 2    /* per query head: blocks done in histogram level 1 and in compact */

/* A score's place in unsigned order (NaN lowest, -0 as +0): the top-k's
 * radix digits, shared with the plane scans that count its first level. */
static __device__ __forceinline__ uint32_t fc_score_order(float s) {
    if (s != s) return 0;
    if (s == 0.0f) s = 0.0f;
    const uint32_t b = __float_as_uint(s);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

/* Per query-head state of the radix select. */
typedef struct fc_select_state {
    uint32_t digit;   /* first digit (top 11 bits of the key) holding the boundary */
    uint32_t need;    /* winners still to take from that digit's bin */
    uint32_t nsel;    /* middle winners written so far */
    uint32_t ncand;   /* elements in the boundary bin */
} fc_select_state;

/* Carved out of the caller's workspace; sizes follow from the config only. */
typedef struct fc_workspace {
    uint8_t *depths;       /* [P][dim] */
    uint64_t *stage;       /* staging: plane words / landmarks / bf16 keys, [P][stage_words] */
    uint16_t *stage_scales;/* [P][dim][nb] */
    uint64_t stage_words;  /* per problem, in uint64 */
    float *scores;         /* [P][G][n] */
    uint32_t *hist;        /* [P*G][2][FC_HIST_BINS]: the select's two histogram levels */
    uint32_t *counters;    /* [P*G][FC_COUNTERS] blocks finished: histogram level 1, compact */
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
int fc_fetch(const fathom_cuda_config *cfg, const fathom_cuda_problem *problems,
             const fc_workspace *ws, cudaStream_t stream);
int fc_attend(const fathom_cuda_config *cfg, const fc_workspace *ws, const float *queries,
              const uint32_t *sel_count, float *out, cudaStream_t stream);

#endif

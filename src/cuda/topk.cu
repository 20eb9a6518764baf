/* top-k — sink + local + the highest-scoring rest, per query head (§2),
 * with fathom_select's order: higher score first, ties to the lower index,
 * NaN lowest. Every (score, index) pair maps to a unique 64-bit key
 *   K = order(score) << 32 | (2^32 - 1 - index)
 * (order() flips floats into unsigned order, -0 counts as +0, NaN as 0), so
 * the m = k - sink - local winners are exactly the m largest K.
 *
 * Radix select in two launches after the scan, none needing the host:
 *   level 0      the histogram of the keys' first 11 bits; the plane scans
 *                count it as they write the scores (a launch of its own,
 *                hist0, for the landmark and oracle scans);
 *   hist1+find   every block finds the level-0 digit holding the m-th
 *                largest key; where that digit's bin holds at most
 *                FC_CAND_CAP keys (in rows of spread scores up to some
 *                10^5 tokens) the 11-bit digit is the prefix and the
 *                launch ends there; otherwise every block counts
 *                the next 11 bits inside it, and the row's last block finds
 *                the 22-bit prefix;
 *   compact+final winners above the prefix go straight to the output list,
 *                keys with the prefix to a candidate buffer; the row's last
 *                block selects the rest from the candidates (in shared
 *                memory; if they overflow the buffer, only with massive
 *                exact ties, the same select over the scores row: slow,
 *                exact), sorts the row's winners into its selection, and
 *                the last row of each KV head to finish builds the union
 *                the row fetch moves (rows of at most 163840 tokens: the
 *                rank of a position among the set bits of a bitmap of
 *                positions; longer rows: CUB's block radix sort and a
 *                merge by rank).
 * The scores are read once or twice after the scan, by many blocks each (a
 * single 11-bit level leaves 5-20k candidates at 1M tokens: too many for
 * shared memory).
 * A histogram that cannot hold the m-th key (a workspace shared by two steps
 * in flight, corrupted memory) makes find_bin trap: see there.
 * Selections made elsewhere (fc_topk_union) are sorted by select_sort_kernel
 * (each winner's place counted, on many blocks a row) and united by
 * union_kernel, one block per KV head. */
#include "cuda_internal.cuh"

#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_scan.cuh>

#define TOPK_THREADS 512
#define TOPK_CHUNK 16384u
#define NO_DIGIT 0xffffffffu
#define PAD_INDEX 0xffffffffu

static __device__ __forceinline__ uint64_t select_key(float s, uint64_t i) {
    return ((uint64_t)fc_score_order(s) << 32) | (uint64_t)(0xffffffffu - (uint32_t)i);
}

static __device__ __forceinline__ uint32_t key_index(uint64_t key) {
    return 0xffffffffu - (uint32_t)key;
}

/* f(i, row[i]) for i in [lo, hi), the block's threads striding over it,
 * with 16-byte loads where the row allows, RANGE_LOADS of them in flight
 * per thread before f sees any (f's atomics would otherwise wait out each
 * load's latency in turn). */
#define RANGE_LOADS 8
template <typename F>
static __device__ __forceinline__ void for_range(const float *row, uint64_t lo, uint64_t hi, F f) {
    uint64_t a = (lo + 3) & ~(uint64_t)3;
    if (a > hi || ((uintptr_t)row & 15) != 0) a = hi;
    for (uint64_t i = lo + threadIdx.x; i < a; i += blockDim.x) f(i, row[i]);
    const uint64_t nv = (hi - a) / 4;
    const float4 *v = (const float4 *)(row + a);
    for (uint64_t k0 = threadIdx.x; k0 < nv; k0 += (uint64_t)RANGE_LOADS * blockDim.x) {
        float4 x[RANGE_LOADS];
#pragma unroll
        for (int u = 0; u < RANGE_LOADS; u++) {
            const uint64_t k = k0 + (uint64_t)u * blockDim.x;
            if (k < nv) x[u] = v[k];
        }
#pragma unroll
        for (int u = 0; u < RANGE_LOADS; u++) {
            const uint64_t k = k0 + (uint64_t)u * blockDim.x;
            if (k >= nv) break;
            const uint64_t i = a + 4 * k;
            f(i, x[u].x);
            f(i + 1, x[u].y);
            f(i + 2, x[u].z);
            f(i + 3, x[u].w);
        }
    }
    for (uint64_t i = a + 4 * nv + threadIdx.x; i < hi; i += blockDim.x) f(i, row[i]);
}

/* True in the last of a row's blocks to get here: each block adds one to
 * the row's counter after a fence, so the block that brings it to `blocks`
 * sees every other block's writes (the pattern of CUDA's threadFenceReduction
 * sample). Every thread of every block must call it. */
static __device__ bool last_block_of_row(uint32_t *counter, uint32_t blocks) {
    __shared__ bool s_last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) s_last = atomicAdd(counter, 1u) == blocks - 1;
    __syncthreads();
    if (s_last) __threadfence();
    return s_last;
}

/* The bin (of ghist's FC_HIST_BINS, highest first) that holds the need-th
 * largest key, how many it still owes there and how many keys it holds.
 * Run by every thread of a block of TOPK_THREADS; need >= 1 and at most the
 * histogram's total, so exactly one bin qualifies; otherwise it traps. */
typedef struct found_bin {
    uint32_t bin, need, count;
} found_bin;

static __device__ found_bin find_bin(const uint32_t *ghist, uint32_t need) {
    typedef cub::BlockScan<uint32_t, TOPK_THREADS> scan_t;
    __shared__ typename scan_t::TempStorage tmp;
    __shared__ found_bin s_found;
    const int PER = FC_HIST_BINS / TOPK_THREADS;
    const uint32_t t = threadIdx.x;
    /* bins in descending order: thread t holds bins 2047 - PER*t - i */
    uint32_t c[PER], above[PER];
    if (t == 0) s_found.bin = NO_DIGIT;
    for (int i = 0; i < PER; i++) c[i] = __ldcg(&ghist[FC_HIST_BINS - 1 - PER * t - i]);
    __syncthreads(); /* the sentinel before any thread's find */
    scan_t(tmp).ExclusiveSum(c, above);
    for (int i = 0; i < PER; i++)
        if (above[i] < need && above[i] + c[i] >= need) {
            found_bin f = {FC_HIST_BINS - 1 - PER * t - i, need - above[i], c[i]};
            s_found = f;
        }
    __syncthreads();
    const found_bin f = s_found;
    /* No bin holds the need-th key: need is 0 or the histogram counts fewer
     * keys than the config promises. The host checks rule out both for a
     * valid config (need = 0, k = sink + local, is handled before any
     * find_bin), so this means the histogram was written under the step:
     * a workspace used by two steps in flight, or memory corrupted. The
     * block traps rather than select from an unset bin: the launch fails,
     * the stream's next synchronisation returns a CUDA error (the context is
     * lost), and a caller's bug is loud, never a silently wrong selection
     * (fathom_cuda.h states this in its contract). */
    if (f.bin == NO_DIGIT) __trap();
    __syncthreads(); /* s_found and tmp are free again */
    return f;
}

/* Level 0 for the scans that do not count it (landmarks, oracle): the
 * histogram of the first 11 bits of every middle key. */
static __global__ void __launch_bounds__(TOPK_THREADS)
hist0_kernel(fc_rows rows, uint32_t k, uint32_t sink, uint32_t local, const float *scores,
             uint32_t *hist) {
    __shared__ uint32_t h[FC_HIST_BINS];
    const uint32_t r = blockIdx.y;
    const uint64_t n = fc_row_len(rows, r);
    const uint64_t lo = sink + (uint64_t)blockIdx.x * TOPK_CHUNK;
    const uint64_t end = n - local, hi = lo + TOPK_CHUNK < end ? lo + TOPK_CHUNK : end;
    if (n <= k || lo >= hi) return; /* uniform in the block */
    for (uint32_t b = threadIdx.x; b < FC_HIST_BINS; b += blockDim.x) h[b] = 0;
    __syncthreads();
    for_range(scores + (size_t)r * rows.stride, lo, hi,
              [&](uint64_t, float s) { atomicAdd(&h[fc_score_order(s) >> (32 - FC_HIST_BITS)], 1u); });
    __syncthreads();
    uint32_t *ghist = hist + (size_t)r * 2 * FC_HIST_BINS;
    for (uint32_t b = threadIdx.x; b < FC_HIST_BINS; b += blockDim.x)
        if (h[b]) atomicAdd(&ghist[b], h[b]);
}

/* Level 1: every block finds the level-0 digit from the complete level-0
 * histogram (2048 counters from L2: cheaper than a launch of its own). If
 * its bin fits the candidate buffer, that digit is the prefix (block 0
 * writes the state; the same for every block of the row); otherwise every
 * block counts the next 11 bits of the keys inside that digit, and the
 * row's last block finds the 22-bit prefix holding the m-th largest key. */
static __global__ void __launch_bounds__(TOPK_THREADS)
hist1_find_kernel(fc_rows rows, uint32_t k, uint32_t sink, uint32_t local, const float *scores,
                  fc_select_state *state, uint32_t *hist, uint32_t *counters) {
    __shared__ uint32_t h[FC_HIST_BINS];
    const uint32_t r = blockIdx.y;
    const uint64_t n = fc_row_len(rows, r);
    /* uniform in the launch: everything is selected, or nothing in the
     * middle is (k = sink + local; find_bin needs need >= 1) */
    if (n <= k || k == sink + local) {
        if (blockIdx.x == 0 && threadIdx.x == 0) {
            const fc_select_state none = {NO_DIGIT, 0, 0, 0, 0};
            state[r] = none;
        }
        return;
    }
    uint32_t *ghist0 = hist + (size_t)r * 2 * FC_HIST_BINS, *ghist1 = ghist0 + FC_HIST_BINS;
    const found_bin f0 = find_bin(ghist0, k - sink - local);
    if (f0.count <= FC_CAND_CAP) { /* uniform in the row's blocks */
        if (blockIdx.x == 0 && threadIdx.x == 0) {
            const fc_select_state s = {f0.bin, f0.need, 0, f0.count, FC_HIST_BITS};
            state[r] = s;
        }
        return;
    }
    const uint64_t lo = sink + (uint64_t)blockIdx.x * TOPK_CHUNK;
    const uint64_t end = n - local, hi = lo + TOPK_CHUNK < end ? lo + TOPK_CHUNK : end;
    if (lo < hi) { /* uniform in the block */
        for (uint32_t b = threadIdx.x; b < FC_HIST_BINS; b += blockDim.x) h[b] = 0;
        __syncthreads();
        for_range(scores + (size_t)r * rows.stride, lo, hi, [&](uint64_t, float s) {
            const uint32_t key = fc_score_order(s);
            if ((key >> (32 - FC_HIST_BITS)) == f0.bin)
                atomicAdd(&h[(key >> (32 - 2 * FC_HIST_BITS)) & (FC_HIST_BINS - 1)], 1u);
        });
        __syncthreads();
        for (uint32_t b = threadIdx.x; b < FC_HIST_BINS; b += blockDim.x)
            if (h[b]) atomicAdd(&ghist1[b], h[b]);
    }
    if (!last_block_of_row(&counters[(size_t)r * FC_COUNTERS + 0], gridDim.x)) return;
    const found_bin f1 = find_bin(ghist1, f0.need);
    if (threadIdx.x == 0) {
        const fc_select_state s = {(f0.bin << FC_HIST_BITS) | f1.bin, f1.need, 0, f1.count, 2 * FC_HIST_BITS};
        state[r] = s;
    }
}

/* Select `need` largest keys among those whose top `bits` bits equal digit;
 * the source is either the candidate list in shared memory or the whole row.
 * Every thread of a block of TOPK_THREADS calls it. */
struct cand_source {
    const uint64_t *keys;
    uint32_t count;
    __device__ uint64_t size() const { return count; }
    __device__ bool get(uint64_t i, uint64_t *key) const { *key = keys[i]; return true; }
};
struct row_source {
    const float *row;
    uint64_t first, end;
    uint32_t digit, bits;
    __device__ uint64_t size() const { return end - first; }
    __device__ bool get(uint64_t i, uint64_t *key) const {
        *key = select_key(row[first + i], first + i);
        return (uint32_t)(*key >> (64 - bits)) == digit;
    }
};

template <typename Source>
static __device__ void select_tail(const Source &src, uint32_t digit, uint32_t bits, uint32_t need, uint32_t *out,
                                   uint32_t *out_fill, uint32_t *bins, uint32_t *choice) {
    typedef cub::BlockScan<uint32_t, TOPK_THREADS, cub::BLOCK_SCAN_WARP_SCANS> scan_t;
    __shared__ typename scan_t::TempStorage tmp;
    uint64_t prefix = (uint64_t)digit << (64 - bits);
    uint64_t mask = ((1ull << bits) - 1) << (64 - bits);
    int shift = 64 - (int)bits;
    const uint64_t size = src.size();
    while (need > 0 && shift > 0) {
        const int width = shift < 8 ? shift : 8;
        shift -= width;
        const uint32_t nbins = 1u << width;
        for (uint32_t b = threadIdx.x; b < 256; b += blockDim.x) bins[b] = 0;
        __syncthreads();
        for (uint64_t i = threadIdx.x; i < size; i += blockDim.x) {
            uint64_t key;
            if (src.get(i, &key) && (key & mask) == prefix)
                atomicAdd(&bins[(uint32_t)(key >> shift) & (nbins - 1)], 1u);
        }
        __syncthreads();
        /* the highest bin d whose keys with those of the bins above reach
         * need (0 if none does), the keys above it, and whether all of d is
         * taken: thread t holds bin 255 - t (bins from nbins on are 0), an
         * exclusive scan counts the keys above it, and the one thread whose
         * bin crosses need writes the choice (or bin 0 if none crosses) */
        const uint32_t b = 255 - threadIdx.x;
        const uint32_t c = threadIdx.x < 256 ? bins[b] : 0;
        uint32_t higher;
        scan_t(tmp).ExclusiveSum(c, higher);
        if (threadIdx.x < 256 && higher < need && (higher + c >= need || b == 0)) {
            choice[0] = b;
            choice[1] = higher;
            choice[2] = need - higher == c; /* the whole bin is taken: done */
        }
        __syncthreads();
        const uint32_t d = choice[0], above = choice[1], take_all = choice[2];
        for (uint64_t i = threadIdx.x; i < size; i += blockDim.x) {
            uint64_t key;
            if (!src.get(i, &key) || (key & mask) != prefix) continue;
            const uint32_t kd = (uint32_t)(key >> shift) & (nbins - 1);
            if (kd > d || (take_all && kd == d)) out[atomicAdd(out_fill, 1u)] = key_index(key);
        }
        need = take_all ? 0 : need - above;
        prefix |= (uint64_t)d << shift;
        mask |= (uint64_t)(nbins - 1) << shift;
        __syncthreads();
    }
}

#define SORT_THREADS 64
#define UNION_CAP 4096

/* Each head's selection, sorted, into sel, and its count into sel_count:
 * one CTA per (row, SORT_THREADS positions). Positions below sink are the
 * sink tokens, the local ones the last `local` tokens, and n <= k selects
 * every token; the middle winner mid[g] (any order) goes to position
 * sink + rank, its rank the number of (mid[j], j) below (mid[g], g):
 * mid[j] < mid[g], or equal with j < g. Every g gets a distinct rank, and
 * the list written is the m values in ascending order (for any m values,
 * repeated ones too: what a sort of them leaves). In a warp, every g lies
 * in [gw, gw + 32), so j < gw counts mid[j] <= mid[g] and j >= gw + 32
 * counts mid[j] < mid[g]; only the warp's own 32 entries compare j. A
 * thread reads the row's m entries (shared memory, the same address for
 * the warp's lanes: broadcasts), 4 at a time, into 4 counters. */
static __global__ void __launch_bounds__(SORT_THREADS)
select_sort_kernel(fc_rows rows, uint32_t k, uint32_t sink, uint32_t local, const uint32_t *mid,
                   uint32_t *sel, uint32_t *sel_count) {
    __shared__ __align__(16) uint32_t s_mid[FATHOM_CUDA_MAX_K];
    const uint32_t r = blockIdx.x, c0 = blockIdx.y * SORT_THREADS, g = c0 + threadIdx.x;
    const uint64_t n = fc_row_len(rows, r);
    uint32_t *out = sel + (size_t)r * k;
    if (n <= k) { /* uniform in the launch's row */
        if (g < n) out[g] = g;
        if (g == 0) sel_count[r] = (uint32_t)n;
        return;
    }
    const uint32_t m = k - sink - local;
    if (g == 0) sel_count[r] = k;
    if (g < sink) out[g] = g;
    if (g < local) out[sink + m + g] = (uint32_t)(n - local + g);
    if (c0 >= m) return; /* uniform in the block */
    const uint32_t m4 = (m + 3) & ~3u; /* padded with PAD_INDEX, which no thread counts */
    for (uint32_t i = threadIdx.x; i < m4; i += SORT_THREADS)
        s_mid[i] = i < m ? mid[(size_t)r * k + i] : PAD_INDEX;
    __syncthreads();
    if (g >= m) return;
    const uint32_t x = s_mid[g];
    const uint32_t gw = g & ~31u, ge = gw + 32 < m4 ? gw + 32 : m4;
    const uint4 *v = (const uint4 *)s_mid;
    uint32_t c[4] = {0, 0, 0, 0};
#pragma unroll 4
    for (uint32_t q = 0; q < gw / 4; q++) { /* j < gw <= g */
        const uint4 y = v[q];
        c[0] += y.x <= x;
        c[1] += y.y <= x;
        c[2] += y.z <= x;
        c[3] += y.w <= x;
    }
    for (uint32_t j = gw; j < ge; j++) {
        const uint32_t y = s_mid[j];
        c[0] += y < x || (y == x && j < g);
    }
#pragma unroll 4
    for (uint32_t q = ge / 4; q < m4 / 4; q++) { /* j >= gw + 32 > g */
        const uint4 y = v[q];
        c[0] += y.x < x;
        c[1] += y.y < x;
        c[2] += y.z < x;
        c[3] += y.w < x;
    }
    out[sink + c[0] + c[1] + c[2] + c[3]] = x;
}

/* A block (THREADS threads) per KV head p: the group's sorted union of the
 * G selections in sel (each strictly ascending), and each
 * winner's slot in it. The union comes from a merge by rank: an element's
 * place among all G lists is its index in its own list plus, for every
 * other list, the count of elements below it (at or below it for the lists
 * before its own, so equal positions keep head order). A scan of the first
 * of every run of equal values compacts the merged list, and gives every
 * place the index of its run: the slot of the element merged there, the
 * count of distinct positions below it. Thread t of THREADS holds the
 * elements t + THREADS q and their places, the scan places PER t ..
 * PER t + PER - 1. all and merged hold UNION_CAP entries each. */
template <int THREADS>
static __device__ void group_union(fc_rows rows, uint32_t p, uint32_t group, uint32_t k, const uint32_t *sel,
                                   uint32_t *all, uint32_t *merged, uint32_t *uni, uint32_t *uni_count,
                                   uint16_t *slot) {
    typedef cub::BlockScan<uint32_t, THREADS> scan_t;
    constexpr int PER = UNION_CAP / THREADS;
    __shared__ typename scan_t::TempStorage tmp;
    __shared__ uint32_t s_ucount;
    const uint64_t n = fc_row_len(rows, p * group);
    const uint32_t count = n <= k ? (uint32_t)n : k, total = group * count;
    const size_t r0 = (size_t)p * group;
    for (uint32_t i = threadIdx.x; i < total; i += THREADS) {
        const uint32_t h = i / count, j = i % count;
        all[h * k + j] = __ldcg(&sel[(r0 + h) * k + j]);
    }
    __syncthreads();
    uint32_t place[PER];
#pragma unroll
    for (int q = 0; q < PER; q++) {
        const uint32_t i = q * THREADS + threadIdx.x;
        if (i >= total) continue;
        const uint32_t h = i / count, j = i % count;
        const uint32_t x = all[h * k + j];
        uint32_t rank = j;
        for (uint32_t o = 0; o < group; o++) {
            if (o == h) continue;
            const uint32_t *lst = all + o * k;
            uint32_t lo = 0, hi = count;
            while (lo < hi) { /* first element > x (o < h) or >= x (o > h) */
                const uint32_t md = (lo + hi) / 2;
                if (o < h ? lst[md] <= x : lst[md] < x) lo = md + 1;
                else hi = md;
            }
            rank += lo;
        }
        merged[rank] = x;
        place[q] = rank;
    }
    __syncthreads(); /* all is read no more: it takes the run indices */
    uint32_t flag[PER], pos[PER], val[PER];
#pragma unroll
    for (int q = 0; q < PER; q++) {
        const uint32_t i = threadIdx.x * PER + q;
        flag[q] = i < total && (i == 0 || merged[i] != merged[i - 1]);
        val[q] = i < total ? merged[i] : PAD_INDEX;
    }
    uint32_t agg;
    scan_t(tmp).ExclusiveSum(flag, pos, agg);
    __syncthreads();
#pragma unroll
    for (int q = 0; q < PER; q++) {
        const uint32_t i = threadIdx.x * PER + q;
        if (flag[q]) merged[pos[q]] = val[q];
        if (i < total) all[i] = pos[q] + flag[q] - 1; /* place 0 is flagged */
    }
    if (threadIdx.x == 0) s_ucount = agg;
    __syncthreads();
    const uint32_t ucount = s_ucount;
    for (uint32_t i = threadIdx.x; i < ucount; i += THREADS) uni[(size_t)p * group * k + i] = merged[i];
    if (threadIdx.x == 0) uni_count[p] = ucount;
#pragma unroll
    for (int q = 0; q < PER; q++) {
        const uint32_t i = q * THREADS + threadIdx.x;
        if (i < total) slot[(r0 + i / count) * k + i % count] = (uint16_t)all[place[q]];
    }
}

/* group_union for fc_topk_union's selections, one block per KV head. */
static __global__ void __launch_bounds__(1024)
union_kernel(fc_rows rows, uint32_t group, uint32_t k, const uint32_t *sel, uint32_t *uni, uint32_t *uni_count,
             uint16_t *slot) {
    __shared__ uint32_t all[UNION_CAP], merged[UNION_CAP];
    group_union<1024>(rows, blockIdx.x, group, k, sel, all, merged, uni, uni_count, slot);
}

#define SORT_ITEMS (FATHOM_CUDA_MAX_K / TOPK_THREADS)
typedef cub::BlockRadixSort<uint32_t, TOPK_THREADS, SORT_ITEMS> sort_t;

/* Rows of at most BITMAP_TOKENS tokens sort and unite through a bitmap of
 * positions (shared memory): a position's rank among the distinct ones is
 * the count of bits below it. */
#define BITMAP_WORDS 5120u
#define BITMAP_TOKENS ((uint64_t)BITMAP_WORDS * 32)
static_assert(FATHOM_CUDA_MAX_K % TOPK_THREADS == 0 && UNION_CAP % TOPK_THREADS == 0,
              "a row's winners and a group's union spread evenly over a block's threads");

#define BLOCK_CANDS 2048u

/* The shared memory compact_final_kernel's phases use in turn. */
typedef union final_smem {
    uint64_t cand[FC_CAND_CAP]; /* the candidates of the final select */
    sort_t::TempStorage sort;   /* the sort of the row's winners */
    struct {
        uint32_t all[UNION_CAP], merged[UNION_CAP];
    } u; /* group_union's lists */
    struct {
        uint32_t bits[BITMAP_WORDS];
        uint16_t below[BITMAP_WORDS]; /* set bits in the words before */
    } bm;
    struct {
        uint64_t cand[BLOCK_CANDS];      /* this block's candidates (more go to the row's list one by one) */
        uint32_t mid[FATHOM_CUDA_MAX_K]; /* this block's winners above the prefix (a row has at most m) */
    } blk;                               /* the compaction's lists, before the block claims places in the row's */
} final_smem;

/* For the positions x[q] < nbits (PAD_INDEX: none) a block of TOPK_THREADS
 * holds, rank[q] = the number of distinct positions of the block's below
 * x[q]; returns the number of distinct positions. nbits <= BITMAP_TOKENS. */
template <int PER>
static __device__ uint32_t rank_by_bitmap(const uint32_t (&x)[PER], uint32_t (&rank)[PER], uint64_t nbits,
                                          uint32_t *bits, uint16_t *below) {
    typedef cub::BlockScan<uint32_t, TOPK_THREADS> scan_t;
    __shared__ typename scan_t::TempStorage tmp;
    const uint32_t words = (uint32_t)((nbits + 31) / 32);
    for (uint32_t w = threadIdx.x; w < words; w += TOPK_THREADS) bits[w] = 0;
    __syncthreads();
#pragma unroll
    for (int q = 0; q < PER; q++)
        if (x[q] != PAD_INDEX) atomicOr(&bits[x[q] >> 5], 1u << (x[q] & 31));
    __syncthreads();
    const uint32_t per = (words + TOPK_THREADS - 1) / TOPK_THREADS, w0 = threadIdx.x * per;
    const uint32_t w1 = w0 + per < words ? w0 + per : words;
    uint32_t c = 0;
    for (uint32_t w = w0; w < w1; w++) c += __popc(bits[w]);
    uint32_t base, total;
    scan_t(tmp).ExclusiveSum(c, base, total);
    for (uint32_t w = w0; w < w1; w++) {
        below[w] = (uint16_t)base;
        base += __popc(bits[w]);
    }
    __syncthreads();
#pragma unroll
    for (int q = 0; q < PER; q++)
        if (x[q] != PAD_INDEX)
            rank[q] = below[x[q] >> 5] + __popc(bits[x[q] >> 5] & ((1u << (x[q] & 31)) - 1));
    return total;
}

/* group_union for rows of at most BITMAP_TOKENS tokens: the slot of a
 * winner is its position's rank among the group's. */
static __device__ void group_union_bitmap(fc_rows rows, uint32_t p, uint32_t group, uint32_t k, const uint32_t *sel,
                                          uint32_t *bits, uint16_t *below, uint32_t *uni, uint32_t *uni_count,
                                          uint16_t *slot) {
    constexpr int PER = UNION_CAP / TOPK_THREADS;
    const uint64_t n = fc_row_len(rows, p * group);
    const uint32_t count = n <= k ? (uint32_t)n : k, total = group * count;
    const size_t r0 = (size_t)p * group;
    uint32_t x[PER], rank[PER];
#pragma unroll
    for (int q = 0; q < PER; q++) {
        const uint32_t i = q * TOPK_THREADS + threadIdx.x;
        x[q] = i < total ? __ldcg(&sel[(r0 + i / count) * k + i % count]) : PAD_INDEX;
    }
    const uint32_t ucount = rank_by_bitmap(x, rank, n, bits, below);
    uint32_t *out = uni + (size_t)p * group * k;
#pragma unroll
    for (int q = 0; q < PER; q++) {
        const uint32_t i = q * TOPK_THREADS + threadIdx.x;
        if (i >= total) continue;
        out[rank[q]] = x[q]; /* every copy of a position writes the same */
        slot[(r0 + i / count) * k + i % count] = (uint16_t)rank[q];
    }
    if (threadIdx.x == 0) uni_count[p] = ucount;
}

/* Winners above the prefix (11 or 22 bits) go to the output list, keys
 * with the prefix to the candidate buffer (each block's through lists in
 * shared memory); then the row's last block selects the rest (an
 * in-shared-memory radix select with 8-bit digits over the candidates or,
 * if they overflowed the buffer, only with massive exact ties, the same
 * select over the scores row: one block, slow, exact), sorts
 * the row's winners into its selection (sink, the sorted middle winners,
 * local; every token where n <= k) and, the last row of its KV head to get
 * there, builds the group's union and slots. */
static __global__ void __launch_bounds__(TOPK_THREADS)
compact_final_kernel(fc_rows rows, uint32_t group, uint32_t k, uint32_t sink, uint32_t local, const float *scores,
                     fc_select_state *state, uint32_t *cand_fill, uint32_t *mid, uint64_t *cand, uint32_t *counters,
                     uint32_t *sel, uint32_t *sel_count, uint32_t *uni, uint32_t *uni_count, uint16_t *slot) {
    __shared__ final_smem sm;
    __shared__ uint32_t bins[256], choice[3], fill;
    const uint32_t r = blockIdx.y;
    const uint64_t n = fc_row_len(rows, r);
    bool work = n > k;
    uint32_t digit = NO_DIGIT, bits = 0;
    if (work) {
        digit = state[r].digit;
        bits = state[r].bits;
        work = digit != NO_DIGIT;
    }
    const float *row = scores + (size_t)r * rows.stride;
    const uint64_t lo = sink + (uint64_t)blockIdx.x * TOPK_CHUNK;
    const uint64_t end = n - local, hi = lo + TOPK_CHUNK < end ? lo + TOPK_CHUNK : end;
    /* the block lists its winners and candidates in shared memory, then
     * claims their places in the row's lists with one atomicAdd each (a
     * row's blocks add to the same two counters) */
    __shared__ uint32_t s_nm, s_nc, s_base[2];
    if (threadIdx.x == 0) s_nm = s_nc = 0;
    __syncthreads();
    if (work && lo < hi)
        for_range(row, lo, hi, [&](uint64_t i, float s) {
            const uint32_t d = fc_score_order(s) >> (32 - bits); /* the key's top bits */
            if (d > digit) {
                sm.blk.mid[atomicAdd(&s_nm, 1u)] = (uint32_t)i;
            } else if (d == digit) {
                const uint32_t q = atomicAdd(&s_nc, 1u);
                if (q < BLOCK_CANDS) {
                    sm.blk.cand[q] = select_key(s, i);
                } else {
                    const uint32_t pos = atomicAdd(&cand_fill[r], 1u);
                    if (pos < FC_CAND_CAP) cand[(size_t)r * FC_CAND_CAP + pos] = select_key(s, i);
                }
            }
        });
    __syncthreads();
    const uint32_t nm = s_nm, nc = s_nc < BLOCK_CANDS ? s_nc : BLOCK_CANDS;
    if (threadIdx.x == 0) {
        s_base[0] = nm ? atomicAdd(&state[r].nsel, nm) : 0;
        s_base[1] = nc ? atomicAdd(&cand_fill[r], nc) : 0;
    }
    __syncthreads();
    for (uint32_t j = threadIdx.x; j < nm; j += blockDim.x) mid[(size_t)r * k + s_base[0] + j] = sm.blk.mid[j];
    for (uint32_t j = threadIdx.x; j < nc; j += blockDim.x)
        if (s_base[1] + j < FC_CAND_CAP) cand[(size_t)r * FC_CAND_CAP + s_base[1] + j] = sm.blk.cand[j];
    if (!last_block_of_row(&counters[(size_t)r * FC_COUNTERS + 1], gridDim.x)) return;
    const uint32_t m = k - sink - local;
    uint32_t *out = sel + (size_t)r * k;
    if (work) { /* uniform in the block */
        fc_select_state st;
        st.digit = __ldcg(&state[r].digit);
        st.need = __ldcg(&state[r].need);
        st.nsel = __ldcg(&state[r].nsel);
        st.ncand = __ldcg(&state[r].ncand);
        st.bits = __ldcg(&state[r].bits);
        uint32_t *winners = mid + (size_t)r * k;
        if (st.need > 0) {
            if (threadIdx.x == 0) fill = st.nsel;
            if (st.ncand <= FC_CAND_CAP) {
                for (uint32_t i = threadIdx.x; i < st.ncand; i += blockDim.x)
                    sm.cand[i] = __ldcg(&cand[(size_t)r * FC_CAND_CAP + i]);
                __syncthreads();
                cand_source src = {sm.cand, st.ncand};
                select_tail(src, st.digit, st.bits, st.need, winners, &fill, bins, choice);
            } else {
                __syncthreads();
                row_source src = {row, sink, n - local, st.digit, st.bits};
                select_tail(src, st.digit, st.bits, st.need, winners, &fill, bins, choice);
            }
        }
        __syncthreads();
        if (n <= BITMAP_TOKENS) { /* uniform in the block */
            /* a winner's place among the m (distinct positions) is its rank */
            uint32_t x[SORT_ITEMS], rank[SORT_ITEMS];
#pragma unroll
            for (int q = 0; q < SORT_ITEMS; q++) {
                const uint32_t g = q * TOPK_THREADS + threadIdx.x;
                x[q] = g < m ? __ldcg(&winners[g]) : PAD_INDEX;
            }
            rank_by_bitmap(x, rank, n, sm.bm.bits, sm.bm.below);
#pragma unroll
            for (int q = 0; q < SORT_ITEMS; q++)
                if (x[q] != PAD_INDEX) out[sink + rank[q]] = x[q];
        } else {
            /* the m winners (any order) sorted over the bits of n; places
             * past m hold n, above every winner */
            uint32_t keys[SORT_ITEMS];
#pragma unroll
            for (int q = 0; q < SORT_ITEMS; q++) {
                const uint32_t g = threadIdx.x * SORT_ITEMS + q;
                keys[q] = g < m ? __ldcg(&winners[g]) : (uint32_t)n;
            }
            sort_t(sm.sort).Sort(keys, 0, 32 - __clz((uint32_t)n));
#pragma unroll
            for (int q = 0; q < SORT_ITEMS; q++) {
                const uint32_t g = threadIdx.x * SORT_ITEMS + q;
                if (g < m) out[sink + g] = keys[q];
            }
        }
    }
    if (n <= k) {
        for (uint32_t g = threadIdx.x; g < n; g += blockDim.x) out[g] = g;
    } else {
        for (uint32_t g = threadIdx.x; g < sink; g += blockDim.x) out[g] = g;
        for (uint32_t g = threadIdx.x; g < local; g += blockDim.x) out[sink + m + g] = (uint32_t)(n - local + g);
    }
    if (threadIdx.x == 0) sel_count[r] = n <= k ? (uint32_t)n : k;
    /* counter 2 of the group's first row counts the group's rows done (the
     * group's rows share n) */
    const uint32_t p = r / group;
    if (!last_block_of_row(&counters[(size_t)p * group * FC_COUNTERS + 2], group)) return;
    if (n <= BITMAP_TOKENS)
        group_union_bitmap(rows, p, group, k, sel, sm.bm.bits, sm.bm.below, uni, uni_count, slot);
    else
        group_union<TOPK_THREADS>(rows, p, group, k, sel, sm.u.all, sm.u.merged, uni, uni_count, slot);
}

int fc_topk_rows(uint32_t problems, uint32_t group, uint32_t k, uint32_t sink, uint32_t local,
                 fc_rows rows_n, uint64_t max_n, bool level0_counted, const fc_workspace *ws,
                 const float *scores, uint32_t *sel, uint32_t *sel_count, cudaStream_t stream) {
    const uint32_t rows = problems * group;
    const uint64_t middle = max_n > (uint64_t)sink + local ? max_n - sink - local : 0;
    uint32_t chunks = (uint32_t)((middle + TOPK_CHUNK - 1) / TOPK_CHUNK);
    if (chunks == 0) chunks = 1;
    /* the step zeroed hist, counters and cand_fill before its first top-k;
     * plane scans counted level 0 as they wrote the scores */
    if (!level0_counted) {
        hist0_kernel<<<dim3(chunks, rows), TOPK_THREADS, 0, stream>>>(rows_n, k, sink, local,
                                                                       scores, ws->hist);
        FATHOM_CUDA_LAUNCHED();
    }
    hist1_find_kernel<<<dim3(chunks, rows), TOPK_THREADS, 0, stream>>>(
        rows_n, k, sink, local, scores, ws->state, ws->hist, ws->counters);
    FATHOM_CUDA_LAUNCHED();
    compact_final_kernel<<<dim3(chunks, rows), TOPK_THREADS, 0, stream>>>(
        rows_n, group, k, sink, local, scores, ws->state, ws->cand_fill, ws->mid, ws->cand, ws->counters, sel,
        sel_count, ws->uni, ws->uni_count, ws->slot);
    FATHOM_CUDA_LAUNCHED();
    return FATHOM_OK;
}

int fc_topk_union(uint32_t problems, uint32_t group, uint32_t k, uint32_t sink, uint32_t local,
                  fc_rows rows_n, const fc_workspace *ws, uint32_t *sel, uint32_t *sel_count,
                  cudaStream_t stream) {
    const dim3 sort_grid(problems * group, (k + SORT_THREADS - 1) / SORT_THREADS);
    select_sort_kernel<<<sort_grid, SORT_THREADS, 0, stream>>>(rows_n, k, sink, local, ws->mid, sel,
                                                               sel_count);
    FATHOM_CUDA_LAUNCHED();
    union_kernel<<<problems, 1024, 0, stream>>>(rows_n, group, k, sel, ws->uni, ws->uni_count,
                                                 ws->slot);
    FATHOM_CUDA_LAUNCHED();
    return FATHOM_OK;
}

int fc_topk(const fathom_cuda_config *cfg, const fc_workspace *ws, const float *scores,
            uint32_t *sel, uint32_t *sel_count, cudaStream_t stream) {
    const fc_rows rows = {cfg->tokens, NULL, cfg->group, cfg->tokens};
    return fc_topk_rows(cfg->problems, cfg->group, cfg->k, cfg->sink, cfg->local, rows, cfg->tokens,
                        fc_scan_counts_level0(cfg->scan), ws, scores, sel, sel_count, stream);
}

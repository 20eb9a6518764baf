/* append — the new tokens' bf16 K and V, from device memory, into a tier's
 * host segments: K and V rows, plane words and scales of every block they
 * touch, running sums; no host round trip.
 *
 * Grid: x = block of the entry's appended range (ceil(max_count/64) + 1
 * columns cover any start offset) plus one last column for the sums; y =
 * (batch entry, KV head). One thread per channel. A block CTA encodes its
 * whole block from scratch, old rows read back from the segment's K rows,
 * which gives the bytes fathom_store_append leaves (a code depends only on
 * its value and the block's final scale). The sums CTA adds the new rows in
 * order, as the store does; the lengths move in a second launch, once every
 * CTA has read them.
 *
 * Centered sessions (fathom_cuda_tier_set_center): every value encoded and
 * summed is k - mu (one float subtraction, as fathom_store_append rounds
 * it). A center still pending is taken first, by its own launch (one CTA
 * per (entry, head), one thread per channel): the mean of the first
 * append's rows, summed in double in row order and rounded once to float,
 * as fathom_index_append's center_on_mean. */
#include "tier_internal.cuh"

/* Tokens [first, first+count) of entry e start at row offset `off` of the
 * input; returns false (and records why) when the entry must be skipped. */
struct entry_range {
    uint32_t s, count, old;
    uint64_t off;
};

static __device__ bool entry_of(const tier_dev &t, uint32_t layer, const uint32_t *sessions,
                                const uint32_t *counts, uint32_t e, uint32_t max_count, bool report,
                                entry_range *r) {
    r->s = sessions[e];
    if (r->s >= t.max_sessions) {
        if (report) tier_fail(t, TIER_ERR_SESSION);
        return false;
    }
    r->count = counts[e];
    if (r->count > max_count) {
        if (report) tier_fail(t, TIER_ERR_COUNT);
        return false;
    }
    r->old = t.len[(size_t)r->s * t.layers + layer];
    if ((uint64_t)r->old + r->count > t.cap[r->s]) {
        if (report) tier_fail(t, TIER_ERR_CAPACITY);
        return false;
    }
    uint64_t off = 0;
    for (uint32_t i = 0; i < e; i++) off += counts[i];
    r->off = off;
    return r->count > 0;
}

/* The center of (session, layer, head) for the encoder, NULL when the
 * session is not centered; false (and the error recorded when `report`)
 * when it is centered but its center was never taken (an append captured
 * before the tier had a centered session lacks the centering launch). */
static __device__ bool center_of(const tier_dev &t, uint32_t s, uint32_t layer, uint32_t h, bool report,
                                 const float **mu) {
    const float *c = t.centers[s];
    *mu = NULL;
    if (!c) return true;
    const uint32_t state = t.center_state[(size_t)s * t.layers + layer];
    if (state != TIER_CENTER_TAKEN && state != TIER_CENTER_GIVEN) {
        if (report) tier_fail(t, TIER_ERR_CENTER);
        return false;
    }
    *mu = c + ((size_t)layer * t.heads + h) * t.dim;
    return true;
}

/* A pending center from the first append: mu_j = (float)(sum_i k_ij / count)
 * in double, rows in order (index.c's center_on_mean). */
template <int D>
static __global__ void __launch_bounds__(D)
append_center_kernel(tier_dev t, uint32_t layer, const uint32_t *sessions, const uint32_t *counts,
                     uint32_t max_count, const uint16_t *keys) {
    const uint32_t e = blockIdx.x / t.heads, h = blockIdx.x % t.heads, j = threadIdx.x;
    const uint32_t s = sessions[e];
    if (s >= t.max_sessions || !t.centers[s]) return;
    uint32_t *state = &t.center_state[(size_t)s * t.layers + layer];
    if (*state != TIER_CENTER_PENDING && *state != TIER_CENTER_TAKEN) return; /* given: kept */
    entry_range r;
    if (!entry_of(t, layer, sessions, counts, e, max_count, false, &r) || r.old != 0) return;
    const uint16_t *in_k = keys + (r.off * t.heads + h) * D + j;
    const size_t in_stride = (size_t)t.heads * D;
    double sum = 0.0;
    for (uint32_t i = 0; i < r.count; i++) sum = __dadd_rn(sum, (double)tier_bf16(in_k[i * in_stride]));
    t.centers[s][((size_t)layer * t.heads + h) * D + j] = __double2float_rn(__ddiv_rn(sum, (double)r.count));
    if (h == 0 && j == 0) *state = TIER_CENTER_TAKEN; /* read by the next launch only */
}

template <int D>
static __global__ void __launch_bounds__(D)
append_kernel(tier_dev t, uint32_t layer, const uint32_t *sessions, const uint32_t *counts,
              uint32_t max_count, const uint16_t *keys, const uint16_t *values) {
    const uint32_t e = blockIdx.y / t.heads, h = blockIdx.y % t.heads, j = threadIdx.x;
    const bool sums_cta = blockIdx.x == gridDim.x - 1;
    entry_range r;
    const bool report = sums_cta && h == 0 && j == 0;
    const float *center;
    if (!entry_of(t, layer, sessions, counts, e, max_count, report, &r) ||
        !center_of(t, r.s, layer, h, report, &center))
        return;
    const float mu = center ? __ldcv(&center[j]) : 0.0f;
    /* the stored coordinate of a key: k, or k - mu rounded once */
    auto stored = [&](uint16_t k) { return center ? __fsub_rn(tier_bf16(k), mu) : tier_bf16(k); };
    const uint32_t S = t.segment_blocks;
    const uint64_t seg_tokens = (uint64_t)S * FATHOM_BLOCK_TOKENS, end = (uint64_t)r.old + r.count;
    const uint16_t *in_k = keys + (r.off * t.heads + h) * D;
    const uint16_t *in_v = values + (r.off * t.heads + h) * D;
    const size_t in_stride = (size_t)t.heads * D;
    if (sums_cta) {
        double *base = t.sums[r.s] + ((size_t)layer * t.heads + h) * 3 * D;
        double shift = __ldcv(&base[j]), sum = __ldcv(&base[D + j]), sum_sq = __ldcv(&base[2 * D + j]);
        for (uint32_t i = 0; i < r.count; i++) {
            const float v = stored(in_k[i * in_stride + j]);
            if (r.old == 0 && i == 0) shift = v;
            tier_sums_add(v, shift, &sum, &sum_sq);
        }
        base[j] = shift;
        base[D + j] = sum;
        base[2 * D + j] = sum_sq;
        return;
    }
    const uint64_t block = r.old / FATHOM_BLOCK_TOKENS + blockIdx.x;
    const uint64_t first = block * FATHOM_BLOCK_TOKENS;
    if (first >= end) return;
    const uint32_t rows = (uint32_t)(end - first < FATHOM_BLOCK_TOKENS ? end - first : FATHOM_BLOCK_TOKENS);
    uint8_t *slice = tier_slice(t, r.s, (uint32_t)(block / S), layer, h);
    uint16_t *kv = (uint16_t *)(slice + t.kv_off) + (first % seg_tokens) * 2 * D;
    /* the new rows of this block into the segment */
    for (uint32_t i = first < r.old ? r.old - (uint32_t)first : 0; i < rows; i++) {
        const uint64_t at = first + i - r.old;
        kv[(size_t)i * 2 * D + j] = in_k[at * in_stride + j];
        kv[(size_t)i * 2 * D + D + j] = in_v[at * in_stride + j];
    }
    /* the block's rows already in the segment, read once into shared memory
     * with every load in flight (one host round trip, not one per row) */
    __shared__ uint4 s_old[FATHOM_BLOCK_TOKENS * D / 8];
    const uint32_t old_rows = first < r.old ? r.old - (uint32_t)first : 0;
#pragma unroll 8
    for (uint32_t i = j; i < old_rows * (D / 8); i += D)
        s_old[i] = __ldcv((const uint4 *)(kv + (size_t)(i / (D / 8)) * 2 * D) + i % (D / 8));
    __syncthreads();
    const uint16_t *old_k = (const uint16_t *)s_old;
    auto value = [&](uint32_t i) {
        const uint64_t tok = first + i;
        return tok < r.old ? stored(old_k[(size_t)i * D + j]) : stored(in_k[(tok - r.old) * in_stride + j]);
    };
    uint64_t w[FATHOM_PLANES];
    uint16_t scale;
    tier_encode_channel(value, rows, w, &scale);
    const uint64_t b = block % S;
    uint64_t *planes = (uint64_t *)slice;
#pragma unroll
    for (int p = 0; p < FATHOM_PLANES; p++) planes[((size_t)j * FATHOM_PLANES + p) * S + b] = w[p];
    ((uint16_t *)(slice + t.scales_off))[(size_t)j * S + b] = scale;
}

static __global__ void append_lengths_kernel(tier_dev t, uint32_t layer, const uint32_t *sessions,
                                             const uint32_t *counts, uint32_t batch, uint32_t max_count) {
    for (uint32_t e = threadIdx.x; e < batch; e += blockDim.x) {
        entry_range r;
        const float *center;
        if (entry_of(t, layer, sessions, counts, e, max_count, false, &r) && center_of(t, r.s, layer, 0, false, &center))
            t.len[(size_t)r.s * t.layers + layer] = r.old + r.count;
    }
}

int fc_tier_append(const tier_dev *t, uint32_t layer, const uint32_t *sessions, uint32_t batch,
                   const uint32_t *counts, uint32_t max_count, const uint16_t *keys,
                   const uint16_t *values, bool centering, cudaStream_t stream) {
    const dim3 grid((max_count + 63) / 64 + 2, batch * t->heads);
    if (centering) {
        const uint32_t ctas = batch * t->heads;
        switch (t->dim) {
        case 64: append_center_kernel<64><<<ctas, 64, 0, stream>>>(*t, layer, sessions, counts, max_count, keys); break;
        case 128: append_center_kernel<128><<<ctas, 128, 0, stream>>>(*t, layer, sessions, counts, max_count, keys); break;
        case 256: append_center_kernel<256><<<ctas, 256, 0, stream>>>(*t, layer, sessions, counts, max_count, keys); break;
        default: return fathom_fail(FATHOM_ERR_UNSUPPORTED, "tier_append: dim %u", t->dim);
        }
        FATHOM_CUDA_LAUNCHED();
    }
    switch (t->dim) {
    case 64: append_kernel<64><<<grid, 64, 0, stream>>>(*t, layer, sessions, counts, max_count, keys, values); break;
    case 128: append_kernel<128><<<grid, 128, 0, stream>>>(*t, layer, sessions, counts, max_count, keys, values); break;
    case 256: append_kernel<256><<<grid, 256, 0, stream>>>(*t, layer, sessions, counts, max_count, keys, values); break;
    default: return fathom_fail(FATHOM_ERR_UNSUPPORTED, "tier_append: dim %u", t->dim);
    }
    FATHOM_CUDA_LAUNCHED();
    append_lengths_kernel<<<1, 256, 0, stream>>>(*t, layer, sessions, counts, batch, max_count);
    FATHOM_CUDA_LAUNCHED();
    return FATHOM_OK;
}

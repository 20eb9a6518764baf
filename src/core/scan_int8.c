/* scan_int8 — the integer ("VNNI") scan, an opt-in mode (FATHOM_SCAN_INT8_*
 * and its int16 variant FATHOM_SCAN_INT16_*, store_internal.h): the
 * definition's token-by-token reference and the portable kernel. The
 * definition is in scan_internal.h; the AVX-512 VNNI kernel is in
 * scan_x86.c; scan.c picks the kernels. */
#include "internal.h"
#include "scan_internal.h"

#include <math.h>
#include <stdint.h>

static int int_reference(const fathom_store *st, const uint8_t *depths, const float *queries,
                         uint32_t group, uint64_t n, float *scores, uint64_t *bytes_read,
                         int32_t levels) {
    uint64_t bytes;
    FATHOM_TRY(fathom_store_scan_check(st, depths, queries, group, n, scores, &bytes));
    const uint32_t dim = fathom_store_dim(st);
    const uint64_t S = fathom_store_segment_blocks(st);
    uint32_t count, first[FATHOM_PLANES + 1], row[FATHOM_PLANES + 1], channels[SCAN_PASS_CHANNELS];
    uint32_t t[SCAN_PASS_CHANNELS];
    float a[SCAN_PASS_CHANNELS], q[SCAN_PASS_CHANNELS];
    int32_t w[SCAN_PASS_CHANNELS];
    for (uint32_t h = 0; h < group; h++) {
        const float *qh = queries + (uint64_t)h * dim;
        for (uint64_t i = 0; i < n; i++) {
            const uint64_t block = i / FATHOM_BLOCK_TOKENS;
            const uint32_t bit = (uint32_t)(i % FATHOM_BLOCK_TOKENS);
            fathom_segment_view view;
            FATHOM_TRY(fathom_store_segment(st, (uint32_t)(block / S), &view));
            const uint64_t b = block % S;
            float score = 0.0f;
            int first_pass = 1;
            for (uint32_t j = 0; j < dim; first_pass = 0) {
                j = fathom_scan_next_pass(dim, depths, j, &count, first, row, channels);
                if (!count) break;
                for (uint32_t k = 0; k < count; k++) {
                    const uint64_t c = channels[k];
                    t[k] = depths[c];
                    a[k] = fathom_f16_to_f32(view.scales[c * S + b]);
                    q[k] = qh[c];
                }
                int32_t K;
                float s;
                scan_int8_weights(count, a, q, t, levels, w, &K, &s);
                int32_t T = 0;
                for (uint32_t k = 0; k < count; k++) {
                    const uint64_t c = channels[k];
                    int32_t code = 0;
                    for (uint32_t p = 0; p < t[k]; p++)
                        code = code << 1 |
                               (int32_t)((view.planes[(c * FATHOM_PLANES + p) * S + b] >> bit) & 1u);
                    T += w[k] * ((2 * code + 1) * (int32_t)(16u >> t[k]) - 16);
                }
                const float P = s * (float)T;
                score = first_pass ? 0.0f + P : score + P;
            }
            scores[(uint64_t)h * n + i] = score;
        }
    }
    if (bytes_read) *bytes_read = bytes;
    return FATHOM_OK;
}

int fathom_store_scan_int8_reference(const fathom_store *st, const uint8_t *depths,
                                     const float *queries, uint32_t group, uint64_t n,
                                     float *scores, uint64_t *bytes_read) {
    return int_reference(st, depths, queries, group, n, scores, bytes_read, SCAN_INT8_LEVELS);
}

int fathom_store_scan_int16_reference(const fathom_store *st, const uint8_t *depths,
                                      const float *queries, uint32_t group, uint64_t n,
                                      float *scores, uint64_t *bytes_read) {
    return int_reference(st, depths, queries, group, n, scores, bytes_read, SCAN_INT16_LEVELS);
}

/* The portable kernel, on scan2_stage's tile: each channel's filled code
 * 2 c' of every token once per block, then per head the weights and, per
 * token, the integer sum K + sum_k w_k 2 c'_k. */
static void int_block(const scan2_pass *ps, const scan2_tile *tile, uint32_t b, float *out,
                      uint64_t ld, uint32_t valid, int32_t levels) {
    uint8_t code[SCAN_PASS_CHANNELS][FATHOM_BLOCK_TOKENS]; /* 2 c' of each channel and token */
    uint32_t t[SCAN_PASS_CHANNELS];
    float a[SCAN_PASS_CHANNELS], q[SCAN_PASS_CHANNELS];
    for (uint32_t d = 1; d <= FATHOM_PLANES; d++)
        for (uint32_t k = ps->first[d - 1]; k < ps->first[d]; k++) {
            const uint32_t r0 = ps->row[d] + (k - ps->first[d - 1]) * d;
            t[k] = d;
            a[k] = fathom_f16_to_f32(tile->scales[k][b]);
            for (uint32_t i = 0; i < valid; i++) {
                uint32_t c = 0;
                for (uint32_t p = 0; p < d; p++)
                    c |= (uint32_t)((tile->words[r0 + p][b] >> i) & 1u) << (4 - p);
                code[k][i] = (uint8_t)c;
            }
        }
    for (uint32_t h = 0; h < ps->heads; h++) {
        for (uint32_t k = 0; k < ps->count; k++) q[k] = ps->q[k][h];
        int32_t w[SCAN_PASS_CHANNELS], K;
        float s;
        scan_int8_weights(ps->count, a, q, t, levels, w, &K, &s);
        float acc[FATHOM_BLOCK_TOKENS];
        for (uint32_t i = 0; i < valid; i++) {
            int32_t T = K;
            for (uint32_t k = 0; k < ps->count; k++) T += w[k] * code[k][i];
            acc[i] = s * (float)T;
        }
        scan2_put(out + h * ld, acc, valid, ps->add);
    }
}

void fathom_scan2_block_int8_portable(const scan2_pass *ps, const scan2_tile *tile, uint32_t b,
                                      float *dec, float *out, uint64_t ld, uint32_t valid) {
    (void)dec;
    int_block(ps, tile, b, out, ld, valid, SCAN_INT8_LEVELS);
}

void fathom_scan2_block_int16_portable(const scan2_pass *ps, const scan2_tile *tile, uint32_t b,
                                       float *dec, float *out, uint64_t ld, uint32_t valid) {
    (void)dec;
    int_block(ps, tile, b, out, ld, valid, SCAN_INT16_LEVELS);
}

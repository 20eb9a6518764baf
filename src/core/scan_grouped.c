/* scan_grouped — the grouped-table ("LUT") scan, an opt-in mode
 * (FATHOM_SCAN_GROUPED_*, store_internal.h): the groups of a pass, the
 * definition's token-by-token reference and the portable kernel. The
 * definition is in scan_internal.h; the AVX-512 kernel is in scan_x86.c
 * (it shares the nibble kernel's quads); scan.c picks the kernels. */
#include "internal.h"
#include "scan_internal.h"

#include <math.h>
#include <stdint.h>

/* Appends a group of the members k[0..m) with depths t[0..m) to g. */
static void group_add(scan_groups *g, const uint32_t *k, const uint32_t *t, uint32_t m) {
    uint32_t at = g->first[g->count], bit = 0;
    for (uint32_t i = 0; i < m; i++, at++) {
        g->member[at] = (uint8_t)k[i];
        g->depth[at] = (uint8_t)t[i];
        g->bit[at] = (uint8_t)bit;
        bit += t[i];
    }
    g->first[++g->count] = at;
}

void fathom_scan_group_pass(const uint32_t first[FATHOM_PLANES + 1], scan_groups *g) {
    g->count = 0;
    g->first[0] = 0;
    uint32_t one = first[0]; /* the next unused depth-1 channel */
    const uint32_t one_end = first[1];
    for (uint32_t k = first[3]; k < first[4]; k++) group_add(g, &k, (const uint32_t[]){4}, 1);
    for (uint32_t k = first[2]; k < first[3]; k++) {
        const uint32_t ks[2] = {k, one}, ts[2] = {3, 1};
        group_add(g, ks, ts, one < one_end ? 2 : 1);
        if (one < one_end) one++;
    }
    for (uint32_t k = first[1]; k < first[2]; k += 2) {
        uint32_t ks[4] = {k, k + 1}, ts[4] = {2, 2}, m = 2;
        if (k + 1 == first[2]) { /* an odd last one: up to two depth-1 channels */
            for (m = 1; m < 3 && one < one_end; m++) ks[m] = one++, ts[m] = 1;
        }
        group_add(g, ks, ts, m);
    }
    for (; one < one_end; one += SCAN_GROUP_ROWS) {
        const uint32_t m = one_end - one < SCAN_GROUP_ROWS ? one_end - one : SCAN_GROUP_ROWS;
        const uint32_t ks[4] = {one, one + 1, one + 2, one + 3}, ts[4] = {1, 1, 1, 1};
        group_add(g, ks, ts, m);
    }
}

int fathom_store_scan_grouped_reference(const fathom_store *st, const uint8_t *depths,
                                        const float *queries, uint32_t group, uint64_t n,
                                        float *scores, uint64_t *bytes_read) {
    uint64_t bytes;
    FATHOM_TRY(fathom_store_scan_check(st, depths, queries, group, n, scores, &bytes));
    const uint32_t dim = fathom_store_dim(st);
    uint32_t count, first[FATHOM_PLANES + 1], row[FATHOM_PLANES + 1], channels[SCAN_PASS_CHANNELS];
    scan_groups g;
    for (uint32_t h = 0; h < group; h++) {
        const float *q = queries + (uint64_t)h * dim;
        for (uint64_t i = 0; i < n; i++) {
            float score = 0.0f;
            int first_pass = 1;
            for (uint32_t j = 0; j < dim; first_pass = 0) {
                j = fathom_scan_next_pass(dim, depths, j, &count, first, row, channels);
                if (!count) break;
                fathom_scan_group_pass(first, &g);
                float acc = 0.0f;
                for (uint32_t x = 0; x < g.count; x++) {
                    float entry = 0.0f; /* the table entry at token i's nibble */
                    for (uint32_t m = g.first[x]; m < g.first[x + 1]; m++) {
                        const uint32_t c = channels[g.member[m]];
                        const float v = fathom_store_token_value(st, i, c, g.depth[m]);
                        if (g.first[x + 1] - g.first[x] == 1) acc = fmaf(q[c], v, acc); /* one channel */
                        else entry = fmaf(q[c], v, entry);
                    }
                    if (g.first[x + 1] - g.first[x] > 1) acc = acc + entry;
                }
                score = first_pass ? 0.0f + acc : score + acc;
            }
            scores[(uint64_t)h * n + i] = score;
        }
    }
    if (bytes_read) *bytes_read = bytes;
    return FATHOM_OK;
}

/* The portable grouped kernel, on scan2_stage's tile: per group and head the
 * block's 16-entry table (in dec: [group][head][16]; a group of one channel:
 * its 16 values instead, at [group][0]), each token's nibble per group once,
 * then per head and token one lookup and add per group (one channel: a
 * multiply-add of its value). */
void fathom_scan2_block_grouped_portable(const scan2_pass *ps, const scan2_tile *tile, uint32_t b,
                                         float *dec, float *out, uint64_t ld, uint32_t valid) {
    const scan_groups *g = &ps->groups;
    _Static_assert(SCAN_PASS_CHANNELS * 4 * 16 <= SCAN_PASS_CHANNELS * FATHOM_BLOCK_TOKENS,
                   "the tables fit in dec");
    uint8_t nib[SCAN_PASS_CHANNELS][FATHOM_BLOCK_TOKENS]; /* each group's nibble of each token */
    for (uint32_t x = 0; x < g->count; x++) {
        float *tab = dec + (size_t)x * 4 * 16;
        const int one = g->first[x + 1] - g->first[x] == 1;
        for (uint32_t i = 0; i < valid; i++) nib[x][i] = 0;
        for (uint32_t v = 0; v < 16 * (one ? 1 : ps->heads); v++) tab[v] = 0.0f;
        for (uint32_t m = g->first[x]; m < g->first[x + 1]; m++) {
            const uint32_t k = g->member[m], t = g->depth[m];
            const uint32_t r0 = ps->row[t] + (k - ps->first[t - 1]) * t;
            for (uint32_t p = 0; p < t; p++)
                for (uint32_t i = 0; i < valid; i++)
                    nib[x][i] |= (uint8_t)(((tile->words[r0 + p][b] >> i) & 1u) << (g->bit[m] + p));
            const float a = fathom_f16_to_f32(tile->scales[k][b]);
            for (uint32_t v = 0; v < 16; v++) {
                const float val = a * scan_group_unit(v, g->bit[m], t);
                if (one) tab[v] = val;
                else
                    for (uint32_t h = 0; h < ps->heads; h++)
                        tab[h * 16 + v] = fmaf(ps->q[k][h], val, tab[h * 16 + v]);
            }
        }
    }
    for (uint32_t h = 0; h < ps->heads; h++) {
        float acc[FATHOM_BLOCK_TOKENS];
        for (uint32_t i = 0; i < valid; i++) {
            float s = 0.0f;
            for (uint32_t x = 0; x < g->count; x++) {
                const float *tab = dec + (size_t)x * 4 * 16;
                if (g->first[x + 1] - g->first[x] == 1)
                    s = fmaf(ps->q[g->member[g->first[x]]][h], tab[nib[x][i]], s);
                else
                    s = s + tab[h * 16 + nib[x][i]];
            }
            acc[i] = s;
        }
        scan2_put(out + h * ld, acc, valid, ps->add);
    }
}

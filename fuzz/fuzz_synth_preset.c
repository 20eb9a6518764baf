/* libFuzzer target for preset files (src/io/synth_preset.c): parse the bytes
 * as a preset and, when that succeeds and the shape is small, generate one
 * layer from it. Any crash, sanitizer report or leak is a bug; failures
 * with a status are the expected outcome. */
#include "fathom.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fathom_synth_preset *p = NULL;
    if (fathom_synth_preset_parse(&p, (const char *)data, size) != FATHOM_OK) return 0;
    fathom_source_info info;
    fathom_source *src = NULL;
    if (fathom_synth_preset_info(p, &info) == FATHOM_OK && info.q_heads <= 16 &&
        fathom_synth_open_preset(&src, p, 64, 4, 1) == FATHOM_OK) {
        float *q = malloc((size_t)info.q_heads * 4 * info.dim * sizeof *q);
        float *k = malloc((size_t)info.kv_heads * 64 * info.dim * sizeof *k);
        float *v = malloc((size_t)info.kv_heads * 64 * info.dim * sizeof *v);
        if (q && k && v) fathom_source_layer(src, 0, q, k, v);
        free(q), free(k), free(v);
    }
    fathom_source_free(src);
    fathom_synth_preset_free(p);
    return 0;
}

/* libFuzzer target for the capture reader: open the bytes as a capture and,
 * when that succeeds, read every layer. Any crash, sanitizer report or leak
 * is a bug; failures with a status are the expected outcome. */
#include "capture_internal.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fathom_source *src = NULL;
    if (fathom_capture_open_memory(&src, data, size) != FATHOM_OK) return 0;
    fathom_source_info info;
    if (fathom_source_get_info(src, &info) == FATHOM_OK) {
        uint64_t q_elems = (uint64_t)info.q_heads * info.positions * info.dim;
        uint64_t kv_elems = (uint64_t)info.kv_heads * info.tokens * info.dim;
        /* the data holds every tensor, so these are bounded by the input size */
        float *q = malloc(q_elems * sizeof *q), *k = malloc(kv_elems * sizeof *k), *v = malloc(kv_elems * sizeof *v);
        for (uint32_t l = 0; q && k && v && l < info.layers; l++) fathom_source_layer(src, l, q, k, v);
        const char *value;
        fathom_source_metadata(src, "model", &value);
        free(q), free(k), free(v);
    }
    fathom_source_free(src);
    return 0;
}

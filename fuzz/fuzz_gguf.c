/* libFuzzer target for the GGUF reader: parse the input as a GGUF image and,
 * when it is accepted, read every metadata value (arrays element by element,
 * nested ones recursively) and dequantize every tensor of bounded size.
 * Accepting or rejecting with FATHOM_ERR_FORMAT are both fine; any other
 * status for a parse, or a crash/sanitizer report, is a bug.
 *
 * The library must be instrumented too (FATHOM_FUZZ adds -fsanitize=fuzzer to
 * the target only; without this the fuzzer sees ~24 edges instead of ~400):
 *   cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DFATHOM_FUZZ=ON -DFATHOM_SANITIZE=ON \
 *         -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link
 *   cmake --build build-fuzz --target fuzz_gguf
 *   mkdir -p corpus && cp build/gguf-model-test/random.gguf corpus/   # from test_gguf_model
 *   build-fuzz/fuzz_gguf -max_total_time=120 -max_len=65536 corpus
 */
#include "gguf_internal.h"

#include <stdlib.h>
#include <string.h>

#define MAX_ELEMENTS (1u << 16) /* dequantize at most this many per tensor */
#define MAX_ARRAY_VISIT 4096    /* elements visited per array */

static void bug(void) { __builtin_trap(); }

static void touch_value(const fathom_gguf_value *v, int depth) {
    uint64_t u64, len;
    int64_t i64;
    double f64;
    float f32;
    uint32_t u32;
    int32_t i32;
    int b;
    const char *s;
    if (depth > FATHOM_GGUF_MAX_NESTING) bug();
    switch (v->type) {
    case FATHOM_GGUF_STRING:
        if (fathom_gguf_value_string(v, &s, &len) != FATHOM_OK || s[len] != '\0') bug();
        break;
    case FATHOM_GGUF_BOOL:
        if (fathom_gguf_value_bool(v, &b) != FATHOM_OK || (b != 0 && b != 1)) bug();
        break;
    case FATHOM_GGUF_FLOAT32:
    case FATHOM_GGUF_FLOAT64:
        if (fathom_gguf_value_f64(v, &f64) != FATHOM_OK || fathom_gguf_value_f32(v, &f32) != FATHOM_OK)
            bug();
        break;
    case FATHOM_GGUF_ARRAY:
        for (uint64_t i = 0; i < v->count && i < MAX_ARRAY_VISIT; i++) {
            fathom_gguf_value e;
            if (fathom_gguf_array_get(v, i, &e) != FATHOM_OK || e.type != v->elem_type) bug();
            touch_value(&e, depth + 1);
        }
        break;
    default: /* integers: at least one getter must accept it */
        if (fathom_gguf_value_u64(v, &u64) != FATHOM_OK && fathom_gguf_value_i64(v, &i64) != FATHOM_OK)
            bug();
        (void)fathom_gguf_value_u32(v, &u32);
        (void)fathom_gguf_value_i32(v, &i32);
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fathom_gguf *g = NULL;
    int status = fathom_gguf_open_memory(&g, data, size);
    if (status != FATHOM_OK) {
        if (status != FATHOM_ERR_FORMAT && status != FATHOM_ERR_NOMEM) bug();
        if (g) bug();
        return 0;
    }
    for (uint64_t i = 0; i < fathom_gguf_kv_count(g); i++) {
        const char *key;
        fathom_gguf_value v;
        if (fathom_gguf_kv_at(g, i, &key, &v) != FATHOM_OK) bug();
        if (strlen(key) == 0) bug();
        touch_value(&v, 0);
    }
    float *out = malloc(MAX_ELEMENTS * sizeof *out);
    for (uint64_t i = 0; out && i < fathom_gguf_tensor_count(g); i++) {
        fathom_gguf_tensor_info t;
        if (fathom_gguf_tensor_at(g, i, &t) != FATHOM_OK) bug();
        if (t.offset + t.bytes > size || t.offset % fathom_gguf_alignment(g) != 0) bug();
        if (fathom_gguf_find_tensor(g, t.name) < 0) bug();
        if (t.n_elements > MAX_ELEMENTS) continue;
        status = fathom_dequantize(t.type, t.data, t.bytes, t.n_elements, out);
        if (status != FATHOM_OK && status != FATHOM_ERR_UNSUPPORTED) bug();
    }
    free(out);
    fathom_gguf_close(g);
    return 0;
}

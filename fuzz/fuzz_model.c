/* libFuzzer target for model validation: open the input as a GGUF model
 * (every hyper-parameter and tensor shape checked, weights dequantized)
 * and, when it is accepted, read its info and build its tokenizer. Rejecting
 * with FATHOM_ERR_FORMAT, _UNSUPPORTED, _NONFINITE (a weight that is NaN or
 * infinite) or _NOMEM is the expected outcome;
 * any other status, a crash or a sanitizer report is a bug. Seeds:
 * tests/data/malformed/gguf/ and fuzz/corpus/model/tiny_llama.gguf, a valid
 * one-layer model (fuzz/make_seeds.py). */
#include "gguf_internal.h"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void bug(void) { __builtin_trap(); }

static int expected_failure(int status) {
    return status == FATHOM_ERR_FORMAT || status == FATHOM_ERR_UNSUPPORTED ||
           status == FATHOM_ERR_NONFINITE || status == FATHOM_ERR_NOMEM;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fathom_model *m = NULL;
    int status = fathom_model_open_memory(&m, data, size);
    if (status != FATHOM_OK) {
        if (!expected_failure(status) || m) bug();
        return 0;
    }
    fathom_model_info info;
    if (fathom_model_get_info(m, &info) != FATHOM_OK) bug();
    if (info.layers == 0 || info.head_dim == 0 || info.vocab == 0) bug();
    fathom_tokenizer *tok = NULL;
    status = fathom_model_tokenizer(m, &tok);
    if (status != FATHOM_OK && !expected_failure(status)) bug();
    fathom_tokenizer_free(tok);
    fathom_model_free(m);
    return 0;
}

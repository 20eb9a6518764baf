/* libFuzzer target for the tokenizer: encode the input with the tiny test
 * vocabulary (tests/support/tiny_vocab.h: every byte has a token) under both
 * pre-tokenizers, with and without special tokens, and decode it again. The
 * round trip must give back the input exactly; any other outcome, a crash or
 * a sanitizer report is a bug. */
#include "fathom_model.h"
#include "tiny_vocab.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void bug(void) { __builtin_trap(); }

static fathom_tokenizer *tokenizers[2]; /* smollm, gpt2 */

static void setup(void) {
    static vocab v;
    build_vocab(&v);
    const char *pre[2] = {"smollm", "gpt2"};
    for (int i = 0; i < 2; i++) {
        fathom_tokenizer_spec spec = make_spec(&v, pre[i]);
        if (fathom_tokenizer_create(&tokenizers[i], &spec) != FATHOM_OK) bug();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!tokenizers[0]) setup();
    int32_t *ids = malloc((size + 1) * sizeof *ids); /* at most one id per byte */
    char *out = malloc(size + 1);
    if (!ids || !out) bug();
    for (int t = 0; t < 2; t++) {
        for (int special = 0; special < 2; special++) {
            size_t n = 0, len = 0;
            if (fathom_tokenizer_encode(tokenizers[t], (const char *)data, size, special, ids,
                                        size + 1, &n) != FATHOM_OK)
                bug();
            if (n > size) bug();
            if (fathom_tokenizer_decode(tokenizers[t], ids, n, out, size + 1, &len) != FATHOM_OK)
                bug();
            if (len != size || (size && memcmp(out, data, size) != 0)) bug();
        }
    }
    free(ids);
    free(out);
    return 0;
}

/* libFuzzer target for the method-list parser (what `--methods` and
 * `--attn` take from the command line): parse the input as a list. A
 * rejection must be FATHOM_ERR_INVALID_ARG with a message; an accepted list
 * must have 1..cap entries, each of which parses again on its own to the
 * same method. A crash or sanitizer report is a bug. */
#include "fathom.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void bug(void) { __builtin_trap(); }

#define CAP 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *list = malloc(size + 1);
    if (!list) bug();
    memcpy(list, data, size);
    list[size] = '\0'; /* the parser takes a C string: it ends at the first NUL */
    fathom_method methods[CAP];
    uint32_t count = 0;
    int status = fathom_method_parse_list(list, methods, CAP, &count);
    if (status != FATHOM_OK) {
        if (status != FATHOM_ERR_INVALID_ARG || fathom_last_error()[0] == '\0') bug();
    } else {
        if (count == 0 || count > CAP) bug();
        for (uint32_t i = 0; i < count; i++) {
            fathom_method again;
            if (memchr(methods[i].name, '\0', sizeof methods[i].name) == NULL) bug();
            if (fathom_method_parse(methods[i].name, &again) != FATHOM_OK) bug();
            if (again.kind != methods[i].kind || again.param != methods[i].param) bug();
            (void)fathom_method_fixed_bits(&methods[i], 128);
        }
    }
    free(list);
    return 0;
}

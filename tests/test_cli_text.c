/* The CLI's terminal writer for generated text (tools/cli_util.c): control
 * bytes escaped, C1 controls escaped also when split across two pieces,
 * everything else byte for byte, whatever the split. */
#include "check.h"
#include "cli_util.h"

#include <string.h>

/* Writes pieces of s cut at the given offsets, returns what came out. */
static char *write_split(const char *s, size_t len, const size_t *cuts, int ncuts, size_t *out_len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, out_len);
    if (!f) return NULL;
    cli_text_out t = {f, false};
    size_t at = 0;
    for (int i = 0; i <= ncuts; i++) {
        const size_t end = i < ncuts ? cuts[i] : len;
        cli_text_write(&t, s + at, end - at);
        at = end;
    }
    cli_text_finish(&t);
    fclose(f);
    return buf;
}

static void expect(const char *s, size_t len, const size_t *cuts, int ncuts, const char *want) {
    size_t n = 0;
    char *got = write_split(s, len, cuts, ncuts, &n);
    CHECK(got != NULL);
    if (!got) return;
    const int same = n == strlen(want) && memcmp(got, want, n) == 0;
    CHECK(same);
    if (!same) fprintf(stderr, "  got '%.*s', want '%s'\n", (int)n, got, want);
    free(got);
}

int main(void) {
    /* C1 CSI (U+009B = 0xc2 0x9b) whole, and split between two tokens */
    const char csi[] = "a\xc2\x9b" "31mb";
    expect(csi, 7, NULL, 0, "a\\xc2\\x9b31mb");
    for (size_t cut = 1; cut < 7; cut++) expect(csi, 7, &cut, 1, "a\\xc2\\x9b31mb");
    /* C0 controls escaped; newline, tab and carriage return kept */
    expect("x\x1b[0m\n\t\ry\x7f", 10, NULL, 0, "x\\x1b[0m\n\t\ry\\x7f");
    /* printable UTF-8 with a 0xc2 lead (U+00A0..U+00BF) kept, split or not */
    const char nbsp[] = "1\xc2\xa0" "2\xc2\xbf";
    for (size_t cut = 0; cut <= 6; cut++) expect(nbsp, 6, &cut, 1, nbsp);
    /* two lead bytes in a row, the second starting a C1 control */
    const size_t cuts[2] = {1, 2};
    expect("\xc2\xc2\x85", 3, cuts, 2, "\xc2\\xc2\\x85");
    /* a piece ending in 0xc2 at the very end is written by finish */
    expect("z\xc2", 2, NULL, 0, "z\xc2");
    return check_summary("test_cli_text");
}

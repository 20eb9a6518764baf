/* methods: spec parsing, list parsing and the §4 fixed bit counts. */
#include "check.h"
#include "fathom.h"

#include <math.h>
#include <string.h>

static void test_parse(void) {
    fathom_method m;
    const struct { const char *spec; fathom_method_kind kind; uint32_t param; } good[] = {
        {"fathom:48", FATHOM_METHOD_FATHOM, 48},    {"fathom-klt:64", FATHOM_METHOD_FATHOM_KLT, 64},
        {"sparq:16", FATHOM_METHOD_SPARQ, 16},      {"ds:32", FATHOM_METHOD_DS, 32},
        {"loki:32", FATHOM_METHOD_LOKI, 32},        {"thumb", FATHOM_METHOD_THUMB, 0},
        {"landmark", FATHOM_METHOD_LANDMARK, 0},    {"full4", FATHOM_METHOD_FULL4, 0},
        {"oracle", FATHOM_METHOD_ORACLE, 0},        {"dense", FATHOM_METHOD_DENSE, 0},
        {"fathom:4096", FATHOM_METHOD_FATHOM, 4096}, {"sparq:1", FATHOM_METHOD_SPARQ, 1},
        {"fathom-centered:48", FATHOM_METHOD_FATHOM_CENTERED, 48},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        memset(&m, 0xab, sizeof m);
        CHECK_OK(fathom_method_parse(good[i].spec, &m));
        CHECK(m.kind == good[i].kind && m.param == good[i].param);
        CHECK(!strcmp(m.name, good[i].spec));
    }
    const char *bad[] = {
        "",          "fathom",      "fathom:",      "fathom:0",     "fathom:-4",   "fathom:+4",
        "fathom:4x", "fathom:4.5",  "fathom:4097",  "fathom:99999999999999999999", "fathom: 4",
        "Fathom:48", "sparq",       "ds:",          "loki:abc",     "thumb:2",     "dense:",
        "oracle:1",  "full4:4",     "landmark:8",   "unknown",      "fathomklt:4", ":48",
        " thumb",    "thumb ",      "sparq:16:2",   "fathom-klt",   "fathom:0x10",
        "fathom:000000000000000000000000000000048", /* too long for name[32] */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int st = fathom_method_parse(bad[i], &m);
        CHECK(st == FATHOM_ERR_INVALID_ARG);
        if (st != FATHOM_ERR_INVALID_ARG) fprintf(stderr, "  accepted bad spec '%s'\n", bad[i]);
    }
    CHECK_STATUS(fathom_method_parse(NULL, &m), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_method_parse("thumb", NULL), FATHOM_ERR_INVALID_ARG);
}

static void test_parse_list(void) {
    fathom_method m[8];
    uint32_t n = 99;
    CHECK_OK(fathom_method_parse_list(" fathom:48, sparq:16 ,thumb,\tdense ", m, 8, &n));
    CHECK(n == 4);
    CHECK(m[0].kind == FATHOM_METHOD_FATHOM && m[0].param == 48 && !strcmp(m[0].name, "fathom:48"));
    CHECK(m[1].kind == FATHOM_METHOD_SPARQ && !strcmp(m[1].name, "sparq:16"));
    CHECK(m[2].kind == FATHOM_METHOD_THUMB && m[3].kind == FATHOM_METHOD_DENSE);
    CHECK_OK(fathom_method_parse_list("oracle", m, 1, &n));
    CHECK(n == 1 && m[0].kind == FATHOM_METHOD_ORACLE);

    const char *bad[] = {"", " ", "thumb,", ",thumb", "thumb,,dense", "thumb, ,dense",
                         "thumb,bogus", "sparq:0,thumb", "fathom:48,fathom-klt"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        n = 99;
        CHECK_STATUS(fathom_method_parse_list(bad[i], m, 8, &n), FATHOM_ERR_INVALID_ARG);
        CHECK(n == 0);
    }
    /* Cap: three items do not fit in two. */
    CHECK_STATUS(fathom_method_parse_list("thumb,dense,oracle", m, 2, &n), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_method_parse_list(NULL, m, 2, &n), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_method_parse_list("thumb", NULL, 2, &n), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_method_parse_list("thumb", m, 2, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_method_parse_list("thumb", m, 0, &n), FATHOM_ERR_INVALID_ARG);
    /* An item too long to be a spec. */
    CHECK_STATUS(fathom_method_parse_list("thumb,fathom:0000000000000000000000000048", m, 8, &n),
                 FATHOM_ERR_INVALID_ARG);
}

static double bits(const char *spec, uint32_t dim) {
    fathom_method m;
    if (fathom_method_parse(spec, &m) != FATHOM_OK) return -99;
    return fathom_method_fixed_bits(&m, dim);
}

static void test_fixed_bits(void) {
    /* The paper's bit counts at dim 128 (§1, §4, Tab. 2). */
    CHECK(bits("sparq:16", 128) == 68.0);
    CHECK(bits("sparq:32", 128) == 136.0);
    CHECK(bits("ds:32", 128) == 136.0);
    CHECK(bits("loki:32", 128) == 136.0);
    CHECK(bits("thumb", 128) == 288.0);
    CHECK(bits("landmark", 128) == 256.0);
    CHECK(bits("full4", 128) == 544.0);
    CHECK(bits("oracle", 128) == 2048.0);
    CHECK(bits("dense", 128) == 0.0);
    CHECK(bits("fathom:48", 128) == -1.0);
    CHECK(bits("fathom-klt:48", 128) == -1.0);
    CHECK(bits("fathom-centered:48", 128) == -1.0);
    /* Other dims; r not a multiple of 4 gives a fractional scale share. */
    CHECK(bits("thumb", 64) == 144.0);
    CHECK(bits("landmark", 64) == 128.0);
    CHECK(bits("sparq:10", 64) == 42.5);
    CHECK(bits("loki:64", 64) == 272.0);
    /* More channels than dim, a zero dim, no method: NaN. */
    CHECK(isnan(bits("sparq:129", 128)));
    CHECK(isnan(bits("thumb", 0)));
    CHECK(isnan(fathom_method_fixed_bits(NULL, 128)));
    fathom_method m = {.kind = (fathom_method_kind)99};
    CHECK(isnan(fathom_method_fixed_bits(&m, 128)));
}

int main(void) {
    test_parse();
    test_parse_list();
    test_fixed_bits();
    return check_summary("test_methods");
}

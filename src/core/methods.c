/* methods — method specs and their fixed byte accounting (§4).
 *
 * A spec is a name, optionally ":<decimal>" for the methods that take a
 * parameter (fathom:B, fathom-klt:B, fathom-centered:B, sparq:r, ds:c,
 * loki:r). Bits per token
 * follow the paper's one convention: code bits plus 16 bits of fp16 scale per
 * 64 tokens for every channel read, i.e. t + 1/4 bits per channel at depth t.
 *
 * Specs are exact: lowercase names, no spaces, a parameter of 1..4096 in
 * plain decimal digits on exactly the methods that take one. Lists trim
 * blanks around items; duplicates are allowed (the caller decides).
 */
#include "internal.h"

#include <math.h>
#include <string.h>

/* Parameters above this are rejected at parse time; fathom_method_check
 * checks the tighter limits that need dim (B <= 4*dim, r and c <= dim). */
#define METHOD_PARAM_MAX 4096u
#define METHOD_LIST_ITEM_MAX 31 /* fits fathom_method.name */

typedef struct method_spec {
    const char *name;
    fathom_method_kind kind;
    int has_param;
} method_spec;

static const method_spec method_specs[] = {
    {"fathom", FATHOM_METHOD_FATHOM, 1},   {"fathom-klt", FATHOM_METHOD_FATHOM_KLT, 1},
    {"sparq", FATHOM_METHOD_SPARQ, 1},     {"ds", FATHOM_METHOD_DS, 1},
    {"loki", FATHOM_METHOD_LOKI, 1},       {"thumb", FATHOM_METHOD_THUMB, 0},
    {"landmark", FATHOM_METHOD_LANDMARK, 0}, {"full4", FATHOM_METHOD_FULL4, 0},
    {"oracle", FATHOM_METHOD_ORACLE, 0},   {"dense", FATHOM_METHOD_DENSE, 0},
    {"fathom-centered", FATHOM_METHOD_FATHOM_CENTERED, 1},
};

/* Methods that plan per-query depths at a bit budget B. */
static int takes_budget(fathom_method_kind kind) {
    return kind == FATHOM_METHOD_FATHOM || kind == FATHOM_METHOD_FATHOM_KLT || kind == FATHOM_METHOD_FATHOM_CENTERED;
}

int fathom_method_parse(const char *spec, fathom_method *out) {
    FATHOM_CHECK_ARG(spec && out, "fathom_method_parse: NULL pointer");
    size_t len = strlen(spec);
    FATHOM_CHECK_ARG(len > 0, "fathom_method_parse: empty method spec");
    FATHOM_CHECK_ARG(len < sizeof out->name, "fathom_method_parse: spec '%.40s...' is too long",
                     spec);
    const char *colon = strchr(spec, ':');
    size_t name_len = colon ? (size_t)(colon - spec) : len;

    const method_spec *ms = NULL;
    for (size_t i = 0; i < sizeof method_specs / sizeof method_specs[0]; i++)
        if (strlen(method_specs[i].name) == name_len &&
            !memcmp(method_specs[i].name, spec, name_len))
            ms = &method_specs[i];
    FATHOM_CHECK_ARG(ms, "fathom_method_parse: unknown method '%.*s' (known: fathom:B, fathom-klt:B, "
                     "fathom-centered:B, sparq:r, ds:c, loki:r, thumb, landmark, full4, oracle, dense)",
                     (int)name_len, spec);

    uint32_t param = 0;
    if (ms->has_param) {
        FATHOM_CHECK_ARG(colon && colon[1], "fathom_method_parse: '%s' needs a parameter, e.g. %s:%s",
                         spec, ms->name, takes_budget(ms->kind) ? "48" : "16");
        for (const char *p = colon + 1; *p; p++) {
            FATHOM_CHECK_ARG(*p >= '0' && *p <= '9',
                             "fathom_method_parse: '%s': parameter is not a decimal number", spec);
            param = param * 10 + (uint32_t)(*p - '0');
            FATHOM_CHECK_ARG(param <= METHOD_PARAM_MAX,
                             "fathom_method_parse: '%s': parameter exceeds %u", spec,
                             METHOD_PARAM_MAX);
        }
        FATHOM_CHECK_ARG(param > 0, "fathom_method_parse: '%s': parameter must be > 0", spec);
    } else {
        FATHOM_CHECK_ARG(!colon, "fathom_method_parse: '%s': %s takes no parameter", spec, ms->name);
    }
    out->kind = ms->kind;
    out->param = param;
    memset(out->name, 0, sizeof out->name);
    memcpy(out->name, spec, len);
    return FATHOM_OK;
}

static int is_blank(char c) { return c == ' ' || c == '\t'; }

int fathom_method_parse_list(const char *list, fathom_method *out, uint32_t cap, uint32_t *count) {
    FATHOM_CHECK_ARG(list && out && count, "fathom_method_parse_list: NULL pointer");
    FATHOM_CHECK_ARG(cap > 0, "fathom_method_parse_list: cap is 0");
    *count = 0;
    uint32_t n = 0;
    const char *p = list;
    for (;;) {
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        const char *b = p, *e = end;
        while (b < e && is_blank(*b)) b++;
        while (e > b && is_blank(e[-1])) e--;
        FATHOM_CHECK_ARG(e > b, "fathom_method_parse_list: empty item %u in '%s'", n + 1, list);
        FATHOM_CHECK_ARG(n < cap, "fathom_method_parse_list: more than %u methods in '%s'", cap,
                         list);
        FATHOM_CHECK_ARG((size_t)(e - b) <= METHOD_LIST_ITEM_MAX,
                         "fathom_method_parse_list: item '%.*s' is too long", (int)(e - b), b);
        char item[METHOD_LIST_ITEM_MAX + 1];
        memcpy(item, b, (size_t)(e - b));
        item[e - b] = '\0';
        FATHOM_TRY(fathom_method_parse(item, &out[n]));
        n++;
        if (!*end) break;
        p = end + 1;
    }
    *count = n;
    return FATHOM_OK;
}

int fathom_method_check(const fathom_method *m, uint32_t dim) {
    FATHOM_CHECK_ARG(m, "fathom_method_check: method is NULL");
    FATHOM_CHECK_ARG(dim > 0, "fathom_method_check: dim is 0");
    FATHOM_CHECK_ARG((unsigned)m->kind <= FATHOM_METHOD_FATHOM_CENTERED,
                     "fathom_method_check: unknown method kind %d", (int)m->kind);
    switch (m->kind) {
    case FATHOM_METHOD_FATHOM:
    case FATHOM_METHOD_FATHOM_KLT:
    case FATHOM_METHOD_FATHOM_CENTERED:
        FATHOM_CHECK_ARG(m->param >= 1 && m->param <= FATHOM_MAX_DEPTH * dim,
                         "%s: the bit budget must be in [1, %u] at head dim %u", m->name, FATHOM_MAX_DEPTH * dim,
                         dim);
        break;
    case FATHOM_METHOD_SPARQ:
    case FATHOM_METHOD_DS:
    case FATHOM_METHOD_LOKI:
        FATHOM_CHECK_ARG(m->param >= 1 && m->param <= dim,
                         "%s: the channel count must be in [1, %u] at head dim %u", m->name, dim, dim);
        break;
    default: break;
    }
    return FATHOM_OK;
}

double fathom_method_fixed_bits(const fathom_method *method, uint32_t dim) {
    if (fathom_method_check(method, dim) < 0) return NAN;
    const double d = dim, scale_bits = 16.0 / FATHOM_BLOCK_TOKENS; /* per channel read */
    switch (method->kind) {
    case FATHOM_METHOD_FATHOM:
    case FATHOM_METHOD_FATHOM_KLT:
    case FATHOM_METHOD_FATHOM_CENTERED: return -1.0; /* depends on the plan */
    case FATHOM_METHOD_SPARQ:
    case FATHOM_METHOD_DS:
    case FATHOM_METHOD_LOKI: return method->param * (4.0 + scale_bits);
    case FATHOM_METHOD_THUMB: return d * (2.0 + scale_bits);
    case FATHOM_METHOD_LANDMARK: return 16.0 * d / FATHOM_LANDMARK_TOKENS; /* fp16 mean of 8 */
    case FATHOM_METHOD_FULL4: return d * (4.0 + scale_bits);
    case FATHOM_METHOD_ORACLE: return 16.0 * d; /* bf16 keys */
    case FATHOM_METHOD_DENSE: return 0.0;
    }
    fathom_fail(FATHOM_ERR_INVALID_ARG, "fathom_method_fixed_bits: unknown kind %d",
                (int)method->kind);
    return NAN;
}

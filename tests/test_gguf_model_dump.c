/* Helper of test_gguf_model.sh (run alone it skips):
 *   test_gguf_model_dump meta FILE             every kv as "key<TAB>type<TAB>value" lines
 *                                               (array elements as key[i]), then every
 *                                               tensor as "tensor<TAB>name<TAB>type<TAB>dims"
 *   test_gguf_model_dump dump FILE OUT NAME...  dequantize tensors, raw float32 to OUT/NAME.f32
 * Strings are printed with bytes outside printable ASCII (and \) as \xHH. */
#include "fathom_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const type_names[] = {"uint8", "int8",  "uint16", "int16",  "uint32",
                                         "int32", "float32", "bool", "string", "array",
                                         "uint64", "int64", "float64"};

static void print_escaped(const char *s, uint64_t len) {
    for (uint64_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c >= 0x7f || c == '\\') printf("\\x%02x", c);
        else putchar(c);
    }
}

static int print_value(const char *key, const fathom_gguf_value *v) {
    if (v->type == FATHOM_GGUF_ARRAY) {
        printf("%s\tarray\t%s\t%llu\n", key, type_names[v->elem_type], (unsigned long long)v->count);
        char sub[512];
        for (uint64_t i = 0; i < v->count; i++) {
            fathom_gguf_value e;
            if (fathom_gguf_array_get(v, i, &e) < 0) return 1;
            snprintf(sub, sizeof sub, "%s[%llu]", key, (unsigned long long)i);
            if (print_value(sub, &e)) return 1;
        }
        return 0;
    }
    printf("%s\t%s\t", key, type_names[v->type]);
    int64_t i64;
    uint64_t u64;
    double f;
    int b;
    const char *s;
    if (fathom_gguf_value_string(v, &s, &u64) == FATHOM_OK) print_escaped(s, u64);
    else if (fathom_gguf_value_bool(v, &b) == FATHOM_OK) printf("%d", b);
    else if (fathom_gguf_value_f64(v, &f) == FATHOM_OK) printf("%.9g", f);
    else if (fathom_gguf_value_u64(v, &u64) == FATHOM_OK) printf("%llu", (unsigned long long)u64);
    else if (fathom_gguf_value_i64(v, &i64) == FATHOM_OK) printf("%lld", (long long)i64);
    else return 1;
    putchar('\n');
    return 0;
}

static int meta(const fathom_gguf *g) {
    printf("version\t%u\nalignment\t%llu\ndata_offset\t%llu\n", fathom_gguf_version(g),
           (unsigned long long)fathom_gguf_alignment(g),
           (unsigned long long)fathom_gguf_data_offset(g));
    for (uint64_t i = 0; i < fathom_gguf_kv_count(g); i++) {
        const char *key;
        fathom_gguf_value v;
        if (fathom_gguf_kv_at(g, i, &key, &v) < 0 || print_value(key, &v)) return 1;
    }
    for (uint64_t i = 0; i < fathom_gguf_tensor_count(g); i++) {
        fathom_gguf_tensor_info t;
        if (fathom_gguf_tensor_at(g, i, &t) < 0) return 1;
        printf("tensor\t%s\t%s\t", t.name, fathom_ggml_type_name(t.type));
        for (uint32_t d = 0; d < t.n_dims; d++) printf(d ? ",%llu" : "%llu", (unsigned long long)t.dims[d]);
        printf("\t%llu\t%llu\n", (unsigned long long)t.offset, (unsigned long long)t.bytes);
    }
    return 0;
}

static int dump(const fathom_gguf *g, const char *dir, const char *name) {
    fathom_gguf_tensor_info t;
    if (fathom_gguf_tensor(g, name, &t) < 0) return 1;
    float *x = malloc(t.n_elements * sizeof *x);
    if (!x) return 1;
    int rc = 1;
    if (fathom_dequantize(t.type, t.data, t.bytes, t.n_elements, x) == FATHOM_OK) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s.f32", dir, name);
        FILE *f = fopen(path, "wb");
        if (f) {
            rc = fwrite(x, sizeof *x, t.n_elements, f) == t.n_elements ? 0 : 1;
            if (fclose(f) != 0) rc = 1;
        }
    }
    free(x);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        printf("test_gguf_model_dump: helper of test_gguf_model.sh; skipped when run alone\n");
        return 77;
    }
    fathom_gguf *g;
    if (fathom_gguf_open(&g, argv[2]) < 0) {
        fprintf(stderr, "%s\n", fathom_last_error());
        return 1;
    }
    int rc = 1;
    if (strcmp(argv[1], "meta") == 0) {
        rc = meta(g);
    } else if (strcmp(argv[1], "dump") == 0 && argc >= 4) {
        rc = 0;
        for (int i = 4; i < argc && rc == 0; i++) rc = dump(g, argv[3], argv[i]);
    }
    if (rc) fprintf(stderr, "test_gguf_model_dump %s failed: %s\n", argv[1], fathom_last_error());
    fathom_gguf_close(g);
    return rc;
}

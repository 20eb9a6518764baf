/* GGUF reader: small files written here byte by byte (v2 and v3, every value
 * type, nested string arrays, custom alignment, several tensors) read back
 * exactly; a corpus of malformed files, each rejected with FATHOM_ERR_FORMAT
 * and the message of the check it breaks; every bad argument. Malformed
 * images are parsed from exact-size heap copies, so ASan catches any read
 * past the end. */
#define _POSIX_C_SOURCE 200809L /* mkstemp */
#include "check.h"
#include "fathom_model.h"
#include "gguf_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- a byte buffer and GGUF encoders ------------------------------------ */

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) exit(2);
    }
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void put_le(buf *b, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) {
        uint8_t c = (uint8_t)(v >> (8 * i));
        put(b, &c, 1);
    }
}
static void put_u8(buf *b, uint8_t v) { put_le(b, v, 1); }
static void put_u32(buf *b, uint32_t v) { put_le(b, v, 4); }
static void put_u64(buf *b, uint64_t v) { put_le(b, v, 8); }
static void put_f32(buf *b, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    put_u32(b, u);
}
static void put_strn(buf *b, const char *s, size_t n) {
    put_u64(b, n);
    put(b, s, n);
}
static void put_str(buf *b, const char *s) { put_strn(b, s, strlen(s)); }
static void pad_to(buf *b, size_t align) {
    while (b->n % align) put_u8(b, 0);
}
static void header(buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    b->n = 0;
    put(b, "GGUF", 4);
    put_u32(b, version);
    put_u64(b, n_tensors);
    put_u64(b, n_kv);
}
static void kv_u32(buf *b, const char *key, uint32_t v) {
    put_str(b, key);
    put_u32(b, FATHOM_GGUF_UINT32);
    put_u32(b, v);
}
static void tensor_info(buf *b, const char *name, uint32_t n_dims, const uint64_t *dims,
                        uint32_t type, uint64_t offset) {
    put_str(b, name);
    put_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims && d < 5; d++) put_u64(b, dims[d]); /* callers give <= 5 */
    put_u32(b, type);
    put_u64(b, offset);
}

/* ---- the valid file ----------------------------------------------------- */

#define ALIGN 64
static const char *const nested[2][3] = {{"alpha", "", "gamma"}, {"d\n\x01" "e", NULL, NULL}};
static const uint64_t nested_len[2][3] = {{5, 0, 5}, {4, 0, 0}};
static const int32_t i32_array[3] = {-7, 0, 2147483647};
static const uint64_t u64_big = 0x8000000000000005ull;
static const int64_t i64_neg = -1099511627776ll; /* -2^40 */

typedef struct tensor_spec {
    const char *name;
    uint32_t type, n_dims;
    uint64_t dims[4];
    uint64_t n_elements, bytes;
} tensor_spec;

static const tensor_spec tensors[] = {
    {"weights.f32", FATHOM_GGML_TYPE_F32, 2, {3, 2, 1, 1}, 6, 24},
    {"emb.q8_0", FATHOM_GGML_TYPE_Q8_0, 2, {64, 2, 1, 1}, 128, 4 * 34},
    {"ffn.q4_1", FATHOM_GGML_TYPE_Q4_1, 4, {32, 1, 1, 2}, 64, 2 * 20},
    {"scalar", FATHOM_GGML_TYPE_F32, 0, {1, 1, 1, 1}, 1, 4},
    {"norm.f16", FATHOM_GGML_TYPE_F16, 1, {5, 1, 1, 1}, 5, 10},
};
#define N_TENSORS (sizeof tensors / sizeof tensors[0])
#define N_KV 19

static uint8_t data_byte(size_t t, size_t i) { return (uint8_t)(31 * t + 7 * i + 3); }

/* Every value type, a nested array of strings, alignment 64, five tensors;
 * the last tensor ends exactly at the end of the file. offsets[t] gets
 * each tensor's offset from the start of the file. */
static void build_valid(buf *b, uint32_t version, uint64_t *offsets) {
    header(b, version, N_TENSORS, N_KV);
    put_str(b, "general.architecture");
    put_u32(b, FATHOM_GGUF_STRING);
    put_str(b, "llama");
    put_str(b, "t.u8"), put_u32(b, FATHOM_GGUF_UINT8), put_u8(b, 200);
    put_str(b, "t.i8"), put_u32(b, FATHOM_GGUF_INT8), put_u8(b, (uint8_t)-5);
    put_str(b, "t.u16"), put_u32(b, FATHOM_GGUF_UINT16), put_le(b, 60000, 2);
    put_str(b, "t.i16"), put_u32(b, FATHOM_GGUF_INT16), put_le(b, (uint16_t)-30000, 2);
    put_str(b, "t.u32"), put_u32(b, FATHOM_GGUF_UINT32), put_u32(b, 4000000000u);
    put_str(b, "t.i32"), put_u32(b, FATHOM_GGUF_INT32), put_u32(b, (uint32_t)-2000000000);
    put_str(b, "t.f32"), put_u32(b, FATHOM_GGUF_FLOAT32), put_f32(b, -1.5f);
    put_str(b, "t.bool"), put_u32(b, FATHOM_GGUF_BOOL), put_u8(b, 1);
    put_str(b, "t.u64"), put_u32(b, FATHOM_GGUF_UINT64), put_u64(b, u64_big);
    put_str(b, "t.i64"), put_u32(b, FATHOM_GGUF_INT64), put_u64(b, (uint64_t)i64_neg);
    put_str(b, "t.f64"), put_u32(b, FATHOM_GGUF_FLOAT64);
    double f64 = -0.1;
    uint64_t u;
    memcpy(&u, &f64, 8);
    put_u64(b, u);
    put_str(b, "t.empty_string"), put_u32(b, FATHOM_GGUF_STRING), put_str(b, "");
    put_str(b, "t.i32s"), put_u32(b, FATHOM_GGUF_ARRAY), put_u32(b, FATHOM_GGUF_INT32);
    put_u64(b, 3);
    for (int i = 0; i < 3; i++) put_u32(b, (uint32_t)i32_array[i]);
    put_str(b, "t.bools"), put_u32(b, FATHOM_GGUF_ARRAY), put_u32(b, FATHOM_GGUF_BOOL);
    put_u64(b, 2), put_u8(b, 0), put_u8(b, 1);
    put_str(b, "t.strings"), put_u32(b, FATHOM_GGUF_ARRAY), put_u32(b, FATHOM_GGUF_STRING);
    put_u64(b, 2), put_str(b, "x"), put_str(b, "yz");
    /* [["alpha", "", "gamma"], ["d\n\x01e"]] */
    put_str(b, "t.nested"), put_u32(b, FATHOM_GGUF_ARRAY), put_u32(b, FATHOM_GGUF_ARRAY);
    put_u64(b, 2);
    put_u32(b, FATHOM_GGUF_STRING), put_u64(b, 3);
    for (int i = 0; i < 3; i++) put_strn(b, nested[0][i], nested_len[0][i]);
    put_u32(b, FATHOM_GGUF_STRING), put_u64(b, 1);
    put_strn(b, nested[1][0], nested_len[1][0]);
    put_str(b, "t.empty_array"), put_u32(b, FATHOM_GGUF_ARRAY), put_u32(b, FATHOM_GGUF_FLOAT64);
    put_u64(b, 0);
    kv_u32(b, "general.alignment", ALIGN);

    uint64_t rel = 0, rel_offsets[N_TENSORS];
    for (size_t t = 0; t < N_TENSORS; t++) {
        rel_offsets[t] = rel;
        tensor_info(b, tensors[t].name, tensors[t].n_dims, tensors[t].dims, tensors[t].type, rel);
        rel += (tensors[t].bytes + ALIGN - 1) / ALIGN * ALIGN;
    }
    pad_to(b, ALIGN);
    const size_t data = b->n;
    for (size_t t = 0; t < N_TENSORS; t++) {
        while (b->n < data + rel_offsets[t]) put_u8(b, 0xAA);
        offsets[t] = b->n;
        for (size_t i = 0; i < tensors[t].bytes; i++) put_u8(b, data_byte(t, i));
    }
}

/* Parse an exact-size heap copy of p[0..n) (ASan sees any over-read). On
 * success *copy must outlive the handle: release both with close_copy(). */
static fathom_gguf *open_copy(const uint8_t *p, size_t n, int *status, uint8_t **copy) {
    *copy = malloc(n ? n : 1);
    if (n) memcpy(*copy, p, n);
    fathom_gguf *g = NULL;
    *status = fathom_gguf_open_memory(&g, *copy, n);
    if (*status < 0) {
        CHECK(g == NULL);
        free(*copy);
        *copy = NULL;
        return NULL;
    }
    return g;
}

static void close_copy(fathom_gguf *g, uint8_t *copy) {
    fathom_gguf_close(g);
    free(copy);
}

/* Read back every value and tensor of build_valid(). */
static void check_valid(const fathom_gguf *g, uint32_t version, const uint8_t *image,
                        const uint64_t *offsets) {
    fathom_gguf_value v, e, e2;
    const char *s, *key;
    uint64_t len, u64;
    uint32_t u32;
    int32_t i32;
    int64_t i64;
    float f32;
    double f64;
    int b;

    CHECK(fathom_gguf_version(g) == version);
    CHECK(fathom_gguf_alignment(g) == ALIGN);
    CHECK(fathom_gguf_kv_count(g) == N_KV);
    CHECK(fathom_gguf_tensor_count(g) == N_TENSORS);
    CHECK(fathom_gguf_data_offset(g) == offsets[0]);
    CHECK(fathom_gguf_data_offset(g) % ALIGN == 0);

    /* keys in file order */
    CHECK_OK(fathom_gguf_kv_at(g, 0, &key, &v));
    CHECK(strcmp(key, "general.architecture") == 0 && v.type == FATHOM_GGUF_STRING);
    CHECK_OK(fathom_gguf_kv_at(g, N_KV - 1, &key, NULL));
    CHECK(strcmp(key, "general.alignment") == 0);
    CHECK(fathom_gguf_find_key(g, "t.u8") == 1);
    CHECK(fathom_gguf_find_key(g, "general.alignment") == N_KV - 1);
    CHECK(fathom_gguf_find_key(g, "t.u") == -1);
    CHECK(fathom_gguf_find_key(g, "t.u80") == -1);
    CHECK(fathom_gguf_find_key(g, "") == -1);

    CHECK_OK(fathom_gguf_get_string(g, "general.architecture", &s, &len));
    CHECK(strcmp(s, "llama") == 0 && len == 5);
    CHECK_OK(fathom_gguf_get_string(g, "t.empty_string", &s, NULL));
    CHECK(strcmp(s, "") == 0);

    /* integers: exact type, widening, and range checks */
    CHECK_OK(fathom_gguf_get_u32(g, "t.u8", &u32));
    CHECK(u32 == 200);
    CHECK_OK(fathom_gguf_get(g, "t.u8", &v));
    CHECK(v.type == FATHOM_GGUF_UINT8);
    CHECK_OK(fathom_gguf_value_i32(&v, &i32));
    CHECK(i32 == 200);
    CHECK_OK(fathom_gguf_get_i32(g, "t.i8", &i32));
    CHECK(i32 == -5);
    CHECK_STATUS(fathom_gguf_get_u32(g, "t.i8", &u32), FATHOM_ERR_FORMAT); /* negative */
    CHECK_STATUS(fathom_gguf_get_u64(g, "t.i8", &u64), FATHOM_ERR_FORMAT);
    CHECK_OK(fathom_gguf_get_u32(g, "t.u16", &u32));
    CHECK(u32 == 60000);
    CHECK_OK(fathom_gguf_get_i32(g, "t.i16", &i32));
    CHECK(i32 == -30000);
    CHECK_OK(fathom_gguf_get_u32(g, "t.u32", &u32));
    CHECK(u32 == 4000000000u);
    CHECK_STATUS(fathom_gguf_get_i32(g, "t.u32", &i32), FATHOM_ERR_FORMAT); /* too big */
    CHECK(strstr(fathom_last_error(), "t.u32") != NULL);
    CHECK_OK(fathom_gguf_get_i32(g, "t.i32", &i32));
    CHECK(i32 == -2000000000);
    CHECK_OK(fathom_gguf_get_u64(g, "t.u64", &u64));
    CHECK(u64 == u64_big);
    CHECK_STATUS(fathom_gguf_get_u32(g, "t.u64", &u32), FATHOM_ERR_FORMAT);
    CHECK_OK(fathom_gguf_get(g, "t.u64", &v));
    CHECK_STATUS(fathom_gguf_value_i64(&v, &i64), FATHOM_ERR_FORMAT); /* > INT64_MAX */
    CHECK_OK(fathom_gguf_get(g, "t.i64", &v));
    CHECK_OK(fathom_gguf_value_i64(&v, &i64));
    CHECK(i64 == i64_neg);
    CHECK_STATUS(fathom_gguf_value_i32(&v, &i32), FATHOM_ERR_FORMAT);
    CHECK_STATUS(fathom_gguf_value_u64(&v, &u64), FATHOM_ERR_FORMAT);

    /* floats, bool, strings: no conversions across kinds */
    CHECK_OK(fathom_gguf_get_f32(g, "t.f32", &f32));
    CHECK(f32 == -1.5f);
    CHECK_OK(fathom_gguf_get(g, "t.f64", &v));
    CHECK_OK(fathom_gguf_value_f64(&v, &f64));
    CHECK(f64 == -0.1);
    CHECK_OK(fathom_gguf_value_f32(&v, &f32));
    CHECK(f32 == (float)-0.1);
    CHECK_STATUS(fathom_gguf_get_f32(g, "t.u8", &f32), FATHOM_ERR_FORMAT);
    CHECK_STATUS(fathom_gguf_get_u32(g, "t.f32", &u32), FATHOM_ERR_FORMAT);
    CHECK_OK(fathom_gguf_get_bool(g, "t.bool", &b));
    CHECK(b == 1);
    CHECK_STATUS(fathom_gguf_get_bool(g, "t.u8", &b), FATHOM_ERR_FORMAT);
    CHECK_STATUS(fathom_gguf_get_u32(g, "t.bool", &u32), FATHOM_ERR_FORMAT);
    CHECK_STATUS(fathom_gguf_get_string(g, "t.u8", &s, &len), FATHOM_ERR_FORMAT);
    CHECK_STATUS(fathom_gguf_get_u32(g, "general.architecture", &u32), FATHOM_ERR_FORMAT);
    CHECK_STATUS(fathom_gguf_get_u32(g, "no.such.key", &u32), FATHOM_ERR_FORMAT);
    CHECK(strstr(fathom_last_error(), "no.such.key") != NULL);
    CHECK_STATUS(fathom_gguf_get(g, "no.such.key", &v), FATHOM_ERR_FORMAT);

    /* arrays */
    CHECK_OK(fathom_gguf_get_array(g, "t.i32s", FATHOM_GGUF_INT32, &v));
    CHECK(v.count == 3 && v.elem_type == FATHOM_GGUF_INT32);
    for (uint64_t i = 0; i < 3; i++) {
        CHECK_OK(fathom_gguf_array_get(&v, i, &e));
        CHECK(e.type == FATHOM_GGUF_INT32);
        CHECK_OK(fathom_gguf_value_i32(&e, &i32));
        CHECK(i32 == i32_array[i]);
    }
    CHECK_STATUS(fathom_gguf_array_get(&v, 3, &e), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_get_array(g, "t.i32s", FATHOM_GGUF_UINT32, &v), FATHOM_ERR_FORMAT);
    CHECK_STATUS(fathom_gguf_get_array(g, "t.u8", FATHOM_GGUF_UINT8, &v), FATHOM_ERR_FORMAT);
    CHECK_OK(fathom_gguf_get(g, "t.i32s", &v));
    CHECK_STATUS(fathom_gguf_value_i32(&v, &i32), FATHOM_ERR_FORMAT); /* an array is no scalar */
    CHECK_OK(fathom_gguf_get_array(g, "t.bools", FATHOM_GGUF_BOOL, &v));
    CHECK_OK(fathom_gguf_array_get(&v, 0, &e));
    CHECK_OK(fathom_gguf_value_bool(&e, &b));
    CHECK(b == 0);
    CHECK_OK(fathom_gguf_array_get(&v, 1, &e));
    CHECK_OK(fathom_gguf_value_bool(&e, &b));
    CHECK(b == 1);
    CHECK_OK(fathom_gguf_get_array(g, "t.strings", FATHOM_GGUF_STRING, &v));
    CHECK(v.count == 2);
    CHECK_OK(fathom_gguf_array_get(&v, 1, &e));
    CHECK_OK(fathom_gguf_value_string(&e, &s, &len));
    CHECK(len == 2 && strcmp(s, "yz") == 0);
    CHECK_OK(fathom_gguf_get_array(g, "t.empty_array", FATHOM_GGUF_FLOAT64, &v));
    CHECK(v.count == 0);
    CHECK_STATUS(fathom_gguf_array_get(&v, 0, &e), FATHOM_ERR_INVALID_ARG);

    CHECK_OK(fathom_gguf_get_array(g, "t.nested", FATHOM_GGUF_ARRAY, &v));
    CHECK(v.count == 2);
    for (uint64_t i = 0; i < 2; i++) {
        CHECK_OK(fathom_gguf_array_get(&v, i, &e));
        CHECK(e.type == FATHOM_GGUF_ARRAY && e.elem_type == FATHOM_GGUF_STRING);
        CHECK(e.count == (i == 0 ? 3u : 1u));
        for (uint64_t j = 0; j < e.count; j++) {
            CHECK_OK(fathom_gguf_array_get(&e, j, &e2));
            CHECK_OK(fathom_gguf_value_string(&e2, &s, &len));
            CHECK(len == nested_len[i][j] && memcmp(s, nested[i][j], len) == 0 && s[len] == '\0');
        }
    }
    CHECK_OK(fathom_gguf_get_u32(g, "general.alignment", &u32));
    CHECK(u32 == ALIGN);

    /* tensors: infos, data pointers into the image, lookups */
    for (size_t t = 0; t < N_TENSORS; t++) {
        fathom_gguf_tensor_info info;
        CHECK_OK(fathom_gguf_tensor_at(g, t, &info));
        CHECK(strcmp(info.name, tensors[t].name) == 0);
        CHECK(info.type == (fathom_ggml_type)tensors[t].type);
        CHECK(info.n_dims == tensors[t].n_dims);
        CHECK(memcmp(info.dims, tensors[t].dims, sizeof info.dims) == 0);
        CHECK(info.n_elements == tensors[t].n_elements);
        CHECK(info.bytes == tensors[t].bytes);
        CHECK(info.offset == offsets[t] && info.offset % ALIGN == 0);
        if (image) CHECK((const uint8_t *)info.data == image + offsets[t]);
        int same = 1;
        for (size_t i = 0; i < info.bytes; i++)
            same &= ((const uint8_t *)info.data)[i] == data_byte(t, i);
        CHECK(same);
        CHECK(fathom_gguf_find_tensor(g, tensors[t].name) == (int64_t)t);
        fathom_gguf_tensor_info by_name;
        CHECK_OK(fathom_gguf_tensor(g, tensors[t].name, &by_name));
        CHECK(by_name.data == info.data && by_name.offset == info.offset);
    }
    fathom_gguf_tensor_info info;
    CHECK(fathom_gguf_find_tensor(g, "weights") == -1);
    CHECK_STATUS(fathom_gguf_tensor(g, "weights", &info), FATHOM_ERR_FORMAT);
    CHECK_STATUS(fathom_gguf_tensor_at(g, N_TENSORS, &info), FATHOM_ERR_INVALID_ARG);

    /* the f32 tensor's values are its bytes, little-endian */
    CHECK_OK(fathom_gguf_tensor(g, "weights.f32", &info));
    float w[6];
    CHECK_OK(fathom_dequantize(info.type, info.data, info.bytes, info.n_elements, w));
    uint32_t bits;
    memcpy(&bits, &w[5], 4);
    CHECK(bits == ((uint32_t)data_byte(0, 20) | (uint32_t)data_byte(0, 21) << 8 |
                   (uint32_t)data_byte(0, 22) << 16 | (uint32_t)data_byte(0, 23) << 24));
}

/* Open any image, then read every value and dequantize every tensor, as the
 * fuzz target does: must never crash, and only succeed or say FORMAT. */
static int touch_all(const fathom_gguf *g) {
    int bad = 0;
    for (uint64_t i = 0; i < fathom_gguf_kv_count(g); i++) {
        fathom_gguf_value v, e;
        const char *key;
        bad |= fathom_gguf_kv_at(g, i, &key, &v) != FATHOM_OK;
        bad |= fathom_gguf_find_key(g, key) != (int64_t)i;
        if (v.type == FATHOM_GGUF_ARRAY)
            for (uint64_t j = 0; j < v.count && j < 64; j++)
                bad |= fathom_gguf_array_get(&v, j, &e) != FATHOM_OK;
    }
    for (uint64_t i = 0; i < fathom_gguf_tensor_count(g); i++) {
        fathom_gguf_tensor_info t;
        bad |= fathom_gguf_tensor_at(g, i, &t) != FATHOM_OK;
        if (t.n_elements > 4096) continue;
        float out[4096];
        int s = fathom_dequantize(t.type, t.data, t.bytes, t.n_elements, out);
        bad |= s != FATHOM_OK && s != FATHOM_ERR_UNSUPPORTED;
    }
    return bad;
}

static void test_valid(uint32_t version) {
    buf b = {0};
    uint64_t offsets[N_TENSORS];
    build_valid(&b, version, offsets);
    CHECK(offsets[N_TENSORS - 1] + tensors[N_TENSORS - 1].bytes == b.n);

    int status;
    uint8_t *copy;
    fathom_gguf *g = open_copy(b.p, b.n, &status, &copy);
    CHECK_OK(status);
    if (g) {
        check_valid(g, version, copy, offsets);
        CHECK(touch_all(g) == 0);
        CHECK(fathom_gguf_file_size(g) == b.n);
        close_copy(g, copy);
    }

    /* the same bytes through a file and the mapping */
    char path[] = "/tmp/fathom_test_gguf_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK(write(fd, b.p, b.n) == (ssize_t)b.n);
        close(fd);
        CHECK_OK(fathom_gguf_open(&g, path));
        if (g) {
            fathom_gguf_tensor_info t;
            CHECK_OK(fathom_gguf_tensor_at(g, 0, &t));
            check_valid(g, version, (const uint8_t *)t.data - offsets[0], offsets);
            fathom_gguf_close(g);
        }
        /* truncated on disk */
        CHECK(truncate(path, (off_t)(b.n - 1)) == 0);
        CHECK_STATUS(fathom_gguf_open(&g, path), FATHOM_ERR_FORMAT);
        CHECK(g == NULL);
        CHECK(strstr(fathom_last_error(), path) != NULL);
        CHECK(truncate(path, 0) == 0);
        CHECK_STATUS(fathom_gguf_open(&g, path), FATHOM_ERR_FORMAT);
        unlink(path);
    }

    /* every proper prefix is malformed */
    int prefixes_ok = 1;
    for (size_t n = 0; n < b.n; n++) {
        fathom_gguf *p = open_copy(b.p, n, &status, &copy);
        if (status != FATHOM_ERR_FORMAT) {
            fprintf(stderr, "prefix of %zu bytes: status %d\n", n, status);
            prefixes_ok = 0;
        }
        if (p) close_copy(p, copy);
    }
    CHECK(prefixes_ok);

    /* single-byte corruptions anywhere: FORMAT or a file that reads cleanly */
    int mutants_ok = 1, accepted = 0;
    const uint8_t flips[] = {0xff, 0x80, 0x01, 0x10};
    for (size_t i = 0; i < b.n; i++) {
        for (size_t f = 0; f < sizeof flips; f++) {
            b.p[i] ^= flips[f];
            fathom_gguf *m = open_copy(b.p, b.n, &status, &copy);
            if (status == FATHOM_OK) {
                accepted++;
                mutants_ok &= touch_all(m) == 0;
                close_copy(m, copy);
            } else {
                mutants_ok &= status == FATHOM_ERR_FORMAT;
            }
            b.p[i] ^= flips[f];
        }
    }
    CHECK(mutants_ok);
    CHECK(accepted > 0); /* flips inside tensor data keep the file valid */
    free(b.p);
}

/* ---- minimal files ------------------------------------------------------ */

static void test_minimal(void) {
    buf b = {0};
    int status;
    uint8_t *copy;
    header(&b, 3, 0, 0); /* 24 bytes: no metadata, no tensors, no padding */
    fathom_gguf *g = open_copy(b.p, b.n, &status, &copy);
    CHECK_OK(status);
    CHECK(fathom_gguf_kv_count(g) == 0 && fathom_gguf_tensor_count(g) == 0);
    CHECK(fathom_gguf_alignment(g) == FATHOM_GGUF_DEFAULT_ALIGNMENT);
    CHECK(fathom_gguf_data_offset(g) == 32);
    CHECK(fathom_gguf_find_key(g, "x") == -1 && fathom_gguf_find_tensor(g, "x") == -1);
    if (g) close_copy(g, copy);

    /* default alignment 32: one tensor after 32-byte padding */
    header(&b, 2, 1, 0);
    const uint64_t dims[1] = {2};
    tensor_info(&b, "t", 1, dims, FATHOM_GGML_TYPE_F32, 0);
    pad_to(&b, 32);
    const size_t data = b.n;
    put_f32(&b, 3.0f), put_f32(&b, -4.0f);
    g = open_copy(b.p, b.n, &status, &copy);
    CHECK_OK(status);
    fathom_gguf_tensor_info t;
    CHECK_OK(fathom_gguf_tensor_at(g, 0, &t));
    CHECK(fathom_gguf_version(g) == 2);
    CHECK(t.offset == data && data % 32 == 0 && t.bytes == 8 && t.n_dims == 1);
    float x[2];
    CHECK_OK(fathom_dequantize(t.type, t.data, t.bytes, 2, x));
    CHECK(x[0] == 3.0f && x[1] == -4.0f);
    CHECK((const uint8_t *)t.data == copy + data);
    if (g) close_copy(g, copy);
    free(b.p);
}

/* ---- the malformed corpus ----------------------------------------------- */

static int corpus_ok = 1;

static void expect_format(const buf *b, const char *case_name, const char *message) {
    int status;
    uint8_t *copy;
    fathom_gguf *g = open_copy(b->p, b->n, &status, &copy);
    if (status != FATHOM_ERR_FORMAT || !strstr(fathom_last_error(), message)) {
        fprintf(stderr, "malformed case \"%s\": status %d, message \"%s\", expected \"%s\"\n",
                case_name, status, fathom_last_error(), message);
        corpus_ok = 0;
        check_failed_++;
    } else {
        check_passed_++;
    }
    if (g) close_copy(g, copy);
}

/* One tensor of type/dims at offset, after kvs none, followed by `data` bytes. */
static void one_tensor(buf *b, const char *name, uint32_t n_dims, const uint64_t *dims,
                       uint32_t type, uint64_t offset, size_t data) {
    header(b, 3, 1, 0);
    tensor_info(b, name, n_dims, dims, type, offset);
    pad_to(b, 32);
    for (size_t i = 0; i < data; i++) put_u8(b, 0);
}

static void test_malformed(void) {
    buf b = {0};
    uint64_t dims[5] = {32, 2, 1, 1, 1};

    header(&b, 3, 0, 0);
    memcpy(b.p, "GGUG", 4);
    expect_format(&b, "bad magic", "bad magic");
    header(&b, 3, 0, 0);
    memcpy(b.p, "FUGG", 4);
    expect_format(&b, "reversed magic", "bad magic");
    header(&b, 1, 0, 0);
    expect_format(&b, "version 1", "unsupported version 1");
    header(&b, 4, 0, 0);
    expect_format(&b, "version 4", "unsupported version 4");
    header(&b, 0x03000000u, 0, 0);
    expect_format(&b, "big-endian version", "unsupported version");

    header(&b, 3, 0, UINT64_MAX);
    expect_format(&b, "kv count 2^64-1", "kv entries cannot fit");
    header(&b, 3, 0, 2); /* two entries promised, one present */
    put_str(&b, "a"), put_u32(&b, FATHOM_GGUF_STRING), put_str(&b, "a string of 28+ bytes .....");
    expect_format(&b, "kv count one too many", "truncated");
    header(&b, 3, 1ull << 63, 0);
    expect_format(&b, "tensor count 2^63", "tensors cannot fit");
    header(&b, 3, 1000, 0);
    put_u64(&b, 0), put_u64(&b, 0);
    expect_format(&b, "tensor count 1000 in 40 bytes", "tensors cannot fit");

    /* strings */
    header(&b, 3, 0, 1);
    put_u64(&b, UINT64_MAX);
    put(&b, "abcdefgh", 8);
    expect_format(&b, "key length 2^64-1", "truncated");
    header(&b, 3, 0, 1);
    put_u64(&b, 100);
    put(&b, "abcdefgh", 8);
    put_u32(&b, FATHOM_GGUF_UINT8), put_u8(&b, 0);
    expect_format(&b, "key length past the end", "truncated");
    header(&b, 3, 0, 1);
    put_str(&b, "k"), put_u32(&b, FATHOM_GGUF_STRING), put_u64(&b, (1ull << 63) + 3);
    put(&b, "xyz", 3);
    expect_format(&b, "string value length 2^63+3", "truncated");
    header(&b, 3, 0, 1);
    put_str(&b, ""), put_u32(&b, FATHOM_GGUF_UINT8), put_u8(&b, 0), put_u64(&b, 0);
    expect_format(&b, "empty key", "empty key");
    header(&b, 3, 0, 1);
    put_strn(&b, "a\0b", 3), put_u32(&b, FATHOM_GGUF_UINT8), put_u8(&b, 0), put_u64(&b, 0);
    expect_format(&b, "NUL in a key", "contains a NUL");
    /* a string value read by C callers as "llama" */
    header(&b, 3, 0, 1);
    put_str(&b, "general.architecture"), put_u32(&b, FATHOM_GGUF_STRING);
    put_strn(&b, "llama\0evil", 10), put_u64(&b, 0);
    expect_format(&b, "NUL in a string value", "a string at byte 64 contains a NUL byte (at byte 69)");
    header(&b, 3, 0, 1);
    put_str(&b, "k"), put_u32(&b, FATHOM_GGUF_ARRAY), put_u32(&b, FATHOM_GGUF_STRING), put_u64(&b, 2);
    put_str(&b, "ok"), put_strn(&b, "x\0", 2), put_u64(&b, 0);
    expect_format(&b, "NUL in a string array element", "contains a NUL byte");

    /* value types */
    header(&b, 3, 0, 1);
    put_str(&b, "k"), put_u32(&b, 13), put_u64(&b, 0);
    expect_format(&b, "value type 13", "bad value type 13");
    header(&b, 3, 0, 1);
    put_str(&b, "k"), put_u32(&b, 0xffffffffu), put_u64(&b, 0);
    expect_format(&b, "value type 2^32-1", "bad value type");
    header(&b, 3, 0, 1);
    put_str(&b, "k"), put_u32(&b, FATHOM_GGUF_BOOL), put_u8(&b, 2);
    expect_format(&b, "bool 2", "bool of value 2");
    header(&b, 3, 0, 1);
    put_str(&b, "k"), put_u32(&b, FATHOM_GGUF_ARRAY), put_u32(&b, FATHOM_GGUF_BOOL);
    put_u64(&b, 3), put_u8(&b, 0), put_u8(&b, 1), put_u8(&b, 255);
    expect_format(&b, "bool 255 in an array", "bool of value 255");

    /* arrays */
    header(&b, 3, 0, 1);
    put_str(&b, "k"), put_u32(&b, FATHOM_GGUF_ARRAY), put_u32(&b, 13), put_u64(&b, 0);
    expect_format(&b, "array element type 13", "bad array element type 13");
    header(&b, 3, 0, 1);
    put_str(&b, "k"), put_u32(&b, FATHOM_GGUF_ARRAY), put_u32(&b, FATHOM_GGUF_UINT64);
    put_u64(&b, (1ull << 61) + 1), put_u64(&b, 0);
    expect_format(&b, "array bytes overflow", "overflows");
    header(&b, 3, 0, 1);
    put_str(&b, "k"), put_u32(&b, FATHOM_GGUF_ARRAY), put_u32(&b, FATHOM_GGUF_UINT32);
    put_u64(&b, 1ull << 40), put_u32(&b, 0);
    expect_format(&b, "array count 2^40 of u32", "truncated");
    header(&b, 3, 0, 1);
    put_str(&b, "k"), put_u32(&b, FATHOM_GGUF_ARRAY), put_u32(&b, FATHOM_GGUF_STRING);
    put_u64(&b, UINT64_MAX), put_str(&b, "a");
    expect_format(&b, "string array count 2^64-1", "exceeds");
    header(&b, 3, 0, 1);
    put_str(&b, "k"), put_u32(&b, FATHOM_GGUF_ARRAY), put_u32(&b, FATHOM_GGUF_STRING);
    put_u64(&b, 2), put_str(&b, "a"), put_u64(&b, 100), put(&b, "bcd", 3);
    expect_format(&b, "string in an array too long", "truncated");
    header(&b, 3, 0, 1);
    put_str(&b, "k"), put_u32(&b, FATHOM_GGUF_ARRAY), put_u32(&b, FATHOM_GGUF_ARRAY);
    put_u64(&b, 1ull << 60);
    for (int i = 0; i < 4; i++) put_u32(&b, FATHOM_GGUF_UINT8), put_u64(&b, 0);
    expect_format(&b, "array-of-arrays count 2^60", "exceeds");
    /* nesting deeper than the limit: [[[[...]]]] */
    header(&b, 3, 0, 1);
    put_str(&b, "k"), put_u32(&b, FATHOM_GGUF_ARRAY);
    for (int d = 0; d < FATHOM_GGUF_MAX_NESTING + 1; d++) put_u32(&b, FATHOM_GGUF_ARRAY), put_u64(&b, 1);
    put_u32(&b, FATHOM_GGUF_UINT8), put_u64(&b, 0);
    expect_format(&b, "arrays nested too deep", "nested deeper");

    /* duplicates */
    header(&b, 3, 0, 3);
    kv_u32(&b, "a.b", 1), kv_u32(&b, "a.c", 2), kv_u32(&b, "a.b", 3);
    expect_format(&b, "duplicate key", "duplicate key \"a.b\"");
    header(&b, 3, 2, 0);
    tensor_info(&b, "w", 1, dims, FATHOM_GGML_TYPE_F32, 0);
    tensor_info(&b, "w", 1, dims, FATHOM_GGML_TYPE_F32, 128);
    pad_to(&b, 32);
    for (int i = 0; i < 256; i++) put_u8(&b, 0);
    expect_format(&b, "duplicate tensor name", "duplicate tensor name \"w\"");

    /* alignment key */
    header(&b, 3, 0, 1);
    kv_u32(&b, "general.alignment", 0);
    expect_format(&b, "alignment 0", "power of two");
    header(&b, 3, 0, 1);
    kv_u32(&b, "general.alignment", 48);
    expect_format(&b, "alignment 48", "power of two");
    header(&b, 3, 0, 1);
    put_str(&b, "general.alignment"), put_u32(&b, FATHOM_GGUF_STRING), put_str(&b, "32");
    expect_format(&b, "alignment as a string", "power of two");
    header(&b, 3, 0, 1);
    put_str(&b, "general.alignment"), put_u32(&b, FATHOM_GGUF_INT32), put_u32(&b, (uint32_t)-32);
    expect_format(&b, "alignment -32", "power of two");

    /* tensor infos */
    one_tensor(&b, "", 1, dims, FATHOM_GGML_TYPE_F32, 0, 128);
    expect_format(&b, "empty tensor name", "empty tensor name");
    one_tensor(&b, "t", 2, dims, FATHOM_GGML_TYPE_F32, 0, 512);
    b.p[24 + 8] = 0; /* the name "t" becomes "\0" */
    expect_format(&b, "NUL in a tensor name", "contains a NUL");
    one_tensor(&b, "t", 5, dims, FATHOM_GGML_TYPE_F32, 0, 128);
    expect_format(&b, "n_dims 5", "5 dimensions");
    one_tensor(&b, "t", 0xffffffffu, dims, FATHOM_GGML_TYPE_F32, 0, 128);
    expect_format(&b, "n_dims 2^32-1", "dimensions (max 4)");
    const uint64_t overflow2[2] = {1ull << 32, 1ull << 32};
    one_tensor(&b, "t", 2, overflow2, FATHOM_GGML_TYPE_F32, 0, 128);
    expect_format(&b, "dims product 2^64", "dimensions overflow");
    const uint64_t overflow4[4] = {1ull << 16, 1ull << 16, 1ull << 16, 1ull << 15};
    one_tensor(&b, "t", 4, overflow4, FATHOM_GGML_TYPE_F32, 0, 128);
    expect_format(&b, "dims product 2^63", "dimensions overflow");
    const uint64_t big1[1] = {1ull << 63};
    one_tensor(&b, "t", 1, big1, FATHOM_GGML_TYPE_F32, 0, 128);
    expect_format(&b, "dim 2^63", "dimensions overflow");
    const uint64_t bytes_overflow[1] = {1ull << 62};
    one_tensor(&b, "t", 1, bytes_overflow, FATHOM_GGML_TYPE_F32, 0, 128);
    expect_format(&b, "2^62 f32 (bytes overflow)", "size overflows");
    const uint64_t big2[2] = {1ull << 20, 1ull << 20};
    one_tensor(&b, "t", 2, big2, FATHOM_GGML_TYPE_F32, 0, 128);
    expect_format(&b, "4 TiB tensor in a small file", "extends past the end");
    const uint32_t bad_types[] = {4, 5, 31, 33, 36, 38, FATHOM_GGML_TYPE_COUNT, 1000, 0xffffffffu};
    for (size_t i = 0; i < sizeof bad_types / sizeof bad_types[0]; i++) {
        one_tensor(&b, "t", 2, dims, bad_types[i], 0, 4096);
        expect_format(&b, "unknown ggml type", "unknown ggml type");
    }
    const uint64_t row16[2] = {16, 2};
    one_tensor(&b, "t", 2, row16, FATHOM_GGML_TYPE_Q8_0, 0, 128);
    expect_format(&b, "q8_0 row of 16", "not a multiple of the q8_0 block of 32");
    const uint64_t row300[1] = {300};
    one_tensor(&b, "t", 1, row300, FATHOM_GGML_TYPE_Q4_K, 0, 4096);
    expect_format(&b, "q4_k row of 300", "block of 256");

    /* offsets and the data section */
    one_tensor(&b, "t", 2, dims, FATHOM_GGML_TYPE_F32, 4, 512);
    expect_format(&b, "offset not aligned", "not a multiple of the alignment");
    one_tensor(&b, "t", 2, dims, FATHOM_GGML_TYPE_F32, 1ull << 40, 512);
    expect_format(&b, "offset past the end", "extends past the end");
    one_tensor(&b, "t", 2, dims, FATHOM_GGML_TYPE_F32, UINT64_MAX - 31, 512);
    expect_format(&b, "offset + data offset overflows", "extends past the end");
    one_tensor(&b, "t", 2, dims, FATHOM_GGML_TYPE_F32, 0, 255); /* needs 256 bytes */
    expect_format(&b, "data one byte short", "extends past the end");
    one_tensor(&b, "t", 2, dims, FATHOM_GGML_TYPE_F32, 256, 300); /* 256..512 > 300 */
    expect_format(&b, "tensor overlapping the end of file", "extends past the end");
    header(&b, 3, 1, 0);
    tensor_info(&b, "t", 1, dims, FATHOM_GGML_TYPE_F32, 0); /* no padding, no data */
    expect_format(&b, "data section past the end", "past the end");

    header(&b, 3, 3, 0);
    tensor_info(&b, "a", 2, dims, FATHOM_GGML_TYPE_F32, 0);   /* bytes [0, 256) */
    tensor_info(&b, "b", 2, dims, FATHOM_GGML_TYPE_F32, 512); /* [512, 768) */
    tensor_info(&b, "c", 2, dims, FATHOM_GGML_TYPE_F32, 224); /* [224, 480): overlaps a */
    pad_to(&b, 32);
    for (int i = 0; i < 768; i++) put_u8(&b, 0);
    expect_format(&b, "overlapping tensors", "overlap");
    /* the same three tensors apart are fine */
    header(&b, 3, 3, 0);
    tensor_info(&b, "a", 2, dims, FATHOM_GGML_TYPE_F32, 0);
    tensor_info(&b, "b", 2, dims, FATHOM_GGML_TYPE_F32, 512);
    tensor_info(&b, "c", 2, dims, FATHOM_GGML_TYPE_F32, 256);
    pad_to(&b, 32);
    for (int i = 0; i < 768; i++) put_u8(&b, 0);
    {
        int status;
        uint8_t *copy;
        fathom_gguf *g = open_copy(b.p, b.n, &status, &copy);
        CHECK_OK(status);
        if (g) close_copy(g, copy);
    }
    CHECK(corpus_ok);
    free(b.p);
}

/* ---- bad arguments ------------------------------------------------------ */

static void test_bad_args(void) {
    fathom_gguf *g = (fathom_gguf *)1;
    CHECK_STATUS(fathom_gguf_open(NULL, "x"), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_open(&g, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK(g == NULL);
    CHECK_STATUS(fathom_gguf_open(&g, "/nonexistent/fathom.gguf"), FATHOM_ERR_IO);
    CHECK_STATUS(fathom_gguf_open(&g, "/tmp"), FATHOM_ERR_IO);
    CHECK_STATUS(fathom_gguf_open_memory(NULL, "GGUF", 4), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_open_memory(&g, NULL, 4), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_open_memory(&g, NULL, 0), FATHOM_ERR_FORMAT);
    fathom_gguf_close(NULL);
    CHECK(fathom_gguf_version(NULL) == 0 && fathom_gguf_alignment(NULL) == 0);
    CHECK(fathom_gguf_data_offset(NULL) == 0 && fathom_gguf_file_size(NULL) == 0);
    CHECK(fathom_gguf_kv_count(NULL) == 0 && fathom_gguf_tensor_count(NULL) == 0);

    buf b = {0};
    uint64_t offsets[N_TENSORS];
    build_valid(&b, 3, offsets);
    CHECK_OK(fathom_gguf_open_memory(&g, b.p, b.n));
    fathom_gguf_value v, e;
    const char *s;
    const char *key;
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    int64_t i64;
    float f32;
    double f64;
    int bl;
    fathom_gguf_tensor_info info;

    CHECK_STATUS(fathom_gguf_kv_at(NULL, 0, &key, &v), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_kv_at(g, N_KV, &key, &v), FATHOM_ERR_INVALID_ARG);
    CHECK(fathom_gguf_find_key(NULL, "t.u8") == -1 && fathom_gguf_find_key(g, NULL) == -1);
    CHECK_STATUS(fathom_gguf_get(NULL, "t.u8", &v), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_get(g, NULL, &v), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_get(g, "t.u8", NULL), FATHOM_ERR_INVALID_ARG);

    CHECK_OK(fathom_gguf_get(g, "t.u8", &v));
    CHECK_STATUS(fathom_gguf_value_u32(NULL, &u32), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_value_u32(&v, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_value_i32(NULL, &i32), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_value_i32(&v, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_value_u64(NULL, &u64), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_value_u64(&v, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_value_i64(NULL, &i64), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_value_i64(&v, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_value_f32(NULL, &f32), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_value_f32(&v, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_value_f64(NULL, &f64), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_value_f64(&v, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_value_bool(NULL, &bl), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_value_bool(&v, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_value_string(NULL, &s, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_value_string(&v, NULL, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_array_get(NULL, 0, &e), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_array_get(&v, 0, &e), FATHOM_ERR_INVALID_ARG); /* not an array */
    CHECK_OK(fathom_gguf_get(g, "t.strings", &v));
    CHECK_STATUS(fathom_gguf_array_get(&v, 0, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_array_get(&v, UINT64_MAX, &e), FATHOM_ERR_INVALID_ARG);

    CHECK_STATUS(fathom_gguf_get_u32(NULL, "t.u8", &u32), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_get_u32(g, NULL, &u32), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_get_u32(g, "t.u8", NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_get_i32(g, "t.i8", NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_get_i32(NULL, "t.i8", &i32), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_get_u64(g, "t.u64", NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_get_u64(g, NULL, &u64), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_get_f32(g, "t.f32", NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_get_f32(NULL, "t.f32", &f32), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_get_bool(g, "t.bool", NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_get_bool(g, NULL, &bl), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_get_string(g, "general.architecture", NULL, NULL),
                 FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_get_string(NULL, "general.architecture", &s, NULL),
                 FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_get_string(g, NULL, &s, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_get_array(g, "t.strings", FATHOM_GGUF_STRING, NULL),
                 FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_get_array(g, "t.strings", (fathom_gguf_type)13, &v),
                 FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_get_array(NULL, "t.strings", FATHOM_GGUF_STRING, &v),
                 FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_get_array(g, NULL, FATHOM_GGUF_STRING, &v), FATHOM_ERR_INVALID_ARG);

    CHECK_STATUS(fathom_gguf_tensor_at(NULL, 0, &info), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_tensor_at(g, 0, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_tensor_at(g, UINT64_MAX, &info), FATHOM_ERR_INVALID_ARG);
    CHECK(fathom_gguf_find_tensor(NULL, "scalar") == -1 && fathom_gguf_find_tensor(g, NULL) == -1);
    CHECK_STATUS(fathom_gguf_tensor(NULL, "scalar", &info), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_tensor(g, NULL, &info), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_gguf_tensor(g, "scalar", NULL), FATHOM_ERR_INVALID_ARG);
    fathom_gguf_close(g);
    free(b.p);
}

int main(void) {
    test_valid(3);
    test_valid(2);
    test_minimal();
    test_malformed();
    test_bad_args();
    return check_summary("test_gguf");
}

/* Capture files: safetensors holding one window of q/k/v activations
 * (docs/capture-format.md). The reader maps the file read-only and treats it
 * as hostile: every length, offset, shape and dtype is checked before a byte
 * of tensor data is touched. The writer streams layer by layer. */
#define _POSIX_C_SOURCE 200809L /* mmap, strdup, O_CLOEXEC */
#include "capture_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ===================================================================== *
 * dtypes
 * ===================================================================== */

static const char *dtype_name(fathom_dtype dtype) {
    switch (dtype) {
    case FATHOM_DTYPE_F32: return "F32";
    case FATHOM_DTYPE_F16: return "F16";
    case FATHOM_DTYPE_BF16: return "BF16";
    }
    return "?";
}

static uint64_t dtype_size(fathom_dtype dtype) { return dtype == FATHOM_DTYPE_F32 ? 4 : 2; }

static bool dtype_parse(const char *s, fathom_dtype *out) {
    if (!strcmp(s, "F32")) *out = FATHOM_DTYPE_F32;
    else if (!strcmp(s, "F16")) *out = FATHOM_DTYPE_F16;
    else if (!strcmp(s, "BF16")) *out = FATHOM_DTYPE_BF16;
    else return false;
    return true;
}

/* Little-endian loads that do not care about alignment (offsets in a file
 * written by someone else need not be aligned). */
static inline uint16_t load_le16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t load_le32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t load_le64(const unsigned char *p) {
    return (uint64_t)load_le32(p) | ((uint64_t)load_le32(p + 4) << 32);
}

/* ===================================================================== *
 * reader
 * ===================================================================== */

enum { ROLE_Q = 0, ROLE_K = 1, ROLE_V = 2, ROLES = 3 };
static const char role_char[ROLES] = {'q', 'k', 'v'};

typedef struct capture_tensor {
    bool present;
    fathom_dtype dtype;
    uint64_t shape[3];
    uint64_t begin, end; /* byte offsets relative to the start of the data */
} capture_tensor;

typedef struct capture {
    unsigned char *bytes; /* the whole file */
    uint64_t size;
    bool mapped;          /* munmap (file) or free (memory copy) */
    const unsigned char *data; /* bytes + 8 + header length */
    uint64_t data_size;
    json_t *root;         /* keeps the metadata strings alive */
    uint64_t n_meta;
    const char **meta_keys, **meta_values;
    capture_tensor *tensors; /* [layers][ROLES] */
} capture;

static void capture_destroy(void *impl) {
    capture *c = impl;
    if (c->bytes) {
        if (c->mapped) munmap(c->bytes, (size_t)c->size);
        else free(c->bytes);
    }
    json_decref(c->root);
    free(c->meta_keys);
    free(c->meta_values);
    free(c->tensors);
    free(c);
}

/* "l<layer>.<q|k|v>" with a decimal layer without leading zeros. */
static bool parse_tensor_name(const char *name, uint32_t *layer, int *role) {
    if (name[0] != 'l' || name[1] < '0' || name[1] > '9') return false;
    const char *p = name + 1;
    if (p[0] == '0' && p[1] != '.') return false;
    uint32_t value = 0;
    while (*p >= '0' && *p <= '9') {
        value = value * 10 + (uint32_t)(*p - '0');
        if (value >= FATHOM_CAPTURE_MAX_LAYERS) return false;
        p++;
    }
    if (p[0] != '.' || p[1] == '\0' || p[2] != '\0') return false;
    for (int r = 0; r < ROLES; r++) {
        if (p[1] == role_char[r]) {
            *layer = value;
            *role = r;
            return true;
        }
    }
    return false;
}

static int parse_u64_field(const json_t *v, const char *tensor, const char *what, uint64_t *out) {
    FATHOM_CHECK(!json_is_integer(v), FATHOM_ERR_FORMAT, "tensor '%s': %s is not an integer", tensor,
                 what);
    json_int_t x = json_integer_value(v);
    FATHOM_CHECK(x < 0, FATHOM_ERR_FORMAT, "tensor '%s': %s is negative (%lld)", tensor, what,
                 (long long)x);
    *out = (uint64_t)x;
    return FATHOM_OK;
}

static int parse_tensor(const char *name, const json_t *entry, uint64_t data_size, capture_tensor *t) {
    FATHOM_CHECK(!json_is_object(entry), FATHOM_ERR_FORMAT, "tensor '%s': entry is not an object", name);
    const json_t *dtype = json_object_get(entry, "dtype");
    FATHOM_CHECK(!json_is_string(dtype), FATHOM_ERR_FORMAT, "tensor '%s': missing or non-string dtype",
                 name);
    FATHOM_CHECK(!dtype_parse(json_string_value(dtype), &t->dtype), FATHOM_ERR_UNSUPPORTED,
                 "tensor '%s': dtype '%s' is not supported (F32, F16 or BF16)", name,
                 json_string_value(dtype));

    const json_t *shape = json_object_get(entry, "shape");
    FATHOM_CHECK(!json_is_array(shape), FATHOM_ERR_FORMAT, "tensor '%s': missing or non-array shape",
                 name);
    FATHOM_CHECK(json_array_size(shape) != 3, FATHOM_ERR_FORMAT,
                 "tensor '%s': shape has rank %zu, expected 3", name, json_array_size(shape));
    uint64_t bytes = dtype_size(t->dtype);
    bool is_query = name[strlen(name) - 1] == 'q';
    for (size_t i = 0; i < 3; i++) {
        FATHOM_TRY(parse_u64_field(json_array_get(shape, i), name, "a shape dimension", &t->shape[i]));
        FATHOM_CHECK(t->shape[i] == 0, FATHOM_ERR_FORMAT, "tensor '%s': shape dimension %zu is 0",
                     name, i);
        /* heads, positions and dim are 32-bit in the API; only n (dim 1 of k, v) is 64-bit */
        bool wide = i == 1 && !is_query;
        FATHOM_CHECK(!wide && t->shape[i] > UINT32_MAX, FATHOM_ERR_FORMAT,
                     "tensor '%s': shape dimension %zu is too large (%llu)", name, i,
                     (unsigned long long)t->shape[i]);
        FATHOM_CHECK(!fathom_mul_u64(bytes, t->shape[i], &bytes), FATHOM_ERR_FORMAT,
                     "tensor '%s': byte size overflows", name);
    }

    const json_t *offsets = json_object_get(entry, "data_offsets");
    FATHOM_CHECK(!json_is_array(offsets) || json_array_size(offsets) != 2, FATHOM_ERR_FORMAT,
                 "tensor '%s': data_offsets must be an array of 2 integers", name);
    FATHOM_TRY(parse_u64_field(json_array_get(offsets, 0), name, "data_offsets[0]", &t->begin));
    FATHOM_TRY(parse_u64_field(json_array_get(offsets, 1), name, "data_offsets[1]", &t->end));
    FATHOM_CHECK(t->end < t->begin, FATHOM_ERR_FORMAT, "tensor '%s': data_offsets end %llu < begin %llu",
                 name, (unsigned long long)t->end, (unsigned long long)t->begin);
    FATHOM_CHECK(t->end > data_size, FATHOM_ERR_FORMAT,
                 "tensor '%s': data_offsets [%llu, %llu] run past the data (%llu bytes)", name,
                 (unsigned long long)t->begin, (unsigned long long)t->end,
                 (unsigned long long)data_size);
    FATHOM_CHECK(t->end - t->begin != bytes, FATHOM_ERR_FORMAT,
                 "tensor '%s': data_offsets span %llu bytes but shape [%llu, %llu, %llu] of %s needs %llu",
                 name, (unsigned long long)(t->end - t->begin), (unsigned long long)t->shape[0],
                 (unsigned long long)t->shape[1], (unsigned long long)t->shape[2],
                 dtype_name(t->dtype), (unsigned long long)bytes);
    t->present = true;
    return FATHOM_OK;
}

static int parse_metadata(capture *c, const json_t *meta) {
    FATHOM_CHECK(!json_is_object(meta), FATHOM_ERR_FORMAT, "__metadata__ is not an object");
    size_t count = json_object_size(meta);
    c->meta_keys = fathom_calloc_array(count, sizeof *c->meta_keys);
    c->meta_values = fathom_calloc_array(count, sizeof *c->meta_values);
    FATHOM_CHECK(!c->meta_keys || !c->meta_values, FATHOM_ERR_NOMEM, "out of memory for metadata");
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)meta, key, value) {
        FATHOM_CHECK(!json_is_string(value), FATHOM_ERR_FORMAT,
                     "__metadata__ entry '%s' is not a string", key);
        c->meta_keys[c->n_meta] = key;
        c->meta_values[c->n_meta] = json_string_value(value);
        c->n_meta++;
    }
    return FATHOM_OK;
}

static const char *meta_get(const capture *c, const char *key) {
    for (uint64_t i = 0; i < c->n_meta; i++)
        if (!strcmp(c->meta_keys[i], key)) return c->meta_values[i];
    return NULL;
}

static int tensor_name(char *buf, size_t cap, uint32_t layer, int role) {
    return snprintf(buf, cap, "l%u.%c", layer, role_char[role]);
}

typedef struct span {
    uint64_t begin, end;
    uint32_t layer;
    int role;
} span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

static int check_no_overlap(const capture *c, uint32_t layers) {
    uint64_t count = (uint64_t)layers * ROLES;
    span *spans = fathom_alloc_array(count, sizeof *spans);
    FATHOM_CHECK(!spans, FATHOM_ERR_NOMEM, "out of memory checking tensor offsets");
    for (uint32_t l = 0; l < layers; l++)
        for (int r = 0; r < ROLES; r++) {
            const capture_tensor *t = &c->tensors[l * ROLES + r];
            spans[l * ROLES + r] = (span){t->begin, t->end, l, r};
        }
    qsort(spans, (size_t)count, sizeof *spans, span_cmp);
    int status = FATHOM_OK;
    for (uint64_t i = 1; i < count; i++) {
        if (spans[i].begin < spans[i - 1].end) {
            char a[32], b[32];
            tensor_name(a, sizeof a, spans[i - 1].layer, spans[i - 1].role);
            tensor_name(b, sizeof b, spans[i].layer, spans[i].role);
            status = fathom_fail(FATHOM_ERR_FORMAT, "tensors '%s' and '%s' overlap in the data", a, b);
            break;
        }
    }
    free(spans);
    return status;
}

static int check_shape(const capture_tensor *t, const capture_tensor *ref, uint32_t layer, int role,
                       const char *ref_name) {
    if (!memcmp(t->shape, ref->shape, sizeof t->shape)) return FATHOM_OK;
    char name[32];
    tensor_name(name, sizeof name, layer, role);
    return fathom_fail(FATHOM_ERR_FORMAT, "tensor '%s' has shape [%llu, %llu, %llu], expected [%llu, %llu, %llu] as %s",
                       name, (unsigned long long)t->shape[0], (unsigned long long)t->shape[1],
                       (unsigned long long)t->shape[2], (unsigned long long)ref->shape[0],
                       (unsigned long long)ref->shape[1], (unsigned long long)ref->shape[2], ref_name);
}

/* Decimal, digits only, no sign, no overflow. */
static bool parse_decimal_u64(const char *s, uint64_t *out) {
    if (!*s) return false;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return false;
        if (!fathom_mul_u64(v, 10, &v) || !fathom_add_u64(v, (uint64_t)(*s - '0'), &v)) return false;
    }
    *out = v;
    return true;
}

static int capture_parse(capture *c, fathom_source_info *info) {
    FATHOM_CHECK(c->size < 8, FATHOM_ERR_FORMAT,
                 "file is %llu bytes, too short for the 8-byte header length",
                 (unsigned long long)c->size);
    uint64_t header_len = load_le64(c->bytes);
    FATHOM_CHECK(header_len == 0, FATHOM_ERR_FORMAT, "header length is 0");
    FATHOM_CHECK(header_len > FATHOM_CAPTURE_MAX_HEADER, FATHOM_ERR_FORMAT,
                 "header length %llu exceeds the %llu-byte limit", (unsigned long long)header_len,
                 (unsigned long long)FATHOM_CAPTURE_MAX_HEADER);
    FATHOM_CHECK(header_len > c->size - 8, FATHOM_ERR_FORMAT,
                 "header length %llu runs past the end of the %llu-byte file",
                 (unsigned long long)header_len, (unsigned long long)c->size);
    c->data = c->bytes + 8 + header_len;
    c->data_size = c->size - 8 - header_len;

    json_error_t err;
    c->root = json_loadb((const char *)c->bytes + 8, (size_t)header_len, JSON_REJECT_DUPLICATES, &err);
    FATHOM_CHECK(!c->root, FATHOM_ERR_FORMAT, "header is not valid JSON: %s (at byte %d)", err.text,
                 err.position);
    FATHOM_CHECK(!json_is_object(c->root), FATHOM_ERR_FORMAT, "header is not a JSON object");

    /* First pass: names, metadata, layer count. */
    const char *key;
    json_t *value;
    uint32_t layers = 0;
    bool have_meta = false;
    json_object_foreach(c->root, key, value) {
        if (!strcmp(key, "__metadata__")) {
            FATHOM_TRY(parse_metadata(c, value));
            have_meta = true;
            continue;
        }
        uint32_t layer;
        int role;
        FATHOM_CHECK(!parse_tensor_name(key, &layer, &role), FATHOM_ERR_FORMAT,
                     "unexpected tensor '%.64s' (expected l<layer>.q, .k or .v, layer < %u)", key,
                     FATHOM_CAPTURE_MAX_LAYERS);
        if (layer + 1 > layers) layers = layer + 1;
    }
    FATHOM_CHECK(!have_meta, FATHOM_ERR_FORMAT, "header has no __metadata__");
    FATHOM_CHECK(layers == 0, FATHOM_ERR_FORMAT, "capture has no layers (no tensor l0.q)");

    /* Second pass: every tensor entry. Duplicate names were rejected by the
     * JSON parser (JSON_REJECT_DUPLICATES). */
    c->tensors = fathom_calloc_array((uint64_t)layers * ROLES, sizeof *c->tensors);
    FATHOM_CHECK(!c->tensors, FATHOM_ERR_NOMEM, "out of memory for %u layers", layers);
    json_object_foreach(c->root, key, value) {
        uint32_t layer;
        int role;
        if (!parse_tensor_name(key, &layer, &role)) continue;
        FATHOM_TRY(parse_tensor(key, value, c->data_size, &c->tensors[layer * ROLES + role]));
    }
    for (uint32_t l = 0; l < layers; l++)
        for (int r = 0; r < ROLES; r++) {
            char name[32];
            tensor_name(name, sizeof name, l, r);
            FATHOM_CHECK(!c->tensors[l * ROLES + r].present, FATHOM_ERR_FORMAT,
                         "layer %u has no tensor '%s' (capture has %u layers)", l, name, layers);
        }

    /* Shapes: q [Hq, P, d], k = v [Hkv, n, d], the same in every layer. */
    const capture_tensor *q0 = &c->tensors[ROLE_Q], *k0 = &c->tensors[ROLE_K];
    for (uint32_t l = 0; l < layers; l++) {
        FATHOM_TRY(check_shape(&c->tensors[l * ROLES + ROLE_Q], q0, l, ROLE_Q, "l0.q"));
        FATHOM_TRY(check_shape(&c->tensors[l * ROLES + ROLE_K], k0, l, ROLE_K, "l0.k"));
        FATHOM_TRY(check_shape(&c->tensors[l * ROLES + ROLE_V], k0, l, ROLE_V, "l0.k"));
    }
    FATHOM_CHECK(q0->shape[2] != k0->shape[2], FATHOM_ERR_FORMAT,
                 "head dimension of l0.q (%llu) differs from l0.k (%llu)",
                 (unsigned long long)q0->shape[2], (unsigned long long)k0->shape[2]);
    FATHOM_CHECK(q0->shape[0] % k0->shape[0] != 0, FATHOM_ERR_FORMAT,
                 "query heads (%llu) are not a multiple of KV heads (%llu)",
                 (unsigned long long)q0->shape[0], (unsigned long long)k0->shape[0]);
    FATHOM_CHECK(q0->shape[1] > k0->shape[1], FATHOM_ERR_FORMAT,
                 "more query positions (%llu) than tokens (%llu)", (unsigned long long)q0->shape[1],
                 (unsigned long long)k0->shape[1]);
    FATHOM_TRY(check_no_overlap(c, layers));

    /* Metadata the reader needs. */
    const char *format = meta_get(c, "format");
    FATHOM_CHECK(format && strcmp(format, FATHOM_CAPTURE_FORMAT) != 0, FATHOM_ERR_UNSUPPORTED,
                 "__metadata__ format is '%.64s', expected '%s'", format, FATHOM_CAPTURE_FORMAT);
    const char *model = meta_get(c, "model");
    FATHOM_CHECK(!model, FATHOM_ERR_FORMAT, "__metadata__ has no 'model'");
    FATHOM_CHECK(model[0] == '\0' || strlen(model) >= sizeof info->model, FATHOM_ERR_FORMAT,
                 "__metadata__ 'model' must be 1..%zu bytes", sizeof info->model - 1);
    const char *fq = meta_get(c, "first_query");
    FATHOM_CHECK(!fq, FATHOM_ERR_FORMAT, "__metadata__ has no 'first_query'");
    uint64_t first_query;
    FATHOM_CHECK(!parse_decimal_u64(fq, &first_query), FATHOM_ERR_FORMAT,
                 "__metadata__ 'first_query' is '%.32s', not a decimal integer", fq);
    FATHOM_CHECK(first_query > k0->shape[1] - q0->shape[1], FATHOM_ERR_FORMAT,
                 "first_query %llu + %llu positions runs past the %llu tokens",
                 (unsigned long long)first_query, (unsigned long long)q0->shape[1],
                 (unsigned long long)k0->shape[1]);

    memset(info, 0, sizeof *info);
    memcpy(info->model, model, strlen(model) + 1);
    info->layers = layers;
    info->q_heads = (uint32_t)q0->shape[0];
    info->kv_heads = (uint32_t)k0->shape[0];
    info->dim = (uint32_t)k0->shape[2];
    info->tokens = k0->shape[1];
    info->positions = (uint32_t)q0->shape[1];
    info->first_query = first_query;
    /* the float32 layer buffers a caller will allocate must be addressable */
    uint64_t q_elems, kv_elems;
    if (fathom_source_layer_sizes(info, &q_elems, &kv_elems) < 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", fathom_last_error());
        return fathom_fail(FATHOM_ERR_FORMAT, "%s", msg);
    }
    return FATHOM_OK;
}

static int convert_tensor(const capture *c, uint32_t layer, int role, float *out) {
    const capture_tensor *t = &c->tensors[layer * ROLES + role];
    const unsigned char *p = c->data + t->begin;
    uint64_t count = t->shape[0] * t->shape[1] * t->shape[2]; /* checked at open */
    uint64_t bad = UINT64_MAX;
    switch (t->dtype) {
    case FATHOM_DTYPE_F32:
        for (uint64_t i = 0; i < count; i++) {
            uint32_t u = load_le32(p + 4 * i);
            memcpy(&out[i], &u, sizeof u);
            if ((u & 0x7f800000u) == 0x7f800000u && bad == UINT64_MAX) bad = i;
        }
        break;
    case FATHOM_DTYPE_F16:
        for (uint64_t i = 0; i < count; i++) {
            uint16_t h = load_le16(p + 2 * i);
            out[i] = fathom_f16_to_f32(h);
            if ((h & 0x7c00u) == 0x7c00u && bad == UINT64_MAX) bad = i;
        }
        break;
    case FATHOM_DTYPE_BF16:
        for (uint64_t i = 0; i < count; i++) {
            uint16_t h = load_le16(p + 2 * i);
            out[i] = fathom_bf16_to_f32(h);
            if ((h & 0x7f80u) == 0x7f80u && bad == UINT64_MAX) bad = i;
        }
        break;
    }
    if (bad != UINT64_MAX) {
        char name[32];
        tensor_name(name, sizeof name, layer, role);
        uint64_t inner = t->shape[1] * t->shape[2];
        return fathom_fail(FATHOM_ERR_NONFINITE, "tensor '%s' has a non-finite value at [%llu, %llu, %llu]",
                           name, (unsigned long long)(bad / inner),
                           (unsigned long long)(bad % inner / t->shape[2]),
                           (unsigned long long)(bad % t->shape[2]));
    }
    return FATHOM_OK;
}

static int capture_layer(const fathom_source *src, uint32_t layer, float *q, float *k, float *v) {
    const capture *c = src->impl;
    if (q) FATHOM_TRY(convert_tensor(c, layer, ROLE_Q, q));
    if (k) FATHOM_TRY(convert_tensor(c, layer, ROLE_K, k));
    if (v) FATHOM_TRY(convert_tensor(c, layer, ROLE_V, v));
    return FATHOM_OK;
}

static void capture_meta_entry(const fathom_source *src, uint64_t i, const char **key,
                               const char **value) {
    const capture *c = src->impl;
    *key = i < c->n_meta ? c->meta_keys[i] : NULL;
    *value = i < c->n_meta ? c->meta_values[i] : NULL;
}

static void capture_dtypes(const fathom_source *src, uint32_t layer, fathom_dtype *q, fathom_dtype *k,
                           fathom_dtype *v) {
    const capture *c = src->impl;
    const capture_tensor *t = c->tensors + (uint64_t)layer * ROLES;
    *q = t[ROLE_Q].dtype;
    *k = t[ROLE_K].dtype;
    *v = t[ROLE_V].dtype;
}

static const fathom_source_ops capture_ops = {
    .kind = "capture",
    .destroy = capture_destroy,
    .layer = capture_layer,
    .meta_entry = capture_meta_entry,
    .dtypes = capture_dtypes,
};

static int capture_finish_open(fathom_source **out, capture *c, const char *what) {
    fathom_source_info info;
    int status = capture_parse(c, &info);
    if (status < 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", fathom_last_error());
        capture_destroy(c);
        return fathom_fail(status, "%s: %s", what, msg);
    }
    return fathom_source_new(out, &capture_ops, &info, c);
}

int fathom_capture_open(fathom_source **out, const char *path) {
    FATHOM_CHECK_ARG(out != NULL, "out is NULL");
    *out = NULL;
    FATHOM_CHECK_ARG(path != NULL && path[0] != '\0', "path is NULL or empty");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    FATHOM_CHECK(fd < 0, FATHOM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int e = errno;
        close(fd);
        return fathom_fail(FATHOM_ERR_IO, "%s: not a regular file%s%s", path, e ? ": " : "",
                           e ? strerror(e) : "");
    }
    if (st.st_size < 8) {
        close(fd);
        return fathom_fail(FATHOM_ERR_FORMAT, "%s: file is %lld bytes, too short for a capture", path,
                           (long long)st.st_size);
    }
    if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX) {
        close(fd);
        return fathom_fail(FATHOM_ERR_NOMEM, "%s: file too large to map", path);
    }
    capture *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return fathom_fail(FATHOM_ERR_NOMEM, "out of memory opening %s", path);
    }
    c->size = (uint64_t)st.st_size;
    void *map = mmap(NULL, (size_t)c->size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED) {
        free(c);
        return fathom_fail(FATHOM_ERR_IO, "%s: mmap failed: %s", path, strerror(map_errno));
    }
    c->bytes = map;
    c->mapped = true;
    return capture_finish_open(out, c, path);
}

int fathom_capture_open_memory(fathom_source **out, const void *data, uint64_t size) {
    FATHOM_CHECK_ARG(out != NULL, "out is NULL");
    *out = NULL;
    FATHOM_CHECK_ARG(data != NULL || size == 0, "data is NULL");
    capture *c = calloc(1, sizeof *c);
    FATHOM_CHECK(!c, FATHOM_ERR_NOMEM, "out of memory");
    c->bytes = fathom_alloc_array(size, 1);
    if (!c->bytes) {
        free(c);
        return fathom_fail(FATHOM_ERR_NOMEM, "out of memory copying a %llu-byte capture",
                           (unsigned long long)size);
    }
    if (size) memcpy(c->bytes, data, (size_t)size);
    c->size = size;
    return capture_finish_open(out, c, "capture in memory");
}

/* ===================================================================== *
 * writer
 * ===================================================================== */

#define WRITER_CHUNK 16384 /* elements converted per fwrite */

struct fathom_capture_writer {
    FILE *file;
    char *path;
    fathom_source_info info;
    fathom_dtype dtype;
    json_t *meta;         /* extra __metadata__ entries, in insertion order */
    uint32_t next_layer;  /* layers written */
    bool header_written;
    bool failed;          /* an error left the file unusable */
    unsigned char chunk[WRITER_CHUNK * 4];
};

static bool is_reserved_key(const char *key) {
    return !strcmp(key, "format") || !strcmp(key, "model") || !strcmp(key, "first_query");
}

int fathom_capture_writer_open(fathom_capture_writer **out, const char *path,
                               const fathom_source_info *info, fathom_dtype dtype) {
    FATHOM_CHECK_ARG(out != NULL, "out is NULL");
    *out = NULL;
    FATHOM_CHECK_ARG(path != NULL && path[0] != '\0', "path is NULL or empty");
    FATHOM_TRY(fathom_source_info_check(info));
    FATHOM_CHECK_ARG(dtype == FATHOM_DTYPE_F32 || dtype == FATHOM_DTYPE_F16 || dtype == FATHOM_DTYPE_BF16,
                     "unknown dtype %d", (int)dtype);
    FATHOM_CHECK_ARG(info->layers <= FATHOM_CAPTURE_MAX_LAYERS, "at most %u layers",
                     FATHOM_CAPTURE_MAX_LAYERS);
    /* every offset must fit the signed 64-bit JSON integers of the header */
    uint64_t q_elems, kv_elems, layer_bytes, total;
    FATHOM_TRY(fathom_source_layer_sizes(info, &q_elems, &kv_elems));
    bool ok = fathom_mul_u64(kv_elems, 2, &layer_bytes) && fathom_add_u64(layer_bytes, q_elems, &layer_bytes) &&
              fathom_mul_u64(layer_bytes, dtype_size(dtype), &layer_bytes) &&
              fathom_mul_u64(layer_bytes, info->layers, &total) && total < (1ull << 62);
    FATHOM_CHECK(!ok, FATHOM_ERR_NOMEM, "capture would be too large");

    fathom_capture_writer *w = calloc(1, sizeof *w);
    FATHOM_CHECK(!w, FATHOM_ERR_NOMEM, "out of memory for a capture writer");
    w->info = *info;
    w->dtype = dtype;
    w->path = strdup(path);
    w->meta = json_object();
    if (!w->path || !w->meta) {
        free(w->path);
        json_decref(w->meta);
        free(w);
        return fathom_fail(FATHOM_ERR_NOMEM, "out of memory for a capture writer");
    }
    w->file = fopen(path, "wb");
    if (!w->file) {
        int e = errno;
        free(w->path);
        json_decref(w->meta);
        free(w);
        return fathom_fail(FATHOM_ERR_IO, "%s: cannot create: %s", path, strerror(e));
    }
    *out = w;
    return FATHOM_OK;
}

int fathom_capture_writer_meta(fathom_capture_writer *w, const char *key, const char *value) {
    FATHOM_CHECK_ARG(w != NULL, "writer is NULL");
    FATHOM_CHECK_ARG(key != NULL && key[0] != '\0', "metadata key is NULL or empty");
    FATHOM_CHECK_ARG(value != NULL, "metadata value is NULL");
    FATHOM_CHECK(w->failed, FATHOM_ERR_STATE, "writer failed earlier");
    FATHOM_CHECK(w->header_written, FATHOM_ERR_STATE, "metadata '%s' after the first layer", key);
    FATHOM_CHECK_ARG(!is_reserved_key(key), "metadata key '%s' is reserved (set from the source info)",
                     key);
    FATHOM_CHECK_ARG(json_object_get(w->meta, key) == NULL, "metadata key '%s' set twice", key);
    json_t *s = json_string(value);
    FATHOM_CHECK_ARG(s != NULL, "metadata value of '%s' is not valid UTF-8", key);
    FATHOM_CHECK_ARG(json_object_set_new(w->meta, key, s) == 0, "metadata key is not valid UTF-8");
    return FATHOM_OK;
}

static json_t *tensor_entry(fathom_dtype dtype, uint64_t a, uint64_t b, uint64_t c, uint64_t *offset) {
    uint64_t bytes = a * b * c * dtype_size(dtype); /* bounded at open */
    json_t *e = json_pack("{s:s, s:[I,I,I], s:[I,I]}", "dtype", dtype_name(dtype), "shape",
                          (json_int_t)a, (json_int_t)b, (json_int_t)c, "data_offsets",
                          (json_int_t)*offset, (json_int_t)(*offset + bytes));
    *offset += bytes;
    return e;
}

/* The whole header is known once the metadata is: offsets follow from the
 * info, tensors laid out l0.q, l0.k, l0.v, l1.q, ... back to back. */
static int writer_header(fathom_capture_writer *w) {
    const fathom_source_info *in = &w->info;
    json_t *root = json_object(), *meta = json_object();
    char first_query[32];
    snprintf(first_query, sizeof first_query, "%llu", (unsigned long long)in->first_query);
    bool ok = root && meta && json_object_set_new(meta, "format", json_string(FATHOM_CAPTURE_FORMAT)) == 0 &&
              json_object_set_new(meta, "model", json_string(in->model)) == 0 &&
              json_object_set_new(meta, "first_query", json_string(first_query)) == 0 &&
              json_object_update(meta, w->meta) == 0;
    if (ok) ok = json_object_set(root, "__metadata__", meta) == 0;
    uint64_t offset = 0;
    for (uint32_t l = 0; ok && l < in->layers; l++) {
        char name[32];
        tensor_name(name, sizeof name, l, ROLE_Q);
        ok = json_object_set_new(root, name, tensor_entry(w->dtype, in->q_heads, in->positions, in->dim, &offset)) == 0;
        for (int r = ROLE_K; ok && r <= ROLE_V; r++) {
            tensor_name(name, sizeof name, l, r);
            ok = json_object_set_new(root, name, tensor_entry(w->dtype, in->kv_heads, in->tokens, in->dim, &offset)) == 0;
        }
    }
    char *text = ok ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(meta);
    json_decref(root);
    FATHOM_CHECK(!text, FATHOM_ERR_NOMEM, "out of memory building the capture header");
    /* pad with spaces so the data starts 8-byte aligned, as safetensors does */
    uint64_t len = strlen(text);
    uint64_t padded = (len + 8 + 7) / 8 * 8 - 8;
    unsigned char prefix[8];
    for (int i = 0; i < 8; i++) prefix[i] = (unsigned char)(padded >> (8 * i));
    bool wrote = fwrite(prefix, 1, 8, w->file) == 8 && fwrite(text, 1, (size_t)len, w->file) == len;
    for (uint64_t i = len; wrote && i < padded; i++) wrote = fputc(' ', w->file) != EOF;
    free(text);
    FATHOM_CHECK(!wrote, FATHOM_ERR_IO, "%s: writing the header failed: %s", w->path, strerror(errno));
    w->header_written = true;
    return FATHOM_OK;
}

/* Convert and write one tensor. A finite value that the dtype cannot hold
 * (above 65504 in F16) is an error rather than a silent infinity; NaN and
 * infinities pass through (the reader reports them). */
static int writer_tensor(fathom_capture_writer *w, const float *x, uint64_t count, uint32_t layer, int role) {
    uint64_t esize = dtype_size(w->dtype);
    for (uint64_t i = 0; i < count; i += WRITER_CHUNK) {
        uint64_t m = count - i < WRITER_CHUNK ? count - i : WRITER_CHUNK;
        unsigned char *p = w->chunk;
        for (uint64_t j = 0; j < m; j++, p += esize) {
            float value = x[i + j];
            uint32_t u;
            bool overflow = false;
            if (w->dtype == FATHOM_DTYPE_F32) {
                memcpy(&u, &value, sizeof u);
            } else if (w->dtype == FATHOM_DTYPE_F16) {
                u = fathom_f32_to_f16(value);
                overflow = (u & 0x7c00u) == 0x7c00u && isfinite(value);
            } else {
                u = fathom_f32_to_bf16(value);
                overflow = (u & 0x7f80u) == 0x7f80u && isfinite(value);
            }
            if (overflow) {
                char name[32];
                tensor_name(name, sizeof name, layer, role);
                return fathom_fail(FATHOM_ERR_INVALID_ARG, "%s: value %g at element %llu of '%s' overflows %s",
                                   w->path, (double)value, (unsigned long long)(i + j), name,
                                   dtype_name(w->dtype));
            }
            for (uint64_t b = 0; b < esize; b++) p[b] = (unsigned char)(u >> (8 * b));
        }
        FATHOM_CHECK(fwrite(w->chunk, (size_t)esize, (size_t)m, w->file) != m, FATHOM_ERR_IO,
                     "%s: write failed: %s", w->path, strerror(errno));
    }
    return FATHOM_OK;
}

int fathom_capture_writer_layer(fathom_capture_writer *w, uint32_t layer, const float *q,
                                const float *k, const float *v) {
    FATHOM_CHECK_ARG(w != NULL, "writer is NULL");
    FATHOM_CHECK_ARG(q != NULL && k != NULL && v != NULL, "q, k and v are all required");
    FATHOM_CHECK(w->failed, FATHOM_ERR_STATE, "writer failed earlier");
    FATHOM_CHECK(layer != w->next_layer, FATHOM_ERR_STATE, "layer %u written out of order (expected %u of %u)",
                 layer, w->next_layer, w->info.layers);
    FATHOM_CHECK(layer >= w->info.layers, FATHOM_ERR_STATE, "all %u layers already written", w->info.layers);
    uint64_t q_elems, kv_elems;
    FATHOM_TRY(fathom_source_layer_sizes(&w->info, &q_elems, &kv_elems));
    int status = w->header_written ? FATHOM_OK : writer_header(w);
    if (status >= 0) status = writer_tensor(w, q, q_elems, layer, ROLE_Q);
    if (status >= 0) status = writer_tensor(w, k, kv_elems, layer, ROLE_K);
    if (status >= 0) status = writer_tensor(w, v, kv_elems, layer, ROLE_V);
    if (status < 0) {
        w->failed = true;
        return status;
    }
    w->next_layer++;
    return FATHOM_OK;
}

int fathom_capture_writer_close(fathom_capture_writer *w) {
    FATHOM_CHECK_ARG(w != NULL, "writer is NULL");
    int status = FATHOM_OK;
    if (w->failed) status = fathom_fail(FATHOM_ERR_STATE, "%s: writer failed earlier; file removed", w->path);
    else if (w->next_layer != w->info.layers)
        status = fathom_fail(FATHOM_ERR_STATE, "%s: closed after %u of %u layers; file removed", w->path,
                             w->next_layer, w->info.layers);
    if (fclose(w->file) != 0 && status == FATHOM_OK)
        status = fathom_fail(FATHOM_ERR_IO, "%s: close failed: %s", w->path, strerror(errno));
    if (status < 0) remove(w->path); /* never leave a half-written capture behind */
    free(w->path);
    json_decref(w->meta);
    free(w);
    return status;
}

int fathom_capture_write(const fathom_source *src, const char *path, fathom_dtype dtype) {
    FATHOM_CHECK_ARG(src != NULL, "source is NULL");
    fathom_capture_writer *w;
    FATHOM_TRY(fathom_capture_writer_open(&w, path, &src->info, dtype));
    int status = FATHOM_OK;
    /* carry a capture's extra metadata over */
    for (uint64_t i = 0; src->ops->meta_entry && status >= 0; i++) {
        const char *key, *value;
        src->ops->meta_entry(src, i, &key, &value);
        if (!key) break;
        if (!is_reserved_key(key)) status = fathom_capture_writer_meta(w, key, value);
    }
    uint64_t q_elems = 0, kv_elems = 0;
    if (status >= 0) status = fathom_source_layer_sizes(&src->info, &q_elems, &kv_elems);
    float *q = NULL, *k = NULL, *v = NULL;
    if (status >= 0) {
        q = fathom_alloc_array(q_elems, sizeof *q);
        k = fathom_alloc_array(kv_elems, sizeof *k);
        v = fathom_alloc_array(kv_elems, sizeof *v);
        if (!q || !k || !v) status = fathom_fail(FATHOM_ERR_NOMEM, "out of memory for one layer");
    }
    for (uint32_t l = 0; status >= 0 && l < src->info.layers; l++) {
        status = fathom_source_layer(src, l, q, k, v);
        if (status >= 0) status = fathom_capture_writer_layer(w, l, q, k, v);
    }
    free(q);
    free(k);
    free(v);
    if (status < 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", fathom_last_error());
        w->failed = true;
        fathom_capture_writer_close(w);
        return fathom_fail(status, "%s", msg);
    }
    return fathom_capture_writer_close(w);
}

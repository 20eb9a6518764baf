/* GGUF v2/v3 reader: the file is mapped, parsed once and validated whole.
 *
 * Layout (little-endian): "GGUF", u32 version, u64 tensor count, u64 kv
 * count; kv entries (string key, u32 type, value); tensor infos (string
 * name, u32 n_dims, u64 dims[n_dims], u32 ggml type, u64 offset); padding
 * to the alignment; the data section. A string is u64 length + bytes; an
 * array is u32 element type + u64 count + elements.
 *
 * The file is hostile input (CVEs in other GGUF readers came from unchecked
 * counts and sizes): each read goes through a cursor that checks the bytes
 * left, counts are bounded by the bytes their smallest possible entries
 * would need before anything is allocated, all size arithmetic is
 * overflow-checked, and a failure frees everything. */
#define _POSIX_C_SOURCE 200809L /* O_CLOEXEC, mmap */
#include "gguf_internal.h"

#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC "GGUF"
#define ARENA_CHUNK (64u * 1024u)

/* Smallest encodings, to bound counts by the bytes left. */
#define MIN_STRING_BYTES 8u             /* u64 length, no bytes */
#define MIN_ARRAY_BYTES 12u             /* u32 type + u64 count */
#define MIN_KV_BYTES (8u + 1u + 4u + 1u) /* non-empty key, type, 1-byte value */
#define MIN_TENSOR_BYTES (8u + 1u + 4u + 4u + 8u)

/* One metadata value. Arrays of fixed-size elements stay in the file (raw);
 * arrays of strings or arrays get one node per element (items). */
typedef struct gguf_node {
    uint32_t type;
    uint32_t elem_type;
    uint64_t count;
    union {
        uint64_t u;
        int64_t i;
        double f;
    } number;
    const char *str;
    const uint8_t *raw;
    struct gguf_node *items;
} gguf_node;

typedef struct gguf_kv {
    const char *key;
    uint64_t key_len;
    gguf_node value;
} gguf_kv;

typedef struct gguf_tensor {
    const char *name;
    uint64_t name_len;
    fathom_ggml_type type;
    uint32_t n_dims;
    uint64_t dims[FATHOM_GGUF_MAX_DIMS];
    uint64_t n_elements;
    uint64_t rel_offset; /* from the data section, as stored */
    uint64_t bytes;
} gguf_tensor;

/* A name and the entry it belongs to, sorted for lookup and duplicates. */
typedef struct name_ref {
    const char *name;
    uint64_t len;
    uint64_t index;
} name_ref;

typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t used, cap;
    max_align_t data[]; /* cap bytes */
} arena_chunk;

struct fathom_gguf {
    const uint8_t *base;
    uint64_t size;
    void *map; /* NULL when parsing caller memory */
    size_t map_size;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;
    uint64_t n_kv;
    gguf_kv *kvs;
    name_ref *kv_sorted;
    uint64_t n_tensors;
    gguf_tensor *tensors;
    name_ref *tensor_sorted;
    arena_chunk *arena;
};

/* ---- arena: strings and element nodes, freed together ------------------ */

/* bytes at a multiple of align (a power of two <= alignof(max_align_t)). */
static void *arena_alloc(fathom_gguf *g, uint64_t bytes, size_t align) {
    arena_chunk *c = g->arena;
    size_t start = c ? (c->used + align - 1) & ~(align - 1) : 0;
    if (!c || start > c->cap || c->cap - start < bytes) {
        uint64_t cap = bytes > ARENA_CHUNK ? bytes : ARENA_CHUNK, total;
        if (!fathom_add_u64(cap, sizeof(arena_chunk), &total) || total > SIZE_MAX) return NULL;
        c = malloc((size_t)total);
        if (!c) return NULL;
        c->cap = (size_t)cap;
        c->next = g->arena;
        g->arena = c;
        start = 0;
    }
    c->used = start + (size_t)bytes;
    return (char *)c->data + start;
}

/* ---- cursor ------------------------------------------------------------ */

typedef struct cursor {
    const uint8_t *base;
    uint64_t size, pos;
} cursor;

static uint64_t left(const cursor *c) { return c->size - c->pos; }

static int take(cursor *c, uint64_t n, const char *what, const uint8_t **out) {
    FATHOM_CHECK(n > left(c), FATHOM_ERR_FORMAT,
                 "gguf: truncated at byte %llu: %s needs %llu bytes, %llu left",
                 (unsigned long long)c->pos, what, (unsigned long long)n,
                 (unsigned long long)left(c));
    *out = c->base + c->pos;
    c->pos += n;
    return FATHOM_OK;
}

static uint64_t load_le(const uint8_t *p, unsigned n) {
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static int read_u32(cursor *c, const char *what, uint32_t *out) {
    const uint8_t *p = NULL;
    FATHOM_TRY(take(c, 4, what, &p));
    *out = (uint32_t)load_le(p, 4);
    return FATHOM_OK;
}

static int read_u64(cursor *c, const char *what, uint64_t *out) {
    const uint8_t *p = NULL;
    FATHOM_TRY(take(c, 8, what, &p));
    *out = load_le(p, 8);
    return FATHOM_OK;
}

/* A string, copied NUL-terminated into the arena. A NUL inside it is an
 * error: C callers see a string up to its first NUL, so "llama\0evil" would
 * read as "llama" and two keys or names could alias. */
static int read_string(fathom_gguf *g, cursor *c, const char *what, const char **str,
                       uint64_t *len) {
    uint64_t n = 0;
    const uint8_t *p = NULL;
    FATHOM_TRY(read_u64(c, what, &n));
    const uint64_t at = c->pos;
    FATHOM_TRY(take(c, n, what, &p));
    const uint8_t *nul = n ? memchr(p, 0, (size_t)n) : NULL;
    FATHOM_CHECK(nul != NULL, FATHOM_ERR_FORMAT,
                 "gguf: %s at byte %llu contains a NUL byte (at byte %llu)", what,
                 (unsigned long long)at, (unsigned long long)(at + (uint64_t)(nul - p)));
    char *copy = arena_alloc(g, n + 1, 1); /* n < file size: no overflow */
    FATHOM_CHECK(!copy, FATHOM_ERR_NOMEM, "gguf: out of memory for a %llu-byte string",
                 (unsigned long long)n);
    if (n) memcpy(copy, p, (size_t)n);
    copy[n] = '\0';
    *str = copy;
    *len = n;
    return FATHOM_OK;
}

/* ---- metadata values --------------------------------------------------- */

/* Bytes of a fixed-size value type, 0 for STRING/ARRAY, -1 if unknown. */
static int value_size(uint32_t type) {
    switch (type) {
    case FATHOM_GGUF_UINT8: case FATHOM_GGUF_INT8: case FATHOM_GGUF_BOOL: return 1;
    case FATHOM_GGUF_UINT16: case FATHOM_GGUF_INT16: return 2;
    case FATHOM_GGUF_UINT32: case FATHOM_GGUF_INT32: case FATHOM_GGUF_FLOAT32: return 4;
    case FATHOM_GGUF_UINT64: case FATHOM_GGUF_INT64: case FATHOM_GGUF_FLOAT64: return 8;
    case FATHOM_GGUF_STRING: case FATHOM_GGUF_ARRAY: return 0;
    default: return -1;
    }
}

/* Decode a fixed-size scalar of type at p into node (widened). */
static void decode_scalar(uint32_t type, const uint8_t *p, gguf_node *node) {
    memset(node, 0, sizeof *node);
    node->type = type;
    uint64_t raw = load_le(p, (unsigned)value_size(type));
    switch (type) {
    case FATHOM_GGUF_INT8: node->number.i = (int8_t)raw; break;
    case FATHOM_GGUF_INT16: node->number.i = (int16_t)raw; break;
    case FATHOM_GGUF_INT32: node->number.i = (int32_t)raw; break;
    case FATHOM_GGUF_INT64: node->number.i = (int64_t)raw; break;
    case FATHOM_GGUF_FLOAT32: {
        float f;
        uint32_t u = (uint32_t)raw;
        memcpy(&f, &u, 4);
        node->number.f = f;
        break;
    }
    case FATHOM_GGUF_FLOAT64: memcpy(&node->number.f, &raw, 8); break;
    default: node->number.u = raw; break; /* unsigned and bool */
    }
}

static int read_value(fathom_gguf *g, cursor *c, uint32_t type, int depth, gguf_node *node) {
    const int size = value_size(type);
    FATHOM_CHECK(size < 0, FATHOM_ERR_FORMAT, "gguf: bad value type %u at byte %llu", type,
                 (unsigned long long)c->pos);
    if (size > 0) {
        const uint8_t *p = NULL;
        FATHOM_TRY(take(c, (uint64_t)size, "a value", &p));
        FATHOM_CHECK(type == FATHOM_GGUF_BOOL && p[0] > 1, FATHOM_ERR_FORMAT,
                     "gguf: bool of value %u at byte %llu", p[0],
                     (unsigned long long)(c->pos - 1));
        decode_scalar(type, p, node);
        return FATHOM_OK;
    }
    memset(node, 0, sizeof *node);
    node->type = type;
    if (type == FATHOM_GGUF_STRING) return read_string(g, c, "a string", &node->str, &node->count);

    FATHOM_CHECK(depth >= FATHOM_GGUF_MAX_NESTING, FATHOM_ERR_FORMAT,
                 "gguf: arrays nested deeper than %d at byte %llu", FATHOM_GGUF_MAX_NESTING,
                 (unsigned long long)c->pos);
    uint32_t elem;
    uint64_t count;
    FATHOM_TRY(read_u32(c, "an array type", &elem));
    FATHOM_TRY(read_u64(c, "an array count", &count));
    const int elem_size = value_size(elem);
    FATHOM_CHECK(elem_size < 0, FATHOM_ERR_FORMAT, "gguf: bad array element type %u at byte %llu",
                 elem, (unsigned long long)(c->pos - 12));
    node->elem_type = elem;
    node->count = count;
    if (elem_size > 0) {
        uint64_t bytes;
        FATHOM_CHECK(!fathom_mul_u64(count, (uint64_t)elem_size, &bytes), FATHOM_ERR_FORMAT,
                     "gguf: array of %llu elements overflows at byte %llu",
                     (unsigned long long)count, (unsigned long long)c->pos);
        FATHOM_TRY(take(c, bytes, "array elements", &node->raw));
        if (elem == FATHOM_GGUF_BOOL)
            for (uint64_t i = 0; i < count; i++)
                FATHOM_CHECK(node->raw[i] > 1, FATHOM_ERR_FORMAT, "gguf: bool of value %u in an array",
                             node->raw[i]);
        return FATHOM_OK;
    }
    /* Strings or arrays: bound the count before allocating a node each. */
    const uint64_t min_bytes = elem == FATHOM_GGUF_STRING ? MIN_STRING_BYTES : MIN_ARRAY_BYTES;
    FATHOM_CHECK(count > left(c) / min_bytes, FATHOM_ERR_FORMAT,
                 "gguf: array of %llu elements at byte %llu exceeds the %llu bytes left",
                 (unsigned long long)count, (unsigned long long)c->pos,
                 (unsigned long long)left(c));
    uint64_t node_bytes;
    FATHOM_CHECK(!fathom_mul_u64(count, sizeof(gguf_node), &node_bytes), FATHOM_ERR_NOMEM,
                 "gguf: array of %llu elements overflows", (unsigned long long)count);
    node->items = arena_alloc(g, node_bytes, _Alignof(gguf_node));
    FATHOM_CHECK(!node->items, FATHOM_ERR_NOMEM, "gguf: out of memory for an array");
    for (uint64_t i = 0; i < count; i++) FATHOM_TRY(read_value(g, c, elem, depth + 1, &node->items[i]));
    return FATHOM_OK;
}

/* ---- names: sorted references for duplicates and lookup ---------------- */

static int name_cmp(const char *a, uint64_t alen, const char *b, uint64_t blen) {
    int r = memcmp(a, b, (size_t)(alen < blen ? alen : blen));
    if (r) return r;
    return alen < blen ? -1 : alen > blen;
}

static int name_ref_cmp(const void *pa, const void *pb) {
    const name_ref *a = pa, *b = pb;
    return name_cmp(a->name, a->len, b->name, b->len);
}

/* Sort refs[n]; FATHOM_ERR_FORMAT on a duplicate name. */
static int sort_names(name_ref *refs, uint64_t n, const char *what) {
    if (n > 1) qsort(refs, (size_t)n, sizeof *refs, name_ref_cmp);
    for (uint64_t i = 1; i < n; i++)
        FATHOM_CHECK(name_ref_cmp(&refs[i - 1], &refs[i]) == 0, FATHOM_ERR_FORMAT,
                     "gguf: duplicate %s \"%s\"", what, refs[i].name);
    return FATHOM_OK;
}

static int64_t find_name(const name_ref *refs, uint64_t n, const char *name) {
    const uint64_t len = strlen(name);
    uint64_t lo = 0, hi = n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int r = name_cmp(refs[mid].name, refs[mid].len, name, len);
        if (r == 0) return (int64_t)refs[mid].index;
        if (r < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

/* ---- tensors ----------------------------------------------------------- */

static int read_tensor_info(fathom_gguf *g, cursor *c, gguf_tensor *t) {
    const uint64_t at = c->pos;
    FATHOM_TRY(read_string(g, c, "a tensor name", &t->name, &t->name_len));
    FATHOM_CHECK(t->name_len == 0, FATHOM_ERR_FORMAT, "gguf: empty tensor name at byte %llu",
                 (unsigned long long)at);
    FATHOM_TRY(read_u32(c, "tensor n_dims", &t->n_dims));
    FATHOM_CHECK(t->n_dims > FATHOM_GGUF_MAX_DIMS, FATHOM_ERR_FORMAT,
                 "gguf: tensor \"%s\" has %u dimensions (max %d)", t->name, t->n_dims,
                 FATHOM_GGUF_MAX_DIMS);
    uint64_t n = 1;
    for (uint32_t d = 0; d < FATHOM_GGUF_MAX_DIMS; d++) {
        t->dims[d] = 1;
        if (d >= t->n_dims) continue;
        FATHOM_TRY(read_u64(c, "a tensor dimension", &t->dims[d]));
        /* ggml holds dimensions and counts in int64 */
        FATHOM_CHECK(t->dims[d] > (uint64_t)INT64_MAX || !fathom_mul_u64(n, t->dims[d], &n) ||
                         n > (uint64_t)INT64_MAX,
                     FATHOM_ERR_FORMAT, "gguf: tensor \"%s\": dimensions overflow", t->name);
    }
    t->n_elements = n;
    uint32_t type, block_elements, block_bytes;
    FATHOM_TRY(read_u32(c, "a tensor type", &type));
    FATHOM_CHECK(fathom_ggml_type_block((fathom_ggml_type)type, &block_elements, &block_bytes) < 0,
                 FATHOM_ERR_FORMAT, "gguf: tensor \"%s\" has unknown ggml type %u", t->name, type);
    t->type = (fathom_ggml_type)type;
    FATHOM_CHECK(t->dims[0] % block_elements != 0, FATHOM_ERR_FORMAT,
                 "gguf: tensor \"%s\": row of %llu is not a multiple of the %s block of %u",
                 t->name, (unsigned long long)t->dims[0], fathom_ggml_type_name(t->type),
                 block_elements);
    FATHOM_CHECK(!fathom_mul_u64(n / block_elements, block_bytes, &t->bytes), FATHOM_ERR_FORMAT,
                 "gguf: tensor \"%s\": size overflows", t->name);
    FATHOM_TRY(read_u64(c, "a tensor offset", &t->rel_offset));
    return FATHOM_OK;
}

static int offset_ref_cmp(const void *pa, const void *pb) {
    const name_ref *a = pa, *b = pb; /* len holds the offset here */
    return a->len < b->len ? -1 : a->len > b->len;
}

/* Every tensor aligned, inside the file, and no two overlapping. */
static int check_tensor_layout(fathom_gguf *g) {
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        uint64_t start, end;
        FATHOM_CHECK(t->rel_offset % g->alignment != 0, FATHOM_ERR_FORMAT,
                     "gguf: tensor \"%s\" offset %llu is not a multiple of the alignment %llu",
                     t->name, (unsigned long long)t->rel_offset,
                     (unsigned long long)g->alignment);
        FATHOM_CHECK(!fathom_add_u64(g->data_offset, t->rel_offset, &start) ||
                         !fathom_add_u64(start, t->bytes, &end) || end > g->size,
                     FATHOM_ERR_FORMAT,
                     "gguf: tensor \"%s\" (%llu bytes at data offset %llu) extends past the end "
                     "of the %llu-byte file",
                     t->name, (unsigned long long)t->bytes, (unsigned long long)t->rel_offset,
                     (unsigned long long)g->size);
    }
    /* Sort (offset, index) pairs and compare neighbours. */
    name_ref *by_offset = fathom_alloc_array(g->n_tensors, sizeof *by_offset);
    FATHOM_CHECK(!by_offset, FATHOM_ERR_NOMEM, "gguf: out of memory");
    for (uint64_t i = 0; i < g->n_tensors; i++)
        by_offset[i] = (name_ref){NULL, g->tensors[i].rel_offset, i};
    if (g->n_tensors > 1) qsort(by_offset, (size_t)g->n_tensors, sizeof *by_offset, offset_ref_cmp);
    int status = FATHOM_OK;
    for (uint64_t i = 1; i < g->n_tensors && status == FATHOM_OK; i++) {
        const gguf_tensor *a = &g->tensors[by_offset[i - 1].index];
        const gguf_tensor *b = &g->tensors[by_offset[i].index];
        if (a->bytes && b->bytes && a->rel_offset + a->bytes > b->rel_offset)
            status = fathom_fail(FATHOM_ERR_FORMAT, "gguf: tensors \"%s\" and \"%s\" overlap",
                                 a->name, b->name);
    }
    free(by_offset);
    return status;
}

/* ---- open / close ------------------------------------------------------ */

static int parse(fathom_gguf *g) {
    cursor c = {g->base, g->size, 0};
    const uint8_t *magic = NULL;
    FATHOM_TRY(take(&c, 4, "the magic", &magic));
    FATHOM_CHECK(memcmp(magic, GGUF_MAGIC, 4) != 0, FATHOM_ERR_FORMAT,
                 "gguf: bad magic (not a GGUF file)");
    FATHOM_TRY(read_u32(&c, "the version", &g->version));
    /* v1 used 32-bit counts and lengths; big-endian files read as a huge version */
    FATHOM_CHECK(g->version != 2 && g->version != 3, FATHOM_ERR_FORMAT,
                 "gguf: unsupported version %u (2 and 3 are read)", g->version);
    FATHOM_TRY(read_u64(&c, "the tensor count", &g->n_tensors));
    FATHOM_TRY(read_u64(&c, "the kv count", &g->n_kv));
    FATHOM_CHECK(g->n_kv > left(&c) / MIN_KV_BYTES, FATHOM_ERR_FORMAT,
                 "gguf: %llu kv entries cannot fit in %llu bytes", (unsigned long long)g->n_kv,
                 (unsigned long long)left(&c));
    FATHOM_CHECK(g->n_tensors > left(&c) / MIN_TENSOR_BYTES, FATHOM_ERR_FORMAT,
                 "gguf: %llu tensors cannot fit in %llu bytes", (unsigned long long)g->n_tensors,
                 (unsigned long long)left(&c));

    g->kvs = fathom_calloc_array(g->n_kv, sizeof *g->kvs);
    g->kv_sorted = fathom_alloc_array(g->n_kv, sizeof *g->kv_sorted);
    g->tensors = fathom_calloc_array(g->n_tensors, sizeof *g->tensors);
    g->tensor_sorted = fathom_alloc_array(g->n_tensors, sizeof *g->tensor_sorted);
    FATHOM_CHECK(!g->kvs || !g->kv_sorted || !g->tensors || !g->tensor_sorted, FATHOM_ERR_NOMEM,
                 "gguf: out of memory for %llu kv entries and %llu tensors",
                 (unsigned long long)g->n_kv, (unsigned long long)g->n_tensors);

    for (uint64_t i = 0; i < g->n_kv; i++) {
        gguf_kv *kv = &g->kvs[i];
        const uint64_t at = c.pos;
        uint32_t type;
        FATHOM_TRY(read_string(g, &c, "a key", &kv->key, &kv->key_len));
        FATHOM_CHECK(kv->key_len == 0, FATHOM_ERR_FORMAT, "gguf: empty key at byte %llu",
                     (unsigned long long)at);
        FATHOM_TRY(read_u32(&c, "a value type", &type));
        FATHOM_TRY(read_value(g, &c, type, 0, &kv->value));
        g->kv_sorted[i] = (name_ref){kv->key, kv->key_len, i};
    }
    FATHOM_TRY(sort_names(g->kv_sorted, g->n_kv, "key"));

    g->alignment = FATHOM_GGUF_DEFAULT_ALIGNMENT;
    int64_t ai = find_name(g->kv_sorted, g->n_kv, "general.alignment");
    if (ai >= 0) {
        fathom_gguf_value v;
        uint32_t a;
        FATHOM_TRY(fathom_gguf_kv_at(g, (uint64_t)ai, NULL, &v));
        FATHOM_CHECK(fathom_gguf_value_u32(&v, &a) < 0 || a == 0 || (a & (a - 1)) != 0,
                     FATHOM_ERR_FORMAT, "gguf: general.alignment must be a power of two (u32)");
        g->alignment = a;
    }

    for (uint64_t i = 0; i < g->n_tensors; i++) {
        FATHOM_TRY(read_tensor_info(g, &c, &g->tensors[i]));
        g->tensor_sorted[i] = (name_ref){g->tensors[i].name, g->tensors[i].name_len, i};
    }
    FATHOM_TRY(sort_names(g->tensor_sorted, g->n_tensors, "tensor name"));

    /* The data section starts at the next multiple of the alignment. A file
     * without tensors may end before that padding. */
    uint64_t padded;
    FATHOM_CHECK(!fathom_add_u64(c.pos, g->alignment - 1, &padded), FATHOM_ERR_FORMAT,
                 "gguf: data offset overflows");
    g->data_offset = padded - padded % g->alignment;
    FATHOM_CHECK(g->n_tensors > 0 && g->data_offset > g->size, FATHOM_ERR_FORMAT,
                 "gguf: data section at %llu starts past the end of the %llu-byte file",
                 (unsigned long long)g->data_offset, (unsigned long long)g->size);
    return check_tensor_layout(g);
}

void fathom_gguf_close(fathom_gguf *g) {
    if (!g) return;
    while (g->arena) {
        arena_chunk *next = g->arena->next;
        free(g->arena);
        g->arena = next;
    }
    free(g->kvs);
    free(g->kv_sorted);
    free(g->tensors);
    free(g->tensor_sorted);
    if (g->map) munmap(g->map, g->map_size);
    free(g);
}

static int open_parsed(fathom_gguf **out, fathom_gguf *g) {
    int status = parse(g);
    if (status < 0) {
        fathom_gguf_close(g);
        return status;
    }
    *out = g;
    return FATHOM_OK;
}

int fathom_gguf_open_memory(fathom_gguf **out, const void *data, uint64_t size) {
    FATHOM_CHECK_ARG(out, "out is NULL");
    *out = NULL;
    FATHOM_CHECK_ARG(data || size == 0, "data is NULL");
    fathom_gguf *g = calloc(1, sizeof *g);
    FATHOM_CHECK(!g, FATHOM_ERR_NOMEM, "gguf: out of memory");
    g->base = data;
    g->size = size;
    return open_parsed(out, g);
}

int fathom_gguf_open(fathom_gguf **out, const char *path) {
    FATHOM_CHECK_ARG(out, "out is NULL");
    *out = NULL;
    FATHOM_CHECK_ARG(path, "path is NULL");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    FATHOM_CHECK(fd < 0, FATHOM_ERR_IO, "gguf: cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int e = errno;
        close(fd);
        return fathom_fail(FATHOM_ERR_IO, "gguf: %s is not a readable regular file%s%s", path,
                           e ? ": " : "", e ? strerror(e) : "");
    }
    if (st.st_size == 0) {
        close(fd);
        return fathom_fail(FATHOM_ERR_FORMAT, "gguf: %s is empty", path);
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    FATHOM_CHECK(map == MAP_FAILED, FATHOM_ERR_IO, "gguf: cannot map %s: %s", path, strerror(e));
    fathom_gguf *g = calloc(1, sizeof *g);
    if (!g) {
        munmap(map, (size_t)st.st_size);
        return fathom_fail(FATHOM_ERR_NOMEM, "gguf: out of memory");
    }
    g->map = map;
    g->map_size = (size_t)st.st_size;
    g->base = map;
    g->size = (uint64_t)st.st_size;
    int status = open_parsed(out, g);
    if (status < 0) {
        /* prefix the path to the parser's message */
        char msg[400];
        snprintf(msg, sizeof msg, "%s", fathom_last_error());
        fathom_fail(status, "%s: %s", path, msg);
    }
    return status;
}

uint32_t fathom_gguf_version(const fathom_gguf *g) { return g ? g->version : 0; }
uint64_t fathom_gguf_alignment(const fathom_gguf *g) { return g ? g->alignment : 0; }
uint64_t fathom_gguf_data_offset(const fathom_gguf *g) { return g ? g->data_offset : 0; }
uint64_t fathom_gguf_file_size(const fathom_gguf *g) { return g ? g->size : 0; }
uint64_t fathom_gguf_kv_count(const fathom_gguf *g) { return g ? g->n_kv : 0; }
uint64_t fathom_gguf_tensor_count(const fathom_gguf *g) { return g ? g->n_tensors : 0; }

/* ---- metadata access --------------------------------------------------- */

static void node_view(const gguf_node *n, fathom_gguf_value *v) {
    v->type = (fathom_gguf_type)n->type;
    v->elem_type = (fathom_gguf_type)n->elem_type;
    v->count = n->count;
    v->string = n->str;
    v->number_.u = n->number.u;
    v->array_ = n->type == FATHOM_GGUF_ARRAY ? n : NULL;
}

int fathom_gguf_kv_at(const fathom_gguf *g, uint64_t index, const char **key,
                      fathom_gguf_value *value) {
    FATHOM_CHECK_ARG(g, "gguf is NULL");
    FATHOM_CHECK_ARG(index < g->n_kv, "kv index %llu out of range (%llu entries)",
                     (unsigned long long)index, (unsigned long long)g->n_kv);
    if (key) *key = g->kvs[index].key;
    if (value) node_view(&g->kvs[index].value, value);
    return FATHOM_OK;
}

int64_t fathom_gguf_find_key(const fathom_gguf *g, const char *key) {
    if (!g || !key) return -1;
    return find_name(g->kv_sorted, g->n_kv, key);
}

int fathom_gguf_get(const fathom_gguf *g, const char *key, fathom_gguf_value *value) {
    FATHOM_CHECK_ARG(g, "gguf is NULL");
    FATHOM_CHECK_ARG(key, "key is NULL");
    FATHOM_CHECK_ARG(value, "value is NULL");
    int64_t i = find_name(g->kv_sorted, g->n_kv, key);
    FATHOM_CHECK(i < 0, FATHOM_ERR_FORMAT, "gguf: no key \"%s\"", key);
    node_view(&g->kvs[i].value, value);
    return FATHOM_OK;
}

static const char *type_name(fathom_gguf_type t) {
    static const char *const names[] = {"uint8", "int8",  "uint16", "int16",  "uint32",
                                        "int32", "float32", "bool", "string", "array",
                                        "uint64", "int64", "float64"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

static bool is_signed(fathom_gguf_type t) {
    return t == FATHOM_GGUF_INT8 || t == FATHOM_GGUF_INT16 || t == FATHOM_GGUF_INT32 ||
           t == FATHOM_GGUF_INT64;
}
static bool is_unsigned(fathom_gguf_type t) {
    return t == FATHOM_GGUF_UINT8 || t == FATHOM_GGUF_UINT16 || t == FATHOM_GGUF_UINT32 ||
           t == FATHOM_GGUF_UINT64;
}

/* Any integer value in [min_i, max_u], returned as its two's-complement bits. */
static int get_integer(const fathom_gguf_value *v, uint64_t max_u, int64_t min_i, const char *what,
                       uint64_t *out_u) {
    FATHOM_CHECK_ARG(v, "value is NULL");
    FATHOM_CHECK(!is_signed(v->type) && !is_unsigned(v->type), FATHOM_ERR_FORMAT,
                 "gguf: value is %s, %s wanted", type_name(v->type), what);
    if (is_unsigned(v->type)) {
        FATHOM_CHECK(v->number_.u > max_u, FATHOM_ERR_FORMAT,
                     "gguf: value %llu does not fit %s", (unsigned long long)v->number_.u, what);
        *out_u = v->number_.u;
    } else {
        const int64_t x = v->number_.i;
        FATHOM_CHECK(x < min_i || (x > 0 && (uint64_t)x > max_u), FATHOM_ERR_FORMAT,
                     "gguf: value %lld does not fit %s", (long long)x, what);
        *out_u = (uint64_t)x;
    }
    return FATHOM_OK;
}

int fathom_gguf_value_u32(const fathom_gguf_value *v, uint32_t *out) {
    uint64_t x = 0;
    FATHOM_CHECK_ARG(out, "out is NULL");
    FATHOM_TRY(get_integer(v, UINT32_MAX, 0, "uint32", &x));
    *out = (uint32_t)x;
    return FATHOM_OK;
}

int fathom_gguf_value_i32(const fathom_gguf_value *v, int32_t *out) {
    uint64_t x = 0;
    FATHOM_CHECK_ARG(out, "out is NULL");
    FATHOM_TRY(get_integer(v, INT32_MAX, INT32_MIN, "int32", &x));
    *out = (int32_t)(int64_t)x;
    return FATHOM_OK;
}

int fathom_gguf_value_u64(const fathom_gguf_value *v, uint64_t *out) {
    uint64_t x = 0;
    FATHOM_CHECK_ARG(out, "out is NULL");
    FATHOM_TRY(get_integer(v, UINT64_MAX, 0, "uint64", &x));
    *out = x;
    return FATHOM_OK;
}

int fathom_gguf_value_i64(const fathom_gguf_value *v, int64_t *out) {
    uint64_t x = 0;
    FATHOM_CHECK_ARG(out, "out is NULL");
    FATHOM_TRY(get_integer(v, INT64_MAX, INT64_MIN, "int64", &x));
    *out = (int64_t)x;
    return FATHOM_OK;
}

int fathom_gguf_value_f64(const fathom_gguf_value *v, double *out) {
    FATHOM_CHECK_ARG(v, "value is NULL");
    FATHOM_CHECK_ARG(out, "out is NULL");
    FATHOM_CHECK(v->type != FATHOM_GGUF_FLOAT32 && v->type != FATHOM_GGUF_FLOAT64,
                 FATHOM_ERR_FORMAT, "gguf: value is %s, a float wanted", type_name(v->type));
    *out = v->number_.f;
    return FATHOM_OK;
}

int fathom_gguf_value_f32(const fathom_gguf_value *v, float *out) {
    double x;
    FATHOM_CHECK_ARG(out, "out is NULL");
    FATHOM_TRY(fathom_gguf_value_f64(v, &x));
    *out = (float)x; /* exact for FLOAT32 */
    return FATHOM_OK;
}

int fathom_gguf_value_bool(const fathom_gguf_value *v, int *out) {
    FATHOM_CHECK_ARG(v, "value is NULL");
    FATHOM_CHECK_ARG(out, "out is NULL");
    FATHOM_CHECK(v->type != FATHOM_GGUF_BOOL, FATHOM_ERR_FORMAT, "gguf: value is %s, bool wanted",
                 type_name(v->type));
    *out = v->number_.u != 0;
    return FATHOM_OK;
}

int fathom_gguf_value_string(const fathom_gguf_value *v, const char **str, uint64_t *len) {
    FATHOM_CHECK_ARG(v, "value is NULL");
    FATHOM_CHECK_ARG(str, "str is NULL");
    FATHOM_CHECK(v->type != FATHOM_GGUF_STRING || !v->string, FATHOM_ERR_FORMAT,
                 "gguf: value is %s, string wanted", type_name(v->type));
    *str = v->string;
    if (len) *len = v->count;
    return FATHOM_OK;
}

int fathom_gguf_array_get(const fathom_gguf_value *array, uint64_t index, fathom_gguf_value *elem) {
    FATHOM_CHECK_ARG(array, "array is NULL");
    FATHOM_CHECK_ARG(elem, "elem is NULL");
    FATHOM_CHECK_ARG(array->type == FATHOM_GGUF_ARRAY && array->array_,
                     "value is %s, not an array", type_name(array->type));
    const gguf_node *n = array->array_;
    FATHOM_CHECK_ARG(index < n->count, "array index %llu out of range (%llu elements)",
                     (unsigned long long)index, (unsigned long long)n->count);
    if (n->items) {
        node_view(&n->items[index], elem);
    } else {
        gguf_node tmp;
        const int size = value_size(n->elem_type); /* fixed size, checked at parse */
        decode_scalar(n->elem_type, n->raw + index * (uint64_t)size, &tmp);
        node_view(&tmp, elem);
    }
    return FATHOM_OK;
}

#define KEY_GETTER(name, ctype)                                                                    \
    int fathom_gguf_get_##name(const fathom_gguf *g, const char *key, ctype *out) {                \
        fathom_gguf_value v;                                                                       \
        FATHOM_CHECK_ARG(out, "out is NULL");                                                      \
        FATHOM_TRY(fathom_gguf_get(g, key, &v));                                                   \
        int status = fathom_gguf_value_##name(&v, out);                                            \
        if (status < 0) {                                                                          \
            char msg[300];                                                                         \
            snprintf(msg, sizeof msg, "%s", fathom_last_error());                                  \
            return fathom_fail(status, "%s (key \"%s\")", msg, key);                               \
        }                                                                                          \
        return FATHOM_OK;                                                                          \
    }

KEY_GETTER(u32, uint32_t)
KEY_GETTER(i32, int32_t)
KEY_GETTER(u64, uint64_t)
KEY_GETTER(f32, float)
KEY_GETTER(bool, int)

int fathom_gguf_get_string(const fathom_gguf *g, const char *key, const char **str,
                           uint64_t *len) {
    fathom_gguf_value v;
    FATHOM_CHECK_ARG(str, "str is NULL");
    FATHOM_TRY(fathom_gguf_get(g, key, &v));
    FATHOM_CHECK(v.type != FATHOM_GGUF_STRING, FATHOM_ERR_FORMAT,
                 "gguf: key \"%s\" is %s, string wanted", key, type_name(v.type));
    return fathom_gguf_value_string(&v, str, len);
}

int fathom_gguf_get_array(const fathom_gguf *g, const char *key, fathom_gguf_type elem_type,
                          fathom_gguf_value *array) {
    fathom_gguf_value v;
    FATHOM_CHECK_ARG(array, "array is NULL");
    FATHOM_CHECK_ARG(value_size((uint32_t)elem_type) >= 0, "bad element type %d", (int)elem_type);
    FATHOM_TRY(fathom_gguf_get(g, key, &v));
    FATHOM_CHECK(v.type != FATHOM_GGUF_ARRAY || v.elem_type != elem_type, FATHOM_ERR_FORMAT,
                 "gguf: key \"%s\" is %s of %s, array of %s wanted", key, type_name(v.type),
                 v.type == FATHOM_GGUF_ARRAY ? type_name(v.elem_type) : "-", type_name(elem_type));
    *array = v;
    return FATHOM_OK;
}

/* ---- tensor access ----------------------------------------------------- */

int fathom_gguf_tensor_at(const fathom_gguf *g, uint64_t index, fathom_gguf_tensor_info *info) {
    FATHOM_CHECK_ARG(g, "gguf is NULL");
    FATHOM_CHECK_ARG(info, "info is NULL");
    FATHOM_CHECK_ARG(index < g->n_tensors, "tensor index %llu out of range (%llu tensors)",
                     (unsigned long long)index, (unsigned long long)g->n_tensors);
    const gguf_tensor *t = &g->tensors[index];
    info->name = t->name;
    info->type = t->type;
    info->n_dims = t->n_dims;
    memcpy(info->dims, t->dims, sizeof info->dims);
    info->n_elements = t->n_elements;
    info->offset = g->data_offset + t->rel_offset; /* checked at parse */
    info->bytes = t->bytes;
    info->data = g->base + info->offset;
    return FATHOM_OK;
}

int64_t fathom_gguf_find_tensor(const fathom_gguf *g, const char *name) {
    if (!g || !name) return -1;
    return find_name(g->tensor_sorted, g->n_tensors, name);
}

int fathom_gguf_tensor(const fathom_gguf *g, const char *name, fathom_gguf_tensor_info *info) {
    FATHOM_CHECK_ARG(g, "gguf is NULL");
    FATHOM_CHECK_ARG(name, "name is NULL");
    FATHOM_CHECK_ARG(info, "info is NULL");
    int64_t i = find_name(g->tensor_sorted, g->n_tensors, name);
    FATHOM_CHECK(i < 0, FATHOM_ERR_FORMAT, "gguf: no tensor \"%s\"", name);
    return fathom_gguf_tensor_at(g, (uint64_t)i, info);
}

/* Capture files: round trips through the streaming writer in every dtype,
 * a corpus of malformed files that must fail cleanly, bad arguments. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include "capture_internal.h"
#include "check.h"
#include "fathom.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[64];

/* A path in the test's directory; a ring of buffers so a few stay valid at once. */
static const char *tmp_path(const char *name) {
    static char paths[8][128];
    static int next;
    char *path = paths[next++ % 8];
    snprintf(path, 128, "%s/%s", tmpdir, name);
    return path;
}

static int file_exists(const char *path) { return access(path, F_OK) == 0; }

/* ===================================================================== *
 * round trips
 * ===================================================================== */

static uint64_t rng_state = 0x1234;
static double rnd(void) { /* xorshift64*: uniform in [0, 1) */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

/* Values over many magnitudes, signs, exact zeros and f16 subnormals, all
 * inside the f16 range so every dtype holds them finite. */
static void fill_values(float *x, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) {
        double mag = pow(10.0, -7.0 + 11.5 * rnd()); /* 1e-7 .. 3e4 */
        x[i] = (float)((rnd() < 0.5 ? -1 : 1) * mag);
        if (i % 17 == 0) x[i] = 0.0f;
    }
}

static float round_to(fathom_dtype dtype, float x) {
    if (dtype == FATHOM_DTYPE_F16) return fathom_f16_to_f32(fathom_f32_to_f16(x));
    if (dtype == FATHOM_DTYPE_BF16) return fathom_bf16_to_f32(fathom_f32_to_bf16(x));
    return x;
}

static void test_round_trip(fathom_dtype dtype) {
    fathom_source_info info = {.model = "test-model", .layers = 3, .q_heads = 6, .kv_heads = 2, .dim = 8,
                               .tokens = 37, .positions = 5, .first_query = 30};
    uint64_t qn = 6 * 5 * 8, kvn = 2 * 37 * 8;
    float *q[3], *k[3], *v[3];
    for (int l = 0; l < 3; l++) {
        q[l] = malloc(qn * 4), k[l] = malloc(kvn * 4), v[l] = malloc(kvn * 4);
        fill_values(q[l], qn), fill_values(k[l], kvn), fill_values(v[l], kvn);
    }
    const char *path = tmp_path("rt.safetensors");
    fathom_capture_writer *w;
    CHECK_OK(fathom_capture_writer_open(&w, path, &info, dtype));
    CHECK_OK(fathom_capture_writer_meta(w, "note", "round trip \xc3\xa9"));
    for (uint32_t l = 0; l < 3; l++) CHECK_OK(fathom_capture_writer_layer(w, l, q[l], k[l], v[l]));
    CHECK_OK(fathom_capture_writer_close(w));

    /* the data starts 8-byte aligned (header padded with spaces) */
    FILE *f = fopen(path, "rb");
    unsigned char len8[8];
    CHECK(f && fread(len8, 1, 8, f) == 8);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
    CHECK((8 + hlen) % 8 == 0);
    if (f) fclose(f);

    fathom_source *src;
    CHECK_OK(fathom_capture_open(&src, path));
    if (!src) return;
    fathom_source_info got;
    CHECK_OK(fathom_source_get_info(src, &got));
    CHECK(!strcmp(got.model, "test-model"));
    CHECK(got.layers == 3 && got.q_heads == 6 && got.kv_heads == 2 && got.dim == 8);
    CHECK(got.tokens == 37 && got.positions == 5 && got.first_query == 30);
    const char *value;
    CHECK_OK(fathom_source_metadata(src, "note", &value));
    CHECK(!strcmp(value, "round trip \xc3\xa9"));
    CHECK_OK(fathom_source_metadata(src, "format", &value));
    CHECK(!strcmp(value, "fathom-capture-1"));
    CHECK_OK(fathom_source_metadata(src, "first_query", &value));
    CHECK(!strcmp(value, "30"));
    CHECK_OK(fathom_source_metadata(src, "absent", &value));
    CHECK(!strcmp(value, ""));
    /* enumeration: every entry once, "note" among them, NULL past the end */
    {
        const char *key, *val;
        uint64_t n_meta = 0;
        int saw_note = 0;
        for (;; n_meta++) {
            CHECK_OK(fathom_source_metadata_at(src, n_meta, &key, &val));
            if (!key) break;
            if (!strcmp(key, "note")) saw_note = !strcmp(val, "round trip \xc3\xa9");
        }
        CHECK(saw_note);
        CHECK(n_meta >= 4); /* format, model, first_query, note */
        CHECK(val == NULL);
        CHECK_STATUS(fathom_source_metadata_at(src, 0, NULL, &val), FATHOM_ERR_INVALID_ARG);
        fathom_dtype dq, dk, dv;
        CHECK_OK(fathom_source_dtypes(src, 2, &dq, &dk, &dv));
        CHECK(dq == dtype && dk == dtype && dv == dtype);
        CHECK_STATUS(fathom_source_dtypes(src, 3, &dq, NULL, NULL), FATHOM_ERR_INVALID_ARG);
    }

    float *rq = malloc(qn * 4), *rk = malloc(kvn * 4), *rv = malloc(kvn * 4);
    /* relative rounding bound of the dtype for normal numbers */
    double rel = dtype == FATHOM_DTYPE_F32 ? 0 : dtype == FATHOM_DTYPE_F16 ? 1.0 / 2048 : 1.0 / 256;
    int exact_bad = 0, bound_bad = 0;
    for (uint32_t l = 0; l < 3; l++) {
        memset(rq, 0xff, qn * 4);
        CHECK_OK(fathom_source_layer(src, l, rq, rk, rv));
        for (uint64_t i = 0; i < kvn; i++) {
            const float *in[3] = {q[l], k[l], v[l]}, *out[3] = {rq, rk, rv};
            for (int r = 0; r < 3; r++) {
                if (r == 0 && i >= qn) continue;
                float x = in[r][i], y = out[r][i];
                if (memcmp(&y, &(float){round_to(dtype, x)}, 4)) exact_bad++;
                /* subnormal f16 (< 6.1e-5) has an absolute step of 2^-24 */
                double tol = fabs(x) * rel + (dtype == FATHOM_DTYPE_F16 ? 3e-8 : 0);
                if (fabs((double)y - x) > tol) bound_bad++;
            }
        }
    }
    CHECK(exact_bad == 0);
    CHECK(bound_bad == 0);
    /* any output may be NULL */
    memset(rk, 0, kvn * 4);
    CHECK_OK(fathom_source_layer(src, 2, NULL, rk, NULL));
    CHECK(rk[kvn - 1] == round_to(dtype, k[2][kvn - 1]));
    CHECK_OK(fathom_source_layer(src, 1, NULL, NULL, NULL));

    /* fathom_capture_write re-encodes a capture, keeping its extra metadata */
    const char *path2 = tmp_path("rt2.safetensors");
    CHECK_OK(fathom_capture_write(src, path2, FATHOM_DTYPE_BF16));
    fathom_source *src2;
    CHECK_OK(fathom_capture_open(&src2, path2));
    if (src2) {
        CHECK_OK(fathom_source_metadata(src2, "note", &value));
        CHECK(!strcmp(value, "round trip \xc3\xa9"));
        CHECK_OK(fathom_source_layer(src2, 2, rq, rk, rv));
        int bad = 0;
        for (uint64_t i = 0; i < kvn; i++)
            if (rv[i] != round_to(FATHOM_DTYPE_BF16, round_to(dtype, v[2][i]))) bad++;
        CHECK(bad == 0);
        fathom_source_free(src2);
    }
    fathom_source_free(src);
    for (int l = 0; l < 3; l++) free(q[l]), free(k[l]), free(v[l]);
    free(rq), free(rk), free(rv);
    remove(path), remove(path2);
}

/* A synthetic source written in f32 reads back bit for bit. */
static void test_write_synthetic(void) {
    fathom_source *syn, *cap;
    CHECK_OK(fathom_synth_open(&syn, "smollm2-135m", 100, 4, 7));
    const char *path = tmp_path("syn.safetensors");
    CHECK_OK(fathom_capture_write(syn, path, FATHOM_DTYPE_F32));
    CHECK_OK(fathom_capture_open(&cap, path));
    if (!cap) return;
    fathom_source_info a, b;
    fathom_source_get_info(syn, &a);
    fathom_source_get_info(cap, &b);
    CHECK(!strcmp(a.model, b.model) && a.layers == b.layers && a.tokens == b.tokens &&
          a.first_query == b.first_query && a.positions == b.positions);
    uint64_t qn = (uint64_t)a.q_heads * a.positions * a.dim, kvn = (uint64_t)a.kv_heads * a.tokens * a.dim;
    float *q1 = malloc(qn * 4), *k1 = malloc(kvn * 4), *q2 = malloc(qn * 4), *k2 = malloc(kvn * 4);
    CHECK_OK(fathom_source_layer(syn, a.layers - 1, q1, k1, NULL));
    CHECK_OK(fathom_source_layer(cap, a.layers - 1, q2, k2, NULL));
    CHECK(!memcmp(q1, q2, qn * 4) && !memcmp(k1, k2, kvn * 4));
    free(q1), free(k1), free(q2), free(k2);
    fathom_source_free(syn);
    fathom_source_free(cap);
    remove(path);
}

/* ===================================================================== *
 * hand-built files
 * ===================================================================== */

/* Tiny capture: 2 layers, Hq 2, Hkv 1, P 2, n 3, d 4, F32: q 64 bytes, k and v 48. */
typedef struct tspec {
    char name[16];
    char dtype[16];
    char shape[64];
    long long begin, end;
    int skip;
} tspec;

typedef struct spec {
    char meta[256];
    tspec t[8];
    int nt;
    size_t data_len;
    int pad_begin; /* data bytes before the first tensor (unaligned offsets) */
} spec;

static spec valid_spec(void) {
    spec s;
    memset(&s, 0, sizeof s);
    snprintf(s.meta, sizeof s.meta, "{\"format\":\"fathom-capture-1\",\"model\":\"tiny\",\"first_query\":\"1\"}");
    long long off = 0;
    for (int l = 0; l < 2; l++)
        for (int r = 0; r < 3; r++) {
            tspec *t = &s.t[s.nt++];
            snprintf(t->name, sizeof t->name, "l%d.%c", l, "qkv"[r]);
            snprintf(t->dtype, sizeof t->dtype, "F32");
            snprintf(t->shape, sizeof t->shape, r == 0 ? "[2,2,4]" : "[1,3,4]");
            t->begin = off;
            off += r == 0 ? 64 : 48;
            t->end = off;
        }
    s.data_len = (size_t)off;
    return s;
}

/* Serialise: 8-byte length, JSON header, data of floats i * 0.25. */
static unsigned char *build(const spec *s, const char *header_override, size_t *size) {
    char header[4096];
    int n = 0;
    if (header_override) {
        n = snprintf(header, sizeof header, "%s", header_override);
    } else {
        n = snprintf(header, sizeof header, "{\"__metadata__\":%s", s->meta);
        for (int i = 0; i < s->nt; i++) {
            const tspec *t = &s->t[i];
            if (t->skip) continue;
            n += snprintf(header + n, sizeof header - (size_t)n,
                          ",\"%s\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[%lld,%lld]}", t->name,
                          t->dtype, t->shape, t->begin + s->pad_begin, t->end + s->pad_begin);
        }
        n += snprintf(header + n, sizeof header - (size_t)n, "}");
    }
    size_t data_len = s->data_len + (size_t)s->pad_begin;
    *size = 8 + (size_t)n + data_len;
    unsigned char *buf = malloc(*size);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, header, (size_t)n);
    unsigned char *data = buf + 8 + n;
    memset(data, 0xee, (size_t)s->pad_begin);
    for (size_t i = 0; i + 4 <= s->data_len; i += 4) {
        float x = (float)(i / 4) * 0.25f;
        memcpy(data + s->pad_begin + i, &x, 4); /* little-endian host assumed by the test */
    }
    return buf;
}

static int open_spec(const spec *s, const char *header_override) {
    size_t size;
    unsigned char *buf = build(s, header_override, &size);
    fathom_source *src = NULL;
    int st = fathom_capture_open_memory(&src, buf, size);
    if (st == FATHOM_OK) {
        /* a file that opens must also read */
        float q[16], k[12], v[12];
        for (uint32_t l = 0; l < 2 && st == FATHOM_OK; l++) st = fathom_source_layer(src, l, q, k, v);
    } else {
        CHECK(src == NULL);
        CHECK(fathom_last_error()[0] != '\0');
    }
    fathom_source_free(src);
    free(buf);
    return st;
}

static int message_has(const char *needle) {
    if (!needle || strstr(fathom_last_error(), needle)) return 1;
    fprintf(stderr, "message '%s' lacks '%s'\n", fathom_last_error(), needle);
    return 0;
}

/* Expect status and a message mentioning needle (NULL: any message). */
#define CHECK_SPEC(s, override, status, needle)                                                    \
    do {                                                                                           \
        CHECK_STATUS(open_spec(&(s), override), status);                                           \
        CHECK(message_has(needle));                                                                \
    } while (0)

static void test_valid_and_values(void) {
    spec s = valid_spec();
    size_t size;
    unsigned char *buf = build(&s, NULL, &size);
    fathom_source *src;
    CHECK_OK(fathom_capture_open_memory(&src, buf, size));
    fathom_source_info in;
    CHECK_OK(fathom_source_get_info(src, &in));
    CHECK(in.layers == 2 && in.q_heads == 2 && in.kv_heads == 1 && in.positions == 2 && in.tokens == 3 &&
          in.dim == 4 && in.first_query == 1 && !strcmp(in.model, "tiny"));
    float q[16], k[12], v[12];
    CHECK_OK(fathom_source_layer(src, 1, q, k, v));
    /* l1.q starts at byte 160 = float 40; l1.v at 272 = float 68 */
    CHECK(q[0] == 10.0f && q[15] == 13.75f && v[0] == 17.0f && v[11] == 19.75f);
    CHECK_STATUS(fathom_source_layer(src, 2, q, k, v), FATHOM_ERR_INVALID_ARG);
    fathom_source_free(src);

    /* the same bytes through a real file */
    const char *path = tmp_path("tiny.safetensors");
    FILE *f = fopen(path, "wb");
    fwrite(buf, 1, size, f);
    fclose(f);
    CHECK_OK(fathom_capture_open(&src, path));
    fathom_source_free(src);

    /* every proper prefix fails cleanly, from memory and (a sample) from files */
    int bad_mem = 0, bad_file = 0;
    for (size_t len = 0; len < size; len++) {
        fathom_source *p = (fathom_source *)1;
        if (fathom_capture_open_memory(&p, buf, len) >= 0 || p != NULL) bad_mem++;
        if (len % 5 == 0 || len < 16 || len + 8 > size) {
            f = fopen(path, "wb");
            fwrite(buf, 1, len, f);
            fclose(f);
            p = (fathom_source *)1;
            int st = fathom_capture_open(&p, path);
            if (st != FATHOM_ERR_FORMAT || p != NULL) bad_file++;
        }
    }
    CHECK(bad_mem == 0);
    CHECK(bad_file == 0);
    remove(path);
    free(buf);

    /* unaligned offsets read correctly; unused bytes between tensors are allowed */
    s = valid_spec();
    s.pad_begin = 3;
    buf = build(&s, NULL, &size);
    CHECK_OK(fathom_capture_open_memory(&src, buf, size));
    CHECK_OK(fathom_source_layer(src, 1, q, k, v));
    CHECK(q[0] == 10.0f && v[11] == 19.75f);
    fathom_source_free(src);
    free(buf);
    /* no __metadata__ "format": accepted (hand-made files) */
    s = valid_spec();
    snprintf(s.meta, sizeof s.meta, "{\"model\":\"tiny\",\"first_query\":\"0\"}");
    CHECK_SPEC(s, NULL, FATHOM_OK, NULL);
    /* first_query at its largest, n - P */
    s = valid_spec();
    snprintf(s.meta, sizeof s.meta, "{\"model\":\"tiny\",\"first_query\":\"1\"}");
    CHECK_SPEC(s, NULL, FATHOM_OK, NULL);
}

static void test_malformed(void) {
    spec s;
    size_t size;
    /* header length: 0, past the end, over the cap, absurd */
    s = valid_spec();
    unsigned char *buf = build(&s, NULL, &size);
    uint64_t lens[] = {0, size - 7, 100000001ull, UINT64_MAX, 1ull << 63};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        unsigned char *b = malloc(size);
        memcpy(b, buf, size);
        for (int j = 0; j < 8; j++) b[j] = (unsigned char)(lens[i] >> (8 * j));
        fathom_source *p;
        CHECK_STATUS(fathom_capture_open_memory(&p, b, size), FATHOM_ERR_FORMAT);
        CHECK(strstr(fathom_last_error(), "header length") != NULL);
        free(b);
    }
    /* a header length that swallows part of the data: offsets then run past */
    {
        unsigned char *b = malloc(size);
        memcpy(b, buf, size);
        uint64_t h = 0;
        for (int j = 7; j >= 0; j--) h = h << 8 | b[j];
        h += 1;
        b[8 + h - 1] = ' ';
        for (int j = 0; j < 8; j++) b[j] = (unsigned char)(h >> (8 * j));
        fathom_source *p;
        CHECK_STATUS(fathom_capture_open_memory(&p, b, size), FATHOM_ERR_FORMAT);
        free(b);
    }
    free(buf);

    /* JSON */
    CHECK_SPEC(s, "{\"__metadata__\":{\"model\":\"x\"", FATHOM_ERR_FORMAT, "not valid JSON");
    CHECK_SPEC(s, "[1,2,3]", FATHOM_ERR_FORMAT, "not a JSON object");
    CHECK_SPEC(s, "\x01\x02garbage", FATHOM_ERR_FORMAT, "not valid JSON");
    CHECK_SPEC(s, "{}", FATHOM_ERR_FORMAT, "__metadata__");
    CHECK_SPEC(s, "{\"__metadata__\":{\"model\":\"t\",\"first_query\":\"0\"}}", FATHOM_ERR_FORMAT, "no layers");
    CHECK_SPEC(s, "{\"__metadata__\":[]}", FATHOM_ERR_FORMAT, "__metadata__");
    /* a NUL inside the header */
    CHECK_SPEC(s, "{\"__metadata__\":{\"model\":\"t\\u0000x\",\"first_query\":\"0\"}}", FATHOM_ERR_FORMAT, NULL);

    /* offsets */
    s = valid_spec(), s.t[5].end += 4;
    CHECK_SPEC(s, NULL, FATHOM_ERR_FORMAT, "l1.v");
    s = valid_spec(), s.t[5].begin += 4, s.t[5].end += 4;
    CHECK_SPEC(s, NULL, FATHOM_ERR_FORMAT, "run past");
    s = valid_spec(), s.t[2].begin = s.t[2].end + 4;
    CHECK_SPEC(s, NULL, FATHOM_ERR_FORMAT, "end");
    s = valid_spec(), s.t[1].begin = -48, s.t[1].end = 0;
    CHECK_SPEC(s, NULL, FATHOM_ERR_FORMAT, "negative");
    s = valid_spec(), s.t[4].begin -= 8, s.t[4].end -= 8; /* l1.k overlaps l1.q */
    CHECK_SPEC(s, NULL, FATHOM_ERR_FORMAT, "overlap");
    s = valid_spec(), s.t[3].begin = s.t[0].begin, s.t[3].end = s.t[0].end; /* l1.q on top of l0.q */
    CHECK_SPEC(s, NULL, FATHOM_ERR_FORMAT, "overlap");
    s = valid_spec(), s.t[2].end -= 4; /* size mismatch */
    CHECK_SPEC(s, NULL, FATHOM_ERR_FORMAT, "needs 48");
    s = valid_spec(), snprintf(s.t[2].shape, 64, "[1,3,4]"), s.t[2].end += 0, snprintf(s.t[2].dtype, 16, "F16");
    CHECK_SPEC(s, NULL, FATHOM_ERR_FORMAT, "needs 24");

    /* shapes */
    const char *bad_shapes[] = {"[0,3,4]", "[1,0,4]", "[1,3,0]", "[1,-3,4]", "[1,3]", "[1,1,3,4]", "[]",
                                "[1,3.0,4]", "[1,\"3\",4]", "3", "[4294967296,1,1]",
                                "[4294967295,4294967295,4294967295]", "[1,9223372036854775807,4]",
                                "[1,99999999999999999999,4]"};
    for (size_t i = 0; i < sizeof bad_shapes / sizeof bad_shapes[0]; i++) {
        s = valid_spec();
        snprintf(s.t[1].shape, 64, "%s", bad_shapes[i]);
        int st = open_spec(&s, NULL);
        CHECK(st == FATHOM_ERR_FORMAT);
        if (st != FATHOM_ERR_FORMAT) fprintf(stderr, "  shape %s gave %d\n", bad_shapes[i], st);
    }
    /* dtypes */
    s = valid_spec(), snprintf(s.t[0].dtype, 16, "F64");
    CHECK_SPEC(s, NULL, FATHOM_ERR_UNSUPPORTED, "F64");
    s = valid_spec(), snprintf(s.t[0].dtype, 16, "f32");
    CHECK_SPEC(s, NULL, FATHOM_ERR_UNSUPPORTED, "l0.q");
    s = valid_spec();
    CHECK_SPEC(s, "{\"__metadata__\":{\"model\":\"t\",\"first_query\":\"0\"},\"l0.q\":{\"shape\":[1,1,1],\"data_offsets\":[0,4]}}",
               FATHOM_ERR_FORMAT, "dtype");
    CHECK_SPEC(s, "{\"__metadata__\":{\"model\":\"t\",\"first_query\":\"0\"},\"l0.q\":{\"dtype\":7,\"shape\":[1,1,1],\"data_offsets\":[0,4]}}",
               FATHOM_ERR_FORMAT, "dtype");
    CHECK_SPEC(s, "{\"__metadata__\":{\"model\":\"t\",\"first_query\":\"0\"},\"l0.q\":[]}", FATHOM_ERR_FORMAT,
               "not an object");
    CHECK_SPEC(s, "{\"__metadata__\":{\"model\":\"t\",\"first_query\":\"0\"},\"l0.q\":{\"dtype\":\"F32\",\"shape\":[1,1,1],\"data_offsets\":[0]}}",
               FATHOM_ERR_FORMAT, "data_offsets");

    /* names: missing k or v, missing layer 0, gaps, duplicates, unknown */
    s = valid_spec(), s.t[4].skip = 1;
    CHECK_SPEC(s, NULL, FATHOM_ERR_FORMAT, "l1.k");
    s = valid_spec(), s.t[2].skip = 1;
    CHECK_SPEC(s, NULL, FATHOM_ERR_FORMAT, "l0.v");
    s = valid_spec(), s.t[0].skip = s.t[1].skip = s.t[2].skip = 1;
    CHECK_SPEC(s, NULL, FATHOM_ERR_FORMAT, "l0.q");
    s = valid_spec(), snprintf(s.t[3].name, 16, "l2.q"), snprintf(s.t[4].name, 16, "l2.k"), snprintf(s.t[5].name, 16, "l2.v");
    CHECK_SPEC(s, NULL, FATHOM_ERR_FORMAT, "layer 1");
    s = valid_spec(), s.t[s.nt] = s.t[0], s.nt++; /* l0.q twice */
    CHECK_SPEC(s, NULL, FATHOM_ERR_FORMAT, "duplicate");
    const char *bad_names[] = {"l0.x", "foo", "l01.q", "l.q", "L0.q", "l0.qq", "l-1.q", "l4096.q", "l99999999999.q", "l0.", "l0", "l"};
    for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
        s = valid_spec();
        snprintf(s.t[s.nt].name, 16, "%s", bad_names[i]);
        snprintf(s.t[s.nt].dtype, 16, "F32");
        snprintf(s.t[s.nt].shape, 64, "[1,1,1]");
        s.t[s.nt].begin = (long long)s.data_len;
        s.t[s.nt].end = (long long)s.data_len + 4;
        s.nt++;
        s.data_len += 4;
        CHECK_SPEC(s, NULL, FATHOM_ERR_FORMAT, "unexpected tensor");
    }

    /* inconsistent shapes */
    s = valid_spec(), snprintf(s.t[4].shape, 64, "[1,2,4]"), s.t[4].end -= 16; /* l1.k n=2 */
    CHECK_SPEC(s, NULL, FATHOM_ERR_FORMAT, "l1.k");
    s = valid_spec(), snprintf(s.t[2].shape, 64, "[1,4,3]"); /* v differs from k */
    CHECK_SPEC(s, NULL, FATHOM_ERR_FORMAT, "l0.v");
    s = valid_spec(), snprintf(s.t[3].shape, 64, "[4,1,4]"); /* l1.q [4,1,4] vs l0.q [2,2,4], same bytes */
    CHECK_SPEC(s, NULL, FATHOM_ERR_FORMAT, "l1.q");
    s = valid_spec(), snprintf(s.t[0].shape, 64, "[2,4,2]"), snprintf(s.t[3].shape, 64, "[2,4,2]");
    CHECK_SPEC(s, NULL, FATHOM_ERR_FORMAT, "head dimension");
    /* Hq 3 not a multiple of Hkv 2: q [3,1,4] = 48 bytes, k/v [2,... ] built by hand */
    s = valid_spec();
    CHECK_SPEC(s,
               "{\"__metadata__\":{\"model\":\"t\",\"first_query\":\"0\"},"
               "\"l0.q\":{\"dtype\":\"F32\",\"shape\":[3,1,4],\"data_offsets\":[0,48]},"
               "\"l0.k\":{\"dtype\":\"F32\",\"shape\":[2,1,4],\"data_offsets\":[48,80]},"
               "\"l0.v\":{\"dtype\":\"F32\",\"shape\":[2,1,4],\"data_offsets\":[80,112]}}",
               FATHOM_ERR_FORMAT, "multiple");
    /* P > n: q [1,3,4] with k [1,2,4] */
    CHECK_SPEC(s,
               "{\"__metadata__\":{\"model\":\"t\",\"first_query\":\"0\"},"
               "\"l0.q\":{\"dtype\":\"F32\",\"shape\":[1,3,4],\"data_offsets\":[0,48]},"
               "\"l0.k\":{\"dtype\":\"F32\",\"shape\":[1,2,4],\"data_offsets\":[48,80]},"
               "\"l0.v\":{\"dtype\":\"F32\",\"shape\":[1,2,4],\"data_offsets\":[80,112]}}",
               FATHOM_ERR_FORMAT, "positions");

    /* metadata */
    const char *bad_meta[] = {
        "{\"first_query\":\"1\"}",                               /* no model */
        "{\"model\":\"tiny\"}",                                  /* no first_query */
        "{\"model\":\"\",\"first_query\":\"1\"}",                /* empty model */
        "{\"model\":\"0123456789012345678901234567890123456789012345678901234567890123\",\"first_query\":\"1\"}",
        "{\"model\":\"tiny\",\"first_query\":\"2\"}",            /* 2 + P 2 > n 3 */
        "{\"model\":\"tiny\",\"first_query\":\"-1\"}",
        "{\"model\":\"tiny\",\"first_query\":\"\"}",
        "{\"model\":\"tiny\",\"first_query\":\"1x\"}",
        "{\"model\":\"tiny\",\"first_query\":\" 1\"}",
        "{\"model\":\"tiny\",\"first_query\":\"99999999999999999999999\"}",
        "{\"model\":\"tiny\",\"first_query\":\"18446744073709551615\"}",
        "{\"model\":\"tiny\",\"first_query\":1}",                /* not a string */
        "{\"model\":7,\"first_query\":\"1\"}",
    };
    for (size_t i = 0; i < sizeof bad_meta / sizeof bad_meta[0]; i++) {
        s = valid_spec();
        snprintf(s.meta, sizeof s.meta, "%s", bad_meta[i]);
        int st = open_spec(&s, NULL);
        CHECK(st == FATHOM_ERR_FORMAT);
        if (st != FATHOM_ERR_FORMAT) fprintf(stderr, "  metadata %s gave %d\n", bad_meta[i], st);
    }
    s = valid_spec();
    snprintf(s.meta, sizeof s.meta, "{\"format\":\"fathom-capture-2\",\"model\":\"tiny\",\"first_query\":\"1\"}");
    CHECK_SPEC(s, NULL, FATHOM_ERR_UNSUPPORTED, "format");
}

/* Tensors of different dtypes in one file; non-finite values are reported
 * only when the tensor holding them is read. */
static void test_mixed_and_nonfinite(void) {
    /* l0.q F16 [1,1,2], l0.k BF16 [1,2,2], l0.v F32 [1,2,2] */
    const char *header = "{\"__metadata__\":{\"model\":\"mix\",\"first_query\":\"1\"},"
                         "\"l0.q\":{\"dtype\":\"F16\",\"shape\":[1,1,2],\"data_offsets\":[0,4]},"
                         "\"l0.k\":{\"dtype\":\"BF16\",\"shape\":[1,2,2],\"data_offsets\":[4,12]},"
                         "\"l0.v\":{\"dtype\":\"F32\",\"shape\":[1,2,2],\"data_offsets\":[12,28]}}";
    size_t hlen = strlen(header), size = 8 + hlen + 28;
    unsigned char *buf = calloc(1, size);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    memcpy(buf + 8, header, hlen);
    unsigned char *d = buf + 8 + hlen;
    uint16_t q16[2] = {0x3c00, 0xc000};                 /* 1, -2 */
    uint16_t kb[4] = {0x3f80, 0x4040, 0xbf00, 0x0000}; /* 1, 3, -0.5, 0 */
    float vf[4] = {0.25f, -8.0f, 1e-30f, 3.5f};
    for (int i = 0; i < 2; i++) d[2 * i] = (unsigned char)q16[i], d[2 * i + 1] = (unsigned char)(q16[i] >> 8);
    for (int i = 0; i < 4; i++) d[4 + 2 * i] = (unsigned char)kb[i], d[4 + 2 * i + 1] = (unsigned char)(kb[i] >> 8);
    memcpy(d + 12, vf, 16);
    fathom_source *src;
    CHECK_OK(fathom_capture_open_memory(&src, buf, size));
    float q[2], k[4], v[4];
    CHECK_OK(fathom_source_layer(src, 0, q, k, v));
    CHECK(q[0] == 1.0f && q[1] == -2.0f);
    CHECK(k[0] == 1.0f && k[1] == 3.0f && k[2] == -0.5f && k[3] == 0.0f);
    CHECK(!memcmp(v, vf, 16));
    fathom_source_free(src);

    /* NaN in f16 q, +inf in bf16 k, -inf in f32 v */
    uint16_t nan16 = 0x7e00, inf_bf = 0x7f80;
    float ninf = -INFINITY;
    d[2] = (unsigned char)nan16, d[3] = (unsigned char)(nan16 >> 8);
    d[10] = (unsigned char)inf_bf, d[11] = (unsigned char)(inf_bf >> 8);
    memcpy(d + 12 + 8, &ninf, 4);
    CHECK_OK(fathom_capture_open_memory(&src, buf, size));
    CHECK_STATUS(fathom_source_layer(src, 0, q, NULL, NULL), FATHOM_ERR_NONFINITE);
    CHECK(strstr(fathom_last_error(), "l0.q") && strstr(fathom_last_error(), "[0, 0, 1]"));
    CHECK_STATUS(fathom_source_layer(src, 0, NULL, k, NULL), FATHOM_ERR_NONFINITE);
    CHECK(strstr(fathom_last_error(), "l0.k") && strstr(fathom_last_error(), "[0, 1, 1]"));
    CHECK_STATUS(fathom_source_layer(src, 0, NULL, NULL, v), FATHOM_ERR_NONFINITE);
    CHECK(strstr(fathom_last_error(), "l0.v") && strstr(fathom_last_error(), "[0, 1, 0]"));
    /* re-encoding a capture with a non-finite value fails and leaves no file */
    const char *path = tmp_path("nonfinite.safetensors");
    CHECK_STATUS(fathom_capture_write(src, path, FATHOM_DTYPE_F32), FATHOM_ERR_NONFINITE);
    CHECK(!file_exists(path));
    fathom_source_free(src);
    free(buf);
}

/* ===================================================================== *
 * arguments and writer states
 * ===================================================================== */

static void test_bad_arguments(void) {
    fathom_source *src = NULL;
    CHECK_STATUS(fathom_capture_open(NULL, "x"), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_capture_open(&src, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_capture_open(&src, ""), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_capture_open(&src, tmp_path("does-not-exist")), FATHOM_ERR_IO);
    CHECK_STATUS(fathom_capture_open(&src, tmpdir), FATHOM_ERR_IO); /* a directory */
    CHECK(src == NULL);
    CHECK_STATUS(fathom_capture_open_memory(NULL, "", 0), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_capture_open_memory(&src, NULL, 8), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_capture_open_memory(&src, NULL, 0), FATHOM_ERR_FORMAT);
    fathom_source_free(NULL);

    fathom_source_info info;
    CHECK_STATUS(fathom_source_get_info(NULL, &info), FATHOM_ERR_INVALID_ARG);
    float buf[8];
    CHECK_STATUS(fathom_source_layer(NULL, 0, buf, buf, buf), FATHOM_ERR_INVALID_ARG);
    const char *value;
    CHECK_STATUS(fathom_source_metadata(NULL, "model", &value), FATHOM_ERR_INVALID_ARG);

    CHECK_OK(fathom_synth_open(&src, "smollm2-135m", 8, 2, 1));
    CHECK_STATUS(fathom_source_get_info(src, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_source_metadata(src, NULL, &value), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_source_metadata(src, "model", NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_OK(fathom_source_metadata(src, "model", &value));
    CHECK(!strcmp(value, "")); /* synthetic sources have no metadata */
    CHECK_STATUS(fathom_source_layer(src, 30, NULL, NULL, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_capture_write(NULL, tmp_path("w"), FATHOM_DTYPE_F32), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_capture_write(src, NULL, FATHOM_DTYPE_F32), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_capture_write(src, "", FATHOM_DTYPE_F32), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_capture_write(src, tmp_path("w"), (fathom_dtype)3), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_capture_write(src, tmp_path("no-such-dir/w"), FATHOM_DTYPE_F32), FATHOM_ERR_IO);
    CHECK(!file_exists(tmp_path("w")));
    fathom_source_free(src);

    /* writer_open: every field of the info */
    fathom_source_info good = {.model = "m", .layers = 1, .q_heads = 2, .kv_heads = 1, .dim = 2,
                               .tokens = 4, .positions = 2, .first_query = 2};
    fathom_capture_writer *w = NULL;
    const char *path = tmp_path("w.safetensors");
    CHECK_STATUS(fathom_capture_writer_open(NULL, path, &good, FATHOM_DTYPE_F32), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_capture_writer_open(&w, NULL, &good, FATHOM_DTYPE_F32), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_capture_writer_open(&w, path, NULL, FATHOM_DTYPE_F32), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_capture_writer_open(&w, path, &good, (fathom_dtype)-1), FATHOM_ERR_INVALID_ARG);
    fathom_source_info bad[9];
    for (int i = 0; i < 9; i++) bad[i] = good;
    bad[0].model[0] = '\0';
    memset(bad[1].model, 'a', sizeof bad[1].model); /* not terminated */
    bad[2].layers = 0;
    bad[3].q_heads = 3;                 /* not a multiple of kv_heads 2 */
    bad[3].kv_heads = 2;
    bad[4].dim = 0;
    bad[5].tokens = 0;
    bad[6].positions = 0;
    bad[7].first_query = 3;             /* 3 + 2 > 4 */
    bad[8].tokens = UINT64_MAX / 2;     /* layer size overflows */
    bad[8].first_query = 0;
    for (int i = 0; i < 9; i++) {
        int st = fathom_capture_writer_open(&w, path, &bad[i], FATHOM_DTYPE_F32);
        CHECK(st == FATHOM_ERR_INVALID_ARG || (i == 8 && st == FATHOM_ERR_NOMEM));
        CHECK(w == NULL);
    }
    CHECK(!file_exists(path));
    CHECK_STATUS(fathom_capture_writer_open(&w, tmp_path("no-such-dir/x"), &good, FATHOM_DTYPE_F32), FATHOM_ERR_IO);

    /* writer states */
    float q[8] = {1, 2, 3, 4, 5, 6, 7, 8}, k[8] = {0}, v[8] = {0};
    CHECK_OK(fathom_capture_writer_open(&w, path, &good, FATHOM_DTYPE_F16));
    CHECK_STATUS(fathom_capture_writer_meta(NULL, "a", "b"), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_capture_writer_meta(w, NULL, "b"), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_capture_writer_meta(w, "", "b"), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_capture_writer_meta(w, "a", NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_capture_writer_meta(w, "model", "b"), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_capture_writer_meta(w, "first_query", "b"), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_capture_writer_meta(w, "format", "b"), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_capture_writer_meta(w, "a", "\xff\xfe"), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_capture_writer_meta(w, "\xc3", "b"), FATHOM_ERR_INVALID_ARG);
    CHECK_OK(fathom_capture_writer_meta(w, "a", "b"));
    CHECK_STATUS(fathom_capture_writer_meta(w, "a", "c"), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_capture_writer_layer(NULL, 0, q, k, v), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_capture_writer_layer(w, 0, NULL, k, v), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_capture_writer_layer(w, 0, q, NULL, v), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_capture_writer_layer(w, 0, q, k, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_capture_writer_layer(w, 1, q, k, v), FATHOM_ERR_STATE);
    CHECK_OK(fathom_capture_writer_layer(w, 0, q, k, v));
    CHECK_STATUS(fathom_capture_writer_layer(w, 1, q, k, v), FATHOM_ERR_STATE); /* only 1 layer */
    CHECK_STATUS(fathom_capture_writer_meta(w, "late", "x"), FATHOM_ERR_STATE);
    CHECK_OK(fathom_capture_writer_close(w));
    CHECK_OK(fathom_capture_open(&src, path));
    if (src) {
        CHECK_OK(fathom_source_metadata(src, "a", &value));
        CHECK(!strcmp(value, "b"));
        CHECK_OK(fathom_source_metadata(src, "late", &value));
        CHECK(!strcmp(value, ""));
        fathom_source_free(src);
    }
    CHECK_STATUS(fathom_capture_writer_close(NULL), FATHOM_ERR_INVALID_ARG);
    /* closing before every layer is written fails and removes the file */
    fathom_source_info two = good;
    two.layers = 2;
    CHECK_OK(fathom_capture_writer_open(&w, path, &two, FATHOM_DTYPE_BF16));
    CHECK_OK(fathom_capture_writer_layer(w, 0, q, k, v));
    CHECK_STATUS(fathom_capture_writer_close(w), FATHOM_ERR_STATE);
    CHECK(!file_exists(path));
    CHECK_OK(fathom_capture_writer_open(&w, path, &two, FATHOM_DTYPE_BF16));
    CHECK_STATUS(fathom_capture_writer_close(w), FATHOM_ERR_STATE);
    CHECK(!file_exists(path));

    /* a finite value the dtype cannot hold is refused, the writer is then
     * unusable and the file removed; NaN passes through (the reader flags it) */
    q[3] = 70000.0f;
    CHECK_OK(fathom_capture_writer_open(&w, path, &good, FATHOM_DTYPE_F16));
    CHECK_STATUS(fathom_capture_writer_layer(w, 0, q, k, v), FATHOM_ERR_INVALID_ARG);
    CHECK(strstr(fathom_last_error(), "l0.q") && strstr(fathom_last_error(), "element 3"));
    CHECK_STATUS(fathom_capture_writer_layer(w, 0, q, k, v), FATHOM_ERR_STATE);
    CHECK_STATUS(fathom_capture_writer_close(w), FATHOM_ERR_STATE);
    CHECK(!file_exists(path));
    CHECK_OK(fathom_capture_writer_open(&w, path, &good, FATHOM_DTYPE_BF16)); /* 7e4 fits bf16 */
    v[5] = 3.4e38f;                                                           /* rounds past FLT_MAX */
    CHECK_STATUS(fathom_capture_writer_layer(w, 0, q, k, v), FATHOM_ERR_INVALID_ARG);
    CHECK(strstr(fathom_last_error(), "l0.v") != NULL);
    CHECK_STATUS(fathom_capture_writer_close(w), FATHOM_ERR_STATE);
    v[5] = NAN;
    q[3] = 4.0f;
    CHECK_OK(fathom_capture_writer_open(&w, path, &good, FATHOM_DTYPE_F16));
    CHECK_OK(fathom_capture_writer_layer(w, 0, q, k, v));
    CHECK_OK(fathom_capture_writer_close(w));
    CHECK_OK(fathom_capture_open(&src, path));
    if (src) {
        CHECK_STATUS(fathom_source_layer(src, 0, NULL, NULL, v), FATHOM_ERR_NONFINITE);
        fathom_source_free(src);
    }
    remove(path);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/fathom-test-capture-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip(FATHOM_DTYPE_F32);
    test_round_trip(FATHOM_DTYPE_F16);
    test_round_trip(FATHOM_DTYPE_BF16);
    test_write_synthetic();
    test_valid_and_values();
    test_malformed();
    test_mixed_and_nonfinite();
    test_bad_arguments();
    rmdir(tmpdir);
    return check_summary("test_capture");
}

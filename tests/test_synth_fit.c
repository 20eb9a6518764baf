/* Presets fitted to captures (src/io/synth_fit.c, synth_preset.c): a preset
 * file round-trips to the same bytes; malformed preset text fails with
 * FATHOM_ERR_FORMAT; and the fit, run on a capture the generator itself
 * wrote from a known preset, finds that preset's RoPE and the knobs that
 * have a statistic of their own again, and matches its statistics. */
#include "check.h"
#include "fathom.h"
#include "source.h"
#include "synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <unistd.h>

static const char *tmp_path(const char *suffix, char *buf, size_t cap) {
    snprintf(buf, cap, "/tmp/test_synth_fit_%ld%s", (long)getpid(), suffix);
    return buf;
}

/* The float field of s at offset `at` (offsetof(synth_params, ...)). */
static float *field_at(synth_params *s, size_t at) { return (float *)((char *)s + at); }

/* An optional float field (offset at) through the preset file: at v it
 * comes back as v; at 0 (not written) it reads as 0. Leaves it 0. */
static void round_trip(fathom_synth_preset *p, size_t at, float v, const char *suffix) {
    char path[128];
    tmp_path(suffix, path, sizeof path);
    for (int pass = 0; pass < 2; pass++) {
        const float want = pass ? 0.0f : v;
        *field_at(&p->p, at) = want;
        CHECK_OK(fathom_synth_preset_write(p, path, NULL));
        fathom_synth_preset *back = NULL;
        CHECK_OK(fathom_synth_preset_load(&back, path));
        CHECK(back && *field_at(&back->p, at) == want);
        fathom_synth_preset_free(back);
    }
    remove(path);
}

/* A known fitted preset of a small model: d = 32, RoPE base 1e4 (NeoX). */
static fathom_synth_preset *known_preset(void) {
    fathom_synth_preset *p = calloc(1, sizeof *p);
    synth_params *s = &p->p;
    CHECK(synth_builtin("smollm2-135m", s));
    snprintf(s->name, sizeof s->name, "known");
    s->layers = 2, s->kv_heads = 2, s->group = 2, s->dim = 32, s->rope_base = 1e4;
    s->fitted = true;
    s->scale_spread = 0.2f, s->topics = 16, s->topic_amp = 3.0f;
    s->topic_logit = 4.0f, s->sink_logit = 10.0f, s->query_run = 8;
    double kn = 0, qn = 0;
    for (uint32_t j = 0; j < s->dim; j++) {
        s->k_std[j] = expf(0.8f * cosf(0.7f * (float)j)), s->q_std[j] = expf(0.5f * sinf(0.3f * (float)j));
        s->k_mean[j] = j % 16 == 15 ? 3.0f : 0.2f, s->q_mean[j] = 1.0f;
        kn += (double)s->k_std[j] * s->k_std[j], qn += (double)s->q_std[j] * s->q_std[j];
    }
    for (uint32_t j = 0; j < s->dim; j++) s->k_std[j] /= (float)sqrt(kn / s->dim), s->q_std[j] /= (float)sqrt(qn / s->dim);
    CHECK_OK(synth_params_check(s));
    return p;
}

/* The known preset with a positional profile: pairs 0-7 (theta from 1 down
 * to 1/56 rad per token) each add 0.8 cos((p - t) theta_i) logits, so the
 * nearest keys gain up to 6.4 over far ones, and the slowest pair a
 * constant -2 that only the sink token (its key without the mean) escapes.
 * Less concentrated content and smaller query means than the known preset. */
static fathom_synth_preset *known_positional(void) {
    fathom_synth_preset *p = known_preset();
    synth_params *s = &p->p;
    s->topic_logit = 1.5f, s->sink_logit = 8.0f; /* less concentrated content than the known preset */
    for (uint32_t j = 0; j < s->dim; j++) s->q_mean[j] = 0.1f, s->k_mean[j] = 1.0f;
    s->positional = true;
    s->pos_gain = 1.0f;
    for (uint32_t i = 0; i < s->dim / 2; i++) s->pos_re[i] = i < 8 ? 0.8f : 0.0f, s->pos_im[i] = 0.0f;
    s->pos_re[s->dim / 2 - 1] = -2.0f;
    CHECK_OK(synth_params_check(s));
    return p;
}

static uint64_t fnv1a(const void *data, size_t n, uint64_t h) {
    const unsigned char *b = data;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* FNV-1a of one layer's q, k and v (float32 bytes, in that order). */
static uint64_t layer_hash(fathom_source *src, uint32_t layer) {
    fathom_source_info in;
    uint64_t qe, ke;
    CHECK_OK(fathom_source_get_info(src, &in));
    CHECK_OK(fathom_source_layer_sizes(&in, &qe, &ke));
    float *q = malloc(qe * sizeof *q), *k = malloc(ke * sizeof *k), *v = malloc(ke * sizeof *v);
    CHECK_OK(fathom_source_layer(src, layer, q, k, v));
    uint64_t h = fnv1a(q, qe * sizeof *q, 0xcbf29ce484222325ull);
    h = fnv1a(k, ke * sizeof *k, h);
    h = fnv1a(v, ke * sizeof *v, h);
    free(q), free(k), free(v);
    return h;
}

/* Presets without a positional profile generate the bytes they generated
 * before it existed: the hashes were computed by the library at b9b6428
 * (the commit before the positional profile), with the same calls. */
static void test_bytes_unchanged(void) {
    static const struct {
        const char *name;
        uint64_t hash;
    } builtin[] = {{"smollm2-135m", 0x331894eb9ce30fb4ull},
                   {"qwen3-8b", 0x07fabc9a27e8801cull},
                   {"llama-3.1-8b", 0x7a9044bcca25ac92ull}};
    fathom_source *src;
    for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++) {
        CHECK_OK(fathom_synth_open(&src, builtin[i].name, 300, 4, 1));
        uint64_t h = layer_hash(src, 0);
        CHECK(h == builtin[i].hash);
        if (h != builtin[i].hash) printf("%s: hash 0x%016llx\n", builtin[i].name, (unsigned long long)h);
        fathom_source_free(src);
    }
    fathom_synth_preset *p = known_preset();
    CHECK_OK(fathom_synth_open_preset(&src, p, 300, 4, 3));
    uint64_t h = layer_hash(src, 1);
    CHECK(h == 0x6d91e1545dc0c6ccull);
    if (h != 0x6d91e1545dc0c6ccull) printf("known fitted preset: hash 0x%016llx\n", (unsigned long long)h);
    fathom_source_free(src);
    fathom_synth_preset_free(p);
}

static void layer_bytes(const fathom_synth_preset *p, uint64_t n, uint32_t positions, float *q, float *k, float *v) {
    fathom_source *src;
    CHECK_OK(fathom_synth_open_preset(&src, p, n, positions, 3));
    CHECK_OK(fathom_source_layer(src, 1, q, k, v));
    fathom_source_free(src);
}

static void test_roundtrip(void) {
    fathom_synth_preset *p = known_preset(), *back = NULL;
    char path[128];
    tmp_path(".json", path, sizeof path);
    CHECK_OK(fathom_synth_preset_write(p, path, "{\"note\":\"test\"}"));
    CHECK_OK(fathom_synth_preset_load(&back, path));
    fathom_source_info in;
    CHECK_OK(fathom_synth_preset_info(back, &in));
    CHECK(!strcmp(in.model, "known") && in.layers == 2 && in.kv_heads == 2 && in.q_heads == 4 && in.dim == 32);
    /* the file keeps every parameter: the same bytes from both */
    enum { N = 300, P = 4, QN = 4 * P * 32, KN = 2 * N * 32 };
    static float q1[QN], k1[KN], v1[KN], q2[QN], k2[KN], v2[KN];
    layer_bytes(p, N, P, q1, k1, v1);
    layer_bytes(back, N, P, q2, k2, v2);
    CHECK(!memcmp(q1, q2, sizeof q1) && !memcmp(k1, k2, sizeof k1) && !memcmp(v1, v2, sizeof v1));
    /* and differ from the built-in generator's (the profiles are used) */
    fathom_synth_preset *plain = known_preset();
    plain->p.fitted = false;
    layer_bytes(plain, N, P, q2, k2, v2);
    CHECK(memcmp(k1, k2, sizeof k1) != 0);
    /* a built-in preset has no file form; writing needs a JSON object as extra */
    fathom_synth_preset *builtin = NULL;
    CHECK_OK(fathom_synth_preset_load(&builtin, "qwen3-8b"));
    CHECK_STATUS(fathom_synth_preset_write(builtin, path, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_synth_preset_write(p, path, "[1]"), FATHOM_ERR_INVALID_ARG);
    remove(path);
    fathom_synth_preset_free(p), fathom_synth_preset_free(back), fathom_synth_preset_free(plain);
    fathom_synth_preset_free(builtin);
    fathom_synth_preset_free(NULL);
}

static void test_malformed(void) {
    static const char *const bad[] = {
        "", "{", "[]", "{\"format\":\"fathom-synth-preset-1\"}",
        "{\"format\":\"fathom-synth-preset-1\",\"name\":\"x\",\"bogus\":1}",
        "{\"format\":\"fathom-synth-preset-2\",\"name\":\"x\"}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fathom_synth_preset *p = (fathom_synth_preset *)&p; /* must come back NULL */
        CHECK_STATUS(fathom_synth_preset_parse(&p, bad[i], strlen(bad[i])), FATHOM_ERR_FORMAT);
        CHECK(p == NULL);
    }
    /* a valid file with one field broken at a time, through the writer */
    fathom_synth_preset *p = known_preset(), *back = NULL;
    char path[128];
    tmp_path(".json", path, sizeof path);
    CHECK_OK(fathom_synth_preset_write(p, path, NULL));
    FILE *f = fopen(path, "rb");
    static char text[1 << 16];
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = '\0';
    CHECK_OK(fathom_synth_preset_parse(&back, text, len));
    fathom_synth_preset_free(back);
    static const struct {
        const char *from, *to, *message;
    } edits[] = {{"\"dim\": 32", "\"dim\": 24", "\"k_std\" must be an array of dim = 24"},
                 {"\"topics\": 16", "\"topics\": 18", "topics 18 must be a multiple of 4"},
                 {"\"layers\": 2", "\"layers\": -2", "\"layers\" = -2 is out of range"},
                 {"\"qk_norm\": false", "\"qk_norm\": null", "non-boolean \"qk_norm\""},
                 {"\"query_run\": 8", "\"query_run\": 8.5", "\"query_run\" is not an integer"}};
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        static char edited[1 << 16];
        const char *at = strstr(text, edits[i].from);
        CHECK(at != NULL);
        if (!at) continue;
        snprintf(edited, sizeof edited, "%.*s%s%s", (int)(at - text), text, edits[i].to, at + strlen(edits[i].from));
        back = NULL;
        CHECK_STATUS(fathom_synth_preset_parse(&back, edited, strlen(edited)), FATHOM_ERR_FORMAT);
        CHECK(back == NULL && strstr(fathom_last_error(), edits[i].message) != NULL);
        if (!strstr(fathom_last_error(), edits[i].message)) printf("got: %s\n", fathom_last_error());
    }
    remove(path);
    fathom_synth_preset_free(p);
    CHECK_STATUS(fathom_synth_preset_load(&back, "no-such-preset"), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_synth_preset_load(&back, "/nonexistent/preset.json"), FATHOM_ERR_IO);
    CHECK_STATUS(fathom_synth_preset_parse(NULL, "{}", 2), FATHOM_ERR_INVALID_ARG);
}

/* A positional preset's file keeps the profile (the same bytes back); the
 * three keys come together, in range, with d/2 numbers each. */
static void test_positional_file(void) {
    fathom_synth_preset *p = known_positional(), *back = NULL, *plain = known_preset();
    char path[128];
    tmp_path("-pos.json", path, sizeof path);
    CHECK_OK(fathom_synth_preset_write(p, path, NULL));
    CHECK_OK(fathom_synth_preset_load(&back, path));
    CHECK(back && back->p.positional && back->p.pos_gain == 1.0f && back->p.pos_re[15] == -2.0f);
    enum { N = 300, P = 4, QN = 4 * P * 32, KN = 2 * N * 32 };
    static float q1[QN], k1[KN], v1[KN], q2[QN], k2[KN], v2[KN];
    layer_bytes(p, N, P, q1, k1, v1);
    if (back) layer_bytes(back, N, P, q2, k2, v2);
    CHECK(!memcmp(q1, q2, sizeof q1) && !memcmp(k1, k2, sizeof k1) && !memcmp(v1, v2, sizeof v1));
    /* the profile changes the queries and token 0's key, not the values */
    layer_bytes(plain, N, P, q2, k2, v2);
    CHECK(memcmp(q1, q2, sizeof q1) != 0 && memcmp(k1, k2, 32 * sizeof(float)) != 0 && !memcmp(v1, v2, sizeof v1));
    FILE *f = fopen(path, "rb");
    static char text[1 << 16], edited[(1 << 16) + 32];
    size_t len = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[len] = '\0';
    static const struct {
        const char *from, *to, *message;
    } edits[] = {{"\"pos_gain\": 1.0", "\"pos_gain\": 200.0", "pos_gain 200 not in [0, 100]"},
                 {"\"pos_re\": [", "\"pos_re\": [1.0, ", "\"pos_re\" must be an array of dim / 2 = 16"},
                 {"\"pos_im\": [", "\"pos_im\": [1e9, ", "\"pos_im\" must be an array of dim / 2 = 16"},
                 {"\"pos_re\": [", "\"bogus\": [", "unknown key \"bogus\""}};
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        const char *at = strstr(text, edits[i].from);
        CHECK(at != NULL);
        if (!at) continue;
        snprintf(edited, sizeof edited, "%.*s%s%s", (int)(at - text), text, edits[i].to, at + strlen(edits[i].from));
        fathom_synth_preset_free(back);
        back = NULL;
        CHECK_STATUS(fathom_synth_preset_parse(&back, edited, strlen(edited)), FATHOM_ERR_FORMAT);
        CHECK(back == NULL && strstr(fathom_last_error(), edits[i].message) != NULL);
        if (!strstr(fathom_last_error(), edits[i].message)) printf("got: %s\n", fathom_last_error());
    }
    /* a file without the profile plus pos_gain alone: the keys come together */
    CHECK_OK(fathom_synth_preset_write(plain, path, NULL));
    f = fopen(path, "rb");
    len = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[len] = '\0';
    CHECK(len > 0 && text[0] == '{' && strstr(text, "pos_") == NULL);
    memcpy(edited, "{\"pos_gain\": 1.0,", 17);
    snprintf(edited + 17, sizeof edited - 17, "%s", text + 1);
    CHECK_STATUS(fathom_synth_preset_parse(&back, edited, strlen(edited)), FATHOM_ERR_FORMAT);
    CHECK(strstr(fathom_last_error(), "come together") != NULL);
    remove(path);
    fathom_synth_preset_free(p), fathom_synth_preset_free(back), fathom_synth_preset_free(plain);
}

/* Calls visit(logit, pos, ctx) for each of the last 8 queries of every
 * head of every layer of p's source at n tokens, logit[t] = q.k_t / sqrt(d)
 * for the keys t = 0..pos it attends (logit: n doubles, the visit's to
 * change); returns the number of calls. */
static uint64_t for_each_last_query(const fathom_synth_preset *p, uint64_t n,
                                    void (*visit)(double *logit, uint64_t pos, void *ctx), void *ctx) {
    fathom_source *src;
    fathom_source_info in;
    uint64_t qe, ke, calls = 0;
    enum { P = 8 };
    CHECK_OK(fathom_synth_open_preset(&src, p, n, P, 1));
    CHECK_OK(fathom_source_get_info(src, &in));
    CHECK_OK(fathom_source_layer_sizes(&in, &qe, &ke));
    float *q = malloc(qe * sizeof *q), *k = malloc(ke * sizeof *k);
    double *w = malloc(n * sizeof *w);
    CHECK(q && k && w);
    const uint32_t d = in.dim, group = in.q_heads / in.kv_heads;
    for (uint32_t layer = 0; q && k && w && layer < in.layers; layer++) {
        CHECK_OK(fathom_source_layer(src, layer, q, k, NULL));
        for (uint32_t h = 0; h < in.q_heads; h++)
            for (uint32_t i = 0; i < P; i++) {
                const float *qh = q + ((uint64_t)h * P + i) * d, *kh = k + (uint64_t)(h / group) * n * d;
                const uint64_t pos = n - P + i; /* the query attends keys 0..pos */
                for (uint64_t t = 0; t <= pos; t++) {
                    double dot = 0;
                    for (uint32_t j = 0; j < d; j++) dot += (double)qh[j] * kh[t * d + j];
                    w[t] = dot / sqrt((double)d);
                }
                visit(w, pos, ctx);
                calls++;
            }
    }
    free(q), free(k), free(w);
    fathom_source_free(src);
    return calls;
}

/* Adds one query's attention masses to out[4]: on token 0, on tokens 0-3,
 * on the last 32 keys before the query and on the top 32 keys. */
static void attention_masses(double *w, uint64_t pos, void *ctx) {
    double *out = ctx, mx = -INFINITY, sum = 0;
    for (uint64_t t = 0; t <= pos; t++)
        if (w[t] > mx) mx = w[t];
    for (uint64_t t = 0; t <= pos; t++) sum += (w[t] = exp(w[t] - mx));
    for (uint64_t t = 0; t <= pos; t++) {
        w[t] /= sum;
        out[0] += t == 0 ? w[t] : 0, out[1] += t < 4 ? w[t] : 0, out[2] += t + 32 > pos ? w[t] : 0;
    }
    for (int top = 0; top < 32; top++) { /* selection: the 32 largest */
        uint64_t best = 0;
        for (uint64_t t = 1; t <= pos; t++)
            if (w[t] > w[best]) best = t;
        out[3] += w[best];
        w[best] = -1;
    }
}

/* Dense attention of the last 8 queries of every head of both layers,
 * computed here: mean mass on token 0, on tokens 0-3, on the last 32 keys
 * before the query and on the top 32 keys. */
static void attention_here(const fathom_synth_preset *p, uint64_t n, double out[4]) {
    memset(out, 0, 4 * sizeof *out);
    const uint64_t calls = for_each_last_query(p, n, attention_masses, out);
    for (int i = 0; i < 4; i++) out[i] /= (double)(calls ? calls : 1);
}

/* What the positional profile does, measured here on the generated vectors:
 * with the keys and queries rotated back (NeoX, base 1e4), the mean query
 * (over 256 positions) meets the mean key (over tokens 4..n-1) in pair i as
 * mean_q_i conj(mean_k_i) / sqrt(d) = pos_gain * A_i, averaged over the
 * heads (each head's target is A_i times its share of the pair's key
 * energy against the profile's, about 1 on average at this spread of 0.2);
 * without the profile it does not. And the attention computed here:
 * more of it on the last 32 keys, and token 0 the only sink. */
static void pair_means_heads(const fathom_synth_preset *p, double *re, double *im, double (*head_re)[16],
                             double (*head_im)[16]);

static void pair_means(const fathom_synth_preset *p, double *re, double *im) { pair_means_heads(p, re, im, NULL, NULL); }

/* pair_means, and with head_re/head_im each query head's own (layer-major,
 * [layers * q_heads][16]). */
static void pair_means_heads(const fathom_synth_preset *p, double *re, double *im, double (*head_re)[16],
                             double (*head_im)[16]) {
    enum { N = 1024, P = 256, D = 32 };
    fathom_source *src;
    fathom_source_info in;
    CHECK_OK(fathom_synth_open_preset(&src, p, N, P, 1));
    CHECK_OK(fathom_source_get_info(src, &in));
    float *q = malloc((size_t)in.q_heads * P * D * 4), *k = malloc((size_t)in.kv_heads * N * D * 4);
    memset(re, 0, 16 * sizeof *re), memset(im, 0, 16 * sizeof *im);
    const uint32_t group = in.q_heads / in.kv_heads;
    for (uint32_t layer = 0; layer < in.layers; layer++) {
        CHECK_OK(fathom_source_layer(src, layer, q, k, NULL));
        for (uint32_t h = 0; h < in.q_heads; h++) {
            double km[D] = {0}, qm[D] = {0};
            for (int which = 0; which < 2; which++) {
                const float *x = which ? q + (size_t)h * P * D : k + (size_t)(h / group) * N * D;
                uint64_t rows = which ? P : N, first = which ? N - P : 4, pos0 = which ? N - P : 0;
                double *m = which ? qm : km;
                for (uint64_t r = which ? 0 : 4; r < rows; r++) {
                    uint64_t pos = pos0 + r;
                    for (uint32_t i = 0; i < 16; i++) {
                        double th = pow(1e4, -2.0 * i / D), c = cos(pos * th), sn = sin(pos * th);
                        double a = x[r * D + i], b = x[r * D + i + 16];
                        m[i] += (a * c + b * sn) / (double)(rows - (which ? 0 : first));
                        m[i + 16] += (b * c - a * sn) / (double)(rows - (which ? 0 : first));
                    }
                }
            }
            for (uint32_t i = 0; i < 16; i++) {
                double a = (qm[i] * km[i] + qm[i + 16] * km[i + 16]) / sqrt((double)D);
                double b = (qm[i + 16] * km[i] - qm[i] * km[i + 16]) / sqrt((double)D);
                re[i] += a / (in.layers * in.q_heads), im[i] += b / (in.layers * in.q_heads);
                if (head_re) head_re[layer * in.q_heads + h][i] = a, head_im[layer * in.q_heads + h][i] = b;
            }
        }
    }
    free(q), free(k);
    fathom_source_free(src);
}

static void test_positional_profile(void) {
    fathom_synth_preset *pos = known_positional(), *plain = known_positional();
    plain->p.positional = false; /* the same preset without the profile */
    double re[16], im[16], re0[16], im0[16], worst = 0, worst0 = 0;
    pair_means(pos, re, im);
    pair_means(plain, re0, im0);
    for (uint32_t i = 0; i < 16; i++) {
        double e = hypot(re[i] - pos->p.pos_re[i], im[i] - pos->p.pos_im[i]);
        double e0 = hypot(re0[i] - pos->p.pos_re[i], im0[i] - pos->p.pos_im[i]);
        worst = e > worst ? e : worst, worst0 = e0 > worst0 ? e0 : worst0;
    }
    printf("mean-mean profile against the preset's: worst pair off by %.3f logits (without the profile: %.3f)\n",
           worst, worst0);
    /* the preset's A is 0.8 on pairs 0-7 and -2 on pair 15; the residue is
     * the text's query mean against the fixed text's the component completes */
    CHECK(worst < 0.35 && worst0 > 1.0);
    double a[4], b[4];
    attention_here(pos, 1024, a);
    attention_here(plain, 1024, b);
    printf("attention (2 layers, 4 heads, last 8 positions): token 0 / first 4 / last 32 / top 32 mass: positional "
           "%.3f / %.3f / %.3f / %.3f, without %.3f / %.3f / %.3f / %.3f\n",
           a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]);
    CHECK(a[2] > b[2]);                  /* locality from the means under RoPE */
    CHECK(a[3] < 0.99);                  /* the rest of attention is not a few keys */
    CHECK(a[0] > 0.5 * a[1] && b[0] < 0.8 * b[1]); /* one sink token against the built-in four */
    fathom_synth_preset_free(pos), fathom_synth_preset_free(plain);
}

static double corr(const double *a, const double *b, uint32_t d) {
    double ma = 0, mb = 0, sab = 0, saa = 0, sbb = 0;
    for (uint32_t j = 0; j < d; j++) ma += a[j] / d, mb += b[j] / d;
    for (uint32_t j = 0; j < d; j++) {
        double x = a[j] - ma, y = b[j] - mb;
        sab += x * y, saa += x * x, sbb += y * y;
    }
    return sab / sqrt(saa * sbb);
}

/* log std of each channel of layer 0's keys and queries (d = 32, heads
 * pooled), after undoing NeoX RoPE with base 1e4. */
static void channel_log_std(const fathom_source *src, double *k_out, double *q_out) {
    fathom_source_info in;
    CHECK_OK(fathom_source_get_info(src, &in));
    float *q = malloc((size_t)in.q_heads * in.positions * 32 * 4), *k = malloc((size_t)in.kv_heads * in.tokens * 32 * 4);
    CHECK_OK(fathom_source_layer(src, 0, q, k, NULL));
    for (int which = 0; which < 2; which++) {
        const float *x = which ? q : k;
        uint64_t rows = which ? (uint64_t)in.q_heads * in.positions : (uint64_t)in.kv_heads * in.tokens;
        double s1[32] = {0}, s2[32] = {0};
        for (uint64_t r = 0; r < rows; r++) {
            uint64_t pos = which ? in.first_query + r % in.positions : r % in.tokens;
            for (uint32_t i = 0; i < 16; i++) {
                double th = pow(1e4, -2.0 * i / 32), c = cos(pos * th), sn = sin(pos * th);
                double a = x[r * 32 + i], b = x[r * 32 + i + 16];
                double u = a * c + b * sn, w = b * c - a * sn;
                s1[i] += u, s2[i] += u * u, s1[i + 16] += w, s2[i + 16] += w * w;
            }
        }
        for (uint32_t j = 0; j < 32; j++) {
            double m = s1[j] / rows;
            (which ? q_out : k_out)[j] = 0.5 * log(s2[j] / rows - m * m);
        }
    }
    free(q), free(k);
}

/* A capture (float32) of preset p at 1024 tokens and the given query
 * positions, written to a fresh temporary path (path: its name, for the
 * caller to remove) and opened. */
static fathom_source *capture_of(const fathom_synth_preset *p, uint32_t positions, const char *suffix, char *path,
                                 size_t size) {
    fathom_source *gen = NULL, *cap = NULL;
    tmp_path(suffix, path, size);
    CHECK_OK(fathom_synth_open_preset(&gen, p, 1024, positions, 1));
    CHECK_OK(fathom_capture_write(gen, path, FATHOM_DTYPE_F32));
    fathom_source_free(gen);
    CHECK_OK(fathom_capture_open(&cap, path));
    return cap;
}

static void test_fit_recovers(void) {
    fathom_synth_preset *known = known_preset(), *fit = NULL;
    char path[128];
    fathom_source *cap = capture_of(known, 32, ".safetensors", path, sizeof path);
    /* the known preset has no positional profile, so none is fitted */
    fathom_synth_fit_options o = {.base = "smollm2-135m", .name = "refit", .k = 32,
                                  .fit = FATHOM_SYNTH_FIT_ALL & ~FATHOM_SYNTH_FIT_LAYERS & ~FATHOM_SYNTH_FIT_RECENCY &
                                         ~FATHOM_SYNTH_FIT_TARGET};
    fathom_synth_fit_report r;
    CHECK_OK(fathom_synth_fit(&fit, cap, &o, &r));
    if (!fit) return;
    CHECK(!fit->p.positional);
    const synth_params *a = &known->p, *b = &fit->p;
    printf("fit of a known preset: RoPE %s %g; topic_amp %.3f (%.3f), topic_logit %.3f (%.3f), sink_logit %.3f "
           "(%.3f), query_run %u (%u), spread %.3f (%.3f), key_scale %.3f (%.3f)\n",
           r.style == FATHOM_ROPE_NEOX ? "neox" : "adjacent", r.rope_base, b->topic_amp, a->topic_amp,
           b->topic_logit, a->topic_logit, b->sink_logit, a->sink_logit, b->query_run, a->query_run, b->scale_spread,
           a->scale_spread, b->key_scale, a->key_scale);
    printf("  statistic   target  achieved\n  top-k mass  %.4f  %.4f\n  sink mass   %.4f  %.4f\n"
           "  pca share   %.4f  %.4f\n  drift       %.4f  %.4f\n",
           r.target.top_mass, r.achieved.top_mass, r.target.sink_mass, r.achieved.sink_mass, r.target.pca_share,
           r.achieved.pca_share, r.target.drift, r.achieved.drift);
    /* the RoPE the generator applied, among the candidates */
    CHECK(r.style == FATHOM_ROPE_NEOX && r.rope_base == 1e4 && b->rope_base == 1e4);
    CHECK(b->layers == 2 && b->kv_heads == 2 && b->group == 2 && b->dim == 32 && !strcmp(b->name, "refit"));
    /* the fit reaches its own targets on data its generator can produce */
    /* The covariance share overshoots (0.848 for 0.791 here): the measured
     * profile already holds the topics' variance, the generator adds them
     * again, and the amplitude's floor of 2 stops the search short of
     * making up for it. */
    CHECK(r.achieved.pca_share > r.target.pca_share - 0.01 && r.achieved.pca_share < r.target.pca_share + 0.08);
    CHECK_NEAR(r.achieved.top_mass, r.target.top_mass, 0.03);
    CHECK_NEAR(r.achieved.sink_mass, r.target.sink_mass, 0.05);
    CHECK_NEAR(r.achieved.drift, r.target.drift, 0.05);
    /* knobs with one statistic of their own come back: the query run
     * (drift), the spread of channel scales over heads, the key scale */
    CHECK(b->query_run == a->query_run);
    CHECK_NEAR(b->scale_spread, a->scale_spread, 0.1);
    CHECK_NEAR(b->key_scale, a->key_scale, 0.2);
    /* The profile parameter is the noise under the content, which the
     * capture does not show apart (topics add to the slow channels), so the
     * test is on what can be measured: the fitted preset's keys and queries
     * have the capture's per-channel stds (before RoPE), measured here
     * independently of the library. */
    double kc[32], qc[32], kf[32], qf[32];
    channel_log_std(cap, kc, qc);
    fathom_source *refit;
    CHECK_OK(fathom_synth_open_preset(&refit, fit, 1024, 32, 1));
    channel_log_std(refit, kf, qf);
    fathom_source_free(refit);
    /* the same for the built-in generator at this shape (no profiles) */
    double kp[32], qp[32];
    fathom_synth_preset *plain = known_preset();
    plain->p.fitted = false;
    CHECK_OK(fathom_synth_open_preset(&refit, plain, 1024, 32, 1));
    channel_log_std(refit, kp, qp);
    fathom_source_free(refit);
    fathom_synth_preset_free(plain);
    double ck = corr(kc, kf, 32), cq = corr(qc, qf, 32), pk = corr(kc, kp, 32), pq = corr(qc, qp, 32);
    printf("  per-channel log std against the capture's: correlation keys %.3f, queries %.3f (built-in "
           "generator: %.3f, %.3f)\n", ck, cq, pk, pq);
    /* Measured here: keys 0.78 against 0.72 (the slow channels carry the
     * topics' variance on top of the profile's); queries 0.62 against 0.61:
     * the calibration leaves the query's profiled part (mean and noise)
     * small next to its topic, sink and recency parts, so the query
     * profile is not recovered (docs/synthetic.md), and not checked. */
    CHECK(ck > 0.7 && ck > pk + 0.03);
    fathom_source_free(cap);
    remove(path);
    fathom_synth_preset_free(known), fathom_synth_preset_free(fit);
}

/* A fit of a capture the generator wrote from a positional preset, with
 * one profile for all heads (FATHOM_SYNTH_FIT_HEADS left out: the gain is
 * searched only then): the fitted preset has a positional profile,
 * reaches the capture's last-32 and top-k masses, and its profile is the
 * known one's shape. */
static void test_fit_positional(void) {
    fathom_synth_preset *known = known_positional(), *fit = NULL;
    char path[128];
    fathom_source *cap = capture_of(known, 32, "-pos.safetensors", path, sizeof path);
    fathom_synth_fit_options o = {.base = "smollm2-135m", .name = "refit", .k = 32,
                                  .fit = FATHOM_SYNTH_FIT_DEFAULT};
    fathom_synth_fit_report r;
    CHECK_OK(fathom_synth_fit(&fit, cap, &o, &r));
    CHECK(fit && !fit->p.heads);
    if (fit) {
        const synth_params *b = &fit->p;
        double known_re[16], fit_re[16];
        for (int i = 0; i < 16; i++) known_re[i] = known->p.pos_re[i], fit_re[i] = b->pos_re[i];
        double c = corr(known_re, fit_re, 16);
        printf("fit of a positional preset: gain %.3f; profile correlation %.3f; statistic target achieved: "
               "top-k %.4f %.4f, sink %.4f %.4f, last-32 %.4f %.4f\n",
               b->pos_gain, c, r.target.top_mass, r.achieved.top_mass, r.target.sink_mass, r.achieved.sink_mass,
               r.target.local_mass, r.achieved.local_mass);
        CHECK(b->positional);
        CHECK_NEAR(r.achieved.local_mass, r.target.local_mass, 0.04);
        CHECK(c > 0.9);
        CHECK_NEAR(r.achieved.top_mass, r.target.top_mass, 0.03);
        /* Not reached here, so not checked: the first-4 mass (measured 0.28
         * against 0.09). This profile is 8 fast pairs, whose cosines recur
         * at far distances; with the gain above 1 for the local mass, the
         * tokens 0-3 at the far end take mass that the sink logit, at its
         * floor, cannot give back. */
    }
    fathom_source_free(cap);
    remove(path);
    fathom_synth_preset_free(known), fathom_synth_preset_free(fit);
}

/* The known positional preset with per-head profiles (format 2): KV head
 * b = layer * 2 + g has its own key std (the preset's times
 * exp(0.4 cos((b + 1) j)), rms 1) and |mean| / std 1 + 0.2 b; query head
 * q = 2 b + h puts 1.2 logits on pairs q mod 8 and (q + 3) mod 8 (theta
 * from 1 down to 1/56 rad per token, so each head its own locality) and -2
 * on the slowest pair. The heads' mean profile is 0.3 on pairs 0-7: 0.9 off
 * each head's own pairs. */
static fathom_synth_preset *known_heads(void) {
    fathom_synth_preset *p = known_positional();
    synth_params *s = &p->p;
    s->heads = calloc(synth_heads_size(s), sizeof *s->heads);
    CHECK(s->heads != NULL);
    const uint32_t d = s->dim, half = d / 2;
    for (uint32_t b = 0; b < s->layers * s->kv_heads; b++) {
        float *x = s->heads + b * synth_head_floats(s);
        double n2 = 0;
        for (uint32_t j = 0; j < d; j++) {
            x[j] = s->k_std[j] * expf(0.4f * cosf((float)((b + 1) * j)));
            n2 += (double)x[j] * x[j];
            x[d + j] = 1.0f + 0.2f * (float)b;
        }
        for (uint32_t j = 0; j < d; j++) x[j] /= (float)sqrt(n2 / d);
        for (uint32_t h = 0; h < s->group; h++) {
            float *re = x + 2 * d + h * d;
            const uint32_t q = b * s->group + h;
            re[q % 8] = re[(q + 3) % 8] = 1.2f;
            re[half - 1] = -2.0f;
        }
    }
    for (uint32_t i = 0; i < half; i++) s->pos_re[i] = i < 8 ? 0.3f : 0.0f, s->pos_im[i] = 0.0f;
    s->pos_re[half - 1] = -2.0f;
    CHECK_OK(synth_params_check(s));
    return p;
}

/* The largest distance, over query heads and pairs 0-7, between measured
 * per-head profiles (re, im) and the per-head profiles in p->heads (the
 * slow pairs 8-15 carry the topics, whose query mean over the measured
 * positions is the text's, not the profile's). */
static double heads_off(const synth_params *p, double (*re)[16], double (*im)[16]) {
    double worst = 0;
    for (uint32_t b = 0; b < p->layers * p->kv_heads; b++)
        for (uint32_t h = 0; h < p->group; h++) {
            const float *a = p->heads + b * synth_head_floats(p) + 2 * p->dim + h * p->dim;
            for (uint32_t i = 0; i < 8; i++) {
                double e = hypot(re[b * p->group + h][i] - a[i], im[b * p->group + h][i] - a[p->dim / 2 + i]);
                worst = e > worst ? e : worst;
            }
        }
    return worst;
}

/* Per-head profiles: each generated query head's mean query meets its KV
 * head's mean key (measured here, as pair_means) as its own profile says;
 * with one profile for all heads (the heads' mean, the format-1 preset) it
 * does not. The file keeps them (format 2, the same bytes back); a
 * preset without them is still written as format 1. */
static void test_head_profiles(void) {
    fathom_synth_preset *p = known_heads(), *shared = known_heads(), *back = NULL;
    free(shared->p.heads);
    shared->p.heads = NULL;
    double re[16], im[16], hre[8][16], him[8][16], sre[8][16], sim[8][16];
    pair_means_heads(p, re, im, hre, him);
    pair_means_heads(shared, re, im, sre, sim);
    const double off = heads_off(&p->p, hre, him), off_shared = heads_off(&p->p, sre, sim);
    printf("per-head profiles: worst pair of a query head off by %.3f logits (one shared profile: %.3f)\n", off,
           off_shared);
    CHECK(off < 0.65 && off_shared > 0.9);
    char path[128];
    tmp_path("-heads.json", path, sizeof path);
    CHECK_OK(fathom_synth_preset_write(p, path, NULL));
    CHECK_OK(fathom_synth_preset_load(&back, path));
    CHECK(back && back->p.heads && back->p.heads != p->p.heads);
    enum { N = 300, P = 4, QN = 4 * P * 32, KN = 2 * N * 32 };
    static float q1[QN], k1[KN], v1[KN], q2[QN], k2[KN], v2[KN];
    layer_bytes(p, N, P, q1, k1, v1);
    if (back) layer_bytes(back, N, P, q2, k2, v2);
    CHECK(!memcmp(q1, q2, sizeof q1) && !memcmp(k1, k2, sizeof k1) && !memcmp(v1, v2, sizeof v1));
    layer_bytes(shared, N, P, q2, k2, v2);
    CHECK(memcmp(q1, q2, sizeof q1) != 0 && memcmp(k1, k2, sizeof k1) != 0);
    FILE *f = fopen(path, "rb");
    static char text[1 << 17];
    size_t len = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[len] = '\0';
    CHECK(strstr(text, "\"fathom-synth-preset-2\"") != NULL && strstr(text, "\"heads\"") != NULL);
    CHECK_OK(fathom_synth_preset_write(shared, path, NULL));
    f = fopen(path, "rb");
    len = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[len] = '\0';
    CHECK(strstr(text, "\"fathom-synth-preset-1\"") != NULL && strstr(text, "\"heads\"") == NULL);
    /* the source keeps its own copy: the preset may be freed first */
    fathom_source *src;
    CHECK_OK(fathom_synth_open_preset(&src, p, N, P, 3));
    fathom_synth_preset_free(p);
    CHECK_OK(fathom_source_layer(src, 1, q2, k2, v2));
    CHECK(!memcmp(q1, q2, sizeof q1) && !memcmp(k1, k2, sizeof k1));
    fathom_source_free(src);
    /* per-head profiles need a positional, fitted preset */
    shared->p.heads = malloc(synth_heads_size(&shared->p) * sizeof(float));
    memcpy(shared->p.heads, back->p.heads, synth_heads_size(&shared->p) * sizeof(float));
    shared->p.positional = false;
    CHECK_STATUS(synth_params_check(&shared->p), FATHOM_ERR_INVALID_ARG);
    shared->p.positional = true;
    shared->p.heads[5] = -1.0f; /* a key std */
    CHECK_STATUS(fathom_synth_open_preset(&src, shared, N, P, 3), FATHOM_ERR_INVALID_ARG);
    CHECK(strstr(fathom_last_error(), "heads k_std of layer 0 head 0 [5]") != NULL);
    remove(path);
    fathom_synth_preset_free(shared), fathom_synth_preset_free(back);
}

/* The fit of a capture written from the per-head preset measures each
 * head's profile: every query head's fitted A_i (pairs 0-7) within 0.65 logits of the
 * known one. A fit that gave every head the heads' mean (what the fitted
 * preset's pos_re/pos_im hold) is more than 0.9 off, so this check fails
 * it; without FATHOM_SYNTH_FIT_HEADS the preset has no per-head profiles. */
static void test_fit_heads(void) {
    fathom_synth_preset *known = known_heads(), *fit = NULL, *fit_shared = NULL;
    char path[128];
    fathom_source *cap = capture_of(known, 256, "-heads.safetensors", path, sizeof path);
    const uint32_t groups = FATHOM_SYNTH_FIT_PROFILES | FATHOM_SYNTH_FIT_RECENCY | FATHOM_SYNTH_FIT_HEADS;
    fathom_synth_fit_options o = {.base = "smollm2-135m", .name = "refit", .k = 32, .fit = groups};
    fathom_synth_fit_report r;
    CHECK_OK(fathom_synth_fit(&fit, cap, &o, &r));
    o.fit = groups & ~FATHOM_SYNTH_FIT_HEADS;
    CHECK_OK(fathom_synth_fit(&fit_shared, cap, &o, &r));
    CHECK(fit_shared && !fit_shared->p.heads);
    if (fit && fit->p.heads) {
        const synth_params *b = &fit->p;
        double re[8][16], im[8][16], mre[8][16], mim[8][16], kc = 0;
        for (uint32_t q = 0; q < 8; q++)
            for (uint32_t i = 0; i < 16; i++) {
                const float *a = b->heads + q / 2 * synth_head_floats(b) + 2 * 32 + q % 2 * 32;
                re[q][i] = a[i], im[q][i] = a[16 + i];
                mre[q][i] = b->pos_re[i], mim[q][i] = b->pos_im[i];
            }
        /* each KV head's fitted key std against the known (log, correlation) */
        for (uint32_t g = 0; g < 4; g++) { /* the channels of pairs 0-7: no topics there */
            double x[16], y[16];
            for (uint32_t j = 0; j < 16; j++) {
                const uint32_t c = j % 8 + (j / 8) * 16;
                x[j] = log(known->p.heads[g * synth_head_floats(b) + c]), y[j] = log(b->heads[g * synth_head_floats(b) + c]);
            }
            kc += corr(x, y, 16) / 4;
        }
        const double off = heads_off(&known->p, re, im), off_mean = heads_off(&known->p, mre, mim);
        printf("fit of a per-head preset: worst pair of a query head off by %.3f logits (the heads' mean: %.3f); "
               "key log std correlation %.3f; gain %.3f\n", off, off_mean, kc, b->pos_gain);
        CHECK(off < 0.65 && off_mean > 0.9);
        CHECK(kc > 0.8);
        CHECK(b->pos_gain == 1.0f); /* each head's measured profile, not searched */
    }
    CHECK(fit && fit->p.heads);
    fathom_source_free(cap);
    remove(path);
    fathom_synth_preset_free(known), fathom_synth_preset_free(fit), fathom_synth_preset_free(fit_shared);
}

/* The known per-head preset with per-query-head query profiles: query head
 * q = 2 b + h (b = layer * 2 + g) has the query std exp(0.6 cos(0.7 (q + 1)
 * j + q)) on channel j (rms 1), each head its own. */
static fathom_synth_preset *known_query_heads(void) {
    fathom_synth_preset *p = known_heads();
    synth_params *s = &p->p;
    const uint64_t old = synth_head_floats(s), blocks = (uint64_t)s->layers * s->kv_heads;
    s->q_heads = true;
    float *heads = calloc(synth_heads_size(s), sizeof *heads);
    CHECK(heads != NULL);
    for (uint64_t b = 0; heads && b < blocks; b++) {
        memcpy(heads + b * synth_head_floats(s), s->heads + b * old, old * sizeof *heads);
        for (uint32_t h = 0; h < s->group; h++) {
            float *x = heads + b * synth_head_floats(s) + (2 + s->group + h) * s->dim;
            const uint32_t q = (uint32_t)b * s->group + h;
            double n2 = 0;
            for (uint32_t j = 0; j < s->dim; j++) {
                x[j] = expf(0.6f * cosf(0.7f * (float)((q + 1) * j) + (float)q));
                n2 += (double)x[j] * x[j];
            }
            for (uint32_t j = 0; j < s->dim; j++) x[j] /= (float)sqrt(n2 / s->dim);
        }
    }
    free(s->heads);
    s->heads = heads;
    CHECK_OK(synth_params_check(s));
    return p;
}

/* Over every query head of p (d = 32, base 1e4), the generated query's
 * per-channel std over all N positions (before RoPE, around its mean, rms 1)
 * against the per-query-head profile of `want` (which has q_heads): the
 * mean over heads and channels of |log(measured / wanted)|, and the worst. */
static void query_std_off(const fathom_synth_preset *p, const fathom_synth_preset *want, double *mean_off,
                          double *worst_off) {
    enum { N = 1024, D = 32 };
    fathom_source *src;
    fathom_source_info in;
    CHECK_OK(fathom_synth_open_preset(&src, p, N, N, 1));
    CHECK_OK(fathom_source_get_info(src, &in));
    float *q = malloc((size_t)in.q_heads * N * D * 4);
    CHECK(q != NULL);
    double sum = 0, worst = 0;
    uint32_t count = 0;
    for (uint32_t layer = 0; q && layer < in.layers; layer++) {
        CHECK_OK(fathom_source_layer(src, layer, q, NULL, NULL));
        for (uint32_t qh = 0; qh < in.q_heads; qh++) {
            double s1[D] = {0}, s2[D] = {0}, sd[D], ms = 0;
            for (uint64_t i = 0; i < N; i++) {
                const float *x = q + ((size_t)qh * N + i) * D;
                for (uint32_t c = 0; c < D / 2; c++) {
                    double th = pow(1e4, -2.0 * c / D), cs = cos(i * th), sn = sin(i * th);
                    double a = x[c] * cs + x[c + D / 2] * sn, b = x[c + D / 2] * cs - x[c] * sn;
                    s1[c] += a, s2[c] += a * a, s1[c + D / 2] += b, s2[c + D / 2] += b * b;
                }
            }
            for (uint32_t j = 0; j < D; j++) {
                const double m = s1[j] / N;
                sd[j] = sqrt(s2[j] / N - m * m);
                ms += sd[j] * sd[j];
            }
            const uint32_t g = qh / want->p.group, h = qh % want->p.group;
            const float *own = synth_head_block(&want->p, layer, g);
            const float *target = synth_head_query(&want->p, own, h);
            for (uint32_t j = 0; j < D; j++) {
                const double e = fabs(log(sd[j] / sqrt(ms / D) / target[j]));
                sum += e, count++;
                worst = e > worst ? e : worst;
            }
        }
    }
    *mean_off = count ? exp(sum / count) : 0, *worst_off = exp(worst);
    free(q);
    fathom_source_free(src);
}

/* Per-query-head profiles: each generated query head's per-channel std
 * follows its own profile (src/io/synth.c, query_within_measured: the
 * topics, which follow the key's variance, and the noise together take
 * it), within a mean factor of 1.15 and at worst 1.8 on the known preset
 * (1024 positions; the topics change every 8); with the one shared query
 * profile the heads are a mean factor 1.8 and at worst 10 off theirs. The
 * file keeps the profiles ("heads"."q_std", the same bytes back);
 * malformed ones are named. */
static void test_query_heads(void) {
    fathom_synth_preset *p = known_query_heads(), *shared = known_heads(), *back = NULL;
    double mean_off, worst_off, shared_mean, shared_worst;
    query_std_off(p, p, &mean_off, &worst_off);
    query_std_off(shared, p, &shared_mean, &shared_worst);
    printf("per-query-head query std: mean factor %.3f off, worst channel %.3f (one shared profile: %.3f, %.3f)\n",
           mean_off, worst_off, shared_mean, shared_worst);
    CHECK(mean_off < 1.15 && worst_off < 1.8);
    CHECK(shared_mean > 1.8 && shared_worst > 10);
    char path[128];
    tmp_path("-qheads.json", path, sizeof path);
    CHECK_OK(fathom_synth_preset_write(p, path, NULL));
    CHECK_OK(fathom_synth_preset_load(&back, path));
    CHECK(back && back->p.q_heads && back->p.heads);
    enum { N = 300, P = 4, QN = 4 * P * 32, KN = 2 * N * 32 };
    static float q1[QN], k1[KN], v1[KN], q2[QN], k2[KN], v2[KN];
    layer_bytes(p, N, P, q1, k1, v1);
    if (back) layer_bytes(back, N, P, q2, k2, v2);
    CHECK(!memcmp(q1, q2, sizeof q1) && !memcmp(k1, k2, sizeof k1) && !memcmp(v1, v2, sizeof v1));
    layer_bytes(shared, N, P, q2, k2, v2);
    CHECK(memcmp(q1, q2, sizeof q1) != 0);
    FILE *f = fopen(path, "rb");
    static char text[1 << 17];
    size_t len = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[len] = '\0';
    const char *heads = strstr(text, "\"heads\"");
    const char *at = heads ? strstr(heads, "\"q_std\"") : NULL;
    const char *open = at ? strchr(at, '[') : NULL;
    CHECK(open != NULL);
    static char edited[1 << 17];
    static const struct {
        const char *insert, *message;
    } edits[] = {{"-1, ", "\"heads\".\"q_std\" must be an array of 256 numbers"},
                 {"\"x\", ", "\"heads\".\"q_std\" must be an array of 256 numbers"}};
    for (size_t i = 0; open && i < sizeof edits / sizeof edits[0]; i++) {
        snprintf(edited, sizeof edited, "%.*s%s%s", (int)(open + 1 - text), text, edits[i].insert, open + 1);
        fathom_synth_preset *bad = (fathom_synth_preset *)&bad;
        CHECK_STATUS(fathom_synth_preset_parse(&bad, edited, strlen(edited)), FATHOM_ERR_FORMAT);
        CHECK(bad == NULL && strstr(fathom_last_error(), edits[i].message) != NULL);
        if (!strstr(fathom_last_error(), edits[i].message)) printf("got: %s\n", fathom_last_error());
    }
    /* the first entry out of range, and the key without the rest of "heads" */
    const char *first = open ? open + 1 + strspn(open + 1, " \n") : NULL;
    const char *end = first ? first + strcspn(first, ",]") : NULL;
    if (first) {
        snprintf(edited, sizeof edited, "%.*s0%s", (int)(first - text), text, end);
        fathom_synth_preset *bad = NULL;
        CHECK_STATUS(fathom_synth_preset_parse(&bad, edited, strlen(edited)), FATHOM_ERR_FORMAT);
        CHECK(strstr(fathom_last_error(), "\"heads\".\"q_std\"[0] is not a number in [0.0001, 10000]") != NULL);
    }
    static const char lone[] = "{\"format\":\"fathom-synth-preset-2\",\"name\":\"x\",\"heads\":{\"q_std\":[1]}}";
    fathom_synth_preset *bad = NULL;
    CHECK_STATUS(fathom_synth_preset_parse(&bad, lone, strlen(lone)), FATHOM_ERR_FORMAT);
    /* in the struct: per-query-head profiles need per-head ones, and in range */
    float *h = p->p.heads;
    p->p.heads = NULL;
    CHECK_STATUS(synth_params_check(&p->p), FATHOM_ERR_INVALID_ARG);
    CHECK(strstr(fathom_last_error(), "per-query-head profiles need per-head profiles") != NULL);
    p->p.heads = h;
    synth_params plain = p->p;
    plain.fitted = false, plain.heads = NULL;
    CHECK_STATUS(synth_params_check(&plain), FATHOM_ERR_INVALID_ARG);
    CHECK(strstr(fathom_last_error(), "per-query-head profiles need a fitted preset") != NULL);
    h[synth_head_floats(&p->p) + (2 + 2 + 1) * 32 + 3] = 0.0f; /* block 1 (layer 0, KV head 1), query head 1, [3] */
    CHECK_STATUS(synth_params_check(&p->p), FATHOM_ERR_INVALID_ARG);
    CHECK(strstr(fathom_last_error(), "heads q_std of layer 0 head 1 query head 1 [3]") != NULL);
    remove(path);
    fathom_synth_preset_free(p), fathom_synth_preset_free(shared), fathom_synth_preset_free(back);
}

/* The fit of a capture written from the per-query-head preset measures each
 * query head's query std: with FATHOM_SYNTH_FIT_QUERY_HEADS every head's
 * fitted profile correlates (log, over channels) above 0.9 with its known
 * one, on average, and above 0.7 at worst (against the other heads' profiles
 * it does not: below 0.5 on average); without it the preset has none. */
static void test_fit_query_heads(void) {
    fathom_synth_preset *known = known_query_heads(), *fit = NULL, *fit_shared = NULL;
    char path[128];
    fathom_source *cap = capture_of(known, 1024, "-qheads.safetensors", path, sizeof path);
    const uint32_t groups = FATHOM_SYNTH_FIT_PROFILES | FATHOM_SYNTH_FIT_RECENCY | FATHOM_SYNTH_FIT_HEADS;
    fathom_synth_fit_options o = {.base = "smollm2-135m", .name = "refit", .k = 32,
                                  .fit = groups | FATHOM_SYNTH_FIT_QUERY_HEADS};
    fathom_synth_fit_report r;
    CHECK_OK(fathom_synth_fit(&fit, cap, &o, &r));
    o.fit = groups;
    CHECK_OK(fathom_synth_fit(&fit_shared, cap, &o, &r));
    CHECK(fit_shared && fit_shared->p.heads && !fit_shared->p.q_heads);
    CHECK(fit && fit->p.heads && fit->p.q_heads);
    if (fit && fit->p.q_heads) {
        double mean = 0, worst = 1, other = 0;
        for (uint32_t q = 0; q < 8; q++) {
            const uint32_t b = q / 2, h = q % 2, q2 = (q + 3) % 8;
            const float *a = synth_head_query(&known->p, known->p.heads + b * synth_head_floats(&known->p), h);
            const float *o2 = synth_head_query(&known->p, known->p.heads + q2 / 2 * synth_head_floats(&known->p), q2 % 2);
            const float *c = synth_head_query(&fit->p, fit->p.heads + b * synth_head_floats(&fit->p), h);
            double x[32], y[32], z[32];
            for (uint32_t j = 0; j < 32; j++) x[j] = log(a[j]), y[j] = log(c[j]), z[j] = log(o2[j]);
            const double cc = corr(x, y, 32);
            mean += cc / 8, other += corr(z, y, 32) / 8;
            worst = cc < worst ? cc : worst;
        }
        printf("fit of per-query-head profiles: log std correlation %.3f on average, %.3f at worst (another head's "
               "profile: %.3f)\n", mean, worst, other);
        CHECK(mean > 0.9 && worst > 0.7 && other < 0.5);
    }
    fathom_source_free(cap);
    remove(path);
    fathom_synth_preset_free(known), fathom_synth_preset_free(fit), fathom_synth_preset_free(fit_shared);
}

/* A source that passes another's layers on with NeoX pairs 0-1 of every
 * key (channels 0, 1, 16, 17 at d = 32) scaled by 1e-3 in layer 0 and 1e-5
 * in layer 1: near-dead channels, dead to different degrees by layer (as
 * Gemma 3's are). Scaling both channels of a pair commutes with RoPE. */
static int dead_layer(const fathom_source *src, uint32_t layer, float *q, float *k, float *v) {
    const fathom_source *inner = src->impl;
    FATHOM_TRY(fathom_source_layer(inner, layer, q, k, v));
    const fathom_source_info *in = &src->info;
    const float f = layer == 0 ? 1e-3f : 1e-5f;
    for (uint64_t r = 0; k && r < (uint64_t)in->kv_heads * in->tokens; r++)
        for (uint32_t i = 0; i < 2; i++) k[r * in->dim + i] *= f, k[r * in->dim + i + in->dim / 2] *= f;
    return FATHOM_OK;
}

static void dead_destroy(void *impl) { fathom_source_free(impl); }

/* The spread of channel scales over heads ignores channels far below the
 * head's rms (synth_fit.c, SPREAD_FLOOR): the known preset (spread 0.2)
 * with four near-dead channels whose log std differs by 4.6 between the
 * layers fits a spread near 0.2; counted, they would add about 0.8. */
static void test_fit_spread_dead_channels(void) {
    fathom_synth_preset *known = known_preset(), *fit = NULL;
    fathom_source *gen, *dead;
    CHECK_OK(fathom_synth_open_preset(&gen, known, 1024, 32, 1));
    static const fathom_source_ops ops = {.kind = "synthetic", .destroy = dead_destroy, .layer = dead_layer};
    fathom_source_info in;
    CHECK_OK(fathom_source_get_info(gen, &in));
    CHECK_OK(fathom_source_new(&dead, &ops, &in, gen));
    fathom_synth_fit_options o = {.base = "smollm2-135m", .name = "dead", .k = 32, .style = FATHOM_ROPE_NEOX,
                                  .rope_base = 1e4, .fit = FATHOM_SYNTH_FIT_PROFILES};
    fathom_synth_fit_report r;
    CHECK_OK(fathom_synth_fit(&fit, dead, &o, &r));
    if (fit) {
        printf("fit with near-dead channels: spread %.3f (known %.3f); channel 0 std %.2e\n", fit->p.scale_spread,
               known->p.scale_spread, fit->p.k_std[0]);
        CHECK_NEAR(fit->p.scale_spread, known->p.scale_spread, 0.1);
        CHECK(fit->p.k_std[0] < 1e-2f); /* the profile itself keeps them small */
    }
    fathom_source_free(dead);
    fathom_synth_preset_free(known), fathom_synth_preset_free(fit);
}

/* The worst factor, over layers, KV heads and channels (every channel, or
 * only channel `only` when it is below d), between a per-head preset's
 * generated key std per channel over tokens 4..n-1 (pre-RoPE, rms 1) and
 * its k_std (*std_off), and between |mean| / std and its own (*ratio_off). */
static void heads_channel_off(const fathom_synth_preset *p, uint32_t only, double *std_off, double *ratio_off) {
    enum { N = 4096, DMAX = 256 };
    const uint32_t D = p->p.dim;
    const double base = p->p.rope_base;
    fathom_source *src;
    fathom_source_info in;
    CHECK_OK(fathom_synth_open_preset(&src, p, N, 1, 1));
    CHECK_OK(fathom_source_get_info(src, &in));
    float *k = malloc((size_t)in.kv_heads * N * D * 4);
    CHECK(k != NULL);
    double worst_std = 0, worst_ratio = 0;
    for (uint32_t layer = 0; k && layer < in.layers; layer++) {
        CHECK_OK(fathom_source_layer(src, layer, NULL, k, NULL));
        for (uint32_t g = 0; g < in.kv_heads; g++) {
            double s1[DMAX] = {0}, s2[DMAX] = {0}, ms = 0;
            for (uint64_t t = 4; t < N; t++) {
                const float *x = k + ((size_t)g * N + t) * D;
                for (uint32_t i = 0; i < D / 2; i++) {
                    double th = pow(base, -2.0 * i / D), c = cos(t * th), sn = sin(t * th);
                    double a = x[i] * c + x[i + D / 2] * sn, b = x[i + D / 2] * c - x[i] * sn;
                    s1[i] += a, s2[i] += a * a, s1[i + D / 2] += b, s2[i + D / 2] += b * b;
                }
            }
            double sd[DMAX], mean[DMAX];
            for (uint32_t j = 0; j < D; j++) {
                mean[j] = s1[j] / (N - 4);
                sd[j] = sqrt(s2[j] / (N - 4) - mean[j] * mean[j]);
                ms += sd[j] * sd[j];
            }
            const float *own = p->p.heads + (layer * in.kv_heads + g) * synth_head_floats(&p->p);
            for (uint32_t j = 0; j < D; j++) {
                if (only < D && j != only) continue;
                double e = fabs(log(sd[j] / sqrt(ms / D) / own[j]));
                double r = fabs(log(fabs(mean[j]) / sd[j] / own[D + j]));
                worst_std = e > worst_std ? e : worst_std;
                worst_ratio = r > worst_ratio ? r : worst_ratio;
            }
        }
    }
    *std_off = exp(worst_std), *ratio_off = exp(worst_ratio);
    free(k);
    fathom_source_free(src);
}

/* A per-head preset's generated key has each channel's measured variance
 * as its total (src/io/synth.c, topics_within_measured): in the known
 * per-head preset (topic amplitude 3 noise units, 16 topics on d = 32),
 * every KV head's per-channel std over tokens 4..N-1 (pre-RoPE, rms 1)
 * within 20% of its k_std on every channel, and |mean| / std within 20%
 * of its own. With the topics added on top of the measured noise (and the
 * mean scaled to keep |mean| / std) the slow channels come out more than
 * twice their measured std. */
static void test_heads_channel_std(void) {
    fathom_synth_preset *p = known_heads();
    double std_off, ratio_off;
    heads_channel_off(p, UINT32_MAX, &std_off, &ratio_off);
    printf("per-head channel std: worst channel off by a factor %.3f (|mean| / std: %.3f)\n", std_off, ratio_off);
    CHECK(std_off < 1.2 && ratio_off < 1.2);
    fathom_synth_preset_free(p);
}

/* A small per-head QK-norm preset: d = 128, one layer, one KV head of two
 * query heads, key std per channel exp(cos(0.37 j)) (rms 1), |mean| / std
 * 0.2 but 8 on channel 120 (the slowest pairs; Gemma 3's largest means, on
 * the pairs that carry its positional profile, are 4-9 std), no positional
 * profile (A_i = 0). */
static fathom_synth_preset *known_qk_heads(void) {
    fathom_synth_preset *p = calloc(1, sizeof *p);
    synth_params *s = &p->p;
    CHECK(synth_builtin("qwen3-8b", s));
    snprintf(s->name, sizeof s->name, "known-qk");
    s->layers = 1, s->kv_heads = 1, s->group = 2, s->dim = 128, s->rope_base = 1e6;
    s->fitted = true, s->positional = true, s->pos_gain = 1.0f;
    s->scale_spread = 0.5f, s->topics = 16, s->topic_amp = 4.0f;
    s->topic_logit = 1.0f, s->sink_logit = 15.0f, s->query_run = 1;
    for (uint32_t j = 0; j < s->dim; j++) s->k_std[j] = s->q_std[j] = 1.0f, s->k_mean[j] = s->q_mean[j] = 0.2f;
    s->heads = calloc(synth_heads_size(s), sizeof *s->heads);
    CHECK(s->heads != NULL);
    double n2 = 0;
    for (uint32_t j = 0; j < s->dim; j++) {
        s->heads[j] = expf(cosf(0.37f * (float)j));
        n2 += (double)s->heads[j] * s->heads[j];
        s->heads[s->dim + j] = j == 120 ? 8.0f : 0.2f;
    }
    for (uint32_t j = 0; j < s->dim; j++) s->heads[j] /= (float)sqrt(n2 / s->dim);
    CHECK_OK(synth_params_check(s));
    return p;
}

/* Under QK-norm the channel whose mean is 8 std keeps its measured std and
 * |mean| / std within 10% (src/io/synth.c, key_after_norm: the key is
 * measured after the normalisation and its channels scaled to the profile).
 * Drawn to the profile before the normalisation and normalised as it is,
 * that channel's std comes out off by a factor 1.55 (|mean| / std 1.58;
 * on the preset of the study recorded at d5c5293, the largest-mean channel
 * of each layer 1.24-1.51 times its measured std, the fit's mean_ratio 4.89
 * against the capture's 6.29). */
static void test_heads_channel_std_qk_norm(void) {
    fathom_synth_preset *p = known_qk_heads();
    double std_off, ratio_off;
    heads_channel_off(p, 120, &std_off, &ratio_off);
    printf("per-head channel std under QK-norm, a mean of 8 std: that channel off by a factor %.3f (|mean| / std: "
           "%.3f)\n", std_off, ratio_off);
    CHECK(std_off < 1.1 && ratio_off < 1.1);
    fathom_synth_preset_free(p);
}

/* Salience under QK-norm: a per-head QK-norm head draws a salience for each
 * topic (src/io/synth.c, token_coeffs), so a token loud on one topic is not
 * loud on the others, and the keys a query is after are no louder off its
 * direction than the rest. On the per-head preset fitted to Gemma 3 270M's
 * code capture (data/preset/gemma3-270m-heads.json, the recorded study's
 * fit), layer 1 (global layer 11), 4096 tokens: over the last 16 queries of
 * its four heads, the 1% of the keys 4 .. pos - 32 that lie furthest along
 * the query hold, off the query's direction, less than 1.1 times the keys'
 * mean energy of their deviation from the mean key (1.04; bench/key_energy.py,
 * "off": Gemma 3's captures 0.58-0.59 in that layer). With one salience for
 * all of a token's topics, a salient phrase is large along every topic and
 * those keys hold 1.16 times it. */
static void test_heads_qk_salience(void) {
    enum { N = 4096, P = 16 };
    fathom_synth_preset *p = NULL;
    CHECK_OK(fathom_synth_preset_load(&p, "data/preset/gemma3-270m-heads.json"));
    if (!p) return;
    fathom_source *src;
    fathom_source_info in;
    uint64_t qe, ke;
    CHECK_OK(fathom_synth_open_preset(&src, p, N, P, 1));
    CHECK_OK(fathom_source_get_info(src, &in));
    CHECK_OK(fathom_source_layer_sizes(&in, &qe, &ke));
    float *q = malloc(qe * sizeof *q), *k = malloc(ke * sizeof *k);
    double *along = malloc(N * sizeof *along), *off = malloc(N * sizeof *off), *sorted = malloc(N * sizeof *sorted);
    CHECK(q && k && along && off && sorted);
    const uint32_t d = in.dim;
    const uint64_t t0 = 4, t1 = N - P - 32, m = t1 - t0, top = m / 100; /* keys every query sees */
    double ratio = 0;
    uint32_t count = 0;
    if (q && k && along && off && sorted) {
        CHECK_OK(fathom_source_layer(src, 1, q, k, NULL));
        double mean[256] = {0};
        for (uint64_t t = t0; t < t1; t++)
            for (uint32_t j = 0; j < d; j++) mean[j] += k[t * d + j] / (double)m;
        for (uint32_t h = 0; h < in.q_heads; h++)
            for (uint32_t i = 0; i < P; i++) {
                const float *qh = q + ((uint64_t)h * P + i) * d;
                double qn = 0;
                for (uint32_t j = 0; j < d; j++) qn += (double)qh[j] * qh[j];
                qn = sqrt(qn);
                double all = 0;
                for (uint64_t t = t0; t < t1; t++) {
                    double e = 0, a = 0;
                    for (uint32_t j = 0; j < d; j++) {
                        const double x = k[t * d + j] - mean[j];
                        e += x * x, a += x * qh[j] / qn;
                    }
                    along[t] = sorted[t - t0] = a, off[t] = e - a * a;
                    all += off[t] / (double)m;
                }
                for (uint64_t a = 0; a < top; a++) /* the `top` largest first */
                    for (uint64_t b = a + 1; b < m; b++)
                        if (sorted[b] > sorted[a]) {
                            const double x = sorted[a];
                            sorted[a] = sorted[b], sorted[b] = x;
                        }
                double sum = 0;
                uint64_t c = 0;
                for (uint64_t t = t0; t < t1; t++)
                    if (along[t] >= sorted[top - 1]) sum += off[t], c++;
                ratio += sum / (double)c / all;
                count++;
            }
    }
    ratio /= count ? count : 1;
    printf("per-head QK-norm salience: the 1%% of the keys furthest along a query hold %.3f of the keys' mean "
           "energy off its direction\n", ratio);
    CHECK(ratio > 0 && ratio < 1.1);
    free(q), free(k), free(along), free(off), free(sorted);
    fathom_source_free(src);
    fathom_synth_preset_free(p);
}

/* Adds one query's logit of token 0 over the middle keys' (4 .. pos - 32) mean. */
static void sink_gap_add(double *w, uint64_t pos, void *ctx) {
    double s1 = 0, m = 0;
    for (uint64_t t = 4; t + 32 <= pos; t++) s1 += w[t], m++;
    *(double *)ctx += w[0] - s1 / m;
}

/* Token 0's logit over the middle keys' (4 .. pos - 32) mean, averaged over
 * layers, heads and the last 8 positions. */
static double sink_gap_of(const fathom_synth_preset *p, uint64_t n) {
    double gap = 0;
    const uint64_t calls = for_each_last_query(p, n, sink_gap_add, &gap);
    return gap / (double)(calls ? calls : 1);
}

/* A per-head preset under QK-norm meets its sink (one quiet channel of the
 * slowest pairs) after the normalisation: raising the sink logit from 16
 * to 32 raises token 0's gap over the middle keys by 16 (within 1). Met
 * inside the normalisation, as without per-head profiles, the gap
 * saturates: it rises by 10.8. */
static void test_heads_sink(void) {
    fathom_synth_preset *p = known_heads();
    p->p.qk_norm = true;
    p->p.sink_logit = 16.0f;
    const double g16 = sink_gap_of(p, 1024);
    p->p.sink_logit = 32.0f;
    const double g32 = sink_gap_of(p, 1024);
    printf("per-head QK-norm sink: token 0 over the middle keys %.3f at sink logit 16, %.3f at 32\n", g16, g32);
    CHECK(fabs(g32 - g16 - 16.0) < 1.0);
    fathom_synth_preset_free(p);
}

/* A constructed source for dev_skew (one layer, one head, d = 32, RoPE
 * base 1e8 so that pairs 8-15 barely rotate over its 2048 tokens): keys are
 * unit Gaussian noise plus, on each of 8 features (the real channels of
 * pairs 8-15), a sparse right-tailed amount (an exponential with
 * probability 1/8, else 0); query s of 8 is unit noise plus `sign` times 6
 * along feature s. With sign 1 each query's deviation from the head's mean
 * query points along the right tail of its own feature, as a trained
 * model's queries do; sign -1 mirrors those queries about their mean
 * (2 mean - q: every even moment kept); sign 0 leaves them noise. */
enum { TAIL_D = 32, TAIL_N = 2048, TAIL_P = 8 };
#define TAIL_BASE 1e8

static uint64_t tail_hash(uint64_t x) {
    x = (x + 1) * 0x9e3779b97f4a7c15ull;
    x ^= x >> 30, x *= 0xbf58476d1ce4e5b9ull, x ^= x >> 27, x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static double tail_uniform(uint64_t x) { return ((double)(tail_hash(x) >> 11) + 0.5) / 9007199254740992.0; }

static double tail_normal(uint64_t x) {
    return sqrt(-2.0 * log(tail_uniform(2 * x))) * cos(6.283185307179586 * tail_uniform(2 * x + 1));
}

/* x (pre-RoPE, NeoX pairs (i, i + d/2)) rotated to position pos. */
static void tail_rope(float *x, uint64_t pos) {
    for (uint32_t i = 0; i < TAIL_D / 2; i++) {
        double th = (double)pos * pow(TAIL_BASE, -2.0 * i / TAIL_D), c = cos(th), sn = sin(th);
        double a = x[i], b = x[i + TAIL_D / 2];
        x[i] = (float)(a * c - b * sn), x[i + TAIL_D / 2] = (float)(a * sn + b * c);
    }
}

static int tail_layer(const fathom_source *src, uint32_t layer, float *q, float *k, float *v) {
    const float sign = *(const float *)src->impl;
    (void)layer;
    for (uint64_t t = 0; k && t < TAIL_N; t++) {
        float *x = k + t * TAIL_D;
        for (uint32_t j = 0; j < TAIL_D; j++) x[j] = (float)tail_normal(t * TAIL_D + j);
        for (uint32_t f = 0; f < 8; f++)
            if (tail_hash(1000003u * t + f) % 8 == 0) x[8 + f] += (float)-log(tail_uniform(77777u * t + f));
        tail_rope(x, t);
    }
    float pre[TAIL_P][TAIL_D];
    double mean[TAIL_D] = {0};
    for (uint32_t s = 0; s < TAIL_P; s++) {
        for (uint32_t j = 0; j < TAIL_D; j++) pre[s][j] = (float)tail_normal(1u << 30 | (s * TAIL_D + j));
        pre[s][8 + s] += sign != 0.0f ? 6.0f : 0.0f;
        for (uint32_t j = 0; j < TAIL_D; j++) mean[j] += pre[s][j] / TAIL_P;
    }
    for (uint32_t s = 0; q && s < TAIL_P; s++) {
        float *x = q + (uint64_t)s * TAIL_D;
        for (uint32_t j = 0; j < TAIL_D; j++) x[j] = sign < 0 ? (float)(2 * mean[j] - pre[s][j]) : pre[s][j];
        tail_rope(x, TAIL_N - TAIL_P + s);
    }
    for (uint64_t e = 0; v && e < (uint64_t)TAIL_N * TAIL_D; e++) v[e] = 0.0f;
    return FATHOM_OK;
}

static void tail_destroy(void *impl) { (void)impl; }

static double dev_skew_of(float sign) {
    static const fathom_source_ops ops = {.kind = "synthetic", .destroy = tail_destroy, .layer = tail_layer};
    fathom_source_info in = {.layers = 1, .q_heads = 1, .kv_heads = 1, .dim = TAIL_D, .tokens = TAIL_N,
                             .positions = TAIL_P, .first_query = TAIL_N - TAIL_P};
    snprintf(in.model, sizeof in.model, "tail");
    fathom_source *src;
    CHECK_OK(fathom_source_new(&src, &ops, &in, &sign));
    fathom_synth_stats st;
    memset(&st, 0, sizeof st);
    CHECK_OK(fathom_synth_stats_measure(src, FATHOM_ROPE_NEOX, TAIL_BASE, 32, 1, &st));
    fathom_source_free(src);
    return st.dev_skew;
}

/* dev_skew (synth_fit.c, deviation_skew) on the constructed source above,
 * and on the generator, whose keys are symmetric about their mean along
 * every direction (Gaussian noise, topic coefficients of either sign), so
 * that whatever its queries do the statistic stays near 0 (a capture of
 * Gemma 3 gives 0.16-0.18, docs/synthetic.md). */
static void test_dev_skew(void) {
    const double pos = dev_skew_of(1.0f), neg = dev_skew_of(-1.0f), none = dev_skew_of(0.0f);
    fathom_synth_preset *p = known_preset();
    fathom_source *gen;
    CHECK_OK(fathom_synth_open_preset(&gen, p, 2048, 32, 1));
    fathom_synth_stats st;
    CHECK_OK(fathom_synth_stats_measure(gen, FATHOM_ROPE_NEOX, 1e4, 32, 1, &st));
    fathom_source_free(gen);
    printf("dev_skew: queries pointing along the keys' right tails %.4f, mirrored %.4f, noise %.4f; generator %.4f\n",
           pos, neg, none, st.dev_skew);
    CHECK(pos > 0.1);
    CHECK_NEAR(neg, -pos, 1e-6); /* mirroring every deviation mirrors every logit's */
    CHECK(fabs(none) < 0.1);
    CHECK(fabs(st.dev_skew) < 0.03);
    fathom_synth_preset_free(p);
}

/* A constructed source for the per-layer top-k mass (two layers, one head,
 * d = 8, 1024 tokens, 8 queried positions): 32 "hot" keys carry 1 on
 * channel 0, every key unit noise on channels 1-7, and layer l's query is
 * s_l sqrt(d) on channel 0 alone, so a hot key's logit is s_l and every
 * other key's 0: the mass on the top 32 keys, at a position that sees n
 * keys, is 32 e^s / (32 e^s + n - 32) exactly. */
enum { HOT_D = 8, HOT_N = 1024, HOT_P = 8, HOT_K = 32 };
static const double hot_logit[2] = {0.0, 4.0};

static int hot_layer(const fathom_source *src, uint32_t layer, float *q, float *k, float *v) {
    (void)src;
    for (uint64_t t = 0; k && t < HOT_N; t++) {
        float *x = k + t * HOT_D;
        x[0] = t >= 100 && t < 100 + 20 * HOT_K && (t - 100) % 20 == 0 ? 1.0f : 0.0f;
        for (uint32_t j = 1; j < HOT_D; j++) x[j] = (float)tail_normal(t * HOT_D + j);
    }
    for (uint32_t s = 0; q && s < HOT_P; s++) {
        float *x = q + (uint64_t)s * HOT_D;
        for (uint32_t j = 0; j < HOT_D; j++) x[j] = 0.0f;
        x[0] = (float)(hot_logit[layer] * sqrt((double)HOT_D));
    }
    for (uint64_t e = 0; v && e < (uint64_t)HOT_N * HOT_D; e++) v[e] = 0.0f;
    return FATHOM_OK;
}

/* synth_layer_top_mass on the constructed source: each layer's mass as
 * the formula gives it (mean over the 8 positions), the two layers apart. */
static void test_layer_top_mass(void) {
    static const fathom_source_ops ops = {.kind = "synthetic", .destroy = tail_destroy, .layer = hot_layer};
    fathom_source_info in = {.layers = 2, .q_heads = 1, .kv_heads = 1, .dim = HOT_D, .tokens = HOT_N,
                             .positions = HOT_P, .first_query = HOT_N - HOT_P};
    snprintf(in.model, sizeof in.model, "hot");
    fathom_source *src;
    CHECK_OK(fathom_source_new(&src, &ops, &in, NULL));
    for (uint32_t l = 0; l < 2; l++) {
        double want = 0, got = -1, e = exp(hot_logit[l]);
        for (uint32_t i = 0; i < HOT_P; i++) {
            double n = HOT_N - HOT_P + i + 1;
            want += HOT_K * e / (HOT_K * e + n - HOT_K) / HOT_P;
        }
        CHECK_OK(synth_layer_top_mass(src, FATHOM_ROPE_NEOX, 1e4, HOT_K, l, &got));
        printf("per-layer top-%d mass, layer %u: %.6f (formula %.6f)\n", HOT_K, l, got, want);
        CHECK_NEAR(got, want, 1e-5);
    }
    double x;
    CHECK_STATUS(synth_layer_top_mass(src, FATHOM_ROPE_NEOX, 1e4, HOT_K, 2, &x), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(synth_layer_top_mass(src, FATHOM_ROPE_NEOX, 1e4, HOT_K, 0, NULL), FATHOM_ERR_INVALID_ARG);
    fathom_source_free(src);
}

/* Per-layer topic logits: equal ones generate the bytes of the one topic
 * logit; a preset file keeps them; a per-layer fit (FATHOM_SYNTH_FIT_LAYERS)
 * of a capture whose layers differ recovers their order and reaches each
 * layer's top-k mass. */
static void test_fit_layers(void) {
    fathom_synth_preset *p = known_preset(), *same = known_preset(), *back = NULL, *fit = NULL;
    same->p.per_layer = true;
    same->p.topic_layers[0] = same->p.topic_layers[1] = p->p.topic_logit;
    fathom_source *a, *b;
    CHECK_OK(fathom_synth_open_preset(&a, p, 300, 4, 3));
    CHECK_OK(fathom_synth_open_preset(&b, same, 300, 4, 3));
    CHECK(layer_hash(a, 0) == layer_hash(b, 0) && layer_hash(a, 1) == layer_hash(b, 1));
    fathom_source_free(a), fathom_source_free(b);
    /* layer 0 diffuse, layer 1 concentrated */
    p->p.per_layer = true;
    p->p.topic_layers[0] = 0.8f, p->p.topic_layers[1] = 5.0f;
    CHECK_OK(synth_params_check(&p->p));
    char path[128];
    tmp_path("-layers.json", path, sizeof path);
    CHECK_OK(fathom_synth_preset_write(p, path, NULL));
    CHECK_OK(fathom_synth_preset_load(&back, path));
    CHECK(back && back->p.per_layer && back->p.topic_layers[0] == 0.8f && back->p.topic_layers[1] == 5.0f);
    static const char wrong[] = "{\"format\":\"fathom-synth-preset-1\",\"name\":\"x\",\"layers\":2,"
                                "\"topic_logit_layers\":[1]}";
    fathom_synth_preset *bad = NULL;
    CHECK_STATUS(fathom_synth_preset_parse(&bad, wrong, strlen(wrong)), FATHOM_ERR_FORMAT);
    p->p.topic_layers[1] = 0.0f;
    CHECK_STATUS(synth_params_check(&p->p), FATHOM_ERR_INVALID_ARG);
    p->p.topic_layers[1] = 5.0f;
    remove(path);

    fathom_source *cap = capture_of(p, 32, "-layers.safetensors", path, sizeof path);
    fathom_synth_fit_options o = {.base = "smollm2-135m", .name = "refit", .k = 32,
                                  .fit = FATHOM_SYNTH_FIT_ALL & ~FATHOM_SYNTH_FIT_RECENCY & ~FATHOM_SYNTH_FIT_TARGET};
    fathom_synth_fit_report r;
    CHECK_OK(fathom_synth_fit(&fit, cap, &o, &r));
    CHECK(fit && fit->p.per_layer);
    if (fit) {
        double want[2], got[2];
        fathom_source *gen;
        CHECK_OK(fathom_synth_open_preset(&gen, fit, 1024, 32, 1));
        for (uint32_t l = 0; l < 2; l++) {
            CHECK_OK(synth_layer_top_mass(cap, r.style, r.rope_base, 32, l, &want[l]));
            CHECK_OK(synth_layer_top_mass(gen, FATHOM_ROPE_NEOX, fit->p.rope_base, 32, l, &got[l]));
        }
        fathom_source_free(gen);
        printf("per-layer fit: topic logits %.3f %.3f (known 0.8, 5); top-32 mass per layer %.4f %.4f "
               "(capture %.4f %.4f)\n",
               fit->p.topic_layers[0], fit->p.topic_layers[1], got[0], got[1], want[0], want[1]);
        CHECK(want[0] < want[1] - 0.05);
        CHECK(fit->p.topic_layers[0] < fit->p.topic_layers[1]);
        CHECK_NEAR(got[0], want[0], 0.02);
        CHECK_NEAR(got[1], want[1], 0.02);
    }
    fathom_source_free(cap);
    remove(path);
    fathom_synth_preset_free(p), fathom_synth_preset_free(same), fathom_synth_preset_free(back);
    fathom_synth_preset_free(fit);
}

/* A capture of p with the field at offset `at` set to v; fit (one search
 * alone) from 0 on a copy of p finds v within tol and the capture's
 * statistic within tol_stat. */
typedef int (*search_alone_fn)(const fathom_source *, uint32_t, synth_params *, double *, double *);
static void search_recovers(fathom_synth_preset *p, size_t at, float v, search_alone_fn fit, double tol,
                            double tol_stat, const char *name) {
    *field_at(&p->p, at) = v;
    char path[128], suffix[64];
    snprintf(suffix, sizeof suffix, "-%s.safetensors", name);
    fathom_source *cap = capture_of(p, 32, suffix, path, sizeof path);
    synth_params q = p->p;
    *field_at(&q, at) = 0.0f;
    double want = 0, got = 0;
    CHECK_OK(fit(cap, 32, &q, &want, &got));
    printf("search for %s %.2f: %.3f; statistic capture %.4f, preset %.4f\n", name, v, *field_at(&q, at), want, got);
    CHECK_NEAR(*field_at(&q, at), v, tol);
    CHECK_NEAR(got, want, tol_stat);
    fathom_source_free(cap);
    remove(path);
}

/* The statistics of p's generator (1024 tokens, 32 positions) with the
 * field at offset `at` set to v; *hash (if not NULL) gets layer 1's hash. */
static void stats_with(fathom_synth_preset *p, size_t at, float v, fathom_synth_stats *st, uint64_t *hash) {
    *field_at(&p->p, at) = v;
    fathom_source *gen;
    CHECK_OK(fathom_synth_open_preset(&gen, p, 1024, 32, 1));
    CHECK_OK(fathom_synth_stats_measure(gen, FATHOM_ROPE_NEOX, 1e4, 32, 1, st));
    if (hash) *hash = layer_hash(gen, 1);
    fathom_source_free(gen);
}

/* Queries that point at their targets (synth_params.target_share): the
 * share moves target_lift (how far above moment-matched queries a query's
 * deviation lifts the key it attends most) well above the share-0 generator's,
 * a preset file keeps it (and one without it reads as 0), and a fit of a
 * capture of the known preset with a known share finds it again. */
static void test_target_share(void) {
    fathom_synth_preset *p = known_preset();
    p->p.topic_logit = 0.25f; /* weak content, at the search floor as Gemma 3's (the share's regime) */
    double cos_at[3], lift_at[3];
    const float shares[3] = {0.0f, 0.15f, 0.4f};
    for (int i = 0; i < 3; i++) {
        fathom_synth_stats st;
        stats_with(p, offsetof(synth_params, target_share), shares[i], &st, NULL);
        cos_at[i] = st.target_cos, lift_at[i] = st.target_lift;
    }
    printf("target_share 0 / 0.15 / 0.4: target_lift %.4f / %.4f / %.4f, target_cos %.4f / %.4f / %.4f\n",
           lift_at[0], lift_at[1], lift_at[2], cos_at[0], cos_at[1], cos_at[2]);
    CHECK(lift_at[1] > lift_at[0] + 0.1 && lift_at[2] > lift_at[1] + 0.1);
    /* the file keeps it; one without the key reads as 0 (as before it existed) */
    round_trip(p, offsetof(synth_params, target_share), 0.4f, "-target.json");
    /* out of range */
    p->p.target_share = 0.99f;
    CHECK(synth_params_check(&p->p) == FATHOM_ERR_INVALID_ARG);
    /* The search finds a known share again on a capture of the preset
     * (every other field known: with content that points at its keys, a
     * larger topic logit also lifts the attended key, so a whole fit trades
     * the two; docs/synthetic.md) */
    search_recovers(p, offsetof(synth_params, target_share), 0.3f, synth_fit_target_share, 0.1, 0.1, "target_share");
    fathom_synth_preset_free(p);
}

/* Channel churn (synth_params.query_churn): the gain lowers churn_overlap
 * (consecutive queries' top-d/8 channels in common) and fixed_share (what
 * one fixed channel set covers against each query's own), churn 0 leaves
 * the bytes as without it, a preset file keeps it (and one without it
 * reads as 0), an unfitted preset or one out of range is refused, and the
 * search finds a known churn again on a capture of the preset. */
static void test_query_churn(void) {
    fathom_synth_preset *p = known_preset();
    p->p.query_run = 1; /* a gain per position: consecutive queries differ */
    double overlap_at[3], fixed_at[3];
    uint64_t hash_at[3];
    const float churns[3] = {0.0f, 0.5f, 1.0f};
    for (int i = 0; i < 3; i++) {
        fathom_synth_stats st;
        stats_with(p, offsetof(synth_params, query_churn), churns[i], &st, &hash_at[i]);
        overlap_at[i] = st.churn_overlap, fixed_at[i] = st.fixed_share;
    }
    printf("query_churn 0 / 0.5 / 1: churn_overlap %.4f / %.4f / %.4f, fixed_share %.4f / %.4f / %.4f\n",
           overlap_at[0], overlap_at[1], overlap_at[2], fixed_at[0], fixed_at[1], fixed_at[2]);
    CHECK(overlap_at[1] < overlap_at[0] - 0.05 && overlap_at[2] < overlap_at[1] - 0.05);
    CHECK(fixed_at[2] < fixed_at[0] - 0.02);
    CHECK(hash_at[1] != hash_at[0]);
    /* churn 0 is the generator without it: the bytes of a preset with the
     * field never set */
    fathom_synth_preset *plain = known_preset();
    plain->p.query_run = 1;
    fathom_source *gen;
    CHECK_OK(fathom_synth_open_preset(&gen, plain, 1024, 32, 1));
    CHECK(layer_hash(gen, 1) == hash_at[0]);
    fathom_source_free(gen);
    fathom_synth_preset_free(plain);
    /* the file keeps it; one without the key reads as 0 */
    round_trip(p, offsetof(synth_params, query_churn), 0.75f, "-churn.json");
    /* out of range, or on a built-in preset */
    p->p.query_churn = 4.5f;
    CHECK(synth_params_check(&p->p) == FATHOM_ERR_INVALID_ARG);
    p->p.query_churn = NAN;
    CHECK(synth_params_check(&p->p) == FATHOM_ERR_INVALID_ARG);
    synth_params builtin;
    CHECK(synth_builtin("smollm2-135m", &builtin));
    builtin.query_churn = 0.5f;
    CHECK(synth_params_check(&builtin) == FATHOM_ERR_INVALID_ARG);
    /* the search finds a known churn again on a capture of the preset */
    search_recovers(p, offsetof(synth_params, query_churn), 0.6f, synth_fit_query_churn, 0.2, 0.02, "query_churn");
    fathom_synth_preset_free(p);
}

/* A held channel churn (fathom_synth_fit_options.query_churn): the fit
 * keeps the given query_churn and searches everything else with it, so it
 * reaches the capture's top-k mass as a fit without it does, with the
 * churn's lower fixed_share; with FATHOM_SYNTH_FIT_CHURN, or out of
 * [0, 4], it is refused. */
static void test_fit_churn_held(void) {
    fathom_synth_preset *p = known_preset(), *fit = NULL, *plain = NULL;
    p->p.query_run = 1; /* consecutive queries differ: the fitted run is short and the churn shows */
    char path[128];
    fathom_source *cap = capture_of(p, 32, "-churn-held.safetensors", path, sizeof path);
    fathom_synth_fit_options o = {.base = "smollm2-135m", .name = "refit", .k = 32,
                                  .fit = FATHOM_SYNTH_FIT_ALL & ~FATHOM_SYNTH_FIT_LAYERS & ~FATHOM_SYNTH_FIT_RECENCY &
                                         ~FATHOM_SYNTH_FIT_TARGET};
    fathom_synth_fit_report r0, r;
    CHECK_OK(fathom_synth_fit(&plain, cap, &o, &r0));
    o.query_churn = 0.5f;
    CHECK_OK(fathom_synth_fit(&fit, cap, &o, &r));
    CHECK(plain && plain->p.query_churn == 0.0f && fit && fit->p.query_churn == 0.5f);
    printf("fit with query_churn held at 0.5 / without: fixed_share %.4f / %.4f (capture %.4f), top-k mass "
           "%.4f / %.4f (%.4f), query_run %u / %u\n",
           r.achieved.fixed_share, r0.achieved.fixed_share, r.target.fixed_share, r.achieved.top_mass,
           r0.achieved.top_mass, r.target.top_mass, fit ? fit->p.query_run : 0, plain ? plain->p.query_run : 0);
    CHECK(r.achieved.fixed_share < r0.achieved.fixed_share - 0.03);
    CHECK_NEAR(r.achieved.top_mass, r.target.top_mass, 0.03);
    CHECK_NEAR(r0.achieved.top_mass, r.target.top_mass, 0.03);
    fathom_synth_preset_free(fit), fathom_synth_preset_free(plain);
    fit = NULL;
    o.fit |= FATHOM_SYNTH_FIT_CHURN;
    CHECK_STATUS(fathom_synth_fit(&fit, cap, &o, &r), FATHOM_ERR_INVALID_ARG);
    o.fit &= ~(uint32_t)FATHOM_SYNTH_FIT_CHURN;
    o.query_churn = 4.5f;
    CHECK_STATUS(fathom_synth_fit(&fit, cap, &o, &r), FATHOM_ERR_INVALID_ARG);
    o.query_churn = NAN;
    CHECK_STATUS(fathom_synth_fit(&fit, cap, &o, &r), FATHOM_ERR_INVALID_ARG);
    CHECK(fit == NULL);
    fathom_source_free(cap);
    remove(path);
    fathom_synth_preset_free(p);
}

int main(void) {
    test_roundtrip();
    test_malformed();
    test_fit_recovers();
    test_bytes_unchanged();
    test_positional_file();
    test_positional_profile();
    test_fit_positional();
    test_head_profiles();
    test_fit_heads();
    test_query_heads();
    test_fit_query_heads();
    test_heads_channel_std();
    test_heads_channel_std_qk_norm();
    test_heads_qk_salience();
    test_heads_sink();
    test_fit_spread_dead_channels();
    test_dev_skew();
    test_layer_top_mass();
    test_fit_layers();
    test_target_share();
    test_query_churn();
    test_fit_churn_held();
    return check_summary("test_synth_fit");
}

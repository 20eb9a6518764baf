/* Presets fitted to captures (src/io/synth_fit.c, synth_preset.c): a preset
 * file round-trips to the same bytes; malformed preset text fails with
 * FATHOM_ERR_FORMAT; and the fit, run on a capture the generator itself
 * wrote from a known preset, finds that preset's RoPE and the knobs that
 * have a statistic of their own again, and matches its statistics. */
#include "check.h"
#include "fathom.h"
#include "synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *tmp_path(const char *suffix, char *buf, size_t cap) {
    snprintf(buf, cap, "/tmp/test_synth_fit_%ld%s", (long)getpid(), suffix);
    return buf;
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

static void test_fit_recovers(void) {
    fathom_synth_preset *known = known_preset(), *fit = NULL;
    fathom_source *gen, *cap;
    char path[128];
    tmp_path(".safetensors", path, sizeof path);
    CHECK_OK(fathom_synth_open_preset(&gen, known, 1024, 32, 1));
    CHECK_OK(fathom_capture_write(gen, path, FATHOM_DTYPE_F32));
    fathom_source_free(gen);
    CHECK_OK(fathom_capture_open(&cap, path));
    fathom_synth_fit_options o = {.base = "smollm2-135m", .name = "refit", .k = 32};
    fathom_synth_fit_report r;
    CHECK_OK(fathom_synth_fit(&fit, cap, &o, &r));
    if (!fit) return;
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

int main(void) {
    test_roundtrip();
    test_malformed();
    test_fit_recovers();
    return check_summary("test_synth_fit");
}

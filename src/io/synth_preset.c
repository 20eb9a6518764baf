/* Synthetic presets as values: the built-in ones by name, fitted ones from
 * preset files (JSON, docs/synthetic.md). A preset file is untrusted input:
 * every key must be known, every number finite and in range, every array
 * exactly d long; the first problem is reported by name. */
#define _POSIX_C_SOURCE 200809L /* strnlen */
#include "synth.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Format 1: one positional profile shared by every head. Format 2: format 1
 * plus, optionally, per-head profiles ("heads", optionally with each query
 * head's query std profile, "heads"."q_std"). Files without per-head
 * profiles are written as format 1, so their bytes do not change. Either
 * may carry "topic_logit_layers" (one topic logit per layer). */
#define PRESET_FORMAT "fathom-synth-preset-1"
#define PRESET_FORMAT_HEADS "fathom-synth-preset-2"

int synth_params_check(const synth_params *p) {
    size_t len = strnlen(p->name, sizeof p->name);
    FATHOM_CHECK_ARG(len > 0 && len < sizeof p->name, "preset: name must be 1..%zu bytes", sizeof p->name - 1);
    FATHOM_CHECK_ARG(p->layers >= 1 && p->layers <= SYNTH_MAX_LAYERS, "preset: layers %u not in 1..%u", p->layers,
                     SYNTH_MAX_LAYERS);
    FATHOM_CHECK_ARG(p->kv_heads >= 1 && p->kv_heads <= SYNTH_MAX_KV_HEADS, "preset: kv_heads %u not in 1..%u",
                     p->kv_heads, SYNTH_MAX_KV_HEADS);
    FATHOM_CHECK_ARG(p->group >= 1 && p->group <= SYNTH_MAX_GROUP, "preset: group %u not in 1..%u", p->group,
                     SYNTH_MAX_GROUP);
    FATHOM_CHECK_ARG(p->dim >= 8 && p->dim <= SYNTH_MAX_DIM && p->dim % 8 == 0,
                     "preset: dim %u must be a multiple of 8 in 8..%u", p->dim, SYNTH_MAX_DIM);
    FATHOM_CHECK_ARG(isfinite(p->rope_base) && p->rope_base > 1 && p->rope_base <= 1e12,
                     "preset: rope_base %g not in (1, 1e12]", p->rope_base);
    const struct {
        const char *name;
        float value, lo, hi;
    } ranges[] = {
        {"key_scale", p->key_scale, 1e-3f, 1e3f},        {"scale_spread", p->scale_spread, 0.0f, 3.0f},
        {"low_freq_boost", p->low_freq_boost, 0.0f, 100.0f}, {"outlier_mean", p->outlier_mean, 0.0f, 100.0f},
        {"background_logit", p->background_logit, 1e-3f, 100.0f}, {"topic_logit", p->topic_logit, 1e-3f, 100.0f},
        {"sink_logit", p->sink_logit, 0.0f, 100.0f},     {"content_cap", p->content_cap, 0.0f, 100.0f},
        {"topic_amp", p->topic_amp, 1e-3f, 100.0f},      {"recency_logit", p->recency_logit, 0.0f, 100.0f},
    };
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++)
        FATHOM_CHECK_ARG(isfinite(ranges[i].value) && ranges[i].value >= ranges[i].lo && ranges[i].value <= ranges[i].hi,
                         "preset: %s %g not in [%g, %g]", ranges[i].name, ranges[i].value, ranges[i].lo,
                         ranges[i].hi);
    FATHOM_CHECK_ARG(p->topics >= 4 && p->topics <= SYNTH_MAX_TOPICS && p->topics % 4 == 0,
                     "preset: topics %u must be a multiple of 4 in 4..%u", p->topics, SYNTH_MAX_TOPICS);
    FATHOM_CHECK_ARG(p->query_run >= 1 && p->query_run <= 65536, "preset: query_run %u not in 1..65536",
                     p->query_run);
    FATHOM_CHECK_ARG(isfinite(p->target_share) && p->target_share >= 0.0f && p->target_share <= 0.95f,
                     "preset: target_share %g not in [0, 0.95]", p->target_share);
    FATHOM_CHECK_ARG(isfinite(p->query_churn) && p->query_churn >= 0.0f && p->query_churn <= 4.0f,
                     "preset: query_churn %g not in [0, 4]", p->query_churn);
    if (!p->fitted) {
        FATHOM_CHECK_ARG(p->target_share == 0.0f, "preset: target_share needs a fitted preset");
        FATHOM_CHECK_ARG(p->query_churn == 0.0f, "preset: query_churn needs a fitted preset");
        FATHOM_CHECK_ARG(!p->heads, "preset: per-head profiles need a fitted preset");
        FATHOM_CHECK_ARG(!p->per_layer, "preset: per-layer topic logits need a fitted preset");
        FATHOM_CHECK_ARG(!p->q_heads, "preset: per-query-head profiles need a fitted preset");
        return FATHOM_OK;
    }
    FATHOM_CHECK_ARG(!p->q_heads || p->heads, "preset: per-query-head profiles need per-head profiles");
    for (uint32_t l = 0; p->per_layer && l < p->layers; l++)
        FATHOM_CHECK_ARG(isfinite(p->topic_layers[l]) && p->topic_layers[l] >= 1e-3f && p->topic_layers[l] <= 100.0f,
                         "preset: topic_logit_layers[%u] = %g not in [1e-3, 100]", l, p->topic_layers[l]);
    const struct {
        const char *name;
        const float *x;
        float lo, hi;
    } profiles[] = {{"k_std", p->k_std, 1e-4f, 1e4f},
                    {"k_mean", p->k_mean, 0.0f, 1e3f},
                    {"q_std", p->q_std, 1e-4f, 1e4f},
                    {"q_mean", p->q_mean, 0.0f, 1e3f}};
    for (size_t i = 0; i < sizeof profiles / sizeof profiles[0]; i++)
        for (uint32_t j = 0; j < p->dim; j++)
            FATHOM_CHECK_ARG(isfinite(profiles[i].x[j]) && profiles[i].x[j] >= profiles[i].lo &&
                                 profiles[i].x[j] <= profiles[i].hi,
                             "preset: %s[%u] = %g not in [%g, %g]", profiles[i].name, j, profiles[i].x[j],
                             profiles[i].lo, profiles[i].hi);
    if (!p->positional) {
        FATHOM_CHECK_ARG(!p->heads, "preset: per-head profiles need a positional profile");
        return FATHOM_OK;
    }
    FATHOM_CHECK_ARG(isfinite(p->pos_gain) && p->pos_gain >= 0.0f && p->pos_gain <= 100.0f,
                     "preset: pos_gain %g not in [0, 100]", p->pos_gain);
    for (uint32_t i = 0; i < p->dim / 2; i++)
        FATHOM_CHECK_ARG(isfinite(p->pos_re[i]) && isfinite(p->pos_im[i]) && fabsf(p->pos_re[i]) <= 1e3f &&
                             fabsf(p->pos_im[i]) <= 1e3f,
                         "preset: pos_re/pos_im[%u] = (%g, %g) not in [-1e3, 1e3]", i, p->pos_re[i], p->pos_im[i]);
    if (!p->heads) return FATHOM_OK;
    FATHOM_CHECK_ARG(synth_heads_size(p) <= SYNTH_MAX_HEAD_FLOATS,
                     "preset: per-head profiles of %llu floats exceed %u", (unsigned long long)synth_heads_size(p),
                     SYNTH_MAX_HEAD_FLOATS);
    const uint32_t d = p->dim;
    for (uint64_t b = 0; b < (uint64_t)p->layers * p->kv_heads; b++) {
        const float *x = p->heads + b * synth_head_floats(p);
        const uint32_t layer = (uint32_t)(b / p->kv_heads), head = (uint32_t)(b % p->kv_heads);
        for (uint32_t j = 0; j < d; j++) {
            FATHOM_CHECK_ARG(isfinite(x[j]) && x[j] >= 1e-4f && x[j] <= 1e4f,
                             "preset: heads k_std of layer %u head %u [%u] = %g not in [1e-4, 1e4]", layer, head, j,
                             x[j]);
            FATHOM_CHECK_ARG(isfinite(x[d + j]) && x[d + j] >= 0.0f && x[d + j] <= 1e3f,
                             "preset: heads k_mean of layer %u head %u [%u] = %g not in [0, 1e3]", layer, head, j,
                             x[d + j]);
        }
        for (uint32_t j = 2 * d; j < (2 + p->group) * d; j++)
            FATHOM_CHECK_ARG(isfinite(x[j]) && fabsf(x[j]) <= 1e3f,
                             "preset: heads pos_re/pos_im of layer %u head %u = %g not in [-1e3, 1e3]", layer, head,
                             x[j]);
        for (uint32_t j = (2 + p->group) * d; p->q_heads && j < synth_head_floats(p); j++)
            FATHOM_CHECK_ARG(isfinite(x[j]) && x[j] >= 1e-4f && x[j] <= 1e4f,
                             "preset: heads q_std of layer %u head %u query head %u [%u] = %g not in [1e-4, 1e4]",
                             layer, head, (j - (2 + p->group) * d) / d, j % d, x[j]);
    }
    return FATHOM_OK;
}

int synth_heads_dup(const synth_params *p, float **out) {
    *out = NULL;
    if (!p->heads) return FATHOM_OK;
    FATHOM_CHECK_ARG(synth_heads_size(p) <= SYNTH_MAX_HEAD_FLOATS, "preset: per-head profiles exceed %u floats",
                     SYNTH_MAX_HEAD_FLOATS);
    float *h = fathom_alloc_array(synth_heads_size(p), sizeof *h);
    FATHOM_CHECK(!h, FATHOM_ERR_NOMEM, "out of memory for per-head profiles");
    memcpy(h, p->heads, synth_heads_size(p) * sizeof *h);
    *out = h;
    return FATHOM_OK;
}

/* ---- reading ---- */

static int get_number(const json_t *root, const char *key, double *out) {
    const json_t *v = json_object_get(root, key);
    FATHOM_CHECK(!v, FATHOM_ERR_FORMAT, "preset file: missing \"%s\"", key);
    FATHOM_CHECK(!json_is_number(v), FATHOM_ERR_FORMAT, "preset file: \"%s\" is not a number", key);
    *out = json_number_value(v);
    FATHOM_CHECK(!isfinite(*out), FATHOM_ERR_FORMAT, "preset file: \"%s\" is not finite", key);
    return FATHOM_OK;
}

static int get_float(const json_t *root, const char *key, float *out) {
    double x = 0;
    FATHOM_TRY(get_number(root, key, &x));
    FATHOM_CHECK(fabs(x) > 1e30, FATHOM_ERR_FORMAT, "preset file: \"%s\" = %g is out of range", key, x);
    *out = (float)x;
    return FATHOM_OK;
}

static int get_u32(const json_t *root, const char *key, uint32_t *out) {
    const json_t *v = json_object_get(root, key);
    FATHOM_CHECK(!v, FATHOM_ERR_FORMAT, "preset file: missing \"%s\"", key);
    FATHOM_CHECK(!json_is_integer(v), FATHOM_ERR_FORMAT, "preset file: \"%s\" is not an integer", key);
    json_int_t x = json_integer_value(v);
    FATHOM_CHECK(x < 0 || x > (json_int_t)UINT32_MAX, FATHOM_ERR_FORMAT, "preset file: \"%s\" = %lld is out of range",
                 key, (long long)x);
    *out = (uint32_t)x;
    return FATHOM_OK;
}

/* An array of len numbers (len: the value of what, "dim" or "dim / 2"). */
static int get_profile(const json_t *root, const char *key, uint32_t dim, const char *what, float *out) {
    const json_t *v = json_object_get(root, key);
    FATHOM_CHECK(!v, FATHOM_ERR_FORMAT, "preset file: missing \"%s\"", key);
    FATHOM_CHECK(!json_is_array(v) || json_array_size(v) != dim, FATHOM_ERR_FORMAT,
                 "preset file: \"%s\" must be an array of %s = %u numbers", key, what, dim);
    for (uint32_t j = 0; j < dim; j++) {
        const json_t *x = json_array_get(v, j);
        FATHOM_CHECK(!json_is_number(x) || !isfinite(json_number_value(x)) || fabs(json_number_value(x)) > 1e30,
                     FATHOM_ERR_FORMAT, "preset file: \"%s\"[%u] is not a finite number", key, j);
        out[j] = (float)json_number_value(x);
    }
    return FATHOM_OK;
}

static const char *const known_keys[] = {
    "format",       "name",       "layers",         "kv_heads",     "group",          "dim",
    "rope_base",    "qk_norm",    "key_scale",      "scale_spread", "low_freq_boost", "outlier_mean",
    "background_logit", "topic_logit", "sink_logit", "content_cap", "topics",         "topic_amp",
    "recency_logit", "query_run",  "k_std",          "k_mean",       "q_std",          "q_mean",
    "fit",          "pos_gain",   "pos_re",         "pos_im",         "heads",          "topic_logit_layers",
    "target_share", "query_churn",
};

/* One flat array of "heads" (count numbers, each in [lo, hi]) into the
 * blocks of p->heads: entry e goes to block e / per_block, at offset + the
 * query head's stride (e % per_block / per_head * stride) + e % per_head. */
static int get_head_array(const json_t *heads, const char *key, uint64_t count, uint32_t per_block,
                          uint32_t per_head, uint32_t offset, uint32_t stride, float lo, float hi, synth_params *p) {
    const json_t *v = json_object_get(heads, key);
    FATHOM_CHECK(!v, FATHOM_ERR_FORMAT, "preset file: missing \"heads\".\"%s\"", key);
    FATHOM_CHECK(!json_is_array(v) || json_array_size(v) != count, FATHOM_ERR_FORMAT,
                 "preset file: \"heads\".\"%s\" must be an array of %llu numbers", key, (unsigned long long)count);
    for (uint64_t e = 0; e < count; e++) {
        const json_t *x = json_array_get(v, (size_t)e);
        const double y = json_is_number(x) ? json_number_value(x) : NAN;
        FATHOM_CHECK(!isfinite(y) || y < lo || y > hi, FATHOM_ERR_FORMAT,
                     "preset file: \"heads\".\"%s\"[%llu] is not a number in [%g, %g]", key, (unsigned long long)e,
                     lo, hi);
        const uint64_t b = e / per_block, r = e % per_block;
        p->heads[b * synth_head_floats(p) + offset + r / per_head * stride + r % per_head] = (float)y;
    }
    return FATHOM_OK;
}

/* "heads": {"k_std", "k_mean": layers x kv_heads x d; "pos_re", "pos_im":
 * layers x kv_heads x group x d/2; optionally "q_std": layers x kv_heads x
 * group x d}, each layer-major (docs/synthetic.md). */
static int parse_heads(const json_t *heads, synth_params *p) {
    FATHOM_CHECK(!json_is_object(heads), FATHOM_ERR_FORMAT, "preset file: \"heads\" is not an object");
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)heads, key, value) {
        FATHOM_CHECK(strcmp(key, "k_std") && strcmp(key, "k_mean") && strcmp(key, "pos_re") && strcmp(key, "pos_im") &&
                         strcmp(key, "q_std"),
                     FATHOM_ERR_FORMAT, "preset file: unknown key \"heads\".\"%s\"", key);
    }
    p->q_heads = json_object_get(heads, "q_std") != NULL;
    /* the sizes come from these, so their ranges first (no overflow, no
     * allocation beyond the bound) */
    FATHOM_CHECK(p->layers < 1 || p->layers > SYNTH_MAX_LAYERS || p->kv_heads < 1 ||
                     p->kv_heads > SYNTH_MAX_KV_HEADS || p->group < 1 || p->group > SYNTH_MAX_GROUP,
                 FATHOM_ERR_FORMAT, "preset file: \"heads\" needs layers in 1..%u, kv_heads in 1..%u, group in 1..%u",
                 SYNTH_MAX_LAYERS, SYNTH_MAX_KV_HEADS, SYNTH_MAX_GROUP);
    FATHOM_CHECK(synth_heads_size(p) > SYNTH_MAX_HEAD_FLOATS, FATHOM_ERR_FORMAT,
                 "preset file: per-head profiles of %llu floats exceed %u", (unsigned long long)synth_heads_size(p),
                 SYNTH_MAX_HEAD_FLOATS);
    const uint64_t blocks = (uint64_t)p->layers * p->kv_heads;
    const uint32_t d = p->dim, half = d / 2, g = p->group;
    p->heads = fathom_alloc_array(synth_heads_size(p), sizeof *p->heads);
    FATHOM_CHECK(!p->heads, FATHOM_ERR_NOMEM, "out of memory for per-head profiles");
    FATHOM_TRY(get_head_array(heads, "k_std", blocks * d, d, d, 0, 0, 1e-4f, 1e4f, p));
    FATHOM_TRY(get_head_array(heads, "k_mean", blocks * d, d, d, d, 0, 0.0f, 1e3f, p));
    FATHOM_TRY(get_head_array(heads, "pos_re", blocks * g * half, g * half, half, 2 * d, d, -1e3f, 1e3f, p));
    FATHOM_TRY(get_head_array(heads, "pos_im", blocks * g * half, g * half, half, 2 * d + half, d, -1e3f, 1e3f, p));
    if (p->q_heads) FATHOM_TRY(get_head_array(heads, "q_std", blocks * g * d, g * d, d, (2 + g) * d, d, 1e-4f, 1e4f, p));
    return FATHOM_OK;
}

static int parse_root(const json_t *root, synth_params *p) {
    FATHOM_CHECK(!json_is_object(root), FATHOM_ERR_FORMAT, "preset file: not a JSON object");
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)root, key, value) {
        bool known = false;
        for (size_t i = 0; i < sizeof known_keys / sizeof known_keys[0]; i++) known |= !strcmp(key, known_keys[i]);
        FATHOM_CHECK(!known, FATHOM_ERR_FORMAT, "preset file: unknown key \"%s\"", key);
    }
    const json_t *format = json_object_get(root, "format");
    const bool v1 = json_is_string(format) && !strcmp(json_string_value(format), PRESET_FORMAT);
    const bool v2 = json_is_string(format) && !strcmp(json_string_value(format), PRESET_FORMAT_HEADS);
    FATHOM_CHECK(!v1 && !v2, FATHOM_ERR_FORMAT, "preset file: \"format\" must be \"%s\" or \"%s\"", PRESET_FORMAT,
                 PRESET_FORMAT_HEADS);
    FATHOM_CHECK(v1 && json_object_get(root, "heads"), FATHOM_ERR_FORMAT,
                 "preset file: \"heads\" (per-head profiles) needs \"format\": \"%s\"", PRESET_FORMAT_HEADS);
    const json_t *name = json_object_get(root, "name");
    FATHOM_CHECK(!json_is_string(name), FATHOM_ERR_FORMAT, "preset file: missing or non-string \"name\"");
    size_t name_len = json_string_length(name);
    FATHOM_CHECK(name_len == 0 || name_len >= sizeof p->name || strlen(json_string_value(name)) != name_len,
                 FATHOM_ERR_FORMAT, "preset file: \"name\" must be 1..%zu bytes without NUL", sizeof p->name - 1);
    memcpy(p->name, json_string_value(name), name_len + 1);
    const json_t *qk = json_object_get(root, "qk_norm");
    FATHOM_CHECK(!json_is_boolean(qk), FATHOM_ERR_FORMAT, "preset file: missing or non-boolean \"qk_norm\"");
    p->qk_norm = json_is_true(qk);
    const json_t *fit = json_object_get(root, "fit");
    FATHOM_CHECK(fit && !json_is_object(fit), FATHOM_ERR_FORMAT, "preset file: \"fit\" is not an object");
    FATHOM_TRY(get_u32(root, "layers", &p->layers));
    FATHOM_TRY(get_u32(root, "kv_heads", &p->kv_heads));
    FATHOM_TRY(get_u32(root, "group", &p->group));
    FATHOM_TRY(get_u32(root, "dim", &p->dim));
    FATHOM_TRY(get_u32(root, "topics", &p->topics));
    FATHOM_TRY(get_u32(root, "query_run", &p->query_run));
    FATHOM_TRY(get_number(root, "rope_base", &p->rope_base));
    struct {
        const char *key;
        float *out;
    } floats[] = {{"key_scale", &p->key_scale},       {"scale_spread", &p->scale_spread},
                  {"low_freq_boost", &p->low_freq_boost}, {"outlier_mean", &p->outlier_mean},
                  {"background_logit", &p->background_logit}, {"topic_logit", &p->topic_logit},
                  {"sink_logit", &p->sink_logit},     {"content_cap", &p->content_cap},
                  {"topic_amp", &p->topic_amp},       {"recency_logit", &p->recency_logit}};
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++) FATHOM_TRY(get_float(root, floats[i].key, floats[i].out));
    /* the arrays' length is checked against dim, so dim's range first */
    FATHOM_CHECK(p->dim < 8 || p->dim > SYNTH_MAX_DIM || p->dim % 8, FATHOM_ERR_FORMAT,
                 "preset file: dim %u must be a multiple of 8 in 8..%u", p->dim, SYNTH_MAX_DIM);
    FATHOM_TRY(get_profile(root, "k_std", p->dim, "dim", p->k_std));
    FATHOM_TRY(get_profile(root, "k_mean", p->dim, "dim", p->k_mean));
    FATHOM_TRY(get_profile(root, "q_std", p->dim, "dim", p->q_std));
    FATHOM_TRY(get_profile(root, "q_mean", p->dim, "dim", p->q_mean));
    /* the positional profile is optional (files of presets fitted without it
     * have none), but all three keys or none */
    int pos_keys = !!json_object_get(root, "pos_gain") + !!json_object_get(root, "pos_re") +
                   !!json_object_get(root, "pos_im");
    FATHOM_CHECK(pos_keys != 0 && pos_keys != 3, FATHOM_ERR_FORMAT,
                 "preset file: \"pos_gain\", \"pos_re\" and \"pos_im\" come together or not at all");
    if (pos_keys == 3) {
        p->positional = true;
        FATHOM_TRY(get_float(root, "pos_gain", &p->pos_gain));
        FATHOM_TRY(get_profile(root, "pos_re", p->dim / 2, "dim / 2", p->pos_re));
        FATHOM_TRY(get_profile(root, "pos_im", p->dim / 2, "dim / 2", p->pos_im));
    }
    /* per-layer topic logits are optional: one number per layer */
    if (json_object_get(root, "topic_logit_layers")) {
        FATHOM_CHECK(p->layers < 1 || p->layers > SYNTH_MAX_LAYERS, FATHOM_ERR_FORMAT,
                     "preset file: layers %u not in 1..%u", p->layers, SYNTH_MAX_LAYERS);
        FATHOM_TRY(get_profile(root, "topic_logit_layers", p->layers, "layers", p->topic_layers));
        p->per_layer = true;
    }
    /* queries that point at their targets are optional (absent: 0) */
    if (json_object_get(root, "target_share")) FATHOM_TRY(get_float(root, "target_share", &p->target_share));
    /* channel churn is optional (absent: 0) */
    if (json_object_get(root, "query_churn")) FATHOM_TRY(get_float(root, "query_churn", &p->query_churn));
    const json_t *heads = json_object_get(root, "heads");
    if (heads) {
        FATHOM_CHECK(pos_keys != 3, FATHOM_ERR_FORMAT,
                     "preset file: \"heads\" (per-head profiles) needs \"pos_gain\", \"pos_re\" and \"pos_im\"");
        FATHOM_TRY(parse_heads(heads, p));
    }
    p->fitted = true;
    int st = synth_params_check(p);
    if (st != FATHOM_ERR_INVALID_ARG) return st;
    /* the same message ("preset: ..."), as a file-format error */
    char msg[256];
    snprintf(msg, sizeof msg, "%s", fathom_last_error());
    return fathom_fail(FATHOM_ERR_FORMAT, "%s (preset file)", msg);
}

int fathom_synth_preset_parse(fathom_synth_preset **out, const char *text, size_t len) {
    FATHOM_CHECK_ARG(out != NULL, "out is NULL");
    *out = NULL;
    FATHOM_CHECK_ARG(text != NULL, "text is NULL");
    json_error_t err;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    FATHOM_CHECK(!root, FATHOM_ERR_FORMAT, "preset file: not valid JSON (line %d: %s)", err.line, err.text);
    fathom_synth_preset *p = calloc(1, sizeof *p);
    if (!p) {
        json_decref(root);
        return fathom_fail(FATHOM_ERR_NOMEM, "out of memory for a preset");
    }
    int st = parse_root(root, &p->p);
    json_decref(root);
    if (st < 0) {
        free(p->p.heads);
        free(p);
        return st;
    }
    *out = p;
    return FATHOM_OK;
}

/* Preset files are small (a few arrays of d numbers); anything larger is not one. */
#define PRESET_MAX_BYTES (16u << 20)

int fathom_synth_preset_load(fathom_synth_preset **out, const char *name) {
    FATHOM_CHECK_ARG(out != NULL, "out is NULL");
    *out = NULL;
    FATHOM_CHECK_ARG(name != NULL, "preset name is NULL");
    size_t len = strlen(name);
    if (len < 5 || strcmp(name + len - 5, ".json")) {
        fathom_synth_preset *p = calloc(1, sizeof *p);
        FATHOM_CHECK(!p, FATHOM_ERR_NOMEM, "out of memory for a preset");
        if (!synth_builtin(name, &p->p)) {
            free(p);
            return fathom_fail(FATHOM_ERR_INVALID_ARG,
                               "unknown preset '%s' (qwen3-8b, llama-3.1-8b, smollm2-135m, or a .json preset file)",
                               name);
        }
        *out = p;
        return FATHOM_OK;
    }
    FILE *f = fopen(name, "rb");
    FATHOM_CHECK(!f, FATHOM_ERR_IO, "cannot open preset file %s", name);
    char *buf = malloc(PRESET_MAX_BYTES + 1);
    size_t got = buf ? fread(buf, 1, PRESET_MAX_BYTES + 1, f) : 0;
    bool read_error = ferror(f);
    fclose(f);
    if (!buf) return fathom_fail(FATHOM_ERR_NOMEM, "out of memory reading %s", name);
    if (read_error || got > PRESET_MAX_BYTES) {
        free(buf);
        return fathom_fail(read_error ? FATHOM_ERR_IO : FATHOM_ERR_FORMAT,
                           read_error ? "cannot read preset file %s" : "preset file %s is larger than 16 MiB", name);
    }
    int st = fathom_synth_preset_parse(out, buf, got);
    free(buf);
    return st;
}

void fathom_synth_preset_free(fathom_synth_preset *p) {
    if (p) free(p->p.heads);
    free(p);
}

int fathom_synth_preset_info(const fathom_synth_preset *p, fathom_source_info *info) {
    FATHOM_CHECK_ARG(p != NULL && info != NULL, "fathom_synth_preset_info: NULL argument");
    memset(info, 0, sizeof *info);
    snprintf(info->model, sizeof info->model, "%s", p->p.name);
    info->layers = p->p.layers;
    info->kv_heads = p->p.kv_heads;
    info->q_heads = p->p.kv_heads * p->p.group;
    info->dim = p->p.dim;
    return FATHOM_OK;
}

/* ---- writing ---- */

static json_t *profile_json(const float *x, uint32_t dim) {
    json_t *a = json_array();
    for (uint32_t j = 0; a && j < dim; j++)
        if (json_array_append_new(a, json_real((double)x[j]))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* The "heads" object of p (parse_heads' layout); NULL when out of memory. */
static json_t *heads_json(const synth_params *p) {
    const uint64_t blocks = (uint64_t)p->layers * p->kv_heads;
    const uint32_t d = p->dim, half = d / 2;
    json_t *o = json_object();
    static const char *const keys[] = {"k_std", "k_mean", "pos_re", "pos_im", "q_std"};
    for (int a = 0; o && a < (p->q_heads ? 5 : 4); a++) {
        json_t *arr = json_array();
        if (!arr || json_object_set_new(o, keys[a], arr)) {
            json_decref(o);
            return NULL;
        }
        for (uint64_t b = 0; b < blocks; b++) {
            const float *x = p->heads + b * synth_head_floats(p);
            const uint32_t count = a < 2 ? d : a < 4 ? p->group * half : p->group * d;
            for (uint32_t e = 0; e < count; e++) {
                float y = a < 2   ? x[a * d + e]
                          : a < 4 ? x[2 * d + e / half * d + (a == 3 ? half : 0) + e % half]
                                  : x[(2 + p->group) * d + e];
                if (json_array_append_new(arr, json_real((double)y))) {
                    json_decref(o);
                    return NULL;
                }
            }
        }
    }
    return o;
}

int fathom_synth_preset_write(const fathom_synth_preset *preset, const char *path, const char *extra) {
    FATHOM_CHECK_ARG(preset != NULL && path != NULL, "fathom_synth_preset_write: NULL argument");
    const synth_params *p = &preset->p;
    FATHOM_CHECK_ARG(p->fitted, "preset '%s' is built in; only fitted presets have a file form", p->name);
    json_t *fit = NULL;
    if (extra) {
        json_error_t err;
        fit = json_loads(extra, JSON_REJECT_DUPLICATES, &err);
        if (!fit || !json_is_object(fit)) {
            json_decref(fit);
            return fathom_fail(FATHOM_ERR_INVALID_ARG, "extra is not a JSON object (%s)",
                               fit ? "another JSON value" : err.text);
        }
    }
    json_t *root = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:f, s:b, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:I, "
                             "s:f, s:f, s:I, s:o, s:o, s:o, s:o}",
                             "format", PRESET_FORMAT, "name", p->name, "layers", (json_int_t)p->layers, "kv_heads",
                             (json_int_t)p->kv_heads, "group", (json_int_t)p->group, "dim", (json_int_t)p->dim,
                             "rope_base", p->rope_base, "qk_norm", (int)p->qk_norm, "key_scale", (double)p->key_scale,
                             "scale_spread", (double)p->scale_spread, "low_freq_boost", (double)p->low_freq_boost,
                             "outlier_mean", (double)p->outlier_mean, "background_logit", (double)p->background_logit,
                             "topic_logit", (double)p->topic_logit, "sink_logit", (double)p->sink_logit,
                             "content_cap", (double)p->content_cap, "topics", (json_int_t)p->topics, "topic_amp",
                             (double)p->topic_amp, "recency_logit", (double)p->recency_logit, "query_run",
                             (json_int_t)p->query_run, "k_std", profile_json(p->k_std, p->dim), "k_mean",
                             profile_json(p->k_mean, p->dim), "q_std", profile_json(p->q_std, p->dim), "q_mean",
                             profile_json(p->q_mean, p->dim));
    if (!root) {
        json_decref(fit);
        return fathom_fail(FATHOM_ERR_NOMEM, "out of memory building the preset file");
    }
    /* the optional fields, each only where it is in use */
    if ((p->positional && (json_object_set_new(root, "pos_gain", json_real((double)p->pos_gain)) ||
                           json_object_set_new(root, "pos_re", profile_json(p->pos_re, p->dim / 2)) ||
                           json_object_set_new(root, "pos_im", profile_json(p->pos_im, p->dim / 2)))) ||
        (p->per_layer &&
         json_object_set_new(root, "topic_logit_layers", profile_json(p->topic_layers, p->layers))) ||
        (p->target_share > 0 && json_object_set_new(root, "target_share", json_real((double)p->target_share))) ||
        (p->query_churn > 0 && json_object_set_new(root, "query_churn", json_real((double)p->query_churn)))) {
        json_decref(root);
        json_decref(fit);
        return fathom_fail(FATHOM_ERR_NOMEM, "out of memory building the preset file");
    }
    json_t *heads = p->heads ? heads_json(p) : NULL;
    if (p->heads && (!heads || json_object_set_new(root, "heads", heads) ||
                     json_object_set_new(root, "format", json_string(PRESET_FORMAT_HEADS)))) {
        json_decref(root);
        json_decref(fit);
        return fathom_fail(FATHOM_ERR_NOMEM, "out of memory building the preset file");
    }
    if (fit && json_object_set_new(root, "fit", fit)) {
        json_decref(root);
        return fathom_fail(FATHOM_ERR_NOMEM, "out of memory building the preset file");
    }
    int rc = json_dump_file(root, path, JSON_INDENT(1) | JSON_REAL_PRECISION(9));
    json_decref(root);
    FATHOM_CHECK(rc != 0, FATHOM_ERR_IO, "cannot write preset file %s", path);
    return FATHOM_OK;
}

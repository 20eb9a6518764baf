/* The synthetic source: keys, values and queries that look like a real
 * model's where the paper's methods care (docs/synthetic.md).
 *
 * Everything is drawn from a counter-based generator, mix64(stream + counter
 * * golden) (synth_mix64, synth.h), so any layer, head or token can be generated on its own, in any
 * order, from any thread, and a longer context repeats the shorter one's
 * tokens exactly. Two seeds: a fixed MODEL seed per preset draws the
 * parameters a trained model would have (channel scales, means, gains, topic
 * directions, head preferences); the user's seed draws the token-level
 * content, so seeds 1 and 2 are two texts read by the same model. */
#include "source.h"
#include "synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ===================================================================== *
 * presets
 * ===================================================================== */

/* name, layers, KV heads, group, dim, RoPE base, QK-norm, key scale, scale
 * spread, low-frequency boost, outlier mean, background / topic / sink
 * logit, content cap; the fitted-preset fields take their built-in values
 * in synth_builtin. */
#define BUILTIN(...) {__VA_ARGS__, false, 0, 0.0f, 0.0f, 0, {0}, {0}, {0}, {0}, false, 0.0f, {0}, {0}, NULL, false, {0}, false, 0.0f, 0.0f}
static const synth_params presets[] = {
    BUILTIN("qwen3-8b", 36, 8, 4, 128, 1e6, true, 1.0f, 0.9f, 0.5f, 12.0f, 1.0f, 7.5f, 16.0f, 0.0f),
    BUILTIN("llama-3.1-8b", 32, 8, 4, 128, 5e5, false, 2.5f, 1.1f, 4.0f, 0.0f, 1.0f, 4.5f, 16.0f, 2.5f),
    BUILTIN("smollm2-135m", 30, 3, 3, 64, 1e5, false, 2.0f, 1.0f, 4.0f, 0.0f, 1.0f, 4.0f, 16.0f, 2.5f),
};
#undef BUILTIN

#define SYNTH_TOPICS 16      /* topic directions per (layer, KV head) of a built-in preset */
#define SYNTH_QUERY_TOPICS 3 /* topics one query mixes */
#define SYNTH_SINKS 4        /* tokens that can act as attention sinks */
#define SYNTH_CHUNK 24       /* tokens per topic run (not a multiple of 8 on purpose) */
#define SYNTH_TILE 256       /* tokens per RoPE table, shared by the KV heads */
#define SYNTH_PHRASE 6       /* tokens per phrase: relevance comes in short runs */


/* ===================================================================== *
 * counter-based random numbers (synth_mix64, synth.h)
 * ===================================================================== */

enum stream {
    S_MODEL_HEAD = 1, S_MODEL_QHEAD, S_KEY_NOISE, S_TOKEN, S_CHUNK, S_VALUE, S_QUERY_NOISE, S_QUERY_TOPIC, S_PHRASE,
    S_MODEL_NOISE, /* key noise of the model seed's text (per-head QK-norm heads, key_after_norm) */
    S_SALIENCE,    /* per-topic salience (per-head QK-norm heads) */
    S_QUERY_TARGET, /* the key each query points at (target_share) */
    S_QUERY_CHURN   /* each query's channel gains (query_churn) */
};

/* The base of one stream; draw(base, i) is its i-th 64-bit output. */
static uint64_t stream_base(uint64_t seed, uint64_t stream, uint64_t layer, uint64_t head) {
    uint64_t h = synth_mix64(seed + SYNTH_GOLDEN);
    h = synth_mix64(h ^ (stream * SYNTH_GOLDEN + 0x632be59bd9b4e019ull));
    h = synth_mix64(h ^ (layer * SYNTH_GOLDEN + 0x85157af5ull));
    return synth_mix64(h ^ (head * SYNTH_GOLDEN + 0x2545f4914f6cdd1dull));
}

static inline uint64_t draw(uint64_t base, uint64_t i) { return synth_mix64(base + i * SYNTH_GOLDEN); }

static inline double uniform01(uint64_t x) { return (double)(x >> 11) * (1.0 / 9007199254740992.0); }

/* Acklam's rational approximation of the inverse normal CDF (rel. error
 * 1.2e-9), used only to fill the table below. */
static double inv_normal(double p) {
    static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                               1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00};
    static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                               6.680131188771972e+01, -1.328068155288572e+01};
    static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                               -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00};
    static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                               3.754408661907416e+00};
    if (p < 0.02425) {
        double q = sqrt(-2 * log(p));
        return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
               ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
    }
    if (p > 1 - 0.02425) return -inv_normal(1 - p);
    double q = p - 0.5, r = q * q;
    return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
           (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

typedef struct synth {
    synth_params preset;
    uint64_t seed;       /* token-level content */
    uint64_t model_seed; /* model-level parameters, fixed per preset */
    /* Normal quantiles at (i + 0.5) / 65536: one 64-bit draw gives four
     * standard normal samples by lookup, fast enough for 268 MB per layer. */
    float gauss[65536];
} synth;

static inline float gauss_of(const synth *s, uint64_t x, int lane) {
    return s->gauss[(x >> (16 * lane)) & 0xffffu];
}

/* One normal sample from a stream (model parameters; speed irrelevant). */
static float normal_at(const synth *s, uint64_t base, uint64_t i) { return gauss_of(s, draw(base, i), 0); }

/* ===================================================================== *
 * model-level parameters of one (layer, KV head) and its query heads
 * ===================================================================== */

typedef struct head_model {
    uint32_t dim, half, topics;
    float theta[SYNTH_MAX_DIM / 2];  /* RoPE frequency of each pair */
    float k_scale[SYNTH_MAX_DIM], k_mean[SYNTH_MAX_DIM], k_gain[SYNTH_MAX_DIM];
    float v_scale[SYNTH_MAX_DIM], v_mean[SYNTH_MAX_DIM];
    float topic[SYNTH_MAX_TOPICS][SYNTH_MAX_DIM]; /* unit vectors, low-frequency pairs */
    /* the topics as each query head carries them: topic[t][j] * q_topic[h][j],
     * q_topic 1 but (with per-query-head profiles) below on the channels
     * where the topics would exceed the head's measured query variance
     * (query_within_measured) */
    float q_topic[SYNTH_MAX_GROUP][SYNTH_MAX_DIM];
    float sink_dir[SYNTH_MAX_DIM];            /* unit, where the group's queries point */
    float recency[SYNTH_MAX_DIM];             /* unit, high/mid-frequency pairs */
    float sink_amp[SYNTH_SINKS];   /* logit gap of each sink token, relative to the first */
    float topic_amp, recency_amp;
    /* Expected sum over topics of c_m^2 |topic_m|^2 (c_m a token's
     * coefficient): the topics' share of a key's energy, in topic_amp^2.
     * hm->topics (unit vectors, unit-variance coefficients) unless the head
     * has per-head profiles (head_model_build). */
    double topic_energy;
    bool topic_salience; /* each topic its own salience (per-head QK-norm heads), not one per token */
    double coeff_ms; /* mean square of a token's topic coefficient (per-head heads, topics_within_measured) */
    uint32_t chunk_offset, phrase_offset;
    float sal_phrase, sal_token, w_chunk, w_phrase, w_token, v_topic_amp;
    float v_topic[SYNTH_MAX_TOPICS][SYNTH_MAX_DIM];
    /* per query head of the group */
    float q_scale[SYNTH_MAX_GROUP][SYNTH_MAX_DIM], q_mean[SYNTH_MAX_GROUP][SYNTH_MAX_DIM];
    float q_gain[SYNTH_MAX_GROUP][SYNTH_MAX_DIM];
    float topic_cdf[SYNTH_MAX_GROUP][SYNTH_MAX_TOPICS]; /* head preference over topics */
    float q_topic_amp, q_recency_amp;
    float q_recency_post; /* recency component added after the calibration (fitted presets) */
    float q_pos[SYNTH_MAX_GROUP][SYNTH_MAX_DIM]; /* positional component (positional presets) */
    float q_sink_amp[SYNTH_MAX_GROUP]; /* query component along sink_dir */
    float q_sink_post; /* sink component added after QK-norm (per-head QK-norm presets) */
    float q_bg[SYNTH_MAX_GROUP];   /* multiplier of the query's mean and noise */
    float q_mult[SYNTH_MAX_GROUP]; /* overall query multiplier (softmax temperature) */
    float q_rms[SYNTH_MAX_GROUP];  /* expected RMS QK-norm divides the query by (1 without) */
    float sink_key_amp[SYNTH_SINKS]; /* key amplitude of each sink token along sink_dir */
} head_model;

/* Channel j belongs to RoPE pair j mod d/2; how low its frequency is, in [0, 1]
 * (1 = the slowest pair, which relative rotation barely moves). */
static inline float lowness(const head_model *hm, uint32_t j) {
    return (float)(j % hm->half) / (float)(hm->half - 1);
}

static void unit_vector(const synth *s, uint64_t base, uint64_t *counter, const head_model *hm,
                        float power, float floor_weight, bool low, float *out) {
    double norm = 0;
    for (uint32_t j = 0; j < hm->dim; j++) {
        float lf = lowness(hm, j);
        float w = powf(low ? lf : 1.0f - lf, power) + floor_weight;
        out[j] = normal_at(s, base, (*counter)++) * sqrtf(w);
        norm += (double)out[j] * out[j];
    }
    float inv = (float)(1.0 / sqrt(norm > 0 ? norm : 1));
    for (uint32_t j = 0; j < hm->dim; j++) out[j] *= inv;
}

/* Noise-free key carrying `amp` of direction dir (NULL: none), scaled as
 * QK-norm would scale it with its noise; sigma_out (may be NULL) gets the
 * per-channel noise std after that scaling. */
static void key_hat(const synth_params *p, const head_model *hm, const float *dir, float amp, float *out,
                    float *sigma_out) {
    const uint32_t d = hm->dim;
    double ss = 0;
    for (uint32_t j = 0; j < d; j++) {
        out[j] = hm->k_mean[j] + hm->recency_amp * hm->recency[j] + (dir ? amp * dir[j] : 0.0f);
        ss += (double)out[j] * out[j] + (double)hm->k_scale[j] * hm->k_scale[j];
    }
    /* every token carries its coefficients on all topics */
    ss += hm->topic_energy * hm->topic_amp * hm->topic_amp;
    float inv = p->qk_norm ? (float)(1.0 / sqrt(ss / d + 1e-6)) : 1.0f;
    for (uint32_t j = 0; j < d; j++) {
        float gain = p->qk_norm ? hm->k_gain[j] : 1.0f;
        out[j] *= inv * gain;
        if (sigma_out) sigma_out[j] = hm->k_scale[j] * inv * gain;
    }
}

/* The query of head h is c * gain * (a*(mean + noise) + topics + fixed) / rms,
 * fixed = recency + sink components. Over keys, for noise-free stand-ins
 * with the expected noise energy (all per sqrt(d)):
 *   topic gap   = (a*m1 + m2 + m3) * c / rms
 *   background  = sqrt(a^2 m4^2 + f^2) * c / rms
 * where f is the spread the query's fixed and topic parts pick up from the
 * key noise. */
typedef struct query_terms {
    double m1, m2, m3, m4, f;
    double bg_energy, fixed_energy; /* per-dim energies for the QK-norm rms */
} query_terms;

static const float query_topic_weight[SYNTH_QUERY_TOPICS] = {1.0f, 0.6f, 0.35f};

static void query_terms_of(const synth_params *p, const head_model *hm, uint32_t h, query_terms *qt) {
    const uint32_t d = hm->dim;
    const double sqrt_d = sqrt((double)d);
    float plain[SYNTH_MAX_DIM], strong[SYNTH_MAX_DIM], sigma[SYNTH_MAX_DIM];
    double mix2 = 0; /* energy of the topic mix, topics taken as orthogonal */
    for (uint32_t m = 0; m < SYNTH_QUERY_TOPICS; m++) mix2 += (double)query_topic_weight[m] * query_topic_weight[m];
    key_hat(p, hm, NULL, 0.0f, plain, sigma);
    memset(qt, 0, sizeof *qt);
    for (uint32_t t = 0; t < hm->topics; t++) {
        key_hat(p, hm, hm->topic[t], 1.25f * hm->topic_amp, strong, NULL);
        for (uint32_t j = 0; j < d; j++) {
            float g = p->qk_norm ? hm->q_gain[h][j] : 1.0f, dk = strong[j] - plain[j];
            qt->m1 += g * hm->q_mean[h][j] * dk;
            qt->m2 += g * hm->q_topic_amp * hm->topic[t][j] * hm->q_topic[h][j] * dk;
        }
    }
    qt->m1 /= hm->topics * sqrt_d;
    qt->m2 /= hm->topics * sqrt_d;
    double f2 = 0, m4 = 0, m3 = 0;
    key_hat(p, hm, hm->topic[0], 1.25f * hm->topic_amp, strong, NULL);
    for (uint32_t j = 0; j < d; j++) {
        float g = p->qk_norm ? hm->q_gain[h][j] : 1.0f;
        double topic2 = 0;
        for (uint32_t t = 0; t < hm->topics; t++) topic2 += (double)hm->topic[t][j] * hm->topic[t][j];
        topic2 *= (double)hm->q_topic[h][j] * hm->q_topic[h][j];
        topic2 *= mix2 * hm->q_topic_amp * hm->q_topic_amp / hm->topics;
        double fixed = (double)hm->q_recency_amp * hm->recency[j] + (double)hm->q_sink_amp[h] * hm->sink_dir[j];
        double e = (double)hm->q_mean[h][j] * hm->q_mean[h][j] + (double)hm->q_scale[h][j] * hm->q_scale[h][j];
        double s2 = (double)g * g * sigma[j] * sigma[j];
        m4 += e * s2;
        f2 += (fixed * fixed + topic2) * s2;
        qt->bg_energy += e;
        qt->fixed_energy += fixed * fixed + topic2;
    }
    /* the fixed part's own contribution to the gap, averaged over topics */
    for (uint32_t t = 0; t < hm->topics; t++) {
        key_hat(p, hm, hm->topic[t], 1.25f * hm->topic_amp, strong, NULL);
        for (uint32_t j = 0; j < d; j++) {
            float g = p->qk_norm ? hm->q_gain[h][j] : 1.0f;
            double fixed = (double)hm->q_recency_amp * hm->recency[j] + (double)hm->q_sink_amp[h] * hm->sink_dir[j];
            m3 += g * fixed * (strong[j] - plain[j]);
        }
    }
    qt->m3 = m3 / (hm->topics * sqrt_d);
    qt->m4 = sqrt(m4) / sqrt_d;
    qt->f = sqrt(f2) / sqrt_d;
    qt->bg_energy /= d;
    qt->fixed_energy /= d;
}

/* Fit head h's query to the preset's logit targets: the gap/background
 * ratio fixes a (a quadratic), then c sets the gap. */
static void calibrate_query(const synth_params *p, head_model *hm, uint32_t h, double topic_logit) {
    query_terms qt;
    query_terms_of(p, hm, h, &qt);
    double rho = topic_logit / p->background_logit;
    double b = qt.m2 + qt.m3;
    /* (a m1 + b)^2 = rho^2 (a^2 m4^2 + f^2) */
    double A = qt.m1 * qt.m1 - rho * rho * qt.m4 * qt.m4, B = 2 * qt.m1 * b,
           C = b * b - rho * rho * qt.f * qt.f;
    double a = 0.05;
    if (C > 0 && A < 0) {
        double disc = B * B - 4 * A * C;
        a = (-B - sqrt(disc > 0 ? disc : 0)) / (2 * A);
    }
    if (!(a > 0.05)) a = 0.05;
    if (a > 50) a = 50;
    double rms = p->qk_norm ? sqrt(a * a * qt.bg_energy + qt.fixed_energy) : 1.0;
    double gap = a * qt.m1 + b;
    hm->q_bg[h] = (float)a;
    hm->q_rms[h] = (float)rms;
    hm->q_mult[h] = gap > 1e-9 ? (float)(topic_logit * rms / gap) : 1.0f;
}

#define SYNTH_QUERY_SHARE 0.9 /* most of a channel's measured query variance the topics take */
#define SYNTH_QUERY_ROUNDS 4  /* reshapes of the query, each followed by the calibration */

/* With per-query-head profiles (synth_params.q_heads) the deviation of
 * query head h before QK-norm (noise a * q_scale and the topics) has on
 * channel j the variance E own[j]^2 / d, own the head's measured std
 * profile (rms 1) and E the deviation's energy as calibrated. The topics'
 * expected variance there (mix2 / topics * q_topic_amp^2 * q_topic[h][j]^2 *
 * sum_t topic[t][j]^2) is capped at SYNTH_QUERY_SHARE of it (q_topic[h][j]
 * lowered), the noise takes the rest, and the mean
 * keeps its |mean| / std against the target. Added on top of the measured
 * profile instead, the topics (which follow the key's variance) concentrate
 * the query's variance, and the logits', on the channels where the key's
 * is. The calibration is made again after each reshape, as it sets a. */
static void query_within_measured(const synth_params *p, head_model *hm, const float *own, uint32_t h,
                                  double topic_logit) {
    const uint32_t d = hm->dim;
    const float *q = synth_head_query(p, own, h);
    double mix2 = 0;
    for (uint32_t m = 0; m < SYNTH_QUERY_TOPICS; m++) mix2 += (double)query_topic_weight[m] * query_topic_weight[m];
    float mean_ratio[SYNTH_MAX_DIM]; /* signed |mean| / std, as drawn */
    for (uint32_t j = 0; j < d; j++) mean_ratio[j] = hm->q_scale[h][j] > 0 ? hm->q_mean[h][j] / hm->q_scale[h][j] : 0.0f;
    for (int round = 0; round < SYNTH_QUERY_ROUNDS; round++) {
        double tq[SYNTH_MAX_DIM], e = 0;
        for (uint32_t j = 0; j < d; j++) {
            double u2 = 0;
            for (uint32_t t = 0; t < hm->topics; t++) u2 += (double)hm->topic[t][j] * hm->topic[t][j];
            u2 *= (double)hm->q_topic[h][j] * hm->q_topic[h][j];
            tq[j] = mix2 * (double)hm->q_topic_amp * hm->q_topic_amp * u2 / hm->topics;
            const double a = (double)hm->q_bg[h] * hm->q_scale[h][j];
            e += a * a + tq[j];
        }
        for (uint32_t j = 0; j < d; j++) {
            const double target = e * q[j] * q[j] / d;
            if (tq[j] > SYNTH_QUERY_SHARE * target) {
                const double f = sqrt(SYNTH_QUERY_SHARE * target / tq[j]);
                hm->q_topic[h][j] *= (float)f;
                tq[j] *= f * f;
            }
            hm->q_scale[h][j] = (float)(sqrt(target - tq[j]) / hm->q_bg[h]);
            hm->q_mean[h][j] = (float)(mean_ratio[j] * sqrt(target) / hm->q_bg[h]);
        }
        calibrate_query(p, hm, h, topic_logit);
    }
}

/* Sink logit gap, averaged over the group, for sink key amplitude amp. */
static double sink_gap(const synth_params *p, const head_model *hm, float amp) {
    const uint32_t d = hm->dim;
    float plain[SYNTH_MAX_DIM], sink[SYNTH_MAX_DIM];
    key_hat(p, hm, NULL, 0.0f, plain, NULL);
    key_hat(p, hm, hm->sink_dir, amp, sink, NULL);
    double gap = 0;
    for (uint32_t h = 0; h < p->group; h++) {
        double dot = 0;
        for (uint32_t j = 0; j < d; j++) {
            float g = p->qk_norm ? hm->q_gain[h][j] : 1.0f;
            /* expected query: topics average out over positions */
            double qj = g * (hm->q_bg[h] * hm->q_mean[h][j] + hm->q_recency_amp * hm->recency[j] +
                             hm->q_sink_amp[h] * hm->sink_dir[j]);
            dot += qj * (sink[j] - plain[j]);
        }
        double rms = hm->q_rms[h];
        gap += hm->q_mult[h] * dot / (rms * sqrt((double)d));
    }
    return gap / p->group;
}

/* Remove from v its part in the span of the topics (Gram-Schmidt) and
 * renormalise, so the sink scores the same whatever topics a query mixes. */
static void orthogonalize(const head_model *hm, float *v) {
    double q[SYNTH_MAX_TOPICS][SYNTH_MAX_DIM];
    uint32_t rank = 0;
    for (uint32_t t = 0; t < hm->topics; t++) {
        double w[SYNTH_MAX_DIM], norm = 0;
        for (uint32_t j = 0; j < hm->dim; j++) w[j] = hm->topic[t][j];
        for (uint32_t r = 0; r < rank; r++) {
            double dot = 0;
            for (uint32_t j = 0; j < hm->dim; j++) dot += w[j] * q[r][j];
            for (uint32_t j = 0; j < hm->dim; j++) w[j] -= dot * q[r][j];
        }
        for (uint32_t j = 0; j < hm->dim; j++) norm += w[j] * w[j];
        if (norm < 1e-12) continue;
        norm = sqrt(norm);
        for (uint32_t j = 0; j < hm->dim; j++) q[rank][j] = w[j] / norm;
        rank++;
    }
    double x[SYNTH_MAX_DIM], norm = 0;
    for (uint32_t j = 0; j < hm->dim; j++) x[j] = v[j];
    for (uint32_t r = 0; r < rank; r++) {
        double dot = 0;
        for (uint32_t j = 0; j < hm->dim; j++) dot += x[j] * q[r][j];
        for (uint32_t j = 0; j < hm->dim; j++) x[j] -= dot * q[r][j];
    }
    for (uint32_t j = 0; j < hm->dim; j++) norm += x[j] * x[j];
    if (norm < 1e-12) return; /* keep v as it was */
    norm = sqrt(norm);
    for (uint32_t j = 0; j < hm->dim; j++) v[j] = (float)(x[j] / norm);
}

#define SYNTH_TOPIC_SHARE 0.9 /* most of a channel's measured variance the topics take (per-head) */
#define SYNTH_COEFF_TOKENS 4096 /* tokens whose topic coefficients estimate their variance */

typedef struct token_streams {
    uint64_t token, phrase, chunk, salience;
} token_streams;

static void token_coeffs(const synth *s, const head_model *hm, const token_streams *ts, uint64_t t, float *c);
static void qk_norm(float *x, const float *gain, uint32_t dim);

/* A head with per-head profiles keeps each channel's measured variance
 * (k_scale^2 on entry: the measured std) as its total: the topics' expected
 * variance on channel j, v * topic_amp^2 * sum_m topic_m[j]^2 with v the
 * mean square of a token's coefficient (estimated on the model seed's text,
 * salience and content cap included), is capped at SYNTH_TOPIC_SHARE of it
 * (the topics' entries on that channel scaled down), and the key noise gets
 * the rest. Added on top instead, the topics would swamp a channel the
 * capture holds nearly still (Gemma 3's slow pairs have channels with
 * std a fifth of their pair partner's), and the mean scaled up to keep
 * |mean| / std would grow that channel, and the logit noise of a query
 * that meets it, several times over. The mean stays as measured. */
static void topics_within_measured(const synth *s, head_model *hm) {
    const uint32_t d = hm->dim;
    token_streams ts;
    ts.token = stream_base(s->model_seed, S_TOKEN, 0, 0);
    ts.phrase = stream_base(s->model_seed, S_PHRASE, 0, 0);
    ts.chunk = stream_base(s->model_seed, S_CHUNK, 0, 0);
    ts.salience = stream_base(s->model_seed, S_SALIENCE, 0, 0);
    double v = 0;
    float c[SYNTH_MAX_TOPICS];
    for (uint64_t t = 0; t < SYNTH_COEFF_TOKENS; t++) {
        token_coeffs(s, hm, &ts, t, c);
        for (uint32_t m = 0; m < hm->topics; m++) v += (double)c[m] * c[m];
    }
    v /= (double)SYNTH_COEFF_TOKENS * hm->topics;
    hm->coeff_ms = v;
    /* Each topic's entries, drawn as normal * sqrt(w_j) (unit_vector, w_j
     * the slow-pair weight), times the channel's measured std, renormalised:
     * the topics stay on the slow pairs but in proportion to the head's
     * variance there, so the cap below takes little of their amplitude (as
     * drawn, they meet it on the slow channels with little variance and
     * lose most of it there). */
    for (uint32_t m = 0; m < hm->topics; m++) {
        double norm = 0;
        for (uint32_t j = 0; j < d; j++) {
            hm->topic[m][j] = (float)(hm->topic[m][j] * hm->k_scale[j]);
            norm += (double)hm->topic[m][j] * hm->topic[m][j];
        }
        for (uint32_t j = 0; norm > 0 && j < d; j++) hm->topic[m][j] /= (float)sqrt(norm);
    }
    /* ... and none on the sink channel (head_model_build) */
    for (uint32_t m = 0; m < hm->topics; m++) {
        double norm = 0;
        for (uint32_t j = 0; j < d; j++) {
            if (hm->sink_dir[j] != 0.0f) hm->topic[m][j] = 0.0f;
            norm += (double)hm->topic[m][j] * hm->topic[m][j];
        }
        for (uint32_t j = 0; norm > 0 && j < d; j++) hm->topic[m][j] /= (float)sqrt(norm);
    }
    double energy = 0;
    for (uint32_t j = 0; j < d; j++) {
        double u2 = 0;
        for (uint32_t m = 0; m < hm->topics; m++) u2 += (double)hm->topic[m][j] * hm->topic[m][j];
        const double target = (double)hm->k_scale[j] * hm->k_scale[j];
        double tv = v * hm->topic_amp * hm->topic_amp * u2;
        if (tv > SYNTH_TOPIC_SHARE * target) {
            const float f = (float)sqrt(SYNTH_TOPIC_SHARE * target / tv);
            for (uint32_t m = 0; m < hm->topics; m++) hm->topic[m][j] *= f;
            tv = SYNTH_TOPIC_SHARE * target;
            u2 *= (double)f * f;
        }
        hm->k_scale[j] = (float)sqrt(target - tv);
        energy += u2;
    }
    hm->topic_energy = v * energy;
}

#define SYNTH_NORM_TOKENS 2048 /* tokens of the model seed's text that key_after_norm measures */
#define SYNTH_NORM_ROUNDS 3

/* A per-head QK-norm head's key after the normalisation has the capture's
 * per-channel std (own[0..d), rms 1) and |mean| / std (own[d..2d)): the
 * capture measured them after its QK-norm, and the generator normalises
 * what it draws, which changes both (a channel whose mean is large picks up
 * the spread of 1 / norm as std, or, where that mean holds much of the
 * norm, is compressed by it). So the key (mean, noise and topics, as
 * gen_keys draws them) is drawn for SYNTH_NORM_TOKENS tokens of the model
 * seed's text, normalised, measured, and each channel's deviation (its
 * noise and the topics' entries) and mean scaled toward the measured
 * profile, SYNTH_NORM_ROUNDS times (each factor within [0.1, 4]). */
static void key_after_norm(const synth *s, head_model *hm, const float *own) {
    const uint32_t d = hm->dim, words = d / 4;
    token_streams ts;
    ts.token = stream_base(s->model_seed, S_TOKEN, 0, 0);
    ts.phrase = stream_base(s->model_seed, S_PHRASE, 0, 0);
    ts.chunk = stream_base(s->model_seed, S_CHUNK, 0, 0);
    ts.salience = stream_base(s->model_seed, S_SALIENCE, 0, 0);
    const uint64_t noise_base = stream_base(s->model_seed, S_MODEL_NOISE, 0, 0);
    for (int round = 0; round < SYNTH_NORM_ROUNDS; round++) {
        double s1[SYNTH_MAX_DIM] = {0}, s2[SYNTH_MAX_DIM] = {0};
        float x[SYNTH_MAX_DIM], c[SYNTH_MAX_TOPICS];
        for (uint64_t t = 0; t < SYNTH_NORM_TOKENS; t++) {
            token_coeffs(s, hm, &ts, t, c);
            for (uint32_t w = 0; w < words; w++) {
                uint64_t r = draw(noise_base, t * words + w);
                for (int lane = 0; lane < 4; lane++) {
                    uint32_t j = 4 * w + (uint32_t)lane;
                    x[j] = hm->k_mean[j] + hm->k_scale[j] * gauss_of(s, r, lane);
                }
            }
            for (uint32_t m = 0; m < hm->topics; m++) {
                const float a = hm->topic_amp * c[m];
                for (uint32_t j = 0; j < d; j++) x[j] += a * hm->topic[m][j];
            }
            qk_norm(x, hm->k_gain, d);
            for (uint32_t j = 0; j < d; j++) s1[j] += x[j], s2[j] += (double)x[j] * x[j];
        }
        double sd[SYNTH_MAX_DIM], mean[SYNTH_MAX_DIM], ms = 0;
        for (uint32_t j = 0; j < d; j++) {
            mean[j] = s1[j] / SYNTH_NORM_TOKENS;
            const double v = s2[j] / SYNTH_NORM_TOKENS - mean[j] * mean[j];
            sd[j] = sqrt(v > 0 ? v : 0);
            ms += v > 0 ? v : 0;
        }
        ms = sqrt(ms / d);
        for (uint32_t j = 0; ms > 0 && j < d; j++) {
            if (!(sd[j] > 0)) continue;
            double f = own[j] / (sd[j] / ms);
            f = f < 0.1 ? 0.1 : f > 4 ? 4 : f;
            hm->k_scale[j] *= (float)f;
            for (uint32_t m = 0; m < hm->topics; m++) hm->topic[m][j] *= (float)f;
            /* the mean against the deviation once that is scaled by f */
            const double ratio = fabs(mean[j]) / sd[j];
            if (ratio > 1e-3 && own[d + j] > 0) {
                double g = own[d + j] / ratio * f;
                hm->k_mean[j] *= (float)(g < 0.1 ? 0.1 : g > 4 ? 4 : g);
            }
        }
    }
    double energy = 0; /* the topics' expected share of the key's energy, with their new entries */
    for (uint32_t m = 0; m < hm->topics; m++)
        for (uint32_t j = 0; j < d; j++) energy += (double)hm->topic[m][j] * hm->topic[m][j];
    hm->topic_energy = hm->coeff_ms * energy;
}

static void head_model_build(const synth *s, uint32_t layer, uint32_t kv_head, head_model *hm) {
    const synth_params *p = &s->preset;
    const float *own = synth_head_block(p, layer, kv_head); /* per-head profiles (fitted presets only) */
    memset(hm, 0, sizeof *hm);
    hm->dim = p->dim;
    hm->half = p->dim / 2;
    hm->topics = p->fitted ? p->topics : SYNTH_TOPICS;
    for (uint32_t i = 0; i < hm->half; i++)
        hm->theta[i] = (float)pow(p->rope_base, -2.0 * i / p->dim); /* NeoX theta_i = base^(-2i/d) */
    uint64_t base = stream_base(s->model_seed, S_MODEL_HEAD, layer, kv_head);
    uint64_t c = 0;
    float key_scale = p->qk_norm ? 1.0f : p->key_scale;

    /* Channel scales: log-normal per pair, larger toward low frequencies (as
     * in trained RoPE models), a little jitter within the pair. */
    float pair_scale[SYNTH_MAX_DIM / 2];
    for (uint32_t i = 0; i < hm->half; i++) {
        float lf = (float)i / (float)(hm->half - 1);
        pair_scale[i] = expf(p->scale_spread * normal_at(s, base, c++)) * (1.0f + p->low_freq_boost * lf * lf);
    }
    for (uint32_t j = 0; j < hm->dim; j++) {
        hm->k_scale[j] = key_scale * pair_scale[j % hm->half] * expf(0.25f * normal_at(s, base, c++));
        hm->k_mean[j] = 0.3f * hm->k_scale[j] * normal_at(s, base, c++);
        hm->k_gain[j] = expf(0.6f * normal_at(s, base, c++));
        hm->v_scale[j] = expf(0.5f * normal_at(s, base, c++));
        hm->v_mean[j] = 0.1f * hm->v_scale[j] * normal_at(s, base, c++);
    }
    /* 2-4 outlier channels in the slowest eighth of pairs: much larger scale
     * and a nonzero mean that RoPE barely rotates. A fitted preset has its
     * outliers in the measured profiles instead. */
    uint32_t outliers = 2 + (uint32_t)(draw(base, c++) % 3), outlier_channel[4];
    if (p->fitted) {
        /* The measured profiles, each head's scales spread log-normally
         * around them; the sign of each channel's mean is the head's own.
         * With per-head profiles, the head's own measured ones instead (the
         * spread's draws are still made, so later draws do not move). */
        for (uint32_t j = 0; j < hm->dim; j++) {
            const float spread = expf(p->scale_spread * normal_at(s, base, c++));
            hm->k_scale[j] = own ? key_scale * own[j] : key_scale * p->k_std[j] * spread;
            hm->k_mean[j] = (draw(base, c++) & 1 ? 1.0f : -1.0f) * (own ? own[hm->dim + j] : p->k_mean[j]) * hm->k_scale[j];
            hm->k_gain[j] = 1.0f;
        }
        outliers = 0;
    }
    for (uint32_t o = 0; o < outliers; o++) {
        uint32_t eighth = hm->half / 8 ? hm->half / 8 : 1;
        uint32_t pair = hm->half - 1 - (uint32_t)(draw(base, c++) % eighth);
        uint32_t j = pair + (draw(base, c++) & 1 ? hm->half : 0);
        float boost = p->qk_norm ? 5.0f : 8.0f;
        hm->k_mean[j] = (draw(base, c++) & 1 ? 2.5f : -2.5f) * hm->k_scale[j] * boost;
        hm->k_scale[j] *= boost;
        outlier_channel[o] = j;
    }
    /* Topics live on the slow pairs but not on the outlier channels: those
     * carry a near-constant bias (massive activations), not content. */
    for (uint32_t t = 0; t < hm->topics; t++) {
        float *u = hm->topic[t];
        unit_vector(s, base, &c, hm, 6.0f, 0.002f, true, u);
        double norm = 0;
        for (uint32_t o = 0; o < outliers; o++) u[outlier_channel[o]] = 0.0f;
        for (uint32_t j = 0; j < hm->dim; j++) norm += (double)u[j] * u[j];
        for (uint32_t j = 0; j < hm->dim; j++) u[j] /= (float)sqrt(norm);
    }
    unit_vector(s, base, &c, hm, 6.0f, 0.0f, true, hm->sink_dir);
    orthogonalize(hm, hm->sink_dir);
    /* under QK-norm, a per-head preset's query meets the sink after the
     * normalisation (below) */
    const bool post_sink = own && p->qk_norm;
    if (own) {
        /* With per-head profiles the sink direction is one channel: the
         * quieter of the pair, among the slowest eighth, whose two channels
         * hold the least measured key energy (mean^2 + std^2). A query
         * component along it changes that pair's A_i by itself times the
         * pair's mean, so the positional component, made orthogonal to it
         * (positional_query), keeps the profile of every other pair; and it
         * meets little of the other keys' variance. The topics are made
         * orthogonal to it (topics_within_measured). */
        uint32_t eighth = hm->half / 8 ? hm->half / 8 : 1, best = hm->half - 1;
        double least = INFINITY;
        for (uint32_t pair = hm->half - eighth; pair < hm->half; pair++) {
            double e = 0;
            for (uint32_t side = 0; side < 2; side++) {
                uint32_t j = pair + side * hm->half;
                e += (double)hm->k_scale[j] * hm->k_scale[j] + (double)hm->k_mean[j] * hm->k_mean[j];
            }
            if (e < least) least = e, best = pair;
        }
        uint32_t partner = best + hm->half;
        double eb = (double)hm->k_scale[best] * hm->k_scale[best] + (double)hm->k_mean[best] * hm->k_mean[best];
        double ep = (double)hm->k_scale[partner] * hm->k_scale[partner] + (double)hm->k_mean[partner] * hm->k_mean[partner];
        const uint32_t sink_channel = ep < eb ? partner : best;
        for (uint32_t j = 0; j < hm->dim; j++) hm->sink_dir[j] = j == sink_channel ? 1.0f : 0.0f;
    }
    unit_vector(s, base, &c, hm, 1.0f, 0.0f, false, hm->recency);
    if (p->fitted) {
        /* A fitted preset's recency lives on the pairs with theta in
         * [1/48, 1/3] rad per token, equal weight: the sum of their cosines
         * decays within about 32 tokens without the fastest pairs'
         * oscillation. Random signs, unit norm. */
        double norm = 0;
        for (uint32_t j = 0; j < hm->dim; j++) {
            float th = hm->theta[j % hm->half];
            hm->recency[j] = th >= 1.0f / 48 && th <= 1.0f / 3 ? (draw(base, c++) & 1 ? 1.0f : -1.0f) : 0.0f;
            norm += (double)hm->recency[j] * hm->recency[j];
        }
        for (uint32_t j = 0; norm > 0 && j < hm->dim; j++) hm->recency[j] /= (float)sqrt(norm);
    }
    static const float sink_base[SYNTH_SINKS] = {1.0f, 0.6f, 0.45f, 0.35f};
    for (uint32_t i = 0; i < SYNTH_SINKS; i++)
        hm->sink_amp[i] = sink_base[i] * (float)(0.7 + 0.6 * uniform01(draw(base, c++)));
    hm->chunk_offset = (uint32_t)(draw(base, c++) % SYNTH_CHUNK);
    hm->phrase_offset = (uint32_t)(draw(base, c++) % SYNTH_PHRASE);
    /* variance shares of the passage, phrase and token parts; salience */
    hm->w_chunk = sqrtf(0.3f);
    hm->w_phrase = sqrtf(0.6f);
    hm->w_token = sqrtf(0.1f);
    hm->sal_phrase = 0.35f;
    hm->sal_token = 0.05f;
    /* A per-head QK-norm head draws a salience for each topic of a phrase
     * (and token), not one for all its topics (token_coeffs): a token loud
     * on one topic is not loud on the others. One salience for all made a
     * salient phrase's keys large along every topic at once, so the keys a
     * query ranks first carried more than the others off the query's
     * direction, where Gemma 3's carry less (bench/key_energy.py, "off"),
     * and under QK-norm the norm every key is divided by followed it. */
    hm->topic_salience = own && p->qk_norm;
    hm->v_topic_amp = 0.5f;
    for (uint32_t t = 0; t < hm->topics; t++)
        for (uint32_t j = 0; j < hm->dim; j++) hm->v_topic[t][j] = hm->v_scale[j] * normal_at(s, base, c++);

    /* Amplitudes relative to the key noise norm, so the same structure holds
     * with and without QK-norm. */
    double noise2 = 0;
    for (uint32_t j = 0; j < hm->dim; j++) noise2 += (double)hm->k_scale[j] * hm->k_scale[j];
    float noise = (float)sqrt(noise2 / hm->dim); /* rms channel scale */
    /* Under QK-norm a large constant part (massive outlier means, as in
     * Qwen3) sets the norm every key is divided by. */
    for (uint32_t o = 0; o < outliers; o++) {
        float *mean = &hm->k_mean[outlier_channel[o]];
        if (fabsf(*mean) < p->outlier_mean * noise) *mean = copysignf(p->outlier_mean * noise, *mean);
    }
    hm->topic_amp = (p->fitted ? p->topic_amp : 2.0f) * noise;
    /* A positional preset's measured |mean| / std is of the whole key, so
     * the mean is set against the generated key's whole std: its noise and
     * the topics the generator adds (unit-variance coefficients). Against
     * the noise alone the topics would dilute the means, and the query's
     * positional component would meet more key variance than in the model. */
    hm->topic_energy = (double)hm->topics;
    if (own) topics_within_measured(s, hm);
    if (own && p->qk_norm) key_after_norm(s, hm, own);
    for (uint32_t j = 0; p->positional && !own && j < hm->dim; j++) {
        double tv = 0;
        for (uint32_t t = 0; t < hm->topics; t++) tv += (double)hm->topic[t][j] * hm->topic[t][j];
        tv *= (double)hm->topic_amp * hm->topic_amp;
        hm->k_mean[j] *= (float)sqrt(1.0 + tv / ((double)hm->k_scale[j] * hm->k_scale[j]));
    }
    /* (fitted: strong enough that the query's recency part, scaled to its
     * logit target, picks up little of the key noise) */
    hm->recency_amp = (p->fitted ? 4.0f : 1.5f) * noise;
    /* A positional preset's locality comes from its means (below), not
     * from a recency direction; its only sink is token 0. */
    if (p->positional) hm->recency_amp = 0.0f;
    for (uint32_t h = 0; h < p->group; h++)
        for (uint32_t j = 0; j < hm->dim; j++) hm->q_topic[h][j] = 1.0f;
    const bool q_own = own && p->q_heads;

    for (uint32_t h = 0; h < p->group; h++) {
        uint64_t qbase = stream_base(s->model_seed, S_MODEL_QHEAD, layer, (uint64_t)kv_head * p->group + h);
        uint64_t qc = 0;
        for (uint32_t j = 0; j < hm->dim; j++) {
            float lf = lowness(hm, j);
            hm->q_scale[h][j] = key_scale * expf(0.7f * normal_at(s, qbase, qc++)) * (0.4f + 1.0f * lf * lf);
            hm->q_mean[h][j] = key_scale * 0.2f * normal_at(s, qbase, qc++);
            hm->q_gain[h][j] = expf(0.5f * normal_at(s, qbase, qc++));
        }
        for (uint32_t j = 0; p->fitted && j < hm->dim; j++) {
            hm->q_scale[h][j] = key_scale * p->q_std[j] * expf(p->scale_spread * normal_at(s, qbase, qc++));
            /* (the spread's draw is still made, so later draws do not move) */
            if (q_own) hm->q_scale[h][j] = key_scale * synth_head_query(p, own, h)[j];
            hm->q_mean[h][j] = (draw(qbase, qc++) & 1 ? 1.0f : -1.0f) * p->q_mean[j] * hm->q_scale[h][j];
            hm->q_gain[h][j] = 1.0f;
        }
        double acc = 0;
        for (uint32_t t = 0; t < hm->topics; t++) {
            acc += exp(1.2 * normal_at(s, qbase, qc++));
            hm->topic_cdf[h][t] = (float)acc;
        }
        for (uint32_t t = 0; t < hm->topics; t++) hm->topic_cdf[h][t] /= (float)acc;
        hm->q_sink_amp[h] = 6.0f * key_scale * expf(0.3f * normal_at(s, qbase, qc++));
        if (post_sink) hm->q_sink_amp[h] = 0.0f;
    }
    hm->q_topic_amp = 6.0f * key_scale;
    hm->q_recency_amp = p->positional ? 0.0f : 1.0f * key_scale;
    if (p->positional)
        for (uint32_t i = 1; i < SYNTH_SINKS; i++) hm->sink_amp[i] = 0.0f;
    /* Keys must carry their topic strongly enough, against the key noise the
     * query picks up, for the gap/background ratio to be reachable. */
    const double topic_logit = synth_topic_logit(p, layer);
    double rho = topic_logit / p->background_logit;
    /* (A fitted preset keeps its measured topic amplitude.) */
    for (int it = 0; !p->fitted && it < 3; it++) { /* at most 8x: beyond, QK-norm saturates */
        double worst = INFINITY;
        for (uint32_t h = 0; h < p->group; h++) {
            query_terms qt;
            query_terms_of(p, hm, h, &qt);
            double r = (qt.m2 + qt.m3) / (qt.f > 1e-12 ? qt.f : 1e-12);
            if (r < worst) worst = r;
        }
        if (worst >= 1.3 * rho) break;
        double grow = worst > 0 ? 1.3 * rho / worst : 4.0;
        hm->topic_amp *= (float)(grow < 2.0 ? grow : 2.0);
    }
    for (uint32_t h = 0; h < p->group; h++) calibrate_query(p, hm, h, topic_logit);
    for (uint32_t h = 0; q_own && h < p->group; h++) query_within_measured(p, hm, own, h, topic_logit);
    /* Sink amplitudes by bisection: the gap grows with the amplitude (and
     * saturates under QK-norm; then the largest amplitude tried is used). */
    for (uint32_t i = 0; i < SYNTH_SINKS; i++) {
        float lo = 0.0f, hi = 200.0f * noise, target = p->sink_logit * hm->sink_amp[i];
        for (int it = 0; it < 40; it++) {
            float mid = 0.5f * (lo + hi);
            if (sink_gap(p, hm, mid) < target) lo = mid;
            else hi = mid;
        }
        hm->sink_key_amp[i] = hm->sink_amp[i] > 0 ? hi : 0.0f;
    }
    if (post_sink) {
        /* Inside the normalisation the sink's gap saturates below what
         * Gemma 3's token 0 has (a key can hold no more than its norm along
         * the sink channel, and the query's sink part is scaled down with
         * the rest of the query). Instead token 0 puts as much energy on the
         * sink channel as the rest of its key holds (half its normalised
         * energy), and the query meets it with sink_logit after the
         * normalisation; the other three tokens are no sinks. */
        double e = 0;
        for (uint32_t j = 0; j < hm->dim; j++)
            e += (double)hm->k_mean[j] * hm->k_mean[j] + (double)hm->k_scale[j] * hm->k_scale[j];
        e += hm->topic_energy * hm->topic_amp * hm->topic_amp;
        hm->sink_key_amp[0] = (float)sqrt(e);
        for (uint32_t i = 1; i < SYNTH_SINKS; i++) hm->sink_key_amp[i] = 0.0f;
        float plain[SYNTH_MAX_DIM], sink[SYNTH_MAX_DIM];
        key_hat(p, hm, NULL, 0.0f, plain, NULL);
        key_hat(p, hm, hm->sink_dir, hm->sink_key_amp[0], sink, NULL);
        double dk = 0;
        for (uint32_t j = 0; j < hm->dim; j++) dk += (double)hm->sink_dir[j] * (sink[j] - plain[j]);
        hm->q_sink_post = (float)(p->sink_logit * sqrt((double)hm->dim) / (dk > 1e-9 ? dk : 1e-9));
    }
    /* Without QK-norm the construction above can leave keys in the
     * thousands (log-normal scales times outliers times the topic growth),
     * which no real model has and F16 cannot hold. Scale the keys to an rms
     * of key_scale and the queries up by the same factor: every logit, and
     * every per-block quantisation of the keys, is unchanged. */
    if (!p->qk_norm) {
        double energy = 0;
        for (uint32_t j = 0; j < hm->dim; j++)
            energy += (double)hm->k_mean[j] * hm->k_mean[j] + (double)hm->k_scale[j] * hm->k_scale[j];
        energy += hm->topic_energy * hm->topic_amp * hm->topic_amp + (double)hm->recency_amp * hm->recency_amp;
        float f = (float)(p->key_scale / sqrt(energy / hm->dim));
        for (uint32_t j = 0; j < hm->dim; j++) hm->k_mean[j] *= f, hm->k_scale[j] *= f;
        hm->topic_amp *= f, hm->recency_amp *= f;
        for (uint32_t i = 0; i < SYNTH_SINKS; i++) hm->sink_key_amp[i] *= f;
        for (uint32_t h = 0; h < p->group; h++) hm->q_mult[h] /= f;
    }
    if (p->fitted) {
        /* Recency as a logit target of its own, outside the calibration
         * (which would scale it back into the background): the nearest key
         * gets recency_logit from this component, keys further back
         * sum_i r_i^2 cos((p - t) theta_i) of it, r the recency direction. */
        double ss = 0;
        for (uint32_t j = 0; j < hm->dim; j++) {
            double m = hm->k_mean[j] + (double)hm->recency_amp * hm->recency[j];
            ss += m * m + (double)hm->k_scale[j] * hm->k_scale[j];
        }
        ss += hm->topic_energy * hm->topic_amp * hm->topic_amp;
        double key_amp = hm->recency_amp * (p->qk_norm ? 1.0 / sqrt(ss / hm->dim + 1e-6) : 1.0);
        hm->q_recency_post = (float)(p->recency_logit * sqrt((double)hm->dim) / (key_amp > 1e-12 ? key_amp : 1e-12));
    }
}

/* ===================================================================== *
 * generation
 * ===================================================================== */

/* Rescale to unit RMS then apply the per-channel gain (Qwen3's q_norm/k_norm). */
static void qk_norm(float *x, const float *gain, uint32_t dim) {
    double ss = 0;
    for (uint32_t j = 0; j < dim; j++) ss += (double)x[j] * x[j];
    float inv = (float)(1.0 / sqrt(ss / dim + 1e-6));
    for (uint32_t j = 0; j < dim; j++) x[j] *= inv * gain[j];
}

/* NeoX RoPE: pairs (i, i + d/2) rotated by pos * theta_i; cs holds cos, sn sin. */
static void rope(float *x, const float *cs, const float *sn, uint32_t half) {
    for (uint32_t i = 0; i < half; i++) {
        float a = x[i], b = x[i + half];
        x[i] = a * cs[i] - b * sn[i];
        x[i + half] = a * sn[i] + b * cs[i];
    }
}

static void rope_table(const head_model *hm, uint64_t pos, float *cs, float *sn) {
    for (uint32_t i = 0; i < hm->half; i++) {
        double angle = (double)pos * hm->theta[i]; /* double: pos reaches 1e6 */
        cs[i] = (float)cos(angle);
        sn[i] = (float)sin(angle);
    }
}

/* Token t's topic and strength: topics come in runs of SYNTH_CHUNK tokens
 * (a passage about one thing) with some strays; most tokens carry their
 * topic weakly, a few strongly (the ones worth attending to). */
/* Token t's coefficients on the head's topics: a passage part shared by a
 * run of SYNTH_CHUNK tokens, a phrase part shared by SYNTH_PHRASE tokens and
 * the token's own part, all Gaussian, times a log-normal salience (phrase and
 * token; one for all topics, or with hm->topic_salience one for each), so the
 * logits a query sees are a broad, right-heavy continuum whose large values
 * come in short runs. */
static void token_coeffs(const synth *s, const head_model *hm, const token_streams *ts, uint64_t t, float *c) {
    const uint32_t words = hm->topics / 4;
    uint64_t chunk = (t + hm->chunk_offset) / SYNTH_CHUNK, phrase = (t + hm->phrase_offset) / SYNTH_PHRASE;
    uint64_t xs = draw(ts->phrase, phrase * (words + 1) + words), xt = draw(ts->token, t * (words + 1) + words);
    float sal = expf(hm->sal_phrase * gauss_of(s, xs, 0) + hm->sal_token * gauss_of(s, xt, 0));
    for (uint32_t w = 0; w < words; w++) {
        uint64_t rc = draw(ts->chunk, chunk * words + w), rp = draw(ts->phrase, phrase * (words + 1) + w),
                 rt = draw(ts->token, t * (words + 1) + w);
        /* per-topic salience: the phrase's draws at even counters, the token's at odd */
        uint64_t sp = hm->topic_salience ? draw(ts->salience, 2 * (phrase * words + w)) : 0,
                 st = hm->topic_salience ? draw(ts->salience, 2 * (t * words + w) + 1) : 0;
        for (int lane = 0; lane < 4; lane++) {
            const float sl = hm->topic_salience
                                 ? expf(hm->sal_phrase * gauss_of(s, sp, lane) + hm->sal_token * gauss_of(s, st, lane))
                                 : sal;
            c[4 * w + (uint32_t)lane] = sl * (hm->w_chunk * gauss_of(s, rc, lane) + hm->w_phrase * gauss_of(s, rp, lane) +
                                              hm->w_token * gauss_of(s, rt, lane));
        }
    }
    const float cap = s->preset.content_cap;
    if (cap > 0)
        for (uint32_t m = 0; m < hm->topics; m++) c[m] = cap * tanhf(c[m] / cap);
}

static void token_streams_seed(uint64_t seed, uint32_t layer, uint32_t kv_head, token_streams *ts) {
    ts->token = stream_base(seed, S_TOKEN, layer, kv_head);
    ts->phrase = stream_base(seed, S_PHRASE, layer, kv_head);
    ts->chunk = stream_base(seed, S_CHUNK, layer, kv_head);
    ts->salience = stream_base(seed, S_SALIENCE, layer, kv_head);
}

static void token_streams_of(const synth *s, uint32_t layer, uint32_t kv_head, token_streams *ts) {
    token_streams_seed(s->seed, layer, kv_head, ts);
}

/* Key t's deviation from the head's mean key before QK-norm and RoPE (its
 * noise and topic parts, as gen_keys draws them from text seed `seed`). */
static void key_deviation(const synth *s, uint64_t seed, const head_model *hm, uint32_t layer, uint32_t kv_head,
                          uint64_t t, float *x) {
    const uint32_t d = hm->dim, words = d / 4;
    uint64_t noise_base = stream_base(seed, S_KEY_NOISE, layer, kv_head);
    token_streams ts;
    token_streams_seed(seed, layer, kv_head, &ts);
    for (uint32_t w = 0; w < words; w++) {
        uint64_t r = draw(noise_base, t * words + w);
        for (int lane = 0; lane < 4; lane++) {
            uint32_t j = 4 * w + (uint32_t)lane;
            x[j] = hm->k_scale[j] * gauss_of(s, r, lane);
        }
    }
    float c[SYNTH_MAX_TOPICS];
    token_coeffs(s, hm, &ts, t, c);
    for (uint32_t m = 0; m < hm->topics; m++) {
        const float a = hm->topic_amp * c[m], *u = hm->topic[m];
        for (uint32_t j = 0; j < d; j++) x[j] += a * u[j];
    }
}

#define SYNTH_TARGET_LOCAL 32 /* a query's target lies before its last 32 keys (and after the sinks) */

/* The run of query position pos: a fitted preset's queries keep their
 * topics, target and churn for runs of query_run positions; a built-in
 * preset's change at every position. */
static uint64_t query_run_at(const synth *s, uint64_t pos) {
    return s->preset.fitted ? pos / s->preset.query_run : pos;
}

/* target_share (synth_params): the deviation x - mean (noise and topics,
 * before QK-norm) of the query at pos keeps sqrt(1 - share) of itself and
 * gets sqrt(share) of its norm along the deviation of key t, one token in
 * [SYNTH_SINKS, pos + 1 - SYNTH_TARGET_LOCAL) drawn per run of query_run
 * positions, rotated by (t - pos) theta so that it meets that key after
 * RoPE. */
static void query_target(const synth *s, uint64_t seed, const head_model *hm, uint32_t layer, uint32_t q_head,
                         uint32_t h, uint64_t pos, float *x) {
    const float share = s->preset.target_share;
    if (!(share > 0) || pos + 1 <= SYNTH_SINKS + SYNTH_TARGET_LOCAL) return;
    const uint32_t d = hm->dim, half = hm->half;
    const uint64_t span = pos + 1 - SYNTH_TARGET_LOCAL - SYNTH_SINKS;
    const uint64_t run = query_run_at(s, pos);
    uint64_t t = SYNTH_SINKS + (uint64_t)(uniform01(draw(stream_base(seed, S_QUERY_TARGET, layer, q_head), run)) *
                                          (double)span);
    if (t >= SYNTH_SINKS + span) t = SYNTH_SINKS + span - 1;
    float dk[SYNTH_MAX_DIM], c[SYNTH_MAX_DIM];
    key_deviation(s, seed, hm, layer, q_head / s->preset.group, t, dk);
    for (uint32_t i = 0; i < half; i++) {
        const double angle = (double)(pos - t) * hm->theta[i], cs = cos(angle), sn = sin(angle);
        const double a = dk[i], b = dk[i + half];
        c[i] = (float)(a * cs + b * sn);
        c[i + half] = (float)(b * cs - a * sn);
    }
    double kn = 0, dn = 0;
    for (uint32_t j = 0; j < d; j++) {
        const double dev = (double)x[j] - (double)hm->q_bg[h] * hm->q_mean[h][j];
        kn += (double)c[j] * c[j], dn += dev * dev;
    }
    if (!(kn > 0) || !(dn > 0)) return;
    const double keep = sqrt(1.0 - (double)share), along = sqrt((double)share * dn / kn);
    for (uint32_t j = 0; j < d; j++) {
        const double m = (double)hm->q_bg[h] * hm->q_mean[h][j];
        x[j] = (float)(m + keep * ((double)x[j] - m) + along * c[j]);
    }
}

/* query_churn (synth_params): the whole query at pos (after QK-norm and
 * the positional component, before RoPE) times exp(query_churn * z_i) on
 * both channels of RoPE pair i, z_i standard normal drawn per run of
 * query_run positions on its own stream, then scaled back to the norm it
 * had: which pairs carry the query changes from run to run. (On the
 * deviation from the head's mean alone, or before the positional
 * component, it barely moved which channels matter: a fitted query's mean
 * and positional part set them; docs/synthetic.md, "Channel churn".) */
static void query_churn_apply(const synth *s, const head_model *hm, uint32_t layer, uint32_t q_head, uint64_t pos,
                              float *x) {
    const float sigma = s->preset.query_churn;
    if (!(sigma > 0)) return;
    const uint32_t d = hm->dim, half = hm->half;
    const uint64_t run = query_run_at(s, pos);
    const uint64_t base = stream_base(s->seed, S_QUERY_CHURN, layer, q_head);
    double y[SYNTH_MAX_DIM], before = 0, after = 0;
    for (uint32_t i = 0; i < half; i++) {
        const double gain = exp((double)sigma * normal_at(s, base, run * half + i));
        y[i] = gain * x[i], y[i + half] = gain * x[i + half];
    }
    for (uint32_t j = 0; j < d; j++) before += (double)x[j] * x[j], after += y[j] * y[j];
    if (!(before > 0) || !(after > 0)) return;
    const double scale = sqrt(before / after);
    for (uint32_t j = 0; j < d; j++) x[j] = (float)(scale * y[j]);
}

/* Keys of tokens [t0, t1) of one KV head into k (the head's [n x d] rows);
 * cs/sn hold the RoPE table of those tokens, [t1 - t0][d/2]. */
static void gen_keys(const synth *s, const head_model *hm, uint32_t layer, uint32_t kv_head, uint64_t t0,
                     uint64_t t1, const float *cs, const float *sn, float *k) {
    const uint32_t d = hm->dim, words = d / 4;
    uint64_t noise_base = stream_base(s->seed, S_KEY_NOISE, layer, kv_head);
    token_streams ts;
    token_streams_of(s, layer, kv_head, &ts);
    for (uint64_t t = t0; t < t1; t++) {
        float *x = k + t * d;
        for (uint32_t w = 0; w < words; w++) {
            uint64_t r = draw(noise_base, t * words + w);
            for (int lane = 0; lane < 4; lane++) {
                uint32_t j = 4 * w + (uint32_t)lane;
                x[j] = hm->k_mean[j] + hm->k_scale[j] * gauss_of(s, r, lane) + hm->recency_amp * hm->recency[j];
            }
        }
        float c[SYNTH_MAX_TOPICS];
        token_coeffs(s, hm, &ts, t, c);
        for (uint32_t m = 0; m < hm->topics; m++) {
            const float a = hm->topic_amp * c[m], *u = hm->topic[m];
            for (uint32_t j = 0; j < d; j++) x[j] += a * u[j];
        }
        if (t < SYNTH_SINKS) {
            /* a sink: pointed where the queries point, so it scores high for all */
            float sa = hm->sink_key_amp[t];
            for (uint32_t j = 0; j < d; j++) x[j] += sa * hm->sink_dir[j];
        }
        if (s->preset.qk_norm) qk_norm(x, hm->k_gain, d);
        rope(x, cs + (t - t0) * hm->half, sn + (t - t0) * hm->half, hm->half);
    }
}

static void gen_values(const synth *s, const head_model *hm, uint32_t layer, uint32_t kv_head,
                       uint64_t n, float *v) {
    const uint32_t d = hm->dim, words = d / 4;
    uint64_t base = stream_base(s->seed, S_VALUE, layer, kv_head);
    token_streams ts;
    token_streams_of(s, layer, kv_head, &ts);
    for (uint64_t t = 0; t < n; t++) {
        float *x = v + t * d;
        for (uint32_t w = 0; w < words; w++) {
            uint64_t r = draw(base, t * words + w);
            for (int lane = 0; lane < 4; lane++) {
                uint32_t j = 4 * w + (uint32_t)lane;
                x[j] = hm->v_mean[j] + hm->v_scale[j] * gauss_of(s, r, lane);
            }
        }
        float c[SYNTH_MAX_TOPICS];
        token_coeffs(s, hm, &ts, t, c);
        for (uint32_t m = 0; m < hm->topics; m++) {
            const float a = hm->v_topic_amp * c[m], *u = hm->v_topic[m];
            for (uint32_t j = 0; j < d; j++) x[j] += a * u[j];
        }
    }
}

/* Query of head h of the group at absolute position pos: the group's mean
 * direction, noise, and a mix of a few topics drawn from the head's own
 * preferences, so heads and positions attend to different keys. */
/* The query before RoPE and the positional component, from text seed `seed`. */
static void query_pre(const synth *s, uint64_t seed, const head_model *hm, uint32_t layer, uint32_t q_head,
                      uint32_t h, uint64_t pos, float *x) {
    const uint32_t d = hm->dim, words = d / 4;
    uint64_t noise_base = stream_base(seed, S_QUERY_NOISE, layer, q_head);
    uint64_t topic_base = stream_base(seed, S_QUERY_TOPIC, layer, q_head);
    for (uint32_t w = 0; w < words; w++) {
        uint64_t r = draw(noise_base, pos * words + w);
        for (int lane = 0; lane < 4; lane++) {
            uint32_t j = 4 * w + (uint32_t)lane;
            x[j] = hm->q_bg[h] * (hm->q_mean[h][j] + hm->q_scale[h][j] * gauss_of(s, r, lane));
        }
    }
    /* a fitted preset keeps the topics for runs of query_run positions */
    const uint64_t run = query_run_at(s, pos);
    for (uint32_t m = 0; m < SYNTH_QUERY_TOPICS; m++) {
        float u = (float)uniform01(draw(topic_base, run * SYNTH_QUERY_TOPICS + m));
        uint32_t t = 0;
        while (t + 1 < hm->topics && hm->topic_cdf[h][t] < u) t++;
        float a = hm->q_topic_amp * query_topic_weight[m];
        for (uint32_t j = 0; j < d; j++) x[j] += a * hm->topic[t][j] * hm->q_topic[h][j];
    }
    query_target(s, seed, hm, layer, q_head, h, pos, x);
    for (uint32_t j = 0; j < d; j++)
        x[j] += hm->q_recency_amp * hm->recency[j] + hm->q_sink_amp[h] * hm->sink_dir[j];
    if (s->preset.qk_norm) qk_norm(x, hm->q_gain[h], d);
    for (uint32_t j = 0; j < d; j++)
        x[j] = x[j] * hm->q_mult[h] + hm->q_recency_post * hm->recency[j] + hm->q_sink_post * hm->sink_dir[j];
}

#define SYNTH_POS_MEAN 256 /* query positions whose mean the positional component completes */

/* A positional preset's query component z (pre-RoPE, per query head): for
 * pair i read as a complex number, with m_i the head's expected key mean
 * (after QK-norm) and qbar_i the mean of the rest of the query (positions
 * 0..SYNTH_POS_MEAN-1 of a fixed text, so the component is the model's, not
 * the text's), the query mean meets the key mean as measured:
 * (qbar_i + z_i) conj(m_i) / sqrt(d) = pos_gain * A_i, z_i along m_i. RoPE
 * then gives Re(pos_gain A_i e^{i (p - t) theta_i}) for every key. A pair
 * whose mean is negligible gets none (it would need an unbounded query). */
static void positional_query(const synth *s, uint32_t layer, uint32_t kv_head, head_model *hm) {
    const synth_params *p = &s->preset;
    const uint32_t d = hm->dim, half = hm->half;
    float m[SYNTH_MAX_DIM], x[SYNTH_MAX_DIM];
    key_hat(p, hm, NULL, 0.0f, m, NULL);
    double ms = 0;
    for (uint32_t j = 0; j < d; j++) ms += (double)m[j] * m[j];
    ms /= d;
    const double g = sqrt((double)d) * p->pos_gain;
    /* This head's share of the key energy in pair i against the profile's:
     * the measured A_i is an average over heads whose pair-i means differ
     * with their scales, so a head whose pair i the spread made small gets
     * a proportionally smaller A_i (a fixed A_i would need a query that
     * meets the pair's content many times over). */
    double he = 0, pe = 0, share[SYNTH_MAX_DIM / 2];
    for (uint32_t j = 0; j < d; j++)
        he += (double)hm->k_scale[j] * hm->k_scale[j], pe += (double)p->k_std[j] * p->k_std[j];
    for (uint32_t i = 0; i < half; i++) {
        double hi = (double)hm->k_scale[i] * hm->k_scale[i] + (double)hm->k_scale[i + half] * hm->k_scale[i + half];
        double pi = (double)p->k_std[i] * p->k_std[i] + (double)p->k_std[i + half] * p->k_std[i + half];
        share[i] = pi > 0 && pe > 0 && he > 0 ? sqrt((hi / he) / (pi / pe)) : 1.0;
    }
    /* With per-head profiles each query head has its own measured A_i,
     * measured against its KV head's own means, which the head has: no
     * share. */
    const float *own = synth_head_block(p, layer, kv_head);
    for (uint32_t i = 0; own && i < half; i++) share[i] = 1.0;
    for (uint32_t h = 0; h < p->group; h++) {
        const float *re = own ? own + 2 * d + (uint64_t)h * d : p->pos_re, *im = own ? re + half : p->pos_im;
        double qbar[SYNTH_MAX_DIM] = {0};
        for (uint64_t pos = 0; pos < SYNTH_POS_MEAN; pos++) {
            query_pre(s, s->model_seed, hm, layer, kv_head * p->group + h, h, pos, x);
            for (uint32_t j = 0; j < d; j++) qbar[j] += x[j] / (double)SYNTH_POS_MEAN;
        }
        for (uint32_t i = 0; i < half; i++) {
            double mr = m[i], mi = m[i + half], m2 = mr * mr + mi * mi;
            if (!(m2 > 1e-6 * ms)) continue;
            /* w = target - qbar conj(m), then z = w m / |m|^2 */
            double wr = g * share[i] * re[i] - (qbar[i] * mr + qbar[i + half] * mi);
            double wi = g * share[i] * im[i] - (qbar[i + half] * mr - qbar[i] * mi);
            hm->q_pos[h][i] = (float)((wr * mr - wi * mi) / m2);
            hm->q_pos[h][i + half] = (float)((wr * mi + wi * mr) / m2);
        }
    }
    /* ... and none along the sink direction, so the sink's calibration
     * (made without this component) holds. */
    for (uint32_t h = 0; h < p->group; h++) {
        double dot = 0;
        for (uint32_t j = 0; j < d; j++) dot += (double)hm->q_pos[h][j] * hm->sink_dir[j];
        for (uint32_t j = 0; j < d; j++) hm->q_pos[h][j] -= (float)(dot * hm->sink_dir[j]);
    }
}

static void gen_query(const synth *s, const head_model *hm, uint32_t layer, uint32_t q_head, uint32_t h,
                      uint64_t pos, float *x) {
    query_pre(s, s->seed, hm, layer, q_head, h, pos, x);
    if (s->preset.positional)
        for (uint32_t j = 0; j < hm->dim; j++) x[j] += hm->q_pos[h][j];
    query_churn_apply(s, hm, layer, q_head, pos, x);
    float cs[SYNTH_MAX_DIM / 2], sn[SYNTH_MAX_DIM / 2];
    rope_table(hm, pos, cs, sn);
    rope(x, cs, sn, hm->half);
}

static int synth_layer(const fathom_source *src, uint32_t layer, float *q, float *k, float *v) {
    const synth *s = src->impl;
    const fathom_source_info *in = &src->info;
    const uint64_t kv_stride = in->tokens * in->dim, q_stride = (uint64_t)in->positions * in->dim;
    const uint32_t group = in->q_heads / in->kv_heads, half = in->dim / 2;
    head_model *hms = fathom_alloc_array(in->kv_heads, sizeof *hms);
    float *cs = fathom_alloc_array((uint64_t)SYNTH_TILE * half, sizeof *cs);
    float *sn = fathom_alloc_array((uint64_t)SYNTH_TILE * half, sizeof *sn);
    if (!hms || !cs || !sn) {
        free(hms), free(cs), free(sn);
        return fathom_fail(FATHOM_ERR_NOMEM, "out of memory for synthetic head parameters");
    }
    for (uint32_t g = 0; g < in->kv_heads; g++) {
        head_model_build(s, layer, g, &hms[g]);
        if (s->preset.positional) positional_query(s, layer, g, &hms[g]);
    }
    /* keys tile by tile, so every KV head reuses one RoPE table */
    for (uint64_t t0 = 0; k && t0 < in->tokens; t0 += SYNTH_TILE) {
        uint64_t t1 = in->tokens - t0 < SYNTH_TILE ? in->tokens : t0 + SYNTH_TILE;
        for (uint64_t t = t0; t < t1; t++) rope_table(&hms[0], t, cs + (t - t0) * half, sn + (t - t0) * half);
        for (uint32_t g = 0; g < in->kv_heads; g++) gen_keys(s, &hms[g], layer, g, t0, t1, cs, sn, k + g * kv_stride);
    }
    for (uint32_t g = 0; g < in->kv_heads; g++) {
        if (v) gen_values(s, &hms[g], layer, g, in->tokens, v + g * kv_stride);
        for (uint32_t h = 0; q && h < group; h++) {
            uint32_t qh = g * group + h;
            for (uint32_t i = 0; i < in->positions; i++)
                gen_query(s, &hms[g], layer, qh, h, in->first_query + i, q + qh * q_stride + (uint64_t)i * in->dim);
        }
    }
    free(hms), free(cs), free(sn);
    return FATHOM_OK;
}

static void synth_destroy(void *impl) {
    synth *s = impl;
    if (s) free(s->preset.heads);
    free(s);
}

static const fathom_source_ops synth_ops = {
    .kind = "synthetic",
    .destroy = synth_destroy,
    .layer = synth_layer,
    .meta_entry = NULL,
};

bool synth_builtin(const char *name, synth_params *out) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (!strcmp(name, presets[i].name)) {
            *out = presets[i];
            out->topics = SYNTH_TOPICS;
            out->topic_amp = 2.0f;
            out->recency_logit = 0.0f;
            out->query_run = 1;
            return true;
        }
    return false;
}

static int synth_open_params(fathom_source **out, const synth_params *p, uint64_t context, uint32_t positions,
                             uint64_t seed) {
    FATHOM_CHECK_ARG(context > 0, "context must be > 0");
    FATHOM_CHECK_ARG(positions > 0 && positions <= context, "positions %u must be in 1..context (%llu)",
                     positions, (unsigned long long)context);
    /* float32 angles of pos * theta lose precision past 2^40; nobody needs more */
    FATHOM_CHECK_ARG(context <= (1ull << 40), "context %llu too large", (unsigned long long)context);
    FATHOM_TRY(synth_params_check(p));

    fathom_source_info info;
    memset(&info, 0, sizeof info);
    snprintf(info.model, sizeof info.model, "%s", p->name);
    info.layers = p->layers;
    info.kv_heads = p->kv_heads;
    info.q_heads = p->kv_heads * p->group;
    info.dim = p->dim;
    info.tokens = context;
    info.positions = positions;
    info.first_query = context - positions;
    FATHOM_TRY(fathom_source_info_check(&info));

    synth *s = malloc(sizeof *s);
    FATHOM_CHECK(!s, FATHOM_ERR_NOMEM, "out of memory for a synthetic source");
    s->preset = *p;
    /* the source keeps its own copy: the caller's preset may be freed */
    int st = synth_heads_dup(p, &s->preset.heads);
    if (st < 0) {
        free(s);
        return st;
    }
    s->seed = seed;
    uint64_t model_seed = 0xf47402u;
    for (const char *c = p->name; *c; c++) model_seed = synth_mix64(model_seed ^ (uint64_t)(unsigned char)*c);
    s->model_seed = model_seed;
    for (uint32_t i = 0; i < 65536; i++) s->gauss[i] = (float)inv_normal((i + 0.5) / 65536.0);
    return fathom_source_new(out, &synth_ops, &info, s);
}

int fathom_synth_open(fathom_source **out, const char *preset, uint64_t context, uint32_t positions,
                      uint64_t seed) {
    FATHOM_CHECK_ARG(out != NULL, "out is NULL");
    *out = NULL;
    FATHOM_CHECK_ARG(preset != NULL, "preset is NULL");
    synth_params p;
    FATHOM_CHECK_ARG(synth_builtin(preset, &p), "unknown preset '%s' (qwen3-8b, llama-3.1-8b, smollm2-135m)",
                     preset);
    return synth_open_params(out, &p, context, positions, seed);
}

int fathom_synth_open_preset(fathom_source **out, const fathom_synth_preset *preset, uint64_t context,
                             uint32_t positions, uint64_t seed) {
    FATHOM_CHECK_ARG(out != NULL, "out is NULL");
    *out = NULL;
    FATHOM_CHECK_ARG(preset != NULL, "preset is NULL");
    return synth_open_params(out, &preset->p, context, positions, seed);
}

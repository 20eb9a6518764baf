/* The synthetic generator's parameters, shared by the generator (synth.c),
 * preset files (synth_preset.c) and the fit to a capture (synth_fit.c).
 * docs/synthetic.md describes what each one does. */
#ifndef FATHOM_SYNTH_H
#define FATHOM_SYNTH_H

#include "internal.h"

#define SYNTH_MAX_DIM 256
#define SYNTH_MAX_GROUP 8
#define SYNTH_MAX_TOPICS 64
#define SYNTH_MAX_LAYERS 4096
#define SYNTH_MAX_KV_HEADS 1024
/* Per-head profiles hold at most this many floats (16 MiB; a preset file is
 * at most 16 MiB of text, so a file never reaches it). */
#define SYNTH_MAX_HEAD_FLOATS (1u << 22)

typedef struct synth_params {
    char name[64];
    uint32_t layers, kv_heads, group, dim;
    double rope_base;
    bool qk_norm;     /* RMS-normalised q and k per head before RoPE (Qwen3) */
    float key_scale;  /* overall key magnitude without QK-norm */
    float scale_spread; /* sigma of log channel scale */
    float low_freq_boost; /* key scale grows by 1 + this * lowness^2 toward slow pairs */
    float outlier_mean;   /* |mean| of outlier channels, at least, in rms key noise units */
    /* Logit targets (after 1/sqrt(d)) that set how peaked attention is: the
     * spread of the query's logits from key noise alone, the logit of a key
     * whose coefficient on the query's main topic is 1.25 (coefficients are
     * unit-variance Gaussians, so topic_logit/1.25 is roughly the spread of
     * the content part), and the gap of the first sink token. Realised
     * values differ (salience, QK-norm saturation); docs/synthetic.md gives
     * the measured concentration and errors. */
    float background_logit, topic_logit, sink_logit;
    /* Topic coefficients saturate softly at this (c -> cap tanh(c / cap)):
     * content logits are bounded, as QK-norm bounds them for Qwen3 (0: none). */
    float content_cap;
    /* Built-in presets: false, and the fields below take their built-in
     * values (16 topics, topic amplitude 2, recency logit 0, query run 1,
     * parametric channel profiles, 2-4 outlier channels per head). A fitted
     * preset (synth_fit.c) sets them from a capture. */
    bool fitted;
    uint32_t topics;     /* topic directions per head: 4..64, a multiple of 4 */
    float topic_amp;     /* topic amplitude in rms key-noise units */
    float recency_logit; /* extra logit of the nearest key from the query's recency component */
    uint32_t query_run;  /* positions a query keeps its topics (step-to-step drift) */
    /* Per-channel profiles before RoPE, NeoX order (channel j in pair j mod
     * d/2): key and query std (rms 1 over channels) and |mean| / std. */
    float k_std[SYNTH_MAX_DIM], k_mean[SYNTH_MAX_DIM];
    float q_std[SYNTH_MAX_DIM], q_mean[SYNTH_MAX_DIM];
    /* Positional profile (fitted presets that ask for it; false: none, and
     * the generator is as without these fields). In a trained RoPE model
     * the query's and the key's channel means meet under RoPE: pair i adds
     * Re(A_i e^{i (p - t) theta_i}) to the logit of key t seen from position
     * p, A_i = mean_q_i conj(mean_k_i) / sqrt(d) with each pair read as a
     * complex number (NeoX order: channel i is the real part, i + d/2 the
     * imaginary). Its phases make nearby keys score higher (locality); its
     * slow pairs give every key that carries the mean a common offset that
     * a model's sink token, whose key lacks the mean, escapes. pos_re/pos_im
     * hold A_i in logits as measured (mean over heads); the generated query
     * gets a component that meets each head's own key means to give
     * pos_gain * A_i. Only token 0 is a sink (as measured on SmolLM2); it
     * keeps the mean, and its gap comes from the sink direction alone, so
     * the sink and the positional gain are fitted apart. */
    bool positional;
    float pos_gain;
    float pos_re[SYNTH_MAX_DIM / 2], pos_im[SYNTH_MAX_DIM / 2];
    /* Per-head profiles (positional fitted presets, preset format 2; NULL:
     * none, and every head draws its key scales around k_std with
     * scale_spread and meets pos_re/pos_im scaled by its share). One block
     * of synth_head_floats(p) floats per (layer, KV head), layer-major:
     * the head's key std per channel (rms 1) and |mean| / std (d each),
     * then for each query head of the group its A_i (d/2 real parts, d/2
     * imaginary). The head generated at (layer, KV head) takes its own
     * block, without a spread, and each query head meets pos_gain times its
     * own A_i. The pointer is owned by the holder of the outermost copy (a
     * fathom_synth_preset, a synthetic source, a fit); copies of the struct
     * borrow it. */
    float *heads;
    /* Per-layer topic logits (fitted presets; false: topic_logit in every
     * layer): the query heads of layer l are calibrated to topic_layers[l]
     * in place of topic_logit, so each layer's concentration is its own. */
    bool per_layer;
    float topic_layers[SYNTH_MAX_LAYERS];
    /* Per-query-head query profiles (with heads; false: none, and every
     * query head draws its query scales around q_std). Each block of heads
     * then ends with, for each query head of the group, its measured query
     * std per channel (d, rms 1, before RoPE, of the deviation from its
     * mean); the generated query's noise and topic parts together take that
     * profile (src/io/synth.c, query_within_measured). */
    bool q_heads;
    /* Queries that point at their targets (fitted presets; 0: none, and the
     * generator is as without it). Each query's deviation from its head's
     * mean (noise and topics, before QK-norm) keeps sqrt(1 - share) of
     * itself and gets sqrt(share) of its norm along the deviation of one
     * earlier key from the head's mean key (a token between the first 4 and
     * the last 32, drawn per run of query_run positions), rotated to meet
     * that key after RoPE: the query's energy share in its target's
     * direction, so the channels where |q| is large are the ones where that
     * key is (src/io/synth.c, query_target). */
    float target_share;
    /* Channel churn (fitted presets; 0: none, and the generator is as
     * without it): the whole query (after QK-norm and the positional
     * component, before RoPE) is multiplied by exp(query_churn * z_i) on
     * both channels of RoPE pair i, z_i standard normal drawn per run of
     * query_run positions, then scaled back to its norm, so the channels
     * that matter change from query to query (src/io/synth.c,
     * query_churn_apply). */
    float query_churn;
} synth_params;

/* The counter-based random numbers of the generator and the fit:
 * splitmix64's increment and finalizer. */
#define SYNTH_GOLDEN 0x9e3779b97f4a7c15ull
static inline uint64_t synth_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The topic logit layer's queries are calibrated to. */
static inline float synth_topic_logit(const synth_params *p, uint32_t layer) {
    return p->per_layer && layer < p->layers ? p->topic_layers[layer] : p->topic_logit;
}

/* Floats in one (layer, KV head) block of synth_params.heads: d * (2 + group),
 * and d * group more with q_heads. */
static inline uint64_t synth_head_floats(const synth_params *p) {
    return (uint64_t)p->dim * (2u + p->group + (p->q_heads ? p->group : 0u));
}
/* Query head h's measured query std within a block (q_heads only). */
static inline const float *synth_head_query(const synth_params *p, const float *block, uint32_t h) {
    return block + (uint64_t)p->dim * (2u + p->group + h);
}
/* The per-head block of (layer, kv_head), or NULL when p has none. */
static inline const float *synth_head_block(const synth_params *p, uint32_t layer, uint32_t kv_head) {
    return p->heads ? p->heads + ((uint64_t)layer * p->kv_heads + kv_head) * synth_head_floats(p) : NULL;
}
/* Floats in synth_params.heads: layers * kv_heads blocks (< 2^35 for any
 * layers, kv_heads, group, dim that synth_params_check accepts). */
static inline uint64_t synth_heads_size(const synth_params *p) {
    return (uint64_t)p->layers * p->kv_heads * synth_head_floats(p);
}

struct fathom_synth_preset {
    synth_params p;
};

/* The built-in preset of that name into *out; false when there is none. */
bool synth_builtin(const char *name, synth_params *out);

/* Check every field of p (ranges, finiteness); FATHOM_ERR_INVALID_ARG naming
 * the first bad field. */
int synth_params_check(const synth_params *p);

/* A copy of p->heads (synth_heads_size(p) floats) into *out, or NULL when p
 * has none; FATHOM_ERR_NOMEM when it cannot be allocated. */
int synth_heads_dup(const synth_params *p, float **out);

/* The dense-softmax mass on the top k keys of layer `layer` of src alone
 * (mean over its query heads and 8 queried positions, as
 * fathom_synth_stats_measure's top_mass over layers), the statistic a
 * per-layer fit (FATHOM_SYNTH_FIT_LAYERS) matches layer by layer. */
int synth_layer_top_mass(const fathom_source *src, fathom_rope_style style, double rope_base, uint32_t k,
                         uint32_t layer, double *out);

/* The target_share search of a fit (FATHOM_SYNTH_FIT_TARGET) alone: p's
 * target_share such that p's target_lift at capture's n and positions (NeoX
 * RoPE at p's base, top-k size k) reaches capture's, every other field of p
 * kept; *target and *achieved get the two lifts. */
int synth_fit_target_share(const fathom_source *capture, uint32_t k, synth_params *p, double *target,
                           double *achieved);

/* The query_churn search of a fit (FATHOM_SYNTH_FIT_CHURN) alone: p's
 * (fitted) query_churn such that p's fixed_share at capture's n and
 * positions reaches capture's, every other field of p kept; *target and
 * *achieved get the two shares. */
int synth_fit_query_churn(const fathom_source *capture, uint32_t k, synth_params *p, double *target,
                          double *achieved);

#endif /* FATHOM_SYNTH_H */

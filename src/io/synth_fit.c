/* Fitting a synthetic preset to a capture (docs/synthetic.md, "Presets
 * fitted to captures").
 *
 * Statistics of a source (fathom_synth_stats_measure): keys and queries are
 * rotated back by their RoPE, so channel statistics are those of the
 * projections, in the generator's NeoX channel order; attention statistics
 * use the stored (rotated) vectors, the logits the methods see.
 *
 * The fit (fathom_synth_fit) measures the per-channel profiles and the
 * positional profile (mean query against mean key per RoPE pair) directly
 * and searches five generator knobs, one statistic each, by bisection in
 * log space at the capture's n and positions: topic amplitude (at least 2)
 * -> covariance share of the top d/4 eigenvalues (keys only, so first),
 * then twice around sink logit -> first-4 mass, topic logit -> top-k mass,
 * positional gain -> last-32 mass, and last the query run ->
 * consecutive-query cosine (with FATHOM_SYNTH_FIT_LAYERS, each layer's
 * topic logit -> that layer's top-k mass in place of the one). Each
 * statistic grows with its knob; the others move it too, which the second
 * round corrects for. */
#include "source.h"
#include "synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STATS_SINKS 4
#define STATS_LOCAL 32
#define STATS_POSITIONS 8 /* queried positions per head for the attention statistics */
/* scale_spread clips a channel's log std (against its head's rms) here:
 * channels below 1/20 of the rms hold < 0.25% of the key energy each, yet
 * where a model has near-dead channels whose level differs by layer (Gemma 3:
 * about a tenth of its channels at 1e-2..1e-4 of the rms in some layers),
 * they dominate an unclipped spread, and the generator, which draws the
 * spread on every channel alike, then reshuffles the channels that carry
 * the energy (docs/synthetic.md). */
#define SPREAD_FLOOR (-3.0)

/* Per-channel sums behind a fitted preset's profiles (NeoX order). */
typedef struct profile_acc {
    double k_log[SYNTH_MAX_DIM], k_ratio2[SYNTH_MAX_DIM];
    /* log std clipped at SPREAD_FLOOR, and its square, for scale_spread */
    double k_logc[SYNTH_MAX_DIM], k_logc2[SYNTH_MAX_DIM];
    double q_log[SYNTH_MAX_DIM], q_ratio2[SYNTH_MAX_DIM];
    double key_ms; /* mean square of a key entry, summed over KV heads */
    /* mean_q_i conj(mean_k_i) / sqrt(d) per RoPE pair (synth_params.pos_re), summed over query heads */
    double pos_re[SYNTH_MAX_DIM / 2], pos_im[SYNTH_MAX_DIM / 2];
    uint64_t kv_heads, q_heads;
} profile_acc;

typedef struct stats_acc {
    double top, sink, local, pca, drift, ratio, content, skew, target, lift;
    uint64_t n_attn, n_heads, n_drift, n_content, n_skew, n_target;
    double churn, fixed; /* churn_overlap and fixed_share sums */
    uint64_t n_churn, n_fixed;
} stats_acc;

/* x (one head's vector at position pos) rotated back by RoPE into out, in
 * NeoX order: out[i], out[i + d/2] is pair i. */
static void unrope(const float *x, uint32_t d, uint64_t pos, fathom_rope_style style, const double *theta,
                   float *out) {
    const uint32_t half = d / 2;
    for (uint32_t i = 0; i < half; i++) {
        double angle = (double)pos * theta[i], c = cos(angle), s = sin(angle);
        double a = style == FATHOM_ROPE_NEOX ? x[i] : x[2 * i];
        double b = style == FATHOM_ROPE_NEOX ? x[i + half] : x[2 * i + 1];
        out[i] = (float)(a * c + b * s);
        out[i + half] = (float)(b * c - a * s);
    }
}

/* The NeoX-order pre-RoPE vector m rotated to position pos, in the style's
 * layout (the inverse of unrope). */
static void rerope(const double *m, uint32_t d, uint64_t pos, fathom_rope_style style, const double *theta,
                   float *out) {
    const uint32_t half = d / 2;
    for (uint32_t i = 0; i < half; i++) {
        double angle = (double)pos * theta[i], c = cos(angle), s = sin(angle);
        double a = m[i] * c - m[i + half] * s, b = m[i] * s + m[i + half] * c;
        if (style == FATHOM_ROPE_NEOX) out[i] = (float)a, out[i + half] = (float)b;
        else out[2 * i] = (float)a, out[2 * i + 1] = (float)b;
    }
}

/* Channel means and stds of rows [n x d]. */
static void channel_moments(const float *x, uint64_t n, uint32_t d, double *mean, double *sd) {
    for (uint32_t j = 0; j < d; j++) mean[j] = sd[j] = 0;
    for (uint64_t t = 0; t < n; t++)
        for (uint32_t j = 0; j < d; j++) mean[j] += x[t * d + j];
    for (uint32_t j = 0; j < d; j++) mean[j] /= (double)n;
    for (uint64_t t = 0; t < n; t++)
        for (uint32_t j = 0; j < d; j++) {
            double e = x[t * d + j] - mean[j];
            sd[j] += e * e;
        }
    for (uint32_t j = 0; j < d; j++) sd[j] = sqrt(sd[j] / (double)n) + 1e-12;
}

static int cmp_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* The softmax's numerators of logits x[0, n) in place, exp(x - max x);
 * returns their sum. */
static double softmax_exp(float *x, uint64_t n) {
    double mx = -INFINITY, sum = 0;
    for (uint64_t t = 0; t < n; t++)
        if (x[t] > mx) mx = x[t];
    for (uint64_t t = 0; t < n; t++) sum += (x[t] = (float)exp(x[t] - mx));
    return sum;
}

/* The sum of the m largest of x[0, n) (sorts x, descending). */
static double top_sum(float *x, uint64_t n, uint64_t m) {
    double top = 0;
    qsort(x, n, sizeof *x, cmp_desc);
    for (uint64_t t = 0; t < n && t < m; t++) top += x[t];
    return top;
}

/* Dense softmax of query q over keys [0, pos]: top-k, sink and local mass.
 * With pkeys (the head's mean key at every position, rotated as the keys
 * are), also the content concentration: the logits less the mean key's
 * (the positional part), over the keys between the first 4 and the last
 * 32, and the mass of the k - 36 largest there, the share a method picks. */
static void attention_mass(const float *q, const float *keys, const float *pkeys, uint64_t pos, uint32_t d,
                           uint32_t k, float *prob, stats_acc *acc) {
    const uint64_t n = pos + 1;
    const double scale = 1.0 / sqrt((double)d);
    if (pkeys && n > STATS_SINKS + STATS_LOCAL + 1 && k > STATS_SINKS + STATS_LOCAL) {
        const uint64_t mid = n - STATS_SINKS - STATS_LOCAL;
        for (uint64_t t = 0; t < mid; t++) {
            const float *kt = keys + (t + STATS_SINKS) * d, *mt = pkeys + (t + STATS_SINKS) * d;
            double dot = 0;
            for (uint32_t j = 0; j < d; j++) dot += (double)q[j] * (kt[j] - mt[j]);
            prob[t] = (float)(dot * scale);
        }
        const double sum = softmax_exp(prob, mid);
        acc->content += top_sum(prob, mid, k - STATS_SINKS - STATS_LOCAL) / sum;
        acc->n_content++;
    }
    for (uint64_t t = 0; t < n; t++) {
        double dot = 0;
        for (uint32_t j = 0; j < d; j++) dot += (double)q[j] * keys[t * d + j];
        prob[t] = (float)(dot * scale);
    }
    const double sum = softmax_exp(prob, n);
    double sink = 0, local = 0;
    for (uint64_t t = 0; t < n; t++) {
        prob[t] = (float)(prob[t] / sum);
        if (t < STATS_SINKS) sink += prob[t];
        if (t + STATS_LOCAL > pos) local += prob[t];
    }
    acc->top += top_sum(prob, n, k), acc->sink += sink, acc->local += local;
    acc->n_attn++;
}

/* Skewness over the keys between the first 4 and the last 32 of the
 * logits of dq (the query's deviation from its head's mean, rotated to
 * position pos as the keys are) against each key's deviation from the
 * head's mean key (pkeys: that mean rotated to each key's position). A
 * query drawn from its per-channel moments meets the keys in a random
 * direction and gets about 0; a trained model's queries point along a
 * heavy right tail of the keys (docs/synthetic.md, "Query direction"). */
static void deviation_skew(const float *dq, const float *keys, const float *pkeys, uint64_t pos, uint32_t d,
                           float *logit, stats_acc *acc) {
    const uint64_t n = pos + 1;
    if (n < STATS_SINKS + STATS_LOCAL + 3) return;
    const uint64_t mid = n - STATS_SINKS - STATS_LOCAL;
    double sum = 0;
    for (uint64_t t = 0; t < mid; t++) {
        const float *kt = keys + (t + STATS_SINKS) * d, *mt = pkeys + (t + STATS_SINKS) * d;
        double dot = 0;
        for (uint32_t j = 0; j < d; j++) dot += (double)dq[j] * (kt[j] - mt[j]);
        logit[t] = (float)dot;
        sum += dot;
    }
    const double mean = sum / (double)mid;
    double m2 = 0, m3 = 0;
    for (uint64_t t = 0; t < mid; t++) {
        double e = logit[t] - mean;
        m2 += e * e, m3 += e * e * e;
    }
    m2 /= (double)mid, m3 /= (double)mid;
    if (!(m2 > 0)) return;
    acc->skew += m3 / (m2 * sqrt(m2));
    acc->n_skew++;
}

/* Over the keys between the first 4 and the last 32: t, the key of the
 * largest full logit q . k (the one q attends most), the cosine of dq (as
 * in deviation_skew) with that key's deviation from the head's mean key
 * (*cos), and the z-score of its deviation logit dq . (k_t - mean key)
 * among those keys' (*z). False when there are too few keys. */
static bool target_of(const float *q, const float *dq, const float *keys, const float *pkeys, uint64_t pos, uint32_t d,
                      double *cos_out, double *z_out) {
    const uint64_t n = pos + 1;
    if (n < STATS_SINKS + STATS_LOCAL + 3) return false;
    const uint64_t mid = n - STATS_SINKS - STATS_LOCAL;
    double best = -INFINITY, sum = 0, sum2 = 0, at = 0;
    uint64_t arg = 0;
    for (uint64_t t = 0; t < mid; t++) {
        const float *kt = keys + (t + STATS_SINKS) * d, *mt = pkeys + (t + STATS_SINKS) * d;
        double dot = 0, dev = 0;
        for (uint32_t j = 0; j < d; j++) dot += (double)q[j] * kt[j], dev += (double)dq[j] * (kt[j] - mt[j]);
        sum += dev, sum2 += dev * dev;
        if (dot > best) best = dot, arg = t, at = dev;
    }
    const double mean = sum / (double)mid, var = sum2 / (double)mid - mean * mean;
    const float *kt = keys + (arg + STATS_SINKS) * d, *mt = pkeys + (arg + STATS_SINKS) * d;
    double a = 0, b = 0;
    for (uint32_t j = 0; j < d; j++) {
        const double e = (double)kt[j] - mt[j];
        a += (double)dq[j] * dq[j], b += e * e;
    }
    if (!(a > 0 && b > 0 && var > 0)) return false;
    *cos_out = at / sqrt(a * b);
    *z_out = (at - mean) / sqrt(var);
    return true;
}

/* A standard normal sample from counter x (splitmix64, Box-Muller). */
static double stats_normal(uint64_t x) {
    const uint64_t b = synth_mix64(x + 2 * SYNTH_GOLDEN), a = synth_mix64(x + 3 * SYNTH_GOLDEN);
    const double u1 = ((double)(b >> 11) + 0.5) / 9007199254740992.0, u2 = (double)(a >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

typedef struct measure_ctx {
    const fathom_source_info *in;
    fathom_rope_style style;
    double theta[SYNTH_MAX_DIM / 2];
    uint32_t k;
    float *kp, *qp, *prob; /* [n x d], [P x d], [n] */
    float *pk;             /* [n x d]: the head's mean key rotated to each position */
    /* per-head profiles (synth_params.heads layout) to fill, or NULL; the
     * layer being measured */
    float *heads;
    bool q_heads; /* the blocks end with each query head's query std profile */
    uint32_t layer;
    bool skew; /* measure dev_skew (not during the searches, which do not use it) */
} measure_ctx;

#define CHURN_WINDOW 32 /* last queried positions of churn_overlap and fixed_share */

/* The indices of the c largest of v[0..d) into top (c <= d, any order). */
static void top_channels(const double *v, uint32_t d, uint32_t c, uint32_t *top) {
    bool used[SYNTH_MAX_DIM] = {false};
    for (uint32_t r = 0; r < c; r++) {
        uint32_t best = d;
        for (uint32_t j = 0; j < d; j++)
            if (!used[j] && (best == d || v[j] > v[best])) best = j;
        used[best] = true;
        top[r] = best;
    }
}

/* churn_overlap and fixed_share of KV head g (fathom_synth_stats): channel
 * importance g_j = var_j sum_h q_hj^2 in the stored (rotated) frame, the
 * variance over the keys up to each query, for the last CHURN_WINDOW
 * queried positions. */
static int channel_churn(const fathom_source_info *in, const float *q, const float *kg, uint32_t g,
                         stats_acc *acc) {
    const uint32_t d = in->dim, group = in->q_heads / in->kv_heads, P = in->positions, c = d / 8;
    const uint32_t W = P < CHURN_WINDOW ? P : CHURN_WINDOW;
    if (W < 2 || c < 1) return FATHOM_OK;
    double (*share)[SYNTH_MAX_DIM] = fathom_alloc_array(CHURN_WINDOW, sizeof *share);
    FATHOM_CHECK(!share, FATHOM_ERR_NOMEM, "out of memory for the channel statistics");
    double s1[SYNTH_MAX_DIM] = {0}, s2[SYNTH_MAX_DIM] = {0}, mean_share[SYNTH_MAX_DIM] = {0};
    uint32_t top[SYNTH_MAX_DIM / 8], prev[SYNTH_MAX_DIM / 8];
    uint64_t seen = 0;
    double own = 0;
    for (uint32_t w = 0; w < W; w++) {
        const uint32_t i = P - W + w;
        const uint64_t pos = in->first_query + i;
        for (; seen <= pos && seen < in->tokens; seen++)
            for (uint32_t j = 0; j < d; j++) {
                const double x = kg[seen * d + j];
                s1[j] += x, s2[j] += x * x;
            }
        double total = 0;
        for (uint32_t j = 0; j < d; j++) {
            const double mu = s1[j] / (double)seen, var = s2[j] / (double)seen - mu * mu;
            double qq = 0;
            for (uint32_t h = 0; h < group; h++) {
                const double x = q[(((uint64_t)g * group + h) * P + i) * d + j];
                qq += x * x;
            }
            share[w][j] = (var > 0 ? var : 0) * qq;
            total += share[w][j];
        }
        if (!(total > 0)) { /* no query energy where the keys vary: nothing to measure */
            free(share);
            return FATHOM_OK;
        }
        for (uint32_t j = 0; j < d; j++) share[w][j] /= total, mean_share[j] += share[w][j] / W;
        top_channels(share[w], d, c, top);
        double cover = 0;
        for (uint32_t r = 0; r < c; r++) cover += share[w][top[r]];
        own += cover / W;
        if (w > 0) {
            uint32_t common = 0;
            for (uint32_t r = 0; r < c; r++)
                for (uint32_t u = 0; u < c; u++) common += top[r] == prev[u];
            acc->churn += (double)common / c;
            acc->n_churn++;
        }
        memcpy(prev, top, c * sizeof *top);
    }
    top_channels(mean_share, d, c, top);
    double fixed = 0;
    for (uint32_t w = 0; w < W; w++)
        for (uint32_t r = 0; r < c; r++) fixed += share[w][top[r]] / W;
    acc->fixed += own > 0 ? fixed / own : 0;
    acc->n_fixed++;
    free(share);
    return FATHOM_OK;
}

static float clampf(double x, double lo, double hi) { return (float)(x < lo ? lo : x > hi ? hi : x); }

/* KV head g of one layer (q, k as fathom_source_layer returns them). */
static int measure_head(measure_ctx *m, const float *q, const float *k, uint32_t g, stats_acc *acc,
                        profile_acc *prof) {
    const fathom_source_info *in = m->in;
    const uint32_t d = in->dim, group = in->q_heads / in->kv_heads, P = in->positions;
    const uint64_t n = in->tokens;
    const float *kg = k + (uint64_t)g * n * d;
    for (uint64_t t = 0; t < n; t++) unrope(kg + t * d, d, t, m->style, m->theta, m->kp + t * d);
    double mean[SYNTH_MAX_DIM], sd[SYNTH_MAX_DIM], ms = 0, ratio = 0;
    channel_moments(m->kp, n, d, mean, sd);
    for (uint32_t j = 0; j < d; j++) {
        ms += sd[j] * sd[j];
        if (fabs(mean[j]) / sd[j] > ratio) ratio = fabs(mean[j]) / sd[j];
    }
    acc->ratio += ratio;
    for (uint64_t t = 0; t < n; t++) rerope(mean, d, t, m->style, m->theta, m->pk + t * d);
    /* this head's block of the per-head profiles, in the ranges
     * synth_params_check accepts */
    const uint64_t block = (uint64_t)d * (2 + group + (m->q_heads ? group : 0));
    float *own = m->heads ? m->heads + ((uint64_t)m->layer * in->kv_heads + g) * block : NULL;
    for (uint32_t j = 0; own && j < d; j++) {
        own[j] = clampf(sd[j] / sqrt(ms / d), 1e-4, 1e4);
        own[d + j] = clampf(fabs(mean[j]) / sd[j], 0, 1e3);
    }
    if (prof) {
        double rms = sqrt(ms / d), ms_all = 0;
        for (uint32_t j = 0; j < d; j++) {
            double l = log(sd[j] / rms);
            double lc = l > SPREAD_FLOOR ? l : SPREAD_FLOOR;
            prof->k_log[j] += l, prof->k_logc[j] += lc, prof->k_logc2[j] += lc * lc;
            prof->k_ratio2[j] += mean[j] * mean[j] / (sd[j] * sd[j]);
            ms_all += mean[j] * mean[j] + sd[j] * sd[j];
        }
        prof->key_ms += ms_all / d;
        prof->kv_heads++;
    }
    fathom_basis *basis;
    if (n >= 2) {
        FATHOM_TRY(fathom_basis_fit(&basis, d, m->kp, n, NULL, 0));
        const float *ev = fathom_basis_eigenvalues(basis);
        double top = 0, all = 0;
        for (uint32_t c = 0; c < d; c++) {
            all += ev[c] > 0 ? ev[c] : 0;
            if (c < d / 4) top += ev[c] > 0 ? ev[c] : 0;
        }
        fathom_basis_free(basis);
        acc->pca += all > 0 ? top / all : 0;
    }
    acc->n_heads++;
    FATHOM_TRY(channel_churn(in, q, kg, g, acc));
    for (uint32_t h = 0; h < group; h++) {
        const float *qh = q + ((uint64_t)g * group + h) * P * d;
        for (uint32_t i = 0; i < P; i++) unrope(qh + (uint64_t)i * d, d, in->first_query + i, m->style, m->theta, m->qp + (uint64_t)i * d);
        for (uint32_t i = 1; i < P; i++) {
            double dot = 0, a = 0, b = 0;
            for (uint32_t j = 0; j < d; j++) {
                double x = m->qp[(uint64_t)i * d + j], y = m->qp[(uint64_t)(i - 1) * d + j];
                dot += x * y, a += x * x, b += y * y;
            }
            acc->drift += a > 0 && b > 0 ? dot / sqrt(a * b) : 0;
            acc->n_drift++;
        }
        if (prof && P >= 2) {
            double qmean[SYNTH_MAX_DIM], qsd[SYNTH_MAX_DIM], qms = 0;
            channel_moments(m->qp, P, d, qmean, qsd);
            for (uint32_t j = 0; j < d; j++) qms += qsd[j] * qsd[j];
            for (uint32_t j = 0; j < d; j++) {
                prof->q_log[j] += log(qsd[j] / sqrt(qms / d));
                prof->q_ratio2[j] += qmean[j] * qmean[j] / (qsd[j] * qsd[j]);
                if (own && m->q_heads) own[(2 + group + h) * d + j] = clampf(qsd[j] / sqrt(qms / d), 1e-4, 1e4);
            }
            /* pair i as a complex number: channel i real, i + d/2 imaginary */
            for (uint32_t i = 0; i < d / 2; i++) {
                double qa = qmean[i], qb = qmean[i + d / 2], ka = mean[i], kb = mean[i + d / 2];
                double re = (qa * ka + qb * kb) / sqrt((double)d), im = (qb * ka - qa * kb) / sqrt((double)d);
                prof->pos_re[i] += re;
                prof->pos_im[i] += im;
                if (own) own[2 * d + h * d + i] = clampf(re, -1e3, 1e3), own[2 * d + h * d + d / 2 + i] = clampf(im, -1e3, 1e3);
            }
            prof->q_heads++;
        }
        double qbar[SYNTH_MAX_DIM] = {0}; /* dev_skew's mean query, un-rotated */
        for (uint32_t i = 0; m->skew && i < P; i++)
            for (uint32_t j = 0; j < d; j++) qbar[j] += m->qp[(uint64_t)i * d + j] / (double)P;
        double qsd_all[SYNTH_MAX_DIM] = {0}; /* and the std around it (target_lift's Gaussian queries) */
        for (uint32_t i = 0; m->skew && i < P; i++)
            for (uint32_t j = 0; j < d; j++) {
                const double e = m->qp[(uint64_t)i * d + j] - qbar[j];
                qsd_all[j] += e * e / (double)P;
            }
        for (uint32_t j = 0; m->skew && j < d; j++) qsd_all[j] = sqrt(qsd_all[j]);
        uint32_t step = P / STATS_POSITIONS ? P / STATS_POSITIONS : 1;
        for (uint32_t s = 0; s < STATS_POSITIONS && (uint64_t)s * step < P; s++) {
            uint32_t i = P - 1 - s * step;
            attention_mass(qh + (uint64_t)i * d, kg, m->pk, in->first_query + i, d, m->k, m->prob, acc);
            if (m->skew && P >= 2) {
                /* the deviation, un-rotated, then rotated as the query is */
                double dev[SYNTH_MAX_DIM];
                float dq[SYNTH_MAX_DIM];
                for (uint32_t j = 0; j < d; j++) dev[j] = m->qp[(uint64_t)i * d + j] - qbar[j];
                rerope(dev, d, in->first_query + i, m->style, m->theta, dq);
                deviation_skew(dq, kg, m->pk, in->first_query + i, d, m->prob, acc);
                /* target_cos and target_lift: the query's own, and a query
                 * drawn per channel from the head's mean and std over the
                 * queried positions (what its moments alone give) */
                double cos_q, z_q, cos_g, z_g;
                double gq[SYNTH_MAX_DIM], gdev[SYNTH_MAX_DIM];
                float gr[SYNTH_MAX_DIM], gd[SYNTH_MAX_DIM];
                for (uint32_t j = 0; j < d; j++) {
                    const uint64_t ctr = (((uint64_t)m->layer * 4096 + (uint64_t)g * group + h) * 65536 + i) * 1024 + j;
                    gq[j] = qbar[j] + qsd_all[j] * stats_normal(ctr * 2);
                    gdev[j] = gq[j] - qbar[j];
                }
                rerope(gq, d, in->first_query + i, m->style, m->theta, gr);
                rerope(gdev, d, in->first_query + i, m->style, m->theta, gd);
                if (target_of(qh + (uint64_t)i * d, dq, kg, m->pk, in->first_query + i, d, &cos_q, &z_q) &&
                    target_of(gr, gd, kg, m->pk, in->first_query + i, d, &cos_g, &z_g)) {
                    acc->target += cos_q, acc->lift += z_q - z_g;
                    acc->n_target++;
                }
            }
        }
    }
    return FATHOM_OK;
}

/* Statistics of src into out; with prof, the profile sums too, with heads
 * (synth_params.heads layout for src's shape, zeroed), every measured
 * head's own profiles, and with layer_top (in.layers doubles), each
 * measured layer's top-k mass; with only >= 0, layer `only` alone (not
 * every layer_stride-th). */
static int measure(const fathom_source *src, fathom_rope_style style, double rope_base, uint32_t k,
                   uint32_t layer_stride, bool skew, fathom_synth_stats *out, profile_acc *prof, float *heads,
                   bool q_heads, double *layer_top, int64_t only) {
    fathom_source_info in;
    FATHOM_TRY(fathom_source_get_info(src, &in));
    FATHOM_CHECK_ARG(in.dim % 2 == 0 && in.dim <= SYNTH_MAX_DIM, "statistics: head dim %u must be even and <= %u",
                     in.dim, SYNTH_MAX_DIM);
    FATHOM_CHECK_ARG(style == FATHOM_ROPE_NEOX || style == FATHOM_ROPE_ADJACENT, "statistics: unknown RoPE style %d",
                     (int)style);
    FATHOM_CHECK_ARG(isfinite(rope_base) && rope_base > 1, "statistics: RoPE base %g must be > 1", rope_base);
    FATHOM_CHECK_ARG(k > 0, "statistics: k must be > 0");
    if (layer_stride == 0) layer_stride = 1;
    FATHOM_CHECK_ARG(only < (int64_t)in.layers, "statistics: layer %lld of %u", (long long)only, in.layers);
    uint64_t q_elems, kv_elems;
    FATHOM_TRY(fathom_source_layer_sizes(&in, &q_elems, &kv_elems));
    measure_ctx m = {.in = &in, .style = style, .k = k, .heads = prof ? heads : NULL, .q_heads = q_heads, .skew = skew};
    for (uint32_t i = 0; i < in.dim / 2; i++) m.theta[i] = pow(rope_base, -2.0 * i / in.dim);
    float *q = fathom_alloc_array(q_elems, sizeof *q), *kk = fathom_alloc_array(kv_elems, sizeof *kk);
    m.kp = fathom_alloc_array(in.tokens, (uint64_t)in.dim * sizeof(float));
    m.qp = fathom_alloc_array(in.positions, (uint64_t)in.dim * sizeof(float));
    m.prob = fathom_alloc_array(in.tokens, sizeof(float));
    m.pk = fathom_alloc_array(in.tokens, (uint64_t)in.dim * sizeof(float));
    int st = FATHOM_OK;
    if (!q || !kk || !m.kp || !m.qp || !m.prob || !m.pk) st = fathom_fail(FATHOM_ERR_NOMEM, "out of memory for statistics");
    stats_acc acc;
    memset(&acc, 0, sizeof acc);
    for (uint32_t l = only >= 0 ? (uint32_t)only : 0; st == FATHOM_OK && l < in.layers; l += layer_stride) {
        const double top0 = acc.top;
        const uint64_t n0 = acc.n_attn;
        st = fathom_source_layer(src, l, q, kk, NULL);
        m.layer = l;
        for (uint32_t g = 0; st == FATHOM_OK && g < in.kv_heads; g++) st = measure_head(&m, q, kk, g, &acc, prof);
        if (layer_top && acc.n_attn > n0) layer_top[l] = (acc.top - top0) / (double)(acc.n_attn - n0);
        if (only >= 0) break;
    }
    free(q), free(kk), free(m.kp), free(m.qp), free(m.prob), free(m.pk);
    FATHOM_TRY(st);
    out->top_mass = acc.top / (double)acc.n_attn;
    out->sink_mass = acc.sink / (double)acc.n_attn;
    out->local_mass = acc.local / (double)acc.n_attn;
    out->pca_share = acc.pca / (double)acc.n_heads;
    out->mean_ratio = acc.ratio / (double)acc.n_heads;
    out->drift = acc.n_drift ? acc.drift / (double)acc.n_drift : 1.0;
    out->content_mass = acc.n_content ? acc.content / (double)acc.n_content : 0.0;
    out->dev_skew = acc.n_skew ? acc.skew / (double)acc.n_skew : 0.0;
    out->target_cos = acc.n_target ? acc.target / (double)acc.n_target : 0.0;
    out->target_lift = acc.n_target ? acc.lift / (double)acc.n_target : 0.0;
    out->churn_overlap = acc.n_churn ? acc.churn / (double)acc.n_churn : 1.0;
    out->fixed_share = acc.n_fixed ? acc.fixed / (double)acc.n_fixed : 1.0;
    return FATHOM_OK;
}

int fathom_synth_stats_measure(const fathom_source *src, fathom_rope_style style, double rope_base, uint32_t k,
                               uint32_t layer_stride, fathom_synth_stats *out) {
    FATHOM_CHECK_ARG(src != NULL && out != NULL, "fathom_synth_stats_measure: NULL argument");
    return measure(src, style, rope_base, k, layer_stride, true, out, NULL, NULL, false, NULL, -1);
}

int synth_layer_top_mass(const fathom_source *src, fathom_rope_style style, double rope_base, uint32_t k,
                         uint32_t layer, double *out) {
    FATHOM_CHECK_ARG(src != NULL && out != NULL, "synth_layer_top_mass: NULL argument");
    fathom_source_info in;
    FATHOM_TRY(fathom_source_get_info(src, &in));
    FATHOM_CHECK_ARG(layer < in.layers, "synth_layer_top_mass: layer %u of %u", layer, in.layers);
    double *tops = fathom_alloc_array(in.layers, sizeof *tops);
    FATHOM_CHECK(!tops, FATHOM_ERR_NOMEM, "out of memory for per-layer statistics");
    fathom_synth_stats s;
    int st = measure(src, style, rope_base, k, 1, false, &s, NULL, NULL, false, tops, layer);
    if (st == FATHOM_OK) *out = tops[layer];
    free(tops);
    return st;
}

/* ---- RoPE detection ---- */

/* Mean over the KV heads of sampled layers of sum_j mean_j^2 / var_j after
 * rotating back: a rotation that undoes the model's leaves the channel
 * means (large on the slow pairs of trained keys) in place; any other
 * spins them around and averages them away. */
static int rope_score(const fathom_source *src, const fathom_source_info *in, fathom_rope_style style, double base,
                      float *k, float *kp, double *score) {
    double theta[SYNTH_MAX_DIM / 2], total = 0;
    for (uint32_t i = 0; i < in->dim / 2; i++) theta[i] = pow(base, -2.0 * i / in->dim);
    uint32_t stride = in->layers / 4 ? in->layers / 4 : 1, heads = 0;
    for (uint32_t l = 0; l < in->layers; l += stride) {
        FATHOM_TRY(fathom_source_layer(src, l, NULL, k, NULL));
        for (uint32_t g = 0; g < in->kv_heads; g++, heads++) {
            const float *kg = k + (uint64_t)g * in->tokens * in->dim;
            for (uint64_t t = 0; t < in->tokens; t++) unrope(kg + t * in->dim, in->dim, t, style, theta, kp + t * in->dim);
            double mean[SYNTH_MAX_DIM], sd[SYNTH_MAX_DIM];
            channel_moments(kp, in->tokens, in->dim, mean, sd);
            for (uint32_t j = 0; j < in->dim; j++) total += mean[j] * mean[j] / (sd[j] * sd[j]);
        }
    }
    *score = total / heads;
    return FATHOM_OK;
}

static int detect_rope(const fathom_source *src, fathom_rope_style *style, double *base) {
    static const double bases[] = {1e4, 1e5, 5e5, 1e6, 1e7};
    fathom_source_info in;
    FATHOM_TRY(fathom_source_get_info(src, &in));
    uint64_t q_elems, kv_elems;
    FATHOM_TRY(fathom_source_layer_sizes(&in, &q_elems, &kv_elems));
    float *k = fathom_alloc_array(kv_elems, sizeof *k), *kp = fathom_alloc_array(in.tokens, (uint64_t)in.dim * 4);
    int st = k && kp ? FATHOM_OK : fathom_fail(FATHOM_ERR_NOMEM, "out of memory detecting RoPE");
    double best = -1;
    for (int s = FATHOM_ROPE_NEOX; st == FATHOM_OK && s <= FATHOM_ROPE_ADJACENT; s++)
        for (size_t b = 0; st == FATHOM_OK && b < sizeof bases / sizeof bases[0]; b++) {
            double score;
            st = rope_score(src, &in, (fathom_rope_style)s, bases[b], k, kp, &score);
            if (st == FATHOM_OK && score > best) best = score, *style = (fathom_rope_style)s, *base = bases[b];
        }
    free(k), free(kp);
    return st;
}

/* ---- the fit ---- */

typedef struct fit_ctx {
    const fathom_source_info *in;
    uint32_t k, layer_stride;
    double *layer_top; /* the capture's top-k mass per layer (in->layers) */
    synth_params p;
} fit_ctx;

/* The statistics of the preset p at the capture's n and positions (text seed 1). */
static int stats_of(const fit_ctx *f, const synth_params *p, bool skew, fathom_synth_stats *out, profile_acc *prof) {
    fathom_synth_preset preset = {.p = *p};
    fathom_source *src;
    FATHOM_TRY(fathom_synth_open_preset(&src, &preset, f->in->tokens, f->in->positions, 1));
    int st = measure(src, FATHOM_ROPE_NEOX, p->rope_base, f->k, f->layer_stride, skew, out, prof, NULL, false, NULL, -1);
    fathom_source_free(src);
    return st;
}

/* The top-k mass of layer l alone of the fit's preset (layers are
 * generated independently, so it is the same as within every layer). */
static int layer_top_of(fit_ctx *f, uint32_t l, double *top) {
    fathom_synth_preset preset = {.p = f->p};
    fathom_source *src;
    FATHOM_TRY(fathom_synth_open_preset(&src, &preset, f->in->tokens, f->in->positions, 1));
    int st = synth_layer_top_mass(src, FATHOM_ROPE_NEOX, f->p.rope_base, f->k, l, top);
    fathom_source_free(src);
    return st;
}

/* A statistic of the fit's preset that a search moves (arg: which one). */
typedef int (*search_stat_fn)(fit_ctx *f, uint32_t arg, double *value);

/* Bisection in log space over [lo, hi] of *x for the statistic to reach
 * target (the statistic grows with *x); ends at a bracket edge when the
 * target lies outside what the generator reaches there. */
static int bisect_log(fit_ctx *f, float *x, search_stat_fn stat, uint32_t arg, double target, double lo,
                      double hi) {
    for (int it = 0; it < 8; it++) {
        double mid = sqrt(lo * hi), value = 0;
        *x = (float)mid;
        FATHOM_TRY(stat(f, arg, &value));
        if (value < target) lo = mid;
        else hi = mid;
    }
    *x = (float)sqrt(lo * hi);
    return FATHOM_OK;
}

/* Each layer's topic logit, over [lo, hi], for that layer's top-k mass (the
 * capture's, f->layer_top); topic_logit then holds their geometric mean
 * (what the report shows). */
static int search_layers(fit_ctx *f, double lo, double hi) {
    double logsum = 0;
    for (uint32_t l = 0; l < f->p.layers; l++) {
        FATHOM_TRY(bisect_log(f, &f->p.topic_layers[l], layer_top_of, l, f->layer_top[l], lo, hi));
        logsum += log(f->p.topic_layers[l]);
    }
    f->p.topic_logit = (float)exp(logsum / f->p.layers);
    return FATHOM_OK;
}

typedef enum { KNOB_TOPIC_AMP, KNOB_TOPIC_LOGIT, KNOB_SINK_LOGIT, KNOB_RECENCY, KNOB_TARGET, KNOB_CHURN } knob;

static float *knob_field(synth_params *p, knob which) {
    switch (which) {
    case KNOB_TOPIC_AMP: return &p->topic_amp;
    case KNOB_TOPIC_LOGIT: return &p->topic_logit;
    case KNOB_SINK_LOGIT: return &p->sink_logit;
    case KNOB_TARGET: return &p->target_share;
    case KNOB_CHURN: return &p->query_churn;
    default: return p->positional ? &p->pos_gain : &p->recency_logit;
    }
}

static double stat_field(const fathom_synth_stats *s, knob which) {
    switch (which) {
    case KNOB_TOPIC_AMP: return s->pca_share;
    case KNOB_TOPIC_LOGIT: return s->top_mass;
    case KNOB_SINK_LOGIT: return s->sink_mass;
    case KNOB_TARGET: return s->target_lift;
    case KNOB_CHURN: return s->fixed_share;
    default: return s->local_mass;
    }
}

/* target_lift is measured with dev_skew's positions only (measure's skew) */
static bool knob_skew(knob which) { return which == KNOB_TARGET; }

static int knob_stat(fit_ctx *f, uint32_t which, double *value) {
    fathom_synth_stats s;
    FATHOM_TRY(stats_of(f, &f->p, knob_skew((knob)which), &s, NULL));
    *value = stat_field(&s, (knob)which);
    return FATHOM_OK;
}

/* The knob whose statistic reaches target, by bisect_log. */
static int search_knob(fit_ctx *f, knob which, double target, double lo, double hi) {
    return bisect_log(f, knob_field(&f->p, which), knob_stat, which, target, lo, hi);
}

/* Bisection over [0, hi] of *x (linear: 0 is a value it takes) for the
 * statistic to reach target; rising: it grows with *x (else it falls);
 * none when it is there already at 0. */
static int bisect_linear(fit_ctx *f, float *x, search_stat_fn stat, uint32_t arg, double target, double hi,
                         bool rising) {
    double lo = 0, value = 0;
    *x = 0;
    FATHOM_TRY(stat(f, arg, &value));
    if (rising ? value >= target : value <= target) return FATHOM_OK;
    for (int it = 0; it < 7; it++) {
        const double mid = 0.5 * (lo + hi);
        *x = (float)mid;
        FATHOM_TRY(stat(f, arg, &value));
        if (rising ? value < target : value > target) lo = mid;
        else hi = mid;
    }
    *x = (float)(0.5 * (lo + hi));
    return FATHOM_OK;
}

/* The knobs searched linearly from 0: target_share over [0, 0.9] for
 * target_lift (grows with it), query_churn over [0, 2] for fixed_share
 * (falls as it grows). (query_churn was first fitted to churn_overlap,
 * which tells real queries from generated ones by more; the Gemma 3 fit
 * then kept fixed_share too high for DS's ratio; docs/synthetic.md.) */
static int search_linear(fit_ctx *f, knob which, double target) {
    const bool churn = which == KNOB_CHURN;
    return bisect_linear(f, knob_field(&f->p, which), knob_stat, which, target, churn ? 2.0 : 0.9, !churn);
}

/* One linear knob's search alone (synth_fit_target_share,
 * synth_fit_query_churn): p's field such that p's statistic at the
 * capture's n and positions reaches the capture's, every other field kept. */
static int fit_alone(const fathom_source *capture, uint32_t k, synth_params *p, knob which, double *target,
                     double *achieved) {
    fathom_source_info in;
    FATHOM_TRY(fathom_source_get_info(capture, &in));
    fathom_synth_stats want, got;
    FATHOM_TRY(measure(capture, FATHOM_ROPE_NEOX, p->rope_base, k, 1, knob_skew(which), &want, NULL, NULL, false,
                       NULL, -1));
    fit_ctx f = {.in = &in, .k = k, .layer_stride = 1, .p = *p};
    FATHOM_TRY(search_linear(&f, which, stat_field(&want, which)));
    FATHOM_TRY(stats_of(&f, &f.p, knob_skew(which), &got, NULL));
    *knob_field(p, which) = *knob_field(&f.p, which);
    *target = stat_field(&want, which), *achieved = stat_field(&got, which);
    return FATHOM_OK;
}

int synth_fit_target_share(const fathom_source *capture, uint32_t k, synth_params *p, double *target,
                           double *achieved) {
    FATHOM_CHECK_ARG(capture && p && target && achieved, "synth_fit_target_share: NULL argument");
    return fit_alone(capture, k, p, KNOB_TARGET, target, achieved);
}

int synth_fit_query_churn(const fathom_source *capture, uint32_t k, synth_params *p, double *target,
                          double *achieved) {
    FATHOM_CHECK_ARG(capture && p && target && achieved, "synth_fit_query_churn: NULL argument");
    FATHOM_CHECK_ARG(p->fitted, "synth_fit_query_churn: query_churn needs a fitted preset");
    return fit_alone(capture, k, p, KNOB_CHURN, target, achieved);
}

static int search_run(fit_ctx *f, double target) {
    static const uint32_t runs[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64};
    double best = INFINITY;
    uint32_t best_run = 1;
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        f->p.query_run = runs[i];
        fathom_synth_stats s;
        FATHOM_TRY(stats_of(f, &f->p, false, &s, NULL));
        if (fabs(s.drift - target) < best) best = fabs(s.drift - target), best_run = runs[i];
    }
    f->p.query_run = best_run;
    return FATHOM_OK;
}

/* Profiles, spread and key scale from the sums. */
static void profiles_from(const profile_acc *a, synth_params *p) {
    const uint32_t d = p->dim;
    double spread2 = 0, kn = 0, qn = 0;
    for (uint32_t j = 0; j < d; j++) {
        double m = a->k_log[j] / a->kv_heads, mc = a->k_logc[j] / a->kv_heads;
        spread2 += a->k_logc2[j] / a->kv_heads - mc * mc;
        p->k_std[j] = (float)exp(m);
        p->k_mean[j] = (float)sqrt(a->k_ratio2[j] / a->kv_heads);
        p->q_std[j] = (float)exp(a->q_log[j] / (a->q_heads ? a->q_heads : 1));
        p->q_mean[j] = (float)sqrt(a->q_ratio2[j] / (a->q_heads ? a->q_heads : 1));
        kn += (double)p->k_std[j] * p->k_std[j], qn += (double)p->q_std[j] * p->q_std[j];
    }
    for (uint32_t j = 0; j < d; j++) p->k_std[j] /= (float)sqrt(kn / d), p->q_std[j] /= (float)sqrt(qn / d);
    double spread = sqrt(spread2 > 0 ? spread2 / d : 0);
    p->scale_spread = (float)(spread < 3 ? spread : 3);
    double key_rms = sqrt(a->key_ms / a->kv_heads);
    if (!p->qk_norm) p->key_scale = (float)(key_rms < 1e-3 ? 1e-3 : key_rms > 1e3 ? 1e3 : key_rms);
    for (uint32_t j = 0; j < d; j++) {
        /* the ranges synth_params_check accepts */
        if (!(p->k_std[j] >= 1e-4f)) p->k_std[j] = 1e-4f;
        if (!(p->q_std[j] >= 1e-4f)) p->q_std[j] = 1e-4f;
        if (p->k_mean[j] > 1e3f) p->k_mean[j] = 1e3f;
        if (p->q_mean[j] > 1e3f) p->q_mean[j] = 1e3f;
    }
}

/* The knob searches, in the order the file's opening comment gives. */
static int search_knobs(fit_ctx *f, uint32_t groups, const fathom_synth_stats *target) {
    /* The topic amplitude stays at or above the built-in 2 noise units: the
     * query's calibration scales the query until a topic key sits
     * topic_logit above the background, so with little topic content the
     * query grows without bound and every other structure with it (Gemma 3:
     * a profile whose noise alone holds more than the capture's top-d/4
     * share drove the amplitude to the floor and the top-k mass to 1). */
    if (groups & FATHOM_SYNTH_FIT_RANK) FATHOM_TRY(search_knob(f, KNOB_TOPIC_AMP, target->pca_share, 2, 50));
    /* The positional gain starts at the measured profile (1) and is
     * searched after the sinks and the concentration of each round: first,
     * against the base preset's concentration, the content would take the
     * mass the local window needs and the gain would run to its bound. */
    for (int round = 0; round < 2; round++) {
        if (!f->p.positional && (groups & FATHOM_SYNTH_FIT_RECENCY))
            FATHOM_TRY(search_knob(f, KNOB_RECENCY, target->local_mass, 0.01, 30));
        if (groups & FATHOM_SYNTH_FIT_SINKS) FATHOM_TRY(search_knob(f, KNOB_SINK_LOGIT, target->sink_mass, 0.25, 60));
        /* per layer: each layer's top-k mass, over the same range (below
         * 0.25 the mass stops growing with the logit, and the positional
         * gain searched next runs to its bound) */
        if ((groups & FATHOM_SYNTH_FIT_LAYERS) && (groups & FATHOM_SYNTH_FIT_CONCENTRATION))
            FATHOM_TRY(search_layers(f, 0.25, 60));
        else if (groups & FATHOM_SYNTH_FIT_CONCENTRATION)
            FATHOM_TRY(search_knob(f, KNOB_TOPIC_LOGIT, target->top_mass, 0.25, 60));
        /* Per-head profiles are each head's measured positional part, so
         * their gain stays 1: searched for the last-32 mass, it makes up
         * for locality the generator's content lacks by scaling every
         * head's profile, and its noise with it (docs/synthetic.md). */
        if (f->p.positional && !f->p.heads && (groups & FATHOM_SYNTH_FIT_RECENCY))
            FATHOM_TRY(search_knob(f, KNOB_RECENCY, target->local_mass, 0.1, 10));
        /* the share of the query along its target key, for target_lift,
         * after the concentration (which it moves; the next round's
         * searches run with it) */
        if (groups & FATHOM_SYNTH_FIT_TARGET) FATHOM_TRY(search_linear(f, KNOB_TARGET, target->target_lift));
        /* the channel churn, for fixed_share, after the concentration
         * (opt-in; the next round's searches run with it) */
        if (groups & FATHOM_SYNTH_FIT_CHURN) FATHOM_TRY(search_linear(f, KNOB_CHURN, target->fixed_share));
    }
    /* A per-head QK-norm preset's sink sets token 0's gap exactly
     * (src/io/synth.c): searched once more, last, after the concentration
     * has taken its share. */
    if (f->p.heads && f->p.qk_norm && (groups & FATHOM_SYNTH_FIT_SINKS))
        FATHOM_TRY(search_knob(f, KNOB_SINK_LOGIT, target->sink_mass, 0.25, 60));
    return FATHOM_OK;
}

static int fit_run(fit_ctx *f, const fathom_source *capture, const char *base_name, uint32_t groups,
                   fathom_synth_fit_report *r, profile_acc *prof) {
    /* the capture's statistics and profiles */
    memset(prof, 0, sizeof *prof);
    /* per-head profiles: the capture's own, every layer and head (f->p owns them) */
    const uint32_t per_head = FATHOM_SYNTH_FIT_HEADS | FATHOM_SYNTH_FIT_PROFILES | FATHOM_SYNTH_FIT_RECENCY;
    if ((groups & per_head) == per_head) {
        f->p.q_heads = (groups & FATHOM_SYNTH_FIT_QUERY_HEADS) != 0;
        FATHOM_CHECK_ARG(synth_heads_size(&f->p) <= SYNTH_MAX_HEAD_FLOATS,
                         "fathom_synth_fit: per-head profiles of %llu floats exceed %u (leave FATHOM_SYNTH_FIT_HEADS "
                         "out)", (unsigned long long)synth_heads_size(&f->p), SYNTH_MAX_HEAD_FLOATS);
        f->p.heads = fathom_alloc_array(synth_heads_size(&f->p), sizeof *f->p.heads);
        FATHOM_CHECK(!f->p.heads, FATHOM_ERR_NOMEM, "out of memory for per-head profiles");
        memset(f->p.heads, 0, synth_heads_size(&f->p) * sizeof *f->p.heads);
    }
    FATHOM_TRY(measure(capture, r->style, r->rope_base, f->k, 1, true, &r->target, prof, f->p.heads, f->p.q_heads, f->layer_top,
                       -1));
    /* the capture's positional profile (kept apart: the profiles ablation
     * measures prof again on the base preset) */
    if (groups & FATHOM_SYNTH_FIT_RECENCY) {
        f->p.positional = true;
        f->p.pos_gain = 1.0f;
        for (uint32_t i = 0; i < f->p.dim / 2; i++) {
            double re = prof->q_heads ? prof->pos_re[i] / prof->q_heads : 0;
            double im = prof->q_heads ? prof->pos_im[i] / prof->q_heads : 0;
            f->p.pos_re[i] = (float)(re < -1e3 ? -1e3 : re > 1e3 ? 1e3 : re);
            f->p.pos_im[i] = (float)(im < -1e3 ? -1e3 : im > 1e3 ? 1e3 : im);
        }
    }
    /* the base preset's, at the capture's shape (a built-in parametric model) */
    synth_params base = f->p;
    base.fitted = false;
    base.positional = false;
    base.heads = NULL;
    base.q_heads = false;
    base.query_churn = 0;
    snprintf(base.name, sizeof base.name, "%s", base_name);
    if (groups & FATHOM_SYNTH_FIT_PROFILES) {
        profiles_from(prof, &f->p);
        FATHOM_TRY(stats_of(f, &base, true, &r->base, NULL));
    } else {
        memset(prof, 0, sizeof *prof);
        FATHOM_TRY(stats_of(f, &base, true, &r->base, prof));
        profiles_from(prof, &f->p);
    }
    f->p.fitted = true;
    if ((groups & FATHOM_SYNTH_FIT_LAYERS) && (groups & FATHOM_SYNTH_FIT_CONCENTRATION)) {
        f->p.per_layer = true;
        for (uint32_t l = 0; l < f->p.layers; l++) f->p.topic_layers[l] = f->p.topic_logit;
    }
    FATHOM_TRY(search_knobs(f, groups, &r->target));
    if (groups & FATHOM_SYNTH_FIT_DRIFT) FATHOM_TRY(search_run(f, r->target.drift));
    FATHOM_TRY(synth_params_check(&f->p));
    return stats_of(f, &f->p, true, &r->achieved, NULL);
}

int fathom_synth_fit(fathom_synth_preset **out, const fathom_source *capture, const fathom_synth_fit_options *o,
                     fathom_synth_fit_report *report) {
    FATHOM_CHECK_ARG(out != NULL, "out is NULL");
    *out = NULL;
    FATHOM_CHECK_ARG(capture != NULL && o != NULL, "fathom_synth_fit: NULL capture or options");
    FATHOM_CHECK_ARG(o->base != NULL && o->name != NULL, "fathom_synth_fit: base and name are required");
    FATHOM_CHECK_ARG((o->fit & ~(uint32_t)(FATHOM_SYNTH_FIT_ALL | FATHOM_SYNTH_FIT_CHURN)) == 0,
                     "fathom_synth_fit: unknown fit bits 0x%x", o->fit);
    FATHOM_CHECK_ARG(isfinite(o->query_churn) && o->query_churn >= 0.0f && o->query_churn <= 4.0f,
                     "fathom_synth_fit: query_churn %g not in [0, 4]", o->query_churn);
    FATHOM_CHECK_ARG(!(o->query_churn > 0 && (o->fit & FATHOM_SYNTH_FIT_CHURN)),
                     "fathom_synth_fit: a held query_churn and FATHOM_SYNTH_FIT_CHURN exclude each other");
    fathom_source_info in;
    FATHOM_TRY(fathom_source_get_info(capture, &in));
    FATHOM_CHECK_ARG(in.dim >= 8 && in.dim <= SYNTH_MAX_DIM && in.dim % 8 == 0,
                     "fathom_synth_fit: head dim %u must be a multiple of 8 up to %u", in.dim, SYNTH_MAX_DIM);
    FATHOM_CHECK_ARG(in.q_heads / in.kv_heads <= SYNTH_MAX_GROUP, "fathom_synth_fit: group %u exceeds %u",
                     in.q_heads / in.kv_heads, SYNTH_MAX_GROUP);
    FATHOM_CHECK_ARG(in.first_query + in.positions == in.tokens,
                     "fathom_synth_fit: the capture's queries must be its last positions");
    size_t name_len = strlen(o->name);
    fit_ctx f = {.in = &in, .k = o->k, .layer_stride = o->layer_stride};
    FATHOM_CHECK_ARG(name_len > 0 && name_len < sizeof f.p.name, "fathom_synth_fit: name must be 1..%zu bytes",
                     sizeof f.p.name - 1);
    FATHOM_CHECK_ARG(synth_builtin(o->base, &f.p), "fathom_synth_fit: unknown base preset '%s'", o->base);
    if (!f.k) f.k = in.tokens / 64 > 64 ? (uint32_t)(in.tokens / 64) : 64;
    if (!f.layer_stride) f.layer_stride = in.layers / 6 ? in.layers / 6 : 1;
    fathom_synth_fit_report r;
    memset(&r, 0, sizeof r);
    r.k = f.k;
    r.style = o->style;
    r.rope_base = o->rope_base;
    if (o->style == FATHOM_ROPE_DETECT) FATHOM_TRY(detect_rope(capture, &r.style, &r.rope_base));
    else FATHOM_CHECK_ARG(isfinite(o->rope_base) && o->rope_base > 1, "fathom_synth_fit: rope_base must be > 1");
    memcpy(f.p.name, o->name, name_len + 1);
    f.p.layers = in.layers;
    f.p.kv_heads = in.kv_heads;
    f.p.group = in.q_heads / in.kv_heads;
    f.p.dim = in.dim;
    f.p.rope_base = r.rope_base;
    f.p.query_churn = o->query_churn; /* held: every search runs with it (the base preset's stays 0) */
    profile_acc *prof = malloc(sizeof *prof);
    f.layer_top = fathom_alloc_array(in.layers, sizeof *f.layer_top);
    if (!prof || !f.layer_top) {
        free(prof), free(f.layer_top);
        return fathom_fail(FATHOM_ERR_NOMEM, "out of memory for the fit");
    }
    int st = fit_run(&f, capture, o->base, o->fit ? o->fit : FATHOM_SYNTH_FIT_DEFAULT, &r, prof);
    free(prof), free(f.layer_top);
    fathom_synth_preset *p = st < 0 ? NULL : malloc(sizeof *p);
    if (!p) {
        free(f.p.heads);
        return st < 0 ? st : fathom_fail(FATHOM_ERR_NOMEM, "out of memory for a preset");
    }
    p->p = f.p;
    *out = p;
    if (report) *report = r;
    return FATHOM_OK;
}

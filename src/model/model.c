/* model — a Llama-family decoder (SmolLM2, Qwen3, Gemma 3) from a GGUF
 * file, in plain C, in the manner of llama2.c's run.c but checked against
 * the file:
 *
 *   x = token_embd[token]             (gemma3: times sqrt(embed))
 *   per layer:  h = rmsnorm(x) ; q, k, v = h Wq, h Wk, h Wv
 *               (qwen3, gemma3: q, k = rmsnorm per head) ; q, k = rope(q, k)
 *               a = attention(q, K, V) Wo   (gemma3 sliding layers: the last
 *                                            sliding_window keys only)
 *               x += a                (gemma3: x += rmsnorm(a))
 *               h = rmsnorm(x) ; f = (act(h Wgate) * h Wup) Wdown
 *               x += f                (gemma3: x += rmsnorm(f))
 *   logits = rmsnorm(x) Wout          (Wout = token_embd when tied;
 *                                      act = silu, gemma3: tanh GELU)
 *
 * Sections: kernels, loading, context, forward, sparse
 * attention. Weights are dequantized to float32 once at load. */
#include "cpu.h"
#include "internal.h"
#include "fathom_model.h"
#include "gguf_internal.h"
#include "pool.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Limits on metadata, far above any real model, so that every product of
 * them stays small and a hostile file cannot ask for absurd buffers. */
#define MAX_LAYERS 1024
#define MAX_EMBED 65536
#define MAX_HEADS 1024
#define MAX_HEAD_DIM 1024
#define MAX_FFN (1u << 20)
#define MAX_CONTEXT (1u << 24)

#define PREFILL_BATCH 64 /* tokens per forward chunk: weights are reused across them */
#define DOT_LANES 8      /* independent partial sums of every dot product */
#define ATTN_QBLOCK 16   /* prefill tokens whose queries share one pass over K and V */

/* ===================================================================== *
 * kernels
 * ===================================================================== */

/* Dot product with DOT_LANES partial sums, added in a fixed order: lane l
 * sums a[i]*b[i] for i = l mod DOT_LANES, then the lanes are added 0..7.
 * This is the plain version; tile() below computes the same sums (same
 * operations, same order), so every path gives the same bits. ISO C mode
 * keeps the compiler from fusing multiply-adds. */
static float dot(const float *a, const float *b, uint32_t n) {
    float acc[DOT_LANES] = {0};
    uint32_t i = 0;
    for (; i + DOT_LANES <= n; i += DOT_LANES)
        for (uint32_t l = 0; l < DOT_LANES; l++) acc[l] += a[i + l] * b[i + l];
    for (uint32_t l = 0; l < DOT_LANES && i + l < n; l++) acc[l] += a[i + l] * b[i + l];
    float s = 0;
    for (uint32_t l = 0; l < DOT_LANES; l++) s += acc[l];
    return s;
}

#define TILE_MAX 4

#if defined(__GNUC__)
/* out[t*out_stride + r] = dot(x_t, w_r) for nr weight rows and nt token
 * rows (at most TILE_MAX each): each weight vector loaded serves nt tokens
 * and each token vector nr rows, with the accumulators in registers (GNU
 * vector extension; nr and nt are constants where it is called, so the
 * loops unroll). Lane l of an accumulator is dot()'s partial sum l: one
 * YMM register where the caller is compiled for AVX2, two XMM otherwise,
 * the same elementwise multiplies and adds either way. */
typedef float f8 __attribute__((vector_size(32)));
/* an unaligned load of 8 floats (a macro: no vector-typed function in the
 * baseline compilation, whose ABI passes them differently) */
typedef float f8u __attribute__((vector_size(32), aligned(4), may_alias));
#define f8_load(p) (*(const f8u *)(const void *)(p))

static inline __attribute__((always_inline)) void tile(const float *w, uint32_t nr, const float *x,
                                                        uint32_t nt, uint32_t n, float *out,
                                                        uint64_t out_stride) {
    f8 acc[TILE_MAX][TILE_MAX];
    for (uint32_t r = 0; r < nr; r++)
        for (uint32_t t = 0; t < nt; t++) acc[r][t] = (f8){0, 0, 0, 0, 0, 0, 0, 0};
    uint32_t i = 0;
    for (; i + DOT_LANES <= n; i += DOT_LANES) {
        f8 wv[TILE_MAX];
        for (uint32_t r = 0; r < nr; r++) wv[r] = f8_load(w + (uint64_t)r * n + i);
        for (uint32_t t = 0; t < nt; t++) {
            const f8 xv = f8_load(x + (uint64_t)t * n + i);
            for (uint32_t r = 0; r < nr; r++) acc[r][t] += xv * wv[r];
        }
    }
    for (uint32_t r = 0; r < nr; r++)
        for (uint32_t t = 0; t < nt; t++) {
            const float *xr = x + (uint64_t)t * n, *wr = w + (uint64_t)r * n;
            float lanes[DOT_LANES];
            memcpy(lanes, &acc[r][t], sizeof lanes);
            for (uint32_t l = 0; l < DOT_LANES && i + l < n; l++) lanes[l] += xr[i + l] * wr[i + l];
            float s = 0;
            for (uint32_t l = 0; l < DOT_LANES; l++) s += lanes[l];
            out[(uint64_t)t * out_stride + r] = s;
        }
}
#else
static void tile(const float *w, uint32_t nr, const float *x, uint32_t nt, uint32_t n, float *out,
                 uint64_t out_stride) {
    for (uint32_t r = 0; r < nr; r++)
        for (uint32_t t = 0; t < nt; t++)
            out[(uint64_t)t * out_stride + r] = dot(x + (uint64_t)t * n, w + (uint64_t)r * n, n);
}
#endif

/* y[t][o] = x[t] . w[o] for t < n_tok, o < out; split over row ranges. */
typedef struct matmul_job {
    float *y;
    const float *x;
    const float *w;
    uint32_t n_tok, in, out, rows_per_task;
} matmul_job;

FATHOM_INLINE int matmul_task_body(void *arg, uint32_t task, uint32_t worker) {
    const matmul_job *j = arg;
    const uint32_t o0 = task * j->rows_per_task;
    const uint32_t o1 = o0 + j->rows_per_task < j->out ? o0 + j->rows_per_task : j->out;
    const uint32_t n = j->in;
    uint32_t o = o0;
    if (j->n_tok == 1) { /* decode: four rows per pass over x */
        for (; o + 4 <= o1; o += 4) tile(j->w + (uint64_t)o * n, 4, j->x, 1, n, j->y + o, j->out);
        for (; o < o1; o++) tile(j->w + (uint64_t)o * n, 1, j->x, 1, n, j->y + o, j->out);
        return FATHOM_OK;
    }
    /* prefill: 2 rows x 4 tokens per tile */
    for (; o < o1; o += 2) {
        const uint32_t nr = o + 2 <= o1 ? 2 : 1;
        const float *w = j->w + (uint64_t)o * n;
        uint32_t t = 0;
        for (; t + 4 <= j->n_tok; t += 4) {
            float *y = j->y + (uint64_t)t * j->out + o;
            const float *x = j->x + (uint64_t)t * n;
            if (nr == 2)
                tile(w, 2, x, 4, n, y, j->out);
            else
                tile(w, 1, x, 4, n, y, j->out);
        }
        for (; t < j->n_tok; t++)
            tile(w, nr == 2 ? 2 : 1, j->x + (uint64_t)t * n, 1, n, j->y + (uint64_t)t * j->out + o, j->out);
    }
    return FATHOM_OK;
}

/* matmul_task: the body compiled for AVX-512F, AVX2 or the baseline
 * (same bits: elementwise operations in the same order). */
FATHOM_CPU_DISPATCH(int, matmul_task, (void *arg, uint32_t task, uint32_t worker), (arg, task, worker))

static int matmul(fathom_pool *p, float *y, const float *x, const float *w, uint32_t n_tok, uint32_t in,
                  uint32_t out) {
    /* About 8 tasks per thread for balance, at least 4 rows each. */
    uint32_t per = out / (fathom_pool_threads(p) * 8);
    if (per < 4) per = 4;
    per = (per + 3) / 4 * 4; /* whole decode tiles */
    matmul_job j = {y, x, w, n_tok, in, out, per};
    return fathom_pool_run(p, matmul_task, &j, (out + per - 1) / per);
}

/* out += w * v, elementwise (restrict lets it vectorize). */
FATHOM_INLINE void axpy(float *restrict out, float w, const float *restrict v, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) out[i] += w * v[i];
}

#define PV_KEYS 64     /* keys per chunk of the prefill's p x V */
#define PV_CHANNELS 16 /* output channels per register tile of it */

#if defined(__GNUC__)
/* o[m][c0 .. c0+16) += p[m][k] * v[k][c0 .. c0+16) for k = lo .. hi-1 in
 * order, for nr (<= 4) rows: each output element gets the multiplies and
 * adds of axpy() in the same order, with the sums held in registers. */
FATHOM_INLINE void pv_tile(float *const *o, const float *const *p, uint32_t nr, const float *v, uint32_t D,
                           uint32_t c0, uint64_t lo, uint64_t hi) {
    f8 acc[4][2];
    for (uint32_t m = 0; m < nr; m++) {
        acc[m][0] = f8_load(o[m] + c0);
        acc[m][1] = f8_load(o[m] + c0 + 8);
    }
    for (uint64_t k = lo; k < hi; k++) {
        const f8 v0 = f8_load(v + k * D + c0), v1 = f8_load(v + k * D + c0 + 8);
        for (uint32_t m = 0; m < nr; m++) {
            const float w = p[m][k];
            const f8 wv = {w, w, w, w, w, w, w, w};
            acc[m][0] += wv * v0;
            acc[m][1] += wv * v1;
        }
    }
    for (uint32_t m = 0; m < nr; m++) {
        memcpy(o[m] + c0, &acc[m][0], sizeof acc[m][0]);
        memcpy(o[m] + c0 + 8, &acc[m][1], sizeof acc[m][1]);
    }
}
#else
static void pv_tile(float *const *o, const float *const *p, uint32_t nr, const float *v, uint32_t D, uint32_t c0,
                    uint64_t lo, uint64_t hi) {
    for (uint64_t k = lo; k < hi; k++)
        for (uint32_t m = 0; m < nr; m++) axpy(o[m] + c0, p[m][k], v + k * D + c0, PV_CHANNELS);
}
#endif

/* out = x / sqrt(mean(x^2) + eps) * weight, the sum in double. */
static void rmsnorm(float *out, const float *x, const float *weight, uint32_t n, float eps) {
    double ss = 0;
    for (uint32_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float inv = (float)(1.0 / sqrt(ss / n + (double)eps));
    for (uint32_t i = 0; i < n; i++) out[i] = x[i] * inv * weight[i];
}

/* Rotate one head in place at the position whose cos/sin row is given.
 * Adjacent pairs (2i, 2i+1) for GGUF llama (its Q/K rows are permuted so
 * this equals Hugging Face's rotate_half); (i, i + d/2) for NEOX. */
static void rope(float *x, uint32_t d, const float *cs, const float *sn, int neox) {
    const uint32_t half = d / 2;
    for (uint32_t i = 0; i < half; i++) {
        uint32_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        float x0 = x[a], x1 = x[b];
        x[a] = x0 * cs[i] - x1 * sn[i];
        x[b] = x0 * sn[i] + x1 * cs[i];
    }
}

/* ===================================================================== *
 * loading
 * ===================================================================== */

typedef struct layer_weights {
    float *attn_norm; /* [embed] */
    float *wq;        /* [q_heads*head_dim x embed] (rows permuted for adjacent RoPE in llama GGUF) */
    float *wk;        /* [kv_heads*head_dim x embed] */
    float *wv;        /* [kv_heads*head_dim x embed] */
    float *wo;        /* [embed x q_heads*head_dim] */
    float *q_norm;    /* [head_dim] or NULL */
    float *k_norm;    /* [head_dim] or NULL */
    float *ffn_norm;  /* [embed] */
    float *w_gate;    /* [ffn x embed] */
    float *w_up;      /* [ffn x embed] */
    float *w_down;    /* [embed x ffn] */
    float *post_attn_norm; /* [embed] gemma3, else NULL */
    float *post_ffn_norm;  /* [embed] gemma3, else NULL */
} layer_weights;

struct fathom_model {
    fathom_model_info info;
    fathom_gguf *gguf;     /* kept open: the tokenizer is built from it */
    float *token_embd;     /* [vocab x embed] */
    float *output_norm;    /* [embed] */
    float *output;         /* [vocab x embed]; == token_embd when tied */
    layer_weights *layers; /* [layers] */
    uint8_t *sliding;      /* [layers] 1: the layer attends a sliding window */
};

void fathom_model_free(fathom_model *m) {
    if (!m) return;
    if (m->layers) {
        for (uint32_t l = 0; l < m->info.layers; l++) {
            layer_weights *w = &m->layers[l];
            float *all[] = {w->attn_norm, w->wq, w->wk, w->wv, w->wo, w->q_norm, w->k_norm,
                            w->ffn_norm, w->w_gate, w->w_up, w->w_down, w->post_attn_norm,
                            w->post_ffn_norm};
            for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
        }
        free(m->layers);
    }
    if (m->output != m->token_embd) free(m->output);
    free(m->token_embd);
    free(m->output_norm);
    free(m->sliding);
    fathom_gguf_close(m->gguf);
    free(m);
}

/* Metadata "<arch>.<suffix>" as u32, required or (when def is given) optional. */
static int meta_u32(const fathom_gguf *g, const char *arch, const char *suffix, const uint32_t *def,
                    uint32_t lo, uint32_t hi, uint32_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (def && fathom_gguf_find_key(g, key) < 0) {
        *out = *def;
        return FATHOM_OK;
    }
    FATHOM_TRY(fathom_gguf_get_u32(g, key, out));
    FATHOM_CHECK(*out < lo || *out > hi, FATHOM_ERR_FORMAT, "model: %s = %u is outside [%u, %u]",
                 key, *out, lo, hi);
    return FATHOM_OK;
}

static int meta_f32(const fathom_gguf *g, const char *arch, const char *suffix, const float *def,
                    float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (def && fathom_gguf_find_key(g, key) < 0) {
        *out = *def;
        return FATHOM_OK;
    }
    FATHOM_TRY(fathom_gguf_get_f32(g, key, out));
    FATHOM_CHECK(!isfinite(*out) || *out <= 0, FATHOM_ERR_FORMAT,
                 "model: %s = %g must be finite and positive", key, (double)*out);
    return FATHOM_OK;
}

/* Tensors of the file that the model has taken (every one must be). */
typedef struct loader {
    fathom_gguf *g;
    uint8_t *used; /* [tensor_count] */
    uint64_t params;
} loader;

/* Dequantize tensor `name` of shape [rows x cols] (ggml dims {cols, rows};
 * rows 0 means a vector of cols) into a new float array. optional: a
 * missing tensor gives *out = NULL and FATHOM_OK. */
static int load_tensor(loader *ld, const char *name, uint64_t cols, uint64_t rows, int optional,
                       float **out) {
    *out = NULL;
    int64_t index = fathom_gguf_find_tensor(ld->g, name);
    if (index < 0) {
        if (optional) return FATHOM_OK;
        return fathom_fail(FATHOM_ERR_FORMAT, "model: tensor %s is missing", name);
    }
    fathom_gguf_tensor_info t;
    FATHOM_TRY(fathom_gguf_tensor_at(ld->g, (uint64_t)index, &t));
    const uint32_t want_dims = rows ? 2 : 1;
    FATHOM_CHECK(t.n_dims != want_dims || t.dims[0] != cols || (rows && t.dims[1] != rows),
                 FATHOM_ERR_FORMAT,
                 "model: tensor %s has shape [%llu, %llu, %llu, %llu] (%u dims), expected [%llu, %llu]",
                 name, (unsigned long long)t.dims[0], (unsigned long long)t.dims[1],
                 (unsigned long long)t.dims[2], (unsigned long long)t.dims[3], t.n_dims,
                 (unsigned long long)cols, (unsigned long long)(rows ? rows : 1));
    float *data = fathom_alloc_array(t.n_elements, sizeof(float));
    FATHOM_CHECK(!data, FATHOM_ERR_NOMEM, "model: out of memory for tensor %s (%llu floats)", name,
                 (unsigned long long)t.n_elements);
    int st = fathom_dequantize(t.type, t.data, t.bytes, t.n_elements, data);
    if (st < 0) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s", fathom_last_error());
        free(data);
        return fathom_fail(st, "model: tensor %s (%s): %s", name, fathom_ggml_type_name(t.type), msg);
    }
    for (uint64_t i = 0; i < t.n_elements; i++)
        if (!isfinite(data[i])) {
            free(data);
            return fathom_fail(FATHOM_ERR_NONFINITE, "model: tensor %s has a non-finite value at %llu",
                               name, (unsigned long long)i);
        }
    ld->used[index] = 1;
    ld->params += t.n_elements;
    *out = data;
    return FATHOM_OK;
}

/* Is "<arch>.<suffix>" in the file? */
static bool has_meta(const fathom_gguf *g, const char *arch, const char *suffix) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return fathom_gguf_find_key(g, key) >= 0;
}

/* The layers that attend a sliding window: <arch>.attention.sliding_window_pattern
 * as a period n (layer l slides iff l % n < n - 1, llama.cpp's
 * set_swa_pattern) or as one bool per layer; gemma3 files without the key
 * have period 6 (llama.cpp's fixed value for gemma3). */
static int load_sliding_layers(fathom_model *m, bool gemma) {
    const fathom_gguf *g = m->gguf;
    fathom_model_info *in = &m->info;
    m->sliding = fathom_calloc_array(in->layers, 1);
    FATHOM_CHECK(!m->sliding, FATHOM_ERR_NOMEM, "model: out of memory");
    if (!in->sliding_window) return FATHOM_OK;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", in->arch);
    fathom_gguf_value v;
    if (fathom_gguf_find_key(g, key) >= 0) {
        FATHOM_TRY(fathom_gguf_get(g, key, &v));
        if (v.type == FATHOM_GGUF_ARRAY) {
            FATHOM_CHECK(v.elem_type != FATHOM_GGUF_BOOL || v.count != in->layers, FATHOM_ERR_FORMAT,
                         "model: %s must be a bool per layer (%u)", key, in->layers);
            for (uint32_t l = 0; l < in->layers; l++) {
                fathom_gguf_value e;
                int b;
                FATHOM_TRY(fathom_gguf_array_get(&v, l, &e));
                FATHOM_TRY(fathom_gguf_value_bool(&e, &b));
                m->sliding[l] = (uint8_t)b;
            }
            return FATHOM_OK;
        }
        FATHOM_TRY(meta_u32(g, in->arch, "attention.sliding_window_pattern", NULL, 0, MAX_LAYERS,
                            &in->sliding_pattern));
    } else {
        FATHOM_CHECK(!gemma, FATHOM_ERR_UNSUPPORTED,
                     "model: %s.attention.sliding_window without a pattern is not supported",
                     in->arch);
        in->sliding_pattern = 6;
    }
    for (uint32_t l = 0; l < in->layers; l++)
        m->sliding[l] = in->sliding_pattern && l % in->sliding_pattern < in->sliding_pattern - 1;
    return FATHOM_OK;
}

/* What gemma3 adds (the other architectures get the neutral values), and
 * keys that change the computation in ways this code does not run. */
static int load_gemma_hparams(fathom_model *m, bool gemma) {
    const fathom_gguf *g = m->gguf;
    fathom_model_info *in = &m->info;
    const char *arch = in->arch;
    FATHOM_CHECK(has_meta(g, arch, "attn_logit_softcapping"), FATHOM_ERR_UNSUPPORTED,
                 "model: %s.attn_logit_softcapping is not supported", arch);
    FATHOM_CHECK(has_meta(g, arch, "rope.scaling.factor") &&
                     !has_meta(g, arch, "rope.scaling.type"),
                 FATHOM_ERR_UNSUPPORTED, "model: %s.rope.scaling.factor is not supported", arch);
    in->post_norms = gemma;
    in->gelu = gemma;
    in->embed_scale = gemma ? sqrtf((float)in->embed) : 1.0f; /* llama.cpp: sqrtf(n_embd) */
    /* llama.cpp's gemma3: 1/sqrt(head_dim) (query_pre_attn_scalar = head_dim)
     * except the 27B (62 layers), whose scalar is embed / heads. */
    double scalar = gemma && in->layers == 62 ? (double)in->embed / in->q_heads : in->head_dim;
    in->attn_scale = (float)(1.0 / sqrt(scalar));
    if (has_meta(g, arch, "attention.scale"))
        FATHOM_TRY(meta_f32(g, arch, "attention.scale", NULL, &in->attn_scale));
    in->logit_softcap = 0;
    if (has_meta(g, arch, "final_logit_softcapping"))
        FATHOM_TRY(meta_f32(g, arch, "final_logit_softcapping", NULL, &in->logit_softcap));
    in->rope_base_swa = in->rope_base;
    in->sliding_window = 0;
    if (gemma || has_meta(g, arch, "attention.sliding_window")) {
        FATHOM_TRY(meta_u32(g, arch, "attention.sliding_window", NULL, 1, MAX_CONTEXT,
                            &in->sliding_window));
        const float def_swa = gemma ? 10000.0f : in->rope_base; /* llama.cpp's gemma3 value */
        FATHOM_TRY(meta_f32(g, arch, "rope.freq_base_swa", &def_swa, &in->rope_base_swa));
    }
    return load_sliding_layers(m, gemma);
}

static int load_hparams(fathom_model *m) {
    const fathom_gguf *g = m->gguf;
    fathom_model_info *in = &m->info;
    const char *arch;
    uint64_t arch_len;
    FATHOM_TRY(fathom_gguf_get_string(g, "general.architecture", &arch, &arch_len));
    FATHOM_CHECK(strcmp(arch, "llama") && strcmp(arch, "qwen3") && strcmp(arch, "gemma3"),
                 FATHOM_ERR_UNSUPPORTED,
                 "model: architecture \"%.40s\" is not supported (llama, qwen3, gemma3)", arch);
    snprintf(in->arch, sizeof in->arch, "%s", arch);
    const char *name;
    if (fathom_gguf_find_key(g, "general.name") >= 0 &&
        fathom_gguf_get_string(g, "general.name", &name, NULL) == FATHOM_OK)
        snprintf(in->name, sizeof in->name, "%s", name);
    const bool gemma = !strcmp(arch, "gemma3");
    in->rope_neox = !strcmp(arch, "qwen3") || gemma;

    FATHOM_TRY(meta_u32(g, arch, "block_count", NULL, 1, MAX_LAYERS, &in->layers));
    FATHOM_TRY(meta_u32(g, arch, "embedding_length", NULL, 1, MAX_EMBED, &in->embed));
    FATHOM_TRY(meta_u32(g, arch, "feed_forward_length", NULL, 1, MAX_FFN, &in->ffn));
    FATHOM_TRY(meta_u32(g, arch, "attention.head_count", NULL, 1, MAX_HEADS, &in->q_heads));
    FATHOM_TRY(meta_u32(g, arch, "attention.head_count_kv", &in->q_heads, 1, MAX_HEADS, &in->kv_heads));
    FATHOM_TRY(meta_u32(g, arch, "context_length", NULL, 1, MAX_CONTEXT, &in->context_length));
    FATHOM_CHECK(in->q_heads % in->kv_heads, FATHOM_ERR_FORMAT,
                 "model: head_count %u is not a multiple of head_count_kv %u", in->q_heads, in->kv_heads);
    const uint32_t def_head_dim = in->embed / in->q_heads;
    FATHOM_TRY(meta_u32(g, arch, "attention.key_length", &def_head_dim, 2, MAX_HEAD_DIM, &in->head_dim));
    uint32_t value_dim, rope_dim;
    FATHOM_TRY(meta_u32(g, arch, "attention.value_length", &in->head_dim, 1, MAX_HEAD_DIM, &value_dim));
    FATHOM_CHECK(in->head_dim < 2 || in->head_dim % 2, FATHOM_ERR_FORMAT,
                 "model: head dimension %u must be even and >= 2", in->head_dim);
    FATHOM_CHECK(value_dim != in->head_dim, FATHOM_ERR_UNSUPPORTED,
                 "model: value_length %u differs from key_length %u", value_dim, in->head_dim);
    FATHOM_TRY(meta_u32(g, arch, "rope.dimension_count", &in->head_dim, 1, MAX_HEAD_DIM, &rope_dim));
    FATHOM_CHECK(rope_dim != in->head_dim, FATHOM_ERR_UNSUPPORTED,
                 "model: partial RoPE (rope.dimension_count %u of head dim %u) is not supported",
                 rope_dim, in->head_dim);
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if (fathom_gguf_find_key(g, key) >= 0) {
        const char *type;
        FATHOM_TRY(fathom_gguf_get_string(g, key, &type, NULL));
        FATHOM_CHECK(strcmp(type, "none"), FATHOM_ERR_UNSUPPORTED,
                     "model: RoPE scaling \"%.40s\" is not supported", type);
    }
    const float def_base = 10000.0f;
    FATHOM_TRY(meta_f32(g, arch, "rope.freq_base", &def_base, &in->rope_base));
    FATHOM_TRY(meta_f32(g, arch, "attention.layer_norm_rms_epsilon", NULL, &in->rms_eps));
    return load_gemma_hparams(m, gemma);
}

static int load_weights(fathom_model *m, loader *ld) {
    fathom_model_info *in = &m->info;
    const uint64_t E = in->embed, F = in->ffn, D = in->head_dim;
    const uint64_t QD = (uint64_t)in->q_heads * D, KD = (uint64_t)in->kv_heads * D;

    /* The vocabulary is token_embd's row count; vocab_size must agree. */
    fathom_gguf_tensor_info te;
    FATHOM_TRY(fathom_gguf_tensor(ld->g, "token_embd.weight", &te));
    FATHOM_CHECK(te.n_dims != 2 || te.dims[1] < 1 || te.dims[1] > INT32_MAX, FATHOM_ERR_FORMAT,
                 "model: token_embd.weight must be 2-D with 1..2^31-1 rows");
    in->vocab = (uint32_t)te.dims[1];
    uint32_t vocab_meta;
    FATHOM_TRY(meta_u32(ld->g, in->arch, "vocab_size", &in->vocab, 1, INT32_MAX, &vocab_meta));
    FATHOM_CHECK(vocab_meta != in->vocab, FATHOM_ERR_FORMAT,
                 "model: %s.vocab_size %u differs from token_embd rows %u", in->arch, vocab_meta,
                 in->vocab);

    FATHOM_TRY(load_tensor(ld, "token_embd.weight", E, in->vocab, 0, &m->token_embd));
    FATHOM_TRY(load_tensor(ld, "output_norm.weight", E, 0, 0, &m->output_norm));
    FATHOM_TRY(load_tensor(ld, "output.weight", E, in->vocab, 1, &m->output));
    in->tied_output = m->output == NULL;
    if (in->tied_output) m->output = m->token_embd;

    m->layers = fathom_calloc_array(in->layers, sizeof *m->layers);
    FATHOM_CHECK(!m->layers, FATHOM_ERR_NOMEM, "model: out of memory");
    in->qk_norm = fathom_gguf_find_tensor(ld->g, "blk.0.attn_q_norm.weight") >= 0;
    for (uint32_t l = 0; l < in->layers; l++) {
        layer_weights *w = &m->layers[l];
        char name[96];
#define LOAD(field, suffix, cols, rows, optional)                                                  \
    do {                                                                                           \
        snprintf(name, sizeof name, "blk.%u.%s.weight", l, suffix);                                \
        FATHOM_TRY(load_tensor(ld, name, cols, rows, optional, &w->field));                        \
    } while (0)
        LOAD(attn_norm, "attn_norm", E, 0, 0);
        LOAD(wq, "attn_q", E, QD, 0);
        LOAD(wk, "attn_k", E, KD, 0);
        LOAD(wv, "attn_v", E, KD, 0);
        LOAD(wo, "attn_output", QD, E, 0);
        LOAD(ffn_norm, "ffn_norm", E, 0, 0);
        LOAD(w_gate, "ffn_gate", E, F, 0);
        LOAD(w_up, "ffn_up", E, F, 0);
        LOAD(w_down, "ffn_down", F, E, 0);
        if (in->qk_norm) {
            LOAD(q_norm, "attn_q_norm", D, 0, 0);
            LOAD(k_norm, "attn_k_norm", D, 0, 0);
        }
        if (in->post_norms) {
            LOAD(post_attn_norm, "post_attention_norm", E, 0, 0);
            LOAD(post_ffn_norm, "post_ffw_norm", E, 0, 0);
        }
#undef LOAD
    }
    /* Anything left over (biases, rope_freqs, MoE experts, ...) would change
     * the result if ignored. */
    const uint64_t n_tensors = fathom_gguf_tensor_count(ld->g);
    for (uint64_t i = 0; i < n_tensors; i++)
        if (!ld->used[i]) {
            fathom_gguf_tensor_info t;
            FATHOM_TRY(fathom_gguf_tensor_at(ld->g, i, &t));
            return fathom_fail(FATHOM_ERR_UNSUPPORTED, "model: tensor %s is not used by this %s model",
                               t.name, in->arch);
        }
    in->params = ld->params;
    return FATHOM_OK;
}

/* Validate and load the model whose GGUF the caller opened into m->gguf
 * (st: the open's status); frees m on failure. */
static int model_load(fathom_model **out, fathom_model *m, int st) {
    loader ld = {m->gguf, NULL, 0};
    if (st == FATHOM_OK) st = load_hparams(m);
    if (st == FATHOM_OK) {
        ld.used = fathom_calloc_array(fathom_gguf_tensor_count(m->gguf) + 1, 1);
        st = ld.used ? load_weights(m, &ld) : fathom_fail(FATHOM_ERR_NOMEM, "model: out of memory");
    }
    free(ld.used);
    if (st < 0) {
        fathom_model_free(m);
        return st;
    }
    *out = m;
    return FATHOM_OK;
}

int fathom_model_open(fathom_model **out, const char *path) {
    FATHOM_CHECK_ARG(out, "fathom_model_open: out is NULL");
    *out = NULL;
    FATHOM_CHECK_ARG(path, "fathom_model_open: path is NULL");
    fathom_model *m = calloc(1, sizeof *m);
    FATHOM_CHECK(!m, FATHOM_ERR_NOMEM, "model: out of memory");
    return model_load(out, m, fathom_gguf_open(&m->gguf, path));
}

int fathom_model_open_memory(fathom_model **out, const void *data, uint64_t size) {
    FATHOM_CHECK_ARG(out, "fathom_model_open_memory: out is NULL");
    *out = NULL;
    FATHOM_CHECK_ARG(data || size == 0, "fathom_model_open_memory: data is NULL");
    fathom_model *m = calloc(1, sizeof *m);
    FATHOM_CHECK(!m, FATHOM_ERR_NOMEM, "model: out of memory");
    return model_load(out, m, fathom_gguf_open_memory(&m->gguf, data, size));
}

int fathom_model_get_info(const fathom_model *model, fathom_model_info *info) {
    FATHOM_CHECK_ARG(model, "fathom_model_get_info: model is NULL");
    FATHOM_CHECK_ARG(info, "fathom_model_get_info: info is NULL");
    *info = model->info;
    return FATHOM_OK;
}

int fathom_model_layer_sliding(const fathom_model *model, uint32_t layer) {
    FATHOM_CHECK_ARG(model, "fathom_model_layer_sliding: model is NULL");
    FATHOM_CHECK_ARG(layer < model->info.layers, "fathom_model_layer_sliding: layer %u of %u", layer,
                     model->info.layers);
    return model->sliding[layer];
}

/* ===================================================================== *
 * context
 * ===================================================================== */

/* Scratch of one KV head's sparse attention (tasks run per KV head). */
typedef struct sparse_scratch {
    void *index;     /* fathom_index_scratch_size(d, G) */
    float *scores;   /* [G x cap] */
    uint64_t *work;  /* [cap] */
    uint32_t *idx;   /* [G x min(k, cap)] */
    double scan_bytes, selected, visible; /* this step */
} sparse_scratch;

typedef struct sparse_state {
    fathom_method method;
    uint32_t k;
    fathom_index **heads;    /* [layers x kv_heads] the method's index of each (layer, KV head) */
    sparse_scratch *scratch; /* [kv_heads] */
} sparse_state;

struct fathom_ctx {
    const fathom_model *model;
    uint32_t cap;     /* positions the cache holds */
    uint64_t n;       /* positions filled */
    fathom_pool *pool;
    float *k_cache;   /* [layers][kv_heads][cap][d] after RoPE / QK-norm */
    float *v_cache;   /* [layers][kv_heads][cap][d] */
    float *rope_cos;  /* [cap][d/2] */
    float *rope_sin;  /* [cap][d/2] */
    float *rope_cos_swa, *rope_sin_swa; /* [cap][d/2] sliding layers; == rope_cos/sin when the bases agree */
    /* activations of up to PREFILL_BATCH tokens */
    float *x;         /* [B x embed] the residual stream */
    float *xn;        /* [B x embed] normalized */
    float *q;         /* [B x q_heads*d] */
    float *k;         /* [B x kv_heads*d] */
    float *v;         /* [B x kv_heads*d] */
    float *att;       /* [B x q_heads*d] attention outputs */
    float *proj;      /* [B x embed] */
    float *gate;      /* [B x ffn] */
    float *up;        /* [B x ffn] */
    float *scores;    /* [threads x ATTN_QBLOCK*G x cap] attention scratch */
    double *sums;     /* [threads x ATTN_QBLOCK*G] */
    float *qblock;    /* [threads x ATTN_QBLOCK*G x d] a block's queries, contiguous */
    /* query recording (capture) */
    float *rec;
    uint64_t rec_first;
    uint32_t rec_count;
    fathom_progress_fn progress;
    void *progress_user;
    sparse_state *sparse; /* NULL: dense decode */
    fathom_trace_fn trace; /* NULL: no decode trace */
    void *trace_user;
    fathom_ctx_stats stats;
    int broken; /* a forward pass failed half-way: the cache is inconsistent until reset */
};

static void sparse_free(sparse_state *s, const fathom_model_info *in) {
    if (!s) return;
    if (s->heads)
        for (uint64_t i = 0; i < (uint64_t)in->layers * in->kv_heads; i++) fathom_index_free(s->heads[i]);
    if (s->scratch)
        for (uint32_t i = 0; i < in->kv_heads; i++) {
            sparse_scratch *c = &s->scratch[i];
            free(c->index);
            free(c->scores);
            free(c->work);
            free(c->idx);
        }
    free(s->heads);
    free(s->scratch);
    free(s);
}

void fathom_ctx_free(fathom_ctx *ctx) {
    if (!ctx) return;
    fathom_pool_free(ctx->pool);
    sparse_free(ctx->sparse, &ctx->model->info);
    if (ctx->rope_cos_swa != ctx->rope_cos) free(ctx->rope_cos_swa);
    if (ctx->rope_sin_swa != ctx->rope_sin) free(ctx->rope_sin_swa);
    float *all[] = {ctx->k_cache, ctx->v_cache, ctx->rope_cos, ctx->rope_sin, ctx->x, ctx->xn,
                    ctx->q, ctx->k, ctx->v, ctx->att, ctx->proj, ctx->gate, ctx->up, ctx->scores};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    free(ctx->sums);
    free(ctx->qblock);
    free(ctx);
}

/* theta_i = base^(-2i/d); angles in double so long contexts keep their
 * precision, then rounded once. */
static void rope_table(float *cs, float *sn, uint64_t n_ctx, uint64_t D, float base) {
    for (uint64_t p = 0; p < n_ctx; p++)
        for (uint64_t i = 0; i < D / 2; i++) {
            double theta = pow((double)base, -2.0 * (double)i / (double)D);
            double a = (double)p * theta;
            cs[p * (D / 2) + i] = (float)cos(a);
            sn[p * (D / 2) + i] = (float)sin(a);
        }
}

int fathom_ctx_create(fathom_ctx **out, const fathom_model *model, uint32_t n_ctx,
                      uint32_t threads) {
    FATHOM_CHECK_ARG(out, "fathom_ctx_create: out is NULL");
    *out = NULL;
    FATHOM_CHECK_ARG(model, "fathom_ctx_create: model is NULL");
    const fathom_model_info *in = &model->info;
    if (n_ctx == 0) n_ctx = in->context_length;
    FATHOM_CHECK_ARG(n_ctx <= MAX_CONTEXT, "fathom_ctx_create: n_ctx %u is above %u", n_ctx,
                     MAX_CONTEXT);
    FATHOM_CHECK_ARG(threads <= 1024, "fathom_ctx_create: %u threads is too many", threads);
    if (threads == 0) threads = fathom_default_threads();
    if (threads == 0) threads = 1;

    fathom_ctx *c = calloc(1, sizeof *c);
    FATHOM_CHECK(!c, FATHOM_ERR_NOMEM, "model: out of memory for the context");
    c->model = model;
    c->cap = n_ctx;
    const uint64_t D = in->head_dim, B = PREFILL_BATCH;
    const uint64_t QD = in->q_heads * D, KD = in->kv_heads * D;
    uint64_t cache = 0;
    bool ok = fathom_mul_u64((uint64_t)in->layers * in->kv_heads, (uint64_t)n_ctx * D, &cache);
    if (ok) {
        c->k_cache = fathom_alloc_array(cache, sizeof(float));
        c->v_cache = fathom_alloc_array(cache, sizeof(float));
        c->rope_cos = fathom_alloc_array((uint64_t)n_ctx, D / 2 * sizeof(float));
        c->rope_sin = fathom_alloc_array((uint64_t)n_ctx, D / 2 * sizeof(float));
        c->x = fathom_alloc_array(B * in->embed, sizeof(float));
        c->xn = fathom_alloc_array(B * in->embed, sizeof(float));
        c->q = fathom_alloc_array(B * QD, sizeof(float));
        c->k = fathom_alloc_array(B * KD, sizeof(float));
        c->v = fathom_alloc_array(B * KD, sizeof(float));
        c->att = fathom_alloc_array(B * QD, sizeof(float));
        c->proj = fathom_alloc_array(B * in->embed, sizeof(float));
        c->gate = fathom_alloc_array(B * in->ffn, sizeof(float));
        c->up = fathom_alloc_array(B * in->ffn, sizeof(float));
        c->scores = fathom_alloc_array((uint64_t)threads * ATTN_QBLOCK * (in->q_heads / in->kv_heads),
                                       (uint64_t)n_ctx * sizeof(float));
        c->qblock = fathom_alloc_array((uint64_t)threads * ATTN_QBLOCK * (in->q_heads / in->kv_heads),
                                       D * sizeof(float));
        c->sums = fathom_alloc_array((uint64_t)threads * ATTN_QBLOCK * (in->q_heads / in->kv_heads),
                                     sizeof(double));
    }
    if (!ok || !c->k_cache || !c->v_cache || !c->rope_cos || !c->rope_sin || !c->x || !c->xn ||
        !c->q || !c->k || !c->v || !c->att || !c->proj || !c->gate || !c->up || !c->scores || !c->sums ||
        !c->qblock) {
        fathom_ctx_free(c);
        return fathom_fail(FATHOM_ERR_NOMEM, "model: out of memory for a context of %u positions",
                           n_ctx);
    }
    rope_table(c->rope_cos, c->rope_sin, n_ctx, D, in->rope_base);
    c->rope_cos_swa = c->rope_cos;
    c->rope_sin_swa = c->rope_sin;
    int st = FATHOM_OK;
    if (in->rope_base_swa != in->rope_base) {
        c->rope_cos_swa = fathom_alloc_array((uint64_t)n_ctx, D / 2 * sizeof(float));
        c->rope_sin_swa = fathom_alloc_array((uint64_t)n_ctx, D / 2 * sizeof(float));
        if (!c->rope_cos_swa || !c->rope_sin_swa)
            st = fathom_fail(FATHOM_ERR_NOMEM, "model: out of memory for a context of %u positions",
                             n_ctx);
        else
            rope_table(c->rope_cos_swa, c->rope_sin_swa, n_ctx, D, in->rope_base_swa);
    }
    if (st == FATHOM_OK) st = fathom_pool_create(&c->pool, threads);
    if (st < 0) {
        fathom_ctx_free(c);
        return st;
    }
    *out = c;
    return FATHOM_OK;
}

uint64_t fathom_ctx_length(const fathom_ctx *ctx) { return ctx ? ctx->n : 0; }
uint64_t fathom_ctx_capacity(const fathom_ctx *ctx) { return ctx ? ctx->cap : 0; }

static float *cache_row(const fathom_ctx *c, float *cache, uint32_t layer, uint32_t kvh, uint64_t pos) {
    const fathom_model_info *in = &c->model->info;
    return cache + (((uint64_t)layer * in->kv_heads + kvh) * c->cap + pos) * in->head_dim;
}

int fathom_ctx_kv(const fathom_ctx *ctx, uint32_t layer, uint32_t kv_head, const float **keys,
                  const float **values) {
    FATHOM_CHECK_ARG(ctx, "fathom_ctx_kv: ctx is NULL");
    FATHOM_CHECK_ARG(keys && values, "fathom_ctx_kv: NULL output");
    FATHOM_CHECK_ARG(layer < ctx->model->info.layers, "fathom_ctx_kv: layer %u of %u", layer,
                     ctx->model->info.layers);
    FATHOM_CHECK_ARG(kv_head < ctx->model->info.kv_heads, "fathom_ctx_kv: KV head %u of %u",
                     kv_head, ctx->model->info.kv_heads);
    *keys = cache_row(ctx, ctx->k_cache, layer, kv_head, 0);
    *values = cache_row(ctx, ctx->v_cache, layer, kv_head, 0);
    return FATHOM_OK;
}

int fathom_ctx_record_queries(fathom_ctx *ctx, uint64_t first, uint32_t count, float *buffer) {
    FATHOM_CHECK_ARG(ctx, "fathom_ctx_record_queries: ctx is NULL");
    if (!buffer) {
        ctx->rec = NULL;
        ctx->rec_count = 0;
        return FATHOM_OK;
    }
    FATHOM_CHECK_ARG(count > 0, "fathom_ctx_record_queries: count is 0");
    FATHOM_CHECK_ARG(first < ctx->cap && count <= ctx->cap - first,
                     "fathom_ctx_record_queries: positions [%llu, +%u) exceed the capacity %u",
                     (unsigned long long)first, count, ctx->cap);
    ctx->rec = buffer;
    ctx->rec_first = first;
    ctx->rec_count = count;
    return FATHOM_OK;
}

int fathom_ctx_set_progress(fathom_ctx *ctx, fathom_progress_fn fn, void *user) {
    FATHOM_CHECK_ARG(ctx, "fathom_ctx_set_progress: ctx is NULL");
    ctx->progress = fn;
    ctx->progress_user = user;
    return FATHOM_OK;
}

int fathom_ctx_set_trace(fathom_ctx *ctx, fathom_trace_fn fn, void *user) {
    FATHOM_CHECK_ARG(ctx, "fathom_ctx_set_trace: ctx is NULL");
    ctx->trace = fn;
    ctx->trace_user = user;
    return FATHOM_OK;
}

int fathom_ctx_get_stats(const fathom_ctx *ctx, fathom_ctx_stats *stats) {
    FATHOM_CHECK_ARG(ctx, "fathom_ctx_get_stats: ctx is NULL");
    FATHOM_CHECK_ARG(stats, "fathom_ctx_get_stats: stats is NULL");
    *stats = ctx->stats;
    return FATHOM_OK;
}

/* ===================================================================== *
 * sparse attention of decode steps (§2: sink + local + top-k per query head)
 * ===================================================================== */

/* Append cached keys [pos0, pos0+count) of one layer to its indexes. */
static int sparse_append(fathom_ctx *c, uint32_t layer, uint64_t pos0, uint64_t count) {
    sparse_state *s = c->sparse;
    if (!s || count == 0 || c->model->sliding[layer]) return FATHOM_OK; /* sliding layers attend densely */
    for (uint32_t kvh = 0; kvh < c->model->info.kv_heads; kvh++) {
        FATHOM_TRY(fathom_index_append(s->heads[(uint64_t)layer * c->model->info.kv_heads + kvh],
                                       cache_row(c, c->k_cache, layer, kvh, pos0), count));
    }
    return FATHOM_OK;
}

/* Scores [G x n_vis] of the group's queries qg [G x d] for one KV head. */
static int sparse_scores(const fathom_ctx *c, const sparse_state *s, const fathom_index *hs,
                         sparse_scratch *sc, const float *qg, const float *keys, uint64_t n_vis) {
    const fathom_model_info *in = &c->model->info;
    const uint32_t D = in->head_dim, G = in->q_heads / in->kv_heads;
    const fathom_method *m = &s->method;
    uint64_t bytes = 0;
    if (m->kind == FATHOM_METHOD_DENSE)
        return fathom_fail(FATHOM_ERR_STATE, "model: dense has no sparse scorer");
    if (m->kind == FATHOM_METHOD_ORACLE) {
        /* Exact scores (what reading bf16 keys would give, in float). */
        for (uint32_t h = 0; h < G; h++)
            for (uint64_t i = 0; i < n_vis; i++)
                sc->scores[h * n_vis + i] = dot(qg + h * D, keys + i * D, D);
        bytes = n_vis * (uint64_t)D * 2;
    } else {
        FATHOM_TRY(fathom_index_scores(hs, m, m->param, G, qg, n_vis, sc->scores, sc->index, NULL, &bytes));
    }
    sc->scan_bytes += (double)bytes;
    return FATHOM_OK;
}

typedef struct sparse_job {
    fathom_ctx *c;
    uint32_t layer;
    uint64_t pos;
} sparse_job;

static int sparse_head_attend(fathom_ctx *c, uint32_t layer, uint32_t kvh, uint64_t pos) {
    const fathom_model_info *in = &c->model->info;
    const uint32_t D = in->head_dim, G = in->q_heads / in->kv_heads;
    const sparse_state *s = c->sparse;
    const fathom_index *hs = s->heads[(uint64_t)layer * in->kv_heads + kvh];
    sparse_scratch *sc = &s->scratch[kvh];
    const uint64_t n_vis = pos + 1;
    const float *qg = c->q + (uint64_t)kvh * G * D; /* the step's one token */
    const float *keys = cache_row(c, c->k_cache, layer, kvh, 0);
    const float *values = cache_row(c, c->v_cache, layer, kvh, 0);
    FATHOM_TRY(sparse_scores(c, s, hs, sc, qg, keys, n_vis));
    const uint64_t idx_cap = s->k < c->cap ? s->k : c->cap;
    for (uint32_t h = 0; h < G; h++) {
        uint32_t *idx = sc->idx + h * idx_cap, count;
        FATHOM_TRY(fathom_select(sc->scores + h * n_vis, n_vis, s->k, FATHOM_SINK_TOKENS,
                                 FATHOM_LOCAL_TOKENS, sc->work, idx, &count));
        FATHOM_TRY(fathom_attend(D, qg + h * D, keys, values, idx, count,
                                 c->att + ((uint64_t)kvh * G + h) * D));
        sc->selected += count;
        sc->visible += (double)n_vis;
        if (c->trace) {
            const fathom_method_kind kind = s->method.kind;
            const bool planes = kind != FATHOM_METHOD_ORACLE && kind != FATHOM_METHOD_LANDMARK;
            const fathom_trace_record rec = {
                pos, layer, kvh, h, D, planes ? fathom_index_scratch_depths(sc->index, D, G) : NULL,
                idx, count};
            c->trace(&rec, c->trace_user);
        }
    }
    return FATHOM_OK;
}

static int sparse_task(void *arg, uint32_t task, uint32_t worker) {
    const sparse_job *j = arg;
    return sparse_head_attend(j->c, j->layer, task, j->pos);
}


/* Per-head statistics from one calibration layer: keys [Hkv x n x d],
 * queries [Hq x P x d]. */
static int sparse_calibrate_layer(sparse_state *s, const fathom_model_info *in, uint32_t layer,
                                  const float *q, const float *k, uint64_t n, uint32_t P) {
    const uint32_t D = in->head_dim, G = in->q_heads / in->kv_heads;
    for (uint32_t kvh = 0; kvh < in->kv_heads; kvh++) {
        const fathom_index_calib cal = {k + (uint64_t)kvh * n * D, n, q + (uint64_t)kvh * G * P * D,
                                        (uint64_t)G * P, 0};
        FATHOM_TRY(fathom_index_calibrate(s->heads[(uint64_t)layer * in->kv_heads + kvh], &cal));
    }
    return FATHOM_OK;
}

/* The calibration capture holds every layer of the model, or only its
 * global layers in order (`fathom capture --global-only`); sliding layers
 * attend densely and take no statistics. */
static int sparse_calibrate(sparse_state *s, const fathom_model *m, const fathom_source *calib) {
    const fathom_model_info *in = &m->info;
    fathom_source_info ci;
    FATHOM_TRY(fathom_source_get_info(calib, &ci));
    uint32_t global = 0;
    for (uint32_t l = 0; l < in->layers; l++) global += !m->sliding[l];
    const bool global_only = ci.layers == global && global < in->layers;
    FATHOM_CHECK((ci.layers != in->layers && !global_only) || ci.q_heads != in->q_heads ||
                     ci.kv_heads != in->kv_heads || ci.dim != in->head_dim,
                 FATHOM_ERR_INVALID_ARG,
                 "model: calibration has %u layers, %u/%u heads of dim %u; the model %u (%u global), %u/%u, %u",
                 ci.layers, ci.q_heads, ci.kv_heads, ci.dim, in->layers, global, in->q_heads, in->kv_heads,
                 in->head_dim);
    FATHOM_CHECK(ci.tokens < 2 || ci.positions < 1, FATHOM_ERR_INVALID_ARG,
                 "model: calibration needs >= 2 keys and >= 1 query per head");
    float *q = fathom_alloc_array((uint64_t)ci.q_heads * ci.positions, (uint64_t)ci.dim * sizeof(float));
    float *k = fathom_alloc_array((uint64_t)ci.kv_heads * ci.tokens, (uint64_t)ci.dim * sizeof(float));
    int st = (q && k) ? FATHOM_OK : fathom_fail(FATHOM_ERR_NOMEM, "model: out of memory for calibration");
    for (uint32_t l = 0, src = 0; st == FATHOM_OK && l < in->layers; l++) {
        if (m->sliding[l]) {
            src += !global_only;
            continue;
        }
        st = fathom_source_layer(calib, src++, q, k, NULL);
        if (st == FATHOM_OK) st = sparse_calibrate_layer(s, in, l, q, k, ci.tokens, ci.positions);
    }
    free(q);
    free(k);
    return st;
}

static int sparse_create(fathom_ctx *c, const fathom_method *method, uint32_t k,
                         const fathom_source *calib, sparse_state **out) {
    const fathom_model_info *in = &c->model->info;
    const uint32_t D = in->head_dim, G = in->q_heads / in->kv_heads;
    FATHOM_CHECK((fathom_method_needs(method) & FATHOM_NEEDS_CALIB) && !calib, FATHOM_ERR_UNSUPPORTED,
                 "model: %s needs calibration statistics (a capture of this model)", method->name);
    sparse_state *s = calloc(1, sizeof *s);
    FATHOM_CHECK(!s, FATHOM_ERR_NOMEM, "model: out of memory");
    *out = s;
    s->method = *method;
    s->k = k;
    s->heads = fathom_calloc_array((uint64_t)in->layers * in->kv_heads, sizeof *s->heads);
    s->scratch = fathom_calloc_array(in->kv_heads, sizeof *s->scratch);
    FATHOM_CHECK(!s->heads || !s->scratch, FATHOM_ERR_NOMEM, "model: out of memory");
    const uint64_t idx_cap = k < c->cap ? k : c->cap;
    for (uint32_t kvh = 0; kvh < in->kv_heads; kvh++) {
        sparse_scratch *sc = &s->scratch[kvh];
        sc->index = malloc(fathom_index_scratch_size(D, G));
        sc->scores = fathom_alloc_array((uint64_t)G * c->cap, sizeof(float));
        sc->work = fathom_alloc_array(c->cap, sizeof(uint64_t));
        sc->idx = fathom_alloc_array((uint64_t)G * idx_cap, sizeof(uint32_t));
        FATHOM_CHECK(!sc->index || !sc->scores || !sc->work || !sc->idx, FATHOM_ERR_NOMEM,
                     "model: out of memory for sparse attention scratch");
    }
    /* Sliding layers attend their window densely: no index (heads[] NULL). */
    for (uint64_t i = 0; i < (uint64_t)in->layers * in->kv_heads; i++)
        if (!c->model->sliding[i / in->kv_heads]) FATHOM_TRY(fathom_index_create(&s->heads[i], method, 1, D, 0));
    if (calib) FATHOM_TRY(sparse_calibrate(s, c->model, calib));
    return FATHOM_OK;
}

int fathom_ctx_set_attention(fathom_ctx *ctx, const fathom_method *method, uint32_t k,
                             const fathom_source *calib) {
    FATHOM_CHECK_ARG(ctx, "fathom_ctx_set_attention: ctx is NULL");
    if (!method || method->kind == FATHOM_METHOD_DENSE) {
        sparse_free(ctx->sparse, &ctx->model->info);
        ctx->sparse = NULL;
        return FATHOM_OK;
    }
    FATHOM_TRY(fathom_method_check(method, ctx->model->info.head_dim));
    FATHOM_CHECK_ARG(k >= 1, "fathom_ctx_set_attention: k is 0");
    const fathom_model_info *in = &ctx->model->info;
    /* fathom_attend scales by 1/sqrt(dim) */
    FATHOM_CHECK(in->attn_scale != (float)(1.0 / sqrt((double)in->head_dim)), FATHOM_ERR_UNSUPPORTED,
                 "fathom_ctx_set_attention: attention scale %g is not 1/sqrt(%u), which sparse attention assumes",
                 (double)in->attn_scale, in->head_dim);
    sparse_state *s = NULL;
    int st = sparse_create(ctx, method, k, calib, &s);
    if (st < 0) {
        sparse_free(s, &ctx->model->info);
        return st;
    }
    sparse_free(ctx->sparse, &ctx->model->info);
    ctx->sparse = s;
    /* Index what the cache already holds. */
    for (uint32_t l = 0; l < ctx->model->info.layers; l++) {
        st = sparse_append(ctx, l, 0, ctx->n);
        if (st < 0) {
            sparse_free(ctx->sparse, &ctx->model->info);
            ctx->sparse = NULL;
            return st;
        }
    }
    return FATHOM_OK;
}

/* Replace the method's indexes by empty ones; calibration is kept. */
static int sparse_clear(sparse_state *s, const fathom_model_info *in) {
    for (uint64_t i = 0; i < (uint64_t)in->layers * in->kv_heads; i++)
        if (s->heads[i]) FATHOM_TRY(fathom_index_clear(s->heads[i]));
    return FATHOM_OK;
}

int fathom_ctx_reset(fathom_ctx *ctx) {
    FATHOM_CHECK_ARG(ctx, "fathom_ctx_reset: ctx is NULL");
    ctx->n = 0;
    ctx->broken = 0;
    memset(&ctx->stats, 0, sizeof ctx->stats);
    if (ctx->sparse) {
        int st = sparse_clear(ctx->sparse, &ctx->model->info);
        if (st < 0) { /* back to dense rather than keep a half-built index */
            sparse_free(ctx->sparse, &ctx->model->info);
            ctx->sparse = NULL;
            return st;
        }
    }
    return FATHOM_OK;
}

/* Decode steps write only positions >= n, so the cached rows below n are
 * exactly what a prefill of those tokens left: rewinding lets several
 * continuations branch from one prefill (fathom agree, fathom needle). */
int fathom_ctx_truncate(fathom_ctx *ctx, uint64_t n) {
    FATHOM_CHECK_ARG(ctx, "fathom_ctx_truncate: ctx is NULL");
    FATHOM_CHECK(ctx->broken, FATHOM_ERR_STATE, "fathom_ctx_truncate: an earlier call failed; reset the context");
    FATHOM_CHECK_ARG(n <= ctx->n, "fathom_ctx_truncate: %llu is beyond the %llu positions filled",
                     (unsigned long long)n, (unsigned long long)ctx->n);
    ctx->n = n;
    if (ctx->sparse) { /* the index is append-only: rebuild it over the kept rows */
        int st = sparse_clear(ctx->sparse, &ctx->model->info);
        for (uint32_t l = 0; st == FATHOM_OK && l < ctx->model->info.layers; l++)
            st = sparse_append(ctx, l, 0, n);
        if (st < 0) {
            sparse_free(ctx->sparse, &ctx->model->info);
            ctx->sparse = NULL;
            return st;
        }
    }
    return FATHOM_OK;
}

/* ===================================================================== *
 * forward
 * ===================================================================== */

typedef struct attn_job {
    fathom_ctx *c;
    uint32_t layer;
    uint64_t pos0;
    uint32_t T;
    uint32_t n_blocks; /* query blocks per KV head */
    uint32_t window;   /* keys a query sees at most (a sliding layer), 0: all before it */
} attn_job;

/* Dense causal attention of the G query heads of one KV head for a block of
 * up to ATTN_QBLOCK tokens: each key and value row is read once for all
 * G*QBLOCK queries (at 8k context K and V of a head are 4 MB, so reading
 * them once per query would be bound by memory). Each output row gets the
 * same operations in the same order whatever block it is in, so a prefill
 * gives the same bits as decode steps (blocks of one token). In a sliding
 * layer, the query at position p sees keys (p - window, p]. */
FATHOM_INLINE int attn_task_body(void *arg, uint32_t task, uint32_t worker) {
    const attn_job *j = arg;
    fathom_ctx *c = j->c;
    const fathom_model_info *in = &c->model->info;
    const uint32_t D = in->head_dim, Hq = in->q_heads, G = Hq / in->kv_heads;
    const uint32_t kvh = task / j->n_blocks, t0 = (task % j->n_blocks) * ATTN_QBLOCK;
    const uint32_t t1 = t0 + ATTN_QBLOCK < j->T ? t0 + ATTN_QBLOCK : j->T;
    const uint32_t rows = (t1 - t0) * G;
    const uint64_t n_max = j->pos0 + t1; /* keys the last token sees */
    const float *keys = cache_row(c, c->k_cache, j->layer, kvh, 0);
    const float *values = cache_row(c, c->v_cache, j->layer, kvh, 0);
    float *S = c->scores + (uint64_t)worker * ATTN_QBLOCK * G * c->cap; /* [rows x n_max] */
    const float scale = in->attn_scale;
    /* row r: token t0 + r / G, query head kvh*G + r % G */
#define ROW_Q(r) (c->q + ((uint64_t)(t0 + (r) / G) * Hq + kvh * G + (r) % G) * D)
#define ROW_OUT(r) (c->att + ((uint64_t)(t0 + (r) / G) * Hq + kvh * G + (r) % G) * D)
#define ROW_VIS(r) (j->pos0 + t0 + (r) / G + 1) /* keys row r sees: [ROW_LO(r), ROW_VIS(r)) */
#define ROW_LO(r) (j->window && ROW_VIS(r) > j->window ? ROW_VIS(r) - j->window : 0)
    /* scores: the block's queries gathered into rows of D, then 4 keys x 4
     * queries per tile (entries past a row's visible keys are never read) */
    float *Qb = c->qblock + (uint64_t)worker * ATTN_QBLOCK * G * D;
    for (uint32_t r = 0; r < rows; r++) memcpy(Qb + (uint64_t)r * D, ROW_Q(r), D * sizeof(float));
    uint64_t i = ROW_LO(0); /* rows are in position order: row 0 sees the earliest key */
    for (; i + 4 <= n_max; i += 4) {
        uint32_t r = 0;
        for (; r + 4 <= rows; r += 4) tile(keys + i * D, 4, Qb + (uint64_t)r * D, 4, D, S + r * n_max + i, n_max);
        /* the rest (a decode step's G queries) in one tile: constants unroll */
        const float *qr = Qb + (uint64_t)r * D;
        float *sr = S + r * n_max + i;
        switch (rows - r) {
        case 3: tile(keys + i * D, 4, qr, 3, D, sr, n_max); break;
        case 2: tile(keys + i * D, 4, qr, 2, D, sr, n_max); break;
        case 1: tile(keys + i * D, 4, qr, 1, D, sr, n_max); break;
        default: break;
        }
    }
    for (; i < n_max; i++)
        for (uint32_t r = 0; r < rows; r++) S[r * n_max + i] = dot(Qb + (uint64_t)r * D, keys + i * D, D);
    for (uint32_t r = 0; r < rows; r++) {
        const uint64_t n = ROW_VIS(r);
        for (uint64_t k = ROW_LO(r); k < n; k++) S[r * n_max + k] *= scale;
    }
    double *inv = c->sums + (uint64_t)worker * ATTN_QBLOCK * G; /* softmax denominators */
    for (uint32_t r = 0; r < rows; r++) {
        float *s = S + r * n_max, max = -INFINITY;
        const uint64_t n = ROW_VIS(r), lo = ROW_LO(r);
        for (uint64_t m = lo; m < n; m++)
            if (s[m] > max) max = s[m];
        double sum = 0;
        for (uint64_t m = lo; m < n; m++) {
            float e = expf(s[m] - max);
            s[m] = e;
            sum += e;
        }
        inv[r] = sum;
        float *out = ROW_OUT(r);
        for (uint32_t ch = 0; ch < D; ch++) out[ch] = 0;
    }
    /* out += p * v over the visible keys, in key order for every output
     * element (what one decode step's axpy per key gives): chunks of
     * PV_KEYS keys (their V rows stay in cache) x PV_CHANNELS channels
     * (accumulators in registers) x up to 4 query heads of one token (the
     * same visible keys) */
    for (uint64_t ib = ROW_LO(0); ib < n_max; ib += PV_KEYS) {
        const uint64_t ie = ib + PV_KEYS < n_max ? ib + PV_KEYS : n_max;
        for (uint32_t c0 = 0; c0 < D; c0 += PV_CHANNELS)
            for (uint32_t r0 = 0; r0 < rows; r0 += G)
                for (uint32_t r = r0; r < r0 + G; r += 4) {
                    const uint32_t nr = r0 + G - r < 4 ? r0 + G - r : 4;
                    const uint64_t lo = ROW_LO(r) > ib ? ROW_LO(r) : ib;
                    const uint64_t hi = ROW_VIS(r) < ie ? ROW_VIS(r) : ie;
                    if (lo >= hi) continue;
                    float *o[4];
                    const float *p[4];
                    for (uint32_t m = 0; m < nr; m++) {
                        o[m] = ROW_OUT(r + m);
                        p[m] = S + (r + m) * n_max;
                    }
                    const uint32_t nc = D - c0 < PV_CHANNELS ? D - c0 : PV_CHANNELS;
                    switch (nc == PV_CHANNELS ? nr : 0) {
                    case 4: pv_tile(o, p, 4, values, D, c0, lo, hi); break;
                    case 3: pv_tile(o, p, 3, values, D, c0, lo, hi); break;
                    case 2: pv_tile(o, p, 2, values, D, c0, lo, hi); break;
                    case 1: pv_tile(o, p, 1, values, D, c0, lo, hi); break;
                    default:
                        for (uint64_t k = lo; k < hi; k++)
                            for (uint32_t m = 0; m < nr; m++) axpy(o[m] + c0, p[m][k], values + k * D + c0, nc);
                    }
                }
    }
    for (uint32_t r = 0; r < rows; r++) {
        const float f = (float)(1.0 / inv[r]);
        float *out = ROW_OUT(r);
        for (uint32_t ch = 0; ch < D; ch++) out[ch] *= f;
    }
#undef ROW_Q
#undef ROW_OUT
#undef ROW_VIS
#undef ROW_LO
    return FATHOM_OK;
}

FATHOM_CPU_DISPATCH(int, attn_task, (void *arg, uint32_t task, uint32_t worker), (arg, task, worker))

/* GELU, tanh form (Gemma's gelu_pytorch_tanh), in double. */
static float gelu_tanh(float x) {
    const double v = x;
    return (float)(0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))));
}

/* x += proj for T rows, proj first RMS-normalized with post_norm when given. */
static void add_residual(fathom_ctx *c, const float *post_norm, uint32_t T) {
    const fathom_model_info *in = &c->model->info;
    const uint32_t E = in->embed;
    if (post_norm)
        for (uint32_t t = 0; t < T; t++)
            rmsnorm(c->proj + (uint64_t)t * E, c->proj + (uint64_t)t * E, post_norm, E, in->rms_eps);
    for (uint64_t i = 0; i < (uint64_t)T * E; i++) c->x[i] += c->proj[i];
}

/* FATHOM_ERR_NONFINITE naming the first non-finite entry of rows x
 * [T x heads*D] of `layer` at positions pos0.. (its head when `what` names
 * one, e.g. "key head"; NULL: the residual stream): finite but extreme
 * weights overflow float, and the next softmax turns that into NaN. */
static int check_finite(const float *x, uint32_t T, uint32_t heads, uint32_t D, uint32_t layer, uint64_t pos0,
                        const char *what) {
    const uint64_t row = (uint64_t)heads * D;
    for (uint32_t t = 0; t < T; t++) {
        const float *r = x + t * row;
        if (fathom_all_finite(r, row)) continue;
        uint64_t i = 0;
        while (__builtin_isfinite(r[i])) i++;
        if (!what)
            return fathom_fail(FATHOM_ERR_NONFINITE,
                               "model: layer %u, position %llu: the residual stream is not finite (a weight "
                               "overflows float)",
                               layer, (unsigned long long)(pos0 + t));
        return fathom_fail(FATHOM_ERR_NONFINITE,
                           "model: layer %u, %s %llu, position %llu: not finite (a weight overflows float)",
                           layer, what, (unsigned long long)(i / D), (unsigned long long)(pos0 + t));
    }
    return FATHOM_OK;
}

/* Tokens [0, T) at positions n..n+T-1 (T <= PREFILL_BATCH) through every
 * layer; the residual stream is left in c->x. sparse: a decode step (T = 1)
 * whose attention goes through the sparse path. */
static int forward(fathom_ctx *c, const int32_t *tokens, uint32_t T, bool sparse) {
    const fathom_model *m = c->model;
    const fathom_model_info *in = &m->info;
    const uint32_t E = in->embed, F = in->ffn, D = in->head_dim;
    const uint32_t Hq = in->q_heads, Hkv = in->kv_heads;
    const uint32_t QD = Hq * D, KD = Hkv * D;
    const uint64_t pos0 = c->n;

    for (uint32_t t = 0; t < T; t++) {
        float *x = c->x + (uint64_t)t * E;
        memcpy(x, m->token_embd + (uint64_t)tokens[t] * E, E * sizeof(float));
        if (in->embed_scale != 1.0f)
            for (uint32_t i = 0; i < E; i++) x[i] *= in->embed_scale;
    }

    for (uint32_t l = 0; l < in->layers; l++) {
        const layer_weights *w = &m->layers[l];
        const bool sliding = m->sliding[l];
        const float *rope_cs = sliding ? c->rope_cos_swa : c->rope_cos;
        const float *rope_sn = sliding ? c->rope_sin_swa : c->rope_sin;
        /* attention */
        for (uint32_t t = 0; t < T; t++)
            rmsnorm(c->xn + (uint64_t)t * E, c->x + (uint64_t)t * E, w->attn_norm, E, in->rms_eps);
        FATHOM_TRY(matmul(c->pool, c->q, c->xn, w->wq, T, E, QD));
        FATHOM_TRY(matmul(c->pool, c->k, c->xn, w->wk, T, E, KD));
        FATHOM_TRY(matmul(c->pool, c->v, c->xn, w->wv, T, E, KD));
        for (uint32_t t = 0; t < T; t++) {
            const uint64_t pos = pos0 + t;
            const float *cs = rope_cs + pos * (D / 2), *sn = rope_sn + pos * (D / 2);
            for (uint32_t h = 0; h < Hq; h++) {
                float *q = c->q + (uint64_t)t * QD + (uint64_t)h * D;
                if (w->q_norm) rmsnorm(q, q, w->q_norm, D, in->rms_eps);
                rope(q, D, cs, sn, in->rope_neox);
                if (c->rec && pos >= c->rec_first && pos - c->rec_first < c->rec_count)
                    memcpy(c->rec + (((uint64_t)l * Hq + h) * c->rec_count + (pos - c->rec_first)) * D,
                           q, D * sizeof(float));
            }
            for (uint32_t h = 0; h < Hkv; h++) {
                float *k = c->k + (uint64_t)t * KD + (uint64_t)h * D;
                if (w->k_norm) rmsnorm(k, k, w->k_norm, D, in->rms_eps);
                rope(k, D, cs, sn, in->rope_neox);
                memcpy(cache_row(c, c->k_cache, l, h, pos), k, D * sizeof(float));
                memcpy(cache_row(c, c->v_cache, l, h, pos), c->v + (uint64_t)t * KD + (uint64_t)h * D,
                       D * sizeof(float));
            }
        }
        FATHOM_TRY(check_finite(c->q, T, Hq, D, l, pos0, "query head"));
        FATHOM_TRY(check_finite(c->k, T, Hkv, D, l, pos0, "key head"));
        FATHOM_TRY(check_finite(c->v, T, Hkv, D, l, pos0, "value head"));
        if (sparse) FATHOM_TRY(sparse_append(c, l, pos0, T)); /* a prefill appends when it ends */
        if (sparse && !sliding) { /* sliding layers attend their window exactly */
            sparse_job sj = {c, l, pos0};
            FATHOM_TRY(fathom_pool_run(c->pool, sparse_task, &sj, Hkv));
        } else {
            const uint32_t blocks = (T + ATTN_QBLOCK - 1) / ATTN_QBLOCK;
            attn_job aj = {c, l, pos0, T, blocks, sliding ? in->sliding_window : 0};
            FATHOM_TRY(fathom_pool_run(c->pool, attn_task, &aj, blocks * Hkv));
        }
        FATHOM_TRY(check_finite(c->att, T, Hq, D, l, pos0, "attention output of query head"));
        FATHOM_TRY(matmul(c->pool, c->proj, c->att, w->wo, T, QD, E));
        add_residual(c, w->post_attn_norm, T);

        /* SwiGLU or GeGLU MLP */
        for (uint32_t t = 0; t < T; t++)
            rmsnorm(c->xn + (uint64_t)t * E, c->x + (uint64_t)t * E, w->ffn_norm, E, in->rms_eps);
        FATHOM_TRY(matmul(c->pool, c->gate, c->xn, w->w_gate, T, E, F));
        FATHOM_TRY(matmul(c->pool, c->up, c->xn, w->w_up, T, E, F));
        for (uint64_t i = 0; i < (uint64_t)T * F; i++) {
            const float g = c->gate[i];
            c->gate[i] = (in->gelu ? gelu_tanh(g) : g / (1.0f + expf(-g))) * c->up[i];
        }
        FATHOM_TRY(matmul(c->pool, c->proj, c->gate, w->w_down, T, F, E));
        add_residual(c, w->post_ffn_norm, T);
        FATHOM_TRY(check_finite(c->x, T, 1, E, l, pos0, NULL));
    }
    c->n += T;
    return FATHOM_OK;
}

/* Logits of the residual row t into out [vocab]. */
static int compute_logits(fathom_ctx *c, uint32_t t, float *out) {
    const fathom_model_info *in = &c->model->info;
    rmsnorm(c->xn, c->x + (uint64_t)t * in->embed, c->model->output_norm, in->embed, in->rms_eps);
    FATHOM_TRY(matmul(c->pool, out, c->xn, c->model->output, 1, in->embed, in->vocab));
    if (in->logit_softcap > 0)
        for (uint32_t i = 0; i < in->vocab; i++)
            out[i] = (float)(in->logit_softcap * tanh((double)out[i] / in->logit_softcap));
    FATHOM_CHECK(!fathom_all_finite(out, in->vocab), FATHOM_ERR_NONFINITE,
                 "model: the logits at position %llu are not finite (the output weights overflow float)",
                 (unsigned long long)(c->n - 1));
    return FATHOM_OK;
}

static int check_tokens(const fathom_ctx *c, const int32_t *tokens, uint64_t n, const char *fn) {
    FATHOM_CHECK(c->broken, FATHOM_ERR_STATE, "%s: an earlier call failed; reset the context", fn);
    for (uint64_t i = 0; i < n; i++)
        FATHOM_CHECK_ARG(tokens[i] >= 0 && (uint32_t)tokens[i] < c->model->info.vocab,
                         "%s: token %llu is %d, outside the vocabulary [0, %u)", fn,
                         (unsigned long long)i, tokens[i], c->model->info.vocab);
    FATHOM_CHECK(n > c->cap - c->n, FATHOM_ERR_STATE,
                 "%s: %llu tokens do not fit: %llu of %u positions are in use", fn,
                 (unsigned long long)n, (unsigned long long)c->n, c->cap);
    return FATHOM_OK;
}

int fathom_ctx_prefill(fathom_ctx *ctx, const int32_t *tokens, uint64_t n, float *logits_out) {
    FATHOM_CHECK_ARG(ctx, "fathom_ctx_prefill: ctx is NULL");
    FATHOM_CHECK_ARG(tokens, "fathom_ctx_prefill: tokens is NULL");
    FATHOM_CHECK_ARG(n > 0, "fathom_ctx_prefill: no tokens");
    FATHOM_TRY(check_tokens(ctx, tokens, n, "fathom_ctx_prefill"));
    uint32_t last = 0;
    const uint64_t pos0 = ctx->n;
    for (uint64_t done = 0; done < n;) {
        const uint32_t T = n - done < PREFILL_BATCH ? (uint32_t)(n - done) : PREFILL_BATCH;
        int st = forward(ctx, tokens + done, T, false);
        if (st < 0) {
            ctx->broken = 1;
            return st;
        }
        done += T;
        last = T - 1;
        if (ctx->progress) ctx->progress(ctx->progress_user, done, n);
    }
    /* The prefill's keys reach the sparse index in one append per layer: the
     * bytes of a streamed append, and fathom-centered's center is their mean. */
    for (uint32_t l = 0; l < ctx->model->info.layers; l++) {
        int st = sparse_append(ctx, l, pos0, n);
        if (st < 0) {
            ctx->broken = 1;
            return st;
        }
    }
    ctx->stats.prefill_tokens += n;
    if (logits_out) FATHOM_TRY(compute_logits(ctx, last, logits_out));
    return FATHOM_OK;
}

int fathom_ctx_step(fathom_ctx *ctx, int32_t token, float *logits_out) {
    FATHOM_CHECK_ARG(ctx, "fathom_ctx_step: ctx is NULL");
    FATHOM_TRY(check_tokens(ctx, &token, 1, "fathom_ctx_step"));
    const bool sparse = ctx->sparse != NULL;
    if (sparse)
        for (uint32_t kvh = 0; kvh < ctx->model->info.kv_heads; kvh++) {
            sparse_scratch *sc = &ctx->sparse->scratch[kvh];
            sc->scan_bytes = sc->selected = sc->visible = 0;
        }
    int st = forward(ctx, &token, 1, sparse);
    if (st < 0) {
        ctx->broken = 1;
        return st;
    }
    ctx->stats.decode_steps++;
    if (sparse) {
        ctx->stats.sparse_steps++;
        for (uint32_t kvh = 0; kvh < ctx->model->info.kv_heads; kvh++) {
            const sparse_scratch *sc = &ctx->sparse->scratch[kvh];
            ctx->stats.scan_bytes += sc->scan_bytes;
            ctx->stats.selected_rows += sc->selected;
            ctx->stats.visible_rows += sc->visible;
        }
    }
    if (logits_out) FATHOM_TRY(compute_logits(ctx, 0, logits_out));
    return FATHOM_OK;
}

int fathom_model_tokenizer(const fathom_model *model, fathom_tokenizer **out) {
    FATHOM_CHECK_ARG(out, "fathom_model_tokenizer: out is NULL");
    *out = NULL;
    FATHOM_CHECK_ARG(model, "fathom_model_tokenizer: model is NULL");
    fathom_tokenizer *tok = NULL;
    FATHOM_TRY(fathom_tokenizer_from_gguf(&tok, model->gguf));
    /* Every id it can produce must have an embedding row (the embedding may
     * be padded beyond the vocabulary, never the other way round). */
    const uint32_t n = fathom_tokenizer_vocab_size(tok);
    if (n > model->info.vocab) {
        fathom_tokenizer_free(tok);
        return fathom_fail(FATHOM_ERR_FORMAT, "model: the tokenizer has %u tokens, the embedding %u rows",
                           n, model->info.vocab);
    }
    *out = tok;
    return FATHOM_OK;
}

/* The model module on tiny synthetic GGUF files written here (no download):
 * - logits, queries and keys against a naive double-precision forward pass
 *   written apart from src/model.c, for a llama file (adjacent-pair RoPE,
 *   tied output), a qwen3 file (QK-norm, NEOX RoPE, separate output) and a
 *   gemma3 file (sliding-window and global layers with their RoPE bases,
 *   post norms, GeGLU, scaled embeddings, final soft-cap);
 * - results do not depend on the thread count or on how tokens are split
 *   between prefill chunks and decode steps (bit-identical);
 * - every sparse method with k >= context equals dense; with a small k it
 *   selects exactly min(k, n) keys per head and changes the result;
 * - calibrated methods (fathom-klt, ds, loki) from a capture of the model;
 * - hostile files: wrong shapes, missing/extra tensors, bad metadata, NaN;
 * - finite but extreme weights: FATHOM_ERR_NONFINITE naming the layer, not NaN logits;
 * - every bad argument of every public function. */
#include "check.h"
#include "fathom_model.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------------- *
 * a tiny model and its GGUF file
 * ---------------------------------------------------------------- */

typedef struct tensor {
    char name[64];
    uint64_t cols, rows; /* rows 0: a vector */
    float *data;
} tensor;

typedef struct tiny {
    const char *arch;
    uint32_t layers, embed, q_heads, kv_heads, head_dim, ffn, vocab, ctx;
    int qk_norm, tied;
    float rope_base, eps;
    /* mutations for the hostile-file tests */
    const char *reshape; /* this tensor gets cols + 1 */
    const char *skip;    /* this tensor is left out */
    const char *extra;   /* an extra tensor of this name */
    const char *nan_in;  /* a NaN in this tensor */
    int vocab_meta;      /* 0: write vocab; -1: omit; else this value */
    int head_count_meta; /* 0: q_heads, else this value */
    const char *rope_scaling;
    int block_count_meta; /* 0: layers */
    int tokenizer;        /* 1: a byte-level BPE vocabulary of 258 tokens */
    /* gemma3 */
    uint32_t window, pattern; /* attention.sliding_window, attention.sliding_window_pattern */
    float rope_base_swa;      /* rope.freq_base_swa */
    float softcap;            /* final_logit_softcapping, 0: not written */
    int attn_softcap;         /* 1: write attn_logit_softcapping (unsupported) */
} tiny;

static tiny llama_tiny(void) {
    tiny t = {"llama", 2, 32, 4, 2, 8, 48, 64, 160, 0, 1, 10000.0f, 1e-5f,
              NULL,    NULL, NULL, NULL, 0, 0, NULL, 0, 0, 0, 0, 0, 0, 0};
    return t;
}

/* Layers 0 and 1 slide (window 7 of the 100 test tokens), layer 2 is global. */
static tiny gemma_tiny(void) {
    tiny t = llama_tiny();
    t.arch = "gemma3";
    t.layers = 3;
    t.head_dim = 16;
    t.qk_norm = 1;
    t.rope_base = 1000000.0f;
    t.eps = 1e-6f;
    t.window = 7;
    t.pattern = 3;
    t.rope_base_swa = 10000.0f;
    t.softcap = 3.0f;
    return t;
}

static bool is_gemma(const tiny *m) { return !strcmp(m->arch, "gemma3"); }

static tiny qwen_tiny(void) {
    tiny t = llama_tiny();
    t.arch = "qwen3";
    t.layers = 3;
    t.head_dim = 16; /* q_heads * head_dim != embed, as in Qwen3 */
    t.qk_norm = 1;
    t.tied = 0;
    t.rope_base = 1000000.0f;
    t.eps = 1e-6f;
    return t;
}

static uint64_t rng_state;
static float rnd(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

typedef struct weights {
    tensor t[64 * 12];
    uint32_t n;
} weights;

static tensor *add_tensor(weights *w, const char *name, uint64_t cols, uint64_t rows, float scale,
                          float offset) {
    tensor *t = &w->t[w->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->cols = cols;
    t->rows = rows;
    uint64_t n = cols * (rows ? rows : 1);
    t->data = malloc(n * sizeof(float));
    for (uint64_t i = 0; i < n; i++) t->data[i] = offset + scale * rnd();
    return t;
}

static void make_weights(const tiny *m, weights *w, uint64_t seed) {
    rng_state = seed;
    w->n = 0;
    const uint64_t E = m->embed, QD = (uint64_t)m->q_heads * m->head_dim,
                   KD = (uint64_t)m->kv_heads * m->head_dim;
    add_tensor(w, "token_embd.weight", E, m->vocab, 1.0f, 0);
    add_tensor(w, "output_norm.weight", E, 0, 0.2f, 1.0f);
    if (!m->tied) add_tensor(w, "output.weight", E, m->vocab, 0.3f, 0);
    char name[64];
    for (uint32_t l = 0; l < m->layers; l++) {
#define ADD(suffix, c, r, s, o)                                                                    \
    do {                                                                                           \
        snprintf(name, sizeof name, "blk.%u.%s.weight", l, suffix);                                \
        add_tensor(w, name, c, r, s, o);                                                           \
    } while (0)
        ADD("attn_norm", E, 0, 0.2f, 1.0f);
        ADD("attn_q", E, QD, 0.5f, 0);
        ADD("attn_k", E, KD, 0.5f, 0);
        ADD("attn_v", E, KD, 0.5f, 0);
        ADD("attn_output", QD, E, 0.2f, 0);
        ADD("ffn_norm", E, 0, 0.2f, 1.0f);
        ADD("ffn_gate", E, m->ffn, 0.3f, 0);
        ADD("ffn_up", E, m->ffn, 0.3f, 0);
        ADD("ffn_down", m->ffn, E, 0.2f, 0);
        if (m->qk_norm) {
            ADD("attn_q_norm", m->head_dim, 0, 0.2f, 1.0f);
            ADD("attn_k_norm", m->head_dim, 0, 0.2f, 1.0f);
        }
        if (is_gemma(m)) {
            ADD("post_attention_norm", E, 0, 0.2f, 1.0f);
            ADD("post_ffw_norm", E, 0, 0.2f, 1.0f);
        }
#undef ADD
    }
}

static void free_weights(weights *w) {
    for (uint32_t i = 0; i < w->n; i++) free(w->t[i].data);
    w->n = 0;
}

static const tensor *find_tensor(const weights *w, const char *name) {
    for (uint32_t i = 0; i < w->n; i++)
        if (!strcmp(w->t[i].name, name)) return &w->t[i];
    return NULL;
}

/* GGUF v3 writer: just enough for these files (F32 tensors). */
static void put(FILE *f, const void *p, size_t n) { fwrite(p, 1, n, f); }
static void put_u32(FILE *f, uint32_t v) { put(f, &v, 4); }
static void put_u64(FILE *f, uint64_t v) { put(f, &v, 8); }
static void put_str(FILE *f, const char *s) {
    put_u64(f, strlen(s));
    put(f, s, strlen(s));
}
static void kv_u32(FILE *f, const char *arch, const char *key, uint32_t v) {
    char k[128];
    snprintf(k, sizeof k, "%s%s%s", arch ? arch : "", arch ? "." : "", key);
    put_str(f, k);
    put_u32(f, 4); /* UINT32 */
    put_u32(f, v);
}
static void kv_f32(FILE *f, const char *arch, const char *key, float v) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    put_str(f, k);
    put_u32(f, 6); /* FLOAT32 */
    put(f, &v, 4);
}
static void kv_str(FILE *f, const char *key, const char *v) {
    put_str(f, key);
    put_u32(f, 8); /* STRING */
    put_str(f, v);
}

/* GPT-2's byte-level alphabet: the UTF-8 of the code point standing for byte b. */
static void byte_token(int b, char *out) {
    int cp;
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) {
        cp = b;
    } else { /* the others in order, from U+0100 */
        int n = 0;
        for (int c = 0; c < b; c++)
            if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF))) n++;
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

/* tokenizer.ggml.*: bytes 0..255, then "ab" (merge "a b") and <|im_end|>. */
static void write_tokenizer(FILE *f) {
    kv_str(f, "tokenizer.ggml.model", "gpt2");
    kv_str(f, "tokenizer.ggml.pre", "smollm");
    put_str(f, "tokenizer.ggml.tokens");
    put_u32(f, 9); /* ARRAY */
    put_u32(f, 8); /* of STRING */
    put_u64(f, 258);
    for (int b = 0; b < 256; b++) {
        char tok[4];
        byte_token(b, tok);
        put_str(f, tok);
    }
    put_str(f, "ab");
    put_str(f, "<|im_end|>");
    put_str(f, "tokenizer.ggml.token_type");
    put_u32(f, 9);
    put_u32(f, 5); /* of INT32 */
    put_u64(f, 258);
    for (int i = 0; i < 258; i++) put_u32(f, i == 257 ? 3 : 1);
    put_str(f, "tokenizer.ggml.merges");
    put_u32(f, 9);
    put_u32(f, 8);
    put_u64(f, 1);
    put_str(f, "a b");
    kv_u32(f, NULL, "tokenizer.ggml.eos_token_id", 257);
}

static void write_gguf(const char *path, const tiny *m, const weights *w) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    /* the tensors that go in, after the mutations */
    const tensor *list[64 * 12 + 1];
    uint64_t cols[64 * 12 + 1];
    uint32_t n = 0;
    static float extra_data[64];
    static tensor extra;
    for (uint32_t i = 0; i < w->n; i++) {
        if (m->skip && !strcmp(m->skip, w->t[i].name)) continue;
        cols[n] = w->t[i].cols + (m->reshape && !strcmp(m->reshape, w->t[i].name) ? 1 : 0);
        list[n++] = &w->t[i];
    }
    if (m->extra) {
        snprintf(extra.name, sizeof extra.name, "%s", m->extra);
        extra.cols = 8;
        extra.rows = 0;
        extra.data = extra_data;
        cols[n] = 8;
        list[n++] = &extra;
    }
    uint32_t n_kv = 11 + (m->vocab_meta >= 0) + (m->rope_scaling != NULL) + (m->qk_norm ? 1 : 0) +
                    (m->tokenizer ? 6 : 0) + (m->window ? 3 : 0) + (m->softcap > 0) + m->attn_softcap;
    put(f, "GGUF", 4);
    put_u32(f, 3);
    put_u64(f, n);
    put_u64(f, n_kv);
    kv_str(f, "general.architecture", m->arch);
    kv_str(f, "general.name", "tiny test model");
    kv_u32(f, m->arch, "block_count", m->block_count_meta ? (uint32_t)m->block_count_meta : m->layers);
    kv_u32(f, m->arch, "context_length", m->ctx);
    kv_u32(f, m->arch, "embedding_length", m->embed);
    kv_u32(f, m->arch, "feed_forward_length", m->ffn);
    kv_u32(f, m->arch, "attention.head_count",
           m->head_count_meta ? (uint32_t)m->head_count_meta : m->q_heads);
    kv_u32(f, m->arch, "attention.head_count_kv", m->kv_heads);
    kv_f32(f, m->arch, "rope.freq_base", m->rope_base);
    kv_f32(f, m->arch, "attention.layer_norm_rms_epsilon", m->eps);
    kv_u32(f, m->arch, "rope.dimension_count", m->head_dim);
    if (m->qk_norm) kv_u32(f, m->arch, "attention.key_length", m->head_dim);
    if (m->vocab_meta >= 0) kv_u32(f, m->arch, "vocab_size", m->vocab_meta ? (uint32_t)m->vocab_meta : m->vocab);
    if (m->rope_scaling) {
        char k[128];
        snprintf(k, sizeof k, "%s.rope.scaling.type", m->arch);
        kv_str(f, k, m->rope_scaling);
    }
    if (m->tokenizer) write_tokenizer(f);
    if (m->window) {
        kv_u32(f, m->arch, "attention.sliding_window", m->window);
        kv_u32(f, m->arch, "attention.sliding_window_pattern", m->pattern);
        kv_f32(f, m->arch, "rope.freq_base_swa", m->rope_base_swa);
    }
    if (m->softcap > 0) kv_f32(f, m->arch, "final_logit_softcapping", m->softcap);
    if (m->attn_softcap) kv_f32(f, m->arch, "attn_logit_softcapping", 50.0f);
    uint64_t offset = 0;
    for (uint32_t i = 0; i < n; i++) {
        put_str(f, list[i]->name);
        put_u32(f, list[i]->rows ? 2 : 1);
        put_u64(f, cols[i]);
        if (list[i]->rows) put_u64(f, list[i]->rows);
        put_u32(f, 0); /* F32 */
        put_u64(f, offset);
        offset += (cols[i] * (list[i]->rows ? list[i]->rows : 1) * 4 + 31) / 32 * 32;
    }
    static const uint8_t zeros[32];
    long pos = ftell(f);
    put(f, zeros, (size_t)((32 - pos % 32) % 32));
    for (uint32_t i = 0; i < n; i++) {
        uint64_t count = cols[i] * (list[i]->rows ? list[i]->rows : 1);
        uint64_t have = list[i]->cols * (list[i]->rows ? list[i]->rows : 1);
        for (uint64_t j = 0; j < count; j++) {
            float v = j < have ? list[i]->data[j] : 0.5f;
            if (m->nan_in && !strcmp(m->nan_in, list[i]->name) && j == 3) v = NAN;
            put(f, &v, 4);
        }
        put(f, zeros, (size_t)((32 - (count * 4) % 32) % 32));
    }
    fclose(f);
}

/* ---------------------------------------------------------------- *
 * the naive reference: double precision, the whole sequence at once
 * ---------------------------------------------------------------- */

typedef struct ref_out {
    double *logits; /* [n x vocab] */
    double *q;      /* [layers][n][q_heads][d] after QK-norm and RoPE */
    double *k;      /* [layers][n][kv_heads][d] */
} ref_out;

static const float *W(const weights *w, uint32_t layer, const char *suffix) {
    char name[64];
    if (layer == UINT32_MAX)
        snprintf(name, sizeof name, "%s.weight", suffix);
    else
        snprintf(name, sizeof name, "blk.%u.%s.weight", layer, suffix);
    const tensor *t = find_tensor(w, name);
    return t ? t->data : NULL;
}

static void ref_rmsnorm(double *x, const float *g, uint32_t n, double eps) {
    double ss = 0;
    for (uint32_t i = 0; i < n; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + eps);
    for (uint32_t i = 0; i < n; i++) x[i] = x[i] * r * g[i];
}

/* y[rows] = M[rows x cols] x */
static void ref_matvec(double *y, const float *M, const double *x, uint64_t rows, uint64_t cols) {
    for (uint64_t r = 0; r < rows; r++) {
        double s = 0;
        for (uint64_t c = 0; c < cols; c++) s += (double)M[r * cols + c] * x[c];
        y[r] = s;
    }
}

static void ref_rope(double *v, uint32_t d, uint64_t pos, double base, int neox) {
    for (uint32_t i = 0; i < d / 2; i++) {
        double ang = (double)pos / pow(base, 2.0 * i / d);
        uint32_t a = neox ? i : 2 * i, b = neox ? i + d / 2 : 2 * i + 1;
        double x = v[a], y = v[b];
        v[a] = x * cos(ang) - y * sin(ang);
        v[b] = x * sin(ang) + y * cos(ang);
    }
}

static void ref_forward(const tiny *m, const weights *w, const int32_t *tok, uint64_t n, ref_out *o) {
    const uint32_t E = m->embed, D = m->head_dim, Hq = m->q_heads, Hk = m->kv_heads, F = m->ffn;
    const bool gemma = is_gemma(m);
    const int neox = !strcmp(m->arch, "qwen3") || gemma;
    double *x = calloc(n * E, sizeof *x), *h = malloc(E * sizeof *h);
    double *q = malloc(n * Hq * D * sizeof *q), *k = malloc(n * Hk * D * sizeof *k);
    double *v = malloc(n * Hk * D * sizeof *v), *att = malloc(Hq * D * sizeof *att);
    double *tmp = malloc((F > E ? F : E) * sizeof *tmp), *g = malloc(F * sizeof *g);
    double *u = malloc(F * sizeof *u), *p = malloc(n * sizeof *p);
    for (uint64_t t = 0; t < n; t++)
        for (uint32_t e = 0; e < E; e++)
            x[t * E + e] = W(w, UINT32_MAX, "token_embd")[tok[t] * E + e] * (gemma ? sqrt((double)E) : 1.0);
    for (uint32_t l = 0; l < m->layers; l++) {
        /* gemma3: layer l slides unless l % pattern == pattern - 1 */
        const bool slide = gemma && l % m->pattern != m->pattern - 1;
        const double base = slide ? m->rope_base_swa : m->rope_base;
        for (uint64_t t = 0; t < n; t++) {
            memcpy(h, x + t * E, E * sizeof *h);
            ref_rmsnorm(h, W(w, l, "attn_norm"), E, m->eps);
            ref_matvec(q + t * Hq * D, W(w, l, "attn_q"), h, Hq * D, E);
            ref_matvec(k + t * Hk * D, W(w, l, "attn_k"), h, Hk * D, E);
            ref_matvec(v + t * Hk * D, W(w, l, "attn_v"), h, Hk * D, E);
            for (uint32_t hh = 0; hh < Hq; hh++) {
                if (m->qk_norm) ref_rmsnorm(q + (t * Hq + hh) * D, W(w, l, "attn_q_norm"), D, m->eps);
                ref_rope(q + (t * Hq + hh) * D, D, t, base, neox);
            }
            for (uint32_t hh = 0; hh < Hk; hh++) {
                if (m->qk_norm) ref_rmsnorm(k + (t * Hk + hh) * D, W(w, l, "attn_k_norm"), D, m->eps);
                ref_rope(k + (t * Hk + hh) * D, D, t, base, neox);
            }
        }
        if (o->q) memcpy(o->q + (uint64_t)l * n * Hq * D, q, n * Hq * D * sizeof *q);
        if (o->k) memcpy(o->k + (uint64_t)l * n * Hk * D, k, n * Hk * D * sizeof *k);
        double *xo = calloc(n * E, sizeof *xo);
        for (uint64_t t = 0; t < n; t++) {
            for (uint32_t hh = 0; hh < Hq; hh++) {
                const uint32_t kv = hh / (Hq / Hk);
                const uint64_t lo = slide && t + 1 > m->window ? t + 1 - m->window : 0;
                double mx = -INFINITY, sum = 0;
                for (uint64_t s = lo; s <= t; s++) {
                    double d = 0;
                    for (uint32_t c = 0; c < D; c++) d += q[(t * Hq + hh) * D + c] * k[(s * Hk + kv) * D + c];
                    p[s] = d / sqrt((double)D);
                    if (p[s] > mx) mx = p[s];
                }
                for (uint64_t s = lo; s <= t; s++) sum += (p[s] = exp(p[s] - mx));
                for (uint32_t c = 0; c < D; c++) {
                    double a = 0;
                    for (uint64_t s = lo; s <= t; s++) a += p[s] * v[(s * Hk + kv) * D + c];
                    att[hh * D + c] = a / sum;
                }
            }
            ref_matvec(tmp, W(w, l, "attn_output"), att, E, Hq * D);
            if (gemma) ref_rmsnorm(tmp, W(w, l, "post_attention_norm"), E, m->eps);
            for (uint32_t e = 0; e < E; e++) xo[t * E + e] = x[t * E + e] + tmp[e];
        }
        for (uint64_t t = 0; t < n; t++) {
            memcpy(h, xo + t * E, E * sizeof *h);
            ref_rmsnorm(h, W(w, l, "ffn_norm"), E, m->eps);
            ref_matvec(g, W(w, l, "ffn_gate"), h, F, E);
            ref_matvec(u, W(w, l, "ffn_up"), h, F, E);
            for (uint32_t i = 0; i < F; i++)
                g[i] = (gemma ? 0.5 * g[i] * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (g[i] + 0.044715 * pow(g[i], 3))))
                              : g[i] / (1 + exp(-g[i]))) *
                       u[i];
            ref_matvec(tmp, W(w, l, "ffn_down"), g, E, F);
            if (gemma) ref_rmsnorm(tmp, W(w, l, "post_ffw_norm"), E, m->eps);
            for (uint32_t e = 0; e < E; e++) x[t * E + e] = xo[t * E + e] + tmp[e];
        }
        free(xo);
    }
    const float *out_w = m->tied ? W(w, UINT32_MAX, "token_embd") : W(w, UINT32_MAX, "output");
    for (uint64_t t = 0; t < n; t++) {
        memcpy(h, x + t * E, E * sizeof *h);
        ref_rmsnorm(h, W(w, UINT32_MAX, "output_norm"), E, m->eps);
        ref_matvec(o->logits + t * m->vocab, out_w, h, m->vocab, E);
        for (uint32_t i = 0; m->softcap > 0 && i < m->vocab; i++)
            o->logits[t * m->vocab + i] = m->softcap * tanh(o->logits[t * m->vocab + i] / m->softcap);
    }
    free(x), free(h), free(q), free(k), free(v), free(att), free(tmp), free(g), free(u), free(p);
}

/* max |a - b| / max |b| */
static double rel_diff(const float *a, const double *b, uint64_t n) {
    double md = 0, mb = 0;
    for (uint64_t i = 0; i < n; i++) {
        md = fmax(md, fabs(a[i] - b[i]));
        mb = fmax(mb, fabs(b[i]));
    }
    return mb > 0 ? md / mb : md;
}

static double rel_diff_f(const float *a, const float *b, uint64_t n) {
    double md = 0, mb = 0;
    for (uint64_t i = 0; i < n; i++) {
        md = fmax(md, fabs((double)a[i] - b[i]));
        mb = fmax(mb, fabs((double)b[i]));
    }
    return mb > 0 ? md / mb : md;
}

static char tmpdir[256];
static void path_in_tmp(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", tmpdir, name);
}

static void make_tokens(int32_t *tok, uint64_t n, uint32_t vocab, uint64_t seed) {
    rng_state = seed;
    for (uint64_t i = 0; i < n; i++) tok[i] = (int32_t)((rnd() + 1.0f) * 0.5f * (float)vocab) % (int32_t)vocab;
}

/* ---------------------------------------------------------------- *
 * tests
 * ---------------------------------------------------------------- */

#define NTOK 100 /* more than one prefill chunk (64) */

static void test_against_reference(const tiny *m, const char *file) {
    weights w;
    make_weights(m, &w, 7);
    char path[512];
    path_in_tmp(path, sizeof path, file);
    write_gguf(path, m, &w);

    fathom_model *model = NULL;
    CHECK_OK(fathom_model_open(&model, path));
    if (!model) {
        free_weights(&w);
        return;
    }
    fathom_model_info info;
    CHECK_OK(fathom_model_get_info(model, &info));
    CHECK(!strcmp(info.arch, m->arch));
    CHECK(!strcmp(info.name, "tiny test model"));
    CHECK(info.layers == m->layers && info.embed == m->embed && info.ffn == m->ffn);
    CHECK(info.q_heads == m->q_heads && info.kv_heads == m->kv_heads && info.head_dim == m->head_dim);
    CHECK(info.vocab == m->vocab && info.context_length == m->ctx);
    CHECK(info.qk_norm == m->qk_norm && info.tied_output == m->tied);
    CHECK(info.rope_neox == (!strcmp(m->arch, "qwen3") || is_gemma(m)));
    CHECK(info.sliding_window == m->window && info.gelu == is_gemma(m) && info.post_norms == is_gemma(m));
    CHECK_NEAR(info.logit_softcap, m->softcap, 0);
    CHECK_NEAR(info.attn_scale, 1.0 / sqrt((double)m->head_dim), 1e-7);
    for (uint32_t l = 0; l < m->layers; l++)
        CHECK(fathom_model_layer_sliding(model, l) == (is_gemma(m) && l % m->pattern != m->pattern - 1));
    CHECK_NEAR(info.rope_base, m->rope_base, 0);
    CHECK_NEAR(info.rms_eps, m->eps, 0);
    uint64_t params = 0;
    for (uint32_t i = 0; i < w.n; i++) params += w.t[i].cols * (w.t[i].rows ? w.t[i].rows : 1);
    CHECK(info.params == params);

    int32_t tok[NTOK];
    make_tokens(tok, NTOK, m->vocab, 99);
    const uint32_t V = m->vocab, D = m->head_dim, Hq = m->q_heads, Hk = m->kv_heads, L = m->layers;
    ref_out ro = {malloc(sizeof(double) * NTOK * V), malloc(sizeof(double) * L * NTOK * Hq * D),
                  malloc(sizeof(double) * L * NTOK * Hk * D)};
    ref_forward(m, &w, tok, NTOK, &ro);

    /* Prefill 70 (two chunks), then 30 steps; every logit row vs the reference. */
    fathom_ctx *ctx = NULL;
    CHECK_OK(fathom_ctx_create(&ctx, model, 128, 2));
    float *logits = malloc(sizeof(float) * V), *q_rec = malloc(sizeof(float) * L * Hq * 40 * D);
    CHECK_OK(fathom_ctx_record_queries(ctx, 60, 40, q_rec));
    CHECK_OK(fathom_ctx_prefill(ctx, tok, 70, logits));
    CHECK(fathom_ctx_length(ctx) == 70 && fathom_ctx_capacity(ctx) == 128);
    double worst = rel_diff(logits, ro.logits + 69 * V, V);
    for (uint64_t t = 70; t < NTOK; t++) {
        CHECK_OK(fathom_ctx_step(ctx, tok[t], logits));
        worst = fmax(worst, rel_diff(logits, ro.logits + t * V, V));
    }
    printf("%s: logits vs double reference: max rel diff %.2e\n", m->arch, worst);
    CHECK(worst < 1e-5);
    /* Queries as attention saw them (positions 60..99) and the cached keys. */
    double qd = 0, kd = 0;
    for (uint32_t l = 0; l < L; l++) {
        for (uint32_t h = 0; h < Hq; h++)
            for (uint32_t p = 0; p < 40; p++)
                for (uint32_t c = 0; c < D; c++) {
                    double r = ro.q[(((uint64_t)l * NTOK + 60 + p) * Hq + h) * D + c];
                    qd = fmax(qd, fabs(q_rec[(((uint64_t)l * Hq + h) * 40 + p) * D + c] - r) / (1 + fabs(r)));
                }
        for (uint32_t h = 0; h < Hk; h++) {
            const float *keys, *values;
            CHECK_OK(fathom_ctx_kv(ctx, l, h, &keys, &values));
            for (uint32_t p = 0; p < NTOK; p++)
                for (uint32_t c = 0; c < D; c++) {
                    double r = ro.k[(((uint64_t)l * NTOK + p) * Hk + h) * D + c];
                    kd = fmax(kd, fabs(keys[p * D + c] - r) / (1 + fabs(r)));
                }
        }
    }
    printf("%s: recorded queries / cached keys vs reference: %.2e / %.2e\n", m->arch, qd, kd);
    CHECK(qd < 1e-5 && kd < 1e-5);
    CHECK_STATUS(fathom_ctx_step(ctx, 200 % V, NULL), FATHOM_OK); /* logits may be NULL */
    fathom_ctx_stats st;
    CHECK_OK(fathom_ctx_get_stats(ctx, &st));
    CHECK(st.prefill_tokens == 70 && st.decode_steps == 31 && st.sparse_steps == 0);

    /* Capacity: 128 positions, 101 used. */
    int32_t many[40] = {0};
    CHECK_STATUS(fathom_ctx_prefill(ctx, many, 28, NULL), FATHOM_ERR_STATE);
    CHECK_OK(fathom_ctx_prefill(ctx, many, 27, NULL));
    CHECK_STATUS(fathom_ctx_step(ctx, 1, NULL), FATHOM_ERR_STATE);
    CHECK_OK(fathom_ctx_reset(ctx));
    CHECK(fathom_ctx_length(ctx) == 0);
    CHECK_OK(fathom_ctx_record_queries(ctx, 0, 0, NULL)); /* stop recording */
    CHECK_OK(fathom_ctx_prefill(ctx, tok, 1, logits));
    CHECK(rel_diff(logits, ro.logits, V) < 1e-5);

    free(logits);
    free(q_rec);
    free(ro.logits);
    free(ro.q);
    free(ro.k);
    fathom_ctx_free(ctx);
    fathom_model_free(model);
    free_weights(&w);
}

/* Logits after prefill(split) + steps for all NTOK tokens, into out [V]. */
static void run_split(fathom_model *model, const int32_t *tok, uint32_t split, uint32_t threads,
                      const fathom_method *m, uint32_t k, const fathom_source *calib, float *out,
                      fathom_ctx_stats *stats) {
    fathom_ctx *ctx = NULL;
    CHECK_OK(fathom_ctx_create(&ctx, model, 0, threads));
    if (!ctx) return;
    if (m) CHECK_OK(fathom_ctx_set_attention(ctx, m, k, calib));
    CHECK_OK(fathom_ctx_prefill(ctx, tok, split, out));
    for (uint32_t t = split; t < NTOK; t++) CHECK_OK(fathom_ctx_step(ctx, tok[t], out));
    if (stats) CHECK_OK(fathom_ctx_get_stats(ctx, stats));
    fathom_ctx_free(ctx);
}

/* Layers a sparse method applies to (gemma3: the global ones). */
static uint32_t global_layers(const tiny *m) {
    return is_gemma(m) ? m->layers / m->pattern : m->layers;
}

static void test_invariance_and_sparse(const tiny *mt, const char *file) {
    weights w;
    make_weights(mt, &w, 11);
    char path[512], cap_path[512];
    path_in_tmp(path, sizeof path, file);
    path_in_tmp(cap_path, sizeof cap_path, "calib.safetensors");
    write_gguf(path, mt, &w);
    free_weights(&w);
    fathom_model *model = NULL;
    CHECK_OK(fathom_model_open(&model, path));
    if (!model) return;
    const uint32_t V = mt->vocab;
    int32_t tok[NTOK];
    make_tokens(tok, NTOK, V, 5);
    float *a = malloc(V * sizeof *a), *b = malloc(V * sizeof *b), *c = malloc(V * sizeof *c);

    /* bit-identical whatever the split and the thread count */
    run_split(model, tok, NTOK, 1, NULL, 0, NULL, a, NULL);
    run_split(model, tok, 1, 3, NULL, 0, NULL, b, NULL);
    run_split(model, tok, 64, 2, NULL, 0, NULL, c, NULL);
    CHECK(memcmp(a, b, V * sizeof *a) == 0);
    CHECK(memcmp(a, c, V * sizeof *a) == 0);

    /* sparse with k >= n: everything selected, equal to dense up to
     * fathom_attend's double accumulation */
    const char *all[] = {"oracle", "fathom:32", "fathom:8", "sparq:4", "thumb", "full4", "landmark", "dense",
                         "fathom-centered:8"};
    fathom_ctx_stats st;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        fathom_method m;
        CHECK_OK(fathom_method_parse(all[i], &m));
        run_split(model, tok, 40, 2, &m, 1000, NULL, b, &st);
        double r = rel_diff_f(b, a, V);
        if (r >= 1e-5) fprintf(stderr, "%s k=1000: rel diff %.3g\n", all[i], r);
        CHECK(r < 1e-5);
        const bool dense = m.kind == FATHOM_METHOD_DENSE;
        CHECK(st.decode_steps == NTOK - 40);
        CHECK(st.sparse_steps == (dense ? 0 : NTOK - 40));
        CHECK(st.selected_rows == st.visible_rows);
        /* visible rows: steps at positions 40..99 see 41..100 keys, per layer and query head */
        CHECK(dense || st.visible_rows == (double)global_layers(mt) * mt->q_heads * (41 + 100) * 60 / 2);
        CHECK(dense || st.scan_bytes > 0);
    }

    /* k = 40 of up to 100: exactly min(k, n) per head, and the result changes */
    const char *sparse[] = {"oracle", "fathom:8", "sparq:4", "thumb", "full4", "landmark", "fathom-centered:8"};
    for (size_t i = 0; i < sizeof sparse / sizeof sparse[0]; i++) {
        fathom_method m;
        CHECK_OK(fathom_method_parse(sparse[i], &m));
        run_split(model, tok, 40, 2, &m, 40, NULL, b, &st);
        CHECK(st.selected_rows == (double)global_layers(mt) * mt->q_heads * 40 * 60);
        double r = rel_diff_f(b, a, V);
        CHECK(r > 0 && r < 1);
        /* and it is deterministic across thread counts */
        run_split(model, tok, 40, 1, &m, 40, NULL, c, NULL);
        CHECK(memcmp(b, c, V * sizeof *b) == 0);
    }
    /* set_attention after the prefill indexes what is cached: same result */
    {
        fathom_method m;
        CHECK_OK(fathom_method_parse("fathom:8", &m));
        run_split(model, tok, 40, 2, &m, 40, NULL, b, NULL);
        fathom_ctx *ctx = NULL;
        CHECK_OK(fathom_ctx_create(&ctx, model, 0, 2));
        CHECK_OK(fathom_ctx_prefill(ctx, tok, 40, c));
        CHECK_OK(fathom_ctx_set_attention(ctx, &m, 40, NULL));
        for (uint32_t t = 40; t < NTOK; t++) CHECK_OK(fathom_ctx_step(ctx, tok[t], c));
        CHECK(memcmp(b, c, V * sizeof *b) == 0);
        /* reset keeps the method and empties its index: same result again */
        CHECK_OK(fathom_ctx_reset(ctx));
        CHECK_OK(fathom_ctx_prefill(ctx, tok, 40, c));
        for (uint32_t t = 40; t < NTOK; t++) CHECK_OK(fathom_ctx_step(ctx, tok[t], c));
        CHECK(memcmp(b, c, V * sizeof *b) == 0);
        /* back to dense */
        CHECK_OK(fathom_ctx_set_attention(ctx, NULL, 0, NULL));
        CHECK_OK(fathom_ctx_reset(ctx));
        CHECK_OK(fathom_ctx_prefill(ctx, tok, NTOK, c));
        CHECK(memcmp(a, c, V * sizeof *a) == 0);
        fathom_ctx_free(ctx);
    }

    /* A prefill longer than one forward batch reaches the index in one append
     * when it ends: setting the method before it or after it is the same,
     * fathom-centered's center (the first append's mean) included. */
    for (int centered = 0; centered < 2; centered++) {
        fathom_method m;
        CHECK_OK(fathom_method_parse(centered ? "fathom-centered:8" : "fathom:8", &m));
        run_split(model, tok, 80, 2, &m, 40, NULL, b, NULL);
        fathom_ctx *ctx = NULL;
        CHECK_OK(fathom_ctx_create(&ctx, model, 0, 2));
        CHECK_OK(fathom_ctx_prefill(ctx, tok, 80, c));
        CHECK_OK(fathom_ctx_set_attention(ctx, &m, 40, NULL));
        for (uint32_t t = 80; t < NTOK; t++) CHECK_OK(fathom_ctx_step(ctx, tok[t], c));
        CHECK(memcmp(b, c, V * sizeof *b) == 0);
        fathom_ctx_free(ctx);
    }

    /* Calibrated methods: need a capture, then behave like the others. */
    const char *calibrated[] = {"fathom-klt:16", "ds:4", "loki:4"};
    fathom_ctx *ctx = NULL;
    CHECK_OK(fathom_ctx_create(&ctx, model, 0, 2));
    for (size_t i = 0; ctx && i < 3; i++) {
        fathom_method m;
        CHECK_OK(fathom_method_parse(calibrated[i], &m));
        CHECK_STATUS(fathom_ctx_set_attention(ctx, &m, 40, NULL), FATHOM_ERR_UNSUPPORTED);
    }
    /* a capture of the model on other text, as fathom capture writes it */
    fathom_model_info mi;
    fathom_model_get_info(model, &mi);
    const uint32_t P = 16, n = 64, D = mi.head_dim;
    float *q = malloc(sizeof(float) * mi.layers * mi.q_heads * P * D);
    float *kk = malloc(sizeof(float) * mi.kv_heads * n * D), *vv = malloc(sizeof(float) * mi.kv_heads * n * D);
    int32_t other[64];
    make_tokens(other, n, V, 1234);
    CHECK_OK(fathom_ctx_reset(ctx));
    CHECK_OK(fathom_ctx_record_queries(ctx, n - P, P, q));
    CHECK_OK(fathom_ctx_prefill(ctx, other, n, NULL));
    fathom_source_info si = {"tiny", mi.layers, mi.q_heads, mi.kv_heads, D, n, P, n - P};
    fathom_capture_writer *wr = NULL, *wg = NULL;
    CHECK_OK(fathom_capture_writer_open(&wr, cap_path, &si, FATHOM_DTYPE_F32));
    /* and one of the global layers only (fathom capture --global-only) */
    const uint32_t n_global = global_layers(mt);
    char glob_path[512];
    path_in_tmp(glob_path, sizeof glob_path, "calib_global.safetensors");
    fathom_source_info sg = si;
    sg.layers = n_global;
    if (n_global < mi.layers) CHECK_OK(fathom_capture_writer_open(&wg, glob_path, &sg, FATHOM_DTYPE_F32));
    for (uint32_t l = 0, g = 0; wr && l < mi.layers; l++) {
        for (uint32_t h = 0; h < mi.kv_heads; h++) {
            const float *keys, *values;
            CHECK_OK(fathom_ctx_kv(ctx, l, h, &keys, &values));
            memcpy(kk + (uint64_t)h * n * D, keys, sizeof(float) * n * D);
            memcpy(vv + (uint64_t)h * n * D, values, sizeof(float) * n * D);
        }
        CHECK_OK(fathom_capture_writer_layer(wr, l, q + (uint64_t)l * mi.q_heads * P * D, kk, vv));
        if (wg && !fathom_model_layer_sliding(model, l))
            CHECK_OK(fathom_capture_writer_layer(wg, g++, q + (uint64_t)l * mi.q_heads * P * D, kk, vv));
    }
    if (wr) CHECK_OK(fathom_capture_writer_close(wr));
    if (wg) CHECK_OK(fathom_capture_writer_close(wg));
    fathom_ctx_free(ctx);
    fathom_source *calib = NULL;
    CHECK_OK(fathom_capture_open(&calib, cap_path));
    const char *with_calib[] = {"fathom-klt:16", "ds:4", "loki:4", "fathom:8"};
    for (size_t i = 0; calib && i < 4; i++) {
        fathom_method m;
        CHECK_OK(fathom_method_parse(with_calib[i], &m));
        run_split(model, tok, 40, 2, &m, 1000, calib, b, &st);
        CHECK(rel_diff_f(b, a, V) < 1e-5);
        run_split(model, tok, 40, 2, &m, 40, calib, b, &st);
        CHECK(st.selected_rows == (double)global_layers(mt) * mt->q_heads * 40 * 60);
        CHECK(rel_diff_f(b, a, V) > 0 && st.scan_bytes > 0);
    }
    /* the global layers' capture calibrates exactly as the whole one */
    fathom_source *glob = NULL;
    if (n_global < mi.layers) CHECK_OK(fathom_capture_open(&glob, glob_path));
    for (size_t i = 0; glob && i < 4; i++) {
        fathom_method m;
        CHECK_OK(fathom_method_parse(with_calib[i], &m));
        run_split(model, tok, 40, 2, &m, 40, calib, b, NULL);
        run_split(model, tok, 40, 2, &m, 40, glob, c, NULL);
        CHECK(memcmp(b, c, V * sizeof *b) == 0);
    }
    fathom_source_free(glob);
    if (n_global < mi.layers) unlink(glob_path);
    /* a calibration of another shape is refused */
    fathom_source *wrong = NULL;
    CHECK_OK(fathom_synth_open(&wrong, "smollm2-135m", 256, 8, 1));
    fathom_method klt;
    CHECK_OK(fathom_method_parse("fathom-klt:16", &klt));
    CHECK_OK(fathom_ctx_create(&ctx, model, 0, 1));
    CHECK_STATUS(fathom_ctx_set_attention(ctx, &klt, 40, wrong), FATHOM_ERR_INVALID_ARG);
    fathom_ctx_free(ctx);
    fathom_source_free(wrong);
    fathom_source_free(calib);
    unlink(cap_path);
    free(q);
    free(kk);
    free(vv);
    free(a);
    free(b);
    free(c);
    fathom_model_free(model);
}

static int open_status(const tiny *m, const char *expect_in_message) {
    weights w;
    make_weights(m, &w, 3);
    char path[512];
    path_in_tmp(path, sizeof path, "hostile.gguf");
    write_gguf(path, m, &w);
    free_weights(&w);
    fathom_model *model = (fathom_model *)&rng_state; /* must be reset to NULL */
    int st = fathom_model_open(&model, path);
    CHECK(model == NULL || st == FATHOM_OK);
    if (st < 0 && expect_in_message && !strstr(fathom_last_error(), expect_in_message)) {
        fprintf(stderr, "message \"%s\" lacks \"%s\"\n", fathom_last_error(), expect_in_message);
        CHECK(0);
    }
    fathom_model_free(model == (fathom_model *)&rng_state ? NULL : model);
    unlink(path);
    return st;
}

static void test_hostile(void) {
    tiny m = gemma_tiny();
    CHECK_STATUS(open_status(&m, NULL), FATHOM_OK);
    m.attn_softcap = 1; /* declared, not implemented */
    CHECK_STATUS(open_status(&m, "attn_logit_softcapping"), FATHOM_ERR_UNSUPPORTED);
    m = gemma_tiny();
    m.skip = "blk.2.post_ffw_norm.weight";
    CHECK_STATUS(open_status(&m, "blk.2.post_ffw_norm.weight is missing"), FATHOM_ERR_FORMAT);
    m = llama_tiny();
    m.window = 4; /* a sliding window with its pattern and base outside gemma3: run */
    m.pattern = 2;
    CHECK_STATUS(open_status(&m, "freq_base_swa = 0"), FATHOM_ERR_FORMAT);
    m.rope_base_swa = 500.0f;
    CHECK_STATUS(open_status(&m, NULL), FATHOM_OK);
    m = llama_tiny();
    CHECK_STATUS(open_status(&m, NULL), FATHOM_OK);
    m.reshape = "blk.1.attn_k.weight";
    CHECK_STATUS(open_status(&m, "blk.1.attn_k.weight"), FATHOM_ERR_FORMAT);
    m = llama_tiny();
    m.skip = "blk.0.ffn_up.weight";
    CHECK_STATUS(open_status(&m, "blk.0.ffn_up.weight is missing"), FATHOM_ERR_FORMAT);
    m = llama_tiny();
    m.skip = "output_norm.weight";
    CHECK_STATUS(open_status(&m, "output_norm"), FATHOM_ERR_FORMAT);
    m = llama_tiny();
    m.extra = "blk.0.attn_q.bias";
    CHECK_STATUS(open_status(&m, "blk.0.attn_q.bias"), FATHOM_ERR_UNSUPPORTED);
    m = llama_tiny();
    m.extra = "rope_freqs.weight";
    CHECK_STATUS(open_status(&m, "rope_freqs"), FATHOM_ERR_UNSUPPORTED);
    m = llama_tiny();
    m.extra = "blk.0.attn_q_norm.weight"; /* QK-norm in one layer only (blk.0 decides) */
    CHECK_STATUS(open_status(&m, "attn_k_norm"), FATHOM_ERR_FORMAT);
    m = llama_tiny();
    m.extra = "blk.1.attn_q_norm.weight"; /* ... or in a later layer, unused */
    CHECK_STATUS(open_status(&m, "blk.1.attn_q_norm"), FATHOM_ERR_UNSUPPORTED);
    m = llama_tiny();
    m.nan_in = "blk.1.ffn_down.weight";
    CHECK_STATUS(open_status(&m, "blk.1.ffn_down.weight"), FATHOM_ERR_NONFINITE);
    m = llama_tiny();
    m.head_count_meta = 3; /* not a multiple of head_count_kv 2 */
    CHECK_STATUS(open_status(&m, "head_count"), FATHOM_ERR_FORMAT);
    m = llama_tiny();
    m.head_count_meta = 8; /* 8 heads of 32/8 = 4: not the 8 of rope.dimension_count */
    CHECK_STATUS(open_status(&m, "partial RoPE"), FATHOM_ERR_UNSUPPORTED);
    m = llama_tiny();
    m.vocab_meta = 65;
    CHECK_STATUS(open_status(&m, "vocab_size"), FATHOM_ERR_FORMAT);
    m = llama_tiny();
    m.vocab_meta = -1; /* optional */
    CHECK_STATUS(open_status(&m, NULL), FATHOM_OK);
    m = llama_tiny();
    m.rope_scaling = "linear";
    CHECK_STATUS(open_status(&m, "linear"), FATHOM_ERR_UNSUPPORTED);
    m = llama_tiny();
    m.rope_scaling = "none";
    CHECK_STATUS(open_status(&m, NULL), FATHOM_OK);
    m = llama_tiny();
    m.block_count_meta = 3; /* more layers than the file has */
    CHECK_STATUS(open_status(&m, "blk.2"), FATHOM_ERR_FORMAT);
    m = llama_tiny();
    m.block_count_meta = 1; /* fewer: blk.1.* are left over */
    CHECK_STATUS(open_status(&m, "blk.1"), FATHOM_ERR_UNSUPPORTED);
    m = llama_tiny();
    m.arch = "gpt2";
    CHECK_STATUS(open_status(&m, "gpt2"), FATHOM_ERR_UNSUPPORTED);

    /* a truncated file and a file that is not GGUF */
    weights w;
    m = llama_tiny();
    make_weights(&m, &w, 3);
    char path[512];
    path_in_tmp(path, sizeof path, "cut.gguf");
    write_gguf(path, &m, &w);
    free_weights(&w);
    CHECK(truncate(path, 3000) == 0);
    fathom_model *model = NULL;
    CHECK(fathom_model_open(&model, path) < 0 && model == NULL);
    FILE *f = fopen(path, "wb");
    fputs("not a gguf file at all, just text", f);
    fclose(f);
    CHECK_STATUS(fathom_model_open(&model, path), FATHOM_ERR_FORMAT);
    unlink(path);
    path_in_tmp(path, sizeof path, "does-not-exist.gguf");
    CHECK_STATUS(fathom_model_open(&model, path), FATHOM_ERR_IO);
}

/* Finite but extreme weights (3e38) load (they are finite), and the forward
 * pass fails with FATHOM_ERR_NONFINITE naming where the overflow surfaced,
 * never with NaN logits and FATHOM_OK. */
static void extreme_case(const tiny *m, const char *tensor_name, const char *expect) {
    weights w;
    make_weights(m, &w, 3);
    tensor *t = (tensor *)find_tensor(&w, tensor_name);
    CHECK(t != NULL);
    if (!t) return;
    for (uint64_t i = 0; i < t->cols * (t->rows ? t->rows : 1); i++) t->data[i] = 3e38f;
    char path[512];
    path_in_tmp(path, sizeof path, "extreme.gguf");
    write_gguf(path, m, &w);
    free_weights(&w);
    fathom_model *model = NULL;
    fathom_ctx *ctx = NULL;
    CHECK_OK(fathom_model_open(&model, path));
    CHECK_OK(fathom_ctx_create(&ctx, model, 16, 2));
    if (model && ctx) {
        int32_t tok[4] = {1, 5, 9, 2};
        float *logits = malloc(m->vocab * sizeof(float));
        CHECK_STATUS(fathom_ctx_prefill(ctx, tok, 4, logits), FATHOM_ERR_NONFINITE);
        if (!strstr(fathom_last_error(), expect)) {
            fprintf(stderr, "%s: message \"%s\" lacks \"%s\"\n", tensor_name, fathom_last_error(), expect);
            CHECK(0);
        }
        free(logits);
    }
    fathom_ctx_free(ctx);
    fathom_model_free(model);
    unlink(path);
}

static void test_extreme_weights(void) {
    const tiny llama = llama_tiny(), qwen = qwen_tiny();
    extreme_case(&llama, "blk.1.attn_k.weight", "model: layer 1, key head 0, position 0: not finite");
    extreme_case(&llama, "blk.0.ffn_down.weight", "model: layer 0, position 0: the residual stream is not finite");
    extreme_case(&qwen, "output.weight", "model: the logits at position 3 are not finite");
}

static void test_bad_args(void) {
    tiny m = llama_tiny();
    weights w;
    make_weights(&m, &w, 3);
    char path[512];
    path_in_tmp(path, sizeof path, "args.gguf");
    write_gguf(path, &m, &w);
    free_weights(&w);
    fathom_model *model = NULL;
    CHECK_STATUS(fathom_model_open(NULL, path), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_model_open(&model, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_OK(fathom_model_open(&model, path));
    if (!model) return;
    fathom_model_info info;
    CHECK_STATUS(fathom_model_get_info(NULL, &info), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_model_get_info(model, NULL), FATHOM_ERR_INVALID_ARG);
    fathom_tokenizer *tok = NULL;
    CHECK_STATUS(fathom_model_tokenizer(NULL, &tok), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_model_tokenizer(model, NULL), FATHOM_ERR_INVALID_ARG);
    /* the tiny file has no tokenizer metadata */
    CHECK_STATUS(fathom_model_tokenizer(model, &tok), FATHOM_ERR_FORMAT);
    CHECK(tok == NULL && strstr(fathom_last_error(), "tokenizer.ggml.model"));
    CHECK_STATUS(fathom_tokenizer_from_gguf(NULL, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_tokenizer_from_gguf(&tok, NULL), FATHOM_ERR_INVALID_ARG);

    fathom_ctx *ctx = NULL;
    CHECK_STATUS(fathom_ctx_create(NULL, model, 16, 1), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_ctx_create(&ctx, NULL, 16, 1), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_ctx_create(&ctx, model, 16, 100000), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_ctx_create(&ctx, model, UINT32_MAX, 1), FATHOM_ERR_INVALID_ARG);
    CHECK_OK(fathom_ctx_create(&ctx, model, 16, 2));
    if (!ctx) return;
    int32_t tok3[3] = {1, 2, 3}, bad[2] = {1, 64}, neg = -1;
    float logits[64];
    CHECK_STATUS(fathom_ctx_prefill(NULL, tok3, 3, logits), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_ctx_prefill(ctx, NULL, 3, logits), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_ctx_prefill(ctx, tok3, 0, logits), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_ctx_prefill(ctx, bad, 2, logits), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_ctx_prefill(ctx, &neg, 1, logits), FATHOM_ERR_INVALID_ARG);
    CHECK(fathom_ctx_length(ctx) == 0);
    CHECK_STATUS(fathom_ctx_step(NULL, 1, logits), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_ctx_step(ctx, 64, logits), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_ctx_step(ctx, -5, logits), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_ctx_reset(NULL), FATHOM_ERR_INVALID_ARG);
    CHECK(fathom_ctx_length(NULL) == 0 && fathom_ctx_capacity(NULL) == 0);

    fathom_method meth;
    CHECK_OK(fathom_method_parse("fathom:8", &meth));
    CHECK_STATUS(fathom_ctx_set_attention(NULL, &meth, 8, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_ctx_set_attention(ctx, &meth, 0, NULL), FATHOM_ERR_INVALID_ARG);
    fathom_method odd = meth;
    odd.kind = (fathom_method_kind)77;
    CHECK_STATUS(fathom_ctx_set_attention(ctx, &odd, 8, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_OK(fathom_method_parse("sparq:9", &odd)); /* more channels than d = 8 */
    CHECK_STATUS(fathom_ctx_set_attention(ctx, &odd, 8, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_OK(fathom_method_parse("fathom:33", &odd)); /* more code bits than 4 * d (fathom_method_check) */
    CHECK_STATUS(fathom_ctx_set_attention(ctx, &odd, 8, NULL), FATHOM_ERR_INVALID_ARG);

    float buf[8];
    CHECK_STATUS(fathom_ctx_record_queries(NULL, 0, 1, buf), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_ctx_record_queries(ctx, 0, 0, buf), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_ctx_record_queries(ctx, 10, 7, buf), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_ctx_record_queries(ctx, 16, 1, buf), FATHOM_ERR_INVALID_ARG);
    const float *k, *v;
    CHECK_STATUS(fathom_ctx_kv(NULL, 0, 0, &k, &v), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_ctx_kv(ctx, 2, 0, &k, &v), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_ctx_kv(ctx, 0, 2, &k, &v), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_ctx_kv(ctx, 0, 0, NULL, &v), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_ctx_kv(ctx, 0, 0, &k, NULL), FATHOM_ERR_INVALID_ARG);
    fathom_ctx_stats st;
    CHECK_STATUS(fathom_ctx_get_stats(NULL, &st), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_ctx_get_stats(ctx, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_ctx_set_progress(NULL, NULL, NULL), FATHOM_ERR_INVALID_ARG);

    int32_t ids[16] = {0};
    CHECK_OK(fathom_ctx_set_progress(ctx, NULL, NULL));
    CHECK_OK(fathom_ctx_prefill(ctx, ids, 16, NULL));
    CHECK_STATUS(fathom_ctx_step(ctx, 1, logits), FATHOM_ERR_STATE); /* full */
    fathom_ctx_free(ctx);
    fathom_ctx_free(NULL);
    fathom_model_free(model);
    fathom_model_free(NULL);
    unlink(path);
}

typedef struct progress_log {
    uint64_t calls, last_done, last_total;
} progress_log;

static void on_progress(void *user, uint64_t done, uint64_t total) {
    progress_log *p = user;
    p->calls++;
    p->last_done = done;
    p->last_total = total;
}

static void test_tokenizer(void) {
    tiny m = llama_tiny();
    m.tokenizer = 1;
    m.vocab = 258;
    weights w;
    make_weights(&m, &w, 3);
    char path[512];
    path_in_tmp(path, sizeof path, "tok.gguf");
    write_gguf(path, &m, &w);
    free_weights(&w);
    fathom_model *model = NULL;
    fathom_tokenizer *tok = NULL;
    CHECK_OK(fathom_model_open(&model, path));
    CHECK_OK(fathom_model_tokenizer(model, &tok));
    if (tok) {
        int32_t ids[8];
        size_t n = 0;
        CHECK_OK(fathom_tokenizer_encode(tok, "ab ab", 5, 0, ids, 8, &n));
        CHECK(n == 3 && ids[0] == 256 && ids[1] == ' ' && ids[2] == 256);
        CHECK_OK(fathom_tokenizer_encode(tok, "b<|im_end|>", 11, 1, ids, 8, &n));
        CHECK(n == 2 && ids[0] == 'b' && ids[1] == 257);
        char text[16];
        CHECK_OK(fathom_tokenizer_decode(tok, ids, n, text, sizeof text, &n));
        CHECK(n == 11 && !memcmp(text, "b<|im_end|>", 11));
        CHECK(fathom_tokenizer_vocab_size(tok) == 258);
        CHECK(fathom_tokenizer_eos(tok) == 257 && fathom_tokenizer_bos(tok) == -1);
        CHECK(fathom_tokenizer_token_type(tok, 257) == FATHOM_TOKEN_CONTROL);
    }
    fathom_tokenizer_free(tok);
    fathom_model_free(model);
    /* a vocabulary larger than the model's embedding is refused */
    m.vocab = 200;
    make_weights(&m, &w, 3);
    write_gguf(path, &m, &w);
    free_weights(&w);
    CHECK_OK(fathom_model_open(&model, path));
    CHECK_STATUS(fathom_model_tokenizer(model, &tok), FATHOM_ERR_FORMAT);
    CHECK(tok == NULL);
    fathom_model_free(model);
    unlink(path);
}

static void test_progress(void) {
    tiny m = llama_tiny();
    weights w;
    make_weights(&m, &w, 3);
    char path[512];
    path_in_tmp(path, sizeof path, "progress.gguf");
    write_gguf(path, &m, &w);
    free_weights(&w);
    fathom_model *model = NULL;
    fathom_ctx *ctx = NULL;
    CHECK_OK(fathom_model_open(&model, path));
    CHECK_OK(fathom_ctx_create(&ctx, model, 150, 1));
    if (ctx) {
        progress_log log = {0};
        int32_t ids[150] = {0};
        CHECK_OK(fathom_ctx_set_progress(ctx, on_progress, &log));
        CHECK_OK(fathom_ctx_prefill(ctx, ids, 150, NULL));
        CHECK(log.calls == 3 && log.last_done == 150 && log.last_total == 150); /* 64 + 64 + 22 */
    }
    fathom_ctx_free(ctx);
    fathom_model_free(model);
    unlink(path);
}

/* fathom_ctx_truncate: decoding after a rewind gives the same logits, bit
 * for bit, as the first time (dense and sparse, whose index is rebuilt). */
static void test_truncate(void) {
    tiny m = llama_tiny();
    weights w;
    make_weights(&m, &w, 5);
    char path[512];
    path_in_tmp(path, sizeof path, "truncate.gguf");
    write_gguf(path, &m, &w);
    free_weights(&w);
    fathom_model *model = NULL;
    fathom_ctx *ctx = NULL;
    CHECK_OK(fathom_model_open(&model, path));
    CHECK_OK(fathom_ctx_create(&ctx, model, 120, 1));
    CHECK_STATUS(fathom_ctx_truncate(NULL, 0), FATHOM_ERR_INVALID_ARG);
    if (ctx) {
        int32_t tok[100];
        make_tokens(tok, 100, m.vocab, 17);
        float a[64], b[64], first[64];
        CHECK_OK(fathom_ctx_prefill(ctx, tok, 90, NULL));
        CHECK_STATUS(fathom_ctx_truncate(ctx, 91), FATHOM_ERR_INVALID_ARG);
        for (int pass = 0; pass < 2; pass++) {
            fathom_method method;
            CHECK_OK(fathom_method_parse(pass ? "fathom:16" : "dense", &method));
            CHECK_OK(fathom_ctx_set_attention(ctx, &method, 40, NULL));
            for (int rep = 0; rep < 2; rep++) {
                CHECK_OK(fathom_ctx_truncate(ctx, 80));
                CHECK(fathom_ctx_length(ctx) == 80);
                float *out = rep ? b : a;
                for (int i = 80; i < 100; i++) CHECK_OK(fathom_ctx_step(ctx, tok[i], out));
                CHECK(fathom_ctx_length(ctx) == 100);
            }
            CHECK(memcmp(a, b, sizeof a) == 0);
            if (pass == 0) memcpy(first, a, sizeof a);
            else CHECK(memcmp(first, a, sizeof a) != 0); /* k 40 of 100: sparse differs */
        }
        /* Truncating to 0 leaves an empty context that prefills as new. */
        CHECK_OK(fathom_ctx_set_attention(ctx, NULL, 1, NULL));
        CHECK_OK(fathom_ctx_truncate(ctx, 0));
        CHECK(fathom_ctx_length(ctx) == 0);
        CHECK_OK(fathom_ctx_prefill(ctx, tok, 100, b));
        CHECK(memcmp(first, b, sizeof b) == 0); /* dense steps == dense prefill */
    }
    fathom_ctx_free(ctx);
    fathom_model_free(model);
    unlink(path);
}

/* fathom_ctx_set_trace: one record per sparse step, layer and query head;
 * rows are the visible positions that were selected (their total is the
 * context's selected_rows), fathom's depths are its plan and sum to the bit
 * budget, oracle reads no planes; tracing does not change the logits. */
typedef struct trace_log {
    pthread_mutex_t lock;
    uint64_t records, rows, bad, no_depths, bits;
    uint64_t per_layer_head[8][8];
} trace_log;

static void on_trace(const fathom_trace_record *r, void *user) {
    trace_log *t = user;
    pthread_mutex_lock(&t->lock);
    t->records++;
    t->rows += r->count;
    if (r->layer >= 8 || r->kv_head * 2 + r->q_head >= 8 || r->q_head >= 2 || r->dim != 8)
        t->bad++;
    else
        t->per_layer_head[r->layer][r->kv_head * 2 + r->q_head]++;
    for (uint32_t i = 0; i < r->count; i++) t->bad += r->rows[i] > r->position;
    if (!r->depths)
        t->no_depths++;
    else
        for (uint32_t j = 0; j < r->dim; j++) t->bits += r->depths[j];
    pthread_mutex_unlock(&t->lock);
}

/* Writes model m with weights from seed to the temporary folder as file. */
static void write_tiny(const tiny *m, uint64_t seed, const char *file, char *path, size_t cap) {
    weights w;
    make_weights(m, &w, seed);
    path_in_tmp(path, cap, file);
    write_gguf(path, m, &w);
    free_weights(&w);
}

static void test_trace(void) {
    tiny m = llama_tiny(); /* 2 layers, 4 query heads over 2 KV heads, head_dim 8 */
    char path[512];
    write_tiny(&m, 5, "trace.gguf", path, sizeof path);
    fathom_model *model = NULL;
    CHECK_OK(fathom_model_open(&model, path));
    if (!model) return;
    int32_t tok[NTOK];
    for (uint32_t i = 0; i < NTOK; i++) tok[i] = (int32_t)((i * 37 + 11) % m.vocab);
    float *a = malloc(m.vocab * sizeof *a), *b = malloc(m.vocab * sizeof *b);
    const char *methods[2] = {"fathom:12", "oracle"};
    for (int mi = 0; mi < 2; mi++) {
        fathom_method meth;
        CHECK_OK(fathom_method_parse(methods[mi], &meth));
        run_split(model, tok, 40, 2, &meth, 20, NULL, a, NULL);
        fathom_ctx *ctx = NULL;
        CHECK_OK(fathom_ctx_create(&ctx, model, 0, 2));
        if (!ctx) break;
        trace_log log = {.lock = PTHREAD_MUTEX_INITIALIZER};
        CHECK_OK(fathom_ctx_set_attention(ctx, &meth, 20, NULL));
        CHECK_OK(fathom_ctx_set_trace(ctx, on_trace, &log));
        CHECK_OK(fathom_ctx_prefill(ctx, tok, 40, b)); /* dense: no records */
        CHECK(log.records == 0);
        for (uint32_t t = 40; t < NTOK; t++) CHECK_OK(fathom_ctx_step(ctx, tok[t], b));
        CHECK(memcmp(a, b, m.vocab * sizeof *a) == 0);
        fathom_ctx_stats st;
        CHECK_OK(fathom_ctx_get_stats(ctx, &st));
        const uint64_t steps = NTOK - 40;
        CHECK(log.records == steps * m.layers * m.q_heads && log.bad == 0);
        CHECK((double)log.rows == st.selected_rows && log.rows > 0);
        int even = 1;
        for (uint32_t l = 0; l < m.layers; l++)
            for (uint32_t h = 0; h < m.q_heads; h++) even &= log.per_layer_head[l][h] == steps;
        CHECK(even);
        if (mi == 0) /* one plan per KV head, read by each of its 2 query heads */
            CHECK(log.no_depths == 0 && log.bits == 12 * log.records);
        else
            CHECK(log.no_depths == log.records);
        CHECK_OK(fathom_ctx_set_trace(ctx, NULL, NULL));
        CHECK_OK(fathom_ctx_step(ctx, tok[0], b));
        CHECK(log.records == steps * m.layers * m.q_heads);
        fathom_ctx_free(ctx);
    }
    CHECK_STATUS(fathom_ctx_set_trace(NULL, on_trace, NULL), FATHOM_ERR_INVALID_ARG);
    free(a);
    free(b);
    fathom_model_free(model);
    unlink(path);
}

/* The decode step's selection is the fidelity harness's: fathom_index_scores
 * and fathom_select (what fathom eval runs) over the same cached keys, fed
 * as the decoder feeds its index (the prefill, then the step's key), with
 * the step's own recorded queries, select the same rows in the same order. */
typedef struct selection_log {
    pthread_mutex_t lock;
    uint64_t position;
    uint32_t rows[2][4][50], count[2][4];
} selection_log;

static void on_selection(const fathom_trace_record *r, void *user) {
    selection_log *t = user;
    pthread_mutex_lock(&t->lock);
    if (r->position == t->position && r->layer < 2 && r->kv_head * 2 + r->q_head < 4 && r->count <= 50) {
        memcpy(t->rows[r->layer][r->kv_head * 2 + r->q_head], r->rows, r->count * sizeof(uint32_t));
        t->count[r->layer][r->kv_head * 2 + r->q_head] = r->count;
    }
    pthread_mutex_unlock(&t->lock);
}

static void test_decode_selection_is_evals(void) {
    tiny m = llama_tiny(); /* 2 layers, 4 query heads over 2 KV heads, head_dim 8 */
    char path[512];
    write_tiny(&m, 9, "selection.gguf", path, sizeof path);
    fathom_model *model = NULL;
    CHECK_OK(fathom_model_open(&model, path));
    if (!model) return;
    enum { PRE = 120, K = 50, D = 8, G = 2 }; /* K: sink 4 + local 32 + 14 chosen by the scores */
    int32_t tok[PRE + 1];
    for (uint32_t i = 0; i <= PRE; i++) tok[i] = (int32_t)((i * 29 + 3) % m.vocab);
    float *logits = malloc(m.vocab * sizeof *logits), q[2 * 4 * D];
    const char *methods[] = {"sparq:3", "sparq:6", "fathom:12", "fathom-centered:12", "thumb", "landmark"};
    for (size_t mi = 0; mi < sizeof methods / sizeof methods[0]; mi++) {
        fathom_method meth;
        CHECK_OK(fathom_method_parse(methods[mi], &meth));
        fathom_ctx *ctx = NULL;
        CHECK_OK(fathom_ctx_create(&ctx, model, 0, 1));
        if (!ctx) break;
        selection_log log = {.lock = PTHREAD_MUTEX_INITIALIZER, .position = PRE};
        CHECK_OK(fathom_ctx_prefill(ctx, tok, PRE, logits));
        CHECK_OK(fathom_ctx_set_attention(ctx, &meth, K, NULL));
        CHECK_OK(fathom_ctx_set_trace(ctx, on_selection, &log));
        CHECK_OK(fathom_ctx_record_queries(ctx, PRE, 1, q));
        CHECK_OK(fathom_ctx_step(ctx, tok[PRE], logits));
        for (uint32_t l = 0; l < 2; l++)
            for (uint32_t g = 0; g < 2; g++) {
                const float *keys, *values;
                CHECK_OK(fathom_ctx_kv(ctx, l, g, &keys, &values));
                fathom_index *ix = NULL;
                CHECK_OK(fathom_index_create(&ix, &meth, 1, D, 0));
                CHECK_OK(fathom_index_append(ix, keys, PRE));
                CHECK_OK(fathom_index_append(ix, keys + PRE * D, 1));
                void *scratch = malloc(fathom_index_scratch_size(D, G));
                float scores[G * (PRE + 1)];
                uint64_t work[PRE + 1];
                CHECK_OK(fathom_index_scores(ix, &meth, meth.param, G, q + (l * 4 + g * G) * D, PRE + 1, scores,
                                             scratch, NULL, NULL));
                for (uint32_t h = 0; h < G; h++) {
                    uint32_t idx[K], count = 0;
                    CHECK_OK(fathom_select(scores + h * (PRE + 1), PRE + 1, K, FATHOM_SINK_TOKENS,
                                           FATHOM_LOCAL_TOKENS, work, idx, &count));
                    CHECK(count == K && log.count[l][g * G + h] == count);
                    CHECK(memcmp(idx, log.rows[l][g * G + h], count * sizeof idx[0]) == 0);
                }
                free(scratch);
                fathom_index_free(ix);
            }
        fathom_ctx_free(ctx);
    }
    free(logits);
    fathom_model_free(model);
    unlink(path);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/fathom_test_model_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    tiny llama = llama_tiny(), qwen = qwen_tiny(), gemma = gemma_tiny();
    test_against_reference(&llama, "llama.gguf");
    test_against_reference(&qwen, "qwen3.gguf");
    test_against_reference(&gemma, "gemma3.gguf");
    test_invariance_and_sparse(&llama, "llama2.gguf");
    test_invariance_and_sparse(&gemma, "gemma3b.gguf");
    test_hostile();
    test_extreme_weights();
    test_bad_args();
    test_tokenizer();
    test_progress();
    test_truncate();
    test_trace();
    test_decode_selection_is_evals();
    char path[512];
    const char *names[] = {"llama.gguf", "qwen3.gguf", "llama2.gguf", "gemma3.gguf", "gemma3b.gguf"};
    for (size_t i = 0; i < 5; i++) {
        path_in_tmp(path, sizeof path, names[i]);
        unlink(path);
    }
    rmdir(tmpdir);
    return check_summary("test_model");
}

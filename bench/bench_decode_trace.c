/* bench_decode_trace — record what a sparse CPU decode reads: per step,
 * layer and query head, the plane depths planned per channel and the rows
 * selected (fathom_ctx_set_trace), as text for bench/cache_sim.py.
 *
 *   bench_decode_trace --model GGUF --prompt-file FILE --out TRACE
 *                      [--attn fathom:48] [--k 64] [--steps 64] [--threads T]
 *
 * The prompt is the file's raw text (no chat template), prefilled densely;
 * then `steps` greedy decode steps run with the sparse method. TRACE:
 *   # layers <L> q_heads <Hq> kv_heads <Hkv> dim <d> prompt <n> attn <m> k <k> model <name>
 *   <position> <layer> <kv_head> <q_head> <depths: d hex digits, or -> <count> <row> ...
 * one line per record, in the order the steps produced them; after each step,
 * per layer and KV head, the running key variance over positions 0..position
 * (fathom_store_variance's sums and formula, as the GPU cache fill ranks lines):
 *   v <position> <layer> <kv_head> <d floats, %.9g> */
#include "fathom.h"
#include "fathom_model.h"
#include "bench_prompt.h"
#include "store_internal.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct trace_out {
    FILE *f;
    pthread_mutex_t lock;
    uint64_t records;
} trace_out;

static void on_record(const fathom_trace_record *r, void *user) {
    trace_out *t = user;
    pthread_mutex_lock(&t->lock);
    fprintf(t->f, "%llu %u %u %u ", (unsigned long long)r->position, r->layer, r->kv_head, r->q_head);
    if (r->depths)
        for (uint32_t j = 0; j < r->dim; j++) fputc("0123456789abcdef"[r->depths[j] & 15], t->f);
    else
        fputc('-', t->f);
    fprintf(t->f, " %u", r->count);
    for (uint32_t i = 0; i < r->count; i++) fprintf(t->f, " %u", r->rows[i]);
    fputc('\n', t->f);
    t->records++;
    pthread_mutex_unlock(&t->lock);
}

/* Running per-channel key sums of every (layer, KV head), shifted by the
 * first key as fathom_store_append keeps them. */
typedef struct key_sums {
    uint32_t layers, kv_heads, dim;
    uint64_t length;                 /* positions summed */
    double *shift, *sum, *sum_sq;    /* [layers][kv_heads][dim] */
    float *var;                      /* [dim] */
} key_sums;

/* Add the positions the context filled since the last call, then write one
 * variance line per (layer, KV head). */
static int key_sums_write(key_sums *ks, const fathom_ctx *ctx, FILE *f) {
    const uint64_t n = fathom_ctx_length(ctx);
    const uint32_t d = ks->dim;
    for (uint32_t l = 0; l < ks->layers; l++)
        for (uint32_t h = 0; h < ks->kv_heads; h++) {
            const float *keys, *values;
            int st = fathom_ctx_kv(ctx, l, h, &keys, &values);
            if (st < 0) return st;
            const size_t at = ((size_t)l * ks->kv_heads + h) * d;
            double *shift = ks->shift + at, *sum = ks->sum + at, *sum_sq = ks->sum_sq + at;
            for (uint64_t t = ks->length; t < n; t++)
                for (uint32_t j = 0; j < d; j++) {
                    if (t == 0) shift[j] = keys[j];
                    const double x = (double)keys[t * d + j] - shift[j];
                    sum[j] += x;
                    sum_sq[j] += x * x;
                }
            fathom_variance_from_sums(d, n, sum, sum_sq, ks->var);
            fprintf(f, "v %llu %u %u", (unsigned long long)(n - 1), l, h);
            for (uint32_t j = 0; j < d; j++) fprintf(f, " %.9g", ks->var[j]);
            fputc('\n', f);
        }
    ks->length = n;
    return ferror(f) ? FATHOM_ERR_IO : FATHOM_OK;
}

static int fail(const char *what, int st) {
    fprintf(stderr, "bench_decode_trace: %s: %s: %s\n", what, fathom_status_name(st), fathom_last_error());
    return 1;
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *prompt_path = NULL, *out_path = NULL, *attn = "fathom:48";
    uint32_t k = 64, steps = 64, threads = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--model")) model_path = v;
        else if (!strcmp(a, "--prompt-file")) prompt_path = v;
        else if (!strcmp(a, "--out")) out_path = v;
        else if (!strcmp(a, "--attn")) attn = v;
        else if (!strcmp(a, "--k")) k = (uint32_t)atoi(v);
        else if (!strcmp(a, "--steps")) steps = (uint32_t)atoi(v);
        else if (!strcmp(a, "--threads")) threads = (uint32_t)atoi(v);
        else model_path = NULL, i = argc;
    }
    if (!model_path || !prompt_path || !out_path || !k || !steps) {
        fprintf(stderr, "usage: bench_decode_trace --model GGUF --prompt-file FILE --out TRACE [--attn fathom:48] "
                        "[--k 64] [--steps 64] [--threads T]\n");
        return 2;
    }
    fathom_method method;
    int st = fathom_method_parse(attn, &method);
    if (st < 0) return fail(attn, st);
    bench_prompt bp;
    if (bench_prompt_open(&bp, "bench_decode_trace", model_path, prompt_path)) return 1;
    fathom_model *model = bp.model;
    const fathom_model_info info = bp.info;
    const int32_t *ids = bp.ids;
    const size_t n = bp.n;
    float *logits = malloc((size_t)info.vocab * sizeof *logits);
    if (!logits) return fail("allocation", FATHOM_ERR_NOMEM);
    fathom_ctx *ctx = NULL;
    if ((st = fathom_ctx_create(&ctx, model, (uint32_t)(n + steps + 1), threads)) < 0) return fail("context", st);
    if ((st = fathom_ctx_set_attention(ctx, &method, k, NULL)) < 0) return fail(attn, st);
    trace_out out = {fopen(out_path, "w"), PTHREAD_MUTEX_INITIALIZER, 0};
    if (!out.f) return fail(out_path, FATHOM_ERR_IO);
    fprintf(out.f, "# layers %u q_heads %u kv_heads %u dim %u prompt %zu attn %s k %u model %s\n", info.layers,
            info.q_heads, info.kv_heads, info.head_dim, n, attn, k, info.name);
    if ((st = fathom_ctx_prefill(ctx, ids, n, logits)) < 0) return fail("prefill", st);
    if ((st = fathom_ctx_set_trace(ctx, on_record, &out)) < 0) return fail("trace", st);
    const size_t cells = (size_t)info.layers * info.kv_heads * info.head_dim;
    key_sums ks = {info.layers, info.kv_heads, info.head_dim, 0, calloc(cells, sizeof(double)),
                   calloc(cells, sizeof(double)), calloc(cells, sizeof(double)),
                   malloc((size_t)info.head_dim * sizeof(float))};
    if (!ks.shift || !ks.sum || !ks.sum_sq || !ks.var) return fail("allocation", FATHOM_ERR_NOMEM);
    for (uint32_t s = 0; s < steps; s++) {
        int32_t next = 0;
        for (uint32_t v = 1; v < info.vocab; v++)
            if (logits[v] > logits[next]) next = (int32_t)v;
        if ((st = fathom_ctx_step(ctx, next, logits)) < 0) return fail("step", st);
        if ((st = key_sums_write(&ks, ctx, out.f)) < 0) return fail("variance", st);
    }
    free(ks.shift), free(ks.sum), free(ks.sum_sq), free(ks.var);
    if (fclose(out.f)) return fail(out_path, FATHOM_ERR_IO);
    fprintf(stderr, "bench_decode_trace: %zu prompt tokens, %u steps, %llu records -> %s\n", n, steps,
            (unsigned long long)out.records, out_path);
    fathom_ctx_free(ctx);
    bench_prompt_free(&bp);
    free(logits);
    return 0;
}

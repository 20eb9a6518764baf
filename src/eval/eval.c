/* The fidelity harness (§4): for every queried position, layer and query
 * head, select sink + local + top-k by each method's scores, attend exactly
 * over the selection and compare with dense attention. The index (store,
 * rotated store, landmarks) is built once per layer and KV head over the
 * whole window, as in the paper's fidelity protocol; each query sees only
 * keys at positions <= its own (causal).
 *
 * Work is split into (KV head, chunk of positions) items that the pool's
 * threads take from a shared counter; every item writes its own accumulator
 * slot, and slots are summed in a fixed order, so results do not depend on
 * the thread count. Each call has its own pool, so a worker's failure goes
 * back to that call's caller only. */
#include "cpu.h"
#include "internal.h"
#include "pool.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define POSITION_CHUNK 8
#define EXACT_BLOCK 64 /* keys per block of the exact-score pass */
#define MAX_GROUP 64   /* query heads per KV head */
#define FATHOM_MAX_DIM_EVAL 1024 /* head dimension the harness takes */
#define G_MAX_ROWS (MAX_GROUP * POSITION_CHUNK)
#define MAX_THREADS 256

/* Greedy per-layer budgets (§3.4): levels B_l in {24, 32, ..., 128}. */
static const uint32_t greedy_levels[] = {24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128};
#define GREEDY_LEVELS (sizeof greedy_levels / sizeof greedy_levels[0])
#define GREEDY_CALIB_POSITIONS 32

/* Sums for one method over one work item. */
typedef struct accum {
    double bits;       /* sum over (position) of bits per token */
    double scan_bytes; /* sum over (position) of bits * n_visible / 8 */
    double row_bytes;  /* sum over (position) of union rows * 2 * dim * 2 */
    double err;        /* sum over (position, head) of relative error */
    double err_sq;
    double ratio;      /* sum over (position, head) of |selected| / n_visible */
    uint64_t groups;   /* positions counted (per KV head) */
    uint64_t heads;    /* (position, head) pairs counted */
} accum;

/* Everything fixed for one (layer, KV head): the index over the window. */
typedef struct head_state {
    const float *keys;   /* [n x dim] */
    const float *values; /* [n x dim] */
    fathom_index *index; /* every method's stores and statistics */
    float *planes_keys;  /* [n x dim] keys decoded from all 4 planes, or NULL */
} head_state;

typedef struct layer_job {
    /* inputs */
    const fathom_method *methods;
    uint32_t n_methods;
    const uint32_t *budgets; /* [n_methods] budget for fathom methods in this layer */
    uint32_t layer; /* for messages */
    uint32_t dim, group, kv_heads, k;
    uint64_t n;                /* keys per head */
    uint32_t positions;        /* queries per head in q */
    uint32_t pos_begin;        /* first evaluated position index (within q's P) */
    uint64_t first_query;      /* absolute position of q's position 0 */
    const float *q;            /* [Hq x P x dim] */
    head_state *heads;         /* [kv_heads] */
    /* work split */
    uint32_t chunks_per_head;
    uint32_t n_items;
    atomic_uint next_item;
    atomic_int status;
    accum *acc; /* [n_items x n_methods] */
    /* progress */
    const fathom_eval_config *config;
    atomic_ullong *done;
    uint64_t total;
} layer_job;

static void head_state_free(head_state *hs) {
    fathom_index_free(hs->index);
    free(hs->planes_keys);
    memset(hs, 0, sizeof *hs);
}

/* Statistics of one KV head from calibration data: keys [n x dim] and the
 * group's queries [q_rows x dim]. */
typedef struct calib_view {
    const float *keys;
    uint64_t n;
    const float *queries;
    uint64_t q_rows;
} calib_view;

static int head_state_build(head_state *hs, const fathom_method *methods, uint32_t n_methods,
                            uint32_t dim, const float *keys, const float *values, uint64_t n,
                            const calib_view *cal, bool calib_given, bool planes_as_keys) {
    hs->keys = keys;
    hs->values = values;
    FATHOM_TRY(fathom_index_create(&hs->index, methods, n_methods, dim, planes_as_keys ? FATHOM_NEEDS_STORE : 0));
    /* fathom's Var: calibration keys with --calib (the paper), else the
     * store's own running sums (the calibration-free variant); Double
     * Sparsity's channels and the KLT basis from the calibration data, which
     * is the window itself without --calib. */
    const fathom_index_calib c = {cal->keys, cal->n, cal->queries, cal->q_rows, !calib_given};
    FATHOM_TRY(fathom_index_calibrate(hs->index, &c));
    FATHOM_TRY(fathom_index_append(hs->index, keys, n));
    if (planes_as_keys) {
        uint8_t full[FATHOM_MAX_DIM_EVAL];
        memset(full, FATHOM_MAX_DEPTH, dim);
        hs->planes_keys = fathom_alloc_array(n, (uint64_t)dim * sizeof(float));
        if (!hs->planes_keys) return fathom_fail(FATHOM_ERR_NOMEM, "eval: out of memory for decoded keys");
        FATHOM_TRY(fathom_store_decode(fathom_index_store(hs->index), 0, n, full, hs->planes_keys));
    }
    return FATHOM_OK;
}

/* Per-thread scratch. */
typedef struct scratch {
    float *exact;     /* [G*POSITION_CHUNK x n] exact scores of a chunk's queries */
    float *kt;        /* [dim x EXACT_BLOCK] a transposed key block */
    double *acc;      /* [G*POSITION_CHUNK x dim] dense output accumulators */
    float *qg;        /* [G x dim] the group's queries at one position */
    void *ix_scratch; /* fathom_index_scratch_size(dim, G) */
    float *scores;    /* [G x n] */
    float *dense_out; /* [G*POSITION_CHUNK x dim] dense outputs of the chunk */
    float *qchunk;    /* [G*POSITION_CHUNK x dim] the chunk's queries */
    float *out;       /* [dim] */
    uint64_t *work;   /* [n] */
    uint32_t *idx;    /* [G x k_cap] */
    uint64_t k_cap;   /* min(k, n): the most keys a selection holds */
    uint32_t *counts; /* [G] */
    const uint32_t **sets;
    uint32_t row0;         /* row of the current position's first head in exact */
    uint64_t exact_stride; /* floats per row of exact */
} scratch;

static void scratch_free(scratch *s) {
    free(s->exact);
    free(s->kt);
    free(s->acc);
    free(s->qg);
    free(s->ix_scratch);
    free(s->scores);
    free(s->dense_out);
    free(s->qchunk);
    free(s->out);
    free(s->work);
    free(s->idx);
    free(s->counts);
    free(s->sets);
}

static int scratch_init(scratch *s, uint32_t dim, uint32_t group, uint64_t n, uint32_t k) {
    memset(s, 0, sizeof *s);
    s->k_cap = k < n ? k : n; /* a selection never holds more than the n keys */
    s->exact = fathom_alloc_array((uint64_t)group * POSITION_CHUNK * n, sizeof(float));
    s->kt = fathom_alloc_array((uint64_t)dim * EXACT_BLOCK, sizeof(float));
    s->acc = fathom_alloc_array((uint64_t)group * POSITION_CHUNK * dim, sizeof(double));
    s->qg = fathom_alloc_array((uint64_t)group * dim, sizeof(float));
    s->ix_scratch = malloc(fathom_index_scratch_size(dim, group));
    s->scores = fathom_alloc_array((uint64_t)group * n, sizeof(float));
    s->dense_out = fathom_alloc_array((uint64_t)group * POSITION_CHUNK * dim, sizeof(float));
    s->qchunk = fathom_alloc_array((uint64_t)group * POSITION_CHUNK * dim, sizeof(float));
    s->out = fathom_alloc_array(dim, sizeof(float));
    s->work = fathom_alloc_array(n, sizeof(uint64_t));
    s->idx = fathom_alloc_array((uint64_t)group * s->k_cap, sizeof(uint32_t));
    s->counts = fathom_alloc_array(group, sizeof(uint32_t));
    s->sets = fathom_alloc_array(group, sizeof(*s->sets));
    if (!s->exact || !s->kt || !s->acc || !s->qg || !s->ix_scratch || !s->scores || !s->dense_out || !s->qchunk ||
        !s->out || !s->work || !s->idx || !s->counts || !s->sets) {
        scratch_free(s);
        return fathom_fail(FATHOM_ERR_NOMEM, "eval: out of memory for scratch buffers");
    }
    return FATHOM_OK;
}

/* Scores of the group at one position for one method; *bits gets the
 * method's bits per token. Dense is handled by the caller. */
static int method_scores(const layer_job *job, const head_state *hs, const fathom_method *m,
                         uint32_t budget, scratch *s, uint64_t n_vis, double *bits) {
    const uint32_t G = job->group;
    if (m->kind == FATHOM_METHOD_ORACLE) {
        /* exact scores were computed for the whole chunk (exact_scores) */
        *bits = fathom_method_fixed_bits(m, job->dim);
        for (uint32_t h = 0; h < G; h++)
            memcpy(s->scores + h * n_vis, s->exact + ((uint64_t)s->row0 + h) * s->exact_stride, n_vis * sizeof(float));
        return FATHOM_OK;
    }
    return fathom_index_scores(hs->index, m, budget, G, s->qg, n_vis, s->scores, s->ix_scratch, bits, NULL);
}

/* Exact scores of R query rows against keys [0, n): S[r*n + i] = q_r . k_i.
 * Keys are read once per chunk in blocks, transposed so that the inner loop
 * runs over keys and vectorizes without reassociating any sum. */
FATHOM_INLINE void exact_scores_body(uint32_t dim, const float *Q, uint32_t R, const float *keys, uint64_t n, float *S,
                         float *kt) {
    for (uint64_t i0 = 0; i0 < n; i0 += EXACT_BLOCK) {
        uint32_t nb = n - i0 < EXACT_BLOCK ? (uint32_t)(n - i0) : EXACT_BLOCK;
        for (uint32_t i = 0; i < nb; i++)
            for (uint32_t j = 0; j < dim; j++) kt[(uint64_t)j * EXACT_BLOCK + i] = keys[(i0 + i) * dim + j];
        for (uint32_t r = 0; r < R; r++) {
            float acc[EXACT_BLOCK] = {0};
            const float *q = Q + (uint64_t)r * dim;
            for (uint32_t j = 0; j < dim; j++) {
                const float qj = q[j];
                const float *row = kt + (uint64_t)j * EXACT_BLOCK;
                for (uint32_t i = 0; i < EXACT_BLOCK; i++) acc[i] += qj * row[i];
            }
            memcpy(S + (uint64_t)r * n + i0, acc, nb * sizeof(float));
        }
    }
}
FATHOM_CPU_DISPATCH_VOID(exact_scores, (uint32_t dim, const float *Q, uint32_t R, const float *keys, uint64_t n, float *S,
                         float *kt), (dim, Q, R, keys, n, S, kt))

/* Dense attention outputs of R rows from their exact scores: row r sees keys
 * [0, visible[r]). Softmax in double with the row maximum subtracted; values
 * are read once, in row order. */
FATHOM_INLINE void dense_outputs_body(uint32_t dim, const float *S, uint64_t stride, uint32_t R, const uint64_t *visible,
                          const float *values, double *acc, float *out) {
    const double scale = 1.0 / sqrt((double)dim);
    double mx[G_MAX_ROWS], sum[G_MAX_ROWS];
    uint64_t nmax = 0;
    for (uint32_t r = 0; r < R; r++) {
        const float *s = S + (uint64_t)r * stride;
        float m = s[0];
        for (uint64_t i = 1; i < visible[r]; i++) m = s[i] > m ? s[i] : m;
        mx[r] = m;
        sum[r] = 0;
        if (visible[r] > nmax) nmax = visible[r];
    }
    memset(acc, 0, (size_t)R * dim * sizeof(double));
    for (uint64_t i = 0; i < nmax; i++) {
        const float *v = values + i * dim;
        for (uint32_t r = 0; r < R; r++) {
            if (i >= visible[r]) continue;
            double w = expf((float)(((double)S[(uint64_t)r * stride + i] - mx[r]) * scale));
            sum[r] += w;
            double *a = acc + (uint64_t)r * dim;
            for (uint32_t j = 0; j < dim; j++) a[j] += w * v[j];
        }
    }
    for (uint32_t r = 0; r < R; r++)
        for (uint32_t j = 0; j < dim; j++) out[(uint64_t)r * dim + j] = (float)(acc[(uint64_t)r * dim + j] / sum[r]);
}
FATHOM_CPU_DISPATCH_VOID(dense_outputs, (uint32_t dim, const float *S, uint64_t stride, uint32_t R, const uint64_t *visible,
                          const float *values, double *acc, float *out), (dim, S, stride, R, visible, values, acc, out))

/* Exact attention over a selection, from the exact scores the chunk pass
 * already computed (the same q.k, so only the value sum is left to do):
 * softmax in double with the selection's maximum subtracted. */
FATHOM_INLINE void attend_selected_body(uint32_t dim, const float *scores, const float *values, const uint32_t *idx,
                            uint32_t count, double *acc, float *out) {
    const double scale = 1.0 / sqrt((double)dim);
    float mx = scores[idx[0]];
    for (uint32_t r = 1; r < count; r++) mx = scores[idx[r]] > mx ? scores[idx[r]] : mx;
    double sum = 0;
    memset(acc, 0, dim * sizeof(double));
    for (uint32_t r = 0; r < count; r++) {
        double w = expf((float)(((double)scores[idx[r]] - mx) * scale));
        const float *v = values + (uint64_t)idx[r] * dim;
        sum += w;
        for (uint32_t j = 0; j < dim; j++) acc[j] += w * v[j];
    }
    for (uint32_t j = 0; j < dim; j++) out[j] = (float)(acc[j] / sum);
}
FATHOM_CPU_DISPATCH_VOID(attend_selected, (uint32_t dim, const float *scores, const float *values, const uint32_t *idx,
                            uint32_t count, double *acc, float *out), (dim, scores, values, idx, count, acc, out))

static int run_item(layer_job *job, uint32_t item, scratch *s) {
    const uint32_t dim = job->dim, G = job->group;
    const uint32_t head = item / job->chunks_per_head;
    const uint32_t chunk = item % job->chunks_per_head;
    const uint32_t p0 = job->pos_begin + chunk * POSITION_CHUNK;
    uint32_t p1 = p0 + POSITION_CHUNK;
    if (p1 > job->positions) p1 = job->positions;
    const head_state *hs = &job->heads[head];
    accum *acc = job->acc + (uint64_t)item * job->n_methods;

    /* The chunk's queries as rows r = (p - p0) * G + h: exact scores and
     * dense outputs for all of them in one pass over the keys and values. */
    const uint32_t R = (p1 - p0) * G;
    const uint64_t n_max = job->first_query + p1;
    uint64_t visible[G_MAX_ROWS];
    for (uint32_t p = p0; p < p1; p++)
        for (uint32_t h = 0; h < G; h++) {
            uint32_t r = (p - p0) * G + h;
            memcpy(s->qchunk + (uint64_t)r * dim, job->q + ((uint64_t)(head * G + h) * job->positions + p) * dim,
                   dim * sizeof(float));
            visible[r] = job->first_query + p + 1;
        }
    s->exact_stride = n_max;
    exact_scores(dim, s->qchunk, R, hs->keys, n_max, s->exact, s->kt);
    dense_outputs(dim, s->exact, n_max, R, visible, hs->values, s->acc, s->dense_out);

    for (uint32_t p = p0; p < p1; p++) {
        const uint64_t n_vis = job->first_query + p + 1;
        const float *dense_out = s->dense_out + (uint64_t)(p - p0) * G * dim;
        /* Finite but extreme keys or queries overflow q.k (float) and the
         * softmax turns that into NaN: fail, never report a NaN error. */
        FATHOM_CHECK(!fathom_all_finite(dense_out, (uint64_t)G * dim), FATHOM_ERR_NONFINITE,
                     "eval: layer %u, KV head %u, position %llu: dense attention is not finite (q.k "
                     "overflows float: keys or queries too large)",
                     job->layer, head, (unsigned long long)(n_vis - 1));
        s->row0 = (p - p0) * G;
        memcpy(s->qg, s->qchunk + (uint64_t)s->row0 * dim, (uint64_t)G * dim * sizeof(float));
        for (uint32_t mi = 0; mi < job->n_methods; mi++) {
            const fathom_method *m = &job->methods[mi];
            accum *a = &acc[mi];
            uint64_t union_rows;
            double bits = 0;
            if (m->kind == FATHOM_METHOD_DENSE) {
                union_rows = n_vis;
                a->heads += G;
                a->ratio += G;
            } else {
                FATHOM_TRY(method_scores(job, hs, m, job->budgets[mi], s, n_vis, &bits));
                for (uint32_t h = 0; h < G; h++) {
                    uint32_t *idx = s->idx + (uint64_t)h * s->k_cap;
                    FATHOM_TRY(fathom_select(s->scores + h * n_vis, n_vis, job->k, FATHOM_SINK_TOKENS,
                                             FATHOM_LOCAL_TOKENS, s->work, idx, &s->counts[h]));
                    if (hs->planes_keys)
                        FATHOM_TRY(fathom_attend(dim, s->qg + h * dim, hs->planes_keys, hs->values, idx,
                                                 s->counts[h], s->out));
                    else
                        attend_selected(dim, s->exact + ((uint64_t)s->row0 + h) * s->exact_stride, hs->values,
                                        idx, s->counts[h], s->acc, s->out);
                    double e = fathom_rel_l2(dim, s->out, dense_out + h * dim);
                    FATHOM_CHECK(!isfinite(e), FATHOM_ERR_NONFINITE,
                                 "eval: layer %u, query head %u, position %llu: %s's attention output is "
                                 "not finite",
                                 job->layer, head * G + h, (unsigned long long)(n_vis - 1), m->name);
                    a->err += e;
                    a->err_sq += e * e;
                    a->ratio += (double)s->counts[h] / (double)n_vis;
                    a->heads++;
                    s->sets[h] = idx;
                }
                uint32_t u;
                FATHOM_TRY(fathom_union_size(G, s->sets, s->counts, &u));
                union_rows = u;
            }
            a->bits += bits;
            a->scan_bytes += bits * (double)n_vis / 8.0;
            a->row_bytes += (double)union_rows * 2.0 * dim * 2.0; /* K and V rows, bf16 */
            a->groups++;
        }
        if (job->done) {
            uint64_t d = atomic_fetch_add(job->done, 1) + 1;
            if (job->config && job->config->progress)
                job->config->progress(job->config->progress_user, d, job->total);
        }
    }
    return FATHOM_OK;
}

/* One worker slot of a layer job: its own scratch, then (head, chunk)
 * items from the shared counter until none are left or one has failed. */
static int layer_worker(void *job_, uint32_t slot, uint32_t worker) {
    layer_job *job = job_;
    scratch s;
    FATHOM_TRY(scratch_init(&s, job->dim, job->group, job->n, job->k));
    int st = FATHOM_OK;
    while (atomic_load(&job->status) == 0) {
        uint32_t item = atomic_fetch_add(&job->next_item, 1);
        if (item >= job->n_items) break;
        if ((st = run_item(job, item, &s)) < 0) {
            atomic_store(&job->status, st);
            break;
        }
    }
    scratch_free(&s);
    return st;
}

static int run_layer_job(layer_job *job, fathom_pool *pool) {
    uint32_t slots = fathom_pool_threads(pool);
    if (slots > job->n_items) slots = job->n_items;
    return fathom_pool_run(pool, layer_worker, job, slots);
}

/* Building one KV head's state, as a pool task. */
typedef struct build_ctx {
    head_state *heads;
    const fathom_method *methods;
    uint32_t n_methods, dim, G;
    uint64_t n;
    const void *in; /* layer_input */
    bool planes_as_keys;
} build_ctx;

/* One layer: build every head's state, then run the (head, chunk) items.
 * acc_out [n_methods] gets the layer's sums. */
typedef struct layer_input {
    const float *q, *k, *v;      /* the evaluated window */
    const float *cq, *ck;        /* calibration (or the window itself) */
    uint64_t cn;                 /* calibration keys per head */
    uint32_t cpositions;         /* calibration queries per head */
    bool calib_given;
} layer_input;

static int build_head(void *ctx_, uint32_t g, uint32_t worker) {
    const build_ctx *c = ctx_;
    const layer_input *in = c->in;
    const uint32_t dim = c->dim, G = c->G;
    /* the group's calibration queries are contiguous: heads g*G..g*G+G-1 */
    calib_view cal = {in->ck + (uint64_t)g * in->cn * dim, in->cn,
                      in->cq + (uint64_t)g * G * in->cpositions * dim, (uint64_t)G * in->cpositions};
    return head_state_build(&c->heads[g], c->methods, c->n_methods, dim, in->k + (uint64_t)g * c->n * dim,
                            in->v + (uint64_t)g * c->n * dim, c->n, &cal, in->calib_given, c->planes_as_keys);
}

static int eval_layer(const fathom_source_info *info, uint32_t layer, const layer_input *in,
                      const fathom_method *methods,
                      uint32_t n_methods, const uint32_t *budgets, uint32_t k, uint32_t pos_begin,
                      fathom_pool *pool, const fathom_eval_config *config, atomic_ullong *done,
                      uint64_t total, accum *acc_out) {
    const uint32_t dim = info->dim, G = info->q_heads / info->kv_heads, H = info->kv_heads;
    const uint64_t n = info->tokens;
    int st = FATHOM_OK;
    head_state *heads = fathom_calloc_array(H, sizeof(head_state));
    if (!heads) {
        return fathom_fail(FATHOM_ERR_NOMEM, "eval: out of memory");
    }
    build_ctx bc = {heads, methods, n_methods, dim, G, n, in, config && config->planes_as_keys};
    st = fathom_pool_run(pool, build_head, &bc, H);
    if (st == FATHOM_OK) {
        layer_job job;
        memset(&job, 0, sizeof job);
        job.methods = methods;
        job.n_methods = n_methods;
        job.budgets = budgets;
        job.dim = dim;
        job.group = G;
        job.kv_heads = H;
        job.layer = layer;
        job.k = k;
        job.n = n;
        job.positions = info->positions;
        job.pos_begin = pos_begin;
        job.first_query = info->first_query;
        job.q = in->q;
        job.heads = heads;
        job.chunks_per_head = (info->positions - pos_begin + POSITION_CHUNK - 1) / POSITION_CHUNK;
        job.n_items = job.chunks_per_head * H;
        atomic_init(&job.next_item, 0);
        atomic_init(&job.status, 0);
        job.acc = fathom_calloc_array((uint64_t)job.n_items * n_methods, sizeof(accum));
        job.config = config;
        job.done = done;
        job.total = total;
        if (!job.acc) {
            st = fathom_fail(FATHOM_ERR_NOMEM, "eval: out of memory");
        } else {
            st = run_layer_job(&job, pool);
            for (uint32_t it = 0; it < job.n_items && st == FATHOM_OK; it++)
                for (uint32_t m = 0; m < n_methods; m++) {
                    const accum *a = &job.acc[(uint64_t)it * n_methods + m];
                    accum *o = &acc_out[m];
                    o->bits += a->bits;
                    o->scan_bytes += a->scan_bytes;
                    o->row_bytes += a->row_bytes;
                    o->err += a->err;
                    o->err_sq += a->err_sq;
                    o->ratio += a->ratio;
                    o->groups += a->groups;
                    o->heads += a->heads;
                }
            free(job.acc);
        }
    }
    for (uint32_t g = 0; g < H; g++) head_state_free(&heads[g]);
    free(heads);
    return st;
}

/* Buffers for one layer of a source. */
typedef struct layer_buffers {
    float *q, *k, *v;
} layer_buffers;

static void layer_buffers_free(layer_buffers *b) {
    free(b->q);
    free(b->k);
    free(b->v);
    memset(b, 0, sizeof *b);
}

static int layer_buffers_alloc(layer_buffers *b, const fathom_source_info *info, bool values) {
    uint64_t qn = (uint64_t)info->q_heads * info->positions * info->dim;
    uint64_t kn = (uint64_t)info->kv_heads * info->tokens * info->dim;
    b->q = fathom_alloc_array(qn, sizeof(float));
    b->k = fathom_alloc_array(kn, sizeof(float));
    b->v = values ? fathom_alloc_array(kn, sizeof(float)) : NULL;
    if (!b->q || !b->k || (values && !b->v)) {
        layer_buffers_free(b);
        return fathom_fail(FATHOM_ERR_NOMEM, "eval: cannot allocate a layer (%llu keys per head)",
                           (unsigned long long)info->tokens);
    }
    return FATHOM_OK;
}

static int check_config(const fathom_source_info *info, const fathom_method *methods, uint32_t n_methods,
                        const fathom_eval_config *config, const fathom_source_info *cinfo) {
    FATHOM_CHECK_ARG(n_methods > 0, "eval: no methods");
    FATHOM_CHECK_ARG(config->k > 0, "eval: k must be positive");
    FATHOM_CHECK_ARG(info->dim > 0 && info->kv_heads > 0 && info->q_heads % info->kv_heads == 0,
                     "eval: bad source shape");
    FATHOM_CHECK_ARG(info->first_query + info->positions <= info->tokens,
                     "eval: queries reach past the keys (first_query %llu + P %u > n %llu)",
                     (unsigned long long)info->first_query, info->positions,
                     (unsigned long long)info->tokens);
    FATHOM_CHECK_ARG(info->tokens <= UINT32_MAX, "eval: more than 2^32 tokens per head");
    FATHOM_CHECK_ARG(info->dim <= FATHOM_MAX_DIM_EVAL, "eval: head dimension %u above %d", info->dim,
                     FATHOM_MAX_DIM_EVAL);
    FATHOM_CHECK_ARG(info->q_heads / info->kv_heads <= MAX_GROUP, "eval: more than %d query heads per KV head",
                     MAX_GROUP);
    /* Every method against the head size, at most one ds:c: what the index
     * of each head will check, checked once here. */
    fathom_index *probe = NULL;
    FATHOM_TRY(fathom_index_create(&probe, methods, n_methods, info->dim, 0));
    fathom_index_free(probe);
    if (cinfo) {
        FATHOM_CHECK_ARG(cinfo->layers == info->layers && cinfo->q_heads == info->q_heads &&
                             cinfo->kv_heads == info->kv_heads && cinfo->dim == info->dim,
                         "eval: calibration shape (%u layers, %u/%u heads, dim %u) differs from the "
                         "evaluated one (%u layers, %u/%u heads, dim %u)",
                         cinfo->layers, cinfo->q_heads, cinfo->kv_heads, cinfo->dim, info->layers,
                         info->q_heads, info->kv_heads, info->dim);
    }
    return FATHOM_OK;
}

/* Greedy per-layer budgets for every fathom method: the calibration error of
 * each layer at each level, then fathom_greedy_layer_budgets (§3.4). The
 * calibration source is evaluated against its own statistics. */
static int greedy_budgets(const fathom_source *calib, const fathom_source_info *cinfo,
                          const fathom_method *methods, uint32_t n_methods, uint32_t k, fathom_pool *pool,
                          uint32_t *budgets /* [layers x n_methods] */) {
    /* One calibration method per fathom method and level. */
    uint32_t n_cal = 0;
    fathom_method *cal = fathom_alloc_array((uint64_t)n_methods * GREEDY_LEVELS, sizeof(fathom_method));
    uint32_t *cal_budget = fathom_alloc_array((uint64_t)n_methods * GREEDY_LEVELS, sizeof(uint32_t));
    double *err = NULL;
    accum *acc = NULL;
    layer_buffers b = {0};
    int st = FATHOM_OK;
    if (!cal || !cal_budget) {
        st = fathom_fail(FATHOM_ERR_NOMEM, "eval: out of memory");
        goto done;
    }
    for (uint32_t m = 0; m < n_methods; m++) {
        if (fathom_method_fixed_bits(&methods[m], cinfo->dim) != -1.0) continue; /* not planned at a budget */
        for (uint32_t i = 0; i < GREEDY_LEVELS; i++) {
            cal[n_cal] = methods[m];
            cal_budget[n_cal] = greedy_levels[i];
            n_cal++;
        }
    }
    if (n_cal == 0) goto done;
    err = fathom_calloc_array((uint64_t)n_cal * cinfo->layers, sizeof(double));
    acc = fathom_alloc_array(n_cal, sizeof(accum));
    if (!err || !acc) {
        st = fathom_fail(FATHOM_ERR_NOMEM, "eval: out of memory");
        goto done;
    }
    if ((st = layer_buffers_alloc(&b, cinfo, true)) < 0) goto done;
    uint32_t pos_begin = cinfo->positions > GREEDY_CALIB_POSITIONS ? cinfo->positions - GREEDY_CALIB_POSITIONS : 0;
    for (uint32_t L = 0; L < cinfo->layers; L++) {
        if ((st = fathom_source_layer(calib, L, b.q, b.k, b.v)) < 0) goto done;
        layer_input in = {b.q, b.k, b.v, b.q, b.k, cinfo->tokens, cinfo->positions, true};
        memset(acc, 0, n_cal * sizeof(accum));
        if ((st = eval_layer(cinfo, L, &in, cal, n_cal, cal_budget, k, pos_begin, pool, NULL, NULL, 0, acc)) < 0)
            goto done;
        for (uint32_t c = 0; c < n_cal; c++) err[(uint64_t)c * cinfo->layers + L] = acc[c].err / (double)acc[c].heads;
    }
    /* Per fathom method: err table [layers x levels] and the greedy plan. */
    double *table = fathom_alloc_array((uint64_t)cinfo->layers * GREEDY_LEVELS, sizeof(double));
    uint32_t *plan = fathom_alloc_array(cinfo->layers, sizeof(uint32_t));
    if (!table || !plan) {
        free(table);
        free(plan);
        st = fathom_fail(FATHOM_ERR_NOMEM, "eval: out of memory");
        goto done;
    }
    uint32_t c0 = 0;
    for (uint32_t m = 0; m < n_methods && st == FATHOM_OK; m++) {
        if (fathom_method_fixed_bits(&methods[m], cinfo->dim) != -1.0) continue; /* not planned at a budget */
        for (uint32_t L = 0; L < cinfo->layers; L++)
            for (uint32_t i = 0; i < GREEDY_LEVELS; i++)
                table[(uint64_t)L * GREEDY_LEVELS + i] = err[(uint64_t)(c0 + i) * cinfo->layers + L];
        st = fathom_greedy_layer_budgets(cinfo->layers, greedy_levels, GREEDY_LEVELS, table,
                                         (double)methods[m].param, plan);
        for (uint32_t L = 0; L < cinfo->layers && st == FATHOM_OK; L++)
            budgets[(uint64_t)L * n_methods + m] = plan[L];
        c0 += GREEDY_LEVELS;
    }
    free(table);
    free(plan);
done:
    layer_buffers_free(&b);
    free(cal);
    free(cal_budget);
    free(err);
    free(acc);
    return st;
}

/* Loading a layer of the source and of the calibration, as pool tasks
 * (synthetic layers are generated on the fly). */
typedef struct load_ctx {
    const fathom_source *src[2];
    uint32_t layer;
    layer_buffers *buf[2];
} load_ctx;

static int load_layer(void *ctx_, uint32_t i, uint32_t worker) {
    const load_ctx *c = ctx_;
    layer_buffers *b = c->buf[i];
    return fathom_source_layer(c->src[i], c->layer, b->q, b->k, b->v);
}

int fathom_eval_run(const fathom_source *src, const fathom_method *methods, uint32_t n_methods,
                    const fathom_eval_config *config, fathom_method_result *results) {
    FATHOM_CHECK_ARG(src && methods && config && results, "fathom_eval_run: NULL argument");
    fathom_source_info info, cinfo;
    FATHOM_TRY(fathom_source_get_info(src, &info));
    if (config->calib) FATHOM_TRY(fathom_source_get_info(config->calib, &cinfo));
    FATHOM_TRY(check_config(&info, methods, n_methods, config, config->calib ? &cinfo : NULL));
    FATHOM_CHECK_ARG(config->layer_budget == FATHOM_BUDGET_FLAT || config->layer_budget == FATHOM_BUDGET_GREEDY,
                     "fathom_eval_run: bad layer_budget %d", (int)config->layer_budget);
    FATHOM_CHECK_ARG(config->layer_budget == FATHOM_BUDGET_FLAT || config->calib,
                     "fathom_eval_run: the greedy layer budget needs calibration data (--calib)");

    uint32_t threads = config->threads ? config->threads : fathom_default_threads();
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    const uint32_t P = info.positions;
    const uint32_t pos_begin = config->max_positions && config->max_positions < P ? P - config->max_positions : 0;
    const fathom_source_info *cal_info = config->calib ? &cinfo : &info;

    fathom_pool *pool = NULL;
    FATHOM_TRY(fathom_pool_create(&pool, threads ? threads : 1));
    int st = FATHOM_OK;
    uint32_t *budgets = fathom_alloc_array((uint64_t)info.layers * n_methods, sizeof(uint32_t));
    accum *acc = fathom_calloc_array(n_methods, sizeof(accum));
    layer_buffers b = {0}, cb = {0};
    if (!budgets || !acc) {
        st = fathom_fail(FATHOM_ERR_NOMEM, "eval: out of memory");
        goto done;
    }
    for (uint32_t L = 0; L < info.layers; L++)
        for (uint32_t m = 0; m < n_methods; m++) budgets[(uint64_t)L * n_methods + m] = methods[m].param;
    if (config->layer_budget == FATHOM_BUDGET_GREEDY &&
        (st = greedy_budgets(config->calib, &cinfo, methods, n_methods, config->k, pool, budgets)) < 0)
        goto done;

    if ((st = layer_buffers_alloc(&b, &info, true)) < 0) goto done;
    if (config->calib && (st = layer_buffers_alloc(&cb, &cinfo, false)) < 0) goto done;

    atomic_ullong done_count;
    atomic_init(&done_count, 0);
    const uint64_t total = (uint64_t)info.layers * info.kv_heads * (P - pos_begin);
    for (uint32_t L = 0; L < info.layers; L++) {
        load_ctx lc = {{src, config->calib}, L, {&b, &cb}};
        if ((st = fathom_pool_run(pool, load_layer, &lc, config->calib ? 2 : 1)) < 0) goto done;
        layer_input in = {b.q, b.k, b.v, b.q, b.k, info.tokens, P, false};
        if (config->calib) {
            in.cq = cb.q;
            in.ck = cb.k;
            in.cn = cal_info->tokens;
            in.cpositions = cal_info->positions;
            in.calib_given = true;
        }
        if ((st = eval_layer(&info, L, &in, methods, n_methods, budgets + (uint64_t)L * n_methods, config->k,
                             pos_begin, pool, config, &done_count, total, acc)) < 0)
            goto done;
    }
    for (uint32_t m = 0; m < n_methods; m++) {
        fathom_method_result *r = &results[m];
        const accum *a = &acc[m];
        memset(r, 0, sizeof *r);
        memcpy(r->name, methods[m].name, sizeof r->name);
        r->name[sizeof r->name - 1] = 0;
        const double positions = (double)(P - pos_begin);
        r->bits_per_token = a->groups ? a->bits / (double)a->groups : 0;
        r->scan_bytes_per_step = a->scan_bytes / positions;
        r->row_bytes_per_step = a->row_bytes / positions;
        const double nh = (double)a->heads;
        r->rel_error = nh ? a->err / nh : 0;
        double var = nh > 1 ? (a->err_sq - nh * r->rel_error * r->rel_error) / (nh - 1) : 0;
        r->rel_error_stderr = var > 0 ? sqrt(var / nh) : 0;
        r->selection_ratio = nh ? a->ratio / nh : 0;
    }
done:
    layer_buffers_free(&b);
    layer_buffers_free(&cb);
    free(budgets);
    free(acc);
    fathom_pool_free(pool);
    return st;
}

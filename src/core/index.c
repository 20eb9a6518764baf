/* index — one KV head's index for a set of methods (see fathom.h, section
 * "index"): what each method reads, the calibration statistics behind it,
 * and the approximate scores of every index-based method. The fidelity
 * harness (eval.c) and the decoder (model.c) both score through here, so a
 * method means the same thing in both. */
#include "internal.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define BASIS_MAX_KEYS 16384 /* calibration keys per KLT fit (evenly strided) */
#define SCRATCH_MAX_DIM 65536
#define SCRATCH_MAX_GROUP 65536

struct fathom_index {
    uint32_t dim;
    unsigned needs;       /* FATHOM_NEEDS_* of the set, plus extra_needs */
    bool has_fathom;      /* the set reads fathom's channel variance (fathom, fathom-centered) */
    uint32_t ds_channels; /* the set's ds:c, or 0 */
    bool calibrated;
    uint64_t length;
    fathom_store *store;         /* raw planes, or NULL */
    fathom_store *rotated;       /* planes of (k - mean)V, once calibrated */
    fathom_store *centered;      /* planes of k - mu, mu the first append's mean, or NULL */
    fathom_basis *basis;         /* the rotation, once calibrated */
    fathom_landmarks *landmarks; /* or NULL */
    float *var;                  /* [dim] calibration variance, or NULL: the store's */
    uint8_t *ds_depths;          /* [dim] Double Sparsity's channels, or NULL */
};

unsigned fathom_method_needs(const fathom_method *m) {
    if (!m) return 0;
    switch (m->kind) {
    case FATHOM_METHOD_FATHOM:
    case FATHOM_METHOD_SPARQ:
    case FATHOM_METHOD_THUMB:
    case FATHOM_METHOD_FULL4: return FATHOM_NEEDS_STORE;
    case FATHOM_METHOD_DS: return FATHOM_NEEDS_STORE | FATHOM_NEEDS_CALIB;
    case FATHOM_METHOD_FATHOM_KLT:
    case FATHOM_METHOD_LOKI: return FATHOM_NEEDS_ROTATED | FATHOM_NEEDS_CALIB;
    case FATHOM_METHOD_LANDMARK: return FATHOM_NEEDS_LANDMARKS;
    case FATHOM_METHOD_FATHOM_CENTERED: return FATHOM_NEEDS_CENTERED;
    case FATHOM_METHOD_ORACLE:
    case FATHOM_METHOD_DENSE: return 0;
    }
    return 0;
}

/* ---- calibration statistics ---- */

/* Population variance of each channel of rows [n x dim] (two passes, double). */
static void channel_variance(uint32_t dim, const float *rows, uint64_t n, float *var) {
    for (uint32_t j = 0; j < dim; j++) {
        double mean = 0, m2 = 0;
        for (uint64_t i = 0; i < n; i++) mean += rows[i * dim + j];
        mean /= (double)n;
        for (uint64_t i = 0; i < n; i++) {
            double x = rows[i * dim + j] - mean;
            m2 += x * x;
        }
        var[j] = (float)(m2 / (double)n);
    }
}

/* depths[j] = depth for the `count` largest value[j] (ties to the lower index), else 0. */
static void top_channels(uint32_t dim, const double *value, uint32_t count, uint8_t *depths, uint8_t depth) {
    memset(depths, 0, dim);
    for (uint32_t c = 0; c < count && c < dim; c++) {
        int64_t best = -1;
        for (uint32_t j = 0; j < dim; j++)
            if (!depths[j] && (best < 0 || value[j] > value[best])) best = j;
        depths[best] = depth;
    }
}

/* SparQ's GQA rule (§2): depth 4 on the r channels with the largest sum_h |q_j|
 * of the group's queries [group x dim]; scratch holds dim doubles. */
static void sparq_depths(uint32_t dim, uint32_t group, const float *queries, uint32_t r, double *scratch,
                         uint8_t *depths) {
    for (uint32_t j = 0; j < dim; j++) {
        double a = 0;
        for (uint32_t h = 0; h < group; h++) a += fabs(queries[h * dim + j]);
        scratch[j] = a;
    }
    top_channels(dim, scratch, r, depths, FATHOM_MAX_DEPTH);
}

/* Double Sparsity: depth 4 on the c channels with the largest mean|q| * mean|k|
 * over calibration keys [n x dim] and queries [q_rows x dim]. */
static int ds_depths(uint32_t dim, const float *keys, uint64_t n, const float *queries, uint64_t q_rows,
                     uint32_t channels, uint8_t *depths) {
    double *stat = fathom_alloc_array(dim, sizeof(double));
    if (!stat) return fathom_fail(FATHOM_ERR_NOMEM, "ds: out of memory");
    for (uint32_t j = 0; j < dim; j++) {
        double mq = 0, mk = 0;
        for (uint64_t r = 0; r < q_rows; r++) mq += fabs(queries[r * dim + j]);
        for (uint64_t i = 0; i < n; i++) mk += fabs(keys[i * dim + j]);
        stat[j] = (mq / (double)q_rows) * (mk / (double)n);
    }
    top_channels(dim, stat, channels, depths, FATHOM_MAX_DEPTH);
    free(stat);
    return FATHOM_OK;
}

/* fathom_basis_fit on at most BASIS_MAX_KEYS evenly strided keys. */
static int basis_fit_strided(fathom_basis **out, uint32_t dim, const float *keys, uint64_t n,
                             const float *queries, uint64_t q_rows) {
    uint64_t stride = n > BASIS_MAX_KEYS ? (n + BASIS_MAX_KEYS - 1) / BASIS_MAX_KEYS : 1;
    uint64_t m = (n + stride - 1) / stride;
    float *sub = fathom_alloc_array(m, (uint64_t)dim * sizeof(float));
    if (!sub) return fathom_fail(FATHOM_ERR_NOMEM, "basis: out of memory for %llu keys", (unsigned long long)m);
    for (uint64_t i = 0; i < m; i++) memcpy(sub + i * dim, keys + i * stride * dim, dim * sizeof(float));
    int st = fathom_basis_fit(out, dim, sub, m, queries, q_rows);
    free(sub);
    return st;
}

/* Center an empty store on the per-channel mean of rows [n x dim] (summed
 * in double, rounded once to float). */
static int center_on_mean(fathom_store *store, uint32_t dim, const float *rows, uint64_t n) {
    double *sum = fathom_calloc_array(dim, sizeof(double));
    float *mu = fathom_alloc_array(dim, sizeof(float));
    int st = sum && mu ? FATHOM_OK : fathom_fail(FATHOM_ERR_NOMEM, "index: out of memory for the center");
    if (st == FATHOM_OK) {
        for (uint64_t i = 0; i < n; i++)
            for (uint32_t j = 0; j < dim; j++) sum[j] += rows[i * dim + j];
        for (uint32_t j = 0; j < dim; j++) mu[j] = (float)(sum[j] / (double)n);
        st = fathom_store_set_center(store, mu);
    }
    free(sum);
    free(mu);
    return st;
}

/* ---- life cycle ---- */

void fathom_index_free(fathom_index *ix) {
    if (!ix) return;
    fathom_store_free(ix->store);
    fathom_store_free(ix->rotated);
    fathom_store_free(ix->centered);
    fathom_basis_free(ix->basis);
    fathom_landmarks_free(ix->landmarks);
    free(ix->var);
    free(ix->ds_depths);
    free(ix);
}

/* The empty stores and landmarks of the index's needs (the rotated store
 * only once the basis exists). */
static int index_make_stores(fathom_index *ix) {
    if (ix->needs & FATHOM_NEEDS_STORE) FATHOM_TRY(fathom_store_create(&ix->store, ix->dim, 0, NULL));
    if (ix->basis) FATHOM_TRY(fathom_store_create(&ix->rotated, ix->dim, 0, ix->basis));
    if (ix->needs & FATHOM_NEEDS_CENTERED) FATHOM_TRY(fathom_store_create(&ix->centered, ix->dim, 0, NULL));
    if (ix->needs & FATHOM_NEEDS_LANDMARKS) FATHOM_TRY(fathom_landmarks_create(&ix->landmarks, ix->dim));
    return FATHOM_OK;
}

int fathom_index_create(fathom_index **out, const fathom_method *methods, uint32_t n_methods, uint32_t dim,
                        unsigned extra_needs) {
    FATHOM_CHECK_ARG(out, "fathom_index_create: out is NULL");
    *out = NULL;
    FATHOM_CHECK_ARG(methods || n_methods == 0, "fathom_index_create: methods is NULL");
    FATHOM_CHECK_ARG(dim > 0, "fathom_index_create: dim is 0");
    FATHOM_CHECK_ARG(extra_needs <= FATHOM_NEEDS_LANDMARKS, "fathom_index_create: bad extra_needs %#x", extra_needs);
    unsigned needs = extra_needs;
    bool has_fathom = false;
    uint32_t ds = 0;
    for (uint32_t m = 0; m < n_methods; m++) {
        FATHOM_TRY(fathom_method_check(&methods[m], dim));
        needs |= fathom_method_needs(&methods[m]);
        has_fathom |= methods[m].kind == FATHOM_METHOD_FATHOM || methods[m].kind == FATHOM_METHOD_FATHOM_CENTERED;
        if (methods[m].kind == FATHOM_METHOD_DS) {
            FATHOM_CHECK_ARG(ds == 0 || ds == methods[m].param,
                             "fathom_index_create: one ds:c per index (got ds:%u and ds:%u)", ds,
                             methods[m].param);
            ds = methods[m].param;
        }
    }
    fathom_index *ix = calloc(1, sizeof *ix);
    FATHOM_CHECK(!ix, FATHOM_ERR_NOMEM, "index: out of memory");
    ix->dim = dim;
    ix->needs = needs;
    ix->has_fathom = has_fathom;
    ix->ds_channels = ds;
    const int st = index_make_stores(ix);
    if (st < 0) {
        fathom_index_free(ix);
        return st;
    }
    *out = ix;
    return FATHOM_OK;
}

int fathom_index_calibrate(fathom_index *ix, const fathom_index_calib *c) {
    FATHOM_CHECK_ARG(ix && c, "fathom_index_calibrate: NULL argument");
    FATHOM_CHECK(ix->calibrated, FATHOM_ERR_STATE, "fathom_index_calibrate: already calibrated");
    FATHOM_CHECK(ix->length > 0, FATHOM_ERR_STATE, "fathom_index_calibrate: keys were appended before calibration");
    const bool variance = ix->has_fathom && !c->variance_from_store;
    const bool calib = (ix->needs & FATHOM_NEEDS_CALIB) != 0;
    if (variance || calib) FATHOM_CHECK_ARG(c->keys && c->n_keys >= 1, "fathom_index_calibrate: no calibration keys");
    if (calib)
        FATHOM_CHECK_ARG(c->n_keys >= 2 && c->queries && c->n_queries >= 1,
                         "fathom_index_calibrate: needs >= 2 keys and >= 1 query (got %llu and %llu)",
                         (unsigned long long)c->n_keys, (unsigned long long)c->n_queries);
    const uint32_t D = ix->dim;
    if (variance) {
        ix->var = fathom_alloc_array(D, sizeof(float));
        FATHOM_CHECK(!ix->var, FATHOM_ERR_NOMEM, "index: out of memory");
        channel_variance(D, c->keys, c->n_keys, ix->var);
    }
    if (ix->ds_channels) {
        ix->ds_depths = fathom_alloc_array(D, 1);
        FATHOM_CHECK(!ix->ds_depths, FATHOM_ERR_NOMEM, "index: out of memory");
        FATHOM_TRY(ds_depths(D, c->keys, c->n_keys, c->queries, c->n_queries, ix->ds_channels, ix->ds_depths));
    }
    if (ix->needs & FATHOM_NEEDS_ROTATED) {
        FATHOM_TRY(basis_fit_strided(&ix->basis, D, c->keys, c->n_keys, c->queries, c->n_queries));
        FATHOM_TRY(fathom_store_create(&ix->rotated, D, 0, ix->basis));
    }
    ix->calibrated = true;
    return FATHOM_OK;
}

int fathom_index_append(fathom_index *ix, const float *keys, uint64_t count) {
    FATHOM_CHECK_ARG(ix, "fathom_index_append: index is NULL");
    if (count == 0) return FATHOM_OK;
    FATHOM_CHECK_ARG(keys, "fathom_index_append: keys is NULL");
    FATHOM_CHECK(!ix->calibrated && (ix->needs & FATHOM_NEEDS_CALIB), FATHOM_ERR_STATE,
                 "fathom_index_append: the index's methods need calibration first");
    if (ix->store) FATHOM_TRY(fathom_store_append(ix->store, keys, count));
    if (ix->rotated) FATHOM_TRY(fathom_store_append(ix->rotated, keys, count));
    if (ix->centered) {
        if (fathom_store_length(ix->centered) == 0) FATHOM_TRY(center_on_mean(ix->centered, ix->dim, keys, count));
        FATHOM_TRY(fathom_store_append(ix->centered, keys, count));
    }
    if (ix->landmarks) FATHOM_TRY(fathom_landmarks_append(ix->landmarks, keys, count));
    ix->length += count;
    return FATHOM_OK;
}

int fathom_index_clear(fathom_index *ix) {
    FATHOM_CHECK_ARG(ix, "fathom_index_clear: index is NULL");
    fathom_store_free(ix->store);
    fathom_store_free(ix->rotated);
    fathom_store_free(ix->centered);
    fathom_landmarks_free(ix->landmarks);
    ix->store = ix->rotated = ix->centered = NULL;
    ix->landmarks = NULL;
    ix->length = 0;
    return index_make_stores(ix);
}

uint64_t fathom_index_length(const fathom_index *ix) { return ix ? ix->length : 0; }
uint32_t fathom_index_dim(const fathom_index *ix) { return ix ? ix->dim : 0; }
const fathom_store *fathom_index_store(const fathom_index *ix) { return ix ? ix->store : NULL; }

/* ---- scores ---- */

/* Scratch layout: g [dim] double, var [dim] float, qrot [group x dim] float,
 * depths [dim] bytes. */
size_t fathom_index_scratch_size(uint32_t dim, uint32_t group) {
    if (dim == 0 || group == 0 || dim > SCRATCH_MAX_DIM || group > SCRATCH_MAX_GROUP) return 0;
    return (size_t)dim * sizeof(double) + (size_t)dim * sizeof(float) + (size_t)group * dim * sizeof(float) +
           dim;
}

int fathom_index_scores(const fathom_index *ix, const fathom_method *m, uint32_t budget, uint32_t group,
                        const float *q, uint64_t n, float *scores, void *scratch, double *bits,
                        uint64_t *bytes) {
    FATHOM_CHECK_ARG(ix && m && q && scores && scratch, "fathom_index_scores: NULL argument");
    const uint32_t dim = ix->dim;
    FATHOM_CHECK_ARG(group >= 1 && group <= SCRATCH_MAX_GROUP, "fathom_index_scores: group %u", group);
    FATHOM_CHECK_ARG(n <= ix->length, "fathom_index_scores: %llu keys asked, %llu indexed",
                     (unsigned long long)n, (unsigned long long)ix->length);
    const unsigned needs = fathom_method_needs(m) & ~FATHOM_NEEDS_CALIB;
    FATHOM_CHECK_ARG((ix->needs & needs) == needs, "fathom_index_scores: %s is not in the index's method set",
                     m->name);
    FATHOM_CHECK(!ix->calibrated && (fathom_method_needs(m) & FATHOM_NEEDS_CALIB), FATHOM_ERR_STATE,
                 "fathom_index_scores: %s needs calibration", m->name);
    double *g = scratch;
    float *var = (float *)(g + dim);
    float *qrot = var + dim;
    uint8_t *depths = (uint8_t *)(qrot + (size_t)group * dim);
    const fathom_store *store = ix->store;
    const float *query = q;
    switch (m->kind) {
    case FATHOM_METHOD_FATHOM:
    case FATHOM_METHOD_FATHOM_CENTERED: {
        /* The centered store's stored coordinates are k - mu: the query, the
         * variance and so the plan are the raw store's. */
        if (m->kind == FATHOM_METHOD_FATHOM_CENTERED) store = ix->centered;
        /* Var: the calibration keys' when given, else the store's running sums (App. D). */
        const float *v = ix->var;
        if (!v) {
            FATHOM_TRY(fathom_store_variance(store, var));
            v = var;
        }
        FATHOM_TRY(fathom_importance(dim, group, q, v, g));
        FATHOM_TRY(fathom_water_fill(dim, g, budget, depths, NULL));
        break;
    }
    case FATHOM_METHOD_FATHOM_KLT:
    case FATHOM_METHOD_LOKI:
        for (uint32_t h = 0; h < group; h++)
            FATHOM_TRY(fathom_basis_rotate_query(ix->basis, q + (size_t)h * dim, qrot + (size_t)h * dim));
        if (m->kind == FATHOM_METHOD_LOKI) {
            for (uint32_t j = 0; j < dim; j++) depths[j] = j < m->param ? FATHOM_MAX_DEPTH : 0;
        } else {
            FATHOM_TRY(fathom_importance(dim, group, qrot, fathom_basis_eigenvalues(ix->basis), g));
            FATHOM_TRY(fathom_water_fill(dim, g, budget, depths, NULL));
        }
        store = ix->rotated;
        query = qrot;
        break;
    case FATHOM_METHOD_SPARQ:
        sparq_depths(dim, group, q, m->param, g, depths);
        break;
    case FATHOM_METHOD_DS:
        FATHOM_CHECK_ARG(m->param == ix->ds_channels, "fathom_index_scores: the index holds ds:%u's channels, not %s",
                         ix->ds_channels, m->name);
        memcpy(depths, ix->ds_depths, dim);
        break;
    case FATHOM_METHOD_THUMB:
    case FATHOM_METHOD_FULL4:
        memset(depths, m->kind == FATHOM_METHOD_THUMB ? 2 : FATHOM_MAX_DEPTH, dim);
        break;
    case FATHOM_METHOD_LANDMARK: {
        uint64_t b = 0;
        FATHOM_TRY(fathom_landmarks_scan(ix->landmarks, q, group, n, scores, &b));
        if (bits) *bits = fathom_method_fixed_bits(m, dim);
        if (bytes) *bytes = b;
        return FATHOM_OK;
    }
    case FATHOM_METHOD_ORACLE:
    case FATHOM_METHOD_DENSE:
    default:
        return fathom_fail(FATHOM_ERR_INVALID_ARG, "fathom_index_scores: %s has no index scorer", m->name);
    }
    uint64_t b = 0;
    FATHOM_TRY(fathom_store_scan(store, depths, query, group, n, scores, &b));
    if (bits) *bits = fathom_depth_bits(dim, depths);
    if (bytes) *bytes = b;
    return FATHOM_OK;
}

const uint8_t *fathom_index_scratch_depths(const void *scratch, uint32_t dim, uint32_t group) {
    if (!scratch || fathom_index_scratch_size(dim, group) == 0) return NULL;
    const float *var = (const float *)((const double *)scratch + dim);
    return (const uint8_t *)(var + dim + (size_t)group * dim); /* the layout above */
}

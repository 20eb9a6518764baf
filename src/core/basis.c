/* basis — the KLT of calibration keys (§3.5).
 *
 * The rotated store keeps the planes of (k - mean) V, where the columns of V
 * are eigenvectors of the calibration key covariance. Water-filling then
 * works on coordinates whose variances are the eigenvalues, so a few
 * coordinates carry most of the score variance. */
#include "cpu.h"
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* LAPACK: eigenvalues (ascending) and eigenvectors of a symmetric matrix. */
extern void dsyev_(const char *jobz, const char *uplo, const int *n, double *a, const int *lda,
                   double *w, double *work, const int *lwork, int *info);

struct fathom_basis {
    uint32_t dim;
    float *mean;        /* [dim] */
    float *vectors;     /* [dim*dim], column c is stored coordinate c */
    float *eigenvalues; /* [dim] */
    float *rows;        /* [dim*dim], V row-major (rows[i*dim + c] = V[i,c]) for rotation */
};

/* The row-major copy of V that rotation reads (see rotate()). */
static void fill_rows(fathom_basis *basis) {
    const uint64_t d = basis->dim;
    for (uint64_t c = 0; c < d; c++)
        for (uint64_t i = 0; i < d; i++) basis->rows[i * d + c] = basis->vectors[c * d + i];
}

static int basis_alloc(fathom_basis **out, uint32_t dim) {
    fathom_basis *basis = calloc(1, sizeof *basis);
    if (!basis) return fathom_fail(FATHOM_ERR_NOMEM, "basis: out of memory");
    basis->dim = dim;
    basis->mean = fathom_alloc_array(dim, sizeof(float));
    basis->vectors = fathom_alloc_array((uint64_t)dim * dim, sizeof(float));
    basis->eigenvalues = fathom_alloc_array(dim, sizeof(float));
    basis->rows = fathom_alloc_array((uint64_t)dim * dim, sizeof(float));
    if (!basis->mean || !basis->vectors || !basis->eigenvalues || !basis->rows) {
        fathom_basis_free(basis);
        return fathom_fail(FATHOM_ERR_NOMEM, "basis: out of memory for dim %u", dim);
    }
    *out = basis;
    return FATHOM_OK;
}

void fathom_basis_free(fathom_basis *basis) {
    if (!basis) return;
    free(basis->mean);
    free(basis->vectors);
    free(basis->eigenvalues);
    free(basis->rows);
    free(basis);
}

/* dsyev takes int sizes and we keep dim*dim doubles: cap dim well below both. */
#define BASIS_MAX_DIM 16384u

static int check_finite(const float *x, uint64_t count, const char *what) {
    for (uint64_t i = 0; i < count; i++)
        FATHOM_CHECK(!isfinite(x[i]), FATHOM_ERR_NONFINITE, "basis: %s[%llu] is not finite", what,
                     (unsigned long long)i);
    return FATHOM_OK;
}

int fathom_basis_create(fathom_basis **out, uint32_t dim, const float *mean, const float *vectors,
                        const float *eigenvalues) {
    FATHOM_CHECK_ARG(out, "basis_create: out is NULL");
    *out = NULL;
    FATHOM_CHECK_ARG(dim > 0 && dim <= BASIS_MAX_DIM, "basis_create: dim %u not in 1..%u", dim,
                     BASIS_MAX_DIM);
    FATHOM_CHECK_ARG(mean && vectors && eigenvalues, "basis_create: NULL mean/vectors/eigenvalues");
    FATHOM_TRY(check_finite(mean, dim, "mean"));
    FATHOM_TRY(check_finite(vectors, (uint64_t)dim * dim, "vectors"));
    FATHOM_TRY(check_finite(eigenvalues, dim, "eigenvalues"));
    for (uint32_t c = 0; c < dim; c++)
        FATHOM_CHECK_ARG(eigenvalues[c] >= 0.0f, "basis_create: eigenvalues[%u] = %g is negative",
                         c, (double)eigenvalues[c]);
    fathom_basis *basis;
    FATHOM_TRY(basis_alloc(&basis, dim));
    memcpy(basis->mean, mean, (size_t)dim * sizeof(float));
    memcpy(basis->vectors, vectors, (size_t)dim * dim * sizeof(float));
    memcpy(basis->eigenvalues, eigenvalues, (size_t)dim * sizeof(float));
    fill_rows(basis);
    *out = basis;
    return FATHOM_OK;
}

/* Column order: score variance descending, then eigenvalue descending, then
 * the LAPACK index (ascending eigenvalue order), so the order is total. */
typedef struct basis_column {
    double score;
    double eigenvalue;
    int index;
} basis_column;

static int column_cmp(const void *pa, const void *pb) {
    const basis_column *a = pa, *b = pb;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    if (a->eigenvalue != b->eigenvalue) return a->eigenvalue > b->eigenvalue ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

/* cov (upper triangle, column-major) += sum over keys of centered outer
 * products: the rank-1 updates vectorize along each column. */
FATHOM_INLINE void accumulate_covariance_body(const float *keys, uint64_t n_keys, uint64_t d, const double *mean,
                                  double *centered, double *cov) {
    for (uint64_t r = 0; r < n_keys; r++) {
        for (uint64_t i = 0; i < d; i++) centered[i] = (double)keys[r * d + i] - mean[i];
        for (uint64_t c = 0; c < d; c++) {
            double xc = centered[c];
            double *col = cov + c * d;
            for (uint64_t i = 0; i <= c; i++) col[i] += centered[i] * xc;
        }
    }
}
FATHOM_CPU_DISPATCH_VOID(accumulate_covariance, (const float *keys, uint64_t n_keys, uint64_t d, const double *mean,
                                  double *centered, double *cov), (keys, n_keys, d, mean, centered, cov))

int fathom_basis_fit(fathom_basis **out, uint32_t dim, const float *keys, uint64_t n_keys,
                     const float *queries, uint64_t n_queries) {
    FATHOM_CHECK_ARG(out, "basis_fit: out is NULL");
    *out = NULL;
    FATHOM_CHECK_ARG(dim > 0 && dim <= BASIS_MAX_DIM, "basis_fit: dim %u not in 1..%u", dim,
                     BASIS_MAX_DIM);
    FATHOM_CHECK_ARG(keys, "basis_fit: keys is NULL");
    FATHOM_CHECK_ARG(n_keys >= 2, "basis_fit: needs at least 2 keys, got %llu",
                     (unsigned long long)n_keys);
    FATHOM_CHECK_ARG(queries || n_queries == 0, "basis_fit: queries is NULL but n_queries is %llu",
                     (unsigned long long)n_queries);
    if (n_queries == 0) queries = NULL; /* no queries: order by eigenvalue */
    uint64_t key_values, query_values;
    FATHOM_CHECK(!fathom_mul_u64(n_keys, dim, &key_values), FATHOM_ERR_NOMEM,
                 "basis_fit: n_keys * dim overflows");
    FATHOM_CHECK(!fathom_mul_u64(n_queries, dim, &query_values), FATHOM_ERR_NOMEM,
                 "basis_fit: n_queries * dim overflows");
    FATHOM_TRY(check_finite(keys, key_values, "keys"));
    if (queries) FATHOM_TRY(check_finite(queries, query_values, "queries"));

    int status = FATHOM_OK;
    const uint64_t d = dim;
    double *mean = fathom_calloc_array(d, sizeof(double));
    double *cov = fathom_calloc_array(d * d, sizeof(double));
    double *centered = fathom_alloc_array(d, sizeof(double));
    double *eig = fathom_alloc_array(d, sizeof(double));
    double *qsq = fathom_calloc_array(d, sizeof(double));
    basis_column *cols = fathom_alloc_array(d, sizeof(basis_column));
    double *work = NULL;
    fathom_basis *basis = NULL;
    if (!mean || !cov || !centered || !eig || !qsq || !cols) {
        status = fathom_fail(FATHOM_ERR_NOMEM, "basis_fit: out of memory for dim %u", dim);
        goto done;
    }

    /* Two passes in double: the mean, then the covariance of centered keys
     * (upper triangle, column-major for LAPACK; population normalization so
     * eigenvalues are variances over the calibration keys, like
     * fathom_store_variance). */
    for (uint64_t r = 0; r < n_keys; r++)
        for (uint64_t i = 0; i < d; i++) mean[i] += keys[r * d + i];
    for (uint64_t i = 0; i < d; i++) mean[i] /= (double)n_keys;
    accumulate_covariance(keys, n_keys, d, mean, centered, cov);
    for (uint64_t c = 0; c < d; c++)
        for (uint64_t i = 0; i <= c; i++) cov[c * d + i] /= (double)n_keys;

    int n = (int)dim, lwork = -1, info = 0;
    double work_query = 0.0;
    dsyev_("V", "U", &n, cov, &n, eig, &work_query, &lwork, &info);
    if (info != 0 || !(work_query >= 1.0) || work_query > 1e9) {
        status = fathom_fail(FATHOM_ERR_NUMERIC,
                             "basis_fit: dsyev workspace query failed (info %d)", info);
        goto done;
    }
    lwork = (int)work_query;
    work = fathom_alloc_array((uint64_t)lwork, sizeof(double));
    if (!work) {
        status = fathom_fail(FATHOM_ERR_NOMEM, "basis_fit: out of memory for dsyev workspace");
        goto done;
    }
    dsyev_("V", "U", &n, cov, &n, eig, work, &lwork, &info);
    if (info != 0) {
        status = fathom_fail(FATHOM_ERR_NUMERIC, "basis_fit: dsyev failed (info %d)", info);
        goto done;
    }
    /* cov now holds the eigenvectors, column c for eig[c]. */

    /* Deterministic sign: the largest-magnitude component of each column is
     * positive (the first such component on a tie). */
    for (uint64_t c = 0; c < d; c++) {
        double *col = cov + c * d;
        uint64_t arg = 0;
        for (uint64_t i = 1; i < d; i++)
            if (fabs(col[i]) > fabs(col[arg])) arg = i;
        if (col[arg] < 0)
            for (uint64_t i = 0; i < d; i++) col[i] = -col[i];
    }

    /* mean_q((q V)_c^2) for the score-variance order. */
    for (uint64_t r = 0; r < n_queries; r++) {
        const float *q = queries + r * d;
        for (uint64_t c = 0; c < d; c++) {
            const double *col = cov + c * d;
            double proj = 0.0;
            for (uint64_t i = 0; i < d; i++) proj += (double)q[i] * col[i];
            qsq[c] += proj * proj;
        }
    }
    for (uint64_t c = 0; c < d; c++) {
        /* rounding can leave tiny negative eigenvalues of a PSD matrix */
        double lambda = eig[c] > 0.0 ? eig[c] : 0.0;
        cols[c].eigenvalue = lambda;
        cols[c].score = n_queries ? lambda * (qsq[c] / (double)n_queries) : lambda;
        cols[c].index = (int)c;
    }
    qsort(cols, (size_t)d, sizeof *cols, column_cmp);

    status = basis_alloc(&basis, dim);
    if (status < 0) goto done;
    for (uint64_t c = 0; c < d; c++) {
        const double *src = cov + (uint64_t)cols[c].index * d;
        for (uint64_t i = 0; i < d; i++) basis->vectors[c * d + i] = (float)src[i];
        basis->eigenvalues[c] = (float)cols[c].eigenvalue;
        basis->mean[c] = (float)mean[c];
    }
    fill_rows(basis);
    *out = basis;

done:
    free(mean);
    free(cov);
    free(centered);
    free(eig);
    free(qsq);
    free(cols);
    free(work);
    return status;
}

uint32_t fathom_basis_dim(const fathom_basis *basis) { return basis ? basis->dim : 0; }
const float *fathom_basis_mean(const fathom_basis *basis) { return basis ? basis->mean : NULL; }
const float *fathom_basis_vectors(const fathom_basis *basis) {
    return basis ? basis->vectors : NULL;
}
const float *fathom_basis_eigenvalues(const fathom_basis *basis) {
    return basis ? basis->eigenvalues : NULL;
}

/* out is written while x is still being read, so they must not overlap. */
static bool overlaps(const float *x, const float *out, uint64_t d) {
    uintptr_t a = (uintptr_t)x, b = (uintptr_t)out, bytes = (uintptr_t)(d * sizeof(float));
    return a < b + bytes && b < a + bytes;
}

/* out[c] = sum_i (x[i] - mean[i]) V[i,c] (mean NULL: no centering), summed
 * over i in order in double. The loop runs i outside and 64 outputs inside
 * over the row-major copy, so the inner loop has no carried dependency and
 * vectorizes; the sum order per output is the same as a plain dot product. */
#define ROTATE_CHUNK 64

FATHOM_INLINE void rotate_body(const fathom_basis *basis, const float *x, const float *mean, float *out) {
    const uint64_t d = basis->dim;
    for (uint64_t c0 = 0; c0 < d; c0 += ROTATE_CHUNK) {
        uint64_t width = d - c0 < ROTATE_CHUNK ? d - c0 : ROTATE_CHUNK;
        double acc[ROTATE_CHUNK] = {0};
        for (uint64_t i = 0; i < d; i++) {
            double xi = mean ? (double)x[i] - mean[i] : (double)x[i];
            const float *row = basis->rows + i * d + c0;
            for (uint64_t c = 0; c < width; c++) acc[c] += xi * row[c];
        }
        for (uint64_t c = 0; c < width; c++) out[c0 + c] = (float)acc[c];
    }
}
FATHOM_CPU_DISPATCH_VOID(rotate, (const fathom_basis *basis, const float *x, const float *mean, float *out), (basis, x, mean, out))

int fathom_basis_rotate_key(const fathom_basis *basis, const float *key, float *out) {
    FATHOM_CHECK_ARG(basis && key && out, "basis_rotate_key: NULL argument");
    FATHOM_CHECK_ARG(!overlaps(key, out, basis->dim), "basis_rotate_key: key and out overlap");
    rotate(basis, key, basis->mean, out);
    return FATHOM_OK;
}

int fathom_basis_rotate_query(const fathom_basis *basis, const float *query, float *out) {
    FATHOM_CHECK_ARG(basis && query && out, "basis_rotate_query: NULL argument");
    FATHOM_CHECK_ARG(!overlaps(query, out, basis->dim),
                     "basis_rotate_query: query and out overlap");
    rotate(basis, query, NULL, out);
    return FATHOM_OK;
}

/* The KLT basis: recovers a covariance built to be known exactly, orders
 * columns by calibration score variance, is orthonormal and deterministic,
 * and rotates keys and queries so that scores are preserved. */
#include "check.h"
#include "fathom.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define DIM 8
#define NK 16

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static double rng_normal(void) {
    double u, v;
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    u = ((double)(rng_state >> 11) + 0.5) / 9007199254740992.0;
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    v = (double)(rng_state >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* Random orthogonal Q [DIM x DIM] row-major, Q[i][c] = component i of column c. */
static void orthogonal(double q[DIM][DIM]) {
    for (int i = 0; i < DIM; i++)
        for (int c = 0; c < DIM; c++) q[i][c] = rng_normal();
    for (int c = 0; c < DIM; c++) {
        for (int k = 0; k < c; k++) {
            double dot = 0;
            for (int i = 0; i < DIM; i++) dot += q[i][c] * q[i][k];
            for (int i = 0; i < DIM; i++) q[i][c] -= dot * q[i][k];
        }
        double norm = 0;
        for (int i = 0; i < DIM; i++) norm += q[i][c] * q[i][c];
        for (int i = 0; i < DIM; i++) q[i][c] /= sqrt(norm);
    }
}

/* Sylvester Hadamard entry H[i][c] = (-1)^popcount(i & c). */
static double hadamard(int i, int c) {
    return __builtin_popcount((unsigned)(i & c)) % 2 ? -1.0 : 1.0;
}

/* Keys whose population covariance is exactly Q diag(sigma^2) Q^T: rows of
 * Z[i][c] = sigma_c * H[i][c+1] have zero column sums and orthogonal columns
 * (Z^T Z = 16 diag(sigma^2)), then K = Z Q^T + mu. */
static const double sigma2[DIM] = {9.0, 5.0, 4.0, 2.25, 1.0, 0.5, 0.25, 0.01};
static const float mu[DIM] = {1.0f, -2.0f, 0.5f, 3.0f, 0.0f, -1.0f, 10.0f, 0.25f};

static void known_keys(double q[DIM][DIM], float *keys) {
    for (int r = 0; r < NK; r++)
        for (int i = 0; i < DIM; i++) {
            double x = mu[i];
            for (int c = 0; c < DIM; c++) x += sqrt(sigma2[c]) * hadamard(r, c + 1) * q[i][c];
            keys[r * DIM + i] = (float)x;
        }
}

/* |cos| between column c of V and column k of Q. */
static double alignment(const float *v, double q[DIM][DIM], int c, int k) {
    double dot = 0;
    for (int i = 0; i < DIM; i++) dot += v[c * DIM + i] * q[i][k];
    return fabs(dot);
}

static void check_orthonormal_and_signs(const fathom_basis *b) {
    const float *v = fathom_basis_vectors(b);
    double worst = 0;
    for (int a = 0; a < DIM; a++)
        for (int c = 0; c < DIM; c++) {
            double dot = 0;
            for (int i = 0; i < DIM; i++) dot += (double)v[a * DIM + i] * v[c * DIM + i];
            double err = fabs(dot - (a == c ? 1.0 : 0.0));
            if (err > worst) worst = err;
        }
    CHECK(worst < 1e-6);
    for (int c = 0; c < DIM; c++) {
        int arg = 0;
        for (int i = 1; i < DIM; i++)
            if (fabsf(v[c * DIM + i]) > fabsf(v[c * DIM + arg])) arg = i;
        CHECK(v[c * DIM + arg] > 0);
    }
}

static void test_known_covariance(void) {
    double q[DIM][DIM];
    orthogonal(q);
    float keys[NK * DIM];
    known_keys(q, keys);
    fathom_basis *b = NULL;
    CHECK_OK(fathom_basis_fit(&b, DIM, keys, NK, NULL, 0));
    CHECK(fathom_basis_dim(b) == DIM);
    const float *eig = fathom_basis_eigenvalues(b), *mean = fathom_basis_mean(b);
    const float *v = fathom_basis_vectors(b);
    for (int c = 0; c < DIM; c++) {
        CHECK_NEAR(eig[c], sigma2[c], 1e-5 * sigma2[0]); /* descending, as built */
        CHECK_NEAR(alignment(v, q, c, c), 1.0, 1e-5);
        CHECK_NEAR(mean[c], mu[c], 1e-5);
    }
    check_orthonormal_and_signs(b);

    /* deterministic: the same input gives the same bytes */
    fathom_basis *again = NULL;
    CHECK_OK(fathom_basis_fit(&again, DIM, keys, NK, NULL, 0));
    CHECK(memcmp(fathom_basis_vectors(b), fathom_basis_vectors(again), sizeof(float) * DIM * DIM) ==
          0);
    CHECK(memcmp(fathom_basis_eigenvalues(b), fathom_basis_eigenvalues(again),
                 sizeof(float) * DIM) == 0);
    fathom_basis_free(again);

    /* Rotation: k' = (k - mean) V has variances sigma^2 and preserves scores
     * up to the key-independent q.mean term. */
    double var[DIM] = {0};
    float kr[DIM], qr[DIM], query[DIM];
    for (int i = 0; i < DIM; i++) query[i] = (float)rng_normal();
    CHECK_OK(fathom_basis_rotate_query(b, query, qr));
    double qmean = 0;
    for (int i = 0; i < DIM; i++) qmean += (double)query[i] * mean[i];
    for (int r = 0; r < NK; r++) {
        CHECK_OK(fathom_basis_rotate_key(b, keys + r * DIM, kr));
        double s_orig = 0, s_rot = qmean;
        for (int i = 0; i < DIM; i++) {
            s_orig += (double)query[i] * keys[r * DIM + i];
            s_rot += (double)qr[i] * kr[i];
            var[i] += (double)kr[i] * kr[i] / NK;
        }
        CHECK_NEAR(s_rot, s_orig, 1e-4);
        /* rotate_key against a direct double computation */
        for (int c = 0; c < DIM; c++) {
            double x = 0;
            for (int i = 0; i < DIM; i++)
                x += ((double)keys[r * DIM + i] - mean[i]) * v[c * DIM + i];
            CHECK_NEAR(kr[c], x, 1e-5);
        }
    }
    for (int c = 0; c < DIM; c++) CHECK_NEAR(var[c], sigma2[c], 1e-4);
    fathom_basis_free(b);
}

static void test_query_order(void) {
    double q[DIM][DIM];
    orthogonal(q);
    float keys[NK * DIM];
    known_keys(q, keys);
    /* One query with (q Q)_c^2 = r_c / sigma_c^2, r = 1..8: score variance
     * r_c rises as the eigenvalue falls, so the order is reversed. A second
     * query, its negation, leaves the mean square unchanged. */
    float queries[2 * DIM];
    for (int i = 0; i < DIM; i++) {
        double x = 0;
        for (int c = 0; c < DIM; c++) x += sqrt((c + 1) / sigma2[c]) * q[i][c];
        queries[i] = (float)x;
        queries[DIM + i] = (float)-x;
    }
    fathom_basis *b = NULL;
    CHECK_OK(fathom_basis_fit(&b, DIM, keys, NK, queries, 2));
    const float *eig = fathom_basis_eigenvalues(b), *v = fathom_basis_vectors(b);
    for (int c = 0; c < DIM; c++) {
        CHECK_NEAR(eig[c], sigma2[DIM - 1 - c], 1e-5 * sigma2[0]);
        CHECK_NEAR(alignment(v, q, c, DIM - 1 - c), 1.0, 1e-4);
    }
    /* the score variances themselves, recomputed from V, are descending */
    float qr[DIM];
    CHECK_OK(fathom_basis_rotate_query(b, queries, qr));
    for (int c = 0; c + 1 < DIM; c++)
        CHECK((double)eig[c] * qr[c] * qr[c] > (double)eig[c + 1] * qr[c + 1] * qr[c + 1]);
    check_orthonormal_and_signs(b);
    fathom_basis_free(b);
}

static void test_create_and_degenerate(void) {
    float mean[3] = {1, 2, 3}, vec[9] = {0, 1, 0, 1, 0, 0, 0, 0, 1}, eig[3] = {4, 2, 0};
    fathom_basis *b = NULL;
    CHECK_OK(fathom_basis_create(&b, 3, mean, vec, eig));
    vec[0] = 99; /* copied, not referenced */
    CHECK(fathom_basis_vectors(b)[0] == 0.0f && fathom_basis_vectors(b)[1] == 1.0f);
    float k[3] = {5, 7, 9}, out[3];
    CHECK_OK(fathom_basis_rotate_key(b, k, out));
    CHECK(out[0] == 5.0f && out[1] == 4.0f && out[2] == 6.0f); /* (k-mean) permuted */
    CHECK_OK(fathom_basis_rotate_query(b, k, out));
    CHECK(out[0] == 7.0f && out[1] == 5.0f && out[2] == 9.0f);
    fathom_basis_free(b);

    /* identical keys: every eigenvalue 0, still an orthonormal basis */
    float same[4 * DIM];
    for (int i = 0; i < 4 * DIM; i++) same[i] = (float)(i % DIM);
    CHECK_OK(fathom_basis_fit(&b, DIM, same, 4, NULL, 0));
    for (int c = 0; c < DIM; c++) CHECK(fathom_basis_eigenvalues(b)[c] == 0.0f);
    check_orthonormal_and_signs(b);
    fathom_basis_free(b);
    /* two keys, dim 1 */
    float two[2] = {1.0f, 3.0f};
    CHECK_OK(fathom_basis_fit(&b, 1, two, 2, NULL, 0));
    CHECK(fathom_basis_eigenvalues(b)[0] == 1.0f && fathom_basis_vectors(b)[0] == 1.0f);
    CHECK(fathom_basis_mean(b)[0] == 2.0f);
    fathom_basis_free(b);
}

static void test_bad_args(void) {
    float keys[4 * DIM] = {0}, q[DIM] = {0};
    for (int i = 0; i < 4 * DIM; i++) keys[i] = (float)(i * 7 % 11);
    fathom_basis *b = (fathom_basis *)&b;
    CHECK_STATUS(fathom_basis_fit(NULL, DIM, keys, 4, NULL, 0), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_basis_fit(&b, 0, keys, 4, NULL, 0), FATHOM_ERR_INVALID_ARG);
    CHECK(b == NULL); /* cleared on failure */
    CHECK_STATUS(fathom_basis_fit(&b, DIM, NULL, 4, NULL, 0), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_basis_fit(&b, DIM, keys, 1, NULL, 0), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_basis_fit(&b, DIM, keys, 4, NULL, 1), FATHOM_ERR_INVALID_ARG);
    CHECK_OK(fathom_basis_fit(&b, DIM, keys, 4, q, 0)); /* 0 queries: by eigenvalue */
    for (int c = 0; c + 1 < DIM; c++)
        CHECK(fathom_basis_eigenvalues(b)[c] >= fathom_basis_eigenvalues(b)[c + 1]);
    fathom_basis_free(b);
    b = NULL;
    CHECK_STATUS(fathom_basis_fit(&b, 100000, keys, 4, NULL, 0), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_basis_fit(&b, DIM, keys, UINT64_MAX, NULL, 0), FATHOM_ERR_NOMEM);
    keys[9] = NAN;
    CHECK_STATUS(fathom_basis_fit(&b, DIM, keys, 4, NULL, 0), FATHOM_ERR_NONFINITE);
    keys[9] = 1;
    q[3] = INFINITY;
    CHECK_STATUS(fathom_basis_fit(&b, DIM, keys, 4, q, 1), FATHOM_ERR_NONFINITE);
    q[3] = 0;

    float mean[2] = {0, 0}, vec[4] = {1, 0, 0, 1}, eig[2] = {1, 1};
    CHECK_STATUS(fathom_basis_create(NULL, 2, mean, vec, eig), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_basis_create(&b, 0, mean, vec, eig), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_basis_create(&b, 2, NULL, vec, eig), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_basis_create(&b, 2, mean, NULL, eig), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_basis_create(&b, 2, mean, vec, NULL), FATHOM_ERR_INVALID_ARG);
    eig[1] = -1;
    CHECK_STATUS(fathom_basis_create(&b, 2, mean, vec, eig), FATHOM_ERR_INVALID_ARG);
    eig[1] = NAN;
    CHECK_STATUS(fathom_basis_create(&b, 2, mean, vec, eig), FATHOM_ERR_NONFINITE);
    eig[1] = 1;
    vec[2] = INFINITY;
    CHECK_STATUS(fathom_basis_create(&b, 2, mean, vec, eig), FATHOM_ERR_NONFINITE);
    vec[2] = 0;
    mean[0] = NAN;
    CHECK_STATUS(fathom_basis_create(&b, 2, mean, vec, eig), FATHOM_ERR_NONFINITE);
    mean[0] = 0;
    CHECK(b == NULL);
    CHECK_OK(fathom_basis_create(&b, 2, mean, vec, eig));

    float x[4] = {1, 2, 3, 4}, out[2];
    CHECK_STATUS(fathom_basis_rotate_key(NULL, x, out), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_basis_rotate_key(b, NULL, out), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_basis_rotate_key(b, x, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_basis_rotate_key(b, x, x), FATHOM_ERR_INVALID_ARG);     /* in place */
    CHECK_STATUS(fathom_basis_rotate_key(b, x, x + 1), FATHOM_ERR_INVALID_ARG); /* overlap */
    CHECK_OK(fathom_basis_rotate_key(b, x, x + 2));                             /* adjacent */
    CHECK_STATUS(fathom_basis_rotate_query(NULL, x, out), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_basis_rotate_query(b, NULL, out), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_basis_rotate_query(b, x, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_basis_rotate_query(b, x + 1, x), FATHOM_ERR_INVALID_ARG);
    fathom_basis_free(b);
    fathom_basis_free(NULL);
    CHECK(fathom_basis_dim(NULL) == 0);
    CHECK(fathom_basis_mean(NULL) == NULL && fathom_basis_vectors(NULL) == NULL);
    CHECK(fathom_basis_eigenvalues(NULL) == NULL);
}

int main(void) {
    test_known_covariance();
    test_query_order();
    test_create_and_degenerate();
    test_bad_args();
    return check_summary("test_basis");
}

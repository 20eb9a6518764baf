/* The per-KV-head index (fathom.h, section "index") and fathom_method_check:
 * - the one rule set for a method against a head size, and what each method
 *   needs;
 * - the scores of every index-based method equal those of a reference built
 *   here from the store, basis and landmarks directly, with the channels of
 *   sparq, ds and fathom's variance computed here in double;
 * - calibration is kept across fathom_index_clear, and re-appending gives
 *   the same scores;
 * - misuse: two ds:c, append before a needed calibration, a method outside
 *   the set, more keys than indexed. */
#include "check.h"
#include "fathom.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define D 16
#define G 2
#define N 150 /* two closed blocks and an open one */
#define CN 80 /* calibration keys */
#define CQ 6  /* calibration queries */

static uint64_t rng = 99;
static float rnd(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static fathom_method method(const char *spec) {
    fathom_method m;
    memset(&m, 0, sizeof m);
    CHECK_OK(fathom_method_parse(spec, &m));
    return m;
}

static int check_spec(const char *spec, uint32_t dim) {
    fathom_method m = method(spec);
    return fathom_method_check(&m, dim);
}

static void test_check_and_needs(void) {
    CHECK_OK(check_spec("fathom:256", 64));
    CHECK_STATUS(check_spec("fathom:257", 64), FATHOM_ERR_INVALID_ARG);
    CHECK(strstr(fathom_last_error(), "fathom:257: the bit budget must be in [1, 256] at head dim 64") != NULL);
    CHECK_OK(check_spec("fathom-klt:1", 64));
    CHECK_STATUS(check_spec("fathom-klt:300", 64), FATHOM_ERR_INVALID_ARG);
    CHECK_OK(check_spec("sparq:64", 64));
    CHECK_STATUS(check_spec("sparq:65", 64), FATHOM_ERR_INVALID_ARG);
    CHECK(strstr(fathom_last_error(), "sparq:65: the channel count must be in [1, 64]") != NULL);
    CHECK_STATUS(check_spec("ds:65", 64), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(check_spec("loki:65", 64), FATHOM_ERR_INVALID_ARG);
    CHECK_OK(check_spec("loki:64", 64));
    const char *fixed[] = {"thumb", "landmark", "full4", "oracle", "dense"};
    for (int i = 0; i < 5; i++) CHECK_OK(check_spec(fixed[i], 1));
    CHECK_STATUS(check_spec("thumb", 0), FATHOM_ERR_INVALID_ARG);
    fathom_method m = method("fathom:8");
    m.param = 0; /* a hand-built method with no budget */
    CHECK_STATUS(fathom_method_check(&m, 64), FATHOM_ERR_INVALID_ARG);
    m.kind = (fathom_method_kind)42;
    CHECK_STATUS(fathom_method_check(&m, 64), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_method_check(NULL, 64), FATHOM_ERR_INVALID_ARG);

    const struct {
        const char *spec;
        unsigned needs;
    } table[] = {
        {"fathom:8", FATHOM_NEEDS_STORE},
        {"sparq:4", FATHOM_NEEDS_STORE},
        {"thumb", FATHOM_NEEDS_STORE},
        {"full4", FATHOM_NEEDS_STORE},
        {"ds:4", FATHOM_NEEDS_STORE | FATHOM_NEEDS_CALIB},
        {"fathom-klt:8", FATHOM_NEEDS_ROTATED | FATHOM_NEEDS_CALIB},
        {"fathom-centered:8", FATHOM_NEEDS_CENTERED},
        {"loki:4", FATHOM_NEEDS_ROTATED | FATHOM_NEEDS_CALIB},
        {"landmark", FATHOM_NEEDS_LANDMARKS},
        {"oracle", 0},
        {"dense", 0},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        fathom_method mm = method(table[i].spec);
        CHECK(fathom_method_needs(&mm) == table[i].needs);
    }
    CHECK(fathom_method_needs(NULL) == 0);
}

/* Depth 4 on the `count` channels with the largest value (ties to the lower index). */
static void top(const double *value, uint32_t count, uint8_t *depths) {
    memset(depths, 0, D);
    for (uint32_t c = 0; c < count; c++) {
        int best = -1;
        for (int j = 0; j < D; j++)
            if (!depths[j] && (best < 0 || value[j] > value[best])) best = j;
        depths[best] = 4;
    }
}

/* The reference scores of one plane method: scan `store` at `depths`. */
static void ref_scan(const fathom_store *store, const uint8_t *depths, const float *q, float *out) {
    CHECK_OK(fathom_store_scan(store, depths, q, G, N, out, NULL));
}

static void water(const float *q, const float *var, uint32_t budget, uint8_t *depths) {
    double g[D];
    CHECK_OK(fathom_importance(D, G, q, var, g));
    CHECK_OK(fathom_water_fill(D, g, budget, depths, NULL));
}

/* A store centered on the mean of keys [n x D] (double sums, one rounding). */
static fathom_store *centered_ref(const float *keys, int n_mean, const float *all, int n) {
    float mu[D];
    for (int j = 0; j < D; j++) {
        double sum = 0;
        for (int i = 0; i < n_mean; i++) sum += keys[i * D + j];
        mu[j] = (float)(sum / n_mean);
    }
    fathom_store *st = NULL;
    CHECK_OK(fathom_store_create(&st, D, 0, NULL));
    CHECK_OK(fathom_store_set_center(st, mu));
    CHECK_OK(fathom_store_append(st, all, (uint64_t)n));
    return st;
}

static void test_scores(int variance_from_store) {
    static float keys[N * D], ck[CN * D], cq[CQ * D], q[G * D];
    for (int i = 0; i < N * D; i++) keys[i] = rnd() * (1.0f + (float)(i % D) / 4.0f);
    for (int i = 0; i < CN * D; i++) ck[i] = rnd() * (1.0f + (float)(i % D) / 4.0f);
    for (int i = 0; i < CQ * D; i++) cq[i] = rnd();
    for (int i = 0; i < G * D; i++) q[i] = rnd();
    const char *specs[] = {"fathom:20", "fathom-klt:20", "sparq:5", "ds:6", "loki:7", "thumb", "landmark",
                           "full4", "oracle", "dense", "fathom-centered:20"};
    enum { NM = sizeof specs / sizeof specs[0] };
    fathom_method m[NM];
    for (int i = 0; i < NM; i++) m[i] = method(specs[i]);

    fathom_index *ix = NULL;
    CHECK_OK(fathom_index_create(&ix, m, NM, D, 0));
    if (!ix) return;
    CHECK(fathom_index_dim(ix) == D && fathom_index_length(ix) == 0);
    /* fathom-klt, ds and loki need calibration before keys */
    CHECK_STATUS(fathom_index_append(ix, keys, N), FATHOM_ERR_STATE);
    const fathom_index_calib cal = {ck, CN, cq, CQ, variance_from_store};
    CHECK_OK(fathom_index_calibrate(ix, &cal));
    CHECK_STATUS(fathom_index_calibrate(ix, &cal), FATHOM_ERR_STATE);
    CHECK_OK(fathom_index_append(ix, keys, 100));
    CHECK_OK(fathom_index_append(ix, keys + 100 * D, N - 100));
    CHECK(fathom_index_length(ix) == N);

    /* the references */
    fathom_store *raw = NULL, *rot = NULL;
    fathom_basis *basis = NULL;
    fathom_landmarks *lm = NULL;
    CHECK_OK(fathom_store_create(&raw, D, 0, NULL));
    CHECK_OK(fathom_store_append(raw, keys, N));
    CHECK_OK(fathom_basis_fit(&basis, D, ck, CN, cq, CQ));
    CHECK_OK(fathom_store_create(&rot, D, 0, basis));
    CHECK_OK(fathom_store_append(rot, keys, N));
    CHECK_OK(fathom_landmarks_create(&lm, D));
    CHECK_OK(fathom_landmarks_append(lm, keys, N));
    /* the index's first append held 100 keys: their mean is the center */
    fathom_store *cen = centered_ref(keys, 100, keys, N);
    float var[D], var_cen[D], qrot[G * D];
    CHECK_OK(fathom_store_variance(cen, var_cen));
    if (variance_from_store) {
        CHECK_OK(fathom_store_variance(raw, var));
    } else {
        for (int j = 0; j < D; j++) {
            double mean = 0, m2 = 0;
            for (int i = 0; i < CN; i++) mean += ck[i * D + j];
            mean /= CN;
            for (int i = 0; i < CN; i++) m2 += (ck[i * D + j] - mean) * (ck[i * D + j] - mean);
            var[j] = (float)(m2 / CN);
        }
    }
    for (int h = 0; h < G; h++) CHECK_OK(fathom_basis_rotate_query(basis, q + h * D, qrot + h * D));

    void *scratch = malloc(fathom_index_scratch_size(D, G));
    static float got[G * N], want[G * N];
    for (int i = 0; i < NM; i++) {
        const fathom_method *mi = &m[i];
        uint8_t depths[D];
        double value[D];
        memset(want, 0, sizeof want);
        switch (mi->kind) {
        case FATHOM_METHOD_FATHOM:
            water(q, var, mi->param, depths);
            ref_scan(raw, depths, q, want);
            break;
        case FATHOM_METHOD_FATHOM_CENTERED:
            water(q, variance_from_store ? var_cen : var, mi->param, depths);
            ref_scan(cen, depths, q, want);
            break;
        case FATHOM_METHOD_FATHOM_KLT:
            water(qrot, fathom_basis_eigenvalues(basis), mi->param, depths);
            ref_scan(rot, depths, qrot, want);
            break;
        case FATHOM_METHOD_LOKI:
            for (int j = 0; j < D; j++) depths[j] = j < (int)mi->param ? 4 : 0;
            ref_scan(rot, depths, qrot, want);
            break;
        case FATHOM_METHOD_SPARQ:
            for (int j = 0; j < D; j++) value[j] = fabs(q[j]) + fabs(q[D + j]);
            top(value, mi->param, depths);
            ref_scan(raw, depths, q, want);
            break;
        case FATHOM_METHOD_DS:
            for (int j = 0; j < D; j++) {
                double mq = 0, mk = 0;
                for (int r = 0; r < CQ; r++) mq += fabs(cq[r * D + j]);
                for (int r = 0; r < CN; r++) mk += fabs(ck[r * D + j]);
                value[j] = (mq / CQ) * (mk / CN);
            }
            top(value, mi->param, depths);
            ref_scan(raw, depths, q, want);
            break;
        case FATHOM_METHOD_THUMB:
        case FATHOM_METHOD_FULL4:
            memset(depths, mi->kind == FATHOM_METHOD_THUMB ? 2 : 4, D);
            ref_scan(raw, depths, q, want);
            break;
        case FATHOM_METHOD_LANDMARK:
            CHECK_OK(fathom_landmarks_scan(lm, q, G, N, want, NULL));
            break;
        default: /* oracle, dense: no index scorer */
            CHECK_STATUS(fathom_index_scores(ix, mi, mi->param, G, q, N, got, scratch, NULL, NULL),
                         FATHOM_ERR_INVALID_ARG);
            continue;
        }
        double bits = -1;
        uint64_t bytes = 0;
        CHECK_OK(fathom_index_scores(ix, mi, mi->param, G, q, N, got, scratch, &bits, &bytes));
        if (memcmp(got, want, sizeof got) != 0) fprintf(stderr, "%s: scores differ\n", mi->name);
        CHECK(memcmp(got, want, sizeof got) == 0);
        CHECK(bytes > 0);
        CHECK(bits == (mi->kind == FATHOM_METHOD_LANDMARK ? fathom_method_fixed_bits(mi, D)
                                                          : fathom_depth_bits(D, depths)));
    }

    /* clear keeps the calibration: the same keys give the same scores */
    float before[G * N];
    CHECK_OK(fathom_index_scores(ix, &m[3], 0, G, q, N, before, scratch, NULL, NULL));
    CHECK_OK(fathom_index_clear(ix));
    CHECK(fathom_index_length(ix) == 0);
    CHECK_STATUS(fathom_index_scores(ix, &m[3], 0, G, q, 1, got, scratch, NULL, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_OK(fathom_index_append(ix, keys, N));
    CHECK_OK(fathom_index_scores(ix, &m[3], 0, G, q, N, got, scratch, NULL, NULL));
    CHECK(memcmp(got, before, sizeof got) == 0);
    /* and the center is the mean of the first append after the clear: all N keys */
    {
        fathom_store *cen_all = centered_ref(keys, N, keys, N);
        uint8_t depths[D];
        if (variance_from_store) CHECK_OK(fathom_store_variance(cen_all, var_cen));
        water(q, variance_from_store ? var_cen : var, 20, depths);
        ref_scan(cen_all, depths, q, want);
        CHECK_OK(fathom_index_scores(ix, &m[10], 20, G, q, N, got, scratch, NULL, NULL));
        CHECK(memcmp(got, want, sizeof got) == 0);
        fathom_store_free(cen_all);
    }

    /* misuse */
    fathom_method other = method("ds:7"), absent = method("sparq:3");
    CHECK_STATUS(fathom_index_scores(ix, &other, 0, G, q, N, got, scratch, NULL, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_OK(fathom_index_scores(ix, &absent, 0, G, q, N, got, scratch, NULL, NULL)); /* sparq:r reads the store */
    CHECK_STATUS(fathom_index_scores(ix, &m[0], 20, G, q, N + 1, got, scratch, NULL, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_index_scores(ix, &m[0], 20, G, q, N, got, NULL, NULL, NULL), FATHOM_ERR_INVALID_ARG);

    free(scratch);
    fathom_index_free(ix);
    fathom_store_free(raw);
    fathom_store_free(cen);
    fathom_store_free(rot);
    fathom_basis_free(basis);
    fathom_landmarks_free(lm);
}

static void test_misuse(void) {
    fathom_method two_ds[2] = {method("ds:4"), method("ds:5")};
    fathom_index *ix = (fathom_index *)&rng;
    CHECK_STATUS(fathom_index_create(&ix, two_ds, 2, D, 0), FATHOM_ERR_INVALID_ARG);
    CHECK(ix == NULL);
    fathom_method big = method("fathom:65"); /* > 4 * D */
    CHECK_STATUS(fathom_index_create(&ix, &big, 1, D, 0), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_index_create(&ix, two_ds, 1, 0, 0), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_index_create(NULL, two_ds, 1, D, 0), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_index_create(&ix, two_ds, 1, D, 0x100), FATHOM_ERR_INVALID_ARG);

    /* oracle alone needs nothing; FATHOM_NEEDS_STORE adds the raw store */
    fathom_method oracle = method("oracle");
    CHECK_OK(fathom_index_create(&ix, &oracle, 1, D, 0));
    CHECK(fathom_index_store(ix) == NULL);
    float k[D] = {1};
    CHECK_OK(fathom_index_append(ix, k, 1));
    fathom_index_free(ix);
    CHECK_OK(fathom_index_create(&ix, &oracle, 1, D, FATHOM_NEEDS_STORE));
    CHECK(fathom_index_store(ix) != NULL);
    /* calibration with too little data */
    fathom_method loki = method("loki:2");
    fathom_index *lx = NULL;
    CHECK_OK(fathom_index_create(&lx, &loki, 1, D, 0));
    const fathom_index_calib tiny = {k, 1, k, 1, 0};
    CHECK_STATUS(fathom_index_calibrate(lx, &tiny), FATHOM_ERR_INVALID_ARG);
    fathom_index_free(lx);
    fathom_index_free(ix);
    fathom_index_free(NULL);
    CHECK(fathom_index_scratch_size(0, G) == 0 && fathom_index_scratch_size(D, 0) == 0);
    CHECK(fathom_index_scratch_size(D, G) >= (size_t)D * 8 + (size_t)G * D * 4);
}

int main(void) {
    test_check_and_needs();
    test_scores(1);
    test_scores(0);
    test_misuse();
    return check_summary("test_index");
}

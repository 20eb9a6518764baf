/* The fidelity harness: properties that must hold on the synthetic presets.
 * - dense has error 0 and reads no scan bytes;
 * - with k >= n every method selects everything and is exact;
 * - the byte accounting of the fixed-depth methods (68/136/288/256/544 bits);
 * - the oracle's mean error is no larger than any scan's at the same k;
 * - Fathom's mean error falls as its budget grows;
 * - results do not depend on the thread count;
 * - bad configurations are rejected. */
#include "check.h"
#include "fathom.h"

#include <math.h>
#include <string.h>

static int find(const fathom_method_result *r, uint32_t n, const char *name) {
    for (uint32_t i = 0; i < n; i++)
        if (!strcmp(r[i].name, name)) return (int)i;
    return -1;
}

static void check_preset(const char *preset, uint64_t context, uint32_t positions, uint32_t k, int extra) {
    fathom_source *src = NULL, *cal = NULL;
    CHECK_OK(fathom_synth_open(&src, preset, context, positions, 1));
    CHECK_OK(fathom_synth_open(&cal, preset, context, positions, 1001));
    if (!src || !cal) return;
    fathom_source_info info;
    CHECK_OK(fathom_source_get_info(src, &info));

    const char *list = "fathom:16,fathom:32,fathom:48,fathom:96,fathom-klt:48,sparq:16,sparq:32,ds:32,"
                       "loki:32,thumb,landmark,full4,oracle,dense";
    fathom_method m[32];
    uint32_t n = 0;
    CHECK_OK(fathom_method_parse_list(list, m, 32, &n));
    fathom_method_result r[32];
    fathom_eval_config cfg = {0};
    cfg.k = k;
    cfg.calib = cal;
    cfg.threads = 2;
    CHECK_OK(fathom_eval_run(src, m, n, &cfg, r));

    int dense = find(r, n, "dense"), oracle = find(r, n, "oracle");
    CHECK(dense >= 0 && oracle >= 0);
    if (dense < 0 || oracle < 0) return;
    CHECK(r[dense].rel_error == 0);
    CHECK(r[dense].scan_bytes_per_step == 0);
    CHECK_NEAR(r[dense].selection_ratio, 1.0, 1e-12);
    for (uint32_t i = 0; i < n; i++) {
        if ((int)i == dense) continue;
        CHECK(r[i].rel_error > 0 && isfinite(r[i].rel_error));
        if (r[oracle].rel_error > r[i].rel_error)
            fprintf(stderr, "%s: oracle %.5f > %s %.5f\n", preset, r[oracle].rel_error, r[i].name, r[i].rel_error);
        CHECK(r[oracle].rel_error <= r[i].rel_error);
    }
    /* error falls as the budget grows (means over the whole window) */
    CHECK(r[find(r, n, "fathom:16")].rel_error > r[find(r, n, "fathom:32")].rel_error);
    CHECK(r[find(r, n, "fathom:32")].rel_error > r[find(r, n, "fathom:48")].rel_error);
    CHECK(r[find(r, n, "fathom:48")].rel_error > r[find(r, n, "fathom:96")].rel_error);
    /* bits: code bits <= B plus a quarter bit per active channel */
    double b48 = r[find(r, n, "fathom:48")].bits_per_token;
    CHECK(b48 > 48 && b48 <= 48 + 48 / 4.0);
    const double d = info.dim;
    CHECK_NEAR(r[find(r, n, "sparq:16")].bits_per_token, 68, 1e-9);
    CHECK_NEAR(r[find(r, n, "sparq:32")].bits_per_token, 136, 1e-9);
    CHECK_NEAR(r[find(r, n, "ds:32")].bits_per_token, 136, 1e-9);
    CHECK_NEAR(r[find(r, n, "loki:32")].bits_per_token, 136, 1e-9);
    CHECK_NEAR(r[find(r, n, "thumb")].bits_per_token, 2 * d + d / 4, 1e-9);
    CHECK_NEAR(r[find(r, n, "landmark")].bits_per_token, 2 * d, 1e-9);
    CHECK_NEAR(r[find(r, n, "full4")].bits_per_token, 4 * d + d / 4, 1e-9);
    /* scan bytes per step = bits/8 * mean visible keys * layers * KV heads */
    double mean_visible = (double)info.first_query + (positions + 1) / 2.0;
    double expect = 136.0 / 8 * mean_visible * info.layers * info.kv_heads;
    CHECK_NEAR(r[find(r, n, "ds:32")].scan_bytes_per_step / expect, 1.0, 1e-9);
    /* rows: the union of G heads' winners is between k and G*k rows of K+V in bf16 */
    double rows = r[oracle].row_bytes_per_step / (info.layers * info.kv_heads * 4.0 * d);
    CHECK(rows >= k && rows <= (double)k * (info.q_heads / info.kv_heads));

    if (!extra) {
        fathom_source_free(src);
        fathom_source_free(cal);
        return;
    }
    /* thread count does not change the answer */
    fathom_method_result r1[32];
    cfg.threads = 1;
    CHECK_OK(fathom_eval_run(src, m, n, &cfg, r1));
    for (uint32_t i = 0; i < n; i++) CHECK(r1[i].rel_error == r[i].rel_error && r1[i].bits_per_token == r[i].bits_per_token);

    /* k >= n: everything is selected and exact */
    cfg.k = (uint32_t)context;
    CHECK_OK(fathom_eval_run(src, m, n, &cfg, r));
    for (uint32_t i = 0; i < n; i++) {
        CHECK(r[i].rel_error < 1e-6);
        CHECK_NEAR(r[i].selection_ratio, 1.0, 1e-12);
    }
    fathom_source_free(src);
    fathom_source_free(cal);
}

static void check_bad_config(void) {
    fathom_source *src = NULL, *other = NULL;
    CHECK_OK(fathom_synth_open(&src, "smollm2-135m", 256, 8, 1));
    CHECK_OK(fathom_synth_open(&other, "qwen3-8b", 256, 8, 1));
    fathom_method m[4];
    uint32_t n;
    CHECK_OK(fathom_method_parse_list("fathom:48,ds:16,ds:32", m, 4, &n));
    fathom_method_result r[4];
    fathom_eval_config cfg = {0};
    cfg.k = 64;
    CHECK_STATUS(fathom_eval_run(NULL, m, 1, &cfg, r), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_eval_run(src, NULL, 1, &cfg, r), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_eval_run(src, m, 0, &cfg, r), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_eval_run(src, m, 1, NULL, r), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_eval_run(src, m, 1, &cfg, NULL), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_eval_run(src, m, 3, &cfg, r), FATHOM_ERR_INVALID_ARG); /* two ds:c */
    cfg.k = 0;
    CHECK_STATUS(fathom_eval_run(src, m, 1, &cfg, r), FATHOM_ERR_INVALID_ARG);
    cfg.k = 64;
    cfg.layer_budget = FATHOM_BUDGET_GREEDY; /* needs calibration */
    CHECK_STATUS(fathom_eval_run(src, m, 1, &cfg, r), FATHOM_ERR_INVALID_ARG);
    cfg.calib = other; /* shape mismatch */
    CHECK_STATUS(fathom_eval_run(src, m, 1, &cfg, r), FATHOM_ERR_INVALID_ARG);
    cfg.calib = NULL;
    cfg.layer_budget = FATHOM_BUDGET_FLAT;
    CHECK_OK(fathom_method_parse("fathom:257", &m[0])); /* > 4 * dim (64) */
    CHECK_STATUS(fathom_eval_run(src, m, 1, &cfg, r), FATHOM_ERR_INVALID_ARG);
    CHECK_OK(fathom_method_parse("sparq:65", &m[0]));
    CHECK_STATUS(fathom_eval_run(src, m, 1, &cfg, r), FATHOM_ERR_INVALID_ARG);
    fathom_source_free(src);
    fathom_source_free(other);
}

static void check_greedy(void) {
    fathom_source *src = NULL, *cal = NULL;
    CHECK_OK(fathom_synth_open(&src, "smollm2-135m", 512, 4, 1));
    CHECK_OK(fathom_synth_open(&cal, "smollm2-135m", 512, 4, 1001));
    fathom_method m[2];
    uint32_t n;
    CHECK_OK(fathom_method_parse_list("fathom:48,fathom-klt:64", m, 2, &n));
    fathom_method_result flat[2], greedy[2];
    fathom_eval_config cfg = {0};
    cfg.k = 48;
    cfg.calib = cal;
    CHECK_OK(fathom_eval_run(src, m, n, &cfg, flat));
    cfg.layer_budget = FATHOM_BUDGET_GREEDY;
    CHECK_OK(fathom_eval_run(src, m, n, &cfg, greedy));
    /* the greedy plan spends at most the target mean on code bits */
    for (int i = 0; i < 2; i++) {
        double target = m[i].param;
        CHECK(greedy[i].bits_per_token <= target + target / 4 + 1e-9);
        CHECK(greedy[i].bits_per_token > 24);
        CHECK(greedy[i].rel_error > 0);
    }
    CHECK(flat[0].rel_error > 0);
    fathom_source_free(src);
    fathom_source_free(cal);
}

/* The planes as the primary K cache: attention over the selection with keys
 * decoded from all four planes costs some accuracy, and with k >= n that cost
 * is exactly the 4-bit keys' (nonzero, small); dense stays exact. */
static void check_planes_as_keys(void) {
    fathom_source *src = NULL;
    CHECK_OK(fathom_synth_open(&src, "smollm2-135m", 512, 4, 1));
    fathom_method m[2];
    uint32_t n;
    CHECK_OK(fathom_method_parse_list("oracle,dense", m, 2, &n));
    fathom_method_result exact[2], planes[2];
    fathom_eval_config cfg = {0};
    cfg.k = 512;
    CHECK_OK(fathom_eval_run(src, m, n, &cfg, exact));
    cfg.planes_as_keys = 1;
    CHECK_OK(fathom_eval_run(src, m, n, &cfg, planes));
    CHECK(exact[0].rel_error < 1e-6);
    CHECK(planes[0].rel_error > 1e-4 && planes[0].rel_error < 0.2);
    CHECK(planes[1].rel_error == 0);
    fathom_source_free(src);
}

int main(void) {
    check_planes_as_keys();
    check_bad_config();
    check_preset("smollm2-135m", 2048, 8, 64, 1);
    check_preset("llama-3.1-8b", 1024, 4, 64, 0);
    check_greedy();
    return check_summary("test_eval");
}

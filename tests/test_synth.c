/* The synthetic source: determinism, prefix stability, shapes, and the
 * statistics the methods depend on, measured here with a dense softmax
 * written independently of the library. */
#include "check.h"
#include "fathom.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct layer_buf {
    fathom_source_info info;
    float *q, *k, *v;
} layer_buf;

static int layer_load(layer_buf *b, const char *preset, uint64_t context, uint32_t positions, uint64_t seed,
                      uint32_t layer) {
    fathom_source *src;
    memset(b, 0, sizeof *b);
    int st = fathom_synth_open(&src, preset, context, positions, seed);
    if (st < 0) return st;
    fathom_source_get_info(src, &b->info);
    uint64_t qn = (uint64_t)b->info.q_heads * positions * b->info.dim;
    uint64_t kvn = (uint64_t)b->info.kv_heads * context * b->info.dim;
    b->q = malloc(qn * 4), b->k = malloc(kvn * 4), b->v = malloc(kvn * 4);
    st = fathom_source_layer(src, layer, b->q, b->k, b->v);
    fathom_source_free(src);
    return st;
}

static void layer_free(layer_buf *b) {
    free(b->q), free(b->k), free(b->v);
}

static uint64_t q_bytes(const fathom_source_info *in) { return (uint64_t)in->q_heads * in->positions * in->dim * 4; }
static uint64_t kv_bytes(const fathom_source_info *in) { return (uint64_t)in->kv_heads * in->tokens * in->dim * 4; }

static void test_presets(void) {
    struct {
        const char *name;
        uint32_t layers, kv, group, dim;
    } want[] = {{"qwen3-8b", 36, 8, 4, 128}, {"llama-3.1-8b", 32, 8, 4, 128}, {"smollm2-135m", 30, 3, 3, 64}};
    for (int i = 0; i < 3; i++) {
        fathom_source *src;
        CHECK_OK(fathom_synth_open(&src, want[i].name, 1000, 10, 5));
        fathom_source_info in;
        CHECK_OK(fathom_source_get_info(src, &in));
        CHECK(!strcmp(in.model, want[i].name));
        CHECK(in.layers == want[i].layers && in.kv_heads == want[i].kv && in.q_heads == want[i].kv * want[i].group &&
              in.dim == want[i].dim);
        CHECK(in.tokens == 1000 && in.positions == 10 && in.first_query == 990);
        const char *value = NULL;
        CHECK_OK(fathom_source_metadata(src, "model", &value));
        CHECK(value && value[0] == '\0');
        fathom_source_free(src);
    }
}

static void test_bad_arguments(void) {
    fathom_source *src = (fathom_source *)1;
    CHECK_STATUS(fathom_synth_open(NULL, "qwen3-8b", 10, 1, 1), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_synth_open(&src, NULL, 10, 1, 1), FATHOM_ERR_INVALID_ARG);
    CHECK(src == NULL);
    CHECK_STATUS(fathom_synth_open(&src, "qwen3", 10, 1, 1), FATHOM_ERR_INVALID_ARG);
    CHECK(strstr(fathom_last_error(), "qwen3") != NULL);
    CHECK_STATUS(fathom_synth_open(&src, "", 10, 1, 1), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_synth_open(&src, "qwen3-8b", 0, 1, 1), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_synth_open(&src, "qwen3-8b", 10, 0, 1), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_synth_open(&src, "qwen3-8b", 10, 11, 1), FATHOM_ERR_INVALID_ARG);
    CHECK_STATUS(fathom_synth_open(&src, "qwen3-8b", UINT64_MAX, 1, 1), FATHOM_ERR_INVALID_ARG);
    CHECK_OK(fathom_synth_open(&src, "qwen3-8b", 1, 1, 1)); /* the smallest window */
    float q[32 * 128], k[8 * 128], v[8 * 128];
    CHECK_OK(fathom_source_layer(src, 35, q, k, v));
    CHECK_STATUS(fathom_source_layer(src, 36, q, k, v), FATHOM_ERR_INVALID_ARG);
    fathom_source_free(src);
}

static void test_determinism_and_prefix(void) {
    layer_buf a, b, c, d;
    CHECK_OK(layer_load(&a, "llama-3.1-8b", 700, 16, 1, 7));
    CHECK_OK(layer_load(&b, "llama-3.1-8b", 700, 16, 1, 7));
    CHECK(!memcmp(a.q, b.q, q_bytes(&a.info)) && !memcmp(a.k, b.k, kv_bytes(&a.info)) &&
          !memcmp(a.v, b.v, kv_bytes(&a.info)));
    /* another seed: other text, every tensor differs */
    CHECK_OK(layer_load(&c, "llama-3.1-8b", 700, 16, 2, 7));
    CHECK(memcmp(a.q, c.q, q_bytes(&a.info)) && memcmp(a.k, c.k, kv_bytes(&a.info)) &&
          memcmp(a.v, c.v, kv_bytes(&a.info)));
    int differ = 0;
    for (uint64_t i = 0; i < 700 * 128; i++) differ += a.k[i] != c.k[i];
    CHECK(differ > 700 * 128 * 9 / 10);
    /* another layer differs too */
    layer_free(&c);
    CHECK_OK(layer_load(&c, "llama-3.1-8b", 700, 16, 1, 8));
    CHECK(memcmp(a.k, c.k, kv_bytes(&a.info)));
    /* a longer context repeats the shorter one's keys, values and queries
     * at the same absolute positions: positions 684..699 are the first 16 of
     * 684..1099 */
    CHECK_OK(layer_load(&d, "llama-3.1-8b", 1100, 416, 1, 7));
    int kv_same = 1, q_same = 1;
    for (uint32_t g = 0; g < 8; g++) {
        kv_same &= !memcmp(a.k + (uint64_t)g * 700 * 128, d.k + (uint64_t)g * 1100 * 128, 700 * 128 * 4);
        kv_same &= !memcmp(a.v + (uint64_t)g * 700 * 128, d.v + (uint64_t)g * 1100 * 128, 700 * 128 * 4);
    }
    for (uint32_t h = 0; h < 32; h++)
        q_same &= !memcmp(a.q + (uint64_t)h * 16 * 128, d.q + (uint64_t)h * 416 * 128, 16 * 128 * 4);
    CHECK(kv_same);
    CHECK(q_same);
    layer_free(&a), layer_free(&b), layer_free(&c), layer_free(&d);
}

/* Two threads generating different layers get what one thread gets. */
typedef struct job {
    const fathom_source *src;
    uint32_t layer;
    float *k;
    int status;
} job;

static void *run_job(void *arg) {
    job *j = arg;
    j->status = fathom_source_layer(j->src, j->layer, NULL, j->k, NULL);
    return NULL;
}

static void test_threads(void) {
    fathom_source *src;
    CHECK_OK(fathom_synth_open(&src, "smollm2-135m", 2000, 4, 3));
    size_t bytes = 3 * 2000 * 64 * 4;
    job jobs[2] = {{src, 4, malloc(bytes), -1}, {src, 9, malloc(bytes), -1}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, run_job, &jobs[i]);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    float *ref = malloc(bytes);
    for (int i = 0; i < 2; i++) {
        CHECK_OK(jobs[i].status);
        CHECK_OK(fathom_source_layer(src, jobs[i].layer, NULL, ref, NULL));
        CHECK(!memcmp(ref, jobs[i].k, bytes));
        free(jobs[i].k);
    }
    free(ref);
    fathom_source_free(src);
}

/* Key channel statistics: variance spread over orders of magnitude, and
 * outlier channels whose mean is large against their spread. */
static void test_channel_statistics(void) {
    const char *presets[] = {"qwen3-8b", "llama-3.1-8b", "smollm2-135m"};
    for (int p = 0; p < 3; p++) {
        layer_buf b;
        CHECK_OK(layer_load(&b, presets[p], 4096, 1, 1, 3));
        uint32_t d = b.info.dim;
        int spread_ok = 0, outlier_ok = 0;
        for (uint32_t g = 0; g < b.info.kv_heads; g++) {
            double vmin = INFINITY, vmax = 0, best_mean = 0;
            for (uint32_t j = 0; j < d; j++) {
                double s = 0, s2 = 0;
                for (uint64_t t = 0; t < 4096; t++) {
                    double x = b.k[((uint64_t)g * 4096 + t) * d + j];
                    s += x, s2 += x * x;
                }
                double mean = s / 4096, var = s2 / 4096 - mean * mean;
                if (var < vmin) vmin = var;
                if (var > vmax) vmax = var;
                if (fabs(mean) / sqrt(var) > best_mean) best_mean = fabs(mean) / sqrt(var);
            }
            spread_ok += vmax / vmin > 100;
            outlier_ok += best_mean > 2.0;
        }
        CHECK(spread_ok == (int)b.info.kv_heads);
        CHECK(outlier_ok == (int)b.info.kv_heads);
        layer_free(&b);
    }
}

static int cmp_desc(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

/* Dense causal softmax of every query of one layer: the share of attention
 * held by the top 1.6% of visible keys, by the 4 first (sink) tokens, and how
 * much two heads of a group agree on their top keys. */
static void test_attention(const char *preset, uint32_t layer, double *top_share, double *sink_share,
                           double *head_overlap) {
    const uint64_t n = 4096;
    const uint32_t P = 4;
    layer_buf b;
    CHECK_OK(layer_load(&b, preset, n, P, 1, layer));
    const uint32_t d = b.info.dim, G = b.info.q_heads / b.info.kv_heads;
    double *p = malloc(n * sizeof *p), *sorted = malloc(n * sizeof *sorted);
    uint8_t *top_prev = calloc(n, 1), *top_cur = calloc(n, 1);
    double top_sum = 0, sink_sum = 0, overlap_sum = 0;
    int count = 0, pairs = 0;
    for (uint32_t i = 0; i < P; i++) {
        uint64_t visible = b.info.first_query + i + 1;
        uint64_t k_top = (uint64_t)ceil(0.016 * (double)visible);
        for (uint32_t h = 0; h < b.info.q_heads; h++) {
            const float *q = b.q + ((uint64_t)h * P + i) * d;
            const float *keys = b.k + (uint64_t)(h / G) * n * d;
            double mx = -INFINITY, z = 0;
            for (uint64_t t = 0; t < visible; t++) {
                double s = 0;
                for (uint32_t j = 0; j < d; j++) s += (double)q[j] * keys[t * d + j];
                p[t] = s / sqrt((double)d);
                if (p[t] > mx) mx = p[t];
            }
            for (uint64_t t = 0; t < visible; t++) z += (p[t] = exp(p[t] - mx));
            for (uint64_t t = 0; t < visible; t++) p[t] /= z, sorted[t] = p[t];
            qsort(sorted, visible, sizeof *sorted, cmp_desc);
            double top = 0;
            for (uint64_t t = 0; t < k_top; t++) top += sorted[t];
            top_sum += top;
            sink_sum += p[0] + p[1] + p[2] + p[3];
            count++;
            /* overlap of this head's top set with the previous head of its group */
            memset(top_cur, 0, n);
            for (uint64_t t = 4; t < visible; t++) top_cur[t] = p[t] >= sorted[k_top - 1];
            if (h % G != 0) {
                uint64_t both = 0, either = 0;
                for (uint64_t t = 4; t < visible; t++) both += top_cur[t] & top_prev[t], either += top_cur[t] | top_prev[t];
                overlap_sum += either ? (double)both / (double)either : 1.0;
                pairs++;
            }
            memcpy(top_prev, top_cur, n);
        }
    }
    *top_share = top_sum / count;
    *sink_share = sink_sum / count;
    *head_overlap = overlap_sum / pairs;
    free(p), free(sorted), free(top_prev), free(top_cur);
    layer_free(&b);
}

static void test_attention_structure(void) {
    const char *presets[] = {"qwen3-8b", "llama-3.1-8b", "smollm2-135m"};
    for (int i = 0; i < 3; i++) {
        double top, sink, overlap;
        test_attention(presets[i], 5 + 7 * (uint32_t)i, &top, &sink, &overlap);
        printf("%-14s n=4096: top 1.6%% of keys hold %.3f of the attention, sinks %.3f, head top-set Jaccard %.3f\n",
               presets[i], top, sink, overlap);
        /* docs/synthetic.md: 0.99..0.998 measured at 4k. Real heads at a 1.6%
         * selection keep all but a fraction of a percent of the mass (an
         * exact top-k oracle's output error of ~0.5%, paper §5); the old
         * range 0.5..0.95 described a far too diffuse generator. */
        CHECK(top > 0.97 && top < 0.9995);
        /* the 4 first tokens hold far more than 4/4096 of the mass */
        CHECK(sink > 0.02);
        /* heads of a group attend to different keys */
        CHECK(overlap < 0.5);
    }
}

int main(void) {
    test_presets();
    test_bad_arguments();
    test_determinism_and_prefix();
    test_threads();
    test_channel_statistics();
    test_attention_structure();
    return check_summary("test_synth");
}

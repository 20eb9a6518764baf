/* fathom plan — one query group's channel importance, water line and read
 * depths (§3.3), from variances and queries given on the command line; or,
 * over a capture, how much of each decode step's plan the previous step had
 * already planned (what a prefetch of the previous step's plan would hit). */
#include "cli.h"
#include "fathom.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PLAN_MAX_DIM 65536
#define PLAN_MAX_QUERIES 256

static void plan_usage(FILE *f) {
    fprintf(f,
            "usage: fathom plan --var v1,v2,... --query q1,q2,... [--query ...]\n"
            "                   (--budget B [--bisect] | --theta T) [--json]\n"
            "       fathom plan --capture FILE --budget B [--json]\n\n"
            "  --var LIST     per-channel key variance (sets dim)\n"
            "  --query LIST   one query head of the group (repeat for each head)\n"
            "  --budget B     code bits per token; depths by exact water-filling\n"
            "  --bisect       find the water line by 30 log-bisection steps (paper)\n"
            "  --theta T      depths at water line T > 0 instead of a budget\n"
            "  --json         print one JSON object {theta, importance, depths}\n"
            "  --capture FILE for every layer, KV head and queried position of a capture\n"
            "                 (positions are consecutive decode steps): the plan at budget B\n"
            "                 (variance over the keys the position sees) against the previous\n"
            "                 position's plan. hit: share of the planned bytes (planes and\n"
            "                 fp16 scales) the previous plan also read; waste: the previous\n"
            "                 plan's other bytes, as a share of the planned bytes\n"
            "\n"
            "Exit status: 0 success, 1 failure, 2 usage error.\n");
}

/* Parse "a,b,c" into finite floats; returns the count, 0 on any error. */
static uint32_t parse_floats(const char *s, float *out, uint32_t cap) {
    uint32_t n = 0;
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || errno == ERANGE || !isfinite(v) || fabs(v) > 3.4028234663852886e38)
            return 0;
        while (*end == ' ') end++;
        if (n == cap) return 0;
        out[n++] = (float)v;
        if (*end == '\0') return n;
        if (*end != ',') return 0;
        p = end + 1;
    }
}

typedef struct reuse_sum {
    double plan, hit, waste; /* bits per token, summed over steps */
    uint64_t steps, same;    /* (position, KV head) pairs compared; with identical plans */
} reuse_sum;

static int plan_capture(const char *path, uint32_t budget, int json) {
    fathom_source *src = NULL;
    int st = fathom_capture_open(&src, path);
    if (st < 0) return cli_fail(path, st);
    fathom_source_info info;
    st = fathom_source_get_info(src, &info);
    if (st < 0) {
        fathom_source_free(src);
        return cli_fail("capture info", st);
    }
    const uint32_t d = info.dim, G = info.q_heads / info.kv_heads, P = info.positions;
    const uint64_t n = info.tokens;
    int rc = CLI_FAILURE;
    float *q = malloc((size_t)info.q_heads * P * d * sizeof *q);
    float *k = malloc((size_t)info.kv_heads * n * d * sizeof *k);
    float *var = malloc((size_t)d * sizeof *var);
    double *g = malloc((size_t)d * sizeof *g);
    uint8_t *depths = malloc((size_t)3 * d); /* this plan, the previous one, their overlap */
    float *group_q = malloc((size_t)G * d * sizeof *group_q);
    double *sum = malloc((size_t)d * sizeof *sum), *sq = malloc((size_t)d * sizeof *sq);
    reuse_sum *layer = calloc(info.layers, sizeof *layer);
    if (!q || !k || !var || !g || !depths || !group_q || !sum || !sq || !layer) {
        cli_error("out of memory for a layer of %s", path);
        goto done;
    }
    if (P < 2) {
        cli_error("%s queries %u position(s); comparing plans needs 2", path, P);
        goto done;
    }
    const bool show = cli_progress_wanted(CLI_PROGRESS_AUTO, json);
    cli_progress prog;
    cli_progress_start(&prog, "plan: layers");
    for (uint32_t l = 0; l < info.layers; l++) {
        if (show) cli_progress_update(&prog, l, info.layers);
        st = fathom_source_layer(src, l, q, k, NULL);
        if (st < 0) {
            rc = cli_fail("capture layer", st);
            goto done;
        }
        for (uint32_t kv = 0; kv < info.kv_heads; kv++) {
            /* the keys a step sees: 0 .. first_query + p (causal), summed in
             * double; the variance is the population variance of those */
            const float *keys = k + (size_t)kv * n * d;
            memset(sum, 0, (size_t)d * sizeof *sum);
            memset(sq, 0, (size_t)d * sizeof *sq);
            for (uint64_t t = 0; t < info.first_query; t++)
                for (uint32_t j = 0; j < d; j++) {
                    const double x = keys[t * d + j];
                    sum[j] += x;
                    sq[j] += x * x;
                }
            for (uint32_t p = 0; p < P; p++) {
                const uint64_t seen = info.first_query + p + 1;
                for (uint32_t j = 0; j < d; j++) {
                    const double x = keys[(seen - 1) * d + j];
                    sum[j] += x;
                    sq[j] += x * x;
                    const double mean = sum[j] / (double)seen, v = sq[j] / (double)seen - mean * mean;
                    var[j] = (float)(v > 0.0 ? v : 0.0);
                }
                uint8_t *now = depths + (p & 1) * d, *before = depths + ((p & 1) ^ 1) * d;
                for (uint32_t h = 0; h < G; h++)
                    memcpy(group_q + (size_t)h * d, q + ((size_t)(kv * G + h) * P + p) * d, d * sizeof *q);
                st = fathom_importance(d, G, group_q, var, g);
                if (st >= 0) st = fathom_water_fill(d, g, budget, now, NULL);
                if (st < 0) {
                    rc = cli_fail("water-filling", st);
                    goto done;
                }
                if (p == 0) continue;
                /* the overlap min(t, s) reads a channel's scale iff both plans do,
                 * so its bits are exactly the bits both plans share */
                uint8_t *common = depths + 2 * d;
                for (uint32_t j = 0; j < d; j++) common[j] = now[j] < before[j] ? now[j] : before[j];
                const double hit = fathom_depth_bits(d, common);
                reuse_sum *r = &layer[l];
                r->plan += fathom_depth_bits(d, now);
                r->hit += hit;
                r->waste += fathom_depth_bits(d, before) - hit;
                r->steps++;
                r->same += (uint64_t)(memcmp(now, before, d) == 0);
            }
        }
    }
    if (show) cli_progress_update(&prog, info.layers, info.layers);
    reuse_sum all = {0, 0, 0, 0, 0};
    for (uint32_t l = 0; l < info.layers; l++) {
        all.plan += layer[l].plan;
        all.hit += layer[l].hit;
        all.waste += layer[l].waste;
        all.steps += layer[l].steps;
        all.same += layer[l].same;
    }
#define SHARE(a, b) ((b) > 0.0 ? (a) / (b) : 0.0)
    if (json) {
        printf("{\"capture\":");
        cli_print_json_string(stdout, info.model);
        printf(",\"budget\":%u,\"dim\":%u,\"steps\":%llu,\"plan_bits\":%.6f,"
               "\"hit\":%.6f,\"waste\":%.6f,\"same\":%.6f,\"layers\":[",
               budget, d, (unsigned long long)all.steps, SHARE(all.plan, (double)all.steps),
               SHARE(all.hit, all.plan), SHARE(all.waste, all.plan),
               SHARE((double)all.same, (double)all.steps));
        for (uint32_t l = 0; l < info.layers; l++)
            printf("%s{\"plan_bits\":%.6f,\"hit\":%.6f,\"waste\":%.6f,\"same\":%.6f}", l ? "," : "",
                   SHARE(layer[l].plan, (double)layer[l].steps), SHARE(layer[l].hit, layer[l].plan),
                   SHARE(layer[l].waste, layer[l].plan),
                   SHARE((double)layer[l].same, (double)layer[l].steps));
        printf("]}\n");
    } else {
        cli_print_safe(stdout, info.model);
        printf(": %u layers, %u KV heads x %u, dim %u, %llu tokens, %u consecutive positions; "
               "budget %u\n",
               info.layers, info.kv_heads, G, d, (unsigned long long)n, P, budget);
        printf("layer  plan bits/token  hit     waste   same plan\n");
        for (uint32_t l = 0; l < info.layers; l++)
            printf("%5u  %15.2f  %5.1f%%  %5.1f%%  %5.1f%%\n", l,
                   SHARE(layer[l].plan, (double)layer[l].steps), 100 * SHARE(layer[l].hit, layer[l].plan),
                   100 * SHARE(layer[l].waste, layer[l].plan),
                   100 * SHARE((double)layer[l].same, (double)layer[l].steps));
        printf("  all  %15.2f  %5.1f%%  %5.1f%%  %5.1f%%   (%llu steps x heads)\n",
               SHARE(all.plan, (double)all.steps), 100 * SHARE(all.hit, all.plan),
               100 * SHARE(all.waste, all.plan), 100 * SHARE((double)all.same, (double)all.steps),
               (unsigned long long)all.steps);
    }
#undef SHARE
    rc = 0;
done:
    free(q);
    free(k);
    free(var);
    free(g);
    free(depths);
    free(group_q);
    free(sum);
    free(sq);
    free(layer);
    fathom_source_free(src);
    return rc;
}

enum { OPT_VAR = 256, OPT_QUERY, OPT_BUDGET, OPT_THETA, OPT_CAPTURE, OPT_BISECT, OPT_JSON };
static const struct option long_options[] = {
    {"help", no_argument, NULL, 'h'},
    {"var", required_argument, NULL, OPT_VAR},
    {"query", required_argument, NULL, OPT_QUERY},
    {"budget", required_argument, NULL, OPT_BUDGET},
    {"theta", required_argument, NULL, OPT_THETA},
    {"capture", required_argument, NULL, OPT_CAPTURE},
    {"bisect", no_argument, NULL, OPT_BISECT},
    {"json", no_argument, NULL, OPT_JSON},
    {NULL, 0, NULL, 0},
};

int cmd_plan(int argc, char **argv) {
    const char *var_arg = NULL, *query_args[PLAN_MAX_QUERIES], *capture = NULL;
    uint32_t n_queries = 0, budget = 0;
    int have_budget = 0, have_theta = 0, bisect = 0, json = 0;
    double theta = 0.0;
    int c;
    while ((c = cli_getopt(argc, argv, "h", long_options)) != -1) {
        switch (c) {
        case 'h': plan_usage(stdout); return CLI_OK;
        case '?': return CLI_USAGE;
        case OPT_BISECT: bisect = 1; break;
        case OPT_JSON: json = 1; break;
        case OPT_CAPTURE:
            if (capture) return cli_usage_error("--capture given twice");
            capture = optarg;
            break;
        case OPT_VAR:
            if (var_arg) return cli_usage_error("--var given twice");
            var_arg = optarg;
            break;
        case OPT_QUERY:
            if (n_queries == PLAN_MAX_QUERIES) return cli_usage_error("more than %d --query", PLAN_MAX_QUERIES);
            query_args[n_queries++] = optarg;
            break;
        case OPT_BUDGET:
            if (have_budget) return cli_usage_error("--budget given twice");
            if (!cli_parse_u32(optarg, &budget)) return cli_bad_value("a bit count");
            have_budget = 1;
            break;
        case OPT_THETA:
            if (have_theta) return cli_usage_error("--theta given twice");
            if (!cli_parse_double(optarg, &theta) || !(theta > 0.0)) return cli_bad_value("a number > 0");
            have_theta = 1;
            break;
        }
    }
    if (optind < argc) return cli_usage_error("unexpected argument '%s'", argv[optind]);
    if (capture) {
        if (var_arg || n_queries) return cli_usage_error("--capture takes the queries from the file (no --var/--query)");
        if (!have_budget || have_theta || bisect) return cli_usage_error("--capture needs --budget (exact water-filling)");
        return plan_capture(capture, budget, json);
    }
    if (!var_arg) return cli_usage_error("missing --var");
    if (n_queries == 0) return cli_usage_error("missing --query");
    if (have_budget == have_theta) return cli_usage_error("give exactly one of --budget and --theta");
    if (bisect && !have_budget) return cli_usage_error("--bisect needs --budget");

    int rc = CLI_FAILURE;
    float *var = malloc(PLAN_MAX_DIM * sizeof *var);
    /* + 1: the parse of the last query may read one value past dim to detect excess */
    float *queries = malloc(((size_t)n_queries * PLAN_MAX_DIM + 1) * sizeof *queries);
    double *g = malloc(PLAN_MAX_DIM * sizeof *g);
    uint8_t *depths = malloc(PLAN_MAX_DIM);
    if (!var || !queries || !g || !depths) {
        cli_error("out of memory");
        goto done;
    }
    uint32_t dim = parse_floats(var_arg, var, PLAN_MAX_DIM);
    if (dim == 0) {
        rc = cli_usage_error("bad --var '%s' (finite numbers separated by commas)", var_arg);
        goto done;
    }
    for (uint32_t j = 0; j < dim; j++)
        if (var[j] < 0) {
            rc = cli_usage_error("--var: a variance cannot be negative (channel %u is %g)", j, var[j]);
            goto done;
        }
    for (uint32_t h = 0; h < n_queries; h++) {
        uint32_t n = parse_floats(query_args[h], queries + (size_t)h * dim, dim + 1);
        if (n == 0) {
            rc = cli_usage_error("bad --query '%s' (finite numbers separated by commas)", query_args[h]);
            goto done;
        }
        if (n != dim) {
            rc = cli_usage_error("--query '%s' has %s values than --var (%u)", query_args[h],
                                 n < dim ? "fewer" : "more", dim);
            goto done;
        }
    }

    int st = fathom_importance(dim, n_queries, queries, var, g);
    if (st < 0) {
        rc = cli_fail("importance", st);
        goto done;
    }
    if (have_theta)
        st = fathom_depths_at(dim, g, theta, depths);
    else if (bisect)
        st = fathom_water_fill_bisect(dim, g, budget, depths, &theta);
    else
        st = fathom_water_fill(dim, g, budget, depths, &theta);
    if (st < 0) {
        rc = cli_fail("water-filling", st);
        goto done;
    }

    if (json) {
        printf("{\"theta\":%.17g,\"importance\":[", theta);
        for (uint32_t j = 0; j < dim; j++) printf("%s%.17g", j ? "," : "", g[j]);
        printf("],\"depths\":[");
        for (uint32_t j = 0; j < dim; j++) printf("%s%u", j ? "," : "", depths[j]);
        printf("]}\n");
    } else {
        uint64_t code = 0, active = 0;
        printf("channel  importance      depth\n");
        for (uint32_t j = 0; j < dim; j++) {
            printf("%7u  %-14.6g  %u\n", j, g[j], depths[j]);
            code += depths[j];
            active += depths[j] > 0;
        }
        printf("theta %.9g%s\n", theta,
               have_theta ? " (given)" : theta == 0.0 ? " (every channel fits at depth 4)" : "");
        if (have_budget) printf("budget %u code bits (%s)\n", budget, bisect ? "bisection" : "exact");
        printf("code bits %llu, active channels %llu, total bits %.2f per token "
               "(+16 bits of fp16 scale per 64 tokens per active channel)\n",
               (unsigned long long)code, (unsigned long long)active, fathom_depth_bits(dim, depths));
    }
    rc = 0;
done:
    free(var);
    free(queries);
    free(g);
    free(depths);
    return rc;
}

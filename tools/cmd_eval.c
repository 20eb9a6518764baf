/* fathom eval — the fidelity harness of §4: bits per token, bytes per decode
 * step and attention error of every method, on a capture or a synthetic
 * window; optional sweeps over budget (error-vs-bits, Table 6's "bits at
 * which Fathom matches X") and over k (the selection ratio, §5.4). */
#include "cli.h"
#include "fathom.h"
#include "plot.h"

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_METHODS 64
#define MAX_SWEEP 32
#define DEFAULT_METHODS "fathom:48,fathom-klt:48,sparq:16,sparq:32,ds:32,loki:32,thumb,landmark,full4,oracle,dense"
#define DEFAULT_SWEEP "16,24,32,40,48,56,64,80,96,128,160,192"

static void usage(FILE *f) {
    fprintf(f,
            "usage: fathom eval [--kv FILE | --synthetic PRESET --context N] [options]\n"
            "\n"
            "Fidelity of every method against dense attention (paper §4): for the last P\n"
            "positions, every layer and query head, keep sink 4 + local 32 + top-k by the\n"
            "method's scores, attend exactly over that set, and report the mean relative L2\n"
            "error of the output, the bits per token scanned, and the scan and row bytes\n"
            "per decode step (all layers and KV heads).\n"
            "\n"
            "source (default: --synthetic qwen3-8b --context 32768):\n"
            "  --kv FILE             a capture file (docs/capture-format.md)\n"
            "  --synthetic PRESET    qwen3-8b | llama-3.1-8b | smollm2-135m | FILE.json (a preset\n"
            "                        file from fathom synth-fit)\n"
            "  --context N           synthetic window length in tokens\n"
            "  --seed S              synthetic text seed (default 1)\n"
            "  --positions P         queried positions, the last P (default 128)\n"
            "calibration (Var for fathom, Double Sparsity's channels, the KLT basis, greedy budgets):\n"
            "  --calib FILE          a capture of other text, as in the paper\n"
            "  --calib synthetic     (synthetic sources) the same preset's text with seed S+1000\n"
            "  --calib-context N     (with --calib synthetic) that text's length in tokens\n"
            "                        (default: the source's; give a real calibration capture's n\n"
            "                        to calibrate as on real text: post-RoPE key statistics\n"
            "                        depend on the positions the calibration covers)\n"
            "  (none: statistics from the evaluated window itself; fathom's Var from the\n"
            "   store's running sums, the paper's calibration-free variant)\n"
            "method:\n"
            "  --methods LIST        default " DEFAULT_METHODS "\n"
            "  --k K                 selected keys per query head (default n/64, at least 64)\n"
            "  --layer-budget flat|greedy   fathom's per-layer budget (default flat)\n"
            "  --keys exact|planes   attend with the exact keys (default) or with keys decoded\n"
            "                        from all four bit planes (the planes as the primary K cache)\n"
            "sweeps:\n"
            "  --sweep-budgets LIST  also run fathom (and fathom-klt, fathom-centered if listed) at\n"
            "                        these budgets\n"
            "  --match               bits at which fathom matches each other method's error\n"
            "                        (runs the default budget sweep if none is given)\n"
            "  --sweep-k LIST        repeat the whole evaluation for each k (selection ratio)\n"
            "  --plot FILE           error-vs-bits curves: FILE.png (PNG, when built with\n"
            "                        cairo) or any other name (SVG); checked before the run\n"
            "output:\n"
            "  --json                one JSON object on stdout\n"
            "  --threads N           worker threads (default: one per core)\n"
            "  --progress            progress on stderr (default: only on a terminal, not with --json)\n"
            "  --quiet               no progress\n"
            "\n"
            "Exit status: 0 success, 1 failure, 2 usage error.\n");
}

typedef struct options {
    const char *kv, *preset, *calib, *plot;
    uint64_t context, seed, calib_context;
    uint32_t positions, k, threads;
    bool json, match, greedy, planes_keys, positions_given;
    cli_progress_mode progress;
    char methods[4096];
    uint32_t sweep_budgets[MAX_SWEEP], n_sweep_budgets;
    uint32_t sweep_k[MAX_SWEEP], n_sweep_k;
} options;

enum {
    OPT_KV = 256, OPT_SYNTHETIC, OPT_CONTEXT, OPT_SEED, OPT_POSITIONS, OPT_K, OPT_THREADS,
    OPT_METHODS, OPT_CALIB, OPT_LAYER_BUDGET, OPT_KEYS, OPT_SWEEP_BUDGETS, OPT_SWEEP_K, OPT_MATCH,
    OPT_PLOT, OPT_JSON, OPT_QUIET, OPT_PROGRESS, OPT_CALIB_CONTEXT
};
static const struct option long_options[] = {
    {"help", no_argument, NULL, 'h'},
    {"kv", required_argument, NULL, OPT_KV},
    {"synthetic", required_argument, NULL, OPT_SYNTHETIC},
    {"context", required_argument, NULL, OPT_CONTEXT},
    {"seed", required_argument, NULL, OPT_SEED},
    {"positions", required_argument, NULL, OPT_POSITIONS},
    {"k", required_argument, NULL, OPT_K},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"methods", required_argument, NULL, OPT_METHODS},
    {"calib", required_argument, NULL, OPT_CALIB},
    {"calib-context", required_argument, NULL, OPT_CALIB_CONTEXT},
    {"layer-budget", required_argument, NULL, OPT_LAYER_BUDGET},
    {"keys", required_argument, NULL, OPT_KEYS},
    {"sweep-budgets", required_argument, NULL, OPT_SWEEP_BUDGETS},
    {"sweep-k", required_argument, NULL, OPT_SWEEP_K},
    {"match", no_argument, NULL, OPT_MATCH},
    {"plot", required_argument, NULL, OPT_PLOT},
    {"json", no_argument, NULL, OPT_JSON},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"progress", no_argument, NULL, OPT_PROGRESS},
    {NULL, 0, NULL, 0},
};

/* One option's value into o; false for a bad value. */
static bool set_option(options *o, int c, const char *v) {
    switch (c) {
    case OPT_KV: o->kv = v; return true;
    case OPT_SYNTHETIC: o->preset = v; return true;
    case OPT_CONTEXT: return cli_parse_u64(v, &o->context) && o->context;
    case OPT_SEED: return cli_parse_u64(v, &o->seed);
    case OPT_POSITIONS: o->positions_given = true; return cli_parse_u32(v, &o->positions) && o->positions;
    case OPT_K: return cli_parse_u32(v, &o->k) && o->k;
    case OPT_THREADS: return cli_parse_u32(v, &o->threads) && o->threads <= 256;
    case OPT_METHODS: return snprintf(o->methods, sizeof o->methods, "%s", v) < (int)sizeof o->methods;
    case OPT_CALIB: o->calib = v; return true;
    case OPT_CALIB_CONTEXT: return cli_parse_u64(v, &o->calib_context) && o->calib_context;
    case OPT_LAYER_BUDGET: o->greedy = !strcmp(v, "greedy"); return o->greedy || !strcmp(v, "flat");
    case OPT_KEYS: o->planes_keys = !strcmp(v, "planes"); return o->planes_keys || !strcmp(v, "exact");
    case OPT_SWEEP_BUDGETS: return cli_parse_u32_list(v, o->sweep_budgets, MAX_SWEEP, &o->n_sweep_budgets);
    case OPT_SWEEP_K: return cli_parse_u32_list(v, o->sweep_k, MAX_SWEEP, &o->n_sweep_k);
    case OPT_MATCH: o->match = true; return true;
    case OPT_PLOT: o->plot = v; return true;
    case OPT_JSON: o->json = true; return true;
    case OPT_QUIET: o->progress = CLI_PROGRESS_OFF; return true;
    case OPT_PROGRESS: o->progress = CLI_PROGRESS_ON; return true;
    default: return false;
    }
}

/* CLI_USAGE after a message, CLI_OK, or -1 for --help. */
static int parse_options(int argc, char **argv, options *o) {
    memset(o, 0, sizeof *o);
    o->seed = 1;
    o->positions = 128;
    snprintf(o->methods, sizeof o->methods, "%s", DEFAULT_METHODS);
    int c;
    while ((c = cli_getopt(argc, argv, "h", long_options)) != -1) {
        if (c == '?') return CLI_USAGE;
        if (c == 'h') return -1;
        if (!set_option(o, c, optarg)) return cli_bad_value(NULL);
    }
    if (optind < argc) return cli_usage_error("unexpected argument '%s'", argv[optind]);
    if (o->kv && o->preset) return cli_usage_error("give --kv or --synthetic, not both");
    if (o->kv && o->context) return cli_usage_error("--context applies to --synthetic only");
    if (o->calib && !strcmp(o->calib, "synthetic") && o->kv)
        return cli_usage_error("--calib synthetic needs a --synthetic source");
    if (o->calib_context && !(o->calib && !strcmp(o->calib, "synthetic")))
        return cli_usage_error("--calib-context applies to --calib synthetic only");
    if (!o->kv && !o->preset) o->preset = "qwen3-8b";
    if (o->preset && !o->context) o->context = 32768;
    if (o->match && !o->n_sweep_budgets)
        cli_parse_u32_list(DEFAULT_SWEEP, o->sweep_budgets, MAX_SWEEP, &o->n_sweep_budgets);
    return CLI_OK;
}

static int open_sources(const options *o, fathom_source **src, fathom_source **calib) {
    int st;
    *src = *calib = NULL;
    if (o->kv) {
        if ((st = fathom_capture_open(src, o->kv)) < 0) return cli_fail(o->kv, st);
    } else if ((st = cli_synth_open(src, o->preset, o->context, o->positions, o->seed)) < 0) {
        return st == FATHOM_ERR_INVALID_ARG ? cli_fail_usage("--synthetic", st) : cli_fail(o->preset, st);
    }
    if (o->calib && !strcmp(o->calib, "synthetic")) {
        /* a shorter calibration text is queried at its last positions, at most all of it */
        uint64_t cn = o->calib_context ? o->calib_context : o->context;
        uint32_t cp = o->positions < cn ? o->positions : (uint32_t)cn;
        if ((st = cli_synth_open(calib, o->preset, cn, cp, o->seed + 1000)) < 0)
            return cli_fail("synthetic calibration", st);
    } else if (o->calib) {
        if ((st = fathom_capture_open(calib, o->calib)) < 0) return cli_fail(o->calib, st);
    }
    return CLI_OK;
}

/* Fathom's error as a function of bits: interpolate log(error) linearly in
 * bits between the sweep points that bracket the target error. -1 when no
 * sweep point reaches the target; *at_most is set when already the smallest
 * budget does (then fathom matches at that many bits or fewer). */
static double bits_to_match(const fathom_method_result *sweep, uint32_t n, double target, bool *at_most) {
    *at_most = false;
    for (uint32_t i = 0; i < n; i++) {
        if (sweep[i].rel_error <= target) {
            if (i == 0) {
                *at_most = true;
                return sweep[0].bits_per_token;
            }
            double e0 = log(sweep[i - 1].rel_error), e1 = log(sweep[i].rel_error), et = log(target);
            double b0 = sweep[i - 1].bits_per_token, b1 = sweep[i].bits_per_token;
            if (e0 == e1) return b1;
            return b0 + (b1 - b0) * (e0 - et) / (e0 - e1);
        }
    }
    return -1;
}

/* ---- output ---- */

/* The budget sweeps: fathom always, fathom-klt and fathom-centered when listed. */
static const struct {
    const char *name;
    fathom_method_kind kind;
} sweep_kinds[] = {{"fathom", FATHOM_METHOD_FATHOM},
                   {"fathom-klt", FATHOM_METHOD_FATHOM_KLT},
                   {"fathom-centered", FATHOM_METHOD_FATHOM_CENTERED}};
#define N_SWEEP_KINDS (sizeof sweep_kinds / sizeof sweep_kinds[0])

typedef struct outcome {
    const fathom_source_info *info;
    const fathom_method_result *results; /* [n_k][n_all] */
    uint32_t n_methods, n_all, n_k;      /* listed methods; + budget sweep */
    const uint32_t *ks;
    const uint32_t *sweep_kind;          /* [n_all - n_methods]: index into sweep_kinds */
    uint32_t used_positions;
    double elapsed;
} outcome;

static void print_result_json(const fathom_method_result *r) {
    printf("{\"name\":");
    cli_print_json_string(stdout, r->name);
    printf(",\"bits_per_token\":%.6g,\"scan_bytes_per_step\":%.6g,\"row_bytes_per_step\":%.6g,"
           "\"rel_error\":%.6g,\"rel_error_stderr\":%.6g,\"selection_ratio\":%.6g}",
           r->bits_per_token, r->scan_bytes_per_step, r->row_bytes_per_step, r->rel_error,
           r->rel_error_stderr, r->selection_ratio);
}

static void print_results_json(const char *key, const fathom_method_result *r, uint32_t n) {
    printf("%s\"%s\":[", key[0] == 'm' ? "" : ",", key);
    for (uint32_t i = 0; i < n; i++) {
        if (i) putchar(',');
        print_result_json(&r[i]);
    }
    printf("]");
}

/* ,"match":[...]: the bits at which the fathom sweep reaches each listed
 * method's error, for one k's results. */
static void print_match_json(const options *o, const fathom_method_result *main_r, uint32_t n_methods,
                             const fathom_method_result *sweep) {
    printf(",\"match\":[");
    bool first = true;
    for (uint32_t i = 0; i < n_methods; i++) {
        if (main_r[i].rel_error <= 0) continue;
        bool at_most;
        double b = bits_to_match(sweep, o->n_sweep_budgets, main_r[i].rel_error, &at_most);
        printf("%s{\"method\":", first ? "" : ",");
        cli_print_json_string(stdout, main_r[i].name);
        printf(",\"method_bits\":%.6g,\"fathom_bits\":", main_r[i].bits_per_token);
        if (b < 0) printf("null}");
        else printf("%.6g}", b);
        first = false;
    }
    printf("]");
}

static void print_json(const options *o, const outcome *out) {
    const fathom_method_result *main_r = out->results, *sweep = out->results + out->n_methods;
    const uint32_t n_sweep = out->n_all - out->n_methods;
    printf("{\"source\":");
    cli_print_json_string(stdout, o->kv ? o->kv : out->info->model);
    printf(",\"tokens\":%" PRIu64 ",\"positions\":%u,\"k\":%u,", out->info->tokens, out->used_positions,
           out->ks[0]);
    print_results_json("methods", main_r, out->n_methods);
    if (n_sweep) print_results_json("budget_sweep", sweep, n_sweep);
    if (o->match) print_match_json(o, main_r, out->n_methods, sweep);
    if (out->n_k > 1) {
        printf(",\"k_sweep\":[");
        for (uint32_t ki = 0; ki < out->n_k; ki++) {
            printf("%s{\"k\":%u,\"methods\":[", ki ? "," : "", out->ks[ki]);
            const fathom_method_result *rk = out->results + (size_t)ki * out->n_all;
            for (uint32_t i = 0; i < out->n_methods; i++) {
                if (i) putchar(',');
                print_result_json(&rk[i]);
            }
            printf("]");
            if (n_sweep) print_results_json("budget_sweep", rk + out->n_methods, n_sweep);
            if (o->match) print_match_json(o, rk, out->n_methods, rk + out->n_methods);
            printf("}");
        }
        printf("]");
    }
    printf("}\n");
}

/* Width of the method column: 16, or the longest name (fathom-centered:B). */
static int name_width(const fathom_method_result *r, uint32_t n) {
    size_t w = 16;
    for (uint32_t i = 0; i < n; i++)
        if (strlen(r[i].name) > w) w = strlen(r[i].name);
    return (int)w;
}

static void print_table(const fathom_method_result *r, uint32_t n) {
    const int w = name_width(r, n);
    printf("%-*s %10s %14s %14s %12s %10s %9s\n", w, "method", "bits/token", "scan MB/step", "rows MB/step",
           "rel error", "± stderr", "selected");
    for (uint32_t i = 0; i < n; i++)
        printf("%-*s %10.1f %14.2f %14.2f %12.5f %10.5f %8.2f%%\n", w, r[i].name, r[i].bits_per_token,
               r[i].scan_bytes_per_step / 1e6, r[i].row_bytes_per_step / 1e6, r[i].rel_error,
               r[i].rel_error_stderr, 100 * r[i].selection_ratio);
}

static void print_legend(void) {
    printf("\nrel error   mean relative L2 error of each query head's attention output against dense\n"
           "            attention over every key (same queries); lower is better; ± its standard\n"
           "            error over layers, heads and positions.\n"
           "bits/token  what choosing the keys costs: index bits the method reads per cached token\n"
           "            and KV head (fathom: bit planes + fp16 scales; oracle: the full keys).\n"
           "scan MB     those bits over the whole context, all layers and KV heads, per decode step;\n"
           "rows MB     the K and V rows (bf16) of the selected keys fetched per decode step.\n"
           "selected    share of the visible keys attended to (sink 4 + local 32 + top-k).\n");
}

static void print_match(const options *o, const outcome *out) {
    const fathom_method_result *main_r = out->results, *sweep = out->results + out->n_methods;
    bool bound = false;
    const int w = name_width(main_r, out->n_methods);
    printf("\nbits at which fathom matches each method's error (Table 6):\n");
    printf("%-*s %12s %12s %10s\n", w, "method", "its bits", "fathom bits", "saving");
    for (uint32_t i = 0; i < out->n_methods; i++) {
        if (main_r[i].rel_error <= 0) continue;
        bool at_most;
        double b = bits_to_match(sweep, o->n_sweep_budgets, main_r[i].rel_error, &at_most);
        if (b < 0) {
            printf("%-*s %12.1f %12s %10s\n", w, main_r[i].name, main_r[i].bits_per_token, "> sweep", "-");
        } else if (at_most) {
            char bits[32], saving[32];
            snprintf(bits, sizeof bits, "<= %.1f", b);
            snprintf(saving, sizeof saving, ">= %.2fx", main_r[i].bits_per_token / b);
            printf("%-*s %12.1f %12s %10s\n", w, main_r[i].name, main_r[i].bits_per_token, bits, saving);
            bound = true;
        } else {
            printf("%-*s %12.1f %12.1f %9.2fx\n", w, main_r[i].name, main_r[i].bits_per_token, b,
                   main_r[i].bits_per_token / b);
        }
    }
    printf("saving: the method's bits over fathom's at equal error; above 1, fathom reads less.\n");
    if (bound)
        printf(">= / <=: fathom's smallest swept budget (%u bits) already reaches that error, so it\n"
               "         matches at that many bits or fewer; the saving is a lower bound (sweep lower\n"
               "         budgets with --sweep-budgets to measure it).\n",
               o->sweep_budgets[0]);
    printf("> sweep: not reached within the swept budgets.\n");
}

static void print_k_sweep(const outcome *out) {
    const int w = name_width(out->results, out->n_methods);
    printf("\nselection ratio sweep (rel error per method and k):\n%-*s", w, "method");
    for (uint32_t ki = 0; ki < out->n_k; ki++) printf(" %9s%-5u", "k=", out->ks[ki]);
    printf("\n%-*s", w, "k / n");
    for (uint32_t ki = 0; ki < out->n_k; ki++) printf(" %13.3f%%", 100.0 * out->ks[ki] / (double)out->info->tokens);
    printf("\n");
    for (uint32_t i = 0; i < out->n_methods; i++) {
        printf("%-*s", w, out->results[i].name);
        for (uint32_t ki = 0; ki < out->n_k; ki++)
            printf(" %14.5f", out->results[(size_t)ki * out->n_all + i].rel_error);
        printf("\n");
    }
}

static void print_human(const options *o, const outcome *out) {
    const uint32_t n_sweep = out->n_all - out->n_methods;
    printf("k = %u (%.2f%% of n), %.1f s\n\n", out->ks[0], 100.0 * out->ks[0] / (double)out->info->tokens,
           out->elapsed);
    print_table(out->results, out->n_methods);
    print_legend();
    if (n_sweep) {
        printf("\nbudget sweep (error vs bits):\n");
        print_table(out->results + out->n_methods, n_sweep);
    }
    if (o->match) print_match(o, out);
    if (out->n_k > 1) print_k_sweep(out);
}

/* Error against bits: the listed methods as points, budget sweeps as curves. */
static int write_plot(const char *path, const outcome *out) {
    const uint32_t n_sweep = out->n_all - out->n_methods;
    plot_point *points = calloc(out->n_methods, sizeof *points);
    double *xy = calloc(2 * (size_t)n_sweep + 1, sizeof *xy);
    if (!points || !xy) {
        free(points);
        free(xy);
        cli_error("out of memory");
        return CLI_FAILURE;
    }
    for (uint32_t i = 0; i < out->n_methods; i++)
        points[i] = (plot_point){out->results[i].name, out->results[i].bits_per_token, out->results[i].rel_error};
    static const char *const labels[N_SWEEP_KINDS] = {"fathom budget sweep", "fathom-klt budget sweep",
                                                       "fathom-centered budget sweep"};
    plot_series series[N_SWEEP_KINDS];
    uint32_t n_series = 0;
    double *x = xy, *y = xy + n_sweep;
    for (uint32_t kind = 0; kind < N_SWEEP_KINDS; kind++) {
        plot_series *r = &series[n_series];
        *r = (plot_series){labels[kind], x, y, 0};
        for (uint32_t i = 0; i < n_sweep; i++)
            if (out->sweep_kind[i] == kind) {
                x[r->n] = out->results[out->n_methods + i].bits_per_token;
                y[r->n++] = out->results[out->n_methods + i].rel_error;
            }
        x += r->n;
        y += r->n;
        n_series += r->n > 0;
    }
    char title[160];
    snprintf(title, sizeof title, "attention error against bits read, %s, k = %u", out->info->model, out->ks[0]);
    const plot_spec spec = {title, "bits per token (code + scale)", "mean relative L2 error vs dense",
                            points, out->n_methods, series, n_series};
    int rc = plot_write(path, &spec);
    free(points);
    free(xy);
    return rc;
}

/* ---- the command ---- */

/* The listed methods, then fathom (and fathom-klt, fathom-centered when
 * listed) at every swept budget: all run in the same pass. */
static int build_methods(const options *o, fathom_method *methods, uint32_t *n_methods, uint32_t *n_all,
                         uint32_t *sweep_kind) {
    int st = fathom_method_parse_list(o->methods, methods, MAX_METHODS, n_methods);
    if (st < 0) return cli_fail_usage("--methods", st);
    *n_all = *n_methods;
    for (uint32_t kind = 0; kind < N_SWEEP_KINDS; kind++) {
        bool listed = kind == 0;
        for (uint32_t i = 0; i < *n_methods; i++) listed |= methods[i].kind == sweep_kinds[kind].kind;
        for (uint32_t i = 0; listed && i < o->n_sweep_budgets && *n_all < MAX_METHODS; i++) {
            char spec[48];
            snprintf(spec, sizeof spec, "%s:%u", sweep_kinds[kind].name, o->sweep_budgets[i]);
            if ((st = fathom_method_parse(spec, &methods[*n_all])) < 0) return cli_fail_usage("--sweep-budgets", st);
            sweep_kind[*n_all - *n_methods] = kind;
            (*n_all)++;
        }
    }
    return CLI_OK;
}

static void warn_settings(const options *o, const fathom_source_info *info, const uint32_t *ks, uint32_t n_k) {
    for (uint32_t i = 0; i < n_k; i++) cli_check_k(ks[i], info->tokens, "k");
    if (o->kv && o->positions_given && o->positions > info->positions)
        cli_warn("--positions %u: the capture queries only %u positions", o->positions, info->positions);
}

int cmd_eval(int argc, char **argv) {
    options o;
    int rc = parse_options(argc, argv, &o);
    if (rc < 0) {
        usage(stdout);
        return CLI_OK;
    }
    if (rc != CLI_OK) return rc;

    fathom_method methods[MAX_METHODS];
    uint32_t n_methods = 0, n_all = 0, sweep_kind[MAX_METHODS];
    if ((rc = build_methods(&o, methods, &n_methods, &n_all, sweep_kind)) != CLI_OK) return rc;
    if (o.plot && (rc = plot_check_path(o.plot)) != CLI_OK) return rc;

    fathom_source *src = NULL, *calib = NULL;
    fathom_method_result *results = NULL;
    if ((rc = open_sources(&o, &src, &calib)) != CLI_OK) goto done;
    fathom_source_info info;
    int st;
    if ((st = fathom_source_get_info(src, &info)) < 0) {
        rc = cli_fail("source", st);
        goto done;
    }
    uint32_t max_positions = o.kv && o.positions < info.positions ? o.positions : 0;
    uint32_t ks[MAX_SWEEP], n_k = 1;
    ks[0] = o.k ? o.k : (uint32_t)(info.tokens / 64 > 64 ? info.tokens / 64 : 64);
    if (o.n_sweep_k) {
        memcpy(ks, o.sweep_k, o.n_sweep_k * sizeof ks[0]);
        n_k = o.n_sweep_k;
    }
    warn_settings(&o, &info, ks, n_k);
    outcome out = {&info, NULL, n_methods, n_all, n_k, ks, sweep_kind,
                   max_positions ? max_positions : info.positions, 0};

    if (!o.json) {
        printf("source: ");
        cli_print_safe(stdout, o.kv ? o.kv : "synthetic ");
        if (!o.kv) cli_print_safe(stdout, info.model);
        printf(", %u layers, %u query heads over %u KV heads, dim %u, n = %" PRIu64 ", %u queried positions\n",
               info.layers, info.q_heads, info.kv_heads, info.dim, info.tokens, out.used_positions);
        printf("calibration: ");
        cli_print_safe(stdout, !calib ? "none (statistics of the evaluated window itself)"
                               : o.kv || strcmp(o.calib, "synthetic") ? o.calib : "synthetic text, seed + 1000");
        if (o.calib_context) printf(", %" PRIu64 " tokens", o.calib_context);
        printf("; layer budget: %s%s\n", o.greedy ? "greedy" : "flat",
               o.planes_keys ? "; attention keys decoded from the 4 planes" : "");
        fflush(stdout);
    }

    results = calloc((size_t)n_all * n_k, sizeof *results);
    if (!results) {
        rc = cli_fail("results", FATHOM_ERR_NOMEM);
        goto done;
    }
    out.results = results;
    const bool progress = cli_progress_wanted(o.progress, o.json);
    double t0 = cli_now();
    for (uint32_t ki = 0; ki < n_k; ki++) {
        char label[64];
        snprintf(label, sizeof label, "eval k=%u", ks[ki]);
        cli_progress prog;
        cli_progress_start(&prog, label);
        fathom_eval_config cfg = {0};
        cfg.k = ks[ki];
        cfg.calib = calib;
        cfg.layer_budget = o.greedy ? FATHOM_BUDGET_GREEDY : FATHOM_BUDGET_FLAT;
        cfg.threads = o.threads;
        cfg.max_positions = max_positions;
        cfg.planes_as_keys = o.planes_keys;
        cfg.progress = progress ? cli_progress_update : NULL;
        cfg.progress_user = &prog;
        if ((st = fathom_eval_run(src, methods, n_all, &cfg, results + (size_t)ki * n_all)) < 0) {
            rc = cli_fail("evaluation", st);
            goto done;
        }
    }
    out.elapsed = cli_now() - t0;
    if (o.json) print_json(&o, &out);
    else print_human(&o, &out);
    rc = o.plot ? write_plot(o.plot, &out) : CLI_OK;
done:
    free(results);
    fathom_source_free(src);
    fathom_source_free(calib);
    return rc;
}

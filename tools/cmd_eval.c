/* fathom eval — the fidelity harness of §4: bits per token, bytes per decode
 * step and attention error of every method, on a capture or a synthetic
 * window; optional sweeps over budget (error-vs-bits, Table 6's "bits at
 * which Fathom matches X") and over k (the selection ratio, §5.4). */
#include "cli.h"
#include "fathom.h"

#include <errno.h>
#include <stdbool.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
            "  --synthetic PRESET    qwen3-8b | llama-3.1-8b | smollm2-135m\n"
            "  --context N           synthetic window length in tokens\n"
            "  --seed S              synthetic text seed (default 1)\n"
            "  --positions P         queried positions, the last P (default 128)\n"
            "calibration (Var for fathom, Double Sparsity's channels, the KLT basis, greedy budgets):\n"
            "  --calib FILE          a capture of other text, as in the paper\n"
            "  --calib synthetic     (synthetic sources) the same preset's text with seed S+1000\n"
            "  (none: statistics from the evaluated window itself; fathom's Var from the\n"
            "   store's running sums, the paper's calibration-free variant)\n"
            "method:\n"
            "  --methods LIST        default " DEFAULT_METHODS "\n"
            "  --k K                 selected keys per query head (default n/64, at least 64)\n"
            "  --layer-budget flat|greedy   fathom's per-layer budget (default flat)\n"
            "  --keys exact|planes   attend with the exact keys (default) or with keys decoded\n"
            "                        from all four bit planes (the planes as the primary K cache)\n"
            "sweeps:\n"
            "  --sweep-budgets LIST  also run fathom (and fathom-klt if listed) at these budgets\n"
            "  --match               bits at which fathom matches each other method's error\n"
            "                        (runs the default budget sweep if none is given)\n"
            "  --sweep-k LIST        repeat the whole evaluation for each k (selection ratio)\n"
            "  --plot FILE.svg       error-vs-bits curves\n"
            "output:\n"
            "  --json                one JSON object on stdout\n"
            "  --threads N           worker threads (default: one per core)\n"
            "  --quiet               no progress on stderr\n");
}

typedef struct options {
    const char *kv, *preset, *calib, *plot;
    uint64_t context, seed;
    uint32_t positions, k, threads;
    bool json, match, quiet, greedy, planes_keys;
    char methods[4096];
    uint32_t sweep_budgets[MAX_SWEEP], n_sweep_budgets;
    uint32_t sweep_k[MAX_SWEEP], n_sweep_k;
} options;

static bool parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s || *s == '-') return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return false;
    *out = v;
    return true;
}

static bool parse_u32(const char *s, uint32_t *out) {
    uint64_t v;
    if (!parse_u64(s, &v) || v > UINT32_MAX) return false;
    *out = (uint32_t)v;
    return true;
}

static bool parse_u32_list(const char *s, uint32_t *out, uint32_t *count) {
    char buf[1024];
    if (!s || strlen(s) >= sizeof buf) return false;
    strcpy(buf, s);
    *count = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (*count >= MAX_SWEEP || !parse_u32(tok, &out[*count]) || out[*count] == 0) return false;
        (*count)++;
    }
    return *count > 0;
}

/* -1: usage error (message printed), 0: ok, 1: --help. */
static int parse_options(int argc, char **argv, options *o) {
    memset(o, 0, sizeof *o);
    o->seed = 1;
    o->positions = 128;
    snprintf(o->methods, sizeof o->methods, "%s", DEFAULT_METHODS);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VALUE()                                                                               \
    do {                                                                                           \
        if (!v) {                                                                                  \
            fprintf(stderr, "fathom eval: %s needs a value\n", a);                                 \
            return -1;                                                                             \
        }                                                                                          \
        i++;                                                                                       \
    } while (0)
#define BAD_VALUE()                                                                                \
    do {                                                                                           \
        fprintf(stderr, "fathom eval: bad value for %s: '%s'\n", a, v);                            \
        return -1;                                                                                 \
    } while (0)
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return 1;
        else if (!strcmp(a, "--kv")) { NEED_VALUE(); o->kv = v; }
        else if (!strcmp(a, "--synthetic")) { NEED_VALUE(); o->preset = v; }
        else if (!strcmp(a, "--context")) { NEED_VALUE(); if (!parse_u64(v, &o->context) || !o->context) BAD_VALUE(); }
        else if (!strcmp(a, "--seed")) { NEED_VALUE(); if (!parse_u64(v, &o->seed)) BAD_VALUE(); }
        else if (!strcmp(a, "--positions")) { NEED_VALUE(); if (!parse_u32(v, &o->positions) || !o->positions) BAD_VALUE(); }
        else if (!strcmp(a, "--k")) { NEED_VALUE(); if (!parse_u32(v, &o->k) || !o->k) BAD_VALUE(); }
        else if (!strcmp(a, "--threads")) { NEED_VALUE(); if (!parse_u32(v, &o->threads) || o->threads > 256) BAD_VALUE(); }
        else if (!strcmp(a, "--methods")) {
            NEED_VALUE();
            if (strlen(v) >= sizeof o->methods) BAD_VALUE();
            snprintf(o->methods, sizeof o->methods, "%s", v);
        }
        else if (!strcmp(a, "--calib")) { NEED_VALUE(); o->calib = v; }
        else if (!strcmp(a, "--layer-budget")) {
            NEED_VALUE();
            if (!strcmp(v, "flat")) o->greedy = false;
            else if (!strcmp(v, "greedy")) o->greedy = true;
            else BAD_VALUE();
        }
        else if (!strcmp(a, "--keys")) {
            NEED_VALUE();
            if (!strcmp(v, "exact")) o->planes_keys = false;
            else if (!strcmp(v, "planes")) o->planes_keys = true;
            else BAD_VALUE();
        }
        else if (!strcmp(a, "--sweep-budgets")) { NEED_VALUE(); if (!parse_u32_list(v, o->sweep_budgets, &o->n_sweep_budgets)) BAD_VALUE(); }
        else if (!strcmp(a, "--sweep-k")) { NEED_VALUE(); if (!parse_u32_list(v, o->sweep_k, &o->n_sweep_k)) BAD_VALUE(); }
        else if (!strcmp(a, "--match")) o->match = true;
        else if (!strcmp(a, "--plot")) { NEED_VALUE(); o->plot = v; }
        else if (!strcmp(a, "--json")) o->json = true;
        else if (!strcmp(a, "--quiet")) o->quiet = true;
        else {
            fprintf(stderr, "fathom eval: unknown option '%s' (see --help)\n", a);
            return -1;
        }
#undef NEED_VALUE
#undef BAD_VALUE
    }
    if (o->kv && o->preset) {
        fprintf(stderr, "fathom eval: give --kv or --synthetic, not both\n");
        return -1;
    }
    if (o->kv && o->context) {
        fprintf(stderr, "fathom eval: --context applies to --synthetic only\n");
        return -1;
    }
    if (o->calib && !strcmp(o->calib, "synthetic") && o->kv) {
        fprintf(stderr, "fathom eval: --calib synthetic needs a --synthetic source\n");
        return -1;
    }
    if (!o->kv && !o->preset) o->preset = "qwen3-8b";
    if (o->preset && !o->context) o->context = 32768;
    if (o->match && !o->n_sweep_budgets) parse_u32_list(DEFAULT_SWEEP, o->sweep_budgets, &o->n_sweep_budgets);
    return 0;
}

/* Progress on stderr: a rewritten line on a terminal, else every 10%. */
typedef struct progress {
    const char *label;
    double t0, last;
    int last_decile;
    bool tty;
} progress;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void on_progress(void *user, uint64_t done, uint64_t total) {
    progress *p = user;
    double t = now_s();
    int decile = total ? (int)(10 * done / total) : 10;
    if (p->tty) {
        if (t - p->last < 0.25 && done != total) return;
        p->last = t;
        double eta = done ? (t - p->t0) * (double)(total - done) / (double)done : 0;
        fprintf(stderr, "\r%s %5.1f%%  %6.0fs elapsed  ~%4.0fs left ", p->label, 100.0 * (double)done / (double)total,
                t - p->t0, eta);
        if (done == total) fputc('\n', stderr);
    } else if (decile > p->last_decile) {
        p->last_decile = decile;
        fprintf(stderr, "%s %d%% (%.0fs)\n", p->label, decile * 10, t - p->t0);
    }
}

static int open_sources(const options *o, fathom_source **src, fathom_source **calib) {
    int st;
    *src = *calib = NULL;
    if (o->kv) {
        if ((st = fathom_capture_open(src, o->kv)) < 0) return cli_fail("eval", o->kv, st);
    } else if ((st = fathom_synth_open(src, o->preset, o->context, o->positions, o->seed)) < 0) {
        return cli_fail("eval", o->preset, st);
    }
    if (o->calib && !strcmp(o->calib, "synthetic")) {
        if ((st = fathom_synth_open(calib, o->preset, o->context, o->positions, o->seed + 1000)) < 0)
            return cli_fail("eval", "synthetic calibration", st);
    } else if (o->calib) {
        if ((st = fathom_capture_open(calib, o->calib)) < 0) return cli_fail("eval", o->calib, st);
    }
    return 0;
}

/* Fathom's error as a function of bits: interpolate log(error) linearly in
 * bits between the sweep points that bracket the target error. */
static double bits_to_match(const fathom_method_result *sweep, uint32_t n, double target) {
    for (uint32_t i = 0; i < n; i++) {
        if (sweep[i].rel_error <= target) {
            if (i == 0) return sweep[0].bits_per_token; /* already at the smallest budget */
            double e0 = log(sweep[i - 1].rel_error), e1 = log(sweep[i].rel_error), et = log(target);
            double b0 = sweep[i - 1].bits_per_token, b1 = sweep[i].bits_per_token;
            if (e0 == e1) return b1;
            return b0 + (b1 - b0) * (e0 - et) / (e0 - e1);
        }
    }
    return -1;
}

static void print_json_string(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20) printf("\\u%04x", *s);
        else putchar(*s);
    }
    putchar('"');
}

static void print_result_json(const fathom_method_result *r) {
    printf("{\"name\":");
    print_json_string(r->name);
    printf(",\"bits_per_token\":%.6g,\"scan_bytes_per_step\":%.6g,\"row_bytes_per_step\":%.6g,"
           "\"rel_error\":%.6g,\"rel_error_stderr\":%.6g,\"selection_ratio\":%.6g}",
           r->bits_per_token, r->scan_bytes_per_step, r->row_bytes_per_step, r->rel_error,
           r->rel_error_stderr, r->selection_ratio);
}

static void print_table(const fathom_method_result *r, uint32_t n) {
    printf("%-16s %10s %14s %14s %12s %10s %9s\n", "method", "bits/token", "scan MB/step", "rows MB/step",
           "rel error", "± stderr", "selected");
    for (uint32_t i = 0; i < n; i++)
        printf("%-16s %10.1f %14.2f %14.2f %12.5f %10.5f %8.2f%%\n", r[i].name, r[i].bits_per_token,
               r[i].scan_bytes_per_step / 1e6, r[i].row_bytes_per_step / 1e6, r[i].rel_error,
               r[i].rel_error_stderr, 100 * r[i].selection_ratio);
}

/* An SVG of error (log scale) against bits per token: fixed methods as
 * points, budget sweeps as lines. */
static int write_plot(const char *path, const fathom_method_result *main_r, uint32_t n_main,
                      const fathom_method_result *sweep, const uint32_t *sweep_kind, uint32_t n_sweep) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "fathom eval: cannot write %s\n", path);
        return 1;
    }
    double bmax = 1, emin = 1e9, emax = 0;
    for (uint32_t i = 0; i < n_main + n_sweep; i++) {
        const fathom_method_result *r = i < n_main ? &main_r[i] : &sweep[i - n_main];
        if (r->rel_error <= 0 || r->bits_per_token <= 0 || r->bits_per_token > 1024) continue;
        if (r->bits_per_token > bmax) bmax = r->bits_per_token;
        if (r->rel_error < emin) emin = r->rel_error;
        if (r->rel_error > emax) emax = r->rel_error;
    }
    if (emax <= 0) emin = 1e-3, emax = 1;
    double lmin = floor(log10(emin)), lmax = ceil(log10(emax));
    if (lmax <= lmin) lmax = lmin + 1;
    bmax = ceil(bmax / 64) * 64;
    const double W = 720, H = 480, x0 = 70, y0 = 20, pw = 600, ph = 400;
#define PX(b) (x0 + pw * (b) / bmax)
#define PY(e) (y0 + ph * (lmax - log10(e)) / (lmax - lmin))
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"black\"/>\n", x0, y0, pw, ph);
    for (double b = 0; b <= bmax; b += 64)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f</text>\n", PX(b), y0 + ph + 16, b);
    for (double l = lmin; l <= lmax; l++)
        fprintf(f, "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">1e%.0f</text>\n",
                x0, x0 + pw, PY(pow(10, l)), PY(pow(10, l)), x0 - 4, PY(pow(10, l)) + 4, l);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">bits per token (code + scale)</text>\n", x0 + pw / 2, H - 8);
    fprintf(f, "<text x=\"14\" y=\"%.0f\" transform=\"rotate(-90 14 %.0f)\" text-anchor=\"middle\">mean relative L2 error</text>\n", y0 + ph / 2, y0 + ph / 2);
    static const char *colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#ff7f0e"};
    for (uint32_t kind = 0; kind < 2; kind++) {
        int first = 1;
        for (uint32_t i = 0; i < n_sweep; i++) {
            if (sweep_kind[i] != kind || sweep[i].rel_error <= 0) continue;
            if (first) fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", kind ? "#ff7f0e" : "#000");
            fprintf(f, "%.1f,%.1f ", PX(sweep[i].bits_per_token), PY(sweep[i].rel_error));
            first = 0;
        }
        if (!first) fprintf(f, "\"/>\n");
    }
    for (uint32_t i = 0; i < n_main; i++) {
        const fathom_method_result *r = &main_r[i];
        if (r->rel_error <= 0 || r->bits_per_token <= 0 || r->bits_per_token > bmax) continue;
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"/><text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                PX(r->bits_per_token), PY(r->rel_error), colors[i % 10], PX(r->bits_per_token) + 6,
                PY(r->rel_error) - 4, r->name);
    }
    fprintf(f, "</svg>\n");
#undef PX
#undef PY
    return fclose(f) == 0 ? 0 : 1;
}

int cmd_eval(int argc, char **argv) {
    options o;
    int pr = parse_options(argc, argv, &o);
    if (pr == 1) {
        usage(stdout);
        return 0;
    }
    if (pr < 0) return 2;

    fathom_method methods[MAX_METHODS];
    uint32_t n_methods = 0;
    int st = fathom_method_parse_list(o.methods, methods, MAX_METHODS, &n_methods);
    if (st < 0) {
        fprintf(stderr, "fathom eval: --methods: %s\n", fathom_last_error());
        return 2;
    }
    /* Budget sweeps run in the same pass as the listed methods. */
    bool klt_listed = false;
    for (uint32_t i = 0; i < n_methods; i++) klt_listed |= methods[i].kind == FATHOM_METHOD_FATHOM_KLT;
    uint32_t n_all = n_methods;
    uint32_t sweep_kind[2 * MAX_SWEEP];
    for (uint32_t kind = 0; kind < (klt_listed ? 2u : 1u); kind++)
        for (uint32_t i = 0; i < o.n_sweep_budgets && n_all < MAX_METHODS; i++) {
            char spec[48];
            snprintf(spec, sizeof spec, "%s:%u", kind ? "fathom-klt" : "fathom", o.sweep_budgets[i]);
            if (fathom_method_parse(spec, &methods[n_all]) < 0) {
                fprintf(stderr, "fathom eval: --sweep-budgets: %s\n", fathom_last_error());
                return 2;
            }
            sweep_kind[n_all - n_methods] = kind;
            n_all++;
        }

    fathom_source *src = NULL, *calib = NULL;
    if ((st = open_sources(&o, &src, &calib)) != 0) {
        fathom_source_free(src);
        fathom_source_free(calib);
        return st;
    }
    fathom_source_info info;
    if ((st = fathom_source_get_info(src, &info)) < 0) return cli_fail("eval", "source", st);
    uint32_t max_positions = o.kv && o.positions < info.positions ? o.positions : 0;
    uint32_t used_positions = max_positions ? max_positions : info.positions;
    uint32_t ks[MAX_SWEEP], n_k = 1;
    ks[0] = o.k ? o.k : (uint32_t)(info.tokens / 64 > 64 ? info.tokens / 64 : 64);
    if (o.n_sweep_k) {
        memcpy(ks, o.sweep_k, o.n_sweep_k * sizeof ks[0]);
        n_k = o.n_sweep_k;
    }

    if (!o.json) {
        printf("source: %s%s, %u layers, %u query heads over %u KV heads, dim %u, n = %" PRIu64
               ", %u queried positions\n",
               o.kv ? o.kv : "synthetic ", o.kv ? "" : info.model, info.layers, info.q_heads, info.kv_heads,
               info.dim, info.tokens, used_positions);
        printf("calibration: %s; layer budget: %s%s\n",
               !calib ? "none (statistics of the evaluated window itself)"
               : o.kv || strcmp(o.calib, "synthetic") ? o.calib : "synthetic text, seed + 1000",
               o.greedy ? "greedy" : "flat", o.planes_keys ? "; attention keys decoded from the 4 planes" : "");
    }

    fathom_method_result *results = calloc((size_t)n_all * n_k, sizeof *results);
    if (!results) return cli_fail("eval", "results", FATHOM_ERR_NOMEM);
    int rc = 0;
    double t0 = now_s();
    for (uint32_t ki = 0; ki < n_k && rc == 0; ki++) {
        char label[64];
        snprintf(label, sizeof label, "eval k=%u", ks[ki]);
        progress prog = {label, now_s(), 0, 0, isatty(2) != 0};
        fathom_eval_config cfg = {0};
        cfg.k = ks[ki];
        cfg.calib = calib;
        cfg.layer_budget = o.greedy ? FATHOM_BUDGET_GREEDY : FATHOM_BUDGET_FLAT;
        cfg.threads = o.threads;
        cfg.max_positions = max_positions;
        cfg.planes_as_keys = o.planes_keys;
        cfg.progress = o.quiet ? NULL : on_progress;
        cfg.progress_user = &prog;
        if ((st = fathom_eval_run(src, methods, n_all, &cfg, results + (size_t)ki * n_all)) < 0)
            rc = cli_fail("eval", "evaluation", st);
    }
    double elapsed = now_s() - t0;
    if (rc == 0) {
        const fathom_method_result *main_r = results;                       /* first k */
        const fathom_method_result *sweep = results + n_methods;            /* its budget sweep */
        const uint32_t n_sweep = n_all - n_methods;
        if (o.json) {
            printf("{\"source\":");
            print_json_string(o.kv ? o.kv : info.model);
            printf(",\"tokens\":%" PRIu64 ",\"positions\":%u,\"k\":%u,\"methods\":[", info.tokens, used_positions, ks[0]);
            for (uint32_t i = 0; i < n_methods; i++) {
                if (i) putchar(',');
                print_result_json(&main_r[i]);
            }
            printf("]");
            if (n_sweep) {
                printf(",\"budget_sweep\":[");
                for (uint32_t i = 0; i < n_sweep; i++) {
                    if (i) putchar(',');
                    print_result_json(&sweep[i]);
                }
                printf("]");
            }
            if (o.match) {
                printf(",\"match\":[");
                bool first = true;
                for (uint32_t i = 0; i < n_methods; i++) {
                    if (main_r[i].rel_error <= 0) continue;
                    double b = bits_to_match(sweep, o.n_sweep_budgets, main_r[i].rel_error);
                    printf("%s{\"method\":", first ? "" : ",");
                    print_json_string(main_r[i].name);
                    printf(",\"method_bits\":%.6g,\"fathom_bits\":", main_r[i].bits_per_token);
                    if (b < 0) printf("null}");
                    else printf("%.6g}", b);
                    first = false;
                }
                printf("]");
            }
            if (n_k > 1) {
                printf(",\"k_sweep\":[");
                for (uint32_t ki = 0; ki < n_k; ki++) {
                    printf("%s{\"k\":%u,\"methods\":[", ki ? "," : "", ks[ki]);
                    for (uint32_t i = 0; i < n_methods; i++) {
                        if (i) putchar(',');
                        print_result_json(&results[(size_t)ki * n_all + i]);
                    }
                    printf("]}");
                }
                printf("]");
            }
            printf("}\n");
        } else {
            printf("k = %u (%.2f%% of n), %.1f s\n\n", ks[0], 100.0 * ks[0] / (double)info.tokens, elapsed);
            print_table(main_r, n_methods);
            if (n_sweep) {
                printf("\nbudget sweep (error vs bits):\n");
                print_table(sweep, n_sweep);
            }
            if (o.match) {
                printf("\nbits at which fathom matches each method's error (Table 6):\n");
                printf("%-16s %12s %12s %10s\n", "method", "its bits", "fathom bits", "saving");
                for (uint32_t i = 0; i < n_methods; i++) {
                    if (main_r[i].rel_error <= 0) continue;
                    double b = bits_to_match(sweep, o.n_sweep_budgets, main_r[i].rel_error);
                    if (b < 0)
                        printf("%-16s %12.1f %12s %10s\n", main_r[i].name, main_r[i].bits_per_token, "> sweep", "-");
                    else
                        printf("%-16s %12.1f %12.1f %9.2fx\n", main_r[i].name, main_r[i].bits_per_token, b,
                               main_r[i].bits_per_token / b);
                }
            }
            if (n_k > 1) {
                printf("\nselection ratio sweep (rel error per method and k):\n%-16s", "method");
                for (uint32_t ki = 0; ki < n_k; ki++) printf(" %9s%-5u", "k=", ks[ki]);
                printf("\n%-16s", "k / n");
                for (uint32_t ki = 0; ki < n_k; ki++) printf(" %13.3f%%", 100.0 * ks[ki] / (double)info.tokens);
                printf("\n");
                for (uint32_t i = 0; i < n_methods; i++) {
                    printf("%-16s", results[i].name);
                    for (uint32_t ki = 0; ki < n_k; ki++) printf(" %14.5f", results[(size_t)ki * n_all + i].rel_error);
                    printf("\n");
                }
            }
        }
        if (o.plot && write_plot(o.plot, main_r, n_methods, sweep, sweep_kind, n_sweep) != 0) rc = 1;
    }
    free(results);
    fathom_source_free(src);
    fathom_source_free(calib);
    return rc;
}

/* fathom synth: write a synthetic capture (docs/synthetic.md), layer by
 * layer through the streaming writer, so memory stays at one layer. */
#include "cli.h"
#include "fathom.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void synth_usage(FILE *f) {
    fprintf(f,
            "usage: fathom synth --preset NAME --context N [options] -o FILE\n"
            "\n"
            "Write a synthetic capture (safetensors, docs/capture-format.md).\n"
            "\n"
            "  --preset NAME     qwen3-8b, llama-3.1-8b, smollm2-135m or a preset file\n"
            "                    (FILE.json, from fathom synth-fit)\n"
            "  --context N       tokens per layer and head (suffix k = 1024, m = 1048576)\n"
            "  --positions P     queries for the last P positions (default min(128, N))\n"
            "  --seed S          token-level content seed (default 1; 2 for calibration text)\n"
            "  --dtype T         f32, f16 or bf16 (default bf16)\n"
            "  -o, --output FILE the capture to write\n"
            "  --progress        progress on stderr (default: only on a terminal)\n"
            "  -q, --quiet       no progress\n"
            "  -h, --help        this help\n"
            "\n"
            "Exit status: 0 success, 1 failure, 2 usage error.\n");
}

/* Decimal with an optional k/m suffix (powers of 1024); false on junk or overflow. */
static int parse_count(const char *s, uint64_t *out) {
    if (!s || !*s || *s == '-' || *s == '+') return 0;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) return 0;
    uint64_t mult = 1;
    if (*end == 'k' || *end == 'K') mult = 1024, end++;
    else if (*end == 'm' || *end == 'M') mult = 1024 * 1024, end++;
    if (*end != '\0') return 0;
    if (v > UINT64_MAX / mult) return 0;
    *out = (uint64_t)v * mult;
    return 1;
}

enum { OPT_PRESET = 256, OPT_CONTEXT, OPT_POSITIONS, OPT_SEED, OPT_DTYPE };
static const struct option long_options[] = {
    {"help", no_argument, NULL, 'h'},
    {"quiet", no_argument, NULL, 'q'},
    {"progress", no_argument, NULL, 'P'},
    {"output", required_argument, NULL, 'o'},
    {"preset", required_argument, NULL, OPT_PRESET},
    {"context", required_argument, NULL, OPT_CONTEXT},
    {"positions", required_argument, NULL, OPT_POSITIONS},
    {"seed", required_argument, NULL, OPT_SEED},
    {"dtype", required_argument, NULL, OPT_DTYPE},
    {NULL, 0, NULL, 0},
};

int cmd_synth(int argc, char **argv) {
    const char *preset = NULL, *output = NULL, *dtype_name = "bf16";
    uint64_t context = 0, positions = 0, seed = 1;
    cli_progress_mode progress = CLI_PROGRESS_AUTO;
    int c;
    while ((c = cli_getopt(argc, argv, "hqo:", long_options)) != -1) {
        switch (c) {
        case 'h': synth_usage(stdout); return CLI_OK;
        case '?': return CLI_USAGE;
        case 'q': progress = CLI_PROGRESS_OFF; break;
        case 'P': progress = CLI_PROGRESS_ON; break;
        case 'o': output = optarg; break;
        case OPT_PRESET: preset = optarg; break;
        case OPT_DTYPE: dtype_name = optarg; break;
        case OPT_CONTEXT:
            if (!parse_count(optarg, &context) || !context) return cli_bad_value("a token count");
            break;
        case OPT_POSITIONS:
            if (!parse_count(optarg, &positions) || !positions || positions > UINT32_MAX)
                return cli_bad_value("a position count");
            break;
        case OPT_SEED:
            if (!parse_count(optarg, &seed)) return cli_bad_value("a non-negative integer");
            break;
        }
    }
    if (optind < argc) return cli_usage_error("unexpected argument '%s'", argv[optind]);
    if (!preset || !context || !output) return cli_usage_error("--preset, --context and -o are required");
    fathom_dtype dtype;
    if (!strcmp(dtype_name, "f32")) dtype = FATHOM_DTYPE_F32;
    else if (!strcmp(dtype_name, "f16")) dtype = FATHOM_DTYPE_F16;
    else if (!strcmp(dtype_name, "bf16")) dtype = FATHOM_DTYPE_BF16;
    else {
        return cli_usage_error("--dtype must be f32, f16 or bf16, not '%s'", dtype_name);
    }
    if (!positions) positions = context < 128 ? context : 128;
    if (positions > context) {
        return cli_usage_error("--positions %" PRIu64 " exceeds --context %" PRIu64, positions, context);
    }

    fathom_source *src = NULL;
    int st = cli_synth_open(&src, preset, context, (uint32_t)positions, seed);
    if (st < 0) return st == FATHOM_ERR_INVALID_ARG ? cli_fail_usage("--preset", st) : cli_fail(preset, st);
    fathom_source_info info;
    fathom_source_get_info(src, &info);

    uint64_t q_elems = (uint64_t)info.q_heads * info.positions * info.dim;
    uint64_t kv_elems = (uint64_t)info.kv_heads * info.tokens * info.dim;
    float *q = malloc(q_elems * sizeof *q), *k = malloc(kv_elems * sizeof *k), *v = malloc(kv_elems * sizeof *v);
    fathom_capture_writer *w = NULL;
    int rc = 0;
    if (!q || !k || !v) {
        cli_error("out of memory for one layer (%" PRIu64 " bytes)", (q_elems + 2 * kv_elems) * 4);
        rc = CLI_FAILURE;
        goto done;
    }
    st = fathom_capture_writer_open(&w, output, &info, dtype);
    if (st < 0) {
        rc = cli_fail(output, st);
        goto done;
    }
    char seed_text[32];
    snprintf(seed_text, sizeof seed_text, "%" PRIu64, seed);
    if ((st = fathom_capture_writer_meta(w, "source", "synthetic")) < 0 ||
        (st = fathom_capture_writer_meta(w, "seed", seed_text)) < 0) {
        rc = cli_fail("metadata", st);
        goto done;
    }
    const bool show = cli_progress_wanted(progress, false);
    cli_progress prog;
    cli_progress_start(&prog, "synth: layers");
    for (uint32_t l = 0; l < info.layers; l++) {
        if ((st = fathom_source_layer(src, l, q, k, v)) < 0) {
            rc = cli_fail("generating a layer", st);
            goto done;
        }
        if ((st = fathom_capture_writer_layer(w, l, q, k, v)) < 0) {
            rc = cli_fail(output, st);
            goto done;
        }
        if (show) cli_progress_update(&prog, l + 1, info.layers);
    }
done:
    if (w) {
        st = fathom_capture_writer_close(w); /* removes the file if anything failed */
        if (st < 0 && rc == 0) rc = cli_fail(output, st);
    }
    free(q);
    free(k);
    free(v);
    fathom_source_free(src);
    return rc;
}

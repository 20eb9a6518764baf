/* fathom info: describe a capture file through the public API (the library
 * validates and parses it; jansson only formats --json). */
#include "cli.h"
#include "fathom.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void info_usage(FILE *f) {
    fprintf(f,
            "usage: fathom info FILE [--json]\n"
            "\n"
            "Check a capture file and describe it: model, layers, heads, head dim,\n"
            "tokens, query positions, first query position, dtypes, size, metadata.\n"
            "\n"
            "  --json      one JSON object on stdout\n"
            "  -h, --help  this help\n"
            "\n"
            "Exit status: 0 success, 1 failure, 2 usage error.\n");
}

static const char *dtype_name(fathom_dtype d) {
    return d == FATHOM_DTYPE_F32 ? "F32" : d == FATHOM_DTYPE_F16 ? "F16" : d == FATHOM_DTYPE_BF16 ? "BF16" : "?";
}

/* The dtype every layer stores this role in (0 q, 1 k, 2 v), or "mixed". */
static const char *role_dtype(const fathom_source *src, uint32_t layers, int role) {
    fathom_dtype common = FATHOM_DTYPE_F32;
    for (uint32_t l = 0; l < layers; l++) {
        fathom_dtype d[3];
        if (fathom_source_dtypes(src, l, &d[0], &d[1], &d[2]) < 0) return "?";
        if (l == 0) common = d[role];
        else if (d[role] != common) return "mixed";
    }
    return dtype_name(common);
}

static const struct option long_options[] = {
    {"help", no_argument, NULL, 'h'},
    {"json", no_argument, NULL, 'j'},
    {NULL, 0, NULL, 0},
};

int cmd_info(int argc, char **argv) {
    int as_json = 0, c;
    while ((c = cli_getopt(argc, argv, "h", long_options)) != -1) {
        if (c == '?') return CLI_USAGE;
        if (c == 'h') {
            info_usage(stdout);
            return CLI_OK;
        }
        as_json = 1;
    }
    if (optind == argc) return cli_usage_error("FILE is required");
    if (argc - optind > 1) return cli_usage_error("one FILE only");
    const char *path = argv[optind];
    fathom_source *src = NULL;
    int st = fathom_capture_open(&src, path);
    if (st < 0) return cli_fail(path, st);
    fathom_source_info in;
    fathom_source_get_info(src, &in);
    struct stat sb;
    uint64_t file_bytes = stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
    const char *dq = role_dtype(src, in.layers, 0), *dk = role_dtype(src, in.layers, 1),
               *dv = role_dtype(src, in.layers, 2);
    int rc = 0;
    if (as_json) {
        json_t *meta = json_object();
        for (uint64_t i = 0; meta; i++) {
            const char *key, *value;
            if (fathom_source_metadata_at(src, i, &key, &value) < 0 || !key) break;
            json_object_set_new(meta, key, json_string(value));
        }
        json_t *out = json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:I, s:i, s:I, s:{s:s, s:s, s:s}, s:I, s:o}",
                                "file", path, "model", in.model, "layers", (json_int_t)in.layers,
                                "q_heads", (json_int_t)in.q_heads, "kv_heads", (json_int_t)in.kv_heads,
                                "group", (json_int_t)(in.q_heads / in.kv_heads), "dim", (json_int_t)in.dim,
                                "tokens", (json_int_t)in.tokens, "positions", (json_int_t)in.positions,
                                "first_query", (json_int_t)in.first_query, "dtype", "q", dq, "k", dk, "v", dv,
                                "file_bytes", (json_int_t)file_bytes, "metadata", meta);
        char *text = out ? json_dumps(out, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
        if (text) printf("%s\n", text);
        else cli_error("out of memory"), rc = CLI_FAILURE;
        free(text);
        json_decref(out);
    } else {
        /* the path, the model name and the metadata come from outside: escaped */
        printf("file         ");
        cli_print_safe(stdout, path);
        printf(" (%" PRIu64 " bytes)\n", file_bytes);
        printf("model        ");
        cli_print_safe(stdout, in.model);
        printf("\nlayers       %u\n", in.layers);
        printf("heads        %u query, %u KV (group %u)\n", in.q_heads, in.kv_heads, in.q_heads / in.kv_heads);
        printf("dim          %u\n", in.dim);
        printf("tokens       %" PRIu64 "\n", in.tokens);
        printf("positions    %u (first query at %" PRIu64 ")\n", in.positions, in.first_query);
        printf("dtype        q %s, k %s, v %s\n", dq, dk, dv);
        printf("metadata\n");
        for (uint64_t i = 0;; i++) {
            const char *key, *value;
            if (fathom_source_metadata_at(src, i, &key, &value) < 0 || !key) break;
            printf("  ");
            cli_print_safe(stdout, key);
            printf("%*s ", (int)(strlen(key) < 12 ? 12 - strlen(key) : 0), "");
            cli_print_safe(stdout, value);
            printf("\n");
        }
    }
    fathom_source_free(src);
    return rc;
}

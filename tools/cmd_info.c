/* fathom info: describe a capture file. The library validates the file
 * (fathom_capture_open); the per-tensor dtypes and the full metadata list
 * are then read from the safetensors JSON header, whose layout is public
 * (docs/capture-format.md). */
#include "cli.h"
#include "fathom.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void info_usage(FILE *f) {
    fprintf(f,
            "usage: fathom info FILE [--json]\n"
            "\n"
            "Check a capture file and describe it: model, layers, heads, head dim,\n"
            "tokens, query positions, first query position, dtypes, size, metadata.\n"
            "\n"
            "  --json      one JSON object on stdout\n"
            "  -h, --help  this help\n");
}

/* The JSON header of an already validated capture, and the file size. */
static json_t *read_header(const char *path, uint64_t *file_bytes) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char len8[8];
    json_t *root = NULL;
    if (fread(len8, 1, 8, f) == 8) {
        uint64_t len = 0;
        for (int i = 7; i >= 0; i--) len = (len << 8) | len8[i];
        char *text = malloc((size_t)len); /* len <= 100 MB: checked by fathom_capture_open */
        if (text && fread(text, 1, (size_t)len, f) == len) root = json_loadb(text, (size_t)len, 0, NULL);
        free(text);
    }
    if (fseek(f, 0, SEEK_END) == 0) {
        long end = ftell(f);
        *file_bytes = end > 0 ? (uint64_t)end : 0;
    }
    fclose(f);
    return root;
}

/* "F32" if every tensor of this role ("q", "k", "v") has it, else "mixed". */
static const char *role_dtype(json_t *root, uint32_t layers, char role) {
    const char *common = NULL;
    for (uint32_t l = 0; l < layers; l++) {
        char name[32];
        snprintf(name, sizeof name, "l%u.%c", l, role);
        const char *d = json_string_value(json_object_get(json_object_get(root, name), "dtype"));
        if (!d) return "?";
        if (!common) common = d;
        else if (strcmp(common, d)) return "mixed";
    }
    return common ? common : "?";
}

int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    int as_json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            info_usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            as_json = 1;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "fathom info: unknown option '%s'\n\n", argv[i]);
            info_usage(stderr);
            return 2;
        } else if (path) {
            fprintf(stderr, "fathom info: one FILE only\n\n");
            info_usage(stderr);
            return 2;
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        info_usage(stderr);
        return 2;
    }
    fathom_source *src = NULL;
    int st = fathom_capture_open(&src, path);
    if (st < 0) return cli_fail("info", path, st);
    fathom_source_info in;
    fathom_source_get_info(src, &in);
    fathom_source_free(src);

    uint64_t file_bytes = 0;
    json_t *root = read_header(path, &file_bytes);
    if (!root) {
        fprintf(stderr, "fathom info: %s: cannot re-read the header\n", path);
        return 1;
    }
    json_t *meta = json_object_get(root, "__metadata__");
    const char *dq = role_dtype(root, in.layers, 'q'), *dk = role_dtype(root, in.layers, 'k'),
               *dv = role_dtype(root, in.layers, 'v');
    if (as_json) {
        json_t *out = json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:I, s:i, s:I, s:{s:s, s:s, s:s}, s:I, s:O}",
                                "file", path, "model", in.model, "layers", (json_int_t)in.layers,
                                "q_heads", (json_int_t)in.q_heads, "kv_heads", (json_int_t)in.kv_heads,
                                "group", (json_int_t)(in.q_heads / in.kv_heads), "dim", (json_int_t)in.dim,
                                "tokens", (json_int_t)in.tokens, "positions", (json_int_t)in.positions,
                                "first_query", (json_int_t)in.first_query, "dtype", "q", dq, "k", dk, "v", dv,
                                "file_bytes", (json_int_t)file_bytes, "metadata", meta);
        char *text = out ? json_dumps(out, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
        if (text) printf("%s\n", text);
        free(text);
        json_decref(out);
        json_decref(root);
        if (!text) {
            fprintf(stderr, "fathom info: out of memory\n");
            return 1;
        }
        return 0;
    }
    printf("file         %s (%" PRIu64 " bytes)\n", path, file_bytes);
    printf("model        %s\n", in.model);
    printf("layers       %u\n", in.layers);
    printf("heads        %u query, %u KV (group %u)\n", in.q_heads, in.kv_heads, in.q_heads / in.kv_heads);
    printf("dim          %u\n", in.dim);
    printf("tokens       %" PRIu64 "\n", in.tokens);
    printf("positions    %u (first query at %" PRIu64 ")\n", in.positions, in.first_query);
    printf("dtype        q %s, k %s, v %s\n", dq, dk, dv);
    printf("metadata\n");
    const char *key;
    json_t *value;
    json_object_foreach(meta, key, value) printf("  %-12s %s\n", key, json_string_value(value));
    json_decref(root);
    return 0;
}

/* fathom tokenize — a text's token ids by a GGUF model's tokenizer (only the
 * tokenizer is built; the weights are not loaded). scripts/make-prompts uses
 * --offsets to cut texts at a token count. */
#include "cli.h"
#include "fathom.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: fathom tokenize [--model FILE] (--text TEXT | --file F) [options]\n"
            "\n"
            "  --model FILE   " CLI_MODEL_HELP "\n"
            "  --text TEXT    the text\n"
            "  --file F       the text from a file\n"
            "  --special      cut control tokens (<|im_start|> ...) out of the text\n"
            "  --count        print only the number of tokens\n"
            "  --offsets      one line per token: its id and the byte offset where its\n"
            "                 bytes end in the decoded text (equal to the input's offsets\n"
            "                 when every byte has a token)\n"
            "Default: the ids, comma-separated, on one line.\n"
            "Exit status: 0 success, 1 failure, 2 usage error.\n");
}

enum { OPT_MODEL = 256, OPT_TEXT, OPT_FILE, OPT_SPECIAL, OPT_COUNT, OPT_OFFSETS };
static const struct option long_options[] = {
    {"help", no_argument, NULL, 'h'},
    {"model", required_argument, NULL, OPT_MODEL},
    {"text", required_argument, NULL, OPT_TEXT},
    {"file", required_argument, NULL, OPT_FILE},
    {"special", no_argument, NULL, OPT_SPECIAL},
    {"count", no_argument, NULL, OPT_COUNT},
    {"offsets", no_argument, NULL, OPT_OFFSETS},
    {NULL, 0, NULL, 0},
};

int cmd_tokenize(int argc, char **argv) {
    const char *model_path = NULL, *text_arg = NULL, *file = NULL;
    bool special = false, count = false, offsets = false;
    int c;
    while ((c = cli_getopt(argc, argv, "h", long_options)) != -1) {
        switch (c) {
        case 'h': usage(stdout); return CLI_OK;
        case '?': return CLI_USAGE;
        case OPT_MODEL: model_path = optarg; break;
        case OPT_TEXT: text_arg = optarg; break;
        case OPT_FILE: file = optarg; break;
        case OPT_SPECIAL: special = true; break;
        case OPT_COUNT: count = true; break;
        case OPT_OFFSETS: offsets = true; break;
        }
    }
    if (optind < argc) return cli_usage_error("unexpected argument '%s'", argv[optind]);
    if (!!text_arg + !!file != 1) return cli_usage_error("give exactly one of --text, --file");
    if (count && offsets) return cli_usage_error("--count and --offsets exclude each other");
    int rc = 1, st;
    fathom_gguf *gguf = NULL;
    fathom_tokenizer *tok = NULL;
    char *text = NULL;
    int32_t *ids = NULL;
    size_t len = 0, n = 0;
    const char *path = cli_model_path(model_path);
    if (!path) goto done;
    if ((st = fathom_gguf_open(&gguf, path)) < 0) {
        rc = cli_fail(path, st);
        goto done;
    }
    if ((st = fathom_tokenizer_from_gguf(&tok, gguf)) < 0) {
        rc = cli_fail("tokenizer", st);
        goto done;
    }
    if (file) {
        if (cli_read_file(file, &text, &len) < 0) {
            cli_error("cannot read %s", file);
            goto done;
        }
    } else {
        len = strlen(text_arg);
    }
    const char *src = text ? text : text_arg;
    st = fathom_tokenizer_encode(tok, src, len, special, NULL, 0, &n);
    if (st == FATHOM_ERR_INVALID_ARG && n > 0) st = FATHOM_OK; /* the size query */
    if (st == FATHOM_OK && n > 0) {
        ids = malloc(n * sizeof *ids);
        st = ids ? fathom_tokenizer_encode(tok, src, len, special, ids, n, &n) : FATHOM_ERR_NOMEM;
    }
    if (st < 0) {
        rc = cli_fail("encode", st);
        goto done;
    }
    if (count) {
        printf("%zu\n", n);
    } else if (offsets) {
        size_t at = 0;
        for (size_t i = 0; i < n; i++) {
            char piece[512];
            size_t plen = 0;
            if ((st = fathom_tokenizer_token_to_piece(tok, ids[i], piece, sizeof piece, &plen)) < 0) {
                rc = cli_fail("decode", st);
                goto done;
            }
            at += plen;
            printf("%d %zu\n", ids[i], at);
        }
    } else {
        for (size_t i = 0; i < n; i++) printf("%s%d", i ? "," : "", ids[i]);
        printf("\n");
    }
    rc = 0;
done:
    free(text);
    free(ids);
    fathom_tokenizer_free(tok);
    fathom_gguf_close(gguf);
    return rc;
}

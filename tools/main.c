/* fathom — command-line front end of libfathom: a table of subcommands. */
#include "cli.h"
#include "fathom.h"

#include <stdio.h>
#include <string.h>

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"eval", cmd_eval, "fidelity of every method against dense attention (paper §4)"},
    {"plan", cmd_plan, "show one query group's importance, water line and depths"},
    {"info", cmd_info, "describe a capture file"},
    {"synth", cmd_synth, "write a synthetic capture file"},
    {"synth-fit", cmd_synth_fit, "fit a synthetic preset to a capture (a preset file)"},
    {"generate", cmd_generate, "greedy decoding with a GGUF model, dense or sparse attention"},
    {"capture", cmd_capture, "run a text through a GGUF model and write a capture file"},
    {"agree", cmd_agree, "step agreement of sparse with dense and top-k decoding (paper §5.6)"},
    {"needle", cmd_needle, "RULER-style needle retrieval with dense and sparse decoding"},
    {"tokenize", cmd_tokenize, "token ids (and byte offsets) of a text, by the model's tokenizer"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: fathom <command> [options]   (fathom <command> --help for its options)\n"
               "       fathom --version\n\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nExit status: 0 success, 1 failure, 2 usage error.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return CLI_OK;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
        printf("fathom (libfathom) %d.%d.%d\n", FATHOM_VERSION_MAJOR, FATHOM_VERSION_MINOR,
               FATHOM_VERSION_PATCH);
        return CLI_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) {
            cli_set_command(commands[i].name);
            return commands[i].run(argc - 1, argv + 1);
        }
    fprintf(stderr, "fathom: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return CLI_USAGE;
}

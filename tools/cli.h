/* Subcommands of the fathom CLI. Each lives in tools/cmd_<name>.c, uses the
 * public API only, and returns a process exit code (0 ok, 1 failure, 2 usage). */
#ifndef FATHOM_CLI_H
#define FATHOM_CLI_H

int cmd_eval(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_capture(int argc, char **argv);
int cmd_agree(int argc, char **argv);
int cmd_needle(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);

/* Print "fathom <cmd>: <what>: <library message>" to stderr and return 1. */
int cli_fail(const char *cmd, const char *what, int status);

/* Helpers of the model commands (tools/cmd_generate.c). */
#include "fathom_model.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
bool cli_parse_u32(const char *s, uint32_t *out);
double cli_now(void); /* monotonic seconds */
/* "1,2,3" into a malloc'd array; false if malformed or empty. */
bool cli_parse_ids(const char *list, int32_t **ids, size_t *n);
/* --model, else $FATHOM_MODEL, else models/SmolLM2-135M-Instruct.Q4_1.gguf */
const char *cli_model_path(const char *given);
/* The whole file into a malloc'd buffer (not NUL-terminated); -1 on error. */
int cli_read_file(const char *path, char **text, size_t *len);
/* Token ids of a prompt; chat wraps it in the ChatML turns of SmolLM2
 * (optional system turn, the user turn, the assistant's opening). */
int cli_encode_prompt(const fathom_tokenizer *tok, const char *text, size_t len, bool chat,
                      const char *system, int32_t **ids, size_t *n);

/* Helpers of fathom agree and fathom needle (tools/cmd_agree.c). */
/* "0.02,0.005" into out[cap], each in (0, 1]; false if malformed or empty. */
bool cli_parse_fractions(const char *list, double *out, uint32_t cap, uint32_t *count);
/* Selection size of a budget: max(37, ceil(fraction * n)). */
uint32_t cli_budget_k(double fraction, uint64_t n);
/* FATHOM_ERR_INVALID_ARG (with a message) if a method's parameter cannot run at dim. */
int cli_check_method(const fathom_method *m, uint32_t dim);
/* Rewind ctx to prefix positions, set the attention method, then run `last`
 * and greedy tokens as decode steps: out gets up to n_tokens generated ids
 * (*produced of them; stops after stop_a or stop_b, -1 for none). stats (may
 * be NULL) gets this continuation's counters. logits is scratch [vocab]. */
int cli_continue(fathom_ctx *ctx, uint64_t prefix, int32_t last, const fathom_method *method,
                 uint32_t k, const fathom_source *calib, uint32_t n_tokens, int32_t stop_a,
                 int32_t stop_b, float *logits, uint32_t vocab, int32_t *out, uint32_t *produced,
                 fathom_ctx_stats *stats);
/* The text of ids, malloc'd and NUL-terminated; NULL on failure. */
char *cli_decode_text(const fathom_tokenizer *tok, const int32_t *ids, uint32_t n);
void cli_print_json_string(FILE *f, const char *s);
/* What fathom agree and fathom needle both set up before their runs: the
 * methods and budgets, the model and its info, its tokenizer, the optional
 * calibration capture, the prompt/haystack files. */
#define CLI_MAX_METHODS 32
#define CLI_MAX_BUDGETS 8
typedef struct cli_session {
    fathom_method methods[CLI_MAX_METHODS];
    uint32_t n_methods;
    double budgets[CLI_MAX_BUDGETS];
    uint32_t n_budgets;
    fathom_model *model;
    fathom_model_info info;
    fathom_tokenizer *tok;
    fathom_source *calib; /* NULL without --calib */
    char **files;
    size_t n_files;
} cli_session;
/* 0: ready; 1 (failure) or 2 (usage error) after a message on stderr, with
 * everything opened so far released. */
int cli_session_open(cli_session *s, const char *cmd, const char *methods, const char *budgets,
                     const char *model, const char *calib, char **file_args, int n_file_args);
void cli_session_close(cli_session *s);
/* Files named by args (a directory: its regular, non-hidden files by name),
 * malloc'd; -1 (after a message) if one cannot be read or none is found. */
int cli_collect_files(char **args, int n_args, char ***files, size_t *count);

#endif

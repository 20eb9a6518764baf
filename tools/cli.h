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

/* Print "fathom <cmd>: <what>: <library message>" to stderr and return 1. */
int cli_fail(const char *cmd, const char *what, int status);

/* Helpers of the model commands (tools/cmd_generate.c). */
#include "fathom.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
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

#endif

/* Subcommands of the fathom CLI. Each lives in tools/cmd_<name>.c, uses the
 * public API only, and returns a process exit code: CLI_OK (0), CLI_FAILURE
 * (1) or CLI_USAGE (2, a bad command line). tools/main.c dispatches to them
 * and sets the command name every message is prefixed with. */
#ifndef FATHOM_CLI_H
#define FATHOM_CLI_H

#include "cli_session.h"
#include "cli_util.h"

int cmd_eval(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_synth_fit(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_capture(int argc, char **argv);
int cmd_agree(int argc, char **argv);
int cmd_needle(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);

#endif

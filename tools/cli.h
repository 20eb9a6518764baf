/* Subcommands of the fathom CLI. Each lives in tools/cmd_<name>.c, uses the
 * public API only, and returns a process exit code (0 ok, 1 failure, 2 usage). */
#ifndef FATHOM_CLI_H
#define FATHOM_CLI_H

int cmd_eval(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_synth(int argc, char **argv);

/* Print "fathom <cmd>: <what>: <library message>" to stderr and return 1. */
int cli_fail(const char *cmd, const char *what, int status);

#endif

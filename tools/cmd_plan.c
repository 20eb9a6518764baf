/* PLACEHOLDER during initial development: replaced by the real subcommand. */
#include "cli.h"
#include <stdio.h>
int cmd_plan(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "fathom plan: not built yet\n"); return 1; }

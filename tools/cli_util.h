/* Helpers every fathom command shares: messages and exit codes, option
 * parsing (getopt_long), numbers, the clock, progress, and printing strings
 * from files (GGUF metadata, capture metadata, paths) safely. */
#ifndef FATHOM_CLI_UTIL_H
#define FATHOM_CLI_UTIL_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct fathom_source;

/* Exit status of every command. */
enum { CLI_OK = 0, CLI_FAILURE = 1, CLI_USAGE = 2 };

/* ---- messages ----
 * Every message goes to stderr as "fathom <cmd>: ..." where <cmd> is the
 * command main() dispatched to (cli_set_command). */
void cli_set_command(const char *name);
const char *cli_command(void);
#if defined(__GNUC__)
#define CLI_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CLI_PRINTF(a, b)
#endif
/* "fathom <cmd>: <message>" */
void cli_error(const char *fmt, ...) CLI_PRINTF(1, 2);
/* "fathom <cmd>: warning: <message>" */
void cli_warn(const char *fmt, ...) CLI_PRINTF(1, 2);
/* cli_error(), then a pointer to --help; returns CLI_USAGE. */
int cli_usage_error(const char *fmt, ...) CLI_PRINTF(1, 2);
/* A library failure: "fathom <cmd>: <what>: <message>", the library's
 * message without its internal function-name prefixes ("fathom_x: ") and
 * without `what` when the message already names it (a path); returns
 * CLI_FAILURE. `what` may be NULL. */
int cli_fail(const char *what, int status);
/* The same as cli_fail, returning CLI_USAGE (a bad method name, a bad budget). */
int cli_fail_usage(const char *what, int status);
/* "fathom <cmd>: out of memory"; returns CLI_FAILURE. */
int cli_out_of_memory(void);

/* ---- options ----
 * Each command lists its long options (and short ones in `shortopts`, which
 * cli_getopt prefixes with ':' for its own messages); "--help"/"-h" must map
 * to 'h'. Returns the option's val, -1 after the last option, or '?' after
 * printing the usage error (unknown option, missing value): the caller then
 * returns CLI_USAGE. Non-option arguments are left, in order, at
 * argv[optind..argc). */
int cli_getopt(int argc, char **argv, const char *shortopts, const struct option *longopts);
/* The option cli_getopt returned last had a bad value (optarg): "<option>
 * needs <expected>, not '<value>'" (or "bad value for <option>" when
 * expected is NULL); returns CLI_USAGE. */
int cli_bad_value(const char *expected);

/* ---- numbers ---- (false on junk, sign, overflow) */
bool cli_parse_u64(const char *s, uint64_t *out);
bool cli_parse_u32(const char *s, uint32_t *out);
/* A finite double. */
bool cli_parse_double(const char *s, double *out);
/* "16,24,32" into out[cap], each > 0; false if malformed, empty or too many. */
bool cli_parse_u32_list(const char *s, uint32_t *out, uint32_t cap, uint32_t *count);
/* "0.02,0.005" into out[cap], each in (0, 1]; false if malformed or empty. */
bool cli_parse_fractions(const char *list, double *out, uint32_t cap, uint32_t *count);
/* "1,2,3" into a malloc'd array of token ids; false if malformed or empty. */
bool cli_parse_ids(const char *list, int32_t **ids, size_t *n);

/* ---- misc ---- */
double cli_now(void); /* monotonic seconds */
/* Index of the largest x[i] (the first of ties). */
int32_t cli_argmax(const float *x, uint32_t n);
/* s as a JSON string literal (quotes, backslashes and control bytes escaped). */
void cli_print_json_string(FILE *f, const char *s);
/* s for a terminal: control bytes (C0, DEL, and C1 as UTF-8) as \xNN, so a
 * file's strings cannot move the cursor or recolour the screen. */
void cli_print_safe(FILE *f, const char *s);
/* Generated text for a terminal, written piece by piece as tokens come (a
 * token's bytes come from the GGUF): as is, but control bytes other than
 * newline, tab and carriage return as \xNN, and C1 controls (U+0080..U+009F,
 * 0xc2 0x80..0x9f in UTF-8) as \xc2\xNN also when a token boundary splits
 * them: a trailing 0xc2 is held until the next piece or cli_text_finish. */
typedef struct cli_text_out {
    FILE *f;
    bool held_c2;
} cli_text_out;
void cli_text_write(cli_text_out *t, const char *s, size_t len);
void cli_text_finish(cli_text_out *t); /* writes a held byte */
/* The whole file into a malloc'd buffer (not NUL-terminated); -1 on error. */
int cli_read_file(const char *path, char **text, size_t *len);
/* A synthetic source from a built-in preset's name or a preset file (a path
 * ending in .json, e.g. from fathom synth-fit); a fathom status. */
int cli_synth_open(struct fathom_source **out, const char *preset, uint64_t context, uint32_t positions,
                   uint64_t seed);
/* Whether a file can be created or overwritten at path (opens it for
 * appending, removes it again if it did not exist); after a message if not. */
bool cli_check_writable(const char *path);

/* ---- progress ----
 * On stderr when asked (--progress), else when stderr is a terminal and the
 * output is not --json; never with --quiet. A terminal gets one rewritten
 * line, a file or pipe a line per 10%. */
typedef enum { CLI_PROGRESS_AUTO, CLI_PROGRESS_ON, CLI_PROGRESS_OFF } cli_progress_mode;
bool cli_progress_wanted(cli_progress_mode mode, bool json);
typedef struct cli_progress {
    char label[64];
    double t0, last;
    int last_decile;
    bool tty;
} cli_progress;
void cli_progress_start(cli_progress *p, const char *label);
/* A fathom_progress_fn; user is a cli_progress. */
void cli_progress_update(void *user, uint64_t done, uint64_t total);

#endif

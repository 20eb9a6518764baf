/* Model and prompt plumbing of the model commands (generate, capture,
 * agree, needle, tokenize): where the model is, the chat template it
 * declares, prompts into token ids, decoding continuations, and the session
 * fathom agree and fathom needle set up before their runs. */
#ifndef FATHOM_CLI_SESSION_H
#define FATHOM_CLI_SESSION_H

#include "fathom.h"
#include "fathom_model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CLI_DEFAULT_MODEL "SmolLM2-135M-Instruct.Q4_1.gguf"
#define CLI_MODEL_HELP                                                                             \
    "GGUF model (default $FATHOM_MODEL, else " CLI_DEFAULT_MODEL " in the\n"                       \
    "                    installed data or the source tree's models/)"

/* --model as given; else $FATHOM_MODEL; else CLI_DEFAULT_MODEL in the
 * installed data directory (FATHOM_DATADIR/models), else in the models/
 * folder of the source tree the executable was built in (found from the
 * executable's own path, never from the current directory). NULL after a
 * message when none exists. */
const char *cli_model_path(const char *given);

/* ---- chat template ---- */
/* What fathom knows of the GGUF's tokenizer.chat_template. */
typedef struct cli_chat {
    bool declared;        /* the GGUF has a chat template */
    bool chatml;          /* ... and it is ChatML (<|im_start|>role\n...<|im_end|>\n) */
    bool known;           /* tmpl holds the template: ChatML or Gemma's as declared, or (none
                             declared) the one the vocabulary's turn tokens name */
    fathom_chat_template tmpl;
    char default_system[512]; /* the system turn the template adds when none is given ("" none) */
} cli_chat;
/* Reads the template of the GGUF at path. CLI_OK, or CLI_FAILURE after a message. */
int cli_chat_load(const char *model_path, cli_chat *chat);
/* One user message in the template, up to the assistant's turn: the system
 * turn (system, else the template's default), the user turn, the
 * assistant's opening. malloc'd; NULL after a message (an unknown or absent
 * template, out of memory). */
char *cli_chat_text(const cli_chat *chat, const char *system, const char *user, size_t user_len,
                    size_t *len);

/* ---- tokens ---- */
/* Token ids of text (special: control tokens such as <|im_start|> are cut
 * out of it); malloc'd. A fathom status. */
int cli_encode(const fathom_tokenizer *tok, const char *text, size_t len, bool special, int32_t **ids,
               size_t *n);
/* The text of ids, malloc'd and NUL-terminated; NULL on failure. */
char *cli_decode_text(const fathom_tokenizer *tok, const int32_t *ids, uint32_t n);
/* The end-of-turn tokens: the tokenizer's eos and the end of a chat turn
 * (<|im_end|>, <end_of_turn>: fathom_chat_template_for), -1 if absent. */
void cli_stop_tokens(const fathom_tokenizer *tok, int32_t *stop_a, int32_t *stop_b);

/* ---- checks (warnings on stderr) ---- */
/* A context of `tokens` beyond the model's trained window. */
void cli_check_window(const fathom_model_info *info, uint64_t tokens);
/* Selection size k of a sparse method against the visible keys n (0: not
 * known): below sink + local nothing is scanned; at or above n every key is
 * selected (dense attention). */
void cli_check_k(uint64_t k, uint64_t n, const char *what);
/* CLI_USAGE (after a message) if a method's parameter cannot run at dim. */
int cli_check_method(const fathom_method *m, uint32_t dim);
/* Whether a method reads the calibration capture (fathom-klt, ds, loki). */
bool cli_method_uses_calib(const fathom_method *m);

/* ---- decoding ---- */
/* Selection size of a budget: max(37, ceil(fraction * n)). */
uint32_t cli_budget_k(double fraction, uint64_t n);
/* Rewind ctx to prefix positions, set the attention method, then run `last`
 * and greedy tokens as decode steps: out gets up to n_tokens generated ids
 * (*produced of them; stops after stop_a or stop_b, -1 for none). stats (may
 * be NULL) gets this continuation's counters. logits is scratch [vocab]. */
int cli_continue(fathom_ctx *ctx, uint64_t prefix, int32_t last, const fathom_method *method,
                 uint32_t k, const fathom_source *calib, uint32_t n_tokens, int32_t stop_a,
                 int32_t stop_b, float *logits, uint32_t vocab, int32_t *out, uint32_t *produced,
                 fathom_ctx_stats *stats);
/* fathom_ctx_prefill of ids[0..n), with progress on stderr when
 * `progress`. A fathom status. */
int cli_prefill(fathom_ctx *ctx, const int32_t *ids, size_t n, float *logits, bool progress);

/* ---- the session of fathom agree and fathom needle ---- */
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
/* The methods and budgets, the model and its info, its tokenizer, the
 * optional calibration capture, the prompt/haystack files. CLI_OK, or
 * CLI_FAILURE / CLI_USAGE after a message, with everything opened so far
 * released. */
int cli_session_open(cli_session *s, const char *methods, const char *budgets, const char *model,
                     const char *calib, char **file_args, int n_file_args);
void cli_session_close(cli_session *s);
/* Files named by args (a directory: its regular, non-hidden files by name),
 * malloc'd; -1 (after a message) if one cannot be read or none is found. */
int cli_collect_files(char **args, int n_args, char ***files, size_t *count);

#endif

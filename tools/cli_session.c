/* Model and prompt plumbing of the model commands (cli_session.h). */
#define _XOPEN_SOURCE 700 /* realpath */
#include "cli_session.h"
#include "cli_util.h"

#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the model file ---- */

static bool is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

const char *cli_model_path(const char *given) {
    static char found[PATH_MAX];
    if (given) return given;
    const char *env = getenv("FATHOM_MODEL");
    if (env && *env) return env;
#ifdef FATHOM_DATADIR
    snprintf(found, sizeof found, "%s/models/%s", FATHOM_DATADIR, CLI_DEFAULT_MODEL);
    if (is_file(found)) return found;
#endif
    /* <source tree>/<build folder>/fathom -> <source tree>/models */
    char exe[PATH_MAX], tree[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            snprintf(slash, sizeof exe - (size_t)(slash - exe), "/..");
            if (realpath(exe, tree) && strlen(tree) + sizeof CLI_DEFAULT_MODEL + 9 < sizeof found) {
                snprintf(found, sizeof found, "%s/models/%s", tree, CLI_DEFAULT_MODEL);
                if (is_file(found)) return found;
            }
        }
    }
    cli_error("no model: give --model FILE or set FATHOM_MODEL (" CLI_DEFAULT_MODEL
              " is in neither "
#ifdef FATHOM_DATADIR
              FATHOM_DATADIR "/models nor "
#endif
              "the source tree's models/; scripts/fetch-model downloads it)");
    return NULL;
}

/* ---- chat template ---- */

/* The template text from the first "<|im_start|>system" up to its
 * "<|im_end|>", if it is a literal (no quotes or template syntax inside):
 * the system turn the template puts first when the messages have none. */
static void default_system(const char *t, char *out, size_t cap) {
    out[0] = '\0';
    const char *open = strstr(t, "<|im_start|>system");
    if (!open) return;
    const char *p = open + strlen("<|im_start|>system");
    if (p[0] == '\n') p += 1;
    else if (p[0] == '\\' && p[1] == 'n') p += 2;
    else return;
    const char *end = strstr(p, "<|im_end|>");
    if (!end || (size_t)(end - p) >= cap || strcspn(p, "'\"{}") < (size_t)(end - p)) return;
    memcpy(out, p, (size_t)(end - p));
    out[end - p] = '\0';
}

int cli_chat_load(const char *model_path, cli_chat *chat) {
    memset(chat, 0, sizeof *chat);
    fathom_gguf *gguf = NULL;
    int st = fathom_gguf_open(&gguf, model_path);
    if (st < 0) return cli_fail(model_path, st);
    const char *s = NULL;
    uint64_t len = 0;
    if (fathom_gguf_get_string(gguf, "tokenizer.chat_template", &s, &len) == FATHOM_OK && len > 0) {
        chat->declared = true;
        char *t = len < (1u << 20) ? malloc(len + 1) : NULL;
        if (t) {
            memcpy(t, s, len);
            t[len] = '\0';
            /* ChatML: every message as <|im_start|>role\n content <|im_end|>\n */
            chat->chatml = strlen(t) == len && strstr(t, "'<|im_start|>' + message['role']") &&
                           strstr(t, "message['content'] + '<|im_end|>'") &&
                           strstr(t, "<|im_start|>assistant");
            if (chat->chatml) default_system(t, chat->default_system, sizeof chat->default_system);
            /* Gemma: <start_of_turn>user\n ... <end_of_turn>\n<start_of_turn>model\n */
            const bool gemma = strlen(t) == len && strstr(t, "<start_of_turn>") &&
                               strstr(t, "<end_of_turn>") && strstr(t, "<start_of_turn>model");
            if (chat->chatml || gemma)
                chat->known = fathom_chat_template_by_name(gemma ? "gemma" : "chatml", &chat->tmpl) ==
                              FATHOM_OK;
            free(t);
        }
    } else {
        /* None declared (a conversion may drop it): the template whose turn
         * tokens the vocabulary has, if any. */
        fathom_tokenizer *tok = NULL;
        if (fathom_tokenizer_from_gguf(&tok, gguf) == FATHOM_OK)
            chat->known = fathom_chat_template_for(tok, &chat->tmpl) == FATHOM_OK;
        fathom_tokenizer_free(tok);
    }
    fathom_gguf_close(gguf);
    return CLI_OK;
}

char *cli_chat_text(const cli_chat *chat, const char *system, const char *user, size_t user_len,
                    size_t *len) {
    if (!chat->known) {
        if (!chat->declared)
            cli_error("--chat: the model declares no chat template (tokenizer.chat_template) and its "
                      "vocabulary has no known turn tokens; give the prompt as plain text instead");
        else
            cli_error("--chat: the model's chat template is neither ChatML nor Gemma's, the ones "
                      "fathom knows; give the prompt with its turns written out, without --chat");
        return NULL;
    }
    if (!system && chat->default_system[0]) system = chat->default_system;
    const size_t sys_len = system ? strlen(system) : 0;
    size_t total = 0;
    int st = fathom_chat_render(&chat->tmpl, system, sys_len, user, user_len, NULL, 0, &total);
    char *buf = st == FATHOM_OK || st == FATHOM_ERR_INVALID_ARG ? malloc(total + 1) : NULL;
    if (!buf || fathom_chat_render(&chat->tmpl, system, sys_len, user, user_len, buf, total, &total) < 0) {
        free(buf);
        cli_error("out of memory");
        return NULL;
    }
    buf[total] = '\0';
    *len = total;
    return buf;
}

/* ---- tokens ---- */

int cli_encode(const fathom_tokenizer *tok, const char *text, size_t len, bool special, int32_t **ids,
               size_t *n) {
    size_t need = 0;
    int st = fathom_tokenizer_encode(tok, text, len, special, NULL, 0, &need);
    if (st == FATHOM_ERR_INVALID_ARG && need > 0) st = FATHOM_OK; /* the size query */
    if (st < 0) return st;
    int32_t *out = malloc((need ? need : 1) * sizeof *out);
    if (!out) return FATHOM_ERR_NOMEM;
    if (need && (st = fathom_tokenizer_encode(tok, text, len, special, out, need, &need)) < 0) {
        free(out);
        return st;
    }
    *ids = out;
    *n = need;
    return FATHOM_OK;
}

char *cli_decode_text(const fathom_tokenizer *tok, const int32_t *ids, uint32_t n) {
    size_t need = 0;
    int st = fathom_tokenizer_decode(tok, ids, n, NULL, 0, &need);
    if (st < 0 && !(st == FATHOM_ERR_INVALID_ARG && need > 0)) return NULL;
    char *text = malloc(need + 1);
    if (!text) return NULL;
    if (need && fathom_tokenizer_decode(tok, ids, n, text, need, &need) < 0) {
        free(text);
        return NULL;
    }
    text[need] = '\0';
    return text;
}

void cli_stop_tokens(const fathom_tokenizer *tok, int32_t *stop_a, int32_t *stop_b) {
    *stop_a = fathom_tokenizer_eos(tok);
    *stop_b = -1;
    fathom_chat_template t;
    if (fathom_chat_template_for(tok, &t) == FATHOM_OK)
        fathom_tokenizer_find(tok, t.end_of_turn, strlen(t.end_of_turn), stop_b);
}

/* ---- checks ---- */

void cli_check_window(const fathom_model_info *info, uint64_t tokens) {
    if (info->context_length && tokens > info->context_length)
        cli_warn("%llu tokens exceed the model's trained context of %u; its output past that "
                 "is not meaningful",
                 (unsigned long long)tokens, info->context_length);
}

void cli_check_k(uint64_t k, uint64_t n, const char *what) {
    const unsigned fixed = FATHOM_SINK_TOKENS + FATHOM_LOCAL_TOKENS;
    if (k <= fixed)
        cli_warn("%s = %llu is at most sink + local = %u: no key is chosen by the method's "
                 "scores, every sparse method attends to the same keys",
                 what, (unsigned long long)k, fixed);
    else if (n && k >= n)
        cli_warn("%s = %llu is at least the %llu keys in the context: every key is selected, "
                 "so sparse attention equals dense attention",
                 what, (unsigned long long)k, (unsigned long long)n);
}

int cli_check_method(const fathom_method *m, uint32_t dim) {
    if ((m->kind == FATHOM_METHOD_FATHOM || m->kind == FATHOM_METHOD_FATHOM_KLT) &&
        (m->param < 1 || m->param > FATHOM_MAX_DEPTH * dim)) {
        cli_error("%s: the bit budget must be in [1, %u] at head dim %u", m->name,
                  FATHOM_MAX_DEPTH * dim, dim);
        return CLI_USAGE;
    }
    if ((m->kind == FATHOM_METHOD_SPARQ || m->kind == FATHOM_METHOD_DS ||
         m->kind == FATHOM_METHOD_LOKI) &&
        (m->param < 1 || m->param > dim)) {
        cli_error("%s: the channel count must be in [1, %u]", m->name, dim);
        return CLI_USAGE;
    }
    return CLI_OK;
}

bool cli_method_uses_calib(const fathom_method *m) {
    return m->kind == FATHOM_METHOD_FATHOM_KLT || m->kind == FATHOM_METHOD_DS ||
           m->kind == FATHOM_METHOD_LOKI;
}

/* ---- decoding ---- */

uint32_t cli_budget_k(double fraction, uint64_t n) {
    const double min_k = FATHOM_SINK_TOKENS + FATHOM_LOCAL_TOKENS + 1; /* one scanned winner */
    double k = ceil(fraction * (double)n - 1e-9); /* 0.02 * 2500 is 50, not 51 */
    if (k < min_k) k = min_k;
    return k > (double)UINT32_MAX ? UINT32_MAX : (uint32_t)k;
}

int cli_continue(fathom_ctx *ctx, uint64_t prefix, int32_t last, const fathom_method *method,
                 uint32_t k, const fathom_source *calib, uint32_t n_tokens, int32_t stop_a,
                 int32_t stop_b, float *logits, uint32_t vocab, int32_t *out, uint32_t *produced,
                 fathom_ctx_stats *stats) {
    int st;
    *produced = 0;
    if ((st = fathom_ctx_truncate(ctx, prefix)) < 0) return st;
    if ((st = fathom_ctx_set_attention(ctx, method, k, calib)) < 0) return st;
    fathom_ctx_stats before;
    fathom_ctx_get_stats(ctx, &before);
    int32_t token = last;
    for (uint32_t i = 0; i < n_tokens; i++) {
        if ((st = fathom_ctx_step(ctx, token, logits)) < 0) return st;
        token = cli_argmax(logits, vocab);
        out[(*produced)++] = token;
        if (token == stop_a || token == stop_b) break;
    }
    if (stats) { /* this continuation's share of the counters */
        fathom_ctx_get_stats(ctx, stats);
        stats->decode_steps -= before.decode_steps;
        stats->sparse_steps -= before.sparse_steps;
        stats->scan_bytes -= before.scan_bytes;
        stats->selected_rows -= before.selected_rows;
        stats->visible_rows -= before.visible_rows;
    }
    return FATHOM_OK;
}

int cli_prefill(fathom_ctx *ctx, const int32_t *ids, size_t n, float *logits, bool progress) {
    int st;
    cli_progress prog;
    if (progress) {
        char label[64];
        snprintf(label, sizeof label, "prefill of %zu tokens", n);
        cli_progress_start(&prog, label);
        fathom_ctx_set_progress(ctx, cli_progress_update, &prog);
    }
    st = fathom_ctx_prefill(ctx, ids, n, logits);
    if (progress) fathom_ctx_set_progress(ctx, NULL, NULL);
    return st;
}

/* ---- the session of fathom agree and fathom needle ---- */

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int cli_collect_files(char **args, int n_args, char ***files, size_t *count) {
    char **list = NULL;
    size_t n = 0, cap = 0;
    for (int a = 0; a < n_args; a++) {
        struct stat sb;
        if (stat(args[a], &sb) != 0) {
            cli_error("cannot open %s", args[a]);
            goto fail;
        }
        size_t first = n;
        DIR *dir = S_ISDIR(sb.st_mode) ? opendir(args[a]) : NULL;
        if (S_ISDIR(sb.st_mode) && !dir) {
            cli_error("cannot read directory %s", args[a]);
            goto fail;
        }
        for (struct dirent *e = dir ? readdir(dir) : NULL;; e = dir ? readdir(dir) : NULL) {
            char *path;
            if (dir) {
                if (!e) break;
                if (e->d_name[0] == '.') continue;
                size_t len = strlen(args[a]) + strlen(e->d_name) + 2;
                if (!(path = malloc(len))) break;
                snprintf(path, len, "%s/%s", args[a], e->d_name);
                struct stat fs;
                if (stat(path, &fs) != 0 || !S_ISREG(fs.st_mode)) {
                    free(path);
                    continue;
                }
            } else {
                path = strdup(args[a]);
            }
            if (!path) break;
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                char **bigger = realloc(list, cap * sizeof *list);
                if (!bigger) {
                    free(path);
                    break;
                }
                list = bigger;
            }
            list[n++] = path;
            if (!dir) break;
        }
        if (dir) {
            closedir(dir);
            if (n > first) qsort(list + first, n - first, sizeof *list, cmp_str);
        }
    }
    if (n == 0) {
        cli_error("no files found in %s%s", n_args ? args[0] : "", n_args > 1 ? " ..." : "");
        goto fail;
    }
    *files = list;
    *count = n;
    return 0;
fail:
    for (size_t i = 0; i < n; i++) free(list[i]);
    free(list);
    return -1;
}

int cli_session_open(cli_session *s, const char *methods, const char *budgets, const char *model,
                     const char *calib, char **file_args, int n_file_args) {
    int st;
    memset(s, 0, sizeof *s);
    if ((st = fathom_method_parse_list(methods, s->methods, CLI_MAX_METHODS, &s->n_methods)) < 0)
        return cli_fail_usage("--methods", st);
    if (!cli_parse_fractions(budgets, s->budgets, CLI_MAX_BUDGETS, &s->n_budgets))
        return cli_usage_error("--budgets needs fractions in (0, 1], e.g. 0.02,0.005");
    if (cli_collect_files(file_args, n_file_args, &s->files, &s->n_files) < 0) return CLI_FAILURE;
    int rc = CLI_FAILURE;
    const char *path = cli_model_path(model);
    if (!path) goto fail;
    if ((st = fathom_model_open(&s->model, path)) < 0) {
        cli_fail(path, st);
        goto fail;
    }
    fathom_model_get_info(s->model, &s->info);
    for (uint32_t m = 0; m < s->n_methods; m++)
        if ((rc = cli_check_method(&s->methods[m], s->info.head_dim)) != CLI_OK) goto fail;
    rc = CLI_FAILURE;
    if ((st = fathom_model_tokenizer(s->model, &s->tok)) < 0) {
        cli_fail("tokenizer", st);
        goto fail;
    }
    if (calib && (st = fathom_capture_open(&s->calib, calib)) < 0) {
        cli_fail(calib, st);
        goto fail;
    }
    return CLI_OK;
fail:
    cli_session_close(s);
    return rc;
}

void cli_session_close(cli_session *s) {
    for (size_t f = 0; f < s->n_files; f++) free(s->files[f]);
    free(s->files);
    fathom_source_free(s->calib);
    fathom_tokenizer_free(s->tok);
    fathom_model_free(s->model);
    memset(s, 0, sizeof *s);
}

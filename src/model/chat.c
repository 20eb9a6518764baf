/* chat — the chat templates of the models the runtime knows, recognized by
 * the control tokens of their vocabularies. */
#include "internal.h"
#include "fathom_model.h"

#include <string.h>

static const fathom_chat_template templates[] = {
    /* SmolLM2 / Qwen: ChatML */
    {"chatml", "<|im_start|>system\n", "<|im_end|>\n", "<|im_start|>user\n", "<|im_end|>\n",
     "<|im_start|>assistant\n", "<|im_end|>"},
    /* Gemma 3 (its tokenizer_config.json template): no system role; the
     * system text opens the first user turn, then a blank line. */
    {"gemma", "", "\n\n", "<start_of_turn>user\n", "<end_of_turn>\n", "<start_of_turn>model\n",
     "<end_of_turn>"},
};

/* The control-token texts a template needs: its turn opener and end_of_turn. */
static const char *const template_tokens[][2] = {
    {"<|im_start|>", "<|im_end|>"},
    {"<start_of_turn>", "<end_of_turn>"},
};

static bool has_control(const fathom_tokenizer *tok, const char *text) {
    int32_t id = -1;
    if (fathom_tokenizer_find(tok, text, strlen(text), &id) < 0 || id < 0) return false;
    return fathom_tokenizer_token_type(tok, id) == FATHOM_TOKEN_CONTROL;
}

int fathom_chat_template_for(const fathom_tokenizer *tok, fathom_chat_template *out) {
    FATHOM_CHECK_ARG(tok && out, "fathom_chat_template_for: NULL argument");
    for (size_t i = 0; i < sizeof templates / sizeof *templates; i++)
        if (has_control(tok, template_tokens[i][0]) && has_control(tok, template_tokens[i][1])) {
            *out = templates[i];
            return FATHOM_OK;
        }
    return fathom_fail(FATHOM_ERR_UNSUPPORTED,
                       "chat: the vocabulary has no known chat template's control tokens "
                       "(<|im_start|>/<|im_end|>, <start_of_turn>/<end_of_turn>)");
}

int fathom_chat_template_by_name(const char *name, fathom_chat_template *out) {
    FATHOM_CHECK_ARG(name && out, "fathom_chat_template_by_name: NULL argument");
    for (size_t i = 0; i < sizeof templates / sizeof *templates; i++)
        if (!strcmp(templates[i].name, name)) {
            *out = templates[i];
            return FATHOM_OK;
        }
    return fathom_fail(FATHOM_ERR_UNSUPPORTED, "chat: no template called \"%.40s\" (chatml, gemma)", name);
}

int fathom_chat_render(const fathom_chat_template *t, const char *system, size_t system_len,
                       const char *user, size_t user_len, char *out, size_t cap, size_t *len_out) {
    FATHOM_CHECK_ARG(t && len_out, "fathom_chat_render: NULL argument");
    FATHOM_CHECK_ARG(user || user_len == 0, "fathom_chat_render: user is NULL");
    FATHOM_CHECK_ARG(out || cap == 0, "fathom_chat_render: out is NULL with cap %zu", cap);
    const char *part[7] = {t->system_open, system, t->system_close, t->user_open, user,
                           t->user_close, t->assistant_open};
    size_t len[7] = {0, system_len, 0, 0, user_len, 0, 0};
    const bool sys = system != NULL;
    size_t total = 0;
    for (int i = 0; i < 7; i++) {
        if (i < 3 && !sys) continue;
        if (i != 1 && i != 4) len[i] = strlen(part[i]);
        FATHOM_CHECK(len[i] > SIZE_MAX - total, FATHOM_ERR_NOMEM, "fathom_chat_render: too long");
        if (len[i] && total < cap) memcpy(out + total, part[i], len[i] < cap - total ? len[i] : cap - total);
        total += len[i];
    }
    *len_out = total;
    FATHOM_CHECK(total > cap, FATHOM_ERR_INVALID_ARG,
                 "fathom_chat_render: buffer too small, need %zu bytes (cap %zu)", total, cap);
    return FATHOM_OK;
}

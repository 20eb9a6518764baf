/* Byte-level BPE tokenizer (GPT-2 family, SmolLM2), built from GGUF-style
 * vocabulary and merges. Pre-tokenization uses PCRE2 (UTF + UCP) so the
 * Unicode classes \p{L} and \p{N} come from a maintained library. The
 * vocabulary, special tokens and decoding serve the SentencePiece-style
 * tokenizer (Gemma) too, whose encoding is in tokenizer_spm.c. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "internal.h"
#include "fathom_model.h"
#include "tokenizer_internal.h"

#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ *
 * pre-tokenizers
 * ------------------------------------------------------------------ */

/* The GPT-2 split as HF tokenizers' ByteLevel writes it. llama.cpp omits the
 * final |\s+ but keeps unmatched text as pieces, which comes to the same.
 * Whitespace is spelled out as Unicode White_Space (what Oniguruma's \s is
 * in HF tokenizers) rather than PCRE2's UCP \s, which also takes U+180E. */
#define WS                                                                                   \
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}"                   \
    "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
/* clang-format off */
static const char gpt2_split_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d"
    "| ?\\p{L}+"
    "| ?\\p{N}+"
    "| ?[^" WS "\\p{L}\\p{N}]+"
    "|[" WS "]+(?![^" WS "])" /* \s+(?!\S) */
    "|[" WS "]+";
/* clang-format on */
#undef WS

typedef struct pre_tokenizer_kind {
    const char *name;
    bool split_digits; /* every \p{N} character is a piece of its own first */
} pre_tokenizer_kind;

/* llama.cpp (llama-vocab.cpp) gives all the first group the same two
 * regexes: "\p{N}" then the GPT-2 split. */
static const pre_tokenizer_kind pre_tokenizer_kinds[] = {
    {"smollm", true},    {"starcoder", true}, {"refact", true},  {"command-r", true},
    {"codeshell", true}, {"exaone", true},    {"minerva", true}, {"gpt2", false},
};

/* ------------------------------------------------------------------ *
 * the tokenizer
 * ------------------------------------------------------------------ */

/* GPT-2 bytes_to_unicode: printable Latin-1 bytes stand for themselves, the
 * other 68 take code points 256, 257, ... in byte order. */
static uint32_t byte_to_codepoint(uint8_t b) {
    if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae)) return b;
    uint32_t n = 0;
    for (uint32_t c = 0; c < b; c++)
        if (!((c >= 0x21 && c <= 0x7e) || (c >= 0xa1 && c <= 0xac) || (c >= 0xae))) n++;
    return 256 + n;
}

/* Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
 * Returns the length of the character at s[0..n) or 0 if invalid; *cp gets
 * the code point. */
size_t fathom_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    uint8_t c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len;
    uint32_t v, min;
    if ((c & 0xe0) == 0xc0) {
        len = 2, v = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
        len = 3, v = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
    *cp = v;
    return len;
}

static size_t utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    out[0] = (char)(0xe0 | (cp >> 12)); /* the byte alphabet stays below U+0144 */
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
}

static uint64_t hash_bytes(const char *s, uint64_t n) { /* FNV-1a */
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static uint64_t hash_pair(uint64_t pair) {
    pair *= 0x9e3779b97f4a7c15ull;
    return pair ^ (pair >> 31);
}

static const char *token_text(const fathom_tokenizer *tok, uint32_t id, uint64_t *len) {
    *len = tok->text_offset[id + 1] - tok->text_offset[id];
    return tok->text_arena + tok->text_offset[id];
}

int32_t fathom_tok_lookup(const fathom_tokenizer *tok, const char *s, uint64_t n) {
    for (uint64_t i = hash_bytes(s, n) & tok->vocab_mask;; i = (i + 1) & tok->vocab_mask) {
        uint32_t v = tok->vocab_slots[i];
        if (v == 0) return -1;
        uint64_t len;
        const char *t = token_text(tok, v - 1, &len);
        if (len == n && memcmp(t, s, n) == 0) return (int32_t)(v - 1);
    }
}

static const merge_slot *merge_lookup(const fathom_tokenizer *tok, int32_t left, int32_t right) {
    uint64_t pair = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    for (uint64_t i = hash_pair(pair) & tok->merge_mask;; i = (i + 1) & tok->merge_mask) {
        const merge_slot *s = &tok->merge_slots[i];
        if (s->rank == UINT32_MAX) return NULL;
        if (s->pair == pair) return s;
    }
}

/* Smallest power of two >= 2n (load factor <= 1/2). */
static uint64_t table_size(uint64_t n) {
    uint64_t size = 16;
    while (size < 2 * n) size *= 2;
    return size;
}

static bool is_special_type(uint8_t type) {
    return type == FATHOM_TOKEN_CONTROL || type == FATHOM_TOKEN_USER_DEFINED ||
           type == FATHOM_TOKEN_UNKNOWN;
}

static int compile_regex(pcre2_code **out, const char *pattern) {
    int err;
    PCRE2_SIZE where;
    pcre2_code *re =
        pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &where, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(err, msg, sizeof msg);
        return fathom_fail(FATHOM_ERR_UNSUPPORTED, "tokenizer: PCRE2 cannot compile %s: %s",
                           pattern, (const char *)msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional: the interpreter gives the same */
    *out = re;
    return FATHOM_OK;
}

void fathom_tokenizer_free(fathom_tokenizer *tok) {
    if (!tok) return;
    free(tok->text_arena);
    free(tok->text_offset);
    free(tok->piece_arena);
    free(tok->piece_offset);
    free(tok->type);
    free(tok->vocab_slots);
    free(tok->merge_slots);
    free(tok->special);
    free(tok->score);
    free(tok->spm_rank);
    pcre2_code_free(tok->split_re);
    pcre2_code_free(tok->digit_re);
    free(tok);
}

static uint64_t spec_len(const char *const *strs, const uint64_t *lens, uint64_t i) {
    return lens ? lens[i] : strlen(strs[i]);
}

/* Copy the token strings, check them, fill the string -> id table. */
static int load_tokens(fathom_tokenizer *tok, const fathom_tokenizer_spec *spec) {
    uint64_t n = spec->n_tokens, total = 0;
    for (uint64_t i = 0; i < n; i++) {
        FATHOM_CHECK_ARG(spec->tokens[i] != NULL, "tokenizer: token %llu is NULL",
                         (unsigned long long)i);
        FATHOM_CHECK(!fathom_add_u64(total, spec_len(spec->tokens, spec->token_lens, i), &total),
                     FATHOM_ERR_NOMEM, "tokenizer: token bytes overflow");
    }
    tok->text_arena = fathom_alloc_array(total, 1);
    tok->text_offset = fathom_alloc_array(n + 1, sizeof *tok->text_offset);
    tok->type = fathom_alloc_array(n, 1);
    uint64_t slots = table_size(n);
    tok->vocab_slots = fathom_calloc_array(slots, sizeof *tok->vocab_slots);
    FATHOM_CHECK(!tok->text_arena || !tok->text_offset || !tok->type || !tok->vocab_slots,
                 FATHOM_ERR_NOMEM, "tokenizer: out of memory for %llu tokens",
                 (unsigned long long)n);
    tok->vocab_mask = slots - 1;
    uint64_t at = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t len = spec_len(spec->tokens, spec->token_lens, i);
        const uint8_t *s = (const uint8_t *)spec->tokens[i];
        for (uint64_t k = 0; k < len;) {
            uint32_t cp;
            size_t step = fathom_utf8_decode(s + k, (size_t)(len - k), &cp);
            FATHOM_CHECK(step == 0, FATHOM_ERR_FORMAT,
                         "tokenizer: token %llu is not valid UTF-8 (byte %llu)",
                         (unsigned long long)i, (unsigned long long)k);
            k += step;
        }
        int32_t type = spec->token_types ? spec->token_types[i] : FATHOM_TOKEN_NORMAL;
        FATHOM_CHECK(type < FATHOM_TOKEN_NORMAL || type > FATHOM_TOKEN_BYTE, FATHOM_ERR_FORMAT,
                     "tokenizer: token %llu has unknown type %d", (unsigned long long)i, (int)type);
        tok->type[i] = (uint8_t)type;
        tok->text_offset[i] = at;
        memcpy(tok->text_arena + at, s, (size_t)len);
        at += len;
        tok->text_offset[i + 1] = at;
        tok->n_tokens = (uint32_t)(i + 1);
        if (len == 0) continue; /* never produced, never looked up */
        const char *t = tok->text_arena + tok->text_offset[i];
        FATHOM_CHECK(fathom_tok_lookup(tok, t, len) >= 0, FATHOM_ERR_FORMAT,
                     "tokenizer: token %llu duplicates token %d", (unsigned long long)i,
                     (int)fathom_tok_lookup(tok, t, len));
        uint64_t slot = hash_bytes(t, len) & tok->vocab_mask;
        while (tok->vocab_slots[slot]) slot = (slot + 1) & tok->vocab_mask;
        tok->vocab_slots[slot] = (uint32_t)i + 1;
    }
    return FATHOM_OK;
}

/* Decoded bytes of every token, so decode is a copy. A normal token maps
 * back through the byte alphabet; if it holds a character outside it, HF's
 * ByteLevel decoder keeps the token's UTF-8 as is, and so do we. */
static int alloc_pieces(fathom_tokenizer *tok) {
    uint64_t total = tok->text_offset[tok->n_tokens]; /* decoding never grows a token */
    tok->piece_arena = fathom_alloc_array(total, 1);
    tok->piece_offset = fathom_alloc_array((uint64_t)tok->n_tokens + 1, sizeof(uint64_t));
    FATHOM_CHECK(!tok->piece_arena || !tok->piece_offset, FATHOM_ERR_NOMEM,
                 "tokenizer: out of memory for decoded pieces");
    return FATHOM_OK;
}

static int build_pieces(fathom_tokenizer *tok) {
    int16_t cp_to_byte[324];
    for (int i = 0; i < 324; i++) cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) cp_to_byte[byte_to_codepoint((uint8_t)b)] = (int16_t)b;
    FATHOM_TRY(alloc_pieces(tok));
    uint64_t at = 0;
    for (uint32_t id = 0; id < tok->n_tokens; id++) {
        uint64_t len;
        const char *t = token_text(tok, id, &len);
        tok->piece_offset[id] = at;
        bool raw = is_special_type(tok->type[id]);
        uint64_t start = at;
        for (uint64_t k = 0; k < len && !raw;) {
            uint32_t cp;
            k += fathom_utf8_decode((const uint8_t *)t + k, (size_t)(len - k), &cp); /* validated */
            if (cp >= 324 || cp_to_byte[cp] < 0)
                raw = true;
            else
                tok->piece_arena[at++] = (char)cp_to_byte[cp];
        }
        if (raw) {
            memcpy(tok->piece_arena + start, t, (size_t)len);
            at = start + len;
        }
    }
    tok->piece_offset[tok->n_tokens] = at;
    return FATHOM_OK;
}

static int load_merges(fathom_tokenizer *tok, const fathom_tokenizer_spec *spec) {
    uint64_t slots = table_size(spec->n_merges);
    tok->merge_slots = fathom_alloc_array(slots, sizeof *tok->merge_slots);
    FATHOM_CHECK(!tok->merge_slots, FATHOM_ERR_NOMEM, "tokenizer: out of memory for %llu merges",
                 (unsigned long long)spec->n_merges);
    for (uint64_t i = 0; i < slots; i++) tok->merge_slots[i].rank = UINT32_MAX;
    tok->merge_mask = slots - 1;
    char *joined = NULL;
    uint64_t joined_cap = 0;
    int status = FATHOM_OK;
    for (uint64_t r = 0; r < spec->n_merges; r++) {
        if (!spec->merges[r]) {
            status = fathom_fail(FATHOM_ERR_INVALID_ARG, "tokenizer: merge %llu is NULL",
                                 (unsigned long long)r);
            break;
        }
        const char *m = spec->merges[r];
        uint64_t len = spec_len(spec->merges, spec->merge_lens, r);
        /* As llama.cpp: the separator is the first space after byte 0 (byte-level
         * tokens hold no spaces, "\u0120" stands for one). */
        const char *sep = len > 1 ? memchr(m + 1, ' ', (size_t)(len - 1)) : NULL;
        if (!sep || sep + 1 == m + len) {
            status = fathom_fail(FATHOM_ERR_FORMAT, "tokenizer: merge %llu is not \"left right\"",
                                 (unsigned long long)r);
            break;
        }
        uint64_t left_len = (uint64_t)(sep - m), right_len = len - left_len - 1;
        int32_t left = fathom_tok_lookup(tok, m, left_len);
        int32_t right = fathom_tok_lookup(tok, sep + 1, right_len);
        if (left_len + right_len > joined_cap) {
            free(joined);
            joined_cap = 2 * (left_len + right_len);
            joined = fathom_alloc_array(joined_cap, 1);
            if (!joined) {
                status = fathom_fail(FATHOM_ERR_NOMEM, "tokenizer: out of memory");
                break;
            }
        }
        memcpy(joined, m, (size_t)left_len);
        memcpy(joined + left_len, sep + 1, (size_t)right_len);
        int32_t merged = fathom_tok_lookup(tok, joined, left_len + right_len);
        if (left < 0 || right < 0 || merged < 0) {
            status =
                fathom_fail(FATHOM_ERR_FORMAT,
                            "tokenizer: merge %llu (%.*s) names a string not in the vocabulary",
                            (unsigned long long)r, (int)(len < 64 ? len : 64), m);
            break;
        }
        uint64_t pair = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
        uint64_t slot = hash_pair(pair) & tok->merge_mask;
        while (tok->merge_slots[slot].rank != UINT32_MAX && tok->merge_slots[slot].pair != pair)
            slot = (slot + 1) & tok->merge_mask;
        if (tok->merge_slots[slot].rank != UINT32_MAX) continue; /* a repeat keeps rank */
        tok->merge_slots[slot] = (merge_slot){pair, (uint32_t)r, merged};
    }
    free(joined);
    return status;
}

/* Order of the special-token table: by first byte, then longest first, so
 * the first hit at a position is the longest. */
static int special_cmp(const void *a, const void *b, void *tokp) {
    const fathom_tokenizer *tok = tokp;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint64_t lx, ly;
    const char *tx = token_text(tok, (uint32_t)x, &lx), *ty = token_text(tok, (uint32_t)y, &ly);
    if ((uint8_t)tx[0] != (uint8_t)ty[0]) return (uint8_t)tx[0] < (uint8_t)ty[0] ? -1 : 1;
    if (lx != ly) return lx > ly ? -1 : 1;
    return x < y ? -1 : (x > y);
}

static int load_special(fathom_tokenizer *tok) {
    uint32_t count = 0;
    for (uint32_t id = 0; id < tok->n_tokens; id++)
        if (is_special_type(tok->type[id]) && tok->text_offset[id + 1] > tok->text_offset[id])
            count++;
    tok->special = fathom_alloc_array(count, sizeof *tok->special);
    FATHOM_CHECK(!tok->special, FATHOM_ERR_NOMEM, "tokenizer: out of memory");
    uint32_t k = 0;
    for (uint32_t id = 0; id < tok->n_tokens; id++) {
        if (!is_special_type(tok->type[id]) || tok->text_offset[id + 1] == tok->text_offset[id])
            continue;
        tok->special[k++] = (int32_t)id;
        if (tok->type[id] == FATHOM_TOKEN_USER_DEFINED) tok->n_always_special++;
    }
    /* Insertion sort: qsort has no context argument in C11, and there are
     * few special tokens. */
    for (uint32_t i = 1; i < count; i++) {
        int32_t v = tok->special[i];
        uint32_t j = i;
        while (j > 0 && special_cmp(&tok->special[j - 1], &v, tok) > 0) {
            tok->special[j] = tok->special[j - 1];
            j--;
        }
        tok->special[j] = v;
    }
    uint32_t at = 0;
    for (uint32_t b = 0; b < 256; b++) {
        tok->special_first[b] = at;
        while (at < count && (uint8_t)tok->text_arena[tok->text_offset[tok->special[at]]] == b)
            at++;
    }
    tok->special_first[256] = count;
    return FATHOM_OK;
}

static int score_desc(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x > y ? -1 : x < y;
}

/* spm_rank[id]: how many distinct scores are higher than id's, so that the
 * BPE heap's lowest rank is SentencePiece's highest score (ties equal). */
static int spm_ranks(fathom_tokenizer *tok) {
    const uint32_t n = tok->n_tokens;
    float *sorted = fathom_alloc_array(n, sizeof *sorted);
    tok->spm_rank = fathom_alloc_array(n, sizeof *tok->spm_rank);
    if (!sorted || !tok->spm_rank) {
        free(sorted);
        return fathom_fail(FATHOM_ERR_NOMEM, "tokenizer: out of memory");
    }
    memcpy(sorted, tok->score, (size_t)n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, score_desc);
    uint32_t distinct = 0; /* unique scores, in place */
    for (uint32_t i = 0; i < n; i++)
        if (distinct == 0 || sorted[distinct - 1] != sorted[i]) sorted[distinct++] = sorted[i];
    for (uint32_t id = 0; id < n; id++) {
        uint32_t lo = 0, hi = distinct; /* first index whose score is <= id's */
        while (lo < hi) {
            const uint32_t mid = lo + (hi - lo) / 2;
            if (sorted[mid] > tok->score[id])
                lo = mid + 1;
            else
                hi = mid;
        }
        tok->spm_rank[id] = lo;
    }
    free(sorted);
    return FATHOM_OK;
}

/* SentencePiece ("llama"): scores, <0xNN> byte tokens, no merges or regex. */
static int spm_build(fathom_tokenizer *tok, const fathom_tokenizer_spec *spec) {
    FATHOM_CHECK_ARG(spec->n_merges == 0, "tokenizer_create: a \"llama\" tokenizer has no merges");
    FATHOM_TRY(load_tokens(tok, spec));
    tok->spm = true;
    tok->add_space_prefix = spec->add_space_prefix != 0;
    tok->score = fathom_alloc_array(tok->n_tokens, sizeof *tok->score);
    FATHOM_CHECK(!tok->score, FATHOM_ERR_NOMEM, "tokenizer: out of memory");
    for (uint32_t i = 0; i < tok->n_tokens; i++) {
        tok->score[i] = spec->scores ? spec->scores[i] : 0.0f;
        FATHOM_CHECK(tok->score[i] != tok->score[i], FATHOM_ERR_FORMAT, "tokenizer: score %u is NaN", i);
    }
    FATHOM_TRY(spm_ranks(tok));
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        tok->byte_token[b] = fathom_tok_lookup(tok, s, 6); /* -1: encode drops the byte */
        FATHOM_CHECK(tok->byte_token[b] >= 0 && tok->type[tok->byte_token[b]] != FATHOM_TOKEN_BYTE,
                     FATHOM_ERR_FORMAT, "tokenizer: %s is not a byte token", s);
    }
    FATHOM_TRY(alloc_pieces(tok));
    FATHOM_TRY(fathom_spm_build_pieces(tok));
    FATHOM_TRY(load_merges(tok, spec)); /* an empty table */
    FATHOM_TRY(load_special(tok));
    tok->bos_id = spec->bos_id;
    tok->eos_id = spec->eos_id;
    tok->add_bos = spec->add_bos != 0;
    return FATHOM_OK;
}

static int tokenizer_build(fathom_tokenizer *tok, const fathom_tokenizer_spec *spec) {
    if (strcmp(spec->model, "llama") == 0) return spm_build(tok, spec);
    const pre_tokenizer_kind *kind = NULL;
    for (size_t i = 0; i < sizeof pre_tokenizer_kinds / sizeof *pre_tokenizer_kinds; i++)
        if (strcmp(spec->pre, pre_tokenizer_kinds[i].name) == 0) kind = &pre_tokenizer_kinds[i];
    FATHOM_CHECK(!kind, FATHOM_ERR_UNSUPPORTED, "tokenizer: pre-tokenizer \"%.64s\" not supported",
                 spec->pre);
    FATHOM_TRY(load_tokens(tok, spec));
    for (int b = 0; b < 256; b++) {
        char s[3];
        size_t n = utf8_encode(byte_to_codepoint((uint8_t)b), s);
        tok->byte_token[b] = fathom_tok_lookup(tok, s, n); /* -1: encode drops the byte */
    }
    FATHOM_TRY(build_pieces(tok));
    FATHOM_TRY(load_merges(tok, spec));
    FATHOM_TRY(load_special(tok));
    FATHOM_TRY(compile_regex(&tok->split_re, gpt2_split_pattern));
    if (kind->split_digits) FATHOM_TRY(compile_regex(&tok->digit_re, "\\p{N}"));
    tok->bos_id = spec->bos_id;
    tok->eos_id = spec->eos_id;
    tok->add_bos = spec->add_bos != 0;
    return FATHOM_OK;
}

int fathom_tokenizer_create(fathom_tokenizer **out, const fathom_tokenizer_spec *spec) {
    FATHOM_CHECK_ARG(out != NULL, "tokenizer_create: out is NULL");
    *out = NULL;
    FATHOM_CHECK_ARG(spec != NULL, "tokenizer_create: spec is NULL");
    FATHOM_CHECK_ARG(spec->model != NULL && spec->pre != NULL,
                     "tokenizer_create: model and pre must be given");
    FATHOM_CHECK(strcmp(spec->model, "gpt2") != 0 && strcmp(spec->model, "llama") != 0,
                 FATHOM_ERR_UNSUPPORTED,
                 "tokenizer_create: model \"%.64s\" not supported (gpt2 byte-level BPE, llama "
                 "SentencePiece)",
                 spec->model);
    FATHOM_CHECK_ARG(spec->n_tokens >= 256 && spec->n_tokens <= INT32_MAX,
                     "tokenizer_create: n_tokens %llu outside [256, 2^31)",
                     (unsigned long long)spec->n_tokens);
    FATHOM_CHECK_ARG(spec->tokens != NULL, "tokenizer_create: tokens is NULL");
    FATHOM_CHECK_ARG(spec->merges != NULL || spec->n_merges == 0,
                     "tokenizer_create: merges is NULL");
    FATHOM_CHECK_ARG(spec->n_merges < UINT32_MAX, "tokenizer_create: too many merges");
    FATHOM_CHECK_ARG(spec->bos_id >= -1 && spec->bos_id < (int64_t)spec->n_tokens,
                     "tokenizer_create: bos_id %d out of range", (int)spec->bos_id);
    FATHOM_CHECK_ARG(spec->eos_id >= -1 && spec->eos_id < (int64_t)spec->n_tokens,
                     "tokenizer_create: eos_id %d out of range", (int)spec->eos_id);
    FATHOM_CHECK_ARG(!spec->add_bos || spec->bos_id >= 0,
                     "tokenizer_create: add_bos without a bos_id");
    fathom_tokenizer *tok = calloc(1, sizeof *tok);
    FATHOM_CHECK(!tok, FATHOM_ERR_NOMEM, "tokenizer_create: out of memory");
    int status = tokenizer_build(tok, spec);
    if (status < 0) {
        fathom_tokenizer_free(tok);
        return status;
    }
    *out = tok;
    return FATHOM_OK;
}

/* ------------------------------------------------------------------ *
 * encode
 * ------------------------------------------------------------------ */

void fathom_tok_emit(encoder *e, int32_t id) {
    if (e->count < e->cap) e->ids[e->count] = id;
    e->count++;
}

static bool candidate_before(const bpe_candidate *a, const bpe_candidate *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->left < b->left;
}

void fathom_tok_heap_push(encoder *e, bpe_candidate c) {
    size_t i = e->heap_len++;
    while (i > 0 && candidate_before(&c, &e->heap[(i - 1) / 2])) {
        e->heap[i] = e->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    e->heap[i] = c;
}

bpe_candidate fathom_tok_heap_pop(encoder *e) {
    bpe_candidate top = e->heap[0], last = e->heap[--e->heap_len];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= e->heap_len) break;
        if (child + 1 < e->heap_len && candidate_before(&e->heap[child + 1], &e->heap[child]))
            child++;
        if (!candidate_before(&e->heap[child], &last)) break;
        e->heap[i] = e->heap[child];
        i = child;
    }
    if (e->heap_len > 0) e->heap[i] = last;
    return top;
}

static void push_pair(encoder *e, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const merge_slot *m = merge_lookup(e->tok, e->sym_id[left], e->sym_id[right]);
    if (!m) return;
    fathom_tok_heap_push(e, (bpe_candidate){m->rank, (uint32_t)left, (uint32_t)right, e->sym_id[left],
                                 e->sym_id[right]});
}

int fathom_tok_grow_work(encoder *e, size_t n) {
    if (n <= e->work_cap) return FATHOM_OK;
    size_t cap = n < 64 ? 64 : n;
    free(e->sym_id);
    free(e->sym_prev);
    free(e->sym_next);
    free(e->heap);
    /* Every merge pushes at most two candidates: n - 1 + 2(n - 1) < 3n. */
    e->sym_id = fathom_alloc_array(cap, sizeof(int32_t));
    e->sym_prev = fathom_alloc_array(cap, sizeof(int32_t));
    e->sym_next = fathom_alloc_array(cap, sizeof(int32_t));
    e->heap = fathom_alloc_array(cap, 3 * sizeof(bpe_candidate));
    if (!e->sym_id || !e->sym_prev || !e->sym_next || !e->heap) {
        e->work_cap = 0;
        return fathom_fail(FATHOM_ERR_NOMEM, "tokenizer_encode: out of memory for a %zu-byte piece",
                           n);
    }
    e->work_cap = cap;
    return FATHOM_OK;
}

/* Byte-level BPE of one piece: start from one symbol per byte and apply the
 * lowest-ranked merge present (leftmost on ties) until none applies, the
 * order HF tokenizers and llama.cpp use. Stale heap entries are skipped by
 * checking the pair still holds the ids it was pushed with. */
static int bpe_run(encoder *e, const uint8_t *p, size_t n) {
    if (n == 0) return FATHOM_OK;
    if (n == 1) {
        if (e->tok->byte_token[p[0]] >= 0) fathom_tok_emit(e, e->tok->byte_token[p[0]]);
        return FATHOM_OK;
    }
    FATHOM_TRY(fathom_tok_grow_work(e, n));
    /* A byte without a token is left out, so its neighbours become adjacent
     * and may merge: what HF's BPE (no unk token) and llama.cpp do. */
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        if (e->tok->byte_token[p[i]] >= 0) e->sym_id[count++] = e->tok->byte_token[p[i]];
    if (count == 0) return FATHOM_OK;
    n = count;
    for (size_t i = 0; i < n; i++) {
        e->sym_prev[i] = (int32_t)i - 1;
        e->sym_next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    e->heap_len = 0;
    for (size_t i = 0; i + 1 < n; i++) push_pair(e, (int32_t)i, (int32_t)i + 1);
    while (e->heap_len > 0) {
        bpe_candidate c = fathom_tok_heap_pop(e);
        if (e->sym_id[c.left] != c.left_id || e->sym_id[c.right] != c.right_id ||
            e->sym_next[c.left] != (int32_t)c.right)
            continue;
        const merge_slot *m = merge_lookup(e->tok, c.left_id, c.right_id);
        int32_t after = e->sym_next[c.right];
        e->sym_id[c.left] = m->merged;
        e->sym_id[c.right] = -1; /* dead */
        e->sym_next[c.left] = after;
        if (after >= 0) e->sym_prev[after] = (int32_t)c.left;
        push_pair(e, e->sym_prev[c.left], (int32_t)c.left);
        push_pair(e, (int32_t)c.left, after);
    }
    for (int32_t i = 0; i >= 0; i = e->sym_next[i]) fathom_tok_emit(e, e->sym_id[i]);
    return FATHOM_OK;
}

/* A piece longer than FATHOM_TOKENIZER_MAX_PIECE bytes (a run of one
 * character class: whitespace, symbols, letters without a space) is encoded
 * in chunks of that size, cut at UTF-8 character starts, so encoding stays
 * linear in the input: one heap-ordered BPE over an 8 MiB run costs
 * O(n log n) with a heap far larger than the caches. HF tokenizers and
 * llama.cpp merge across the seams; on such pieces the ids can differ from
 * theirs (the decoded text is the same). */
static int bpe_piece(encoder *e, const uint8_t *p, size_t n) {
    while (n > FATHOM_TOKENIZER_MAX_PIECE) {
        size_t cut = FATHOM_TOKENIZER_MAX_PIECE;
        while (cut > FATHOM_TOKENIZER_MAX_PIECE - 3 && (p[cut] & 0xc0) == 0x80) cut--;
        FATHOM_TRY(bpe_run(e, p, cut));
        p += cut;
        n -= cut;
    }
    return bpe_run(e, p, n);
}

/* Split s[0..n) with the GPT-2 regex as a string of its own (lookahead ends
 * at n) and BPE each piece. PCRE2_MATCH_INVALID_UTF lets no match cover an
 * invalid byte, so the gaps between matches are exactly the invalid runs. */
static int split_and_encode(encoder *e, const uint8_t *s, size_t n) {
    size_t at = 0;
    while (at < n) {
        int rc = pcre2_match(e->tok->split_re, s, n, at, 0, e->match, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) return bpe_piece(e, s + at, n - at);
        FATHOM_CHECK(rc < 0, FATHOM_ERR_NUMERIC, "tokenizer_encode: PCRE2 match failed (%d)", rc);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->match);
        FATHOM_CHECK(ov[1] <= ov[0] || ov[0] < at || ov[1] > n, FATHOM_ERR_NUMERIC,
                     "tokenizer_encode: empty regex match");
        if (ov[0] > at) FATHOM_TRY(bpe_piece(e, s + at, ov[0] - at));
        FATHOM_TRY(bpe_piece(e, s + ov[0], ov[1] - ov[0]));
        at = ov[1];
    }
    return FATHOM_OK;
}

/* Text between special tokens: digits first (each its own piece, so the
 * GPT-2 regex sees the stretches between them as separate strings, as HF's
 * Sequence[Digits, ByteLevel] does), then the regex. */
static int encode_text(encoder *e, const uint8_t *s, size_t n) {
    if (!e->tok->digit_re) return split_and_encode(e, s, n);
    size_t at = 0;
    while (at < n) {
        int rc = pcre2_match(e->tok->digit_re, s, n, at, 0, e->match, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        FATHOM_CHECK(rc < 0, FATHOM_ERR_NUMERIC, "tokenizer_encode: PCRE2 match failed (%d)", rc);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->match);
        size_t start = ov[0], end = ov[1];
        FATHOM_CHECK(end <= start || start < at || end > n, FATHOM_ERR_NUMERIC,
                     "tokenizer_encode: empty regex match");
        FATHOM_TRY(split_and_encode(e, s + at, start - at));
        FATHOM_TRY(bpe_piece(e, s + start, end - start));
        at = end;
    }
    return split_and_encode(e, s + at, n - at);
}

/* Leftmost-longest special token in s[from..n) (HF's added-vocabulary
 * matcher). Returns its start, n if none. */
static size_t find_special(const fathom_tokenizer *tok, const uint8_t *s, size_t from, size_t n,
                           bool parse_special, int32_t *id, size_t *len) {
    for (size_t i = from; i < n; i++) {
        uint32_t lo = tok->special_first[s[i]], hi = tok->special_first[s[i] + 1];
        for (uint32_t k = lo; k < hi; k++) {
            int32_t t = tok->special[k];
            if (!parse_special && tok->type[t] != FATHOM_TOKEN_USER_DEFINED) continue;
            uint64_t tl;
            const char *tt = token_text(tok, (uint32_t)t, &tl);
            if (tl <= n - i && memcmp(tt, s + i, (size_t)tl) == 0) {
                *id = t;
                *len = (size_t)tl;
                return i;
            }
        }
    }
    return n;
}

int fathom_tokenizer_encode(const fathom_tokenizer *tok, const char *text, size_t len,
                            int parse_special, int32_t *ids, size_t cap, size_t *n_out) {
    FATHOM_CHECK_ARG(tok != NULL, "tokenizer_encode: tok is NULL");
    FATHOM_CHECK_ARG(n_out != NULL, "tokenizer_encode: n_out is NULL");
    FATHOM_CHECK_ARG(text != NULL || len == 0, "tokenizer_encode: text is NULL");
    FATHOM_CHECK_ARG(ids != NULL || cap == 0, "tokenizer_encode: ids is NULL with cap %zu", cap);
    *n_out = 0;
    FATHOM_CHECK_ARG(len <= FATHOM_TOKENIZER_MAX_INPUT,
                     "tokenizer_encode: text of %zu bytes exceeds the limit of %d MiB", len,
                     FATHOM_TOKENIZER_MAX_INPUT >> 20);
    encoder e = {.tok = tok, .ids = ids, .cap = cap};
    e.match = pcre2_match_data_create(2, NULL);
    FATHOM_CHECK(!e.match, FATHOM_ERR_NOMEM, "tokenizer_encode: out of memory");
    if (tok->add_bos) fathom_tok_emit(&e, tok->bos_id);
    const uint8_t *s = (const uint8_t *)text;
    bool specials = parse_special ? tok->special_first[256] > 0 : tok->n_always_special > 0;
    int status = FATHOM_OK;
    size_t at = 0;
    while (at < len && status == FATHOM_OK) {
        int32_t id = -1;
        size_t mlen = 0;
        size_t start =
            specials ? find_special(tok, s, at, len, parse_special != 0, &id, &mlen) : len;
        if (!tok->spm)
            status = encode_text(&e, s + at, start - at);
        else if (start > at) /* as llama.cpp: the prefix at the start and after each special token */
            status = fathom_spm_encode(&e, s + at, start - at, tok->add_space_prefix);
        if (start == len) break;
        fathom_tok_emit(&e, id);
        at = start + mlen;
    }
    pcre2_match_data_free(e.match);
    free(e.sym_id);
    free(e.sym_prev);
    free(e.sym_next);
    free(e.heap);
    fathom_spm_free_work(&e);
    if (status < 0) return status;
    *n_out = e.count;
    FATHOM_CHECK(e.count > cap, FATHOM_ERR_INVALID_ARG,
                 "tokenizer_encode: buffer too small, need %zu ids (cap %zu)", e.count, cap);
    return FATHOM_OK;
}

/* ------------------------------------------------------------------ *
 * decode and queries
 * ------------------------------------------------------------------ */

int fathom_tokenizer_decode(const fathom_tokenizer *tok, const int32_t *ids, size_t n, char *out,
                            size_t cap, size_t *len_out) {
    FATHOM_CHECK_ARG(tok != NULL, "tokenizer_decode: tok is NULL");
    FATHOM_CHECK_ARG(len_out != NULL, "tokenizer_decode: len_out is NULL");
    FATHOM_CHECK_ARG(ids != NULL || n == 0, "tokenizer_decode: ids is NULL");
    FATHOM_CHECK_ARG(out != NULL || cap == 0, "tokenizer_decode: out is NULL with cap %zu", cap);
    *len_out = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        FATHOM_CHECK_ARG(ids[i] >= 0 && (uint32_t)ids[i] < tok->n_tokens,
                         "tokenizer_decode: id %d at %zu out of range [0, %u)", (int)ids[i], i,
                         tok->n_tokens);
        const char *piece = tok->piece_arena + tok->piece_offset[ids[i]];
        size_t piece_len = (size_t)(tok->piece_offset[ids[i] + 1] - tok->piece_offset[ids[i]]);
        FATHOM_CHECK(piece_len > SIZE_MAX - total, FATHOM_ERR_NOMEM,
                     "tokenizer_decode: length overflows");
        if (total < cap)
            memcpy(out + total, piece, piece_len < cap - total ? piece_len : cap - total);
        total += piece_len;
    }
    *len_out = total;
    FATHOM_CHECK(total > cap, FATHOM_ERR_INVALID_ARG,
                 "tokenizer_decode: buffer too small, need %zu bytes (cap %zu)", total, cap);
    return FATHOM_OK;
}

int fathom_tokenizer_token_to_piece(const fathom_tokenizer *tok, int32_t id, char *out, size_t cap,
                                    size_t *len_out) {
    FATHOM_CHECK_ARG(tok != NULL, "tokenizer_token_to_piece: tok is NULL");
    return fathom_tokenizer_decode(tok, &id, 1, out, cap, len_out);
}

int fathom_tokenizer_find(const fathom_tokenizer *tok, const char *text, size_t len, int32_t *id) {
    FATHOM_CHECK_ARG(tok != NULL && id != NULL, "tokenizer_find: tok or id is NULL");
    FATHOM_CHECK_ARG(text != NULL || len == 0, "tokenizer_find: text is NULL");
    *id = len ? fathom_tok_lookup(tok, text, len) : -1;
    return FATHOM_OK;
}

uint32_t fathom_tokenizer_vocab_size(const fathom_tokenizer *tok) {
    return tok ? tok->n_tokens : 0;
}
int32_t fathom_tokenizer_bos(const fathom_tokenizer *tok) { return tok ? tok->bos_id : -1; }
int32_t fathom_tokenizer_eos(const fathom_tokenizer *tok) { return tok ? tok->eos_id : -1; }

int fathom_tokenizer_token_type(const fathom_tokenizer *tok, int32_t id) {
    FATHOM_CHECK_ARG(tok != NULL, "tokenizer_token_type: tok is NULL");
    FATHOM_CHECK_ARG(id >= 0 && (uint32_t)id < tok->n_tokens,
                     "tokenizer_token_type: id %d out of range [0, %u)", (int)id, tok->n_tokens);
    return tok->type[id];
}

/* SentencePiece-style tokenizer (GGUF tokenizer model "llama": Gemma,
 * Llama 2), the encoding of text between special tokens as llama.cpp's
 * llm_tokenizer_spm and SentencePiece's BPE model do it, and the decoded
 * bytes of its tokens. The vocabulary and special tokens are tokenizer.c's. */
#include "internal.h"
#include "tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

/* U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's visible space */
static const char SPM_SPACE[] = "\xe2\x96\x81";

typedef struct spm_symbol {
    uint64_t start; /* into the escaped text */
    uint64_t len;   /* 0: merged into its left neighbour */
    int64_t prev, next;
} spm_symbol;

typedef struct spm_work {
    char *text;      /* [cap] the escaped text */
    spm_symbol *sym; /* [cap] */
} spm_work;

/* Queue left+right if their concatenation is a token, in the BPE heap with
 * the token's score rank (the highest score first, the leftmost on ties, as
 * llama.cpp's llm_bigram_spm::comparator); the candidate keeps the two
 * lengths, so an entry whose symbols have grown since is stale. Symbols are
 * characters or tokens, far shorter than 2^31 bytes. */
static void try_bigram(encoder *e, spm_work *w, int64_t left, int64_t right) {
    if (left < 0 || right < 0) return;
    const spm_symbol *l = &w->sym[left], *r = &w->sym[right];
    const int32_t id = fathom_tok_lookup(e->tok, w->text + l->start, l->len + r->len);
    if (id < 0) return;
    fathom_tok_heap_push(e, (bpe_candidate){e->tok->spm_rank[id], (uint32_t)left, (uint32_t)right,
                                            (int32_t)l->len, (int32_t)r->len});
}

static int grow(encoder *e, size_t n) {
    if (n <= e->spm_cap) return FATHOM_OK;
    spm_work *w = e->spm_work;
    if (!w) {
        w = calloc(1, sizeof *w);
        FATHOM_CHECK(!w, FATHOM_ERR_NOMEM, "tokenizer_encode: out of memory");
        e->spm_work = w;
    }
    free(w->text);
    free(w->sym);
    e->spm_cap = 0;
    w->text = fathom_alloc_array(n, 1);
    w->sym = fathom_alloc_array(n, sizeof *w->sym);
    FATHOM_CHECK(!w->text || !w->sym, FATHOM_ERR_NOMEM,
                 "tokenizer_encode: out of memory for %zu bytes of text", n);
    e->spm_cap = n;
    return FATHOM_OK;
}

void fathom_spm_free_work(encoder *e) {
    spm_work *w = e->spm_work;
    if (!w) return;
    free(w->text);
    free(w->sym);
    free(w);
    e->spm_work = NULL;
    e->spm_cap = 0;
}

int fathom_spm_encode(encoder *e, const uint8_t *s, size_t n, bool space_prefix) {
    const fathom_tokenizer *tok = e->tok;
    /* escaped: every byte at most 3 */
    FATHOM_CHECK(n > (SIZE_MAX - 3) / 3, FATHOM_ERR_NOMEM, "tokenizer_encode: text too long");
    FATHOM_TRY(grow(e, 3 * n + 3));
    spm_work *w = e->spm_work;
    size_t len = 0;
    if (space_prefix) {
        memcpy(w->text, SPM_SPACE, 3);
        len = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(w->text + len, SPM_SPACE, 3);
            len += 3;
        } else {
            w->text[len++] = (char)s[i];
        }
    }
    /* one symbol per character; a byte of invalid UTF-8 is one of its own */
    int64_t count = 0;
    for (size_t at = 0; at < len;) {
        uint32_t cp;
        size_t step = fathom_utf8_decode((const uint8_t *)w->text + at, len - at, &cp);
        if (step == 0) step = 1;
        w->sym[count] = (spm_symbol){at, step, count - 1, -1};
        if (count > 0) w->sym[count - 1].next = count;
        count++;
        at += step;
    }
    if (count == 0) return FATHOM_OK;
    FATHOM_CHECK(count > UINT32_MAX, FATHOM_ERR_NOMEM, "tokenizer_encode: text too long");
    FATHOM_TRY(fathom_tok_grow_work(e, (size_t)count));
    e->heap_len = 0;
    for (int64_t i = 1; i < count; i++) try_bigram(e, w, i - 1, i);
    while (e->heap_len > 0) {
        const bpe_candidate b = fathom_tok_heap_pop(e);
        spm_symbol *l = &w->sym[b.left], *r = &w->sym[b.right];
        if (l->len != (uint64_t)b.left_id || r->len != (uint64_t)b.right_id) continue; /* stale */
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0) w->sym[r->next].prev = b.left;
        try_bigram(e, w, l->prev, b.left);
        try_bigram(e, w, b.left, l->next);
    }
    for (int64_t i = 0; i >= 0; i = w->sym[i].next) {
        const spm_symbol *y = &w->sym[i];
        const int32_t id = fathom_tok_lookup(tok, w->text + y->start, y->len);
        if (id >= 0) {
            fathom_tok_emit(e, id);
            continue;
        }
        /* Only single characters can be no token (every merge makes one):
         * byte fallback. A byte without a <0xNN> token is dropped. */
        for (uint64_t k = 0; k < y->len; k++) {
            const int32_t b = tok->byte_token[(uint8_t)w->text[y->start + k]];
            if (b >= 0) fathom_tok_emit(e, b);
        }
    }
    return FATHOM_OK;
}

/* "<0xNN>" -> NN, or -1. */
static int byte_value(const char *t, uint64_t len) {
    if (len != 6 || memcmp(t, "<0x", 3) != 0 || t[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = t[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

int fathom_spm_build_pieces(fathom_tokenizer *tok) {
    uint64_t at = 0; /* the arena holds the token strings' total: decoding never grows a token */
    for (uint32_t id = 0; id < tok->n_tokens; id++) {
        const uint64_t len = tok->text_offset[id + 1] - tok->text_offset[id];
        const char *t = tok->text_arena + tok->text_offset[id];
        tok->piece_offset[id] = at;
        const int byte = tok->type[id] == FATHOM_TOKEN_BYTE ? byte_value(t, len) : -1;
        if (tok->type[id] == FATHOM_TOKEN_BYTE)
            FATHOM_CHECK(byte < 0, FATHOM_ERR_FORMAT, "tokenizer: byte token %u is not <0xNN>", id);
        if (byte >= 0) {
            tok->piece_arena[at++] = (char)byte;
        } else if (tok->type[id] != FATHOM_TOKEN_NORMAL) { /* control, user-defined, unknown, unused */
            memcpy(tok->piece_arena + at, t, (size_t)len);
            at += len;
        } else {
            for (uint64_t k = 0; k < len;) {
                if (len - k >= 3 && memcmp(t + k, SPM_SPACE, 3) == 0) {
                    tok->piece_arena[at++] = ' ';
                    k += 3;
                } else {
                    tok->piece_arena[at++] = t[k++];
                }
            }
        }
    }
    tok->piece_offset[tok->n_tokens] = at;
    return FATHOM_OK;
}

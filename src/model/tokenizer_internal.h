/* Internals shared by the tokenizer's files: tokenizer.c (vocabulary,
 * special tokens, byte-level BPE, decode) and tokenizer_spm.c
 * (SentencePiece-style encoding for GGUF tokenizer model "llama"). */
#ifndef FATHOM_TOKENIZER_INTERNAL_H
#define FATHOM_TOKENIZER_INTERNAL_H

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include "fathom_model.h"

#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct merge_slot {
    uint64_t pair;  /* left id << 32 | right id */
    uint32_t rank;  /* UINT32_MAX: empty slot */
    int32_t merged; /* id of left+right */
} merge_slot;

struct fathom_tokenizer {
    uint32_t n_tokens;
    char *text_arena;       /* all token strings, back to back */
    uint64_t *text_offset;  /* [n_tokens + 1] */
    char *piece_arena;      /* decoded bytes of every token */
    uint64_t *piece_offset; /* [n_tokens + 1] */
    uint8_t *type;          /* [n_tokens] fathom_token_type */

    uint32_t *vocab_slots; /* token string -> id + 1 (0: empty), open addressing */
    uint64_t vocab_mask;
    merge_slot *merge_slots; /* (left, right) -> rank, merged id */
    uint64_t merge_mask;

    int32_t byte_token[256]; /* the token of each single byte */

    /* Special tokens sorted by first byte; bucket b is
     * special[special_first[b] .. special_first[b+1]). */
    int32_t *special;
    uint32_t special_first[257];
    uint32_t n_always_special; /* user-defined: matched even without parse_special */

    pcre2_code *split_re;
    pcre2_code *digit_re; /* NULL unless the pre-tokenizer isolates digits */

    int32_t bos_id, eos_id;
    bool add_bos;

    /* SentencePiece ("llama"): merges by score, byte fallback */
    bool spm;
    bool add_space_prefix; /* a space before text that starts the input or follows a special token */
    float *score;          /* [n_tokens] */
    uint32_t *spm_rank;    /* [n_tokens] the score's rank, highest first (ties share one) */
};

typedef struct bpe_candidate {
    uint32_t rank;
    uint32_t left; /* symbol positions */
    uint32_t right;
    int32_t left_id, right_id; /* what the symbols held when pushed */
} bpe_candidate;

typedef struct encoder {
    const fathom_tokenizer *tok;
    int32_t *ids;
    size_t cap;
    size_t count;
    pcre2_match_data *match;
    /* BPE work, grown to the longest piece */
    size_t work_cap;
    int32_t *sym_id, *sym_prev, *sym_next;
    bpe_candidate *heap;
    size_t heap_len;
    /* SentencePiece work (tokenizer_spm.c), grown to the longest text */
    void *spm_work;
    size_t spm_cap;
} encoder;

/* The id of the token whose string is s[0..n), or -1. */
int32_t fathom_tok_lookup(const fathom_tokenizer *tok, const char *s, uint64_t n);
/* Append id to the encoder's output (counted even past its capacity). */
void fathom_tok_emit(encoder *e, int32_t id);
/* The BPE merge queue (e->heap): the lowest rank first, then the leftmost;
 * fathom_tok_grow_work sizes it (and the symbol arrays) for n symbols. */
void fathom_tok_heap_push(encoder *e, bpe_candidate c);
bpe_candidate fathom_tok_heap_pop(encoder *e);
int fathom_tok_grow_work(encoder *e, size_t n);
/* Strict UTF-8: the length of the character at s[0..n) (*cp its code
 * point), 0 if invalid. */
size_t fathom_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);

/* SentencePiece BPE encoding of text between special tokens, as llama.cpp's
 * llm_tokenizer_spm: spaces become U+2581 (after a leading one when
 * space_prefix), one symbol per UTF-8 character (per byte where the text is
 * not valid UTF-8), then the adjacent pair whose concatenation is the
 * highest-scored token merges first (leftmost on ties); a symbol that is no
 * token is emitted as its bytes' <0xNN> tokens. */
int fathom_spm_encode(encoder *e, const uint8_t *s, size_t n, bool space_prefix);
void fathom_spm_free_work(encoder *e);
/* Decoded bytes of every token of a SentencePiece vocabulary into
 * tok->piece_arena / piece_offset (allocated by the caller): U+2581 -> space, <0xNN> byte tokens ->
 * the byte, special tokens verbatim. */
int fathom_spm_build_pieces(fathom_tokenizer *tok);

#endif /* FATHOM_TOKENIZER_INTERNAL_H */

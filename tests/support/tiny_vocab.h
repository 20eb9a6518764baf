/* A tiny hand-built byte-level BPE vocabulary, shared by test_tokenizer.c
 * (whose expected encodings are worked out by hand against it) and
 * fuzz/fuzz_tokenizer.c. Header-only: every function is static. */
#ifndef FATHOM_TINY_VOCAB_H
#define FATHOM_TINY_VOCAB_H

#include "fathom_model.h"

#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------------ *
 * the test vocabulary
 *   0 <|endoftext|>  1 <|im_start|>  2 <|im_end|>   (control)
 *   3 <user>                                        (user-defined)
 *   4 .. 259  the byte tokens, byte b at id 4 + (255 - b)
 *   260 ..    the merge results, in merge order
 *   then <|im (control, a prefix of 1 and 2), an empty token, "ü→"
 * ------------------------------------------------------------------ */

#define N_BASE 260
static const char *merge_list[] = {
    "e l",               /* 260 el    rank 0: beats "h e" although it is further right */
    "h e",               /* 261 he */
    "l l",               /* 262 ll */
    "h el",              /* 263 hel */
    "hel l",             /* 264 hell */
    "hell o",            /* 265 hello */
    "\xc4\xa0 w",        /* 266 Ġw */
    "o r",               /* 267 or */
    "\xc4\xa0w or",      /* 268 Ġwor */
    "a a",               /* 269 aa */
    "\xc4\xa0 \xc4\xa0", /* 270 ĠĠ */
    "1 2",               /* 271 12 (only the gpt2 split keeps digits together) */
    "' s",               /* 272 's */
    "\xc3\x83 \xc2\xa9", /* 273 Ã© = é (bytes c3 a9) */
};
#define N_MERGES (sizeof merge_list / sizeof *merge_list)
enum { EL = 260, HE, LL, HEL, HELL, HELLO, G_W, OR, G_WOR, AA, GG, TWELVE, APOS_S, E_ACUTE };
enum { TOK_IM = N_BASE + N_MERGES, TOK_EMPTY, TOK_ODD, N_TOKENS };

static int32_t B(uint8_t b) { return 4 + (255 - b); }

/* GPT-2's bytes_to_unicode written as in the original Python: the printable
 * bytes first, then the rest numbered from 256. */
static uint32_t byte_char[256];
static void init_byte_chars(void) {
    int printable[256] = {0};
    for (int b = '!'; b <= '~'; b++) printable[b] = 1;
    for (int b = 0xa1; b <= 0xac; b++) printable[b] = 1;
    for (int b = 0xae; b <= 0xff; b++) printable[b] = 1;
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) byte_char[b] = printable[b] ? (uint32_t)b : next++;
}

typedef struct vocab {
    char *tokens[N_TOKENS];
    uint64_t lens[N_TOKENS];
    int32_t types[N_TOKENS];
    char storage[N_TOKENS][32];
} vocab;

static void set_token(vocab *v, int id, const char *s, size_t len, int32_t type) {
    memcpy(v->storage[id], s, len);
    v->tokens[id] = v->storage[id];
    v->lens[id] = len;
    v->types[id] = type;
}

/* Concatenate the two sides of a merge to get the merged token. */
static void build_vocab(vocab *v) {
    init_byte_chars();
    set_token(v, 0, "<|endoftext|>", 13, FATHOM_TOKEN_CONTROL);
    set_token(v, 1, "<|im_start|>", 12, FATHOM_TOKEN_CONTROL);
    set_token(v, 2, "<|im_end|>", 10, FATHOM_TOKEN_CONTROL);
    set_token(v, 3, "<user>", 6, FATHOM_TOKEN_USER_DEFINED);
    for (int b = 0; b < 256; b++) {
        uint32_t c = byte_char[b];
        char s[2];
        size_t n = 1;
        if (c < 0x80) {
            s[0] = (char)c;
        } else {
            s[0] = (char)(0xc0 | (c >> 6));
            s[1] = (char)(0x80 | (c & 0x3f));
            n = 2;
        }
        set_token(v, B((uint8_t)b), s, n, FATHOM_TOKEN_NORMAL);
    }
    for (size_t m = 0; m < N_MERGES; m++) {
        char joined[32];
        size_t k = 0;
        for (const char *p = merge_list[m]; *p; p++)
            if (*p != ' ') joined[k++] = *p;
        set_token(v, (int)(N_BASE + m), joined, k, FATHOM_TOKEN_NORMAL);
    }
    set_token(v, TOK_IM, "<|im", 4, FATHOM_TOKEN_CONTROL);
    set_token(v, TOK_EMPTY, "", 0, FATHOM_TOKEN_NORMAL);
    set_token(v, TOK_ODD, "\xc3\xbc\xe2\x86\x92", 5, FATHOM_TOKEN_NORMAL); /* ü→ */
}

static fathom_tokenizer_spec make_spec(vocab *v, const char *pre) {
    return (fathom_tokenizer_spec){.model = "gpt2",
                                   .pre = pre,
                                   .n_tokens = N_TOKENS,
                                   .tokens = (const char *const *)v->tokens,
                                   .token_lens = v->lens,
                                   .token_types = v->types,
                                   .n_merges = N_MERGES,
                                   .merges = merge_list,
                                   .merge_lens = NULL,
                                   .bos_id = 0,
                                   .eos_id = 2,
                                   .add_bos = 0};
}

#endif

/* Byte-level BPE on a tiny hand-built vocabulary whose encodings are worked
 * out by hand below; special tokens; bytes outside UTF-8; round trips of
 * random bytes; every bad argument. The real SmolLM2 vocabulary is checked
 * against HF tokenizers by test_tokenizer_model.sh. */
#include "check.h"
#include "fathom_model.h"
#include "tiny_vocab.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Encode and compare with want[n_want]. */
static int encodes_to(const fathom_tokenizer *tok, const char *text, size_t len, int special,
                      const int32_t *want, size_t n_want) {
    int32_t ids[256];
    size_t n = 0;
    int st = fathom_tokenizer_encode(tok, text, len, special, ids, 256, &n);
    int same = st == FATHOM_OK && n == n_want && memcmp(ids, want, n * sizeof *ids) == 0;
    if (!same) {
        fprintf(stderr, "  encode \"%.*s\": status %d, got", (int)len, text, st);
        for (size_t i = 0; i < n && i < 256; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
    }
    return same;
}
#define ENCODES(tok, text, special, ...)                                                           \
    do {                                                                                           \
        const int32_t want_[] = {__VA_ARGS__};                                                     \
        CHECK(encodes_to(tok, text, sizeof(text) - 1, special, want_,                              \
                         sizeof want_ / sizeof *want_));                                           \
    } while (0)

/* The byte tokens of a string, one per byte. */
static size_t byte_ids(const char *s, int32_t *out) {
    size_t n = strlen(s);
    for (size_t i = 0; i < n; i++) out[i] = B((uint8_t)s[i]);
    return n;
}

static int round_trips(const fathom_tokenizer *tok, const char *text, size_t len, int special) {
    size_t n = 0, out_len = 0;
    int32_t *ids = malloc((len + 2) * sizeof *ids);
    char *out = malloc(len + 1);
    int ok = fathom_tokenizer_encode(tok, text, len, special, ids, len + 2, &n) == FATHOM_OK &&
             fathom_tokenizer_decode(tok, ids, n, out, len + 1, &out_len) == FATHOM_OK &&
             out_len == len && memcmp(out, text, len) == 0 && n <= len;
    free(ids);
    free(out);
    return ok;
}

/* SentencePiece ("llama"): 256 byte tokens <0x00>..<0xFF> (ids 0..255),
 * then the pieces below with their scores; control <s> and user-defined
 * "\n\n". "\xe2\x96\x81" is U+2581, the escaped space. */
static void test_spm(void) {
    enum { SPM_N = 256 + 9 };
    static const char *const extra[] = {"<s>",  "\n\n", "a",  "b", "ab",
                                        "\xe2\x96\x81", "\xe2\x96\x81" "a", "\xe2\x96\x81" "ab", "ba"};
    static const float extra_score[] = {0, 0, -1, -2, -3, -4, -5, -0.5f, -3};
    static const int32_t extra_type[] = {FATHOM_TOKEN_CONTROL, FATHOM_TOKEN_USER_DEFINED, 1, 1, 1, 1, 1, 1, 1};
    enum { S_BOS = 256, S_NN, S_A, S_B, S_AB, S_SP, S_SPA, S_SPAB, S_BA };
    static char bytes[256][8];
    const char *tokens[SPM_N];
    int32_t types[SPM_N];
    float scores[SPM_N];
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        tokens[b] = bytes[b];
        types[b] = FATHOM_TOKEN_BYTE;
        scores[b] = 0;
    }
    for (int i = 0; i < 9; i++) {
        tokens[256 + i] = extra[i];
        types[256 + i] = extra_type[i];
        scores[256 + i] = extra_score[i];
    }
    fathom_tokenizer_spec spec = {.model = "llama", .pre = "default", .n_tokens = SPM_N,
                                  .tokens = tokens, .token_types = types, .scores = scores,
                                  .bos_id = S_BOS, .eos_id = -1, .add_bos = 1};
    fathom_tokenizer *t = NULL;
    CHECK_OK(fathom_tokenizer_create(&t, &spec));
    if (!t) return;
    /* " ab": the pairs (U+2581, a) -5 and (a, b) -3: ab first, then U+2581 + ab */
    ENCODES(t, " ab", 0, S_BOS, S_SPAB);
    ENCODES(t, "ab", 0, S_BOS, S_AB);
    ENCODES(t, "aba", 0, S_BOS, S_AB, S_A); /* ab -3 and ba -3 tie: the left one */
    ENCODES(t, " a", 0, S_BOS, S_SPA);
    ENCODES(t, "c", 0, S_BOS, 'c');                  /* byte fallback */
    ENCODES(t, "\xc3\xa9", 0, S_BOS, 0xc3, 0xa9);     /* per byte of the character */
    ENCODES(t, "a\xff" "b", 0, S_BOS, S_A, 0xff, S_B); /* invalid UTF-8: a byte symbol */
    ENCODES(t, "a\n\nb", 0, S_BOS, S_A, S_NN, S_B); /* user-defined: always cut out */
    ENCODES(t, "<s>a", 1, S_BOS, S_BOS, S_A);
    ENCODES(t, "<s>", 0, S_BOS, '<', 's', '>');
    {
        fathom_chat_template ct;
        CHECK_STATUS(fathom_chat_template_for(t, &ct), FATHOM_ERR_UNSUPPORTED); /* no turn tokens */
    }
    {
        const int32_t ids[] = {S_SPAB, 'c', S_BOS, 0xc3, 0xa9, S_NN};
        char out[64];
        size_t len = 0;
        CHECK_OK(fathom_tokenizer_decode(t, ids, 6, out, sizeof out, &len));
        CHECK(len == 11 && memcmp(out, " abc<s>\xc3\xa9\n\n", 11) == 0);
    }
    fathom_tokenizer_free(t);
    spec.add_space_prefix = 1; /* before the text and after each special token */
    spec.add_bos = 0;
    CHECK_OK(fathom_tokenizer_create(&t, &spec));
    if (t) ENCODES(t, "ab<s>a", 1, S_SPAB, S_BOS, S_SPA);
    fathom_tokenizer_free(t);
    types[0x41] = FATHOM_TOKEN_NORMAL; /* "<0x41>" must be a byte token */
    t = NULL;
    CHECK_STATUS(fathom_tokenizer_create(&t, &spec), FATHOM_ERR_FORMAT);
    CHECK(t == NULL);
}

int main(void) {
    vocab v;
    build_vocab(&v);
    fathom_tokenizer_spec spec = make_spec(&v, "smollm");
    fathom_tokenizer *tok = NULL, *gpt2 = NULL;
    CHECK_OK(fathom_tokenizer_create(&tok, &spec));
    spec.pre = "gpt2";
    CHECK_OK(fathom_tokenizer_create(&gpt2, &spec));
    if (!tok || !gpt2) return check_summary("test_tokenizer");

    /* --- BPE: merges by rank, ties to the left --- */
    ENCODES(tok, "hello", 0, HELLO); /* el first, then hel, hell */
    ENCODES(tok, "hel", 0, HEL);
    ENCODES(tok, "he", 0, HE);
    ENCODES(tok, "Hello", 0, B('H'), EL, B('l'), B('o')); /* no "H el", no "el l" */
    ENCODES(tok, "aaaaa", 0, AA, AA, B('a'));             /* leftmost first */
    ENCODES(tok, " world", 0, G_WOR, B('l'), B('d'));
    ENCODES(tok, "Hello world", 0, B('H'), EL, B('l'), B('o'), G_WOR, B('l'), B('d'));
    ENCODES(tok, "caf\xc3\xa9", 0, B('c'), B('a'), B('f'), E_ACUTE);
    ENCODES(tok, "x", 0, B('x'));
    {
        int32_t none[1];
        size_t n = 99;
        CHECK_OK(fathom_tokenizer_encode(tok, "", 0, 1, none, 1, &n));
        CHECK(n == 0);
        CHECK_OK(fathom_tokenizer_encode(tok, NULL, 0, 0, NULL, 0, &n));
        CHECK(n == 0);
    }

    /* --- the split --- */
    ENCODES(tok, "it's", 0, B('i'), B('t'), APOS_S);               /* 's is a piece */
    ENCODES(tok, "a    b", 0, B('a'), GG, B(' '), B(' '), B('b')); /* "   " then " b" */
    ENCODES(tok, "a  ", 0, B('a'), GG);                            /* trailing run whole */
    ENCODES(tok, "hello\n\n  world", 0, HELLO, B('\n'), B('\n'), B(' '), G_WOR, B('l'), B('d'));
    ENCODES(tok, "hello!!", 0, HELLO, B('!'), B('!'));
    /* digits: smollm isolates each, gpt2 keeps " 12" together */
    ENCODES(tok, "12", 0, B('1'), B('2'));
    ENCODES(tok, " 12", 0, B(' '), B('1'), B('2'));
    ENCODES(gpt2, "12", 0, TWELVE);
    ENCODES(gpt2, " 12", 0, B(' '), TWELVE);
    /* Arabic-Indic digit 3 (d9 a3) is \p{N}: its own piece, away from "a" */
    ENCODES(tok, "a\xd9\xa3", 0, B('a'), B(0xd9), B(0xa3));
    /* "a  1": the run before the digit ends its string, so it stays whole */
    ENCODES(tok, "a  1", 0, B('a'), GG, B('1'));
    ENCODES(gpt2, "a  1", 0, B('a'), B(' '), B(' '), B('1'));

    /* --- special tokens --- */
    {
        int32_t want[64];
        size_t n = byte_ids("<|im_start|>", want);
        want[n++] = HELLO;
        n += byte_ids("<|im_end|>", want + n);
        const char *chat = "<|im_start|>hello<|im_end|>";
        CHECK(encodes_to(tok, chat, strlen(chat), 0, want, n)); /* off: plain text */
        int32_t on[] = {1, HELLO, 2};
        CHECK(encodes_to(tok, chat, strlen(chat), 1, on, 3));
    }
    ENCODES(tok, "<|im_x", 1, TOK_IM, B('_'), B('x')); /* longest wins, prefix too */
    ENCODES(tok, "<|im_start|><|im_start|>", 1, 1, 1);
    ENCODES(tok, "<|im_end|", 1, TOK_IM, B('_'), B('e'), B('n'), B('d'), B('|'));
    ENCODES(tok, "<|<|endoftext|>", 1, B('<'), B('|'), 0);
    ENCODES(tok, "a<user>b", 0, B('a'), 3, B('b')); /* user-defined: always */
    ENCODES(tok, "a<user>b", 1, B('a'), 3, B('b'));
    ENCODES(tok, " <|im_end|> ", 1, B(' '), 2, B(' '));

    /* --- bytes that are not UTF-8 go through byte-level --- */
    ENCODES(tok, "\xff\xfe", 0, B(0xff), B(0xfe));
    ENCODES(tok, "a\xc3(aa", 0, B('a'), B(0xc3), B('('), AA);
    ENCODES(tok, "aa\x80\x80 aa", 0, AA, B(0x80), B(0x80), B(' '), AA);
    ENCODES(tok, "\xed\xa0\x80", 0, B(0xed), B(0xa0), B(0x80)); /* a surrogate */
    ENCODES(tok, "\0hello", 0, B(0), HELLO);

    /* --- bos --- */
    {
        fathom_tokenizer_spec with_bos = make_spec(&v, "smollm");
        with_bos.add_bos = 1;
        fathom_tokenizer *b = NULL;
        CHECK_OK(fathom_tokenizer_create(&b, &with_bos));
        if (b) {
            ENCODES(b, "hello", 0, 0, HELLO);
            ENCODES(b, "", 0, 0);
        }
        fathom_tokenizer_free(b);
    }

    /* --- a byte with no token is dropped (HF without unk, llama.cpp) --- */
    {
        vocab w = v;
        for (int i = 0; i < N_TOKENS; i++) w.tokens[i] = w.storage[i];
        set_token(&w, B(0x04), "zz", 2, FATHOM_TOKEN_NORMAL);
        fathom_tokenizer_spec lacking = make_spec(&w, "smollm");
        fathom_tokenizer *d = NULL;
        CHECK_OK(fathom_tokenizer_create(&d, &lacking));
        if (d) {
            ENCODES(d,
                    "a\x04"
                    "a",
                    0, B('a'), B('a'));
            ENCODES(d,
                    "(\x04"
                    "aa",
                    0, B('('), AA);
            size_t n = 7;
            CHECK_OK(fathom_tokenizer_encode(d, "\x04\x04", 2, 0, NULL, 0, &n));
            CHECK(n == 0);
        }
        fathom_tokenizer_free(d);
    }

    /* --- decode --- */
    {
        char out[64];
        size_t len = 0;
        int32_t ids[] = {1, HELLO, G_WOR, B('l'), B('d'), E_ACUTE, 2};
        CHECK_OK(fathom_tokenizer_decode(tok, ids, 7, out, sizeof out, &len));
        const char *want = "<|im_start|>hello world\xc3\xa9<|im_end|>";
        CHECK(len == strlen(want) && memcmp(out, want, len) == 0);
        CHECK_OK(fathom_tokenizer_token_to_piece(tok, GG, out, sizeof out, &len));
        CHECK(len == 2 && memcmp(out, "  ", 2) == 0);
        CHECK_OK(fathom_tokenizer_token_to_piece(tok, B(0xc3), out, sizeof out, &len));
        CHECK(len == 1 && (uint8_t)out[0] == 0xc3);
        /* a character outside the byte alphabet: the token's UTF-8 as is */
        CHECK_OK(fathom_tokenizer_token_to_piece(tok, TOK_ODD, out, sizeof out, &len));
        CHECK(len == 5 && memcmp(out, "\xc3\xbc\xe2\x86\x92", 5) == 0);
        CHECK_OK(fathom_tokenizer_token_to_piece(tok, TOK_EMPTY, out, sizeof out, &len));
        CHECK(len == 0);
        CHECK_OK(fathom_tokenizer_decode(tok, NULL, 0, NULL, 0, &len));
        CHECK(len == 0);
        /* too small: the first cap bytes and the size needed */
        memset(out, '#', sizeof out);
        CHECK_STATUS(fathom_tokenizer_decode(tok, ids, 7, out, 14, &len), FATHOM_ERR_INVALID_ARG);
        CHECK(len == strlen(want));
        CHECK(memcmp(out, want, 14) == 0 && out[14] == '#');
        char need[32];
        snprintf(need, sizeof need, "need %zu", strlen(want));
        CHECK(strstr(fathom_last_error(), need) != NULL);
    }

    /* --- buffer too small on encode --- */
    {
        int32_t ids[4] = {-7, -7, -7, -7};
        size_t n = 0;
        CHECK_STATUS(fathom_tokenizer_encode(tok, "Hello world", 11, 0, ids, 3, &n),
                     FATHOM_ERR_INVALID_ARG);
        CHECK(n == 7);
        CHECK(ids[0] == B('H') && ids[1] == EL && ids[2] == B('l') && ids[3] == -7);
        CHECK(strstr(fathom_last_error(), "need 7") != NULL);
        CHECK_STATUS(fathom_tokenizer_encode(tok, "Hello world", 11, 0, NULL, 0, &n),
                     FATHOM_ERR_INVALID_ARG);
        CHECK(n == 7);
        int32_t exact[7];
        CHECK_OK(fathom_tokenizer_encode(tok, "Hello world", 11, 0, exact, 7, &n));
        CHECK(n == 7 && exact[6] == B('d'));
    }

    /* --- long pieces: the merge heap and work buffers grow --- */
    {
        size_t len = 20001;
        char *text = malloc(len);
        memset(text, 'a', len);
        int32_t *ids = malloc(len * sizeof *ids);
        size_t n = 0;
        CHECK_OK(fathom_tokenizer_encode(tok, text, len, 0, ids, len, &n));
        int ok = n == 10001;
        for (size_t i = 0; i + 1 < n && ok; i++) ok = ids[i] == AA;
        CHECK(ok && ids[n - 1] == B('a'));
        memset(text, ' ', len);
        CHECK_OK(fathom_tokenizer_encode(tok, text, len, 0, ids, len, &n));
        ok = n == 10001;
        for (size_t i = 0; i + 1 < n && ok; i++) ok = ids[i] == GG;
        CHECK(ok && ids[n - 1] == B(' '));
        free(text);
        free(ids);
    }

    /* --- pieces longer than FATHOM_TOKENIZER_MAX_PIECE: BPE in chunks --- */
    {
        /* "b" + MAX_PIECE a's: the first chunk is b + 16383 a's (8191 "aa"
         * and a lone a), the second one a; one BPE run would pair all. */
        const size_t len = 1 + FATHOM_TOKENIZER_MAX_PIECE;
        char *text = malloc(len);
        int32_t *ids = malloc(len * sizeof *ids);
        text[0] = 'b';
        memset(text + 1, 'a', len - 1);
        size_t n = 0;
        CHECK_OK(fathom_tokenizer_encode(tok, text, len, 0, ids, len, &n));
        const size_t pairs = (FATHOM_TOKENIZER_MAX_PIECE - 2) / 2;
        int ok = n == pairs + 3 && ids[0] == B('b');
        for (size_t i = 1; i <= pairs && ok; i++) ok = ids[i] == AA;
        CHECK(ok && ids[pairs + 1] == B('a') && ids[pairs + 2] == B('a'));
        /* a seam never splits a UTF-8 character: "é" (c3 a9) across it */
        memset(text, 'x', len);
        text[FATHOM_TOKENIZER_MAX_PIECE - 1] = (char)0xc3;
        text[FATHOM_TOKENIZER_MAX_PIECE] = (char)0xa9;
        CHECK(round_trips(tok, text, len, 0));
        CHECK_OK(fathom_tokenizer_encode(tok, text, len, 0, ids, len, &n));
        CHECK(n == len - 1 && ids[n - 1] == E_ACUTE);
        free(text);
        free(ids);
    }

    /* --- text longer than FATHOM_TOKENIZER_MAX_INPUT: an error --- */
    {
        const size_t len = (size_t)FATHOM_TOKENIZER_MAX_INPUT + 1;
        char *text = calloc(len, 1);
        size_t n = 7;
        if (text) {
            CHECK_STATUS(fathom_tokenizer_encode(tok, text, len, 0, NULL, 0, &n),
                         FATHOM_ERR_INVALID_ARG);
            CHECK(n == 0 && strstr(fathom_last_error(), "exceeds the limit of 64 MiB") != NULL);
        }
        free(text);
    }

    /* --- random bytes round-trip (every byte has a token here) --- */
    {
        static const char alphabet[] =
            "hello world aa 12 's \t\n\xc3\xa9\xe4\xb8\xad<|im_end|><user>";
        uint64_t state = 0x9e3779b97f4a7c15ull;
        int all = 1, all_special = 1;
        char text[96];
        for (int trial = 0; trial < 2000; trial++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            size_t len = (size_t)(state >> 33) % sizeof text;
            for (size_t i = 0; i < len; i++) {
                state = state * 6364136223846793005ull + 1442695040888963407ull;
                uint32_t r = (uint32_t)(state >> 33);
                text[i] = (r & 1) ? (char)(r >> 8) : alphabet[(r >> 8) % (sizeof alphabet - 1)];
            }
            all &= round_trips(tok, text, len, 0);
            all_special &= round_trips(tok, text, len, 1);
            all &= round_trips(gpt2, text, len, 0);
        }
        CHECK(all);
        CHECK(all_special);
    }

    /* --- queries --- */
    {
        int32_t id = 0;
        CHECK(fathom_tokenizer_vocab_size(tok) == N_TOKENS);
        CHECK(fathom_tokenizer_vocab_size(NULL) == 0);
        CHECK(fathom_tokenizer_bos(tok) == 0 && fathom_tokenizer_eos(tok) == 2);
        CHECK(fathom_tokenizer_bos(NULL) == -1 && fathom_tokenizer_eos(NULL) == -1);
        CHECK_OK(fathom_tokenizer_find(tok, "<|im_end|>", 10, &id));
        CHECK(id == 2);
        CHECK_OK(fathom_tokenizer_find(tok, "hello", 5, &id));
        CHECK(id == HELLO);
        CHECK_OK(fathom_tokenizer_find(tok, "hello", 4, &id));
        CHECK(id == HELL);
        CHECK_OK(fathom_tokenizer_find(tok, "nope", 4, &id));
        CHECK(id == -1);
        CHECK_OK(fathom_tokenizer_find(tok, NULL, 0, &id));
        CHECK(id == -1);
        CHECK_STATUS(fathom_tokenizer_find(NULL, "a", 1, &id), FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fathom_tokenizer_find(tok, "a", 1, NULL), FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fathom_tokenizer_find(tok, NULL, 1, &id), FATHOM_ERR_INVALID_ARG);
        CHECK(fathom_tokenizer_token_type(tok, 1) == FATHOM_TOKEN_CONTROL);
        CHECK(fathom_tokenizer_token_type(tok, 3) == FATHOM_TOKEN_USER_DEFINED);
        CHECK(fathom_tokenizer_token_type(tok, HELLO) == FATHOM_TOKEN_NORMAL);
        CHECK_STATUS(fathom_tokenizer_token_type(tok, -1), FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fathom_tokenizer_token_type(tok, N_TOKENS), FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fathom_tokenizer_token_type(NULL, 0), FATHOM_ERR_INVALID_ARG);
    }

    /* --- bad arguments: encode, decode, token_to_piece --- */
    {
        int32_t ids[8];
        char out[8];
        size_t n = 0;
        CHECK_STATUS(fathom_tokenizer_encode(NULL, "a", 1, 0, ids, 8, &n), FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fathom_tokenizer_encode(tok, "a", 1, 0, ids, 8, NULL), FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fathom_tokenizer_encode(tok, NULL, 1, 0, ids, 8, &n), FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fathom_tokenizer_encode(tok, "a", 1, 0, NULL, 8, &n), FATHOM_ERR_INVALID_ARG);
        int32_t bad[] = {HELLO, N_TOKENS};
        CHECK_STATUS(fathom_tokenizer_decode(NULL, bad, 1, out, 8, &n), FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fathom_tokenizer_decode(tok, bad, 1, out, 8, NULL), FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fathom_tokenizer_decode(tok, NULL, 1, out, 8, &n), FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fathom_tokenizer_decode(tok, bad, 1, NULL, 8, &n), FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fathom_tokenizer_decode(tok, bad, 2, out, 8, &n), FATHOM_ERR_INVALID_ARG);
        int32_t negative = -1;
        CHECK_STATUS(fathom_tokenizer_decode(tok, &negative, 1, out, 8, &n),
                     FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fathom_tokenizer_token_to_piece(NULL, 0, out, 8, &n), FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fathom_tokenizer_token_to_piece(tok, N_TOKENS, out, 8, &n),
                     FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fathom_tokenizer_token_to_piece(tok, 0, out, 8, NULL), FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fathom_tokenizer_token_to_piece(tok, 0, out, 4, &n), FATHOM_ERR_INVALID_ARG);
        CHECK(n == 13); /* "<|endoftext|>" */
        fathom_tokenizer_free(NULL);
    }

    /* --- bad specs --- */
    {
        fathom_tokenizer *t = (fathom_tokenizer *)&v; /* must be reset to NULL on failure */
        fathom_tokenizer_spec s = make_spec(&v, "smollm");
        CHECK_STATUS(fathom_tokenizer_create(NULL, &s), FATHOM_ERR_INVALID_ARG);
        CHECK_STATUS(fathom_tokenizer_create(&t, NULL), FATHOM_ERR_INVALID_ARG);
        CHECK(t == NULL);
#define BAD_SPEC(field_change, status)                                                             \
    do {                                                                                           \
        fathom_tokenizer_spec b_ = make_spec(&v, "smollm");                                        \
        field_change;                                                                              \
        t = NULL;                                                                                  \
        CHECK_STATUS(fathom_tokenizer_create(&t, &b_), status);                                    \
        CHECK(t == NULL);                                                                          \
    } while (0)
        BAD_SPEC(b_.model = NULL, FATHOM_ERR_INVALID_ARG);
        BAD_SPEC(b_.pre = NULL, FATHOM_ERR_INVALID_ARG);
        BAD_SPEC(b_.model = "bert", FATHOM_ERR_UNSUPPORTED);
        BAD_SPEC(b_.model = "llama", FATHOM_ERR_INVALID_ARG); /* SentencePiece has no merges */
        BAD_SPEC(b_.pre = "qwen2", FATHOM_ERR_UNSUPPORTED);
        BAD_SPEC(b_.n_tokens = 255, FATHOM_ERR_INVALID_ARG);
        BAD_SPEC(b_.n_tokens = (uint64_t)INT32_MAX + 1, FATHOM_ERR_INVALID_ARG);
        BAD_SPEC(b_.tokens = NULL, FATHOM_ERR_INVALID_ARG);
        BAD_SPEC(b_.merges = NULL, FATHOM_ERR_INVALID_ARG);
        BAD_SPEC(b_.n_merges = UINT32_MAX, FATHOM_ERR_INVALID_ARG);
        BAD_SPEC(b_.bos_id = N_TOKENS, FATHOM_ERR_INVALID_ARG);
        BAD_SPEC(b_.bos_id = -2, FATHOM_ERR_INVALID_ARG);
        BAD_SPEC(b_.eos_id = N_TOKENS, FATHOM_ERR_INVALID_ARG);
        BAD_SPEC((b_.bos_id = -1, b_.add_bos = 1), FATHOM_ERR_INVALID_ARG);
        /* merges: no separator, a side or the result not in the vocabulary */
        const char *merges_bad[][1] = {{"ab"}, {"e "}, {" e"}, {"q \xc4\xa0"}, {"x y"}, {NULL}};
        const int merge_status[] = {FATHOM_ERR_FORMAT, FATHOM_ERR_FORMAT, FATHOM_ERR_FORMAT,
                                    FATHOM_ERR_FORMAT, FATHOM_ERR_FORMAT, FATHOM_ERR_INVALID_ARG};
        for (int i = 0; i < 6; i++)
            BAD_SPEC((b_.merges = merges_bad[i], b_.n_merges = 1), merge_status[i]);
        /* no merges at all is fine: bytes only */
        s.n_merges = 0;
        s.merges = NULL;
        t = NULL;
        CHECK_OK(fathom_tokenizer_create(&t, &s));
        if (t) ENCODES(t, "hello", 0, B('h'), B('e'), B('l'), B('l'), B('o'));
        fathom_tokenizer_free(t);
        /* a repeated merge keeps its first rank */
        const char *twice[] = {"l l", "e l", "l l"};
        s.merges = twice;
        s.n_merges = 3;
        t = NULL;
        CHECK_OK(fathom_tokenizer_create(&t, &s));
        if (t) ENCODES(t, "ell", 0, B('e'), LL);
        fathom_tokenizer_free(t);

        /* tokens: invalid UTF-8, duplicates, bad types, NULL strings */
        const char *bad_utf8[] = {"\xc0\x80", "\xed\xa0\x80",     "\xe4\xb8",
                                  "\xff",     "\xf4\x90\x80\x80", "a\x80"};
        for (int i = 0; i < 6; i++) {
            vocab w = v;
            for (int k = 0; k < N_TOKENS; k++) w.tokens[k] = w.storage[k];
            set_token(&w, TOK_ODD, bad_utf8[i], strlen(bad_utf8[i]), FATHOM_TOKEN_NORMAL);
            fathom_tokenizer_spec ws = make_spec(&w, "smollm");
            t = NULL;
            CHECK_STATUS(fathom_tokenizer_create(&t, &ws), FATHOM_ERR_FORMAT);
            CHECK(t == NULL);
        }
        {
            vocab w = v;
            for (int k = 0; k < N_TOKENS; k++) w.tokens[k] = w.storage[k];
            set_token(&w, TOK_ODD, "hello", 5, FATHOM_TOKEN_NORMAL);
            fathom_tokenizer_spec ws = make_spec(&w, "smollm");
            CHECK_STATUS(fathom_tokenizer_create(&t, &ws), FATHOM_ERR_FORMAT);
            CHECK(strstr(fathom_last_error(), "duplicates") != NULL);
            set_token(&w, TOK_ODD, "\xc3\xbc\xe2\x86\x92", 5, FATHOM_TOKEN_NORMAL);
            w.types[5] = 7;
            CHECK_STATUS(fathom_tokenizer_create(&t, &ws), FATHOM_ERR_FORMAT);
            w.types[5] = 0;
            CHECK_STATUS(fathom_tokenizer_create(&t, &ws), FATHOM_ERR_FORMAT);
            w.types[5] = FATHOM_TOKEN_NORMAL;
            w.tokens[7] = NULL;
            CHECK_STATUS(fathom_tokenizer_create(&t, &ws), FATHOM_ERR_INVALID_ARG);
            w.tokens[7] = w.storage[7];
            CHECK_OK(fathom_tokenizer_create(&t, &ws));
            fathom_tokenizer_free(t);
        }
        /* NUL-terminated strings when no lengths are given */
        {
            fathom_tokenizer_spec ns = make_spec(&v, "smollm");
            vocab w = v;
            for (int k = 0; k < N_TOKENS; k++) w.tokens[k] = w.storage[k];
            for (int k = 0; k < N_TOKENS; k++) w.storage[k][w.lens[k]] = 0;
            ns.tokens = (const char *const *)w.tokens;
            ns.token_lens = NULL;
            /* byte 0's token is "\u0100", so no token is cut short by a NUL */
            t = NULL;
            CHECK_OK(fathom_tokenizer_create(&t, &ns));
            if (t) ENCODES(t, "hello world", 0, HELLO, G_WOR, B('l'), B('d'));
            fathom_tokenizer_free(t);
        }
    }

    test_spm();
    /* --- chat templates: ChatML by <|im_start|> / <|im_end|> --- */
    {
        fathom_chat_template ct;
        CHECK_OK(fathom_chat_template_for(tok, &ct));
        CHECK(strcmp(ct.name, "chatml") == 0 && strcmp(ct.end_of_turn, "<|im_end|>") == 0);
        char buf[128];
        size_t len = 0;
        CHECK_STATUS(fathom_chat_render(&ct, "S", 1, "hi", 2, buf, 8, &len), FATHOM_ERR_INVALID_ARG);
        const char want[] = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
                            "<|im_start|>assistant\n";
        CHECK(len == sizeof want - 1);
        CHECK_OK(fathom_chat_render(&ct, "S", 1, "hi", 2, buf, sizeof buf, &len));
        CHECK(len == sizeof want - 1 && memcmp(buf, want, len) == 0);
        CHECK_OK(fathom_chat_render(&ct, NULL, 0, "hi", 2, buf, sizeof buf, &len));
        CHECK(len == sizeof want - 1 - 31 && memcmp(buf, want + 31, len) == 0);
    }
    fathom_tokenizer_free(tok);
    fathom_tokenizer_free(gpt2);
    return check_summary("test_tokenizer");
}

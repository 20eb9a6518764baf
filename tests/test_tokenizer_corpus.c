/* Encode and decode a corpus with libfathom and compare with the reference
 * (HF tokenizers) ids and text written by tests/tokenizer_reference.py.
 *
 * usage: test_tokenizer_corpus VOCAB CASES.bin   (no arguments: skip, 77)
 * VOCAB is a vocab.bin or a GGUF model (*.gguf) whose tokenizer is taken.
 *
 * vocab.bin: "FTOKVOC1", str model, str pre, i32 bos, i32 eos, u32 add_bos,
 *            u32 n_tokens, n x (i32 type, str), u32 n_merges, n x str
 * cases.bin: "FTOKCAS1", u32 n_cases, n x (u32 parse_special, str text,
 *            u32 n_ids, i32 ids[n_ids], str reference decode)
 * str = u32 byte length + bytes; everything little-endian. */
#include "check.h"
#include "fathom_model.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct reader {
    const uint8_t *p, *end;
    int ok;
} reader;

static uint32_t read_u32(reader *r) {
    if (r->end - r->p < 4) {
        r->ok = 0;
        return 0;
    }
    uint32_t v = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 | (uint32_t)r->p[2] << 16 |
                 (uint32_t)r->p[3] << 24;
    r->p += 4;
    return v;
}

static const char *read_str(reader *r, uint32_t *len) {
    *len = read_u32(r);
    if (!r->ok || (uint64_t)(r->end - r->p) < *len) {
        r->ok = 0;
        *len = 0;
        return "";
    }
    const char *s = (const char *)r->p;
    r->p += *len;
    return s;
}

static uint8_t *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static char *dup_str(const char *s, uint32_t n) {
    char *d = malloc(n + 1u);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static void show(const char *what, const int32_t *ids, size_t n) {
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

/* The tokenizer of vocab.bin; NULL (with a message) if it cannot be built. */
static fathom_tokenizer *tokenizer_from_vocab(const char *path) {
    size_t vlen;
    uint8_t *vbuf = slurp(path, &vlen);
    if (!vbuf || vlen < 8 || memcmp(vbuf, "FTOKVOC1", 8)) {
        fprintf(stderr, "test_tokenizer_corpus: cannot read %s\n", path);
        free(vbuf);
        return NULL;
    }
    reader r = {vbuf + 8, vbuf + vlen, 1};
    uint32_t len;
    const char *s = read_str(&r, &len);
    char *model = dup_str(s, len);
    s = read_str(&r, &len);
    char *pre = dup_str(s, len);
    int32_t bos = (int32_t)read_u32(&r), eos = (int32_t)read_u32(&r);
    int add_bos = (int)read_u32(&r);
    uint32_t n_tokens = read_u32(&r);
    const char **tokens = calloc(n_tokens ? n_tokens : 1, sizeof *tokens);
    uint64_t *token_lens = calloc(n_tokens ? n_tokens : 1, sizeof *token_lens);
    int32_t *types = calloc(n_tokens ? n_tokens : 1, sizeof *types);
    for (uint32_t i = 0; i < n_tokens && r.ok; i++) {
        types[i] = (int32_t)read_u32(&r);
        tokens[i] = read_str(&r, &len);
        token_lens[i] = len;
    }
    uint32_t n_merges = read_u32(&r);
    const char **merges = calloc(n_merges ? n_merges : 1, sizeof *merges);
    uint64_t *merge_lens = calloc(n_merges ? n_merges : 1, sizeof *merge_lens);
    for (uint32_t i = 0; i < n_merges && r.ok; i++) {
        merges[i] = read_str(&r, &len);
        merge_lens[i] = len;
    }
    fathom_tokenizer *tok = NULL;
    if (!r.ok) {
        fprintf(stderr, "test_tokenizer_corpus: %s is truncated\n", path);
    } else {
        fathom_tokenizer_spec spec = {.model = model,
                                      .pre = pre,
                                      .n_tokens = n_tokens,
                                      .tokens = tokens,
                                      .token_lens = token_lens,
                                      .token_types = types,
                                      .n_merges = n_merges,
                                      .merges = merges,
                                      .merge_lens = merge_lens,
                                      .bos_id = bos,
                                      .eos_id = eos,
                                      .add_bos = add_bos};
        CHECK_OK(fathom_tokenizer_create(&tok, &spec));
        if (tok) CHECK(fathom_tokenizer_vocab_size(tok) == n_tokens);
    }
    free(tokens);
    free(token_lens);
    free(types);
    free(merges);
    free(merge_lens);
    free(model);
    free(pre);
    free(vbuf);
    return tok;
}

/* The tokenizer a GGUF file declares (tokenizer.ggml.*). */
static fathom_tokenizer *tokenizer_from_gguf(const char *path) {
    fathom_gguf *g = NULL;
    fathom_tokenizer *tok = NULL;
    CHECK_OK(fathom_gguf_open(&g, path));
    if (g) CHECK_OK(fathom_tokenizer_from_gguf(&tok, g));
    fathom_gguf_close(g);
    return tok;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        printf("test_tokenizer_corpus: needs VOCAB CASES.bin (run by test_tokenizer_model.sh); "
               "skipped\n");
        return 77;
    }
    size_t clen, vpath = strlen(argv[1]);
    uint8_t *cbuf = slurp(argv[2], &clen);
    if (!cbuf || clen < 8 || memcmp(cbuf, "FTOKCAS1", 8)) {
        fprintf(stderr, "test_tokenizer_corpus: cannot read %s\n", argv[2]);
        return 1;
    }
    fathom_tokenizer *tok = vpath > 5 && strcmp(argv[1] + vpath - 5, ".gguf") == 0
                                ? tokenizer_from_gguf(argv[1])
                                : tokenizer_from_vocab(argv[1]);
    if (!tok) return check_summary("test_tokenizer_corpus");

    reader r = {cbuf + 8, cbuf + clen, 1};
    uint32_t n_cases = read_u32(&r);
    size_t enc_match = 0, dec_match = 0, round_trip = 0, total_ids = 0, total_bytes = 0, shown = 0;
    size_t ids_cap = 1 << 16, out_cap = 1 << 20;
    int32_t *ids = malloc(ids_cap * sizeof *ids);
    int32_t *want = malloc(ids_cap * sizeof *want);
    char *out = malloc(out_cap);
    for (uint32_t c = 0; c < n_cases && r.ok; c++) {
        int parse_special = (int)read_u32(&r);
        uint32_t text_len;
        const char *text = read_str(&r, &text_len);
        uint32_t n_want = read_u32(&r);
        if (n_want > ids_cap || text_len > out_cap) { /* grow to the largest case */
            ids_cap = n_want > ids_cap ? n_want : ids_cap;
            out_cap = text_len > out_cap ? text_len : out_cap;
            free(ids);
            free(want);
            free(out);
            ids = malloc(ids_cap * sizeof *ids);
            want = malloc(ids_cap * sizeof *want);
            out = malloc(out_cap);
            if (!ids || !want || !out) {
                fprintf(stderr, "test_tokenizer_corpus: out of memory\n");
                return 1;
            }
        }
        for (uint32_t i = 0; i < n_want; i++) want[i] = (int32_t)read_u32(&r);
        uint32_t ref_len;
        const char *ref_decoded = read_str(&r, &ref_len);
        if (!r.ok) break;
        total_ids += n_want;
        total_bytes += text_len;

        size_t n = 0;
        int st = fathom_tokenizer_encode(tok, text, text_len, parse_special, ids, ids_cap, &n);
        int same = st == FATHOM_OK && n == n_want && memcmp(ids, want, n * sizeof *ids) == 0;
        enc_match += same;
        if (!same && shown++ < 10) {
            fprintf(
                stderr,
                "case %u (parse_special %d, %u bytes): encode differs (status %d)\n  text: %.*s\n",
                c, parse_special, text_len, st, (int)(text_len < 200 ? text_len : 200), text);
            show("want", want, n_want);
            show("got ", ids, n);
        }
        size_t out_len = 0;
        st = fathom_tokenizer_decode(tok, want, n_want, out, out_cap, &out_len);
        int dsame = st == FATHOM_OK && out_len == ref_len && memcmp(out, ref_decoded, ref_len) == 0;
        dec_match += dsame;
        /* The text itself, unless it holds a byte the vocabulary lacks. */
        round_trip += st == FATHOM_OK && out_len == text_len && memcmp(out, text, text_len) == 0;
        if (!dsame && shown++ < 10)
            fprintf(stderr, "case %u: decode differs: got %zu bytes, reference %u, text %u\n", c,
                    out_len, ref_len, text_len);
    }
    CHECK(r.ok);
    CHECK(enc_match == n_cases);
    CHECK(dec_match == n_cases);
    printf("test_tokenizer_corpus: %u cases (%zu bytes, %zu reference ids): encode matches %zu, "
           "decode matches %zu, decode == text %zu\n",
           n_cases, total_bytes, total_ids, enc_match, dec_match, round_trip);
    fathom_tokenizer_free(tok);
    free(ids);
    free(want);
    free(out);
    free(cbuf);
    return check_summary("test_tokenizer_corpus");
}

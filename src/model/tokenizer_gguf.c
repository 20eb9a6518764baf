/* Glue: a fathom_tokenizer_spec from a GGUF file's tokenizer.ggml.* keys.
 * The strings stay in the fathom_gguf (which outlives this call); only the
 * pointer and length arrays are allocated here, and the tokenizer copies
 * everything it keeps. */
#include "internal.h"
#include "fathom_model.h"

#include <stdlib.h>
#include <string.h>

/* Pointers and lengths of every string of a STRING array. */
static int string_array(const fathom_gguf *g, const char *key, uint64_t max_count,
                        const char ***strs, uint64_t **lens, uint64_t *count) {
    fathom_gguf_value arr;
    FATHOM_TRY(fathom_gguf_get_array(g, key, FATHOM_GGUF_STRING, &arr));
    FATHOM_CHECK(arr.count > max_count, FATHOM_ERR_FORMAT, "tokenizer: %s has %llu entries (max %llu)",
                 key, (unsigned long long)arr.count, (unsigned long long)max_count);
    *count = arr.count;
    *strs = fathom_alloc_array(arr.count + 1, sizeof **strs);
    *lens = fathom_alloc_array(arr.count + 1, sizeof **lens);
    FATHOM_CHECK(!*strs || !*lens, FATHOM_ERR_NOMEM, "tokenizer: out of memory for %s", key);
    for (uint64_t i = 0; i < arr.count; i++) {
        fathom_gguf_value e;
        FATHOM_TRY(fathom_gguf_array_get(&arr, i, &e));
        FATHOM_TRY(fathom_gguf_value_string(&e, &(*strs)[i], &(*lens)[i]));
    }
    return FATHOM_OK;
}

/* An optional token id key: -1 when absent. */
static int optional_id(const fathom_gguf *g, const char *key, uint64_t n_tokens, int32_t *out) {
    *out = -1;
    if (fathom_gguf_find_key(g, key) < 0) return FATHOM_OK;
    uint32_t id;
    FATHOM_TRY(fathom_gguf_get_u32(g, key, &id));
    FATHOM_CHECK(id >= n_tokens, FATHOM_ERR_FORMAT, "tokenizer: %s = %u is not a token (%llu tokens)",
                 key, id, (unsigned long long)n_tokens);
    *out = (int32_t)id;
    return FATHOM_OK;
}

/* One int32 (INT32 arrays) or float (FLOAT32) per token, in a new array. */
static int per_token(const fathom_gguf *g, const char *key, fathom_gguf_type type, uint64_t n_tokens,
                     void **out) {
    fathom_gguf_value arr;
    FATHOM_TRY(fathom_gguf_get_array(g, key, type, &arr));
    FATHOM_CHECK(arr.count != n_tokens, FATHOM_ERR_FORMAT, "tokenizer: %s has %llu entries for %llu tokens",
                 key, (unsigned long long)arr.count, (unsigned long long)n_tokens);
    *out = fathom_alloc_array(arr.count + 1, 4); /* int32_t and float */
    FATHOM_CHECK(!*out, FATHOM_ERR_NOMEM, "tokenizer: out of memory");
    for (uint64_t i = 0; i < arr.count; i++) {
        fathom_gguf_value e;
        FATHOM_TRY(fathom_gguf_array_get(&arr, i, &e));
        if (type == FATHOM_GGUF_FLOAT32)
            FATHOM_TRY(fathom_gguf_value_f32(&e, (float *)*out + i));
        else
            FATHOM_TRY(fathom_gguf_value_i32(&e, (int32_t *)*out + i));
    }
    return FATHOM_OK;
}

static int build(fathom_tokenizer **out, const fathom_gguf *g, fathom_tokenizer_spec *spec,
                 const char ***tokens, uint64_t **token_lens, int32_t **types,
                 const char ***merges, uint64_t **merge_lens, float **scores) {
    FATHOM_TRY(fathom_gguf_get_string(g, "tokenizer.ggml.model", &spec->model, NULL));
    spec->pre = "gpt2";
    if (fathom_gguf_find_key(g, "tokenizer.ggml.pre") >= 0)
        FATHOM_TRY(fathom_gguf_get_string(g, "tokenizer.ggml.pre", &spec->pre, NULL));
    FATHOM_TRY(string_array(g, "tokenizer.ggml.tokens", INT32_MAX, tokens, token_lens, &spec->n_tokens));
    spec->tokens = *tokens;
    spec->token_lens = *token_lens;
    if (fathom_gguf_find_key(g, "tokenizer.ggml.token_type") >= 0) {
        FATHOM_TRY(per_token(g, "tokenizer.ggml.token_type", FATHOM_GGUF_INT32, spec->n_tokens,
                             (void **)types));
        spec->token_types = *types;
    }
    if (fathom_gguf_find_key(g, "tokenizer.ggml.merges") >= 0) {
        FATHOM_TRY(string_array(g, "tokenizer.ggml.merges", UINT64_MAX - 1, merges, merge_lens,
                                &spec->n_merges));
        spec->merges = *merges;
        spec->merge_lens = *merge_lens;
    }
    FATHOM_TRY(optional_id(g, "tokenizer.ggml.bos_token_id", spec->n_tokens, &spec->bos_id));
    FATHOM_TRY(optional_id(g, "tokenizer.ggml.eos_token_id", spec->n_tokens, &spec->eos_id));
    spec->add_bos = 0;
    if (fathom_gguf_find_key(g, "tokenizer.ggml.add_bos_token") >= 0)
        FATHOM_TRY(fathom_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &spec->add_bos));
    FATHOM_CHECK(spec->add_bos && spec->bos_id < 0, FATHOM_ERR_FORMAT,
                 "tokenizer: add_bos_token is set but bos_token_id is absent");
    if (strcmp(spec->model, "llama") == 0) {
        if (fathom_gguf_find_key(g, "tokenizer.ggml.scores") >= 0) {
            FATHOM_TRY(per_token(g, "tokenizer.ggml.scores", FATHOM_GGUF_FLOAT32, spec->n_tokens,
                                 (void **)scores));
            spec->scores = *scores;
        }
        /* llama.cpp's default for SentencePiece vocabularies is a space prefix */
        spec->add_space_prefix = 1;
        if (fathom_gguf_find_key(g, "tokenizer.ggml.add_space_prefix") >= 0)
            FATHOM_TRY(fathom_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &spec->add_space_prefix));
    }
    return fathom_tokenizer_create(out, spec);
}

int fathom_tokenizer_from_gguf(fathom_tokenizer **out, const fathom_gguf *gguf) {
    FATHOM_CHECK_ARG(out, "fathom_tokenizer_from_gguf: out is NULL");
    *out = NULL;
    FATHOM_CHECK_ARG(gguf, "fathom_tokenizer_from_gguf: gguf is NULL");
    fathom_tokenizer_spec spec;
    memset(&spec, 0, sizeof spec);
    const char **tokens = NULL, **merges = NULL;
    uint64_t *token_lens = NULL, *merge_lens = NULL;
    int32_t *types = NULL;
    float *scores = NULL;
    int st = build(out, gguf, &spec, &tokens, &token_lens, &types, &merges, &merge_lens, &scores);
    free(scores);
    free(tokens);
    free(token_lens);
    free(types);
    free(merges);
    free(merge_lens);
    return st;
}

/*
 * libfathom's model test bed: ggml types and dequantization, a GGUF reader,
 * the GPT-2 byte-level BPE tokenizer and a Llama-family decoder whose decode
 * steps can use any fathom method. Same conventions as fathom.h (status
 * returns, fathom_last_error(), 64-bit sizes); files are treated as hostile.
 *
 * Module sections, in dependency order: tokenizer, gguf, model.
 */
#ifndef FATHOM_MODEL_H
#define FATHOM_MODEL_H

#include "fathom.h"

#ifdef __cplusplus
extern "C" {
#endif
/* ===================================================================== *
 * tokenizer — GPT-2 style byte-level BPE (SmolLM2 and kin) and
 * SentencePiece-style BPE with byte fallback (GGUF model "llama": Gemma)
 * ===================================================================== */

/* Token types, with the values of GGUF tokenizer.ggml.token_type. */
typedef enum fathom_token_type {
    FATHOM_TOKEN_NORMAL = 1,
    FATHOM_TOKEN_UNKNOWN = 2,
    FATHOM_TOKEN_CONTROL = 3,      /* <|im_start|>, <|endoftext|>, ... */
    FATHOM_TOKEN_USER_DEFINED = 4,
    FATHOM_TOKEN_UNUSED = 5,
    FATHOM_TOKEN_BYTE = 6
} fathom_token_type;

/*
 * What a tokenizer is built from; every field maps to one GGUF key.
 * Strings are (pointer, byte length) pairs; a NULL length array means the
 * strings are NUL-terminated. Everything is copied: the spec may be freed
 * after fathom_tokenizer_create().
 *
 * Tokens are in the byte-level alphabet (GPT-2 bytes_to_unicode: byte 0x20
 * is "\u0120", ...), valid UTF-8, no two alike (empty ones are allowed and
 * never produced). Merge i is "left right" (split at the first space after
 * the first byte) with rank i; left, right and their concatenation must be
 * tokens. A repeated pair keeps its first rank. A byte with no single-byte
 * token is dropped by encode, as HF tokenizers (no unk token) and llama.cpp
 * drop it: SmolLM2 lacks 21 (0x04 0x06 0x13 0x14 0x16 0x1d 0xc0 0xc1 0xf1
 * 0xf2 0xf5-0xff), so only text without those bytes round-trips exactly.
 */
typedef struct fathom_tokenizer_spec {
    const char *model;            /* tokenizer.ggml.model: "gpt2" or "llama" (below) */
    const char *pre;              /* tokenizer.ggml.pre: "smollm" (or a llama.cpp alias
                                     with the same split: "starcoder", "refact",
                                     "command-r", "codeshell", "exaone", "minerva")
                                     or "gpt2" */
    uint64_t n_tokens;            /* 256 .. INT32_MAX */
    const char *const *tokens;    /* [n_tokens] tokenizer.ggml.tokens */
    const uint64_t *token_lens;   /* [n_tokens] or NULL */
    const int32_t *token_types;   /* [n_tokens] fathom_token_type, or NULL: all normal */
    uint64_t n_merges;
    const char *const *merges;    /* [n_merges] tokenizer.ggml.merges (NULL if none) */
    const uint64_t *merge_lens;   /* [n_merges] or NULL */
    int32_t bos_id;               /* tokenizer.ggml.bos_token_id, -1: none */
    int32_t eos_id;               /* tokenizer.ggml.eos_token_id, -1: none */
    int add_bos;                  /* tokenizer.ggml.add_bos_token: prepend bos_id */
    /* model "llama" (SentencePiece BPE, Gemma): no merges; the pair whose
     * concatenation has the highest score merges first */
    const float *scores;          /* [n_tokens] tokenizer.ggml.scores, or NULL: all 0 */
    int add_space_prefix;         /* tokenizer.ggml.add_space_prefix */
} fathom_tokenizer_spec;

typedef struct fathom_tokenizer fathom_tokenizer;

/* Build a tokenizer (immutable afterwards; encode/decode are thread-safe).
 * FATHOM_ERR_UNSUPPORTED for another model or pre-tokenizer,
 * FATHOM_ERR_FORMAT for a malformed vocabulary (invalid UTF-8, duplicate
 * token, a merge not "left right" or naming a string not in the vocabulary,
 * unknown token type). */
FATHOM_API int fathom_tokenizer_create(fathom_tokenizer **out, const fathom_tokenizer_spec *spec);
FATHOM_API void fathom_tokenizer_free(fathom_tokenizer *tok); /* NULL is fine */

#define FATHOM_TOKENIZER_MAX_INPUT (64 << 20) /* bytes of text per encode call */
#define FATHOM_TOKENIZER_MAX_PIECE 16384      /* bytes of one BPE run, see below */

/*
 * Encode len bytes of text (NULL is fine when len is 0) into ids[cap].
 * Pipeline, as HF tokenizers / llama.cpp for the "smollm" pre-tokenizer:
 *   1. special tokens: with parse_special, control (and unknown) tokens are
 *      cut out of the text, leftmost-longest, and emitted whole;
 *      user-defined tokens are always cut out. Without it they are text.
 *   2. every Unicode number character (\p{N}) is a piece of its own
 *      ("smollm" only), then the GPT-2 regex
 *      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *      splits what lies between (PCRE2, UTF + UCP);
 *   3. byte-level BPE on each piece: the lowest-ranked merge first, ties to
 *      the left. A piece longer than FATHOM_TOKENIZER_MAX_PIECE bytes (one
 *      run of whitespace, symbols or letters) is encoded in chunks of that
 *      size cut at character starts, which keeps encoding linear in len; HF
 *      and llama.cpp merge across the seams, so the ids of such runs can
 *      differ from theirs (never the decoded text).
 * Whitespace in step 2 is Unicode White_Space (as Oniguruma's \s in HF; not
 * PCRE2's, which adds U+180E). \p{L} and \p{N} come from the system PCRE2's
 * tables (Unicode 14 in 10.42): characters assigned since (Unicode 15/16,
 * e.g. Garay, Kawi, CJK ext. H) may split differently from a newer HF build.
 * Text need not be valid UTF-8: each maximal run of invalid bytes becomes a
 * piece of its own and is encoded byte-level like any other, so decode
 * returns the exact bytes when the vocabulary has them all (HF cannot take
 * such input; llama.cpp would turn each bad byte into U+FFFD). The bos
 * token is prepended if the spec asked.
 * Model "llama" keeps step 1 and replaces steps 2-3 by llama.cpp's
 * llm_tokenizer_spm (= SentencePiece's BPE model): spaces become U+2581
 * (with one more in front when add_space_prefix), one symbol per UTF-8
 * character (per byte of invalid UTF-8), the adjacent pair whose
 * concatenation is the highest-scored token merges first (leftmost on
 * ties), and a character that is no token becomes its bytes' <0xNN> tokens.
 * Text longer than FATHOM_TOKENIZER_MAX_INPUT bytes is
 * FATHOM_ERR_INVALID_ARG.
 * *n_out gets the number of ids the text needs; if that exceeds cap,
 * FATHOM_ERR_INVALID_ARG ("buffer too small, need N") and ids holds the
 * first cap of them. cap 0 (ids NULL) is thus a size query.
 */
FATHOM_API int fathom_tokenizer_encode(const fathom_tokenizer *tok, const char *text, size_t len,
                                       int parse_special, int32_t *ids, size_t cap, size_t *n_out);

/* The bytes of n ids concatenated into out[cap] (no NUL terminator added).
 * Normal tokens map back through the byte-level alphabet (model "llama":
 * U+2581 becomes a space, <0xNN> the byte); control, user-defined and
 * unknown tokens give their text verbatim. The bytes may be
 * invalid UTF-8 when ids cut a character (HF would print U+FFFD there).
 * *len_out gets the bytes needed; more than cap: FATHOM_ERR_INVALID_ARG as
 * for encode. An id out of range: FATHOM_ERR_INVALID_ARG. */
FATHOM_API int fathom_tokenizer_decode(const fathom_tokenizer *tok, const int32_t *ids, size_t n, char *out,
                                       size_t cap, size_t *len_out);
/* The bytes of one token, as decode. */
FATHOM_API int fathom_tokenizer_token_to_piece(const fathom_tokenizer *tok, int32_t id, char *out, size_t cap,
                                               size_t *len_out);
/* The id of the token whose vocabulary string is exactly text[len]
 * (e.g. "<|im_end|>"), or -1 in *id if there is none. */
FATHOM_API int fathom_tokenizer_find(const fathom_tokenizer *tok, const char *text, size_t len, int32_t *id);

FATHOM_API uint32_t fathom_tokenizer_vocab_size(const fathom_tokenizer *tok); /* 0 for NULL */
FATHOM_API int32_t fathom_tokenizer_bos(const fathom_tokenizer *tok);         /* -1: none */
FATHOM_API int32_t fathom_tokenizer_eos(const fathom_tokenizer *tok);         /* -1: none */
/* The fathom_token_type of id, or FATHOM_ERR_INVALID_ARG. */
FATHOM_API int fathom_tokenizer_token_type(const fathom_tokenizer *tok, int32_t id);

/* ===================================================================== *
 * chat — the chat templates of the models the runtime knows
 * ===================================================================== */

/* A single-turn prompt is
 *   system_open SYSTEM system_close  (only when a system text is given)
 *   user_open USER user_close assistant_open
 * and the model's reply ends with the token end_of_turn. Strings are
 * static; encode the rendered prompt with parse_special = 1. */
typedef struct fathom_chat_template {
    const char *name;           /* "chatml" (SmolLM2, Qwen) or "gemma" */
    const char *system_open, *system_close;
    const char *user_open, *user_close;
    const char *assistant_open;
    const char *end_of_turn;    /* "<|im_end|>", "<end_of_turn>" */
} fathom_chat_template;

/* The template of a tokenizer's model, recognized by its control tokens:
 * <|im_start|> and <|im_end|> -> chatml; <start_of_turn> and <end_of_turn>
 * -> gemma (whose template has no system turn: the system text opens the
 * user's turn, followed by a blank line, as Gemma 3's chat template does).
 * FATHOM_ERR_UNSUPPORTED when neither is in the vocabulary. */
FATHOM_API int fathom_chat_template_for(const fathom_tokenizer *tok, fathom_chat_template *out);
/* The template called name ("chatml", "gemma"); FATHOM_ERR_UNSUPPORTED for another. */
FATHOM_API int fathom_chat_template_by_name(const char *name, fathom_chat_template *out);

/* Render a single-turn prompt (system may be NULL) into out[cap] (no NUL
 * added); *len_out gets the bytes needed, and more than cap is
 * FATHOM_ERR_INVALID_ARG as for fathom_tokenizer_decode (cap 0: a size
 * query). */
FATHOM_API int fathom_chat_render(const fathom_chat_template *t, const char *system, size_t system_len,
                                  const char *user, size_t user_len, char *out, size_t cap,
                                  size_t *len_out);

/* ===================================================================== *
 * gguf — a GGUF (v2, v3) reader and ggml dequantization
 * ===================================================================== */

/*
 * The file is mapped read-only, never copied: tensor data pointers point
 * into the mapping. Keys, tensor names and string values are copied once
 * into NUL-terminated storage owned by the fathom_gguf. The file is treated
 * as hostile: every count, length, dimension, type, offset and alignment is
 * checked (overflow-safe) against the file size before use, empty or
 * duplicate keys and tensor names (and names holding a NUL byte) are
 * rejected, arrays nest at most FATHOM_GGUF_MAX_NESTING deep, tensors must
 * be aligned and lie inside the data section without overlapping, and any
 * violation is FATHOM_ERR_FORMAT.
 * Everything returned stays valid until fathom_gguf_close(); an open file is
 * read-only, so any number of threads may query it at once. The mapping
 * assumes nobody truncates the file while it is open.
 */

/* ggml tensor types; values are ggml's numbering (ggml.h). Missing numbers
 * (4, 5, 31-33, 36-38) were removed from ggml and are rejected. */
typedef enum fathom_ggml_type {
    FATHOM_GGML_TYPE_F32 = 0,
    FATHOM_GGML_TYPE_F16 = 1,
    FATHOM_GGML_TYPE_Q4_0 = 2,
    FATHOM_GGML_TYPE_Q4_1 = 3,
    FATHOM_GGML_TYPE_Q5_0 = 6,
    FATHOM_GGML_TYPE_Q5_1 = 7,
    FATHOM_GGML_TYPE_Q8_0 = 8,
    FATHOM_GGML_TYPE_Q8_1 = 9,
    FATHOM_GGML_TYPE_Q2_K = 10,
    FATHOM_GGML_TYPE_Q3_K = 11,
    FATHOM_GGML_TYPE_Q4_K = 12,
    FATHOM_GGML_TYPE_Q5_K = 13,
    FATHOM_GGML_TYPE_Q6_K = 14,
    FATHOM_GGML_TYPE_Q8_K = 15,
    FATHOM_GGML_TYPE_IQ2_XXS = 16,
    FATHOM_GGML_TYPE_IQ2_XS = 17,
    FATHOM_GGML_TYPE_IQ3_XXS = 18,
    FATHOM_GGML_TYPE_IQ1_S = 19,
    FATHOM_GGML_TYPE_IQ4_NL = 20,
    FATHOM_GGML_TYPE_IQ3_S = 21,
    FATHOM_GGML_TYPE_IQ2_S = 22,
    FATHOM_GGML_TYPE_IQ4_XS = 23,
    FATHOM_GGML_TYPE_I8 = 24,
    FATHOM_GGML_TYPE_I16 = 25,
    FATHOM_GGML_TYPE_I32 = 26,
    FATHOM_GGML_TYPE_I64 = 27,
    FATHOM_GGML_TYPE_F64 = 28,
    FATHOM_GGML_TYPE_IQ1_M = 29,
    FATHOM_GGML_TYPE_BF16 = 30,
    FATHOM_GGML_TYPE_TQ1_0 = 34,
    FATHOM_GGML_TYPE_TQ2_0 = 35,
    FATHOM_GGML_TYPE_MXFP4 = 39,
    FATHOM_GGML_TYPE_NVFP4 = 40,
    FATHOM_GGML_TYPE_Q1_0 = 41,
    FATHOM_GGML_TYPE_COUNT = 42
} fathom_ggml_type;

/* Block layout of a type: elements per block and bytes per block (1 and the
 * element size for plain types). FATHOM_ERR_UNSUPPORTED for an id ggml does
 * not define; NULL outputs are skipped. */
FATHOM_API int fathom_ggml_type_block(fathom_ggml_type type, uint32_t *block_elements, uint32_t *block_bytes);
/* Lower-case ggml name ("q4_1", "f32"); "unknown" for other ids. */
FATHOM_API const char *fathom_ggml_type_name(fathom_ggml_type type);
/* Bytes of n_elements of type: FATHOM_ERR_INVALID_ARG unless n_elements is a
 * multiple of the block size and the size fits in 64 bits. */
FATHOM_API int fathom_ggml_row_bytes(fathom_ggml_type type, uint64_t n_elements, uint64_t *bytes);
/* Decode n_elements (a multiple of the block size) from src into dst as
 * float32, exactly as ggml's reference dequantization does (same float
 * operations in the same order). src needs at least
 * fathom_ggml_row_bytes(type, n_elements) bytes (src_bytes says how many it
 * has; more is fine) and may be unaligned. Implemented: F32, F16, BF16,
 * Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K;
 * FATHOM_ERR_UNSUPPORTED for other types. NaN/inf in the data (or in a block scale) pass through. */
FATHOM_API int fathom_dequantize(fathom_ggml_type type, const void *src, uint64_t src_bytes,
                                 uint64_t n_elements, float *dst);

/* GGUF metadata value types (numbering of the format). */
typedef enum fathom_gguf_type {
    FATHOM_GGUF_UINT8 = 0,
    FATHOM_GGUF_INT8 = 1,
    FATHOM_GGUF_UINT16 = 2,
    FATHOM_GGUF_INT16 = 3,
    FATHOM_GGUF_UINT32 = 4,
    FATHOM_GGUF_INT32 = 5,
    FATHOM_GGUF_FLOAT32 = 6,
    FATHOM_GGUF_BOOL = 7,
    FATHOM_GGUF_STRING = 8,
    FATHOM_GGUF_ARRAY = 9,
    FATHOM_GGUF_UINT64 = 10,
    FATHOM_GGUF_INT64 = 11,
    FATHOM_GGUF_FLOAT64 = 12
} fathom_gguf_type;

#define FATHOM_GGUF_MAX_DIMS 4
#define FATHOM_GGUF_DEFAULT_ALIGNMENT 32
#define FATHOM_GGUF_MAX_NESTING 8 /* arrays of arrays deeper than this are rejected */

typedef struct fathom_gguf fathom_gguf;

/* A view of one metadata value (or array element), filled by the calls
 * below; valid until fathom_gguf_close(). Read scalars with the typed
 * getters, array elements with fathom_gguf_array_get(). */
typedef struct fathom_gguf_value {
    fathom_gguf_type type;
    fathom_gguf_type elem_type; /* ARRAY: type of its elements */
    uint64_t count;             /* ARRAY: number of elements; STRING: bytes, no NUL */
    const char *string;         /* STRING: NUL-terminated copy (may hold NULs before count) */
    union {
        uint64_t u;
        int64_t i;
        double f;
    } number_;           /* private: integer/bool scalars widened, floats as double */
    const void *array_;  /* private */
} fathom_gguf_value;

typedef struct fathom_gguf_tensor_info {
    const char *name;          /* NUL-terminated */
    fathom_ggml_type type;
    uint32_t n_dims;           /* 0..4 */
    uint64_t dims[FATHOM_GGUF_MAX_DIMS]; /* ggml "ne" order: dims[0] varies fastest; unused = 1 */
    uint64_t n_elements;
    uint64_t offset;           /* from the start of the file (aligned) */
    uint64_t bytes;            /* fathom_ggml_row_bytes(type, n_elements) */
    const void *data;          /* into the mapping: bytes readable bytes */
} fathom_gguf_tensor_info;

/* Map and parse a GGUF v2 or v3 file. FATHOM_ERR_IO if it cannot be opened
 * or mapped, FATHOM_ERR_FORMAT (with the byte offset in the message) for
 * anything malformed. */
FATHOM_API int fathom_gguf_open(fathom_gguf **out, const char *path);
FATHOM_API void fathom_gguf_close(fathom_gguf *gguf); /* NULL is fine */

FATHOM_API uint32_t fathom_gguf_version(const fathom_gguf *gguf);     /* 2 or 3; 0 for NULL */
FATHOM_API uint64_t fathom_gguf_alignment(const fathom_gguf *gguf);   /* general.alignment or 32 */
/* File offset of the data section (past the end for a file without tensors). */
FATHOM_API uint64_t fathom_gguf_data_offset(const fathom_gguf *gguf);
FATHOM_API uint64_t fathom_gguf_file_size(const fathom_gguf *gguf);

/* Metadata, in file order. */
FATHOM_API uint64_t fathom_gguf_kv_count(const fathom_gguf *gguf);
/* Key and value of entry index (< kv_count); either output may be NULL. */
FATHOM_API int fathom_gguf_kv_at(const fathom_gguf *gguf, uint64_t index, const char **key,
                                 fathom_gguf_value *value);
/* Index of key, or -1 when absent (or gguf/key NULL). O(log n). */
FATHOM_API int64_t fathom_gguf_find_key(const fathom_gguf *gguf, const char *key);
/* Value of key; FATHOM_ERR_FORMAT when the file lacks it. */
FATHOM_API int fathom_gguf_get(const fathom_gguf *gguf, const char *key, fathom_gguf_value *value);

/* Typed reads of a value. Integer getters accept any integer type whose
 * value fits the result; float getters accept FLOAT32 and FLOAT64 (FLOAT64 is
 * rounded to float for _f32); bool and string need exactly BOOL / STRING.
 * Anything else is FATHOM_ERR_FORMAT (the file has the wrong type). */
FATHOM_API int fathom_gguf_value_u32(const fathom_gguf_value *value, uint32_t *out);
FATHOM_API int fathom_gguf_value_i32(const fathom_gguf_value *value, int32_t *out);
FATHOM_API int fathom_gguf_value_u64(const fathom_gguf_value *value, uint64_t *out);
FATHOM_API int fathom_gguf_value_i64(const fathom_gguf_value *value, int64_t *out);
FATHOM_API int fathom_gguf_value_f32(const fathom_gguf_value *value, float *out);
FATHOM_API int fathom_gguf_value_f64(const fathom_gguf_value *value, double *out);
FATHOM_API int fathom_gguf_value_bool(const fathom_gguf_value *value, int *out); /* 0 or 1 */
/* len may be NULL. */
FATHOM_API int fathom_gguf_value_string(const fathom_gguf_value *value, const char **str, uint64_t *len);
/* Element index (< value->count) of an ARRAY value; FATHOM_ERR_INVALID_ARG
 * if value is not an array or index is out of range. */
FATHOM_API int fathom_gguf_array_get(const fathom_gguf_value *array, uint64_t index, fathom_gguf_value *elem);

/* Shorthands: fathom_gguf_get() then the typed getter. */
FATHOM_API int fathom_gguf_get_u32(const fathom_gguf *gguf, const char *key, uint32_t *out);
FATHOM_API int fathom_gguf_get_i32(const fathom_gguf *gguf, const char *key, int32_t *out);
FATHOM_API int fathom_gguf_get_u64(const fathom_gguf *gguf, const char *key, uint64_t *out);
FATHOM_API int fathom_gguf_get_f32(const fathom_gguf *gguf, const char *key, float *out);
FATHOM_API int fathom_gguf_get_bool(const fathom_gguf *gguf, const char *key, int *out);
FATHOM_API int fathom_gguf_get_string(const fathom_gguf *gguf, const char *key, const char **str,
                                      uint64_t *len);
/* An ARRAY whose elements have type elem_type, else FATHOM_ERR_FORMAT. */
FATHOM_API int fathom_gguf_get_array(const fathom_gguf *gguf, const char *key, fathom_gguf_type elem_type,
                                     fathom_gguf_value *array);

/* Tensors, in file order. */
FATHOM_API uint64_t fathom_gguf_tensor_count(const fathom_gguf *gguf);
FATHOM_API int fathom_gguf_tensor_at(const fathom_gguf *gguf, uint64_t index, fathom_gguf_tensor_info *info);
/* Index of the tensor called name, or -1 when absent (or arguments NULL). */
FATHOM_API int64_t fathom_gguf_find_tensor(const fathom_gguf *gguf, const char *name);
/* Info of the tensor called name; FATHOM_ERR_FORMAT when the file lacks it. */
FATHOM_API int fathom_gguf_tensor(const fathom_gguf *gguf, const char *name, fathom_gguf_tensor_info *info);

/* ===================================================================== *
 * model — a Llama-family decoder (SmolLM2; Qwen3; Gemma 3) from a
 * GGUF file, run on the CPU in plain C
 * ===================================================================== */

/*
 * Weights are dequantized once at load to float32 (SmolLM2-135M: 540 MB)
 * and never touched again; every hyper-parameter comes from the GGUF
 * metadata and every tensor's shape is checked against them. Architectures:
 * "llama" (RoPE on adjacent pairs (2i, 2i+1): GGUF stores Q/K rows permuted
 * for it), "qwen3" (QK-norm, RoPE on pairs (i, i + d/2) as llama.cpp's
 * NEOX mode) and "gemma3" (as llama.cpp's gemma3 graph: embeddings times
 * sqrt(embed), QK-norm, NEOX RoPE with a base for global and one for
 * sliding-window layers, RMSNorm after attention and after the FFN, GeGLU,
 * optional final logit soft-capping; the GGUF's norm weights already hold
 * Gemma's 1 + w, as convert_hf_to_gguf writes them). Biases, RoPE scaling,
 * attention logit soft-capping and unknown tensors are
 * FATHOM_ERR_UNSUPPORTED, not silently ignored.
 */
typedef struct fathom_model fathom_model;

typedef struct fathom_model_info {
    char arch[16];            /* general.architecture */
    char name[64];            /* general.name ("" if absent) */
    uint32_t layers;          /* <arch>.block_count */
    uint32_t embed;           /* <arch>.embedding_length */
    uint32_t ffn;             /* <arch>.feed_forward_length */
    uint32_t q_heads;         /* <arch>.attention.head_count */
    uint32_t kv_heads;        /* <arch>.attention.head_count_kv */
    uint32_t head_dim;        /* <arch>.attention.key_length, else embed / q_heads */
    uint32_t vocab;           /* rows of token_embd (<arch>.vocab_size must agree) */
    uint32_t context_length;  /* <arch>.context_length */
    float rope_base;          /* <arch>.rope.freq_base (10000 if absent) */
    float rms_eps;            /* <arch>.attention.layer_norm_rms_epsilon */
    int rope_neox;            /* 1: pairs (i, i + d/2); 0: adjacent pairs */
    int qk_norm;              /* 1: per-head RMSNorm of q and k before RoPE */
    int tied_output;          /* 1: output.weight absent, token_embd reused */
    uint64_t params;          /* weights held, in floats (tied output counted once) */
    /* gemma3 (the other architectures have the neutral values) */
    float attn_scale;         /* q.k is multiplied by it: 1/sqrt(head_dim), or as declared */
    float embed_scale;        /* token embeddings are multiplied by it: sqrt(embed) or 1 */
    float logit_softcap;      /* <arch>.final_logit_softcapping c: logits = c tanh(logits / c); 0: none */
    uint32_t sliding_window;  /* <arch>.attention.sliding_window: keys a sliding layer sees; 0: none */
    uint32_t sliding_pattern; /* layer l is global iff l % pattern == pattern - 1; 0: none or a
                                 per-layer list (fathom_model_layer_sliding). gemma3 files
                                 without the key: 6, llama.cpp's fixed value */
    float rope_base_swa;      /* RoPE base of the sliding layers (gemma3 without
                                 <arch>.rope.freq_base_swa: 10000, llama.cpp's) */
    int post_norms;           /* 1: RMSNorm of the attention and FFN outputs before each residual add */
    int gelu;                 /* 1: GeGLU with tanh GELU; 0: SwiGLU */
} fathom_model_info;

/* Open, validate and dequantize a GGUF model. FATHOM_ERR_IO / _FORMAT for a
 * bad file (the message names the key or tensor), _UNSUPPORTED for an
 * architecture, tensor type or feature this code does not run. */
FATHOM_API int fathom_model_open(fathom_model **out, const char *path);
FATHOM_API void fathom_model_free(fathom_model *model); /* NULL is fine */
FATHOM_API int fathom_model_get_info(const fathom_model *model, fathom_model_info *info);
/* 1 if layer attends a sliding window (of info.sliding_window keys, always
 * exactly: sparse methods apply to global layers only), 0 if it is global;
 * a negative status for a bad argument. */
FATHOM_API int fathom_model_layer_sliding(const fathom_model *model, uint32_t layer);

/* A tokenizer built from the GGUF metadata tokenizer.ggml.* (model, pre,
 * tokens, token_type, merges, bos/eos_token_id, add_bos_token); free it with
 * fathom_tokenizer_free. fathom_model_tokenizer also checks that every token
 * has an embedding row (FATHOM_ERR_FORMAT otherwise). */
FATHOM_API int fathom_tokenizer_from_gguf(fathom_tokenizer **out, const fathom_gguf *gguf);
FATHOM_API int fathom_model_tokenizer(const fathom_model *model, fathom_tokenizer **out);

/*
 * A decoding context: the KV cache (float32, [layer][kv head][position][d],
 * keys after RoPE / QK-norm, as attention sees them) and the position.
 * Matmuls run on `threads` threads over rows (0: one per core); results do
 * not depend on the thread count or on how tokens are split between prefill
 * calls and steps (every dot product sums in the same order). One call at a
 * time per context; contexts of one model may run on different threads (the
 * model is read-only). After a failed prefill or step the context refuses
 * work (FATHOM_ERR_STATE) until fathom_ctx_reset.
 */
typedef struct fathom_ctx fathom_ctx;

/* n_ctx: capacity in positions (0: the model's context_length). */
FATHOM_API int fathom_ctx_create(fathom_ctx **out, const fathom_model *model, uint32_t n_ctx,
                                 uint32_t threads);
FATHOM_API void fathom_ctx_free(fathom_ctx *ctx); /* NULL is fine */
FATHOM_API uint64_t fathom_ctx_length(const fathom_ctx *ctx);   /* positions filled */
FATHOM_API uint64_t fathom_ctx_capacity(const fathom_ctx *ctx);
/* Forget every position (the attention method stays, its index is emptied). */
FATHOM_API int fathom_ctx_reset(fathom_ctx *ctx);

/* Forget positions [n, length): the cache keeps rows [0, n) as they are
 * and a sparse method's index is rebuilt over them (in one append, so
 * fathom-centered's center becomes their mean), so decoding continues from
 * position n as if the later tokens had never run. n <= length. */
FATHOM_API int fathom_ctx_truncate(fathom_ctx *ctx, uint64_t n);

/* Run n tokens (ids < vocab) at the next positions with dense causal
 * attention. logits_out [vocab] (may be NULL) gets the last token's logits.
 * FATHOM_ERR_STATE if the tokens do not fit in the capacity.
 * FATHOM_ERR_NONFINITE, with a message naming the layer, head and position,
 * when a query, key, value, attention output, residual row or logit is not
 * finite (finite but extreme weights overflow float): never NaN logits with
 * FATHOM_OK. After any failure of prefill or step the context needs
 * fathom_ctx_reset. */
FATHOM_API int fathom_ctx_prefill(fathom_ctx *ctx, const int32_t *tokens, uint64_t n, float *logits_out);
/* One decode step: the token at the next position, attention by the method
 * set with fathom_ctx_set_attention (dense by default). */
FATHOM_API int fathom_ctx_step(fathom_ctx *ctx, int32_t token, float *logits_out);

/*
 * Attention of decode steps. method NULL or dense: exact dense attention.
 * Otherwise, per layer and KV head, an index over the cached keys (a
 * fathom_store, grown by fathom_store_append as tokens arrive; landmarks for
 * "landmark") is scanned for the group's queries, fathom_select keeps sink 4
 * + local 32 + top-k per query head (k in total) and fathom_attend attends
 * exactly over the selection. oracle scores with exact q.k. fathom's plan
 * uses the store's running channel variance, or the calibration keys' when
 * calib is given. The method must pass fathom_method_check at the model's
 * head dim. fathom-klt, ds and loki need calib (a capture of this
 * model: same layers, heads and dim), else FATHOM_ERR_UNSUPPORTED. calib is
 * read during this call only. May be called at any time; prefill stays dense
 * and reaches the index in one append per layer when it ends, so
 * fathom-centered:B centers its codes on the mean of the prefill's keys (of
 * the keys already cached when this is called after a prefill).
 */
FATHOM_API int fathom_ctx_set_attention(fathom_ctx *ctx, const fathom_method *method, uint32_t k,
                                        const fathom_source *calib);

typedef struct fathom_ctx_stats {
    uint64_t prefill_tokens, decode_steps;
    uint64_t sparse_steps;     /* decode steps that used the sparse path */
    double scan_bytes;         /* index bytes the scans touched, all layers and heads */
    double selected_rows;      /* sum over steps, layers, query heads of |selection| */
    double visible_rows;       /* sum of the visible positions of those selections */
} fathom_ctx_stats;
FATHOM_API int fathom_ctx_get_stats(const fathom_ctx *ctx, fathom_ctx_stats *stats);

/* Record the queries (after RoPE / QK-norm) of positions [first, first+count)
 * as they are computed, into the caller's buffer [layers x q_heads x count x d]
 * (the capture layout), which must stay valid while positions in that range
 * are run. buffer NULL stops recording. */
FATHOM_API int fathom_ctx_record_queries(fathom_ctx *ctx, uint64_t first, uint32_t count, float *buffer);
/* The cached keys and values of one layer and KV head: rows
 * [0, fathom_ctx_length) of d floats; valid until the next call on ctx. */
FATHOM_API int fathom_ctx_kv(const fathom_ctx *ctx, uint32_t layer, uint32_t kv_head, const float **keys,
                             const float **values);
/* A decode-trace record: what one sparse decode step read and selected for
 * one query head (q_head < q_heads / kv_heads, within its KV head's group)
 * of one layer. depths [dim] are the planes the scan read per channel (NULL
 * for methods that read no planes: oracle, landmark); rows [count] the
 * selected positions (sink, local and top-k). Valid during the call only. */
typedef struct fathom_trace_record {
    uint64_t position; /* the step's position; positions 0..position are visible */
    uint32_t layer, kv_head, q_head, dim;
    const uint8_t *depths;
    const uint32_t *rows;
    uint32_t count;
} fathom_trace_record;
typedef void (*fathom_trace_fn)(const fathom_trace_record *record, void *user);
/* Call fn for every (layer, query head) of every sparse decode step; fn
 * NULL stops. fn runs on the context's worker threads, concurrently for
 * different KV heads of a layer, so it must be thread-safe. */
FATHOM_API int fathom_ctx_set_trace(fathom_ctx *ctx, fathom_trace_fn fn, void *user);
/* Called during prefill with (tokens done, tokens of this call). */
FATHOM_API int fathom_ctx_set_progress(fathom_ctx *ctx, fathom_progress_fn fn, void *user);

#ifdef __cplusplus
}
#endif

#endif /* FATHOM_MODEL_H */

/* The public face of fathom_source: argument checks and dispatch to the
 * capture or synthetic implementation (src/source.h). */
#define _POSIX_C_SOURCE 200809L /* strnlen */
#include "source.h"

#include <stdlib.h>
#include <string.h>

int fathom_source_info_check(const fathom_source_info *info) {
    FATHOM_CHECK_ARG(info != NULL, "source info is NULL");
    size_t model_len = strnlen(info->model, sizeof info->model);
    FATHOM_CHECK_ARG(model_len > 0 && model_len < sizeof info->model,
                     "model name must be 1..%zu characters", sizeof info->model - 1);
    FATHOM_CHECK_ARG(info->layers > 0, "layers must be > 0");
    FATHOM_CHECK_ARG(info->q_heads > 0 && info->kv_heads > 0, "head counts must be > 0 (Hq %u, Hkv %u)",
                     info->q_heads, info->kv_heads);
    FATHOM_CHECK_ARG(info->q_heads % info->kv_heads == 0,
                     "q_heads %u is not a multiple of kv_heads %u", info->q_heads, info->kv_heads);
    FATHOM_CHECK_ARG(info->dim > 0, "dim must be > 0");
    FATHOM_CHECK_ARG(info->tokens > 0, "tokens must be > 0");
    FATHOM_CHECK_ARG(info->positions > 0, "positions must be > 0");
    uint64_t end;
    FATHOM_CHECK_ARG(fathom_add_u64(info->first_query, info->positions, &end) && end <= info->tokens,
                     "first_query %llu + positions %u exceeds tokens %llu",
                     (unsigned long long)info->first_query, info->positions,
                     (unsigned long long)info->tokens);
    uint64_t q_elems, kv_elems;
    return fathom_source_layer_sizes(info, &q_elems, &kv_elems);
}

int fathom_source_layer_sizes(const fathom_source_info *info, uint64_t *q_elems, uint64_t *kv_elems) {
    uint64_t q, kv, bytes;
    bool ok = fathom_mul_u64(info->q_heads, info->positions, &q) && fathom_mul_u64(q, info->dim, &q) &&
              fathom_mul_u64(info->kv_heads, info->tokens, &kv) && fathom_mul_u64(kv, info->dim, &kv) &&
              fathom_mul_u64(kv, sizeof(float), &bytes) && bytes <= (uint64_t)SIZE_MAX &&
              fathom_mul_u64(q, sizeof(float), &bytes) && bytes <= (uint64_t)SIZE_MAX;
    FATHOM_CHECK(!ok, FATHOM_ERR_NOMEM, "layer size overflows (Hq %u, Hkv %u, P %u, n %llu, d %u)",
                 info->q_heads, info->kv_heads, info->positions, (unsigned long long)info->tokens,
                 info->dim);
    *q_elems = q;
    *kv_elems = kv;
    return FATHOM_OK;
}

int fathom_source_new(fathom_source **out, const fathom_source_ops *ops,
                      const fathom_source_info *info, void *impl) {
    fathom_source *src = calloc(1, sizeof *src);
    if (!src) {
        ops->destroy(impl);
        return fathom_fail(FATHOM_ERR_NOMEM, "out of memory for a %s source", ops->kind);
    }
    src->ops = ops;
    src->info = *info;
    src->impl = impl;
    *out = src;
    return FATHOM_OK;
}

void fathom_source_free(fathom_source *src) {
    if (!src) return;
    if (src->impl) src->ops->destroy(src->impl);
    free(src);
}

int fathom_source_get_info(const fathom_source *src, fathom_source_info *info) {
    FATHOM_CHECK_ARG(src != NULL, "source is NULL");
    FATHOM_CHECK_ARG(info != NULL, "info is NULL");
    *info = src->info;
    return FATHOM_OK;
}

int fathom_source_layer(const fathom_source *src, uint32_t layer, float *q, float *k, float *v) {
    FATHOM_CHECK_ARG(src != NULL, "source is NULL");
    FATHOM_CHECK_ARG(layer < src->info.layers, "layer %u out of range (source has %u layers)", layer,
                     src->info.layers);
    return src->ops->layer(src, layer, q, k, v);
}

int fathom_source_metadata(const fathom_source *src, const char *key, const char **value) {
    FATHOM_CHECK_ARG(src != NULL, "source is NULL");
    FATHOM_CHECK_ARG(key != NULL, "metadata key is NULL");
    FATHOM_CHECK_ARG(value != NULL, "value is NULL");
    *value = "";
    if (!src->ops->meta_entry) return FATHOM_OK;
    for (uint64_t i = 0;; i++) {
        const char *k = NULL, *v = NULL;
        src->ops->meta_entry(src, i, &k, &v);
        if (!k) break;
        if (!strcmp(k, key)) {
            *value = v;
            break;
        }
    }
    return FATHOM_OK;
}

int fathom_source_metadata_at(const fathom_source *src, uint64_t index, const char **key,
                              const char **value) {
    FATHOM_CHECK_ARG(src && key && value, "fathom_source_metadata_at: NULL argument");
    *key = *value = NULL;
    if (src->ops->meta_entry) src->ops->meta_entry(src, index, key, value);
    if (!*key) *value = NULL;
    return FATHOM_OK;
}

int fathom_source_dtypes(const fathom_source *src, uint32_t layer, fathom_dtype *q, fathom_dtype *k,
                         fathom_dtype *v) {
    FATHOM_CHECK_ARG(src != NULL, "source is NULL");
    FATHOM_CHECK_ARG(layer < src->info.layers, "layer %u out of range (source has %u)", layer,
                     src->info.layers);
    fathom_dtype dq = FATHOM_DTYPE_F32, dk = FATHOM_DTYPE_F32, dv = FATHOM_DTYPE_F32;
    if (src->ops->dtypes) src->ops->dtypes(src, layer, &dq, &dk, &dv);
    if (q) *q = dq;
    if (k) *k = dk;
    if (v) *v = dv;
    return FATHOM_OK;
}

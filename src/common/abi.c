/* Struct layouts of fathom.h as the compiler laid them out, for bindings that
 * mirror the structs (python/fathom/_structs.py checks itself against this
 * table in its tests). Only types from the public header are used here. */
#include "internal.h"

#include <string.h>

typedef struct abi_entry {
    const char *type;  /* struct name as in the header */
    const char *field; /* NULL: the struct itself */
    size_t offset, size;
} abi_entry;

#define ABI_STRUCT(T) {#T, NULL, 0, sizeof(T)}
#define ABI_FIELD(T, f) {#T, #f, offsetof(T, f), sizeof(((T *)0)->f)}

/* Each struct, then its fields in declaration order. */
static const abi_entry abi_table[] = {
    ABI_STRUCT(fathom_segment_view),
    ABI_FIELD(fathom_segment_view, planes),
    ABI_FIELD(fathom_segment_view, scales),
    ABI_FIELD(fathom_segment_view, first_token),
    ABI_FIELD(fathom_segment_view, blocks),
    ABI_FIELD(fathom_segment_view, tokens),

    ABI_STRUCT(fathom_method),
    ABI_FIELD(fathom_method, kind),
    ABI_FIELD(fathom_method, param),
    ABI_FIELD(fathom_method, name),

    ABI_STRUCT(fathom_source_info),
    ABI_FIELD(fathom_source_info, model),
    ABI_FIELD(fathom_source_info, layers),
    ABI_FIELD(fathom_source_info, q_heads),
    ABI_FIELD(fathom_source_info, kv_heads),
    ABI_FIELD(fathom_source_info, dim),
    ABI_FIELD(fathom_source_info, tokens),
    ABI_FIELD(fathom_source_info, positions),
    ABI_FIELD(fathom_source_info, first_query),

    ABI_STRUCT(fathom_eval_config),
    ABI_FIELD(fathom_eval_config, k),
    ABI_FIELD(fathom_eval_config, calib),
    ABI_FIELD(fathom_eval_config, layer_budget),
    ABI_FIELD(fathom_eval_config, threads),
    ABI_FIELD(fathom_eval_config, max_positions),
    ABI_FIELD(fathom_eval_config, planes_as_keys),
    ABI_FIELD(fathom_eval_config, progress),
    ABI_FIELD(fathom_eval_config, progress_user),

    ABI_STRUCT(fathom_method_result),
    ABI_FIELD(fathom_method_result, name),
    ABI_FIELD(fathom_method_result, bits_per_token),
    ABI_FIELD(fathom_method_result, scan_bytes_per_step),
    ABI_FIELD(fathom_method_result, row_bytes_per_step),
    ABI_FIELD(fathom_method_result, rel_error),
    ABI_FIELD(fathom_method_result, rel_error_stderr),
    ABI_FIELD(fathom_method_result, selection_ratio),
};

#define ABI_ENTRIES (sizeof abi_table / sizeof abi_table[0])

int fathom_abi_layout(const char *type, const char *field, size_t *offset, size_t *size) {
    FATHOM_CHECK_ARG(type, "fathom_abi_layout: type is NULL");
    for (size_t i = 0; i < ABI_ENTRIES; i++) {
        const abi_entry *e = &abi_table[i];
        if (strcmp(e->type, type) != 0) continue;
        if (field ? e->field && !strcmp(e->field, field) : !e->field) {
            if (offset) *offset = e->offset;
            if (size) *size = e->size;
            return FATHOM_OK;
        }
    }
    return fathom_fail(FATHOM_ERR_INVALID_ARG, "fathom_abi_layout: no %s%s%s in the table", type,
                       field ? "." : "", field ? field : "");
}

const char *fathom_abi_field(const char *type, uint32_t index) {
    if (!type) return NULL;
    uint32_t seen = 0;
    for (size_t i = 0; i < ABI_ENTRIES; i++) {
        const abi_entry *e = &abi_table[i];
        if (!e->field || strcmp(e->type, type) != 0) continue;
        if (seen++ == index) return e->field;
    }
    return NULL;
}

/* A fathom_source is polymorphic: a capture file or the synthetic generator.
 * Each kind fills a vtable; src/source.c dispatches the public calls. */
#ifndef FATHOM_SOURCE_H
#define FATHOM_SOURCE_H

#include "internal.h"

typedef struct fathom_source_ops {
    const char *kind; /* "capture" or "synthetic", for messages */
    /* Release impl (never NULL when called). */
    void (*destroy)(void *impl);
    /* Fill the outputs of one layer; arguments are already validated. */
    int (*layer)(const fathom_source *src, uint32_t layer, float *q, float *k, float *v);
    /* Metadata entry i (0-based) in file order, or NULL key when i is past the end.
     * May be NULL for kinds without metadata. */
    void (*meta_entry)(const fathom_source *src, uint64_t i, const char **key, const char **value);
    /* Stored dtypes of one layer's tensors (layer validated). NULL: all F32. */
    void (*dtypes)(const fathom_source *src, uint32_t layer, fathom_dtype *q, fathom_dtype *k, fathom_dtype *v);
} fathom_source_ops;

struct fathom_source {
    const fathom_source_ops *ops;
    fathom_source_info info;
    void *impl;
};

/* Wrap impl into a new source; on failure destroys impl. */
int fathom_source_new(fathom_source **out, const fathom_source_ops *ops,
                      const fathom_source_info *info, void *impl);

/* Checks every field of a source description (shared by writer and readers). */
int fathom_source_info_check(const fathom_source_info *info);

/* Elements of one layer's q ([Hq x P x d]) and of k or v ([Hkv x n x d]). */
int fathom_source_layer_sizes(const fathom_source_info *info, uint64_t *q_elems, uint64_t *kv_elems);

#endif /* FATHOM_SOURCE_H */

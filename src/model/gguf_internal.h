/* GGUF reader internals shared with tests and fuzz targets. Not installed. */
#ifndef FATHOM_GGUF_INTERNAL_H
#define FATHOM_GGUF_INTERNAL_H

#include "internal.h"
#include "fathom_model.h"

/* Parse a GGUF image held in memory, without copying it: data must stay
 * valid and unchanged until fathom_gguf_close(). Same checks as
 * fathom_gguf_open(). */
int fathom_gguf_open_memory(fathom_gguf **out, const void *data, uint64_t size);

/* fathom_model_open() of a GGUF image in memory (not copied: data must
 * outlive the model). For the fuzz target and tests. */
int fathom_model_open_memory(fathom_model **out, const void *data, uint64_t size);

#endif

/* Capture internals shared with the fuzz target and tests. */
#ifndef FATHOM_CAPTURE_INTERNAL_H
#define FATHOM_CAPTURE_INTERNAL_H

#include "source.h"

/* Largest JSON header accepted (bytes). safetensors itself caps it at 100 MB. */
#define FATHOM_CAPTURE_MAX_HEADER (100ull * 1000 * 1000)
/* Largest layer count accepted. */
#define FATHOM_CAPTURE_MAX_LAYERS 4096u
/* Value of the "format" metadata entry the writer puts in every file. */
#define FATHOM_CAPTURE_FORMAT "fathom-capture-1"

/* Open a capture held in memory: the bytes are copied, so data may be freed
 * afterwards. Same checks as fathom_capture_open. */
int fathom_capture_open_memory(fathom_source **out, const void *data, uint64_t size);

#endif /* FATHOM_CAPTURE_INTERNAL_H */

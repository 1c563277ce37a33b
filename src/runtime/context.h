/* Contexts: one shared, reference-counted handle per device over the driver's primary
 * context, which every other runtime object belongs to. */
#ifndef TC_CONTEXT_H
#define TC_CONTEXT_H

#include <stddef.h>

#include "tc_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tc_context tc_context;

/* Retain device `ordinal`'s primary context (the first call per device creates it; each
 * retain needs one release) and make it current on this thread. */
TC_API tc_status tc_context_retain(int ordinal, tc_context **out);

/* Drop one reference; the last one unloads the kernels and releases the primary context.
 * NULL is a no-op. Streams, events and pools of the context must be destroyed first. */
TC_API void tc_context_release(tc_context *ctx);

/* Make ctx current on the calling thread (runtime calls do this themselves when needed). */
TC_API tc_status tc_context_make_current(tc_context *ctx);

/* Wait until all work on the device has finished. */
TC_API tc_status tc_context_synchronize(tc_context *ctx);

/* Free and total device memory in bytes, as the driver sees it now. */
TC_API tc_status tc_context_mem_info(tc_context *ctx, size_t *free_bytes, size_t *total_bytes);

/* The device ordinal and the driver handle behind ctx. */
TC_API int tc_context_ordinal(const tc_context *ctx);
TC_API CUcontext tc_context_handle(const tc_context *ctx);

#ifdef __cplusplus
}
#endif

#endif /* TC_CONTEXT_H */

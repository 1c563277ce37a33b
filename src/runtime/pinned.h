/* Pinned (page-locked) host buffers: what asynchronous host<->device copies need to run at
 * full PCIe speed and without staging. */
#ifndef TC_PINNED_H
#define TC_PINNED_H

#include <stddef.h>

#include "runtime/context.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Allocate `bytes` of page-locked host memory usable by every context. */
TC_API tc_status tc_pinned_alloc(tc_context *ctx, size_t bytes, void **out);

/* Free a pinned buffer; NULL is a no-op. */
TC_API void tc_pinned_free(tc_context *ctx, void *ptr);

#ifdef __cplusplus
}
#endif

#endif /* TC_PINNED_H */

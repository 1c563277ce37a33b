/* Pinned host buffers through cuMemHostAlloc. */
#include "runtime/pinned.h"

#include "runtime/error.h"
#include "runtime/internal.h"

tc_status tc_pinned_alloc(tc_context *ctx, size_t bytes, void **out)
{
    *out = NULL;
    TC_TRY(tc__context_enter(ctx));
    tc_status st = tc_cuMemHostAlloc(out, bytes ? bytes : 1, CU_MEMHOSTALLOC_PORTABLE);
    if (st == TC_CUDA_ERROR_OUT_OF_MEMORY)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_pinned_alloc",
                            "cannot pin %zu bytes of host memory (%s)", bytes, tc_status_name(st));
    return st;
}

void tc_pinned_free(tc_context *ctx, void *ptr)
{
    if (ptr == NULL)
        return;
    if (tc__context_enter(ctx) != TC_OK || tc_cuMemFreeHost(ptr) != TC_OK)
        TC_WARN("cuMemFreeHost(%p) failed: %s", ptr, tc_last_error());
}

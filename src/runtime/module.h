/* The embedded kernels: one fatbin built from kernels/<file>.cu by nvcc, linked into the library
 * and loaded into a context on first use. */
#ifndef TC_MODULE_H
#define TC_MODULE_H

#include <stddef.h>

#include "runtime/context.h"
#include "tc_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Load the kernels into ctx now instead of at the first launch. Fails with
 * TC_ERR_NO_KERNEL_IMAGE when the fatbin has no code this GPU can run (or the library was
 * built without nvcc), and with TC_ERR_KERNEL_MISMATCH when a kernel's parameters differ from
 * its generated launcher (checked where the driver has cuFuncGetParamInfo). Later calls
 * return the first result. */
TC_API tc_status tc_module_load(tc_context *ctx);

/* The loaded function for kernel `id` (loading the module if needed). */
TC_API tc_status tc_module_function(tc_context *ctx, tc_kernel_id id, CUfunction *out);

/* The embedded fatbin's size in bytes and the targets it was built for ("sm_80 ... "). */
TC_API size_t tc_module_fatbin_size(void);
TC_API const char *tc_module_targets(void);

#ifdef __cplusplus
}
#endif

#endif /* TC_MODULE_H */

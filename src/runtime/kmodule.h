/* Kernels of the user's own, in a module of their own: a fatbin (or cubin, or PTX) and the
 * table that `thincuda_gen.py kernels` wrote for it, loaded into a context with every
 * kernel's parameter sizes checked, and launched through the generated, type-checked
 * launchers. It never mixes with thincuda's own kernels (runtime/module.h). */
#ifndef TC_KMODULE_H
#define TC_KMODULE_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/context.h"
#include "runtime/stream.h"
#include "tc_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the generator writes for a set of .cu files: the image and one row per kernel. */
typedef struct tc_kmodule_spec {
    const char *name;           /* the module's name ("my"), for messages */
    const unsigned char *image; /* fatbin, cubin or NUL-terminated PTX, as cuModuleLoadData takes */
    size_t image_bytes;         /* 0: generated without an image */
    const char *targets;        /* what the image was built for ("sm_80 sm_90"), for messages */
    unsigned count;
    const tc_kernel_info *kernels; /* [count], indexed by the generated kernel ids */
} tc_kmodule_spec;

typedef struct tc_kmodule tc_kmodule;

/* Load spec's image into ctx and look up every kernel. Fails with TC_ERR_NO_KERNEL_IMAGE when
 * the image has no code for this GPU (or there is no image), and with TC_ERR_KERNEL_MISMATCH
 * when a kernel is missing or its parameters differ from the table (checked where the driver
 * has cuFuncGetParamInfo); the message names the kernel and its source line. */
TC_API tc_status tc_kmodule_create(tc_context *ctx, const tc_kmodule_spec *spec, tc_kmodule **out);

/* Unload the module; NULL is a no-op. */
TC_API void tc_kmodule_destroy(tc_kmodule *m);

/* The loaded function of kernel `id`. */
TC_API tc_status tc_kmodule_function(tc_kmodule *m, unsigned id, CUfunction *out);

/* Launch kernel `id` with args[i] pointing at parameter i, after checking the configuration
 * against the device and the kernel (the generated launchers call this). cfg->stream must
 * belong to the module's context. The stream's cluster extent applies (tc_stream_set_cluster);
 * its overlap (tc_stream_set_overlap) only where the module allows it (below): otherwise the
 * kernel starts once the one before it on the stream has finished, as a plain launch does. */
TC_API tc_status tc_kmodule_launch(tc_kmodule *m, unsigned id, const tc_launch_config *cfg,
                                   void **args);

/* Let the module's kernels start while the kernel before them on an overlapped stream finishes
 * (programmatic dependent launch, compute capability 9.0 and up): only for kernels that execute
 * `griddepcontrol.wait` (cudaGridDependencySynchronize) before they read anything an earlier
 * kernel wrote or write anything it reads, as thincuda's own do. Off by default. */
TC_API void tc_kmodule_set_overlap(tc_kmodule *m, bool on);

#ifdef __cplusplus
}
#endif

#endif /* TC_KMODULE_H */

/* Compiling CUDA C++ at run time (NVRTC) for the current GPU's architecture: the cubin is
 * cached on disk (under $XDG_CACHE_HOME/thincuda/rtc, keyed by the source, the options, the
 * architecture and the driver and NVRTC versions), loaded into the context, and its kernels
 * launched with their argument sizes checked against the compiled parameters. */
#ifndef TC_RTC_H
#define TC_RTC_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/context.h"
#include "runtime/stream.h"
#include "tc_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tc_rtc tc_rtc;

/* Compile `source` (called `name` in messages) with `options` (n_options of them; the
 * architecture option is added) for ctx's GPU, or take the cubin from the cache, and load it.
 * A compile error is TC_NVRTC_ERROR_COMPILATION with NVRTC's log in tc_last_error(); without
 * libnvrtc, TC_ERR_LIBRARY_NOT_FOUND. */
TC_API tc_status tc_rtc_create(tc_context *ctx, const char *source, const char *name,
                               const char *const *options, int n_options, tc_rtc **out);

/* Unload the program; NULL is a no-op. */
TC_API void tc_rtc_destroy(tc_rtc *p);

/* True when the cubin came from the disk cache instead of a compilation. */
TC_API bool tc_rtc_cached(const tc_rtc *p);

/* The cache file this program's cubin lives in. */
TC_API const char *tc_rtc_cache_path(const tc_rtc *p);

/* The loaded function `kernel` (an extern "C" name). */
TC_API tc_status tc_rtc_function(tc_rtc *p, const char *kernel, CUfunction *out);

/* Launch `kernel` with args[i] pointing at an argument of sizes[i] bytes (n_args of them).
 * Where the driver has cuFuncGetParamInfo the count and every size are checked against the
 * compiled kernel first: a mismatch is TC_ERR_KERNEL_MISMATCH naming the parameter. The
 * stream's cluster extent applies (it must divide the grid); its overlap does not: the kernel
 * starts once the one before it has finished. */
TC_API tc_status tc_rtc_launch(tc_rtc *p, const char *kernel, const tc_launch_config *cfg,
                               void **args, const size_t *sizes, unsigned n_args);

#ifdef __cplusplus
}
#endif

#endif /* TC_RTC_H */

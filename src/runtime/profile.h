/* Kernel profiling (THINCUDA_PROFILE=1): per kernel, launches, GPU time measured by events
 * around each launch, and theoretical occupancy; a table at exit or on request. And NVTX
 * ranges (THINCUDA_NVTX=1) for Nsight Systems. */
#ifndef TC_RUNTIME_PROFILE_H
#define TC_RUNTIME_PROFILE_H

#include <stdbool.h>
#include <stddef.h>

#include "tc_bindings.h"

/* Whether launches are profiled: THINCUDA_PROFILE=1 (read once), or tc_profile_enable. The
 * engine runs its decode steps without CUDA graphs while this is true, so that each kernel
 * is launched, and timed, on its own. */
TC_API bool tc_profile_enabled(void);

/* Turn profiling on or off from now on. On prints the table at exit (stderr), unless
 * tc_profile_reset emptied it. */
TC_API void tc_profile_enable(bool on);

/* Forget every figure so far (after warm-up steps, say); pending launches are dropped. */
TC_API void tc_profile_reset(void);

/* Wait for the launches profiled so far and add their times to the table. */
TC_API tc_status tc_profile_flush(void);

/* Write the table (flushing first) into buf, NUL-terminated and cut to size; return the
 * length the whole table needs. An empty table writes "". */
TC_API size_t tc_profile_format(char *buf, size_t size);

/* Open an NVTX range named `name` on this thread when THINCUDA_NVTX=1 (Nsight Systems shows
 * it on its timeline; with no tool attached it costs a call); otherwise do nothing. Ranges
 * nest: close each with tc_profile_range_pop. */
TC_API void tc_profile_range_push(const char *name);

/* Close the innermost range tc_profile_range_push opened on this thread. */
TC_API void tc_profile_range_pop(void);

#endif /* TC_RUNTIME_PROFILE_H */

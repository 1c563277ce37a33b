/* The thincuda runtime in one include: devices, contexts, streams, events, the memory pool,
 * pinned buffers, the embedded kernels and their launchers, modules of the user's own
 * kernels, run-time compilation (NVRTC), GPU telemetry (NVML), kernel
 * profiling, logging. */
#ifndef TC_RUNTIME_H
#define TC_RUNTIME_H

#include "runtime/context.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/event.h"
#include "runtime/host.h"
#include "runtime/kmodule.h"
#include "runtime/launch.h"
#include "runtime/log.h"
#include "runtime/module.h"
#include "runtime/pinned.h"
#include "runtime/pool.h"
#include "runtime/profile.h"
#include "runtime/rtc.h"
#include "runtime/stream.h"
#include "runtime/telemetry.h"
#include "runtime/version.h"
#include "tc_kernels.h"

#endif /* TC_RUNTIME_H */

/* thincuda in one include: the generated bindings (driver, cuBLAS, cuRAND, NVRTC, nvJitLink),
 * the runtime and the tensor ops. Compile with `pkg-config --cflags thincuda`. */
#ifndef THINCUDA_H
#define THINCUDA_H

#include "ops/ops.h"
#include "runtime/runtime.h"
#include "runtime/version.h"
#include "tc_cublas.h"
#include "tc_cuda.h"
#include "tc_curand.h"
#include "tc_nvjitlink.h"
#include "tc_nvrtc.h"

#endif /* THINCUDA_H */

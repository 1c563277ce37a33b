/* thincuda in one include: the generated bindings (driver, cuBLAS, cuBLASLt, cuRAND, NVRTC,
 * nvJitLink, NVML, NCCL, NVTX), the runtime and the tensor ops. Compile with `pkg-config
 * --cflags thincuda`. */
#ifndef THINCUDA_H
#define THINCUDA_H

#include "ops/ops.h"
#include "runtime/runtime.h"
#include "runtime/version.h"
#include "tc_cublas.h"
#include "tc_cublaslt.h"
#include "tc_cuda.h"
#include "tc_curand.h"
#include "tc_nccl.h"
#include "tc_nvjitlink.h"
#include "tc_nvml.h"
#include "tc_nvrtc.h"
#include "tc_nvtx.h"

#endif /* THINCUDA_H */

/* thincuda in one include: the generated bindings (driver, cuBLAS, cuRAND), the runtime and
 * the tensor ops. Compile with `pkg-config --cflags thincuda`. */
#ifndef THINCUDA_H
#define THINCUDA_H

#include "ops/ops.h"
#include "runtime/runtime.h"
#include "runtime/version.h"
#include "tc_cublas.h"
#include "tc_cuda.h"
#include "tc_curand.h"

#endif /* THINCUDA_H */

// Shared by every kernels/<file>.cu: the CUDA headers kernels may use and small device helpers.
// Only `extern "C" __global__ void tc_k_<op>_<dtype>(...)` functions cross into C.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

// Bulk copy and fill kernels: the device-to-device bandwidth reference and output poisoning.
#include "common.cuh"

namespace copy_cu {

// Each thread moves kUnroll 16-byte vectors per loop trip, all loads before all stores, so
// enough bytes are in flight per SM to approach HBM bandwidth.
constexpr int kUnroll = 4;

__device__ __forceinline__ void copy_vectors(uint4 *__restrict__ dst, const uint4 *__restrict__ src,
                                             size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {
        uint4 v[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; u++)
            v[u] = __ldcs(src + i + u * stride);
#pragma unroll
        for (int u = 0; u < kUnroll; u++)
            __stcs(dst + i + u * stride, v[u]);
    }
    for (; i < n; i += stride)
        dst[i] = src[i];
}

} // namespace copy_cu

/** Copy `bytes` bytes from src to dst (device memory, not overlapping). Both 16-byte aligned
 *  take the vector path; otherwise bytes move one at a time. Any grid size works. */
extern "C" __global__ void tc_k_copy_u8(uint8_t *__restrict__ dst, const uint8_t *__restrict__ src,
                                        size_t bytes)
{
    tc::await_inputs();
    if ((((uintptr_t)dst | (uintptr_t)src) & 15) == 0) {
        size_t nvec = bytes / 16;
        copy_cu::copy_vectors((uint4 *)dst, (const uint4 *)src, nvec);
        size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
        if (t < bytes % 16)
            dst[nvec * 16 + t] = src[nvec * 16 + t];
        return;
    }
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < bytes; i += stride)
        dst[i] = src[i];
}

/** Set n floats at out to value (grid-stride; any grid size works). */
extern "C" __global__ void tc_k_fill_f32(float *out, float value, size_t n)
{
    tc::await_inputs();
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = value;
}

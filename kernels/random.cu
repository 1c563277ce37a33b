// Deterministic pseudo-random fills (weights of benchmark models): element i of a fill with
// `seed` is offset + scale * (2u - 1), u uniform in [0, 1) from a hash of (seed, i), so the
// CPU reference and every launch shape give the same numbers.
#include "common.cuh"

namespace random_cu {

__device__ __forceinline__ uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

template <typename T>
__device__ void fill(T *out, int64_t n, uint64_t seed, float offset, float scale)
{
    uint64_t key = mix(seed + 0x9e3779b97f4a7c15ull);
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float u = (float)(mix(key ^ (uint64_t)i) >> 40) * (1.0f / 16777216.0f);
        out[i] = tc::from_f32<T>(offset + scale * (2.0f * u - 1.0f));
    }
}

} // namespace random_cu

/** out[i] = offset + scale * (2u - 1), u from a hash of (seed, i) (grid-stride). */
extern "C" __global__ void tc_k_fill_random_f32(float *out, int64_t n, uint64_t seed, float offset,
                                              float scale)
{
    tc::await_inputs();
    random_cu::fill(out, n, seed, offset, scale);
}
/** out[i] = offset + scale * (2u - 1), u from a hash of (seed, i) (grid-stride). */
extern "C" __global__ void tc_k_fill_random_f16(__half *out, int64_t n, uint64_t seed, float offset,
                                              float scale)
{
    tc::await_inputs();
    random_cu::fill(out, n, seed, offset, scale);
}
/** out[i] = offset + scale * (2u - 1), u from a hash of (seed, i) (grid-stride). */
extern "C" __global__ void tc_k_fill_random_bf16(__nv_bfloat16 *out, int64_t n, uint64_t seed,
                                               float offset, float scale)
{
    tc::await_inputs();
    random_cu::fill(out, n, seed, offset, scale);
}

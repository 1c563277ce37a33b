// Rotary position embedding (RoFormer, Su et al. 2021; Llama 3 frequency scaling as in Meta's
// reference and Hugging Face's _compute_llama3_parameters). One block per token: the block
// computes each pair's cos/sin once, in double, then rotates every q and k head with them.
#include "common.cuh"

namespace rope_cu {

constexpr int kMaxPairs = 256; // head_dim up to 512

__device__ double frequency(int i, int head_dim, double theta, int scaling, double factor,
                            double low_ff, double high_ff, double orig_max)
{
    double inv = exp(-(2.0 * i / head_dim) * log(theta));
    if (scaling != 1)
        return inv;
    const double pi = 3.14159265358979323846;
    double wavelen = 2.0 * pi / inv;
    double low_wavelen = orig_max / low_ff, high_wavelen = orig_max / high_ff;
    if (wavelen > low_wavelen)
        return inv / factor;
    if (wavelen < high_wavelen)
        return inv;
    double smooth = (orig_max / wavelen - low_ff) / (high_ff - low_ff);
    return (1.0 - smooth) * inv / factor + smooth * inv;
}

template <typename T>
__device__ void run(T *q, T *k, const int32_t *pos, int n_heads, int n_kv_heads, int head_dim,
                    int64_t q_stride, int64_t k_stride, int interleaved, double theta, int scaling,
                    double factor, double low_ff, double high_ff, double orig_max)
{
    __shared__ float cs[kMaxPairs], sn[kMaxPairs];
    int64_t row = blockIdx.x;
    int half = head_dim / 2;
    double p = (double)pos[row];
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        double s, c;
        sincos(p * frequency(i, head_dim, theta, scaling, factor, low_ff, high_ff, orig_max), &s, &c);
        cs[i] = (float)c;
        sn[i] = (float)s;
    }
    __syncthreads();
    int total = (n_heads + (k ? n_kv_heads : 0)) * half;
    for (int t = threadIdx.x; t < total; t += blockDim.x) {
        int head = t / half, i = t % half;
        T *base = head < n_heads ? q + row * q_stride + (int64_t)head * head_dim
                                 : k + row * k_stride + (int64_t)(head - n_heads) * head_dim;
        int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
        float x0 = tc::to_f32(base[a]), x1 = tc::to_f32(base[b]);
        base[a] = tc::from_f32<T>(x0 * cs[i] - x1 * sn[i]);
        base[b] = tc::from_f32<T>(x1 * cs[i] + x0 * sn[i]);
    }
}

} // namespace rope_cu

/** Rotate q [rows, n_heads, head_dim] and k [rows, n_kv_heads, head_dim] (k may be NULL) in
 *  place by pos[row], one block per row; scaling 1 is Llama 3's. */
extern "C" __global__ void tc_k_rope_f32(float *q, float *k, const int32_t *pos, int32_t n_heads,
                                       int32_t n_kv_heads, int32_t head_dim, int64_t q_stride,
                                       int64_t k_stride, int32_t interleaved, double theta,
                                       int32_t scaling, double factor, double low_freq_factor,
                                       double high_freq_factor, double original_max_position)
{
    rope_cu::run(q, k, pos, n_heads, n_kv_heads, head_dim, q_stride, k_stride, interleaved, theta,
                 scaling, factor, low_freq_factor, high_freq_factor, original_max_position);
}
/** Rotate q [rows, n_heads, head_dim] and k [rows, n_kv_heads, head_dim] (k may be NULL) in
 *  place by pos[row], one block per row; scaling 1 is Llama 3's. */
extern "C" __global__ void tc_k_rope_f16(__half *q, __half *k, const int32_t *pos, int32_t n_heads,
                                       int32_t n_kv_heads, int32_t head_dim, int64_t q_stride,
                                       int64_t k_stride, int32_t interleaved, double theta,
                                       int32_t scaling, double factor, double low_freq_factor,
                                       double high_freq_factor, double original_max_position)
{
    rope_cu::run(q, k, pos, n_heads, n_kv_heads, head_dim, q_stride, k_stride, interleaved, theta,
                 scaling, factor, low_freq_factor, high_freq_factor, original_max_position);
}
/** Rotate q [rows, n_heads, head_dim] and k [rows, n_kv_heads, head_dim] (k may be NULL) in
 *  place by pos[row], one block per row; scaling 1 is Llama 3's. */
extern "C" __global__ void tc_k_rope_bf16(__nv_bfloat16 *q, __nv_bfloat16 *k, const int32_t *pos, int32_t n_heads,
                                       int32_t n_kv_heads, int32_t head_dim, int64_t q_stride,
                                       int64_t k_stride, int32_t interleaved, double theta,
                                       int32_t scaling, double factor, double low_freq_factor,
                                       double high_freq_factor, double original_max_position)
{
    rope_cu::run(q, k, pos, n_heads, n_kv_heads, head_dim, q_stride, k_stride, interleaved, theta,
                 scaling, factor, low_freq_factor, high_freq_factor, original_max_position);
}

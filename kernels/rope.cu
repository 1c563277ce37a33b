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

// Rotate P consecutive pairs starting at pair i of the head at `base` (P = 2 moves the
// elements as 4-element or two 2-element vectors).
template <typename T, int P>
__device__ __forceinline__ void rotate(T *base, int i, int half, bool interleaved, const float *cs, const float *sn)
{
    if (interleaved) {
        float x[2 * P];
        tc::load_f32<T, 2 * P>(base + 2 * i, x);
#pragma unroll
        for (int p = 0; p < P; p++) {
            float x0 = x[2 * p], x1 = x[2 * p + 1];
            x[2 * p] = x0 * cs[i + p] - x1 * sn[i + p];
            x[2 * p + 1] = x1 * cs[i + p] + x0 * sn[i + p];
        }
        tc::store_f32<T, 2 * P>(base + 2 * i, x);
    } else {
        float a[P], b[P];
        tc::load_f32<T, P>(base + i, a);
        tc::load_f32<T, P>(base + i + half, b);
#pragma unroll
        for (int p = 0; p < P; p++) {
            float x0 = a[p], x1 = b[p];
            a[p] = x0 * cs[i + p] - x1 * sn[i + p];
            b[p] = x1 * cs[i + p] + x0 * sn[i + p];
        }
        tc::store_f32<T, P>(base + i, a);
        tc::store_f32<T, P>(base + i + half, b);
    }
}

template <typename T, int P>
__device__ void rotate_all(T *q, T *k, int64_t row, int n_heads, int n_kv_heads, int head_dim, int64_t q_stride,
                           int64_t k_stride, bool interleaved, const float *cs, const float *sn)
{
    int half = head_dim / 2, per_head = half / P;
    int total = (n_heads + (k ? n_kv_heads : 0)) * per_head;
    for (int t = threadIdx.x; t < total; t += blockDim.x) {
        int head = t / per_head, i = (t % per_head) * P;
        T *base = head < n_heads ? q + row * q_stride + (int64_t)head * head_dim
                                 : k + row * k_stride + (int64_t)(head - n_heads) * head_dim;
        rotate<T, P>(base, i, half, interleaved, cs, sn);
    }
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
    // Several pairs per thread, moved as 16-byte vectors (8 or 4 pairs for 16-bit types), when
    // every access stays aligned to its vector size: fewer, wider memory operations keep more
    // bytes in flight, which is what a memory-bound op needs.
    constexpr int PW = 16 / (int)sizeof(T); // elements per 16 bytes
    constexpr int PI = PW / 2;              // interleaved: a vector holds PW/2 pairs
    auto fits = [&](int elems) {
        return half % (interleaved ? elems / 2 : elems) == 0 && q_stride % elems == 0 && k_stride % elems == 0 &&
               head_dim % elems == 0 && tc::aligned(q, k, q, elems * (int)sizeof(T));
    };
    if (interleaved && fits(PW))
        rotate_all<T, PI>(q, k, row, n_heads, n_kv_heads, head_dim, q_stride, k_stride, interleaved, cs, sn);
    else if (!interleaved && fits(PW))
        rotate_all<T, PW>(q, k, row, n_heads, n_kv_heads, head_dim, q_stride, k_stride, interleaved, cs, sn);
    else if (half % 2 == 0 && fits(4))
        rotate_all<T, 2>(q, k, row, n_heads, n_kv_heads, head_dim, q_stride, k_stride, interleaved, cs, sn);
    else
        rotate_all<T, 1>(q, k, row, n_heads, n_kv_heads, head_dim, q_stride, k_stride, interleaved, cs, sn);
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
    tc::await_inputs();
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
    tc::await_inputs();
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
    tc::await_inputs();
    rope_cu::run(q, k, pos, n_heads, n_kv_heads, head_dim, q_stride, k_stride, interleaved, theta,
                 scaling, factor, low_freq_factor, high_freq_factor, original_max_position);
}

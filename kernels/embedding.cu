// Embedding gather: one output row per token id, the table in any weight dtype.
#include "common.cuh"

namespace embedding_cu {

template <typename T>
__device__ void gather(T *out, const void *table, int table_dtype, const int32_t *ids, int64_t vocab,
                       int64_t dim, int64_t out_stride, int64_t table_row_bytes)
{
    int64_t row = blockIdx.x;
    int32_t id = ids[row];
    T *o = out + row * out_stride;
    if (id < 0 || id >= vocab) {
        for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
            o[i] = tc::from_f32<T>(__int_as_float(0x7fc00000));
        return;
    }
    const char *src = (const char *)table + (int64_t)id * table_row_bytes;
    constexpr int N = tc::vec16<T>();
    // Same-dtype rows, 16-byte aligned, move as vectors; anything else converts per element.
    if (table_dtype == tc::dtype_of<T>::value && tc::aligned(o, src, src, 16) && dim % N == 0) {
        for (int64_t i = threadIdx.x * N; i < dim; i += blockDim.x * N)
            *reinterpret_cast<uint4 *>(o + i) = *reinterpret_cast<const uint4 *>(src + i * sizeof(T));
        return;
    }
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
        o[i] = tc::from_f32<T>(tc::load_any(table_dtype, src, i));
}

} // namespace embedding_cu

/** out[r, :] = table[ids[r], :] for each of gridDim.x rows; table of run-time dtype
 *  (tc_dtype), rows table_row_bytes apart; an id outside [0, vocab) gives a NaN row. */
extern "C" __global__ void tc_k_embedding_f32(float *out, const void *table, int32_t table_dtype,
                                              const int32_t *ids, int64_t vocab, int64_t dim,
                                              int64_t out_stride, int64_t table_row_bytes)
{
    tc::await_inputs();
    embedding_cu::gather(out, table, table_dtype, ids, vocab, dim, out_stride, table_row_bytes);
}
extern "C" __global__ void tc_k_embedding_f16(__half *out, const void *table, int32_t table_dtype,
                                              const int32_t *ids, int64_t vocab, int64_t dim,
                                              int64_t out_stride, int64_t table_row_bytes)
{
    tc::await_inputs();
    embedding_cu::gather(out, table, table_dtype, ids, vocab, dim, out_stride, table_row_bytes);
}
extern "C" __global__ void tc_k_embedding_bf16(__nv_bfloat16 *out, const void *table,
                                               int32_t table_dtype, const int32_t *ids, int64_t vocab,
                                               int64_t dim, int64_t out_stride, int64_t table_row_bytes)
{
    tc::await_inputs();
    embedding_cu::gather(out, table, table_dtype, ids, vocab, dim, out_stride, table_row_bytes);
}

namespace embedding_cu {

template <typename T>
__device__ void gather_columns(T *out, const T *x, const int32_t *idx, int64_t n, int64_t k, int64_t out_stride,
                               int64_t x_stride)
{
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, r = blockIdx.y;
    if (i >= n)
        return;
    const int32_t c = idx[i];
    out[r * out_stride + i] = c >= 0 && c < k ? x[r * x_stride + c] : tc::from_f32<T>(__int_as_float(0x7fc00000));
}

} // namespace embedding_cu

/** out[r, i] = x[r, idx[i]] for i < n and each of gridDim.y rows (x k columns wide): x's
 *  columns in another order (a GPTQ act-order matrix's inputs); an index outside [0, k) gives
 *  NaN. */
extern "C" __global__ void tc_k_gather_columns_f32(float *out, const float *x, const int32_t *idx, int64_t n,
                                                   int64_t k, int64_t out_stride, int64_t x_stride)
{
    tc::launch_next_then_await();
    embedding_cu::gather_columns(out, x, idx, n, k, out_stride, x_stride);
}
extern "C" __global__ void tc_k_gather_columns_f16(__half *out, const __half *x, const int32_t *idx, int64_t n,
                                                   int64_t k, int64_t out_stride, int64_t x_stride)
{
    tc::launch_next_then_await();
    embedding_cu::gather_columns(out, x, idx, n, k, out_stride, x_stride);
}
extern "C" __global__ void tc_k_gather_columns_bf16(__nv_bfloat16 *out, const __nv_bfloat16 *x, const int32_t *idx,
                                                    int64_t n, int64_t k, int64_t out_stride, int64_t x_stride)
{
    tc::launch_next_then_await();
    embedding_cu::gather_columns(out, x, idx, n, k, out_stride, x_stride);
}

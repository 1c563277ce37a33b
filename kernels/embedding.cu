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

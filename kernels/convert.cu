// Element type conversion between f32, f16, bf16 and FP8 E4M3 (rows may be strided), e.g. bf16
// logits or hidden states to f32.
#include "common.cuh"

/** out[r, c] = x[r, c] converted from x_dtype to out_dtype (DT_F32/F16/BF16/F8E4M3 codes),
 *  rounding to nearest even (grid-stride: any grid size works). */
extern "C" __global__ void tc_k_convert(void *out, int32_t out_dtype, const void *x, int32_t x_dtype,
                                        int64_t rows, int64_t cols, int64_t out_stride, int64_t x_stride)
{
    tc::await_inputs();
    int64_t total = rows * cols;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = t / cols, c = t % cols;
        tc::store_any(out_dtype, out, r * out_stride + c, tc::load_any(x_dtype, x, r * x_stride + c));
    }
}

/** w[r, c] *= s[c] for w [rows, cols] (row stride w_stride) and s [cols], both of dtype `dtype`
 *  (DT_F32/F16/BF16 codes), rounded to nearest even: a norm's weight folded into the columns
 *  of the product that follows it. Grid (any, any): blocks stride over rows (y) and columns
 *  (x). */
extern "C" __global__ void tc_k_scale_cols(void *w, const void *s, int32_t dtype, int64_t rows, int64_t cols,
                                           int64_t w_stride)
{
    tc::await_inputs();
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
        for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < cols;
             c += (int64_t)gridDim.x * blockDim.x) {
            int64_t i = r * w_stride + c;
            tc::store_any(dtype, w, i, tc::load_any(dtype, w, i) * tc::load_any(dtype, s, c));
        }
}

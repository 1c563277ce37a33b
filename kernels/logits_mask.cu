// Constrained sampling's logits edit: each constrained row's disallowed tokens (a bit clear in
// its mask of vocab/32 words) become -inf and its logit-bias entries are added (-inf bans), in
// place, before the sampler reads the rows. The mask words and bias entries of every
// constrained row of a step arrive in one upload; a block takes one chunk of one row. The CPU
// twin is src/ops/logits_mask.c.
#include "common.cuh"

/** Constrain n rows of logits x (row r at x + r x_stride, `cols` columns). desc int32 [n][4]
 *  per constrained row: its row of x, the offset of its mask in `words` (-1: every token
 *  allowed; else ceil(cols / 32) words, bit t % 32 of word t / 32 set where token t may be
 *  chosen), the first of its bias entries and their count (bias_ids: distinct token ids in
 *  [0, cols); bias: f32 values, -inf to ban). Grid (n, chunks): block (c, y) writes -inf over
 *  the masked tokens of columns [y chunk, (y + 1) chunk) (chunk: a multiple of 32) of
 *  desc[c]'s row; block (c, 0) also adds the row's bias to its allowed tokens (-inf where the
 *  bias is -inf, even over a logit of +inf). The two never touch the same element, so the
 *  blocks need no ordering. */
extern "C" __global__ void tc_k_logits_mask_f32(float *x, int64_t cols, int64_t x_stride, const int32_t *desc,
                                                const uint32_t *words, const int32_t *bias_ids, const float *bias,
                                                int64_t chunk)
{
    tc::await_inputs();
    const int32_t *d = desc + 4 * blockIdx.x;
    float *xr = x + (int64_t)d[0] * x_stride;
    const uint32_t *m = d[1] < 0 ? nullptr : words + d[1];
    if (m) {
        // A warp covers 32 consecutive tokens: one word, read by all lanes at once.
        int64_t c0 = (int64_t)blockIdx.y * chunk, c1 = c0 + chunk < cols ? c0 + chunk : cols;
        for (int64_t t = c0 + threadIdx.x; t < c1; t += blockDim.x)
            if (!(m[t >> 5] >> (t & 31) & 1u))
                xr[t] = -INFINITY;
    }
    if (blockIdx.y == 0)
        for (int k = threadIdx.x; k < d[3]; k += blockDim.x) {
            int32_t t = bias_ids[d[2] + k];
            float b = bias[d[2] + k];
            if (!m || (m[t >> 5] >> (t & 31) & 1u))
                xr[t] = b == -INFINITY ? -INFINITY : xr[t] + b;
        }
}

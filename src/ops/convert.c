/* Element type conversion between the float dtypes (f32, f16, bf16), rounding to nearest
 * even: e.g. bf16 hidden states to f32 before the output projection. */
#include "ops/internal.h"

typedef struct {
    tc_tensor *out;
    const tc_tensor *x;
} convert_job;

static void convert_rows(void *ctx, int64_t begin, int64_t end)
{
    convert_job *j = ctx;
    int64_t cols = j->out->shape[1];
    for (int64_t r = begin; r < end; r++) {
        const void *x = tc__row(j->x, r);
        void *o = tc__row(j->out, r);
        for (int64_t i = 0; i < cols; i++)
            tc__store(j->out->dtype, o, i, tc__load(j->x->dtype, x, i));
    }
}

tc_status tc_convert(tc_tensor *out, const tc_tensor *x)
{
    const char *op = "tc_convert";
    TC_TRY(tc__check_dtype(op, "out", out, TC__FLOATS));
    TC_TRY(tc__check_dtype(op, "x", x, TC__FLOATS));
    TC_TRY(tc__check_ndim(op, "out", out, 2));
    TC_TRY(tc__check_ndim(op, "x", x, 2));
    TC_TRY(tc__check_dim(op, "x", x, 0, out->shape[0], "out's rows"));
    TC_TRY(tc__check_dim(op, "x", x, 1, out->shape[1], "out's width"));
    TC_TRY(tc__check_same_backend(op, out, x));
    TC_TRY(tc__check_rows_dense(op, "out", out));
    TC_TRY(tc__check_rows_dense(op, "x", x));
    int64_t n = out->shape[0], f = out->shape[1];
    if (n == 0 || f == 0)
        return TC_OK;
    if (out->data == x->data && out->dtype != x->dtype)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "out must not alias x of another dtype");
    tc_backend *b = out->backend;
    if (b->kind == TC_BACKEND_CPU) {
        convert_job j = { out, x };
        tc__parallel_for(b, n, 16, convert_rows, &j);
        return TC_OK;
    }
    tc_launch_config cfg;
    TC_TRY(tc_launch_config_1d(b->stream, TC_KERNEL_CONVERT, (size_t)(n * f), &cfg));
    return tc_launch_convert(cfg, out->data, (int32_t)out->dtype, x->data, (int32_t)x->dtype, n, f,
                             out->stride[0], x->stride[0]);
}

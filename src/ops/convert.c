/* Element type conversion between the float dtypes (f32, f16, bf16, f8e4m3), rounding to
 * nearest even: e.g. bf16 hidden states to f32 before the output projection. */
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
    TC_TRY(tc__check_dtype(op, "out", out, TC__FLOATS | TC__KV_FP8));
    TC_TRY(tc__check_dtype(op, "x", x, TC__FLOATS | TC__KV_FP8));
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

typedef struct {
    tc_tensor *w;
    const tc_tensor *s;
} scale_job;

static void scale_rows(void *ctx, int64_t begin, int64_t end)
{
    scale_job *j = ctx;
    int64_t cols = j->w->shape[1];
    for (int64_t r = begin; r < end; r++) {
        void *w = tc__row(j->w, r);
        for (int64_t i = 0; i < cols; i++)
            tc__store(j->w->dtype, w, i,
                      tc__load(j->w->dtype, w, i) * tc__load(j->s->dtype, j->s->data, i));
    }
}

tc_status tc_scale_columns(tc_tensor *w, const tc_tensor *s)
{
    const char *op = "tc_scale_columns";
    TC_TRY(tc__check_dtype(op, "w", w, TC__FLOATS));
    TC_TRY(tc__check_dtype(op, "s", s, TC__MASK(w->dtype)));
    TC_TRY(tc__check_ndim(op, "w", w, 2));
    TC_TRY(tc__check_ndim(op, "s", s, 1));
    TC_TRY(tc__check_dim(op, "s", s, 0, w->shape[1], "w's width"));
    TC_TRY(tc__check_same_backend(op, w, s));
    TC_TRY(tc__check_rows_dense(op, "w", w));
    if (!tc_tensor_is_contiguous(s))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "s must be contiguous");
    int64_t n = w->shape[0], k = w->shape[1];
    if (n == 0 || k == 0)
        return TC_OK;
    tc_backend *b = w->backend;
    if (b->kind == TC_BACKEND_CPU) {
        scale_job j = { w, s };
        tc__parallel_for(b, n, 16, scale_rows, &j);
        return TC_OK;
    }
    unsigned gx = (unsigned)((k + 255) / 256), gy = (unsigned)(n < 65535 ? n : 65535);
    tc_launch_config cfg = { { gx < 64 ? gx : 64, gy, 1 }, { 256, 1, 1 }, 0, b->stream };
    return tc_launch_scale_cols(cfg, w->data, s->data, (int32_t)w->dtype, n, k, w->stride[0]);
}

/* The bias of a linear layer, added to each row of its output after the product (Qwen2's q, k
 * and v projections): x[i, :] += bias. */
#include "ops/internal.h"

typedef struct {
    tc_tensor *x;
    const tc_tensor *bias;
} bias_job;

static void add_rows(void *ctx, int64_t begin, int64_t end)
{
    bias_job *j = ctx;
    tc_dtype dt = j->x->dtype;
    int64_t d = j->x->shape[1];
    for (int64_t r = begin; r < end; r++) {
        void *row = tc__row(j->x, r);
        for (int64_t i = 0; i < d; i++)
            tc__store(dt, row, i, tc__load(dt, row, i) + tc__load(dt, j->bias->data, i));
    }
}

tc_status tc_add_bias(tc_tensor *x, const tc_tensor *bias)
{
    const char *op = "tc_add_bias";
    TC_TRY(tc__check_dtype(op, "x", x, TC__FLOATS));
    TC_TRY(tc__check_dtype(op, "bias", bias, TC__MASK(x->dtype)));
    TC_TRY(tc__check_ndim(op, "x", x, 2));
    TC_TRY(tc__check_ndim(op, "bias", bias, 1));
    TC_TRY(tc__check_dim(op, "bias", bias, 0, x->shape[1], "x's width"));
    TC_TRY(tc__check_same_backend(op, x, bias));
    TC_TRY(tc__check_rows_dense(op, "x", x));
    if (!tc_tensor_is_contiguous(bias))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "bias must be contiguous");
    int64_t n = x->shape[0], d = x->shape[1];
    if (n == 0 || d == 0)
        return TC_OK;
    tc_backend *b = x->backend;
    if (b->kind == TC_BACKEND_CPU) {
        bias_job j = { x, bias };
        tc__parallel_for(b, n, 4, add_rows, &j);
        return TC_OK;
    }
    tc_launch_config cfg;
    TC_TRY(tc_launch_config_1d(b->stream, TC_KERNEL_ADD_BIAS_BF16, (size_t)(n * d / 8 + 1), &cfg));
    tc_status st;
#define LAUNCH(sfx) \
    tc_launch_add_bias_##sfx(cfg, TC__DEV(T, x), TC__DEV(const T, bias), n, d, x->stride[0])
    TC__BY_DTYPE(st, x->dtype, LAUNCH);
#undef LAUNCH
    return st;
}

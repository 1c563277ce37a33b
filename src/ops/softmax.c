/* Softmax over the last dimension (max subtracted first, so large logits do not overflow). */
#include "ops/internal.h"

typedef struct {
    tc_tensor *out;
    const tc_tensor *x;
    atomic_bool oom;
} softmax_job;

static void softmax_rows(void *ctx, int64_t begin, int64_t end)
{
    softmax_job *j = ctx;
    tc_dtype dt = j->x->dtype;
    int64_t d = j->x->shape[1];
    float *v = tc_host_alloc((size_t)d * sizeof(float));
    if (!v) {
        atomic_store(&j->oom, true);
        return;
    }
    for (int64_t r = begin; r < end; r++) {
        tc__load_row(dt, tc__row(j->x, r), d, v);
        float m = -INFINITY, s = 0.0f;
        for (int64_t i = 0; i < d; i++)
            m = fmaxf(m, v[i]);
        for (int64_t i = 0; i < d; i++)
            s += (v[i] = expf(v[i] - m));
        void *o = tc__row(j->out, r);
        for (int64_t i = 0; i < d; i++)
            tc__store(dt, o, i, v[i] / s);
    }
    tc_host_free(v);
}

tc_status tc_softmax(tc_tensor *out, const tc_tensor *x)
{
    const char *op = "tc_softmax";
    TC_TRY(tc__check_dtype(op, "x", x, TC__FLOATS));
    TC_TRY(tc__check_dtype(op, "out", out, TC__MASK(x->dtype)));
    TC_TRY(tc__check_ndim(op, "x", x, 2));
    TC_TRY(tc__check_ndim(op, "out", out, 2));
    TC_TRY(tc__check_dim(op, "out", out, 0, x->shape[0], "x's rows"));
    TC_TRY(tc__check_dim(op, "out", out, 1, x->shape[1], "x's width"));
    TC_TRY(tc__check_same_backend(op, out, x));
    TC_TRY(tc__check_rows_dense(op, "x", x));
    TC_TRY(tc__check_rows_dense(op, "out", out));
    int64_t n = x->shape[0], d = x->shape[1];
    if (n == 0 || d == 0)
        return TC_OK;
    tc_backend *b = out->backend;
    if (b->kind == TC_BACKEND_CPU) {
        softmax_job j = { out, x, false };
        tc__parallel_for(b, n, 1, softmax_rows, &j);
        if (atomic_load(&j.oom))
            return tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no host memory for a row");
        return TC_OK;
    }
    tc_status st;
    tc_launch_config cfg = tc__cfg(b, (unsigned)n, d >= 8192 ? 1024 : 256, 0);
#define LAUNCH(sfx)                                                                       \
    tc_launch_softmax_##sfx(cfg, TC__DEV(T, out), TC__DEV(const T, x), d, out->stride[0], \
                            x->stride[0])
    TC__BY_DTYPE(st, x->dtype, LAUNCH);
#undef LAUNCH
    return st;
}

/* SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer"): silu(gate) * up. */
#include "ops/internal.h"

typedef struct {
    tc_tensor *out;
    const tc_tensor *gate, *up;
} swiglu_job;

static void swiglu_rows(void *ctx, int64_t begin, int64_t end)
{
    swiglu_job *j = ctx;
    tc_dtype dt = j->out->dtype;
    int64_t f = j->out->shape[1];
    for (int64_t r = begin; r < end; r++) {
        const void *g = tc__row(j->gate, r), *u = tc__row(j->up, r);
        void *o = tc__row(j->out, r);
        for (int64_t i = 0; i < f; i++) {
            float gv = tc__load(dt, g, i);
            tc__store(dt, o, i, gv / (1.0f + expf(-gv)) * tc__load(dt, u, i));
        }
    }
}

tc_status tc_swiglu(tc_tensor *out, const tc_tensor *gate, const tc_tensor *up)
{
    const char *op = "tc_swiglu";
    TC_TRY(tc__check_dtype(op, "out", out, TC__FLOATS));
    TC_TRY(tc__check_dtype(op, "gate", gate, TC__MASK(out->dtype)));
    TC_TRY(tc__check_dtype(op, "up", up, TC__MASK(out->dtype)));
    const tc_tensor *ts[3] = { out, gate, up };
    const char *names[3] = { "out", "gate", "up" };
    for (int i = 0; i < 3; i++) {
        TC_TRY(tc__check_ndim(op, names[i], ts[i], 2));
        TC_TRY(tc__check_dim(op, names[i], ts[i], 0, out->shape[0], "out's rows"));
        TC_TRY(tc__check_dim(op, names[i], ts[i], 1, out->shape[1], "out's width"));
        TC_TRY(tc__check_same_backend(op, out, ts[i]));
        TC_TRY(tc__check_rows_dense(op, names[i], ts[i]));
    }
    int64_t n = out->shape[0], f = out->shape[1];
    if (n == 0 || f == 0)
        return TC_OK;
    tc_backend *b = out->backend;
    if (b->kind == TC_BACKEND_CPU) {
        swiglu_job j = { out, gate, up };
        tc__parallel_for(b, n, 4, swiglu_rows, &j);
        return TC_OK;
    }
    tc_launch_config cfg;
    TC_TRY(tc_launch_config_1d(b->stream, TC_KERNEL_SWIGLU_BF16, (size_t)(n * f / 8 + 1), &cfg));
    tc_status st;
#define LAUNCH(sfx)                                                                               \
    tc_launch_swiglu_##sfx(cfg, TC__DEV(T, out), TC__DEV(const T, gate), TC__DEV(const T, up), n, \
                           f, out->stride[0], gate->stride[0], up->stride[0])
    TC__BY_DTYPE(st, out->dtype, LAUNCH);
#undef LAUNCH
    return st;
}

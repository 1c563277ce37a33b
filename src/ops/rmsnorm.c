/* RMSNorm (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization") fused with the
 * residual add that precedes it in a pre-norm transformer block. */
#include "ops/internal.h"

typedef struct {
    tc_tensor *out, *residual;
    const tc_tensor *x, *w;
    float eps;
    int64_t dim;
    atomic_bool oom;
} norm_job;

static void norm_rows(void *ctx, int64_t begin, int64_t end)
{
    norm_job *j = ctx;
    tc_dtype dt = j->x->dtype;
    float *v = tc_host_alloc((size_t)j->dim * 2 * sizeof(float));
    if (!v) {
        atomic_store(&j->oom, true);
        return;
    }
    float *w = v + j->dim;
    if (j->w)
        tc__load_row(dt, j->w->data, j->dim, w);
    else
        for (int64_t i = 0; i < j->dim; i++)
            w[i] = 1.0f;
    for (int64_t r = begin; r < end; r++) {
        tc__load_row(dt, tc__row(j->x, r), j->dim, v);
        if (j->residual) {
            void *rr = tc__row(j->residual, r);
            for (int64_t i = 0; i < j->dim; i++) {
                tc__store(dt, rr, i, v[i] + tc__load(dt, rr, i));
                v[i] = tc__load(dt, rr, i); /* the rounded sum, as the next layer reads it */
            }
        }
        float ss = 0.0f;
        for (int64_t i = 0; i < j->dim; i++)
            ss += v[i] * v[i];
        float inv = 1.0f / sqrtf(ss / (float)j->dim + j->eps);
        void *o = tc__row(j->out, r);
        for (int64_t i = 0; i < j->dim; i++)
            tc__store(dt, o, i, v[i] * inv * w[i]);
    }
    tc_host_free(v);
}

tc_status tc_rmsnorm(tc_tensor *out, tc_tensor *residual, const tc_tensor *x,
                     const tc_tensor *weight, float eps)
{
    const char *op = "tc_rmsnorm";
    TC_TRY(tc__check_dtype(op, "x", x, TC__FLOATS));
    TC_TRY(tc__check_dtype(op, "out", out, TC__MASK(x->dtype)));
    TC_TRY(tc__check_ndim(op, "x", x, 2));
    TC_TRY(tc__check_ndim(op, "out", out, 2));
    int64_t n = x->shape[0], dim = x->shape[1];
    TC_TRY(tc__check_dim(op, "out", out, 0, n, "x's rows"));
    TC_TRY(tc__check_dim(op, "out", out, 1, dim, "x's width"));
    TC_TRY(tc__check_same_backend(op, out, x));
    if (weight) {
        TC_TRY(tc__check_dtype(op, "weight", weight, TC__MASK(x->dtype)));
        TC_TRY(tc__check_ndim(op, "weight", weight, 1));
        TC_TRY(tc__check_dim(op, "weight", weight, 0, dim, "x's width"));
        TC_TRY(tc__check_same_backend(op, out, weight));
    }
    TC_TRY(tc__check_rows_dense(op, "x", x));
    TC_TRY(tc__check_rows_dense(op, "out", out));
    if (residual) {
        TC_TRY(tc__check_dtype(op, "residual", residual, TC__MASK(x->dtype)));
        TC_TRY(tc__check_ndim(op, "residual", residual, 2));
        TC_TRY(tc__check_dim(op, "residual", residual, 0, n, "x's rows"));
        TC_TRY(tc__check_dim(op, "residual", residual, 1, dim, "x's width"));
        TC_TRY(tc__check_same_backend(op, out, residual));
        TC_TRY(tc__check_rows_dense(op, "residual", residual));
    }
    if (!(eps >= 0.0f))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "eps is %g; want >= 0", (double)eps);
    if (n == 0 || dim == 0)
        return TC_OK;
    tc_backend *b = out->backend;
    if (b->kind == TC_BACKEND_CPU) {
        norm_job j = { out, residual, x, weight, eps, dim, false };
        tc__parallel_for(b, n, 4, norm_rows, &j);
        if (atomic_load(&j.oom))
            return tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no host memory for a row");
        return TC_OK;
    }
    tc_status st;
    tc_launch_config cfg = tc__cfg(b, (unsigned)n, dim >= 4096 ? 512 : 256, 0);
    int64_t rs = residual ? residual->stride[0] : 0;
#define LAUNCH(sfx)                                                                             \
    tc_launch_rmsnorm_##sfx(cfg, TC__DEV(T, out), residual ? TC__DEV(T, residual) : NULL,       \
                            TC__DEV(const T, x), weight ? TC__DEV(const T, weight) : NULL, dim, \
                            out->stride[0], rs, x->stride[0], eps)
    TC__BY_DTYPE(st, x->dtype, LAUNCH);
#undef LAUNCH
    return st;
}

/* Embedding gather: token ids to rows of the embedding table. */
#include "ops/internal.h"

typedef struct {
    tc_tensor *out;
    const tc_tensor *table;
    const int32_t *ids;
    int64_t dim;
    atomic_bool oom;
} gather_job;

static void gather_rows(void *ctx, int64_t begin, int64_t end)
{
    gather_job *j = ctx;
    float *tmp = NULL;
    if (j->out->dtype != TC_DTYPE_F32 || j->table->dtype != TC_DTYPE_F32) {
        tmp = tc_host_alloc((size_t)j->dim * sizeof(float));
        if (!tmp) {
            atomic_store(&j->oom, true);
            return;
        }
    }
    for (int64_t r = begin; r < end; r++) {
        const void *src = (const char *)j->table->data +
                          (size_t)j->ids[r] * tc_dtype_bytes(j->table->dtype, j->dim);
        void *dst = tc__row(j->out, r);
        if (!tmp) {
            memcpy(dst, src, (size_t)j->dim * 4);
            continue;
        }
        tc__load_row(j->table->dtype, src, j->dim, tmp);
        for (int64_t i = 0; i < j->dim; i++)
            tc__store(j->out->dtype, dst, i, tmp[i]);
    }
    tc_host_free(tmp);
}

tc_status tc_embedding(tc_tensor *out, const tc_tensor *table, const tc_tensor *ids)
{
    const char *op = "tc_embedding";
    TC_TRY(tc__check_dtype(op, "out", out, TC__FLOATS));
    TC_TRY(tc__check_dtype(op, "table", table, tc__weight_dtypes(table)));
    TC_TRY(tc__check_dtype(op, "ids", ids, TC__MASK(TC_DTYPE_I32)));
    TC_TRY(tc__check_ndim(op, "out", out, 2));
    TC_TRY(tc__check_ndim(op, "table", table, 2));
    TC_TRY(tc__check_ndim(op, "ids", ids, 1));
    TC_TRY(tc__check_dim(op, "out", out, 0, ids->shape[0], "one row per id"));
    TC_TRY(tc__check_dim(op, "out", out, 1, table->shape[1], "the table's width"));
    TC_TRY(tc__check_same_backend(op, out, table));
    TC_TRY(tc__check_same_backend(op, out, ids));
    TC_TRY(tc__check_rows_dense(op, "out", out));
    if (!tc_tensor_is_contiguous(table) || !tc_tensor_is_contiguous(ids))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "table and ids must be contiguous");
    int64_t n = ids->shape[0], dim = table->shape[1], vocab = table->shape[0];
    if (n == 0)
        return TC_OK;
    tc_backend *b = out->backend;
    if (b->kind == TC_BACKEND_CPU) {
        const int32_t *id = ids->data;
        for (int64_t i = 0; i < n; i++)
            if (id[i] < 0 || id[i] >= vocab)
                return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                                    "ids[%lld] = %d is outside the vocabulary [0, %lld)",
                                    (long long)i, id[i], (long long)vocab);
        gather_job j = { out, table, id, dim, false };
        tc__parallel_for(b, n, 16, gather_rows, &j);
        if (atomic_load(&j.oom))
            return tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no host memory for a row");
        return TC_OK;
    }
    if (tc_dtype_is_block(table->dtype))
        return tc__quant_embedding(out, table, ids);
    tc_status st;
    tc_launch_config cfg = tc__cfg(b, (unsigned)n, 128, 0);
    int64_t row_bytes = (int64_t)tc_dtype_bytes(table->dtype, dim);
#define LAUNCH(sfx)                                                                     \
    tc_launch_embedding_##sfx(cfg, TC__DEV(T, out), table->data, (int32_t)table->dtype, \
                              TC__DEV(int32_t, ids), vocab, dim, out->stride[0], row_bytes)
    TC__BY_DTYPE(st, out->dtype, LAUNCH);
#undef LAUNCH
    return st;
}

tc_status tc_gather_columns(tc_tensor *out, const tc_tensor *x, const tc_tensor *idx)
{
    const char *op = "tc_gather_columns";
    TC_TRY(tc__check_dtype(op, "out", out, TC__FLOATS));
    TC_TRY(tc__check_dtype(op, "x", x, TC__MASK(out->dtype)));
    TC_TRY(tc__check_dtype(op, "idx", idx, TC__MASK(TC_DTYPE_I32)));
    TC_TRY(tc__check_ndim(op, "out", out, 2));
    TC_TRY(tc__check_ndim(op, "x", x, 2));
    TC_TRY(tc__check_ndim(op, "idx", idx, 1));
    TC_TRY(tc__check_dim(op, "out", out, 0, x->shape[0], "x's rows"));
    TC_TRY(tc__check_dim(op, "out", out, 1, idx->shape[0], "one column per index"));
    TC_TRY(tc__check_same_backend(op, out, x));
    TC_TRY(tc__check_same_backend(op, out, idx));
    TC_TRY(tc__check_rows_dense(op, "out", out));
    TC_TRY(tc__check_rows_dense(op, "x", x));
    if (!tc_tensor_is_contiguous(idx))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "idx must be contiguous");
    int64_t m = x->shape[0], n = idx->shape[0], k = x->shape[1];
    size_t es = tc_dtype_bytes(x->dtype, 1);
    const char *o0 = out->data, *o1 = o0 + (size_t)(m ? (m - 1) * out->stride[0] + n : 0) * es,
               *x0 = x->data, *x1 = x0 + (size_t)(m ? (m - 1) * x->stride[0] + k : 0) * es;
    if (m && n && k && o0 < x1 && x0 < o1)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "out overlaps x");
    if (m == 0 || n == 0)
        return TC_OK;
    tc_backend *b = out->backend;
    if (b->kind == TC_BACKEND_CPU) {
        const int32_t *id = idx->data;
        for (int64_t i = 0; i < n; i++)
            if (id[i] < 0 || id[i] >= k)
                return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                                    "idx[%lld] = %d is outside x's columns [0, %lld)", (long long)i,
                                    id[i], (long long)k);
        for (int64_t r = 0; r < m; r++) {
            const char *src = tc__row(x, r);
            char *dst = tc__row(out, r);
            for (int64_t i = 0; i < n; i++)
                memcpy(dst + (size_t)i * es, src + (size_t)id[i] * es, es);
        }
        return TC_OK;
    }
    if (m > 65535)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "%lld rows: at most 65535 at a time",
                            (long long)m);
    tc_status st;
    tc_launch_config cfg = tc__cfg(b, (unsigned)((n + 255) / 256), 256, 0);
    cfg.grid.y = (unsigned)m;
#define LAUNCH(sfx)                                                                   \
    tc_launch_gather_columns_##sfx(cfg, TC__DEV(T, out), TC__DEV(const T, x),         \
                                   TC__DEV(const int32_t, idx), n, k, out->stride[0], \
                                   x->stride[0])
    TC__BY_DTYPE(st, out->dtype, LAUNCH);
#undef LAUNCH
    return st;
}

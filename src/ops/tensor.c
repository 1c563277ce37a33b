/* Tensors: creation on a backend, views, and copies between host memory and backends. */
#include <stdio.h>
#include "ops/internal.h"

static tc_status check_shape(const char *fn, tc_dtype dt, int ndim, const int64_t *shape)
{
    if ((unsigned)dt >= TC_DTYPE_COUNT)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, fn, "dtype %d is not a tc_dtype", (int)dt);
    if (ndim < 1 || ndim > TC_TENSOR_MAX_DIMS)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, fn, "ndim is %d; want 1 to %d", ndim,
                            TC_TENSOR_MAX_DIMS);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return tc_set_error(TC_ERR_INVALID_ARGUMENT, fn, "shape[%d] is %lld", i,
                                (long long)shape[i]);
        if (shape[i] > 0 && n > INT64_MAX / 8 / shape[i])
            return tc_set_error(TC_ERR_INVALID_ARGUMENT, fn, "shape too large");
        n *= shape[i];
    }
    if (shape[ndim - 1] % tc_dtype_block(dt) != 0)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, fn,
                            "%s packs %d elements per block; the last dimension is %lld",
                            tc_dtype_name(dt), tc_dtype_block(dt), (long long)shape[ndim - 1]);
    return TC_OK;
}

static void set_layout(tc_tensor *t, tc_backend *b, tc_dtype dt, int ndim, const int64_t *shape)
{
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->ndim = ndim;
    t->backend = b;
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        t->shape[i] = shape[i];
        t->stride[i] = s;
        s *= shape[i];
    }
}

tc_status tc_tensor_init(tc_tensor *t, tc_backend *b, tc_dtype dt, int ndim, const int64_t *shape)
{
    memset(t, 0, sizeof *t);
    TC_TRY(check_shape("tc_tensor_init", dt, ndim, shape));
    set_layout(t, b, dt, ndim, shape);
    void *p = NULL;
    bool planes = b->kind == TC_BACKEND_CUDA && tc_dtype_is_block(dt);
    tc_status st = tc_backend_alloc(
        b, planes ? tc__quant_device_bytes(dt, tc_tensor_numel(t)) : tc_tensor_bytes(t), &p);
    if (st != TC_OK) {
        memset(t, 0, sizeof *t);
        return st;
    }
    t->data = p;
    t->owner = true;
    return TC_OK;
}

tc_status tc_tensor_init_from_host(tc_tensor *t, tc_backend *b, tc_dtype dt, int ndim,
                                   const int64_t *shape, const void *src, size_t bytes)
{
    TC_TRY(tc_tensor_init(t, b, dt, ndim, shape));
    tc_status st = tc_tensor_copy_from_host(t, src, bytes);
    if (st != TC_OK)
        tc_tensor_deinit(t);
    return st;
}

tc_status tc_tensor_wrap(tc_tensor *t, tc_backend *b, tc_dtype dt, int ndim, const int64_t *shape,
                         void *data)
{
    memset(t, 0, sizeof *t);
    TC_TRY(check_shape("tc_tensor_wrap", dt, ndim, shape));
    set_layout(t, b, dt, ndim, shape);
    t->data = data;
    return TC_OK;
}

void tc_tensor_deinit(tc_tensor *t)
{
    if (!t)
        return;
    if (t->owner)
        tc_backend_free(t->backend, t->data);
    memset(t, 0, sizeof *t);
}

int64_t tc_tensor_numel(const tc_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

size_t tc_tensor_bytes(const tc_tensor *t)
{
    if (t->ndim == 0)
        return 0;
    int64_t last = t->shape[t->ndim - 1];
    return tc_dtype_bytes(t->dtype, last) * (size_t)(last ? tc_tensor_numel(t) / last : 0);
}

bool tc_tensor_is_contiguous(const tc_tensor *t)
{
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != s)
            return false;
        s *= t->shape[i];
    }
    return true;
}

bool tc_tensor_rows_dense(const tc_tensor *t)
{
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 1; i--) {
        if (t->shape[i] != 1 && t->stride[i] != s)
            return false;
        s *= t->shape[i];
    }
    return t->ndim == 1 || t->shape[0] <= 1 || t->stride[0] >= s;
}

void *tc_tensor_at(const tc_tensor *t, const int64_t *index)
{
    int64_t off = 0;
    for (int i = 0; i < t->ndim; i++)
        off += index[i] * t->stride[i];
    if (tc_dtype_is_block(t->dtype))
        return (char *)t->data + tc_dtype_bytes(t->dtype, off);
    return (char *)t->data + (size_t)off * tc_dtype_bytes(t->dtype, 1);
}

tc_status tc_tensor_slice(const tc_tensor *t, int dim, int64_t start, int64_t len, tc_tensor *out)
{
    if (dim < 0 || dim >= t->ndim)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, "tc_tensor_slice", "dim %d of a %d-d tensor",
                            dim, t->ndim);
    if (start < 0 || len < 0 || start > t->shape[dim] - len)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, "tc_tensor_slice",
                            "[%lld, %lld) is outside dimension %d of size %lld", (long long)start,
                            (long long)(start + len), dim, (long long)t->shape[dim]);
    int blk = tc_dtype_block(t->dtype);
    if (blk > 1 && t->backend && t->backend->kind == TC_BACKEND_CUDA && t->shape[dim] != len)
        return tc_set_error(TC_ERR_UNSUPPORTED, "tc_tensor_slice",
                            "a %s tensor on CUDA is held as planes over all its blocks and "
                            "cannot be sliced",
                            tc_dtype_name(t->dtype));
    if (dim == t->ndim - 1 && (start % blk || len % blk))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, "tc_tensor_slice",
                            "%s slices of the last dimension must be whole blocks of %d",
                            tc_dtype_name(t->dtype), blk);
    int64_t index[TC_TENSOR_MAX_DIMS] = { 0 };
    index[dim] = start;
    *out = *t;
    out->data = t->shape[dim] ? tc_tensor_at(t, index) : t->data;
    out->shape[dim] = len;
    out->owner = false;
    return TC_OK;
}

tc_status tc_tensor_reshape(const tc_tensor *t, int ndim, const int64_t *shape, tc_tensor *out)
{
    TC_TRY(check_shape("tc_tensor_reshape", t->dtype, ndim, shape));
    if (!tc_tensor_is_contiguous(t))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, "tc_tensor_reshape",
                            "the tensor is not contiguous");
    tc_tensor r;
    set_layout(&r, t->backend, t->dtype, ndim, shape);
    if (tc_tensor_numel(&r) != tc_tensor_numel(t))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, "tc_tensor_reshape",
                            "%lld elements cannot become %lld", (long long)tc_tensor_numel(t),
                            (long long)tc_tensor_numel(&r));
    r.data = t->data;
    *out = r;
    return TC_OK;
}

static tc_status check_copy(const char *fn, const tc_tensor *t, size_t bytes)
{
    if (!tc_tensor_is_contiguous(t))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, fn, "the tensor is not contiguous");
    if (bytes != tc_tensor_bytes(t)) {
        char d[96];
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, fn, "%zu bytes given; %s holds %zu", bytes,
                            tc_tensor_describe(t, d, sizeof d), tc_tensor_bytes(t));
    }
    return TC_OK;
}

tc_status tc_tensor_copy_from_host(tc_tensor *t, const void *src, size_t bytes)
{
    TC_TRY(check_copy("tc_tensor_copy_from_host", t, bytes));
    if (t->backend->kind == TC_BACKEND_CPU) {
        memmove(t->data, src, bytes);
        return TC_OK;
    }
    if (tc_dtype_is_block(t->dtype))
        return tc__quant_upload(t, 0, tc_tensor_numel(t) / t->shape[t->ndim - 1], src);
    return tc__backend_upload(t->backend, (CUdeviceptr)(uintptr_t)t->data, src, bytes);
}

tc_status tc_tensor_copy_to_host(const tc_tensor *t, void *dst, size_t bytes)
{
    TC_TRY(check_copy("tc_tensor_copy_to_host", t, bytes));
    if (t->backend->kind == TC_BACKEND_CPU) {
        memmove(dst, t->data, bytes);
        return TC_OK;
    }
    if (tc_dtype_is_block(t->dtype))
        return tc__quant_download(t, dst);
    TC_TRY(tc_stream_copy_d2h(t->backend->stream, dst, (CUdeviceptr)(uintptr_t)t->data, bytes));
    return tc_stream_synchronize(t->backend->stream);
}

tc_status tc_tensor_copy(tc_tensor *dst, const tc_tensor *src)
{
    const char *fn = "tc_tensor_copy";
    if (dst->dtype != src->dtype || dst->ndim != src->ndim ||
        memcmp(dst->shape, src->shape, sizeof(int64_t) * (size_t)src->ndim) != 0) {
        char a[96], b[96];
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, fn, "destination %s and source %s differ",
                            tc_tensor_describe(dst, a, sizeof a),
                            tc_tensor_describe(src, b, sizeof b));
    }
    size_t bytes = tc_tensor_bytes(src);
    TC_TRY(check_copy(fn, dst, bytes));
    TC_TRY(check_copy(fn, src, bytes));
    tc_backend *db = dst->backend, *sb = src->backend;
    if (db->kind == TC_BACKEND_CPU && sb->kind == TC_BACKEND_CPU) {
        memmove(dst->data, src->data, bytes);
        return TC_OK;
    }
    if (db->kind == TC_BACKEND_CPU)
        return tc_tensor_copy_to_host(src, dst->data, bytes);
    if (sb->kind == TC_BACKEND_CPU)
        return tc_tensor_copy_from_host(dst, src->data, bytes);
    if (db != sb)
        TC_TRY(tc_backend_synchronize(sb));
    if (tc_dtype_is_block(src->dtype)) /* planes and their alignment */
        bytes = tc__quant_device_bytes(src->dtype, tc_tensor_numel(src));
    return tc_stream_copy_d2d(db->stream, (CUdeviceptr)(uintptr_t)dst->data,
                              (CUdeviceptr)(uintptr_t)src->data, bytes);
}

const char *tc_tensor_describe(const tc_tensor *t, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s[", tc_dtype_name(t->dtype));
    for (int i = 0; i < t->ndim && n >= 0 && (size_t)n < len; i++)
        n += snprintf(buf + n, len - (size_t)n, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (n >= 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, "]%s%s", t->backend ? " " : "",
                 t->backend ? t->backend->name : "");
    return buf;
}

/* The checks every op starts with. */

tc_status tc__check_tensor(const char *op, const char *name, const tc_tensor *t)
{
    if (!t || !t->backend || t->ndim < 1 || (!t->data && tc_tensor_numel(t) > 0))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "%s is not an initialised tensor", name);
    return TC_OK;
}

tc_status tc__check_dtype(const char *op, const char *name, const tc_tensor *t, unsigned mask)
{
    TC_TRY(tc__check_tensor(op, name, t));
    if ((unsigned)t->dtype < TC_DTYPE_COUNT && (mask & TC__MASK(t->dtype)))
        return TC_OK;
    char want[96] = "", d[96];
    size_t n = 0;
    for (int i = 0; i < TC_DTYPE_COUNT; i++)
        if (mask & TC__MASK(i))
            n +=
                (size_t)snprintf(want + n, sizeof want - n, "%s%s", n ? "/" : "", tc_dtype_name(i));
    return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "%s is %s; want %s", name,
                        tc_tensor_describe(t, d, sizeof d), want);
}

tc_status tc__check_ndim(const char *op, const char *name, const tc_tensor *t, int ndim)
{
    if (t->ndim != ndim) {
        char d[96];
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "%s is %s; want %d dimensions", name,
                            tc_tensor_describe(t, d, sizeof d), ndim);
    }
    return TC_OK;
}

tc_status tc__check_dim(const char *op, const char *name, const tc_tensor *t, int dim, int64_t want,
                        const char *what)
{
    if (t->shape[dim] != want) {
        char d[96];
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "%s is %s; dimension %d must be %lld (%s)",
                            name, tc_tensor_describe(t, d, sizeof d), dim, (long long)want, what);
    }
    return TC_OK;
}

tc_status tc__check_same_backend(const char *op, const tc_tensor *a, const tc_tensor *b)
{
    if (a->backend != b->backend)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "tensors on %s and %s: copy them to one backend first",
                            a->backend->name, b->backend->name);
    return TC_OK;
}

tc_status tc__check_rows_dense(const char *op, const char *name, const tc_tensor *t)
{
    if (!tc_tensor_rows_dense(t) || t->stride[t->ndim - 1] != 1 ||
        (t->ndim > 1 && t->stride[0] < 0)) {
        char d[96];
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "%s (%s) must be dense within each row of dimension 0", name,
                            tc_tensor_describe(t, d, sizeof d));
    }
    return TC_OK;
}

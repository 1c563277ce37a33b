/* Matrix products of a linear layer, out = x w^T. CPU: threads over weight rows, read in
 * place by tc__qdot (qdot.c) against four rows of x at a time, f32 accumulation. CUDA: the
 * matrix-vector kernel for decode (few rows, bandwidth bound), cuBLAS for prefill (compute bound),
 * our own kernels where cuBLAS is missing. */
#include "ops/internal.h"

/* What tc_linear_rope_store hands the one-row kernel (all zero: no rotation). */
typedef struct rope_args {
    const int32_t *pos, *slots;
    void *k_cache, *v_cache;
    tc_rope_config cfg;
    int32_t n_heads, n_kv_heads;
} rope_args;

/* Rows [r0, r0 + rows) of out = x w^T (rows <= TC_MATVEC_MAX_ROWS), with tc_linear's fused
 * options when o is not NULL, and for one row the rotation and store of rope when that is not
 * NULL. */
static tc_status matvec_cuda(tc_tensor *out, const tc_tensor *x, const tc_tensor *w, int64_t r0,
                             int64_t rows, const tc_linear_opts *o, const rope_args *rope)
{
    tc_backend *b = out->backend;
    int64_t n = out->shape[1], k = w->shape[1];
    int32_t flags = o ? (o->swiglu ? 1 : 0) | (o->accumulate ? 2 : 0) | (o->rms_norm ? 4 : 0) : 0;
    static const rope_args no_rope;
    const rope_args *ra = rope ? rope : &no_rope;
    const tc_rope_config *rc = &ra->cfg;
    if (rope)
        flags |= 8;
    /* (f32 out for 16-bit x: the tensor-core kernel's flag 16, the logits of a few rows) */
    bool widen = out->dtype == TC_DTYPE_F32 && x->dtype != TC_DTYPE_F32;
    if (widen)
        flags |= 16;
    float eps = o ? o->norm_eps : 0.0f;
    /* The kernels use no shared memory: they ask for the largest L1 split. Left to the driver,
     * the decode step after attention (about 100 KB of shared memory a block) ran 3% slower on
     * the H100 (Llama-2-7B shape, batch 1: 192 -> 198 tokens/s with it), though a product
     * alone runs as fast either way. */
    if (!b->matvec_l1) {
        static const tc_kernel_id ids[] = { TC_KERNEL_MATVEC_F32,  TC_KERNEL_MATVEC_F16,
                                            TC_KERNEL_MATVEC_BF16, TC_KERNEL_MATVEC1_F32,
                                            TC_KERNEL_MATVEC1_F16, TC_KERNEL_MATVEC1_BF16 };
        for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
            TC_TRY(tc_launch_set_carveout(b->ctx, ids[i], 0));
        for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
            int per_sm = 0;
            if (tc_launch_blocks_per_sm(b->ctx, ids[i], 64, 0, &per_sm) != TC_OK || per_sm < 1)
                per_sm = 32;
            b->matvec_wave[i] = (int64_t)per_sm * b->ctx->sm_count;
        }
        /* The tensor-core kernel has 12 KiB of shared memory a block: a quarter of the SM's
         * for shared memory (two blocks), the rest L1. Left to the driver, Llama-2-7B decode
         * on the H100 ran 18% slower at batch 8 (1,087 against 1,325 tokens/s) and 20% at
         * batch 2, though a product alone ran as fast either way. */
        static const tc_kernel_id mma_ids[] = { TC_KERNEL_MATVEC_MMA_F16,
                                                TC_KERNEL_MATVEC_MMA_BF16 };
        for (int i = 0; i < 2; i++) {
            TC_TRY(tc_launch_set_carveout(b->ctx, mma_ids[i], 25));
            int per_sm = 0;
            if (tc_launch_blocks_per_sm(b->ctx, mma_ids[i], 256, 0, &per_sm) != TC_OK || per_sm < 1)
                per_sm = 1;
            b->matvec_wave[6 + i] = (int64_t)per_sm * b->ctx->sm_count;
        }
        b->matvec_l1 = true;
    }
    /* 2 to 8 rows of x with weights of x's 16-bit dtype, 16-byte aligned: the tensor-core kernel,
     * one wave of 256-thread blocks, each taking 16 rows of out at a time. The kernel below
     * issues a conversion and a multiply-add per weight and row of x, which held 8 rows to
     * 44-57% of the bandwidth on the H100 (the tensor cores: 81-94%). */
    if (rows >= 2 && !rope && !(flags & 4) && w->dtype == x->dtype &&
        (x->dtype == TC_DTYPE_F16 || x->dtype == TC_DTYPE_BF16) && k % 32 == 0 &&
        x->stride[0] % 8 == 0 && ((uintptr_t)x->data | (uintptr_t)w->data) % 16 == 0) {
        bool f16 = x->dtype == TC_DTYPE_F16;
        int64_t tiles = (n + 15) / 16, wave = b->matvec_wave[f16 ? 6 : 7];
        tc_launch_config mc = tc__cfg(b, (unsigned)(tiles < wave ? tiles : wave), 256, 0);
        int64_t xo = r0 * x->stride[0], oo = r0 * out->stride[0];
        void *od = (char *)out->data + (size_t)oo * tc_dtype_bytes(out->dtype, 1);
        return f16 ? tc_launch_matvec_mma_f16(mc, od, TC__DEV(const tc_half, x) + xo,
                                              TC__DEV(const tc_half, w), (int32_t)rows, n, k,
                                              x->stride[0], out->stride[0], flags)
                   : tc_launch_matvec_mma_bf16(mc, od, TC__DEV(const tc_bf16, x) + xo,
                                               TC__DEV(const tc_bf16, w), (int32_t)rows, n, k,
                                               x->stride[0], out->stride[0], flags);
    }
    if (widen)
        return tc_set_error(TC_ERR_UNSUPPORTED, "tc_matmul (f32 out)",
                            "a product widening to f32 takes 2 to %d rows of 16-bit x and weights "
                            "of its dtype, 16-byte aligned, k a multiple of 32",
                            TC_MATVEC_MAX_ROWS);
    /* One warp per weight row, two per block: small blocks spread the rows evenly over the
     * SMs (with 8-warp blocks a 4096-row matrix gave some SMs 4 blocks and others 3). Rows of
     * 1,024 weights or more: at most one wave of blocks, each warp then taking every grid-th
     * row. Every block starts at once, so the next kernel is launched at once (programmatic
     * dependent launch waits until each block has started) and its blocks take the SMs that
     * finish first, asking for their first rows while the last ones here are read. H100,
     * batch-1 decode: Llama-3.2-1B 907-931 -> 946-950 tokens/s, Llama-2-7B 197.6-198.2 ->
     * 199.5-200.3. Shorter rows keep up to 32 blocks per SM: SmolLM2's (576 wide) lost 1.4%
     * with one wave, its 49,152-row output product balancing worse over a fixed grid. */
    int kernel = (rows == 1 ? 3 : 0) + (x->dtype == TC_DTYPE_F32   ? 0
                                        : x->dtype == TC_DTYPE_F16 ? 1
                                                                   : 2);
    int64_t blocks = (n + 1) / 2,
            cap = k >= 1024 ? b->matvec_wave[kernel] : (int64_t)b->ctx->sm_count * 32;
    tc_launch_config cfg = tc__cfg(b, (unsigned)(blocks < cap ? blocks : cap), 64, 0);
    tc_status st;
    /* One row has a kernel of its own: fewer registers, more resident warps. */
#define LAUNCH(sfx)                                                                                \
    (rows == 1 ? tc_launch_matvec1_##sfx(                                                          \
                     cfg, TC__DEV(T, out) + r0 * out->stride[0],                                   \
                     TC__DEV(const T, x) + r0 * x->stride[0], w->data, (int32_t)w->dtype, 1, n, k, \
                     x->stride[0], out->stride[0], flags, eps, ra->pos, ra->slots, ra->k_cache,    \
                     ra->v_cache, ra->n_heads, ra->n_kv_heads, rc->head_dim,                       \
                     (int32_t)rc->interleaved, rc->theta, (int32_t)rc->scaling, rc->factor,        \
                     rc->low_freq_factor, rc->high_freq_factor, rc->original_max_position)         \
               : tc_launch_matvec_##sfx(cfg, TC__DEV(T, out) + r0 * out->stride[0],                \
                                        TC__DEV(const T, x) + r0 * x->stride[0], w->data,          \
                                        (int32_t)w->dtype, (int32_t)rows, n, k, x->stride[0],      \
                                        out->stride[0], flags, eps))
    TC__BY_DTYPE(st, x->dtype, LAUNCH);
#undef LAUNCH
    return st;
}

static int cuda_type(tc_dtype dt)
{
    return dt == TC_DTYPE_BF16 ? CUDA_R_16BF : dt == TC_DTYPE_F16 ? CUDA_R_16F : CUDA_R_32F;
}

/* out = x w^T through cuBLAS: x and w of one dtype, out of it or (a widening product) f32. */
static tc_status gemm_cublas(tc_tensor *out, const tc_tensor *x, const tc_tensor *w, void *handle)
{
    /* Row-major out[m, n] is column-major out^T = w x^T: A = w (stored k x n column-major,
     * transposed), B = x^T (k x m column-major, not transposed). */
    int64_t m = x->shape[0], k = x->shape[1], n = w->shape[0];
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || x->stride[0] > INT32_MAX ||
        out->stride[0] > INT32_MAX)
        return tc_set_error(TC_ERR_UNSUPPORTED, "tc_matmul", "cuBLAS takes 32-bit sizes");
    const float one = 1.0f, zero = 0.0f;
    int t = cuda_type(x->dtype);
    TC_TRY(tc_context_make_current(out->backend->ctx));
    return tc_cublasGemmEx((cublasHandle_t)handle, CUBLAS_OP_T, CUBLAS_OP_N, (int)n, (int)m, (int)k,
                           &one, w->data, (cudaDataType)t, (int)k, x->data, (cudaDataType)t,
                           (int)x->stride[0], &zero, out->data, (cudaDataType)cuda_type(out->dtype),
                           (int)out->stride[0], CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

/* Bytes of one pipeline stage of tc_k_gemm_tc_* (see kernels/gemm.cu): 3 stages, or 2 where
 * shared memory holds fewer. */
#define GEMM_TC_STAGE 36864
/* Shared bytes of tc_k_gemm_wg_* for tiles of `bn` columns: 4 stages of 128 + bn rows of 128
 * bytes, and 1 KiB to align the first stage to 1,024 bytes. */
#define GEMM_WG_SHARED(bn) ((size_t)4 * (128 + (bn)) * 128 + 1024)

static tc_status gemm_own(tc_tensor *out, const tc_tensor *x, const tc_tensor *w)
{
    tc_backend *b = out->backend;
    int64_t m = x->shape[0], k = x->shape[1], n = w->shape[0];
    bool tensor_cores = x->dtype != TC_DTYPE_F32 && k % 8 == 0 && x->stride[0] % 8 == 0 &&
                        ((uintptr_t)x->data % 16) == 0 && ((uintptr_t)w->data % 16) == 0;
    size_t room = tc__backend_shared_room(b);
    int64_t row_blocks = (m + 127) / 128;
    if (tensor_cores && b->gemm != TC_GEMM_OWN_PORTABLE && b->ctx->cc_major == 9 &&
        b->ctx->cc_minor == 0 && room >= GEMM_WG_SHARED(128) &&
        row_blocks * ((n + 127) / 128) <= INT32_MAX) {
        /* Hopper: the wgmma kernel, with 128 x 256 tiles where they still give every SM a
         * block, else 128 x 128 (a 512-row product of 4,096 columns fills 128 SMs instead of
         * 64). */
        int wide =
            row_blocks * ((n + 255) / 256) >= b->ctx->sm_count && room >= GEMM_WG_SHARED(256);
        int64_t bn = wide ? 256 : 128;
        tc_launch_config cfg = { { (uint32_t)(row_blocks * ((n + bn - 1) / bn)), 1, 1 },
                                 { 256, 1, 1 },
                                 (uint32_t)GEMM_WG_SHARED(bn),
                                 b->stream };
        if (x->dtype == TC_DTYPE_BF16)
            return tc_launch_gemm_wg_bf16(cfg, TC__DEV(tc_bf16, out), TC__DEV(const tc_bf16, x),
                                          TC__DEV(const tc_bf16, w), m, n, k, x->stride[0],
                                          out->stride[0], wide);
        return tc_launch_gemm_wg_f16(cfg, TC__DEV(tc_half, out), TC__DEV(const tc_half, x),
                                     TC__DEV(const tc_half, w), m, n, k, x->stride[0],
                                     out->stride[0], wide);
    }
    int stages = room >= 3 * GEMM_TC_STAGE ? 3 : 2;
    if (tensor_cores) {
        tc_launch_config cfg = { { (uint32_t)((n + 127) / 128), (uint32_t)((m + 127) / 128), 1 },
                                 { 256, 1, 1 },
                                 (uint32_t)(stages * GEMM_TC_STAGE),
                                 b->stream };
        if (x->dtype == TC_DTYPE_BF16)
            return tc_launch_gemm_tc_bf16(cfg, TC__DEV(tc_bf16, out), TC__DEV(const tc_bf16, x),
                                          TC__DEV(const tc_bf16, w), m, n, k, x->stride[0],
                                          out->stride[0], stages);
        return tc_launch_gemm_tc_f16(cfg, TC__DEV(tc_half, out), TC__DEV(const tc_half, x),
                                     TC__DEV(const tc_half, w), m, n, k, x->stride[0],
                                     out->stride[0], stages);
    }
    tc_launch_config cfg = {
        { (uint32_t)((n + 63) / 64), (uint32_t)((m + 63) / 64), 1 }, { 256, 1, 1 }, 0, b->stream
    };
    tc_status st;
#define LAUNCH(sfx)                                                                               \
    tc_launch_gemm_##sfx(cfg, TC__DEV(T, out), TC__DEV(const T, x), TC__DEV(const T, w), m, n, k, \
                         x->stride[0], out->stride[0])
    TC__BY_DTYPE(st, x->dtype, LAUNCH);
#undef LAUNCH
    return st;
}

/* Whether the bytes two float tensors span (non-negative strides) intersect. */
static bool overlaps(const tc_tensor *a, const tc_tensor *b)
{
    const tc_tensor *t[2] = { a, b };
    uintptr_t lo[2], hi[2];
    for (int i = 0; i < 2; i++) {
        int64_t last = 0;
        for (int d = 0; d < t[i]->ndim; d++)
            last += (t[i]->shape[d] - 1) * t[i]->stride[d];
        lo[i] = (uintptr_t)t[i]->data;
        hi[i] = lo[i] + tc_dtype_bytes(t[i]->dtype, last + 1);
    }
    return lo[0] < hi[1] && lo[1] < hi[0];
}

typedef struct {
    tc_tensor *out;
    const tc_tensor *w;
    const float *x; /* [m, k] as f32 (normalised rows with rms_norm) */
    int64_t m, k, n;
    bool swiglu, accumulate;
    atomic_bool oom;
} linear_job;

/* Rows r .. r + R - 1 of out's columns c0 .. c0 + nc - 1 from the products g (g[b][a]: weight
 * row c0 + b by row r + a of x) and u (the up rows, with SwiGLU): the activation and the
 * residual add. */
static void put_cols(linear_job *j, int64_t r, int R, int64_t c0, int64_t nc, const float (*g)[4],
                     const float (*u)[4])
{
    bool f32 = j->out->dtype == TC_DTYPE_F32;
    for (int a = 0; a < R; a++) {
        void *orow = tc__row(j->out, r + a);
        float *of = orow;
        for (int64_t b = 0; b < nc; b++) {
            float v = g[b][a];
            if (j->swiglu)
                v = v / (1.0f + expf(-v)) * u[b][a];
            if (f32) /* (the CPU backend's usual case, without a call per element) */
                of[c0 + b] = j->accumulate ? v + of[c0 + b] : v;
            else
                tc__store(j->out->dtype, orow, c0 + b,
                          j->accumulate ? v + tc__load(j->out->dtype, orow, c0 + b) : v);
        }
    }
}

/* Rows r .. of x, up to four, into x; how many. */
static int x_rows(const linear_job *j, int64_t r, const float *x[4])
{
    int R = j->m - r >= 4 ? 4 : (int)(j->m - r);
    for (int a = 0; a < R; a++)
        x[a] = j->x + (r + a) * j->k;
    return R;
}

/* Weight rows (output columns) a CPU product takes at a time. */
#define LINEAR_TILE 16

/* Columns [begin, end) of out over block-type weights against more than four rows of x:
 * LINEAR_TILE weight rows dequantised once (tc__qdot_dequantised gives the bits tc__qdot gives
 * on the rows themselves), then against the rows of x four at a time. */
static void linear_cols_dequantised(linear_job *j, int64_t begin, int64_t end)
{
    int64_t k = j->k;
    size_t row_bytes = tc_dtype_bytes(j->w->dtype, k);
    float *buf = tc_host_alloc((size_t)(2 * LINEAR_TILE * k) * sizeof(float)),
          *ubuf = buf + LINEAR_TILE * k;
    if (!buf) {
        atomic_store(&j->oom, true);
        return;
    }
    for (int64_t c0 = begin; c0 < end; c0 += LINEAR_TILE) {
        int64_t nc = end - c0 < LINEAR_TILE ? end - c0 : LINEAR_TILE;
        for (int64_t b = 0; b < nc; b++) {
            const char *gate = (const char *)j->w->data + (size_t)(c0 + b) * row_bytes;
            tc__dequant_row(j->w->dtype, gate, k, buf + b * k);
            if (j->swiglu)
                tc__dequant_row(j->w->dtype, gate + (size_t)j->n * row_bytes, k, ubuf + b * k);
        }
        for (int64_t r = 0; r < j->m; r += 4) {
            const float *x[4];
            int R = x_rows(j, r, x);
            float g[LINEAR_TILE][4], u[LINEAR_TILE][4];
            for (int64_t b = 0; b < nc; b++) {
                tc__qdot_dequantised(j->w->dtype, buf + b * k, x, R, k, g[b]);
                if (j->swiglu)
                    tc__qdot_dequantised(j->w->dtype, ubuf + b * k, x, R, k, u[b]);
            }
            put_cols(j, r, R, c0, nc, (const float(*)[4])g, (const float(*)[4])u);
        }
    }
    tc_host_free(buf);
}

/* Columns [begin, end) of out, the weights read in place by tc__qdot: LINEAR_TILE weight rows
 * against the rows of x four at a time. */
static void linear_cols(void *ctx, int64_t begin, int64_t end)
{
    linear_job *j = ctx;
    int64_t k = j->k;
    if (j->m > 4 && tc_dtype_is_block(j->w->dtype)) {
        linear_cols_dequantised(j, begin, end);
        return;
    }
    size_t row_bytes = tc_dtype_bytes(j->w->dtype, k);
    for (int64_t c0 = begin; c0 < end; c0 += LINEAR_TILE) {
        int64_t nc = end - c0 < LINEAR_TILE ? end - c0 : LINEAR_TILE;
        for (int64_t r = 0; r < j->m; r += 4) {
            const float *x[4];
            int R = x_rows(j, r, x);
            float g[LINEAR_TILE][4], u[LINEAR_TILE][4];
            const char *gate = (const char *)j->w->data + (size_t)c0 * row_bytes;
            /* (every weight dtype is one tc__qdot takes: check_product) */
            tc__qdot(j->w->dtype, gate, (int)nc, x, R, k, g);
            if (j->swiglu)
                tc__qdot(j->w->dtype, gate + (size_t)j->n * row_bytes, (int)nc, x, R, k, u);
            put_cols(j, r, R, c0, nc, (const float(*)[4])g, (const float(*)[4])u);
        }
    }
}

static tc_status linear_cpu(tc_tensor *out, const tc_tensor *x, const tc_tensor *w,
                            const tc_linear_opts *o)
{
    int64_t m = x->shape[0], k = x->shape[1];
    float *xf = tc_host_alloc((size_t)((m + 1) * k) * sizeof(float) + 1), *g = xf + m * k;
    if (!xf)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_linear",
                            "no host memory for %lld x %lld floats", (long long)m, (long long)k);
    if (o->norm_weight)
        tc__load_row(o->norm_weight->dtype, o->norm_weight->data, k, g);
    for (int64_t r = 0; r < m; r++) {
        float *xr = xf + r * k;
        tc__load_row(x->dtype, tc__row(x, r), k, xr);
        if (o->rms_norm) {
            double ss = 0.0;
            for (int64_t i = 0; i < k; i++)
                ss += (double)xr[i] * xr[i];
            float scale = (float)(1.0 / sqrt(ss / (double)k + o->norm_eps));
            for (int64_t i = 0; i < k; i++)
                xr[i] *= o->norm_weight ? scale * g[i] : scale;
        }
    }
    linear_job j = { out, w, xf, m, k, out->shape[1], o->swiglu, o->accumulate, false };
    tc__parallel_for(out->backend, out->shape[1], 8, linear_cols, &j);
    tc_host_free(xf);
    if (atomic_load(&j.oom))
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_linear", "no host memory for a weight row");
    return TC_OK;
}

/* The checks tc_matmul, tc_linear and tc__matmul_widen share: dtypes (`widen`: x and w of
 * one 16-bit dtype, out f32), shapes (w has twice out's width of rows with SwiGLU), backends,
 * layouts, and an out that does not overlap x. */
static tc_status check_product(const char *op, const tc_tensor *out, const tc_tensor *x,
                               const tc_tensor *w, bool swiglu, bool widen)
{
    TC_TRY(tc__check_dtype(op, "x", x,
                           widen ? TC__MASK(TC_DTYPE_F16) | TC__MASK(TC_DTYPE_BF16) : TC__FLOATS));
    TC_TRY(tc__check_dtype(op, "out", out, TC__MASK(widen ? TC_DTYPE_F32 : x->dtype)));
    TC_TRY(tc__check_dtype(op, "w", w,
                           widen ? TC__MASK(x->dtype) | TC__QUANTS : tc__weight_dtypes(w)));
    TC_TRY(tc__check_ndim(op, "x", x, 2));
    TC_TRY(tc__check_ndim(op, "w", w, 2));
    TC_TRY(tc__check_ndim(op, "out", out, 2));
    int64_t n = out->shape[1];
    TC_TRY(tc__check_dim(op, "w", w, 1, x->shape[1], "x's width, in_features"));
    TC_TRY(tc__check_dim(op, "out", out, 0, x->shape[0], "x's rows"));
    TC_TRY(tc__check_dim(op, "w", w, 0, swiglu ? 2 * n : n,
                         swiglu ? "twice out's width (gate rows, then up rows)"
                                : "out's width, out_features"));
    TC_TRY(tc__check_same_backend(op, out, x));
    TC_TRY(tc__check_same_backend(op, out, w));
    TC_TRY(tc__check_rows_dense(op, "x", x));
    TC_TRY(tc__check_rows_dense(op, "out", out));
    if (!tc_tensor_is_contiguous(w))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "w must be contiguous");
    if (x->shape[0] > 0 && n > 0 && overlaps(out, x))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "out must not overlap x");
    return TC_OK;
}

tc_status tc__matmul_widen(tc_tensor *out, const tc_tensor *x, const tc_tensor *w)
{
    const char *op = "tc_matmul (f32 out)";
    TC_TRY(check_product(op, out, x, w, false, true));
    tc_backend *b = out->backend;
    if (tc_dtype_is_block(w->dtype)) {
        /* Up to TC_MATVEC_MAX_ROWS rows on the decode kernels, more on the batched ones (from
         * fewer where the batched kernels take them), with f32 out. */
        int64_t m = x->shape[0];
        if (tc__quant_batch_fits(x, w))
            return w->shape[0] == 0 ? TC_OK : tc__quant_batch(out, x, w);
        if (b->kind != TC_BACKEND_CUDA || m > TC_MATVEC_MAX_ROWS)
            return tc_set_error(TC_ERR_UNSUPPORTED, op,
                                "a product of %s weights widens to f32 for up to %d rows of "
                                "16-bit x on CUDA only",
                                tc_dtype_name(w->dtype), TC__QUANT_BATCH_ROWS);
        return m == 0 || w->shape[0] == 0 ? TC_OK
                                          : tc__quant_matvec(out, x, w, 0, m, 8, NULL, 0.0f);
    }
    /* 2 to TC_MATVEC_MAX_ROWS rows: the tensor-core decode kernel with f32 out (H200,
     * Llama-3.2-1B bf16's 128,256-row output product had taken 306 us a step at 4 rows through
     * x widened to f32 and the f32 kernel). */
    if (b->kind == TC_BACKEND_CUDA && x->shape[0] >= 2 && x->shape[0] <= TC_MATVEC_MAX_ROWS)
        return w->shape[0] == 0 ? TC_OK : matvec_cuda(out, x, w, 0, x->shape[0], NULL, NULL);
    void *handle = NULL;
    if (b->kind != TC_BACKEND_CUDA || x->shape[0] <= TC_MATVEC_MAX_ROWS || b->gemm == TC_GEMM_OWN ||
        b->gemm == TC_GEMM_OWN_PORTABLE || tc__backend_cublas(b, &handle) != TC_OK)
        return tc_set_error(TC_ERR_UNSUPPORTED, op,
                            "a product widening to f32 runs on CUDA only, on 2 or more rows (more "
                            "than %d on cuBLAS)",
                            TC_MATVEC_MAX_ROWS);
    if (w->shape[0] == 0)
        return TC_OK;
    return gemm_cublas(out, x, w, handle);
}

/* x w^T of more than TC_MATVEC_MAX_ROWS rows, x and w of one dtype: cuBLAS, or our own kernels
 * where it is missing or not wanted. */
static tc_status gemm_any(tc_tensor *out, const tc_tensor *x, const tc_tensor *w)
{
    tc_backend *b = out->backend;
    if (b->gemm != TC_GEMM_OWN && b->gemm != TC_GEMM_OWN_PORTABLE) {
        void *handle = NULL;
        tc_status st = tc__backend_cublas(b, &handle);
        if (st == TC_OK)
            return gemm_cublas(out, x, w, handle);
        if (b->gemm == TC_GEMM_CUBLAS)
            return st;
        TC_DEBUG("%s: cuBLAS unavailable (%s); using thincuda's kernels", b->name, tc_last_error());
    }
    return gemm_own(out, x, w);
}

tc_status tc_matmul(tc_tensor *out, const tc_tensor *x, const tc_tensor *w)
{
    TC_TRY(check_product("tc_matmul", out, x, w, false, false));
    int64_t m = x->shape[0], n = w->shape[0];
    if (m == 0 || n == 0)
        return TC_OK;
    tc_backend *b = out->backend;
    if (b->kind == TC_BACKEND_CPU)
        return linear_cpu(out, x, w, &(tc_linear_opts){ 0 });
    if (tc_dtype_is_block(w->dtype))
        return tc__quant_batch_fits(x, w) ? tc__quant_batch(out, x, w)
               : m <= TC_MATVEC_MAX_ROWS  ? tc__quant_matvec(out, x, w, 0, m, 0, NULL, 0.0f)
                                          : tc__quant_gemm(out, x, w, gemm_any);
    if (m <= TC_MATVEC_MAX_ROWS || w->dtype != x->dtype) {
        /* Float weights of another dtype have only the matrix-vector kernel, which then runs
         * once per TC_MATVEC_MAX_ROWS rows. */
        for (int64_t r = 0; r < m; r += TC_MATVEC_MAX_ROWS)
            TC_TRY(matvec_cuda(
                out, x, w, r, m - r < TC_MATVEC_MAX_ROWS ? m - r : TC_MATVEC_MAX_ROWS, NULL, NULL));
        return TC_OK;
    }
    return gemm_any(out, x, w);
}

static tc_status check_linear(const char *op, const tc_tensor *out, const tc_tensor *x,
                              const tc_tensor *w, const tc_linear_opts *o)
{
    TC_TRY(check_product(op, out, x, w, o->swiglu, false));
    if (o->norm_weight && !o->rms_norm)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "norm_weight is given without rms_norm");
    if (o->rms_norm && !(o->norm_eps >= 0.0f))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "norm_eps must be a non-negative number");
    if (o->norm_weight) {
        TC_TRY(tc__check_dtype(op, "norm_weight", o->norm_weight, TC__FLOATS));
        TC_TRY(tc__check_ndim(op, "norm_weight", o->norm_weight, 1));
        TC_TRY(tc__check_dim(op, "norm_weight", o->norm_weight, 0, x->shape[1], "x's width"));
        TC_TRY(tc__check_same_backend(op, out, o->norm_weight));
        if (!tc_tensor_is_contiguous(o->norm_weight))
            return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "norm_weight must be contiguous");
    }
    return TC_OK;
}

/* The one-row kernel reads x and weights of x's dtype in 16-byte vectors (it normalises such
 * products itself, and rotates them). */
static bool one_row_vectors(const tc_tensor *x, const tc_tensor *w)
{
    size_t vec = 16 / tc_dtype_bytes(x->dtype, 1);
    return x->shape[0] == 1 && w->dtype == x->dtype && x->shape[1] % (int64_t)vec == 0 &&
           ((uintptr_t)x->data | (uintptr_t)w->data) % 16 == 0;
}

/* Whether the one-row integer kernel can take the norm weight nw (none, or x's dtype in
 * 16-byte rows) for x. */
static bool quant_norm_fits(const tc_tensor *nw, const tc_tensor *x)
{
    return !nw || (nw->dtype == x->dtype && (uintptr_t)nw->data % 16 == 0);
}

tc_status tc_linear(tc_tensor *out, const tc_tensor *x, const tc_tensor *w,
                    const tc_linear_opts *opts)
{
    static const tc_linear_opts none;
    const tc_linear_opts *o = opts ? opts : &none;
    TC_TRY(check_linear("tc_linear", out, x, w, o));
    int64_t m = x->shape[0];
    if (m == 0 || out->shape[1] == 0)
        return TC_OK;
    if (out->backend->kind == TC_BACKEND_CPU)
        return linear_cpu(out, x, w, o);
    /* The matrix-vector kernel normalises one row of x over weights of x's dtype in 16-byte
     * rows itself (their norm weight folded), the integer kernel one row of bf16 x over
     * quantised weights (times a bf16 norm weight in 16-byte rows); other products take x's norm
     * from the RMSNorm kernel, into op scratch. */
    tc_tensor xn;
    const tc_tensor *src = x;
    tc_linear_opts plain = *o;
    const tc_tensor *nw = o->norm_weight;
    bool in_quant =
        tc_dtype_is_block(w->dtype) && tc__quant_int_rows(x, w, m) && quant_norm_fits(nw, x);
    if (o->rms_norm && !in_quant && (nw || !one_row_vectors(x, w))) {
        CUdeviceptr scratch;
        TC_TRY(tc__backend_workspace(out->backend, tc_dtype_bytes(x->dtype, m * x->shape[1]),
                                     &scratch));
        TC_TRY(tc_tensor_wrap(&xn, out->backend, x->dtype, TC_SHAPE(m, x->shape[1]),
                              (void *)(uintptr_t)scratch));
        TC_TRY(tc_rmsnorm(&xn, NULL, x, nw, o->norm_eps));
        src = &xn;
        plain.rms_norm = false;
        plain.norm_weight = NULL;
    }
    for (int64_t r = 0; r < m; r += TC_MATVEC_MAX_ROWS) {
        int64_t rows = m - r < TC_MATVEC_MAX_ROWS ? m - r : TC_MATVEC_MAX_ROWS;
        if (tc_dtype_is_block(w->dtype))
            TC_TRY(tc__quant_matvec(out, src, w, r, rows,
                                    (plain.swiglu ? 1 : 0) | (plain.accumulate ? 2 : 0) |
                                        (plain.rms_norm ? 4 : 0),
                                    plain.norm_weight, plain.norm_eps));
        else
            TC_TRY(matvec_cuda(out, src, w, r, rows, &plain, NULL));
    }
    return TC_OK;
}

tc_status tc_linear_pair(tc_tensor *out_a, tc_tensor *out_b, const tc_tensor *x,
                         const tc_tensor *w_a, const tc_tensor *w_b, const tc_linear_opts *opts)
{
    static const tc_linear_opts none;
    const tc_linear_opts *o = opts ? opts : &none;
    TC_TRY(check_linear("tc_linear_pair", out_a, x, w_a, o));
    TC_TRY(check_linear("tc_linear_pair", out_b, x, w_b, o));
    const tc_tensor *nw = o->norm_weight;
    if (out_a->backend->kind == TC_BACKEND_CUDA && !o->swiglu && !o->accumulate &&
        out_a->shape[1] > 0 && out_b->shape[1] > 0 && tc__quant_pair(x, w_a, w_b) >= 0 &&
        out_a->dtype == x->dtype && out_b->dtype == x->dtype && quant_norm_fits(nw, x))
        return tc__quant_matvec_pair(out_a, out_b, x, w_a, w_b, o->rms_norm ? 4 : 0, nw,
                                     o->norm_eps);
    TC_TRY(tc_linear(out_a, x, w_a, o));
    return tc_linear(out_b, x, w_b, o);
}

tc_status tc_linear_rope_store(tc_tensor *out, const tc_tensor *x, const tc_tensor *w,
                               const tc_linear_opts *opts, const tc_tensor *pos,
                               const tc_rope_config *rope, tc_tensor *k_cache, tc_tensor *v_cache,
                               const tc_tensor *slots)
{
    return tc_linear_rope_store_ex(out, x, w, opts, pos, rope, k_cache, v_cache, slots, NULL);
}

tc_status tc_linear_rope_store_ex(tc_tensor *out, const tc_tensor *x, const tc_tensor *w,
                                  const tc_linear_opts *opts, const tc_tensor *pos,
                                  const tc_rope_config *rope, tc_tensor *k_cache,
                                  tc_tensor *v_cache, const tc_tensor *slots,
                                  const tc_attention_opts *kv_opts)
{
    const char *op = "tc_linear_rope_store";
    static const tc_linear_opts none;
    const tc_linear_opts *o = opts ? opts : &none;
    if (o->swiglu || o->accumulate)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "opts may not ask for swiglu or accumulate");
    if (!rope)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "rope is required");
    TC_TRY(check_linear(op, out, x, w, o));
    TC_TRY(tc__check_ndim(op, "k_cache", k_cache, 4));
    int64_t m = out->shape[0], hd = k_cache->shape[3], n_kv = k_cache->shape[2];
    if (hd <= 0 || out->shape[1] % hd || out->shape[1] / hd <= 2 * n_kv)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "out's %lld columns are not q, k and v heads of the cache's head_dim "
                            "%lld (%lld KV heads)",
                            (long long)out->shape[1], (long long)hd, (long long)n_kv);
    int64_t n_heads = out->shape[1] / hd - 2 * n_kv;
    tc_tensor all, q, k, v;
    TC_TRY(tc_tensor_reshape(out, TC_SHAPE(m, n_heads + 2 * n_kv, hd), &all));
    TC_TRY(tc_tensor_slice(&all, 1, 0, n_heads, &q));
    TC_TRY(tc_tensor_slice(&all, 1, n_heads, n_kv, &k));
    TC_TRY(tc_tensor_slice(&all, 1, n_heads + n_kv, n_kv, &v));
    TC_TRY(tc__check_rope(op, &q, &k, pos, rope));
    TC_TRY(tc__check_store(op, k_cache, v_cache, &k, &v, slots));
    const float *ks, *vs;
    TC_TRY(tc__kv_scales(op, k_cache, kv_opts, &ks, &vs));
    /* (The one-row kernel stores in the activations' dtype: an FP8 cache takes the rope's.) */
    if (out->backend->kind == TC_BACKEND_CPU || !one_row_vectors(x, w) ||
        k_cache->dtype != out->dtype) {
        TC_TRY(tc_linear(out, x, w, o));
        return tc_rope_store_ex(&q, &k, &v, pos, rope, k_cache, v_cache, slots, kv_opts);
    }
    rope_args ra = { TC__DEV(const int32_t, pos),
                     TC__DEV(const int32_t, slots),
                     k_cache->data,
                     v_cache->data,
                     *rope,
                     (int32_t)n_heads,
                     (int32_t)n_kv };
    return matvec_cuda(out, x, w, 0, 1, o, &ra);
}

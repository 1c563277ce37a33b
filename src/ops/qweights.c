/* Block-quantised weights on the CUDA backend: they are held as planes (each field of every
 * block together, kernels/quant.cu), converted from and to the file's layout on the device
 * when copied; products of up to TC_MATVEC_MAX_ROWS rows read them in place, longer ones
 * dequantise row tiles small enough to stay in L2 and hand each to cuBLAS. */
#include "ops/internal.h"

size_t tc__quant_device_bytes(tc_dtype dt, int64_t n)
{
    /* Four planes at most, each 256-byte aligned. */
    return tc_dtype_bytes(dt, n) + 4 * 256;
}

/* Planes are laid out over a tensor's every block: only contiguous whole tensors (and their
 * rows through tc__quant_upload) convert. */
static tc_status check_contiguous(const char *op, const tc_tensor *t)
{
    if (t->ndim < 1 || !tc_tensor_is_contiguous(t))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "a quantised tensor must be contiguous");
    return TC_OK;
}

static int64_t rows_of(const tc_tensor *t)
{
    int64_t last = t->shape[t->ndim - 1];
    return last ? tc_tensor_numel(t) / last : 0;
}

/* A grid of 256-thread blocks over `work` threads' worth of items, at most 8 per SM. */
static tc_launch_config spread(tc_backend *b, int64_t work)
{
    int64_t blocks = (work + 255) / 256, cap = (int64_t)b->ctx->sm_count * 8;
    return tc__cfg(b, (unsigned)(blocks < 1 ? 1 : blocks < cap ? blocks : cap), 256, 0);
}

/* A block of 256 threads per row (grid-stride over rows), at most 8 per SM: the dequantising
 * kernel's grid. */
static tc_launch_config per_row(tc_backend *b, int64_t rows)
{
    int64_t cap = (int64_t)b->ctx->sm_count * 8;
    return tc__cfg(b, (unsigned)(rows < 1 ? 1 : rows < cap ? rows : cap), 256, 0);
}

/* Copy `rows` rows of file-layout blocks at src (host) to rows [row0, row0 + rows) of the
 * CUDA block tensor t: through a device buffer, then the repacking kernel. */
tc_status tc__quant_upload(tc_tensor *t, int64_t row0, int64_t rows, const void *src)
{
    const char *op = "tc_tensor_copy_from_host";
    TC_TRY(check_contiguous(op, t));
    tc_backend *b = t->backend;
    int64_t k = t->shape[t->ndim - 1], nb = k / tc_dtype_block(t->dtype), total = rows_of(t);
    if (row0 < 0 || rows < 0 || row0 > total - rows)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "rows [%lld, %lld) of %lld",
                            (long long)row0, (long long)(row0 + rows), (long long)total);
    size_t bytes = tc_dtype_bytes(t->dtype, k) * (size_t)rows;
    if (bytes == 0)
        return TC_OK;
    void *tmp = NULL;
    TC_TRY(tc_backend_alloc(b, bytes, &tmp));
    tc_status st = tc__backend_upload(b, (CUdeviceptr)(uintptr_t)tmp, src, bytes);
    if (st == TC_OK)
        st = tc_launch_qrepack(spread(b, (int64_t)(bytes / 2)), (uint8_t *)t->data, (uint8_t *)tmp,
                               (int32_t)t->dtype, total * nb, row0 * nb, rows * nb, (int32_t)1);
    tc_backend_free(b, tmp); /* in stream order: the kernel has it until it finishes */
    return st;
}

tc_status tc__quant_pack(tc_tensor *t, int64_t row0, const tc__quant_pack_desc *d)
{
    const char *op = "tc__quant_pack";
    TC_TRY(check_contiguous(op, t));
    int64_t k = t->shape[t->ndim - 1], total = rows_of(t);
    /* tc_k_hfq_pack's type code; -1: a type it does not write */
    int type = d->dtype == TC_DTYPE_Q4_0        ? 0
               : d->dtype == TC_DTYPE_Q4_1      ? 1
               : d->dtype == TC_DTYPE_Q8_0      ? 2
               : d->dtype == TC_DTYPE_Q4_1_G64  ? 3
               : d->dtype == TC_DTYPE_Q4_1_G128 ? 4
                                                : -1;
    int64_t be = tc_dtype_block(d->dtype);
    if (type < 0 || t->dtype != d->dtype || k != d->in || d->in % be || row0 < 0 ||
        row0 > total - d->out)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "rows [%lld, %lld) of %s [%lld x %lld] from a %s matrix of %lld x %lld",
                            (long long)row0, (long long)(row0 + d->out), tc_dtype_name(t->dtype),
                            (long long)total, (long long)k, tc_dtype_name(d->dtype),
                            (long long)d->out, (long long)d->in);
    tc_backend *b = t->backend;
    /* (The kernel takes a thread per 32 elements; q4_1_g64's blocks are of 64, q4_1_g128's of
     * 128.) */
    int64_t nb = d->in / be, blocks = d->out * nb;
    size_t bsz = tc_dtype_bytes(d->dtype, be), at[7], bytes = 0;
    const void *src[6] = { d->qw, d->qz, d->sc, d->g_idx, d->perm, d->rows };
    const size_t len[6] = { d->qw_bytes,
                            d->qz ? d->qz_bytes : 0,
                            d->sc_bytes,
                            d->g_idx ? d->g_idx_bytes : 0,
                            d->perm ? (size_t)d->in * sizeof *d->perm : 0,
                            d->rows ? (size_t)d->out * sizeof *d->rows : 0 };
    for (int i = 0; i < 6; i++) {
        at[i] = bytes;
        bytes += (len[i] + 255) / 256 * 256;
    }
    at[6] = bytes;
    bytes += (size_t)blocks * bsz;
    if (blocks == 0)
        return TC_OK;
    void *tmp = NULL;
    TC_TRY(tc_backend_alloc(b, bytes, &tmp));
    CUdeviceptr base = (CUdeviceptr)(uintptr_t)tmp;
    tc_status st = TC_OK;
    for (int i = 0; i < 6 && st == TC_OK; i++)
        if (len[i])
            st = tc__backend_upload(b, base + at[i], src[i], len[i]);
    uint8_t *dev = tmp;
    if (st == TC_OK)
        st = tc_launch_hfq_pack(spread(b, blocks * (be / 32)), dev + at[6], type, d->out,
                                d->in / 32, (const uint32_t *)(dev + at[0]), d->wk, d->wj, d->kpack,
                                d->jpack, d->bits, d->awq ? 1 : 0,
                                d->qz ? (const uint32_t *)(dev + at[1]) : NULL, d->zg, d->zj,
                                d->zpack, d->zero_offset, (const void *)(dev + at[2]), d->sc_type,
                                d->sg, d->sj, d->g_idx ? (const int32_t *)(dev + at[3]) : NULL,
                                d->perm ? (const int32_t *)(dev + at[4]) : NULL,
                                d->rows ? (const int32_t *)(dev + at[5]) : NULL, d->group);
    if (st == TC_OK)
        st =
            tc_launch_qrepack(spread(b, blocks * (int64_t)bsz / 2), (uint8_t *)t->data, dev + at[6],
                              (int32_t)t->dtype, total * nb, row0 * nb, blocks, (int32_t)1);
    tc_backend_free(b, tmp); /* in stream order: the kernels have it until they finish */
    return st;
}

/* The block types kernels/iq.cu dequantises (ggml type ids: the IQ family, TQ1_0, TQ2_0). */
static const struct {
    int32_t type;
    int64_t elems, bytes; /* per block */
} iq_types[] = {
    { 16, 256, 66 }, { 17, 256, 74 },  { 18, 256, 98 }, { 19, 256, 50 },
    { 20, 32, 18 },  { 21, 256, 110 }, { 22, 256, 82 }, { 23, 256, 136 },
    { 29, 256, 56 }, { 34, 256, 54 },  { 35, 256, 66 },
};

tc_status tc__iq_upload(tc_tensor *out, int32_t ggml_type, const void *src, size_t bytes)
{
    const char *op = "tc__iq_upload";
    TC_TRY(tc__check_dtype(op, "out", out, TC__FLOATS));
    if (out->backend->kind != TC_BACKEND_CUDA || !tc_tensor_is_contiguous(out))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "out must be a contiguous CUDA tensor");
    size_t i = 0, n_types = sizeof iq_types / sizeof iq_types[0];
    while (i < n_types && iq_types[i].type != ggml_type)
        i++;
    if (i == n_types)
        return tc_set_error(TC_ERR_UNSUPPORTED, op, "ggml type %d has no dequantising kernel",
                            (int)ggml_type);
    int64_t n = tc_tensor_numel(out), be = iq_types[i].elems;
    if (n % be || (uint64_t)bytes != (uint64_t)(n / be) * (uint64_t)iq_types[i].bytes)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "%zu bytes of ggml type %d for %lld elements (want whole blocks of "
                            "%lld elements, %lld bytes each)",
                            bytes, (int)ggml_type, (long long)n, (long long)be,
                            (long long)iq_types[i].bytes);
    if (n == 0)
        return TC_OK;
    tc_backend *b = out->backend;
    void *tmp = NULL;
    TC_TRY(tc_backend_alloc(b, bytes, &tmp));
    tc_status st = tc__backend_upload(b, (CUdeviceptr)(uintptr_t)tmp, src, bytes);
    int64_t blocks = n / be;
    if (st == TC_OK) /* a thread per 32 elements */
        st = tc_launch_iq_dequant(spread(b, n / 32), out->data, (int32_t)out->dtype,
                                  (const uint8_t *)tmp, ggml_type, blocks);
    tc_backend_free(b, tmp); /* in stream order: the kernel has it until it finishes */
    return st;
}

/* The whole CUDA block tensor t in the file's layout at dst (host). */
tc_status tc__quant_download(const tc_tensor *t, void *dst)
{
    const char *op = "tc_tensor_copy_to_host";
    TC_TRY(check_contiguous(op, t));
    tc_backend *b = t->backend;
    size_t bytes = tc_tensor_bytes(t);
    if (bytes == 0)
        return TC_OK;
    int64_t blocks = (int64_t)(tc_tensor_numel(t) / tc_dtype_block(t->dtype));
    void *tmp = NULL;
    TC_TRY(tc_backend_alloc(b, bytes, &tmp));
    tc_status st =
        tc_launch_qrepack(spread(b, (int64_t)(bytes / 2)), (uint8_t *)t->data, (uint8_t *)tmp,
                          (int32_t)t->dtype, blocks, (int64_t)0, blocks, (int32_t)0);
    if (st == TC_OK)
        st = tc_stream_copy_d2h(b->stream, dst, (CUdeviceptr)(uintptr_t)tmp, bytes);
    if (st == TC_OK)
        st = tc_stream_synchronize(b->stream);
    tc_backend_free(b, tmp);
    return st;
}

tc_status tc__quant_embedding(tc_tensor *out, const tc_tensor *table, const tc_tensor *ids)
{
    tc_backend *b = out->backend;
    int64_t n = ids->shape[0], dim = table->shape[1];
    if (out->dtype != TC_DTYPE_F32 && ((uintptr_t)out->data % 16 || (out->stride[0] * 2) % 16))
        return tc_set_error(TC_ERR_UNSUPPORTED, "tc_embedding",
                            "rows of a quantised table go to 16-byte aligned output rows");
    tc_launch_config cfg = per_row(b, n);
    tc_status st;
#define LAUNCH(sfx)                                                                            \
    tc_launch_qdequant_##sfx(cfg, TC__DEV(T, out), table->data, (int32_t)table->dtype,         \
                             table->shape[0], dim, (int64_t)0, n, TC__DEV(const int32_t, ids), \
                             out->stride[0])
    TC__BY_DTYPE(st, out->dtype, LAUNCH);
#undef LAUNCH
    return st;
}

/* The tensor-core kernels of each type, for f16 and bf16 x. */
typedef tc_status (*qmv_f16_fn)(tc_launch_config, void *, const tc_half *, const void *, int32_t,
                                int64_t, int64_t, int64_t, int64_t, int32_t);
typedef tc_status (*qmv_bf16_fn)(tc_launch_config, void *, const tc_bf16 *, const void *, int32_t,
                                 int64_t, int64_t, int64_t, int64_t, int32_t);
#define QMV(T, t)                                                                                  \
    [TC_DTYPE_##T] = { tc_launch_qmv_##t##_f16, tc_launch_qmv_##t##_bf16, TC_KERNEL_QMV_##T##_F16, \
                       TC_KERNEL_QMV_##T##_BF16 }
static const struct {
    qmv_f16_fn f16;
    qmv_bf16_fn bf16;
    tc_kernel_id id_f16, id_bf16;
} qmv[TC_DTYPE_COUNT] = { QMV(Q4_0, q4_0), QMV(Q4_1, q4_1),         QMV(Q5_0, q5_0),
                          QMV(Q5_1, q5_1), QMV(Q8_0, q8_0),         QMV(Q2_K, q2_k),
                          QMV(Q3_K, q3_k), QMV(Q4_K, q4_k),         QMV(Q5_K, q5_k),
                          QMV(Q6_K, q6_k), QMV(Q4_1_G64, q4_1_g64), QMV(Q4_1_G128, q4_1_g128) };
#undef QMV

/* The batch-1 kernels on the integer tensor cores (bf16 x written as two 8-bit digits per element
 * in shared memory first), for every block type; Q2_K's and Q3_K's are sm_90a code only
 * (hopper), taken on compute capability 9.x, elsewhere their 2-8 row kernels take one row. */
typedef tc_status (*qmv1_fn)(tc_launch_config, void *, const tc_bf16 *, const void *, int64_t,
                             int64_t, int64_t, int32_t, const tc_bf16 *, float);
#define QMV1(T, t, h) [TC_DTYPE_##T] = { tc_launch_qmv1_##t##_bf16, TC_KERNEL_QMV1_##T##_BF16, h }
static const struct {
    qmv1_fn bf16;
    tc_kernel_id id;
    bool hopper;
} qmv1[TC_DTYPE_COUNT] = { QMV1(Q4_0, q4_0, false),         QMV1(Q4_1, q4_1, false),
                           QMV1(Q5_0, q5_0, false),         QMV1(Q5_1, q5_1, false),
                           QMV1(Q8_0, q8_0, false),         QMV1(Q2_K, q2_k, true),
                           QMV1(Q3_K, q3_k, true),          QMV1(Q4_K, q4_k, false),
                           QMV1(Q5_K, q5_k, false),         QMV1(Q6_K, q6_k, false),
                           QMV1(Q4_1_G64, q4_1_g64, false), QMV1(Q4_1_G128, q4_1_g128, false) };
#undef QMV1

/* The pairs of types with a two-product kernel of their own (tc_k_qmv1_<a>_<b>_bf16): Q4_K_M's
 * q and k (Q4_K) beside its v (Q6_K) in half its layers, Q5_K_M's (Q5_K, Q6_K). */
typedef tc_status (*qmv1_pair_fn)(tc_launch_config, tc_bf16 *, tc_bf16 *, const tc_bf16 *,
                                  const void *, const void *, int64_t, int64_t, int64_t, int32_t,
                                  const tc_bf16 *, float, int32_t);
static const struct {
    tc_dtype a, b;
    qmv1_pair_fn fn;
    tc_kernel_id id;
} qmv1_pairs[] = {
    { TC_DTYPE_Q4_K, TC_DTYPE_Q6_K, tc_launch_qmv1_q4_k_q6_k_bf16, TC_KERNEL_QMV1_Q4_K_Q6_K_BF16 },
    { TC_DTYPE_Q5_K, TC_DTYPE_Q6_K, tc_launch_qmv1_q5_k_q6_k_bf16, TC_KERNEL_QMV1_Q5_K_Q6_K_BF16 }
};
#define N_QMV1_PAIRS (sizeof qmv1_pairs / sizeof qmv1_pairs[0])

/* The two-row integer kernels of the K-quants (sm_90a code only): two sequences' decode reads
 * the weights once, each row's sums bit for bit those of the one-row kernel. H200, bench_ops
 * quant at 2 rows, 4096 x 4096 / 11008 x 4096 / 4096 x 11008, us, against the batched kernels
 * they replace there: Q4_K 9.5 / 15.7 / 16.7 -> 6.9 / 13.6 / 15.5, Q5_K 10.7 / 17.8 / 18.8 ->
 * 8.0 / 16.5 / 18.7, Q6_K 10.0 / 17.4 / 19.2 -> 8.6 / 17.0 (its 4096 x 11008 on the 2-8 row
 * kernel: 16.3). 7B Q4_K_M at 2 sequences 585-590 -> 721-722 tokens/s, Q5_K_M 541-542 ->
 * 633-634. The other types' 2-8 row kernels are as quick at two rows as these would be
 * (q4_1_g128 5.7 / 11.4 / 11.2 against 7.6 / 14.5 on a two-row kernel, Q4_0 6.0 / 12.0 against
 * 7.4 / 14.0). */
typedef tc_status (*qmv2_fn)(tc_launch_config, void *, const tc_bf16 *, const void *, int64_t,
                             int64_t, int64_t, int64_t, int32_t, const tc_bf16 *, float);
#define QMV2(T, t) [TC_DTYPE_##T] = { tc_launch_qmv2_##t##_bf16, TC_KERNEL_QMV2_##T##_BF16 }
static const struct {
    qmv2_fn bf16;
    tc_kernel_id id;
} qmv2[TC_DTYPE_COUNT] = { QMV2(Q4_K, q4_k), QMV2(Q5_K, q5_k), QMV2(Q6_K, q6_k) };
#undef QMV2

_Static_assert(N_QMV1_PAIRS <= sizeof((tc_backend *)0)->qwave_pair / sizeof(int64_t),
               "tc_backend.qwave_pair holds every pair kernel");

/* The tensor-core kernels stream weights through shared memory, as much as two blocks an SM
 * leave each (less 8 KiB of their own and 1 KiB the driver keeps a block), at most 96 KiB: six
 * steps of the lighter types for each warp, three of Q6_K; one of Q6_K (28 KiB) is the least
 * they take, which every GPU they are built for has. (x through the same ring, copied with the
 * weights, was faster for 8 rows of x, 0.33 -> 0.5 of the bandwidth, but slower for one:
 * 7B Q4_0 decode 335 -> 269 tokens/s.) */
#define QMV_SHARED_MAX (96u << 10)
#define QMV_SHARED_MIN (8u * 3584u)

/* The kernels' carveouts and how many blocks of each fit at once (the f32 kernel's, and the
 * tensor-core kernels' of each dtype and type). */
static tc_status prepare(tc_backend *b)
{
    if (b->qwave[0])
        return TC_OK;
    int per_sm = 0;
    TC_TRY(tc_launch_set_carveout(b->ctx, TC_KERNEL_QMATVEC_F32, 0));
    if (tc_launch_blocks_per_sm(b->ctx, TC_KERNEL_QMATVEC_F32, 64, 0, &per_sm) != TC_OK ||
        per_sm < 1)
        per_sm = 1;
    b->qwave[0] = (int64_t)per_sm * b->ctx->sm_count;
    long half = (long)b->ctx->max_shared_sm / 2 - (9l << 10);
    unsigned shared = half > (long)QMV_SHARED_MAX ? QMV_SHARED_MAX : half > 0 ? (unsigned)half : 0;
    shared &= ~255u;
    if (shared < QMV_SHARED_MIN)
        shared = QMV_SHARED_MIN;
    b->qmv_shared = shared;
    /* The two-row kernels take nearly all that two blocks an SM leave (their static 8.1 KiB
     * is a little over the 8 counted): x's two rows of 11,008 digits (55 KB) then leave two
     * stages of Q5_K beside them, as 96 KiB do only for Q4_K's. */
    b->qmv2_shared = half - 1024 > (long)shared ? (unsigned)(half - 1024) & ~255u : shared;
    for (int dt = 0; dt < TC_DTYPE_COUNT; dt++)
        for (int h = 0; h < 2 && qmv[dt].f16; h++) {
            tc_kernel_id id = h ? qmv[dt].id_bf16 : qmv[dt].id_f16;
            TC_TRY(tc_launch_set_carveout(b->ctx, id, 100));
            if (tc_launch_blocks_per_sm(b->ctx, id, 256, shared, &per_sm) != TC_OK || per_sm < 1)
                per_sm = 1;
            b->qwave_mma[dt][h] = (int64_t)per_sm * b->ctx->sm_count;
        }
    for (int dt = 0; dt < TC_DTYPE_COUNT; dt++)
        if (qmv1[dt].bf16 && (!qmv1[dt].hopper || b->ctx->cc_major == 9)) {
            TC_TRY(tc_launch_set_carveout(b->ctx, qmv1[dt].id, 100));
            if (tc_launch_blocks_per_sm(b->ctx, qmv1[dt].id, 256, shared, &per_sm) != TC_OK ||
                per_sm < 1)
                per_sm = 1;
            b->qwave_q8[dt] = (int64_t)per_sm * b->ctx->sm_count;
        }
    for (int dt = 0; dt < TC_DTYPE_COUNT && b->ctx->cc_major == 9; dt++)
        if (qmv2[dt].bf16) {
            TC_TRY(tc_launch_set_carveout(b->ctx, qmv2[dt].id, 100));
            if (tc_launch_blocks_per_sm(b->ctx, qmv2[dt].id, 256, b->qmv2_shared, &per_sm) !=
                    TC_OK ||
                per_sm < 1)
                per_sm = 1;
            b->qwave_q8x2[dt] = (int64_t)per_sm * b->ctx->sm_count;
        }
    for (size_t i = 0; i < N_QMV1_PAIRS; i++) {
        TC_TRY(tc_launch_set_carveout(b->ctx, qmv1_pairs[i].id, 100));
        if (tc_launch_blocks_per_sm(b->ctx, qmv1_pairs[i].id, 256, shared, &per_sm) != TC_OK ||
            per_sm < 1)
            per_sm = 1;
        b->qwave_pair[i] = (int64_t)per_sm * b->ctx->sm_count;
    }
    return TC_OK;
}

/* One row of bf16 x on the integer products when x's two 8-bit digits (2.5 bytes an element
 * with the scales and sums) leave the pipeline room for two steps of the largest type for each
 * warp: k up to 15,600 on the H100. */
bool tc__quant_one_row(const tc_tensor *x, const tc_tensor *w, int64_t rows)
{
    tc_backend *b = x->backend;
    int64_t k = w->shape[1];
    return b->kind == TC_BACKEND_CUDA && tc_dtype_is_block(w->dtype) && x->dtype == TC_DTYPE_BF16 &&
           rows == 1 && qmv1[w->dtype].bf16 && prepare(b) == TC_OK && b->qwave_q8[w->dtype] &&
           2 * k + k / 2 + 2 * QMV_SHARED_MIN <= b->qmv_shared;
}

/* (A stage of 128 weight rows' 256 elements with room for x_rows rows of x: the batched kernels'
 * stage, and with none the tensor-core decode kernels' stage of 8 warps.) */
static size_t batch_stage_bytes(tc_dtype dt, int64_t x_rows);

/* Whether block type dt has a two-row integer kernel on b for x of x_dtype. */
static bool two_row_kernel(tc_backend *b, tc_dtype dt, tc_dtype x_dtype)
{
    return b->kind == TC_BACKEND_CUDA && x_dtype == TC_DTYPE_BF16 && qmv2[dt].bf16 &&
           prepare(b) == TC_OK && b->qwave_q8x2[dt];
}

bool tc__quant_int_rows(const tc_tensor *x, const tc_tensor *w, int64_t rows)
{
    if (rows != 2)
        return tc__quant_one_row(x, w, rows);
    tc_backend *b = x->backend;
    int64_t k = w->shape[1];
    return tc_dtype_is_block(w->dtype) && two_row_kernel(b, w->dtype, x->dtype) &&
           (size_t)(2 * (2 * k + k / 2)) + 2 * batch_stage_bytes(w->dtype, 0) <= b->qmv2_shared;
}

int tc__quant_pair(const tc_tensor *x, const tc_tensor *w_a, const tc_tensor *w_b)
{
    if (!tc__quant_one_row(x, w_a, x->shape[0]) || !tc__quant_one_row(x, w_b, x->shape[0]))
        return -1;
    for (size_t i = 0; i < N_QMV1_PAIRS; i++)
        if (qmv1_pairs[i].a == w_a->dtype && qmv1_pairs[i].b == w_b->dtype)
            return (int)i;
    return -1;
}

tc_status tc__quant_matvec_pair(tc_tensor *out_a, tc_tensor *out_b, const tc_tensor *x,
                                const tc_tensor *w_a, const tc_tensor *w_b, int32_t flags,
                                const tc_tensor *norm, float eps)
{
    int i = tc__quant_pair(x, w_a, w_b);
    if (i < 0 || (flags & ~4))
        return tc_set_error(TC_ERR_UNSUPPORTED, "tc_linear_pair",
                            "no one-launch kernel for these weight types or options");
    tc_backend *b = out_a->backend;
    int64_t n_a = out_a->shape[1], n_b = out_b->shape[1], k = w_a->shape[1];
    int64_t ta = (n_a + 15) / 16, tb = (n_b + 15) / 16, wave = b->qwave_pair[i];
    int64_t grid = ta + tb < wave ? ta + tb : wave;
    /* The blocks split as the two matrices' bytes do, each side at least one block and at most
     * its tiles. */
    double bytes_a = (double)tc_tensor_bytes(w_a), bytes_b = (double)tc_tensor_bytes(w_b);
    int64_t split = (int64_t)((double)grid * bytes_a / (bytes_a + bytes_b) + 0.5);
    if (split > ta)
        split = ta;
    if (grid - split > tb)
        split = grid - tb;
    if (split < 1)
        split = 1;
    if (split > grid - 1)
        split = grid - 1;
    return qmv1_pairs[i].fn(tc__cfg(b, (unsigned)grid, 256, b->qmv_shared), TC__DEV(tc_bf16, out_a),
                            TC__DEV(tc_bf16, out_b), TC__DEV(const tc_bf16, x), w_a->data,
                            w_b->data, n_a, n_b, k, flags,
                            norm ? TC__DEV(const tc_bf16, norm) : NULL, eps, (int32_t)split);
}

tc_status tc__quant_matvec(tc_tensor *out, const tc_tensor *x, const tc_tensor *w, int64_t r0,
                           int64_t rows, int32_t flags, const tc_tensor *norm, float eps)
{
    tc_backend *b = out->backend;
    TC_TRY(prepare(b));
    int64_t n = out->shape[1], k = w->shape[1], xo = r0 * x->stride[0], oo = r0 * out->stride[0];
    size_t es = tc_dtype_bytes(x->dtype, 1);
    if (((uintptr_t)x->data + (size_t)xo * es) % 16 || ((size_t)x->stride[0] * es) % 16)
        return tc_set_error(TC_ERR_UNSUPPORTED, "tc_matmul",
                            "quantised weights take 16-byte aligned rows of x");
    if (x->dtype == TC_DTYPE_F32) {
        /* A warp per output row, two per block. */
        int64_t blocks = (n + 1) / 2, cap = b->qwave[0];
        tc_launch_config cfg = tc__cfg(b, (unsigned)(blocks < cap ? blocks : cap), 64, 0);
        return tc_launch_qmatvec_f32(cfg, TC__DEV(float, out) + oo, TC__DEV(const float, x) + xo,
                                     w->data, (int32_t)w->dtype, (int32_t)rows, n, k, x->stride[0],
                                     out->stride[0], flags);
    }
    bool f16 = x->dtype == TC_DTYPE_F16;
    int64_t tiles = (n + 15) / 16, wave = b->qwave_mma[w->dtype][f16 ? 0 : 1];
    void *o = (char *)out->data + (size_t)oo * tc_dtype_bytes(out->dtype, 1);
    if (tc__quant_int_rows(x, w, rows)) {
        const tc_bf16 *xb = TC__DEV(const tc_bf16, x) + xo,
                      *nb = norm ? TC__DEV(const tc_bf16, norm) : NULL;
        int64_t wave1 = rows == 2 ? b->qwave_q8x2[w->dtype] : b->qwave_q8[w->dtype];
        tc_launch_config cfg = tc__cfg(b, (unsigned)(tiles < wave1 ? tiles : wave1), 256,
                                       rows == 2 ? b->qmv2_shared : b->qmv_shared);
        return rows == 2
                   ? qmv2[w->dtype].bf16(cfg, o, xb, w->data, n, k, x->stride[0], out->stride[0],
                                         flags, nb, eps)
                   : qmv1[w->dtype].bf16(cfg, o, xb, w->data, n, k, out->stride[0], flags, nb, eps);
    }
    if (flags & 4)
        return tc_set_error(
            TC_ERR_UNSUPPORTED, "tc_matmul",
            "a fused RMSNorm takes one row of bf16 x (two over K-quants on Hopper)");
    tc_launch_config cfg = tc__cfg(b, (unsigned)(tiles < wave ? tiles : wave), 256, b->qmv_shared);
    return f16 ? qmv[w->dtype].f16(cfg, o, TC__DEV(const tc_half, x) + xo, w->data, (int32_t)rows,
                                   n, k, x->stride[0], out->stride[0], flags)
               : qmv[w->dtype].bf16(cfg, o, TC__DEV(const tc_bf16, x) + xo, w->data, (int32_t)rows,
                                    n, k, x->stride[0], out->stride[0], flags);
}

/* The batched products' kernels (tc_k_qmm_*), f16 and bf16 x. */
typedef tc_status (*qmm_f16_fn)(tc_launch_config, void *, int32_t, const tc_half *, const void *,
                                int32_t, int64_t, int64_t, int64_t, int64_t, float *, int32_t *);
typedef tc_status (*qmm_bf16_fn)(tc_launch_config, void *, int32_t, const tc_bf16 *, const void *,
                                 int32_t, int64_t, int64_t, int64_t, int64_t, float *, int32_t *);
#define QMM(T, t, block, nf, ...)                  \
    [TC_DTYPE_##T] = { tc_launch_qmm_##t##_f16,    \
                       tc_launch_qmm_##t##_bf16,   \
                       tc_launch_qmm32_##t##_f16,  \
                       tc_launch_qmm32_##t##_bf16, \
                       TC_KERNEL_QMM_##T##_F16,    \
                       TC_KERNEL_QMM_##T##_BF16,   \
                       TC_KERNEL_QMM32_##T##_F16,  \
                       TC_KERNEL_QMM32_##T##_BF16, \
                       block,                      \
                       nf,                         \
                       { __VA_ARGS__ } }
/* The kernels of up to 64 rows and of up to 32 (room for fewer rows of x), with each type's plane
 * fields (kernels/quant.cu's layout(): elements a block, the fields' bytes a block), which size
 * the kernels' stages. */
static const struct {
    qmm_f16_fn f16;
    qmm_bf16_fn bf16;
    qmm_f16_fn f16_32;
    qmm_bf16_fn bf16_32;
    tc_kernel_id id_f16, id_bf16, id_f16_32, id_bf16_32;
    int block, nf, size[4];
} qmm[TC_DTYPE_COUNT] = {
    QMM(Q4_0, q4_0, 32, 2, 16, 2),          QMM(Q4_1, q4_1, 32, 2, 16, 4),
    QMM(Q5_0, q5_0, 32, 3, 16, 4, 2),       QMM(Q5_1, q5_1, 32, 3, 16, 4, 4),
    QMM(Q8_0, q8_0, 32, 2, 32, 2),          QMM(Q2_K, q2_k, 256, 3, 64, 16, 4),
    QMM(Q3_K, q3_k, 256, 4, 64, 32, 12, 2), QMM(Q4_K, q4_k, 256, 2, 128, 16),
    QMM(Q5_K, q5_k, 256, 3, 128, 32, 16),   QMM(Q6_K, q6_k, 256, 4, 128, 64, 16, 2),
    QMM(Q4_1_G64, q4_1_g64, 64, 2, 32, 4),  QMM(Q4_1_G128, q4_1_g128, 128, 2, 64, 4)
};
#undef QMM

/* Shared memory one stage of a batched product takes (kernels/quant.cu's mma_batch): 128
 * weight rows of 256 elements, each field's bytes in the 16-byte units that cover them from
 * an aligned start, and the kernel's rows of x (32 or 64) of 256 elements, in whole KiB (the
 * Hopper kernels' x lies in 1024-byte-aligned atoms; BATCH_ALIGN more aligns the first).
 * Q6_K's kernels of 64 rows keep its scales and d (its last two fields) out of the stage: 56
 * KiB, where two blocks an SM fit on Hopper, instead of 60. */
#define BATCH_ALIGN 1024u
static size_t batch_stage_bytes(tc_dtype dt, int64_t x_rows)
{
    int s = 256 / qmm[dt].block, units = 0,
        nf = dt == TC_DTYPE_Q6_K && x_rows > 32 ? 2 : qmm[dt].nf;
    for (int f = 0; f < nf; f++) {
        int size = qmm[dt].size[f], a = size % 16 == 0  ? 16
                                        : size % 8 == 0 ? 8
                                        : size % 4 == 0 ? 4
                                        : size % 2 == 0 ? 2
                                                        : 1;
        units += (16 - a + s * size + 15) / 16;
    }
    size_t bytes = (size_t)128 * 16 * (size_t)units + (size_t)x_rows * 512;
    return (bytes + BATCH_ALIGN - 1) / BATCH_ALIGN * BATCH_ALIGN;
}

/* The shares of k for a product of `tiles` tiles of 128 rows and `steps` steps of 256: the
 * fewest that fill whole waves of `wave` blocks (at least 85% of the last), or the best
 * filling, each share at least four stages long (shorter ones spend more on filling the
 * pipeline and adding the shares than they gain) and at most 16 shares: a 4096-row product is
 * 32 tiles, which alone would leave three quarters of an H100 idle. */
static int64_t batch_shares(int64_t tiles, int64_t steps, int64_t wave)
{
    int64_t most = steps / 4 < 1 ? 1 : steps / 4 > 16 ? 16 : steps / 4, shares = 1;
    double best = 0.0;
    for (int64_t s = 1; s <= most; s++) {
        int64_t blocks = tiles * s, waves = (blocks + wave - 1) / wave;
        double use = (double)blocks / (double)(waves * wave);
        if (use > best + 1e-9) {
            best = use;
            shares = s;
        }
        if (use >= 0.85)
            break;
    }
    return shares;
}

tc__qmm_split tc__quant_batch_split(tc_dtype dt, int64_t tiles, int64_t steps, int64_t wave,
                                    bool two, int (*fits)(int64_t blocks, void *ctx), void *ctx)
{
    const int64_t shares = batch_shares(tiles, steps, wave);
    tc__qmm_split sp = { shares, 1 };
    if (!fits)
        return sp;
    /* A tile's shares as one cluster, which add their sums in each other's shared memory
     * instead of through ws and a count in global memory, where its clusters take no more
     * waves than its blocks would alone (a cluster's blocks must fit on one GPC together).
     * Where they do not fit, fewer shares whose clusters do are taken (one block an SM), if
     * their waves of steps come to at most two steps more and the type is one of the 4- and
     * 5-bit types that take x in its own order: there adding through ws costs about three steps
     * (H200, bench_ops quant TYPE 64, 4096 x 4096, whose 32 clusters of 4 find 30 places, as 3
     * shares in clusters of 3: Q4_K 15.1 -> 13.7 us, Q5_K 16.8 -> 16.1, q4_1_g128 14.3 ->
     * 13.4, Q4_0 15.6 -> 15.4; 7B Q4_K_M at 64 sequences 6,580-6,732 -> 6,660-6,821 tokens/s,
     * Llama-3.2-1B 33,126-33,339 -> 35,017-35,325). Measured and left out: the other types
     * (Q8_0 19.2 -> 20.4, Q5_0 18.8 -> 19.7, Q6_K, Q3_K and Q2_K no faster), four more steps
     * (Q4_K 4096 x 11008 as 3 shares, 26.0 -> 28.4), two waves (Q6_K 11008 x 4096 as 2 shares,
     * 38.4 -> 45.4), two blocks an SM (Q4_K 11008 x 4096 as 2 shares, 26.1 -> 27.4). */
    const int64_t waves = (tiles * shares + wave - 1) / wave,
                  cost = waves * ((steps + shares - 1) / shares);
    const bool cheap = dt == TC_DTYPE_Q4_K || dt == TC_DTYPE_Q5_K || dt == TC_DTYPE_Q4_0 ||
                       dt == TC_DTYPE_Q4_1 || dt == TC_DTYPE_Q4_1_G64 || dt == TC_DTYPE_Q4_1_G128;
    for (int64_t s = shares; s > 1; s--) {
        if (s < shares && (two || !cheap || (steps + s - 1) / s > cost + 2))
            break;
        if (s > 8)
            continue;
        const int f = fits(s, ctx);
        if (f <= 0)
            continue;
        const int64_t cwaves = (tiles + f - 1) / f;
        if (s == shares ? cwaves <= waves : cwaves * ((steps + s - 1) / s) <= cost + 2) {
            sp.shares = sp.cluster = s;
            break;
        }
    }
    return sp;
}

int tc__quant_batch_from(tc_backend *b, tc_dtype dt, tc_dtype x_dtype)
{
    switch (dt) {
    case TC_DTYPE_Q2_K:
    case TC_DTYPE_Q3_K:
    case TC_DTYPE_Q4_K:
    case TC_DTYPE_Q5_K:
    case TC_DTYPE_Q6_K: return two_row_kernel(b, dt, x_dtype) ? 3 : 2;
    default: return TC_MATVEC_MAX_ROWS + 1;
    }
}

bool tc__quant_batch_fits(const tc_tensor *x, const tc_tensor *w)
{
    int64_t m = x->shape[0];
    return x->backend->kind == TC_BACKEND_CUDA && tc_dtype_is_block(w->dtype) &&
           qmm[w->dtype].f16 && m >= tc__quant_batch_from(x->backend, w->dtype, x->dtype) &&
           m <= TC__QUANT_BATCH_ROWS && (x->dtype == TC_DTYPE_F16 || x->dtype == TC_DTYPE_BF16) &&
           2 * batch_stage_bytes(w->dtype, m <= 32 ? 32 : 64) + BATCH_ALIGN <=
               tc__backend_shared_room(x->backend);
}

/* tc__quant_batch_split's question to the device, cached per kernel, size of x, blocks an SM
 * and cluster size: how many clusters of `blocks` blocks of cfg's launch can be resident at
 * once (-1: none, or the query failed). The stream's cluster is set for the query and set back;
 * failed holds an error from doing so. */
typedef struct {
    tc_backend *b;
    const tc_launch_config *cfg;
    int *known; /* [blocks - 2] */
    tc_kernel_id id;
    tc_dim3 before;
    tc_status failed;
} cluster_query;
static int cluster_fits(int64_t blocks, void *ctx)
{
    cluster_query *q = ctx;
    int *known = &q->known[blocks - 2];
    if (!*known && !q->failed) {
        tc_launch_config cfg = *q->cfg;
        cfg.grid.y = (uint32_t)blocks;
        int n = 0;
        q->failed = tc_stream_set_cluster(q->b->stream, (tc_dim3){ 1, (uint32_t)blocks, 1 });
        if (q->failed)
            return -1;
        *known = tc_launch_max_clusters(q->id, &cfg, &n) == TC_OK && n > 0 ? n : -1;
        tc_clear_error();
        q->failed = tc_stream_set_cluster(q->b->stream, q->before);
    }
    return q->failed ? -1 : *known;
}

/* A batched launch's plan (tc__quant_batch, tc__quant_batch_pair): its grid, shared memory
 * and shares of k, their workspace and counters, and the stream's cluster set for it (set
 * back by batch_done). */
typedef struct {
    tc_launch_config cfg;
    tc_dim3 before;
    bool clustered;
    CUdeviceptr ws, counters;
} batch_plan;

/* The plan of a launch of kernel id over `tiles` tiles of 128 weight rows and `steps` steps of
 * 256 of k, its stages `stage` bytes, `outs` floats of output (m x n, all products) for each
 * share's sums; dt names the split's type (tc__quant_batch_split). per_sm and clusters cache
 * the device's answers for this kernel and size of x, by blocks an SM. */
static tc_status batch_plan_make(tc_backend *b, tc_kernel_id id, tc_dtype dt, size_t stage,
                                 int64_t tiles, int64_t steps, size_t outs, int per_sm_known[2],
                                 int clusters_known[2][7], batch_plan *p)
{
    size_t room = tc__backend_shared_room(b);
    /* As many stages as fit, up to 4, in one block an SM; two blocks an SM (two stages each,
     * and under 128 registers) where they fit and the products' blocks at one an SM would
     * take more than one wave (H200, bench_ops quant q4_k at 64 rows: 11008 x 4096 32.8 ->
     * 28.4 us, where 4096 x 11008's 128 blocks, which fit in one, lost as 8 shares of two
     * stages, 28.9 -> 31.8). The same up to 32 rows (tc_k_qmm32_*), which had taken two
     * always: 4096 x 11008 at 32 rows q4_k 20.8 -> 19.3 us, q6_k 25.1 -> 22.5, q4_1_g128
     * 19.7 -> 18.8, at 16 q4_k 18.5 -> 17.4, q8_0 4096 x 4096 16.5 -> 13.7; 7B Q4_K_M at 16
     * and 32 sequences 3,549-3,555 -> 3,583-3,588 and 5,062-5,081 -> 5,194-5,195 tokens/s (8:
     * 1,717-1,718 -> 1,713-1,714), AWQ at 16 and 32 3,811-3,824 -> 3,852-3,864 and
     * 5,529-5,559 -> 5,614-5,615. */
    bool two = 2 * (2 * stage + BATCH_ALIGN) <= room &&
               tiles * batch_shares(tiles, steps, b->ctx->sm_count) > b->ctx->sm_count;
    room = room / (two ? 2 : 1) - BATCH_ALIGN;
    size_t stages = room / stage > 4 ? 4 : room / stage;
    unsigned smem = (unsigned)(stages * stage + BATCH_ALIGN);
    /* The carveout and occupancy once for each kernel and size of x (and blocks an SM), not at
     * every product. */
    int per_sm = per_sm_known[two];
    if (!per_sm) {
        TC_TRY(tc_launch_set_carveout(b->ctx, id, 100));
        if (tc_launch_blocks_per_sm(b->ctx, id, 256, smem, &per_sm) != TC_OK || per_sm < 1)
            per_sm = 1;
        per_sm_known[two] = per_sm;
    }
    p->cfg = tc__cfg(b, (unsigned)tiles, 256, smem);
    p->before = tc_stream_cluster(b->stream);
    cluster_query q = { b, &p->cfg, clusters_known[two], id, p->before, TC_OK };
    /* Clusters on compute capability 9.0+. ws stays: a kernel built for an older GPU (run as
     * PTX) adds through it, cluster or not. */
    const tc__qmm_split sp =
        tc__quant_batch_split(dt, tiles, steps, (int64_t)per_sm * b->ctx->sm_count, two,
                              b->ctx->cc_major >= 9 ? cluster_fits : NULL, &q);
    if (q.failed)
        return q.failed;
    p->ws = p->counters = 0;
    if (sp.shares > 1) {
        TC_TRY(tc__backend_workspace(b, (size_t)sp.shares * outs * sizeof(float), &p->ws));
        TC_TRY(tc__backend_counters(b, (size_t)tiles, &p->counters));
    }
    p->cfg.grid.y = (uint32_t)sp.shares;
    p->clustered = sp.cluster > 1;
    if (p->clustered)
        TC_TRY(tc_stream_set_cluster(b->stream, (tc_dim3){ 1, (uint32_t)sp.cluster, 1 }));
    return TC_OK;
}

/* The launch's status, the stream's cluster set back. */
static tc_status batch_done(tc_backend *b, const batch_plan *p, tc_status st)
{
    if (p->clustered)
        tc_stream_set_cluster(b->stream, p->before);
    return st;
}

tc_status tc__quant_batch(tc_tensor *out, const tc_tensor *x, const tc_tensor *w)
{
    const char *op = "tc_matmul";
    tc_backend *b = out->backend;
    if (!tc__quant_batch_fits(x, w))
        return tc_set_error(TC_ERR_UNSUPPORTED, op, "no batched quantised kernel for this product");
    int64_t m = x->shape[0], n = w->shape[0], k = w->shape[1];
    size_t es = tc_dtype_bytes(x->dtype, 1);
    if ((uintptr_t)x->data % 16 || ((size_t)x->stride[0] * es) % 16)
        return tc_set_error(TC_ERR_UNSUPPORTED, op,
                            "quantised weights take 16-byte aligned rows of x");
    bool f16 = x->dtype == TC_DTYPE_F16, f32_out = out->dtype == TC_DTYPE_F32;
    bool narrow = m <= 32;
    tc_kernel_id id = f16 ? (narrow ? qmm[w->dtype].id_f16_32 : qmm[w->dtype].id_f16)
                          : (narrow ? qmm[w->dtype].id_bf16_32 : qmm[w->dtype].id_bf16);
    int xi = f16 ? 0 : 1, mi = (int)((m + 7) / 8 - 1);
    batch_plan p;
    TC_TRY(batch_plan_make(b, id, w->dtype, batch_stage_bytes(w->dtype, narrow ? 32 : 64),
                           (n + 127) / 128, (k + 255) / 256, (size_t)(m * n),
                           b->qmm_per_sm[w->dtype][xi][mi], b->qmm_clusters[w->dtype][xi][mi], &p));
    float *ws = (float *)(uintptr_t)p.ws;
    int32_t *counters = (int32_t *)(uintptr_t)p.counters;
    tc_status st;
    if (f16)
        st = (narrow ? qmm[w->dtype].f16_32 : qmm[w->dtype].f16)(
            p.cfg, out->data, f32_out, TC__DEV(const tc_half, x), w->data, (int32_t)m, n, k,
            x->stride[0], out->stride[0], ws, counters);
    else
        st = (narrow ? qmm[w->dtype].bf16_32 : qmm[w->dtype].bf16)(
            p.cfg, out->data, f32_out, TC__DEV(const tc_bf16, x), w->data, (int32_t)m, n, k,
            x->stride[0], out->stride[0], ws, counters);
    return batch_done(b, &p, st);
}

/* The pair kernels: Q4_K or Q5_K beside Q6_K (0, 1), or -1. */
static int pair_index(tc_dtype a, tc_dtype b)
{
    if (b != TC_DTYPE_Q6_K)
        return -1;
    return a == TC_DTYPE_Q4_K ? 0 : a == TC_DTYPE_Q5_K ? 1 : -1;
}

bool tc__quant_batch_pair_fits(const tc_tensor *x, const tc_tensor *w_a, const tc_tensor *w_b)
{
    int64_t m = x->shape[0];
    return x->backend->kind == TC_BACKEND_CUDA && x->backend->ctx->cc_major == 9 &&
           x->dtype == TC_DTYPE_BF16 && m > 32 && m <= TC__QUANT_BATCH_ROWS &&
           pair_index(w_a->dtype, w_b->dtype) >= 0 && w_a->shape[1] == x->shape[1] &&
           w_b->shape[1] == x->shape[1] && tc__quant_batch_fits(x, w_a) &&
           tc__quant_batch_fits(x, w_b);
}

tc_status tc__quant_batch_pair(tc_tensor *out_a, tc_tensor *out_b, const tc_tensor *x,
                               const tc_tensor *w_a, const tc_tensor *w_b)
{
    const char *op = "tc_matmul (pair)";
    tc_backend *b = out_a->backend;
    if (!tc__quant_batch_pair_fits(x, w_a, w_b) || out_a->dtype != x->dtype ||
        out_b->dtype != x->dtype)
        return tc_set_error(TC_ERR_UNSUPPORTED, op, "no batched pair kernel for these products");
    if ((uintptr_t)x->data % 16 || ((size_t)x->stride[0] * 2) % 16)
        return tc_set_error(TC_ERR_UNSUPPORTED, op,
                            "quantised weights take 16-byte aligned rows of x");
    const int pi = pair_index(w_a->dtype, w_b->dtype), mi = (int)((x->shape[0] + 7) / 8 - 1);
    int64_t m = x->shape[0], na = w_a->shape[0], nb = w_b->shape[0], k = x->shape[1];
    size_t sa = batch_stage_bytes(w_a->dtype, 64), sb = batch_stage_bytes(w_b->dtype, 64);
    batch_plan p;
    TC_TRY(batch_plan_make(
        b, pi ? TC_KERNEL_QMM_PAIR_Q5_K_Q6_K_BF16 : TC_KERNEL_QMM_PAIR_Q4_K_Q6_K_BF16, w_b->dtype,
        sa > sb ? sa : sb, (na + 127) / 128 + (nb + 127) / 128, (k + 255) / 256,
        (size_t)(m * (na + nb)), b->qmm_pair_per_sm[pi][mi], b->qmm_pair_clusters[pi][mi], &p));
    tc_status st = (pi ? tc_launch_qmm_pair_q5_k_q6_k_bf16 : tc_launch_qmm_pair_q4_k_q6_k_bf16)(
        p.cfg, out_a->data, out_b->data, TC__DEV(const tc_bf16, x), w_a->data, w_b->data,
        (int32_t)m, na, nb, k, x->stride[0], out_a->stride[0], out_b->stride[0],
        (float *)(uintptr_t)p.ws, (int32_t *)(uintptr_t)p.counters);
    return batch_done(b, &p, st);
}

size_t tc__quant_gemm_workspace(int64_t k, tc_dtype act)
{
    size_t row = tc_dtype_bytes(act, k), rows = TC__QUANT_TILE_BYTES / (row ? row : 1);
    rows = rows < 16 ? 16 : rows;
    return rows * row;
}

tc_status tc__quant_gemm(tc_tensor *out, const tc_tensor *x, const tc_tensor *w,
                         tc_status (*gemm)(tc_tensor *, const tc_tensor *, const tc_tensor *))
{
    tc_backend *b = out->backend;
    int64_t n = w->shape[0], k = w->shape[1];
    size_t bytes = tc__quant_gemm_workspace(k, x->dtype);
    /* Tiles of equal rows (a multiple of 128 where the workspace allows), not a full one and a
     * sliver. */
    int64_t cap = (int64_t)(bytes / tc_dtype_bytes(x->dtype, k)), count = (n + cap - 1) / cap,
            tile = (n + count - 1) / count, round = (tile + 127) / 128 * 128;
    tile = round <= cap ? round : tile;
    CUdeviceptr ws;
    TC_TRY(tc__backend_workspace(b, bytes, &ws));
    for (int64_t r0 = 0; r0 < n; r0 += tile) {
        int64_t rows = n - r0 < tile ? n - r0 : tile;
        tc_tensor wt, ot;
        tc_status st;
#define LAUNCH(sfx)                                                                               \
    tc_launch_qdequant_##sfx(per_row(b, rows), (T *)(uintptr_t)ws, w->data, (int32_t)w->dtype, n, \
                             k, r0, rows, (const int32_t *)NULL, k)
        TC__BY_DTYPE(st, x->dtype, LAUNCH);
#undef LAUNCH
        TC_TRY(st);
        TC_TRY(tc_tensor_wrap(&wt, b, x->dtype, TC_SHAPE(rows, k), (void *)(uintptr_t)ws));
        TC_TRY(tc_tensor_slice(out, 1, r0, rows, &ot));
        TC_TRY(gemm(&ot, x, &wt));
    }
    return TC_OK;
}

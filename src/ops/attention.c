/* Attention over the paged KV cache (layout in ops.h). The CPU path is the reference: scores,
 * a max-subtracted softmax and the weighted sum of values in f32, a query row and kv head at a
 * time, over the query's sliding window when there is one. A cache holds the activations'
 * dtype or FP8 E4M3 (on CUDA with f16/bf16 activations), with or without per-kv-head scales. */
#include "ops/internal.h"

typedef struct {
    const tc_tensor *k_cache, *v_cache, *q;
    tc_tensor *out;
    const int32_t *table, *seq_lens, *q_start, *row_seq;
    int64_t max_blocks, block_size, n_heads, n_kv_heads, head_dim;
    float scale;
    int64_t window;                 /* 0: none */
    const float *k_scale, *v_scale; /* FP8 caches' scales per kv head, or NULL */
    atomic_bool oom;
} attn_job;

/* Row t of kv head kvh in a sequence's cache (block table tbl): its address, or with a cache
 * of another dtype than f32 the row widened (and multiplied by the head's scale, if any)
 * into tmp. */
static const float *cache_row(const tc_tensor *cache, const int32_t *tbl, int64_t t, int64_t bs,
                              int64_t kvh, const float *scale, float *tmp)
{
    int64_t idx[4] = { tbl[t / bs], t % bs, kvh, 0 };
    const void *row = tc_tensor_at(cache, idx);
    if (cache->dtype == TC_DTYPE_F32)
        return row;
    tc__load_row(cache->dtype, row, cache->shape[3], tmp);
    if (scale)
        for (int64_t i = 0; i < cache->shape[3]; i++)
            tmp[i] *= scale[kvh];
    return tmp;
}

/* Rows [begin, end) of q, a kv head at a time: the query heads that share it read each key and
 * value row once. */
static void attend_rows(void *ctx, int64_t begin, int64_t end)
{
    attn_job *j = ctx;
    int64_t hd = j->head_dim, group = j->n_heads / j->n_kv_heads;
    int64_t max_len = j->max_blocks * j->block_size;
    /* A score row, a query, a sum of values, a max and a total per head of the group, and one
     * widened cache row. */
    float *buf = tc_host_alloc((size_t)(group * (max_len + 2 * hd + 2) + hd) * sizeof(float));
    if (!buf) {
        atomic_store(&j->oom, true);
        return;
    }
    float *p = buf, *qv = p + group * max_len, *acc = qv + group * hd, *mx = acc + group * hd,
          *sum = mx + group, *tmp = sum + group;
    tc_dtype dt = j->q->dtype;
    size_t head_bytes = tc_dtype_bytes(dt, hd);
    for (int64_t row = begin; row < end; row++) {
        int64_t s = j->row_seq[row];
        int64_t m = j->q_start[s + 1] - j->q_start[s];
        int64_t qpos = j->seq_lens[s] - m + (row - j->q_start[s]);
        /* the first position the query sees (earlier blocks may be freed: never read) */
        int64_t t0 = j->window > 0 && qpos - j->window + 1 > 0 ? qpos - j->window + 1 : 0;
        const int32_t *tbl = j->table + s * j->max_blocks;
        for (int64_t kvh = 0; kvh < j->n_kv_heads; kvh++) {
            const char *qrow =
                (const char *)tc__row(j->q, row) + (size_t)(kvh * group) * head_bytes;
            for (int64_t g = 0; g < group; g++) {
                tc__load_row(dt, qrow + (size_t)g * head_bytes, hd, qv + g * hd);
                mx[g] = -INFINITY;
                sum[g] = 0.0f;
            }
            for (int64_t t = t0; t <= qpos; t++) {
                const float *k = cache_row(j->k_cache, tbl, t, j->block_size, kvh, j->k_scale, tmp);
                for (int64_t g = 0; g < group; g++) {
                    float d = tc__dot(qv + g * hd, k, hd) * j->scale;
                    p[g * max_len + t] = d;
                    mx[g] = fmaxf(mx[g], d);
                }
            }
            for (int64_t g = 0; g < group; g++)
                for (int64_t t = t0; t <= qpos; t++)
                    sum[g] += (p[g * max_len + t] = expf(p[g * max_len + t] - mx[g]));
            memset(acc, 0, (size_t)(group * hd) * sizeof(float));
            for (int64_t t = t0; t <= qpos; t++) {
                const float *v = cache_row(j->v_cache, tbl, t, j->block_size, kvh, j->v_scale, tmp);
                for (int64_t g = 0; g < group; g++)
                    tc__axpy(acc + g * hd, p[g * max_len + t], v, hd);
            }
            for (int64_t g = 0; g < group; g++) {
                void *o = (char *)tc__row(j->out, row) + (size_t)(kvh * group + g) * head_bytes;
                for (int64_t i = 0; i < hd; i++)
                    tc__store(dt, o, i, qpos >= 0 ? acc[g * hd + i] / sum[g] : 0.0f);
            }
        }
    }
    tc_host_free(buf);
}

/* Checks shared by decode and prefill; n_seqs from the block table. */
static tc_status check_common(const char *op, const tc_tensor *out, const tc_tensor *q,
                              const tc_tensor *kc, const tc_tensor *vc, const tc_tensor *table,
                              const tc_tensor *lens)
{
    TC_TRY(tc__check_dtype(op, "q", q, TC__FLOATS));
    TC_TRY(tc__check_dtype(op, "out", out, TC__MASK(q->dtype)));
    TC_TRY(tc__check_kv_dtype(op, kc, q));
    TC_TRY(tc__check_dtype(op, "v_cache", vc, TC__MASK(kc->dtype)));
    TC_TRY(tc__check_dtype(op, "block_table", table, TC__MASK(TC_DTYPE_I32)));
    TC_TRY(tc__check_dtype(op, "seq_lens", lens, TC__MASK(TC_DTYPE_I32)));
    TC_TRY(tc__check_ndim(op, "q", q, 3));
    TC_TRY(tc__check_ndim(op, "out", out, 3));
    TC_TRY(tc__check_ndim(op, "k_cache", kc, 4));
    TC_TRY(tc__check_ndim(op, "v_cache", vc, 4));
    TC_TRY(tc__check_ndim(op, "block_table", table, 2));
    TC_TRY(tc__check_ndim(op, "seq_lens", lens, 1));
    for (int d = 0; d < 4; d++)
        TC_TRY(tc__check_dim(op, "v_cache", vc, d, kc->shape[d], "k_cache's shape"));
    for (int d = 0; d < 3; d++)
        TC_TRY(tc__check_dim(op, "out", out, d, q->shape[d], "q's shape"));
    int64_t hd = kc->shape[3], n_kv = kc->shape[2];
    TC_TRY(tc__check_dim(op, "q", q, 2, hd, "the caches' head_dim"));
    if (n_kv == 0 || q->shape[1] % n_kv != 0)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "%lld query heads cannot share %lld kv heads evenly",
                            (long long)q->shape[1], (long long)n_kv);
    TC_TRY(tc__check_dim(op, "seq_lens", lens, 0, table->shape[0], "one per block_table row"));
    const tc_tensor *all[] = { q, kc, vc, table, lens };
    for (int i = 0; i < 5; i++)
        TC_TRY(tc__check_same_backend(op, out, all[i]));
    TC_TRY(tc__check_rows_dense(op, "q", q));
    TC_TRY(tc__check_rows_dense(op, "out", out));
    if (!tc_tensor_is_contiguous(kc) || !tc_tensor_is_contiguous(vc) ||
        !tc_tensor_is_contiguous(table) || !tc_tensor_is_contiguous(lens))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "the caches, block_table and seq_lens must be contiguous");
    return TC_OK;
}

/* On the CPU the host can read the indices: every one is checked before use. */
static tc_status check_indices_cpu(const char *op, const tc_tensor *kc, const tc_tensor *table,
                                   const tc_tensor *lens, const int32_t *q_start, int64_t n_tokens,
                                   int64_t window)
{
    int64_t n_seqs = table->shape[0], max_blocks = table->shape[1], bs = kc->shape[1];
    const int32_t *tbl = table->data, *len = lens->data;
    for (int64_t s = 0; s < n_seqs; s++) {
        int64_t m = q_start[s + 1] - q_start[s];
        if (q_start[s] < 0 || m < 0 || q_start[s + 1] > n_tokens)
            return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                                "sequence %lld's queries [%d, %d) are outside [0, %lld)",
                                (long long)s, q_start[s], q_start[s + 1], (long long)n_tokens);
        if (len[s] < m || len[s] > max_blocks * bs)
            return tc_set_error(
                TC_ERR_INVALID_ARGUMENT, op,
                "seq_lens[%lld] = %d; want %lld (its queries) to %lld (its blocks' capacity)",
                (long long)s, len[s], (long long)m, (long long)(max_blocks * bs));
        /* with a window, the blocks before the first query's window are not read (and may be
         * freed) */
        int64_t first = window > 0 && len[s] - m - window + 1 > 0 ? len[s] - m - window + 1 : 0;
        for (int64_t b = first / bs; b < (len[s] + bs - 1) / bs; b++)
            if (tbl[s * max_blocks + b] < 0 || tbl[s * max_blocks + b] >= kc->shape[0])
                return tc_set_error(
                    TC_ERR_INVALID_ARGUMENT, op,
                    "block_table[%lld, %lld] = %d is not a block of the cache (%lld)", (long long)s,
                    (long long)b, tbl[s * max_blocks + b], (long long)kc->shape[0]);
    }
    if (q_start[n_seqs] != n_tokens)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "the sequences' queries end at %d; q has %lld rows", q_start[n_seqs],
                            (long long)n_tokens);
    return TC_OK;
}

static tc_status attend_cpu(tc_tensor *out, const tc_tensor *q, const tc_tensor *kc,
                            const tc_tensor *vc, const tc_tensor *table, const tc_tensor *lens,
                            const int32_t *q_start, float scale, int64_t window, const float *ks,
                            const float *vs)
{
    int64_t n_tokens = q->shape[0], n_seqs = table->shape[0];
    int32_t *row_seq = tc_host_alloc((size_t)n_tokens * sizeof(int32_t) + 1);
    if (!row_seq)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "attention", "no host memory for %lld rows",
                            (long long)n_tokens);
    for (int64_t s = 0; s < n_seqs; s++)
        for (int64_t r = q_start[s]; r < q_start[s + 1]; r++)
            row_seq[r] = (int32_t)s;
    attn_job j = { .k_cache = kc,
                   .v_cache = vc,
                   .q = q,
                   .out = out,
                   .table = table->data,
                   .seq_lens = lens->data,
                   .q_start = q_start,
                   .row_seq = row_seq,
                   .max_blocks = table->shape[1],
                   .block_size = kc->shape[1],
                   .n_heads = q->shape[1],
                   .n_kv_heads = kc->shape[2],
                   .head_dim = kc->shape[3],
                   .scale = scale,
                   .window = window,
                   .k_scale = ks,
                   .v_scale = vs };
    atomic_init(&j.oom, false);
    tc__parallel_for(out->backend, n_tokens, 1, attend_rows, &j);
    tc_host_free(row_seq);
    if (atomic_load(&j.oom))
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "attention", "no host memory for a score row");
    return TC_OK;
}

tc_status tc__kv_scales(const char *op, const tc_tensor *k_cache, const tc_attention_opts *opts,
                        const float **ks, const float **vs)
{
    *ks = *vs = NULL;
    if (!opts || k_cache->dtype != TC_DTYPE_F8E4M3)
        return TC_OK;
    const tc_tensor *t[2] = { opts->k_scale, opts->v_scale };
    const char *names[2] = { "k_scale", "v_scale" };
    const float **out[2] = { ks, vs };
    for (int i = 0; i < 2; i++) {
        if (!t[i])
            continue;
        TC_TRY(tc__check_dtype(op, names[i], t[i], TC__MASK(TC_DTYPE_F32)));
        TC_TRY(tc__check_ndim(op, names[i], t[i], 1));
        TC_TRY(tc__check_dim(op, names[i], t[i], 0, k_cache->shape[2], "one per kv head"));
        TC_TRY(tc__check_same_backend(op, k_cache, t[i]));
        if (!tc_tensor_is_contiguous(t[i]))
            return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "%s must be contiguous", names[i]);
        *out[i] = t[i]->data;
    }
    return TC_OK;
}

tc_status tc__check_kv_dtype(const char *op, const tc_tensor *k_cache, const tc_tensor *x)
{
    TC_TRY(tc__check_dtype(op, "k_cache", k_cache, TC__MASK(x->dtype) | TC__KV_FP8));
    if (k_cache->dtype == TC_DTYPE_F8E4M3 && x->backend->kind == TC_BACKEND_CUDA &&
        x->dtype == TC_DTYPE_F32)
        return tc_set_error(TC_ERR_UNSUPPORTED, op,
                            "an f8e4m3 KV cache needs f16 or bf16 activations on CUDA, not f32");
    return TC_OK;
}

tc_status tc__check_store(const char *op, const tc_tensor *k_cache, const tc_tensor *v_cache,
                          const tc_tensor *k, const tc_tensor *v, const tc_tensor *slots)
{
    TC_TRY(tc__check_dtype(op, "k", k, TC__FLOATS));
    TC_TRY(tc__check_kv_dtype(op, k_cache, k));
    const tc_tensor *same[] = { v_cache, k, v };
    const char *names[] = { "v_cache", "k", "v" };
    for (int i = 0; i < 3; i++) {
        TC_TRY(
            tc__check_dtype(op, names[i], same[i], TC__MASK(i == 0 ? k_cache->dtype : k->dtype)));
        TC_TRY(tc__check_same_backend(op, k_cache, same[i]));
    }
    TC_TRY(tc__check_dtype(op, "slots", slots, TC__MASK(TC_DTYPE_I32)));
    TC_TRY(tc__check_same_backend(op, k_cache, slots));
    TC_TRY(tc__check_ndim(op, "k_cache", k_cache, 4));
    TC_TRY(tc__check_ndim(op, "v_cache", v_cache, 4));
    TC_TRY(tc__check_ndim(op, "k", k, 3));
    TC_TRY(tc__check_ndim(op, "v", v, 3));
    TC_TRY(tc__check_ndim(op, "slots", slots, 1));
    for (int d = 0; d < 4; d++)
        TC_TRY(tc__check_dim(op, "v_cache", v_cache, d, k_cache->shape[d], "k_cache's shape"));
    for (int i = 1; i < 3; i++) {
        TC_TRY(tc__check_dim(op, names[i], same[i], 0, slots->shape[0], "one row per slot"));
        TC_TRY(tc__check_dim(op, names[i], same[i], 1, k_cache->shape[2], "the caches' kv heads"));
        TC_TRY(tc__check_dim(op, names[i], same[i], 2, k_cache->shape[3], "the caches' head_dim"));
        TC_TRY(tc__check_rows_dense(op, names[i], same[i]));
    }
    if (!tc_tensor_is_contiguous(k_cache) || !tc_tensor_is_contiguous(v_cache) ||
        !tc_tensor_is_contiguous(slots))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "the caches and slots must be contiguous");
    if (slots->backend->kind == TC_BACKEND_CPU) {
        const int32_t *sl = slots->data;
        int64_t capacity = k_cache->shape[0] * k_cache->shape[1];
        for (int64_t i = 0; i < slots->shape[0]; i++)
            if (sl[i] >= capacity)
                return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                                    "slots[%lld] = %d; the cache holds %lld", (long long)i, sl[i],
                                    (long long)capacity);
    }
    return TC_OK;
}

void tc__attention_store_cpu(tc_tensor *k_cache, tc_tensor *v_cache, const tc_tensor *k,
                             const tc_tensor *v, const tc_tensor *slots, const float *ks,
                             const float *vs)
{
    int64_t hd = k_cache->shape[3];
    int64_t row = k_cache->shape[2] * k_cache->shape[3];
    const int32_t *sl = slots->data;
    size_t eb = tc_dtype_bytes(k->dtype, 1), cb = tc_dtype_bytes(k_cache->dtype, 1);
    for (int64_t i = 0; i < k->shape[0]; i++) {
        if (sl[i] < 0)
            continue;
        char *kd = (char *)k_cache->data + (size_t)(sl[i] * row) * cb,
             *vd = (char *)v_cache->data + (size_t)(sl[i] * row) * cb;
        if (k_cache->dtype == k->dtype) {
            memcpy(kd, tc__row(k, i), (size_t)row * eb);
            memcpy(vd, tc__row(v, i), (size_t)row * eb);
            continue;
        }
        /* value times the scale's reciprocal (as the kernels: exactly value / scale for a power
         * of two), then rounded (FP8: saturating) */
        for (int64_t e = 0; e < row; e++) {
            float a = tc__load(k->dtype, tc__row(k, i), e),
                  b = tc__load(v->dtype, tc__row(v, i), e);
            tc__store(k_cache->dtype, kd, e, ks ? a * (1.0f / ks[e / hd]) : a);
            tc__store(v_cache->dtype, vd, e, vs ? b * (1.0f / vs[e / hd]) : b);
        }
    }
}

tc_status tc_attention_store(tc_tensor *k_cache, tc_tensor *v_cache, const tc_tensor *k,
                             const tc_tensor *v, const tc_tensor *slots)
{
    return tc_attention_store_ex(k_cache, v_cache, k, v, slots, NULL);
}

tc_status tc_attention_store_ex(tc_tensor *k_cache, tc_tensor *v_cache, const tc_tensor *k,
                                const tc_tensor *v, const tc_tensor *slots,
                                const tc_attention_opts *opts)
{
    const char *op = "tc_attention_store";
    const float *ks, *vs;
    TC_TRY(tc__check_store(op, k_cache, v_cache, k, v, slots));
    TC_TRY(tc__kv_scales(op, k_cache, opts, &ks, &vs));
    int64_t n = k->shape[0];
    if (n == 0)
        return TC_OK;
    int64_t row = k_cache->shape[2] * k_cache->shape[3];
    tc_backend *b = k_cache->backend;
    if (b->kind == TC_BACKEND_CPU) {
        tc__attention_store_cpu(k_cache, v_cache, k, v, slots, ks, vs);
        return TC_OK;
    }
    /* 256 threads, each moving a 16-byte vector of k and one of v where aligned. */
    int64_t per_block = 256 * (16 / (int64_t)tc_dtype_bytes(k->dtype, 1));
    tc_launch_config cfg = tc__cfg(b, (unsigned)n, 256, 0);
    cfg.grid.y = (uint32_t)((row + per_block - 1) / per_block);
    tc_status st;
    if (k_cache->dtype == TC_DTYPE_F8E4M3) {
#define LAUNCH8(sfx, T)                                                                        \
    tc_launch_attn_store_##sfx##_f8(cfg, TC__DEV(uint8_t, k_cache), TC__DEV(uint8_t, v_cache), \
                                    TC__DEV(const T, k), TC__DEV(const T, v),                  \
                                    TC__DEV(const int32_t, slots), row, k->stride[0],          \
                                    v->stride[0], ks, vs, (int32_t)k_cache->shape[3])
        return k->dtype == TC_DTYPE_F16 ? LAUNCH8(f16, tc_half) : LAUNCH8(bf16, tc_bf16);
#undef LAUNCH8
    }
#define LAUNCH(sfx)                                                                                \
    tc_launch_attn_store_##sfx(cfg, TC__DEV(T, k_cache), TC__DEV(T, v_cache), TC__DEV(const T, k), \
                               TC__DEV(const T, v), TC__DEV(const int32_t, slots), row,            \
                               k->stride[0], v->stride[0])
    TC__BY_DTYPE(st, k->dtype, LAUNCH);
#undef LAUNCH
    return st;
}

/* The CUDA kernels read 16-bit queries in pairs of elements (tensor-core fragments). */
static tc_status check_q_pairs(const char *op, const tc_tensor *q)
{
    if (tc_dtype_bytes(q->dtype, 1) == 2 &&
        (((uintptr_t)q->data | (uintptr_t)(q->stride[0] * 2)) & 3))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "q's rows must start on 4-byte boundaries on CUDA");
    return TC_OK;
}

/* The options shared by decode and prefill: the window and the FP8 scales. */
static tc_status check_opts(const char *op, const tc_tensor *k_cache, const tc_attention_opts *opts,
                            int32_t *window, const float **ks, const float **vs)
{
    *window = opts ? opts->window : 0;
    if (*window < 0)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "window is %d; want 0 (none) or more",
                            (int)*window);
    return tc__kv_scales(op, k_cache, opts, ks, vs);
}

/* Whether head_dim hd has a kernel of its own for these activations and cache: 64 and 128
 * always; 80, 96, 112 and 256 under bf16 activations over a bf16 cache (H100, bench_ops
 * attention: the generic kernel streamed a 4,096-token cache at 48-55% of 3.0 TB/s where
 * 128's own does 94%, and prefilled at 39-64 TFLOP/s where 128's does 157). */
static bool own_kernel(int64_t hd, tc_dtype act, bool fp8)
{
    if (hd == 64 || hd == 128)
        return true;
    return act == TC_DTYPE_BF16 && !fp8 && (hd == 80 || hd == 96 || hd == 112 || hd == 256);
}

/* head_dim on CUDA: 64 and 128 have kernels of their own (and 80, 96, 112, 256: own_kernel);
 * any other even size from 16 to 256 runs on the generic kernels (head_dim read at run time,
 * products over it rounded up to 16; one for a bf16 or an FP8 cache under bf16 activations, and the
 * f32 one), which the binary's size limits to those: f16 activations take 64 and 128 only. */
static tc_status check_head_dim(const char *op, int64_t hd, tc_dtype act)
{
    if (hd < 16 || hd > 256 || hd % 2)
        return tc_set_error(TC_ERR_UNSUPPORTED, op,
                            "head_dim %lld has no CUDA kernel (even sizes from 16 to 256 do)",
                            (long long)hd);
    if (act == TC_DTYPE_F16 && hd != 64 && hd != 128)
        return tc_set_error(TC_ERR_UNSUPPORTED, op,
                            "head_dim %lld runs on CUDA with bf16 or f32 activations (f16: 64 and "
                            "128)",
                            (long long)hd);
    return TC_OK;
}

/* Dynamic shared memory a kernel asks for, against what a block may have. */
static tc_status check_room(const char *op, tc_backend *b, size_t shared, int64_t hd)
{
    size_t room = tc__backend_shared_room(b);
    if (shared > room)
        return tc_set_error(TC_ERR_UNSUPPORTED, op,
                            "head_dim %lld needs %zu bytes of shared memory a block; the GPU "
                            "allows %zu",
                            (long long)hd, shared, room);
    return TC_OK;
}

/* The generic f32 kernel (any head_dim): prefill, or with q_start NULL a decode (row s is
 * sequence s's query). Blocks of 8 query rows (16 threads each); shared floats for the query
 * tile, a tile of 32 keys and values (padded rows) and 8 x 33 probabilities. */
static tc_status simt_f32(const char *op, tc_tensor *out, const tc_tensor *q,
                          const tc_tensor *k_cache, const tc_tensor *v_cache,
                          const tc_tensor *block_table, const tc_tensor *seq_lens,
                          const tc_tensor *q_start, float scale, int32_t window)
{
    tc_backend *b = out->backend;
    int64_t hd = q->shape[2], n_tokens = q->shape[0], n_seqs = block_table->shape[0];
    size_t shared = (size_t)(4 * (72 * (hd + 1) + 8 * 33));
    TC_TRY(check_room(op, b, shared, hd));
    tc_launch_config cfg = { { (uint32_t)(q_start ? n_tokens / 8 + n_seqs : n_seqs),
                               (uint32_t)q->shape[1], 1 },
                             { 128, 1, 1 },
                             (unsigned)shared,
                             b->stream };
    return tc_launch_attn_prefill_f32(
        cfg, TC__DEV(float, out), TC__DEV(const float, q), TC__DEV(const float, k_cache),
        TC__DEV(const float, v_cache), TC__DEV(const int32_t, block_table),
        TC__DEV(const int32_t, seq_lens), q_start ? TC__DEV(const int32_t, q_start) : NULL,
        (int32_t)n_seqs, (int32_t)q->shape[1], (int32_t)k_cache->shape[2],
        (int32_t)k_cache->shape[1], (int32_t)block_table->shape[1], q->stride[0], out->stride[0],
        scale, window, (int32_t)hd);
}

tc_status tc_attention_decode(tc_tensor *out, const tc_tensor *q, const tc_tensor *k_cache,
                              const tc_tensor *v_cache, const tc_tensor *block_table,
                              const tc_tensor *seq_lens, float scale)
{
    return tc_attention_decode_ex(out, q, k_cache, v_cache, block_table, seq_lens, scale, NULL);
}

tc_status tc_attention_decode_ex(tc_tensor *out, const tc_tensor *q, const tc_tensor *k_cache,
                                 const tc_tensor *v_cache, const tc_tensor *block_table,
                                 const tc_tensor *seq_lens, float scale,
                                 const tc_attention_opts *opts)
{
    const char *op = "tc_attention_decode";
    int32_t fresh = opts ? opts->fresh_rows : -1, window;
    const float *ks, *vs;
    if (fresh < -1)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "fresh_rows is %d; want -1 or more",
                            (int)fresh);
    TC_TRY(check_common(op, out, q, k_cache, v_cache, block_table, seq_lens));
    TC_TRY(check_opts(op, k_cache, opts, &window, &ks, &vs));
    int64_t n_seqs = q->shape[0], n_heads = q->shape[1], hd = q->shape[2], n_kv = k_cache->shape[2];
    TC_TRY(tc__check_dim(op, "block_table", block_table, 0, n_seqs, "one row per query"));
    if (n_seqs == 0)
        return TC_OK;
    tc_backend *b = out->backend;
    if (b->kind == TC_BACKEND_CPU) {
        int32_t *q_start = tc_host_alloc((size_t)(n_seqs + 1) * sizeof(int32_t));
        if (!q_start)
            return tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no host memory");
        for (int64_t s = 0; s <= n_seqs; s++)
            q_start[s] = (int32_t)s;
        tc_status st =
            check_indices_cpu(op, k_cache, block_table, seq_lens, q_start, n_seqs, window);
        if (st == TC_OK)
            st = attend_cpu(out, q, k_cache, v_cache, block_table, seq_lens, q_start, scale, window,
                            ks, vs);
        tc_host_free(q_start);
        return st;
    }
    TC_TRY(check_head_dim(op, hd, q->dtype));
    TC_TRY(check_q_pairs(op, q));
    if (q->dtype == TC_DTYPE_F32)
        return simt_f32(op, out, q, k_cache, v_cache, block_table, seq_lens, NULL, scale, window);
    /* The kernel (kernels/attention_decode.cu): 4 warps, each with a ring of 16-token stages of
     * keys and values (3 stages; fewer where shared memory is smaller). The generic kernels' rows
     * hold head_dim rounded up to 16 (their products' width); over an FP8 cache each warp
     * widens a tile's keys, then its values, into 16-bit rows of its own. */
    size_t ec = tc_dtype_bytes(k_cache->dtype, 1);
    bool fp8 = k_cache->dtype == TC_DTYPE_F8E4M3, own = own_kernel(hd, q->dtype, fp8);
    int64_t hp = own ? hd : (hd + 15) / 16 * 16;
    /* (An FP8 cache's stages hold bytes.) */
    size_t per_stage = (size_t)4 * 2 * 16 * (size_t)(hp + 16 / (int64_t)ec) * ec,
           extra = !own && fp8 ? (size_t)4 * 16 * (size_t)(hp + 8) * 2 : 0,
           room = tc__backend_shared_room(b);
    int stages = 3;
    while (stages > 1 && stages * per_stage + extra > room)
        stages--;
    size_t shared = stages * per_stage + extra;
    TC_TRY(check_room(op, b, shared, hd));
    /* (f16 activations: 64 and 128 only, see check_head_dim) */
    static const tc_kernel_id ids[2][2][3] = {
        { { TC_KERNEL_ATTN_DECODE64_F16, TC_KERNEL_ATTN_DECODE128_F16, TC_KERNEL_ATTN_DECODE_BF16 },
          { TC_KERNEL_ATTN_DECODE64_BF16, TC_KERNEL_ATTN_DECODE128_BF16,
            TC_KERNEL_ATTN_DECODE_BF16 } },
        { { TC_KERNEL_ATTN_DECODE64_F16_F8, TC_KERNEL_ATTN_DECODE128_F16_F8,
            TC_KERNEL_ATTN_DECODE_BF16 },
          { TC_KERNEL_ATTN_DECODE64_BF16_F8, TC_KERNEL_ATTN_DECODE128_BF16_F8,
            TC_KERNEL_ATTN_DECODE_BF16 } }
    };
    tc_kernel_id id = ids[fp8][q->dtype == TC_DTYPE_BF16][hd == 64 ? 0 : hd == 128 ? 1 : 2];
    if (own && hd != 64 && hd != 128)
        id = hd == 80    ? TC_KERNEL_ATTN_DECODE80_BF16
             : hd == 96  ? TC_KERNEL_ATTN_DECODE96_BF16
             : hd == 112 ? TC_KERNEL_ATTN_DECODE112_BF16
                         : TC_KERNEL_ATTN_DECODE256_BF16;
    /* Split each sequence's cache (flash-decoding) so that every SM gets one block, or, where
     * that leaves each warp more than 4 tiles of 16 tokens to stream, so that the blocks fill
     * the GPU's resident slots once (a partial second wave would leave most SMs idle at the
     * end). Measured on the H100 at batch 1 over 4,096 tokens: with 8 KV heads one block per SM
     * (4 tiles a warp) reads at 53% of the bandwidth against 47% with two (2 tiles a warp, and
     * twice the splits to merge); with 32 KV heads two blocks per SM (8 tiles a warp) 87%
     * against 71% with one; with 32 KV heads and 544 tokens (H200, 7B Q4_K_M decode) two
     * blocks per SM made 434.7-439.5 tokens/s against 428.7-430.7 with one, so 32 head blocks
     * a sequence and more take two (where two fit) at any length. Splits are multiples of 16
     * tokens (a tile; with 64, the 544 tokens' 8 splits were 5) and at most 256 (bounding the
     * partials). The chunk is sized for the table's width (a captured graph serves any length
     * up to it), or with a window for the window and a tile; the kernel shrinks it for a
     * shorter sequence so that all splits share its cache. */
    int64_t group = n_heads / n_kv, chunks = (group + 7) / 8;
    int64_t capacity = block_table->shape[1] * k_cache->shape[1];
    if (window > 0 && window + 16 < capacity)
        capacity = window + 16;
    int64_t base_blocks = n_seqs * n_kv * chunks;
    int resident = 0;
    if (tc_launch_blocks_per_sm(b->ctx, id, 128, shared, &resident) != TC_OK || resident < 1)
        resident = 1;
    int64_t want = b->ctx->sm_count / base_blocks;
    if (want < 1 || (capacity + want - 1) / want > 4 * 64)
        want = (int64_t)resident * b->ctx->sm_count / base_blocks;
    else if (n_kv * chunks >= 32)
        want = (int64_t)(resident < 2 ? resident : 2) * b->ctx->sm_count / base_blocks;
    int64_t max_splits = (capacity + 15) / 16;
    int64_t splits = want < max_splits ? want : max_splits;
    if (splits > 256)
        splits = 256;
    if (splits < 1)
        splits = 1;
    int64_t chunk = ((capacity + splits - 1) / splits + 15) / 16 * 16;
    if (chunk < 16)
        chunk = 16; /* an empty block table: one split, nothing to read */
    splits = (capacity + chunk - 1) / chunk;
    if (splits < 1)
        splits = 1;
    /* A split's partial record: (max, sum, -, -) and head_dim sums (rounded up to 4: float4). */
    int64_t rec = (hd + 3) / 4 * 4 + 4;
    CUdeviceptr part = 0, counters = 0;
    if (splits > 1) {
        TC_TRY(tc__backend_workspace(b, (size_t)(n_seqs * n_heads * splits * rec) * sizeof(float),
                                     &part));
        TC_TRY(tc__backend_counters(b, (size_t)(n_seqs * n_kv * chunks), &counters));
    }
    tc_launch_config cfg = { { (uint32_t)n_seqs, (uint32_t)(n_kv * chunks), (uint32_t)splits },
                             { 128, 1, 1 },
                             (unsigned)shared,
                             b->stream };
    tc_status st;
    /* (CALL expands the arguments before the launcher's macro counts them.) */
#define CALL(fn, ...) fn(__VA_ARGS__)
#define ARGS(T, C)                                                                               \
    cfg, TC__DEV(T, out), (float *)(uintptr_t)part, (int32_t *)(uintptr_t)counters,              \
        TC__DEV(const T, q), TC__DEV(const C, k_cache), TC__DEV(const C, v_cache),               \
        TC__DEV(const int32_t, block_table), TC__DEV(const int32_t, seq_lens), (int32_t)n_heads, \
        (int32_t)n_kv, (int32_t)k_cache->shape[1], (int32_t)block_table->shape[1], q->stride[0], \
        out->stride[0], (int32_t)chunk, scale, stages, fresh, window
    if (!own) /* the generic kernel: bf16 activations, a bf16 or FP8 cache */
        return CALL(tc_launch_attn_decode_bf16, ARGS(tc_bf16, uint8_t), ks, vs, (int32_t)fp8,
                    (int32_t)hd);
    if (fp8) {
#define LAUNCH8(sfx, T)                                                            \
    (hd == 64 ? CALL(tc_launch_attn_decode64_##sfx##_f8, ARGS(T, uint8_t), ks, vs) \
              : CALL(tc_launch_attn_decode128_##sfx##_f8, ARGS(T, uint8_t), ks, vs))
        return q->dtype == TC_DTYPE_F16 ? LAUNCH8(f16, tc_half) : LAUNCH8(bf16, tc_bf16);
#undef LAUNCH8
    }
    switch (hd) { /* bf16 only (own_kernel) */
    case 80: return CALL(tc_launch_attn_decode80_bf16, ARGS(tc_bf16, tc_bf16));
    case 96: return CALL(tc_launch_attn_decode96_bf16, ARGS(tc_bf16, tc_bf16));
    case 112: return CALL(tc_launch_attn_decode112_bf16, ARGS(tc_bf16, tc_bf16));
    case 256: return CALL(tc_launch_attn_decode256_bf16, ARGS(tc_bf16, tc_bf16));
    default: break;
    }
#define LAUNCH16(sfx, T)                                        \
    (hd == 64 ? CALL(tc_launch_attn_decode64_##sfx, ARGS(T, T)) \
              : CALL(tc_launch_attn_decode128_##sfx, ARGS(T, T)))
    st = q->dtype == TC_DTYPE_F16 ? LAUNCH16(f16, tc_half) : LAUNCH16(bf16, tc_bf16);
#undef LAUNCH16
#undef ARGS
#undef CALL
    return st;
}

tc_status tc_attention_prefill(tc_tensor *out, const tc_tensor *q, const tc_tensor *k_cache,
                               const tc_tensor *v_cache, const tc_tensor *block_table,
                               const tc_tensor *seq_lens, const tc_tensor *q_start, float scale)
{
    return tc_attention_prefill_ex(out, q, k_cache, v_cache, block_table, seq_lens, q_start, scale,
                                   NULL);
}

tc_status tc_attention_prefill_ex(tc_tensor *out, const tc_tensor *q, const tc_tensor *k_cache,
                                  const tc_tensor *v_cache, const tc_tensor *block_table,
                                  const tc_tensor *seq_lens, const tc_tensor *q_start, float scale,
                                  const tc_attention_opts *opts)
{
    const char *op = "tc_attention_prefill";
    int32_t window;
    const float *ks, *vs;
    TC_TRY(check_common(op, out, q, k_cache, v_cache, block_table, seq_lens));
    TC_TRY(check_opts(op, k_cache, opts, &window, &ks, &vs));
    TC_TRY(tc__check_dtype(op, "q_start", q_start, TC__MASK(TC_DTYPE_I32)));
    TC_TRY(tc__check_ndim(op, "q_start", q_start, 1));
    TC_TRY(tc__check_same_backend(op, out, q_start));
    int64_t n_seqs = block_table->shape[0], n_tokens = q->shape[0], n_heads = q->shape[1],
            hd = q->shape[2];
    TC_TRY(tc__check_dim(op, "q_start", q_start, 0, n_seqs + 1, "n_seqs + 1 offsets"));
    if (!tc_tensor_is_contiguous(q_start))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "q_start must be contiguous");
    if (n_tokens == 0 || n_seqs == 0)
        return TC_OK;
    tc_backend *b = out->backend;
    if (b->kind == TC_BACKEND_CPU) {
        TC_TRY(
            check_indices_cpu(op, k_cache, block_table, seq_lens, q_start->data, n_tokens, window));
        return attend_cpu(out, q, k_cache, v_cache, block_table, seq_lens, q_start->data, scale,
                          window, ks, vs);
    }
    TC_TRY(check_head_dim(op, hd, q->dtype));
    TC_TRY(check_q_pairs(op, q));
    if (q->dtype == TC_DTYPE_F32)
        return simt_f32(op, out, q, k_cache, v_cache, block_table, seq_lens, q_start, scale,
                        window);
    bool fp8 = k_cache->dtype == TC_DTYPE_F8E4M3, own = own_kernel(hd, q->dtype, fp8);
    /* tc_k_attn_prefill* (kernels/attention_prefill.cu): tiles of 64 query rows and two stages of
     * 64 keys and values in padded rows. The generic kernels: the query tile in padded rows of
     * head_dim rounded up to 16, then two stages of 32 keys and values. (An FP8 cache: the
     * stages hold bytes, then the current tile widened to 16 bits.) */
    int64_t bq = 64, hp = (hd + 15) / 16 * 16;
    uint32_t shared =
        own ? (fp8 ? (uint32_t)(2 * 2 * 64 * (hd + 16) + 2 * 64 * (hd + 8) * 2)
                   : (uint32_t)(2 * 2 * 64 * (hd + 8) * 2))
            : (uint32_t)(64 * (hp + 8) * 2 + (fp8 ? 2 * 2 * 32 * (hp + 16) + 2 * 32 * (hp + 8) * 2
                                                  : 2 * 2 * 32 * (hp + 8) * 2));
    TC_TRY(check_room(op, b, shared, hd));
    tc_launch_config cfg = { { (uint32_t)(n_tokens / bq + n_seqs), (uint32_t)n_heads, 1 },
                             { 128, 1, 1 },
                             shared,
                             b->stream };
    int32_t n_kv = (int32_t)k_cache->shape[2], bs = (int32_t)k_cache->shape[1],
            mb = (int32_t)block_table->shape[1];
    tc_status st;
#define CALL(fn, ...) fn(__VA_ARGS__)
#define ARGS(T, C)                                                                          \
    cfg, TC__DEV(T, out), TC__DEV(const T, q), TC__DEV(const C, k_cache),                   \
        TC__DEV(const C, v_cache), TC__DEV(const int32_t, block_table),                     \
        TC__DEV(const int32_t, seq_lens), TC__DEV(const int32_t, q_start), (int32_t)n_seqs, \
        (int32_t)n_heads, n_kv, bs, mb, q->stride[0], out->stride[0], scale, window
    if (!own) /* the generic kernel: bf16 activations, a bf16 or FP8 cache */
        return CALL(tc_launch_attn_prefill_bf16, ARGS(tc_bf16, uint8_t), ks, vs, (int32_t)fp8,
                    (int32_t)hd);
    if (fp8) {
#define LAUNCH8(sfx, T)                                                             \
    (hd == 64 ? CALL(tc_launch_attn_prefill64_##sfx##_f8, ARGS(T, uint8_t), ks, vs) \
              : CALL(tc_launch_attn_prefill128_##sfx##_f8, ARGS(T, uint8_t), ks, vs))
        return q->dtype == TC_DTYPE_F16 ? LAUNCH8(f16, tc_half) : LAUNCH8(bf16, tc_bf16);
#undef LAUNCH8
    }
    switch (hd) { /* bf16 only (own_kernel) */
    case 80: return CALL(tc_launch_attn_prefill80_bf16, ARGS(tc_bf16, tc_bf16));
    case 96: return CALL(tc_launch_attn_prefill96_bf16, ARGS(tc_bf16, tc_bf16));
    case 112: return CALL(tc_launch_attn_prefill112_bf16, ARGS(tc_bf16, tc_bf16));
    case 256: return CALL(tc_launch_attn_prefill256_bf16, ARGS(tc_bf16, tc_bf16));
    default: break;
    }
#define LAUNCH16(sfx, T)                                         \
    (hd == 64 ? CALL(tc_launch_attn_prefill64_##sfx, ARGS(T, T)) \
              : CALL(tc_launch_attn_prefill128_##sfx, ARGS(T, T)))
    st = q->dtype == TC_DTYPE_F16 ? LAUNCH16(f16, tc_half) : LAUNCH16(bf16, tc_bf16);
#undef LAUNCH16
#undef ARGS
#undef CALL
    return st;
}

/* 2^(ceil(log2(amax)) - 5), or 1 for amax 0 (or not finite): see tc_kv_scales. */
static float pow2_scale(float amax)
{
    if (!(amax > 0.0f) || !isfinite(amax))
        return 1.0f;
    int e;
    float m = frexpf(amax, &e); /* amax = m 2^e, m in [0.5, 1) */
    return ldexpf(1.0f, (m == 0.5f ? e - 1 : e) - 5);
}

tc_status tc_kv_scales(tc_tensor *k_scale, tc_tensor *v_scale, const tc_tensor *k,
                       const tc_tensor *v)
{
    const char *op = "tc_kv_scales";
    TC_TRY(tc__check_dtype(op, "k", k, TC__FLOATS));
    TC_TRY(tc__check_dtype(op, "v", v, TC__MASK(k->dtype)));
    TC_TRY(tc__check_ndim(op, "k", k, 3));
    TC_TRY(tc__check_ndim(op, "v", v, 3));
    for (int d = 0; d < 3; d++)
        TC_TRY(tc__check_dim(op, "v", v, d, k->shape[d], "k's shape"));
    TC_TRY(tc__check_rows_dense(op, "k", k));
    TC_TRY(tc__check_rows_dense(op, "v", v));
    tc_tensor *sc[2] = { k_scale, v_scale };
    const char *names[2] = { "k_scale", "v_scale" };
    for (int i = 0; i < 2; i++) {
        TC_TRY(tc__check_dtype(op, names[i], sc[i], TC__MASK(TC_DTYPE_F32)));
        TC_TRY(tc__check_ndim(op, names[i], sc[i], 1));
        TC_TRY(tc__check_dim(op, names[i], sc[i], 0, k->shape[1], "one per kv head"));
        TC_TRY(tc__check_same_backend(op, k, sc[i]));
        if (!tc_tensor_is_contiguous(sc[i]))
            return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "%s must be contiguous", names[i]);
    }
    TC_TRY(tc__check_same_backend(op, k, v));
    int64_t n = k->shape[0], heads = k->shape[1], hd = k->shape[2];
    if (k->backend->kind == TC_BACKEND_CPU) {
        const tc_tensor *x[2] = { k, v };
        for (int i = 0; i < 2; i++)
            for (int64_t h = 0; h < heads; h++) {
                float amax = 0.0f;
                for (int64_t r = 0; r < n; r++)
                    for (int64_t d = 0; d < hd; d++)
                        amax =
                            fmaxf(amax, fabsf(tc__load(x[i]->dtype, tc__row(x[i], r), h * hd + d)));
                ((float *)sc[i]->data)[h] = pow2_scale(amax);
            }
        return TC_OK;
    }
    if (k->dtype == TC_DTYPE_F32)
        return tc_set_error(TC_ERR_UNSUPPORTED, op,
                            "an f8e4m3 KV cache needs f16 or bf16 activations on CUDA, not f32");
    /* One block of 256 threads per (head, k or v). */
    tc_launch_config cfg = tc__cfg(k->backend, (unsigned)heads, 256, 0);
    cfg.grid.y = 2;
    return tc_launch_attn_scales_f32(cfg, TC__DEV(float, k_scale), TC__DEV(float, v_scale), k->data,
                                     v->data, (int32_t)k->dtype, n, (int32_t)hd, k->stride[0],
                                     v->stride[0]);
}

/* Attention over the paged KV cache (layout in ops.h). The CPU path is the reference: scores,
 * a max-subtracted softmax and the weighted sum of values in f32, a query row and kv head at a
 * time. A cache holds the activations' dtype or FP8 E4M3 (on CUDA with f16/bf16
 * activations). */
#include "ops/internal.h"

typedef struct {
    const tc_tensor *k_cache, *v_cache, *q;
    tc_tensor *out;
    const int32_t *table, *seq_lens, *q_start, *row_seq;
    int64_t max_blocks, block_size, n_heads, n_kv_heads, head_dim;
    int64_t window; /* 0: every earlier position */
    float scale;
    atomic_bool oom;
} attn_job;

/* Row t of kv head kvh in a sequence's cache (block table tbl): its address, or with a cache
 * of another dtype than f32 the row widened into tmp. */
static const float *cache_row(const tc_tensor *cache, const int32_t *tbl, int64_t t, int64_t bs,
                              int64_t kvh, float *tmp)
{
    int64_t idx[4] = { tbl[t / bs], t % bs, kvh, 0 };
    const void *row = tc_tensor_at(cache, idx);
    if (cache->dtype == TC_DTYPE_F32)
        return row;
    tc__load_row(cache->dtype, row, cache->shape[3], tmp);
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
        /* The first position the query sees: positions before a sliding window are skipped
         * (their softmax weight is exactly zero). */
        int64_t first = j->window > 0 && qpos - j->window + 1 > 0 ? qpos - j->window + 1 : 0;
        const int32_t *tbl = j->table + s * j->max_blocks;
        for (int64_t kvh = 0; kvh < j->n_kv_heads; kvh++) {
            const char *qrow =
                (const char *)tc__row(j->q, row) + (size_t)(kvh * group) * head_bytes;
            for (int64_t g = 0; g < group; g++) {
                tc__load_row(dt, qrow + (size_t)g * head_bytes, hd, qv + g * hd);
                mx[g] = -INFINITY;
                sum[g] = 0.0f;
            }
            for (int64_t t = first; t <= qpos; t++) {
                const float *k = cache_row(j->k_cache, tbl, t, j->block_size, kvh, tmp);
                for (int64_t g = 0; g < group; g++) {
                    float d = tc__dot(qv + g * hd, k, hd) * j->scale;
                    p[g * max_len + t] = d;
                    mx[g] = fmaxf(mx[g], d);
                }
            }
            for (int64_t g = 0; g < group; g++)
                for (int64_t t = first; t <= qpos; t++)
                    sum[g] += (p[g * max_len + t] = expf(p[g * max_len + t] - mx[g]));
            memset(acc, 0, (size_t)(group * hd) * sizeof(float));
            for (int64_t t = first; t <= qpos; t++) {
                const float *v = cache_row(j->v_cache, tbl, t, j->block_size, kvh, tmp);
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

/* The options' window: 0 or more, and (until the CUDA kernels take one) 0 on CUDA. */
static tc_status check_window(const char *op, const tc_backend *b, int32_t window)
{
    if (window < 0)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "window is %d; want 0 (none) or more",
                            (int)window);
    if (window > 0 && b->kind == TC_BACKEND_CUDA)
        return tc_set_error(TC_ERR_UNSUPPORTED, op,
                            "sliding-window attention (window %d) has no CUDA kernel yet; the "
                            "CPU backend runs it",
                            (int)window);
    return TC_OK;
}

/* On the CPU the host can read the indices: every one is checked before use. */
static tc_status check_indices_cpu(const char *op, const tc_tensor *kc, const tc_tensor *table,
                                   const tc_tensor *lens, const int32_t *q_start, int64_t n_tokens)
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
        for (int64_t b = 0; b < (len[s] + bs - 1) / bs; b++)
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
                            const int32_t *q_start, float scale, int32_t window)
{
    int64_t n_tokens = q->shape[0], n_seqs = table->shape[0];
    int32_t *row_seq = tc_host_alloc((size_t)n_tokens * sizeof(int32_t) + 1);
    if (!row_seq)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "attention", "no host memory for %lld rows",
                            (long long)n_tokens);
    for (int64_t s = 0; s < n_seqs; s++)
        for (int64_t r = q_start[s]; r < q_start[s + 1]; r++)
            row_seq[r] = (int32_t)s;
    attn_job j = { kc,           vc,          q,
                   out,          table->data, lens->data,
                   q_start,      row_seq,     table->shape[1],
                   kc->shape[1], q->shape[1], kc->shape[2],
                   kc->shape[3], window,      scale,
                   false };
    tc__parallel_for(out->backend, n_tokens, 1, attend_rows, &j);
    tc_host_free(row_seq);
    if (atomic_load(&j.oom))
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "attention", "no host memory for a score row");
    return TC_OK;
}

static tc_status check_head_dim(const char *op, int64_t hd)
{
    if (hd != 64 && hd != 128)
        return tc_set_error(TC_ERR_UNSUPPORTED, op,
                            "head_dim %lld has no CUDA kernel (64 and 128 do)", (long long)hd);
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
                             const tc_tensor *v, const tc_tensor *slots)
{
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
        for (int64_t e = 0; e < row; e++) {
            tc__store(k_cache->dtype, kd, e, tc__load(k->dtype, tc__row(k, i), e));
            tc__store(v_cache->dtype, vd, e, tc__load(v->dtype, tc__row(v, i), e));
        }
    }
}

tc_status tc_attention_store(tc_tensor *k_cache, tc_tensor *v_cache, const tc_tensor *k,
                             const tc_tensor *v, const tc_tensor *slots)
{
    const char *op = "tc_attention_store";
    TC_TRY(tc__check_store(op, k_cache, v_cache, k, v, slots));
    int64_t n = k->shape[0];
    if (n == 0)
        return TC_OK;
    int64_t row = k_cache->shape[2] * k_cache->shape[3];
    tc_backend *b = k_cache->backend;
    if (b->kind == TC_BACKEND_CPU) {
        tc__attention_store_cpu(k_cache, v_cache, k, v, slots);
        return TC_OK;
    }
    /* 256 threads, each moving a 16-byte vector of k and one of v where aligned. */
    int64_t per_block = 256 * (16 / (int64_t)tc_dtype_bytes(k->dtype, 1));
    tc_launch_config cfg = tc__cfg(b, (unsigned)n, 256, 0);
    cfg.grid.y = (uint32_t)((row + per_block - 1) / per_block);
    tc_status st;
    if (k_cache->dtype == TC_DTYPE_F8E4M3) {
#define LAUNCH8(sfx, T)                                                                 \
    tc_launch_attn_store_##sfx##_f8(                                                    \
        cfg, TC__DEV(uint8_t, k_cache), TC__DEV(uint8_t, v_cache), TC__DEV(const T, k), \
        TC__DEV(const T, v), TC__DEV(const int32_t, slots), row, k->stride[0], v->stride[0])
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
    int32_t fresh = opts ? opts->fresh_rows : -1, window = opts ? opts->window : 0;
    if (fresh < -1)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "fresh_rows is %d; want -1 or more",
                            (int)fresh);
    TC_TRY(check_common(op, out, q, k_cache, v_cache, block_table, seq_lens));
    TC_TRY(check_window(op, out->backend, window));
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
        tc_status st = check_indices_cpu(op, k_cache, block_table, seq_lens, q_start, n_seqs);
        if (st == TC_OK)
            st =
                attend_cpu(out, q, k_cache, v_cache, block_table, seq_lens, q_start, scale, window);
        tc_host_free(q_start);
        return st;
    }
    TC_TRY(check_head_dim(op, hd));
    /* The kernel (kernels/attention.cu): 4 warps, each with a ring of 16-token stages of keys
     * and values (3 stages, 2 for f32; fewer where shared memory is smaller), then for f32 8
     * query heads. */
    size_t el = tc_dtype_bytes(q->dtype, 1), ec = tc_dtype_bytes(k_cache->dtype, 1);
    bool fp8 = k_cache->dtype == TC_DTYPE_F8E4M3;
    TC_TRY(check_q_pairs(op, q));
    /* (An FP8 cache's stages hold bytes.) */
    size_t per_stage = (size_t)4 * 2 * 16 * (size_t)(hd + 16 / (int64_t)ec) * ec,
           extra = el == 4 ? 8 * (size_t)hd * sizeof(float) : 0, room = tc__backend_shared_room(b);
    int stages = el == 4 ? 2 : 3;
    while (stages > 1 && stages * per_stage + extra > room)
        stages--;
    size_t shared = stages * per_stage + extra;
    static const tc_kernel_id ids[2][3][2] = {
        { { TC_KERNEL_ATTN_DECODE64_F32, TC_KERNEL_ATTN_DECODE128_F32 },
          { TC_KERNEL_ATTN_DECODE64_F16, TC_KERNEL_ATTN_DECODE128_F16 },
          { TC_KERNEL_ATTN_DECODE64_BF16, TC_KERNEL_ATTN_DECODE128_BF16 } },
        { { TC_KERNEL_ATTN_DECODE64_F32, TC_KERNEL_ATTN_DECODE128_F32 }, /* no such pair */
          { TC_KERNEL_ATTN_DECODE64_F16_F8, TC_KERNEL_ATTN_DECODE128_F16_F8 },
          { TC_KERNEL_ATTN_DECODE64_BF16_F8, TC_KERNEL_ATTN_DECODE128_BF16_F8 } }
    };
    tc_kernel_id id = ids[fp8][q->dtype == TC_DTYPE_F32   ? 0
                               : q->dtype == TC_DTYPE_F16 ? 1
                                                          : 2][hd == 128];
    /* Split each sequence's cache (flash-decoding) so that every SM gets one block, or, where
     * that leaves each warp more than 4 tiles of 16 tokens to stream, so that the blocks fill
     * the GPU's resident slots once (a partial second wave would leave most SMs idle at the
     * end). Measured on the H100 at batch 1 over 4,096 tokens: with 8 KV heads one block per SM
     * (4 tiles a warp) reads at 53% of the bandwidth against 47% with two (2 tiles a warp, and
     * twice the splits to merge); with 32 KV heads two blocks per SM (8 tiles a warp) 87%
     * against 71% with one. Splits are multiples of 64 tokens (a tile for each warp) and at
     * most 256 (bounding the partials). The chunk is sized for the table's width (a captured
     * graph serves any length up to it); the kernel shrinks it for a shorter sequence so that
     * all splits share its cache. */
    int64_t group = n_heads / n_kv, chunks = (group + 7) / 8;
    int64_t capacity = block_table->shape[1] * k_cache->shape[1];
    int64_t base_blocks = n_seqs * n_kv * chunks;
    int resident = 0;
    if (tc_launch_blocks_per_sm(b->ctx, id, 128, shared, &resident) != TC_OK || resident < 1)
        resident = 1;
    int64_t want = b->ctx->sm_count / base_blocks;
    if (want < 1 || (capacity + want - 1) / want > 4 * 64)
        want = (int64_t)resident * b->ctx->sm_count / base_blocks;
    int64_t max_splits = (capacity + 63) / 64;
    int64_t splits = want < max_splits ? want : max_splits;
    if (splits > 256)
        splits = 256;
    if (splits < 1)
        splits = 1;
    int64_t chunk = ((capacity + splits - 1) / splits + 63) / 64 * 64;
    if (chunk < 64)
        chunk = 64; /* an empty block table: one split, nothing to read */
    splits = (capacity + chunk - 1) / chunk;
    if (splits < 1)
        splits = 1;
    CUdeviceptr part = 0, counters = 0;
    if (splits > 1) {
        TC_TRY(tc__backend_workspace(
            b, (size_t)(n_seqs * n_heads * splits * (hd + 4)) * sizeof(float), &part));
        TC_TRY(tc__backend_counters(b, (size_t)(n_seqs * n_kv * chunks), &counters));
    }
    tc_launch_config cfg = { { (uint32_t)n_seqs, (uint32_t)(n_kv * chunks), (uint32_t)splits },
                             { 128, 1, 1 },
                             (unsigned)shared,
                             b->stream };
    tc_status st;
    if (fp8) {
#define LAUNCH8(sfx, T)                                                                        \
    (hd == 64                                                                                  \
         ? tc_launch_attn_decode64_##sfx##_f8(                                                 \
               cfg, TC__DEV(T, out), (float *)(uintptr_t)part, (int32_t *)(uintptr_t)counters, \
               TC__DEV(const T, q), TC__DEV(const uint8_t, k_cache),                           \
               TC__DEV(const uint8_t, v_cache), TC__DEV(const int32_t, block_table),           \
               TC__DEV(const int32_t, seq_lens), (int32_t)n_heads, (int32_t)n_kv,              \
               (int32_t)k_cache->shape[1], (int32_t)block_table->shape[1], q->stride[0],       \
               out->stride[0], (int32_t)chunk, scale, stages, fresh)                           \
         : tc_launch_attn_decode128_##sfx##_f8(                                                \
               cfg, TC__DEV(T, out), (float *)(uintptr_t)part, (int32_t *)(uintptr_t)counters, \
               TC__DEV(const T, q), TC__DEV(const uint8_t, k_cache),                           \
               TC__DEV(const uint8_t, v_cache), TC__DEV(const int32_t, block_table),           \
               TC__DEV(const int32_t, seq_lens), (int32_t)n_heads, (int32_t)n_kv,              \
               (int32_t)k_cache->shape[1], (int32_t)block_table->shape[1], q->stride[0],       \
               out->stride[0], (int32_t)chunk, scale, stages, fresh))
        return q->dtype == TC_DTYPE_F16 ? LAUNCH8(f16, tc_half) : LAUNCH8(bf16, tc_bf16);
#undef LAUNCH8
    }
#define LAUNCH(sfx)                                                                            \
    (hd == 64                                                                                  \
         ? tc_launch_attn_decode64_##sfx(                                                      \
               cfg, TC__DEV(T, out), (float *)(uintptr_t)part, (int32_t *)(uintptr_t)counters, \
               TC__DEV(const T, q), TC__DEV(const T, k_cache), TC__DEV(const T, v_cache),      \
               TC__DEV(const int32_t, block_table), TC__DEV(const int32_t, seq_lens),          \
               (int32_t)n_heads, (int32_t)n_kv, (int32_t)k_cache->shape[1],                    \
               (int32_t)block_table->shape[1], q->stride[0], out->stride[0], (int32_t)chunk,   \
               scale, stages, fresh)                                                           \
         : tc_launch_attn_decode128_##sfx(                                                     \
               cfg, TC__DEV(T, out), (float *)(uintptr_t)part, (int32_t *)(uintptr_t)counters, \
               TC__DEV(const T, q), TC__DEV(const T, k_cache), TC__DEV(const T, v_cache),      \
               TC__DEV(const int32_t, block_table), TC__DEV(const int32_t, seq_lens),          \
               (int32_t)n_heads, (int32_t)n_kv, (int32_t)k_cache->shape[1],                    \
               (int32_t)block_table->shape[1], q->stride[0], out->stride[0], (int32_t)chunk,   \
               scale, stages, fresh))
    TC__BY_DTYPE(st, q->dtype, LAUNCH);
#undef LAUNCH
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
    int32_t window = opts ? opts->window : 0;
    TC_TRY(check_common(op, out, q, k_cache, v_cache, block_table, seq_lens));
    TC_TRY(check_window(op, out->backend, window));
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
        TC_TRY(check_indices_cpu(op, k_cache, block_table, seq_lens, q_start->data, n_tokens));
        return attend_cpu(out, q, k_cache, v_cache, block_table, seq_lens, q_start->data, scale,
                          window);
    }
    TC_TRY(check_head_dim(op, hd));
    TC_TRY(check_q_pairs(op, q));
    /* tc_k_attn_prefill* (kernels/attention.cu): 16-bit, tiles of 64 query rows and two
     * stages of 64 keys and values in padded rows; f32, tiles of 32 rows, shared floats for q,
     * k and v tiles of 32 padded rows and 32 x 33 scores. */
    bool f32 = q->dtype == TC_DTYPE_F32, fp8 = k_cache->dtype == TC_DTYPE_F8E4M3;
    int64_t bq = f32 ? 32 : 64;
    /* (An FP8 cache: two stages of bytes, then the current tile widened to 16 bits.) */
    uint32_t shared = f32   ? (uint32_t)(4 * (32 * (hd + 1) * 3 + 32 * 33))
                      : fp8 ? (uint32_t)(2 * 2 * 64 * (hd + 16) + 2 * 64 * (hd + 8) * 2)
                            : (uint32_t)(2 * 2 * 64 * (hd + 8) * 2);
    tc_launch_config cfg = { { (uint32_t)(n_tokens / bq + n_seqs), (uint32_t)n_heads, 1 },
                             { 128, 1, 1 },
                             shared,
                             b->stream };
    int32_t n_kv = (int32_t)k_cache->shape[2], bs = (int32_t)k_cache->shape[1],
            mb = (int32_t)block_table->shape[1];
    tc_status st;
    if (fp8) {
#define LAUNCH8(sfx, T)                                                                            \
    (hd == 64                                                                                      \
         ? tc_launch_attn_prefill64_##sfx##_f8(                                                    \
               cfg, TC__DEV(T, out), TC__DEV(const T, q), TC__DEV(const uint8_t, k_cache),         \
               TC__DEV(const uint8_t, v_cache), TC__DEV(const int32_t, block_table),               \
               TC__DEV(const int32_t, seq_lens), TC__DEV(const int32_t, q_start), (int32_t)n_seqs, \
               (int32_t)n_heads, n_kv, bs, mb, q->stride[0], out->stride[0], scale)                \
         : tc_launch_attn_prefill128_##sfx##_f8(                                                   \
               cfg, TC__DEV(T, out), TC__DEV(const T, q), TC__DEV(const uint8_t, k_cache),         \
               TC__DEV(const uint8_t, v_cache), TC__DEV(const int32_t, block_table),               \
               TC__DEV(const int32_t, seq_lens), TC__DEV(const int32_t, q_start), (int32_t)n_seqs, \
               (int32_t)n_heads, n_kv, bs, mb, q->stride[0], out->stride[0], scale))
        return q->dtype == TC_DTYPE_F16 ? LAUNCH8(f16, tc_half) : LAUNCH8(bf16, tc_bf16);
#undef LAUNCH8
    }
#define LAUNCH(sfx)                                                                                \
    (hd == 64                                                                                      \
         ? tc_launch_attn_prefill64_##sfx(                                                         \
               cfg, TC__DEV(T, out), TC__DEV(const T, q), TC__DEV(const T, k_cache),               \
               TC__DEV(const T, v_cache), TC__DEV(const int32_t, block_table),                     \
               TC__DEV(const int32_t, seq_lens), TC__DEV(const int32_t, q_start), (int32_t)n_seqs, \
               (int32_t)n_heads, n_kv, bs, mb, q->stride[0], out->stride[0], scale)                \
         : tc_launch_attn_prefill128_##sfx(                                                        \
               cfg, TC__DEV(T, out), TC__DEV(const T, q), TC__DEV(const T, k_cache),               \
               TC__DEV(const T, v_cache), TC__DEV(const int32_t, block_table),                     \
               TC__DEV(const int32_t, seq_lens), TC__DEV(const int32_t, q_start), (int32_t)n_seqs, \
               (int32_t)n_heads, n_kv, bs, mb, q->stride[0], out->stride[0], scale))
    TC__BY_DTYPE(st, q->dtype, LAUNCH);
#undef LAUNCH
    return st;
}

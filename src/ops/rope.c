/* Rotary position embedding (Su et al. 2021, "RoFormer", eq. 34) with Llama 3's frequency
 * scaling (Meta's llama3 reference; Hugging Face's _compute_llama3_parameters). Angles and
 * their cos/sin are computed in double on both backends. */
#include "ops/internal.h"

void tc_rope_frequencies(const tc_rope_config *cfg, double *inv_freq)
{
    int half = cfg->head_dim / 2;
    for (int i = 0; i < half; i++) {
        double inv = exp(-(2.0 * i / cfg->head_dim) * log(cfg->theta));
        if (cfg->scaling == TC_ROPE_LLAMA3) {
            const double pi = 3.14159265358979323846;
            double wavelen = 2.0 * pi / inv;
            double low_wavelen = cfg->original_max_position / cfg->low_freq_factor;
            double high_wavelen = cfg->original_max_position / cfg->high_freq_factor;
            if (wavelen > low_wavelen) {
                inv /= cfg->factor;
            } else if (wavelen >= high_wavelen) {
                double smooth = (cfg->original_max_position / wavelen - cfg->low_freq_factor) /
                                (cfg->high_freq_factor - cfg->low_freq_factor);
                inv = (1.0 - smooth) * inv / cfg->factor + smooth * inv;
            }
        }
        inv_freq[i] = inv;
    }
}

typedef struct {
    tc_tensor *q, *k;
    const int32_t *pos;
    const tc_rope_config *cfg;
    const double *inv_freq;
} rope_job;

static void rotate_heads(tc_dtype dt, void *row, int64_t heads, int hd, bool inter, const float *c,
                         const float *s)
{
    int half = hd / 2;
    for (int64_t h = 0; h < heads; h++)
        for (int i = 0; i < half; i++) {
            int64_t a = h * hd + (inter ? 2 * i : i), b = h * hd + (inter ? 2 * i + 1 : i + half);
            float x0 = tc__load(dt, row, a), x1 = tc__load(dt, row, b);
            tc__store(dt, row, a, x0 * c[i] - x1 * s[i]);
            tc__store(dt, row, b, x1 * c[i] + x0 * s[i]);
        }
}

static void rope_rows(void *ctx, int64_t begin, int64_t end)
{
    rope_job *j = ctx;
    int hd = j->cfg->head_dim, half = hd / 2;
    float c[256], s[256];
    for (int64_t r = begin; r < end; r++) {
        for (int i = 0; i < half; i++) {
            double a = (double)j->pos[r] * j->inv_freq[i];
            c[i] = (float)cos(a);
            s[i] = (float)sin(a);
        }
        rotate_heads(j->q->dtype, tc__row(j->q, r), j->q->shape[1], hd, j->cfg->interleaved, c, s);
        if (j->k)
            rotate_heads(j->k->dtype, tc__row(j->k, r), j->k->shape[1], hd, j->cfg->interleaved, c,
                         s);
    }
}

tc_status tc__check_rope(const char *op, const tc_tensor *q, const tc_tensor *k,
                         const tc_tensor *pos, const tc_rope_config *cfg)
{
    TC_TRY(tc__check_dtype(op, "q", q, TC__FLOATS));
    TC_TRY(tc__check_ndim(op, "q", q, 3));
    TC_TRY(tc__check_dtype(op, "pos", pos, TC__MASK(TC_DTYPE_I32)));
    TC_TRY(tc__check_ndim(op, "pos", pos, 1));
    TC_TRY(tc__check_same_backend(op, q, pos));
    TC_TRY(tc__check_rows_dense(op, "q", q));
    int64_t n = q->shape[0];
    int hd = cfg->head_dim;
    if (hd <= 0 || hd % 2 || hd > 512)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "head_dim is %d; want an even number up to 512", hd);
    if (!(cfg->theta > 1.0))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "theta is %g; want > 1", cfg->theta);
    if (cfg->scaling == TC_ROPE_LLAMA3 &&
        !(cfg->factor > 0 && cfg->low_freq_factor > 0 &&
          cfg->high_freq_factor > cfg->low_freq_factor && cfg->original_max_position > 0))
        return tc_set_error(
            TC_ERR_INVALID_ARGUMENT, op,
            "llama3 rope_scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor "
            "and original_max_position_embeddings > 0");
    TC_TRY(tc__check_dim(op, "q", q, 2, hd, "head_dim"));
    TC_TRY(tc__check_dim(op, "pos", pos, 0, n, "one position per row"));
    if (k) {
        TC_TRY(tc__check_dtype(op, "k", k, TC__MASK(q->dtype)));
        TC_TRY(tc__check_ndim(op, "k", k, 3));
        TC_TRY(tc__check_dim(op, "k", k, 0, n, "q's rows"));
        TC_TRY(tc__check_dim(op, "k", k, 2, hd, "head_dim"));
        TC_TRY(tc__check_same_backend(op, q, k));
        TC_TRY(tc__check_rows_dense(op, "k", k));
    }
    if (!tc_tensor_is_contiguous(pos))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "pos must be contiguous");
    return TC_OK;
}

/* The CUDA kernel (kernels/rope.cu): for a few tokens (decode) a row of 128-thread blocks per
 * token, enough for one 16-byte vector of pairs per thread, so that the step's latency is one
 * block's; for many, one block per token (each block works out the angles' cos/sin, in
 * double, so fewer blocks do less of that). With k_cache, k and v also go to slots[i]. */
static tc_status rope_cuda(tc_tensor *q, tc_tensor *k, const tc_tensor *v, tc_tensor *k_cache,
                           tc_tensor *v_cache, const tc_tensor *pos, const tc_tensor *slots,
                           const tc_rope_config *cfg, const float *ks, const float *vs)
{
    int64_t hd = cfg->head_dim, heads = q->shape[1];
    if (k)
        heads += k->shape[1] * (k_cache ? 2 : 1);
    int64_t pairs_per_thread = (cfg->interleaved ? 8 : 16) / (int64_t)tc_dtype_bytes(q->dtype, 1);
    int64_t threads = heads * ((hd / 2 + pairs_per_thread - 1) / pairs_per_thread);
    tc_launch_config c = tc__cfg(q->backend, (unsigned)q->shape[0], 128, 0);
    c.grid.y = q->shape[0] < 32 ? (uint32_t)((threads + 127) / 128) : 1;
    tc_status st;
    if (k_cache && k_cache->dtype == TC_DTYPE_F8E4M3) {
#define LAUNCH8(sfx, T)                                                                          \
    tc_launch_rope_##sfx##_f8(                                                                   \
        c, TC__DEV(T, q), TC__DEV(T, k), TC__DEV(const T, v), TC__DEV(uint8_t, k_cache),         \
        TC__DEV(uint8_t, v_cache), TC__DEV(const int32_t, pos), TC__DEV(const int32_t, slots),   \
        (int32_t)q->shape[1], (int32_t)k->shape[1], (int32_t)hd, q->stride[0], k->stride[0],     \
        v->stride[0], (int32_t)cfg->interleaved, cfg->theta, (int32_t)cfg->scaling, cfg->factor, \
        cfg->low_freq_factor, cfg->high_freq_factor, cfg->original_max_position, ks, vs)
        return q->dtype == TC_DTYPE_F16 ? LAUNCH8(f16, tc_half) : LAUNCH8(bf16, tc_bf16);
#undef LAUNCH8
    }
#define LAUNCH(sfx)                                                                              \
    tc_launch_rope_##sfx(                                                                        \
        c, TC__DEV(T, q), k ? TC__DEV(T, k) : NULL, k_cache ? TC__DEV(const T, v) : NULL,        \
        k_cache ? TC__DEV(T, k_cache) : NULL, k_cache ? TC__DEV(T, v_cache) : NULL,              \
        TC__DEV(const int32_t, pos), k_cache ? TC__DEV(const int32_t, slots) : NULL,             \
        (int32_t)q->shape[1], (int32_t)(k ? k->shape[1] : 0), (int32_t)hd, q->stride[0],         \
        k ? k->stride[0] : 0, k_cache ? v->stride[0] : 0, (int32_t)cfg->interleaved, cfg->theta, \
        (int32_t)cfg->scaling, cfg->factor, cfg->low_freq_factor, cfg->high_freq_factor,         \
        cfg->original_max_position)
    TC__BY_DTYPE(st, q->dtype, LAUNCH);
#undef LAUNCH
    return st;
}

/* The CPU path, for arguments check_rope accepted. */
static tc_status rope_cpu(const char *op, tc_tensor *q, tc_tensor *k, const tc_tensor *pos,
                          const tc_rope_config *cfg)
{
    int64_t n = q->shape[0];
    const int32_t *p = pos->data;
    for (int64_t i = 0; i < n; i++)
        if (p[i] < 0)
            return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "pos[%lld] is %d", (long long)i, p[i]);
    double inv[256];
    tc_rope_frequencies(cfg, inv);
    rope_job j = { q, k, p, cfg, inv };
    tc__parallel_for(q->backend, n, 4, rope_rows, &j);
    return TC_OK;
}

tc_status tc_rope(tc_tensor *q, tc_tensor *k, const tc_tensor *pos, const tc_rope_config *cfg)
{
    TC_TRY(tc__check_rope("tc_rope", q, k, pos, cfg));
    if (q->shape[0] == 0)
        return TC_OK;
    if (q->backend->kind == TC_BACKEND_CPU)
        return rope_cpu("tc_rope", q, k, pos, cfg);
    return rope_cuda(q, k, NULL, NULL, NULL, pos, NULL, cfg, NULL, NULL);
}

tc_status tc_rope_store(tc_tensor *q, tc_tensor *k, const tc_tensor *v, const tc_tensor *pos,
                        const tc_rope_config *cfg, tc_tensor *k_cache, tc_tensor *v_cache,
                        const tc_tensor *slots)
{
    return tc_rope_store_ex(q, k, v, pos, cfg, k_cache, v_cache, slots, NULL);
}

tc_status tc_rope_store_ex(tc_tensor *q, tc_tensor *k, const tc_tensor *v, const tc_tensor *pos,
                           const tc_rope_config *cfg, tc_tensor *k_cache, tc_tensor *v_cache,
                           const tc_tensor *slots, const tc_attention_opts *kv_opts)
{
    const char *op = "tc_rope_store";
    const float *ks, *vs;
    if (!k)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "k is required");
    TC_TRY(tc__check_rope(op, q, k, pos, cfg));
    TC_TRY(tc__check_store(op, k_cache, v_cache, k, v, slots));
    TC_TRY(tc__check_same_backend(op, q, k_cache));
    TC_TRY(tc__kv_scales(op, k_cache, kv_opts, &ks, &vs));
    if (q->shape[0] == 0)
        return TC_OK;
    if (q->backend->kind == TC_BACKEND_CPU) {
        TC_TRY(rope_cpu(op, q, k, pos, cfg));
        tc__attention_store_cpu(k_cache, v_cache, k, v, slots, ks, vs);
        return TC_OK;
    }
    return rope_cuda(q, k, v, k_cache, v_cache, pos, slots, cfg, ks, vs);
}

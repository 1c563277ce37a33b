/* Llama: configuration and weights from GGUF (llama.cpp's tensor names), and the forward pass
 * of Touvron et al. 2023 (pre-norm RMSNorm, rotary attention with grouped KV heads, SwiGLU
 * feed-forward) through the ops layer, so that one code path runs on the CPU and on CUDA. */
#include "model/llama.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "model/comm.h"
#include "model/hfquant.h"
#include "model/internal.h"
#include "model/quant.h"
#include "model/shard.h"
#include "ops/internal.h"
#include "runtime/error.h"
#include "runtime/host.h"

/* ---------------------------------------------------------------- configuration */

static tc_status need_i64(const tc_gguf *g, const char *arch, const char *key, int64_t *v,
                          int64_t lo, int64_t hi)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    if (!tc_gguf_get_i64(g, full, v))
        return tc_set_error(TC_ERR_PARSE, "tc_llama", "the model has no '%s'", full);
    if (*v < lo || *v > hi)
        return tc_set_error(TC_ERR_PARSE, "tc_llama", "'%s' is %lld, outside %lld..%lld", full,
                            (long long)*v, (long long)lo, (long long)hi);
    return TC_OK;
}

static bool opt_f64(const tc_gguf *g, const char *arch, const char *key, double *v)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    return tc_gguf_get_f64(g, full, v);
}

/* Llama 3.1-style GGUFs carry the scaled frequencies as factors (rope_freqs.weight, f32
 * [head_dim/2]) instead of the rope_scaling parameters: recognise Meta's parameters (low 1,
 * high 4, original context 8192) with the largest factor, and check every factor. */
static tc_status rope_factors(const tc_gguf *g, tc_llama_config *c)
{
    const tc_gguf_tensor *t = tc_gguf_tensor_find(g, "rope_freqs.weight");
    if (!t)
        return TC_OK;
    int half = c->head_dim / 2;
    if (t->type != TC_GGML_F32 || t->n_elements != (uint64_t)half)
        return tc_set_error(TC_ERR_PARSE, "tc_llama", "rope_freqs.weight is not f32 [%d]", half);
    float f[256]; /* (a file's tensor data may sit at any address: general.alignment 1) */
    if (half > 256)
        return tc_set_error(TC_ERR_PARSE, "tc_llama", "rope_freqs.weight has %d factors", half);
    memcpy(f, t->data, sizeof *f * (size_t)half);
    double mx = 1;
    for (int i = 0; i < half; i++)
        mx = f[i] > mx ? f[i] : mx;
    tc_rope_config r = c->rope;
    r.scaling = TC_ROPE_LLAMA3;
    r.factor = mx;
    r.low_freq_factor = 1;
    r.high_freq_factor = 4;
    r.original_max_position = 8192;
    double plain[256], scaled[256];
    tc_rope_config p = c->rope;
    p.scaling = TC_ROPE_PLAIN;
    tc_rope_frequencies(&p, plain);
    tc_rope_frequencies(&r, scaled);
    for (int i = 0; i < half; i++)
        if (!(fabs(plain[i] / scaled[i] - f[i]) <= 1e-3 * f[i])) /* NaN fails too */
            return tc_set_error(TC_ERR_UNSUPPORTED, "tc_llama",
                                "rope_freqs.weight does not follow Llama 3's rope scaling "
                                "(factor %d is %g)",
                                i, (double)f[i]);
    c->rope = r;
    return TC_OK;
}

tc_status tc_llama_config_from_gguf(const tc_gguf *g, tc_llama_config *c)
{
    memset(c, 0, sizeof *c);
    tc_gguf_str s;
    if (!tc_gguf_get_str(g, "general.architecture", &s))
        return tc_set_error(TC_ERR_PARSE, "tc_llama", "the model has no general.architecture");
    snprintf(c->arch, sizeof c->arch, "%.*s", (int)(s.len < 31 ? s.len : 31), s.ptr);
    bool qwen2 = !strcmp(c->arch, "qwen2");
    if (strcmp(c->arch, "llama") != 0 && strcmp(c->arch, "mistral") != 0 && !qwen2)
        return tc_set_error(TC_ERR_UNSUPPORTED, "tc_llama",
                            "unsupported architecture '%s' (supported: llama, mistral, qwen2)",
                            c->arch);
    if (tc_gguf_get_str(g, "general.name", &s))
        snprintf(c->name, sizeof c->name, "%.*s", (int)(s.len < 95 ? s.len : 95), s.ptr);
    const char *a = c->arch;
    int64_t v;
    TC_TRY(need_i64(g, a, "block_count", &v, 1, 1024));
    c->n_layers = (int)v;
    TC_TRY(need_i64(g, a, "embedding_length", &v, 1, 1 << 16));
    c->dim = (int)v;
    TC_TRY(need_i64(g, a, "feed_forward_length", &v, 1, 1 << 18));
    c->ffn_dim = (int)v;
    TC_TRY(need_i64(g, a, "attention.head_count", &v, 1, 1024));
    c->n_heads = (int)v;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.head_count_kv", a);
    if (tc_gguf_get_i64(g, key, &v))
        TC_TRY(need_i64(g, a, "attention.head_count_kv", &v, 1, c->n_heads));
    else
        v = c->n_heads;
    c->n_kv_heads = (int)v;
    if (c->n_heads % c->n_kv_heads)
        return tc_set_error(TC_ERR_PARSE, "tc_llama", "%d heads do not divide into %d KV heads",
                            c->n_heads, c->n_kv_heads);
    /* The head size: key_length where the file states it (it may differ from the width over
     * the heads, as in Mistral-Nemo), else that quotient; values must have the keys' size. */
    snprintf(key, sizeof key, "%s.attention.key_length", a);
    if (tc_gguf_get_i64(g, key, &v)) {
        TC_TRY(need_i64(g, a, "attention.key_length", &v, 1, 1 << 16));
        c->head_dim = (int)v;
    } else if (c->dim % c->n_heads) {
        return tc_set_error(TC_ERR_PARSE, "tc_llama", "dimension %d is not a multiple of %d heads",
                            c->dim, c->n_heads);
    } else {
        c->head_dim = c->dim / c->n_heads;
    }
    snprintf(key, sizeof key, "%s.attention.value_length", a);
    if (tc_gguf_get_i64(g, key, &v) && v != c->head_dim)
        return tc_set_error(TC_ERR_UNSUPPORTED, "tc_llama",
                            "value heads of %lld differ from key heads of %d", (long long)v,
                            c->head_dim);
    snprintf(key, sizeof key, "%s.rope.dimension_count", a);
    if (tc_gguf_get_i64(g, key, &v) && v != c->head_dim)
        return tc_set_error(TC_ERR_UNSUPPORTED, "tc_llama",
                            "partial rotary embedding (%lld of %d dimensions) is not supported",
                            (long long)v, c->head_dim);
    if (c->head_dim % 2 || c->head_dim > 512)
        return tc_set_error(TC_ERR_UNSUPPORTED, "tc_llama", "head size %d is not supported",
                            c->head_dim);
    snprintf(key, sizeof key, "%s.context_length", a);
    c->max_positions = tc_gguf_get_i64(g, key, &v) && v > 0 && v < INT32_MAX ? (int)v : 4096;
    double d;
    c->norm_eps =
        opt_f64(g, a, "attention.layer_norm_rms_epsilon", &d) && d > 0 && d < 1 ? (float)d : 1e-5f;
    c->rope.head_dim = c->head_dim;
    c->rope.theta = opt_f64(g, a, "rope.freq_base", &d) && d > 1 && d < 1e12 ? d : 10000.0;
    /* llama.cpp's converter permutes the rows of q and k of a Llama so that rotating adjacent
     * pairs equals Hugging Face's rotate_half on the original weights; a Qwen2's rows stay as
     * they were, and llama.cpp rotates them as rotate_half does (its NEOX rope type). */
    c->rope.interleaved = !qwen2;
    c->qkv_bias = qwen2;
    snprintf(key, sizeof key, "%s.attention.sliding_window", a);
    if (tc_gguf_get_i64(g, key, &v) && v > 0)
        c->window = v < INT32_MAX ? (int)v : INT32_MAX;
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    if (tc_gguf_get_str(g, key, &s) && !(s.len == 4 && !memcmp(s.ptr, "none", 4)))
        return tc_set_error(TC_ERR_UNSUPPORTED, "tc_llama", "rope scaling '%.*s' is not supported",
                            (int)(s.len < 40 ? s.len : 40), s.ptr);
    TC_TRY(rope_factors(g, c));
    const tc_gguf_tensor *emb = tc_gguf_tensor_find(g, "token_embd.weight");
    if (!emb || emb->n_dims != 2)
        return tc_set_error(TC_ERR_PARSE, "tc_llama", "missing tensor token_embd.weight");
    if (emb->dims[1] > INT32_MAX)
        return tc_set_error(TC_ERR_PARSE, "tc_llama", "vocabulary too large");
    c->vocab = (int)emb->dims[1];
    c->tied_embeddings = tc_gguf_tensor_find(g, "output.weight") == NULL;
    return TC_OK;
}

/* ---------------------------------------------------------------- weights */

/* A block-quantised matrix on CUDA that is a row block of a fused one: its rows go into
 * `whole` from `row0` on (planes span the whole tensor, so the part is no view of it). */
typedef struct fused_part {
    const tc_tensor *part;
    tc_tensor *whole;
    int64_t row0;
} fused_part;

typedef struct loader {
    const tc_gguf *g;
    tc_llama *m;
    const tc_llama_options *opt;
    uint64_t done, total;
    uint64_t seed;       /* with g NULL: random weights */
    fused_part fused[5]; /* the current layer's */
    int n_fused;
    /* Tensors dequantised at load (types without a kernel that reads them as stored): how
     * many of each ggml type, and their bytes in the file and as held. */
    uint32_t dequantised[TC_GGML_TYPE_LIMIT];
    uint64_t dequantised_file, dequantised_held; /* bytes */
    /* Tensor parallelism: the plan and the rank whose shard is placed (NULL: everything). */
    const tc__shard_plan *plan;
    int rank;
} loader;

/* The dtype a tensor is held in: vectors take the activation dtype; matrices keep a type the
 * kernels read (on CUDA, float types become the activation dtype so that cuBLAS can run
 * them); others are dequantised, to f32 on the CPU and to the activation dtype on CUDA. */
static tc_dtype target(tc_ggml_type type, bool vec, bool cpu, tc_dtype act, tc_dtype *native)
{
    /* Every type with a tc_dtype is read as stored on both backends; the IQ family and other
     * rare types are dequantised at load. */
    bool readable = tc_ggml_dtype(type, native);
    if (vec)
        return act;
    if (readable && (cpu || tc_dtype_is_block(*native)))
        return *native;
    return cpu ? TC_DTYPE_F32 : act;
}

uint64_t tc_llama_weight_bytes(const tc_gguf *g, bool cpu, tc_dtype act)
{
    uint64_t total = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const tc_gguf_tensor *t = &g->tensors[i];
        tc_dtype native;
        total += tc_dtype_bytes(target(t->type, t->n_dims == 1, cpu, act, &native),
                                (int64_t)t->n_elements);
    }
    return total;
}

/* Random weights for benchmarks: norms near 1, matrices uniform with variance 1/cols (so
 * activations keep their scale through the layers), all in the activation dtype. */
static tc_status place_random(loader *L, int64_t rows, int64_t cols, tc_tensor *t)
{
    tc_llama *m = L->m;
    bool vec = rows == 0;
    int64_t shape[2] = { vec ? cols : rows, cols };
    if (!t->data)
        TC_TRY(tc_tensor_init(t, m->backend, m->act, vec ? 1 : 2, shape));
    float scale = vec ? 0.1f : sqrtf(3.0f / (float)cols);
    TC_TRY(tc_fill_random(t, L->seed++, vec ? 1.0f : 0.0f, scale));
    m->n_params += (uint64_t)tc_tensor_numel(t);
    m->weight_bytes += tc_tensor_bytes(t);
    return TC_OK;
}

/* A rank's slice of tensor gt (checked against the whole shape): a block of rows points into
 * the file where it needs no padding; columns, or rows padded with zero rows, are copied into
 * *staged (whole blocks of a block type only). *src, *bytes and *n are what is placed. */
static tc_status cut(const char *name, const tc_gguf_tensor *gt, const tc__shard_slice *sl,
                     const void **src, uint64_t *bytes, uint64_t *n, void **staged)
{
    const char *op = "tc_llama_load";
    uint64_t be = 1, bb = 0;
    if (!tc_ggml_type_block(gt->type, &be, &bb))
        return tc_set_error(TC_ERR_UNSUPPORTED, op, "tensor %s: type %s cannot be split", name,
                            tc_ggml_type_name(gt->type));
    uint64_t cols = gt->dims[0], rows = gt->n_elements / cols;
    uint64_t lcols = sl->dim == 1 ? (uint64_t)sl->len : cols;
    uint64_t lrows = sl->dim == 1 ? rows : (uint64_t)sl->rows;
    if (sl->dim == 1 && ((uint64_t)sl->start % be || lcols % be))
        return tc_set_error(TC_ERR_UNSUPPORTED, op,
                            "tensor %s: columns %lld..%lld of a rank do not fall on whole %s "
                            "blocks of %llu",
                            name, (long long)sl->start, (long long)(sl->start + sl->len),
                            tc_ggml_type_name(gt->type), (unsigned long long)be);
    uint64_t row_bytes = cols / be * bb, lrow_bytes = lcols / be * bb;
    const char *base = gt->data;
    *n = lrows * lcols;
    *bytes = lrows * lrow_bytes;
    if (sl->dim == 0 && lrows == (uint64_t)sl->len) {
        *src = base + (uint64_t)sl->start * row_bytes;
        return TC_OK;
    }
    char *buf = tc_host_calloc(1, *bytes);
    if (!buf)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no host memory to split %s", name);
    if (sl->dim == 0)
        memcpy(buf, base + (uint64_t)sl->start * row_bytes, (uint64_t)sl->len * row_bytes);
    else
        for (uint64_t r = 0; r < rows; r++)
            memcpy(buf + r * lrow_bytes, base + r * row_bytes + (uint64_t)sl->start / be * bb,
                   lrow_bytes);
    *src = buf;
    *staged = buf;
    return TC_OK;
}

/* Place tensor `name` of shape [rows, cols] (rows = 0 for a vector of cols) in the dtype
 * target() picks, checking its presence and shape; random weights when there is no file.
 * With a sharding plan, only the rank's part (tc__shard_slice_of) is placed. */
static tc_status place(loader *L, const char *name, tc__shard_part part, int64_t rows, int64_t cols,
                       tc_tensor *t)
{
    const char *op = "tc_llama_load";
    tc__shard_slice sl = { .dim = -1, .rows = rows, .cols = cols };
    if (L->plan)
        sl = tc__shard_slice_of(L->plan, L->rank, part, rows, cols);
    if (!L->g)
        return place_random(L, sl.rows, sl.cols, t);
    const tc_gguf_tensor *gt = tc_gguf_tensor_find(L->g, name);
    if (!gt)
        return tc_set_error(TC_ERR_PARSE, op, "missing tensor %s", name);
    bool vec = rows == 0;
    if ((vec && (gt->n_elements != (uint64_t)cols)) ||
        (!vec &&
         (gt->n_dims != 2 || gt->dims[0] != (uint64_t)cols || gt->dims[1] != (uint64_t)rows)))
        return tc_set_error(
            TC_ERR_PARSE, op, "tensor %s has shape [%llu, %llu], want [%lld, %lld] (%s)", name,
            (unsigned long long)gt->dims[1], (unsigned long long)gt->dims[0],
            (long long)(vec ? 1 : rows), (long long)cols, tc_ggml_type_name(gt->type));
    tc_llama *m = L->m;
    tc_backend *b = m->backend;
    bool cpu = tc_backend_get_kind(b) == TC_BACKEND_CPU;
    tc_dtype native = TC_DTYPE_F32, want = target(gt->type, vec, cpu, m->act, &native);
    bool readable = tc_ggml_dtype(gt->type, &native);
    /* A Hugging Face folder's matrix left packed (tc_hf_open_packed): the GPU packs it below,
     * where it takes the whole matrix in its own dtype; otherwise the host packs it here and
     * it goes on as the file's blocks. */
    tc_gguf_tensor host_gt;
    void *host_packed = NULL;
    bool on_gpu = gt->packed && !cpu && sl.dim < 0 && readable && want == native;
    if (gt->packed && !on_gpu) {
        host_packed = tc_host_alloc(gt->bytes);
        if (!host_packed)
            return tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no host memory to pack %s", name);
        tc_status ps = tc__hfq_pack_host(gt->packed, host_packed);
        if (ps != TC_OK) {
            tc_host_free(host_packed);
            return ps;
        }
        host_gt = *gt;
        host_gt.data = host_packed;
        host_gt.packed = NULL;
        gt = &host_gt;
    }
    /* From here on: the part this model holds. */
    const void *src = gt->data;
    uint64_t src_bytes = gt->bytes, n = gt->n_elements;
    void *staged = NULL;
    tc_status st = TC_OK;
    if (sl.dim >= 0)
        TC_CHECK(st, cut(name, gt, &sl, &src, &src_bytes, &n, &staged));
    rows = sl.rows;
    cols = sl.cols;
    int64_t shape[2] = { vec ? cols : rows, cols };
    int nd = vec ? 1 : 2;
    for (int i = 0; i < L->n_fused; i++)
        if (L->fused[i].part == t) {
            if (!readable || native != want || L->fused[i].whole->dtype != want)
                st = tc_set_error(TC_ERR_INTERNAL, op, "%s: fused matrix of another dtype", name);
            else if (on_gpu)
                st = tc__hfq_pack_device(gt->packed, L->fused[i].whole, L->fused[i].row0);
            else
                st = tc__quant_upload(L->fused[i].whole, L->fused[i].row0, rows, src);
            if (st != TC_OK)
                goto done;
            goto placed;
        }
    /* A tensor already set is a row block of a fused matrix, made in this dtype. */
    bool into = t->data != NULL;
    if (into && t->dtype != want) {
        st = tc_set_error(TC_ERR_INTERNAL, op, "%s: fused matrix of another dtype", name);
        goto done;
    }
    if (on_gpu) {
        if (!into)
            st = tc_tensor_init(t, b, want, nd, shape);
        if (st == TC_OK)
            st = tc__hfq_pack_device(gt->packed, t, 0);
        if (st != TC_OK)
            goto done;
        goto placed;
    }
    /* The CPU reads a tensor in place when its elements are aligned in the file (a file may
     * declare general.alignment down to 1); otherwise it holds a copy. */
    size_t elem = tc_dtype_is_block(want) ? 1 : tc_dtype_bytes(want, 1);
    if (readable && want == native) {
        if (into)
            st = tc_tensor_copy_from_host(t, src, src_bytes);
        else if (cpu && !staged && !host_packed && (uintptr_t)src % elem == 0)
            st = tc_tensor_wrap(t, b, want, nd, shape, (void *)(uintptr_t)src);
        else
            st = tc_tensor_init_from_host(t, b, want, nd, shape, src, src_bytes);
    } else if (readable && !cpu && !tc_dtype_is_block(native)) {
        /* A float tensor of another dtype than the activations': its bytes go up as they
         * are and the GPU converts them (a host loop took 44 s over a 7B F16 file). */
        tc_tensor raw, r2, t2;
        int64_t rows2 = vec ? 1 : rows; /* tc_convert takes [rows, cols] */
        st = tc_tensor_init_from_host(&raw, b, native, nd, shape, src, src_bytes);
        if (st == TC_OK) {
            if (!into)
                st = tc_tensor_init(t, b, want, nd, shape);
            if (st == TC_OK)
                st = tc_tensor_reshape(&raw, TC_SHAPE(rows2, cols), &r2);
            if (st == TC_OK)
                st = tc_tensor_reshape(t, TC_SHAPE(rows2, cols), &t2);
            if (st == TC_OK)
                st = tc_convert(&t2, &r2);
            tc_tensor_deinit(&raw); /* in stream order, after the conversion */
        }
    } else if (!cpu && tc_ggml_is_iq(gt->type)) {
        /* The IQ family: the file's blocks go up as they are and the GPU dequantises them. */
        if (!into)
            st = tc_tensor_init(t, b, want, nd, shape);
        if (st == TC_OK)
            st = tc__iq_upload(t, (int32_t)gt->type, src, src_bytes);
    } else {
        float *f = tc_host_alloc(n * sizeof(float));
        if (!f) {
            st = tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no host memory to convert %s", name);
            goto done;
        }
        if (!tc_dequantize(gt->type, src, n, f)) {
            tc_host_free(f);
            st = tc_set_error(TC_ERR_UNSUPPORTED, op,
                              "tensor %s has type %s, which is not supported", name,
                              tc_ggml_type_name(gt->type));
            goto done;
        }
        if (want != TC_DTYPE_F32) {
            uint16_t *h = (uint16_t *)f; /* narrowing in place: element i is read before written */
            for (uint64_t i = 0; i < n; i++)
                h[i] = want == TC_DTYPE_BF16 ? tc__f32_to_bf16(f[i]) : tc__f32_to_f16(f[i]);
        }
        st = into ? tc_tensor_copy_from_host(t, f, tc_dtype_bytes(want, (int64_t)n))
                  : tc_tensor_init_from_host(t, b, want, nd, shape, f,
                                             tc_dtype_bytes(want, (int64_t)n));
        if (st == TC_OK && !cpu)
            st = tc_backend_synchronize(b); /* the staging buffer is freed next */
        tc_host_free(f);
    }
    if (st != TC_OK)
        goto done;
    if (!readable) {
        L->dequantised[gt->type]++;
        L->dequantised_file += src_bytes;
        L->dequantised_held += tc_tensor_bytes(t);
    }
placed:
    m->n_params += n;
    m->weight_bytes += tc_tensor_bytes(t);
    L->done += gt->bytes;
    if (L->opt->progress)
        L->opt->progress(L->opt->progress_ctx, L->done, L->total);
done:
fail:
    tc_host_free(staged); /* the copies above have read it (see tc_tensor_init_from_host) */
    tc_host_free(host_packed);
    return st;
}

static tc_status alloc_scratch(tc_llama *m)
{
    tc_llama_scratch *s = &m->s;
    tc_backend *b = m->backend;
    const tc_llama_config *c = &m->cfg;
    int64_t T = s->max_tokens, S = s->max_seqs, qd = (int64_t)c->n_heads * c->head_dim,
            kvd = (int64_t)c->n_kv_heads * c->head_dim;
    TC_TRY(tc_tensor_init(&s->x, b, m->act, TC_SHAPE(T, c->dim)));
    TC_TRY(tc_tensor_init(&s->h, b, m->act, TC_SHAPE(T, c->dim)));
    TC_TRY(tc_tensor_init(&s->q, b, m->act, TC_SHAPE(T, qd)));
    TC_TRY(tc_tensor_init(&s->att, b, m->act, TC_SHAPE(T, qd)));
    TC_TRY(tc_tensor_init(&s->k, b, m->act, TC_SHAPE(T, kvd)));
    TC_TRY(tc_tensor_init(&s->v, b, m->act, TC_SHAPE(T, kvd)));
    TC_TRY(tc_tensor_init(&s->o, b, m->act, TC_SHAPE(T, c->dim)));
    TC_TRY(tc_tensor_init(&s->gate, b, m->act, TC_SHAPE(T, c->ffn_dim)));
    TC_TRY(tc_tensor_init(&s->up, b, m->act, TC_SHAPE(T, c->ffn_dim)));
    bool fused_qkv = false, fused_gu = false;
    for (int l = 0; l < c->n_layers; l++) {
        fused_qkv |= m->layers[l].wqkv.data != NULL || m->layers[l].wqk.data != NULL;
        fused_gu |= m->layers[l].w_gu.data != NULL;
    }
    if (fused_qkv)
        TC_TRY(tc_tensor_init(&s->qkv, b, m->act, TC_SHAPE(T, qd + 2 * kvd)));
    if (fused_gu)
        TC_TRY(tc_tensor_init(&s->gu, b, m->act, TC_SHAPE(T, 2 * (int64_t)c->ffn_dim)));
    bool ordered = false;
    for (int l = 0; l < c->n_layers; l++) {
        const tc_llama_layer *y = &m->layers[l];
        ordered |= y->in_q.data || y->in_k.data || y->in_v.data || y->in_o.data ||
                   y->in_gate.data || y->in_up.data || y->in_down.data;
    }
    if (ordered) {
        int64_t w = c->dim > qd ? c->dim : qd;
        w = w > c->ffn_dim ? w : c->ffn_dim;
        TC_TRY(tc_tensor_init(&s->xp, b, m->act, TC_SHAPE(T, w)));
    }
    if (tc_backend_get_kind(b) == TC_BACKEND_CUDA) {
        /* Decode attention keeps partial results in the ops' workspace; sizing it now for the
         * largest batch keeps it from moving under captured graphs. The split count never
         * exceeds 32 resident blocks per SM over the batch's (sequence, kv head) pairs. */
        int sms = tc_backend_context(b)->sm_count;
        size_t need = (size_t)(S + 32 * (int64_t)sms) * (size_t)c->n_heads *
                      (size_t)(c->head_dim + 2) * sizeof(float);
        /* Products of quantised weights over many rows dequantise row tiles into it. */
        bool quant = tc_dtype_is_block(m->lm_head.dtype) || tc_dtype_is_block(m->tok_embd.dtype);
        for (int l = 0; l < c->n_layers; l++) {
            const tc_llama_layer *y = &m->layers[l];
            quant |= tc_dtype_is_block(y->wo.dtype) || tc_dtype_is_block(y->w_down.dtype) ||
                     tc_dtype_is_block(y->wq.dtype) || tc_dtype_is_block(y->w_gate.dtype);
        }
        int64_t widest = c->dim > c->ffn_dim ? c->dim : c->ffn_dim;
        widest =
            widest > (int64_t)c->n_heads * c->head_dim ? widest : (int64_t)c->n_heads * c->head_dim;
        size_t qneed = quant ? tc__quant_gemm_workspace(widest, TC_DTYPE_F32) : 0;
        need = need > qneed ? need : qneed;
        CUdeviceptr ws;
        TC_TRY(tc__backend_workspace(b, need, &ws));
    }
    TC_TRY(tc_tensor_init(&s->last, b, m->act, TC_SHAPE(S, c->dim)));
    TC_TRY(tc_tensor_init(&s->lastf, b, TC_DTYPE_F32, TC_SHAPE(S, c->dim)));
    TC_TRY(tc_tensor_init(&s->logits, b, TC_DTYPE_F32, TC_SHAPE(S, c->vocab)));
    /* The index arrays live in one buffer so that a step uploads them in one copy: ids, pos,
     * slots [T], q_start [S + 1], seq_lens, last_rows [S], block_table [S, max_blocks]. */
    int64_t W = s->max_blocks, off[8] = {
        0, T, 2 * T, 3 * T, 3 * T + S + 1, 3 * T + 2 * S + 1, 3 * T + 3 * S + 1, 3 * T + 4 * S + 2
    };
    s->index_len = off[7] + S * W;
    TC_TRY(tc_tensor_init(&s->index, b, TC_DTYPE_I32, TC_SHAPE(s->index_len)));
    int32_t *base = s->index.data;
    TC_TRY(tc_tensor_wrap(&s->ids, b, TC_DTYPE_I32, TC_SHAPE(T), base + off[0]));
    TC_TRY(tc_tensor_wrap(&s->pos, b, TC_DTYPE_I32, TC_SHAPE(T), base + off[1]));
    TC_TRY(tc_tensor_wrap(&s->slots, b, TC_DTYPE_I32, TC_SHAPE(T), base + off[2]));
    TC_TRY(tc_tensor_wrap(&s->q_start, b, TC_DTYPE_I32, TC_SHAPE(S + 1), base + off[3]));
    TC_TRY(tc_tensor_wrap(&s->seq_lens, b, TC_DTYPE_I32, TC_SHAPE(S), base + off[4]));
    TC_TRY(tc_tensor_wrap(&s->last_rows, b, TC_DTYPE_I32, TC_SHAPE(S), base + off[5]));
    TC_TRY(tc_tensor_wrap(&s->q_start2, b, TC_DTYPE_I32, TC_SHAPE(S + 1), base + off[6]));
    TC_TRY(tc_tensor_wrap(&s->block_table, b, TC_DTYPE_I32, TC_SHAPE(S, W), base + off[7]));
    size_t host_bytes = sizeof(int32_t) * (size_t)s->index_len;
    if (tc_backend_get_kind(b) == TC_BACKEND_CUDA) {
        /* Pinned, so that a pass's index upload is a plain asynchronous copy. */
        void *p = NULL;
        TC_TRY(tc_event_create(tc_backend_context(b), false, &s->host_sent));
        TC_TRY(tc_pinned_alloc(tc_backend_context(b), host_bytes, &p));
        s->host = p;
    } else {
        s->host = tc_host_alloc(host_bytes);
        if (!s->host)
            return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_llama_load",
                                "no host memory for indices");
    }
    /* Decode graphs: buckets of 1, 2, 4, 8 sequences, then multiples of 16. */
    s->n_graphs = (int32_t)(4 + (S + 15) / 16);
    s->graphs = tc_host_calloc((size_t)s->n_graphs, sizeof *s->graphs);
    if (!s->graphs)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_llama_load", "no host memory");
    return TC_OK;
}

static void drop_graphs(tc_llama *m);

/* The dtype tensor `name` will be held in, or -1 when it is missing. */
static int held_dtype(const loader *L, const char *name)
{
    if (!L->g)
        return (int)L->m->act;
    const tc_gguf_tensor *gt = tc_gguf_tensor_find(L->g, name);
    if (!gt)
        return -1;
    tc_dtype native;
    return (int)target(gt->type, false, false, L->m->act, &native);
}

/* GPTQ act-order: the order of weight `name`'s inputs ("blk.N.attn_q.in_perm" beside
 * "blk.N.attn_q.weight"), or NULL where they are in order. */
static const tc_gguf_tensor *input_order(const loader *L, const char *name)
{
    char n[80];
    size_t stem = strlen(name) - strlen(".weight"); /* (every weight's name ends so) */
    snprintf(n, sizeof n, "%.*s.in_perm", (int)stem, name);
    return L->g ? tc_gguf_tensor_find(L->g, n) : NULL;
}

/* Whether weights a and b take x's columns in the same order. */
static bool same_order(const loader *L, const char *a, const char *b)
{
    const tc_gguf_tensor *oa = input_order(L, a), *ob = input_order(L, b);
    if (!oa || !ob)
        return !oa && !ob;
    return oa->bytes == ob->bytes && !memcmp(oa->data, ob->data, oa->bytes);
}

/* Place weight `name`'s input order (k inputs) in t, where it has one (t->data stays NULL
 * otherwise). */
static tc_status place_order(loader *L, const char *name, int64_t k, tc_tensor *t)
{
    const char *op = "tc_llama_load";
    const tc_gguf_tensor *gt = input_order(L, name);
    if (!gt)
        return TC_OK;
    if (L->plan)
        return tc_set_error(TC_ERR_UNSUPPORTED, op,
                            "%s holds its inputs in GPTQ's activation order (desc_act), which "
                            "tensor parallelism does not split",
                            name);
    if (gt->type != TC_GGML_I32 || gt->n_elements != (uint64_t)k || gt->bytes != 4 * (uint64_t)k)
        return tc_set_error(TC_ERR_PARSE, op, "%s's input order is not I32 [%lld]", name,
                            (long long)k);
    const uint8_t *v = gt->data; /* (at any address: general.alignment may be 1) */
    for (int64_t i = 0; i < k; i++) {
        int32_t e;
        memcpy(&e, v + 4 * i, 4);
        if (e < 0 || e >= k)
            return tc_set_error(TC_ERR_PARSE, op, "%s's input order holds %d, outside 0..%lld",
                                name, e, (long long)(k - 1));
    }
    return tc_tensor_init_from_host(t, L->m->backend, TC_DTYPE_I32, TC_SHAPE(k), gt->data,
                                    gt->bytes);
}

/* On CUDA, a norm's weight in the order of the fused act-order matrix after it (its parts share
 * that order), so that the product normalises x gathered in that order itself. */
static tc_status norm_in_order(tc_llama *m, const tc_tensor *norm, const tc_tensor *fused,
                               const tc_tensor *order, tc_tensor *out)
{
    if (!fused->data || !order->data)
        return TC_OK;
    int64_t k = norm->shape[0];
    tc_tensor row, to;
    TC_TRY(tc_tensor_init(out, m->backend, norm->dtype, TC_SHAPE(k)));
    TC_TRY(tc_tensor_reshape(norm, TC_SHAPE(1, k), &row));
    TC_TRY(tc_tensor_reshape(out, TC_SHAPE(1, k), &to));
    return tc_gather_columns(&to, &row, order);
}

/* On CUDA, make `whole` [sum rows, cols] and parts[i] its row blocks when the n tensors
 * names[i] are held in one dtype and take x in one order; otherwise leave everything unset
 * (placed one by one). */
static tc_status fuse(loader *L, int n, const char *const *names, const int64_t *rows, int64_t cols,
                      tc_tensor *whole, tc_tensor *const *parts)
{
    tc_llama *m = L->m;
    if (tc_backend_get_kind(m->backend) != TC_BACKEND_CUDA)
        return TC_OK;
    int dt = held_dtype(L, names[0]);
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        if (dt < 0 || held_dtype(L, names[i]) != dt || !same_order(L, names[0], names[i]))
            return TC_OK;
        total += rows[i];
    }
    TC_TRY(tc_tensor_init(whole, m->backend, (tc_dtype)dt, TC_SHAPE(total, cols)));
    for (int i = 0, r = 0; i < n; r += (int)rows[i], i++) {
        if (!tc_dtype_is_block((tc_dtype)dt)) {
            TC_TRY(tc_tensor_slice(whole, 0, r, rows[i], parts[i]));
            continue;
        }
        /* Planes over the whole: the part keeps only its shape, and place() finds it here. */
        TC_TRY(tc_tensor_wrap(parts[i], m->backend, (tc_dtype)dt, TC_SHAPE(rows[i], cols), NULL));
        L->fused[L->n_fused++] = (fused_part){ parts[i], whole, r };
    }
    return TC_OK;
}

/* On CUDA, fold each layer's norm weights into the columns of the fused products after them
 * (float weights of the norm's dtype), so that a decode step spends no kernels on norms. */
static tc_status fold_norms(tc_llama *m)
{
    if (tc_backend_get_kind(m->backend) != TC_BACKEND_CUDA)
        return TC_OK;
    const tc_llama_config *c = &m->cfg;
    int folded = 0;
    for (int l = 0; l < c->n_layers; l++) {
        tc_llama_layer *y = &m->layers[l];
        tc_dtype dt = y->attn_norm.dtype;
        bool ok = y->wqkv.data && y->w_gu.data && y->wqkv.dtype == dt && y->w_gu.dtype == dt &&
                  y->ffn_norm.dtype == dt &&
                  (dt == TC_DTYPE_F32 || dt == TC_DTYPE_F16 || dt == TC_DTYPE_BF16);
        if (!ok)
            continue;
        TC_TRY(tc_scale_columns(&y->wqkv, &y->attn_norm));
        TC_TRY(tc_scale_columns(&y->w_gu, &y->ffn_norm));
        y->norms_folded = true;
        folded++;
    }
    TC_DEBUG("norm weights folded into the products of %d of %d layers", folded, c->n_layers);
    return TC_OK;
}

/* One info line naming the tensors dequantised at load, by type, and where and to what. */
static void report_dequantised(const loader *L)
{
    char types[512];
    size_t len = 0;
    uint32_t total = 0;
    for (int t = 0; t < TC_GGML_TYPE_LIMIT; t++)
        if (L->dequantised[t] && len < sizeof types) {
            len += (size_t)snprintf(types + len, sizeof types - len, "%s%u %s", total ? ", " : "",
                                    L->dequantised[t], tc_ggml_type_name((tc_ggml_type)t));
            total += L->dequantised[t];
        }
    if (!total)
        return;
    bool cpu = tc_backend_get_kind(L->m->backend) == TC_BACKEND_CPU;
    TC_INFO("%s tensor%s dequantised to %s %s (%.1f MiB in the file, %.1f MiB held)", types,
            total == 1 ? "" : "s", cpu ? "f32" : tc_dtype_name(L->m->act),
            cpu ? "on the host" : "on the GPU", (double)L->dequantised_file / 1048576.0,
            (double)L->dequantised_held / 1048576.0);
}

static tc_status load(loader *L)
{
    tc_llama *m = L->m;
    /* c: the model this loader makes (a rank's shard under a plan); G: the whole one, whose
     * shapes the file's tensors have. */
    const tc_llama_config *c = &m->cfg, *G = L->plan ? &L->plan->cfg : c;
    int64_t qd = (int64_t)c->n_heads * c->head_dim, kvd = (int64_t)c->n_kv_heads * c->head_dim;
    int64_t gqd = (int64_t)G->n_heads * G->head_dim, gkvd = (int64_t)G->n_kv_heads * G->head_dim;
    for (uint64_t i = 0; L->g && i < L->g->n_tensors; i++)
        L->total += L->g->tensors[i].bytes;
    m->layers = tc_host_calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_llama_load", "no host memory");
    TC_TRY(place(L, "token_embd.weight", TC__SHARD_VOCAB, G->vocab, c->dim, &m->tok_embd));
    for (int l = 0; l < c->n_layers; l++) {
        tc_llama_layer *y = &m->layers[l];
        char n[64], nq[64], nk[64], nv[64], ng[64], nu[64];
        snprintf(nq, sizeof nq, "blk.%d.attn_q.weight", l);
        snprintf(nk, sizeof nk, "blk.%d.attn_k.weight", l);
        snprintf(nv, sizeof nv, "blk.%d.attn_v.weight", l);
        snprintf(ng, sizeof ng, "blk.%d.ffn_gate.weight", l);
        snprintf(nu, sizeof nu, "blk.%d.ffn_up.weight", l);
        L->n_fused = 0;
        TC_TRY(fuse(L, 3, (const char *const[]){ nq, nk, nv }, (const int64_t[]){ qd, kvd, kvd },
                    c->dim, &y->wqkv, (tc_tensor *const[]){ &y->wq, &y->wk, &y->wv }));
        if (!y->wqkv.data && !c->qkv_bias)
            TC_TRY(fuse(L, 2, (const char *const[]){ nq, nk }, (const int64_t[]){ qd, kvd }, c->dim,
                        &y->wqk, (tc_tensor *const[]){ &y->wq, &y->wk }));
        TC_TRY(fuse(L, 2, (const char *const[]){ ng, nu },
                    (const int64_t[]){ c->ffn_dim, c->ffn_dim }, c->dim, &y->w_gu,
                    (tc_tensor *const[]){ &y->w_gate, &y->w_up }));
#define PLACE(field, gname, part, rows, cols)            \
    snprintf(n, sizeof n, "blk.%d." gname ".weight", l); \
    TC_TRY(place(L, n, TC__SHARD_##part, rows, cols, &y->field))
        PLACE(attn_norm, "attn_norm", WHOLE, 0, c->dim);
        PLACE(wq, "attn_q", Q, gqd, c->dim);
        PLACE(wk, "attn_k", KV, gkvd, c->dim);
        PLACE(wv, "attn_v", KV, gkvd, c->dim);
        PLACE(wo, "attn_output", O, c->dim, gqd);
        if (c->qkv_bias) {
            /* One vector, placed part by part (a fused product adds it whole). */
            TC_TRY(tc_tensor_init(&y->bqkv, m->backend, m->act, TC_SHAPE(qd + 2 * kvd)));
            TC_TRY(tc_tensor_slice(&y->bqkv, 0, 0, qd, &y->bq));
            TC_TRY(tc_tensor_slice(&y->bqkv, 0, qd, kvd, &y->bk));
            TC_TRY(tc_tensor_slice(&y->bqkv, 0, qd + kvd, kvd, &y->bv));
            snprintf(n, sizeof n, "blk.%d.attn_q.bias", l);
            TC_TRY(place(L, n, TC__SHARD_Q, 0, gqd, &y->bq));
            snprintf(n, sizeof n, "blk.%d.attn_k.bias", l);
            TC_TRY(place(L, n, TC__SHARD_KV, 0, gkvd, &y->bk));
            snprintf(n, sizeof n, "blk.%d.attn_v.bias", l);
            TC_TRY(place(L, n, TC__SHARD_KV, 0, gkvd, &y->bv));
        }
        PLACE(ffn_norm, "ffn_norm", WHOLE, 0, c->dim);
        PLACE(w_gate, "ffn_gate", FFN_OUT, G->ffn_dim, c->dim);
        PLACE(w_up, "ffn_up", FFN_OUT, G->ffn_dim, c->dim);
        PLACE(w_down, "ffn_down", FFN_IN, c->dim, G->ffn_dim);
#undef PLACE
#define ORDER(field, gname, k)                           \
    snprintf(n, sizeof n, "blk.%d." gname ".weight", l); \
    TC_TRY(place_order(L, n, k, &y->field))
        ORDER(in_q, "attn_q", c->dim);
        ORDER(in_k, "attn_k", c->dim);
        ORDER(in_v, "attn_v", c->dim);
        ORDER(in_o, "attn_output", gqd);
        ORDER(in_gate, "ffn_gate", c->dim);
        ORDER(in_up, "ffn_up", c->dim);
        ORDER(in_down, "ffn_down", G->ffn_dim);
#undef ORDER
        TC_TRY(norm_in_order(m, &y->attn_norm, &y->wqkv, &y->in_q, &y->attn_norm_in));
        TC_TRY(norm_in_order(m, &y->ffn_norm, &y->w_gu, &y->in_gate, &y->ffn_norm_in));
    }
    TC_TRY(place(L, "output_norm.weight", TC__SHARD_WHOLE, 0, c->dim, &m->out_norm));
    TC_TRY(fold_norms(m));
    if (c->tied_embeddings)
        TC_TRY(tc_tensor_slice(&m->tok_embd, 0, 0, c->vocab, &m->lm_head));
    else
        TC_TRY(place(L, "output.weight", TC__SHARD_VOCAB, G->vocab, c->dim, &m->lm_head));
    report_dequantised(L);
    return alloc_scratch(m);
}

tc_status tc_llama_load_gguf(const tc_gguf *g, tc_backend *b, const tc_llama_options *opt,
                             tc_llama **out)
{
    tc_llama_config cfg;
    *out = NULL;
    TC_TRY(tc_llama_config_from_gguf(g, &cfg));
    return tc_llama_load(g, &cfg, b, opt, out);
}

/* cuBLAS loads on a second thread while the weights are placed (see tc_backend_prepare_gemm). */
static void *prepare_gemm(void *arg)
{
    (void)tc_backend_prepare_gemm(arg);
    return NULL;
}

static tc_status create(const tc_gguf *g, uint64_t seed, const tc_llama_config *cfg,
                        const tc__shard_plan *plan, int rank, tc_backend *b,
                        const tc_llama_options *opt, tc_llama **out);

tc_status tc_llama_load(const tc_gguf *g, const tc_llama_config *cfg, tc_backend *b,
                        const tc_llama_options *opt, tc_llama **out)
{
    return create(g, 0, cfg, NULL, 0, b, opt, out);
}

tc_status tc_llama_random(const tc_llama_config *cfg, uint64_t seed, tc_backend *b,
                          const tc_llama_options *opt, tc_llama **out)
{
    return create(NULL, seed, cfg, NULL, 0, b, opt, out);
}

tc_status tc__llama_load_shard(const tc_gguf *g, uint64_t seed, const tc__shard_plan *plan,
                               int rank, tc_backend *b, const tc_llama_options *opt, tc_llama **out)
{
    return create(g, seed, &plan->rank[rank].local, plan, rank, b, opt, out);
}

static const struct preset {
    const char *name, *arch;
    int n_layers, dim, n_heads, n_kv_heads, ffn_dim, vocab, max_positions;
    double theta;
    bool tied, qkv_bias;
    double llama3_factor; /* Llama 3 rope scaling's factor; 0: none */
    int window;
} presets[] = {
    { "smollm2-135m", "llama", 30, 576, 9, 3, 1536, 49152, 8192, 100000.0, true, false, 0.0, 0 },
    { "llama3.2-1b", "llama", 16, 2048, 32, 8, 8192, 128256, 131072, 500000.0, true, false, 32.0,
      0 },
    { "llama2-7b", "llama", 32, 4096, 32, 32, 11008, 32000, 4096, 10000.0, false, false, 0.0, 0 },
    { "qwen2.5-1.5b", "qwen2", 28, 1536, 12, 2, 8960, 151936, 32768, 1000000.0, true, true, 0.0,
      0 },
    { "mistral-7b", "mistral", 32, 4096, 32, 8, 14336, 32000, 32768, 10000.0, false, false, 0.0,
      4096 },
    { "llama3.1-70b", "llama", 80, 8192, 64, 8, 28672, 128256, 131072, 500000.0, false, false, 8.0,
      0 },
};

tc_status tc_llama_config_preset(const char *name, tc_llama_config *c)
{
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        const struct preset *p = &presets[i];
        if (strcmp(name, p->name) != 0)
            continue;
        snprintf(c->arch, sizeof c->arch, "%s", p->arch);
        snprintf(c->name, sizeof c->name, "%s (random weights)", p->name);
        c->n_layers = p->n_layers;
        c->dim = p->dim;
        c->n_heads = p->n_heads;
        c->n_kv_heads = p->n_kv_heads;
        c->head_dim = p->dim / p->n_heads;
        c->ffn_dim = p->ffn_dim;
        c->vocab = p->vocab;
        c->max_positions = p->max_positions;
        c->norm_eps = 1e-5f;
        c->rope.head_dim = c->head_dim;
        c->rope.theta = p->theta;
        if (p->llama3_factor > 0) {
            c->rope.scaling = TC_ROPE_LLAMA3;
            c->rope.factor = p->llama3_factor;
            c->rope.low_freq_factor = 1.0;
            c->rope.high_freq_factor = 4.0;
            c->rope.original_max_position = 8192.0;
        }
        c->tied_embeddings = p->tied;
        c->qkv_bias = p->qkv_bias;
        c->window = p->window;
        return TC_OK;
    }
    return tc_set_error(TC_ERR_INVALID_ARGUMENT, "tc_llama_config_preset",
                        "unknown shape '%s' (known: smollm2-135m, llama3.2-1b, llama2-7b, "
                        "qwen2.5-1.5b, mistral-7b, llama3.1-70b)",
                        name);
}

/* Refuse a model whose weights cannot fit where they go, before any is placed: random
 * weights (from the configuration, a rank's own under a plan) on either backend, a whole file
 * on CUDA (on the CPU most tensors are read from the mapping). The allocator's own checks
 * remain for what this does not count. */
static tc_status check_room(const tc_llama *m, const tc_gguf *g, const tc__shard_plan *plan)
{
    bool cpu = tc_backend_get_kind(m->backend) == TC_BACKEND_CPU;
    const tc_llama_config *c = &m->cfg;
    uint64_t need, avail;
    if (!g) {
        uint64_t d = (uint64_t)c->dim, qd = (uint64_t)c->n_heads * (uint64_t)c->head_dim,
                 kvd = (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim,
                 per_layer = d * (2 * qd + 2 * kvd) + 3 * d * (uint64_t)c->ffn_dim + 2 * d +
                             (c->qkv_bias ? qd + 2 * kvd : 0),
                 params = (uint64_t)c->vocab * d * (c->tied_embeddings ? 1 : 2) +
                          (uint64_t)c->n_layers * per_layer + d;
        need = tc_dtype_bytes(m->act, (int64_t)params);
    } else if (!cpu && !plan) {
        need = tc_llama_weight_bytes(g, false, m->act);
    } else {
        return TC_OK;
    }
    if (cpu) {
        if (!tc_host_memory_available(&avail))
            return TC_OK;
    } else {
        size_t free_b = 0, total_b = 0;
        if (tc_context_mem_info(tc_backend_context(m->backend), &free_b, &total_b) != TC_OK)
            return TC_OK;
        tc_pool_stats ps;
        tc_pool_get_stats(tc_backend_pool(m->backend), &ps);
        avail = (uint64_t)free_b + (uint64_t)ps.bytes_cached;
    }
    if (need <= avail)
        return TC_OK;
    return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_llama_load",
                        "%s: its %.1f GiB of %s weights do not fit in the %.1f GiB of %s memory "
                        "available",
                        c->name, (double)need / (1 << 30), tc_dtype_name(m->act),
                        (double)avail / (1 << 30), cpu ? "host" : tc_backend_name(m->backend));
}

static tc_status create(const tc_gguf *g, uint64_t seed, const tc_llama_config *cfg,
                        const tc__shard_plan *plan, int rank, tc_backend *b,
                        const tc_llama_options *opt, tc_llama **out)
{
    *out = NULL;
    tc_llama_options defaults = { 0 };
    if (!opt)
        opt = &defaults;
    tc_llama *m = tc_host_calloc(1, sizeof *m);
    if (!m)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_llama_load", "no host memory");
    tc_status st;
    m->cfg = *cfg;
    m->backend = b;
    bool cpu = tc_backend_get_kind(b) == TC_BACKEND_CPU;
    m->act = opt->act_set ? opt->act : cpu ? TC_DTYPE_F32 : TC_DTYPE_BF16;
    if (m->act != TC_DTYPE_F32 && m->act != TC_DTYPE_F16 && m->act != TC_DTYPE_BF16) {
        st = tc_set_error(TC_ERR_INVALID_ARGUMENT, "tc_llama_load",
                          "activations must be f32, f16 or bf16");
        goto fail;
    }
    m->kv_dtype = opt->kv_fp8 ? TC_DTYPE_F8E4M3 : m->act;
    if (opt->kv_fp8 && !cpu && m->act == TC_DTYPE_F32) {
        st = tc_set_error(TC_ERR_UNSUPPORTED, "tc_llama_load",
                          "an FP8 KV cache needs f16 or bf16 activations on CUDA");
        goto fail;
    }
    tc_llama_scratch *s = &m->s;
    s->max_tokens = opt->max_tokens > 0 ? opt->max_tokens : 512;
    s->max_seqs = opt->max_seqs > 0 ? opt->max_seqs : 1;
    int64_t ctx = opt->max_context > 0
                      ? opt->max_context
                      : (m->cfg.max_positions < 8192 ? m->cfg.max_positions : 8192);
    int64_t bs = opt->block_size > 0 ? opt->block_size : 16;
    s->max_blocks = (ctx + bs - 1) / bs;
    /* Profiling times each kernel with events around its launch, which a graph replay would
     * bypass: profiled decode steps launch their kernels one by one. */
    s->no_graphs = opt->no_graphs || tc_profile_enabled();
    TC_CHECK(st, check_room(m, g, plan));
    loader L = { .g = g, .m = m, .opt = opt, .seed = seed, .plan = plan, .rank = rank };
    pthread_t warm;
    bool warming = !cpu && pthread_create(&warm, NULL, prepare_gemm, b) == 0;
    st = load(&L);
    TC_INFO("tc_llama_load: %.2f GiB of weights placed", (double)m->weight_bytes / (1 << 30));
    if (warming)
        pthread_join(warm, NULL);
    if (st != TC_OK)
        goto fail;
    *out = m;
    return TC_OK;
fail:
    tc_llama_destroy(m);
    return st;
}

void tc_llama_destroy(tc_llama *m)
{
    if (!m)
        return;
    if (m->layers)
        for (int l = 0; l < m->cfg.n_layers; l++) {
            tc_llama_layer *y = &m->layers[l];
            tc_tensor *ts[] = { &y->attn_norm,  &y->wq,       &y->wk,      &y->wv,
                                &y->wo,         &y->ffn_norm, &y->w_gate,  &y->w_up,
                                &y->w_down,     &y->wqkv,     &y->w_gu,    &y->bqkv,
                                &y->bq,         &y->bk,       &y->bv,      &y->wqk,
                                &y->in_q,       &y->in_k,     &y->in_v,    &y->in_o,
                                &y->in_gate,    &y->in_up,    &y->in_down, &y->attn_norm_in,
                                &y->ffn_norm_in };
            for (size_t i = 0; i < sizeof ts / sizeof *ts; i++)
                tc_tensor_deinit(ts[i]);
        }
    tc_host_free(m->layers);
    tc_tensor_deinit(&m->tok_embd);
    tc_tensor_deinit(&m->out_norm);
    tc_tensor_deinit(&m->lm_head);
    tc_llama_scratch *s = &m->s;
    tc_tensor *ts[] = { &s->x,       &s->h,        &s->q,         &s->att,         &s->k,
                        &s->v,       &s->o,        &s->gate,      &s->up,          &s->last,
                        &s->lastf,   &s->logits,   &s->ids,       &s->pos,         &s->slots,
                        &s->q_start, &s->seq_lens, &s->last_rows, &s->block_table, &s->index,
                        &s->qkv,     &s->gu,       &s->xp };
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++)
        tc_tensor_deinit(ts[i]);
    drop_graphs(m);
    tc_host_free(s->graphs);
    if (s->host_sent) {
        /* the last upload may still be reading the pinned buffer */
        (void)tc_event_synchronize(s->host_sent);
        tc_event_destroy(s->host_sent);
        if (s->host)
            tc_pinned_free(tc_backend_context(m->backend), s->host);
    } else {
        tc_host_free(s->host);
    }
    tc_host_free(m);
}

/* ---------------------------------------------------------------- KV cache */

uint64_t tc_kv_cache_bytes(const tc_llama *m, int64_t n_blocks, int64_t block_size)
{
    return 2ull * (uint64_t)m->cfg.n_layers *
           tc_dtype_bytes(m->kv_dtype, n_blocks * block_size * m->cfg.n_kv_heads * m->cfg.head_dim);
}

/* An FP8 cache's scales, all 1 until the first pass sets them. */
static tc_status init_scales(tc_kv_cache *kv, const tc_llama *m)
{
    int64_t n_kv = m->cfg.n_kv_heads, n = 2 * kv->n_layers * n_kv;
    kv->k_scale = tc_host_calloc((size_t)kv->n_layers, sizeof *kv->k_scale);
    kv->v_scale = tc_host_calloc((size_t)kv->n_layers, sizeof *kv->v_scale);
    float *ones = tc_host_alloc((size_t)n * sizeof(float));
    if (!kv->k_scale || !kv->v_scale || !ones) {
        tc_host_free(ones);
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_kv_cache_init", "no host memory");
    }
    for (int64_t i = 0; i < n; i++)
        ones[i] = 1.0f;
    tc_status st = tc_tensor_init_from_host(&kv->scales, m->backend, TC_DTYPE_F32, TC_SHAPE(n),
                                            ones, (size_t)n * sizeof(float));
    tc_host_free(ones);
    for (int l = 0; l < kv->n_layers && st == TC_OK; l++) {
        st = tc_tensor_slice(&kv->scales, 0, 2 * l * n_kv, n_kv, &kv->k_scale[l]);
        if (st == TC_OK)
            st = tc_tensor_slice(&kv->scales, 0, (2 * l + 1) * n_kv, n_kv, &kv->v_scale[l]);
    }
    return st;
}

tc_status tc_kv_cache_init(tc_kv_cache *kv, const tc_llama *m, int64_t n_blocks, int64_t block_size)
{
    memset(kv, 0, sizeof *kv);
    if (n_blocks < 1 || block_size < 1)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, "tc_kv_cache_init", "%lld blocks of %lld",
                            (long long)n_blocks, (long long)block_size);
    kv->n_layers = m->cfg.n_layers;
    kv->n_blocks = n_blocks;
    kv->block_size = block_size;
    kv->k = tc_host_calloc((size_t)kv->n_layers, sizeof *kv->k);
    kv->v = tc_host_calloc((size_t)kv->n_layers, sizeof *kv->v);
    if (!kv->k || !kv->v) {
        tc_kv_cache_deinit(kv);
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_kv_cache_init", "no host memory");
    }
    /* One arena for every layer's keys and values, zeroed (padding rows of a batch read it). */
    int64_t per = n_blocks * block_size * m->cfg.n_kv_heads * m->cfg.head_dim;
    tc_dtype dt = m->kv_dtype;
    tc_status st = tc_tensor_init(&kv->arena, m->backend, dt, TC_SHAPE(2 * kv->n_layers * per));
    if (st == TC_OK && tc_backend_get_kind(m->backend) == TC_BACKEND_CPU)
        memset(kv->arena.data, 0, tc_tensor_bytes(&kv->arena));
    else if (st == TC_OK)
        st = tc_stream_memset(tc_backend_stream(m->backend), (CUdeviceptr)(uintptr_t)kv->arena.data,
                              0, tc_tensor_bytes(&kv->arena));
    size_t bytes = tc_dtype_bytes(dt, per);
    for (int l = 0; l < kv->n_layers && st == TC_OK; l++) {
        char *base = (char *)kv->arena.data + 2 * (size_t)l * bytes;
        st = tc_tensor_wrap(&kv->k[l], m->backend, dt,
                            TC_SHAPE(n_blocks, block_size, m->cfg.n_kv_heads, m->cfg.head_dim),
                            base);
        if (st == TC_OK)
            st = tc_tensor_wrap(&kv->v[l], m->backend, dt,
                                TC_SHAPE(n_blocks, block_size, m->cfg.n_kv_heads, m->cfg.head_dim),
                                base + bytes);
    }
    if (st == TC_OK && dt == TC_DTYPE_F8E4M3)
        st = init_scales(kv, m);
    if (st != TC_OK)
        tc_kv_cache_deinit(kv);
    return st;
}

tc_status tc_kv_cache_copy_blocks(tc_kv_cache *kv, const int32_t *src, const int32_t *dst,
                                  int32_t n)
{
    for (int l = 0; l < kv->n_layers; l++)
        for (int32_t i = 0; i < n; i++) {
            tc_tensor *caches[2] = { &kv->k[l], &kv->v[l] };
            for (int c = 0; c < 2; c++) {
                tc_tensor from, to;
                TC_TRY(tc_tensor_slice(caches[c], 0, src[i], 1, &from));
                TC_TRY(tc_tensor_slice(caches[c], 0, dst[i], 1, &to));
                TC_TRY(tc_tensor_copy(&to, &from));
            }
        }
    return TC_OK;
}

void tc_kv_cache_deinit(tc_kv_cache *kv)
{
    if (!kv)
        return;
    tc_tensor_deinit(&kv->arena);
    tc_tensor_deinit(&kv->scales);
    tc_host_free(kv->k);
    tc_host_free(kv->v);
    tc_host_free(kv->k_scale);
    tc_host_free(kv->v_scale);
    memset(kv, 0, sizeof *kv);
}

/* ---------------------------------------------------------------- forward */

/* The first n rows of a scratch tensor [max, width]. */
static tc_tensor rows(const tc_tensor *t, int64_t n)
{
    tc_tensor v;
    tc_tensor_slice(t, 0, 0, n, &v);
    return v;
}

static tc_status check_batch(const tc_llama *m, const tc_kv_cache *kv, const tc_llama_batch *b)
{
    const char *op = "tc_llama_forward";
    const tc_llama_scratch *s = &m->s;
    if (b->n_tokens < 1 || b->n_tokens > s->max_tokens || b->n_seqs < 1 ||
        b->n_seqs > s->max_seqs || b->max_blocks < 1 || b->max_blocks > s->max_blocks)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "%d tokens of %d sequences over %d blocks exceed the model's scratch "
                            "(%lld tokens, %lld sequences, %lld blocks)",
                            b->n_tokens, b->n_seqs, b->max_blocks, (long long)s->max_tokens,
                            (long long)s->max_seqs, (long long)s->max_blocks);
    if (kv->n_layers != m->cfg.n_layers)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "the KV cache belongs to another model");
    if (b->q_start[0] != 0 || b->q_start[b->n_seqs] != b->n_tokens)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "q_start must run from 0 to n_tokens");
    for (int32_t q = 0; q < b->n_seqs; q++) {
        int32_t m_rows = b->q_start[q + 1] - b->q_start[q];
        if (m_rows < 1 || m_rows > b->seq_lens[q] ||
            (int64_t)b->seq_lens[q] > (int64_t)b->max_blocks * kv->block_size)
            return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                                "sequence %d: %d new tokens, %d cached, room for %lld", q, m_rows,
                                b->seq_lens[q], (long long)b->max_blocks * kv->block_size);
    }
    for (int32_t i = 0; i < b->n_tokens; i++)
        if (b->tokens[i] < 0 || b->tokens[i] >= m->cfg.vocab || b->positions[i] < 0 ||
            b->slots[i] >= kv->n_blocks * kv->block_size)
            return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                                "token %d: id %d, position %d or slot %d out of range", i,
                                b->tokens[i], b->positions[i], b->slots[i]);
    for (int64_t i = 0; i < (int64_t)b->n_seqs * b->max_blocks; i++)
        if (b->block_table[i] < 0 || b->block_table[i] >= kv->n_blocks)
            return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "block table entry %lld is %d",
                                (long long)i, b->block_table[i]);
    return TC_OK;
}

/* Pack a batch's index arrays into the staging buffer in the index buffer's layout, padded to
 * S >= b->n_seqs sequences (padding rows: token 0 at position 0 of a one-token context in
 * block 0, written nowhere) and a block table W wide, and upload them in one copy. */
static tc_status upload_batch(tc_llama *m, const tc_llama_batch *b, int64_t S, int64_t W)
{
    tc_llama_scratch *s = &m->s;
    if (s->host_sent)
        TC_TRY(tc_event_synchronize(s->host_sent)); /* the previous pass's copy has read host */
    int64_t Tm = s->max_tokens, Sm = s->max_seqs;
    int32_t *h = s->host, *ids = h, *pos = h + Tm, *slots = h + 2 * Tm, *qs = h + 3 * Tm,
            *lens = qs + Sm + 1, *last = lens + Sm, *qs2 = last + Sm, *table = qs2 + Sm + 1;
    memcpy(ids, b->tokens, sizeof(int32_t) * (size_t)b->n_tokens);
    memcpy(pos, b->positions, sizeof(int32_t) * (size_t)b->n_tokens);
    memcpy(slots, b->slots, sizeof(int32_t) * (size_t)b->n_tokens);
    memcpy(qs, b->q_start, sizeof(int32_t) * (size_t)(b->n_seqs + 1));
    memcpy(lens, b->seq_lens, sizeof(int32_t) * (size_t)b->n_seqs);
    for (int64_t q = 0; q < b->n_seqs; q++)
        memcpy(table + q * W, b->block_table + q * b->max_blocks,
               sizeof(int32_t) * (size_t)b->max_blocks);
    if (W > b->max_blocks)
        for (int64_t q = 0; q < b->n_seqs; q++)
            memset(table + q * W + b->max_blocks, 0, sizeof(int32_t) * (size_t)(W - b->max_blocks));
    for (int64_t q = b->n_seqs, t = b->n_tokens; q < S; q++, t++) {
        ids[t] = pos[t] = 0;
        slots[t] = -1;
        qs[q + 1] = (int32_t)t + 1;
        lens[q] = 1;
        memset(table + q * W, 0, sizeof(int32_t) * (size_t)W);
    }
    for (int64_t q = 0; q < S; q++)
        last[q] = qs[q + 1] - 1;
    /* The offsets of the sequences after the leading one-token ones, from 0 (their prompt
     * chunks' attention runs apart from the decodes). */
    int64_t D = 0;
    while (D < S && qs[D + 1] - qs[D] == 1)
        D++;
    for (int64_t q = D; q <= S; q++)
        qs2[q - D] = qs[q] - qs[D];
    size_t n = (size_t)(table + S * W - h);
    if (s->host_sent) {
        tc_stream *st = tc_backend_stream(m->backend);
        TC_TRY(
            tc_stream_copy_h2d(st, (CUdeviceptr)(uintptr_t)s->index.data, h, n * sizeof(int32_t)));
        return tc_event_record(s->host_sent, st);
    }
    tc_tensor v;
    TC_TRY(tc_tensor_slice(&s->index, 0, 0, (int64_t)n, &v));
    return tc_tensor_copy_from_host(&v, h, n * sizeof(int32_t));
}

/* A product's input: x itself, or, for a GPTQ act-order matrix (order: its in_ tensor), x's
 * columns in the order of the matrix's inputs, gathered into the scratch xp. */
static tc_status ordered(tc_llama *m, const tc_tensor *x, const tc_tensor *order, tc_tensor *xp)
{
    if (!order->data) {
        *xp = *x;
        return TC_OK;
    }
    TC_TRY(
        tc_tensor_wrap(xp, m->backend, x->dtype, TC_SHAPE(x->shape[0], x->shape[1]), m->s.xp.data));
    return tc_gather_columns(xp, x, order);
}

/* The ops of one forward pass over T rows of S sequences whose block table is W wide, on the
 * index arrays already uploaded: nothing here touches the host, so a CUDA graph can hold it.
 * With comm (a rank of a tensor-parallel model: tc__llama_pass), m holds the rank's shard and
 * the row-parallel products' parts are summed over the ranks; rank 0's part carries the
 * residual, the others' overwrite it, so that the sum is the residual plus the product. */
static tc_status run_layers(tc_llama *m, tc_kv_cache *kv, int64_t T, int64_t S, int64_t W,
                            tc_comm *comm)
{
    const tc_llama_config *c = &m->cfg;
    tc_llama_scratch *s = &m->s;
    bool decode = T == S;
    tc_tensor table;
    TC_TRY(tc_tensor_wrap(&table, m->backend, TC_DTYPE_I32, TC_SHAPE(S, W), s->block_table.data));
    tc_tensor x = rows(&s->x, T), h = rows(&s->h, T), q = rows(&s->q, T), k = rows(&s->k, T),
              v = rows(&s->v, T), att = rows(&s->att, T), o = rows(&s->o, T),
              gate = rows(&s->gate, T), up = rows(&s->up, T);
    tc_tensor ids = rows(&s->ids, T), pos = rows(&s->pos, T), slots = rows(&s->slots, T),
              qs = rows(&s->q_start, S + 1), lens = rows(&s->seq_lens, S),
              last_rows = rows(&s->last_rows, S);
    tc_tensor q3, k3, v3, att3, fq3, fk3, fv3, gq3, gk3, qkv = { 0 }, qk = { 0 }, gu = { 0 }, fg,
                                                         fu, xp;
    tc_status st;
    TC_CHECK(st, tc_tensor_reshape(&q, TC_SHAPE(T, c->n_heads, c->head_dim), &q3));
    TC_CHECK(st, tc_tensor_reshape(&k, TC_SHAPE(T, c->n_kv_heads, c->head_dim), &k3));
    TC_CHECK(st, tc_tensor_reshape(&v, TC_SHAPE(T, c->n_kv_heads, c->head_dim), &v3));
    TC_CHECK(st, tc_tensor_reshape(&att, TC_SHAPE(T, c->n_heads, c->head_dim), &att3));
    if (s->qkv.data) {
        /* The fused product's heads: q, then k, then v. */
        tc_tensor all3;
        qkv = rows(&s->qkv, T);
        TC_CHECK(st, tc_tensor_reshape(
                         &qkv, TC_SHAPE(T, c->n_heads + 2 * c->n_kv_heads, c->head_dim), &all3));
        TC_CHECK(st, tc_tensor_slice(&all3, 1, 0, c->n_heads, &fq3));
        TC_CHECK(st, tc_tensor_slice(&all3, 1, c->n_heads, c->n_kv_heads, &fk3));
        TC_CHECK(st, tc_tensor_slice(&all3, 1, c->n_heads + c->n_kv_heads, c->n_kv_heads, &fv3));
        /* The same buffer's start as q and k's fused product, [T, n_heads + n_kv_heads]. */
        TC_CHECK(st, tc_tensor_wrap(&qk, m->backend, m->act,
                                    TC_SHAPE(T, (c->n_heads + c->n_kv_heads) * c->head_dim),
                                    s->qkv.data));
        TC_CHECK(st, tc_tensor_reshape(&qk, TC_SHAPE(T, c->n_heads + c->n_kv_heads, c->head_dim),
                                       &all3));
        TC_CHECK(st, tc_tensor_slice(&all3, 1, 0, c->n_heads, &gq3));
        TC_CHECK(st, tc_tensor_slice(&all3, 1, c->n_heads, c->n_kv_heads, &gk3));
    }
    if (s->gu.data) {
        gu = rows(&s->gu, T);
        TC_CHECK(st, tc_tensor_slice(&gu, 1, 0, c->ffn_dim, &fg));
        TC_CHECK(st, tc_tensor_slice(&gu, 1, c->ffn_dim, c->ffn_dim, &fu));
    }
    float scale = 1.0f / sqrtf((float)c->head_dim);
    /* Leading sequences with one new token each decode; the rest are prompt chunks. A batch
     * of both runs each kind's attention kernel on its own rows. */
    const int32_t *hq = s->host + s->max_tokens * 3;
    int64_t D = 0;
    while (D < S && hq[D + 1] - hq[D] == 1)
        D++;
    tc_tensor dq, datt, dtable, dlens, pq, patt, ptable, plens, pqs;
    if (D > 0 && D < S) {
        TC_CHECK(st, tc_tensor_slice(&table, 0, 0, D, &dtable));
        TC_CHECK(st, tc_tensor_slice(&lens, 0, 0, D, &dlens));
        TC_CHECK(st, tc_tensor_slice(&table, 0, D, S - D, &ptable));
        TC_CHECK(st, tc_tensor_slice(&lens, 0, D, S - D, &plens));
        pqs = rows(&s->q_start2, S - D + 1);
    }

    /* Few rows (decode steps): each sublayer's residual add is fused into its last
     * matrix-vector product, and SwiGLU into the gate/up one (tc_linear), so x always holds the
     * residual stream. More rows: separate ops, with the residual add of each sublayer's output
     * fused into the next norm. */
    bool fused = T <= TC_MATVEC_MAX_ROWS;
    /* (On CUDA, 2 to 8 rows over K-quant weights run as more rows do: the batched kernels
     * outrun the 2-8 row ones there by more than the separate SwiGLU and adds cost. H200, 7B
     * Q4_K_M, 512 + 128 tokens: 5 sequences 1,131-1,133 -> 1,136-1,139 tokens/s, 6 1,305 ->
     * 1,337, 8 1,504 -> 1,613; from 2 rows instead of 5, 2 / 3 / 4 sequences 572-578 / 806-808
     * / 1,015-1,016 -> 587-588 / 818-823 / 1,045-1,046; AWQ's q4_1_g64 at 8 2,218 -> 2,007, so
     * not for those. The batched kernels take 16-bit x only. Two rows over K-quants on Hopper
     * take the two-row integer kernels with everything fused, as one row does: 585-590 ->
     * 721-722 at 2 sequences.) */
    const tc_tensor *ffn = m->layers[0].w_gu.data ? &m->layers[0].w_gu : &m->layers[0].w_gate;
    if (fused && tc_backend_get_kind(m->backend) == TC_BACKEND_CUDA && m->act != TC_DTYPE_F32 &&
        ffn->data && tc_dtype_is_block(ffn->dtype) &&
        T >= tc__quant_batch_from(m->backend, ffn->dtype, m->act))
        fused = false;
    const tc_linear_opts add = { .accumulate = true }, swiglu = { .swiglu = true },
                         normed = { .rms_norm = true, .norm_eps = c->norm_eps },
                         normed_swiglu = { .swiglu = true,
                                           .rms_norm = true,
                                           .norm_eps = c->norm_eps };
    /* Decode attention runs right after tc_rope_store (or the product that stores), which
     * writes only each sequence's newest cached row (the lengths and table come by copies
     * before the pass). */
    const tc_attention_opts after_store = { .fresh_rows = 1, .window = c->window };
    /* An FP8 cache's first pass sets its scales from its own rows (rotated keys, values) before
     * they are stored. */
    bool fp8 = kv->k_scale != NULL, calibrate = fp8 && !kv->scaled;
    /* A rank's rows of the row-parallel products (its heads' share of o, its columns' of the
     * feed-forward): the residual add only on rank 0, every rank's parts summed. */
    bool lead = !comm || comm->rank == 0;
    const tc_linear_opts *part = lead ? &add : NULL;
    /* (a rank's embedding rows are its vocabulary's: zero for the other ranks' tokens) */
    TC_CHECK(st, tc_embedding(&x, &m->tok_embd, &ids));
    if (comm)
        TC_CHECK(st, tc_comm_all_reduce_sum(comm, &x));
    for (int l = 0; l < c->n_layers; l++) {
        tc_llama_layer *y = &m->layers[l];
        /* the scales for stores (tc_*_ex) and for reads */
        tc_attention_opts kvo = { .k_scale = fp8 ? &kv->k_scale[l] : NULL,
                                  .v_scale = fp8 ? &kv->v_scale[l] : NULL,
                                  .fresh_rows = -1,
                                  .window = c->window };
        tc_attention_opts dec = kvo;
        dec.fresh_rows = after_store.fresh_rows;
        /* With the norms folded, a decode step's products normalise x themselves; so do those
         * of quantised weights on CUDA, given the norms' weights (one row of bf16 x in one
         * kernel, other rows after a norm into scratch: tc_linear). */
        bool quant_in =
            tc_backend_get_kind(m->backend) == TC_BACKEND_CUDA && y->w_gu.data &&
            tc_dtype_is_block(y->w_gu.dtype) &&
            (y->wqkv.data ? tc_dtype_is_block(y->wqkv.dtype)
                          : tc_dtype_is_block(y->wq.dtype) && tc_dtype_is_block(y->wk.dtype) &&
                                tc_dtype_is_block(y->wv.dtype));
        /* GPTQ act-order matrices take x's columns in their order: the fused ones gathered
         * from x, normalising in the product with the norm's weight in the same order; parts
         * of other orders after a norm into h. */
        bool ordered_in =
            y->in_q.data || y->in_k.data || y->in_v.data || y->in_gate.data || y->in_up.data;
        bool ordered_fused = y->wqkv.data && y->w_gu.data &&
                             (!y->in_q.data || y->attn_norm_in.data) &&
                             (!y->in_gate.data || y->ffn_norm_in.data);
        bool in_product = fused && (y->norms_folded || quant_in) && (!ordered_in || ordered_fused);
        const tc_tensor *attn_norm = y->norms_folded ? NULL : &y->attn_norm,
                        *ffn_norm = y->norms_folded ? NULL : &y->ffn_norm;
        tc_linear_opts normed_l = normed, normed_swiglu_l = normed_swiglu;
        normed_l.norm_weight = y->in_q.data ? &y->attn_norm_in : attn_norm;
        normed_swiglu_l.norm_weight = y->in_gate.data ? &y->ffn_norm_in : ffn_norm;
        tc_tensor xq = x, xg = x; /* (x of the fused products, in their inputs' order) */
        if (!in_product && (fused || l == 0))
            TC_CHECK(st, tc_rmsnorm(&h, NULL, &x, attn_norm, c->norm_eps));
        else if (!in_product)
            TC_CHECK(st, tc_rmsnorm(&h, &x, &o, attn_norm, c->norm_eps));
        tc_tensor *lq = &q3, *lk = &k3, *lv = &v3;
        bool stored = false;
        /* q, k and v biases (Qwen2) are added after the product, before the rotation; an FP8
         * cache's first pass sets its scales between the rotation and the store. */
        if (in_product && y->in_q.data) {
            TC_CHECK(st, ordered(m, &x, &y->in_q, &xp));
            xq = xp;
        }
        if (in_product && y->wqkv.data && !c->qkv_bias && !calibrate) {
            /* Rotated and stored by the product itself where it can (one row on CUDA). */
            TC_CHECK(st, tc_linear_rope_store_ex(&qkv, &xq, &y->wqkv, &normed_l, &pos, &c->rope,
                                                 &kv->k[l], &kv->v[l], &slots, &kvo));
            stored = true;
            lq = &fq3;
            lk = &fk3;
            lv = &fv3;
        } else if (y->wqkv.data) {
            if (in_product) {
                TC_CHECK(st, tc_linear(&qkv, &xq, &y->wqkv, &normed_l));
            } else {
                TC_CHECK(st, ordered(m, &h, &y->in_q, &xp));
                TC_CHECK(st, tc_matmul(&qkv, &xp, &y->wqkv));
            }
            if (c->qkv_bias)
                TC_CHECK(st, tc_add_bias(&qkv, &y->bqkv));
            lq = &fq3;
            lk = &fk3;
            lv = &fv3;
        } else if (y->wqk.data && in_product) {
            /* q and k of one type beside v of another (Q4_K_M's Q4_K and Q6_K): both normalise
             * x, in one launch where the types have a kernel for it (no biases: wqk is fused
             * only without them). */
            TC_CHECK(st, tc_linear_pair(&qk, &v, &x, &y->wqk, &y->wv, &normed_l));
            lq = &gq3;
            lk = &gk3;
        } else {
            /* (q, k and v of different types: in a decode step each product normalises x; q
             * and k in one where they share a type; over 33-64 rows on Hopper q/k's product and
             * v's in one launch where a kernel takes their types, as in Q4_K_M's and Q5_K_M's
             * more-bits layers) */
            bool paired = !in_product && y->wqk.data && !y->in_q.data && !y->in_v.data &&
                          tc__quant_batch_pair_fits(&h, &y->wqk, &y->wv);
            if (paired) {
                TC_CHECK(st, tc__quant_batch_pair(&qk, &v, &h, &y->wqk, &y->wv));
                lq = &gq3;
                lk = &gk3;
            } else if (y->wqk.data) {
                if (in_product) {
                    TC_CHECK(st, tc_linear(&qk, &x, &y->wqk, &normed_l));
                } else {
                    TC_CHECK(st, ordered(m, &h, &y->in_q, &xp));
                    TC_CHECK(st, tc_matmul(&qk, &xp, &y->wqk));
                }
                lq = &gq3;
                lk = &gk3;
            } else if (in_product) {
                TC_CHECK(st, tc_linear(&q, &x, &y->wq, &normed_l));
                TC_CHECK(st, tc_linear(&k, &x, &y->wk, &normed_l));
            } else {
                TC_CHECK(st, ordered(m, &h, &y->in_q, &xp));
                TC_CHECK(st, tc_matmul(&q, &xp, &y->wq));
                TC_CHECK(st, ordered(m, &h, &y->in_k, &xp));
                TC_CHECK(st, tc_matmul(&k, &xp, &y->wk));
            }
            if (in_product) {
                TC_CHECK(st, tc_linear(&v, &x, &y->wv, &normed_l));
            } else if (!paired) {
                TC_CHECK(st, ordered(m, &h, &y->in_v, &xp));
                TC_CHECK(st, tc_matmul(&v, &xp, &y->wv));
            }
            if (c->qkv_bias) {
                TC_CHECK(st, tc_add_bias(&q, &y->bq));
                TC_CHECK(st, tc_add_bias(&k, &y->bk));
                TC_CHECK(st, tc_add_bias(&v, &y->bv));
            }
        }
        if (calibrate) {
            TC_CHECK(st, tc_rope(lq, lk, &pos, &c->rope));
            TC_CHECK(st, tc_kv_scales(&kv->k_scale[l], &kv->v_scale[l], lk, lv));
            TC_CHECK(st, tc_attention_store_ex(&kv->k[l], &kv->v[l], lk, lv, &slots, &kvo));
        } else if (!stored) {
            TC_CHECK(st, tc_rope_store_ex(lq, lk, lv, &pos, &c->rope, &kv->k[l], &kv->v[l], &slots,
                                          &kvo));
        }
        if (decode)
            TC_CHECK(st, tc_attention_decode_ex(&att3, lq, &kv->k[l], &kv->v[l], &table, &lens,
                                                scale, &dec));
        else if (D == 0)
            TC_CHECK(st, tc_attention_prefill_ex(&att3, lq, &kv->k[l], &kv->v[l], &table, &lens,
                                                 &qs, scale, &kvo));
        else {
            TC_CHECK(st, tc_tensor_slice(lq, 0, 0, D, &dq));
            TC_CHECK(st, tc_tensor_slice(&att3, 0, 0, D, &datt));
            TC_CHECK(st, tc_tensor_slice(lq, 0, D, T - D, &pq));
            TC_CHECK(st, tc_tensor_slice(&att3, 0, D, T - D, &patt));
            TC_CHECK(st, tc_attention_decode_ex(&datt, &dq, &kv->k[l], &kv->v[l], &dtable, &dlens,
                                                scale, &dec));
            TC_CHECK(st, tc_attention_prefill_ex(&patt, &pq, &kv->k[l], &kv->v[l], &ptable, &plens,
                                                 &pqs, scale, &kvo));
        }
        if (fused) {
            TC_CHECK(st, ordered(m, &att, &y->in_o, &xp));
            TC_CHECK(st, tc_linear(&x, &xp, &y->wo, part));
            if (comm)
                TC_CHECK(st, tc_comm_all_reduce_sum(comm, &x));
            if (in_product) {
                if (y->in_gate.data) {
                    TC_CHECK(st, ordered(m, &x, &y->in_gate, &xp));
                    xg = xp;
                }
                TC_CHECK(st, tc_linear(&gate, &xg, &y->w_gu, &normed_swiglu_l));
            } else {
                TC_CHECK(st, tc_rmsnorm(&h, NULL, &x, ffn_norm, c->norm_eps));
                if (y->w_gu.data) {
                    TC_CHECK(st, ordered(m, &h, &y->in_gate, &xp));
                    TC_CHECK(st, tc_linear(&gate, &xp, &y->w_gu, &swiglu));
                } else {
                    TC_CHECK(st, ordered(m, &h, &y->in_gate, &xp));
                    TC_CHECK(st, tc_matmul(&gate, &xp, &y->w_gate));
                    TC_CHECK(st, ordered(m, &h, &y->in_up, &xp));
                    TC_CHECK(st, tc_matmul(&up, &xp, &y->w_up));
                    TC_CHECK(st, tc_swiglu(&gate, &gate, &up));
                }
            }
            TC_CHECK(st, ordered(m, &gate, &y->in_down, &xp));
            TC_CHECK(st, tc_linear(&x, &xp, &y->w_down, part));
            if (comm)
                TC_CHECK(st, tc_comm_all_reduce_sum(comm, &x));
            continue;
        }
        TC_CHECK(st, ordered(m, &att, &y->in_o, &xp));
        TC_CHECK(st, tc_matmul(&o, &xp, &y->wo));
        if (comm)
            TC_CHECK(st, tc_comm_all_reduce_sum(comm, &o));
        TC_CHECK(st, tc_rmsnorm(&h, &x, &o, ffn_norm, c->norm_eps));
        if (y->w_gu.data) {
            TC_CHECK(st, ordered(m, &h, &y->in_gate, &xp));
            TC_CHECK(st, tc_matmul(&gu, &xp, &y->w_gu));
            TC_CHECK(st, tc_swiglu(&gate, &fg, &fu));
        } else {
            TC_CHECK(st, ordered(m, &h, &y->in_gate, &xp));
            TC_CHECK(st, tc_matmul(&gate, &xp, &y->w_gate));
            TC_CHECK(st, ordered(m, &h, &y->in_up, &xp));
            TC_CHECK(st, tc_matmul(&up, &xp, &y->w_up));
            TC_CHECK(st, tc_swiglu(&gate, &gate, &up));
        }
        TC_CHECK(st, ordered(m, &gate, &y->in_down, &xp));
        TC_CHECK(st, tc_matmul(&o, &xp, &y->w_down));
        if (comm)
            TC_CHECK(st, tc_comm_all_reduce_sum(comm, &o));
    }
    kv->scaled |= calibrate; /* (before a graph captures the next pass) */
    TC_CHECK(st, tc_rmsnorm(&h, fused ? NULL : &x, fused ? &x : &o, &m->out_norm, c->norm_eps));
    /* Only each sequence's last row needs logits: gather those rows (the embedding op over the
     * hidden states as a table; a decode step's rows are all last rows), project to f32
     * logits: more than TC_MATVEC_MAX_ROWS 16-bit rows in one cuBLAS product with f32 output
     * (over quantised weights every count of 16-bit rows in their kernels with f32 output,
     * over 16-bit ones 2 or more rows), else widened to f32 first (the matrix-vector kernel
     * reads the output projection once per TC_MATVEC_MAX_ROWS rows: at 256 rows of
     * Llama-2-7B's shape that took 9.2 of a 21 ms decode step on the H100; 2-8 rows on the f32
     * kernel took 214 us of a 7B Q4_K_M step, its Q6_K output matrix read at 0.5 TB/s, and 306
     * us of a Llama-3.2-1B bf16 step at 4 rows). */
    tc_tensor lst = rows(&s->last, S), lstf = rows(&s->lastf, S), logits = rows(&s->logits, S);
    if (decode)
        lst = h;
    else
        TC_CHECK(st, tc_embedding(&lst, &h, &last_rows));
    if (m->act != TC_DTYPE_F32 &&
        (S > TC_MATVEC_MAX_ROWS || tc_dtype_is_block(m->lm_head.dtype) ||
         (S >= 2 && m->lm_head.dtype == m->act)) &&
        tc__matmul_widen(&logits, &lst, &m->lm_head) == TC_OK)
        return TC_OK;
    if (m->act != TC_DTYPE_F32)
        TC_CHECK(st, tc_convert(&lstf, &lst));
    else
        lstf = lst;
    TC_CHECK(st, tc_matmul(&logits, &lstf, &m->lm_head));
    return TC_OK;
fail:
    return st;
}

/* Decode batches of up to 8 sequences round up to a power of two, larger ones to a multiple
 * of 16: the graph of that bucket serves them. */
static int32_t bucket_of(int64_t n, int64_t *size)
{
    if (n <= 8) {
        int32_t i = 0;
        for (*size = 1; *size < n; *size *= 2)
            i++;
        return i;
    }
    *size = (n + 15) / 16 * 16;
    return (int32_t)(3 + *size / 16);
}

static void drop_graphs(tc_llama *m)
{
    for (int32_t i = 0; m->s.graphs && i < m->s.n_graphs; i++)
        if (m->s.graphs[i].exec) {
            tc_cuGraphExecDestroy((CUgraphExec)m->s.graphs[i].exec);
            m->s.graphs[i].exec = NULL;
        }
}

/* Capture the layers of a decode step of S (padded) sequences as a graph (a rank's
 * collectives included). */
static tc_status capture(tc_llama *m, tc_kv_cache *kv, int64_t S, struct tc_llama_graph *g,
                         tc_comm *comm)
{
    CUstream cs = tc_stream_handle(tc_backend_stream(m->backend));
    TC_TRY(tc_cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    tc_status st = run_layers(m, kv, S, S, m->s.max_blocks, comm);
    CUgraph graph = NULL;
    tc_status end = tc_cuStreamEndCapture(cs, &graph);
    if (st == TC_OK)
        st = end;
    CUgraphExec exec = NULL;
    if (st == TC_OK)
        st = tc_cuGraphInstantiateWithFlags(&exec, graph, 0);
    if (graph)
        tc_cuGraphDestroy(graph);
    if (st != TC_OK)
        return st;
    g->exec = exec;
    g->generation = tc_backend_workspace_generation(m->backend);
    g->kv = kv->arena.data;
    m->s.graph_captures++;
    return TC_OK;
}

/* Check a batch and upload its index arrays; a decode step on CUDA is padded to its bucket,
 * whose graph will run it (s->staged). */
tc_status tc__llama_prepare(tc_llama *m, tc_kv_cache *kv, const tc_llama_batch *b)
{
    TC_TRY(check_batch(m, kv, b));
    tc_llama_scratch *s = &m->s;
    bool cuda = tc_backend_get_kind(m->backend) == TC_BACKEND_CUDA;
    if (cuda)
        TC_TRY(tc_context_make_current(tc_backend_context(m->backend)));
    s->staged = -1;
    if (!cuda || s->no_graphs || b->n_tokens != b->n_seqs)
        return upload_batch(m, b, b->n_seqs, b->max_blocks);
    int64_t padded;
    int32_t i = bucket_of(b->n_seqs, &padded);
    if (padded > s->max_seqs)
        padded = s->max_seqs;
    TC_TRY(upload_batch(m, b, padded, s->max_blocks));
    s->staged = i;
    s->staged_rows = padded;
    return TC_OK;
}

/* The pass over the staged batch, op by op or as its bucket's graph: captured the first time
 * (after one ordinary run, which also warms cuBLAS and sizes the ops' workspace) and again
 * when the ops' workspace or the KV cache has moved since. With comm, every rank of a
 * tensor-parallel model makes the same choices, so that their collectives pair up. */
tc_status tc__llama_pass(tc_llama *m, tc_kv_cache *kv, const tc_llama_batch *b, tc_comm *comm,
                         tc_tensor **logits)
{
    tc_llama_scratch *s = &m->s;
    s->logits_rows = rows(&s->logits, b->n_seqs);
    *logits = &s->logits_rows;
    if (s->staged < 0)
        return run_layers(m, kv, b->n_tokens, b->n_seqs, b->max_blocks, comm);
    int64_t padded = s->staged_rows;
    struct tc_llama_graph *g = &s->graphs[s->staged];
    if (g->exec &&
        (g->generation != tc_backend_workspace_generation(m->backend) || g->kv != kv->arena.data)) {
        tc_cuGraphExecDestroy((CUgraphExec)g->exec);
        g->exec = NULL;
    }
    if (!g->exec) {
        TC_TRY(run_layers(m, kv, padded, padded, s->max_blocks, comm));
        /* A capture that fails (an op the driver cannot capture) leaves eager runs. */
        if (capture(m, kv, padded, g, comm) != TC_OK) {
            TC_WARN("decode graphs are off: capture failed: %s", tc_last_error());
            s->no_graphs = true;
        }
        return TC_OK;
    }
    s->graph_launches++;
    return tc_cuGraphLaunch((CUgraphExec)g->exec, tc_stream_handle(tc_backend_stream(m->backend)));
}

tc_status tc_llama_forward(tc_llama *m, tc_kv_cache *kv, const tc_llama_batch *b,
                           tc_tensor **logits)
{
    TC_TRY(tc__llama_prepare(m, kv, b));
    return tc__llama_pass(m, kv, b, NULL, logits);
}

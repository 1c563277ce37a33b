/* Llama: configuration and weights from GGUF (llama.cpp's tensor names), and the forward pass
 * of Touvron et al. 2023 (pre-norm RMSNorm, rotary attention with grouped KV heads, SwiGLU
 * feed-forward) through the ops layer, so that one code path runs on the CPU and on CUDA. */
#include "model/llama.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "model/quant.h"
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
    const float *f = t->data;
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
    if (strcmp(c->arch, "llama") != 0 && strcmp(c->arch, "mistral") != 0)
        return tc_set_error(TC_ERR_UNSUPPORTED, "tc_llama",
                            "unsupported architecture '%s' (supported: llama, mistral)", c->arch);
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
    if (c->dim % c->n_heads)
        return tc_set_error(TC_ERR_PARSE, "tc_llama", "dimension %d is not a multiple of %d heads",
                            c->dim, c->n_heads);
    c->head_dim = c->dim / c->n_heads;
    snprintf(key, sizeof key, "%s.attention.key_length", a);
    if (tc_gguf_get_i64(g, key, &v) && v != c->head_dim)
        return tc_set_error(TC_ERR_UNSUPPORTED, "tc_llama", "head size %lld differs from %d",
                            (long long)v, c->head_dim);
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
    /* llama.cpp's converter permutes the rows of q and k so that rotating adjacent pairs
     * equals Hugging Face's rotate_half on the original weights. */
    c->rope.interleaved = true;
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

typedef struct loader {
    const tc_gguf *g;
    tc_llama *m;
    const tc_llama_options *opt;
    uint64_t done, total;
} loader;

static bool kernel_reads(tc_ggml_type t, tc_dtype *dt)
{
    switch (t) {
    case TC_GGML_F32: *dt = TC_DTYPE_F32; return true;
    case TC_GGML_F16: *dt = TC_DTYPE_F16; return true;
    case TC_GGML_BF16: *dt = TC_DTYPE_BF16; return true;
    case TC_GGML_Q8_0: *dt = TC_DTYPE_Q8_0; return true;
    case TC_GGML_Q4_0: *dt = TC_DTYPE_Q4_0; return true;
    default: return false;
    }
}

/* The dtype a tensor is held in: vectors take the activation dtype; matrices keep a type the
 * kernels read (on CUDA, float types become the activation dtype so that cuBLAS can run
 * them); others are dequantised, to f32 on the CPU and to the activation dtype on CUDA. */
static tc_dtype target(tc_ggml_type type, bool vec, bool cpu, tc_dtype act, tc_dtype *native)
{
    bool readable = kernel_reads(type, native);
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

/* Place tensor `name` of shape [rows, cols] (rows = 0 for a vector of cols) in the dtype
 * target() picks, checking its presence and shape. */
static tc_status place(loader *L, const char *name, int64_t rows, int64_t cols, tc_tensor *t)
{
    const char *op = "tc_llama_load";
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
    bool readable = kernel_reads(gt->type, &native);
    int64_t shape[2] = { vec ? cols : rows, cols };
    int nd = vec ? 1 : 2;
    tc_status st = TC_OK;
    if (readable && want == native) {
        if (cpu)
            st = tc_tensor_wrap(t, b, want, nd, shape, (void *)(uintptr_t)gt->data);
        else
            st = tc_tensor_init_from_host(t, b, want, nd, shape, gt->data, gt->bytes);
    } else {
        uint64_t n = gt->n_elements;
        float *f = tc_host_alloc(n * sizeof(float));
        if (!f)
            return tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no host memory to convert %s", name);
        if (!tc_dequantize(gt->type, gt->data, n, f)) {
            tc_host_free(f);
            return tc_set_error(TC_ERR_UNSUPPORTED, op,
                                "tensor %s has type %s, which is not supported", name,
                                tc_ggml_type_name(gt->type));
        }
        if (want != TC_DTYPE_F32) {
            uint16_t *h = (uint16_t *)f; /* narrowing in place: element i is read before written */
            for (uint64_t i = 0; i < n; i++)
                h[i] = want == TC_DTYPE_BF16 ? tc__f32_to_bf16(f[i]) : tc__f32_to_f16(f[i]);
        }
        st = tc_tensor_init_from_host(t, b, want, nd, shape, f, tc_dtype_bytes(want, (int64_t)n));
        if (st == TC_OK && !cpu)
            st = tc_backend_synchronize(b); /* the staging buffer is freed next */
        tc_host_free(f);
    }
    if (st != TC_OK)
        return st;
    m->n_params += gt->n_elements;
    m->weight_bytes += tc_tensor_bytes(t);
    L->done += gt->bytes;
    if (L->opt->progress)
        L->opt->progress(L->opt->progress_ctx, L->done, L->total);
    return TC_OK;
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
    TC_TRY(tc_tensor_init(&s->last, b, m->act, TC_SHAPE(S, c->dim)));
    TC_TRY(tc_tensor_init(&s->lastf, b, TC_DTYPE_F32, TC_SHAPE(S, c->dim)));
    TC_TRY(tc_tensor_init(&s->logits, b, TC_DTYPE_F32, TC_SHAPE(S, c->vocab)));
    TC_TRY(tc_tensor_init(&s->ids, b, TC_DTYPE_I32, TC_SHAPE(T)));
    TC_TRY(tc_tensor_init(&s->pos, b, TC_DTYPE_I32, TC_SHAPE(T)));
    TC_TRY(tc_tensor_init(&s->slots, b, TC_DTYPE_I32, TC_SHAPE(T)));
    TC_TRY(tc_tensor_init(&s->q_start, b, TC_DTYPE_I32, TC_SHAPE(S + 1)));
    TC_TRY(tc_tensor_init(&s->seq_lens, b, TC_DTYPE_I32, TC_SHAPE(S)));
    TC_TRY(tc_tensor_init(&s->last_rows, b, TC_DTYPE_I32, TC_SHAPE(S)));
    TC_TRY(tc_tensor_init(&s->block_table, b, TC_DTYPE_I32, TC_SHAPE(S, s->max_blocks)));
    s->host = tc_host_alloc(sizeof(int32_t) * (size_t)S);
    if (!s->host)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_llama_load", "no host memory for indices");
    return TC_OK;
}

static tc_status load(loader *L)
{
    tc_llama *m = L->m;
    const tc_llama_config *c = &m->cfg;
    int64_t qd = (int64_t)c->n_heads * c->head_dim, kvd = (int64_t)c->n_kv_heads * c->head_dim;
    for (uint64_t i = 0; i < L->g->n_tensors; i++)
        L->total += L->g->tensors[i].bytes;
    m->layers = tc_host_calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_llama_load", "no host memory");
    TC_TRY(place(L, "token_embd.weight", c->vocab, c->dim, &m->tok_embd));
    for (int l = 0; l < c->n_layers; l++) {
        tc_llama_layer *y = &m->layers[l];
        char n[64];
#define PLACE(field, gname, rows, cols)                  \
    snprintf(n, sizeof n, "blk.%d." gname ".weight", l); \
    TC_TRY(place(L, n, rows, cols, &y->field))
        PLACE(attn_norm, "attn_norm", 0, c->dim);
        PLACE(wq, "attn_q", qd, c->dim);
        PLACE(wk, "attn_k", kvd, c->dim);
        PLACE(wv, "attn_v", kvd, c->dim);
        PLACE(wo, "attn_output", c->dim, qd);
        PLACE(ffn_norm, "ffn_norm", 0, c->dim);
        PLACE(w_gate, "ffn_gate", c->ffn_dim, c->dim);
        PLACE(w_up, "ffn_up", c->ffn_dim, c->dim);
        PLACE(w_down, "ffn_down", c->dim, c->ffn_dim);
#undef PLACE
    }
    TC_TRY(place(L, "output_norm.weight", 0, c->dim, &m->out_norm));
    if (c->tied_embeddings)
        TC_TRY(tc_tensor_slice(&m->tok_embd, 0, 0, c->vocab, &m->lm_head));
    else
        TC_TRY(place(L, "output.weight", c->vocab, c->dim, &m->lm_head));
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

tc_status tc_llama_load(const tc_gguf *g, const tc_llama_config *cfg, tc_backend *b,
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
    tc_llama_scratch *s = &m->s;
    s->max_tokens = opt->max_tokens > 0 ? opt->max_tokens : 512;
    s->max_seqs = opt->max_seqs > 0 ? opt->max_seqs : 1;
    int64_t ctx = opt->max_context > 0
                      ? opt->max_context
                      : (m->cfg.max_positions < 8192 ? m->cfg.max_positions : 8192);
    int64_t bs = opt->block_size > 0 ? opt->block_size : 16;
    s->max_blocks = (ctx + bs - 1) / bs;
    loader L = { g, m, opt, 0, 0 };
    pthread_t warm;
    bool warming = !cpu && pthread_create(&warm, NULL, prepare_gemm, b) == 0;
    st = load(&L);
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
            tc_tensor *ts[] = { &y->attn_norm, &y->wq,     &y->wk,   &y->wv,    &y->wo,
                                &y->ffn_norm,  &y->w_gate, &y->w_up, &y->w_down };
            for (size_t i = 0; i < sizeof ts / sizeof *ts; i++)
                tc_tensor_deinit(ts[i]);
        }
    tc_host_free(m->layers);
    tc_tensor_deinit(&m->tok_embd);
    tc_tensor_deinit(&m->out_norm);
    tc_tensor_deinit(&m->lm_head);
    tc_llama_scratch *s = &m->s;
    tc_tensor *ts[] = { &s->x,       &s->h,        &s->q,         &s->att,        &s->k,
                        &s->v,       &s->o,        &s->gate,      &s->up,         &s->last,
                        &s->lastf,   &s->logits,   &s->ids,       &s->pos,        &s->slots,
                        &s->q_start, &s->seq_lens, &s->last_rows, &s->block_table };
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++)
        tc_tensor_deinit(ts[i]);
    tc_host_free(s->host);
    tc_host_free(m);
}

/* ---------------------------------------------------------------- KV cache */

uint64_t tc_kv_cache_bytes(const tc_llama *m, int64_t n_blocks, int64_t block_size)
{
    return 2ull * (uint64_t)m->cfg.n_layers *
           tc_dtype_bytes(m->act, n_blocks * block_size * m->cfg.n_kv_heads * m->cfg.head_dim);
}

tc_status tc_kv_cache_init(tc_kv_cache *kv, const tc_llama *m, int64_t n_blocks, int64_t block_size)
{
    memset(kv, 0, sizeof *kv);
    kv->n_layers = m->cfg.n_layers;
    kv->n_blocks = n_blocks;
    kv->block_size = block_size;
    kv->k = tc_host_calloc((size_t)kv->n_layers, sizeof *kv->k);
    kv->v = tc_host_calloc((size_t)kv->n_layers, sizeof *kv->v);
    if (!kv->k || !kv->v) {
        tc_kv_cache_deinit(kv);
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_kv_cache_init", "no host memory");
    }
    for (int l = 0; l < kv->n_layers; l++) {
        tc_status st =
            tc_tensor_init(&kv->k[l], m->backend, m->act,
                           TC_SHAPE(n_blocks, block_size, m->cfg.n_kv_heads, m->cfg.head_dim));
        if (st == TC_OK)
            st = tc_tensor_init(&kv->v[l], m->backend, m->act,
                                TC_SHAPE(n_blocks, block_size, m->cfg.n_kv_heads, m->cfg.head_dim));
        if (st != TC_OK) {
            tc_kv_cache_deinit(kv);
            return st;
        }
    }
    return TC_OK;
}

void tc_kv_cache_deinit(tc_kv_cache *kv)
{
    if (!kv)
        return;
    for (int l = 0; l < kv->n_layers && kv->k && kv->v; l++) {
        tc_tensor_deinit(&kv->k[l]);
        tc_tensor_deinit(&kv->v[l]);
    }
    tc_host_free(kv->k);
    tc_host_free(kv->v);
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

static tc_status upload(tc_tensor *t, const int32_t *src, int64_t n)
{
    tc_tensor v = rows(t, n);
    return tc_tensor_copy_from_host(&v, src, sizeof(int32_t) * (size_t)n);
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

tc_status tc_llama_forward(tc_llama *m, tc_kv_cache *kv, const tc_llama_batch *b,
                           tc_tensor **logits)
{
    TC_TRY(check_batch(m, kv, b));
    const tc_llama_config *c = &m->cfg;
    tc_llama_scratch *s = &m->s;
    int64_t T = b->n_tokens, S = b->n_seqs;
    bool decode = T == S;
    /* Index arrays. */
    int32_t *last = s->host;
    for (int64_t q = 0; q < S; q++)
        last[q] = b->q_start[q + 1] - 1;
    TC_TRY(upload(&s->ids, b->tokens, T));
    TC_TRY(upload(&s->pos, b->positions, T));
    TC_TRY(upload(&s->slots, b->slots, T));
    TC_TRY(upload(&s->q_start, b->q_start, S + 1));
    TC_TRY(upload(&s->seq_lens, b->seq_lens, S));
    TC_TRY(upload(&s->last_rows, last, S));
    /* The batch's table, [S, max_blocks] with its own width, in the scratch's memory. */
    tc_tensor table;
    TC_TRY(tc_tensor_wrap(&table, m->backend, TC_DTYPE_I32, TC_SHAPE(S, b->max_blocks),
                          s->block_table.data));
    TC_TRY(tc_tensor_copy_from_host(&table, b->block_table,
                                    sizeof(int32_t) * (size_t)(S * b->max_blocks)));

    tc_tensor x = rows(&s->x, T), h = rows(&s->h, T), q = rows(&s->q, T), k = rows(&s->k, T),
              v = rows(&s->v, T), att = rows(&s->att, T), o = rows(&s->o, T),
              gate = rows(&s->gate, T), up = rows(&s->up, T);
    tc_tensor ids = rows(&s->ids, T), pos = rows(&s->pos, T), slots = rows(&s->slots, T),
              qs = rows(&s->q_start, S + 1), lens = rows(&s->seq_lens, S),
              last_rows = rows(&s->last_rows, S);
    tc_tensor q3, k3, v3, att3;
    tc_status st;
    TC_CHECK(st, tc_tensor_reshape(&q, TC_SHAPE(T, c->n_heads, c->head_dim), &q3));
    TC_CHECK(st, tc_tensor_reshape(&k, TC_SHAPE(T, c->n_kv_heads, c->head_dim), &k3));
    TC_CHECK(st, tc_tensor_reshape(&v, TC_SHAPE(T, c->n_kv_heads, c->head_dim), &v3));
    TC_CHECK(st, tc_tensor_reshape(&att, TC_SHAPE(T, c->n_heads, c->head_dim), &att3));
    float scale = 1.0f / sqrtf((float)c->head_dim);

    TC_CHECK(st, tc_embedding(&x, &m->tok_embd, &ids));
    for (int l = 0; l < c->n_layers; l++) {
        tc_llama_layer *y = &m->layers[l];
        /* The residual add of the previous block's feed-forward output is fused into this
         * block's first norm. */
        if (l == 0)
            TC_CHECK(st, tc_rmsnorm(&h, NULL, &x, &y->attn_norm, c->norm_eps));
        else
            TC_CHECK(st, tc_rmsnorm(&h, &x, &o, &y->attn_norm, c->norm_eps));
        TC_CHECK(st, tc_matmul(&q, &h, &y->wq));
        TC_CHECK(st, tc_matmul(&k, &h, &y->wk));
        TC_CHECK(st, tc_matmul(&v, &h, &y->wv));
        TC_CHECK(st, tc_rope(&q3, &k3, &pos, &c->rope));
        TC_CHECK(st, tc_attention_store(&kv->k[l], &kv->v[l], &k3, &v3, &slots));
        if (decode)
            TC_CHECK(st,
                     tc_attention_decode(&att3, &q3, &kv->k[l], &kv->v[l], &table, &lens, scale));
        else
            TC_CHECK(st, tc_attention_prefill(&att3, &q3, &kv->k[l], &kv->v[l], &table, &lens, &qs,
                                              scale));
        TC_CHECK(st, tc_matmul(&o, &att, &y->wo));
        TC_CHECK(st, tc_rmsnorm(&h, &x, &o, &y->ffn_norm, c->norm_eps));
        TC_CHECK(st, tc_matmul(&gate, &h, &y->w_gate));
        TC_CHECK(st, tc_matmul(&up, &h, &y->w_up));
        TC_CHECK(st, tc_swiglu(&gate, &gate, &up));
        TC_CHECK(st, tc_matmul(&o, &gate, &y->w_down));
    }
    TC_CHECK(st, tc_rmsnorm(&h, &x, &o, &m->out_norm, c->norm_eps));
    /* Only each sequence's last row needs logits: gather those rows (the embedding op over the
     * hidden states as a table), widen to f32, project. */
    tc_tensor lst = rows(&s->last, S), lstf = rows(&s->lastf, S);
    TC_CHECK(st, tc_embedding(&lst, &h, &last_rows));
    if (m->act != TC_DTYPE_F32)
        TC_CHECK(st, tc_convert(&lstf, &lst));
    else
        lstf = lst;
    s->logits_rows = rows(&s->logits, S);
    TC_CHECK(st, tc_matmul(&s->logits_rows, &lstf, &m->lm_head));
    *logits = &s->logits_rows;
    return TC_OK;
fail:
    return st;
}

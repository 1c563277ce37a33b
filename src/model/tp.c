/* The tensor-parallel forward pass (tp.h): each rank runs the layers of llama.c's pass over its
 * heads and feed-forward columns through the same ops, and the collectives of Megatron-LM's
 * split join the ranks: after the vocabulary-split embedding, after each attention and
 * feed-forward block's row-parallel product (sums), and for the logits (a gather). */
#include "model/tp.h"
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "model/internal.h"
#include "model/quant.h"
#include "ops/internal.h"
#include "runtime/error.h"
#include "runtime/host.h"

/* ---------------------------------------------------------------- loading */

static tc_status create(const tc_gguf *g, uint64_t seed, const tc_llama_config *cfg, int n,
                        tc_backend *const *backends, tc_comm *const *comms,
                        const tc_llama_options *opt, tc_tp **out)
{
    const char *op = "tc_tp_load";
    *out = NULL;
    tc_tp *tp = tc_host_calloc(1, sizeof *tp);
    if (!tp)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no host memory");
    tc_status st;
    /* The file's quantisation blocks decide where the split may cut (random weights: floats). */
    tc__shard_blocks blocks = tc__shard_blocks_of(g, cfg->n_layers);
    TC_CHECK(st, tc__shard_plan_init(&tp->plan, cfg, n, &blocks));
    tc_comm *made[TC__SHARD_MAX_RANKS] = { 0 };
    if (!comms) {
        TC_CHECK(st, tc_comm_create_local(n, made));
        tp->own_comms = true;
    }
    tp->n_ranks = n;
    for (int r = 0; r < n; r++) {
        tp->rank[r].backend = backends[r];
        tp->rank[r].comm = comms ? comms[r] : made[r];
    }
    for (int r = 0; r < n; r++) {
        tc_tp_rank *R = &tp->rank[r];
        if (R->comm->rank != r || R->comm->n_ranks != n) {
            st = tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                              "communicator %d is rank %d of %d, want rank %d of %d", r,
                              R->comm->rank, R->comm->n_ranks, r, n);
            goto fail;
        }
        TC_CHECK(st, tc__llama_load_shard(g, seed + (uint64_t)r * 1000003u, &tp->plan, r,
                                          backends[r], opt, &R->m));
        const tc_llama_scratch *s = &R->m->s;
        TC_CHECK(st, tc_tensor_init(&R->gathered, backends[r], TC_DTYPE_F32,
                                    TC_SHAPE(n * s->max_seqs * tp->plan.vocab_rows)));
        R->ids = tc_host_alloc(sizeof(int32_t) * (size_t)s->max_tokens);
        if (!R->ids) {
            st = tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no host memory");
            goto fail;
        }
    }
    TC_CHECK(st, tc_tensor_init(&tp->logits, backends[0], TC_DTYPE_F32,
                                TC_SHAPE(tp->rank[0].m->s.max_seqs, cfg->vocab)));
    *out = tp;
    return TC_OK;
fail:
    tc_tp_destroy(tp);
    return st;
}

tc_status tc_tp_load(const tc_gguf *g, const tc_llama_config *cfg, int n_ranks,
                     tc_backend *const *backends, tc_comm *const *comms,
                     const tc_llama_options *opt, tc_tp **out)
{
    return create(g, 0, cfg, n_ranks, backends, comms, opt, out);
}

tc_status tc_tp_random(const tc_llama_config *cfg, uint64_t seed, int n_ranks,
                       tc_backend *const *backends, tc_comm *const *comms,
                       const tc_llama_options *opt, tc_tp **out)
{
    return create(NULL, seed, cfg, n_ranks, backends, comms, opt, out);
}

/* A directory of a CPU model's tensors under their GGUF names, pointing at its weights. */
typedef struct view {
    tc_gguf g;
    char (*names)[48];
} view;

static tc_status add(view *v, const tc_tensor *t, const char *fmt, int l)
{
    const char *op = "tc_tp_from_model";
    tc_ggml_type type = TC_GGML_TYPE_LIMIT;
    for (int i = 0; i < TC_GGML_TYPE_LIMIT; i++) {
        tc_dtype dt;
        if (tc_ggml_dtype((tc_ggml_type)i, &dt) && dt == t->dtype) {
            type = (tc_ggml_type)i;
            break;
        }
    }
    if (type == TC_GGML_TYPE_LIMIT || !tc_tensor_is_contiguous(t) || t->ndim > 2)
        return tc_set_error(TC_ERR_UNSUPPORTED, op, "cannot slice a %s tensor of %d dimensions",
                            tc_dtype_name(t->dtype), t->ndim);
    uint64_t i = v->g.n_tensors++;
    char *name = v->names[i];
    snprintf(name, sizeof v->names[i], fmt, l);
    tc_gguf_tensor *gt = &v->g.tensors[i];
    gt->name = (tc_gguf_str){ name, strlen(name) };
    gt->n_dims = t->ndim;
    gt->dims[0] = (uint64_t)t->shape[t->ndim - 1];
    gt->dims[1] = t->ndim == 2 ? (uint64_t)t->shape[0] : 1;
    gt->type = type;
    gt->n_elements = (uint64_t)tc_tensor_numel(t);
    gt->data = t->data;
    gt->bytes = tc_tensor_bytes(t);
    return TC_OK;
}

static tc_status make_view(const tc_llama *m, view *v)
{
    const tc_llama_config *c = &m->cfg;
    size_t most = 4 + 12 * (size_t)c->n_layers;
    v->g.tensors = tc_host_calloc(most, sizeof *v->g.tensors);
    v->names = tc_host_calloc(most, sizeof *v->names);
    if (!v->g.tensors || !v->names)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_tp_from_model", "no host memory");
    TC_TRY(add(v, &m->tok_embd, "token_embd.weight", 0));
    TC_TRY(add(v, &m->out_norm, "output_norm.weight", 0));
    if (!c->tied_embeddings)
        TC_TRY(add(v, &m->lm_head, "output.weight", 0));
    for (int l = 0; l < c->n_layers; l++) {
        const tc_llama_layer *y = &m->layers[l];
        TC_TRY(add(v, &y->attn_norm, "blk.%d.attn_norm.weight", l));
        TC_TRY(add(v, &y->wq, "blk.%d.attn_q.weight", l));
        TC_TRY(add(v, &y->wk, "blk.%d.attn_k.weight", l));
        TC_TRY(add(v, &y->wv, "blk.%d.attn_v.weight", l));
        TC_TRY(add(v, &y->wo, "blk.%d.attn_output.weight", l));
        if (c->qkv_bias) {
            TC_TRY(add(v, &y->bq, "blk.%d.attn_q.bias", l));
            TC_TRY(add(v, &y->bk, "blk.%d.attn_k.bias", l));
            TC_TRY(add(v, &y->bv, "blk.%d.attn_v.bias", l));
        }
        TC_TRY(add(v, &y->ffn_norm, "blk.%d.ffn_norm.weight", l));
        TC_TRY(add(v, &y->w_gate, "blk.%d.ffn_gate.weight", l));
        TC_TRY(add(v, &y->w_up, "blk.%d.ffn_up.weight", l));
        TC_TRY(add(v, &y->w_down, "blk.%d.ffn_down.weight", l));
    }
    return TC_OK;
}

tc_status tc_tp_view(const tc_llama *full, tc_gguf **out)
{
    *out = NULL;
    if (tc_backend_get_kind(full->backend) != TC_BACKEND_CPU)
        return tc_set_error(TC_ERR_UNSUPPORTED, "tc_tp_from_model",
                            "slicing a model needs its weights on the CPU");
    view *v = tc_host_calloc(1, sizeof *v);
    if (!v)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_tp_from_model", "no host memory");
    tc_status st = make_view(full, v);
    if (st != TC_OK) {
        tc_tp_view_free(&v->g);
        return st;
    }
    *out = &v->g;
    return TC_OK;
}

void tc_tp_view_free(tc_gguf *g)
{
    if (!g)
        return;
    view *v = (view *)g; /* g is the view's first member */
    tc_host_free(v->g.tensors);
    tc_host_free(v->names);
    tc_host_free(v);
}

tc_status tc_tp_from_model(const tc_llama *full, int n_ranks, tc_backend *const *backends,
                           tc_comm *const *comms, const tc_llama_options *opt, tc_tp **out)
{
    *out = NULL;
    tc_gguf *g;
    TC_TRY(tc_tp_view(full, &g));
    tc_status st = tc_tp_load(g, &full->cfg, n_ranks, backends, comms, opt, out);
    tc_tp_view_free(g);
    return st;
}

void tc_tp_destroy(tc_tp *tp)
{
    if (!tp)
        return;
    for (int r = 0; r < tp->n_ranks; r++) {
        tc_tp_rank *R = &tp->rank[r];
        tc_tensor_deinit(&R->gathered);
        tc_llama_destroy(R->m);
        tc_host_free(R->ids);
        if (tp->own_comms)
            tc_comm_destroy(R->comm);
    }
    tc_tensor_deinit(&tp->logits);
    tc_host_free(tp);
}

tc_status tc_tp_kv_init(tc_tp_kv *kv, const tc_tp *tp, int64_t n_blocks, int64_t block_size)
{
    memset(kv, 0, sizeof *kv);
    for (int r = 0; r < tp->n_ranks; r++) {
        tc_status st = tc_kv_cache_init(&kv->rank[r], tp->rank[r].m, n_blocks, block_size);
        if (st != TC_OK) {
            tc_tp_kv_deinit(kv);
            return st;
        }
        kv->n_ranks = r + 1;
    }
    return TC_OK;
}

void tc_tp_kv_deinit(tc_tp_kv *kv)
{
    if (!kv)
        return;
    for (int r = 0; r < kv->n_ranks; r++)
        tc_kv_cache_deinit(&kv->rank[r]);
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

/* Rank r's layers over the batch whose index arrays are in its scratch: llama.c's pass on the
 * rank's heads and columns (its local configuration), with the all-reduces where a
 * row-parallel product leaves each rank a part of a sum. */
static tc_status rank_layers(tc_tp *tp, int r, tc_kv_cache *kv, const tc_llama_batch *b)
{
    tc_tp_rank *R = &tp->rank[r];
    tc_llama *m = R->m;
    const tc_llama_config *c = &m->cfg;
    tc_llama_scratch *s = &m->s;
    tc_comm *comm = R->comm;
    int64_t T = b->n_tokens, S = b->n_seqs, W = b->max_blocks;
    bool decode = T == S, lead = r == 0;
    tc_tensor table;
    TC_TRY(tc_tensor_wrap(&table, m->backend, TC_DTYPE_I32, TC_SHAPE(S, W), s->block_table.data));
    tc_tensor x = rows(&s->x, T), h = rows(&s->h, T), q = rows(&s->q, T), k = rows(&s->k, T),
              v = rows(&s->v, T), att = rows(&s->att, T), o = rows(&s->o, T),
              gate = rows(&s->gate, T), up = rows(&s->up, T);
    tc_tensor ids = rows(&s->ids, T), pos = rows(&s->pos, T), slots = rows(&s->slots, T),
              qs = rows(&s->q_start, S + 1), lens = rows(&s->seq_lens, S),
              last_rows = rows(&s->last_rows, S);
    tc_tensor q3, k3, v3, att3, fq3, fk3, fv3, qkv = { 0 }, gu = { 0 }, fg, fu;
    tc_status st;
    TC_CHECK(st, tc_tensor_reshape(&q, TC_SHAPE(T, c->n_heads, c->head_dim), &q3));
    TC_CHECK(st, tc_tensor_reshape(&k, TC_SHAPE(T, c->n_kv_heads, c->head_dim), &k3));
    TC_CHECK(st, tc_tensor_reshape(&v, TC_SHAPE(T, c->n_kv_heads, c->head_dim), &v3));
    TC_CHECK(st, tc_tensor_reshape(&att, TC_SHAPE(T, c->n_heads, c->head_dim), &att3));
    if (s->qkv.data) {
        tc_tensor all3;
        qkv = rows(&s->qkv, T);
        TC_CHECK(st, tc_tensor_reshape(
                         &qkv, TC_SHAPE(T, c->n_heads + 2 * c->n_kv_heads, c->head_dim), &all3));
        TC_CHECK(st, tc_tensor_slice(&all3, 1, 0, c->n_heads, &fq3));
        TC_CHECK(st, tc_tensor_slice(&all3, 1, c->n_heads, c->n_kv_heads, &fk3));
        TC_CHECK(st, tc_tensor_slice(&all3, 1, c->n_heads + c->n_kv_heads, c->n_kv_heads, &fv3));
    }
    if (s->gu.data) {
        gu = rows(&s->gu, T);
        TC_CHECK(st, tc_tensor_slice(&gu, 1, 0, c->ffn_dim, &fg));
        TC_CHECK(st, tc_tensor_slice(&gu, 1, c->ffn_dim, c->ffn_dim, &fu));
    }
    float scale = 1.0f / sqrtf((float)c->head_dim);
    /* Leading one-token sequences decode; the rest are prompt chunks (as in llama.c). */
    int64_t D = 0;
    while (D < S && b->q_start[D + 1] - b->q_start[D] == 1)
        D++;
    tc_tensor dq, datt, dtable, dlens, pq, patt, ptable, plens, pqs;
    if (D > 0 && D < S) {
        TC_CHECK(st, tc_tensor_slice(&table, 0, 0, D, &dtable));
        TC_CHECK(st, tc_tensor_slice(&lens, 0, 0, D, &dlens));
        TC_CHECK(st, tc_tensor_slice(&table, 0, D, S - D, &ptable));
        TC_CHECK(st, tc_tensor_slice(&lens, 0, D, S - D, &plens));
        pqs = rows(&s->q_start2, S - D + 1);
    }
    /* Few rows: the residual add rides on the all-reduce. Rank 0 adds its part of the
     * row-parallel product to x and the others write theirs over x, so that the sum over the
     * ranks is x plus the whole product. More rows: the products go to o, whose sum the next
     * norm adds to x (llama.c's two paths). */
    bool fused = T <= TC_MATVEC_MAX_ROWS;
    const tc_linear_opts add = { .accumulate = true }, swiglu = { .swiglu = true };
    bool fp8 = kv->k_scale != NULL, calibrate = fp8 && !kv->scaled;
    /* Each rank's embedding rows are its vocabulary's, zero for the other ranks' tokens. */
    TC_CHECK(st, tc_embedding(&x, &m->tok_embd, &ids));
    TC_CHECK(st, tc_comm_all_reduce_sum(comm, &x));
    for (int l = 0; l < c->n_layers; l++) {
        tc_llama_layer *y = &m->layers[l];
        tc_attention_opts kvo = { .k_scale = fp8 ? &kv->k_scale[l] : NULL,
                                  .v_scale = fp8 ? &kv->v_scale[l] : NULL,
                                  .fresh_rows = -1,
                                  .window = c->window };
        tc_attention_opts dec = kvo;
        dec.fresh_rows = 1;
        const tc_tensor *attn_norm = y->norms_folded ? NULL : &y->attn_norm,
                        *ffn_norm = y->norms_folded ? NULL : &y->ffn_norm;
        if (fused || l == 0)
            TC_CHECK(st, tc_rmsnorm(&h, NULL, &x, attn_norm, c->norm_eps));
        else
            TC_CHECK(st, tc_rmsnorm(&h, &x, &o, attn_norm, c->norm_eps));
        /* Column-parallel q, k and v: the rank's heads. */
        tc_tensor *lq = &q3, *lk = &k3, *lv = &v3;
        if (y->wqkv.data) {
            TC_CHECK(st, tc_matmul(&qkv, &h, &y->wqkv));
            if (c->qkv_bias)
                TC_CHECK(st, tc_add_bias(&qkv, &y->bqkv));
            lq = &fq3;
            lk = &fk3;
            lv = &fv3;
        } else {
            TC_CHECK(st, tc_matmul(&q, &h, &y->wq));
            TC_CHECK(st, tc_matmul(&k, &h, &y->wk));
            TC_CHECK(st, tc_matmul(&v, &h, &y->wv));
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
        } else {
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
        /* Row-parallel o: the rank's heads' share of the product, summed over the ranks. */
        if (fused) {
            if (lead)
                TC_CHECK(st, tc_linear(&x, &att, &y->wo, &add));
            else
                TC_CHECK(st, tc_matmul(&x, &att, &y->wo));
            TC_CHECK(st, tc_comm_all_reduce_sum(comm, &x));
            TC_CHECK(st, tc_rmsnorm(&h, NULL, &x, ffn_norm, c->norm_eps));
        } else {
            TC_CHECK(st, tc_matmul(&o, &att, &y->wo));
            TC_CHECK(st, tc_comm_all_reduce_sum(comm, &o));
            TC_CHECK(st, tc_rmsnorm(&h, &x, &o, ffn_norm, c->norm_eps));
        }
        /* Column-parallel gate and up, row-parallel down: the rank's feed-forward columns. */
        if (y->w_gu.data && fused) {
            TC_CHECK(st, tc_linear(&gate, &h, &y->w_gu, &swiglu));
        } else if (y->w_gu.data) {
            TC_CHECK(st, tc_matmul(&gu, &h, &y->w_gu));
            TC_CHECK(st, tc_swiglu(&gate, &fg, &fu));
        } else {
            TC_CHECK(st, tc_matmul(&gate, &h, &y->w_gate));
            TC_CHECK(st, tc_matmul(&up, &h, &y->w_up));
            TC_CHECK(st, tc_swiglu(&gate, &gate, &up));
        }
        if (fused) {
            if (lead)
                TC_CHECK(st, tc_linear(&x, &gate, &y->w_down, &add));
            else
                TC_CHECK(st, tc_matmul(&x, &gate, &y->w_down));
            TC_CHECK(st, tc_comm_all_reduce_sum(comm, &x));
        } else {
            TC_CHECK(st, tc_matmul(&o, &gate, &y->w_down));
            TC_CHECK(st, tc_comm_all_reduce_sum(comm, &o));
        }
    }
    kv->scaled |= calibrate;
    TC_CHECK(st, tc_rmsnorm(&h, fused ? NULL : &x, fused ? &x : &o, &m->out_norm, c->norm_eps));
    /* The rank's vocabulary rows of each sequence's last row's logits, gathered from every
     * rank and put in place by rank 0 (padding rows dropped). */
    tc_tensor lst = rows(&s->last, S), lstf = rows(&s->lastf, S), part = rows(&s->logits, S);
    if (decode)
        lst = h;
    else
        TC_CHECK(st, tc_embedding(&lst, &h, &last_rows));
    if (m->act != TC_DTYPE_F32)
        TC_CHECK(st, tc_convert(&lstf, &lst));
    else
        lstf = lst;
    TC_CHECK(st, tc_matmul(&part, &lstf, &m->lm_head));
    int64_t vr = tp->plan.vocab_rows, n = tp->n_ranks;
    tc_tensor all, all3;
    TC_CHECK(st, tc_tensor_slice(&R->gathered, 0, 0, n * S * vr, &all));
    TC_CHECK(st, tc_comm_all_gather(comm, &part, &all));
    if (!lead)
        return TC_OK;
    TC_CHECK(st, tc_tensor_reshape(&all, TC_SHAPE(n, S, vr), &all3));
    tc_tensor out = rows(&tp->logits, S);
    for (int i = 0; i < n; i++) {
        const tc__shard_rank *k = &tp->plan.rank[i];
        tc_tensor from, from2, to;
        TC_CHECK(st, tc_tensor_slice(&all3, 0, i, 1, &from));
        TC_CHECK(st, tc_tensor_reshape(&from, TC_SHAPE(S, vr), &from2));
        TC_CHECK(st, tc_tensor_slice(&from2, 1, 0, k->n_vocab, &from));
        TC_CHECK(st, tc_tensor_slice(&out, 1, k->vocab0, k->n_vocab, &to));
        TC_CHECK(st, tc_convert(&to, &from));
    }
    return TC_OK;
fail:
    return st;
}

typedef struct job {
    tc_tp *tp;
    int rank;
    tc_kv_cache *kv;
    const tc_llama_batch *b;
} job;

/* One rank's pass on its own thread: a failure aborts the communicator so that the other
 * ranks do not wait for this one in their next collective, and keeps the thread's words. */
static void *run_rank(void *arg)
{
    job *j = arg;
    tc_tp_rank *R = &j->tp->rank[j->rank];
    tc_status st = TC_OK;
    if (tc_backend_get_kind(R->backend) == TC_BACKEND_CUDA)
        st = tc_context_make_current(tc_backend_context(R->backend));
    if (st == TC_OK)
        st = rank_layers(j->tp, j->rank, j->kv, j->b);
    R->st = st;
    if (st != TC_OK) {
        snprintf(R->error, sizeof R->error, "%s", tc_last_error());
        tc_comm_abort(R->comm);
    }
    return NULL;
}

tc_status tc_tp_forward(tc_tp *tp, tc_tp_kv *kv, const tc_llama_batch *b, tc_tensor **logits)
{
    const char *op = "tc_tp_forward";
    int n = tp->n_ranks;
    if (kv->n_ranks != n)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "a KV cache of %d ranks for %d ranks",
                            kv->n_ranks, n);
    if (b->n_tokens < 1 || b->n_tokens > tp->rank[0].m->s.max_tokens)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "%d tokens: 1 to %lld fit", b->n_tokens,
                            (long long)tp->rank[0].m->s.max_tokens);
    for (int32_t i = 0; i < b->n_tokens; i++)
        if (b->tokens[i] < 0 || b->tokens[i] >= tp->plan.cfg.vocab)
            return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "token %d: id %d out of range", i,
                                b->tokens[i]);
    /* Every rank's checks and uploads before any rank starts: a batch the ranks refuse fails
     * here, with no collective begun. */
    tc_llama_batch lb[TC__SHARD_MAX_RANKS];
    for (int r = 0; r < n; r++) {
        tc_tp_rank *R = &tp->rank[r];
        for (int32_t i = 0; i < b->n_tokens; i++)
            R->ids[i] = tc__shard_local_token(&tp->plan, r, b->tokens[i]);
        lb[r] = *b;
        lb[r].tokens = R->ids;
        TC_TRY(tc__llama_prepare(R->m, &kv->rank[r], &lb[r]));
    }
    job jobs[TC__SHARD_MAX_RANKS];
    pthread_t threads[TC__SHARD_MAX_RANKS];
    bool started[TC__SHARD_MAX_RANKS] = { false };
    for (int r = 0; r < n; r++)
        jobs[r] = (job){ tp, r, &kv->rank[r], &lb[r] };
    for (int r = 1; r < n; r++) {
        started[r] = pthread_create(&threads[r], NULL, run_rank, &jobs[r]) == 0;
        if (!started[r]) {
            tp->rank[r].st = tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no thread for rank %d", r);
            snprintf(tp->rank[r].error, sizeof tp->rank[r].error, "%s", tc_last_error());
            tc_comm_abort(tp->rank[r].comm);
        }
    }
    run_rank(&jobs[0]);
    for (int r = 1; r < n; r++)
        if (started[r])
            pthread_join(threads[r], NULL);
    /* The first rank that failed on its own, not because another aborted the collectives. */
    int bad = -1;
    for (int r = 0; r < n; r++)
        if (tp->rank[r].st != TC_OK && (bad < 0 || (tp->rank[bad].st == TC_ERR_CANCELLED &&
                                                    tp->rank[r].st != TC_ERR_CANCELLED)))
            bad = r;
    if (bad >= 0)
        return tc_set_error(tp->rank[bad].st, op, "rank %d: %s", bad, tp->rank[bad].error);
    tp->logits_rows = rows(&tp->logits, b->n_seqs);
    *logits = &tp->logits_rows;
    return TC_OK;
}

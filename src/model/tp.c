/* The tensor-parallel forward pass (tp.h): each rank runs the layers of llama.c's pass over its
 * heads and feed-forward columns through the same ops, and the collectives of Megatron-LM's
 * split join the ranks: after the vocabulary-split embedding, after each attention and
 * feed-forward block's row-parallel product (sums), and for the logits (a gather). */
#include "model/tp.h"
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "model/internal.h"
#include "model/quant.h"
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

/* Rank r's pass over the batch whose index arrays are in its scratch (llama.c's, with the
 * sums), then the logits: each rank's vocabulary rows of them gathered from every rank and put
 * in place by rank 0 (padding rows dropped). */
static tc_status rank_layers(tc_tp *tp, int r, tc_kv_cache *kv, const tc_llama_batch *b)
{
    tc_tp_rank *R = &tp->rank[r];
    int64_t S = b->n_seqs;
    tc_tensor *part;
    TC_TRY(tc__llama_pass(R->m, kv, b, R->comm, &part));
    tc_status st;
    int64_t vr = tp->plan.vocab_rows, n = tp->n_ranks;
    tc_tensor all, all3;
    TC_CHECK(st, tc_tensor_slice(&R->gathered, 0, 0, n * S * vr, &all));
    TC_CHECK(st, tc_comm_all_gather(R->comm, part, &all));
    if (r != 0)
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

/* What one rank's thread does: its pass (kv, b) or the all-reduce timing (rows, iters). */
typedef struct job {
    tc_tp *tp;
    int rank;
    tc_status (*work)(struct job *j);
    tc_kv_cache *kv;
    const tc_llama_batch *b;
    int64_t rows;
    int iters;
    double seconds;
} job;

static tc_status pass_work(job *j)
{
    return rank_layers(j->tp, j->rank, j->kv, j->b);
}

/* A warm-up sum, then iters sums of the first rows of the rank's residual stream (scratch
 * between passes), timed from a finished stream to a finished stream. */
static tc_status all_reduce_work(job *j)
{
    tc_tp_rank *R = &j->tp->rank[j->rank];
    tc_tensor x = rows(&R->m->s.x, j->rows);
    TC_TRY(tc_comm_all_reduce_sum(R->comm, &x));
    TC_TRY(tc_backend_synchronize(R->backend));
    double t0 = tc_host_seconds();
    for (int i = 0; i < j->iters; i++)
        TC_TRY(tc_comm_all_reduce_sum(R->comm, &x));
    TC_TRY(tc_backend_synchronize(R->backend));
    j->seconds = tc_host_seconds() - t0;
    return TC_OK;
}

/* One rank's work on its own thread: a failure aborts the communicator so that the other
 * ranks do not wait for this one in their next collective, and keeps the thread's words. */
static void *run_rank(void *arg)
{
    job *j = arg;
    tc_tp_rank *R = &j->tp->rank[j->rank];
    tc_status st = TC_OK;
    if (tc_backend_get_kind(R->backend) == TC_BACKEND_CUDA)
        st = tc_context_make_current(tc_backend_context(R->backend));
    if (st == TC_OK)
        st = j->work(j);
    R->st = st;
    if (st != TC_OK) {
        snprintf(R->error, sizeof R->error, "%s", tc_last_error());
        tc_comm_abort(R->comm);
    }
    return NULL;
}

/* Every rank's job at once (rank 0 on the calling thread); the first rank that failed on its
 * own, not because another aborted the collectives, names the error. */
static tc_status run_all(tc_tp *tp, job *jobs, const char *op)
{
    int n = tp->n_ranks;
    pthread_t threads[TC__SHARD_MAX_RANKS];
    bool started[TC__SHARD_MAX_RANKS] = { false };
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
    int bad = -1;
    for (int r = 0; r < n; r++)
        if (tp->rank[r].st != TC_OK && (bad < 0 || (tp->rank[bad].st == TC_ERR_CANCELLED &&
                                                    tp->rank[r].st != TC_ERR_CANCELLED)))
            bad = r;
    if (bad >= 0) {
        snprintf(tp->failed, sizeof tp->failed, "rank %d: %s", bad, tp->rank[bad].error);
        return tc_set_error(tp->rank[bad].st, op, "%s", tp->failed);
    }
    return TC_OK;
}

/* After a failure nothing runs on the aborted communicators again. */
static tc_status usable(const tc_tp *tp, const char *op)
{
    if (!tp->failed[0])
        return TC_OK;
    return tc_set_error(TC_ERR_CANCELLED, op,
                        "the ranks' communicators were aborted by an earlier failure (%s): "
                        "load the model again",
                        tp->failed);
}

tc_status tc_tp_time_all_reduce(tc_tp *tp, int64_t n_rows, int iters, double *seconds)
{
    const char *op = "tc_tp_time_all_reduce";
    *seconds = 0;
    TC_TRY(usable(tp, op));
    if (n_rows < 1 || n_rows > tp->rank[0].m->s.max_tokens || iters < 1)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "%lld rows (1 to %lld fit), %d iterations (at least 1)",
                            (long long)n_rows, (long long)tp->rank[0].m->s.max_tokens, iters);
    job jobs[TC__SHARD_MAX_RANKS];
    for (int r = 0; r < tp->n_ranks; r++)
        jobs[r] =
            (job){ .tp = tp, .rank = r, .work = all_reduce_work, .rows = n_rows, .iters = iters };
    TC_TRY(run_all(tp, jobs, op));
    *seconds = jobs[0].seconds / iters;
    return TC_OK;
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
    TC_TRY(usable(tp, op));
    /* Every rank runs a decode step the same way, as a graph of the same bucket or op by op,
     * so that their collectives pair up: one rank whose capture failed turns graphs off for
     * all. */
    bool no_graphs = false;
    for (int r = 0; r < n; r++)
        no_graphs |= tp->rank[r].m->s.no_graphs;
    for (int r = 0; r < n; r++)
        tp->rank[r].m->s.no_graphs = no_graphs;
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
    for (int r = 0; r < n; r++)
        jobs[r] = (job){ .tp = tp, .rank = r, .work = pass_work, .kv = &kv->rank[r], .b = &lb[r] };
    TC_TRY(run_all(tp, jobs, op));
    tp->logits_rows = rows(&tp->logits, b->n_seqs);
    *logits = &tp->logits_rows;
    return TC_OK;
}

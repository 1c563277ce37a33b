/* Tensor-parallel sharding plans (shard.h): Megatron-LM's split of a transformer layer, where
 * q/k/v and gate/up are column-parallel (each rank computes its heads' and columns' outputs)
 * and o and down row-parallel (each rank multiplies its part of their input and an all-reduce
 * sums the parts). */
#include "model/shard.h"
#include <stdio.h>
#include <string.h>
#include "runtime/error.h"

tc_status tc__shard_plan_init(tc__shard_plan *p, const tc_llama_config *c, int n)
{
    const char *op = "tc_shard_plan";
    memset(p, 0, sizeof *p);
    if (n < 1 || n > TC__SHARD_MAX_RANKS)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "tensor parallelism over %d ranks: 1 to %d are supported", n,
                            TC__SHARD_MAX_RANKS);
    if (c->n_heads < 1 || c->n_kv_heads < 1 || c->n_heads % c->n_kv_heads || c->head_dim < 1 ||
        c->ffn_dim < 1 || c->vocab < 1 || c->dim < 1)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "not a Llama configuration (%d heads, %d KV heads, head size %d)",
                            c->n_heads, c->n_kv_heads, c->head_dim);
    if (c->n_heads % n)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "tensor parallelism over %d ranks: the %d attention heads do not "
                            "split evenly among them",
                            n, c->n_heads);
    /* A rank holds whole KV heads: its own share when the ranks divide them, else the one head
     * its query heads share (its group of n / n_kv_heads ranks then holds copies of it). */
    if (c->n_kv_heads % n && n % c->n_kv_heads)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "tensor parallelism over %d ranks: neither they nor the %d KV heads "
                            "divide the other (each rank must hold whole KV heads)",
                            n, c->n_kv_heads);
    if (c->ffn_dim % n)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "tensor parallelism over %d ranks: the feed-forward width %d does "
                            "not split evenly among them",
                            n, c->ffn_dim);
    if (c->vocab < n)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "a vocabulary of %d tokens cannot be split over %d ranks", c->vocab, n);
    int hq = c->n_heads / n, group = c->n_heads / c->n_kv_heads;
    int64_t f = c->ffn_dim / n, V = c->vocab;
    p->n_ranks = n;
    p->kv_replicas = n > c->n_kv_heads ? n / c->n_kv_heads : 1;
    p->vocab_rows = (V + n - 1) / n + 1;
    for (int r = 0; r < n; r++) {
        tc__shard_rank *k = &p->rank[r];
        k->q_head0 = r * hq;
        k->n_q_heads = hq;
        /* the KV heads of the first and the last query head, and those between */
        k->kv_head0 = k->q_head0 / group;
        k->n_kv_heads = (k->q_head0 + hq - 1) / group - k->kv_head0 + 1;
        k->ffn0 = r * f;
        k->n_ffn = f;
        /* Balanced: the blocks differ by at most one row. */
        k->vocab0 = r * V / n;
        k->n_vocab = (r + 1) * V / n - k->vocab0;
    }
    p->cfg = *c;
    p->local = *c;
    p->local.n_heads = hq;
    p->local.n_kv_heads = p->rank[0].n_kv_heads;
    p->local.ffn_dim = (int)f;
    p->local.vocab = (int)p->vocab_rows;
    if (n > 1) {
        char name[sizeof c->name];
        snprintf(name, sizeof name, "%s", c->name);
        snprintf(p->local.name, sizeof p->local.name, "%.80s (1/%d)", name, n);
    }
    return TC_OK;
}

tc__shard_slice tc__shard_slice_of(const tc__shard_plan *p, int rank, tc__shard_part part,
                                   int64_t rows, int64_t cols)
{
    const tc__shard_rank *k = &p->rank[rank];
    int64_t hd = p->cfg.head_dim;
    bool vec = rows == 0;
    tc__shard_slice s = { .dim = -1, .start = 0, .len = 0, .rows = rows, .cols = cols };
    switch (part) {
    case TC__SHARD_WHOLE: return s;
    case TC__SHARD_Q:
        s.dim = 0;
        s.start = k->q_head0 * hd;
        s.len = k->n_q_heads * hd;
        break;
    case TC__SHARD_KV:
        s.dim = 0;
        s.start = k->kv_head0 * hd;
        s.len = k->n_kv_heads * hd;
        break;
    case TC__SHARD_O:
        s.dim = 1;
        s.start = k->q_head0 * hd;
        s.len = k->n_q_heads * hd;
        break;
    case TC__SHARD_FFN_OUT:
        s.dim = 0;
        s.start = k->ffn0;
        s.len = k->n_ffn;
        break;
    case TC__SHARD_FFN_IN:
        s.dim = 1;
        s.start = k->ffn0;
        s.len = k->n_ffn;
        break;
    case TC__SHARD_VOCAB:
        s.dim = 0;
        s.start = k->vocab0;
        s.len = k->n_vocab;
        s.rows = p->vocab_rows;
        return s;
    }
    if (s.dim == 0 && !vec)
        s.rows = s.len;
    else if (s.dim == 0) /* a bias: its elements */
        s.dim = 1;
    if (s.dim == 1)
        s.cols = s.len;
    return s;
}

int32_t tc__shard_local_token(const tc__shard_plan *p, int rank, int32_t token)
{
    const tc__shard_rank *k = &p->rank[rank];
    if (token >= k->vocab0 && token < k->vocab0 + k->n_vocab)
        return (int32_t)(token - k->vocab0);
    return (int32_t)(p->vocab_rows - 1);
}

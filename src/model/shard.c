/* Tensor-parallel sharding plans (shard.h): Megatron-LM's split of a transformer layer, where
 * q/k/v and gate/up are column-parallel (each rank computes its heads' and columns' outputs)
 * and o and down row-parallel (each rank multiplies its part of their input and an all-reduce
 * sums the parts). */
#include "model/shard.h"
#include <stdio.h>
#include <string.h>
#include "runtime/error.h"

/* The largest block of the tensors named fmt (one per layer) into *elems and *type. */
static void largest_block(const tc_gguf *g, int n_layers, const char *fmt, int64_t *elems,
                          tc_ggml_type *type)
{
    for (int l = 0; l < n_layers; l++) {
        char name[64];
        snprintf(name, sizeof name, fmt, l);
        const tc_gguf_tensor *t = tc_gguf_tensor_find(g, name);
        uint64_t be, bb;
        if (t && tc_ggml_type_block(t->type, &be, &bb) && (int64_t)be > *elems) {
            *elems = (int64_t)be;
            *type = t->type;
        }
    }
}

tc__shard_blocks tc__shard_blocks_of(const tc_gguf *g, int n_layers)
{
    tc__shard_blocks b = { 1, 1, TC_GGML_F32, TC_GGML_F32 };
    if (!g)
        return b;
    largest_block(g, n_layers, "blk.%d.attn_output.weight", &b.heads, &b.heads_type);
    largest_block(g, n_layers, "blk.%d.ffn_down.weight", &b.ffn, &b.ffn_type);
    return b;
}

tc_status tc__shard_plan_init(tc__shard_plan *p, const tc_llama_config *c, int n,
                              const tc__shard_blocks *blocks)
{
    const char *op = "tc_shard_plan";
    memset(p, 0, sizeof *p);
    p->blocks = blocks ? *blocks : tc__shard_blocks_of(NULL, 0);
    const tc__shard_blocks *B = &p->blocks;
    if (n < 1 || n > TC__SHARD_MAX_RANKS)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "tensor parallelism over %d ranks: 1 to %d are supported", n,
                            TC__SHARD_MAX_RANKS);
    if (c->n_heads < 1 || c->n_kv_heads < 1 || c->n_heads % c->n_kv_heads || c->head_dim < 1 ||
        c->ffn_dim < 1 || c->vocab < 1 || c->dim < 1 || B->heads < 1 || B->ffn < 1)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "not a Llama configuration (%d heads, %d KV heads, head size %d)",
                            c->n_heads, c->n_kv_heads, c->head_dim);
    if (c->n_heads % n)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "tensor parallelism over %d ranks: the %d attention heads do not "
                            "split evenly among them",
                            n, c->n_heads);
    int hq = c->n_heads / n, group = c->n_heads / c->n_kv_heads;
    /* A rank's heads are a block of attn_output's columns, cut out of each of its rows. */
    if (n > 1 && (int64_t)hq * c->head_dim % B->heads)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "tensor parallelism over %d ranks: a rank's %d attention head%s "
                            "%lld columns of attn_output, not whole %s blocks of %lld",
                            n, hq, hq == 1 ? " is" : "s are", (long long)hq * c->head_dim,
                            tc_ggml_type_name(B->heads_type), (long long)B->heads);
    /* A rank holds whole KV heads: its own share when the ranks divide them, else the one head
     * its query heads share (its group of n / n_kv_heads ranks then holds copies of it). */
    if (c->n_kv_heads % n && n % c->n_kv_heads)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "tensor parallelism over %d ranks: neither they nor the %d KV heads "
                            "divide the other (each rank must hold whole KV heads)",
                            n, c->n_kv_heads);
    /* The feed-forward width in whole blocks of ffn_down, the first ranks one block more where
     * they do not divide evenly; where N-th of the width is whole blocks this is the even split
     * (floats, and legacy types of 32 at the usual widths). */
    int64_t F = c->ffn_dim, fb = B->ffn, blocks_total = F / fb;
    if (F % fb || blocks_total < n)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "tensor parallelism over %d ranks: the feed-forward width %d is not "
                            "a whole %s block for each of them (blocks of %lld)",
                            n, c->ffn_dim, tc_ggml_type_name(B->ffn_type), (long long)fb);
    if (c->vocab < n)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "a vocabulary of %d tokens cannot be split over %d ranks", c->vocab, n);
    int64_t V = c->vocab, ffn0 = 0;
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
        k->ffn0 = ffn0;
        k->n_ffn = (blocks_total / n + (r < blocks_total % n)) * fb;
        ffn0 += k->n_ffn;
        /* Balanced: the blocks differ by at most one row. */
        k->vocab0 = r * V / n;
        k->n_vocab = (r + 1) * V / n - k->vocab0;
        tc_llama_config *lc = &k->local;
        *lc = *c;
        lc->n_heads = hq;
        lc->n_kv_heads = k->n_kv_heads;
        lc->ffn_dim = (int)k->n_ffn;
        lc->vocab = (int)p->vocab_rows;
        if (n > 1) {
            char name[sizeof c->name];
            snprintf(name, sizeof name, "%s", c->name);
            snprintf(lc->name, sizeof lc->name, "%.60s (rank %d of %d)", name, r, n);
        }
    }
    p->cfg = *c;
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

/* Tensor-parallel sharding of a Llama (Megatron-LM, Shoeybi et al. 2019, section 3): which
 * attention heads, feed-forward columns and vocabulary rows each of N ranks holds. Internal to
 * the model layer: the loader cuts each rank's tensors by it and the sharded pass (tp.c) runs
 * each rank on them. */
#ifndef TC_SHARD_H
#define TC_SHARD_H
#include "model/llama.h"

/* The most ranks a plan splits over (GPUs of one host). */
#define TC__SHARD_MAX_RANKS 16

/* What one rank holds. Query heads, feed-forward columns and vocabulary rows are split into
 * contiguous blocks, rank 0 first; KV heads are the ones its query heads read, shared with the
 * other ranks of their group when there are fewer KV heads than ranks. The feed-forward columns
 * are whole quantisation blocks (tc__shard_blocks), so their shares may differ by a block. */
typedef struct tc__shard_rank {
    int q_head0, n_q_heads;   /* global query heads [q_head0, q_head0 + n_q_heads) */
    int kv_head0, n_kv_heads; /* global KV heads [kv_head0, kv_head0 + n_kv_heads) */
    int64_t ffn0, n_ffn;      /* global feed-forward columns [ffn0, ffn0 + n_ffn) */
    int64_t vocab0, n_vocab;  /* global vocabulary rows (token embedding, output projection) */
    tc_llama_config local;    /* the rank's model: its heads, n_ffn columns and vocab_rows */
} tc__shard_rank;

/* The quantisation blocks a split must keep whole: for each dimension that is cut across the
 * rows of a tensor (its columns split), the largest block among the file's tensors cut there,
 * in elements (GGUF stores a row as whole blocks along it), and that block's type. Floats
 * are blocks of 1. */
typedef struct tc__shard_blocks {
    int64_t heads;                     /* attn_output's columns: the query heads' outputs */
    int64_t ffn;                       /* ffn_down's columns: the feed-forward width */
    tc_ggml_type heads_type, ffn_type; /* for the words of a refusal */
} tc__shard_blocks;

typedef struct tc__shard_plan {
    int n_ranks;
    int kv_replicas; /* ranks holding each KV head: 1, or n_ranks / n_kv_heads */
    /* Rows of each rank's token embedding and output projection: its vocabulary rows, zero rows
     * up to ceil(vocab / n_ranks), and one more zero row that tokens of the other ranks look up
     * (so that the embedding's sum over ranks is the whole model's). Logits of padding rows are
     * dropped when they are gathered. */
    int64_t vocab_rows;
    tc__shard_blocks blocks; /* what the split keeps whole */
    tc_llama_config cfg;     /* the whole model's */
    tc__shard_rank rank[TC__SHARD_MAX_RANKS];
} tc__shard_plan;

/* How a tensor is split (Megatron's column- and row-parallel linear layers). */
typedef enum tc__shard_part {
    TC__SHARD_WHOLE,   /* every rank holds all of it (norm weights) */
    TC__SHARD_Q,       /* rows of the rank's query heads (wq, bq) */
    TC__SHARD_KV,      /* rows of the rank's KV heads (wk, wv, bk, bv) */
    TC__SHARD_O,       /* columns of the rank's query heads (wo: row-parallel, input split) */
    TC__SHARD_FFN_OUT, /* rows of the rank's feed-forward columns (w_gate, w_up) */
    TC__SHARD_FFN_IN,  /* columns of the rank's feed-forward columns (w_down) */
    TC__SHARD_VOCAB,   /* rows of the rank's vocabulary, padded to vocab_rows (tok_embd, lm_head) */
} tc__shard_part;

/* One rank's part of a tensor of `rows` x `cols` (rows 0: a vector of cols, as the loader
 * names vectors; its part is a block of its elements, dim 1). */
typedef struct tc__shard_slice {
    int dim;            /* -1: the whole tensor; 0: a block of rows; 1: a block of columns */
    int64_t start, len; /* the block, in dimension dim */
    int64_t rows, cols; /* the shape the rank holds (rows > len: zero rows after the block) */
} tc__shard_slice;

/* The blocks of the attn_output and ffn_down tensors of g's n_layers layers (g NULL, or a
 * tensor missing or of an unknown type: blocks of 1, and the loader names the problem). */
tc__shard_blocks tc__shard_blocks_of(const tc_gguf *g, int n_layers);
/* Plan the split of a model of configuration cfg over n_ranks ranks whose weights have the
 * blocks `blocks` (NULL: floats). The ranks must divide the query heads, and a rank's heads
 * must be whole blocks of attn_output; the KV heads and the ranks must divide one another; the
 * feed-forward width is split evenly where each share is whole blocks of ffn_down, else in
 * whole blocks, rank 0 first, the shares differing by one block (Llama-2-7B's 43 blocks of 256
 * at N = 2: 5,632 and 5,376 columns), so each rank needs a block; the vocabulary must have a
 * row per rank. Otherwise TC_ERR_INVALID_ARGUMENT saying which. */
tc_status tc__shard_plan_init(tc__shard_plan *p, const tc_llama_config *cfg, int n_ranks,
                              const tc__shard_blocks *blocks);
/* Rank `rank`'s slice of tensor part `part` of global shape rows x cols (see tc__shard_slice). */
tc__shard_slice tc__shard_slice_of(const tc__shard_plan *p, int rank, tc__shard_part part,
                                   int64_t rows, int64_t cols);
/* The row of rank `rank`'s token embedding that token `token` (global) reads: its own row, or
 * the zero row (vocab_rows - 1) when another rank holds it. */
int32_t tc__shard_local_token(const tc__shard_plan *p, int rank, int32_t token);

#endif /* TC_SHARD_H */

/* Tensor parallelism: one Llama split over N ranks (Megatron-LM, Shoeybi et al. 2019), each
 * rank a backend holding its shard of the weights (model/shard.h) and of the KV cache, all of
 * them running every pass, with an all-reduce after each layer's attention and feed-forward
 * and an all-gather of the vocabulary-split logits between them (model/comm.h). */
#ifndef TC_TP_H
#define TC_TP_H
#include "model/comm.h"
#include "model/llama.h"
#include "model/shard.h"

typedef struct tc_tp_kv tc_tp_kv;

/* One rank: its shard, backend and communicator. */
typedef struct tc_tp_rank {
    tc_llama *m;         /* the shard: configuration plan.rank[r].local, scratch of its own */
    tc_backend *backend; /* borrowed */
    tc_comm *comm;
    tc_tensor gathered; /* f32 [n_ranks * max_seqs * vocab_rows]: every rank's logits */
    int32_t *ids;       /* [max_tokens] host: the batch's tokens as rows of this embedding */
    tc_status st;       /* the last pass's outcome on this rank, and its words */
    char error[256];
} tc_tp_rank;

typedef struct tc_tp {
    tc__shard_plan plan;
    int n_ranks;
    tc_tp_rank rank[TC__SHARD_MAX_RANKS];
    bool own_comms;        /* the communicators were made here (in-process) */
    tc_tensor logits;      /* f32 [max_seqs, vocab] on rank 0's backend */
    tc_tensor logits_rows; /* view: the rows of the last pass */
    tc_tp_kv *engine_kv;   /* the cache the engine's passes use (tc_engine_model_tp) */
    /* A rank failed and the communicators were aborted (NCCL's are then gone, and a rank's
     * graph would replay collectives on them): every later call fails at once, saying so. */
    char failed[300];
} tc_tp;

/* Load the model of configuration cfg from g (whole-model tensors under GGUF names, as
 * tc_llama_load takes) over n_ranks ranks: rank r's shard goes on backends[r], cut from the
 * file as it is placed. comms: one communicator per rank, borrowed; NULL makes an in-process
 * group (tc_comm_create_local: CPU backends). The plan's rules (tc__shard_plan_init, with
 * the quantisation blocks of g's tensors) decide which ranks are possible. g must stay open
 * while the result lives. */
tc_status tc_tp_load(const tc_gguf *g, const tc_llama_config *cfg, int n_ranks,
                     tc_backend *const *backends, tc_comm *const *comms,
                     const tc_llama_options *opt, tc_tp **out);
/* The same with random weights drawn per rank (benchmarks of shapes that fit no single
 * device; not the shards of tc_llama_random's model). */
tc_status tc_tp_random(const tc_llama_config *cfg, uint64_t seed, int n_ranks,
                       tc_backend *const *backends, tc_comm *const *comms,
                       const tc_llama_options *opt, tc_tp **out);
/* Split a model whose weights are on the CPU (f32, f16 or bf16) over n_ranks ranks, each shard
 * sliced from its tensors; full must outlive the result (shards may point into it). */
tc_status tc_tp_from_model(const tc_llama *full, int n_ranks, tc_backend *const *backends,
                           tc_comm *const *comms, const tc_llama_options *opt, tc_tp **out);
/* A directory of a CPU model's tensors (f32, f16 or bf16) under their GGUF names, pointing at
 * its weights: what tc_llama_load and tc_tp_load take, to place one model both whole and
 * sharded. full must outlive it; free it with tc_tp_view_free. */
tc_status tc_tp_view(const tc_llama *full, tc_gguf **out);
void tc_tp_view_free(tc_gguf *g);
/* Free the ranks' shards and the communicators made here; NULL is a no-op. */
void tc_tp_destroy(tc_tp *tp);

/* A paged KV cache per rank over the rank's KV heads, each of n_blocks blocks of block_size
 * (the same block ids on every rank: one block table serves them all). */
struct tc_tp_kv {
    int n_ranks;
    tc_kv_cache rank[TC__SHARD_MAX_RANKS];
};
/* Allocate every rank's cache (tc_kv_cache_init over the rank's shard). */
tc_status tc_tp_kv_init(tc_tp_kv *kv, const tc_tp *tp, int64_t n_blocks, int64_t block_size);
/* Free every rank's cache; a zeroed kv is a no-op. */
void tc_tp_kv_deinit(tc_tp_kv *kv);

/* One forward pass as tc_llama_forward, every rank on a thread of its own: *logits points at
 * the f32 logits [n_seqs, vocab] on rank 0's backend, valid until the next call. A rank that
 * fails aborts the communicators (the others' collectives fail too) and the error names it;
 * the communicators stay aborted then, so later calls fail at once with that first error. */
tc_status tc_tp_forward(tc_tp *tp, tc_tp_kv *kv, const tc_llama_batch *batch, tc_tensor **logits);

/* The time of one all-reduce of n_rows rows of the residual stream (a decode step of n_rows
 * sequences makes 2 per layer and one after the embedding), every rank summing iters times
 * after a warm-up: *seconds per call, from rank 0's finished stream to its finished stream.
 * Overwrites the ranks' scratch: call it between passes. */
tc_status tc_tp_time_all_reduce(tc_tp *tp, int64_t n_rows, int iters, double *seconds);

#endif /* TC_TP_H */

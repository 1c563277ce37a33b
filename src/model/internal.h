/* Shared by the files of src/model: mapping model files, and what llama.c lends the
 * tensor-parallel pass (tp.c). Not installed. */
#ifndef TC_MODEL_INTERNAL_H
#define TC_MODEL_INTERNAL_H
#include <stddef.h>
#include <stdint.h>
#include "tc_bindings.h"

struct tc_gguf;
struct tc_backend;
struct tc_llama;
struct tc_llama_options;
struct tc_llama_batch;
struct tc_kv_cache;
struct tc__shard_plan;
struct tc_comm;
struct tc_tensor;

/* Map the regular file `path` read-only: *map and *bytes on success. A missing or unreadable
 * file is TC_ERR_IO, one shorter than min_bytes TC_ERR_PARSE ("what" names the kind of file
 * expected); `op` names the caller in the message. */
tc_status tc__map_file(const char *op, const char *path, const char *what, size_t min_bytes,
                       void **map, size_t *bytes);
/* Unmap what tc__map_file mapped (NULL is a no-op). */
void tc__unmap_file(void *map, size_t bytes);

/* A tensor's bytes in a model file, [begin, end), and the caller's index of it. */
typedef struct tc__span {
    uint64_t begin, end;
    size_t ref;
} tc__span;
/* Sort the spans by where they begin and find two that share a byte (the formats lay tensors
 * one after another; the same bytes under several names would let a small file fill memory
 * with a copy each): the index i of the first span that begins before span i - 1 ends, or 0
 * when none does. n log n, so that a file of many tensors costs little. */
size_t tc__spans_overlap(tc__span *s, size_t n);

/* Load rank `rank`'s shard of a model under a sharding plan: its configuration is the plan's
 * rank[rank].local and each tensor holds its slice (tc__shard_slice_of), cut from g's
 * tensors, which have the whole model's shapes; with g NULL, random weights of the shard's
 * shapes drawn from seed (for benchmarks: not the slices of tc_llama_random's model). */
tc_status tc__llama_load_shard(const struct tc_gguf *g, uint64_t seed,
                               const struct tc__shard_plan *plan, int rank, struct tc_backend *b,
                               const struct tc_llama_options *opt, struct tc_llama **out);
/* Check a batch against the model's scratch and cache as tc_llama_forward does, and upload its
 * index arrays into the model's scratch (ids, pos, slots, q_start, seq_lens, last_rows,
 * q_start2, block_table), for tc__llama_pass. */
tc_status tc__llama_prepare(struct tc_llama *m, struct tc_kv_cache *kv,
                            const struct tc_llama_batch *b);
/* The forward pass of one rank of a tensor-parallel model over a batch tc__llama_prepare
 * uploaded: tc_llama_forward's own layer loop on the rank's heads, feed-forward columns and
 * vocabulary rows, with comm's sums where a product leaves each rank a part of one (after the
 * embedding, the attention output and the feed-forward); a decode step on CUDA as the rank's
 * graph of its bucket, the collectives captured in it, as tc_llama_forward's. The rank's logits of
 * each sequence's last row, [n_seqs, its vocabulary rows] f32, are left in m's scratch (*logits).
 */
tc_status tc__llama_pass(struct tc_llama *m, struct tc_kv_cache *kv, const struct tc_llama_batch *b,
                         struct tc_comm *comm, struct tc_tensor **logits);

#endif /* TC_MODEL_INTERNAL_H */

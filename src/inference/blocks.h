/* Accounting of a paged KV cache's blocks: reference counts (blocks shared by sequences with a
 * common prefix, or by the choices of one request, copied on write), and a prefix cache of
 * full blocks found by the hash of their contents and of everything before them. A block no
 * sequence holds stays cached until it is needed again; the least recently released goes first.
 * Pure host bookkeeping: the device memory is the model's KV cache. */
#ifndef TC_BLOCKS_H
#define TC_BLOCKS_H
#include <stdbool.h>
#include <stdint.h>

#include "runtime/runtime.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef struct tc_blocks tc_blocks;

typedef struct tc_blocks_stats {
    int32_t total;      /* blocks in the cache */
    int32_t used;       /* held by at least one sequence */
    int32_t cached;     /* held by none but keeping a known prefix */
    int32_t free;       /* held by none (cached included): what an allocation can take */
    uint64_t lookups;   /* prefix blocks looked up */
    uint64_t hits;      /* of those, found */
    uint64_t evictions; /* cached blocks taken for other contents */
} tc_blocks_stats;

/* Create the accounting of n_blocks blocks of block_size tokens, all free. */
TC_API tc_status tc_blocks_create(int32_t n_blocks, int32_t block_size, tc_blocks **out);
TC_API void tc_blocks_destroy(tc_blocks *bm);

/* Take a free block (one without cached contents first, else the least recently released
 * cached one, whose contents are forgotten), held once. -1 when every block is held. */
TC_API int32_t tc_blocks_alloc(tc_blocks *bm);
/* Hold block b once more (sharing). */
TC_API void tc_blocks_retain(tc_blocks *bm, int32_t b);
/* Drop one hold of b; at zero it becomes free, keeping its cached contents if it has any. */
TC_API void tc_blocks_release(tc_blocks *bm, int32_t b);
/* How many sequences hold b. */
TC_API int32_t tc_blocks_refs(const tc_blocks *bm, int32_t b);

/* The hash of a full block of block_size tokens that follows a prefix of hash `parent` (0 for
 * the first block). */
TC_API uint64_t tc_blocks_hash(uint64_t parent, const int32_t *tokens, int32_t block_size);
/* The block that holds `tokens` after the prefix `parent` (hash from tc_blocks_hash), held
 * once more, or -1. The tokens themselves are compared, so a hash collision is never a hit. */
TC_API int32_t tc_blocks_lookup(tc_blocks *bm, uint64_t hash, uint64_t parent,
                                const int32_t *tokens);
/* Record that held block b now holds `tokens` (full) after `parent`. A block already recorded,
 * or contents another block already has, are left as they are. */
TC_API void tc_blocks_commit(tc_blocks *bm, int32_t b, uint64_t hash, uint64_t parent,
                             const int32_t *tokens);

TC_API void tc_blocks_get_stats(const tc_blocks *bm, tc_blocks_stats *s);
/* Check the internal invariants (free list, reference counts, hash chains); false with a
 * sentence in msg when one fails. `holds[b]` (optional) is the number of holds the caller
 * counts for each block, compared with the reference counts. */
TC_API bool tc_blocks_check(const tc_blocks *bm, const int32_t *holds, char *msg, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* TC_BLOCKS_H */

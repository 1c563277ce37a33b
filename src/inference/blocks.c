/* KV-cache block accounting: reference counts, a free list ordered for LRU eviction and a
 * chained hash table of cached full blocks. */
#include "inference/blocks.h"

#include <stdio.h>
#include <string.h>

#include "ops/internal.h"

struct tc_blocks {
    int32_t n, block_size;
    int32_t *refs;
    /* Free blocks (refs == 0) form one doubly linked list: blocks without cached contents
     * at the head, cached ones appended at the tail as they are released, so the head is
     * always the best block to take. -1 ends the list. */
    int32_t *prev, *next;
    int32_t head, tail, n_free;
    /* Cached contents: a block with hashed[b] set is in bucket hash % n_buckets. */
    bool *hashed;
    uint64_t *hash, *parent;
    int32_t *tokens; /* [n, block_size] */
    int32_t *bucket, *chain;
    int32_t n_buckets, n_cached;
    uint64_t lookups, hits, evictions;
};

static void unlink_free(tc_blocks *bm, int32_t b)
{
    int32_t p = bm->prev[b], q = bm->next[b];
    if (p >= 0)
        bm->next[p] = q;
    else
        bm->head = q;
    if (q >= 0)
        bm->prev[q] = p;
    else
        bm->tail = p;
    bm->prev[b] = bm->next[b] = -1;
    bm->n_free--;
}

static void push_head(tc_blocks *bm, int32_t b)
{
    bm->prev[b] = -1;
    bm->next[b] = bm->head;
    if (bm->head >= 0)
        bm->prev[bm->head] = b;
    else
        bm->tail = b;
    bm->head = b;
    bm->n_free++;
}

static void push_tail(tc_blocks *bm, int32_t b)
{
    bm->next[b] = -1;
    bm->prev[b] = bm->tail;
    if (bm->tail >= 0)
        bm->next[bm->tail] = b;
    else
        bm->head = b;
    bm->tail = b;
    bm->n_free++;
}

static int32_t bucket_of(const tc_blocks *bm, uint64_t h)
{
    return (int32_t)(h % (uint64_t)bm->n_buckets);
}

static void unhash(tc_blocks *bm, int32_t b)
{
    int32_t *p = &bm->bucket[bucket_of(bm, bm->hash[b])];
    while (*p != b)
        p = &bm->chain[*p];
    *p = bm->chain[b];
    bm->chain[b] = -1;
    bm->hashed[b] = false;
    bm->n_cached--;
}

tc_status tc_blocks_create(int32_t n_blocks, int32_t block_size, tc_blocks **out)
{
    *out = NULL;
    if (n_blocks < 1 || block_size < 1)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, "tc_blocks_create", "%d blocks of %d tokens",
                            n_blocks, block_size);
    tc_blocks *bm = tc_host_calloc(1, sizeof *bm);
    if (!bm)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_blocks_create", "no host memory");
    size_t n = (size_t)n_blocks;
    bm->n = n_blocks;
    bm->block_size = block_size;
    bm->n_buckets = n_blocks;
    bm->refs = tc_host_calloc(n, sizeof *bm->refs);
    bm->prev = tc_host_calloc(n, sizeof *bm->prev);
    bm->next = tc_host_calloc(n, sizeof *bm->next);
    bm->hashed = tc_host_calloc(n, sizeof *bm->hashed);
    bm->hash = tc_host_calloc(n, sizeof *bm->hash);
    bm->parent = tc_host_calloc(n, sizeof *bm->parent);
    bm->tokens = tc_host_calloc(n * (size_t)block_size, sizeof *bm->tokens);
    bm->bucket = tc_host_calloc(n, sizeof *bm->bucket);
    bm->chain = tc_host_calloc(n, sizeof *bm->chain);
    if (!bm->refs || !bm->prev || !bm->next || !bm->hashed || !bm->hash || !bm->parent ||
        !bm->tokens || !bm->bucket || !bm->chain) {
        tc_blocks_destroy(bm);
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_blocks_create",
                            "no host memory for %d blocks", n_blocks);
    }
    bm->head = bm->tail = -1;
    for (int32_t b = n_blocks - 1; b >= 0; b--) {
        push_head(bm, b);
        bm->bucket[b] = bm->chain[b] = -1;
    }
    *out = bm;
    return TC_OK;
}

void tc_blocks_destroy(tc_blocks *bm)
{
    if (!bm)
        return;
    tc_host_free(bm->refs);
    tc_host_free(bm->prev);
    tc_host_free(bm->next);
    tc_host_free(bm->hashed);
    tc_host_free(bm->hash);
    tc_host_free(bm->parent);
    tc_host_free(bm->tokens);
    tc_host_free(bm->bucket);
    tc_host_free(bm->chain);
    tc_host_free(bm);
}

int32_t tc_blocks_alloc(tc_blocks *bm)
{
    int32_t b = bm->head;
    if (b < 0)
        return -1;
    unlink_free(bm, b);
    if (bm->hashed[b]) {
        unhash(bm, b);
        bm->evictions++;
    }
    bm->refs[b] = 1;
    return b;
}

void tc_blocks_retain(tc_blocks *bm, int32_t b)
{
    if (bm->refs[b]++ == 0)
        unlink_free(bm, b);
}

void tc_blocks_release(tc_blocks *bm, int32_t b)
{
    if (--bm->refs[b] > 0)
        return;
    if (bm->hashed[b])
        push_tail(bm, b);
    else
        push_head(bm, b);
}

int32_t tc_blocks_refs(const tc_blocks *bm, int32_t b)
{
    return bm->refs[b];
}

uint64_t tc_blocks_hash(uint64_t parent, const int32_t *tokens, int32_t block_size)
{
    uint64_t h = tc__mix64(parent ^ 0x9e3779b97f4a7c15ull);
    for (int32_t i = 0; i < block_size; i++)
        h = tc__mix64(h + (uint32_t)tokens[i] + 0x9e3779b97f4a7c15ull);
    /* 0 means "no prefix". */
    return h ? h : 1;
}

static bool same(const tc_blocks *bm, int32_t b, uint64_t hash, uint64_t parent,
                 const int32_t *tokens)
{
    return bm->hash[b] == hash && bm->parent[b] == parent &&
           !memcmp(bm->tokens + (size_t)b * (size_t)bm->block_size, tokens,
                   sizeof(int32_t) * (size_t)bm->block_size);
}

static int32_t find(const tc_blocks *bm, uint64_t hash, uint64_t parent, const int32_t *tokens)
{
    for (int32_t b = bm->bucket[bucket_of(bm, hash)]; b >= 0; b = bm->chain[b])
        if (same(bm, b, hash, parent, tokens))
            return b;
    return -1;
}

int32_t tc_blocks_lookup(tc_blocks *bm, uint64_t hash, uint64_t parent, const int32_t *tokens)
{
    bm->lookups++;
    int32_t b = find(bm, hash, parent, tokens);
    if (b < 0)
        return -1;
    bm->hits++;
    tc_blocks_retain(bm, b);
    return b;
}

void tc_blocks_commit(tc_blocks *bm, int32_t b, uint64_t hash, uint64_t parent,
                      const int32_t *tokens)
{
    if (bm->hashed[b] || find(bm, hash, parent, tokens) >= 0)
        return;
    bm->hashed[b] = true;
    bm->hash[b] = hash;
    bm->parent[b] = parent;
    memcpy(bm->tokens + (size_t)b * (size_t)bm->block_size, tokens,
           sizeof(int32_t) * (size_t)bm->block_size);
    int32_t k = bucket_of(bm, hash);
    bm->chain[b] = bm->bucket[k];
    bm->bucket[k] = b;
    bm->n_cached++;
}

void tc_blocks_get_stats(const tc_blocks *bm, tc_blocks_stats *s)
{
    int32_t cached_free = 0;
    for (int32_t b = bm->tail; b >= 0 && bm->hashed[b]; b = bm->prev[b])
        cached_free++;
    s->total = bm->n;
    s->free = bm->n_free;
    s->used = bm->n - bm->n_free;
    s->cached = cached_free;
    s->lookups = bm->lookups;
    s->hits = bm->hits;
    s->evictions = bm->evictions;
}

bool tc_blocks_check(const tc_blocks *bm, const int32_t *holds, char *msg, size_t len)
{
    int32_t n_free = 0, n_hashed = 0;
    bool seen_hashed = false;
    for (int32_t b = bm->head, p = -1; b >= 0; p = b, b = bm->next[b]) {
        if (++n_free > bm->n || bm->prev[b] != p) {
            snprintf(msg, len, "the free list is broken at block %d", b);
            return false;
        }
        if (bm->refs[b] != 0) {
            snprintf(msg, len, "block %d is on the free list with %d holds", b, bm->refs[b]);
            return false;
        }
        if (seen_hashed && !bm->hashed[b]) {
            snprintf(msg, len, "block %d without contents follows cached ones", b);
            return false;
        }
        seen_hashed |= bm->hashed[b];
    }
    if (n_free != bm->n_free) {
        snprintf(msg, len, "%d blocks on the free list, %d counted", n_free, bm->n_free);
        return false;
    }
    int32_t held = 0;
    for (int32_t b = 0; b < bm->n; b++) {
        if (bm->refs[b] < 0 || (holds && holds[b] != bm->refs[b])) {
            snprintf(msg, len, "block %d has %d holds, its owners count %d", b, bm->refs[b],
                     holds ? holds[b] : 0);
            return false;
        }
        held += bm->refs[b] > 0;
        n_hashed += bm->hashed[b];
    }
    if (held + n_free != bm->n) {
        snprintf(msg, len, "%d held + %d free != %d blocks", held, n_free, bm->n);
        return false;
    }
    int32_t in_chains = 0;
    for (int32_t k = 0; k < bm->n_buckets; k++)
        for (int32_t b = bm->bucket[k]; b >= 0; b = bm->chain[b]) {
            if (++in_chains > bm->n || !bm->hashed[b] || bucket_of(bm, bm->hash[b]) != k) {
                snprintf(msg, len, "hash bucket %d is broken at block %d", k, b);
                return false;
            }
        }
    if (in_chains != n_hashed || n_hashed != bm->n_cached) {
        snprintf(msg, len, "%d blocks in hash chains, %d marked, %d counted", in_chains, n_hashed,
                 bm->n_cached);
        return false;
    }
    return true;
}

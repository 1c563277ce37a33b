/* The vocabulary's pieces as a byte trie, for constrained decoding (a grammar walks it so that
 * a prefix shared by many tokens is checked once and a refused one skips its whole subtree):
 * built on first use and kept with the tokenizer, so that every grammar of a model shares it. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "model/tokenizer_internal.h"
#include "model/tokenizer_trie.h"
#include "runtime/host.h"

typedef struct entry {
    const uint8_t *p;
    uint32_t len;
    int32_t id;
} entry;

static int by_bytes(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    int c = memcmp(x->p, y->p, x->len < y->len ? x->len : y->len);
    if (c)
        return c;
    if (x->len != y->len)
        return (x->len > y->len) - (x->len < y->len);
    return (x->id > y->id) - (x->id < y->id);
}

void tc__tok_trie_free(tc__vocab_trie *v)
{
    if (!v)
        return;
    tc_host_free(v->id);
    tc_host_free(v->shared);
    tc_host_free(v->piece);
    tc_host_free(v->len);
    tc_host_free(v->node);
    tc_host_free(v);
}

static tc__vocab_trie *build(const tc_tokenizer *t)
{
    tc__vocab_trie *v = tc_host_calloc(1, sizeof *v);
    entry *e = tc_host_alloc(sizeof *e * ((size_t)t->n_vocab + 1));
    /* open[d]: the node at depth d on the current path (below). */
    uint32_t *open = tc_host_alloc(sizeof *open * ((size_t)UINT16_MAX + 1));
    if (!v || !e || !open)
        goto fail;
    int32_t n = 0;
    size_t total = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const token *k = &t->tokens[id];
        if (k->type == TOKEN_CONTROL || !k->bytes_len || k->bytes_len > UINT16_MAX)
            continue;
        e[n++] = (entry){ (const uint8_t *)k->bytes, k->bytes_len, id };
        total += k->bytes_len;
    }
    qsort(e, (size_t)n, sizeof *e, by_bytes);
    v->n = n;
    v->id = tc_host_alloc(sizeof *v->id * ((size_t)n + 1));
    v->shared = tc_host_alloc(sizeof *v->shared * ((size_t)n + 1));
    v->piece = tc_host_alloc(sizeof *v->piece * ((size_t)n + 1));
    v->len = tc_host_alloc(sizeof *v->len * ((size_t)n + 1));
    /* At most one node a byte, and the root. */
    v->node = tc_host_alloc(sizeof *v->node * (total + 1));
    if (!v->id || !v->shared || !v->piece || !v->len || !v->node)
        goto fail;
    /* Nodes in preorder: a token adds the nodes of the bytes past what it shares with the one
     * before; open[d] is the node at depth d on the current path, whose subtree grows until a
     * token shares fewer than d bytes. */
    v->node[0] = (tc__vocab_node){ .lo = 0, .depth = 0 };
    open[0] = 0;
    uint32_t n_nodes = 1, depth = 0;
    for (int32_t i = 0; i < n; i++) {
        uint32_t k = 0;
        if (i > 0)
            while (k < e[i].len && k < e[i - 1].len && e[i].p[k] == e[i - 1].p[k])
                k++;
        v->id[i] = e[i].id;
        v->shared[i] = (uint16_t)k;
        v->piece[i] = e[i].p;
        v->len[i] = (uint16_t)e[i].len;
        v->max_len = e[i].len > (uint32_t)v->max_len ? (int32_t)e[i].len : v->max_len;
        for (; depth > k; depth--) {
            tc__vocab_node *d = &v->node[open[depth]];
            d->skip = n_nodes;
            d->hi = (uint32_t)i;
        }
        for (; depth < e[i].len; depth++) {
            v->node[n_nodes] = (tc__vocab_node){ .lo = (uint32_t)i,
                                                 .depth = (uint16_t)(depth + 1),
                                                 .byte = e[i].p[depth] };
            open[depth + 1] = n_nodes++;
        }
        v->node[open[depth]].n_end++;
    }
    for (; depth > 0; depth--) {
        v->node[open[depth]].skip = n_nodes;
        v->node[open[depth]].hi = (uint32_t)n;
    }
    v->node[0].skip = n_nodes;
    v->node[0].hi = (uint32_t)n;
    v->n_nodes = n_nodes;
    tc_host_free(open);
    tc_host_free(e);
    return v;
fail:
    tc_host_free(open);
    tc_host_free(e);
    tc__tok_trie_free(v);
    return NULL;
}

const tc__vocab_trie *tc__tokenizer_trie(const tc_tokenizer *t)
{
    tc__vocab_trie *v = __atomic_load_n(&t->vocab_trie, __ATOMIC_ACQUIRE);
    if (v)
        return v;
    /* One lock for every tokenizer: it is taken once per tokenizer, by its first grammar. */
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&mu);
    v = t->vocab_trie;
    if (!v) {
        v = build(t);
        __atomic_store_n(&((tc_tokenizer *)t)->vocab_trie, v, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&mu);
    return v;
}

/* The ordinary tokens' pieces in byte order and as a byte trie, for constrained decoding (a
 * grammar walks the vocabulary through it): built on first use and kept with the tokenizer. */
#ifndef TC_TOKENIZER_TRIE_H
#define TC_TOKENIZER_TRIE_H
#include <stdint.h>

#include "model/tokenizer.h"

typedef struct tc__vocab_node {
    uint32_t skip;   /* the node after this one's subtree (nodes are in preorder) */
    uint32_t lo, hi; /* the subtree's tokens: order indices [lo, hi) */
    uint16_t depth;  /* bytes from the root: the node is byte `byte` of a piece at depth - 1 */
    uint16_t n_end;  /* tokens whose piece ends here: the subtree's first n_end */
    uint8_t byte;
} tc__vocab_node;

typedef struct tc__vocab_trie {
    int32_t n;             /* ordinary (not control) tokens with a piece of 1 to 65535 bytes */
    int32_t *id;           /* [n] their ids in byte order of their pieces */
    uint16_t *shared;      /* [n] leading bytes each piece shares with the one before */
    const uint8_t **piece; /* [n] the pieces' bytes */
    uint16_t *len;         /* [n] and lengths */
    int32_t max_len;
    tc__vocab_node *node; /* [n_nodes] in preorder; node 0 is the root */
    uint32_t n_nodes;
} tc__vocab_trie;

/* The tokenizer's trie (built by the first call, thread-safe); NULL when out of memory. */
const tc__vocab_trie *tc__tokenizer_trie(const tc_tokenizer *t);
/* Free a trie (tc_tokenizer_destroy does); NULL is a no-op. */
void tc__tok_trie_free(tc__vocab_trie *v);

#endif /* TC_TOKENIZER_TRIE_H */

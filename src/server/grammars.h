/* Compiled grammars shared across requests with the same response format or tools (a small
 * least-recently-used cache, safe for the server's threads). */
#ifndef TC_SERVER_GRAMMARS_H
#define TC_SERVER_GRAMMARS_H
#include <stddef.h>
#include <stdint.h>

#include "inference/grammar.h"

/* Keys longer than this (the schema's text and the like) are neither looked up nor kept. */
#define TC_GRAMMARS_MAX_KEY ((size_t)256 << 10)

typedef struct tc__grammars tc__grammars;

/* A cache of n grammars; NULL when out of memory. */
tc__grammars *tc__grammars_create(int n);
/* Drop the cache's references; NULL is a no-op. */
void tc__grammars_destroy(tc__grammars *c);
/* A new reference to the grammar kept under key[0..len), or NULL (counted as a miss). */
tc_grammar *tc__grammars_get(tc__grammars *c, const char *key, size_t len);
/* Keep g (the caller's reference stays the caller's) under key, the least recently used one
 * out when full; returns the grammar the caller should use: g, or the one another thread kept
 * under the same key first (then g's reference is dropped and a new one to it is returned). */
tc_grammar *tc__grammars_put(tc__grammars *c, const char *key, size_t len, tc_grammar *g);
/* Lookups that found a grammar, and those that did not. */
void tc__grammars_counts(tc__grammars *c, uint64_t *hits, uint64_t *misses);

#endif /* TC_SERVER_GRAMMARS_H */

/* Grammars for constrained decoding: context-free rules over bytes (what a JSON schema
 * becomes), a recogniser that follows a document byte by byte, and the mask of the tokens
 * that can continue it, cached by recogniser state. */
#ifndef TC_GRAMMAR_H
#define TC_GRAMMAR_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/tokenizer.h"

typedef struct tc_grammar tc_grammar;
typedef struct tc_grammar_state tc_grammar_state;

/* Rules are built one element at a time: a rule is alternatives of sequences of byte sets and
 * references to rules. A rule may be referenced before it is filled (recursion), but not as
 * the first element of one of its own alternatives (left recursion). */
tc_grammar *tc_grammar_create(void);
/* A new empty rule; its id, or -1 when out of memory. */
int tc_grammar_rule(tc_grammar *g);
/* Append the bytes s[0..n) to the current alternative of rule r. */
void tc_grammar_lit(tc_grammar *g, int r, const char *s, size_t n);
/* Append one byte from the set (bytes[b] true for each byte b in it). */
void tc_grammar_set(tc_grammar *g, int r, const bool bytes[256]);
/* Append a reference to rule `other`. */
void tc_grammar_ref(tc_grammar *g, int r, int other);
/* End the current alternative of rule r and start another (which may stay empty). */
void tc_grammar_alt(tc_grammar *g, int r);
/* Finish building with `root` as the document, for a tokenizer (kept for the masks, with its
 * vocabulary trie: it must outlive the grammar). False when out of memory. The grammar is then
 * read-only but for its mask cache. */
bool tc_grammar_finish(tc_grammar *g, int root, const tc_tokenizer *tok);
/* Reference counting: the creator holds one reference; free with tc_grammar_unref. */
tc_grammar *tc_grammar_ref_take(tc_grammar *g);
void tc_grammar_unref(tc_grammar *g);

/* A recogniser at the document's start; NULL when out of memory. */
tc_grammar_state *tc_grammar_start(tc_grammar *g);
void tc_grammar_state_free(tc_grammar_state *s);
/* Feed a token (control tokens end the document): false when the grammar does not allow it,
 * and the state is then unchanged. */
bool tc_grammar_accept(tc_grammar_state *s, int32_t token);
/* Whether the document may end here. */
bool tc_grammar_done(const tc_grammar_state *s);
/* Set the logits of tokens that cannot continue the document to -infinity (row[vocab]);
 * control tokens only where the document may end. The mask is computed once per recogniser
 * state and cached in the grammar (a bounded cache, shared by the grammar's recognisers on
 * any thread), a new state's mostly from what its top allows (grammar_mask.c). False when out
 * of memory. */
bool tc_grammar_mask(tc_grammar_state *s, float *row, int32_t vocab);
/* The same mask as bits (tc_logits_mask's form): bit t % 32 of words[t / 32] is set where
 * token t may come next; n_words words are written, tokens beyond the tokenizer's vocabulary
 * disallowed. A repeated state costs a cache lookup and the copy. False when out of memory. */
bool tc_grammar_allowed(tc_grammar_state *s, uint32_t *words, int64_t n_words);

#endif /* TC_GRAMMAR_H */

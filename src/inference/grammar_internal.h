/* Shared by the grammar's files: the layout of grammars and recogniser states (grammar.c builds
 * and follows them) and what the masks keep (grammar_mask.c computes and caches them). */
#ifndef TC_GRAMMAR_INTERNAL_H
#define TC_GRAMMAR_INTERNAL_H
#include <pthread.h>

#include "inference/grammar.h"
#include "model/tokenizer_trie.h"

enum { E_END, E_ALT, E_SET, E_REF };
enum {
    MAX_STACK = 256,  /* positions a stack holds: the document's nesting is bounded by it */
    MAX_EPSILON = 64, /* rule expansions without a byte in between */
    MAX_STACKS = 64,  /* stacks in a state (alternatives alive at once) */
};

typedef struct elem {
    uint8_t kind;
    int32_t arg; /* E_SET: set index; E_REF: rule id */
} elem;

typedef struct rule {
    elem *e;
    int n, cap;
} rule;

/* A state: stacks one after another, each as its length then its positions (bottom first). */
typedef struct stacks {
    int32_t *v;
    size_t n, cap;
    int count;
    bool oom;
    bool dropped; /* a stack was left out: the state already held MAX_STACKS */
} stacks;

/* What expansions met, for the masks to know where a state's top can be judged apart from the
 * rest of its stacks (grammar_mask.c): the longest stack an expansion built below a new
 * element, the deepest expansion that found a stack emptied, and the deepest one entered
 * (expansions deeper than MAX_EPSILON stop). -1: none yet. */
typedef struct tc__limits {
    int max_base, max_empty, max_depth;
} tc__limits;

typedef struct tc__mask_cache tc__mask_cache;

/* How a grammar's masks were found (for benchmarks). */
typedef struct tc__grammar_mask_stats {
    uint64_t states;        /* masks computed for a new state */
    uint64_t state_hits;    /* masks found in the cache by state */
    uint64_t tops_walks;    /* vocabulary walks from new tops */
    uint64_t tops_hits;     /* tops' verdicts found in the cache */
    uint64_t whole_walks;   /* new states that took the full walk (a limit could bite) */
    uint64_t unsure_tokens; /* tokens walked from a whole state */
    uint64_t restarts;      /* times the tops' automaton started again */
} tc__grammar_mask_stats;

struct tc_grammar {
    int refs;
    bool oom;
    rule *rules;
    int n_rules, cap_rules;
    uint64_t (*sets)[4]; /* byte sets as 256-bit maps */
    int n_sets, cap_sets;
    int32_t byte_set[256]; /* the set of each single byte, -1 until made */
    elem *flat;            /* every rule's alternatives, each ended by E_ALT, the rule by E_END */
    int32_t *start;        /* [n_rules] a rule's first element in flat */
    int root;
    const tc_tokenizer *tok;
    int32_t vocab;
    /* The ordinary tokens in byte order of their pieces and as a trie (the tokenizer's):
     * masks walk them so that a shared prefix is followed once. Pieces longer than
     * MAX_STACK bytes are never allowed. */
    const tc__vocab_trie *trie;
    int max_piece;         /* the longest piece a mask follows */
    pthread_mutex_t mu;    /* the masks' caches: requests with one schema share a grammar */
    tc__mask_cache *masks; /* grammar_mask.c's */
};

struct tc_grammar_state {
    tc_grammar *g;
    stacks cur, a, b; /* the state, and scratch for advancing */
    stacks *depth;    /* [max_piece + 1] states after each byte of a piece (masks) */
};

/* Expand the stack p[0..n) until its top is a byte set (or it is empty) and add the results
 * to out; depth counts expansions since the last byte. p has room for MAX_STACK positions. */
void tc__grammar_expand(const tc_grammar *g, int32_t *p, int n, int depth, stacks *out,
                        tc__limits *lim);
/* The state after byte b from state s, into out (cleared first). */
void tc__grammar_advance(const tc_grammar *g, const stacks *s, uint8_t b, stacks *out,
                         tc__limits *lim);
/* Whether a state holds the empty stack (the document may end). */
bool tc__grammar_accepting(const stacks *s);
/* Add one stack to a state unless it holds it already. */
void tc__grammar_add_stack(stacks *s, const int32_t *p, int n);

/* The masks' caches (grammar_mask.c): made at tc_grammar_finish, freed with the grammar. */
bool tc__grammar_masks_init(tc_grammar *g);
void tc__grammar_masks_free(tc_grammar *g);
/* The allowed-token bits ((vocab + 31) / 32 words) of s's state, by the full walk of the
 * vocabulary (the reference the fast path is tested against) or as tc_grammar_allowed
 * computes them (cache, then the walk of the state's top). False when out of memory. */
bool tc__grammar_mask_reference(tc_grammar_state *s, uint32_t *bits);
bool tc__grammar_mask_fast(tc_grammar_state *s, uint32_t *bits);
/* A copy of the grammar's mask statistics. */
void tc__grammar_mask_stats_get(tc_grammar *g, tc__grammar_mask_stats *out);

#endif /* TC_GRAMMAR_INTERNAL_H */

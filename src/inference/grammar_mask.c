/* The masks of constrained decoding: which tokens can continue the document from a recogniser
 * state, cached by state, and computed for a new state mostly from what its tops allow.
 *
 * The idea is xgrammar's (Dong et al., 2024, "adaptive token mask cache"): whether a token
 * fits is mostly decided by the top of the stacks, not by the rest below. A state's stacks
 * share a bottom (the base: the longest common prefix, short of the shortest stack); above it
 * sit the tops. Walking the vocabulary from the tops alone (a small state that recurs across
 * documents and nestings) sorts each token into allowed, refused, or unsure: unsure when the
 * tops empty part way (the base's rules continue) and the token's next byte is one the base's
 * expansion could take. Only unsure tokens are then walked from the whole state. The tops'
 * verdicts are cached by (tops, the base's first bytes, whether the base holds a stack), and
 * the walks from tops go through an automaton built as it is met (each tops state's
 * successor by byte computed once), so that the shared string and number states cost a table
 * lookup per byte.
 *
 * The verdicts equal the full walk's exactly where no limit of the recogniser bites: stacks
 * are not dropped for MAX_STACKS (the walk from the tops dropped none, and the tops' stacks
 * alive at once plus the base's expansion stay within it), nor cut for MAX_STACK (the base's
 * length plus the tops' deepest expansion), and expansions are not cut for MAX_EPSILON (the
 * deepest emptying plus the base's expansion depth). Otherwise, and when the automaton
 * outgrows its memory, the state takes the full walk. tests/model/test_grammar.c compares
 * both on many states, the limits' cases included.
 *
 * Memory, per grammar: STATE_SLOTS / 2 masks and TOPS_SLOTS / 2 verdicts of vocab / 8 bytes
 * each (6 MiB at a 49K vocabulary, 12 MiB at 128K), and TOPS_BYTES for the automaton. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "inference/grammar_internal.h"

enum {
    STATE_SLOTS = 1024,   /* masks by state: STATE_SLOTS / 2 at most, then it starts again */
    TOPS_SLOTS = 512,     /* verdicts by tops: TOPS_SLOTS / 2 at most, then starts again */
    TOPS_BYTES = 8 << 20, /* the tops' automaton's memory: past this it starts again */
    NEXT_UNKNOWN = -1,    /* an automaton edge not computed yet */
    NEXT_DEAD = -2,       /* ... that leads nowhere */
    NEXT_FULL = -3,       /* ... that could not be added: the automaton is full */
};

/* A state of the tops' automaton: stacks as in `stacks`, relative to a base. */
typedef struct tops {
    int32_t *v;
    size_t n;
    uint64_t hash;
    int count, live; /* stacks, and those not emptied */
    bool emptied;    /* one stack is empty: the base's rules would continue */
    bool dropped;    /* a step from here dropped a stack (MAX_STACKS) */
    int max_base;    /* over the steps from here (tc__limits) */
    int max_empty;
    int32_t *next; /* [256] the state after each byte, or NEXT_*; NULL until a step */
} tops;

/* What tokens do from one tops state, whatever the base below, given the base's first bytes
 * and whether its expansion holds a stack. */
typedef struct verdict {
    int32_t from; /* the tops state; -1: empty slot */
    uint64_t follow[4];
    bool base_live;
    uint32_t *bits;  /* [words] tokens allowed */
    int32_t *unsure; /* [n_unsure] ranges of order indices, [lo, hi) pairs, of the tokens to
                        walk from the whole state */
    int32_t n_unsure;
    int live_max; /* stacks alive at once in the walk, beyond the base's */
    int max_base, max_empty;
    bool dropped;
    bool gave_up; /* the automaton filled up: states with these tops take the full walk */
} verdict;

typedef struct state_mask {
    uint64_t key;
    int32_t *state; /* the state it was computed for (flat stacks), to confirm a hit */
    size_t state_len;
    uint32_t *bits; /* [words] allowed tokens: bit t % 32 of word t / 32; NULL: empty slot */
} state_mask;

struct tc__mask_cache {
    size_t words;         /* (vocab + 31) / 32 */
    state_mask *by_state; /* [STATE_SLOTS] open addressing by key */
    int n_by_state;
    tops *tops; /* the automaton's states */
    int32_t n_tops, cap_tops;
    int32_t *tops_index; /* [index_cap] open addressing by hash: a state, -1 empty */
    size_t index_cap;
    size_t tops_bytes;
    verdict *verdicts; /* [TOPS_SLOTS] open addressing by (from, follow, base_live) */
    int n_verdicts;
    stacks scratch, base; /* a step's result; the base's expansion */
    tc__grammar_mask_stats stats;
};

/* ---------------------------------------------------------------- caches */

static uint64_t hash_ints(const int32_t *v, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint32_t)v[i]) * 1099511628211ull;
    return h ^ (h >> 31);
}

static void clear_tops(tc__mask_cache *c)
{
    for (int32_t i = 0; i < c->n_tops; i++) {
        free(c->tops[i].v);
        free(c->tops[i].next);
    }
    c->n_tops = 0;
    c->tops_bytes = 0;
    for (size_t i = 0; i < c->index_cap; i++)
        c->tops_index[i] = -1;
    for (int i = 0; i < TOPS_SLOTS; i++) {
        free(c->verdicts[i].bits);
        free(c->verdicts[i].unsure);
        c->verdicts[i] = (verdict){ .from = -1 };
    }
    c->n_verdicts = 0;
}

static void clear_states(tc__mask_cache *c)
{
    for (int i = 0; i < STATE_SLOTS; i++) {
        free(c->by_state[i].state);
        free(c->by_state[i].bits);
        c->by_state[i] = (state_mask){ 0 };
    }
    c->n_by_state = 0;
}

bool tc__grammar_masks_init(tc_grammar *g)
{
    tc__mask_cache *c = calloc(1, sizeof *c);
    if (!c)
        return false;
    g->masks = c;
    c->words = ((size_t)g->vocab + 31) / 32;
    c->by_state = calloc(STATE_SLOTS, sizeof *c->by_state);
    c->verdicts = calloc(TOPS_SLOTS, sizeof *c->verdicts);
    c->index_cap = 1024;
    c->tops_index = malloc(sizeof *c->tops_index * c->index_cap);
    if (!c->by_state || !c->verdicts || !c->tops_index)
        return false;
    clear_tops(c);
    return true;
}

void tc__grammar_masks_free(tc_grammar *g)
{
    tc__mask_cache *c = g->masks;
    if (!c)
        return;
    if (c->by_state)
        clear_states(c);
    if (c->verdicts && c->tops_index)
        clear_tops(c);
    free(c->by_state);
    free(c->verdicts);
    free(c->tops_index);
    free(c->tops);
    free(c->scratch.v);
    free(c->base.v);
    free(c);
    g->masks = NULL;
}

/* The automaton's state holding the stacks s, added when new: its index, or NEXT_FULL when
 * the automaton is full or memory ran out. */
static int32_t intern(tc__mask_cache *c, const stacks *s)
{
    uint64_t h = hash_ints(s->v, s->n);
    size_t mask = c->index_cap - 1;
    size_t i = h & mask;
    for (; c->tops_index[i] >= 0; i = (i + 1) & mask) {
        const tops *t = &c->tops[c->tops_index[i]];
        if (t->hash == h && t->n == s->n && !memcmp(t->v, s->v, sizeof *s->v * s->n))
            return c->tops_index[i];
    }
    size_t bytes = sizeof(tops) + sizeof(int32_t) * (s->n + 2);
    if (c->tops_bytes + bytes > TOPS_BYTES)
        return NEXT_FULL;
    if (2 * ((size_t)c->n_tops + 1) > c->index_cap) { /* grow the index, then look again */
        size_t cap = 2 * c->index_cap;
        int32_t *index = malloc(sizeof *index * cap);
        if (!index)
            return NEXT_FULL;
        for (size_t k = 0; k < cap; k++)
            index[k] = -1;
        for (int32_t k = 0; k < c->n_tops; k++) {
            size_t j = c->tops[k].hash & (cap - 1);
            while (index[j] >= 0)
                j = (j + 1) & (cap - 1);
            index[j] = k;
        }
        free(c->tops_index);
        c->tops_index = index;
        c->index_cap = cap;
        c->tops_bytes += sizeof *index * cap / 2;
        return intern(c, s);
    }
    if (c->n_tops == c->cap_tops) {
        int32_t cap = c->cap_tops ? 2 * c->cap_tops : 256;
        tops *t = realloc(c->tops, sizeof *t * (size_t)cap);
        if (!t)
            return NEXT_FULL;
        c->tops = t;
        c->cap_tops = cap;
    }
    int32_t *v = malloc(sizeof *v * (s->n ? s->n : 1));
    if (!v)
        return NEXT_FULL;
    memcpy(v, s->v, sizeof *v * s->n);
    tops t = { .v = v, .n = s->n, .hash = h, .count = s->count, .max_base = -1, .max_empty = -1 };
    for (size_t at = 0; at < s->n; at += (size_t)s->v[at] + 1) {
        if (s->v[at])
            t.live++;
        else
            t.emptied = true;
    }
    c->tops[c->n_tops] = t;
    c->tops_index[i] = c->n_tops;
    c->tops_bytes += bytes;
    return c->n_tops++;
}

/* The automaton's state after byte b from state `from` (computed once), NEXT_DEAD, or
 * NEXT_FULL. */
static int32_t step(const tc_grammar *g, tc__mask_cache *c, int32_t from, uint8_t b)
{
    tops *t = &c->tops[from];
    if (t->next && t->next[b] != NEXT_UNKNOWN)
        return t->next[b];
    if (!t->next) {
        if (c->tops_bytes + 256 * sizeof *t->next > TOPS_BYTES)
            return NEXT_FULL;
        t->next = malloc(256 * sizeof *t->next);
        if (!t->next)
            return NEXT_FULL;
        for (int k = 0; k < 256; k++)
            t->next[k] = NEXT_UNKNOWN;
        c->tops_bytes += 256 * sizeof *t->next;
    }
    stacks src = { .v = t->v, .n = t->n, .count = t->count };
    tc__limits lim = { -1, -1, -1 };
    tc__grammar_advance(g, &src, b, &c->scratch, &lim);
    if (c->scratch.oom) {
        c->scratch.oom = false;
        return NEXT_FULL;
    }
    t->max_base = lim.max_base > t->max_base ? lim.max_base : t->max_base;
    t->max_empty = lim.max_empty > t->max_empty ? lim.max_empty : t->max_empty;
    t->dropped |= c->scratch.dropped;
    int32_t to = c->scratch.count ? intern(c, &c->scratch) : NEXT_DEAD;
    if (to != NEXT_FULL)
        c->tops[from].next[b] = to; /* intern may have moved the states */
    return to;
}

static bool has_byte(const uint64_t set[4], uint8_t b)
{
    return set[b >> 6] >> (b & 63) & 1;
}

/* Walk the vocabulary's trie from tops state v->from and sort the tokens (see the top of the
 * file) into v (v->from, follow and base_live set): a refused prefix skips its subtree, and a
 * prefix after which the base's rules could go on makes its whole subtree unsure. False when
 * out of memory. */
static bool judge(const tc_grammar *g, tc__mask_cache *c, verdict *v)
{
    const tc__vocab_trie *tr = g->trie;
    v->bits = calloc(c->words ? c->words : 1, sizeof *v->bits);
    if (!v->bits)
        return false;
    int32_t cap_unsure = 0;
    int32_t level[MAX_STACK + 1]; /* the tops state after each byte of the node's path */
    level[0] = v->from;
    v->live_max = c->tops[v->from].live;
    v->max_base = v->max_empty = -1;
    for (uint32_t x = 1; tr && x < tr->n_nodes;) {
        const tc__vocab_node *nd = &tr->node[x];
        if (nd->depth > MAX_STACK) {
            x = nd->skip;
            continue;
        }
        int32_t from = level[nd->depth - 1];
        if (c->tops[from].emptied && has_byte(v->follow, nd->byte)) {
            if (v->n_unsure + 2 > cap_unsure) {
                cap_unsure = cap_unsure ? 2 * cap_unsure : 64;
                int32_t *u = realloc(v->unsure, sizeof *u * (size_t)cap_unsure);
                if (!u)
                    return false;
                v->unsure = u;
            }
            v->unsure[v->n_unsure++] = (int32_t)nd->lo;
            v->unsure[v->n_unsure++] = (int32_t)nd->hi;
            x = nd->skip;
            continue;
        }
        int32_t to = step(g, c, from, nd->byte);
        const tops *t = &c->tops[from];
        v->max_base = t->max_base > v->max_base ? t->max_base : v->max_base;
        v->max_empty = t->max_empty > v->max_empty ? t->max_empty : v->max_empty;
        v->dropped |= t->dropped;
        if (to == NEXT_FULL) {
            v->gave_up = true;
            return true;
        }
        if (to == NEXT_DEAD) {
            x = nd->skip;
            continue;
        }
        const tops *u = &c->tops[to];
        v->live_max = u->live > v->live_max ? u->live : v->live_max;
        level[nd->depth] = to;
        if (u->live || (u->emptied && v->base_live))
            for (uint32_t k = 0; k < nd->n_end; k++) {
                int32_t id = tr->id[nd->lo + k];
                v->bits[id >> 5] |= 1u << (id & 31);
            }
        x++;
    }
    return true;
}

/* The verdicts for tops state `from` under a base with these first bytes (cached); NULL when
 * out of memory. */
static verdict *verdicts_of(const tc_grammar *g, tc__mask_cache *c, int32_t from,
                            const uint64_t follow[4], bool base_live)
{
    uint64_t h = (uint64_t)from * 0x9e3779b97f4a7c15ull ^ base_live;
    for (int w = 0; w < 4; w++)
        h = (h ^ follow[w]) * 1099511628211ull;
    h ^= h >> 29;
    size_t slot = h & (TOPS_SLOTS - 1);
    for (size_t i = slot;; i = (i + 1) & (TOPS_SLOTS - 1)) {
        verdict *v = &c->verdicts[i];
        if (v->from < 0) {
            slot = i;
            break;
        }
        if (v->from == from && v->base_live == base_live &&
            !memcmp(v->follow, follow, sizeof v->follow)) {
            c->stats.tops_hits++;
            return v;
        }
    }
    verdict *v = &c->verdicts[slot];
    *v = (verdict){ .from = from, .base_live = base_live };
    memcpy(v->follow, follow, sizeof v->follow);
    c->n_verdicts++;
    c->stats.tops_walks++;
    if (!judge(g, c, v)) {
        free(v->bits);
        free(v->unsure);
        *v = (verdict){ .from = -1 };
        c->n_verdicts--;
        return NULL;
    }
    return v;
}

/* ---------------------------------------------------------------- walks */

/* The stacks after each byte of a piece (for walks from the whole state). */
static bool ensure_depth(tc_grammar_state *s)
{
    if (!s->depth)
        s->depth = calloc((size_t)s->g->max_piece + 1, sizeof *s->depth);
    return s->depth != NULL;
}

/* Allow in bits the tokens of the order index ranges [r[2i], r[2i + 1]) for i < n
 * (ascending) that the whole state lets through, each byte of a prefix shared with the token
 * before followed once. */
static void walk_whole(tc_grammar_state *s, const int32_t *r, int32_t n, uint32_t *bits)
{
    const tc_grammar *g = s->g;
    const tc__vocab_trie *tr = g->trie;
    if (!tr)
        return;
    const stacks *level[MAX_STACK + 1];
    level[0] = &s->cur;
    size_t valid = 0; /* s->depth[1..valid] hold the states of the previous piece's prefix */
    int32_t prev = -1;
    for (int32_t j = 0; j < n; j++) {
        for (int32_t i = r[2 * j]; i < r[2 * j + 1]; i++) {
            size_t len = tr->len[i];
            const uint8_t *p = tr->piece[i];
            if (len > MAX_STACK)
                continue;
            size_t k = 0;
            if (prev == i - 1) {
                k = tr->shared[i];
            } else if (prev >= 0) {
                size_t lp = tr->len[prev];
                const uint8_t *pp = tr->piece[prev];
                while (k < len && k < lp && p[k] == pp[k])
                    k++;
            }
            k = k < valid ? k : valid;
            prev = i;
            bool ok = true;
            for (; k < len; k++) {
                stacks *next = &s->depth[k + 1];
                tc__limits lim = { -1, -1, -1 };
                tc__grammar_advance(g, level[k], p[k], next, &lim);
                if (next->count == 0 || next->oom) {
                    ok = false;
                    break;
                }
                level[k + 1] = next;
            }
            valid = k;
            if (ok) {
                int32_t t = tr->id[i];
                bits[t >> 5] |= 1u << (t & 31);
            }
        }
    }
}

/* Allow in bits every token the whole state lets through (the full walk). */
static void walk_all(tc_grammar_state *s, uint32_t *bits)
{
    int32_t all[2] = { 0, s->g->trie ? s->g->trie->n : 0 };
    walk_whole(s, all, 1, bits);
}

/* Control tokens are allowed where the document may end. */
static void allow_control(const tc_grammar_state *s, uint32_t *bits)
{
    const tc_grammar *g = s->g;
    if (!tc__grammar_accepting(&s->cur))
        return;
    for (int32_t t = 0; t < g->vocab; t++)
        if (tc_tokenizer_is_control(g->tok, t))
            bits[t >> 5] |= 1u << (t & 31);
}

bool tc__grammar_mask_reference(tc_grammar_state *s, uint32_t *bits)
{
    memset(bits, 0, sizeof *bits * s->g->masks->words);
    if (!ensure_depth(s))
        return false;
    allow_control(s, bits);
    walk_all(s, bits);
    return true;
}

/* The mask of s's state from its tops' verdicts and its unsure tokens; the caller holds the
 * grammar's lock. */
static bool mask_from_tops(tc_grammar_state *s, uint32_t *bits)
{
    const tc_grammar *g = s->g;
    tc__mask_cache *c = g->masks;
    const stacks *cur = &s->cur;
    memset(bits, 0, sizeof *bits * c->words);
    if (!ensure_depth(s))
        return false;
    allow_control(s, bits);
    /* The base: the longest prefix all non-empty stacks share, short of the shortest one (an
     * empty stack takes no byte: it only lets control tokens through). */
    const int32_t *first = NULL;
    size_t base = 0;
    for (size_t at = 0; at < cur->n; at += (size_t)cur->v[at] + 1) {
        size_t n = (size_t)cur->v[at];
        const int32_t *x = cur->v + at + 1;
        if (!n)
            continue;
        if (!first) {
            first = x;
            base = n - 1;
            continue;
        }
        size_t k = 0;
        while (k < base && k < n - 1 && x[k] == first[k])
            k++;
        base = k;
    }
    if (!first)
        return true;
    /* The tops, in the state's order. */
    stacks *tp = &c->scratch;
    tp->n = 0;
    tp->count = 0;
    for (size_t at = 0; at < cur->n; at += (size_t)cur->v[at] + 1) {
        size_t n = (size_t)cur->v[at];
        if (!n)
            continue;
        if (tp->n + n - base + 1 > tp->cap) {
            size_t cap = 2 * (tp->n + n - base + 1) + 64;
            int32_t *v = realloc(tp->v, sizeof *v * cap);
            if (!v)
                return false;
            tp->v = v;
            tp->cap = cap;
        }
        tp->v[tp->n++] = (int32_t)(n - base);
        memcpy(tp->v + tp->n, cur->v + at + 1 + base, sizeof *tp->v * (n - base));
        tp->n += n - base;
        tp->count++;
    }
    /* Start the tops' automaton and verdicts again when full, or half full for the memory
     * (so that a walk seldom fills it part way). */
    if (c->tops_bytes > TOPS_BYTES / 2 || c->n_verdicts >= TOPS_SLOTS / 2) {
        clear_tops(c);
        c->stats.restarts++;
    }
    int32_t from = intern(c, tp);
    /* The base's expansion: where the rules continue when the tops empty. */
    int32_t p[MAX_STACK];
    memcpy(p, first, sizeof *p * base);
    stacks *b = &c->base;
    b->n = 0;
    b->count = 0;
    b->dropped = false;
    tc__limits lim = { -1, -1, -1 };
    tc__grammar_expand(g, p, (int)base, 0, b, &lim);
    if (b->oom) {
        b->oom = false;
        return false;
    }
    uint64_t follow[4] = { 0 };
    for (size_t at = 0; at < b->n; at += (size_t)b->v[at] + 1)
        if (b->v[at]) {
            const uint64_t *set = g->sets[g->flat[b->v[at + (size_t)b->v[at]]].arg];
            for (int w = 0; w < 4; w++)
                follow[w] |= set[w];
        }
    verdict *v = from >= 0 ? verdicts_of(g, c, from, follow, b->count > 0) : NULL;
    if (from >= 0 && !v)
        return false;
    if (!v || v->gave_up || v->dropped || b->dropped || (int)base + v->max_base >= MAX_STACK ||
        v->max_empty + lim.max_depth > MAX_EPSILON || v->live_max + b->count > MAX_STACKS) {
        c->stats.whole_walks++;
        walk_all(s, bits);
        return true;
    }
    for (size_t w = 0; w < c->words; w++)
        bits[w] |= v->bits[w];
    for (int32_t i = 0; i < v->n_unsure; i += 2)
        c->stats.unsure_tokens += (uint64_t)(v->unsure[i + 1] - v->unsure[i]);
    walk_whole(s, v->unsure, v->n_unsure / 2, bits);
    return true;
}

bool tc__grammar_mask_fast(tc_grammar_state *s, uint32_t *bits)
{
    pthread_mutex_lock(&s->g->mu);
    bool ok = mask_from_tops(s, bits);
    pthread_mutex_unlock(&s->g->mu);
    return ok;
}

/* The allowed-token bits of the current state, from the cache or computed; the caller holds
 * the grammar's lock, and the bits are valid while it does (the cache may start again). */
static const uint32_t *mask_bits(tc_grammar_state *s)
{
    tc__mask_cache *c = s->g->masks;
    uint64_t key = hash_ints(s->cur.v, s->cur.n);
    size_t slot = key & (STATE_SLOTS - 1);
    for (size_t i = slot;; i = (i + 1) & (STATE_SLOTS - 1)) {
        state_mask *m = &c->by_state[i];
        if (!m->bits)
            break;
        if (m->key == key && m->state_len == s->cur.n &&
            !memcmp(m->state, s->cur.v, sizeof *m->state * s->cur.n)) {
            c->stats.state_hits++;
            return m->bits;
        }
    }
    if (c->n_by_state >= STATE_SLOTS / 2) /* full enough: start again */
        clear_states(c);
    uint32_t *bits = malloc(sizeof *bits * (c->words ? c->words : 1));
    int32_t *state = malloc(sizeof *state * (s->cur.n ? s->cur.n : 1));
    if (!bits || !state || !mask_from_tops(s, bits)) {
        free(bits);
        free(state);
        return NULL;
    }
    memcpy(state, s->cur.v, sizeof *state * s->cur.n);
    size_t i = slot;
    while (c->by_state[i].bits)
        i = (i + 1) & (STATE_SLOTS - 1);
    c->by_state[i] = (state_mask){ key, state, s->cur.n, bits };
    c->n_by_state++;
    c->stats.states++;
    return bits;
}

bool tc_grammar_mask(tc_grammar_state *s, float *row, int32_t vocab)
{
    pthread_mutex_lock(&s->g->mu);
    const uint32_t *bits = mask_bits(s);
    if (bits)
        for (int32_t t = 0; t < vocab; t++)
            if (t >= s->g->vocab || !(bits[t >> 5] >> (t & 31) & 1))
                row[t] = -INFINITY;
    pthread_mutex_unlock(&s->g->mu);
    return bits != NULL;
}

bool tc_grammar_allowed(tc_grammar_state *s, uint32_t *words, int64_t n_words)
{
    pthread_mutex_lock(&s->g->mu);
    const uint32_t *bits = mask_bits(s);
    if (bits) {
        int64_t have = ((int64_t)s->g->vocab + 31) / 32, n = have < n_words ? have : n_words;
        memcpy(words, bits, sizeof *words * (size_t)n);
        memset(words + n, 0, sizeof *words * (size_t)(n_words - n));
    }
    pthread_mutex_unlock(&s->g->mu);
    return bits != NULL;
}

void tc__grammar_mask_stats_get(tc_grammar *g, tc__grammar_mask_stats *out)
{
    pthread_mutex_lock(&g->mu);
    *out = g->masks ? g->masks->stats : (tc__grammar_mask_stats){ 0 };
    pthread_mutex_unlock(&g->mu);
}

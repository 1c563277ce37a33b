/* A byte-level recogniser for context-free rules, in the manner of llama.cpp's grammar
 * sampler (a set of stacks of rule positions, each stack's top the next byte set to match):
 * the rules are flattened into one array of elements; a state is the set of stacks, kept
 * expanded so that every top is a byte set (or the stack is empty: the document may end). */
#include "inference/grammar.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { E_END, E_ALT, E_SET, E_REF };
enum {
    MAX_STACK = 256,  /* positions a stack holds: the document's nesting is bounded by it */
    MAX_EPSILON = 64, /* rule expansions without a byte in between */
    MAX_STACKS = 64,  /* stacks in a state (alternatives alive at once) */
    CACHE = 1024,     /* slots of the mask cache: it holds CACHE / 2 masks at most (8 MiB at
                         Llama 3's 128K vocabulary), then starts again */
};

typedef struct elem {
    uint8_t kind;
    int32_t arg; /* E_SET: set index; E_REF: rule id */
} elem;

typedef struct rule {
    elem *e;
    int n, cap;
} rule;

typedef struct mask {
    uint64_t key;
    int32_t *state; /* the state it was computed for (flat stacks), to confirm a hit */
    size_t state_len;
    uint32_t *bits; /* [(vocab + 31) / 32] allowed tokens: bit t % 32 of word t / 32 */
} mask;

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
    /* The ordinary tokens in byte order of their pieces, and how many leading bytes each
     * shares with the one before: a mask walks them as a trie, each state of a prefix
     * computed once. */
    int32_t *order, n_order;
    uint16_t *shared;
    const uint8_t **piece; /* [n_order] each one's bytes and length, looked up once here */
    uint16_t *piece_len;
    int max_piece;
    mask *cache; /* [CACHE] open addressing by key; bits NULL: empty */
    int n_cached;
};

/* A state: stacks one after another, each as its length then its positions (bottom first). */
typedef struct stacks {
    int32_t *v;
    size_t n, cap;
    int count;
    bool oom;
} stacks;

struct tc_grammar_state {
    tc_grammar *g;
    stacks cur, a, b; /* the state, and scratch for advancing */
    stacks *depth;    /* [max_piece + 1] states after each byte of a piece (masks) */
};

/* ---------------------------------------------------------------- building */

tc_grammar *tc_grammar_create(void)
{
    tc_grammar *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->refs = 1;
    for (int b = 0; b < 256; b++)
        g->byte_set[b] = -1;
    return g;
}

int tc_grammar_rule(tc_grammar *g)
{
    if (g->n_rules == g->cap_rules) {
        int cap = g->cap_rules ? 2 * g->cap_rules : 16;
        rule *r = realloc(g->rules, sizeof *r * (size_t)cap);
        if (!r) {
            g->oom = true;
            return -1;
        }
        g->rules = r;
        g->cap_rules = cap;
    }
    g->rules[g->n_rules] = (rule){ 0 };
    return g->n_rules++;
}

static void push_elem(tc_grammar *g, int r, uint8_t kind, int32_t arg)
{
    if (r < 0 || r >= g->n_rules || g->oom) {
        g->oom = true;
        return;
    }
    rule *x = &g->rules[r];
    if (x->n == x->cap) {
        int cap = x->cap ? 2 * x->cap : 8;
        elem *e = realloc(x->e, sizeof *e * (size_t)cap);
        if (!e) {
            g->oom = true;
            return;
        }
        x->e = e;
        x->cap = cap;
    }
    x->e[x->n++] = (elem){ kind, arg };
}

static int new_set(tc_grammar *g, const uint64_t bits[4])
{
    if (g->n_sets == g->cap_sets) {
        int cap = g->cap_sets ? 2 * g->cap_sets : 64;
        uint64_t(*s)[4] = realloc(g->sets, sizeof *s * (size_t)cap);
        if (!s) {
            g->oom = true;
            return -1;
        }
        g->sets = s;
        g->cap_sets = cap;
    }
    memcpy(g->sets[g->n_sets], bits, sizeof g->sets[0]);
    return g->n_sets++;
}

void tc_grammar_lit(tc_grammar *g, int r, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)s[i];
        if (g->byte_set[b] < 0) {
            uint64_t bits[4] = { 0 };
            bits[b >> 6] = 1ull << (b & 63);
            g->byte_set[b] = new_set(g, bits);
        }
        push_elem(g, r, E_SET, g->byte_set[b]);
    }
}

void tc_grammar_set(tc_grammar *g, int r, const bool bytes[256])
{
    uint64_t bits[4] = { 0 };
    for (int b = 0; b < 256; b++)
        if (bytes[b])
            bits[b >> 6] |= 1ull << (b & 63);
    push_elem(g, r, E_SET, new_set(g, bits));
}

void tc_grammar_ref(tc_grammar *g, int r, int other)
{
    push_elem(g, r, E_REF, other);
}

void tc_grammar_alt(tc_grammar *g, int r)
{
    push_elem(g, r, E_ALT, 0);
}

static const tc_tokenizer *sort_tok;
static int by_piece(const void *a, const void *b)
{
    size_t la, lb;
    const char *pa = tc_tokenizer_piece(sort_tok, *(const int32_t *)a, &la);
    const char *pb = tc_tokenizer_piece(sort_tok, *(const int32_t *)b, &lb);
    int c = memcmp(pa, pb, la < lb ? la : lb);
    return c ? c : (la > lb) - (la < lb);
}

/* Order the ordinary tokens with a piece by their bytes (pieces of MAX_STACK bytes at most;
 * longer ones are never allowed) and note the prefix each shares with the one before. */
static bool sort_pieces(tc_grammar *g)
{
    if (!g->tok)
        return true;
    g->order = malloc(sizeof *g->order * (size_t)(g->vocab + 1));
    g->shared = malloc(sizeof *g->shared * (size_t)(g->vocab + 1));
    g->piece = malloc(sizeof *g->piece * (size_t)(g->vocab + 1));
    g->piece_len = malloc(sizeof *g->piece_len * (size_t)(g->vocab + 1));
    if (!g->order || !g->shared || !g->piece || !g->piece_len)
        return false;
    for (int32_t t = 0; t < g->vocab; t++) {
        size_t len = 0;
        const char *p = tc_tokenizer_piece(g->tok, t, &len);
        if (p && len && len <= MAX_STACK && !tc_tokenizer_is_control(g->tok, t)) {
            g->order[g->n_order++] = t;
            g->max_piece = len > (size_t)g->max_piece ? (int)len : g->max_piece;
        }
    }
    /* qsort has no context argument in C11: the tokenizer goes through a static, under a
     * lock since requests compile grammars on their own threads. */
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&mu);
    sort_tok = g->tok;
    qsort(g->order, (size_t)g->n_order, sizeof *g->order, by_piece);
    pthread_mutex_unlock(&mu);
    size_t lp = 0;
    const char *pp = NULL;
    for (int32_t i = 0; i < g->n_order; i++) {
        size_t len;
        const char *p = tc_tokenizer_piece(g->tok, g->order[i], &len);
        size_t k = 0;
        while (pp && k < len && k < lp && p[k] == pp[k])
            k++;
        g->shared[i] = (uint16_t)k;
        g->piece[i] = (const uint8_t *)p;
        g->piece_len[i] = (uint16_t)len;
        pp = p;
        lp = len;
    }
    return true;
}

bool tc_grammar_finish(tc_grammar *g, int root, const tc_tokenizer *tok)
{
    if (g->oom || root < 0 || root >= g->n_rules)
        return false;
    size_t total = 0;
    for (int r = 0; r < g->n_rules; r++)
        total += (size_t)g->rules[r].n + 2;
    g->flat = malloc(sizeof *g->flat * total);
    g->start = malloc(sizeof *g->start * (size_t)g->n_rules);
    g->cache = calloc(CACHE, sizeof *g->cache);
    if (!g->flat || !g->start || !g->cache)
        return false;
    size_t at = 0;
    for (int r = 0; r < g->n_rules; r++) {
        g->start[r] = (int32_t)at;
        for (int i = 0; i < g->rules[r].n; i++) {
            elem e = g->rules[r].e[i];
            if (e.kind == E_REF && (e.arg < 0 || e.arg >= g->n_rules))
                return false;
            g->flat[at++] = e;
        }
        g->flat[at++] = (elem){ E_ALT, 0 };
        g->flat[at++] = (elem){ E_END, 0 };
    }
    g->root = root;
    g->tok = tok;
    g->vocab = tok ? tc_tokenizer_vocab(tok) : 0;
    return sort_pieces(g);
}

tc_grammar *tc_grammar_ref_take(tc_grammar *g)
{
    if (g)
        __atomic_add_fetch(&g->refs, 1, __ATOMIC_RELAXED);
    return g;
}

void tc_grammar_unref(tc_grammar *g)
{
    if (!g || __atomic_sub_fetch(&g->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    for (int r = 0; r < g->n_rules; r++)
        free(g->rules[r].e);
    free(g->rules);
    free(g->sets);
    free(g->flat);
    free(g->start);
    free(g->order);
    free(g->shared);
    free(g->piece);
    free(g->piece_len);
    if (g->cache)
        for (int i = 0; i < CACHE; i++) {
            free(g->cache[i].state);
            free(g->cache[i].bits);
        }
    free(g->cache);
    free(g);
}

/* ---------------------------------------------------------------- recognising */

static bool set_has(const tc_grammar *g, int set, uint8_t b)
{
    return g->sets[set][b >> 6] >> (b & 63) & 1;
}

/* Add one stack to a state unless it holds it already. */
static void add_stack(stacks *s, const int32_t *p, int n)
{
    if (s->oom)
        return;
    /* Stacks of a state mostly share their bottoms: the tops tell most apart without a
     * memcmp. */
    for (size_t at = 0; at < s->n; at += (size_t)s->v[at] + 1)
        if (s->v[at] == n && (n == 0 || s->v[at + (size_t)n] == p[n - 1]) &&
            !memcmp(s->v + at + 1, p, sizeof *p * (size_t)n))
            return;
    if (s->count >= MAX_STACKS)
        return; /* more alternatives alive than any schema needs: this one is dropped */
    if (s->n + (size_t)n + 1 > s->cap) {
        size_t cap = (s->n + (size_t)n + 1) * 2 + 64;
        int32_t *v = realloc(s->v, sizeof *v * cap);
        if (!v) {
            s->oom = true;
            return;
        }
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = n;
    memcpy(s->v + s->n, p, sizeof *p * (size_t)n);
    s->n += (size_t)n;
    s->count++;
}

/* Expand the stack p[0..n) until its top is a byte set (or it is empty) and add the results
 * to out. p has room for MAX_STACK positions. */
static void expand(const tc_grammar *g, int32_t *p, int n, int depth, stacks *out)
{
    if (depth > MAX_EPSILON)
        return;
    if (n == 0) {
        add_stack(out, p, 0);
        return;
    }
    int32_t top = p[n - 1];
    elem e = g->flat[top];
    if (e.kind == E_SET) {
        add_stack(out, p, n);
        return;
    }
    if (e.kind == E_END || e.kind == E_ALT) {
        expand(g, p, n - 1, depth + 1, out);
        return;
    }
    /* A reference: continue after it (unless it ends its alternative: a tail call), under
     * each alternative of the rule. */
    int32_t q[MAX_STACK];
    int base = n - 1;
    memcpy(q, p, sizeof *q * (size_t)base);
    elem next = g->flat[top + 1];
    if (next.kind != E_END && next.kind != E_ALT)
        q[base++] = top + 1;
    for (int32_t a = g->start[e.arg];;) {
        if (g->flat[a].kind == E_END)
            break;
        if (base < MAX_STACK) {
            int m = base;
            if (g->flat[a].kind != E_ALT)
                q[m++] = a;
            expand(g, q, m, depth + 1, out); /* reads q, never writes it */
        }
        while (g->flat[a].kind != E_ALT)
            a++;
        a++;
    }
}

/* The state after byte b from state s, into out (cleared first). */
static void advance(const tc_grammar *g, const stacks *s, uint8_t b, stacks *out)
{
    out->n = 0;
    out->count = 0;
    int32_t p[MAX_STACK];
    for (size_t at = 0; at < s->n; at += (size_t)s->v[at] + 1) {
        int n = s->v[at];
        if (n == 0)
            continue;
        const int32_t *stack = s->v + at + 1;
        int32_t top = stack[n - 1];
        if (!set_has(g, g->flat[top].arg, b))
            continue;
        memcpy(p, stack, sizeof *p * (size_t)(n - 1));
        int m = n - 1;
        elem next = g->flat[top + 1];
        if (next.kind != E_END && next.kind != E_ALT)
            p[m++] = top + 1;
        expand(g, p, m, 0, out);
    }
}

static bool copy_stacks(stacks *dst, const stacks *src)
{
    if (dst->cap < src->n) {
        int32_t *v = realloc(dst->v, sizeof *v * (src->n + 16));
        if (!v)
            return false;
        dst->v = v;
        dst->cap = src->n + 16;
    }
    memcpy(dst->v, src->v, sizeof *src->v * src->n);
    dst->n = src->n;
    dst->count = src->count;
    return true;
}

static bool accepting(const stacks *s)
{
    for (size_t at = 0; at < s->n; at += (size_t)s->v[at] + 1)
        if (s->v[at] == 0)
            return true;
    return false;
}

tc_grammar_state *tc_grammar_start(tc_grammar *g)
{
    tc_grammar_state *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->g = tc_grammar_ref_take(g);
    int32_t p[MAX_STACK];
    /* The root as a one-element rule reference: expand its alternatives. */
    for (int32_t a = g->start[g->root]; g->flat[a].kind != E_END;) {
        int m = 0;
        if (g->flat[a].kind != E_ALT)
            p[m++] = a;
        expand(g, p, m, 0, &s->cur);
        while (g->flat[a].kind != E_ALT)
            a++;
        a++;
    }
    if (s->cur.oom) {
        tc_grammar_state_free(s);
        return NULL;
    }
    return s;
}

void tc_grammar_state_free(tc_grammar_state *s)
{
    if (!s)
        return;
    free(s->cur.v);
    free(s->a.v);
    free(s->b.v);
    if (s->depth)
        for (int d = 0; d <= s->g->max_piece; d++)
            free(s->depth[d].v);
    free(s->depth);
    tc_grammar_unref(s->g);
    free(s);
}

bool tc_grammar_done(const tc_grammar_state *s)
{
    return accepting(&s->cur);
}

/* Feed bytes p[0..n) from state `from`; the result in *res (one of the scratch states), or
 * NULL when a byte is not allowed. */
static const stacks *feed(tc_grammar_state *s, const stacks *from, const uint8_t *p, size_t n)
{
    const stacks *x = from;
    for (size_t i = 0; i < n; i++) {
        stacks *y = x == &s->a ? &s->b : &s->a;
        advance(s->g, x, p[i], y);
        if (y->count == 0 || y->oom)
            return NULL;
        x = y;
    }
    return x;
}

bool tc_grammar_accept(tc_grammar_state *s, int32_t token)
{
    const tc_grammar *g = s->g;
    if (g->tok && tc_tokenizer_is_control(g->tok, token))
        return accepting(&s->cur);
    size_t len = 0;
    const char *piece = g->tok ? tc_tokenizer_piece(g->tok, token, &len) : NULL;
    if (!piece || !len)
        return false;
    const stacks *r = feed(s, &s->cur, (const uint8_t *)piece, len);
    return r && copy_stacks(&s->cur, r);
}

static uint64_t state_key(const stacks *s)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < s->n; i++)
        h = (h ^ (uint32_t)s->v[i]) * 1099511628211ull;
    return h ^ (h >> 31);
}

/* The allowed-token bits of the current state, from the cache or computed: valid until the
 * next mask of any state of the same grammar (the cache may start again). */
static const uint32_t *mask_bits(tc_grammar_state *s)
{
    tc_grammar *g = s->g;
    uint64_t key = state_key(&s->cur);
    size_t slot = key & (CACHE - 1);
    for (size_t i = slot;; i = (i + 1) & (CACHE - 1)) {
        mask *m = &g->cache[i];
        if (!m->bits)
            break;
        if (m->key == key && m->state_len == s->cur.n &&
            !memcmp(m->state, s->cur.v, sizeof *m->state * s->cur.n))
            return m->bits;
    }
    if (g->n_cached >= CACHE / 2) { /* full enough: start again */
        for (int i = 0; i < CACHE; i++) {
            free(g->cache[i].state);
            free(g->cache[i].bits);
            g->cache[i] = (mask){ 0 };
        }
        g->n_cached = 0;
    }
    size_t words = ((size_t)g->vocab + 31) / 32;
    uint32_t *bits = calloc(words ? words : 1, sizeof *bits);
    int32_t *state = malloc(sizeof *state * (s->cur.n ? s->cur.n : 1));
    if (!bits || !state) {
        free(bits);
        free(state);
        return NULL;
    }
    memcpy(state, s->cur.v, sizeof *state * s->cur.n);
    /* The bytes any stack can take next: most tokens fail on their first. */
    bool first[256] = { false };
    for (size_t at = 0; at < s->cur.n; at += (size_t)s->cur.v[at] + 1) {
        int n = s->cur.v[at];
        if (n == 0)
            continue;
        int set = g->flat[s->cur.v[at + n]].arg;
        for (int b = 0; b < 256; b++)
            first[b] |= set_has(g, set, (uint8_t)b);
    }
    bool done = accepting(&s->cur);
    for (int32_t t = 0; t < g->vocab; t++)
        if (tc_tokenizer_is_control(g->tok, t) && done)
            bits[t >> 5] |= 1u << (t & 31);
    /* The pieces in byte order: depth[k] is the state after the first k bytes of the
     * current piece, valid up to `valid` (a prefix that failed stops there). */
    if (!s->depth) {
        s->depth = calloc((size_t)g->max_piece + 1, sizeof *s->depth);
        if (!s->depth) {
            free(bits);
            free(state);
            return NULL;
        }
    }
    const stacks *level[MAX_STACK + 1];
    level[0] = &s->cur;
    size_t valid = 0; /* depth[1..valid] hold the states of the previous piece's prefix */
    for (int32_t i = 0; i < g->n_order; i++) {
        int32_t t = g->order[i];
        size_t len = g->piece_len[i];
        const uint8_t *p = g->piece[i];
        size_t k = g->shared[i] < valid ? g->shared[i] : valid;
        if (k == 0 && !first[p[0]]) {
            valid = 0;
            continue;
        }
        bool ok = true;
        for (; k < len; k++) {
            stacks *next = &s->depth[k + 1];
            advance(g, level[k], p[k], next);
            if (next->count == 0 || next->oom) {
                ok = false;
                break;
            }
            level[k + 1] = next;
        }
        valid = k;
        if (ok)
            bits[t >> 5] |= 1u << (t & 31);
    }
    size_t i = slot;
    while (g->cache[i].bits)
        i = (i + 1) & (CACHE - 1);
    g->cache[i] = (mask){ key, state, s->cur.n, bits };
    g->n_cached++;
    return bits;
}

bool tc_grammar_mask(tc_grammar_state *s, float *row, int32_t vocab)
{
    const uint32_t *bits = mask_bits(s);
    if (!bits)
        return false;
    for (int32_t t = 0; t < vocab; t++)
        if (t >= s->g->vocab || !(bits[t >> 5] >> (t & 31) & 1))
            row[t] = -INFINITY;
    return true;
}

bool tc_grammar_allowed(tc_grammar_state *s, uint32_t *words, int64_t n_words)
{
    const uint32_t *bits = mask_bits(s);
    if (!bits)
        return false;
    int64_t have = ((int64_t)s->g->vocab + 31) / 32, n = have < n_words ? have : n_words;
    memcpy(words, bits, sizeof *words * (size_t)n);
    memset(words + n, 0, sizeof *words * (size_t)(n_words - n));
    return true;
}

/* A byte-level recogniser for context-free rules, in the manner of llama.cpp's grammar
 * sampler (a set of stacks of rule positions, each stack's top the next byte set to match):
 * the rules are flattened into one array of elements; a state is the set of stacks, kept
 * expanded so that every top is a byte set (or the stack is empty: the document may end). */
#include "inference/grammar.h"

#include <stdlib.h>
#include <string.h>

#include "inference/grammar_internal.h"

/* ---------------------------------------------------------------- building */

tc_grammar *tc_grammar_create(void)
{
    tc_grammar *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->refs = 1;
    pthread_mutex_init(&g->mu, NULL);
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

bool tc_grammar_finish(tc_grammar *g, int root, const tc_tokenizer *tok)
{
    if (g->oom || root < 0 || root >= g->n_rules)
        return false;
    size_t total = 0;
    for (int r = 0; r < g->n_rules; r++)
        total += (size_t)g->rules[r].n + 2;
    g->flat = malloc(sizeof *g->flat * total);
    g->start = malloc(sizeof *g->start * (size_t)g->n_rules);
    if (!g->flat || !g->start)
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
    if (tok) {
        g->trie = tc__tokenizer_trie(tok);
        if (!g->trie)
            return false;
        g->max_piece = g->trie->max_len < MAX_STACK ? g->trie->max_len : MAX_STACK;
    }
    return tc__grammar_masks_init(g);
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
    tc__grammar_masks_free(g);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

/* ---------------------------------------------------------------- recognising */

static bool set_has(const tc_grammar *g, int set, uint8_t b)
{
    return g->sets[set][b >> 6] >> (b & 63) & 1;
}

void tc__grammar_add_stack(stacks *s, const int32_t *p, int n)
{
    if (s->oom)
        return;
    /* Stacks of a state mostly share their bottoms: the tops tell most apart without a
     * memcmp. */
    for (size_t at = 0; at < s->n; at += (size_t)s->v[at] + 1)
        if (s->v[at] == n && (n == 0 || s->v[at + (size_t)n] == p[n - 1]) &&
            !memcmp(s->v + at + 1, p, sizeof *p * (size_t)n))
            return;
    if (s->count >= MAX_STACKS) {
        s->dropped = true; /* more alternatives alive than any schema needs: dropped */
        return;
    }
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

void tc__grammar_expand(const tc_grammar *g, int32_t *p, int n, int depth, stacks *out,
                        tc__limits *lim)
{
    if (depth > MAX_EPSILON)
        return;
    lim->max_depth = depth > lim->max_depth ? depth : lim->max_depth;
    if (n == 0) {
        lim->max_empty = depth > lim->max_empty ? depth : lim->max_empty;
        tc__grammar_add_stack(out, p, 0);
        return;
    }
    int32_t top = p[n - 1];
    elem e = g->flat[top];
    if (e.kind == E_SET) {
        tc__grammar_add_stack(out, p, n);
        return;
    }
    if (e.kind == E_END || e.kind == E_ALT) {
        tc__grammar_expand(g, p, n - 1, depth + 1, out, lim);
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
    lim->max_base = base > lim->max_base ? base : lim->max_base;
    for (int32_t a = g->start[e.arg];;) {
        if (g->flat[a].kind == E_END)
            break;
        if (base < MAX_STACK) {
            int m = base;
            if (g->flat[a].kind != E_ALT)
                q[m++] = a;
            tc__grammar_expand(g, q, m, depth + 1, out, lim); /* reads q, never writes it */
        }
        while (g->flat[a].kind != E_ALT)
            a++;
        a++;
    }
}

void tc__grammar_advance(const tc_grammar *g, const stacks *s, uint8_t b, stacks *out,
                         tc__limits *lim)
{
    out->n = 0;
    out->count = 0;
    out->dropped = false;
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
        tc__grammar_expand(g, p, m, 0, out, lim);
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

bool tc__grammar_accepting(const stacks *s)
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
        tc__limits lim = { -1, -1, -1 };
        tc__grammar_expand(g, p, m, 0, &s->cur, &lim);
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
    return tc__grammar_accepting(&s->cur);
}

/* Feed bytes p[0..n) from state `from`; the result in *res (one of the scratch states), or
 * NULL when a byte is not allowed. */
static const stacks *feed(tc_grammar_state *s, const stacks *from, const uint8_t *p, size_t n)
{
    const stacks *x = from;
    for (size_t i = 0; i < n; i++) {
        stacks *y = x == &s->a ? &s->b : &s->a;
        tc__limits lim = { -1, -1, -1 };
        tc__grammar_advance(s->g, x, p[i], y, &lim);
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
        return tc__grammar_accepting(&s->cur);
    size_t len = 0;
    const char *piece = g->tok ? tc_tokenizer_piece(g->tok, token, &len) : NULL;
    if (!piece || !len)
        return false;
    const stacks *r = feed(s, &s->cur, (const uint8_t *)piece, len);
    return r && copy_stacks(&s->cur, r);
}

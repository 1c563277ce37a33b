/* Compiled grammars shared by requests with the same response format or tools: a small cache,
 * least recently used out first, keyed by the text a grammar was compiled from, so that a
 * client repeating its schema compiles it once and its requests share one grammar's masks. */
#include "server/grammars.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot {
    char *key; /* NULL: empty */
    size_t len;
    tc_grammar *g; /* the cache's reference */
    uint64_t used; /* when last found or kept (a counter) */
} slot;

struct tc__grammars {
    pthread_mutex_t mu;
    slot *slots; /* [n] */
    int n;
    uint64_t clock;
    uint64_t hits, misses;
};

tc__grammars *tc__grammars_create(int n)
{
    tc__grammars *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->slots = calloc((size_t)(n > 0 ? n : 1), sizeof *c->slots);
    if (!c->slots) {
        free(c);
        return NULL;
    }
    c->n = n;
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

void tc__grammars_destroy(tc__grammars *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++) {
        free(c->slots[i].key);
        tc_grammar_unref(c->slots[i].g);
    }
    pthread_mutex_destroy(&c->mu);
    free(c->slots);
    free(c);
}

/* The slot holding key, or -1; the caller holds the lock. */
static int find(const tc__grammars *c, const char *key, size_t len)
{
    for (int i = 0; i < c->n; i++)
        if (c->slots[i].key && c->slots[i].len == len && !memcmp(c->slots[i].key, key, len))
            return i;
    return -1;
}

tc_grammar *tc__grammars_get(tc__grammars *c, const char *key, size_t len)
{
    if (!c || len > TC_GRAMMARS_MAX_KEY)
        return NULL;
    pthread_mutex_lock(&c->mu);
    int i = find(c, key, len);
    tc_grammar *g = NULL;
    if (i >= 0) {
        c->slots[i].used = ++c->clock;
        g = tc_grammar_ref_take(c->slots[i].g);
        c->hits++;
    } else {
        c->misses++;
    }
    pthread_mutex_unlock(&c->mu);
    return g;
}

tc_grammar *tc__grammars_put(tc__grammars *c, const char *key, size_t len, tc_grammar *g)
{
    if (!c || len > TC_GRAMMARS_MAX_KEY || c->n < 1)
        return g;
    char *copy = malloc(len ? len : 1);
    if (!copy)
        return g; /* not kept: the request still has its grammar */
    memcpy(copy, key, len);
    pthread_mutex_lock(&c->mu);
    int i = find(c, key, len);
    if (i >= 0) { /* another request compiled it meanwhile: share that one */
        tc_grammar *kept = tc_grammar_ref_take(c->slots[i].g);
        c->slots[i].used = ++c->clock;
        pthread_mutex_unlock(&c->mu);
        free(copy);
        tc_grammar_unref(g);
        return kept;
    }
    int victim = 0;
    for (int k = 1; k < c->n; k++)
        if (!c->slots[k].key || (c->slots[victim].key && c->slots[k].used < c->slots[victim].used))
            victim = k;
    slot old = c->slots[victim];
    c->slots[victim] = (slot){ copy, len, tc_grammar_ref_take(g), ++c->clock };
    pthread_mutex_unlock(&c->mu);
    free(old.key);
    tc_grammar_unref(old.g); /* requests still using it hold their own references */
    return g;
}

void tc__grammars_counts(tc__grammars *c, uint64_t *hits, uint64_t *misses)
{
    *hits = *misses = 0;
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    *hits = c->hits;
    *misses = c->misses;
    pthread_mutex_unlock(&c->mu);
}

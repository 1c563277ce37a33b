/* The engine: requests, sequences, the step scheduler and the engine thread. */
#include "inference/engine.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inference/blocks.h"
#include "inference/grammar.h"
#include "runtime/host.h"
#include "runtime/log.h"
#include "runtime/profile.h"

enum { SEQ_WAITING, SEQ_RUNNING, SEQ_DONE };
/* Bytes of text one token may release (a piece, or text held back for stop strings). */
enum { PIECE = 1 << 16 };

typedef struct request request;

typedef struct seq {
    request *req;
    int index;
    uint64_t order; /* arrival: the request's number, then the choice */
    int state;
    int32_t *toks; /* prompt, then generated tokens */
    int64_t n_toks, cap, n_prompt, n_generated;
    int64_t n_cached;        /* tokens whose keys and values are in the cache */
    int32_t *table, n_table; /* blocks */
    /* With a sliding window: table[0 .. n_dropped) were released (-1), wholly before the
     * window of the next token. */
    int32_t n_dropped;
    uint64_t *hashes;    /* [max_blocks] hash of each full block's prefix */
    int32_t n_committed; /* full blocks recorded in the prefix cache */
    int64_t step_new;    /* tokens scheduled in the current step */
    tc_detok detok;
    tc_grammar_state *gs; /* where the generated text is in the request's grammar */
    char *text;           /* generated text not yet released */
    size_t text_len, text_cap;
    /* The last token's log-probabilities, when the request wants them. */
    float lp;
    int n_top;
    int32_t top_tokens[TC_ENGINE_MAX_TOP_LOGPROBS];
    float top_lp[TC_ENGINE_MAX_TOP_LOGPROBS];
} seq;

struct request {
    uint64_t id;
    tc_request r;    /* arrays copied below */
    int32_t *prompt; /* owned */
    int32_t *stop_tokens;
    char **stop;
    int32_t *bias_ids;
    float *bias;
    size_t max_stop_len;
    int64_t max_tokens;
    int64_t cached_tokens;
    bool cancelled, forked, admitted;
    int n_live;
    seq **seqs; /* [n] */
    request *next;
};

struct tc_engine {
    tc_engine_model m;
    tc_engine_options o;
    int32_t *stop_tokens;
    int64_t context; /* tokens a sequence may hold */
    tc_blocks *bm;
    /* Engine-thread state. */
    seq **running, **waiting;
    int32_t n_running, n_waiting, cap_seqs;
    int32_t n_slots; /* choices of the live requests: what the lists must hold */
    request *live;   /* admitted requests, newest first */
    uint64_t next_order;
    /* Step buffers. */
    seq **batch, **sorted;
    int32_t *tokens, *positions, *slots, *q_start, *seq_lens, *table, *sampled;
    int32_t *copy_src, *copy_dst;
    int32_t n_copies, cap_copies;
    tc_sample_row *rows;
    char *piece;
    float *logit_row;           /* [vocab], host: one row of logits for log-probabilities */
    tc_logits_constraint *cons; /* [max_seqs] the step's constrained rows */
    uint32_t *masks;            /* [cap_masks][(vocab + 31) / 32] their grammars' masks */
    int32_t cap_masks;
    /* The counters of tc_engine_stats that steps change, copied into `stats` at the end of
     * each step (publish_stats). */
    tc_engine_stats own;
    /* Shared with other threads, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    request *incoming, *incoming_tail;
    int32_t n_incoming;
    uint64_t *cancels;
    int32_t n_cancels, cap_cancels;
    uint64_t *ids; /* requests not finished */
    int32_t n_ids, cap_ids;
    uint64_t next_id;
    tc_engine_stats stats;
    bool stop;
    pthread_t thread;
    bool has_thread;
};

const char *tc_finish_reason_name(tc_finish_reason r)
{
    switch (r) {
    case TC_FINISH_STOP: return "stop";
    case TC_FINISH_LENGTH: return "length";
    case TC_FINISH_CANCELLED: return "cancelled";
    case TC_FINISH_ERROR: return "error";
    default: return "none";
    }
}

static int64_t blocks_for(const tc_engine *e, int64_t tokens)
{
    return (tokens + e->m.block_size - 1) / e->m.block_size;
}

/* ---------------------------------------------------------------- requests */

static void free_seq(seq *s)
{
    if (!s)
        return;
    tc_host_free(s->toks);
    tc_host_free(s->table);
    tc_host_free(s->hashes);
    tc_host_free(s->text);
    tc_grammar_state_free(s->gs);
    tc_host_free(s);
}

static void free_request(request *q)
{
    if (!q)
        return;
    for (int i = 0; q->seqs && i < q->r.n; i++)
        free_seq(q->seqs[i]);
    for (int i = 0; q->stop && i < q->r.n_stop; i++)
        tc_host_free(q->stop[i]);
    tc_host_free(q->stop);
    tc_host_free(q->seqs);
    tc_host_free(q->prompt);
    tc_host_free(q->stop_tokens);
    tc_host_free(q->bias_ids);
    tc_host_free(q->bias);
    tc_grammar_unref(q->r.grammar);
    tc_host_free(q);
}

static seq *new_seq(const tc_engine *e, request *q, int index)
{
    seq *s = tc_host_calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->req = q;
    s->index = index;
    s->cap = q->r.n_prompt + q->max_tokens + 1;
    s->toks = tc_host_alloc(sizeof(int32_t) * (size_t)s->cap);
    s->table = tc_host_alloc(sizeof(int32_t) * (size_t)e->m.max_blocks);
    s->hashes = tc_host_alloc(sizeof(uint64_t) * (size_t)e->m.max_blocks);
    if (q->r.grammar)
        s->gs = tc_grammar_start(q->r.grammar);
    if (!s->toks || !s->table || !s->hashes || (q->r.grammar && !s->gs)) {
        free_seq(s);
        return NULL;
    }
    memcpy(s->toks, q->prompt, sizeof(int32_t) * (size_t)q->r.n_prompt);
    s->n_toks = s->n_prompt = q->r.n_prompt;
    return s;
}

#define BAD(...) tc_set_error(TC_ERR_INVALID_ARGUMENT, "tc_engine_submit", __VA_ARGS__)

static tc_status check_request(const tc_engine *e, const tc_request *r, int64_t *max_tokens)
{
    if (!r->prompt || r->n_prompt < 1)
        return BAD("the prompt is empty");
    for (int64_t i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= e->m.vocab)
            return BAD("prompt token %lld is %d, outside the vocabulary of %d", (long long)i,
                       r->prompt[i], e->m.vocab);
    int n = r->n < 1 ? 1 : r->n;
    if (r->n < 0 || n > e->o.max_running)
        return BAD("n = %d choices; at most %d run at once", r->n, e->o.max_running);
    if (r->max_tokens < 0)
        return BAD("max_tokens is %lld", (long long)r->max_tokens);
    if (r->n_prompt >= e->context)
        return BAD("the prompt has %lld tokens; the context holds %lld", (long long)r->n_prompt,
                   (long long)e->context);
    int64_t mt = r->max_tokens ? r->max_tokens : e->context - r->n_prompt;
    if (r->n_prompt + mt > e->context)
        return BAD("%lld prompt tokens + %lld to generate exceed the context of %lld tokens",
                   (long long)r->n_prompt, (long long)mt, (long long)e->context);
    /* Each choice must fit in the cache by itself, or the oldest could never finish; with a
     * sliding window it holds at most the window and a step's tokens at once. */
    int64_t held = r->n_prompt + mt;
    if (e->m.window > 0 && held > (int64_t)e->m.window + e->o.max_step_tokens + e->m.block_size)
        held = (int64_t)e->m.window + e->o.max_step_tokens + e->m.block_size;
    if (blocks_for(e, held) * n > e->m.n_blocks)
        return BAD("%lld tokens x %d choices do not fit in the KV cache of %lld tokens",
                   (long long)(r->n_prompt + mt), n, (long long)e->m.n_blocks * e->m.block_size);
    if ((r->n_stop > 0 && !e->o.tok) || r->n_stop < 0 || r->n_stop_tokens < 0)
        return BAD("stop strings need the engine's tokenizer");
    for (int i = 0; i < r->n_stop; i++)
        if (!r->stop || !r->stop[i] || !r->stop[i][0])
            return BAD("stop string %d is empty", i);
    for (int i = 0; i < r->n_stop_tokens; i++)
        if (r->stop_tokens[i] < 0 || r->stop_tokens[i] >= e->m.vocab)
            return BAD("stop token %d is %d, outside the vocabulary of %d", i, r->stop_tokens[i],
                       e->m.vocab);
    if (r->top_logprobs < 0 || r->top_logprobs > TC_ENGINE_MAX_TOP_LOGPROBS ||
        (r->top_logprobs > 0 && !r->logprobs))
        return BAD("top_logprobs is %d; want 0 .. %d, with logprobs", r->top_logprobs,
                   TC_ENGINE_MAX_TOP_LOGPROBS);
    if (r->n_bias < 0 || (r->n_bias > 0 && (!r->bias_ids || !r->bias)))
        return BAD("a logit bias of %d tokens without its arrays", r->n_bias);
    for (int i = 0; i < r->n_bias; i++)
        if (r->bias_ids[i] < 0 || r->bias_ids[i] >= e->m.vocab || !isfinite(r->bias[i]))
            return BAD("logit bias %d: token %d (vocabulary %d), bias %g", i, r->bias_ids[i],
                       e->m.vocab, (double)r->bias[i]);
    if (r->grammar && !e->o.tok)
        return BAD("constrained decoding needs the engine's tokenizer");
    if (!r->callback)
        return BAD("the request has no callback");
    *max_tokens = mt;
    return TC_OK;
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = tc_host_alloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

static request *copy_request(const tc_request *r, int64_t max_tokens)
{
    request *q = tc_host_calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->r = *r;
    q->r.n = r->n < 1 ? 1 : r->n;
    q->r.grammar = tc_grammar_ref_take(r->grammar);
    q->max_tokens = max_tokens;
    q->prompt = tc_host_alloc(sizeof(int32_t) * (size_t)r->n_prompt);
    q->seqs = tc_host_calloc((size_t)q->r.n, sizeof *q->seqs);
    q->stop_tokens = tc_host_alloc(sizeof(int32_t) * (size_t)(r->n_stop_tokens + 1));
    q->stop = tc_host_calloc((size_t)r->n_stop + 1, sizeof *q->stop);
    q->bias_ids = tc_host_alloc(sizeof(int32_t) * (size_t)(r->n_bias + 1));
    q->bias = tc_host_alloc(sizeof(float) * (size_t)(r->n_bias + 1));
    if (!q->prompt || !q->seqs || !q->stop_tokens || !q->stop || !q->bias_ids || !q->bias) {
        free_request(q);
        return NULL;
    }
    memcpy(q->prompt, r->prompt, sizeof(int32_t) * (size_t)r->n_prompt);
    if (r->n_stop_tokens)
        memcpy(q->stop_tokens, r->stop_tokens, sizeof(int32_t) * (size_t)r->n_stop_tokens);
    for (int i = 0; i < r->n_stop; i++) {
        if (!(q->stop[i] = dup_str(r->stop[i]))) {
            free_request(q);
            return NULL;
        }
        size_t l = strlen(q->stop[i]);
        q->max_stop_len = l > q->max_stop_len ? l : q->max_stop_len;
    }
    if (r->n_bias) {
        memcpy(q->bias_ids, r->bias_ids, sizeof(int32_t) * (size_t)r->n_bias);
        memcpy(q->bias, r->bias, sizeof(float) * (size_t)r->n_bias);
    }
    q->r.bias_ids = q->bias_ids;
    q->r.bias = q->bias;
    q->r.prompt = q->prompt;
    q->r.stop_tokens = q->stop_tokens;
    q->r.stop = (const char *const *)q->stop;
    return q;
}

/* Grow a list of ids so that one more fits; false when out of memory. */
static bool room_for_one(uint64_t **list, int32_t n, int32_t *cap)
{
    if (n < *cap)
        return true;
    int32_t c = *cap ? 2 * *cap : 64;
    uint64_t *l = tc_host_realloc(*list, sizeof *l * (size_t)c);
    if (!l)
        return false;
    *list = l;
    *cap = c;
    return true;
}

tc_status tc_engine_submit(tc_engine *e, const tc_request *r, uint64_t *id)
{
    int64_t max_tokens = 0;
    TC_TRY(check_request(e, r, &max_tokens));
    request *q = copy_request(r, max_tokens);
    if (!q)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_engine_submit", "no host memory");
    pthread_mutex_lock(&e->mu);
    tc_status st = TC_OK;
    if (e->stop)
        st = tc_set_error(TC_ERR_CANCELLED, "tc_engine_submit", "the engine is shutting down");
    else if (e->n_incoming + e->stats.waiting >= e->o.max_queue)
        st = tc_set_error(TC_ERR_LIMIT, "tc_engine_submit", "the queue is full (%d requests)",
                          e->o.max_queue);
    else if (!room_for_one(&e->ids, e->n_ids, &e->cap_ids))
        st = tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_engine_submit", "no host memory");
    if (st == TC_OK) {
        q->id = ++e->next_id;
        e->ids[e->n_ids++] = q->id;
        if (e->incoming_tail)
            e->incoming_tail->next = q;
        else
            e->incoming = q;
        e->incoming_tail = q;
        e->n_incoming++;
        if (id)
            *id = q->id;
        pthread_cond_signal(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    if (st != TC_OK)
        free_request(q);
    return st;
}

tc_status tc_engine_cancel(tc_engine *e, uint64_t id)
{
    pthread_mutex_lock(&e->mu);
    bool known = false;
    for (int32_t i = 0; i < e->n_ids && !known; i++)
        known = e->ids[i] == id;
    tc_status st = TC_OK;
    if (!known)
        st = tc_set_error(TC_ERR_NOT_FOUND, "tc_engine_cancel", "no unfinished request %llu",
                          (unsigned long long)id);
    else if (!room_for_one(&e->cancels, e->n_cancels, &e->cap_cancels))
        st = tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_engine_cancel", "no host memory");
    if (st == TC_OK) {
        e->cancels[e->n_cancels++] = id;
        pthread_cond_signal(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    return st;
}

/* ---------------------------------------------------------------- sequence lists */

static void list_remove(seq **list, int32_t *n, seq *s)
{
    for (int32_t i = 0; i < *n; i++)
        if (list[i] == s) {
            memmove(list + i, list + i + 1, sizeof *list * (size_t)(*n - i - 1));
            (*n)--;
            return;
        }
}

/* Insert in arrival order (lists stay sorted; most inserts go at the end). */
static void list_insert(seq **list, int32_t *n, seq *s)
{
    int32_t i = *n;
    while (i > 0 && list[i - 1]->order > s->order)
        i--;
    memmove(list + i + 1, list + i, sizeof *list * (size_t)(*n - i));
    list[i] = s;
    (*n)++;
}

static void release_blocks(tc_engine *e, seq *s)
{
    for (int32_t i = s->n_dropped; i < s->n_table; i++)
        tc_blocks_release(e->bm, s->table[i]);
    s->n_table = 0;
    s->n_dropped = 0;
    s->n_committed = 0;
    s->n_cached = 0;
}

static void emit(tc_engine *e, seq *s, int32_t token, const char *text, size_t len,
                 tc_finish_reason finish, const char *error)
{
    request *q = s->req;
    tc_engine_event ev = { .request = q->id,
                           .index = s->index,
                           .token = token,
                           .text = text,
                           .text_len = len,
                           .finish = finish,
                           .prompt_tokens = q->r.n_prompt,
                           .cached_tokens = q->cached_tokens,
                           .completion_tokens = s->n_generated,
                           .error = error };
    if (q->r.logprobs && token >= 0) {
        ev.logprob = s->lp;
        ev.n_top = s->n_top;
        ev.top_tokens = s->top_tokens;
        ev.top_logprobs = s->top_lp;
    }
    q->r.callback(q->r.user, &ev);
    (void)e;
}

static void forget_id(tc_engine *e, uint64_t id)
{
    pthread_mutex_lock(&e->mu);
    for (int32_t i = 0; i < e->n_ids; i++)
        if (e->ids[i] == id) {
            e->ids[i] = e->ids[--e->n_ids];
            break;
        }
    e->stats.requests_done++;
    pthread_mutex_unlock(&e->mu);
}

static void unlink_live(tc_engine *e, request *q)
{
    for (request **p = &e->live; *p; p = &(*p)->next)
        if (*p == q) {
            *p = q->next;
            return;
        }
}

/* End sequence s: blocks freed, the final event sent, the request freed with its last. */
static void finish(tc_engine *e, seq *s, int32_t token, const char *text, size_t len,
                   tc_finish_reason why, const char *error)
{
    release_blocks(e, s);
    if (s->state == SEQ_RUNNING)
        list_remove(e->running, &e->n_running, s);
    else if (s->state == SEQ_WAITING)
        list_remove(e->waiting, &e->n_waiting, s);
    s->state = SEQ_DONE;
    request *q = s->req;
    /* The request is accounted done before its last event, so that a client woken by that
     * event sees it in the statistics. */
    bool last = --q->n_live == 0;
    if (last) {
        unlink_live(e, q);
        e->n_slots -= q->r.n;
        forget_id(e, q->id);
    }
    emit(e, s, token, text, len, why, error);
    if (s->index == 0 && q->r.n > 1 && !q->forked) {
        /* Choices never forked end with their first. */
        q->forked = true;
        for (int i = 1; i < q->r.n; i++) {
            tc_engine_event ev = { .request = q->id,
                                   .index = i,
                                   .token = -1,
                                   .finish = why,
                                   .prompt_tokens = q->r.n_prompt,
                                   .cached_tokens = q->cached_tokens,
                                   .error = error };
            q->r.callback(q->r.user, &ev);
        }
    }
    if (last)
        free_request(q);
}

/* Cancel request q: every sequence it has (and choices not yet forked) ends. */
static void cancel_request(tc_engine *e, request *q)
{
    q->cancelled = true;
    for (int i = 0; i < q->r.n; i++) {
        seq *s = q->seqs[i];
        if (s && s->state != SEQ_DONE) {
            bool last = q->n_live == 1;
            finish(e, s, -1, NULL, 0, TC_FINISH_CANCELLED, NULL);
            if (last)
                return; /* q is freed */
        }
    }
}

/* Room in the sequence lists for n more sequences. */
static bool grow_lists(tc_engine *e, int32_t n)
{
    int32_t need = e->n_slots + n;
    if (need <= e->cap_seqs)
        return true;
    int32_t cap = need * 2;
    seq **w = tc_host_realloc(e->waiting, sizeof *w * (size_t)cap);
    if (!w)
        return false;
    e->waiting = w;
    seq **r = tc_host_realloc(e->running, sizeof *r * (size_t)cap);
    if (!r)
        return false;
    e->running = r;
    e->cap_seqs = cap;
    return true;
}

/* End a request that never started: each of its choices gets a final event. */
static void reject(tc_engine *e, request *q, const char *why)
{
    forget_id(e, q->id);
    for (int i = 0; i < (q->r.n > 1 ? q->r.n : 1); i++) {
        tc_engine_event ev = { .request = q->id,
                               .index = i,
                               .token = -1,
                               .finish = TC_FINISH_ERROR,
                               .prompt_tokens = q->r.n_prompt,
                               .error = why };
        q->r.callback(q->r.user, &ev);
    }
    free_request(q);
}

/* Take new requests and cancellations from other threads. */
static tc_status intake(tc_engine *e)
{
    pthread_mutex_lock(&e->mu);
    request *in = e->incoming;
    e->incoming = e->incoming_tail = NULL;
    e->n_incoming = 0;
    int32_t n_cancels = e->n_cancels;
    uint64_t cancels[64];
    if (n_cancels > 64)
        n_cancels = 64;
    if (n_cancels > 0) {
        memcpy(cancels, e->cancels, sizeof *cancels * (size_t)n_cancels);
        memmove(e->cancels, e->cancels + n_cancels,
                sizeof *cancels * (size_t)(e->n_cancels - n_cancels));
        e->n_cancels -= n_cancels;
    }
    pthread_mutex_unlock(&e->mu);

    tc_status st = TC_OK;
    while (in) {
        request *q = in;
        in = in->next;
        seq *s = grow_lists(e, q->r.n) ? new_seq(e, q, 0) : NULL;
        if (!s) {
            reject(e, q, "out of host memory");
            st = tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_engine", "no host memory");
            continue;
        }
        q->next = e->live;
        e->live = q;
        e->n_slots += q->r.n;
        q->n_live = 1;
        q->seqs[0] = s;
        s->order = ++e->next_order << 16;
        s->state = SEQ_WAITING;
        list_insert(e->waiting, &e->n_waiting, s);
    }
    for (int32_t i = 0; i < n_cancels; i++)
        for (request *q = e->live; q; q = q->next)
            if (q->id == cancels[i]) {
                cancel_request(e, q);
                break;
            }
    return st;
}

/* ---------------------------------------------------------------- scheduling */

/* Room for `n` more tokens of s without new blocks, and whether its next position needs a copy
 * of a shared block first. */
static int64_t room(const tc_engine *e, const seq *s, bool *cow)
{
    int64_t bi = s->n_cached / e->m.block_size;
    *cow = bi < s->n_table && tc_blocks_refs(e->bm, s->table[bi]) > 1;
    return (int64_t)s->n_table * e->m.block_size - s->n_cached;
}

/* How many of the n next tokens of s the free blocks can take. */
static int64_t fits(const tc_engine *e, const seq *s, int64_t n)
{
    bool cow;
    int64_t have = room(e, s, &cow);
    tc_blocks_stats st;
    tc_blocks_get_stats(e->bm, &st);
    int64_t free_blocks = st.free - (cow ? 1 : 0);
    if (free_blocks < 0)
        return 0;
    int64_t can = have + free_blocks * e->m.block_size;
    return n < can ? n : can;
}

static bool add_copy(tc_engine *e, int32_t src, int32_t dst)
{
    if (e->n_copies == e->cap_copies) {
        int32_t cap = e->cap_copies ? 2 * e->cap_copies : 16;
        int32_t *a = tc_host_realloc(e->copy_src, sizeof *a * (size_t)cap);
        if (!a)
            return false;
        e->copy_src = a;
        int32_t *b = tc_host_realloc(e->copy_dst, sizeof *b * (size_t)cap);
        if (!b)
            return false;
        e->copy_dst = b;
        e->cap_copies = cap;
    }
    e->copy_src[e->n_copies] = src;
    e->copy_dst[e->n_copies++] = dst;
    return true;
}

/* Give s blocks for its next n tokens (fits() said they are there): a private copy of a shared
 * block it writes into, then new blocks. */
static bool reserve(tc_engine *e, seq *s, int64_t n)
{
    bool cow;
    room(e, s, &cow);
    if (cow) {
        int64_t bi = s->n_cached / e->m.block_size;
        int32_t d = tc_blocks_alloc(e->bm);
        if (d < 0)
            return false;
        if (!add_copy(e, s->table[bi], d)) {
            tc_blocks_release(e->bm, d);
            return false;
        }
        tc_blocks_release(e->bm, s->table[bi]);
        s->table[bi] = d;
        if (s->n_committed > bi)
            s->n_committed = (int32_t)bi;
    }
    while ((int64_t)s->n_table * e->m.block_size < s->n_cached + n) {
        int32_t b = tc_blocks_alloc(e->bm);
        if (b < 0)
            return false;
        s->table[s->n_table++] = b;
    }
    return true;
}

/* Preempt s: free its blocks (full ones stay in the prefix cache, so recomputing may find
 * them) and put it back in the queue, in arrival order. */
static void preempt(tc_engine *e, seq *s)
{
    release_blocks(e, s);
    list_remove(e->running, &e->n_running, s);
    s->state = SEQ_WAITING;
    list_insert(e->waiting, &e->n_waiting, s);
    e->own.preemptions++;
}

/* Look up the prompt's full blocks in the prefix cache (never the block of the last token: its
 * logits must be computed). */
static void lookup_prefix(tc_engine *e, seq *s)
{
    if (e->o.no_prefix_cache || s->n_table > 0)
        return;
    int32_t bs = e->m.block_size;
    uint64_t parent = 0;
    while ((int64_t)(s->n_table + 1) * bs <= s->n_toks - 1) {
        const int32_t *t = s->toks + (int64_t)s->n_table * bs;
        uint64_t h = tc_blocks_hash(parent, t, bs);
        int32_t b = tc_blocks_lookup(e->bm, h, parent, t);
        if (b < 0)
            break;
        s->hashes[s->n_table] = h;
        s->table[s->n_table++] = b;
        parent = h;
    }
    s->n_committed = s->n_table;
    s->n_cached = (int64_t)s->n_table * bs;
}

/* With a sliding window, release the blocks of s that lie wholly before the window of its next
 * token (position n_cached sees n_cached - window + 1 on); full blocks stay in the prefix
 * cache as released blocks do. */
static void drop_outside_window(tc_engine *e, seq *s)
{
    if (e->m.window <= 0)
        return;
    int32_t bs = e->m.block_size;
    int64_t first = s->n_cached - e->m.window + 1;
    while (s->n_dropped < s->n_table && (int64_t)(s->n_dropped + 1) * bs <= first &&
           (e->o.no_prefix_cache || s->n_dropped < s->n_committed)) {
        tc_blocks_release(e->bm, s->table[s->n_dropped]);
        s->table[s->n_dropped++] = -1;
    }
}

/* Record the blocks of s that became full. */
static void commit_blocks(tc_engine *e, seq *s)
{
    if (e->o.no_prefix_cache)
        return;
    int32_t bs = e->m.block_size;
    while ((int64_t)(s->n_committed + 1) * bs <= s->n_cached) {
        int32_t i = s->n_committed;
        uint64_t parent = i ? s->hashes[i - 1] : 0;
        const int32_t *t = s->toks + (int64_t)i * bs;
        s->hashes[i] = tc_blocks_hash(parent, t, bs);
        tc_blocks_commit(e->bm, s->table[i], s->hashes[i], parent, t);
        s->n_committed++;
    }
}

/* Choose this step's work into e->batch: each running sequence's pending tokens (decodes take
 * one, prompts a chunk of what the budget leaves), preempting the newest when blocks run out;
 * then waiting sequences in arrival order while blocks, rows and budget allow. */
static int32_t schedule(tc_engine *e, int64_t *n_tokens)
{
    int32_t rows = 0;
    int64_t budget = e->o.max_step_tokens;
    int32_t max_rows = e->m.max_seqs;
    int64_t decodes = 0;
    for (int32_t i = 0; i < e->n_running; i++)
        decodes += e->running[i]->n_toks - e->running[i]->n_cached == 1;
    int64_t prefill_budget = budget - decodes;
    e->n_copies = 0;
    for (int32_t i = 0; i < e->n_running && rows < max_rows;) {
        seq *s = e->running[i];
        int64_t pending = s->n_toks - s->n_cached;
        int64_t want = pending == 1 ? 1 : (pending < prefill_budget ? pending : prefill_budget);
        if (want < 1) {
            i++;
            continue;
        }
        int64_t n = fits(e, s, want);
        while (n < 1) {
            /* Blocks ran out: the newest running sequence not yet scheduled gives way (s
             * itself when it is the newest). */
            seq *victim = e->running[e->n_running - 1];
            preempt(e, victim);
            if (victim == s)
                break;
            n = fits(e, s, want);
        }
        if (s->state != SEQ_RUNNING)
            break;
        if (!reserve(e, s, n)) {
            i++;
            continue;
        }
        s->step_new = n;
        if (pending > 1)
            prefill_budget -= n;
        budget -= n;
        e->batch[rows++] = s;
        i++;
    }
    /* Admit waiting sequences, first come first served: the head of the queue waits for room
     * rather than being overtaken. */
    int32_t committed = e->n_running; /* running, and the choices they will fork */
    for (int32_t i = 0; i < e->n_running; i++)
        if (!e->running[i]->req->forked)
            committed += e->running[i]->req->r.n - 1;
    while (e->n_waiting > 0 && rows < max_rows && budget > 0) {
        seq *s = e->waiting[0];
        int32_t slots = s->req->forked ? 1 : s->req->r.n;
        if (committed + slots > e->o.max_running)
            break;
        lookup_prefix(e, s);
        drop_outside_window(e, s);
        request *q = s->req;
        int64_t pending = s->n_toks - s->n_cached;
        int64_t want = pending < budget ? pending : budget;
        int64_t n = fits(e, s, want);
        /* A chunk that does not fit whole is taken only when nothing else runs. */
        if (n < 1 || (n < want && e->n_running > 0) || !reserve(e, s, n)) {
            release_blocks(e, s);
            break;
        }
        if (!q->admitted) {
            q->admitted = true;
            q->cached_tokens = s->n_cached;
            e->own.prompt_tokens += (uint64_t)q->r.n_prompt;
            e->own.cached_prompt_tokens += (uint64_t)s->n_cached;
        }
        list_remove(e->waiting, &e->n_waiting, s);
        s->state = SEQ_RUNNING;
        list_insert(e->running, &e->n_running, s);
        s->step_new = n;
        budget -= n;
        committed += slots;
        e->batch[rows++] = s;
    }
    *n_tokens = e->o.max_step_tokens - budget;
    return rows;
}

/* ---------------------------------------------------------------- after a step */

static bool is_stop_token(const tc_engine *e, const request *q, int32_t t)
{
    for (int i = 0; i < q->r.n_stop_tokens; i++)
        if (q->r.stop_tokens[i] == t)
            return true;
    if (q->r.ignore_eos)
        return false;
    for (int32_t i = 0; i < e->o.n_stop_tokens; i++)
        if (e->stop_tokens[i] == t)
            return true;
    return false;
}

static bool append_text(seq *s, const char *p, size_t n)
{
    if (s->text_len + n + 1 > s->text_cap) {
        size_t cap = (s->text_len + n + 1) * 2;
        char *t = tc_host_realloc(s->text, cap);
        if (!t)
            return false;
        s->text = t;
        s->text_cap = cap;
    }
    if (n > 0)
        memcpy(s->text + s->text_len, p, n);
    s->text_len += n;
    s->text[s->text_len] = 0;
    return true;
}

/* Bytes at the end of the pending text that may begin a stop string. */
static size_t held_back(const request *q, const seq *s)
{
    size_t hold = 0;
    for (int i = 0; i < q->r.n_stop; i++) {
        size_t l = strlen(q->stop[i]);
        for (size_t k = l - 1; k > hold; k--)
            if (k <= s->text_len && !memcmp(s->text + s->text_len - k, q->stop[i], k)) {
                hold = k;
                break;
            }
    }
    return hold;
}

/* Release text up to `upto` bytes and keep the rest. */
static void consume_text(seq *s, size_t upto)
{
    if (upto > 0 && s->text_len > upto)
        memmove(s->text, s->text + upto, s->text_len - upto);
    s->text_len -= upto;
}

/* Make the other choices of s's request: they share its prompt's blocks and recompute the last
 * prompt token (whose block is copied on write). */
static void fork_choices(tc_engine *e, seq *s)
{
    request *q = s->req;
    q->forked = true;
    int64_t keep = s->n_prompt - 1, bs = e->m.block_size;
    int32_t shared = (int32_t)((keep + bs - 1) / bs);
    for (int i = 1; i < q->r.n; i++) {
        seq *c = new_seq(e, q, i);
        if (!c) {
            e->n_slots -= q->r.n - i;
            q->r.n = i; /* the others never start */
            return;
        }
        q->seqs[i] = c;
        q->n_live++;
        c->order = s->order + (uint64_t)i;
        for (int32_t b = 0; b < shared; b++) {
            c->table[b] = s->table[b];
            c->hashes[b] = s->hashes[b];
            if (b >= s->n_dropped)
                tc_blocks_retain(e->bm, s->table[b]);
        }
        c->n_dropped = s->n_dropped < shared ? s->n_dropped : shared;
        c->n_table = shared;
        c->n_committed =
            (int32_t)(keep / bs) < s->n_committed ? (int32_t)(keep / bs) : s->n_committed;
        c->n_cached = keep;
        c->state = SEQ_RUNNING;
        list_insert(e->running, &e->n_running, c);
    }
}

/* Add the sampled token t to s, release its text and end it when a stop condition holds. */
static void accept(tc_engine *e, seq *s, int32_t t)
{
    request *q = s->req;
    if (q->r.n > 1 && s->index == 0 && !q->forked)
        fork_choices(e, s);
    if (s->gs && !tc_grammar_accept(s->gs, t)) {
        finish(e, s, -1, NULL, 0, TC_FINISH_ERROR, "no token could continue the grammar");
        return;
    }
    s->toks[s->n_toks++] = t;
    s->n_generated++;
    bool stop_tok = is_stop_token(e, q, t);
    bool length = s->n_generated >= q->max_tokens || s->n_toks >= e->context;
    if (e->o.tok && !stop_tok) {
        size_t w = tc_detok_push(e->o.tok, &s->detok, t, e->o.show_special, e->piece, PIECE);
        if (!append_text(s, e->piece, w)) {
            finish(e, s, t, NULL, 0, TC_FINISH_ERROR, "out of host memory");
            return;
        }
        /* A stop string ends the text before it. */
        size_t from = 0;
        for (int i = 0; i < q->r.n_stop; i++) {
            char *hit = strstr(s->text + from, q->stop[i]);
            if (hit) {
                s->text_len = (size_t)(hit - s->text);
                finish(e, s, t, s->text, s->text_len, TC_FINISH_STOP, NULL);
                return;
            }
        }
    }
    if (stop_tok || length) {
        if (e->o.tok) {
            size_t w = tc_detok_flush(&s->detok, e->piece, PIECE);
            append_text(s, e->piece, w);
        }
        finish(e, s, t, s->text, s->text_len, stop_tok ? TC_FINISH_STOP : TC_FINISH_LENGTH, NULL);
        return;
    }
    if (e->o.tok) {
        size_t out = s->text_len - held_back(q, s);
        /* The event's text is copied out of s->text before it moves. */
        if (out > 0)
            memcpy(e->piece, s->text, out);
        consume_text(s, out);
        emit(e, s, t, e->piece, out, TC_FINISH_NONE, NULL);
    } else
        emit(e, s, t, NULL, 0, TC_FINISH_NONE, NULL);
}

/* Constrain the step's sampled rows (logits [n_sample, vocab]) that have a logit bias or a
 * grammar, in place, so that every sampling path sees it (the CUDA greedy one picks the argmax
 * on the device): the grammar's mask of each such row comes from its cache by state, and
 * tc_logits_mask applies them all at once (on CUDA one upload of the bits and one kernel). A
 * bias of -100 or less bans the token outright. */
static tc_status constrain_rows(tc_engine *e, tc_tensor *logits, int32_t n_sample)
{
    int64_t W = ((int64_t)e->m.vocab + 31) / 32;
    int32_t n = 0, n_masks = 0;
    for (int32_t i = 0; i < n_sample; i++)
        n_masks += e->batch[i]->gs != NULL;
    if (n_masks > e->cap_masks) {
        uint32_t *m = tc_host_realloc(e->masks, sizeof *m * (size_t)(W * n_masks));
        if (!m)
            return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_engine_step",
                                "no host memory for %d masks", n_masks);
        e->masks = m;
        e->cap_masks = n_masks;
    }
    n_masks = 0;
    for (int32_t i = 0; i < n_sample; i++) {
        seq *s = e->batch[i];
        const tc_request *r = &s->req->r;
        if (!r->n_bias && !s->gs)
            continue;
        uint32_t *words = NULL;
        if (s->gs) {
            words = e->masks + W * n_masks++;
            if (!tc_grammar_allowed(s->gs, words, W))
                return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_engine_step",
                                    "no host memory for a mask");
        }
        e->cons[n++] =
            (tc_logits_constraint){ i, words, words ? W : 0, r->bias_ids, r->bias, r->n_bias };
    }
    return tc_logits_mask(logits, e->cons, n);
}

/* Log-probabilities of row i of the logits (the model's distribution: log-softmax of the raw
 * logits) for the sampled token and the request's top alternatives, into s. */
static tc_status logprobs_of(tc_engine *e, const tc_tensor *logits, int32_t i, int32_t token,
                             seq *s)
{
    tc_tensor row;
    int32_t V = e->m.vocab;
    tc_status st = tc_tensor_slice(logits, 0, i, 1, &row);
    if (st == TC_OK)
        st = tc_tensor_copy_to_host(&row, e->logit_row, sizeof(float) * (size_t)V);
    if (st != TC_OK)
        return st;
    const float *x = e->logit_row;
    float mx = -INFINITY;
    for (int32_t v = 0; v < V; v++)
        mx = x[v] > mx ? x[v] : mx;
    double sum = 0;
    for (int32_t v = 0; v < V; v++)
        sum += exp((double)x[v] - (double)mx);
    double lse = (double)mx + log(sum);
    s->lp = (float)((double)x[token] - lse);
    /* The k largest by insertion into a sorted list (k <= 20). */
    int k = s->req->r.top_logprobs, n = 0;
    for (int32_t v = 0; v < V && k > 0; v++) {
        if (n == k && x[v] <= x[s->top_tokens[n - 1]])
            continue;
        int j = n < k ? n++ : n - 1;
        while (j > 0 && x[s->top_tokens[j - 1]] < x[v]) {
            s->top_tokens[j] = s->top_tokens[j - 1];
            j--;
        }
        s->top_tokens[j] = v;
    }
    for (int j = 0; j < n; j++)
        s->top_lp[j] = (float)((double)x[s->top_tokens[j]] - lse);
    s->n_top = n;
    return TC_OK;
}

/* ---------------------------------------------------------------- the step */

static void publish_stats(tc_engine *e)
{
    tc_blocks_stats b;
    tc_blocks_get_stats(e->bm, &b);
    pthread_mutex_lock(&e->mu);
    e->stats.running = e->n_running;
    e->stats.waiting = e->n_waiting;
    e->stats.blocks_total = b.total;
    e->stats.blocks_used = b.used;
    e->stats.blocks_cached = b.cached;
    e->stats.block_size = e->m.block_size;
    e->stats.prefix_lookups = b.lookups;
    e->stats.prefix_hits = b.hits;
    e->stats.steps = e->own.steps;
    e->stats.preemptions = e->own.preemptions;
    e->stats.prompt_tokens = e->own.prompt_tokens;
    e->stats.cached_prompt_tokens = e->own.cached_prompt_tokens;
    e->stats.generated_tokens = e->own.generated_tokens;
    e->stats.prefill_steps = e->own.prefill_steps;
    e->stats.prefill_step_seconds = e->own.prefill_step_seconds;
    e->stats.decode_step_seconds = e->own.decode_step_seconds;
    pthread_mutex_unlock(&e->mu);
}

static int32_t active_requests(const tc_engine *e)
{
    int32_t n = 0;
    for (request *q = e->live; q; q = q->next)
        n++;
    return n;
}

tc_status tc_engine_step(tc_engine *e, int32_t *active)
{
    tc_status st = intake(e);
    /* Steps end with the sampled tokens on the host, so the clock covers the device work. */
    double t_start = tc_host_seconds();
    int64_t T = 0;
    int32_t S = schedule(e, &T);
    if (S == 0) {
        publish_stats(e);
        if (active)
            *active = active_requests(e);
        return st;
    }
    /* Sequences that finish their pending tokens this step are sampled: they come first, so
     * that their logits are rows 0 .. n_sample - 1. */
    int32_t n_sample = 0, n_decode = 0;
    {
        /* Stable: one-token rows that sample (decodes) first, so the model can run their
         * attention apart, then finishing prompt chunks, then the chunks that do not sample. */
        seq **sorted = e->sorted;
        int32_t k = 0;
        for (int pass = 0; pass < 3; pass++)
            for (int32_t i = 0; i < S; i++) {
                seq *s = e->batch[i];
                bool samples = s->n_cached + s->step_new == s->n_toks;
                int kind = samples ? (s->step_new == 1 ? 0 : 1) : 2;
                if (kind == pass)
                    sorted[k++] = s;
                n_sample += pass == 0 && samples;
                n_decode += pass == 0 && kind == 0;
            }
        memcpy(e->batch, sorted, sizeof *sorted * (size_t)S);
    }
    int32_t bs = e->m.block_size, W = e->m.max_blocks;
    int32_t t = 0;
    for (int32_t i = 0; i < S; i++) {
        seq *s = e->batch[i];
        e->q_start[i] = t;
        for (int64_t j = 0; j < s->step_new; j++, t++) {
            int64_t p = s->n_cached + j;
            e->tokens[t] = s->toks[p];
            e->positions[t] = (int32_t)p;
            e->slots[t] = s->table[p / bs] * bs + (int32_t)(p % bs);
        }
        e->seq_lens[i] = (int32_t)(s->n_cached + s->step_new);
        memcpy(e->table + (size_t)i * (size_t)W, s->table, sizeof(int32_t) * (size_t)s->n_table);
        /* Released blocks' entries are never read: any block id serves. */
        for (int32_t b = 0; b < s->n_dropped; b++)
            e->table[(size_t)i * (size_t)W + (size_t)b] = 0;
        memset(e->table + (size_t)i * (size_t)W + s->n_table, 0,
               sizeof(int32_t) * (size_t)(W - s->n_table));
    }
    e->q_start[S] = t;
    tc_llama_batch b = { t,        S,          W,           e->tokens, e->positions,
                         e->slots, e->q_start, e->seq_lens, e->table };
    tc_tensor *logits = NULL;
    if (e->n_copies > 0)
        st = e->m.copy_blocks(e->m.ctx, e->copy_src, e->copy_dst, e->n_copies);
    /* NVTX ranges (THINCUDA_NVTX=1) name the step's phases on Nsight Systems' timeline. */
    if (st == TC_OK) {
        tc_profile_range_push(T > n_decode ? "prefill" : "decode");
        st = e->m.forward(e->m.ctx, &b, &logits);
        tc_profile_range_pop();
    }
    if (st == TC_OK && n_sample > 0) {
        tc_profile_range_push("sampling");
        for (int32_t i = 0; i < n_sample; i++) {
            seq *s = e->batch[i];
            tc_sample_params p = s->req->r.sample;
            p.seed += (uint64_t)s->index;
            e->rows[i] =
                (tc_sample_row){ p, s->toks, s->n_toks, s->n_prompt, (uint64_t)s->n_generated };
        }
        tc_tensor rows;
        st = tc_tensor_slice(logits, 0, 0, n_sample, &rows);
        if (st == TC_OK)
            st = constrain_rows(e, &rows, n_sample);
        if (st == TC_OK)
            st = tc_sample(e->sampled, &rows, e->rows);
        for (int32_t i = 0; i < n_sample && st == TC_OK; i++)
            if (e->batch[i]->req->r.logprobs)
                st = logprobs_of(e, &rows, i, e->sampled[i], e->batch[i]);
        tc_profile_range_pop();
    }
    if (st != TC_OK) {
        const char *msg = tc_last_error();
        char why[256];
        snprintf(why, sizeof why, "%s", msg && *msg ? msg : "the forward pass failed");
        for (int32_t i = 0; i < S; i++)
            finish(e, e->batch[i], -1, NULL, 0, TC_FINISH_ERROR, why);
        publish_stats(e);
        if (active)
            *active = active_requests(e);
        return st;
    }
    e->own.steps++;
    for (int32_t i = 0; i < S; i++) {
        seq *s = e->batch[i];
        s->n_cached += s->step_new;
        commit_blocks(e, s);
        drop_outside_window(e, s);
    }
    e->own.generated_tokens += (uint64_t)n_sample;
    double took = tc_host_seconds() - t_start;
    if (T > n_decode) {
        e->own.prefill_steps++;
        e->own.prefill_step_seconds += took;
    } else {
        e->own.decode_step_seconds += took;
    }
    /* THINCUDA_LOG=debug: a line a step. */
    TC_DEBUG("step %llu: %d sequences (%d sampled), %lld tokens (%d in one-token rows), "
             "%d block copies, %.3f ms",
             (unsigned long long)e->own.steps, S, n_sample, (long long)T, n_decode, e->n_copies,
             took * 1e3);
    /* Published before the tokens go out, so that whoever receives a request's last event
     * finds this step in the stats; again after, for the blocks and sequences it freed. */
    publish_stats(e);
    for (int32_t i = 0; i < n_sample; i++)
        accept(e, e->batch[i], e->sampled[i]);
    publish_stats(e);
    if (active)
        *active = active_requests(e);
    return TC_OK;
}

/* ---------------------------------------------------------------- thread */

static bool idle(tc_engine *e)
{
    return e->n_running == 0 && e->n_waiting == 0;
}

static void *engine_main(void *arg)
{
    tc_engine *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stop && !e->incoming && e->n_cancels == 0 && idle(e))
            pthread_cond_wait(&e->cv, &e->mu);
        bool stop = e->stop;
        pthread_mutex_unlock(&e->mu);
        if (stop)
            break;
        if (tc_engine_step(e, NULL) != TC_OK)
            TC_WARN("engine step: %s", tc_last_error());
    }
    return NULL;
}

/* ---------------------------------------------------------------- create, destroy */

tc_status tc_engine_create(const tc_engine_model *model, const tc_engine_options *opt,
                           tc_engine **out)
{
    *out = NULL;
    const char *op = "tc_engine_create";
    if (!model || !model->forward || !model->copy_blocks || model->vocab < 1 ||
        model->max_tokens < 1 || model->max_seqs < 1 || model->max_blocks < 1 ||
        model->n_blocks < 1 || model->block_size < 1)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "an incomplete model description");
    tc_engine *e = tc_host_calloc(1, sizeof *e);
    if (!e)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no host memory");
    e->m = *model;
    if (opt)
        e->o = *opt;
    if (e->o.max_running < 1 || e->o.max_running > model->max_seqs)
        e->o.max_running = model->max_seqs;
    if (e->o.max_step_tokens < 1 || e->o.max_step_tokens > model->max_tokens)
        e->o.max_step_tokens = model->max_tokens;
    if (e->o.max_step_tokens < e->o.max_running)
        e->o.max_running = e->o.max_step_tokens;
    if (e->o.max_queue < 1)
        e->o.max_queue = 1024;
    e->context = (int64_t)model->max_blocks * model->block_size;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    size_t S = (size_t)model->max_seqs, T = (size_t)model->max_tokens;
    e->stop_tokens = tc_host_alloc(sizeof(int32_t) * (size_t)(e->o.n_stop_tokens + 1));
    e->batch = tc_host_calloc(S, sizeof *e->batch);
    e->sorted = tc_host_calloc(S, sizeof *e->sorted);
    e->tokens = tc_host_alloc(sizeof(int32_t) * T);
    e->positions = tc_host_alloc(sizeof(int32_t) * T);
    e->slots = tc_host_alloc(sizeof(int32_t) * T);
    e->q_start = tc_host_alloc(sizeof(int32_t) * (S + 1));
    e->seq_lens = tc_host_alloc(sizeof(int32_t) * S);
    e->sampled = tc_host_alloc(sizeof(int32_t) * S);
    e->table = tc_host_alloc(sizeof(int32_t) * S * (size_t)model->max_blocks);
    e->rows = tc_host_alloc(sizeof *e->rows * S);
    e->piece = tc_host_alloc(PIECE);
    e->logit_row = tc_host_alloc(sizeof(float) * (size_t)model->vocab);
    e->cons = tc_host_alloc(sizeof *e->cons * S);
    tc_status st = tc_blocks_create(model->n_blocks, model->block_size, &e->bm);
    if (st == TC_OK && (!e->stop_tokens || !e->batch || !e->sorted || !e->tokens || !e->positions ||
                        !e->slots || !e->q_start || !e->seq_lens || !e->sampled || !e->table ||
                        !e->rows || !e->piece || !e->logit_row || !e->cons))
        st = tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no host memory");
    if (st == TC_OK && e->o.n_stop_tokens > 0)
        memcpy(e->stop_tokens, e->o.stop_tokens, sizeof(int32_t) * (size_t)e->o.n_stop_tokens);
    e->o.stop_tokens = e->stop_tokens;
    if (st == TC_OK && e->o.threaded) {
        if (pthread_create(&e->thread, NULL, engine_main, e) != 0)
            st = tc_set_error(TC_ERR_INTERNAL, op, "cannot start the engine thread");
        else
            e->has_thread = true;
    }
    if (st != TC_OK) {
        tc_engine_destroy(e);
        return st;
    }
    publish_stats(e);
    *out = e;
    return TC_OK;
}

void tc_engine_destroy(tc_engine *e)
{
    if (!e)
        return;
    pthread_mutex_lock(&e->mu);
    e->stop = true;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (e->has_thread)
        pthread_join(e->thread, NULL);
    /* Requests never taken in, then everything admitted, end cancelled. */
    if (e->bm) {
        request *in = e->incoming;
        e->incoming = NULL;
        while (in) {
            request *q = in;
            in = in->next;
            q->next = e->live;
            e->live = q;
            seq *s = q->seqs[0] = new_seq(e, q, 0);
            q->n_live = 1;
            if (!s) {
                unlink_live(e, q);
                free_request(q);
                continue;
            }
            s->state = SEQ_WAITING;
            finish(e, s, -1, NULL, 0, TC_FINISH_CANCELLED, NULL);
        }
        while (e->live)
            cancel_request(e, e->live);
    }
    tc_blocks_destroy(e->bm);
    tc_host_free(e->running);
    tc_host_free(e->waiting);
    tc_host_free(e->stop_tokens);
    tc_host_free(e->batch);
    tc_host_free(e->sorted);
    tc_host_free(e->tokens);
    tc_host_free(e->positions);
    tc_host_free(e->slots);
    tc_host_free(e->q_start);
    tc_host_free(e->seq_lens);
    tc_host_free(e->sampled);
    tc_host_free(e->table);
    tc_host_free(e->rows);
    tc_host_free(e->logit_row);
    tc_host_free(e->cons);
    tc_host_free(e->masks);
    tc_host_free(e->piece);
    tc_host_free(e->copy_src);
    tc_host_free(e->copy_dst);
    tc_host_free(e->cancels);
    tc_host_free(e->ids);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    tc_host_free(e);
}

void tc_engine_get_stats(tc_engine *e, tc_engine_stats *s)
{
    pthread_mutex_lock(&e->mu);
    *s = e->stats;
    pthread_mutex_unlock(&e->mu);
}

/* ---------------------------------------------------------------- invariants */

bool tc_engine_check(tc_engine *e, char *msg, size_t len)
{
    int32_t *holds = tc_host_calloc((size_t)e->m.n_blocks, sizeof *holds);
    if (!holds) {
        snprintf(msg, len, "no host memory");
        return false;
    }
    bool ok = true;
    for (int pass = 0; pass < 2 && ok; pass++) {
        seq **list = pass ? e->waiting : e->running;
        int32_t n = pass ? e->n_waiting : e->n_running;
        for (int32_t i = 0; i < n && ok; i++) {
            seq *s = list[i];
            if (i > 0 && list[i - 1]->order >= s->order) {
                snprintf(msg, len, "the %s list is out of arrival order at %d",
                         pass ? "waiting" : "running", i);
                ok = false;
            } else if (s->state != (pass ? SEQ_WAITING : SEQ_RUNNING)) {
                snprintf(msg, len, "a sequence in the %s list has state %d",
                         pass ? "waiting" : "running", s->state);
                ok = false;
            } else if (pass && s->n_table > 0) {
                snprintf(msg, len, "a waiting sequence holds %d blocks", s->n_table);
                ok = false;
            } else if (s->n_cached > s->n_toks || s->n_table != blocks_for(e, s->n_cached) ||
                       s->n_committed > s->n_table) {
                snprintf(msg, len,
                         "request %llu choice %d: %lld cached of %lld tokens in %d blocks, %d "
                         "committed",
                         (unsigned long long)s->req->id, s->index, (long long)s->n_cached,
                         (long long)s->n_toks, s->n_table, s->n_committed);
                ok = false;
            }
            for (int32_t b = 0; b < s->n_table && ok; b++) {
                int32_t id = s->table[b];
                if (b < s->n_dropped) {
                    if (id != -1) {
                        snprintf(msg, len, "a released block's entry holds %d", id);
                        ok = false;
                    }
                } else if (id < 0 || id >= e->m.n_blocks) {
                    snprintf(msg, len, "a block table holds %d", id);
                    ok = false;
                } else
                    holds[id]++;
            }
        }
    }
    if (ok)
        ok = tc_blocks_check(e->bm, holds, msg, len);
    if (ok && e->n_running > e->o.max_running) {
        snprintf(msg, len, "%d sequences run, the limit is %d", e->n_running, e->o.max_running);
        ok = false;
    }
    tc_host_free(holds);
    return ok;
}

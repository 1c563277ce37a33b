/* The engine's scheduler and block accounting, driven by a fake model on the CPU.
 *
 * The fake model keeps, for every cache slot, the token and position written there. A forward
 * pass writes each new token to its slot, then reads every sequence's whole context back
 * through its block table, checks that each slot holds the position it should, and makes
 * that sequence's logits from a hash of the tokens it read. So the tokens an engine produces
 * are right only if every block table, copy-on-write and prefix hit put the right tokens in
 * the right places; a reference that hashes each request's history directly says what they
 * must be. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "inference/blocks.h"
#include "inference/engine.h"

enum { VOCAB = 64, EOS = 0 };

typedef struct fake {
    int32_t n_blocks, block_size, max_seqs, max_tokens, max_blocks;
    int32_t window;     /* sliding window: a sequence's logits come from its last `window` tokens */
    int32_t *tok, *pos; /* per slot */
    tc_backend *cpu;
    tc_tensor logits;
    tc_tensor rows;
    uint64_t forwards, copies;
    char error[256];
} fake;

static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t history_hash(const int32_t *t, int64_t n)
{
    uint64_t h = 0x1234;
    for (int64_t i = 0; i < n; i++)
        h = mix(h + (uint64_t)(uint32_t)t[i] + 1);
    return h;
}

static void fill_logits(float *row, uint64_t h)
{
    for (int v = 0; v < VOCAB; v++)
        row[v] = (float)(mix(h ^ (uint64_t)(v + 1) * 0x9e3779b97f4a7c15ull) >> 40) / 16777216.0f;
}

static tc_status fake_forward(void *ctx, const tc_llama_batch *b, tc_tensor **logits)
{
    fake *f = ctx;
    f->forwards++;
    if (b->n_seqs > f->max_seqs || b->n_tokens > f->max_tokens || b->max_blocks != f->max_blocks)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, "fake", "batch too large");
    int32_t bs = f->block_size;
    for (int32_t i = 0; i < b->n_tokens; i++) {
        if (b->slots[i] < 0 || b->slots[i] >= f->n_blocks * bs)
            return tc_set_error(TC_ERR_INVALID_ARGUMENT, "fake", "slot %d", b->slots[i]);
        f->tok[b->slots[i]] = b->tokens[i];
        f->pos[b->slots[i]] = b->positions[i];
    }
    float *out = f->logits.data;
    int32_t ctx_tok[4096];
    for (int32_t s = 0; s < b->n_seqs; s++) {
        int32_t len = b->seq_lens[s];
        if (len > 4096)
            return tc_set_error(TC_ERR_INVALID_ARGUMENT, "fake", "too long");
        /* With a window only its positions are read (their blocks must hold them); the others
         * may have been released and reused. */
        int32_t first = f->window > 0 && len > f->window ? len - f->window : 0;
        for (int32_t p = first; p < len; p++) {
            int32_t blk = b->block_table[s * b->max_blocks + p / bs];
            int32_t slot = blk * bs + p % bs;
            if (f->pos[slot] != p) {
                snprintf(f->error, sizeof f->error,
                         "sequence %d position %d reads slot %d holding position %d", s, p, slot,
                         f->pos[slot]);
                return tc_set_error(TC_ERR_INTERNAL, "fake", "%s", f->error);
            }
            ctx_tok[p] = f->tok[slot];
        }
        /* The newest rows must be the tokens the batch wrote. */
        int32_t m = b->q_start[s + 1] - b->q_start[s];
        for (int32_t j = 0; j < m; j++)
            if (ctx_tok[len - m + j] != b->tokens[b->q_start[s] + j])
                return tc_set_error(TC_ERR_INTERNAL, "fake", "row mismatch");
        fill_logits(out + (size_t)s * VOCAB, history_hash(ctx_tok + first, len - first));
    }
    tc_status st = tc_tensor_slice(&f->logits, 0, 0, b->n_seqs, &f->rows);
    *logits = &f->rows;
    return st;
}

static tc_status fake_copy(void *ctx, const int32_t *src, const int32_t *dst, int32_t n)
{
    fake *f = ctx;
    int32_t bs = f->block_size;
    for (int32_t i = 0; i < n; i++) {
        memcpy(f->tok + dst[i] * bs, f->tok + src[i] * bs, sizeof(int32_t) * (size_t)bs);
        memcpy(f->pos + dst[i] * bs, f->pos + src[i] * bs, sizeof(int32_t) * (size_t)bs);
        f->copies++;
    }
    return TC_OK;
}

static fake *fake_new(int32_t n_blocks, int32_t max_seqs, int32_t max_tokens)
{
    fake *f = calloc(1, sizeof *f);
    f->n_blocks = n_blocks;
    f->block_size = 16;
    f->max_seqs = max_seqs;
    f->max_tokens = max_tokens;
    f->max_blocks = 32; /* 512-token context */
    f->tok = malloc(sizeof(int32_t) * (size_t)(n_blocks * 16));
    f->pos = malloc(sizeof(int32_t) * (size_t)(n_blocks * 16));
    for (int32_t i = 0; i < n_blocks * 16; i++)
        f->tok[i] = f->pos[i] = -1;
    assert_int_equal(tc_backend_create_cpu(1, &f->cpu), TC_OK);
    assert_int_equal(tc_tensor_init(&f->logits, f->cpu, TC_DTYPE_F32, TC_SHAPE(max_seqs, VOCAB)),
                     TC_OK);
    return f;
}

static void fake_free(fake *f)
{
    tc_tensor_deinit(&f->logits);
    tc_backend_destroy(f->cpu);
    free(f->tok);
    free(f->pos);
    free(f);
}

static tc_engine_model fake_model(fake *f)
{
    return (tc_engine_model){ f,           VOCAB,         f->max_tokens, f->max_seqs, f->max_blocks,
                              f->n_blocks, f->block_size, fake_forward,  fake_copy,   f->window };
}

/* ---------------------------------------------------------------- requests and results */

enum { MAX_REQ = 4096, MAX_OUT = 512 };

typedef struct result {
    int32_t window; /* the model's sliding window (0: none) */
    int32_t prompt[512];
    int64_t n_prompt, max_tokens;
    int n;
    float temperature;
    uint64_t seed;
    int32_t out[3][MAX_OUT];
    int64_t n_out[3];
    tc_finish_reason finish[3];
    int64_t cached;
    int events_after_finish;
    uint64_t id;
    bool cancelled;
} result;

static pthread_mutex_t results_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t results_cv = PTHREAD_COND_INITIALIZER;
static int finished_choices;

static void on_event(void *user, const tc_engine_event *ev)
{
    result *r = user;
    pthread_mutex_lock(&results_mu);
    int i = ev->index;
    if (r->finish[i] != TC_FINISH_NONE)
        r->events_after_finish++;
    if (ev->token >= 0 && r->n_out[i] < MAX_OUT)
        r->out[i][r->n_out[i]++] = ev->token;
    r->cached = ev->cached_tokens;
    if (ev->finish != TC_FINISH_NONE) {
        r->finish[i] = ev->finish;
        finished_choices++;
        pthread_cond_broadcast(&results_cv);
    }
    pthread_mutex_unlock(&results_mu);
}

static uint64_t rng_state = 1;
static uint32_t rnd(uint32_t n)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33) % n;
}

/* Prompts share one of a few prefixes, so the prefix cache has something to find. */
static void make_prompt(result *r, int64_t max_len)
{
    static int32_t prefixes[4][80];
    static bool made;
    if (!made) {
        for (int p = 0; p < 4; p++)
            for (int i = 0; i < 80; i++)
                prefixes[p][i] = 1 + (int32_t)((p * 131 + i * 17) % (VOCAB - 1));
        made = true;
    }
    int64_t n = 1 + rnd((uint32_t)max_len);
    int p = (int)rnd(5);
    for (int64_t i = 0; i < n; i++)
        r->prompt[i] = p < 4 && i < 80 ? prefixes[p][i] : 1 + (int32_t)rnd(VOCAB - 1);
    r->n_prompt = n;
}

static tc_request request_of(result *r)
{
    tc_request q = { 0 };
    q.prompt = r->prompt;
    q.n_prompt = r->n_prompt;
    q.max_tokens = r->max_tokens;
    q.n = r->n;
    q.sample = tc_sample_defaults();
    q.sample.temperature = r->temperature;
    q.sample.seed = r->seed;
    q.callback = on_event;
    q.user = r;
    return q;
}

/* The greedy continuation the fake model must give: argmax of the logits of each history,
 * until EOS or max_tokens. */
static int64_t reference(const result *r, int32_t *out)
{
    int32_t hist[1024];
    memcpy(hist, r->prompt, sizeof(int32_t) * (size_t)r->n_prompt);
    int64_t n = r->n_prompt, k = 0;
    float row[VOCAB];
    while (k < r->max_tokens) {
        int64_t first = r->window > 0 && n > r->window ? n - r->window : 0;
        fill_logits(row, history_hash(hist + first, n - first));
        int32_t best = 0;
        for (int v = 1; v < VOCAB; v++)
            if (row[v] > row[best])
                best = v;
        hist[n++] = best;
        out[k++] = best;
        if (best == EOS)
            break;
    }
    return k;
}

static void check_engine(tc_engine *e)
{
    char msg[256];
    if (!tc_engine_check(e, msg, sizeof msg))
        fail_msg("invariant broken: %s", msg);
}

static void check_greedy(const result *r)
{
    int32_t want[MAX_OUT];
    int64_t n = reference(r, want);
    for (int c = 0; c < (r->n < 1 ? 1 : r->n); c++) {
        if (r->cancelled && r->finish[c] == TC_FINISH_CANCELLED) {
            /* What came out before the cancellation is a prefix of the answer. */
            assert_true(r->n_out[c] <= n);
            assert_memory_equal(r->out[c], want, sizeof(int32_t) * (size_t)r->n_out[c]);
            continue;
        }
        if (r->n_out[c] != n || memcmp(r->out[c], want, sizeof(int32_t) * (size_t)n) != 0)
            fail_msg("request of %lld prompt tokens, choice %d: %lld tokens, want %lld",
                     (long long)r->n_prompt, c, (long long)r->n_out[c], (long long)n);
        assert_int_equal(r->finish[c], want[n - 1] == EOS ? TC_FINISH_STOP : TC_FINISH_LENGTH);
    }
    assert_int_equal(r->events_after_finish, 0);
}

static void drain(tc_engine *e)
{
    int32_t active = 1;
    for (int i = 0; active > 0; i++) {
        assert_int_equal(tc_engine_step(e, &active), TC_OK);
        check_engine(e);
        assert_true(i < 100000);
    }
}

/* ---------------------------------------------------------------- tests */

static result *results;

/* 10,000 random events (submit, cancel, step) with invariants after every step; every
 * finished request's tokens equal the reference. */
static void test_random_events(void **state)
{
    (void)state;
    fake *f = fake_new(96, 16, 128);
    tc_engine_model m = fake_model(f);
    tc_engine_options o = { .max_queue = 64,
                            .stop_tokens = (const int32_t[]){ EOS },
                            .n_stop_tokens = 1 };
    tc_engine *e;
    assert_int_equal(tc_engine_create(&m, &o, &e), TC_OK);
    memset(results, 0, sizeof *results * MAX_REQ);
    int n_req = 0, full = 0;
    for (int ev = 0; ev < 10000; ev++) {
        uint32_t what = rnd(10);
        if (what < 4 && n_req < MAX_REQ) {
            result *r = &results[n_req];
            make_prompt(r, 200);
            r->max_tokens = 1 + rnd(60);
            r->n = rnd(8) == 0 ? 2 + (int)rnd(2) : 1;
            tc_request q = request_of(r);
            tc_status st = tc_engine_submit(e, &q, &r->id);
            if (st == TC_ERR_LIMIT)
                full++;
            else {
                assert_int_equal(st, TC_OK);
                n_req++;
            }
        } else if (what < 5 && n_req > 0) {
            result *r = &results[rnd((uint32_t)n_req)];
            if (tc_engine_cancel(e, r->id) == TC_OK)
                r->cancelled = true;
        } else {
            assert_int_equal(tc_engine_step(e, NULL), TC_OK);
            check_engine(e);
        }
    }
    drain(e);
    tc_engine_stats s;
    tc_engine_get_stats(e, &s);
    assert_int_equal(s.blocks_used, 0);
    assert_int_equal(s.running + s.waiting, 0);
    assert_int_equal(s.requests_done, (uint64_t)n_req);
    for (int i = 0; i < n_req; i++)
        check_greedy(&results[i]);
    print_message("%d requests, %d refused (queue full), %llu steps, %llu preemptions, prefix "
                  "hits %llu of %llu blocks, %llu block copies\n",
                  n_req, full, (unsigned long long)s.steps, (unsigned long long)s.preemptions,
                  (unsigned long long)s.prefix_hits, (unsigned long long)s.prefix_lookups,
                  (unsigned long long)f->copies);
    assert_true(s.preemptions > 0);
    assert_true(s.prefix_hits > 0);
    assert_true(f->copies > 0);
    assert_true(full > 0);
    tc_engine_destroy(e);
    fake_free(f);
}

/* The same requests through a roomy cache, a cache so small that sequences are preempted, and
 * with the prefix cache off: every greedy output equals the reference, and seeded sampling
 * gives the same tokens whatever the cache did. */
static void run_set(int32_t n_blocks, bool prefix, result *set, int n, uint64_t *preemptions,
                    uint64_t *hits)
{
    fake *f = fake_new(n_blocks, 8, 64);
    tc_engine_model m = fake_model(f);
    tc_engine_options o = { .no_prefix_cache = !prefix,
                            .stop_tokens = (const int32_t[]){ EOS },
                            .n_stop_tokens = 1 };
    tc_engine *e;
    assert_int_equal(tc_engine_create(&m, &o, &e), TC_OK);
    for (int i = 0; i < n; i++) {
        tc_request q = request_of(&set[i]);
        assert_int_equal(tc_engine_submit(e, &q, &set[i].id), TC_OK);
    }
    drain(e);
    tc_engine_stats s;
    tc_engine_get_stats(e, &s);
    assert_int_equal(s.blocks_used, 0);
    *preemptions = s.preemptions;
    *hits = s.prefix_hits;
    tc_engine_destroy(e);
    fake_free(f);
}

static void test_preemption_same_output(void **state)
{
    (void)state;
    enum { N = 40 };
    result *sets[3];
    for (int k = 0; k < 3; k++)
        sets[k] = calloc(N, sizeof(result));
    for (int i = 0; i < N; i++) {
        result *r = &sets[0][i];
        make_prompt(r, 120);
        r->max_tokens = 8 + rnd(100);
        r->n = i % 7 == 3 ? 3 : 1;
        r->temperature = i % 2 ? 0.8f : 0.0f;
        r->seed = 1000 + (uint64_t)i;
    }
    for (int k = 1; k < 3; k++)
        for (int i = 0; i < N; i++) {
            sets[k][i] = sets[0][i];
            memset(sets[k][i].n_out, 0, sizeof sets[k][i].n_out);
            memset(sets[k][i].finish, 0, sizeof sets[k][i].finish);
        }
    uint64_t pre[3], hits[3];
    run_set(400, true, sets[0], N, &pre[0], &hits[0]);
    run_set(48, true, sets[1], N, &pre[1], &hits[1]);
    run_set(48, false, sets[2], N, &pre[2], &hits[2]);
    print_message("preemptions %llu / %llu / %llu; prefix hits %llu / %llu / %llu\n",
                  (unsigned long long)pre[0], (unsigned long long)pre[1],
                  (unsigned long long)pre[2], (unsigned long long)hits[0],
                  (unsigned long long)hits[1], (unsigned long long)hits[2]);
    assert_int_equal(pre[0], 0);
    assert_true(pre[1] > 0 && pre[2] > 0);
    assert_true(hits[0] > 0);
    assert_int_equal(hits[2], 0);
    for (int i = 0; i < N; i++) {
        if (sets[0][i].temperature == 0.0f)
            for (int k = 0; k < 3; k++)
                check_greedy(&sets[k][i]);
        for (int c = 0; c < sets[0][i].n; c++)
            for (int k = 1; k < 3; k++) {
                assert_int_equal(sets[k][i].n_out[c], sets[0][i].n_out[c]);
                assert_memory_equal(sets[k][i].out[c], sets[0][i].out[c],
                                    sizeof(int32_t) * (size_t)sets[0][i].n_out[c]);
            }
        /* Seeded choices of one request differ from each other (different streams). */
        if (sets[0][i].n == 3 && sets[0][i].temperature > 0)
            assert_true(sets[0][i].n_out[0] != sets[0][i].n_out[1] ||
                        memcmp(sets[0][i].out[0], sets[0][i].out[1],
                               sizeof(int32_t) * (size_t)sets[0][i].n_out[0]) != 0);
    }
    for (int k = 0; k < 3; k++)
        free(sets[k]);
}

/* A sliding window of 40 tokens over blocks of 16: each sequence releases the blocks before
 * its window as it goes, so requests of up to 500 tokens run in a cache of 12 blocks (192
 * tokens), whole prompts and choices included, with and without the prefix cache; every
 * greedy continuation equals the windowed reference, the invariants hold after every step, and
 * all blocks come back. */
static void test_window_releases_blocks(void **state)
{
    (void)state;
    enum { N = 12 };
    for (int prefix = 0; prefix < 2; prefix++) {
        result *set = calloc(N, sizeof(result));
        fake *f = fake_new(12, 4, 32);
        f->window = 40;
        tc_engine_model m = fake_model(f);
        tc_engine_options o = { .no_prefix_cache = !prefix,
                                .stop_tokens = (const int32_t[]){ EOS },
                                .n_stop_tokens = 1 };
        tc_engine *e;
        assert_int_equal(tc_engine_create(&m, &o, &e), TC_OK);
        for (int i = 0; i < N; i++) {
            result *r = &set[i];
            r->window = 40;
            make_prompt(r, i % 3 ? 100 : 300);
            r->max_tokens = 100 + rnd(100);
            r->n = i % 5 == 2 ? 2 : 1;
            tc_request q = request_of(r);
            assert_int_equal(tc_engine_submit(e, &q, &r->id), TC_OK);
        }
        drain(e);
        tc_engine_stats st;
        tc_engine_get_stats(e, &st);
        assert_int_equal(st.blocks_used, 0);
        for (int i = 0; i < N; i++)
            check_greedy(&set[i]);
        /* Without the window the same requests do not fit such a cache. */
        tc_engine_destroy(e);
        f->window = m.window = 0;
        assert_int_equal(tc_engine_create(&m, &o, &e), TC_OK);
        result big = set[0];
        big.window = 0;
        big.n_prompt = 300;
        tc_request q = request_of(&big);
        assert_int_equal(tc_engine_submit(e, &q, &big.id), TC_ERR_INVALID_ARGUMENT);
        tc_engine_destroy(e);
        fake_free(f);
        free(set);
    }
}

/* A prompt seen before is found in the prefix cache: its full blocks, never the last token. */
static void test_prefix_hits(void **state)
{
    (void)state;
    fake *f = fake_new(64, 4, 64);
    tc_engine_model m = fake_model(f);
    tc_engine *e;
    assert_int_equal(tc_engine_create(&m, NULL, &e), TC_OK);
    result *r = calloc(3, sizeof *r);
    for (int i = 0; i < 50; i++)
        r[0].prompt[i] = 1 + i % 40;
    r[0].n_prompt = 50;
    r[0].max_tokens = 4;
    r[1] = r[0];
    r[2] = r[0];
    r[2].n_prompt = 48; /* exactly three blocks: the third holds the last token */
    for (int i = 0; i < 3; i++) {
        tc_request q = request_of(&r[i]);
        assert_int_equal(tc_engine_submit(e, &q, &r[i].id), TC_OK);
        drain(e);
    }
    assert_int_equal(r[0].cached, 0);
    assert_int_equal(r[1].cached, 48);
    assert_int_equal(r[2].cached, 32);
    tc_engine_stats s;
    tc_engine_get_stats(e, &s);
    assert_int_equal(s.cached_prompt_tokens, 80);
    assert_int_equal(s.prompt_tokens, 148);
    for (int i = 0; i < 3; i++)
        check_greedy(&r[i]);
    free(r);
    tc_engine_destroy(e);
    fake_free(f);
}

/* Bad requests are refused with a sentence; a cancelled request frees its blocks by the next
 * step; the queue limit holds. */
static void test_bad_requests_and_cancel(void **state)
{
    (void)state;
    fake *f = fake_new(8, 4, 64);
    tc_engine_model m = fake_model(f);
    tc_engine_options o = { .max_queue = 2 };
    tc_engine *e;
    assert_int_equal(tc_engine_create(&m, &o, &e), TC_OK);
    result r = { 0 };
    r.prompt[0] = 3;
    r.n_prompt = 1;
    r.max_tokens = 10;
    tc_request q = request_of(&r);
    q.n_prompt = 0;
    assert_int_equal(tc_engine_submit(e, &q, NULL), TC_ERR_INVALID_ARGUMENT);
    q = request_of(&r);
    q.prompt = (const int32_t[]){ VOCAB };
    assert_int_equal(tc_engine_submit(e, &q, NULL), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "outside the vocabulary"));
    q = request_of(&r);
    q.max_tokens = 600;
    assert_int_equal(tc_engine_submit(e, &q, NULL), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "exceed the context"));
    q = request_of(&r);
    q.max_tokens = 200; /* 201 tokens: 13 blocks, the cache has 8 */
    assert_int_equal(tc_engine_submit(e, &q, NULL), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "do not fit"));
    q = request_of(&r);
    q.n_stop = 1;
    q.stop = (const char *const[]){ "x" };
    assert_int_equal(tc_engine_submit(e, &q, NULL), TC_ERR_INVALID_ARGUMENT);
    q = request_of(&r);
    q.max_tokens = 100;
    result a = r, b = r, c = r;
    q.user = &a;
    assert_int_equal(tc_engine_submit(e, &q, &a.id), TC_OK);
    q.user = &b;
    assert_int_equal(tc_engine_submit(e, &q, &b.id), TC_OK);
    q.user = &c;
    assert_int_equal(tc_engine_submit(e, &q, &c.id), TC_ERR_LIMIT);
    for (int i = 0; i < 5; i++)
        assert_int_equal(tc_engine_step(e, NULL), TC_OK);
    tc_engine_stats s;
    tc_engine_get_stats(e, &s);
    assert_true(s.blocks_used > 0);
    assert_int_equal(tc_engine_cancel(e, a.id), TC_OK);
    assert_int_equal(tc_engine_cancel(e, b.id), TC_OK);
    int32_t active = -1;
    assert_int_equal(tc_engine_step(e, &active), TC_OK);
    assert_int_equal(active, 0);
    tc_engine_get_stats(e, &s);
    assert_int_equal(s.blocks_used, 0);
    assert_int_equal(a.finish[0], TC_FINISH_CANCELLED);
    assert_int_equal(b.finish[0], TC_FINISH_CANCELLED);
    assert_int_equal(tc_engine_cancel(e, a.id), TC_ERR_NOT_FOUND);
    check_engine(e);
    tc_engine_destroy(e);
    fake_free(f);
}

/* A threaded engine with submissions, cancellations and reads of its stats (as the server's
 * /metrics makes) from several threads; what each thread reads never goes backwards. */
typedef struct client {
    tc_engine *e;
    result *r;
    int n;
    bool backwards; /* a stats read saw a counter smaller than the one before */
} client;

static void *client_main(void *arg)
{
    client *c = arg;
    tc_engine_stats last = { 0 };
    for (int i = 0; i < c->n; i++) {
        tc_request q = request_of(&c->r[i]);
        tc_status st;
        do {
            st = tc_engine_submit(c->e, &q, &c->r[i].id);
            tc_engine_stats s;
            tc_engine_get_stats(c->e, &s);
            if (s.steps < last.steps || s.generated_tokens < last.generated_tokens ||
                s.prompt_tokens < last.prompt_tokens || s.requests_done < last.requests_done)
                c->backwards = true;
            last = s;
        } while (st == TC_ERR_LIMIT);
        if (i % 5 == 4 && tc_engine_cancel(c->e, c->r[i].id) == TC_OK)
            c->r[i].cancelled = true;
    }
    return NULL;
}

static void test_threaded(void **state)
{
    (void)state;
    enum { CLIENTS = 4, EACH = 25 };
    fake *f = fake_new(48, 8, 64);
    tc_engine_model m = fake_model(f);
    tc_engine_options o = { .threaded = true,
                            .max_queue = 16,
                            .stop_tokens = (const int32_t[]){ EOS },
                            .n_stop_tokens = 1 };
    tc_engine *e;
    assert_int_equal(tc_engine_create(&m, &o, &e), TC_OK);
    result *r = calloc(CLIENTS * EACH, sizeof *r);
    int want = 0;
    for (int i = 0; i < CLIENTS * EACH; i++) {
        make_prompt(&r[i], 100);
        r[i].max_tokens = 1 + rnd(40);
        r[i].n = i % 9 == 0 ? 2 : 1;
        want += r[i].n;
    }
    finished_choices = 0;
    pthread_t th[CLIENTS];
    client cl[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        cl[i] = (client){ e, r + i * EACH, EACH, false };
        pthread_create(&th[i], NULL, client_main, &cl[i]);
    }
    for (int i = 0; i < CLIENTS; i++) {
        pthread_join(th[i], NULL);
        assert_false(cl[i].backwards);
    }
    pthread_mutex_lock(&results_mu);
    while (finished_choices < want)
        pthread_cond_wait(&results_cv, &results_mu);
    pthread_mutex_unlock(&results_mu);
    tc_engine_stats s;
    tc_engine_get_stats(e, &s);
    assert_int_equal(s.requests_done, CLIENTS * EACH);
    tc_engine_destroy(e);
    for (int i = 0; i < CLIENTS * EACH; i++)
        check_greedy(&r[i]);
    free(r);
    fake_free(f);
}

/* Log-probabilities: each token's and its top alternatives' equal the log-softmax of the
 * logits the fake model made for that history; a request that did not ask gets none. */
typedef struct lp_result {
    int32_t tok[32];
    float lp[32];
    int n_top[32];
    int32_t top[32][TC_ENGINE_MAX_TOP_LOGPROBS];
    float top_lp[32][TC_ENGINE_MAX_TOP_LOGPROBS];
    int n;
} lp_result;

static void on_lp_event(void *user, const tc_engine_event *ev)
{
    lp_result *r = user;
    if (ev->token < 0 || r->n >= 32)
        return;
    r->tok[r->n] = ev->token;
    r->lp[r->n] = ev->logprob;
    r->n_top[r->n] = ev->n_top;
    for (int j = 0; j < ev->n_top; j++) {
        r->top[r->n][j] = ev->top_tokens[j];
        r->top_lp[r->n][j] = ev->top_logprobs[j];
    }
    r->n++;
}

static void test_logprobs(void **state)
{
    (void)state;
    fake *f = fake_new(32, 4, 64);
    tc_engine_model m = fake_model(f);
    tc_engine *e;
    assert_int_equal(tc_engine_create(&m, NULL, &e), TC_OK);
    int32_t hist[64] = { 5, 9, 13, 2, 7 };
    int n_prompt = 5, top = 7;
    lp_result with = { 0 }, without = { 0 };
    tc_request q = { .prompt = hist,
                     .n_prompt = n_prompt,
                     .max_tokens = 12,
                     .ignore_eos = true,
                     .sample = tc_sample_defaults(),
                     .callback = on_lp_event,
                     .user = &with,
                     .logprobs = true,
                     .top_logprobs = top };
    q.sample.temperature = 0.8f;
    q.sample.seed = 3;
    assert_int_equal(tc_engine_submit(e, &q, NULL), TC_OK);
    tc_request q2 = q;
    q2.logprobs = false;
    q2.top_logprobs = 0;
    q2.user = &without;
    assert_int_equal(tc_engine_submit(e, &q2, NULL), TC_OK);
    tc_request bad = q;
    bad.top_logprobs = TC_ENGINE_MAX_TOP_LOGPROBS + 1;
    assert_int_equal(tc_engine_submit(e, &bad, NULL), TC_ERR_INVALID_ARGUMENT);
    int32_t active = 1;
    while (active)
        assert_int_equal(tc_engine_step(e, &active), TC_OK);
    assert_int_equal(with.n, 12);
    assert_int_equal(without.n, 12);
    float row[VOCAB];
    for (int t = 0; t < with.n; t++) {
        fill_logits(row, history_hash(hist, n_prompt + t));
        double mx = row[0], sum = 0;
        for (int v = 1; v < VOCAB; v++)
            mx = row[v] > mx ? row[v] : mx;
        for (int v = 0; v < VOCAB; v++)
            sum += exp(row[v] - mx);
        double lse = mx + log(sum);
        assert_true(fabs(with.lp[t] - (row[with.tok[t]] - lse)) < 1e-5);
        assert_true(with.lp[t] < 0);
        assert_int_equal(with.n_top[t], top);
        for (int j = 0; j < top; j++) {
            int32_t v = with.top[t][j];
            assert_true(fabs(with.top_lp[t][j] - (row[v] - lse)) < 1e-5);
            /* No token outside the list is more likely than the last one in it. */
            int above = 0;
            for (int u = 0; u < VOCAB; u++)
                above += row[u] > row[v];
            assert_int_equal(above, j);
        }
        assert_int_equal(without.n_top[t], 0);
        assert_true(without.lp[t] == 0.0f);
        assert_int_equal(without.tok[t], with.tok[t]);
        hist[n_prompt + t] = with.tok[t];
    }
    tc_engine_destroy(e);
    fake_free(f);
}

/* logit_bias: greedy decoding follows the argmax of the biased logits, -100 bans a token
 * even from sampling, +100 forces one, and bad biases are refused. */
static void test_logit_bias(void **state)
{
    (void)state;
    fake *f = fake_new(64, 4, 64);
    tc_engine_model m = fake_model(f);
    tc_engine *e;
    assert_int_equal(tc_engine_create(&m, NULL, &e), TC_OK);
    int32_t prompt[] = { 3, 1, 4, 1, 5 };
    result plain = { .n_prompt = 5, .max_tokens = 1 };
    memcpy(plain.prompt, prompt, sizeof prompt);
    int32_t first;
    assert_int_equal(reference(&plain, &first), 1);
    /* Greedy: the unbiased first token and EOS banned, token 7 raised by half the logits'
     * range ([0, 1)). */
    int32_t ids[] = { first, EOS, 7 };
    float bias[] = { -100, -100.5f, 0.5f };
    result greedy = plain;
    greedy.max_tokens = 16;
    tc_request q = request_of(&greedy);
    q.bias_ids = ids;
    q.bias = bias;
    q.n_bias = 3;
    assert_int_equal(tc_engine_submit(e, &q, NULL), TC_OK);
    /* Sampled at temperature 2 with all but three tokens banned, and forced with +100. */
    int32_t banned[VOCAB];
    float minus[VOCAB];
    int n_banned = 0;
    for (int v = 0; v < VOCAB; v++)
        if (v != 10 && v != 20 && v != 30) {
            banned[n_banned] = v;
            minus[n_banned++] = -100;
        }
    result sampled = plain, forced = plain;
    sampled.max_tokens = forced.max_tokens = 32;
    sampled.temperature = forced.temperature = 2.0f;
    sampled.seed = forced.seed = 11;
    tc_request qs = request_of(&sampled), qf = request_of(&forced);
    qs.bias_ids = banned;
    qs.bias = minus;
    qs.n_bias = n_banned;
    int32_t force_id[] = { 42 };
    float force[] = { 100 };
    qf.bias_ids = force_id;
    qf.bias = force;
    qf.n_bias = 1;
    assert_int_equal(tc_engine_submit(e, &qs, NULL), TC_OK);
    assert_int_equal(tc_engine_submit(e, &qf, NULL), TC_OK);
    /* Out of the vocabulary, not finite, or arrays missing. */
    tc_request bad = q;
    int32_t outside[] = { VOCAB };
    bad.bias_ids = outside;
    bad.n_bias = 1;
    assert_int_equal(tc_engine_submit(e, &bad, NULL), TC_ERR_INVALID_ARGUMENT);
    float nan_bias[] = { NAN };
    bad = q;
    bad.bias = nan_bias;
    bad.n_bias = 1;
    assert_int_equal(tc_engine_submit(e, &bad, NULL), TC_ERR_INVALID_ARGUMENT);
    bad = q;
    bad.bias = NULL;
    assert_int_equal(tc_engine_submit(e, &bad, NULL), TC_ERR_INVALID_ARGUMENT);
    drain(e);
    /* The greedy reference with the same bias. */
    int32_t hist[64];
    memcpy(hist, prompt, sizeof prompt);
    float row[VOCAB];
    assert_int_equal(greedy.n_out[0], 16);
    for (int t = 0; t < 16; t++) {
        fill_logits(row, history_hash(hist, 5 + t));
        row[first] = -INFINITY;
        row[EOS] = -INFINITY;
        row[7] += 0.5f;
        int32_t best = 0;
        for (int v = 1; v < VOCAB; v++)
            if (row[v] > row[best])
                best = v;
        assert_int_equal(greedy.out[0][t], best);
        hist[5 + t] = best;
    }
    assert_int_not_equal(greedy.out[0][0], first);
    assert_int_equal(sampled.n_out[0], 32);
    int seen[VOCAB] = { 0 };
    for (int t = 0; t < 32; t++) {
        int32_t v = sampled.out[0][t];
        assert_true(v == 10 || v == 20 || v == 30);
        seen[v]++;
    }
    assert_true((seen[10] > 0) + (seen[20] > 0) + (seen[30] > 0) >= 2); /* still sampled */
    assert_int_equal(forced.n_out[0], 32);
    for (int t = 0; t < 32; t++)
        assert_int_equal(forced.out[0][t], 42);
    tc_engine_destroy(e);
    fake_free(f);
}

/* Destroying an engine with work under way ends every request cancelled. */
static void test_destroy_cancels(void **state)
{
    (void)state;
    fake *f = fake_new(32, 4, 64);
    tc_engine_model m = fake_model(f);
    tc_engine *e;
    assert_int_equal(tc_engine_create(&m, NULL, &e), TC_OK);
    result r[3] = { 0 };
    for (int i = 0; i < 3; i++) {
        make_prompt(&r[i], 60);
        r[i].max_tokens = 50;
        tc_request q = request_of(&r[i]);
        assert_int_equal(tc_engine_submit(e, &q, &r[i].id), TC_OK);
        if (i < 2)
            assert_int_equal(tc_engine_step(e, NULL), TC_OK);
    }
    tc_engine_destroy(e);
    for (int i = 0; i < 3; i++)
        assert_true(r[i].finish[0] == TC_FINISH_CANCELLED || r[i].finish[0] == TC_FINISH_STOP);
    fake_free(f);
}

/* Whoever receives a request's event finds the step that made the token in the stats (bench
 * reads them as its last request ends). */
typedef struct watcher {
    tc_engine *e;
    uint64_t events, behind;
} watcher;

static void on_event_read_stats(void *user, const tc_engine_event *ev)
{
    watcher *w = user;
    tc_engine_stats s;
    tc_engine_get_stats(w->e, &s);
    w->events++;
    if (ev->token >= 0 && s.generated_tokens < (uint64_t)ev->completion_tokens)
        w->behind++;
    if (s.steps < (uint64_t)ev->completion_tokens)
        w->behind++;
}

static void test_stats_cover_delivered_tokens(void **state)
{
    (void)state;
    fake *f = fake_new(32, 4, 64);
    tc_engine_model m = fake_model(f);
    tc_engine *e;
    assert_int_equal(tc_engine_create(&m, NULL, &e), TC_OK);
    watcher w = { e, 0, 0 };
    result r = { 0 };
    make_prompt(&r, 40);
    r.max_tokens = 12;
    tc_request q = request_of(&r);
    q.callback = on_event_read_stats;
    q.user = &w;
    assert_int_equal(tc_engine_submit(e, &q, &r.id), TC_OK);
    drain(e);
    assert_true(w.events >= 1);
    assert_int_equal(w.behind, 0);
    tc_engine_destroy(e);
    fake_free(f);
}

/* The block accounting alone: LRU eviction order and collision-proof lookups. */
static void test_blocks(void **state)
{
    (void)state;
    tc_blocks *bm;
    assert_int_equal(tc_blocks_create(3, 4, &bm), TC_OK);
    int32_t t1[4] = { 1, 2, 3, 4 }, t2[4] = { 5, 6, 7, 8 }, t3[4] = { 1, 2, 3, 5 };
    int32_t a = tc_blocks_alloc(bm), b = tc_blocks_alloc(bm), c = tc_blocks_alloc(bm);
    assert_int_equal(tc_blocks_alloc(bm), -1);
    uint64_t h1 = tc_blocks_hash(0, t1, 4), h2 = tc_blocks_hash(h1, t2, 4);
    tc_blocks_commit(bm, a, h1, 0, t1);
    tc_blocks_commit(bm, b, h2, h1, t2);
    tc_blocks_release(bm, b); /* released first: evicted first */
    tc_blocks_release(bm, a);
    tc_blocks_release(bm, c); /* no contents: taken before any cached block */
    assert_int_equal(tc_blocks_alloc(bm), c);
    assert_int_equal(tc_blocks_lookup(bm, h1, 0, t3), -1); /* same hash, other tokens */
    assert_int_equal(tc_blocks_lookup(bm, tc_blocks_hash(0, t3, 4), 0, t3), -1);
    assert_int_equal(tc_blocks_alloc(bm), b); /* the least recently released */
    assert_int_equal(tc_blocks_lookup(bm, h2, h1, t2), -1);
    assert_int_equal(tc_blocks_lookup(bm, h1, 0, t1), a);
    assert_int_equal(tc_blocks_refs(bm, a), 1);
    char msg[128];
    int32_t holds[3] = { 1, 1, 1 };
    assert_true(tc_blocks_check(bm, holds, msg, sizeof msg));
    holds[0] = 2;
    assert_false(tc_blocks_check(bm, holds, msg, sizeof msg));
    tc_blocks_stats s;
    tc_blocks_get_stats(bm, &s);
    assert_int_equal(s.evictions, 1);
    assert_int_equal(s.hits, 1);
    tc_blocks_destroy(bm);
}

int main(void)
{
    results = calloc(MAX_REQ, sizeof *results);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blocks),
        cmocka_unit_test(test_prefix_hits),
        cmocka_unit_test(test_bad_requests_and_cancel),
        cmocka_unit_test(test_preemption_same_output),
        cmocka_unit_test(test_window_releases_blocks),
        cmocka_unit_test(test_random_events),
        cmocka_unit_test(test_threaded),
        cmocka_unit_test(test_destroy_cancels),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_logit_bias),
        cmocka_unit_test(test_stats_cover_delivered_tokens),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    free(results);
    return rc;
}

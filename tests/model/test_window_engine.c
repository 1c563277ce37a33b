/* The engine over a real model with a sliding window: a Mistral-style model (random weights,
 * a window of 24 tokens, blocks of 8, q/k/v biases and a head size of 24 over a 64-wide model
 * as Qwen2 and Mistral-Nemo have them) serves prompts of 60 tokens and 40 greedy tokens each in
 * a cache of 6 blocks (48 tokens), prompts cut into chunks of 16: the engine releases the
 * blocks that fall out of each window, and every continuation equals the argmax chain of the
 * same model run pass by pass over a cache with room for everything. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "inference/engine.h"
#include "model/llama.h"

enum { PROMPT = 60, NEW = 40, N_REQ = 3 };

typedef struct out {
    int32_t ids[NEW];
    int n;
    tc_finish_reason finish;
} out;

static void on_event(void *user, const tc_engine_event *ev)
{
    out *o = user;
    if (ev->token >= 0 && o->n < NEW)
        o->ids[o->n++] = ev->token;
    if (ev->finish != TC_FINISH_NONE)
        o->finish = ev->finish;
}

static int32_t argmax(const float *row, int n)
{
    int32_t best = 0;
    for (int v = 1; v < n; v++)
        if (row[v] > row[best])
            best = v;
    return best;
}

/* The greedy continuation of one prompt, one forward pass at a time over its own cache. */
static void reference(tc_llama *m, const int32_t *prompt, int32_t *want)
{
    tc_kv_cache kv;
    int32_t bs = 8, n_blocks = (PROMPT + NEW + bs - 1) / bs;
    assert_int_equal(tc_kv_cache_init(&kv, m, n_blocks, bs), TC_OK);
    int32_t ids[PROMPT + NEW], pos[PROMPT + NEW], table[32];
    memcpy(ids, prompt, sizeof(int32_t) * PROMPT);
    for (int i = 0; i < PROMPT + NEW; i++)
        pos[i] = i;
    for (int i = 0; i < 32; i++)
        table[i] = i < n_blocks ? i : 0;
    for (int from = 0, len = PROMPT, k = 0; k < NEW; from = len, len++, k++) {
        int32_t q_start[2] = { 0, len - from };
        tc_llama_batch b = { len - from, 1,          (int32_t)m->s.max_blocks,
                             ids + from, pos + from, pos + from,
                             q_start,    &len,       table };
        tc_tensor *logits;
        assert_int_equal(tc_llama_forward(m, &kv, &b, &logits), TC_OK);
        want[k] = ids[len] = argmax(logits->data, m->cfg.vocab);
    }
    tc_kv_cache_deinit(&kv);
}

static void engine_releases_blocks_outside_the_window(void **state)
{
    (void)state;
    tc_llama_config c = { .arch = "mistral",
                          .n_layers = 2,
                          .dim = 64,
                          .n_heads = 4,
                          .n_kv_heads = 2,
                          .head_dim = 24,
                          .ffn_dim = 128,
                          .vocab = 97,
                          .max_positions = 256,
                          .norm_eps = 1e-5f,
                          .qkv_bias = true,
                          .window = 24 };
    c.rope.head_dim = 24;
    c.rope.theta = 10000.0;
    tc_backend *b;
    assert_int_equal(tc_backend_create_cpu(0, &b), TC_OK);
    tc_llama_options o = {
        .max_tokens = PROMPT, .max_seqs = N_REQ, .max_context = 256, .block_size = 8
    };
    tc_llama *m;
    assert_int_equal(tc_llama_random(&c, 7, b, &o, &m), TC_OK);
    int32_t prompts[N_REQ][PROMPT], want[N_REQ][NEW];
    uint32_t x = 12345;
    for (int r = 0; r < N_REQ; r++) {
        for (int i = 0; i < PROMPT; i++) {
            x = x * 1664525u + 1013904223u;
            prompts[r][i] = (int32_t)((x >> 8) % (uint32_t)c.vocab);
        }
        reference(m, prompts[r], want[r]);
    }
    tc_kv_cache kv;
    assert_int_equal(tc_kv_cache_init(&kv, m, 6, 8), TC_OK);
    tc_engine_model em = tc_engine_model_llama(m, &kv);
    assert_int_equal(em.window, 24);
    tc_engine_options eo = { .max_step_tokens = 16 };
    tc_engine *e;
    assert_int_equal(tc_engine_create(&em, &eo, &e), TC_OK);
    out got[N_REQ] = { 0 };
    for (int r = 0; r < N_REQ; r++) {
        tc_request q = { 0 };
        q.prompt = prompts[r];
        q.n_prompt = PROMPT;
        q.max_tokens = NEW;
        q.sample = tc_sample_defaults();
        q.ignore_eos = true;
        q.callback = on_event;
        q.user = &got[r];
        assert_int_equal(tc_engine_submit(e, &q, NULL), TC_OK);
    }
    int32_t active = 1;
    for (int steps = 0; active > 0; steps++) {
        assert_int_equal(tc_engine_step(e, &active), TC_OK);
        char msg[256];
        if (!tc_engine_check(e, msg, sizeof msg))
            fail_msg("invariant broken: %s", msg);
        assert_true(steps < 10000);
    }
    tc_engine_stats es;
    tc_engine_get_stats(e, &es);
    assert_int_equal(es.blocks_used, 0);
    for (int r = 0; r < N_REQ; r++) {
        assert_int_equal(got[r].n, NEW);
        assert_int_equal(got[r].finish, TC_FINISH_LENGTH);
        for (int k = 0; k < NEW; k++)
            if (got[r].ids[k] != want[r][k])
                fail_msg("request %d: token %d is %d, the pass-by-pass run chose %d", r, k,
                         got[r].ids[k], want[r][k]);
    }
    tc_engine_destroy(e);
    tc_kv_cache_deinit(&kv);
    tc_llama_destroy(m);
    tc_backend_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(engine_releases_blocks_outside_the_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The tensor-parallel pass on the CPU backend (src/model/tp.c): random-weight Llamas split over
 * N = 1, 2, 4 and 8 ranks (one CPU backend and thread each, the in-process group standing in
 * for NCCL) give the unsharded pass's logits, f32, relative error below 1e-5, over prompts,
 * decode steps and a batch of both; the shapes cover a GQA model whose KV heads are replicated
 * on several ranks, q/k/v biases, a head size other than dim / heads, tied and untied
 * embeddings, a vocabulary the ranks do not divide, a feed-forward width they do not divide
 * (shares that differ by a column) and an FP8 KV cache (whose scales each rank sets from its
 * own heads). Also the in-process group itself, and the engine over a split
 * model (tc_engine_model_tp): the whole model's greedy outputs. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "inference/tp_engine.h"
#include "model/tp.h"

enum { BS = 8, MAX_BLOCKS = 4, N_BLOCKS = 16 };

typedef struct shape {
    const char *name;
    tc_llama_config cfg;
    int max_ranks;
    bool kv_fp8; /* an FP8 cache: each rank sets its heads' scales from its own keys */
} shape;

enum { N_SHAPES = 5 };

static tc_llama_config base(int dim, int heads, int kv, int hd, int ffn, int vocab)
{
    tc_llama_config c = { .arch = "llama",
                          .n_layers = 2,
                          .dim = dim,
                          .n_heads = heads,
                          .n_kv_heads = kv,
                          .head_dim = hd,
                          .ffn_dim = ffn,
                          .vocab = vocab,
                          .max_positions = 256,
                          .norm_eps = 1e-5f };
    c.rope.head_dim = hd;
    c.rope.theta = 10000.0;
    c.rope.interleaved = true;
    return c;
}

static shape shapes(int i)
{
    shape s = { 0 };
    switch (i) {
    case 0: /* multi-head: every rank its own KV heads; vocabulary 101 over 2, 4, 8 ranks */
        s.name = "mha 8/8 heads, untied";
        s.cfg = base(64, 8, 8, 8, 96, 101);
        s.max_ranks = 8;
        break;
    case 1: /* GQA: 2 KV heads, replicated on 2 (N = 4) and 4 (N = 8) ranks; Llama 3 rope */
        s.name = "gqa 8/2 heads, head size 16, tied";
        s.cfg = base(64, 8, 2, 16, 128, 97);
        s.cfg.tied_embeddings = true;
        s.cfg.rope.theta = 500000.0;
        s.cfg.rope.scaling = TC_ROPE_LLAMA3;
        s.cfg.rope.factor = 32.0;
        s.cfg.rope.low_freq_factor = 1.0;
        s.cfg.rope.high_freq_factor = 4.0;
        s.cfg.rope.original_max_position = 64.0;
        s.max_ranks = 8;
        break;
    case 2: /* Qwen2-style: q/k/v biases, rotate_half, a sliding window; KV replicated at 4 */
        s.name = "qwen2-like 4/2 heads, head size 24, biases, window 12";
        s.cfg = base(64, 4, 2, 24, 128, 97);
        snprintf(s.cfg.arch, sizeof s.cfg.arch, "qwen2");
        s.cfg.qkv_bias = true;
        s.cfg.rope.interleaved = false;
        s.cfg.window = 12;
        s.max_ranks = 4;
        break;
    case 3: /* the GQA shape over an FP8 KV cache */
        s = shapes(1);
        s.name = "gqa 8/2 heads, FP8 KV cache";
        s.kv_fp8 = true;
        break;
    default: /* feed-forward shares that differ: 90 columns are 45 + 45, 23 + 23 + 22 + 22 and
              * 12 + 12 + 11 x 6 (as whole quantisation blocks split, test_tp_files.py) */
        s.name = "mha 8/8 heads, feed-forward 90 (uneven shares)";
        s.cfg = base(64, 8, 8, 8, 90, 101);
        s.max_ranks = 8;
        break;
    }
    return s;
}

/* ---------------------------------------------------------------- the passes */

/* Sequences A, B, C own blocks 4s .. 4s+3; positions run from 0. */
typedef struct script {
    int32_t len[3]; /* tokens cached per sequence */
    int32_t tok[3][MAX_BLOCKS * BS];
} script;

/* Build a batch of the next rows of the listed sequences (n_new[i] tokens of sequence seq[i]). */
typedef struct batch_buf {
    int32_t tokens[64], pos[64], slots[64], q_start[4], lens[3], table[3 * MAX_BLOCKS];
    tc_llama_batch b;
} batch_buf;

static void make_batch(script *sc, batch_buf *bb, int n, const int *seq, const int *n_new)
{
    int32_t t = 0;
    bb->q_start[0] = 0;
    for (int i = 0; i < n; i++) {
        int s = seq[i];
        for (int k = 0; k < n_new[i]; k++, t++) {
            int32_t p = sc->len[s] + k;
            bb->tokens[t] = sc->tok[s][p];
            bb->pos[t] = p;
            bb->slots[t] = (4 * s + p / BS) * BS + p % BS;
        }
        sc->len[s] += n_new[i];
        bb->q_start[i + 1] = t;
        bb->lens[i] = sc->len[s];
        for (int j = 0; j < MAX_BLOCKS; j++)
            bb->table[i * MAX_BLOCKS + j] = 4 * s + j;
    }
    bb->b = (tc_llama_batch){ .n_tokens = t,
                              .n_seqs = n,
                              .max_blocks = MAX_BLOCKS,
                              .tokens = bb->tokens,
                              .positions = bb->pos,
                              .slots = bb->slots,
                              .q_start = bb->q_start,
                              .seq_lens = bb->lens,
                              .block_table = bb->table };
}

/* The passes: two prompts (17 rows: the many-row path), a decode step of both (the few-row
 * path), a decode beside a new prompt's chunk, a decode step of all three, a longer chunk. */
enum { N_PASSES = 5 };
static void pass_batch(script *sc, int pass, batch_buf *bb)
{
    static const int seqs[N_PASSES][3] = { { 0, 1 }, { 0, 1 }, { 0, 2 }, { 0, 1, 2 }, { 2, 0 } };
    static const int news[N_PASSES][3] = { { 11, 6 }, { 1, 1 }, { 1, 5 }, { 1, 1, 1 }, { 14, 1 } };
    static const int counts[N_PASSES] = { 2, 2, 2, 3, 2 };
    make_batch(sc, bb, counts[pass], seqs[pass], news[pass]);
}

static void fill_script(script *sc, int vocab)
{
    uint32_t x = 2024;
    memset(sc, 0, sizeof *sc);
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < MAX_BLOCKS * BS; i++) {
            x = x * 1664525u + 1013904223u;
            sc->tok[s][i] = (int32_t)((x >> 8) % (uint32_t)vocab);
        }
}

static tc_llama_options options(const shape *s)
{
    return (tc_llama_options){ .max_tokens = 32,
                               .max_seqs = 3,
                               .max_context = MAX_BLOCKS * BS,
                               .block_size = BS,
                               .kv_fp8 = s->kv_fp8 };
}

/* max |a - b| / max |b| over the n_seqs x vocab logits */
static double rel_error(const float *a, const float *b, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]), m = fabs((double)b[i]);
        num = d > num ? d : num;
        den = m > den ? m : den;
        if (isnan(a[i]))
            return INFINITY;
    }
    return num / den;
}

/* The unsharded logits of every pass: [pass][seq][vocab]. */
static float *reference_logits(tc_llama *m)
{
    int V = m->cfg.vocab;
    float *out = calloc((size_t)N_PASSES * 3 * (size_t)V, sizeof(float));
    assert_non_null(out);
    tc_kv_cache kv;
    assert_int_equal(tc_kv_cache_init(&kv, m, N_BLOCKS, BS), TC_OK);
    script sc;
    fill_script(&sc, V);
    for (int p = 0; p < N_PASSES; p++) {
        batch_buf bb;
        pass_batch(&sc, p, &bb);
        tc_tensor *logits;
        assert_int_equal(tc_llama_forward(m, &kv, &bb.b, &logits), TC_OK);
        memcpy(out + (size_t)p * 3 * V, logits->data, sizeof(float) * (size_t)bb.b.n_seqs * V);
    }
    tc_kv_cache_deinit(&kv);
    return out;
}

/* The worst relative error of the sharded passes over n ranks against want. */
static double sharded_error(tc_llama *full, int n, const tc_llama_options *opts, const float *want)
{
    int V = full->cfg.vocab;
    tc_backend *backends[8] = { 0 };
    for (int r = 0; r < n; r++)
        assert_int_equal(tc_backend_create_cpu(1, &backends[r]), TC_OK);
    tc_tp *tp;
    tc_status st = tc_tp_from_model(full, n, backends, NULL, opts, &tp);
    if (st != TC_OK)
        fail_msg("%d ranks: %s", n, tc_last_error());
    int64_t ffn = 0;
    for (int r = 0; r < n; r++) {
        assert_int_equal(tp->plan.rank[r].local.n_heads, full->cfg.n_heads / n);
        assert_int_equal(tp->rank[r].m->cfg.ffn_dim, tp->plan.rank[r].n_ffn);
        ffn += tp->rank[r].m->cfg.ffn_dim;
    }
    assert_int_equal(ffn, full->cfg.ffn_dim);
    tc_tp_kv kv;
    assert_int_equal(tc_tp_kv_init(&kv, tp, N_BLOCKS, BS), TC_OK);
    script sc;
    fill_script(&sc, V);
    double worst = 0;
    for (int p = 0; p < N_PASSES; p++) {
        batch_buf bb;
        pass_batch(&sc, p, &bb);
        tc_tensor *logits;
        st = tc_tp_forward(tp, &kv, &bb.b, &logits);
        if (st != TC_OK)
            fail_msg("%d ranks, pass %d: %s", n, p, tc_last_error());
        assert_int_equal(logits->shape[0], bb.b.n_seqs);
        assert_int_equal(logits->shape[1], V);
        double e = rel_error(logits->data, want + (size_t)p * 3 * V, (int64_t)bb.b.n_seqs * V);
        worst = e > worst ? e : worst;
    }
    tc_tp_kv_deinit(&kv);
    tc_tp_destroy(tp);
    for (int r = 0; r < n; r++)
        tc_backend_destroy(backends[r]);
    return worst;
}

static void sharded_logits_equal_unsharded(void **state)
{
    (void)state;
    for (int i = 0; i < N_SHAPES; i++) {
        shape s = shapes(i);
        tc_llama_options opts = options(&s);
        tc_backend *b;
        assert_int_equal(tc_backend_create_cpu(1, &b), TC_OK);
        tc_llama *full;
        assert_int_equal(tc_llama_random(&s.cfg, 11 + (uint64_t)i, b, &opts, &full), TC_OK);
        float *want = reference_logits(full);
        for (int n = 1; n <= s.max_ranks; n *= 2) {
            double e = sharded_error(full, n, &opts, want);
            print_message("%-56s N = %d: relative error %.2e\n", s.name, n, e);
            if (!(e < 1e-5))
                fail_msg("%s over %d ranks: relative error %.3e", s.name, n, e);
        }
        free(want);
        tc_llama_destroy(full);
        tc_backend_destroy(b);
    }
}

/* ---------------------------------------------------------------- through the engine */

enum { ENGINE_REQS = 5, ENGINE_GEN = 12 };

typedef struct engine_out {
    int32_t tok[2][ENGINE_GEN];
    int n[2];
    int done;
} engine_out;

static void on_engine_event(void *user, const tc_engine_event *ev)
{
    engine_out *o = user;
    if (ev->token >= 0 && o->n[ev->index] < ENGINE_GEN)
        o->tok[ev->index][o->n[ev->index]++] = ev->token;
    o->done += ev->finish != TC_FINISH_NONE;
}

/* Greedy outputs of requests whose prompts share a prefix (the prefix cache's blocks), the
 * first asking for two choices (its last partial block copied). */
static void engine_outputs(const tc_engine_model *em, int vocab, engine_out *out)
{
    tc_engine *e;
    assert_int_equal(tc_engine_create(em, &(tc_engine_options){ 0 }, &e), TC_OK);
    int32_t prompts[ENGINE_REQS][20];
    uint32_t x = 77;
    for (int i = 0; i < ENGINE_REQS; i++)
        for (int j = 0; j < 20; j++) {
            x = x * 1664525u + 1013904223u;
            /* The first 12 tokens (a block of 8 and half the next) are prompt 0's in all. */
            prompts[i][j] = i > 0 && j < 12 ? prompts[0][j] : (int32_t)((x >> 8) % (uint32_t)vocab);
        }
    memset(out, 0, sizeof *out * ENGINE_REQS);
    for (int i = 0; i < ENGINE_REQS; i++) {
        tc_request q = { 0 };
        q.prompt = prompts[i];
        q.n_prompt = 20 - i;
        q.max_tokens = ENGINE_GEN;
        q.n = i == 0 ? 2 : 1;
        q.sample = tc_sample_defaults();
        q.sample.temperature = 0;
        q.ignore_eos = true;
        q.callback = on_engine_event;
        q.user = &out[i];
        assert_int_equal(tc_engine_submit(e, &q, NULL), TC_OK);
    }
    int32_t active = 1;
    while (active > 0)
        assert_int_equal(tc_engine_step(e, &active), TC_OK);
    char msg[256];
    if (!tc_engine_check(e, msg, sizeof msg))
        fail_msg("%s", msg);
    tc_engine_destroy(e);
}

/* The engine over a model split in 2 and 4 (tc_engine_model_tp) gives the whole model's greedy
 * outputs, its scheduler, prefix cache and block copies shared by the ranks' caches. */
static void the_engine_runs_a_sharded_model(void **state)
{
    (void)state;
    shape s = shapes(1);
    tc_llama_options opts = options(&s);
    opts.max_context = 64;
    tc_backend *b;
    assert_int_equal(tc_backend_create_cpu(1, &b), TC_OK);
    tc_llama *full;
    assert_int_equal(tc_llama_random(&s.cfg, 5, b, &opts, &full), TC_OK);
    tc_kv_cache kv;
    assert_int_equal(tc_kv_cache_init(&kv, full, 64, BS), TC_OK);
    tc_engine_model em = tc_engine_model_llama(full, &kv);
    engine_out want[ENGINE_REQS], got[ENGINE_REQS];
    engine_outputs(&em, s.cfg.vocab, want);
    for (int n = 2; n <= 4; n *= 2) {
        tc_backend *backends[4];
        for (int r = 0; r < n; r++)
            assert_int_equal(tc_backend_create_cpu(1, &backends[r]), TC_OK);
        tc_tp *tp;
        assert_int_equal(tc_tp_from_model(full, n, backends, NULL, &opts, &tp), TC_OK);
        tc_tp_kv tkv;
        assert_int_equal(tc_tp_kv_init(&tkv, tp, 64, BS), TC_OK);
        tc_engine_model tm = tc_engine_model_tp(tp, &tkv);
        assert_int_equal(tm.vocab, s.cfg.vocab);
        assert_int_equal(tm.n_blocks, 64);
        engine_outputs(&tm, s.cfg.vocab, got);
        for (int i = 0; i < ENGINE_REQS; i++) {
            assert_int_equal(got[i].done, i == 0 ? 2 : 1);
            for (int c = 0; c < (i == 0 ? 2 : 1); c++) {
                assert_int_equal(got[i].n[c], ENGINE_GEN);
                assert_memory_equal(got[i].tok[c], want[i].tok[c], sizeof got[i].tok[c]);
            }
        }
        print_message("engine over %d ranks: %d requests' greedy outputs equal\n", n, ENGINE_REQS);
        tc_tp_kv_deinit(&tkv);
        tc_tp_destroy(tp);
        for (int r = 0; r < n; r++)
            tc_backend_destroy(backends[r]);
    }
    tc_kv_cache_deinit(&kv);
    tc_llama_destroy(full);
    tc_backend_destroy(b);
}

/* A split the plan refuses is a clear error; a bad token fails the pass before any rank runs,
 * and the next pass still works. */
static void refusals_are_clear_and_recoverable(void **state)
{
    (void)state;
    shape s = shapes(1);
    tc_llama_options opts = options(&s);
    tc_backend *b, *backends[3];
    assert_int_equal(tc_backend_create_cpu(1, &b), TC_OK);
    for (int r = 0; r < 3; r++)
        assert_int_equal(tc_backend_create_cpu(1, &backends[r]), TC_OK);
    tc_llama *full;
    assert_int_equal(tc_llama_random(&s.cfg, 5, b, &opts, &full), TC_OK);
    tc_tp *tp;
    assert_int_equal(tc_tp_from_model(full, 3, backends, NULL, &opts, &tp),
                     TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "8 attention heads"));
    assert_int_equal(tc_tp_from_model(full, 2, backends, NULL, &opts, &tp), TC_OK);
    tc_tp_kv kv;
    assert_int_equal(tc_tp_kv_init(&kv, tp, N_BLOCKS, BS), TC_OK);
    script sc;
    fill_script(&sc, s.cfg.vocab);
    batch_buf bb;
    pass_batch(&sc, 0, &bb);
    bb.tokens[3] = s.cfg.vocab;
    tc_tensor *logits;
    assert_int_equal(tc_tp_forward(tp, &kv, &bb.b, &logits), TC_ERR_INVALID_ARGUMENT);
    bb.tokens[3] = 0;
    bb.lens[0] = 99; /* more than the block table holds: every rank refuses it */
    assert_int_equal(tc_tp_forward(tp, &kv, &bb.b, &logits), TC_ERR_INVALID_ARGUMENT);
    bb.lens[0] = 11;
    assert_int_equal(tc_tp_forward(tp, &kv, &bb.b, &logits), TC_OK);
    /* The all-reduce timing: a time for rows that fit, a clear refusal for rows that do not;
     * the next pass runs as before. */
    double sec = -1;
    assert_int_equal(tc_tp_time_all_reduce(tp, 4, 3, &sec), TC_OK);
    assert_true(sec > 0 && sec < 10);
    assert_int_equal(tc_tp_time_all_reduce(tp, tp->rank[0].m->s.max_tokens + 1, 3, &sec),
                     TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "rows"));
    assert_int_equal(tc_tp_time_all_reduce(tp, 4, 0, &sec), TC_ERR_INVALID_ARGUMENT);
    assert_int_equal(tc_tp_forward(tp, &kv, &bb.b, &logits), TC_OK);
    /* After a rank has failed (as run_all records it) nothing runs on the communicators. */
    snprintf(tp->failed, sizeof tp->failed, "rank 1: a test's failure");
    assert_int_equal(tc_tp_forward(tp, &kv, &bb.b, &logits), TC_ERR_CANCELLED);
    assert_non_null(strstr(tc_last_error(), "earlier failure (rank 1: a test's failure)"));
    assert_int_equal(tc_tp_time_all_reduce(tp, 4, 3, &sec), TC_ERR_CANCELLED);
    tc_tp_kv_deinit(&kv);
    tc_tp_destroy(tp);
    tc_llama_destroy(full);
    for (int r = 0; r < 3; r++)
        tc_backend_destroy(backends[r]);
    tc_backend_destroy(b);
}

/* ---------------------------------------------------------------- the in-process group */

enum { GROUP = 4, ELEMS = 1001 };

typedef struct member {
    tc_comm *comm;
    tc_backend *b;
    bool abort_first; /* rank 3 of the abort test leaves instead */
    tc_status first, second;
} member;

static void *member_main(void *arg)
{
    member *me = arg;
    int r = me->comm->rank;
    tc_tensor t, bf, send, recv;
    assert_int_equal(tc_tensor_init(&t, me->b, TC_DTYPE_F32, TC_SHAPE(ELEMS)), TC_OK);
    assert_int_equal(tc_tensor_init(&bf, me->b, TC_DTYPE_BF16, TC_SHAPE(ELEMS)), TC_OK);
    assert_int_equal(tc_tensor_init(&send, me->b, TC_DTYPE_F32, TC_SHAPE(3)), TC_OK);
    assert_int_equal(tc_tensor_init(&recv, me->b, TC_DTYPE_F32, TC_SHAPE(3 * GROUP)), TC_OK);
    for (int i = 0; i < ELEMS; i++) {
        ((float *)t.data)[i] = (float)(i * (r + 1));
        ((uint16_t *)bf.data)[i] = 0x3f80; /* 1.0 */
    }
    for (int i = 0; i < 3; i++)
        ((float *)send.data)[i] = (float)(10 * r + i);
    if (me->abort_first) {
        tc_comm_abort(me->comm);
        me->first = TC_ERR_CANCELLED;
    } else {
        me->first = tc_comm_all_reduce_sum(me->comm, &t);
    }
    me->second = me->first == TC_OK ? tc_comm_all_reduce_sum(me->comm, &bf) : me->first;
    if (me->second == TC_OK && tc_comm_all_gather(me->comm, &send, &recv) == TC_OK) {
        for (int i = 0; i < ELEMS; i++) {
            assert_true(((float *)t.data)[i] == (float)(i * 10)); /* 1 + 2 + 3 + 4 */
            assert_int_equal(((uint16_t *)bf.data)[i], 0x4080);   /* 4.0 */
        }
        for (int q = 0; q < GROUP; q++)
            for (int i = 0; i < 3; i++)
                assert_true(((float *)recv.data)[3 * q + i] == (float)(10 * q + i));
    }
    tc_tensor_deinit(&t);
    tc_tensor_deinit(&bf);
    tc_tensor_deinit(&send);
    tc_tensor_deinit(&recv);
    return NULL;
}

static void run_group(member *ms)
{
    tc_comm *comms[GROUP];
    assert_int_equal(tc_comm_create_local(GROUP, comms), TC_OK);
    pthread_t th[GROUP];
    for (int r = 0; r < GROUP; r++) {
        ms[r].comm = comms[r];
        assert_int_equal(tc_backend_create_cpu(1, &ms[r].b), TC_OK);
        assert_int_equal(pthread_create(&th[r], NULL, member_main, &ms[r]), 0);
    }
    for (int r = 0; r < GROUP; r++) {
        pthread_join(th[r], NULL);
        tc_comm_destroy(comms[r]);
        tc_backend_destroy(ms[r].b);
    }
}

static void group_sums_and_gathers(void **state)
{
    (void)state;
    member ms[GROUP] = { 0 };
    run_group(ms);
    for (int r = 0; r < GROUP; r++) {
        assert_int_equal(ms[r].first, TC_OK);
        assert_int_equal(ms[r].second, TC_OK);
    }
}

static void abort_releases_the_waiting_ranks(void **state)
{
    (void)state;
    member ms[GROUP] = { 0 };
    ms[3].abort_first = true;
    run_group(ms);
    for (int r = 0; r < GROUP; r++)
        assert_int_equal(ms[r].first, TC_ERR_CANCELLED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(group_sums_and_gathers),
        cmocka_unit_test(abort_releases_the_waiting_ranks),
        cmocka_unit_test(sharded_logits_equal_unsharded),
        cmocka_unit_test(refusals_are_clear_and_recoverable),
        cmocka_unit_test(the_engine_runs_a_sharded_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

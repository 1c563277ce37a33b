/* Tensor parallelism on one GPU: libnccl loads, a one-rank NCCL communicator's all-reduce and
 * all-gather of random f32, f16 and bf16 data return the data bit for bit, and a small
 * random-weight Llama (f32) run through the sharded pass with one rank over NCCL gives the
 * plain pass's greedy tokens and logits (relative error < 1e-5) step by step, its decode steps
 * as CUDA graphs with the collectives in them, and the same
 * tokens through the engine (a batch of prompts, tc_engine_model_tp against
 * tc_engine_model_llama).
 *
 * usage: gpu_tp
 * libnccl.so.2 from the loader's path or THINCUDA_LIBNCCL (tools/gpu-tp-check finds the
 * nvidia-nccl wheel). Exits 77 (skip) without a GPU or without libnccl. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "inference/engine.h"
#include "inference/tp_engine.h"
#include "model/tp.h"
#include "runtime/runtime.h"
#include "tc_nccl.h"

enum { PROMPT = 20, STEPS = 24, BS = 16, BLOCKS = 8, N_ENGINE = 4, ENGINE_GEN = 16 };

static int failures;

static void expect(bool ok, const char *what)
{
    printf("%s: %s\n", ok ? "ok" : "FAIL", what);
    failures += !ok;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* ---------------------------------------------------------------- collectives */

static void collectives(tc_backend *b, tc_comm *c)
{
    static const tc_dtype types[] = { TC_DTYPE_F32, TC_DTYPE_F16, TC_DTYPE_BF16 };
    enum { N = 1 << 20 };
    uint8_t *in = malloc(4 * N), *out = malloc(4 * N);
    if (!in || !out) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        size_t bytes = tc_dtype_bytes(types[t], N);
        for (size_t i = 0; i < bytes; i += 2) {
            /* Finite values of every type: random mantissas, exponents kept small. */
            uint32_t r = rnd();
            in[i] = (uint8_t)r;
            in[i + 1] = (uint8_t)((r >> 8) & 0x3b);
        }
        tc_tensor x, all;
        CHECK(tc_tensor_init(&x, b, types[t], TC_SHAPE(N)));
        CHECK(tc_tensor_init(&all, b, types[t], TC_SHAPE(N)));
        CHECK(tc_tensor_copy_from_host(&x, in, bytes));
        CHECK(tc_comm_all_reduce_sum(c, &x));
        CHECK(tc_comm_all_gather(c, &x, &all));
        CHECK(tc_tensor_copy_to_host(&x, out, bytes));
        char what[128];
        snprintf(what, sizeof what, "one-rank all-reduce of %d random %s values returns them", N,
                 tc_dtype_name(types[t]));
        expect(memcmp(in, out, bytes) == 0, what);
        CHECK(tc_tensor_copy_to_host(&all, out, bytes));
        snprintf(what, sizeof what, "one-rank all-gather of %d random %s values returns them", N,
                 tc_dtype_name(types[t]));
        expect(memcmp(in, out, bytes) == 0, what);
        tc_tensor_deinit(&x);
        tc_tensor_deinit(&all);
    }
    free(in);
    free(out);
}

/* ---------------------------------------------------------------- the model */

static tc_llama_config shape(void)
{
    tc_llama_config c = { .arch = "llama",
                          .n_layers = 3,
                          .dim = 256,
                          .n_heads = 8,
                          .n_kv_heads = 2,
                          .head_dim = 32,
                          .ffn_dim = 704,
                          .vocab = 1000,
                          .max_positions = 512,
                          .norm_eps = 1e-5f };
    c.rope.head_dim = 32;
    c.rope.theta = 10000.0;
    c.rope.interleaved = true;
    return c;
}

/* One sequence's next rows: tokens [len, len + n) at their positions, blocks 0 .. BLOCKS-1. */
typedef struct step {
    int32_t tokens[PROMPT], pos[PROMPT], slots[PROMPT], q_start[2], lens[1], table[BLOCKS];
    tc_llama_batch b;
} step;

static void make_step(step *s, const int32_t *tokens, int32_t len, int32_t n)
{
    for (int32_t i = 0; i < n; i++) {
        s->tokens[i] = tokens[i];
        s->pos[i] = s->slots[i] = len + i; /* block j holds positions 16j .. 16j + 15 */
    }
    s->q_start[0] = 0;
    s->q_start[1] = n;
    s->lens[0] = len + n;
    for (int j = 0; j < BLOCKS; j++)
        s->table[j] = j;
    s->b = (tc_llama_batch){ .n_tokens = n,
                             .n_seqs = 1,
                             .max_blocks = BLOCKS,
                             .tokens = s->tokens,
                             .positions = s->pos,
                             .slots = s->slots,
                             .q_start = s->q_start,
                             .seq_lens = s->lens,
                             .block_table = s->table };
}

static double rel_error(const float *a, const float *b, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i]))
            return INFINITY;
        double d = fabs((double)a[i] - (double)b[i]), m = fabs((double)b[i]);
        num = d > num ? d : num;
        den = m > den ? m : den;
    }
    return num / den;
}

static int32_t argmax(const float *v, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

/* Greedy decoding step by step through both passes, feeding the plain pass's tokens. */
static void passes(tc_llama *m, tc_tp *tp)
{
    int V = m->cfg.vocab;
    tc_kv_cache kv;
    tc_tp_kv tkv;
    CHECK(tc_kv_cache_init(&kv, m, BLOCKS, BS));
    CHECK(tc_tp_kv_init(&tkv, tp, BLOCKS, BS));
    float *want = malloc(sizeof(float) * (size_t)V), *got = malloc(sizeof(float) * (size_t)V);
    int32_t prompt[PROMPT], next;
    for (int i = 0; i < PROMPT; i++)
        prompt[i] = (int32_t)(rnd() % (uint32_t)V);
    double worst = 0;
    int same = 0;
    int32_t len = 0;
    for (int s = 0; s <= STEPS; s++) {
        step st;
        if (s == 0)
            make_step(&st, prompt, 0, PROMPT);
        else
            make_step(&st, &next, len, 1);
        tc_tensor *lp, *lt;
        CHECK(tc_llama_forward(m, &kv, &st.b, &lp));
        CHECK(tc_tensor_copy_to_host(lp, want, sizeof(float) * (size_t)V));
        CHECK(tc_tp_forward(tp, &tkv, &st.b, &lt));
        CHECK(tc_tensor_copy_to_host(lt, got, sizeof(float) * (size_t)V));
        double e = rel_error(got, want, V);
        worst = e > worst ? e : worst;
        len += st.b.n_tokens;
        next = argmax(want, V);
        same += argmax(got, V) == next;
    }
    char what[160];
    snprintf(what, sizeof what,
             "one rank over NCCL: %d of %d greedy tokens equal the plain pass's, logits' relative "
             "error %.2e (< 1e-5)",
             same, STEPS + 1, worst);
    expect(same == STEPS + 1 && worst < 1e-5, what);
    const tc_llama_scratch *ts = &tp->rank[0].m->s;
    snprintf(what, sizeof what,
             "the sharded decode steps ran as the rank's CUDA graphs: %llu captured, %llu launched",
             (unsigned long long)ts->graph_captures, (unsigned long long)ts->graph_launches);
    expect(ts->graph_captures >= 1 && ts->graph_launches >= 1, what);
    free(want);
    free(got);
    tc_tp_kv_deinit(&tkv);
    tc_kv_cache_deinit(&kv);
}

/* ---------------------------------------------------------------- through the engine */

typedef struct out {
    int32_t tok[ENGINE_GEN];
    int n;
    bool done;
} out;

static void on_event(void *user, const tc_engine_event *ev)
{
    out *o = user;
    if (ev->token >= 0 && o->n < ENGINE_GEN)
        o->tok[o->n++] = ev->token;
    if (ev->finish != TC_FINISH_NONE)
        o->done = true;
}

static void run_engine(const tc_engine_model *em, const int32_t (*prompts)[PROMPT], out *o)
{
    tc_engine *e;
    CHECK(tc_engine_create(em, &(tc_engine_options){ 0 }, &e));
    for (int i = 0; i < N_ENGINE; i++) {
        tc_request q = { 0 };
        q.prompt = prompts[i];
        q.n_prompt = PROMPT - 3 * i;
        q.max_tokens = ENGINE_GEN;
        q.sample = tc_sample_defaults();
        q.sample.temperature = 0;
        q.ignore_eos = true;
        q.callback = on_event;
        q.user = &o[i];
        CHECK(tc_engine_submit(e, &q, NULL));
    }
    int32_t active = 1;
    while (active > 0)
        CHECK(tc_engine_step(e, &active));
    tc_engine_destroy(e);
}

static void engines(tc_llama *m, tc_tp *tp)
{
    int32_t prompts[N_ENGINE][PROMPT];
    for (int i = 0; i < N_ENGINE; i++)
        for (int j = 0; j < PROMPT; j++)
            prompts[i][j] = (int32_t)(rnd() % (uint32_t)m->cfg.vocab);
    tc_kv_cache kv;
    tc_tp_kv tkv;
    CHECK(tc_kv_cache_init(&kv, m, 4 * N_ENGINE * BLOCKS, BS));
    CHECK(tc_tp_kv_init(&tkv, tp, 4 * N_ENGINE * BLOCKS, BS));
    out plain[N_ENGINE] = { 0 }, sharded[N_ENGINE] = { 0 };
    tc_engine_model a = tc_engine_model_llama(m, &kv), b = tc_engine_model_tp(tp, &tkv);
    run_engine(&a, (const int32_t(*)[PROMPT])prompts, plain);
    run_engine(&b, (const int32_t(*)[PROMPT])prompts, sharded);
    int same = 0;
    for (int i = 0; i < N_ENGINE; i++)
        same += plain[i].done && sharded[i].done && plain[i].n == ENGINE_GEN &&
                sharded[i].n == ENGINE_GEN &&
                !memcmp(plain[i].tok, sharded[i].tok, sizeof plain[i].tok);
    char what[160];
    snprintf(what, sizeof what,
             "engine, %d prompts batched, %d tokens each: %d of %d outputs equal through "
             "tc_engine_model_tp",
             N_ENGINE, ENGINE_GEN, same, N_ENGINE);
    expect(same == N_ENGINE, what);
    tc_tp_kv_deinit(&tkv);
    tc_kv_cache_deinit(&kv);
}

int main(void)
{
    int gpus = 0;
    if (tc_device_count(&gpus) != TC_OK) {
        printf("skip: no GPU (%s)\n", tc_last_error());
        return 77;
    }
    if (gpus < 1) {
        printf("skip: no GPU (the driver sees none)\n");
        return 77;
    }
    int version = 0;
    if (tc_ncclGetVersion(&version) != TC_OK) {
        printf("skip: no libnccl (%s); set THINCUDA_LIBNCCL to libnccl.so.2\n", tc_last_error());
        return 77;
    }
    printf("NCCL %d.%d.%d, %d GPU(s)\n", version / 10000, version / 100 % 100, version % 100, gpus);
    tc_backend *b, *cpu;
    CHECK(tc_backend_create_cuda(0, 0, &b));
    CHECK(tc_backend_create_cpu(0, &cpu));
    tc_comm *c;
    CHECK(tc_comm_create_nccl(1, &b, &c));
    const char *nvls = getenv("NCCL_NVLS_ENABLE");
    expect(nvls && !strcmp(nvls, "0"), "NCCL_NVLS_ENABLE=0 set before the first communicator");
    collectives(b, c);

    tc_llama_config cfg = shape();
    tc_llama_options host = { .act = TC_DTYPE_F32, .act_set = true };
    tc_llama *full;
    CHECK(tc_llama_random(&cfg, 7, cpu, &host, &full));
    tc_gguf *g;
    CHECK(tc_tp_view(full, &g));
    tc_llama_options lo = { .act = TC_DTYPE_F32,
                            .act_set = true,
                            .max_context = BLOCKS * BS,
                            .max_seqs = N_ENGINE,
                            .max_tokens = 128 };
    tc_llama *m;
    tc_tp *tp;
    CHECK(tc_llama_load(g, &cfg, b, &lo, &m));
    CHECK(tc_tp_load(g, &cfg, 1, &b, &c, &lo, &tp));
    passes(m, tp);
    engines(m, tp);

    tc_tp_destroy(tp);
    tc_llama_destroy(m);
    tc_tp_view_free(g);
    tc_llama_destroy(full);
    tc_comm_destroy(c);
    tc_backend_destroy(cpu);
    tc_backend_destroy(b);
    printf("%s\n", failures ? "tensor-parallel checks FAILED" : "tensor-parallel checks passed");
    return failures ? 1 : 0;
}

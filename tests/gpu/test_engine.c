/* The engine on the GPU: batch invariance (greedy outputs of 64 different prompts run together
 * equal those of each run alone), the same outputs under preemption in a deliberately small
 * cache, and no device memory held after 1,000 requests.
 *
 * usage: gpu_engine MODEL.gguf|--shape NAME [bf16|f32]
 * Exits 77 (skip) without a GPU. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inference/engine.h"
#include "model/gguf.h"
#include "model/llama.h"
#include "runtime/runtime.h"

enum { N = 64, GEN = 48, CTX = 512 };

typedef struct out {
    int32_t tok[GEN];
    int n;
    tc_finish_reason finish;
} out;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int remaining;

static void on_event(void *user, const tc_engine_event *ev)
{
    out *o = user;
    if (ev->token >= 0 && o->n < GEN)
        o->tok[o->n++] = ev->token;
    if (ev->finish != TC_FINISH_NONE) {
        pthread_mutex_lock(&mu);
        o->finish = ev->finish;
        remaining--;
        pthread_cond_signal(&cv);
        pthread_mutex_unlock(&mu);
    }
}

static int32_t prompts[N][256];
static int plen[N];

static void submit(tc_engine *e, int i, out *o, int gen)
{
    tc_request q = { 0 };
    q.prompt = prompts[i];
    q.n_prompt = plen[i];
    q.max_tokens = gen;
    q.sample = tc_sample_defaults();
    q.ignore_eos = true;
    q.callback = on_event;
    q.user = o;
    pthread_mutex_lock(&mu);
    remaining++;
    pthread_mutex_unlock(&mu);
    if (tc_engine_submit(e, &q, NULL) != TC_OK) {
        fprintf(stderr, "submit: %s\n", tc_last_error());
        exit(1);
    }
}

static void wait_all(void)
{
    pthread_mutex_lock(&mu);
    while (remaining > 0)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
}

static tc_engine *start(tc_llama *m, tc_kv_cache *kv, int64_t tokens)
{
    int64_t blocks = tc_engine_kv_blocks(m, tokens, 0.5, 16);
    if (tc_kv_cache_init(kv, m, blocks, 16) != TC_OK) {
        fprintf(stderr, "kv: %s\n", tc_last_error());
        exit(1);
    }
    tc_engine_model em = tc_engine_model_llama(m, kv);
    tc_engine_options eo = { .threaded = true };
    tc_engine *e;
    if (tc_engine_create(&em, &eo, &e) != TC_OK) {
        fprintf(stderr, "engine: %s\n", tc_last_error());
        exit(1);
    }
    return e;
}

/* Requests whose outputs differ from the reference, and the earliest step where one does. */
static int compare(const out *a, const out *ref, int *first)
{
    int bad = 0;
    *first = GEN;
    for (int i = 0; i < N; i++) {
        int j = 0;
        while (j < GEN && j < a[i].n && a[i].tok[j] == ref[i].tok[j])
            j++;
        if (j < GEN || a[i].n != GEN) {
            bad++;
            *first = j < *first ? j : *first;
        }
    }
    return bad;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: gpu_engine MODEL.gguf|--shape NAME [bf16|f32]\n");
        return 2;
    }
    tc_backend *b;
    if (tc_backend_create_cuda(0, 0, &b) != TC_OK) {
        printf("SKIP: no CUDA device (%s)\n", tc_last_error());
        return 77;
    }
    bool shape = !strcmp(argv[1], "--shape");
    const char *dt = argc > (shape ? 3 : 2) ? argv[shape ? 3 : 2] : "bf16";
    tc_llama_options lo = { .act_set = true,
                            .act = strcmp(dt, "f32") ? TC_DTYPE_BF16 : TC_DTYPE_F32,
                            .max_seqs = N,
                            .max_tokens = 2048,
                            .max_context = CTX };
    tc_gguf g = { 0 };
    tc_llama *m = NULL;
    tc_llama_config cfg;
    tc_status st;
    if (shape) {
        st = tc_llama_config_preset(argv[2], &cfg);
        if (st == TC_OK)
            st = tc_llama_random(&cfg, 7, b, &lo, &m);
    } else {
        st = tc_gguf_open(&g, argv[1]);
        if (st == TC_OK)
            st = tc_llama_load_gguf(&g, b, &lo, &m);
    }
    if (st != TC_OK) {
        fprintf(stderr, "load: %s\n", tc_last_error());
        return 1;
    }
    cfg = m->cfg;
    uint64_t rs = 12345;
    for (int i = 0; i < N; i++) {
        plen[i] = 8 + (int)(i * 37 % 200);
        for (int j = 0; j < plen[i]; j++) {
            rs = rs * 6364136223846793005ull + 1442695040888963407ull;
            prompts[i][j] = 1 + (int32_t)((rs >> 33) % (uint64_t)(cfg.vocab - 1));
        }
    }
    static out alone[N], together[N], small[N];
    int failures = 0, first;

    /* 1. Each alone. */
    tc_kv_cache kv;
    tc_engine *e = start(m, &kv, 0);
    for (int i = 0; i < N; i++) {
        submit(e, i, &alone[i], GEN);
        wait_all();
    }
    /* 2. All at once. */
    for (int i = 0; i < N; i++)
        submit(e, i, &together[i], GEN);
    wait_all();
    int bad = compare(together, alone, &first);
    printf("batch invariance (%s): %d of %d requests differ from their run alone%s", dt, bad, N,
           bad ? "" : "\n");
    if (bad)
        printf(" (earliest at token %d)\n", first);
    failures += bad > 0;
    tc_engine_stats es;
    tc_engine_get_stats(e, &es);
    tc_engine_destroy(e);
    tc_kv_cache_deinit(&kv);

    /* 3. A cache of 40 blocks (640 tokens) for 64 requests of up to 256 tokens. */
    e = start(m, &kv, 640);
    for (int i = 0; i < N; i++)
        submit(e, i, &small[i], GEN);
    wait_all();
    tc_engine_get_stats(e, &es);
    bad = compare(small, alone, &first);
    printf("preemption: %llu preemptions in a 640-token cache; %d of %d requests differ%s",
           (unsigned long long)es.preemptions, bad, N, bad ? "" : "\n");
    if (bad)
        printf(" (earliest at token %d)\n", first);
    failures += bad > 0 || es.preemptions == 0;
    tc_engine_destroy(e);
    tc_kv_cache_deinit(&kv);

    /* 4. 1,000 requests, then device memory back where it was. */
    tc_pool_stats p0, p1;
    tc_backend_synchronize(b);
    e = start(m, &kv, 0);
    tc_pool_get_stats(tc_backend_pool(b), &p0);
    static out many[1000];
    for (int round = 0; round < 10; round++) {
        for (int i = 0; i < 100; i++)
            submit(e, (round * 100 + i) % N, &many[round * 100 + i], 1 + (round * 7 + i) % 16);
        wait_all();
    }
    tc_backend_synchronize(b);
    tc_pool_get_stats(tc_backend_pool(b), &p1);
    tc_engine_get_stats(e, &es);
    printf("1,000 requests: device bytes in use %zu before, %zu after; KV blocks in use %d; "
           "requests done %llu\n",
           p0.bytes_in_use, p1.bytes_in_use, es.blocks_used, (unsigned long long)es.requests_done);
    failures += p1.bytes_in_use != p0.bytes_in_use || es.blocks_used != 0;
    tc_engine_destroy(e);
    tc_kv_cache_deinit(&kv);
    printf("graphs: %llu captures, %llu launches\n", (unsigned long long)m->s.graph_captures,
           (unsigned long long)m->s.graph_launches);
    tc_llama_destroy(m);
    if (!shape)
        tc_gguf_close(&g);
    tc_backend_destroy(b);
    printf("%s\n", failures ? "FAIL" : "OK");
    return failures ? 1 : 0;
}

/* What the model-loading fuzz targets share: place a model's tensors on the CPU backend and,
 * where that works, run a two-token prefill and a one-token decode step over a tiny KV cache.
 * Any input must give TC_OK or a clean error; ASan and UBSan catch the rest. */
#ifndef TC_FUZZ_MODEL_H
#define TC_FUZZ_MODEL_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/llama.h"
#include "ops/backend.h"
#include "runtime/error.h"
#include "runtime/log.h"

/* With FUZZ_LOG set: the library's log and each step's outcome, for reading a reproducer. */
static void fuzz_say(const char *step, tc_status st)
{
    if (getenv("FUZZ_LOG"))
        fprintf(stderr, "fuzz: %s: %s\n", step, st == TC_OK ? "ok" : tc_last_error());
}

/* The CPU backend every input runs on (one thread: the fuzzer's own is enough). */
static tc_backend *fuzz_backend(void)
{
    static tc_backend *b;
    if (!b) {
        tc_log_set_level(getenv("FUZZ_LOG") ? TC_LOG_DEBUG : TC_LOG_OFF);
        if (tc_backend_create_cpu(1, &b) != TC_OK)
            abort();
    }
    return b;
}

/* Load src (tensors under GGUF names) with configuration cfg and run three tokens. */
static void fuzz_run_model(const tc_gguf *src, const tc_llama_config *cfg)
{
    tc_llama_options opt = { .max_tokens = 2, .max_seqs = 1, .max_context = 16, .block_size = 16 };
    tc_llama *m;
    tc_status st = tc_llama_load(src, cfg, fuzz_backend(), &opt, &m);
    fuzz_say("load", st);
    if (st != TC_OK)
        return;
    tc_kv_cache kv = { 0 };
    st = tc_kv_cache_init(&kv, m, 1, 16);
    fuzz_say("kv cache", st);
    if (st == TC_OK) {
        int32_t v = cfg->vocab;
        int32_t tokens[2] = { 1 % v, (v - 1) % v }, pos[3] = { 0, 1, 2 }, table[1] = { 0 };
        int32_t q_start[2] = { 0, 2 }, len = 2;
        tc_llama_batch b = { 2, 1, 1, tokens, pos, pos, q_start, &len, table };
        tc_tensor *logits;
        st = tc_llama_forward(m, &kv, &b, &logits);
        fuzz_say("prefill", st);
        if (st == TC_OK) {
            int32_t q1[2] = { 0, 1 }, len1 = 3;
            tc_llama_batch d = { 1, 1, 1, tokens, pos + 2, pos + 2, q1, &len1, table };
            fuzz_say("decode", tc_llama_forward(m, &kv, &d, &logits));
        }
        tc_kv_cache_deinit(&kv);
    }
    tc_llama_destroy(m);
}

#endif /* TC_FUZZ_MODEL_H */

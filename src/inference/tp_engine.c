/* The engine's model side for a tensor-parallel Llama (tp_engine.h). */
#include "inference/tp_engine.h"
#include "runtime/runtime.h"

static tc_status tp_forward(void *ctx, const tc_llama_batch *b, tc_tensor **logits)
{
    tc_tp *tp = ctx;
    return tc_tp_forward(tp, tp->engine_kv, b, logits);
}

/* Each rank's cache copies the same blocks, on its own device. */
static tc_status tp_copy(void *ctx, const int32_t *src, const int32_t *dst, int32_t n)
{
    tc_tp *tp = ctx;
    for (int r = 0; r < tp->n_ranks; r++) {
        tc_backend *b = tp->rank[r].backend;
        if (tc_backend_get_kind(b) == TC_BACKEND_CUDA)
            TC_TRY(tc_context_make_current(tc_backend_context(b)));
        TC_TRY(tc_kv_cache_copy_blocks(&tp->engine_kv->rank[r], src, dst, n));
    }
    return TC_OK;
}

tc_engine_model tc_engine_model_tp(tc_tp *tp, tc_tp_kv *kv)
{
    const tc_llama *m = tp->rank[0].m;
    tp->engine_kv = kv;
    return (tc_engine_model){ tp,
                              tp->plan.cfg.vocab,
                              (int32_t)m->s.max_tokens,
                              (int32_t)m->s.max_seqs,
                              (int32_t)m->s.max_blocks,
                              (int32_t)kv->rank[0].n_blocks,
                              (int32_t)kv->rank[0].block_size,
                              tp_forward,
                              tp_copy,
                              tp->plan.cfg.window };
}

/* The engine's model side for a Llama: its forward pass and KV-cache block copies, and the
 * KV cache's size from the device's free memory. */
#include <unistd.h>

#include "inference/engine.h"
#include "runtime/runtime.h"

static tc_status llama_forward(void *ctx, const tc_llama_batch *b, tc_tensor **logits)
{
    tc_llama *m = ctx;
    return tc_llama_forward(m, m->engine_kv, b, logits);
}

static tc_status llama_copy(void *ctx, const int32_t *src, const int32_t *dst, int32_t n)
{
    tc_llama *m = ctx;
    tc_backend *b = m->backend;
    if (tc_backend_get_kind(b) == TC_BACKEND_CUDA)
        TC_TRY(tc_context_make_current(tc_backend_context(b)));
    return tc_kv_cache_copy_blocks(m->engine_kv, src, dst, n);
}

tc_engine_model tc_engine_model_llama(tc_llama *m, tc_kv_cache *kv)
{
    m->engine_kv = kv;
    return (tc_engine_model){ m,
                              m->cfg.vocab,
                              (int32_t)m->s.max_tokens,
                              (int32_t)m->s.max_seqs,
                              (int32_t)m->s.max_blocks,
                              (int32_t)kv->n_blocks,
                              (int32_t)kv->block_size,
                              llama_forward,
                              llama_copy,
                              m->cfg.window };
}

int64_t tc_engine_kv_blocks(const tc_llama *m, int64_t tokens, double fraction, int64_t block_size)
{
    if (block_size < 1)
        block_size = 16;
    uint64_t per_block = tc_kv_cache_bytes(m, 1, block_size);
    if (tokens > 0)
        return (tokens + block_size - 1) / block_size;
    if (fraction <= 0 || fraction > 1)
        fraction = 0.9;
    tc_backend *b = m->backend;
    if (tc_backend_get_kind(b) == TC_BACKEND_CPU) {
        /* Room for every sequence of a step at the longest context, within a quarter of the
         * machine's memory. */
        int64_t want = m->s.max_seqs * m->s.max_blocks;
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (pages > 0 && page > 0) {
            int64_t cap = (int64_t)((double)pages * (double)page / 4 / (double)per_block);
            if (want > cap)
                want = cap;
        }
        return want > m->s.max_blocks ? want : m->s.max_blocks;
    }
    size_t free_b = 0, total_b = 0;
    if (tc_context_mem_info(tc_backend_context(b), &free_b, &total_b) != TC_OK)
        return m->s.max_blocks;
    tc_pool_stats ps;
    tc_pool_get_stats(tc_backend_pool(b), &ps);
    /* What the process may still take: the fraction of the whole device less what is in
     * use (by us and anyone else), keeping 512 MiB for graphs, cuBLAS and temporaries. */
    double used = (double)(total_b - free_b) - (double)ps.bytes_cached;
    double avail = fraction * (double)total_b - used - 512.0 * 1024 * 1024;
    if (avail > (double)free_b + (double)ps.bytes_cached - 256.0 * 1024 * 1024)
        avail = (double)free_b + (double)ps.bytes_cached - 256.0 * 1024 * 1024;
    int64_t n = avail > 0 ? (int64_t)(avail / (double)per_block) : 0;
    return n;
}

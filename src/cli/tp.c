/* --tensor-parallel N for generate, chat, bench and serve: one GPU per rank, NCCL between them, the
 * shards of the model and of its KV cache (model/tp.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "runtime/runtime.h"

bool tc_cli_tensor_parallel(const char *who, const char *s, int *n)
{
    double v;
    if (!tc_cli_int(who, "--tensor-parallel", s, 1, TC__SHARD_MAX_RANKS, &v))
        return false;
    *n = (int)v;
    return true;
}

bool tc_cli_tp_wanted(int n)
{
    const char *force = getenv("THINCUDA_TP_NCCL");
    return n > 1 || (force && !strcmp(force, "1"));
}

bool tc_cli_tp_open(tc_cli_tp *t, const char *who, int n, tc_backend *b0, const tc_gguf *src,
                    const tc_llama_config *cfg, uint64_t seed, const tc_llama_options *opt)
{
    memset(t, 0, sizeof *t);
    tc__shard_plan plan;
    tc__shard_blocks blocks = tc__shard_blocks_of(src, cfg->n_layers);
    if (tc__shard_plan_init(&plan, cfg, n, &blocks) != TC_OK) {
        fprintf(stderr, "%s: --tensor-parallel %d: %s\n", who, n, tc_last_error());
        return false;
    }
    if (tc_backend_get_kind(b0) != TC_BACKEND_CUDA) {
        fprintf(stderr, "%s: --tensor-parallel %d runs on GPUs only (one per rank)\n", who, n);
        return false;
    }
    int gpus = 0;
    if (tc_device_count(&gpus) != TC_OK || gpus < n) {
        fprintf(stderr, "%s: --tensor-parallel %d needs %d GPUs; %d visible\n", who, n, n, gpus);
        return false;
    }
    t->n = n;
    t->backends[0] = b0;
    for (int r = 1; r < n; r++)
        if (tc_backend_create_cuda(r, 0, &t->backends[r]) != TC_OK) {
            fprintf(stderr, "%s: cannot use GPU %d: %s\n", who, r, tc_last_error());
            return false;
        }
    if (tc_comm_create_nccl(n, t->backends, t->comms) != TC_OK) {
        fprintf(stderr, "%s: --tensor-parallel %d: %s\n", who, n, tc_last_error());
        return false;
    }
    tc_status st = src ? tc_tp_load(src, cfg, n, t->backends, t->comms, opt, &t->tp)
                       : tc_tp_random(cfg, seed, n, t->backends, t->comms, opt, &t->tp);
    if (st != TC_OK) {
        fprintf(stderr, "%s: cannot load the model over %d GPUs: %s\n", who, n, tc_last_error());
        return false;
    }
    return true;
}

bool tc_cli_tp_kv(tc_cli_tp *t, const char *who, int64_t tokens, double fraction, char *line,
                  size_t len)
{
    const tc_llama *m0 = t->tp->rank[0].m;
    int64_t ctx = m0->s.max_blocks * 16, blocks = -1;
    for (int r = 0; r < t->n; r++) {
        int64_t b = tc_engine_kv_blocks(t->tp->rank[r].m, tokens, fraction, 16);
        if (blocks < 0 || b < blocks)
            blocks = b;
    }
    if (blocks < m0->s.max_blocks) {
        fprintf(stderr,
                "%s: room for %lld KV blocks, less than one sequence of %lld tokens; lower "
                "--ctx or raise --kv-tokens / --kv-fraction\n",
                who, (long long)blocks, (long long)ctx);
        return false;
    }
    if (tc_tp_kv_init(&t->kv, t->tp, blocks, 16) != TC_OK) {
        fprintf(stderr, "%s: cannot allocate the KV caches: %s\n", who, tc_last_error());
        return false;
    }
    snprintf(line, len,
             "%lld blocks x 16 = %lld tokens, %lld sequences of %lld tokens at once, "
             "%.2f GiB of %s on each of %d GPUs",
             (long long)blocks, (long long)blocks * 16, (long long)(blocks * 16 / ctx),
             (long long)ctx, (double)tc_kv_cache_bytes(m0, blocks, 16) / (1 << 30),
             tc_dtype_name(m0->kv_dtype), t->n);
    return true;
}

void tc_cli_tp_close(tc_cli_tp *t)
{
    tc_tp_kv_deinit(&t->kv);
    tc_tp_destroy(t->tp);
    for (int r = 0; r < t->n; r++)
        tc_comm_destroy(t->comms[r]);
    for (int r = 1; r < t->n; r++)
        tc_backend_destroy(t->backends[r]);
    memset(t, 0, sizeof *t);
}

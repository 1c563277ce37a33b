/* Teacher-forced logits of a GGUF Llama, for comparison with a reference (tests/gpu/
 * model_vs_transformers.py): the prompt is prefilled in one pass, then each following id
 * is fed one at a time (decode); the f32 logits after the prompt and after each fed id are
 * written to OUT as [steps + 1, vocab]. Also prints the time of each phase.
 * Usage: logits MODEL cpu|cuda f32|bf16|f16[+fp8] PROMPT_LEN IDS_FILE OUT [RANKS]
 * MODEL is a GGUF file or a Hugging Face folder (safetensors); "+fp8" keeps the KV cache in FP8
 * E4M3. RANKS > 1 splits the model over that many CPU backends (model/tp.h: each rank loads its
 * shard from the file, an in-process group stands in for NCCL).
 * IDS_FILE holds int32 ids: the prompt followed by the ids to feed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sys/stat.h>

#include "model/hf.h"
#include "model/llama.h"
#include "model/tp.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int die(const char *what)
{
    fprintf(stderr, "logits: %s: %s\n", what, tc_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 7 && argc != 8) {
        fprintf(stderr, "usage: logits MODEL cpu|cuda f32|bf16|f16[+fp8] PROMPT_LEN IDS_FILE OUT "
                        "[RANKS]\n");
        return 2;
    }
    int ranks = argc == 8 ? atoi(argv[7]) : 1;
    double t0 = now();
    int prompt = atoi(argv[4]);
    FILE *f = fopen(argv[5], "rb");
    if (!f)
        return fprintf(stderr, "logits: cannot open %s\n", argv[5]), 1;
    /* (Long enough for a prompt past Mistral's 4,096-token window.) */
    static int32_t ids[16384];
    int n = (int)fread(ids, sizeof(int32_t), 16384, f);
    fclose(f);
    if (prompt < 1 || prompt > n)
        return fprintf(stderr, "logits: PROMPT_LEN %d outside 1..%d\n", prompt, n), 2;
    tc_gguf g = { 0 };
    tc_hf hf = { 0 };
    tc_llama_config cfg;
    const tc_gguf *src = &g;
    struct stat sb;
    if (stat(argv[1], &sb) == 0 && S_ISDIR(sb.st_mode)) {
        /* (split: whole blocks of at most 64 for the ranks, as thincuda holds them) */
        if (tc_hf_open_packed_ex(&hf, argv[1], ranks > 1 ? 64 : 0) != TC_OK)
            return die("open");
        src = &hf.view;
        cfg = hf.cfg;
    } else if (tc_gguf_open(&g, argv[1]) != TC_OK || tc_llama_config_from_gguf(&g, &cfg) != TC_OK) {
        return die("open");
    }
    tc_backend *b;
    tc_status st =
        !strcmp(argv[2], "cuda") ? tc_backend_create_cuda(0, 0, &b) : tc_backend_create_cpu(0, &b);
    if (st != TC_OK)
        return die("backend");
    tc_llama_options o = { .max_context = n + 16, .max_tokens = prompt };
    o.act_set = true;
    o.act = !strncmp(argv[3], "f32", 3)   ? TC_DTYPE_F32
            : !strncmp(argv[3], "f16", 3) ? TC_DTYPE_F16
                                          : TC_DTYPE_BF16;
    o.kv_fp8 = strstr(argv[3], "+fp8") != NULL;
    if (ranks > 1 && strcmp(argv[2], "cpu") != 0)
        return fprintf(stderr, "logits: RANKS > 1 runs on the CPU only (no NCCL yet)\n"), 2;
    tc_backend *rank_b[TC__SHARD_MAX_RANKS] = { 0 };
    tc_tp *tp = NULL;
    tc_tp_kv tkv = { 0 };
    tc_llama *m;
    tc_kv_cache kv = { 0 };
    if (ranks > 1) {
        for (int r = 0; r < ranks && r < TC__SHARD_MAX_RANKS; r++)
            if (tc_backend_create_cpu(1, &rank_b[r]) != TC_OK)
                return die("backend");
        if (tc_tp_load(src, &cfg, ranks, rank_b, NULL, &o, &tp) != TC_OK)
            return die("load");
        m = tp->rank[0].m; /* its scratch sizes are every rank's */
        if (tc_tp_kv_init(&tkv, tp, m->s.max_blocks, 16) != TC_OK)
            return die("kv cache");
    } else {
        if (tc_llama_load(src, &cfg, b, &o, &m) != TC_OK)
            return die("load");
        if (tc_kv_cache_init(&kv, m, m->s.max_blocks, 16) != TC_OK)
            return die("kv cache");
    }
    int32_t *table = malloc(sizeof(int32_t) * (size_t)m->s.max_blocks),
            *pos = malloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < m->s.max_blocks; i++)
        table[i] = i;
    for (int i = 0; i < n; i++)
        pos[i] = i;
    tc_backend_synchronize(b);
    double t_load = now();
    FILE *out = fopen(argv[6], "wb");
    float *host = malloc(sizeof(float) * (size_t)cfg.vocab);
    double t_prefill = 0, t_decode = 0;
    for (int from = 0, len = prompt; len <= n; from = len, len++) {
        int32_t q_start[2] = { 0, len - from };
        tc_llama_batch batch = { len - from, 1,          (int32_t)m->s.max_blocks,
                                 ids + from, pos + from, pos + from,
                                 q_start,    &len,       table };
        tc_tensor *logits;
        double t = now();
        if ((tp ? tc_tp_forward(tp, &tkv, &batch, &logits)
                : tc_llama_forward(m, &kv, &batch, &logits)) != TC_OK)
            return die("forward");
        if (tc_tensor_copy_to_host(logits, host, sizeof(float) * (size_t)cfg.vocab) != TC_OK)
            return die("copy");
        if (from == 0)
            t_prefill = now() - t;
        else
            t_decode += now() - t;
        fwrite(host, sizeof(float), (size_t)cfg.vocab, out);
    }
    fclose(out);
    int steps = n - prompt;
    printf("logits: %s %s %s: load %.3f s (weights %.1f MiB), prefill %d tokens %.2f ms, decode %d "
           "steps %.3f ms/token (%.1f tokens/s, logits copied back each step)\n",
           argv[1], argv[2], argv[3], t_load - t0, (double)m->weight_bytes / 1048576.0, prompt,
           t_prefill * 1e3, steps, steps ? t_decode * 1e3 / steps : 0.0,
           steps ? steps / t_decode : 0.0);
    free(host);
    free(table);
    free(pos);
    if (tp) {
        tc_tp_kv_deinit(&tkv);
        tc_tp_destroy(tp);
        for (int r = 0; r < ranks && r < TC__SHARD_MAX_RANKS; r++)
            tc_backend_destroy(rank_b[r]);
    } else {
        tc_kv_cache_deinit(&kv);
        tc_llama_destroy(m);
    }
    tc_backend_destroy(b);
    tc_gguf_close(&g);
    tc_hf_close(&hf);
    return 0;
}

/* The thincuda command line: one function per subcommand. */
#ifndef TC_CLI_H
#define TC_CLI_H

/* `thincuda devices [--json]`: every device, its identity and its attributes. */
int tc_cli_devices(int argc, char **argv);

/* `thincuda generate --model PATH --prompt TEXT`: stream a continuation. */
int tc_cli_generate(int argc, char **argv);
/* `thincuda chat --model PATH`: an interactive chat in the model's template. */
int tc_cli_chat(int argc, char **argv);
/* `thincuda info --model PATH`: architecture, size and memory estimate. */
int tc_cli_info(int argc, char **argv);

/* `thincuda serve --model PATH`: the OpenAI-compatible HTTP server. */
int tc_cli_serve(int argc, char **argv);

/* `thincuda bench (--model PATH | --shape NAME)`: the engine's speed. */
int tc_cli_bench(int argc, char **argv);

/* ---------------------------------------------------------------- shared helpers */

#include <stdbool.h>
#include <stdint.h>

#include "inference/engine.h"
#include "model/gguf.h"
#include "model/hf.h"
#include "model/llama.h"
#include "model/tokenizer.h"
#include "ops/ops.h"

/* Parse a number flag in [lo, hi]; false with a sentence ("WHO: FLAG wants ...") otherwise. */
bool tc_cli_num(const char *who, const char *flag, const char *s, double lo, double hi, double *v);
/* The same for a whole number (lo >= 0). */
bool tc_cli_int(const char *who, const char *flag, const char *s, double lo, double hi, double *v);
/* s is one of the NULL-terminated choices; false with a sentence ("WHO: FLAG wants a, b or c,
 * got 's'") otherwise. */
bool tc_cli_choice(const char *who, const char *flag, const char *s, const char *const *choices);
/* --device: cpu, cuda or auto. */
bool tc_cli_device(const char *who, const char *s);
/* --dtype: bf16, f16 or f32. */
bool tc_cli_dtype(const char *who, const char *s);
/* --kv-cache-dtype: "auto" (the activations' dtype) or "fp8" (E4M3); false with a sentence
 * otherwise. */
bool tc_cli_kv_dtype(const char *who, const char *s, bool *fp8);

/* A model's files: a GGUF file or a Hugging Face folder, its Llama configuration and its
 * tokenizer. */
typedef struct tc_cli_model {
    tc_gguf g;
    tc_hf hf;
    bool is_hf;
    const tc_gguf *src; /* the tensors of either */
    tc_llama_config cfg;
    tc_tokenizer *tok;
} tc_cli_model;
/* Open path; without `config` a GGUF's configuration is not read (its tensors may be absent),
 * without `tokenizer` none is built. tensor_parallel: the ranks asked for (1: none), which hold
 * a folder's 4-bit matrices in blocks of at most 64 (tc_hf_open_packed_ex). False after one
 * sentence on stderr; close either way. */
bool tc_cli_model_open(tc_cli_model *f, const char *path, bool config, bool tokenizer,
                       int tensor_parallel, const char *who);
/* The chat template's source the model carries; ptr NULL when none. */
tc_gguf_str tc_cli_model_template(const tc_cli_model *f);
void tc_cli_model_close(tc_cli_model *f);

/* The backend for --device cpu|cuda|auto given how creating the CUDA one went (cuda_status,
 * cuda, cuda_error): the GPU when it answered, else the CPU (with a line saying so) unless
 * cuda was demanded. NULL after a sentence on stderr. */
tc_backend *tc_cli_backend(const char *who, const char *device, int threads, tc_status cuda_status,
                           tc_backend *cuda, const char *cuda_error);
/* The same, creating the CUDA backend here. */
tc_backend *tc_cli_backend_create(const char *who, const char *device, int threads);

/* Size the engine's KV cache for m (`tokens` when nonzero, else `fraction` of free memory; see
 * tc_engine_kv_blocks) and allocate it. *line gets its capacity in words (blocks, tokens,
 * sequences of m's context, GiB, device memory left). False after a sentence on stderr when
 * not one sequence of the context fits or the allocation fails. */
bool tc_cli_kv_cache(const char *who, tc_llama *m, int64_t tokens, double fraction, tc_kv_cache *kv,
                     char *line, size_t len);

/* EOS and every control token but BOS (end of turn): where generation ends. *out is freed with
 * free(); -1 when out of memory. */
int32_t tc_cli_stop_tokens(const tc_tokenizer *t, int32_t **out);

/* ---------------------------------------------------------------- tensor parallelism */

#include "model/tp.h"

/* --tensor-parallel N: a whole number in 1 .. 16. */
bool tc_cli_tensor_parallel(const char *who, const char *s, int *n);
/* Whether the sharded path runs: N > 1, or N = 1 with THINCUDA_TP_NCCL=1 in the environment
 * (one rank through NCCL, to compare with the plain path on one GPU). Otherwise the plain
 * single-backend path runs, NCCL untouched. */
bool tc_cli_tp_wanted(int n);

/* A model over N GPUs: ranks 1 .. N-1's backends (rank 0's is the caller's), one NCCL
 * communicator per rank, the shards and their KV caches. */
typedef struct tc_cli_tp {
    int n;
    tc_backend *backends[TC__SHARD_MAX_RANKS]; /* [0] borrowed */
    tc_comm *comms[TC__SHARD_MAX_RANKS];
    tc_tp *tp;
    tc_tp_kv kv;
} tc_cli_tp;
/* Place the model of cfg from src (random weights from seed when src is NULL) over n ranks,
 * rank r on GPU r, rank 0 on b0 (a CUDA backend on GPU 0). False after a sentence on stderr:
 * not a CUDA backend, fewer GPUs than ranks, the plan's refusal (heads the ranks do not
 * divide), no NCCL, a failed load. Close either way. */
bool tc_cli_tp_open(tc_cli_tp *t, const char *who, int n, tc_backend *b0, const tc_gguf *src,
                    const tc_llama_config *cfg, uint64_t seed, const tc_llama_options *opt);
/* Every rank's KV cache, sized as tc_cli_kv_cache sizes one (rank 0's shard and device
 * decide); *line gets its capacity in words. False after a sentence on stderr. */
bool tc_cli_tp_kv(tc_cli_tp *t, const char *who, int64_t tokens, double fraction, char *line,
                  size_t len);
/* Free all but rank 0's backend; a zeroed t is a no-op. */
void tc_cli_tp_close(tc_cli_tp *t);

#endif /* TC_CLI_H */

/* The inference engine: many sequences at once over one paged KV cache.
 *
 * Each step runs the next token of every running sequence plus chunks of the prompts of
 * waiting ones under a token budget (iteration-level continuous batching with chunked
 * prefill). Sequences are admitted first come, first served as soon as blocks allow; when
 * blocks run out the newest running sequence is preempted (its blocks freed) and later
 * recomputed. Full blocks are remembered by the hash of their contents, so a prompt that
 * shares a prefix with an earlier one reuses its cached blocks; the choices of one request
 * (n > 1) share the prompt's blocks and copy the last one on write.
 *
 * Thread safety: tc_engine_submit, tc_engine_cancel and tc_engine_get_stats may be called from
 * any thread. A threaded engine runs its steps on its own thread and calls each request's
 * callback there; otherwise the caller drives it with tc_engine_step. */
#ifndef TC_ENGINE_H
#define TC_ENGINE_H
#include <stdbool.h>
#include <stdint.h>

#include "model/llama.h"
#include "model/tokenizer.h"
#include "ops/ops.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef struct tc_engine tc_engine;

typedef enum tc_finish_reason {
    TC_FINISH_NONE = 0,      /* still generating */
    TC_FINISH_STOP = 1,      /* a stop token or stop string */
    TC_FINISH_LENGTH = 2,    /* max_tokens, or the context is full */
    TC_FINISH_CANCELLED = 3, /* tc_engine_cancel, or the engine shut down */
    TC_FINISH_ERROR = 4,     /* the model failed; the event's error says why */
} tc_finish_reason;
TC_API const char *tc_finish_reason_name(tc_finish_reason r); /* "stop", "length", ... */

/* What a request's callback receives: one event per generated token, the last one with
 * finish set (a cancellation or error ends with an event without a token). */
typedef struct tc_engine_event {
    uint64_t request;
    int index;        /* the choice, 0 .. n-1 */
    int32_t token;    /* the token generated, -1 when none */
    const char *text; /* text released by this token (with a tokenizer; stop strings held
                         back and cut), text_len bytes, not NUL-terminated */
    size_t text_len;
    tc_finish_reason finish;
    int64_t prompt_tokens;     /* the request's prompt */
    int64_t cached_tokens;     /* of those, found in the prefix cache */
    int64_t completion_tokens; /* generated so far, this token included */
    const char *error;         /* with TC_FINISH_ERROR */
    /* With a token of a request that asked for log-probabilities: the token's natural log
     * probability under the model's distribution (before penalties and temperature), and the
     * n_top most likely tokens with theirs, most likely first. */
    float logprob;
    int n_top;
    const int32_t *top_tokens;
    const float *top_logprobs;
} tc_engine_event;

#define TC_ENGINE_MAX_TOP_LOGPROBS 20

typedef void (*tc_engine_callback)(void *user, const tc_engine_event *ev);

typedef struct tc_request {
    const int32_t *prompt; /* copied by tc_engine_submit */
    int64_t n_prompt;
    int64_t max_tokens; /* tokens to generate at most; 0: up to the context */
    int n;              /* choices, 0 or 1: one */
    tc_sample_params sample;
    const int32_t *stop_tokens; /* besides the engine's (EOS, end of turn) */
    int n_stop_tokens;
    const char *const *stop; /* stop strings (need the engine's tokenizer) */
    int n_stop;
    bool ignore_eos;  /* do not stop at the engine's stop tokens */
    bool logprobs;    /* report each token's log-probability ... */
    int top_logprobs; /* ... and this many alternatives, 0 .. TC_ENGINE_MAX_TOP_LOGPROBS */
    /* OpenAI's logit_bias: bias[i] is added to the logit of token bias_ids[i] before
     * sampling, on every backend; -100 or less bans the token. Log-probabilities are those
     * of the biased logits. Copied by tc_engine_submit. */
    const int32_t *bias_ids;
    const float *bias;
    int n_bias;
    /* Constrained decoding (needs the engine's tokenizer): at every step only tokens that
     * can continue a document of this grammar are sampled (inference/grammar.h). The engine
     * takes its own reference. NULL: none. */
    struct tc_grammar *grammar;
    tc_engine_callback callback;
    void *user;
} tc_request;

/* What the engine runs: a forward pass over a batch (tc_llama_forward's contract) and a copy
 * of whole KV blocks. tc_engine_model_llama makes one from a model and its cache. */
typedef struct tc_engine_model {
    void *ctx;
    int32_t vocab;
    int32_t max_tokens, max_seqs; /* per forward pass */
    int32_t max_blocks;           /* block-table width: a sequence's longest context in blocks */
    int32_t n_blocks, block_size; /* the KV cache */
    tc_status (*forward)(void *ctx, const tc_llama_batch *b, tc_tensor **logits);
    /* Copy blocks src[i] -> dst[i] of every layer, in the order of the forward passes. */
    tc_status (*copy_blocks)(void *ctx, const int32_t *src, const int32_t *dst, int32_t n);
    /* The model's sliding window (0: none): a token attends to the last `window` positions up
     * to its own, so a sequence's blocks wholly before its next token's window are released
     * (their table entries are then never read) and a sequence needs blocks for about its
     * window and a step's tokens, however long it grows. */
    int32_t window;
} tc_engine_model;

typedef struct tc_engine_options {
    int32_t max_running;     /* sequences at once; 0: the model's max_seqs */
    int32_t max_step_tokens; /* tokens per step; 0: the model's max_tokens */
    int32_t max_queue;       /* requests waiting at most; 0: 1024 */
    bool no_prefix_cache;
    bool threaded; /* run steps on the engine's own thread */
    /* Optional: text for events, and stop strings. */
    const tc_tokenizer *tok;
    bool show_special; /* control tokens in the text */
    /* Tokens that end a sequence (EOS, end of turn); copied. */
    const int32_t *stop_tokens;
    int32_t n_stop_tokens;
} tc_engine_options;

typedef struct tc_engine_stats {
    int32_t running, waiting; /* sequences */
    int32_t blocks_total, blocks_used, blocks_cached, block_size;
    uint64_t steps, preemptions;
    uint64_t prompt_tokens, cached_prompt_tokens, generated_tokens;
    uint64_t prefix_lookups, prefix_hits; /* blocks */
    uint64_t requests_done;
    /* Steps that ran prefill rows (prompt chunks, or a preempted sequence's recomputation),
     * with or without decodes, and the wall time of those and of the decode-only steps:
     * scheduling, the forward pass and sampling. */
    uint64_t prefill_steps;
    double prefill_step_seconds, decode_step_seconds;
} tc_engine_stats;

/* Create an engine over `model` (copied; the caller keeps what it points to alive). */
TC_API tc_status tc_engine_create(const tc_engine_model *model, const tc_engine_options *opt,
                                  tc_engine **out);
/* Stop (a threaded engine finishes its step), end every unfinished request with
 * TC_FINISH_CANCELLED, free. NULL is a no-op. */
TC_API void tc_engine_destroy(tc_engine *e);
/* Queue a request; *id names it. TC_ERR_LIMIT when the queue is full, TC_ERR_INVALID_ARGUMENT
 * (with a message) for a bad request: an empty prompt, a token outside the vocabulary, more
 * tokens than the context or the cache can hold, stop strings without a tokenizer. */
TC_API tc_status tc_engine_submit(tc_engine *e, const tc_request *r, uint64_t *id);
/* End request `id`: its sequences' blocks are freed before the next step and its callback
 * gets TC_FINISH_CANCELLED. TC_ERR_NOT_FOUND when it has already finished. */
TC_API tc_status tc_engine_cancel(tc_engine *e, uint64_t id);
/* Run one step (unthreaded engines): admit, schedule, forward, sample, call back. *active
 * (optional) is the number of requests not finished afterwards. */
TC_API tc_status tc_engine_step(tc_engine *e, int32_t *active);
TC_API void tc_engine_get_stats(tc_engine *e, tc_engine_stats *s);
/* Check the engine's invariants (unthreaded engines, between steps): every block held as often
 * as sequences hold it, free + used = total, tables cover the cached tokens. False with a
 * sentence in msg when one fails. */
TC_API bool tc_engine_check(tc_engine *e, char *msg, size_t len);

/* The model side for a Llama: forward passes with CUDA graphs for decode steps where the
 * backend is CUDA, and block copies. kv must have been made for m. */
TC_API tc_engine_model tc_engine_model_llama(tc_llama *m, tc_kv_cache *kv);

/* Choose the KV cache's size: `tokens` when nonzero; else `fraction` (0: 0.9) of the free
 * device memory after the weights (on the CPU: room for max_seqs sequences of the model's
 * context). Rounded to whole blocks. */
TC_API int64_t tc_engine_kv_blocks(const tc_llama *m, int64_t tokens, double fraction,
                                   int64_t block_size);

#ifdef __cplusplus
}
#endif
#endif /* TC_ENGINE_H */

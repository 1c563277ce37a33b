/* The Llama family (Llama 2/3, SmolLM2, TinyLlama, and the architectures that are Llama plus
 * a little: Mistral's sliding-window attention, Qwen2's q/k/v biases): configuration, weights
 * on a backend, a paged KV cache and the forward pass over a batch of sequences. */
#ifndef TC_LLAMA_H
#define TC_LLAMA_H
#include "model/gguf.h"
#include "ops/ops.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef struct tc_llama_config {
    char arch[32]; /* "llama", "mistral" or "qwen2" */
    char name[96];
    /* head_dim is the configuration's own (config.json's head_dim, GGUF's key_length), which
     * may differ from dim / n_heads (Mistral-Nemo, Qwen3). */
    int n_layers, dim, n_heads, n_kv_heads, head_dim, ffn_dim, vocab;
    int max_positions; /* context length the model was trained for */
    float norm_eps;
    tc_rope_config rope;
    bool tied_embeddings; /* the output projection is the token embedding */
    bool qkv_bias;        /* q, k and v projections add a bias (Qwen2) */
    /* Sliding-window attention (Mistral): a token attends to the last `window` positions up to
     * its own; 0: to every earlier one. */
    int window;
} tc_llama_config;

typedef struct tc_llama_layer {
    tc_tensor attn_norm; /* [dim] */
    tc_tensor wq;        /* [n_heads * head_dim, dim] */
    tc_tensor wk, wv;    /* [n_kv_heads * head_dim, dim] */
    tc_tensor wo;        /* [dim, n_heads * head_dim] */
    /* With qkv_bias: the biases of q, k and v, one vector with bq, bk and bv views of its
     * parts, so that a fused q/k/v product adds them in one op. */
    tc_tensor bqkv;     /* [(n_heads + 2 n_kv_heads) * head_dim] */
    tc_tensor bq;       /* [n_heads * head_dim] */
    tc_tensor bk, bv;   /* [n_kv_heads * head_dim] */
    tc_tensor ffn_norm; /* [dim] */
    tc_tensor w_gate;   /* [ffn_dim, dim] */
    tc_tensor w_up;     /* [ffn_dim, dim] */
    tc_tensor w_down;   /* [dim, ffn_dim] */
    /* On CUDA, when the parts share a dtype, wq, wk, wv are row blocks of one matrix and
     * w_gate, w_up of another, so that each pair of products is one (unset otherwise). */
    tc_tensor wqkv; /* [(n_heads + 2 n_kv_heads) * head_dim, dim] */
    tc_tensor w_gu; /* [2 ffn_dim, dim] */
    /* Where wv's dtype differs from the others' (Q4_K_M's Q6_K layers) and there are no
     * biases: wq and wk as row blocks of this one. */
    tc_tensor wqk; /* [(n_heads + n_kv_heads) * head_dim, dim] */
    /* wqkv's columns hold attn_norm's weight and w_gu's ffn_norm's (tc_scale_columns), so a
     * decode step normalises inside those products (tc_linear_opts.rms_norm) and longer
     * passes norm without a weight. */
    bool norms_folded;
    /* GPTQ act-order matrices hold their inputs sorted by group: the order (I32 [k]) in which
     * each one's product takes x's columns (data NULL: x as it is). Fused matrices (wqkv, wqk,
     * w_gu) are made only of parts with the same order, their first part's. */
    tc_tensor in_q, in_k, in_v, in_o, in_gate, in_up, in_down;
    /* On CUDA, attn_norm in in_q's order where wqkv has one, ffn_norm in in_gate's where w_gu
     * has one (the fused products normalise x gathered in their order themselves). */
    tc_tensor attn_norm_in, ffn_norm_in;
} tc_llama_layer;

/* Scratch of one forward pass, sized for max_tokens rows and max_seqs sequences. */
typedef struct tc_llama_scratch {
    int64_t max_tokens, max_seqs, max_blocks;
    tc_tensor x;                   /* [T, dim] residual stream */
    tc_tensor h;                   /* [T, dim] normalised */
    tc_tensor q, att;              /* [T, n_heads * head_dim] */
    tc_tensor k, v;                /* [T, n_kv_heads * head_dim] */
    tc_tensor o;                   /* [T, dim] projection outputs */
    tc_tensor gate, up;            /* [T, ffn_dim] */
    tc_tensor qkv, gu;             /* [T, ...] outputs of the fused products (when fused) */
    tc_tensor xp;                  /* [T, widest input]: x's columns in an act-order matrix's
                                      order (when a layer has one) */
    tc_tensor last;                /* [S, dim] each sequence's last row (activation dtype) */
    tc_tensor lastf;               /* [S, dim] f32 */
    tc_tensor logits;              /* [S, vocab] f32 */
    tc_tensor logits_rows;         /* view: the rows of the last pass */
    tc_tensor ids, pos, slots;     /* i32 [T] */
    tc_tensor q_start;             /* i32 [S + 1] */
    tc_tensor seq_lens, last_rows; /* i32 [S] */
    tc_tensor q_start2;            /* i32 [S + 1] q_start of the sequences after the decodes */
    tc_tensor block_table;         /* i32 [S, max_blocks] */
    tc_tensor index;               /* the buffer the index arrays above are views of */
    int64_t index_len;
    int32_t *host; /* [index_len] staging of the index arrays (pinned on CUDA) */
    /* On CUDA: recorded after the index arrays' copy from host, which runs without a wait;
     * the next pass rewrites host once it has fired. */
    struct tc_event *host_sent;
    /* CUDA graphs of decode steps, one per batch-size bucket (CUgraphExec, NULL until the
     * bucket is first used), with the op-workspace generation and KV cache each was captured
     * over. */
    struct tc_llama_graph {
        void *exec;
        uint64_t generation;
        const void *kv; /* the KV cache it was captured over */
    } * graphs;
    int32_t n_graphs;
    bool no_graphs;
    uint64_t graph_launches, graph_captures;
    /* The batch uploaded last: its bucket's graph runs it (a decode step on CUDA, padded to
     * staged_rows sequences), or -1: op by op. */
    int32_t staged;
    int64_t staged_rows;
} tc_llama_scratch;

typedef struct tc_llama {
    tc_llama_config cfg;
    tc_backend *backend;
    tc_dtype act;           /* activation dtype: f32 on the CPU, bf16 on CUDA by default */
    tc_dtype kv_dtype;      /* the KV cache's: act, or f8e4m3 (tc_llama_options.kv_fp8) */
    tc_tensor tok_embd;     /* [vocab, dim] */
    tc_tensor out_norm;     /* [dim] */
    tc_tensor lm_head;      /* [vocab, dim]; a view of tok_embd when tied */
    tc_llama_layer *layers; /* [n_layers] */
    uint64_t n_params;
    uint64_t weight_bytes; /* bytes of the weights as held on the backend */
    tc_llama_scratch s;
    struct tc_kv_cache *engine_kv; /* the cache an engine runs this model over */
} tc_llama;

/* Options of a load; zero means the default. */
typedef struct tc_llama_options {
    tc_dtype act;        /* 0 (f32) on the CPU; bf16 on CUDA unless TC_DTYPE_F32/F16 is set */
    bool act_set;        /* act was chosen by the caller */
    int64_t max_tokens;  /* rows per forward pass (prefill chunk); default 512 */
    int64_t max_seqs;    /* sequences per forward pass; default 1 */
    int64_t max_context; /* longest sequence; default the model's, capped at 8192 */
    int64_t block_size;  /* KV cache block, default 16 */
    bool no_graphs;      /* run decode steps op by op instead of as CUDA graphs */
    /* Hold the KV cache as FP8 E4M3 instead of the activation dtype: half the bytes of a 16-bit
     * cache (twice the tokens in the same memory, half the reads of each decode step), keys
     * and values rounded to 3 mantissa bits. On CUDA it needs f16/bf16 activations. */
    bool kv_fp8;
    /* Called after each tensor is placed, with bytes done and in all. */
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
} tc_llama_options;

/* Read the configuration of a GGUF Llama, Mistral or Qwen2 without loading weights. Another
 * architecture is TC_ERR_UNSUPPORTED "unsupported architecture X"; missing keys are
 * TC_ERR_PARSE. */
TC_API tc_status tc_llama_config_from_gguf(const tc_gguf *g, tc_llama_config *cfg);
/* Place the weights of an open GGUF file on backend b (types the kernels read are used as
 * they are, the rest dequantised), check every tensor's presence and shape, and allocate the
 * scratch. g must stay open while the model lives (CPU weights may point into it). */
TC_API tc_status tc_llama_load_gguf(const tc_gguf *g, tc_backend *b, const tc_llama_options *opt,
                                    tc_llama **out);
/* The same from tensors named as in GGUF (a safetensors folder's view, see model/hf.h) with a
 * configuration read elsewhere. */
TC_API tc_status tc_llama_load(const tc_gguf *g, const tc_llama_config *cfg, tc_backend *b,
                               const tc_llama_options *opt, tc_llama **out);
/* A model of configuration cfg with random weights (tc_fill_random from seed) in the
 * activation dtype: for benchmarks, without a download. */
TC_API tc_status tc_llama_random(const tc_llama_config *cfg, uint64_t seed, tc_backend *b,
                                 const tc_llama_options *opt, tc_llama **out);
/* The configuration of a named shape: "smollm2-135m", "llama3.2-1b", "llama2-7b",
 * "qwen2.5-1.5b" (q/k/v biases), "mistral-7b" (v0.1: a 4,096-token window), "llama3.1-70b"
 * (141 GB of bf16 weights: for tensor parallelism). */
TC_API tc_status tc_llama_config_preset(const char *name, tc_llama_config *cfg);
/* Bytes the weights of g take once placed on a backend (cpu or not) with activations act. */
TC_API uint64_t tc_llama_weight_bytes(const tc_gguf *g, bool cpu, tc_dtype act);
/* Free the model; NULL is a no-op. */
TC_API void tc_llama_destroy(tc_llama *m);

/* A paged KV cache for every layer: k[l], v[l] [n_blocks, block_size, n_kv_heads, head_dim]. */
typedef struct tc_kv_cache {
    int n_layers;
    int64_t n_blocks, block_size;
    tc_tensor *k, *v; /* views of the arena */
    tc_tensor arena;  /* one allocation for every layer */
    /* An FP8 cache's scales (tc_attention_opts): k_scale[l], v_scale[l] f32 [n_kv_heads], views
     * of `scales`. The first forward pass over the cache sets them from its own keys and
     * values (tc_kv_scales: powers of two that leave the batch 14 times below E4M3's largest
     * value), as vLLM's dynamic k_scale and v_scale; `scaled` is then true and they stay. */
    tc_tensor *k_scale, *v_scale;
    tc_tensor scales;
    bool scaled;
} tc_kv_cache;
TC_API tc_status tc_kv_cache_init(tc_kv_cache *kv, const tc_llama *m, int64_t n_blocks,
                                  int64_t block_size);
TC_API void tc_kv_cache_deinit(tc_kv_cache *kv);
/* Copy whole blocks src[i] -> dst[i] of every layer (copy on write), in stream order. */
TC_API tc_status tc_kv_cache_copy_blocks(tc_kv_cache *kv, const int32_t *src, const int32_t *dst,
                                         int32_t n);
/* Device bytes of a cache of n_blocks blocks. */
TC_API uint64_t tc_kv_cache_bytes(const tc_llama *m, int64_t n_blocks, int64_t block_size);

/* One forward pass: n_tokens new tokens of n_seqs sequences (host arrays). Sequence s owns
 * rows q_start[s] .. q_start[s+1]-1, has seq_lens[s] tokens cached once these are written,
 * and its blocks are block_table[s * max_blocks ...]; token i has position positions[i] and
 * is written to cache slot slots[i] (block * block_size + offset). */
typedef struct tc_llama_batch {
    int32_t n_tokens, n_seqs, max_blocks;
    const int32_t *tokens, *positions, *slots; /* [n_tokens] */
    const int32_t *q_start;                    /* [n_seqs + 1] */
    const int32_t *seq_lens;                   /* [n_seqs] */
    const int32_t *block_table;                /* [n_seqs, max_blocks] */
} tc_llama_batch;
/* Run the batch and point *logits at the f32 logits [n_seqs, vocab] of each sequence's last
 * row (valid until the next call; on the model's backend). */
TC_API tc_status tc_llama_forward(tc_llama *m, tc_kv_cache *kv, const tc_llama_batch *batch,
                                  tc_tensor **logits);

#ifdef __cplusplus
}
#endif
#endif /* TC_LLAMA_H */

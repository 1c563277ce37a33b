/* The operators of a Llama forward pass. Each has one entry point that checks shapes and
 * dtypes (TC_ERR_INVALID_ARGUMENT with a sentence in tc_last_error() on a mismatch) and runs
 * on the backend its tensors live on: the plain-C reference on the CPU, kernels on CUDA (in
 * the backend's stream order, without waiting). Tensors are row-major; "rows" may be spaced
 * by stride[0] (views of a wider tensor) where an op says so, the rest must be contiguous. */
#ifndef TC_OPS_H
#define TC_OPS_H
#include "ops/backend.h"
#include "ops/tensor.h"
#ifdef __cplusplus
extern "C" {
#endif

struct tc_attention_opts; /* options of the attention ops, below */

/* Matrix products of at most this many rows use the matrix-vector (decode) kernel on CUDA. */
#define TC_MATVEC_MAX_ROWS 8

/* out[i] = table[ids[i]]. out [n, dim] f32/f16/bf16; table [vocab, dim] f32/f16/bf16/q8_0/
 * q4_0; ids [n] i32. An id outside [0, vocab) is an error on the CPU; on CUDA (where ids are
 * not read by the host) its row is filled with NaN so that it cannot pass unnoticed. */
TC_API tc_status tc_embedding(tc_tensor *out, const tc_tensor *table, const tc_tensor *ids);
/* out [m, n] = x [m, k] with its columns in idx's order: out[r, i] = x[r, idx[i]] (idx I32 [n],
 * each in [0, k); out and x of one float dtype, dense rows, not overlapping). The inputs of a
 * GPTQ act-order matrix, held in group order, are x's columns gathered so. On the CPU an index
 * outside x is an error; on CUDA its column is NaN. */
TC_API tc_status tc_gather_columns(tc_tensor *out, const tc_tensor *x, const tc_tensor *idx);

/* RMSNorm (Zhang & Sennrich, 2019), fused with the residual add of a transformer block: with
 * `residual`, first residual += x, then out = residual / sqrt(mean(residual^2) + eps) * weight;
 * without it, out is the norm of x. out, x, residual [n, dim] and weight [dim] share one
 * dtype (f32/f16/bf16); a NULL weight is all ones (a weight folded into the next product:
 * tc_scale_columns). Rows may be strided; out may alias x. Statistics in f32. */
TC_API tc_status tc_rmsnorm(tc_tensor *out, tc_tensor *residual, const tc_tensor *x,
                            const tc_tensor *weight, float eps);

/* Rotary position embedding (RoFormer, Su et al. 2021) with Llama 3's frequency scaling. */
typedef enum tc_rope_scaling { TC_ROPE_PLAIN = 0, TC_ROPE_LLAMA3 = 1 } tc_rope_scaling;
typedef struct tc_rope_config {
    int head_dim;     /* rotated dimensions: the whole head */
    double theta;     /* base, rope_theta (10000, 500000) */
    bool interleaved; /* rotate pairs (2i, 2i+1) as GGUF/Meta weights expect, instead of
                         (i, i + head_dim/2) as Hugging Face's rotate_half does */
    tc_rope_scaling scaling;
    /* Llama 3 rope_scaling: factor, low_freq_factor, high_freq_factor and
     * original_max_position_embeddings (Llama 3.1: 8, 1, 4, 8192). */
    double factor, low_freq_factor, high_freq_factor;
    double original_max_position;
} tc_rope_config;
/* The rotation frequency of each pair i < head_dim/2: theta^(-2i/head_dim), then scaled. */
TC_API void tc_rope_frequencies(const tc_rope_config *cfg, double *inv_freq);
/* Rotate q [n, n_heads, head_dim] and k [n, n_kv_heads, head_dim] (NULL: none) in place by
 * positions pos [n] (i32, >= 0). q and k share a dtype (f32/f16/bf16); rows may be strided. */
TC_API tc_status tc_rope(tc_tensor *q, tc_tensor *k, const tc_tensor *pos,
                         const tc_rope_config *cfg);
/* tc_rope(q, k, pos, cfg) and then tc_attention_store(k_cache, v_cache, k, v, slots), in one
 * kernel on CUDA (the step of a layer between its q/k/v product and its attention). */
TC_API tc_status tc_rope_store(tc_tensor *q, tc_tensor *k, const tc_tensor *v, const tc_tensor *pos,
                               const tc_rope_config *cfg, tc_tensor *k_cache, tc_tensor *v_cache,
                               const tc_tensor *slots);
/* tc_rope_store into FP8 caches with kv_opts' k_scale and v_scale (see tc_attention_store_ex). */
TC_API tc_status tc_rope_store_ex(tc_tensor *q, tc_tensor *k, const tc_tensor *v,
                                  const tc_tensor *pos, const tc_rope_config *cfg,
                                  tc_tensor *k_cache, tc_tensor *v_cache, const tc_tensor *slots,
                                  const struct tc_attention_opts *kv_opts);

/* out = x w^T: a linear layer with weights stored [out_features, in_features]. out [m, n] and
 * x [m, k] share a dtype (f32/f16/bf16); w [n, k] is f32/f16/bf16/q8_0/q4_0. Accumulates in
 * f32. On CUDA: m <= TC_MATVEC_MAX_ROWS runs the matrix-vector kernel; larger m runs cuBLAS
 * (GemmEx, f32 compute) when w has x's dtype and cuBLAS loads, else our own kernel (see
 * tc_backend_set_gemm). Rows of x and out may be strided. */
TC_API tc_status tc_matmul(tc_tensor *out, const tc_tensor *x, const tc_tensor *w);

/* What tc_linear fuses after the product. Zero-initialised: a plain product. */
typedef struct tc_linear_opts {
    /* w is [2n, k], gate rows then up rows: out = silu(x w_gate^T) * (x w_up^T). */
    bool swiglu;
    /* out += the result (a residual add) instead of out = the result. */
    bool accumulate;
    /* Each row of x is RMS-normalised first, x / sqrt(mean(x^2) + norm_eps), times norm_weight
     * [k] (f32, f16 or bf16) where it is given. Float weights take the norm's weight folded
     * into their columns beforehand (tc_scale_columns) and no norm_weight: their one-row kernel
     * then normalises x itself. Quantised weights cannot fold it: one row of bf16 x on CUDA
     * normalises in the product, times a norm_weight of bf16; other products normalise into op
     * scratch first. */
    bool rms_norm;
    float norm_eps;
    const tc_tensor *norm_weight;
} tc_linear_opts;

/* The fused linear layer of a decode step: out [m, n] = x [m, k] w^T with the options above,
 * so that a transformer block's RMSNorms, SwiGLU and residual adds cost no kernels of their
 * own. Dtypes as tc_matmul. On CUDA it runs the matrix-vector kernel, which reads the weights
 * once per TC_MATVEC_MAX_ROWS rows of x: meant for decode steps. out must not overlap x. (The
 * norm's weight is folded into w rather than read beside x: a first fused RMSNorm loaded it in
 * the kernel's inner loop, and the registers that took cost more resident warps than the
 * separate norm kernel cost.) */
TC_API tc_status tc_linear(tc_tensor *out, const tc_tensor *x, const tc_tensor *w,
                           const tc_linear_opts *opts);
/* tc_linear(out_a, x, w_a, opts) and tc_linear(out_b, x, w_b, opts): two products of the same x
 * (a layer's q and k beside its v where their weights differ in type, as in Q4_K_M files). On
 * CUDA one row of bf16 x over a pair of block types with a kernel for it (Q4_K or Q5_K, then Q6_K),
 * under no options but the RMSNorm, runs both in one launch. */
TC_API tc_status tc_linear_pair(tc_tensor *out_a, tc_tensor *out_b, const tc_tensor *x,
                                const tc_tensor *w_a, const tc_tensor *w_b,
                                const tc_linear_opts *opts);

/* A layer's q/k/v step: tc_linear(out, x, w, opts), then tc_rope_store(q, k, v, pos, rope,
 * k_cache, v_cache, slots) on out's three parts: out [m, (n_heads + 2 n_kv_heads) head_dim]
 * holds q [m, n_heads, head_dim], then k and v [m, n_kv_heads, head_dim] (n_kv_heads and
 * head_dim are the caches'). opts may not ask for swiglu or accumulate. On CUDA, one row of x
 * over weights of x's dtype in 16-byte rows runs as one kernel: each warp of the product
 * rotates the two rows it computes and writes them to the cache (a single sequence's decode
 * step then has no rotary kernel). */
TC_API tc_status tc_linear_rope_store(tc_tensor *out, const tc_tensor *x, const tc_tensor *w,
                                      const tc_linear_opts *opts, const tc_tensor *pos,
                                      const tc_rope_config *rope, tc_tensor *k_cache,
                                      tc_tensor *v_cache, const tc_tensor *slots);
/* tc_linear_rope_store into FP8 caches with kv_opts' k_scale and v_scale. */
TC_API tc_status tc_linear_rope_store_ex(tc_tensor *out, const tc_tensor *x, const tc_tensor *w,
                                         const tc_linear_opts *opts, const tc_tensor *pos,
                                         const tc_rope_config *rope, tc_tensor *k_cache,
                                         tc_tensor *v_cache, const tc_tensor *slots,
                                         const struct tc_attention_opts *kv_opts);

/* w [n, k] *= s [k] column by column, in place, rounded to w's dtype (f32, f16 or bf16; s has
 * w's dtype): folds an RMSNorm's weight into the product after it (tc_linear_opts.rms_norm).
 * Rows of w may be strided. */
TC_API tc_status tc_scale_columns(tc_tensor *w, const tc_tensor *s);

/* out = x converted to out's dtype (f32, f16 or bf16; round to nearest even), both [n, d];
 * rows may be strided. */
TC_API tc_status tc_convert(tc_tensor *out, const tc_tensor *x);

/* Fill t (f32/f16/bf16, contiguous) with offset + scale * (2u - 1), u uniform in [0, 1) from
 * a hash of (seed, element index): the same numbers on every backend (benchmark weights). */
TC_API tc_status tc_fill_random(tc_tensor *t, uint64_t seed, float offset, float scale);

/* x[i, :] += bias for every row i: the bias of a linear layer (Qwen2's q, k and v
 * projections), added after the product. x [n, d] (f32/f16/bf16; rows may be strided) and bias
 * [d] share a dtype; the sum is rounded once to that dtype. */
TC_API tc_status tc_add_bias(tc_tensor *x, const tc_tensor *bias);

/* SwiGLU (Shazeer, 2020): out = silu(gate) * up, elementwise. out, gate, up [n, f] share a
 * dtype (f32/f16/bf16); rows may be strided (gate and up may be halves of one product). */
TC_API tc_status tc_swiglu(tc_tensor *out, const tc_tensor *gate, const tc_tensor *up);

/* Softmax over the last dimension of x [n, d] into out (same shape and dtype, f32/f16/bf16;
 * may alias x). */
TC_API tc_status tc_softmax(tc_tensor *out, const tc_tensor *x);

/* Attention over a paged KV cache. Each layer's cache is k_cache and v_cache [n_blocks,
 * block_size, n_kv_heads, head_dim]; sequence s keeps its token t in block
 * block_table[s, t / block_size] at offset t % block_size. block_table [n_seqs, max_blocks]
 * and seq_lens [n_seqs] (tokens cached, including the ones being computed) are i32. Heads are
 * grouped (GQA): query head h reads kv head h / (n_heads / n_kv_heads). q and out share a
 * dtype (f32/f16/bf16); the caches hold it too, or f8e4m3 (half the bytes of a 16-bit cache;
 * values rounded to 3 mantissa bits and saturated at +-448, optionally scaled per kv head:
 * tc_attention_opts; on CUDA only with f16/bf16 activations); softmax in f32 with `scale`
 * (usually 1/sqrt(head_dim)). On CUDA head_dim is any even number from 16 to 256 (64 and 128
 * have kernels of their own, the others share one sized for 256 that takes bf16 or f32
 * activations: f16 ones run 64 and 128 only). */

/* Write k, v [n, n_kv_heads, head_dim] into cache slots[i] = block * block_size + offset
 * (i32 [n]; a negative slot skips the token), converted to the caches' dtype. */
TC_API tc_status tc_attention_store(tc_tensor *k_cache, tc_tensor *v_cache, const tc_tensor *k,
                                    const tc_tensor *v, const tc_tensor *slots);
/* Decode: one query per sequence, q and out [n_seqs, n_heads, head_dim], attending to all
 * seq_lens[s] cached tokens. */
TC_API tc_status tc_attention_decode(tc_tensor *out, const tc_tensor *q, const tc_tensor *k_cache,
                                     const tc_tensor *v_cache, const tc_tensor *block_table,
                                     const tc_tensor *seq_lens, float scale);
/* Options of the attention ops: what a decode may read early, which cached positions a query
 * attends to, an FP8 cache's scales (zero-initialise, then set fresh_rows: its default is -1). */
typedef struct tc_attention_opts {
    /* FP8 caches: each kv head's scale of keys and of values (f32 [n_kv_heads], contiguous, on
     * the caches' backend): the cache holds x times the reciprocal of scale (x / scale,
     * exactly, for powers of two such as tc_kv_scales gives) rounded to E4M3 (saturating at
     * +-448) and is read back as code * scale. NULL: 1. Ignored by caches of another dtype. */
    const tc_tensor *k_scale, *v_scale;
    /* How many of each sequence's newest cached rows the kernel launched just before this op on
     * its stream may have written; it must not have written the older rows, seq_lens or
     * block_table. On CUDA 9.0+ (programmatic dependent launch) those are read while that
     * kernel finishes. -1, the default: any of them may be its output, nothing is read early.
     * (A decode step stores its token's keys and values just before: 1.) */
    int32_t fresh_rows;
    /* Sliding-window attention (Mistral): a query at position p attends only to positions
     * max(0, p - window + 1) .. p. 0, the default: every earlier position. */
    int32_t window;
} tc_attention_opts;
/* tc_attention_decode with options (NULL: the defaults). */
TC_API tc_status tc_attention_decode_ex(tc_tensor *out, const tc_tensor *q,
                                        const tc_tensor *k_cache, const tc_tensor *v_cache,
                                        const tc_tensor *block_table, const tc_tensor *seq_lens,
                                        float scale, const tc_attention_opts *opts);
/* Prefill (causal, flash-attention style: scores are never stored whole). q and out
 * [n_tokens, n_heads, head_dim] hold the newest tokens of each sequence: rows
 * q_start[s] .. q_start[s+1]-1 (q_start i32 [n_seqs + 1]) are its last m tokens, so row j
 * sits at position seq_lens[s] - m + j and attends to positions 0 ..= that position. */
TC_API tc_status tc_attention_prefill(tc_tensor *out, const tc_tensor *q, const tc_tensor *k_cache,
                                      const tc_tensor *v_cache, const tc_tensor *block_table,
                                      const tc_tensor *seq_lens, const tc_tensor *q_start,
                                      float scale);
/* tc_attention_prefill with options (NULL: the defaults; fresh_rows is ignored by prefill). */
TC_API tc_status tc_attention_prefill_ex(tc_tensor *out, const tc_tensor *q,
                                         const tc_tensor *k_cache, const tc_tensor *v_cache,
                                         const tc_tensor *block_table, const tc_tensor *seq_lens,
                                         const tc_tensor *q_start, float scale,
                                         const tc_attention_opts *opts);
/* tc_attention_store into FP8 caches with opts' k_scale and v_scale (NULL opts or scales: 1;
 * the rest of opts is ignored). */
TC_API tc_status tc_attention_store_ex(tc_tensor *k_cache, tc_tensor *v_cache, const tc_tensor *k,
                                       const tc_tensor *v, const tc_tensor *slots,
                                       const tc_attention_opts *opts);
/* Per-kv-head scales for an FP8 cache from a batch of its rows k, v [n, n_kv_heads, head_dim]:
 * k_scale[h] (f32 [n_kv_heads]) is the power of two 2^(ceil(log2(amax)) - 5) of the largest
 * magnitude amax of head h's keys (1 where all are 0), v_scale the same of the values. The
 * scaled batch then peaks in (16, 32]: 14 times below E4M3's largest finite value (headroom
 * for later rows), far above its subnormals (2^-6); a power of two divides and multiplies
 * exactly, so the scaled codes are those of the unscaled values wherever both are normal. */
TC_API tc_status tc_kv_scales(tc_tensor *k_scale, tc_tensor *v_scale, const tc_tensor *k,
                              const tc_tensor *v);

/* out[i] = the index of the largest element of row i of x [n, d] (f32/f16/bf16); the lowest
 * index wins ties; NaN elements are never chosen unless the whole row is NaN. out i32 [n]. */
TC_API tc_status tc_argmax(tc_tensor *out, const tc_tensor *x);

/* One constrained row for tc_logits_mask: the tokens its grammar allows and its logit bias. */
typedef struct tc_logits_constraint {
    int64_t row;             /* the row of logits it constrains */
    const uint32_t *allowed; /* bit t % 32 of allowed[t / 32] set: token t may be chosen; NULL:
                                every token */
    int64_t n_words;         /* words in allowed: at least (vocab + 31) / 32 */
    const int32_t *bias_ids; /* [n_bias] token ids in [0, vocab) */
    const float *bias;       /* [n_bias] added to those logits (OpenAI's logit_bias); -100 or
                                less bans the token; a token listed twice gets the sum of its
                                biases, or is banned if either bans it */
    int32_t n_bias;
} tc_logits_constraint;
/* Constrain rows of logits [n, vocab] (f32) in place before tc_sample: in each of the n_rows
 * (distinct) rows named, tokens not allowed become -inf and allowed ones get their bias. A row
 * that allows nothing comes out all -inf, never NaN (tc_sample then picks token 0). On CUDA
 * the masks and biases of all the rows go up in one copy and one kernel applies them, in stream
 * order, without waiting for the device. */
TC_API tc_status tc_logits_mask(tc_tensor *logits, const tc_logits_constraint *rows,
                                int32_t n_rows);

/* Sampling parameters of one sequence; the neutral values turn each stage off. */
typedef struct tc_sample_params {
    float temperature;        /* 0: greedy (argmax after penalties) */
    int top_k;                /* 0: off */
    float top_p;              /* 1: off */
    float min_p;              /* 0: off; keep tokens with p >= min_p * max p */
    float repetition_penalty; /* 1: off; CTRL (Keskar et al. 2019): logits of seen tokens
                                 divided by it when positive, multiplied when negative */
    float presence_penalty;   /* 0: off; OpenAI: minus this once per generated token seen */
    float frequency_penalty;  /* 0: off; OpenAI: minus this times its generated count */
    uint64_t seed;
} tc_sample_params;
/* One row to sample: its parameters, the tokens it has seen (prompt then generated: the
 * repetition penalty looks at all, presence and frequency at those after n_prompt) and the
 * random stream position (e.g. the number generated so far): equal seed and counter give
 * the same token. */
typedef struct tc_sample_row {
    tc_sample_params params;
    const int32_t *history;
    int64_t history_len;
    int64_t n_prompt;
    uint64_t counter;
} tc_sample_row;
/* The neutral parameters (greedy). */
TC_API tc_sample_params tc_sample_defaults(void);
/* Pick one token per row of logits [n, vocab] (f32) into the host array out[n]: penalties,
 * temperature, top-k, top-p, min-p, then a draw from the renormalised distribution. */
TC_API tc_status tc_sample(int32_t *out, const tc_tensor *logits, const tc_sample_row *rows);

#ifdef __cplusplus
}
#endif
#endif /* TC_OPS_H */

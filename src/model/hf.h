/* Hugging Face model folders: config.json, model.safetensors or shards with
 * model.safetensors.index.json, tokenizer.json and tokenizer_config.json. The safetensors files
 * are memory-mapped and their tensors presented under GGUF's names, so that the Llama loader
 * reads both formats the same way. */
#ifndef TC_HF_H
#define TC_HF_H
#include "model/gguf.h"
#include "model/llama.h"
#ifdef __cplusplus
extern "C" {
#endif

/* A folder's quantization_config (GPTQ: AutoGPTQ/GPTQModel/optimum; AWQ: AutoAWQ's GEMM
 * layout; compressed-tensors: llm-compressor's pack-quantized W4A16/W8A16), and what loading
 * made of it. */
typedef enum tc_hf_quant_method {
    TC_HF_QUANT_NONE = 0,
    TC_HF_QUANT_GPTQ,
    TC_HF_QUANT_AWQ,
    TC_HF_QUANT_CT,
} tc_hf_quant_method;

typedef struct tc_hf_quant {
    tc_hf_quant_method method;
    int bits;                  /* 4 or 8 (AWQ: 4) */
    int group_size;            /* inputs per scale; -1: one group for the whole column (GPTQ's
                                  -1, compressed-tensors' channel strategy) */
    bool sym;                  /* GPTQ's sym, compressed-tensors' symmetric; AWQ always has zero
                                  points (sym false) */
    bool desc_act;             /* GPTQ act-order: groups follow g_idx, not the input order */
    int zero_offset;           /* added to each stored zero: 1 for GPTQ's v1 checkpoint format */
    char format[24];           /* GPTQ checkpoint_format ("gptq", "gptq_v2"), AWQ version ("gemm")
                                  or compressed-tensors format ("pack-quantized") */
    uint32_t n_linear;         /* quantised matrices found */
    uint32_t n_dequantised;    /* of which held as f32 (asymmetric 8-bit; act-order whose
                                  groups are not whole blocks) */
    uint32_t n_permuted;       /* of which held as blocks over inputs in group order
                                  (act-order: the model gathers x's columns to match) */
    uint64_t checkpoint_bytes; /* their qweight, qzeros, scales and g_idx (compressed-tensors:
                                  weight_packed, _zero_point, _scale and _shape) */
    uint64_t held_bytes;       /* the same matrices as the loader holds them (their block types'
                                  bytes, or f32) */
    int max_block;             /* the loader's: the largest block it holds them in (0: any; 64:
                                  no q4_1_g128, tc_hf_open_packed_ex) */
} tc_hf_quant;

typedef struct tc_hf {
    tc_gguf view; /* tensors under GGUF names (no metadata); data points into the mappings */
    tc_llama_config cfg;
    char *chat_template; /* tokenizer_config.json's (or chat_template.jinja), or NULL */
    char *tokenizer_json, *tokenizer_config; /* paths, or NULL when absent */
    void **maps;
    size_t *map_bytes;
    int n_maps;
    char *names; /* storage of the view's tensor names */
    tc_hf_quant quant;
    void *repacked; /* the quantised matrices as GGUF blocks (or f32), which the view points into */
    struct tc__hfq_linear *packed; /* tc_hf_open_packed's matrices left packed (n_packed) */
    size_t n_packed;
} tc_hf;

/* Open a model folder: read config.json (a Llama-family model_type, else "unsupported
 * architecture X"), map every safetensors file and check each header (dtype F32/F16/BF16, I32
 * and I64 for quantised parts; shape, offsets inside the file and matching the shape). A GPTQ, AWQ
 * or compressed-tensors folder's matrices are repacked on the host into GGUF q4_0, q4_1 or q8_0
 * blocks, or our q4_1_g64 and q4_1_g128 (src/model/hfquant.c), that the kernels read as they are
 * (f32 where blocks cannot express them, e.g. act-order groups that are not whole 32-element
 * blocks), under the same names. Errors name the file and problem. */
TC_API tc_status tc_hf_open(tc_hf *hf, const char *dir);
/* As tc_hf_open, except that the matrices that become q4_0, q4_1, q4_1_g64, q4_1_g128 or q8_0
 * blocks are left as the files hold them: their view tensors have NULL data and `packed` set, and
 * tc_llama_load packs each as it places it (on the GPU for CUDA, where the host would spend about a
 * second on a 7B model). For loading a model; readers of the view's bytes use tc_hf_open. */
TC_API tc_status tc_hf_open_packed(tc_hf *hf, const char *dir);
/* As tc_hf_open_packed, holding 4-bit matrices in blocks of at most max_block elements (0: any;
 * 64: q4_1_g64 or q4_0 where q4_1_g128 would be smaller). Tensor parallelism gives each rank
 * whole blocks of attn_output's columns: heads of 64 columns split one by one only under 64. */
TC_API tc_status tc_hf_open_packed_ex(tc_hf *hf, const char *dir, int max_block);
/* Unmap and free; closing a zeroed hf is a no-op. */
TC_API void tc_hf_close(tc_hf *hf);

/* One tensor of a safetensors header. */
typedef struct tc_safetensor {
    const char *name; /* NUL-terminated, valid during the callback */
    tc_ggml_type type;
    int n_dims;
    uint64_t dims[4]; /* outermost first, as safetensors stores them */
    const void *data;
    uint64_t bytes;
} tc_safetensor;
/* Parse one safetensors image (8-byte header length, JSON header, data) and call fn for each
 * tensor; `what` names it in messages. The fuzz entry point. */
TC_API tc_status tc_safetensors_parse(const void *buf, size_t bytes, const char *what,
                                      tc_status (*fn)(void *ctx, const tc_safetensor *t),
                                      void *ctx);

#ifdef __cplusplus
}
#endif
#endif /* TC_HF_H */

/* GPTQ, AWQ and compressed-tensors folders: quantization_config (src/model/hfquant_config.c),
 * the parts of each quantised matrix as the safetensors files hold them, and their repacking
 * into GGUF blocks (src/model/hfquant.c). Internal to src/model; not installed. */
#ifndef TC_MODEL_HFQUANT_H
#define TC_MODEL_HFQUANT_H
#include <jansson.h>
#include "model/hf.h"

/* The parts of a matrix, GPTQ's and AWQ's names first, compressed-tensors' in brackets:
 * qweight (weight_packed), qzeros (weight_zero_point), scales (weight_scale), g_idx
 * (weight_g_idx), and weight_shape, which only compressed-tensors has. */
enum {
    TC__HFQ_QWEIGHT,
    TC__HFQ_QZEROS,
    TC__HFQ_SCALES,
    TC__HFQ_G_IDX,
    TC__HFQ_SHAPE,
    TC__HFQ_PARTS
};

/* One quantised matrix: its parts as read from the file, then the tensor made of them. */
typedef struct tc__hfq_linear {
    char hf[96];                       /* the module's name ("model.layers.0.mlp.up_proj") */
    char gguf[64];                     /* its weight's GGUF name ("blk.0.ffn_up.weight") */
    tc_safetensor part[TC__HFQ_PARTS]; /* data NULL where absent; name not kept */
    uint64_t in, out, groups;          /* inputs (k), outputs (rows), scale groups */
    tc_ggml_type type;                 /* q4_0, q4_1, q4_1_g64, q4_1_g128, q8_0 or f32 */
    const char *why;                   /* why it is f32, or NULL */
    uint32_t *perm;                    /* act-order: block input i is the checkpoint's input
                                          perm[i] (its groups in order); NULL: in order */
    uint32_t *rows;                    /* held row j is the checkpoint's output rows[j] (an
                                          act-order ffn_down's gate and up: its input order,
                                          so that down takes their product as it comes) */
    bool fed_in_order;                 /* with perm: the matrices before it hold their rows in
                                          that order, so x needs no gather */
    void *data;                        /* [out, in] in `type`, inside the repacking buffer;
                                          NULL where left packed for the loader */
    uint64_t bytes;
    const tc_hf_quant *cfg; /* the folder's configuration (set by tc__hfq_build) */
} tc__hfq_linear;

typedef struct tc__hfq {
    tc__hfq_linear *lin;
    size_t n, cap;
} tc__hfq;

/* Read config.json's quantization_config (q is zeroed when there is none): GPTQ (bits 4 or 8,
 * group_size -1 or a multiple of 32, sym, desc_act, checkpoint_format gptq or gptq_v2), AWQ
 * (4 bits, group a multiple of 32, zero_point true, version gemm) and compressed-tensors
 * (format pack-quantized, weights only: int, 4 or 8 bits, symmetric or not, strategy group with
 * a multiple of 32 or channel, the same in every config group). Anything else is one error
 * naming the field and its value. */
tc_status tc__hfq_config(json_t *config, const char *path, tc_hf_quant *q);
/* Whether safetensors name `hf` is a part of a quantised matrix (module.qweight, .qzeros,
 * .scales, .g_idx; module.weight_packed, _zero_point, _scale, _g_idx, _shape): then the
 * module's name, which part and whether it is compressed-tensors' name for it. */
bool tc__hfq_part(const char *hf, char *module, size_t module_cap, int *which, bool *ct);
/* Record part `which` of module `module` (its GGUF weight name `gguf`) under configuration
 * cfg; a part named for another method than cfg's (ct) is an error. */
tc_status tc__hfq_add(const tc_hf_quant *cfg, tc__hfq *q, const char *module, const char *gguf,
                      int which, bool ct, const tc_safetensor *t);
/* Check every matrix's parts against the configuration, pick each one's block type, allocate
 * *buffer (freed by the caller with tc_host_free) and repack them all into it in parallel;
 * counts go into cfg. With `packed`, the matrices of block types are left as they are (data
 * NULL: tc__hfq_pack_host or tc__hfq_pack_device make them when loaded) and only the f32 ones
 * are made. One clear error for a malformed matrix. */
tc_status tc__hfq_build(tc_hf_quant *cfg, tc__hfq *q, bool packed, void **buffer);
/* A matrix left packed as its l->bytes of l->type blocks at dst (host), in parallel. */
tc_status tc__hfq_pack_host(const tc__hfq_linear *l, void *dst);
/* A matrix left packed into rows [row0, row0 + l->out) of the CUDA block tensor t, on the GPU
 * (src/ops' tc__quant_pack). */
tc_status tc__hfq_pack_device(const tc__hfq_linear *l, tc_tensor *t, int64_t row0);
/* Free the list (not the buffer). */
void tc__hfq_free(tc__hfq *q);

#endif /* TC_MODEL_HFQUANT_H */

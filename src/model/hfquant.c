/* GPTQ, AWQ and compressed-tensors folders repacked into the GGUF block types our kernels read
 * as they are.
 * GPTQ (Frantar et al. 2022; AutoGPTQ's, GPTQModel's and optimum's layout): qweight int32
 * [in * bits / 32, out], input k of column j in word (k / (32 / bits), j) at bits
 * bits * (k % (32 / bits)); qzeros int32 [groups, out * bits / 32], packed the same way along
 * the outputs; scales f16 [groups, out]; g_idx int32 [in], the group of each input; weight
 * w[j][k] = s (q - z) for the group g_idx[k]. The v1 checkpoint format (checkpoint_format
 * "gptq", AutoGPTQ's) stores z - 1 (its packer subtracts one), gptq_v2 stores z.
 * AWQ (Lin et al. 2023; AutoAWQ's GEMM layout): qweight int32 [in, out / 8], output 8 c + o of
 * input k in word (k, c) at bits 4 p where [0, 2, 4, 6, 1, 3, 5, 7][p] = o; qzeros int32
 * [groups, out / 8] in the same order; scales f16 [groups, out]; groups of group_size inputs.
 * compressed-tensors (pack-quantized, as llm-compressor writes W4A16 and W8A16 for vLLM):
 * weight_packed int32 [out, ceil(in * bits / 32)], input k of output j at bits
 * bits * (k % (32 / bits)) of word (j, k / (32 / bits)); weight_scale [out, groups] in the
 * model's dtype (f16, bf16 or f32); weight_zero_point int32 [ceil(out * bits / 32), groups]
 * packed along the outputs, only when asymmetric; weight_shape int64 [out, in]. Values are
 * signed and stored plus 2^(bits - 1): w = s (q - z) of the stored fields, z = 2^(bits - 1)
 * when symmetric. Groups of group_size inputs (strategy group) or one (channel).
 * GGUF (ggml-common.h): q4_0 {f16 d; 16 bytes: element l in the low nibble of byte l, l + 16
 * in the high one} is d (q - 8); q4_1 {f16 d, f16 m; the same nibbles} is d q + m; q8_0
 * {f16 d; 32 int8} is d q. So a group's scale is each of its 32-blocks' d: z = 8 everywhere is
 * q4_0 exactly; other 4-bit zeros are q4_1 with m = -s z rounded to f16 once (|error| at most
 * 2^-11 |s z|, or 2^-25 where it is subnormal), or where every 64 (128) inputs share a group
 * our q4_1_g64 (q4_1_g128) {f16 d, f16 m; the nibble bytes of two (four) q4_1 blocks}, the same
 * values in 4.5 (4.25) bits a weight instead of 5; q4_1_g128 holds symmetric ones too (m = -8 s
 * exactly), in fewer bytes than q4_0; 8-bit with z = 128 is q8_0 (q - 128). Scales that are not
 * f16 become d only where f16 holds them exactly. */
#define _GNU_SOURCE
#include "model/hfquant.h"
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "model/quant.h"
#include "ops/internal.h"
#include "runtime/error.h"
#include "runtime/host.h"
#include "runtime/log.h"

static const char *const OP = "tc_hf_open";

/* ---------------------------------------------------------------- the parts */

/* Each part's name: GPTQ's and AWQ's, then compressed-tensors'. */
static const char *const PART_NAME[2][TC__HFQ_PARTS] = {
    { "qweight", "qzeros", "scales", "g_idx", "weight_shape" },
    { "weight_packed", "weight_zero_point", "weight_scale", "weight_g_idx", "weight_shape" },
};

static const char *part_name(const tc_hf_quant *cfg, int which)
{
    return PART_NAME[cfg->method == TC_HF_QUANT_CT][which];
}

static const char *method_name(const tc_hf_quant *cfg)
{
    return cfg->method == TC_HF_QUANT_GPTQ  ? "GPTQ"
           : cfg->method == TC_HF_QUANT_AWQ ? "AWQ"
                                            : "compressed-tensors";
}

bool tc__hfq_part(const char *hf, char *module, size_t module_cap, int *which, bool *ct)
{
    const char *dot = strrchr(hf, '.');
    if (!dot || (size_t)(dot - hf) >= module_cap)
        return false;
    for (int n = 0; n < 2; n++)
        for (int i = 0; i < TC__HFQ_PARTS; i++)
            if ((n || i != TC__HFQ_SHAPE) && !strcmp(dot + 1, PART_NAME[n][i])) {
                memcpy(module, hf, (size_t)(dot - hf));
                module[dot - hf] = 0;
                *which = i;
                *ct = n == 1;
                return true;
            }
    return false;
}

tc_status tc__hfq_add(const tc_hf_quant *cfg, tc__hfq *q, const char *module, const char *gguf,
                      int which, bool ct, const tc_safetensor *t)
{
    if (ct != (cfg->method == TC_HF_QUANT_CT))
        return tc_set_error(
            TC_ERR_PARSE, OP, "tensor %s.%s is a %s part, but quantization_config says %s", module,
            PART_NAME[ct][which], ct ? "compressed-tensors" : "GPTQ or AWQ", method_name(cfg));
    tc__hfq_linear *l = NULL;
    for (size_t i = 0; i < q->n && !l; i++)
        if (!strcmp(q->lin[i].hf, module))
            l = &q->lin[i];
    if (!l) {
        if (q->n == q->cap) {
            size_t cap = q->cap ? 2 * q->cap : 64;
            tc__hfq_linear *nl = tc_host_realloc(q->lin, cap * sizeof *nl);
            if (!nl)
                return tc_set_error(TC_ERR_OUT_OF_MEMORY, OP, "no host memory");
            q->lin = nl;
            q->cap = cap;
        }
        l = &q->lin[q->n++];
        memset(l, 0, sizeof *l);
        snprintf(l->hf, sizeof l->hf, "%s", module);
        snprintf(l->gguf, sizeof l->gguf, "%s", gguf);
    }
    if (l->part[which].data)
        return tc_set_error(TC_ERR_PARSE, OP, "tensor %s.%s appears twice", module,
                            part_name(cfg, which));
    l->part[which] = *t;
    l->part[which].name = NULL;
    return TC_OK;
}

void tc__hfq_free(tc__hfq *q)
{
    tc_host_free(q->lin);
    memset(q, 0, sizeof *q);
}

/* ---------------------------------------------------------------- reading the parts */

/* Little-endian words at any alignment (safetensors offsets need not be aligned). */
static inline uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline uint16_t rd16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
static inline void wr16(uint8_t *p, uint16_t v)
{
    memcpy(p, &v, 2);
}

/* AWQ's nibble of output o (of 8) within its word: the inverse of [0, 2, 4, 6, 1, 3, 5, 7]. */
static const int AWQ_NIBBLE[8] = { 0, 4, 1, 5, 2, 6, 3, 7 };

typedef struct reader {
    const tc_hf_quant *cfg;
    const tc__hfq_linear *l;
    const uint8_t *qw, *qz, *sc, *gi; /* gi NULL: groups of group_size inputs in order; qz NULL:
                                         symmetric compressed-tensors, zero 2^(bits - 1) */
    const uint32_t *perm, *rows;      /* l->perm, l->rows */
    tc_ggml_type sc_type;             /* f16 (GPTQ, AWQ), or bf16 or f32 (compressed-tensors) */
    uint64_t in, out, groups;
    uint64_t wk, wj; /* word w along the inputs of output j is qweight's word w wk + j wj */
    uint64_t zg, zj; /* zeros of group g, outputs pack c..: word g zg + c zj (not AWQ's) */
    uint64_t sg, sj; /* scale of group g, output j: element g sg + j sj */
    int bits, pack;  /* pack: values per int32 */
    uint32_t mask;
} reader;

/* GPTQ runs its packing down the inputs of each output column ([in / pack, out]) and its zeros'
 * along the outputs of each group ([groups, out / pack]); compressed-tensors keeps PyTorch's
 * [out, in] and packs along the inputs of each row ([out, in / pack]) and the zeros along the
 * outputs of each group ([out / pack, groups]); scales are [groups, out] and [out, groups]. */
static reader reader_of(const tc_hf_quant *cfg, const tc__hfq_linear *l)
{
    reader r;
    memset(&r, 0, sizeof r);
    bool ct = cfg->method == TC_HF_QUANT_CT;
    r.cfg = cfg;
    r.l = l;
    r.qw = l->part[TC__HFQ_QWEIGHT].data;
    r.qz = l->part[TC__HFQ_QZEROS].data;
    r.sc = l->part[TC__HFQ_SCALES].data;
    r.sc_type = l->part[TC__HFQ_SCALES].type;
    r.gi = cfg->method != TC_HF_QUANT_AWQ ? l->part[TC__HFQ_G_IDX].data : NULL;
    r.perm = l->perm;
    r.rows = l->rows;
    r.in = l->in;
    r.out = l->out;
    r.groups = l->groups;
    r.bits = cfg->bits;
    r.pack = 32 / cfg->bits;
    r.mask = (1u << cfg->bits) - 1;
    r.wk = ct ? 1 : l->out;
    r.wj = ct ? l->part[TC__HFQ_QWEIGHT].dims[1] : 1;
    r.zg = ct ? 1 : l->part[TC__HFQ_QZEROS].dims[1];
    r.zj = ct ? l->groups : 1;
    r.sg = ct ? 1 : l->out;
    r.sj = ct ? l->groups : 1;
    return r;
}

static inline uint64_t group_of(const reader *r, uint64_t k)
{
    if (r->gi)
        return rd32(r->gi + 4 * k);
    return r->cfg->group_size < 0 ? 0 : k / (uint64_t)r->cfg->group_size;
}

/* The checkpoint's output of held row j. */
static inline uint64_t out_of(const reader *r, uint64_t j)
{
    return r->rows ? r->rows[j] : j;
}

/* The group of the blocks' input i (the checkpoint's input perm[i] under act-order). */
static inline uint64_t block_group(const reader *r, uint64_t i)
{
    return group_of(r, r->perm ? r->perm[i] : i);
}

/* The zero point of output j in group g, the v1 offset added. compressed-tensors stores signed
 * values v (q and z in -2^(bits-1)..2^(bits-1) - 1) as v + 2^(bits - 1), so q - z is the same
 * difference of the stored fields; symmetric ones have z = 0, stored 2^(bits - 1). */
static inline int zero_of(const reader *r, uint64_t g, uint64_t j)
{
    if (r->cfg->method == TC_HF_QUANT_AWQ)
        return (int)(rd32(r->qz + 4 * (g * r->zg + j / 8)) >> 4 * AWQ_NIBBLE[j % 8] & 15);
    if (!r->qz)
        return 1 << (r->bits - 1);
    uint32_t w = rd32(r->qz + 4 * (g * r->zg + j / (uint64_t)r->pack * r->zj));
    return (int)(w >> r->bits * (int)(j % (uint64_t)r->pack) & r->mask) + r->cfg->zero_offset;
}

/* The scale of output j in group g as a float (exact from f16, bf16 or f32). */
static inline float scale_f32(const reader *r, uint64_t g, uint64_t j)
{
    uint64_t i = g * r->sg + j * r->sj;
    if (r->sc_type == TC_GGML_F16)
        return tc__f16_to_f32(rd16(r->sc + 2 * i));
    if (r->sc_type == TC_GGML_BF16)
        return tc__bf16_to_f32(rd16(r->sc + 2 * i));
    float f;
    memcpy(&f, r->sc + 4 * i, 4);
    return f;
}

/* The scale as f16 bits: as stored, or converted where choose() found every one exact. */
static inline uint16_t scale_of(const reader *r, uint64_t g, uint64_t j)
{
    if (r->sc_type == TC_GGML_F16)
        return rd16(r->sc + 2 * (g * r->sg + j * r->sj));
    return tc__f32_to_f16(scale_f32(r, g, j));
}

/* The quantised value of input k, output j. */
static inline int q_of(const reader *r, uint64_t k, uint64_t j)
{
    if (r->cfg->method == TC_HF_QUANT_AWQ)
        return (int)(rd32(r->qw + 4 * (k * (r->out / 8) + j / 8)) >> 4 * AWQ_NIBBLE[j % 8] & 15);
    uint32_t w = rd32(r->qw + 4 * ((k / (uint64_t)r->pack) * r->wk + j * r->wj));
    return (int)(w >> r->bits * (int)(k % (uint64_t)r->pack) & r->mask);
}

/* q4_1's m for scale s and zero z: -s z in f32 (exact: 11 by 5 significant bits), then f16. */
static inline uint16_t q4_1_min(uint16_t s, int z)
{
    return tc__f32_to_f16(-(tc__f16_to_f32(s) * (float)z));
}

/* ---------------------------------------------------------------- checking a matrix */

static tc_status want_part(const tc_hf_quant *cfg, const tc__hfq_linear *l, int which,
                           tc_ggml_type type, int n_dims)
{
    const tc_safetensor *t = &l->part[which];
    if (!t->data)
        return tc_set_error(
            TC_ERR_PARSE, OP, "%s has no %s (its %s is there)", l->hf, part_name(cfg, which),
            l->part[TC__HFQ_QWEIGHT].data ? part_name(cfg, TC__HFQ_QWEIGHT) : "scales or zeros");
    bool scales = which == TC__HFQ_SCALES && cfg->method == TC_HF_QUANT_CT &&
                  (t->type == TC_GGML_BF16 || t->type == TC_GGML_F32);
    if ((t->type != type && !scales) || t->n_dims != n_dims)
        return tc_set_error(
            TC_ERR_PARSE, OP, "%s.%s is %s with %d dimensions, want %s%s with %d", l->hf,
            part_name(cfg, which), tc_ggml_type_name(t->type), t->n_dims, tc_ggml_type_name(type),
            which == TC__HFQ_SCALES && cfg->method == TC_HF_QUANT_CT ? " (or bf16 or f32)" : "",
            n_dims);
    return TC_OK;
}

static tc_status bad_shape(const tc_hf_quant *cfg, const tc__hfq_linear *l, int which, uint64_t d0,
                           uint64_t d1)
{
    const tc_safetensor *t = &l->part[which];
    return tc_set_error(TC_ERR_PARSE, OP,
                        "%s.%s has shape [%llu, %llu], want [%llu, %llu] for %llu inputs and "
                        "%llu outputs",
                        l->hf, part_name(cfg, which), (unsigned long long)t->dims[0],
                        (unsigned long long)(t->n_dims > 1 ? t->dims[1] : 0),
                        (unsigned long long)d0, (unsigned long long)d1, (unsigned long long)l->in,
                        (unsigned long long)l->out);
}

/* GPTQ's g_idx or compressed-tensors' weight_g_idx (I32 [in], each input's group), which
 * desc_act (actorder group) needs. */
static tc_status check_g_idx(const tc_hf_quant *cfg, const tc__hfq_linear *l)
{
    const tc_safetensor *g = &l->part[TC__HFQ_G_IDX];
    const char *name = part_name(cfg, TC__HFQ_G_IDX);
    if (!g->data) {
        if (cfg->desc_act)
            return tc_set_error(TC_ERR_PARSE, OP, "%s has no %s, which %s needs", l->hf, name,
                                cfg->method == TC_HF_QUANT_CT ? "actorder group" : "desc_act");
        return TC_OK;
    }
    if (g->type != TC_GGML_I32 || g->n_dims != 1 || g->dims[0] != l->in)
        return tc_set_error(TC_ERR_PARSE, OP, "%s.%s is not I32 [%llu]", l->hf, name,
                            (unsigned long long)l->in);
    const uint8_t *p = g->data;
    for (uint64_t k = 0; k < l->in; k++)
        if (rd32(p + 4 * k) >= l->groups)
            return tc_set_error(TC_ERR_PARSE, OP, "%s.%s[%llu] is %d, outside 0..%llu", l->hf, name,
                                (unsigned long long)k, (int32_t)rd32(p + 4 * k),
                                (unsigned long long)l->groups - 1);
    return TC_OK;
}

/* compressed-tensors: the matrix's [out, in] from weight_shape (int64 [2]; in need not fill the
 * last word), then the other parts' shapes against it. */
static tc_status check_ct(const tc_hf_quant *cfg, tc__hfq_linear *l)
{
    TC_TRY(want_part(cfg, l, TC__HFQ_QWEIGHT, TC_GGML_I32, 2));
    TC_TRY(want_part(cfg, l, TC__HFQ_SCALES, TC_GGML_F16, 2));
    TC_TRY(want_part(cfg, l, TC__HFQ_SHAPE, TC_GGML_I64, 1));
    if (cfg->sym && l->part[TC__HFQ_QZEROS].data)
        return tc_set_error(TC_ERR_PARSE, OP,
                            "%s has a weight_zero_point, but the scheme is symmetric", l->hf);
    if (!cfg->sym)
        TC_TRY(want_part(cfg, l, TC__HFQ_QZEROS, TC_GGML_I32, 2));
    const tc_safetensor *shape = &l->part[TC__HFQ_SHAPE];
    int64_t d[2] = { 0, 0 };
    if (shape->dims[0] == 2)
        memcpy(d, shape->data, sizeof d);
    if (shape->dims[0] != 2 || d[0] <= 0 || d[1] <= 0 || d[0] > (1 << 24) || d[1] > (1 << 24))
        return tc_set_error(TC_ERR_PARSE, OP,
                            "%s.weight_shape is not [outputs, inputs] of two positive sizes up "
                            "to 2^24",
                            l->hf);
    l->out = (uint64_t)d[0];
    l->in = (uint64_t)d[1];
    int64_t gs = cfg->group_size;
    uint64_t pack = 32 / (uint64_t)cfg->bits;
    l->groups = gs < 0 ? 1 : (l->in + (uint64_t)gs - 1) / (uint64_t)gs;
    const uint64_t *qw = l->part[TC__HFQ_QWEIGHT].dims, *sc = l->part[TC__HFQ_SCALES].dims;
    if (qw[0] != l->out || qw[1] != (l->in + pack - 1) / pack)
        return bad_shape(cfg, l, TC__HFQ_QWEIGHT, l->out, (l->in + pack - 1) / pack);
    if (sc[0] != l->out || sc[1] != l->groups)
        return bad_shape(cfg, l, TC__HFQ_SCALES, l->out, l->groups);
    const uint64_t *qz = l->part[TC__HFQ_QZEROS].dims;
    if (!cfg->sym && (qz[0] != (l->out + pack - 1) / pack || qz[1] != l->groups))
        return bad_shape(cfg, l, TC__HFQ_QZEROS, (l->out + pack - 1) / pack, l->groups);
    return check_g_idx(cfg, l);
}

/* Check the parts' dtypes and shapes (setting in, out, groups) and the g_idx values. */
static tc_status check(const tc_hf_quant *cfg, tc__hfq_linear *l)
{
    if (cfg->method == TC_HF_QUANT_CT)
        return check_ct(cfg, l);
    TC_TRY(want_part(cfg, l, TC__HFQ_QWEIGHT, TC_GGML_I32, 2));
    TC_TRY(want_part(cfg, l, TC__HFQ_QZEROS, TC_GGML_I32, 2));
    TC_TRY(want_part(cfg, l, TC__HFQ_SCALES, TC_GGML_F16, 2));
    const uint64_t *qw = l->part[TC__HFQ_QWEIGHT].dims, *qz = l->part[TC__HFQ_QZEROS].dims,
                   *sc = l->part[TC__HFQ_SCALES].dims;
    int pack = 32 / cfg->bits;
    int64_t gs = cfg->group_size;
    if (cfg->method == TC_HF_QUANT_GPTQ) {
        l->in = qw[0] * (uint64_t)pack;
        l->out = qw[1];
        l->groups = gs < 0 ? 1 : (l->in + (uint64_t)gs - 1) / (uint64_t)gs;
    } else {
        l->in = qw[0];
        l->out = qw[1] * 8;
        l->groups = l->in / (uint64_t)gs;
        if (l->in % (uint64_t)gs)
            return tc_set_error(TC_ERR_PARSE, OP,
                                "%s: %llu inputs are not whole groups of %lld (AWQ)", l->hf,
                                (unsigned long long)l->in, (long long)gs);
    }
    if (!l->in || !l->out || l->out % (uint64_t)pack)
        return tc_set_error(TC_ERR_PARSE, OP,
                            "%s.qweight has shape [%llu, %llu]: no inputs or outputs, or outputs "
                            "not a multiple of %d",
                            l->hf, (unsigned long long)qw[0], (unsigned long long)qw[1], pack);
    if (sc[0] != l->groups || sc[1] != l->out)
        return bad_shape(cfg, l, TC__HFQ_SCALES, l->groups, l->out);
    if (qz[0] != l->groups || qz[1] != l->out / (uint64_t)pack)
        return bad_shape(cfg, l, TC__HFQ_QZEROS, l->groups, l->out / (uint64_t)pack);
    if (cfg->method == TC_HF_QUANT_AWQ)
        return TC_OK;
    return check_g_idx(cfg, l);
}

/* Whether every n (64 or 128) inputs share a group: q4_1_g64 and q4_1_g128 then hold one d
 * and m where q4_1 repeats them for each 32 (4.5 and 4.25 bits a weight instead of 5: 1.08x
 * and 1.02x a checkpoint of groups of 128, its zeros and scales 4.16 bits; 1.06x one of a
 * group per channel as q4_1_g128). */
static bool shared_by(const reader *r, uint64_t n)
{
    const tc__hfq_linear *l = r->l;
    if (l->in % n)
        return false;
    if (!r->gi)
        return r->cfg->group_size < 0 || r->cfg->group_size % (int)n == 0;
    for (uint64_t k = 0; k < l->in; k += 32)
        if (block_group(r, k) != block_group(r, k / n * n))
            return false;
    return true;
}

/* Act-order (GPTQ's desc_act): g_idx gives each input a group that does not follow the input
 * order. Sorted by group (stably: a counting sort), the inputs make whole 32-element blocks of
 * one group when every group holds a multiple of 32 of them, as GPTQ's groups of group_size do:
 * then l->perm takes that order (the blocks hold the weights of inputs perm[0], perm[1], ...,
 * and the model gathers x's columns in the same order) and this returns NULL, else the reason
 * the matrix stays f32. */
static const char *group_order(tc__hfq_linear *l, reader *r)
{
    uint32_t *count = tc_host_calloc(l->groups + 1, sizeof *count);
    uint32_t *perm = tc_host_alloc(l->in * sizeof *perm);
    if (!count || !perm) {
        tc_host_free(count);
        tc_host_free(perm);
        return "no host memory to order an act-order matrix's inputs";
    }
    for (uint64_t k = 0; k < l->in; k++)
        count[group_of(r, k) + 1]++;
    const char *why = NULL;
    for (uint64_t g = 0; g < l->groups && !why; g++) {
        if (count[g + 1] % 32)
            why = "act-order: g_idx groups that are not whole 32-element blocks";
        count[g + 1] += count[g];
    }
    for (uint64_t k = 0; k < l->in && !why; k++)
        perm[count[group_of(r, k)]++] = (uint32_t)k;
    tc_host_free(count);
    if (why) {
        tc_host_free(perm);
        return why;
    }
    l->perm = perm;
    r->perm = perm;
    return NULL;
}

/* The type a checked matrix is held in: blocks when every 32 inputs share a group, the type of
 * the fewest bytes that holds its values (zero points' m = -s z rounded to f16 once): for 4 bits
 * q4_1_g128 where every 128 share a group, its m stays finite and the loader allows blocks of
 * 128 (cfg->max_block; symmetric ones too, -8 s being exact, unless a scale is infinite or
 * NaN), else q4_0 when every zero is the midpoint, else q4_1_g64 where every 64 share one, else
 * q4_1 (m finite); q8_0 for 8 bits with midpoint zeros. Else f32 with the reason. */
static void choose(const tc_hf_quant *cfg, tc__hfq_linear *l)
{
    reader r = reader_of(cfg, l);
    l->why = NULL;
    if (l->in % 32) {
        l->why = "rows that are not whole 32-element blocks";
    } else if (r.gi) {
        bool in_order = true;
        for (uint64_t k = 0; k < l->in && in_order; k++)
            in_order = group_of(&r, k) == group_of(&r, k / 32 * 32);
        if (!in_order)
            l->why = group_order(l, &r);
    }
    /* bf16 and f32 scales become q4/q8 blocks' f16 d only where that is exact. */
    if (r.sc_type != TC_GGML_F16)
        for (uint64_t g = 0; g < l->groups && !l->why; g++)
            for (uint64_t j = 0; j < l->out && !l->why; j++) {
                float v = scale_f32(&r, g, j);
                if (tc__f16_to_f32(tc__f32_to_f16(v)) != v)
                    l->why = "scales that f16 does not hold exactly";
            }
    /* special: a scale of infinity or NaN, whose q4_1 m is not -s z's value in s (q - z) */
    bool mid = true, finite = true, special = false;
    int half = 1 << (cfg->bits - 1);
    for (uint64_t g = 0; g < l->groups && !l->why; g++)
        for (uint64_t j = 0; j < l->out; j++) {
            int z = zero_of(&r, g, j);
            mid &= z == half;
            /* -s z reaches f16's infinity only for |s| of 2^12 and more (z < 16), an
             * exponent field of 27: the exact test runs for those alone. */
            if (cfg->bits == 4) {
                uint16_t sb = scale_of(&r, g, j);
                special |= (sb & 0x7c00) == 0x7c00;
                if ((sb & 0x7c00) >= (27 << 10))
                    finite &= (q4_1_min(sb, z) & 0x7c00) != 0x7c00 || (sb & 0x7c00) == 0x7c00;
            }
        }
    if (l->why)
        l->type = TC_GGML_F32;
    else if (cfg->bits == 8 && mid)
        l->type = TC_GGML_Q8_0;
    else if (cfg->bits == 8)
        l->type = TC_GGML_F32, l->why = "asymmetric 8-bit: q - z does not fit q8_0's int8";
    else if (finite && !(mid && special) && (!cfg->max_block || cfg->max_block >= 128) &&
             shared_by(&r, 128))
        l->type = TC_GGML_Q4_1_G128;
    else if (mid)
        l->type = TC_GGML_Q4_0;
    else if (!finite)
        l->type = TC_GGML_F32, l->why = "q4_1's minimum -s z overflows f16";
    else
        l->type = shared_by(&r, 64) ? TC_GGML_Q4_1_G64 : TC_GGML_Q4_1;
    if (l->type == TC_GGML_F32) {
        tc_host_free(l->perm);
        l->perm = NULL;
    }
    uint64_t be, bb;
    tc_ggml_type_block(l->type, &be, &bb);
    l->bytes = l->in * l->out / be * bb;
}

/* ---------------------------------------------------------------- repacking */

/* Output rows a work item repacks (a multiple of 8: AWQ's word columns stay whole). */
#define ROWS_PER_ITEM 64

/* Word w along the inputs of output j (GPTQ's and compressed-tensors' layouts). */
static inline uint32_t word_of(const reader *r, uint64_t w, uint64_t j)
{
    return rd32(r->qw + 4 * (w * r->wk + j * r->wj));
}

/* Bytes 0..3 of x to bytes 0, 2, 4 and 6. */
static inline uint64_t spread_bytes(uint32_t x)
{
    uint64_t v = x;
    v = (v | v << 16) & 0x0000FFFF0000FFFFull;
    return (v | v << 8) & 0x00FF00FF00FF00FFull;
}

/* The scales (and q4_1's minima) of rows j0..j1 in group g, into s and m (row j - j0): each
 * group's worked out once for its blocks. */
static void group_scales(const reader *r, bool q41, uint64_t g, uint64_t j0, uint64_t j1,
                         uint16_t *s, uint16_t *m)
{
    for (uint64_t j = j0; j < j1; j++) {
        s[j - j0] = scale_of(r, g, out_of(r, j));
        if (q41)
            m[j - j0] = q4_1_min(s[j - j0], zero_of(r, g, out_of(r, j)));
    }
}

/* The 32-element blocks of a 4-bit type that share one d (and m): q4_1_g64's two, q4_1_g128's
 * four, one for q4_0 and q4_1. */
static uint64_t share_of(tc_ggml_type t)
{
    return t == TC_GGML_Q4_1_G64 ? 2 : t == TC_GGML_Q4_1_G128 ? 4 : 1;
}

/* Where output j's 32-block kb of inputs goes in a 4-bit type: its block (d, and q4_1's m,
 * first) and its 16 nibble bytes (q4_1_g64, q4_1_g128: the 32-blocks of a block share d and
 * m). */
static uint8_t *block_of(const tc__hfq_linear *l, uint64_t j, uint64_t kb, uint8_t **qs)
{
    uint64_t nb = l->in / 32, sh = share_of(l->type);
    uint8_t *b;
    if (sh > 1) {
        b = (uint8_t *)l->data + (j * (nb / sh) + kb / sh) * (4 + 16 * sh);
        *qs = b + 4 + 16 * (kb % sh);
    } else {
        b = (uint8_t *)l->data + (j * nb + kb) * (l->type == TC_GGML_Q4_1 ? 20 : 18);
        *qs = b + (l->type == TC_GGML_Q4_1 ? 4 : 2);
    }
    return b;
}

/* GPTQ and compressed-tensors 4-bit, rows j0..j1 (at most ROWS_PER_ITEM): each 32-block of
 * inputs is 4 words of an output, elements 8 r + n at bits 4 n of word r; q4 bytes l and 8 + l
 * pair elements l, 16 + l and 8 + l, 24 + l, so bytes 0..7 interleave the low nibbles of words
 * 0 and 2 (even bytes) with their high ones (odd bytes), bytes 8..15 those of words 1 and 3. */
static void packed4(const reader *r, uint64_t j0, uint64_t j1)
{
    const tc__hfq_linear *l = r->l;
    bool q41 = l->type != TC_GGML_Q4_0;
    uint64_t nb = l->in / 32, last = UINT64_MAX;
    uint16_t s[ROWS_PER_ITEM], m[ROWS_PER_ITEM];
    for (uint64_t kb = 0; kb < nb; kb++) {
        uint64_t g = group_of(r, kb * 32);
        if (g != last)
            group_scales(r, q41, g, j0, j1, s, m);
        last = g;
        for (uint64_t j = j0; j < j1; j++) {
            uint8_t *qs, *b = block_of(l, j, kb, &qs);
            wr16(b, s[j - j0]);
            if (q41)
                wr16(b + 2, m[j - j0]);
            uint32_t w[4];
            for (int i = 0; i < 4; i++)
                w[i] = word_of(r, 4 * kb + (uint64_t)i, j);
            for (int h = 0; h < 2; h++) {
                uint32_t lo = w[h], hi = w[h + 2];
                uint64_t v = spread_bytes((lo & 0x0F0F0F0Fu) | (hi & 0x0F0F0F0Fu) << 4) |
                             spread_bytes((lo >> 4 & 0x0F0F0F0Fu) | (hi & 0xF0F0F0F0u)) << 8;
                memcpy(qs + 8 * h, &v, 8);
            }
        }
    }
}

/* GPTQ and compressed-tensors 8-bit with zero 128: 8 words a block, element 4 r + n at bits
 * 8 n of word r; q - 128 as int8 is q with its top bit flipped. */
static void packed8(const reader *r, uint64_t j0, uint64_t j1)
{
    const tc__hfq_linear *l = r->l;
    uint64_t nb = l->in / 32;
    for (uint64_t kb = 0; kb < nb; kb++) {
        uint64_t g = group_of(r, kb * 32);
        for (uint64_t j = j0; j < j1; j++) {
            uint8_t *b = (uint8_t *)l->data + (j * nb + kb) * 34;
            wr16(b, scale_of(r, g, j));
            for (int w = 0; w < 8; w++) {
                uint32_t v = word_of(r, 8 * kb + (uint64_t)w, j) ^ 0x80808080u;
                memcpy(b + 2 + 4 * w, &v, 4);
            }
        }
    }
}

/* AWQ 4-bit: input k of output j is a nibble of word (k, j / 8). A word's low nibbles of rows
 * n and n + 16 make q4 byte n of the outputs in its even nibble positions (byte b of
 * (lo & 0x0F0F0F0F) | (hi & 0x0F0F0F0F) << 4 is position 2 b's), its high nibbles those of
 * the odd ones; position p holds output 8 c + AWQ_ORDER[p] of word column c. Rows j0..j1 are
 * whole word columns (j0 a multiple of ROWS_PER_ITEM, out of 8). */
static const int AWQ_ORDER[8] = { 0, 2, 4, 6, 1, 3, 5, 7 };

static void awq4(const reader *r, uint64_t j0, uint64_t j1)
{
    const tc__hfq_linear *l = r->l;
    bool q41 = l->type != TC_GGML_Q4_0;
    uint64_t nb = l->in / 32, words = r->out / 8, last = UINT64_MAX;
    uint16_t s[ROWS_PER_ITEM], m[ROWS_PER_ITEM];
    for (uint64_t kb = 0; kb < nb; kb++) {
        uint64_t g = group_of(r, kb * 32);
        if (g != last)
            group_scales(r, q41, g, j0, j1, s, m);
        last = g;
        for (uint64_t j = j0; j < j1; j++) {
            uint8_t *qs, *b = block_of(l, j, kb, &qs);
            wr16(b, s[j - j0]);
            if (q41)
                wr16(b + 2, m[j - j0]);
        }
        const uint8_t *rows = r->qw + 4 * (kb * 32) * words;
        for (uint64_t c = j0 / 8; c < j1 / 8; c++) {
            uint8_t *qs[8];
            for (int p = 0; p < 8; p++)
                block_of(l, 8 * c + (uint64_t)AWQ_ORDER[p], kb, &qs[p]);
            for (int n = 0; n < 16; n++) {
                uint32_t lo = rd32(rows + 4 * ((uint64_t)n * words + c)),
                         hi = rd32(rows + 4 * ((uint64_t)(n + 16) * words + c)),
                         even = (lo & 0x0F0F0F0Fu) | (hi & 0x0F0F0F0Fu) << 4,
                         odd = (lo >> 4 & 0x0F0F0F0Fu) | (hi & 0xF0F0F0F0u);
                for (int b = 0; b < 4; b++) {
                    qs[2 * b][n] = (uint8_t)(even >> 8 * b);
                    qs[2 * b + 1][n] = (uint8_t)(odd >> 8 * b);
                }
            }
        }
    }
}

/* Act-order matrices (l->perm), any block type, rows j0..j1 (the checkpoint's outputs
 * l->rows[j] where set): block kb's 32 values are the checkpoint's inputs perm[32 kb ..], read
 * one at a time; the nibbles and bytes as above. */
static void permuted(const reader *r, uint64_t j0, uint64_t j1)
{
    const tc__hfq_linear *l = r->l;
    bool q8 = l->type == TC_GGML_Q8_0, q41 = !q8 && l->type != TC_GGML_Q4_0;
    uint64_t nb = l->in / 32, last = UINT64_MAX;
    uint16_t s[ROWS_PER_ITEM], m[ROWS_PER_ITEM];
    for (uint64_t kb = 0; kb < nb; kb++) {
        const uint32_t *src = r->perm + 32 * kb;
        uint64_t g = group_of(r, src[0]);
        if (g != last)
            group_scales(r, q41, g, j0, j1, s, m);
        last = g;
        for (uint64_t j = j0; j < j1; j++) {
            uint8_t q[32];
            for (int e = 0; e < 32; e++)
                q[e] = (uint8_t)q_of(r, src[e], out_of(r, j));
            if (q8) {
                uint8_t *b = (uint8_t *)l->data + (j * nb + kb) * 34;
                wr16(b, s[j - j0]);
                for (int e = 0; e < 32; e++)
                    b[2 + e] = q[e] ^ 0x80;
                continue;
            }
            uint8_t *qs, *b = block_of(l, j, kb, &qs);
            wr16(b, s[j - j0]);
            if (q41)
                wr16(b + 2, m[j - j0]);
            for (int e = 0; e < 16; e++)
                qs[e] = (uint8_t)(q[e] | q[e + 16] << 4);
        }
    }
}

/* Any layout to f32 [out, in]: s (q - z), exact in f32 for f16 and bf16 scales (11 or 8 by at
 * most 9 significant bits), rounded once for f32 ones. */
static void to_f32(const reader *r, uint64_t j0, uint64_t j1)
{
    float *y = r->l->data;
    for (uint64_t j = j0; j < j1; j++)
        for (uint64_t k = 0; k < r->in; k++) {
            uint64_t g = group_of(r, k);
            y[j * r->in + k] = scale_f32(r, g, j) * (float)(q_of(r, k, j) - zero_of(r, g, j));
        }
}

typedef struct work {
    const tc_hf_quant *cfg;
    tc__hfq *q;
    uint64_t *first; /* [q->n + 1]: each matrix's first item */
    uint64_t next, total;
} work;

static void *worker(void *arg)
{
    work *w = arg;
    size_t li = 0;
    for (;;) {
        uint64_t item = __atomic_fetch_add(&w->next, 1, __ATOMIC_RELAXED);
        if (item >= w->total)
            return NULL;
        while (w->first[li + 1] <= item)
            li++;
        const tc__hfq_linear *l = &w->q->lin[li];
        reader r = reader_of(w->cfg, l);
        uint64_t j0 = (item - w->first[li]) * ROWS_PER_ITEM,
                 j1 = j0 + ROWS_PER_ITEM < l->out ? j0 + ROWS_PER_ITEM : l->out;
        if (l->type == TC_GGML_F32)
            to_f32(&r, j0, j1);
        else if (l->perm)
            permuted(&r, j0, j1);
        else if (l->type == TC_GGML_Q8_0)
            packed8(&r, j0, j1);
        else if (w->cfg->method == TC_HF_QUANT_AWQ)
            awq4(&r, j0, j1);
        else
            packed4(&r, j0, j1);
    }
}

/* The items of q's matrices (their data set) repacked by up to 16 threads. */
static void run_workers(const tc_hf_quant *cfg, tc__hfq *q, uint64_t *first)
{
    work w = { cfg, q, first, 0, first[q->n] };
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int n_threads = cpus < 1 ? 1 : cpus > 16 ? 16 : (int)cpus, started = 0;
    pthread_t threads[16];
    while (started + 1 < n_threads && (uint64_t)started + 1 < w.total &&
           pthread_create(&threads[started], NULL, worker, &w) == 0)
        started++;
    worker(&w);
    for (int i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
}

tc_status tc__hfq_pack_host(const tc__hfq_linear *l, void *dst)
{
    tc__hfq_linear one = *l;
    one.data = dst;
    tc__hfq q = { &one, 1, 1 };
    uint64_t first[2] = { 0, (l->out + ROWS_PER_ITEM - 1) / ROWS_PER_ITEM };
    run_workers(l->cfg, &q, first);
    return TC_OK;
}

tc_status tc__hfq_pack_device(const tc__hfq_linear *l, tc_tensor *t, int64_t row0)
{
    const tc_hf_quant *cfg = l->cfg;
    reader r = reader_of(cfg, l);
    bool awq = cfg->method == TC_HF_QUANT_AWQ;
    const tc_safetensor *p = l->part;
    tc_dtype dt;
    if (!tc_ggml_dtype(l->type, &dt) || !tc_dtype_is_block(dt))
        return tc_set_error(TC_ERR_INTERNAL, "tc__hfq_pack_device",
                            "%s is held as %s, not in blocks", l->gguf, tc_ggml_type_name(l->type));
    tc__quant_pack_desc d = {
        .dtype = dt,
        .out = (int64_t)l->out,
        .in = (int64_t)l->in,
        .qw = r.qw,
        .qw_bytes = p[TC__HFQ_QWEIGHT].bytes,
        .qz = r.qz,
        .qz_bytes = r.qz ? p[TC__HFQ_QZEROS].bytes : 0,
        .sc = r.sc,
        .sc_bytes = p[TC__HFQ_SCALES].bytes,
        .g_idx = r.gi,
        .g_idx_bytes = r.gi ? p[TC__HFQ_G_IDX].bytes : 0,
        .perm = l->perm,
        .rows = l->rows,
        .wk = awq ? (int64_t)(l->out / 8) : (int64_t)r.wk,
        .wj = (int64_t)r.wj,
        .zg = awq ? (int64_t)p[TC__HFQ_QZEROS].dims[1] : (int64_t)r.zg,
        .zj = (int64_t)r.zj,
        .sg = (int64_t)r.sg,
        .sj = (int64_t)r.sj,
        .group = cfg->group_size,
        .kpack = awq ? 1 : r.pack,
        .jpack = awq ? 8 : 1,
        .bits = r.bits,
        .zpack = awq ? 8 : r.pack,
        .zero_offset = awq ? 0 : cfg->zero_offset,
        .sc_type = r.sc_type == TC_GGML_F16    ? 0
                   : r.sc_type == TC_GGML_BF16 ? 1
                                               : 2,
        .awq = awq,
    };
    return tc__quant_pack(t, row0, &d);
}

/* The matrix whose GGUF name is blk.<layer>.<role>.weight, or NULL. */
static tc__hfq_linear *find_role(tc__hfq *q, const char *layer, size_t len, const char *role)
{
    char name[64];
    snprintf(name, sizeof name, "%.*s%s.weight", (int)len, layer, role);
    for (size_t i = 0; i < q->n; i++)
        if (!strcmp(q->lin[i].gguf, name))
            return &q->lin[i];
    return NULL;
}

/* Where an act-order ffn_down's gate and up are act-order blocks too, their rows are held in
 * down's input order (each output is one row of both, so SwiGLU pairs them as before): down
 * then takes their product as it comes, with no gather before it (fed_in_order). Adds the row
 * orders' room in the buffer to *total; false without host memory. */
static bool order_ffn(tc__hfq *q, uint64_t *total)
{
    for (size_t i = 0; i < q->n; i++) {
        tc__hfq_linear *d = &q->lin[i];
        const char *dot = strstr(d->gguf, ".ffn_down.weight");
        if (!d->perm || !dot || strncmp(d->gguf, "blk.", 4))
            continue;
        size_t len = (size_t)(dot - d->gguf) + 1; /* "blk.N." */
        tc__hfq_linear *g = find_role(q, d->gguf, len, "ffn_gate"),
                       *u = find_role(q, d->gguf, len, "ffn_up");
        if (!g || !u || !g->perm || !u->perm || g->out != d->in || u->out != d->in || g->rows ||
            u->rows)
            continue;
        g->rows = tc_host_alloc(d->in * sizeof *g->rows);
        u->rows = tc_host_alloc(d->in * sizeof *u->rows);
        if (!g->rows || !u->rows)
            return false;
        memcpy(g->rows, d->perm, d->in * sizeof *g->rows);
        memcpy(u->rows, d->perm, d->in * sizeof *u->rows);
        d->fed_in_order = true;
        *total += 2 * ((d->in * sizeof *u->rows + 63) / 64 * 64);
    }
    return true;
}

/* The act-order matrices' input orders (choose's allocations) freed. */
static void free_orders(tc__hfq *q)
{
    for (size_t i = 0; i < q->n; i++) {
        tc_host_free(q->lin[i].perm);
        tc_host_free(q->lin[i].rows);
        q->lin[i].perm = NULL;
        q->lin[i].rows = NULL;
    }
}

tc_status tc__hfq_build(tc_hf_quant *cfg, tc__hfq *q, bool packed, void **buffer)
{
    *buffer = NULL;
    uint64_t total = 0, f32_bytes = 0;
    const char *why = NULL;
    for (size_t i = 0; i < q->n; i++) {
        tc__hfq_linear *l = &q->lin[i];
        tc_status st = check(cfg, l);
        if (st != TC_OK) {
            free_orders(q);
            return st;
        }
        choose(cfg, l);
        l->cfg = cfg;
        for (int p = 0; p < TC__HFQ_PARTS; p++)
            cfg->checkpoint_bytes += l->part[p].data ? l->part[p].bytes : 0;
        cfg->held_bytes += l->bytes;
        if (!packed || l->type == TC_GGML_F32)
            total += (l->bytes + 63) / 64 * 64;
        /* (the input order lives in the buffer beside the blocks: the view points at it) */
        if (l->perm) {
            total += (l->in * sizeof *l->perm + 63) / 64 * 64;
            cfg->held_bytes += l->in * sizeof *l->perm;
            cfg->n_permuted++;
        }
        if (l->type == TC_GGML_F32) {
            cfg->n_dequantised++;
            f32_bytes += l->bytes;
            why = why ? why : l->why;
        }
    }
    cfg->n_linear = (uint32_t)q->n;
    if (!order_ffn(q, &total)) {
        free_orders(q);
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, OP, "no host memory to order a feed-forward");
    }
    if (!total)
        return TC_OK;
    uint8_t *buf = tc_host_alloc(total);
    uint64_t *first = tc_host_alloc((q->n + 1) * sizeof *first);
    if (!buf || !first) {
        tc_host_free(buf);
        tc_host_free(first);
        free_orders(q);
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, OP,
                            "no host memory to repack %llu bytes of quantised weights",
                            (unsigned long long)total);
    }
    uint64_t off = 0;
    first[0] = 0;
    for (size_t i = 0; i < q->n; i++) {
        tc__hfq_linear *l = &q->lin[i];
        bool skip = packed && l->type != TC_GGML_F32;
        l->data = skip ? NULL : buf + off;
        off += skip ? 0 : (l->bytes + 63) / 64 * 64;
        first[i + 1] = first[i] + (skip ? 0 : (l->out + ROWS_PER_ITEM - 1) / ROWS_PER_ITEM);
        if (l->perm) {
            memcpy(buf + off, l->perm, l->in * sizeof *l->perm);
            tc_host_free(l->perm);
            l->perm = (uint32_t *)(void *)(buf + off);
            off += (l->in * sizeof *l->perm + 63) / 64 * 64;
        }
        if (l->rows) {
            memcpy(buf + off, l->rows, l->out * sizeof *l->rows);
            tc_host_free(l->rows);
            l->rows = (uint32_t *)(void *)(buf + off);
            off += (l->out * sizeof *l->rows + 63) / 64 * 64;
        }
    }
    run_workers(cfg, q, first);
    tc_host_free(first);
    *buffer = buf;
    if (cfg->n_permuted)
        TC_INFO("%s: %u of %u quantised matrices in activation order (desc_act): held as blocks "
                "over their inputs sorted by group, x's columns gathered to match",
                method_name(cfg), cfg->n_permuted, cfg->n_linear);
    if (cfg->n_dequantised)
        TC_INFO("%s: %u of %u quantised matrices dequantised to f32 on the host at load (%s; "
                "%.1f MiB) and placed as float weights",
                method_name(cfg), cfg->n_dequantised, cfg->n_linear, why,
                (double)f32_bytes / 1048576.0);
    return TC_OK;
}

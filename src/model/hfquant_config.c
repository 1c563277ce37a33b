/* config.json's quantization_config for GPTQ, AWQ and compressed-tensors folders: each field
 * read and checked, anything the loader does not do one error naming the field and its value.
 * The formats themselves are described in hfquant.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "model/hfquant.h"
#include "runtime/error.h"

static const char *const OP = "tc_hf_open";

/* The JSON text of v (for messages), at most cap - 1 characters. */
static const char *shown(json_t *v, char *buf, size_t cap)
{
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    snprintf(buf, cap, "%s", s ? s : "?");
    free(s);
    return buf;
}

static tc_status bad_field(const char *path, const char *field, json_t *v, const char *want)
{
    char buf[64];
    return tc_set_error(TC_ERR_UNSUPPORTED, OP,
                        "%s: quantization_config.%s is %s, which is not supported (%s)", path,
                        field, v ? shown(v, buf, sizeof buf) : "missing", want);
}

/* An optional boolean field: def when absent, an error when it is not a boolean. */
static tc_status opt_bool(json_t *qc, const char *path, const char *field, bool def, bool *out)
{
    json_t *v = json_object_get(qc, field);
    if (!v) {
        *out = def;
        return TC_OK;
    }
    if (!json_is_boolean(v))
        return bad_field(path, field, v, "true or false");
    *out = json_is_true(v);
    return TC_OK;
}

/* The first of two names a field goes by (transformers' and the quantiser's own). */
static json_t *either(json_t *qc, const char *a, const char *b, const char **name)
{
    json_t *v = json_object_get(qc, a);
    *name = v || !b ? a : b;
    return v ? v : b ? json_object_get(qc, b) : NULL;
}

static tc_status group_size(json_t *qc, const char *path, const char *a, const char *b,
                            bool per_column, tc_hf_quant *q)
{
    const char *name;
    json_t *v = either(qc, a, b, &name);
    json_int_t g = json_integer_value(v);
    if (!v)
        g = 128; /* optimum's and AutoAWQ's default */
    else if (!json_is_integer(v) ||
             !((g > 0 && g % 32 == 0 && g <= (1 << 20)) || (per_column && g == -1)))
        return bad_field(path, name, v,
                         per_column ? "-1 or a positive multiple of 32" : "a multiple of 32");
    q->group_size = (int)g;
    return TC_OK;
}

/* Field `key` of the object at field path `at` (NULL: quantization_config itself), for messages. */
static const char *path_of(const char *at, const char *key, char *buf, size_t cap)
{
    if (!at)
        return key;
    snprintf(buf, cap, "%s.%s", at, key);
    return buf;
}

/* A field that must be absent, null, false or empty ({} or []): what the loader does not do. */
static tc_status want_none(json_t *o, const char *path, const char *at, const char *key,
                           const char *want)
{
    char buf[160];
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v) || json_is_false(v) || (json_is_object(v) && !json_object_size(v)) ||
        (json_is_array(v) && !json_array_size(v)))
        return TC_OK;
    return bad_field(path, path_of(at, key, buf, sizeof buf), v, want);
}

/* A string field that must be `value`, or else absent or null where may_be_absent. */
static tc_status want_string(json_t *o, const char *path, const char *at, const char *key,
                             bool may_be_absent, const char *value, const char *want)
{
    char buf[160];
    json_t *v = json_object_get(o, key);
    const char *s = json_string_value(v);
    if ((may_be_absent && (!v || json_is_null(v))) || (s && !strcmp(s, value)))
        return TC_OK;
    return bad_field(path, path_of(at, key, buf, sizeof buf), v, want);
}

/* One config group's weights (compressed-tensors' QuantizationArgs) into q; `at` is their
 * field path for messages. */
static tc_status ct_weights(json_t *w, const char *path, const char *at, tc_hf_quant *q)
{
    char f[160];
    json_t *v = json_object_get(w, "num_bits");
    if (!json_is_integer(v) || (json_integer_value(v) != 4 && json_integer_value(v) != 8))
        return bad_field(path, path_of(at, "num_bits", f, sizeof f), v,
                         "compressed-tensors: 4 or 8");
    q->bits = (int)json_integer_value(v);
    TC_TRY(want_string(w, path, at, "type", false, "int", "int"));
    v = json_object_get(w, "symmetric");
    if (v && !json_is_boolean(v))
        return bad_field(path, path_of(at, "symmetric", f, sizeof f), v, "true or false");
    q->sym = !v || json_is_true(v);
    v = json_object_get(w, "strategy");
    const char *strategy = json_string_value(v);
    json_t *g = json_object_get(w, "group_size");
    if (strategy && !strcmp(strategy, "group")) {
        json_int_t gs = json_integer_value(g);
        if (!json_is_integer(g) || gs <= 0 || gs % 32 || gs > (1 << 20))
            return bad_field(path, path_of(at, "group_size", f, sizeof f), g,
                             "a positive multiple of 32");
        q->group_size = (int)gs;
    } else if (strategy && !strcmp(strategy, "channel")) {
        if (g && !json_is_null(g))
            return bad_field(path, path_of(at, "group_size", f, sizeof f), g,
                             "null with strategy channel");
        q->group_size = -1;
    } else {
        return bad_field(path, path_of(at, "strategy", f, sizeof f), v, "group or channel");
    }
    /* Activation order "weight" (alias "static") only changes the order GPTQ visits the
     * columns in, and the file is laid out as without it; "group" adds weight_g_idx, each
     * input's group, as GPTQ's desc_act does g_idx. */
    v = json_object_get(w, "actorder");
    const char *ao = json_string_value(v);
    if (v && !json_is_null(v) && !json_is_false(v) &&
        !(ao && (!strcmp(ao, "weight") || !strcmp(ao, "static") || !strcmp(ao, "group"))))
        return bad_field(path, path_of(at, "actorder", f, sizeof f), v,
                         "null, weight, static or group");
    q->desc_act = ao && !strcmp(ao, "group");
    TC_TRY(want_none(w, path, at, "dynamic", "false"));
    return want_none(w, path, at, "block_structure", "null");
}

/* compressed-tensors (vllm-project/compressed-tensors, as llm-compressor writes it for vLLM):
 * quantization_config {quant_method, format, quantization_status, config_groups: {name:
 * {targets, weights, input_activations, output_activations, format}}, ignore, kv_cache_scheme,
 * sparsity_config, transform_config}. Weight-only integer schemes in the pack-quantized format;
 * which modules are quantised is read from the tensors (module.weight_packed; an ignored
 * module has an ordinary module.weight), so targets and ignore need no matching here. */
static tc_status ct_config(json_t *qc, const char *path, tc_hf_quant *q)
{
    q->method = TC_HF_QUANT_CT;
    TC_TRY(want_string(qc, path, NULL, "format", false, "pack-quantized",
                       "compressed-tensors: pack-quantized"));
    snprintf(q->format, sizeof q->format, "pack-quantized");
    TC_TRY(want_string(qc, path, NULL, "quantization_status", true, "compressed", "compressed"));
    TC_TRY(want_none(qc, path, NULL, "kv_cache_scheme", "null: no KV cache quantisation"));
    TC_TRY(want_none(qc, path, NULL, "sparsity_config", "null or {}: no sparsity"));
    TC_TRY(want_none(qc, path, NULL, "transform_config", "null: no transforms"));
    json_t *groups = json_object_get(qc, "config_groups"), *grp;
    if (!json_is_object(groups) || !json_object_size(groups))
        return bad_field(path, "config_groups", groups, "an object of one or more schemes");
    const char *name;
    bool first = true;
    json_object_foreach(groups, name, grp)
    {
        char at[96], f[128];
        snprintf(at, sizeof at, "config_groups.%.60s", name);
        if (!json_is_object(grp))
            return bad_field(path, at, grp, "a scheme with weights (not a preset's targets)");
        TC_TRY(want_string(grp, path, at, "format", true, "pack-quantized", "pack-quantized"));
        TC_TRY(want_none(grp, path, at, "input_activations", "null: weight-only W4A16 or W8A16"));
        TC_TRY(want_none(grp, path, at, "output_activations", "null: weight-only W4A16 or W8A16"));
        json_t *w = json_object_get(grp, "weights");
        if (!json_is_object(w))
            return bad_field(path, path_of(at, "weights", f, sizeof f), w,
                             "an object of integer weight arguments");
        tc_hf_quant g = *q;
        TC_TRY(ct_weights(w, path, path_of(at, "weights", f, sizeof f), &g));
        if (!first && (g.bits != q->bits || g.sym != q->sym || g.group_size != q->group_size))
            return tc_set_error(TC_ERR_UNSUPPORTED, OP,
                                "%s: quantization_config.%s differs from the first config "
                                "group's (%d-bit, group %d, %s): one scheme for every group is "
                                "supported",
                                path, f, q->bits, q->group_size,
                                q->sym ? "symmetric" : "asymmetric");
        *q = g;
        first = false;
    }
    return TC_OK;
}

tc_status tc__hfq_config(json_t *config, const char *path, tc_hf_quant *q)
{
    memset(q, 0, sizeof *q);
    json_t *qc = json_object_get(config, "quantization_config");
    if (!qc)
        return TC_OK;
    if (!json_is_object(qc))
        return tc_set_error(TC_ERR_PARSE, OP, "%s: quantization_config is not an object", path);
    json_t *mv = json_object_get(qc, "quant_method");
    const char *method = json_string_value(mv), *name;
    if (method && !strcmp(method, "gptq")) {
        q->method = TC_HF_QUANT_GPTQ;
        json_t *v = either(qc, "bits", NULL, &name);
        if (!json_is_integer(v) || (json_integer_value(v) != 4 && json_integer_value(v) != 8))
            return bad_field(path, "bits", v, "GPTQ: 4 or 8");
        q->bits = (int)json_integer_value(v);
        TC_TRY(group_size(qc, path, "group_size", NULL, true, q));
        TC_TRY(opt_bool(qc, path, "sym", true, &q->sym));
        TC_TRY(opt_bool(qc, path, "desc_act", false, &q->desc_act));
        bool marlin = false;
        TC_TRY(opt_bool(qc, path, "is_marlin_format", false, &marlin));
        if (marlin)
            return bad_field(path, "is_marlin_format", json_object_get(qc, "is_marlin_format"),
                             "GPTQ checkpoints in AutoGPTQ's layout");
        /* transformers writes checkpoint_format, GPTQModel's own file says format. */
        v = either(qc, "checkpoint_format", "format", &name);
        const char *f = v ? json_string_value(v) : "gptq";
        if (!f || (strcmp(f, "gptq") && strcmp(f, "gptq_v2")))
            return bad_field(path, name, v, "gptq or gptq_v2");
        snprintf(q->format, sizeof q->format, "%s", f);
        q->zero_offset = strcmp(f, "gptq") ? 0 : 1;
        return TC_OK;
    }
    if (method && !strcmp(method, "awq")) {
        q->method = TC_HF_QUANT_AWQ;
        json_t *v = either(qc, "bits", "w_bit", &name);
        if (!json_is_integer(v) || json_integer_value(v) != 4)
            return bad_field(path, name, v, "AWQ: 4");
        q->bits = 4;
        TC_TRY(group_size(qc, path, "group_size", "q_group_size", false, q));
        bool zp = true;
        TC_TRY(opt_bool(qc, path, "zero_point", true, &zp));
        if (!zp)
            return bad_field(path, "zero_point", json_object_get(qc, "zero_point"), "AWQ: true");
        v = json_object_get(qc, "version");
        const char *ver = v ? json_string_value(v) : "gemm";
        if (!ver || strcasecmp(ver, "gemm"))
            return bad_field(path, "version", v, "AWQ: gemm");
        snprintf(q->format, sizeof q->format, "gemm");
        return TC_OK;
    }
    if (method && !strcmp(method, "compressed-tensors"))
        return ct_config(qc, path, q);
    return bad_field(path, "quant_method", mv, "gptq, awq or compressed-tensors");
}

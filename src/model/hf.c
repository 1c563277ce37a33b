/* Hugging Face folders. Safetensors (huggingface/safetensors, "format"): an 8-byte little-endian
 * header length N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}}, then
 * the data, offsets relative to its start. */
#define _GNU_SOURCE
#include "model/hf.h"
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "model/hfquant.h"
#include "model/internal.h"
#include "runtime/error.h"
#include "runtime/host.h"
#include "runtime/log.h"

#define MAX_HEADER (100u << 20)

tc_status tc_safetensors_parse(const void *buf, size_t bytes, const char *what,
                               tc_status (*fn)(void *ctx, const tc_safetensor *t), void *ctx)
{
    const char *op = "tc_safetensors";
    uint64_t n;
    if (bytes < 8)
        return tc_set_error(TC_ERR_PARSE, op, "%s: too short for a safetensors file", what);
    memcpy(&n, buf, 8);
    if (n > bytes - 8 || n > MAX_HEADER)
        return tc_set_error(TC_ERR_PARSE, op,
                            "%s: header of %llu bytes does not fit the file (%zu bytes) or the "
                            "100 MiB limit",
                            what, (unsigned long long)n, bytes);
    json_error_t err;
    json_t *h = json_loadb((const char *)buf + 8, (size_t)n, JSON_REJECT_DUPLICATES, &err);
    if (!h || !json_is_object(h)) {
        json_decref(h);
        return tc_set_error(TC_ERR_PARSE, op, "%s: header is not a JSON object (%s)", what,
                            h ? "not an object" : err.text);
    }
    const uint8_t *data = (const uint8_t *)buf + 8 + n;
    uint64_t data_bytes = bytes - 8 - n;
    const char *key;
    json_t *v;
    tc_status st = TC_OK;
    /* Each tensor's bytes and name, to check that no two share a byte (tc__spans_overlap). */
    size_t n_spans = 0;
    tc__span *spans = tc_host_alloc(sizeof *spans * (json_object_size(h) + 1));
    const char **names = tc_host_alloc(sizeof *names * (json_object_size(h) + 1));
    if (!spans || !names) {
        tc_host_free(spans), tc_host_free(names);
        json_decref(h);
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "%s: no host memory", what);
    }
    json_object_foreach(h, key, v)
    {
        if (!strcmp(key, "__metadata__"))
            continue;
        tc_safetensor t = { .name = key };
        const char *dt = json_string_value(json_object_get(v, "dtype"));
        json_t *shape = json_object_get(v, "shape"), *off = json_object_get(v, "data_offsets");
        uint64_t es = 0;
        if (!dt || !json_is_array(shape) || !json_is_array(off) || json_array_size(off) != 2) {
            st = tc_set_error(TC_ERR_PARSE, op,
                              "%s: tensor '%.80s' lacks dtype, shape or data_offsets", what, key);
            break;
        }
        if (!strcmp(dt, "F32"))
            t.type = TC_GGML_F32, es = 4;
        else if (!strcmp(dt, "F16"))
            t.type = TC_GGML_F16, es = 2;
        else if (!strcmp(dt, "BF16"))
            t.type = TC_GGML_BF16, es = 2;
        else if (!strcmp(dt, "I32"))
            t.type = TC_GGML_I32, es = 4;
        else if (!strcmp(dt, "I64"))
            t.type = TC_GGML_I64, es = 8;
        else {
            st = tc_set_error(
                TC_ERR_UNSUPPORTED, op,
                "%s: tensor '%.80s' has dtype %.16s (F32, F16, BF16, I32 and I64 are supported)",
                what, key, dt);
            break;
        }
        if (json_array_size(shape) > 4) {
            st = tc_set_error(TC_ERR_UNSUPPORTED, op,
                              "%s: tensor '%.80s' has more than 4 dimensions", what, key);
            break;
        }
        t.n_dims = (int)json_array_size(shape);
        uint64_t numel = 1;
        for (int d = 0; d < t.n_dims; d++) {
            json_t *x = json_array_get(shape, (size_t)d);
            json_int_t k = json_integer_value(x);
            if (!json_is_integer(x) || k < 0 || (k && numel > (UINT64_MAX >> 4) / (uint64_t)k)) {
                st = tc_set_error(TC_ERR_PARSE, op, "%s: tensor '%.80s' has an invalid shape", what,
                                  key);
                break;
            }
            t.dims[d] = (uint64_t)k;
            numel *= (uint64_t)k;
        }
        if (st != TC_OK)
            break;
        json_t *b0 = json_array_get(off, 0), *b1 = json_array_get(off, 1);
        json_int_t begin = json_integer_value(b0), end = json_integer_value(b1);
        if (!json_is_integer(b0) || !json_is_integer(b1) || begin < 0 || end < begin ||
            (uint64_t)end > data_bytes || (uint64_t)(end - begin) != numel * es) {
            st = tc_set_error(TC_ERR_PARSE, op,
                              "%s: tensor '%.80s' data_offsets [%lld, %lld] do not match its shape "
                              "(%llu bytes) or lie outside the data (%llu bytes)",
                              what, key, (long long)begin, (long long)end,
                              (unsigned long long)(numel * es), (unsigned long long)data_bytes);
            break;
        }
        t.data = data + begin;
        t.bytes = (uint64_t)(end - begin);
        if (end > begin) {
            names[n_spans] = key;
            spans[n_spans] = (tc__span){ (uint64_t)begin, (uint64_t)end, n_spans };
            n_spans++;
        }
        if ((st = fn(ctx, &t)) != TC_OK)
            break;
    }
    size_t i = st == TC_OK ? tc__spans_overlap(spans, n_spans) : 0;
    if (i)
        st = tc_set_error(TC_ERR_PARSE, op,
                          "%s: tensors '%.80s' and '%.80s' share bytes of the data", what,
                          names[spans[i - 1].ref], names[spans[i].ref]);
    tc_host_free(spans), tc_host_free(names);
    json_decref(h);
    return st;
}

/* ---------------------------------------------------------------- the folder */

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = tc_host_alloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static bool exists(const char *path)
{
    return access(path, R_OK) == 0;
}

/* GGUF's name for a Hugging Face Llama tensor: 1; 0 for one the model does not use; -1 for
 * one of a layer from n_layers on (a checkpoint that config.json cuts short). Layer numbers
 * are plain decimals ("model.layers.7.", not "07." or "+7."), so that no two names map to
 * one. */
static int gguf_name(const char *hf, int64_t n_layers, char *out, size_t cap)
{
    static const struct {
        const char *hf, *gguf;
    } top[] = { { "model.embed_tokens.weight", "token_embd.weight" },
                { "model.norm.weight", "output_norm.weight" },
                { "lm_head.weight", "output.weight" } },
      layer[] = { { "input_layernorm.weight", "attn_norm.weight" },
                  { "self_attn.q_proj.weight", "attn_q.weight" },
                  { "self_attn.k_proj.weight", "attn_k.weight" },
                  { "self_attn.v_proj.weight", "attn_v.weight" },
                  { "self_attn.o_proj.weight", "attn_output.weight" },
                  { "self_attn.q_proj.bias", "attn_q.bias" },
                  { "self_attn.k_proj.bias", "attn_k.bias" },
                  { "self_attn.v_proj.bias", "attn_v.bias" },
                  { "post_attention_layernorm.weight", "ffn_norm.weight" },
                  { "mlp.gate_proj.weight", "ffn_gate.weight" },
                  { "mlp.up_proj.weight", "ffn_up.weight" },
                  { "mlp.down_proj.weight", "ffn_down.weight" } };
    for (size_t i = 0; i < sizeof top / sizeof *top; i++)
        if (!strcmp(hf, top[i].hf)) {
            snprintf(out, cap, "%s", top[i].gguf);
            return 1;
        }
    static const char prefix[] = "model.layers.";
    if (strncmp(hf, prefix, sizeof prefix - 1))
        return 0;
    const char *p = hf + sizeof prefix - 1, *digits = p;
    int64_t l = 0; /* (it stops growing once past the layers) */
    for (; *p >= '0' && *p <= '9'; p++)
        if (l < n_layers)
            l = 10 * l + (*p - '0');
    if (p == digits || *p != '.' || (*digits == '0' && p - digits > 1))
        return 0;
    for (size_t i = 0; i < sizeof layer / sizeof *layer; i++)
        if (!strcmp(p + 1, layer[i].hf)) {
            if (l >= n_layers)
                return -1;
            snprintf(out, cap, "blk.%lld.%s", (long long)l, layer[i].gguf);
            return 1;
        }
    return 0;
}

typedef struct collect {
    tc_hf *hf;
    uint64_t cap_tensors;
    size_t names_used, names_cap;
    tc__hfq quant;   /* the parts of quantised matrices, until they are repacked */
    uint64_t beyond; /* tensors of layers past config.json's count, left unread */
} collect;

/* Add a tensor to the view under GGUF name `name`; dims outermost first. */
static tc_status view_add(collect *c, const char *name, int n_dims, const uint64_t *dims,
                          tc_ggml_type type, const void *data, uint64_t bytes)
{
    tc_hf *hf = c->hf;
    if (hf->view.n_tensors == c->cap_tensors) {
        uint64_t cap = c->cap_tensors ? 2 * c->cap_tensors : 64;
        tc_gguf_tensor *nt = tc_host_realloc(hf->view.tensors, cap * sizeof *nt);
        if (!nt)
            return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_hf_open", "no host memory");
        hf->view.tensors = nt;
        c->cap_tensors = cap;
    }
    size_t len = strlen(name);
    if (c->names_used + len + 1 > c->names_cap)
        return tc_set_error(TC_ERR_INTERNAL, "tc_hf_open", "name storage exhausted");
    for (uint64_t i = 0; i < hf->view.n_tensors; i++)
        if (!strcmp(hf->view.tensors[i].name.ptr, name))
            return tc_set_error(TC_ERR_PARSE, "tc_hf_open", "tensor %s appears twice", name);
    char *dst = hf->names + c->names_used;
    memcpy(dst, name, len + 1);
    c->names_used += len + 1;
    tc_gguf_tensor *g = &hf->view.tensors[hf->view.n_tensors];
    memset(g, 0, sizeof *g);
    g->name = (tc_gguf_str){ dst, len };
    g->n_dims = n_dims ? n_dims : 1;
    g->n_elements = 1;
    for (int d = 0; d < 4; d++)
        g->dims[d] = 1;
    for (int d = 0; d < n_dims; d++) {
        g->dims[d] = dims[n_dims - 1 - d]; /* GGUF order: innermost first */
        g->n_elements *= dims[n_dims - 1 - d];
    }
    g->type = type;
    g->data = data;
    g->bytes = bytes;
    hf->view.n_tensors++;
    return TC_OK;
}

static tc_status add_tensor(void *ctx, const tc_safetensor *t)
{
    collect *c = ctx;
    char name[160], module[128], weight[160];
    int which;
    bool ct;
    int64_t n_layers = c->hf->cfg.n_layers;
    int known = gguf_name(t->name, n_layers, name, sizeof name);
    if (known > 0)
        return view_add(c, name, t->n_dims, t->dims, t->type, t->data, t->bytes);
    if (known == 0 && tc__hfq_part(t->name, module, sizeof module, &which, &ct)) {
        snprintf(weight, sizeof weight, "%s.weight", module);
        known = gguf_name(weight, n_layers, name, sizeof name);
    }
    if (known < 0)
        c->beyond++;
    if (known <= 0)
        return TC_OK; /* a module the model does not use (or rotary_emb.inv_freq: recomputed) */
    if (c->hf->quant.method == TC_HF_QUANT_NONE) {
        if (which != TC__HFQ_QWEIGHT)
            return TC_OK;
        return tc_set_error(TC_ERR_PARSE, "tc_hf_open",
                            "tensor %s is a quantised weight, but config.json has no "
                            "quantization_config",
                            t->name);
    }
    return tc__hfq_add(&c->hf->quant, &c->quant, module, name, which, ct, t);
}

/* An order of l's inputs or rows (n I32) under "<l's name less .weight>.<suffix>". */
static tc_status add_order(collect *c, const tc__hfq_linear *l, const char *suffix, uint64_t n,
                           const uint32_t *order)
{
    char name[80];
    size_t stem = strlen(l->gguf) - strlen(".weight");
    snprintf(name, sizeof name, "%.*s.%s", (int)stem, l->gguf, suffix);
    return view_add(c, name, 1, &n, TC_GGML_I32, order, n * sizeof *order);
}

/* Repack the quantised matrices collected while mapping and add them to the view. */
static tc_status add_quantised(collect *c, bool packed)
{
    tc_hf *hf = c->hf;
    TC_TRY(tc__hfq_build(&hf->quant, &c->quant, packed, &hf->repacked));
    for (size_t i = 0; i < c->quant.n; i++) {
        const tc__hfq_linear *l = &c->quant.lin[i];
        uint64_t dims[2] = { l->out, l->in };
        TC_TRY(view_add(c, l->gguf, 2, dims, l->type, l->data, l->bytes));
        if (!l->data)
            hf->view.tensors[hf->view.n_tensors - 1].packed = l;
        /* act-order: the inputs' order, "blk.N.attn_q.in_perm" beside "...attn_q.weight",
         * which the model gathers x's columns by; "in_order" where the matrices before it
         * already give x in that order, and "out_perm" for rows held in another order (those
         * two for tools that compare with the checkpoint: the model needs nothing for them) */
        if (l->perm)
            TC_TRY(add_order(c, l, l->fed_in_order ? "in_order" : "in_perm", l->in, l->perm));
        if (l->rows)
            TC_TRY(add_order(c, l, "out_perm", l->out, l->rows));
    }
    if (packed) { /* the view points into the list from here on */
        hf->packed = c->quant.lin;
        hf->n_packed = c->quant.n;
        memset(&c->quant, 0, sizeof c->quant);
    }
    return TC_OK;
}

static tc_status map_file(tc_hf *hf, const char *path, collect *c)
{
    void *map;
    size_t bytes;
    TC_TRY(tc__map_file("tc_hf_open", path, "not a safetensors file (under 8 bytes)", 8, &map,
                        &bytes));
    void **maps = tc_host_realloc(hf->maps, sizeof *maps * (size_t)(hf->n_maps + 1));
    size_t *sizes = tc_host_realloc(hf->map_bytes, sizeof *sizes * (size_t)(hf->n_maps + 1));
    if (maps)
        hf->maps = maps;
    if (sizes)
        hf->map_bytes = sizes;
    if (!maps || !sizes) {
        tc__unmap_file(map, bytes);
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_hf_open", "no host memory");
    }
    hf->maps[hf->n_maps] = map;
    hf->map_bytes[hf->n_maps++] = bytes;
    return tc_safetensors_parse(map, bytes, path, add_tensor, c);
}

static bool get_int(json_t *o, const char *k, int64_t lo, int64_t hi, int64_t *v)
{
    json_t *x = json_object_get(o, k);
    if (!json_is_integer(x))
        return false;
    *v = json_integer_value(x);
    return *v >= lo && *v <= hi;
}

static tc_status read_config(tc_hf *hf, const char *path)
{
    const char *op = "tc_hf_open";
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    if (!j)
        return tc_set_error(TC_ERR_PARSE, op, "%s: %s (line %d)", path, err.text, err.line);
    tc_llama_config *c = &hf->cfg;
    memset(c, 0, sizeof *c);
    tc_status st = TC_OK;
    const char *mt = json_string_value(json_object_get(j, "model_type"));
    snprintf(c->arch, sizeof c->arch, "%s", mt ? mt : "(none)");
    bool qwen2 = mt && !strcmp(mt, "qwen2");
    if (!mt || (strcmp(mt, "llama") && strcmp(mt, "mistral") && !qwen2)) {
        st = tc_set_error(TC_ERR_UNSUPPORTED, op,
                          "unsupported architecture '%s' in %s (supported: llama, mistral, qwen2)",
                          c->arch, path);
        goto done;
    }
    /* Llama's optional biases (on every attention projection, or on the MLP's) are not held;
     * Qwen2's on q, k and v are. */
    if (json_is_true(json_object_get(j, "attention_bias")) ||
        json_is_true(json_object_get(j, "mlp_bias"))) {
        st = tc_set_error(TC_ERR_UNSUPPORTED, op,
                          "%s: attention_bias and mlp_bias are not supported (Qwen2's q/k/v "
                          "biases are)",
                          path);
        goto done;
    }
    c->qkv_bias = qwen2;
    const char *np = json_string_value(json_object_get(j, "_name_or_path"));
    snprintf(c->name, sizeof c->name, "%s", np ? np : "");
    int64_t v;
#define NEED(key, lo, hi, field)                                                               \
    if (!get_int(j, key, lo, hi, &v)) {                                                        \
        st = tc_set_error(TC_ERR_PARSE, op, "%s: '%s' is missing or outside %lld..%lld", path, \
                          key, (long long)(lo), (long long)(hi));                              \
        goto done;                                                                             \
    }                                                                                          \
    c->field = (int)v
    NEED("hidden_size", 1, 1 << 16, dim);
    NEED("intermediate_size", 1, 1 << 18, ffn_dim);
    NEED("num_hidden_layers", 1, 1024, n_layers);
    NEED("num_attention_heads", 1, 1024, n_heads);
    NEED("vocab_size", 1, INT32_MAX - 1, vocab);
#undef NEED
    c->n_kv_heads = get_int(j, "num_key_value_heads", 1, c->n_heads, &v) ? (int)v : c->n_heads;
    /* The head size: head_dim where the configuration gives one (it may differ from
     * hidden_size / heads, as in Mistral-Nemo and Qwen3), else that quotient. */
    json_t *hd = json_object_get(j, "head_dim");
    if (hd && !json_is_null(hd) && !get_int(j, "head_dim", 2, 1024, &v)) {
        st = tc_set_error(TC_ERR_PARSE, op, "%s: head_dim is not an integer in 2..1024", path);
        goto done;
    }
    if (c->n_heads % c->n_kv_heads || (!json_is_integer(hd) && c->dim % c->n_heads)) {
        st = tc_set_error(TC_ERR_PARSE, op,
                          "%s: %d heads, %d KV heads and dimension %d do not divide", path,
                          c->n_heads, c->n_kv_heads, c->dim);
        goto done;
    }
    c->head_dim = json_is_integer(hd) ? (int)v : c->dim / c->n_heads;
    if (c->head_dim % 2) {
        st = tc_set_error(TC_ERR_UNSUPPORTED, op, "%s: head size %d is odd (rotary pairs)", path,
                          c->head_dim);
        goto done;
    }
    /* The sliding window: sliding_window (null: none), on every layer, unless transformers'
     * layer_types names the layers that have it, or (Qwen2, without layer_types) it applies only
     * with use_sliding_window and then from layer max_window_layers on. A window on some layers
     * only is not supported. */
    int64_t window = get_int(j, "sliding_window", 1, INT32_MAX, &v) ? v : 0;
    int64_t n_layers = c->n_layers, from = 0; /* the first layer with the window */
    json_t *lt = json_object_get(j, "layer_types"), *e;
    size_t li, n_sliding = 0;
    json_array_foreach(lt, li, e) n_sliding +=
        !strcmp(json_string_value(e) ?: "", "sliding_attention");
    if (json_array_size(lt) > 0)
        from = n_sliding == 0 ? n_layers : n_sliding == json_array_size(lt) ? 0 : -1;
    else if (qwen2 && !json_is_true(json_object_get(j, "use_sliding_window")))
        from = n_layers;
    else if (qwen2)
        from = get_int(j, "max_window_layers", 0, INT32_MAX, &v) ? v : 28;
    if (window > 0 && from != 0 && from < n_layers) {
        st = tc_set_error(TC_ERR_UNSUPPORTED, op,
                          "%s: sliding-window attention on some layers only (layer_types, "
                          "use_sliding_window) is not supported",
                          path);
        goto done;
    }
    c->window = from == 0 ? (int)window : 0;
    c->max_positions = get_int(j, "max_position_embeddings", 1, INT32_MAX, &v) ? (int)v : 4096;
    json_t *eps = json_object_get(j, "rms_norm_eps");
    c->norm_eps = json_is_number(eps) && json_number_value(eps) > 0 && json_number_value(eps) < 1
                      ? (float)json_number_value(eps)
                      : 1e-5f;
    json_t *rp = json_object_get(j, "rope_scaling");
    if (!json_is_object(rp))
        rp = json_object_get(j, "rope_parameters");
    json_t *theta = json_object_get(j, "rope_theta");
    if (!json_is_number(theta))
        theta = json_object_get(rp, "rope_theta");
    c->rope.head_dim = c->head_dim;
    c->rope.theta =
        json_is_number(theta) && json_number_value(theta) > 1 ? json_number_value(theta) : 10000.0;
    c->rope.interleaved = false; /* Hugging Face's rotate_half */
    const char *rt = json_string_value(json_object_get(rp, "rope_type"));
    if (!rt)
        rt = json_string_value(json_object_get(rp, "type"));
    if (rt && !strcmp(rt, "llama3")) {
        c->rope.scaling = TC_ROPE_LLAMA3;
        c->rope.factor = json_number_value(json_object_get(rp, "factor"));
        c->rope.low_freq_factor = json_number_value(json_object_get(rp, "low_freq_factor"));
        c->rope.high_freq_factor = json_number_value(json_object_get(rp, "high_freq_factor"));
        c->rope.original_max_position =
            json_number_value(json_object_get(rp, "original_max_position_embeddings"));
        if (!(c->rope.factor >= 1 && c->rope.low_freq_factor > 0 &&
              c->rope.high_freq_factor > c->rope.low_freq_factor &&
              c->rope.original_max_position > 0)) {
            st = tc_set_error(TC_ERR_PARSE, op, "%s: incomplete llama3 rope_scaling", path);
            goto done;
        }
    } else if (rt && strcmp(rt, "default")) {
        st = tc_set_error(TC_ERR_UNSUPPORTED, op, "%s: rope scaling '%s' is not supported", path,
                          rt);
        goto done;
    }
    c->tied_embeddings = json_is_true(json_object_get(j, "tie_word_embeddings"));
    st = tc__hfq_config(j, path, &hf->quant);
done:
    json_decref(j);
    return st;
}

/* The chat template: chat_template.jinja, else tokenizer_config.json's chat_template (a string
 * or a list of {name, template}, "default" first). */
static void read_template(tc_hf *hf, const char *dir)
{
    char *p = join(dir, "chat_template.jinja");
    FILE *f = p ? fopen(p, "rb") : NULL;
    tc_host_free(p);
    if (f) {
        char *buf = tc_host_alloc(1 << 20);
        size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
        fclose(f);
        if (buf) {
            buf[n] = 0;
            hf->chat_template = buf;
        }
        return;
    }
    if (!hf->tokenizer_config)
        return;
    json_t *j = json_load_file(hf->tokenizer_config, 0, NULL),
           *t = json_object_get(j, "chat_template"), *e;
    const char *s = json_string_value(t);
    size_t i;
    if (json_is_array(t))
        json_array_foreach(
            t, i,
            e) if (!s || !strcmp(json_string_value(json_object_get(e, "name")) ?: "", "default"))
            s = json_string_value(json_object_get(e, "template"));
    if (s) {
        hf->chat_template = tc_host_alloc(strlen(s) + 1);
        if (hf->chat_template)
            strcpy(hf->chat_template, s);
    }
    json_decref(j);
}

static tc_status open_dir(tc_hf *hf, const char *dir, bool packed, int max_block)
{
    const char *op = "tc_hf_open";
    memset(hf, 0, sizeof *hf);
    tc_status st = TC_OK;
    char *cfg = join(dir, "config.json"), *single = join(dir, "model.safetensors"),
         *index = join(dir, "model.safetensors.index.json");
    hf->tokenizer_json = join(dir, "tokenizer.json");
    hf->tokenizer_config = join(dir, "tokenizer_config.json");
    json_t *ij = NULL;
    collect c = { hf, 0, 0, 0, { 0 }, 0 };
    if (!cfg || !single || !index || !hf->tokenizer_json || !hf->tokenizer_config) {
        st = tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no host memory");
        goto done;
    }
    if (!exists(cfg)) {
        st = tc_set_error(TC_ERR_NOT_FOUND, op, "%s has no config.json", dir);
        goto done;
    }
    TC_CHECK(st, read_config(hf, cfg));
    hf->quant.max_block = max_block;
    if (!exists(hf->tokenizer_json)) {
        tc_host_free(hf->tokenizer_json);
        hf->tokenizer_json = NULL;
    }
    if (!exists(hf->tokenizer_config)) {
        tc_host_free(hf->tokenizer_config);
        hf->tokenizer_config = NULL;
    }
    c.names_cap = 64 * (size_t)(hf->cfg.n_layers * 22 + 8);
    hf->names = tc_host_alloc(c.names_cap);
    if (!hf->names) {
        st = tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no host memory");
        goto done;
    }
    if (exists(index)) {
        json_error_t err;
        ij = json_load_file(index, 0, &err);
        json_t *wm = json_object_get(ij, "weight_map");
        if (!json_is_object(wm)) {
            st =
                tc_set_error(TC_ERR_PARSE, op, "%s: no weight_map (%s)", index, ij ? "" : err.text);
            goto done;
        }
        /* Each shard once, in the order first named. */
        const char *key;
        json_t *v, *seen = json_object();
        json_object_foreach(wm, key, v)
        {
            const char *file = json_string_value(v);
            if (!file || strchr(file, '/') || json_object_get(seen, file))
                continue;
            json_object_set_new(seen, file, json_true());
            char *p = join(dir, file);
            st = p ? map_file(hf, p, &c) : tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no host memory");
            tc_host_free(p);
            if (st != TC_OK)
                break;
        }
        json_decref(seen);
        if (st != TC_OK)
            goto done;
    } else if (exists(single)) {
        TC_CHECK(st, map_file(hf, single, &c));
    } else {
        st = tc_set_error(TC_ERR_NOT_FOUND, op,
                          "%s has neither model.safetensors nor model.safetensors.index.json", dir);
        goto done;
    }
    if (c.beyond)
        TC_WARN("%s: %llu tensors of layers from num_hidden_layers (%d) on are not read", dir,
                (unsigned long long)c.beyond, hf->cfg.n_layers);
    if (hf->quant.method != TC_HF_QUANT_NONE)
        TC_CHECK(st, add_quantised(&c, packed));
    /* The loader checks each tensor's presence and shape by name. */
    read_template(hf, dir);
done:
fail:
    tc__hfq_free(&c.quant);
    json_decref(ij);
    tc_host_free(cfg);
    tc_host_free(single);
    tc_host_free(index);
    if (st != TC_OK)
        tc_hf_close(hf);
    return st;
}

tc_status tc_hf_open(tc_hf *hf, const char *dir)
{
    return open_dir(hf, dir, false, 0);
}

tc_status tc_hf_open_packed(tc_hf *hf, const char *dir)
{
    return tc_hf_open_packed_ex(hf, dir, 0);
}

tc_status tc_hf_open_packed_ex(tc_hf *hf, const char *dir, int max_block)
{
    if (max_block < 0) {
        memset(hf, 0, sizeof *hf); /* (closing it stays a no-op) */
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, "tc_hf_open",
                            "max_block is %d; want 0 or more", max_block);
    }
    return open_dir(hf, dir, true, max_block);
}

void tc_hf_close(tc_hf *hf)
{
    if (!hf)
        return;
    tc__hfq q = { hf->packed, hf->n_packed, hf->n_packed };
    tc__hfq_free(&q);
    for (int i = 0; i < hf->n_maps; i++)
        tc__unmap_file(hf->maps[i], hf->map_bytes[i]);
    tc_host_free(hf->maps);
    tc_host_free(hf->map_bytes);
    tc_host_free(hf->view.tensors);
    tc_host_free(hf->names);
    tc_host_free(hf->repacked);
    tc_host_free(hf->chat_template);
    tc_host_free(hf->tokenizer_json);
    tc_host_free(hf->tokenizer_config);
    memset(hf, 0, sizeof *hf);
}

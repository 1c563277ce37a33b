/* Malformed model files: each gives one clear error (checked by its words) and no crash.
 * GGUF and safetensors images are built here, byte by byte, from a tiny valid Llama, then
 * broken one way at a time: truncation, wrong magic or version, huge counts, unknown types,
 * an unsupported architecture, a missing tensor, a wrong shape, an unsupported dtype. */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "model/gguf.h"
#include "model/hf.h"
#include "model/llama.h"

/* A growable byte buffer. */
typedef struct buf {
    uint8_t *p;
    size_t n;
} buf;
static void put(buf *b, const void *src, size_t n)
{
    b->p = realloc(b->p, b->n + n);
    assert_non_null(b->p);
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void u32(buf *b, uint32_t v)
{
    put(b, &v, 4);
}
static void u64(buf *b, uint64_t v)
{
    put(b, &v, 8);
}
static void str(buf *b, const char *s)
{
    u64(b, strlen(s));
    put(b, s, strlen(s));
}

/* The tiny model: 1 layer, dim 8, 2 heads (1 KV head), ffn 16, vocabulary 4. */
typedef struct tensor {
    const char *name;
    uint64_t rows, cols; /* rows 0: a vector */
    uint32_t type;       /* ggml type: f32 (0) unless a case changes it */
    const void *data;    /* (extra tensors: their bytes) */
} tensor;
static const tensor llama[] = {
    { "token_embd.weight", 4, 8, 0, NULL },        { "output_norm.weight", 0, 8, 0, NULL },
    { "blk.0.attn_norm.weight", 0, 8, 0, NULL },   { "blk.0.attn_q.weight", 8, 8, 0, NULL },
    { "blk.0.attn_k.weight", 4, 8, 0, NULL },      { "blk.0.attn_v.weight", 4, 8, 0, NULL },
    { "blk.0.attn_output.weight", 8, 8, 0, NULL }, { "blk.0.ffn_norm.weight", 0, 8, 0, NULL },
    { "blk.0.ffn_gate.weight", 16, 8, 0, NULL },   { "blk.0.ffn_up.weight", 16, 8, 0, NULL },
    { "blk.0.ffn_down.weight", 8, 16, 0, NULL },
};
#define N_TENSORS (sizeof llama / sizeof *llama)

/* Build a GGUF of the tiny model; `skip` drops a tensor, `edit` changes one (by index).
 * `align` (0: none, the default of 32) is written as general.alignment, after a string of
 * `filler` bytes that moves where the tensor data begins. The n_extra vectors of `extra`
 * follow the model's tensors, with their own bytes. */
static buf gguf_build(const char *arch, int skip, int edit, tensor edited, uint32_t align,
                      size_t filler, const tensor *extra, int n_extra)
{
    buf b = { 0 };
    u32(&b, 0x46554747u);
    u32(&b, 3);
    u64(&b, N_TENSORS - (skip >= 0) + (uint64_t)n_extra);
    u64(&b, align ? 8 : 6);
    if (align) {
        str(&b, "general.alignment");
        u32(&b, 4);
        u32(&b, align);
        str(&b, "test.filler");
        u32(&b, 8);
        u64(&b, filler);
        for (size_t i = 0; i < filler; i++)
            put(&b, "x", 1);
    }
    char key[64];
    str(&b, "general.architecture");
    u32(&b, 8);
    str(&b, arch);
    const char *keys[] = { "block_count", "embedding_length", "feed_forward_length",
                           "attention.head_count", "attention.head_count_kv" };
    uint32_t vals[] = { 1, 8, 16, 2, 1 };
    for (int i = 0; i < 5; i++) {
        snprintf(key, sizeof key, "%s.%s", arch, keys[i]);
        str(&b, key);
        u32(&b, 4);
        u32(&b, vals[i]);
    }
    uint64_t offset = 0;
    uint64_t sizes[N_TENSORS];
    for (size_t i = 0; i < N_TENSORS; i++) {
        tensor t = (int)i == edit ? edited : llama[i];
        uint64_t n = (t.rows ? t.rows : 1) * t.cols;
        sizes[i] = t.type == 24 ? n : 4 * n; /* i8 or f32 */
        if ((int)i == skip)
            continue;
        str(&b, t.name);
        u32(&b, t.rows ? 2 : 1);
        u64(&b, t.cols);
        if (t.rows)
            u64(&b, t.rows);
        u32(&b, t.type);
        u64(&b, offset);
        offset += (sizes[i] + 31) / 32 * 32;
    }
    for (int i = 0; i < n_extra; i++) {
        str(&b, extra[i].name);
        u32(&b, 1);
        u64(&b, extra[i].cols);
        u32(&b, extra[i].type);
        u64(&b, offset);
        offset += (4 * extra[i].cols + 31) / 32 * 32; /* (4-byte elements) */
    }
    while (b.n % (align ? align : 32))
        put(&b, "", 1);
    for (size_t i = 0; i < N_TENSORS; i++) {
        if ((int)i == skip)
            continue;
        for (uint64_t k = 0; k < (sizes[i] + 31) / 32 * 32; k += 4) {
            float v = 0.01f * (float)(k % 97) + 0.5f;
            put(&b, &v, 4);
        }
    }
    for (int i = 0; i < n_extra; i++) {
        put(&b, extra[i].data, 4 * extra[i].cols);
        for (uint64_t k = 4 * extra[i].cols; k % 32; k++)
            put(&b, "", 1);
    }
    return b;
}

static buf gguf_image(const char *arch, int skip, int edit, tensor edited)
{
    return gguf_build(arch, skip, edit, edited, 0, 0, NULL, 0);
}

/* Load the image as a model on the CPU; returns the status and leaves tc_last_error(). */
static tc_status load(buf *b)
{
    tc_gguf g;
    tc_status st = tc_gguf_parse(&g, b->p, b->n);
    if (st != TC_OK)
        return st;
    tc_backend *cpu;
    assert_int_equal(tc_backend_create_cpu(1, &cpu), TC_OK);
    tc_llama_options o = { .max_context = 32, .max_tokens = 8 };
    tc_llama *m = NULL;
    st = tc_llama_load_gguf(&g, cpu, &o, &m);
    tc_llama_destroy(m);
    tc_backend_destroy(cpu);
    tc_gguf_close(&g);
    return st;
}

#define EXPECT_ERROR(expr, code, words)                                                \
    do {                                                                               \
        tc_status st_ = (expr);                                                        \
        if (st_ != (code) || !strstr(tc_last_error(), (words)))                        \
            fail_msg("%s: got %s '%s', want %s with '%s'", #expr, tc_status_name(st_), \
                     st_ ? tc_last_error() : "", tc_status_name(code), (words));       \
    } while (0)

static void valid_tiny_gguf_loads(void **state)
{
    (void)state;
    buf b = gguf_image("llama", -1, -1, llama[0]);
    assert_int_equal(load(&b), TC_OK);
    free(b.p);
}

/* Load the image on the CPU, run tokens 1, 2, 3 through it and copy the last row's logits. */
static void tiny_logits(buf *b, float out[4])
{
    tc_gguf g;
    assert_int_equal(tc_gguf_parse(&g, b->p, b->n), TC_OK);
    tc_backend *cpu;
    assert_int_equal(tc_backend_create_cpu(1, &cpu), TC_OK);
    tc_llama_options o = { .max_context = 32, .max_tokens = 8 };
    tc_llama *m = NULL;
    assert_int_equal(tc_llama_load_gguf(&g, cpu, &o, &m), TC_OK);
    tc_kv_cache kv;
    assert_int_equal(tc_kv_cache_init(&kv, m, 2, 16), TC_OK);
    int32_t ids[3] = { 1, 2, 3 }, pos[3] = { 0, 1, 2 }, q_start[2] = { 0, 3 }, len = 3,
            table[2] = { 0, 1 };
    tc_llama_batch batch = { 3, 1, 2, ids, pos, pos, q_start, &len, table };
    tc_tensor *logits;
    assert_int_equal(tc_llama_forward(m, &kv, &batch, &logits), TC_OK);
    assert_int_equal(logits->dtype, TC_DTYPE_F32);
    memcpy(out, logits->data, 4 * sizeof(float));
    tc_kv_cache_deinit(&kv);
    tc_llama_destroy(m);
    tc_backend_destroy(cpu);
    tc_gguf_close(&g);
}

/* general.alignment 2 with the data starting 2 bytes past a multiple of 4: every f32 tensor is
 * misaligned in the file, and so are an act-order input order (I32, the identity) and Llama 3's
 * rope factors (f32, all 1 at this head size: plain rotation). The CPU then holds copies and the
 * loader reads the two vectors by bytes (the sanitizer build fails on a misaligned read), and
 * the logits are those of the same model aligned as usual without them. */
static void misaligned_tensors_give_the_same_logits(void **state)
{
    (void)state;
    static const int32_t order[8] = { 0, 1, 2, 3, 4, 5, 6, 7 };
    static const float factors[2] = { 1.0f, 1.0f };
    const tensor extra[] = { { "blk.0.attn_q.in_perm", 0, 8, 26, order },
                             { "rope_freqs.weight", 0, 2, 0, factors } };
    buf good = gguf_image("llama", -1, -1, llama[0]), odd = { 0 };
    for (size_t filler = 0; filler < 4 && !odd.p; filler++) {
        buf b = gguf_build("llama", -1, -1, llama[0], 2, filler, extra, 2);
        tc_gguf g;
        assert_int_equal(tc_gguf_parse(&g, b.p, b.n), TC_OK);
        bool misaligned = ((const uint8_t *)g.tensors[0].data - b.p) % 4 == 2;
        tc_gguf_close(&g);
        if (misaligned)
            odd = b;
        else
            free(b.p);
    }
    assert_non_null(odd.p);
    float want[4], got[4];
    tiny_logits(&good, want);
    tiny_logits(&odd, got);
    for (int i = 0; i < 4; i++) {
        assert_true(isfinite(want[i]));
        assert_memory_equal(&got[i], &want[i], sizeof(float));
    }
    free(good.p);
    free(odd.p);
}

static void broken_gguf_headers_are_parse_errors(void **state)
{
    (void)state;
    buf good = gguf_image("llama", -1, -1, llama[0]);
    tc_gguf g;
    /* Every truncation of the header and directory. */
    for (size_t cut = 0; cut < good.n - 1; cut += cut < 400 ? 1 : 97)
        assert_int_not_equal(tc_gguf_parse(&g, good.p, cut), TC_OK);
    buf b = { 0 };
    put(&b, good.p, good.n);
    b.p[0] = 'X';
    EXPECT_ERROR(tc_gguf_parse(&g, b.p, b.n), TC_ERR_PARSE, "not a GGUF file");
    b.p[0] = 'G';
    b.p[4] = 1;
    EXPECT_ERROR(tc_gguf_parse(&g, b.p, b.n), TC_ERR_PARSE, "version 1 is not supported");
    b.p[4] = 3;
    uint64_t huge = 1ull << 60;
    memcpy(b.p + 16, &huge, 8); /* n_kv */
    EXPECT_ERROR(tc_gguf_parse(&g, b.p, b.n), TC_ERR_PARSE, "more than the file holds");
    memcpy(b.p + 16, good.p + 16, 8);
    memcpy(b.p + 8, &huge, 8); /* n_tensors */
    EXPECT_ERROR(tc_gguf_parse(&g, b.p, b.n), TC_ERR_PARSE, "more than the file holds");
    free(b.p);
    /* An unknown tensor type. */
    tensor t = llama[3];
    t.type = 99;
    b = gguf_image("llama", -1, 3, t);
    EXPECT_ERROR(tc_gguf_parse(&g, b.p, b.n), TC_ERR_PARSE, "unknown ggml type 99");
    free(b.p);
    /* Our own q4_1_g64 and q4_1_g128 (their ids in our tables) are not types a GGUF file holds. */
    t.type = TC_GGML_Q4_1_G64;
    b = gguf_image("llama", -1, 3, t);
    EXPECT_ERROR(tc_gguf_parse(&g, b.p, b.n), TC_ERR_PARSE, "unknown ggml type 36");
    free(b.p);
    t.type = TC_GGML_Q4_1_G128;
    b = gguf_image("llama", -1, 3, t);
    EXPECT_ERROR(tc_gguf_parse(&g, b.p, b.n), TC_ERR_PARSE, "unknown ggml type 37");
    free(b.p);
    free(good.p);
}

/* Where tensor `name`'s directory entry writes its first dimension (its name's bytes, then the
 * dimension count, then the dimensions). */
static uint8_t *entry_dims(buf *b, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 8; i + n + 4 <= b->n; i++)
        if (!memcmp(b->p + i, name, n) && !memcmp(b->p + i - 8, &(uint64_t){ n }, 8))
            return b->p + i + n + 4;
    fail_msg("no entry for %s", name);
    return NULL;
}

/* Directory entries that break the file's rules in ways a parser could let through: a name
 * twice, two tensors over the same bytes (a small file claiming one copy each), and a size
 * in bytes past 64 bits (elements times 8 wrapping to a few bytes). */
static void gguf_directories_are_checked_whole(void **state)
{
    (void)state;
    tc_gguf g;
    tensor t = llama[4];
    t.name = llama[3].name;
    buf b = gguf_image("llama", -1, 4, t);
    EXPECT_ERROR(tc_gguf_parse(&g, b.p, b.n), TC_ERR_PARSE,
                 "tensor 'blk.0.attn_q.weight' appears twice");
    free(b.p);
    /* attn_k's data where attn_q's starts (both [8, 8] and [4, 8] f32: its offset field is
     * after its two dimensions and type). */
    b = gguf_image("llama", -1, -1, llama[0]);
    uint64_t q_offset;
    memcpy(&q_offset, entry_dims(&b, llama[3].name) + 16 + 4, 8);
    memcpy(entry_dims(&b, llama[4].name) + 16 + 4, &q_offset, 8);
    EXPECT_ERROR(tc_gguf_parse(&g, b.p, b.n), TC_ERR_PARSE, "share bytes of the data section");
    free(b.p);
    /* output_norm (a vector) as f64 of 2^61 + 1 elements: 8 (2^61 + 1) bytes wrap to 8. */
    t = llama[1];
    t.type = 28;
    b = gguf_image("llama", -1, 1, t);
    memcpy(entry_dims(&b, llama[1].name), &(uint64_t){ (1ull << 61) + 1 }, 8);
    EXPECT_ERROR(tc_gguf_parse(&g, b.p, b.n), TC_ERR_PARSE, "more bytes than 64 bits count");
    free(b.p);
}

static void broken_gguf_models_name_the_problem(void **state)
{
    (void)state;
    buf b = gguf_image("gpt2", -1, -1, llama[0]);
    EXPECT_ERROR(load(&b), TC_ERR_UNSUPPORTED, "unsupported architecture 'gpt2'");
    free(b.p);
    b = gguf_image("llama", 3, -1, llama[0]);
    EXPECT_ERROR(load(&b), TC_ERR_PARSE, "missing tensor blk.0.attn_q.weight");
    free(b.p);
    tensor t = llama[4];
    t.rows = 8; /* k as wide as q: wrong for one KV head */
    b = gguf_image("llama", -1, 4, t);
    EXPECT_ERROR(load(&b), TC_ERR_PARSE,
                 "tensor blk.0.attn_k.weight has shape [8, 8], want [4, 8]");
    free(b.p);
    t = llama[9];
    t.type = 24; /* i8: a type no kernel or dequantiser reads */
    b = gguf_image("llama", -1, 9, t);
    EXPECT_ERROR(load(&b), TC_ERR_UNSUPPORTED, "blk.0.ffn_up.weight has type i8");
    free(b.p);
}

static tc_status count(void *ctx, const tc_safetensor *t)
{
    (void)t;
    ++*(int *)ctx;
    return TC_OK;
}

/* A safetensors image: the header `json`, then `data` bytes of `byte`. */
static buf safetensors_raw(const char *json, size_t data, char byte)
{
    buf b = { 0 };
    u64(&b, strlen(json));
    put(&b, json, strlen(json));
    for (size_t i = 0; i < data; i++)
        put(&b, &byte, 1);
    return b;
}

/* A safetensors image with one tensor of the given header fields. */
static buf safetensors_image(const char *dtype, const char *shape, const char *offsets, size_t data)
{
    char json[256];
    snprintf(json, sizeof json, "{\"w\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":%s}}",
             dtype, shape, offsets);
    return safetensors_raw(json, data, 1);
}

static void broken_safetensors_are_errors(void **state)
{
    (void)state;
    int k = 0;
    buf b = safetensors_image("F32", "[2,3]", "[0,24]", 24);
    assert_int_equal(tc_safetensors_parse(b.p, b.n, "ok", count, &k), TC_OK);
    assert_int_equal(k, 1);
    for (size_t cut = 0; cut < b.n - 24; cut++)
        assert_int_not_equal(tc_safetensors_parse(b.p, cut, "cut", count, &k), TC_OK);
    EXPECT_ERROR(tc_safetensors_parse(b.p, b.n - 1, "short", count, &k), TC_ERR_PARSE,
                 "do not match its shape");
    uint64_t huge = 1ull << 40;
    memcpy(b.p, &huge, 8);
    EXPECT_ERROR(tc_safetensors_parse(b.p, b.n, "big", count, &k), TC_ERR_PARSE,
                 "does not fit the file");
    free(b.p);
    b = safetensors_image("F32", "[2,3]", "[0,20]", 24);
    EXPECT_ERROR(tc_safetensors_parse(b.p, b.n, "x", count, &k), TC_ERR_PARSE,
                 "do not match its shape");
    free(b.p);
    b = safetensors_image("F64", "[3]", "[0,24]", 24);
    EXPECT_ERROR(tc_safetensors_parse(b.p, b.n, "x", count, &k), TC_ERR_UNSUPPORTED,
                 "has dtype F64");
    free(b.p);
    /* I64 (compressed-tensors' weight_shape) is read; its size checked as any other's. */
    b = safetensors_image("I64", "[3]", "[0,24]", 24);
    assert_int_equal(tc_safetensors_parse(b.p, b.n, "x", count, &k), TC_OK);
    free(b.p);
    b = safetensors_image("I64", "[3]", "[0,12]", 24);
    EXPECT_ERROR(tc_safetensors_parse(b.p, b.n, "x", count, &k), TC_ERR_PARSE,
                 "do not match its shape");
    free(b.p);
    b = safetensors_image("F32", "[-1]", "[0,4]", 4);
    EXPECT_ERROR(tc_safetensors_parse(b.p, b.n, "x", count, &k), TC_ERR_PARSE, "invalid shape");
    free(b.p);
    b = safetensors_image("F32", "[2]", "[8,16]", 8);
    EXPECT_ERROR(tc_safetensors_parse(b.p, b.n, "x", count, &k), TC_ERR_PARSE, "outside the data");
    free(b.p);
    /* Two tensors over shared bytes (each alone in bounds and of its size). */
    const char *two = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}";
    b = safetensors_raw(two, 12, 1);
    EXPECT_ERROR(tc_safetensors_parse(b.p, b.n, "x", count, &k), TC_ERR_PARSE,
                 "tensors 'a' and 'b' share bytes of the data");
    free(b.p);
    const char not_json[] = "\x05\0\0\0\0\0\0\0{oops";
    EXPECT_ERROR(tc_safetensors_parse(not_json, sizeof not_json - 1, "x", count, &k), TC_ERR_PARSE,
                 "not a JSON object");
}

static void broken_hf_folders_name_the_problem(void **state)
{
    (void)state;
    char dir[] = "/tmp/tc_hf_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    tc_hf hf;
    EXPECT_ERROR(tc_hf_open(&hf, dir), TC_ERR_NOT_FOUND, "has no config.json");
    EXPECT_ERROR(tc_hf_open_packed_ex(&hf, dir, -1), TC_ERR_INVALID_ARGUMENT,
                 "max_block is -1; want 0 or more");
    tc_hf_close(&hf); /* a no-op after that error */
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"model_type\": \"gpt2\", \"hidden_size\": 8}", f);
    fclose(f);
    EXPECT_ERROR(tc_hf_open(&hf, dir), TC_ERR_UNSUPPORTED, "unsupported architecture 'gpt2'");
    f = fopen(path, "w");
    fputs("{\"model_type\": \"llama\", \"hidden_size\": 8, \"intermediate_size\": 16, "
          "\"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"num_key_value_heads\": 1, "
          "\"vocab_size\": 4}",
          f);
    fclose(f);
    EXPECT_ERROR(tc_hf_open(&hf, dir), TC_ERR_NOT_FOUND, "neither model.safetensors");
    /* A safetensors file with only the embedding: the loader names the first missing tensor. */
    const char *json = "{\"model.embed_tokens.weight\":{\"dtype\":\"F32\",\"shape\":[4,8],\"data_"
                       "offsets\":[0,128]}}";
    buf s = safetensors_raw(json, 128, 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    f = fopen(path, "wb");
    fwrite(s.p, 1, s.n, f);
    fclose(f);
    free(s.p);
    assert_int_equal(tc_hf_open(&hf, dir), TC_OK);
    tc_backend *cpu;
    assert_int_equal(tc_backend_create_cpu(1, &cpu), TC_OK);
    tc_llama *m = NULL;
    tc_llama_options o = { .max_context = 32, .max_tokens = 8 };
    EXPECT_ERROR(tc_llama_load(&hf.view, &hf.cfg, cpu, &o, &m), TC_ERR_PARSE,
                 "missing tensor blk.0.attn_norm.weight");
    tc_backend_destroy(cpu);
    tc_hf_close(&hf);
    /* Layer numbers as plain decimals below num_hidden_layers: "00" is not layer 0 (two names
     * for one tensor), layer 5 of a one-layer config is not read (a checkpoint cut short). */
    json = "{\"model.embed_tokens.weight\":{\"dtype\":\"F32\",\"shape\":[4,8],\"data_offsets\":"
           "[0,128]},\"model.layers.00.input_layernorm.weight\":{\"dtype\":\"F32\",\"shape\":[8],"
           "\"data_offsets\":[128,160]},\"model.layers.5.input_layernorm.weight\":{\"dtype\":"
           "\"F32\",\"shape\":[8],\"data_offsets\":[160,192]},\"model.layers.0.input_"
           "layernorm.weight\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[192,224]}}";
    s = safetensors_raw(json, 224, 0);
    f = fopen(path, "wb");
    fwrite(s.p, 1, s.n, f);
    fclose(f);
    assert_int_equal(tc_hf_open(&hf, dir), TC_OK);
    assert_int_equal(hf.view.n_tensors, 2);
    const tc_gguf_tensor *norm = tc_gguf_tensor_find(&hf.view, "blk.0.attn_norm.weight"),
                         *embd = tc_gguf_tensor_find(&hf.view, "token_embd.weight");
    assert_non_null(norm);
    assert_non_null(embd);
    assert_int_equal((const uint8_t *)norm->data - (const uint8_t *)embd->data, 192);
    tc_hf_close(&hf);
    free(s.p);
    unlink(path);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(valid_tiny_gguf_loads),
        cmocka_unit_test(misaligned_tensors_give_the_same_logits),
        cmocka_unit_test(broken_gguf_headers_are_parse_errors),
        cmocka_unit_test(gguf_directories_are_checked_whole),
        cmocka_unit_test(broken_gguf_models_name_the_problem),
        cmocka_unit_test(broken_safetensors_are_errors),
        cmocka_unit_test(broken_hf_folders_name_the_problem),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

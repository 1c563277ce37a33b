/* Building tokenizers from what models ship: GGUF's tokenizer.ggml.* (byte-level BPE with
 * merges, or SentencePiece pieces with scores) and Hugging Face's tokenizer.json with
 * tokenizer_config.json. */
#define _GNU_SOURCE
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "model/tokenizer_internal.h"
#include "model/unicode_classes.h"
#include "runtime/error.h"
#include "runtime/host.h"

static const char gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char llama3_regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* Qwen2's: Llama 3's with each digit its own piece. */
static const char qwen2_regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* tokenizers' Digits pre-tokeniser: Rust's char::is_numeric, whose Unicode is newer than
 * PCRE2's \p{N} (a digit run with "+"). */
#define DIGITS_REGEX "[\\p{N}" TC__UNI_DIGIT_EXTRA "]"

/* The pre-tokenisation of llama.cpp's tokenizer.ggml.pre names (Hugging Face's pre_tokenizer
 * of the same models). */
static tc_status set_pre(tc_tokenizer *t, const char *pre)
{
    if (!strcmp(pre, "default") || !strcmp(pre, "gpt2") || !strcmp(pre, "gpt-2"))
        return tc__tok_add_regex(t, gpt2_regex);
    if (!strcmp(pre, "smollm")) {
        /* Digits(individual_digits) before ByteLevel: each digit its own piece. */
        TC_TRY(tc__tok_add_regex(t, DIGITS_REGEX));
        return tc__tok_add_regex(t, gpt2_regex);
    }
    if (!strcmp(pre, "llama3") || !strcmp(pre, "llama-v3") || !strcmp(pre, "llama-bpe")) {
        t->ignore_merges = true;
        return tc__tok_add_regex(t, llama3_regex);
    }
    if (!strcmp(pre, "qwen2")) {
        /* GGUF keeps no normaliser; Qwen2's tokenizer.json, which these vocabularies come
         * from, normalises to NFC (llama.cpp does not: its ids differ on text not in NFC). */
        t->nfc = true;
        return tc__tok_add_regex(t, qwen2_regex);
    }
    return tc_set_error(TC_ERR_UNSUPPORTED, "tc_tokenizer",
                        "unsupported pre-tokeniser '%s' (supported: default, gpt2, smollm, "
                        "llama-bpe, qwen2)",
                        pre);
}

static char *gstr(tc_gguf_str s)
{
    char *c = tc_host_alloc(s.len + 1);
    if (c) {
        memcpy(c, s.ptr, s.len);
        c[s.len] = 0;
    }
    return c;
}

static int by_score_desc(const void *a, const void *b, void *ctx)
{
    const float *scores = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    float sx = scores[x], sy = scores[y];
    return sx > sy ? -1 : sx < sy ? 1 : (x > y) - (x < y);
}

/* score_rank[id]: the id's place when pieces are ordered by score, highest first. */
static tc_status rank_scores(tc_tokenizer *t, const tc_gguf_kv *sc)
{
    int32_t n = t->n_vocab;
    float *scores = tc_host_alloc(sizeof(float) * (size_t)n);
    int32_t *order = tc_host_alloc(sizeof(int32_t) * (size_t)n);
    t->score_rank = tc_host_alloc(sizeof(uint32_t) * (size_t)n);
    if (!scores || !order || !t->score_rank) {
        tc_host_free(scores);
        tc_host_free(order);
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_tokenizer", "no host memory");
    }
    for (int32_t i = 0; i < n; i++) {
        scores[i] = (float)tc_gguf_array_number(sc, (uint64_t)i);
        if (scores[i] != scores[i])
            scores[i] = -INFINITY; /* NaN: never preferred */
        order[i] = i;
    }
    qsort_r(order, (size_t)n, sizeof *order, by_score_desc, scores);
    for (int32_t r = 0; r < n; r++)
        t->score_rank[order[r]] = (uint32_t)r;
    tc_host_free(scores);
    tc_host_free(order);
    return TC_OK;
}

tc_status tc_tokenizer_from_gguf(const tc_gguf *g, tc_tokenizer **out)
{
    const char *op = "tc_tokenizer_from_gguf";
    *out = NULL;
    tc_gguf_str model, pre_s = { "default", 7 };
    if (!tc_gguf_get_str(g, "tokenizer.ggml.model", &model))
        return tc_set_error(TC_ERR_PARSE, op, "the file has no tokenizer (tokenizer.ggml.model)");
    bool spm = model.len == 5 && !memcmp(model.ptr, "llama", 5);
    if (!spm && !(model.len == 4 && !memcmp(model.ptr, "gpt2", 4)))
        return tc_set_error(TC_ERR_UNSUPPORTED, op,
                            "tokenizer model '%.*s' is not supported (gpt2, byte-level BPE, and "
                            "llama, SentencePiece BPE, are)",
                            (int)(model.len > 40 ? 40 : model.len), model.ptr);
    const tc_gguf_kv *sc = tc_gguf_find(g, "tokenizer.ggml.scores");
    tc_gguf_get_str(g, "tokenizer.ggml.pre", &pre_s);
    const tc_gguf_kv *tk = tc_gguf_find(g, "tokenizer.ggml.tokens");
    const tc_gguf_kv *mg = tc_gguf_find(g, "tokenizer.ggml.merges");
    const tc_gguf_kv *ty = tc_gguf_find(g, "tokenizer.ggml.token_type");
    if (!tk || tk->type != TC_GGUF_ARRAY || tk->array_type != TC_GGUF_STRING ||
        tk->array_len == 0 || tk->array_len > INT32_MAX)
        return tc_set_error(TC_ERR_PARSE, op, "tokenizer.ggml.tokens is missing or not strings");
    if (!spm && (!mg || mg->type != TC_GGUF_ARRAY || mg->array_type != TC_GGUF_STRING ||
                 mg->array_len > UINT32_MAX))
        return tc_set_error(TC_ERR_PARSE, op, "tokenizer.ggml.merges is missing or not strings");
    if (spm && (!sc || sc->type != TC_GGUF_ARRAY || sc->array_type != TC_GGUF_FLOAT32 ||
                sc->array_len != tk->array_len))
        return tc_set_error(TC_ERR_PARSE, op,
                            "tokenizer.ggml.scores is missing or does not match the tokens");
    if (ty && (ty->type != TC_GGUF_ARRAY || ty->array_len != tk->array_len ||
               (ty->array_type != TC_GGUF_INT32 && ty->array_type != TC_GGUF_UINT32)))
        return tc_set_error(TC_ERR_PARSE, op,
                            "tokenizer.ggml.token_type does not match the tokens");

    tc_status st = TC_OK;
    int32_t n = (int32_t)tk->array_len;
    tc_gguf_str *strs = tc_host_alloc(sizeof *strs * (size_t)n);
    uint64_t n_merges = spm ? 0 : mg->array_len;
    tc_gguf_str *merges = tc_host_alloc(sizeof *merges * (n_merges ? n_merges : 1));
    uint8_t *types = tc_host_alloc((size_t)n);
    char *pre = gstr(pre_s);
    tc_tokenizer *t = tc_host_calloc(1, sizeof *t);
    if (!strs || !merges || !types || !pre || !t) {
        st = tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no host memory");
        goto fail;
    }
    tc_gguf_strings(tk, strs);
    if (!spm)
        tc_gguf_strings(mg, merges);
    for (int32_t i = 0; i < n; i++)
        types[i] = ty ? (uint8_t)tc_gguf_array_number(ty, (uint64_t)i) : TOKEN_NORMAL;
    t->spm = spm;
    TC_CHECK(st, tc__tok_build(t, n, strs, types, n_merges, merges));
    if (spm) {
        /* llama.cpp's SentencePiece: a space prefix on each segment, spaces as U+2581, the
         * decoder drops the first space; merges by score. */
        bool prefix = true;
        tc_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &prefix);
        t->prepend = prefix ? PREPEND_ALWAYS : PREPEND_NEVER;
        t->strip = prefix ? 1 : 0;
        int64_t u;
        t->unk = tc_gguf_get_i64(g, "tokenizer.ggml.unknown_token_id", &u) && u >= 0 && u < n
                     ? (int32_t)u
                     : -1;
        TC_CHECK(st, rank_scores(t, sc));
    }
    int64_t v;
    t->bos =
        tc_gguf_get_i64(g, "tokenizer.ggml.bos_token_id", &v) && v >= 0 && v < n ? (int32_t)v : -1;
    t->eos =
        tc_gguf_get_i64(g, "tokenizer.ggml.eos_token_id", &v) && v >= 0 && v < n ? (int32_t)v : -1;
    if (!tc_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos))
        t->add_bos = false;
    if (!spm)
        TC_CHECK(st, set_pre(t, pre));
    tc_host_free(strs);
    tc_host_free(merges);
    tc_host_free(types);
    tc_host_free(pre);
    *out = t;
    return TC_OK;
fail:
    tc_host_free(strs);
    tc_host_free(merges);
    tc_host_free(types);
    tc_host_free(pre);
    tc_tokenizer_destroy(t);
    return st;
}

/* The text of a tokenizer_config.json token entry: a string or {"content": ...}. */
static const char *token_content(json_t *v)
{
    if (json_is_object(v))
        v = json_object_get(v, "content");
    return json_string_value(v);
}

/* Collect the pre-tokeniser of tokenizer.json into regexes: Split (a Regex pattern), Digits
 * and ByteLevel (GPT-2's regex when use_regex); Sequence recurses. */
static tc_status json_pre(tc_tokenizer *t, json_t *pre, bool *byte_level)
{
    if (!pre || json_is_null(pre))
        return TC_OK;
    const char *type = json_string_value(json_object_get(pre, "type"));
    if (!type)
        return tc_set_error(TC_ERR_PARSE, "tc_tokenizer",
                            "tokenizer.json: a pre_tokenizer has no type");
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(pre, "pretokenizers"), *p;
        size_t i;
        json_array_foreach(list, i, p) TC_TRY(json_pre(t, p, byte_level));
        return TC_OK;
    }
    if (t->n_regex >= MAX_REGEX)
        return tc_set_error(TC_ERR_UNSUPPORTED, "tc_tokenizer",
                            "tokenizer.json: too many pre-tokenisers");
    if (!strcmp(type, "ByteLevel")) {
        *byte_level = true;
        json_t *ur = json_object_get(pre, "use_regex");
        if (json_is_true(json_object_get(pre, "add_prefix_space")))
            return tc_set_error(TC_ERR_UNSUPPORTED, "tc_tokenizer",
                                "tokenizer.json: ByteLevel add_prefix_space is not supported");
        return !ur || json_is_true(ur) ? tc__tok_add_regex(t, gpt2_regex) : TC_OK;
    }
    if (!strcmp(type, "Digits"))
        return tc__tok_add_regex(t, json_is_true(json_object_get(pre, "individual_digits"))
                                        ? DIGITS_REGEX
                                        : DIGITS_REGEX "+");
    if (!strcmp(type, "Split")) {
        const char *re =
            json_string_value(json_object_get(json_object_get(pre, "pattern"), "Regex"));
        const char *behavior = json_string_value(json_object_get(pre, "behavior"));
        if (!re || (behavior && strcmp(behavior, "Isolated")) ||
            json_is_true(json_object_get(pre, "invert")))
            return tc_set_error(TC_ERR_UNSUPPORTED, "tc_tokenizer",
                                "tokenizer.json: only Split by a Regex, Isolated, is supported");
        return tc__tok_add_regex(t, re);
    }
    return tc_set_error(TC_ERR_UNSUPPORTED, "tc_tokenizer",
                        "tokenizer.json: pre-tokeniser '%s' is not supported", type);
}

/* The normalizer of a byte-level tokenizer.json: none, or NFC (Qwen2's), alone or in a
 * Sequence. */
static tc_status json_norm(tc_tokenizer *t, json_t *norm, const char *path)
{
    if (!norm || json_is_null(norm))
        return TC_OK;
    const char *type = json_string_value(json_object_get(norm, "type"));
    if (type && !strcmp(type, "Sequence")) {
        json_t *x;
        size_t i;
        json_array_foreach(json_object_get(norm, "normalizers"), i, x)
            TC_TRY(json_norm(t, x, path));
        return TC_OK;
    }
    if (type && !strcmp(type, "NFC")) {
        t->nfc = true;
        return TC_OK;
    }
    return tc_set_error(TC_ERR_UNSUPPORTED, "tc_tokenizer_from_json",
                        "%s: normalizer '%s' is not supported (byte-level tokenizers: NFC)", path,
                        type ? type : "?");
}

/* The SentencePiece conventions of a tokenizer.json: normalizer Prepend("\u2581") +
 * Replace(" ", "\u2581") (Llama 2's "legacy" files), or pre_tokenizer Metaspace with a
 * prepend_scheme; decoder Strip or Metaspace for the leading space. */
static tc_status json_spm(tc_tokenizer *t, json_t *j, const char *path)
{
    const char *op = "tc_tokenizer_from_json";
    json_t *norm = json_object_get(j, "normalizer"), *pre = json_object_get(j, "pre_tokenizer");
    json_t *list = json_object_get(norm, "normalizers"), *x;
    size_t i;
    bool replace = false;
    if (norm && !json_is_null(norm)) {
        if (!list) {
            list = json_array();
            json_array_append(list, norm);
        } else {
            json_incref(list);
        }
        json_array_foreach(list, i, x)
        {
            const char *type = json_string_value(json_object_get(x, "type"));
            if (type && !strcmp(type, "Prepend"))
                t->prepend = PREPEND_ALWAYS;
            else if (type && !strcmp(type, "Replace"))
                replace = true;
            else {
                json_decref(list);
                return tc_set_error(TC_ERR_UNSUPPORTED, op, "%s: normalizer '%s' is not supported",
                                    path, type ? type : "?");
            }
        }
        json_decref(list);
    }
    if (pre && !json_is_null(pre)) {
        const char *type = json_string_value(json_object_get(pre, "type"));
        const char *scheme = json_string_value(json_object_get(pre, "prepend_scheme"));
        if (!type || strcmp(type, "Metaspace") || json_is_true(json_object_get(pre, "split")))
            return tc_set_error(
                TC_ERR_UNSUPPORTED, op,
                "%s: with byte_fallback only a Metaspace pre-tokeniser without split is "
                "supported",
                path);
        replace = true;
        t->metaspace = true;
        t->prepend = !scheme || !strcmp(scheme, "always") ? PREPEND_ALWAYS
                     : !strcmp(scheme, "first")           ? PREPEND_FIRST
                                                          : PREPEND_NEVER;
    }
    if (!replace)
        return tc_set_error(TC_ERR_UNSUPPORTED, op, "%s: spaces are not mapped to U+2581", path);
    json_t *dec = json_object_get(j, "decoder"), *dl = json_object_get(dec, "decoders");
    json_array_foreach(dl, i, x)
    {
        const char *type = json_string_value(json_object_get(x, "type"));
        if (type && !strcmp(type, "Strip"))
            t->strip = (int)json_integer_value(json_object_get(x, "start"));
    }
    const char *dt = json_string_value(json_object_get(dec, "type"));
    if (dt && !strcmp(dt, "Metaspace")) {
        const char *scheme = json_string_value(json_object_get(dec, "prepend_scheme"));
        t->strip = !scheme || strcmp(scheme, "never") ? 1 : 0;
    }
    return TC_OK;
}

tc_status tc_tokenizer_from_json(const char *tokenizer_json, const char *tokenizer_config,
                                 tc_tokenizer **out)
{
    const char *op = "tc_tokenizer_from_json";
    *out = NULL;
    json_error_t err;
    json_t *j = json_load_file(tokenizer_json, 0, &err), *cfg = NULL;
    if (!j)
        return tc_set_error(TC_ERR_PARSE, op, "%s: %s (line %d)", tokenizer_json, err.text,
                            err.line);
    if (tokenizer_config && !(cfg = json_load_file(tokenizer_config, 0, &err))) {
        json_decref(j);
        return tc_set_error(TC_ERR_PARSE, op, "%s: %s (line %d)", tokenizer_config, err.text,
                            err.line);
    }
    tc_status st = TC_OK;
    tc_gguf_str *strs = NULL, *merges = NULL;
    uint8_t *types = NULL;
    char *joined = NULL;
    tc_tokenizer *t = tc_host_calloc(1, sizeof *t);
    json_t *model = json_object_get(j, "model"), *vocab = json_object_get(model, "vocab");
    json_t *mg = json_object_get(model, "merges"), *added = json_object_get(j, "added_tokens");
    const char *mtype = json_string_value(json_object_get(model, "type"));
    if (!t) {
        st = tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no host memory");
        goto fail;
    }
    if (!mtype || strcmp(mtype, "BPE") || !json_is_object(vocab) || !json_is_array(mg)) {
        st = tc_set_error(TC_ERR_UNSUPPORTED, op, "%s: model type '%s' is not supported (BPE is)",
                          tokenizer_json, mtype ? mtype : "(none)");
        goto fail;
    }
    t->spm = json_is_true(json_object_get(model, "byte_fallback"));
    /* Ids: the vocabulary's and the added tokens'; the largest names the size. */
    int64_t n = 0;
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v)
    {
        json_int_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || id >= INT32_MAX) {
            st = tc_set_error(TC_ERR_PARSE, op, "%s: token '%.40s' has an invalid id",
                              tokenizer_json, key);
            goto fail;
        }
        n = id + 1 > n ? id + 1 : n;
    }
    size_t i;
    json_array_foreach(added, i, v)
    {
        json_int_t id = json_integer_value(json_object_get(v, "id"));
        if (id < 0 || id >= INT32_MAX || !json_string_value(json_object_get(v, "content"))) {
            st =
                tc_set_error(TC_ERR_PARSE, op, "%s: added token %zu is invalid", tokenizer_json, i);
            goto fail;
        }
        n = id + 1 > n ? id + 1 : n;
    }
    if (n == 0) {
        st = tc_set_error(TC_ERR_PARSE, op, "%s: the vocabulary is empty", tokenizer_json);
        goto fail;
    }
    strs = tc_host_calloc((size_t)n, sizeof *strs);
    types = tc_host_alloc((size_t)n);
    merges = tc_host_alloc(sizeof *merges * (json_array_size(mg) + 1));
    if (!strs || !types || !merges) {
        st = tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no host memory");
        goto fail;
    }
    memset(types, TOKEN_NORMAL, (size_t)n);
    json_object_foreach(vocab, key, v)
    {
        strs[json_integer_value(v)] = (tc_gguf_str){ key, strlen(key) };
    }
    json_array_foreach(added, i, v)
    {
        json_int_t id = json_integer_value(json_object_get(v, "id"));
        const char *c = json_string_value(json_object_get(v, "content"));
        strs[id] = (tc_gguf_str){ c, strlen(c) };
        types[id] = json_is_true(json_object_get(v, "special")) ? TOKEN_CONTROL : TOKEN_USER;
    }
    /* Merges: "a b" strings, or ["a", "b"] pairs (newer files), joined into one buffer. */
    size_t total = 0;
    json_array_foreach(mg, i, v)
    {
        if (json_is_array(v))
            total += strlen(json_string_value(json_array_get(v, 0)) ?: "") +
                     strlen(json_string_value(json_array_get(v, 1)) ?: "") + 2;
    }
    joined = tc_host_alloc(total + 1);
    if (!joined) {
        st = tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no host memory");
        goto fail;
    }
    char *w = joined;
    json_array_foreach(mg, i, v)
    {
        if (json_is_string(v)) {
            merges[i] = (tc_gguf_str){ json_string_value(v), strlen(json_string_value(v)) };
        } else {
            const char *l = json_string_value(json_array_get(v, 0)) ?: "";
            const char *r = json_string_value(json_array_get(v, 1)) ?: "";
            int k = sprintf(w, "%s %s", l, r);
            merges[i] = (tc_gguf_str){ w, (uint64_t)k };
            w += k + 1;
        }
    }
    TC_CHECK(st, tc__tok_build(t, (int32_t)n, strs, types, json_array_size(mg), merges));
    t->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
    if (t->spm) {
        TC_CHECK(st, json_spm(t, j, tokenizer_json));
        const char *unk = json_string_value(json_object_get(model, "unk_token"));
        t->unk = unk ? tc__tok_find(t, unk, strlen(unk)) : -1;
    } else {
        bool byte_level = false;
        TC_CHECK(st, json_norm(t, json_object_get(j, "normalizer"), tokenizer_json));
        TC_CHECK(st, json_pre(t, json_object_get(j, "pre_tokenizer"), &byte_level));
        if (!byte_level) {
            st = tc_set_error(TC_ERR_UNSUPPORTED, op,
                              "%s: a BPE without ByteLevel or byte_fallback is not supported",
                              tokenizer_json);
            goto fail;
        }
    }
    const char *bos = token_content(json_object_get(cfg, "bos_token"));
    const char *eos = token_content(json_object_get(cfg, "eos_token"));
    t->bos = bos ? tc__tok_find(t, bos, strlen(bos)) : -1;
    t->eos = eos ? tc__tok_find(t, eos, strlen(eos)) : -1;
    /* add_bos_token when the config says; else when the post-processor puts a special token
     * before the text (Llama 3's TemplateProcessing). */
    json_t *ab = json_object_get(cfg, "add_bos_token");
    if (json_is_boolean(ab)) {
        t->add_bos = json_is_true(ab);
    } else {
        json_t *pp = json_object_get(j, "post_processor");
        json_t *single = json_object_get(pp, "single");
        if (!single) {
            json_t *procs = json_object_get(pp, "processors"), *p;
            json_array_foreach(procs, i, p) if (json_object_get(p, "single")) single =
                json_object_get(p, "single");
        }
        t->add_bos = single && json_object_get(json_array_get(single, 0), "SpecialToken") != NULL;
    }
    json_decref(j);
    json_decref(cfg);
    tc_host_free(strs);
    tc_host_free(types);
    tc_host_free(merges);
    tc_host_free(joined);
    *out = t;
    return TC_OK;
fail:
    json_decref(j);
    json_decref(cfg);
    tc_host_free(strs);
    tc_host_free(types);
    tc_host_free(merges);
    tc_host_free(joined);
    tc_tokenizer_destroy(t);
    return st;
}

/* Constrained decoding's grammars with SmolLM2's tokenizer: JSON schemas accept the documents
 * they describe and refuse others, token by token; a mask allows exactly the tokens that a
 * recogniser accepts (checked token by token against fresh recognisers); refused schemas say
 * which keyword. Skips when the model is not downloaded. */
#define _GNU_SOURCE
#include <jansson.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "inference/grammar.h"
#include "model/tokenizer.h"
#include "runtime/host.h"
#include "server/schema.h"

static char model_path[4096];
static tc_gguf gguf;
static tc_tokenizer *tok;

static bool find_model(void)
{
    const char *env = getenv("TC_SMOLLM2_GGUF"), *cache = getenv("XDG_CACHE_HOME"),
               *home = getenv("HOME");
    if (env)
        snprintf(model_path, sizeof model_path, "%s", env);
    else if (cache)
        snprintf(model_path, sizeof model_path, "%s/thincuda/SmolLM2-135M-Instruct.Q4_1.gguf",
                 cache);
    else
        snprintf(model_path, sizeof model_path,
                 "%s/.cache/thincuda/SmolLM2-135M-Instruct.Q4_1.gguf", home ? home : ".");
    return access(model_path, R_OK) == 0;
}

static tc_grammar *grammar_of(const char *schema_text)
{
    json_error_t je;
    json_t *schema = schema_text ? json_loads(schema_text, 0, &je) : NULL;
    assert_true(!schema_text || schema);
    char why[320] = "";
    tc_grammar *g = tc_schema_grammar(schema, tok, why, sizeof why);
    if (!g)
        fail_msg("%s: %s", schema_text, why);
    json_decref(schema);
    return g;
}

/* Whether the grammar takes the text as a whole document, fed as its tokens. */
static bool takes(tc_grammar *g, const char *text)
{
    int32_t *ids;
    size_t n;
    assert_int_equal(tc_tokenizer_encode(tok, text, strlen(text), false, false, &ids, &n), TC_OK);
    tc_grammar_state *s = tc_grammar_start(g);
    assert_non_null(s);
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++)
        ok = tc_grammar_accept(s, ids[i]);
    ok = ok && tc_grammar_done(s) && tc_grammar_accept(s, tc_tokenizer_eos(tok));
    tc_grammar_state_free(s);
    tc_host_free(ids);
    return ok;
}

static void schemas_take_their_documents(void **state)
{
    (void)state;
    static const struct {
        const char *schema;
        const char *yes[4], *no[4];
    } cases[] = {
        { "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":"
          "\"integer\"}},\"required\":[\"name\",\"age\"]}",
          { "{\"name\": \"Ann\", \"age\": 31}", "{\"name\":\"\\u00e9\\\"\",\"age\":-4}",
            "{ \"name\": \"Zo\u00eb\", \"age\": 0 }" },
          { "{\"name\": \"Ann\"}", "{\"age\": 31, \"name\": \"Ann\"}",
            "{\"name\": \"Ann\", \"age\": 3.5}", "{\"name\": \"Ann\", \"age\": 01}" } },
        { "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
          "\"boolean\"}}}",
          { "{}", "{\"b\": true}", "{\"a\": 1, \"b\": false}" },
          { "{\"b\": true, \"a\": 1}", "{\"a\": 1,}", "{\"c\": 1}" } },
        { "{\"type\":\"array\",\"items\":{\"enum\":[\"x\",2,null]},\"minItems\":1,\"maxItems\":2}",
          { "[\"x\"]", "[2, null]", "[ null ]" },
          { "[]", "[\"x\", 2, null]", "[\"y\"]", "[2,]" } },
        { "{\"anyOf\":[{\"type\":\"number\"},{\"type\":\"string\",\"maxLength\":2}]}",
          { "-1.5e3", "\"ab\"", "0.25" },
          { "\"abc\"", "1.", "true" } },
        { "{\"$defs\":{\"N\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
          "\"next\":{\"$ref\":\"#/$defs/N\"}},\"required\":[\"v\"]}},\"$ref\":\"#/$defs/N\"}",
          { "{\"v\": 1}", "{\"v\": 1, \"next\": {\"v\": 2, \"next\": {\"v\": 3}}}" },
          { "{\"next\": {\"v\": 2}}", "{\"v\": 1, \"next\": {}}" } },
        { "{\"type\":\"string\",\"format\":\"date\"}",
          { "\"2024-02-29\"" },
          { "\"2024-2-29\"", "\"yesterday\"" } },
        { NULL, /* json_object: any object */
          { "{\"k\": [1, {\"x\": null}, \"s\", true, -0.5]}", "{}" },
          { "[1]", "\"s\"", "{\"k\": }" } },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tc_grammar *g = grammar_of(cases[i].schema);
        for (int k = 0; k < 4 && cases[i].yes[k]; k++)
            if (!takes(g, cases[i].yes[k]))
                fail_msg("%s refuses %s", cases[i].schema, cases[i].yes[k]);
        for (int k = 0; k < 4 && cases[i].no[k]; k++)
            if (takes(g, cases[i].no[k]))
                fail_msg("%s takes %s", cases[i].schema, cases[i].no[k]);
        tc_grammar_unref(g);
    }
}

/* The mask after a prefix equals asking a fresh recogniser about each token (all tokens the
 * mask allows, and every 7th of the rest). */
static void masks_match_the_recogniser(void **state)
{
    (void)state;
    tc_grammar *g = grammar_of("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":"
                               "\"string\",\"maxLength\":6},\"n\":{\"type\":\"number\"},\"tags\":{"
                               "\"type\":\"array\",\"items\":{\"enum\":[\"red\",\"blue\"]}}},"
                               "\"required\":[\"name\"]}");
    const char *doc = "{\"name\": \"Bob\", \"n\": 12.5, \"tags\": [\"red\"]}";
    int32_t *ids;
    size_t n;
    assert_int_equal(tc_tokenizer_encode(tok, doc, strlen(doc), false, false, &ids, &n), TC_OK);
    int32_t V = tc_tokenizer_vocab(tok);
    float *row = malloc(sizeof *row * (size_t)V), *again = malloc(sizeof *again * (size_t)V);
    assert_true(row && again);
    tc_grammar_state *s = tc_grammar_start(g);
    for (size_t at = 0; at <= n; at++) {
        memset(row, 0, sizeof *row * (size_t)V);
        assert_true(tc_grammar_mask(s, row, V));
        int allowed = 0;
        for (int32_t t = 0; t < V; t++) {
            bool masked = isinf(row[t]);
            allowed += !masked;
            if (masked && t % 7)
                continue;
            tc_grammar_state *f = tc_grammar_start(g);
            bool ok = true;
            for (size_t i = 0; i < at && ok; i++)
                ok = tc_grammar_accept(f, ids[i]);
            assert_true(ok);
            if (tc_grammar_accept(f, t) == masked)
                fail_msg("after %zu tokens, token %d: the mask %s it", at, t,
                         masked ? "forbids" : "allows");
            tc_grammar_state_free(f);
        }
        assert_true(allowed > 0);
        /* The same state again: the cached mask is the same. */
        memset(again, 0, sizeof *again * (size_t)V);
        assert_true(tc_grammar_mask(s, again, V));
        assert_memory_equal(row, again, sizeof *row * (size_t)V);
        /* The bits tc_logits_mask takes say the same, for a wider vocabulary too (the model's
         * rows may be longer than the tokenizer's: the extra tokens are never allowed). */
        int64_t W = (V + 31) / 32 + 3;
        uint32_t *bits = malloc(sizeof *bits * (size_t)W);
        assert_non_null(bits);
        memset(bits, 0xff, sizeof *bits * (size_t)W);
        assert_true(tc_grammar_allowed(s, bits, W));
        for (int64_t t = 0; t < 32 * W; t++)
            if ((bits[t >> 5] >> (t & 31) & 1) != (t < V && !isinf(row[t])))
                fail_msg("after %zu tokens, token %lld: bit and mask differ", at, (long long)t);
        free(bits);
        if (at < n)
            assert_true(tc_grammar_accept(s, ids[at]));
    }
    assert_true(tc_grammar_done(s));
    tc_grammar_state_free(s);
    tc_grammar_unref(g);
    free(row);
    free(again);
    tc_host_free(ids);
}

static void refused_schemas_name_the_keyword(void **state)
{
    (void)state;
    static const char *const cases[][2] = {
        { "{\"type\":\"string\",\"pattern\":\"a\"}", "'pattern'" },
        { "{\"type\":\"object\",\"properties\":{\"x\":{\"oneOf\":[true]}}}", "'oneOf'" },
        { "{\"$ref\":\"#/$defs/Nope\"}", "'$ref'" },
        { "{\"type\":\"object\",\"properties\":{},\"required\":[\"x\"]}", "'x'" },
        { "{\"type\":\"array\",\"maxItems\":100000}", "maxItems" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_t *schema = json_loads(cases[i][0], 0, NULL);
        char why[320] = "";
        tc_grammar *g = tc_schema_grammar(schema, tok, why, sizeof why);
        assert_null(g);
        if (!strstr(why, cases[i][1]))
            fail_msg("%s: '%s' does not name %s", cases[i][0], why, cases[i][1]);
        json_decref(schema);
    }
    /* Nesting past the limit is refused, not a stack overflow. */
    char deep[8192] = "";
    for (int i = 0; i < 500; i++)
        strcat(deep, "{\"items\":");
    strcat(deep, "true");
    for (int i = 0; i < 500; i++)
        strcat(deep, "}");
    json_t *schema = json_loads(deep, 0, NULL);
    char why[320] = "";
    assert_null(tc_schema_grammar(schema, tok, why, sizeof why));
    assert_non_null(strstr(why, "deeper"));
    json_decref(schema);
}

static int setup(void **state)
{
    (void)state;
    if (tc_gguf_open(&gguf, model_path) != TC_OK || tc_tokenizer_from_gguf(&gguf, &tok) != TC_OK) {
        fprintf(stderr, "%s\n", tc_last_error());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tc_tokenizer_destroy(tok);
    tc_gguf_close(&gguf);
    return 0;
}

int main(void)
{
    if (!find_model()) {
        printf("skipped: SmolLM2 is not downloaded (%s); tools/fetch-model gets it\n", model_path);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(schemas_take_their_documents),
        cmocka_unit_test(masks_match_the_recogniser),
        cmocka_unit_test(refused_schemas_name_the_keyword),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

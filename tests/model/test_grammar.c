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
#include "inference/grammar_internal.h"
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

/* A small deterministic generator for the walks below. */
static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t next_random(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)rng;
}

/* Compare the fast mask (tops' verdicts plus unsure tokens) with the full walk at the
 * recogniser's state; count the states compared. */
static void same_masks(tc_grammar_state *s, uint32_t *fast, uint32_t *full, size_t words,
                       const char *what, int *compared)
{
    memset(fast, 0xa5, sizeof *fast * words);
    assert_true(tc__grammar_mask_fast(s, fast));
    assert_true(tc__grammar_mask_reference(s, full));
    for (size_t w = 0; w < words; w++)
        if (fast[w] != full[w]) {
            uint32_t d = fast[w] ^ full[w];
            int32_t t = (int32_t)(32 * w) + __builtin_ctz(d);
            size_t len;
            const char *p = tc_tokenizer_piece(tok, t, &len);
            fail_msg("%s: token %d (%.*s) is %s by the fast mask, %s by the full walk", what, t,
                     (int)len, p ? p : "", fast[w] >> (t & 31) & 1 ? "allowed" : "refused",
                     full[w] >> (t & 31) & 1 ? "allowed" : "refused");
        }
    (*compared)++;
}

/* Random documents: from the start, tokens drawn from the full walk's mask (now and then the
 * end of the document when the grammar allows it), comparing both masks at every state. */
static void random_walks(tc_grammar *g, const char *what, int walks, int steps, int *compared)
{
    size_t words = ((size_t)tc_tokenizer_vocab(tok) + 31) / 32;
    uint32_t *fast = malloc(sizeof *fast * words), *full = malloc(sizeof *full * words);
    int32_t *allowed = malloc(sizeof *allowed * 32 * words);
    assert_true(fast && full && allowed);
    for (int w = 0; w < walks; w++) {
        tc_grammar_state *s = tc_grammar_start(g);
        assert_non_null(s);
        for (int i = 0; i < steps; i++) {
            same_masks(s, fast, full, words, what, compared);
            int32_t n = 0;
            for (int32_t t = 0; t < tc_tokenizer_vocab(tok); t++)
                if (full[t >> 5] >> (t & 31) & 1 && !tc_tokenizer_is_control(tok, t))
                    allowed[n++] = t;
            if (!n || (tc_grammar_done(s) && next_random() % 4 == 0))
                break;
            /* Short tokens half the time: structure, not only long words. */
            int32_t t = allowed[next_random() % (uint32_t)n];
            for (int tries = 0; tries < 8 && next_random() % 2; tries++) {
                size_t len;
                tc_tokenizer_piece(tok, t, &len);
                if (len <= 2)
                    break;
                t = allowed[next_random() % (uint32_t)n];
            }
            assert_true(tc_grammar_accept(s, t));
        }
        tc_grammar_state_free(s);
    }
    free(fast);
    free(full);
    free(allowed);
}

/* The fast masks equal the full walk's on many states of several schemas, of documents the
 * grammars take (whose states recur across nestings) and of random ones. */
static void fast_masks_equal_the_full_walk(void **state)
{
    (void)state;
    static const struct {
        const char *schema, *doc;
    } cases[] = {
        { "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{"
          "\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\","
          "\"maxLength\":8},\"maxItems\":3},\"address\":{\"type\":\"object\",\"properties\":{"
          "\"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"string\",\"minLength\":2,"
          "\"maxLength\":5}},\"required\":[\"city\"]}},\"required\":[\"name\"]}",
          "{\"name\": \"Ada \\\"Countess\\\" L\u00f6velace\", \"age\": -36, \"tags\": "
          "[\"math\", \"\\u00e9t\u00e9\"], \"address\": {\"city\": \"London\", \"zip\": "
          "\"SW1\"}}" },
        { "{\"type\":\"object\",\"properties\":{\"items\":{\"type\":\"array\",\"items\":{"
          "\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},\"price\":{"
          "\"type\":\"number\"},\"ok\":{\"type\":\"boolean\"}}}},\"currency\":{\"enum\":["
          "\"EUR\",\"USD\",1,null]}}}",
          "{\"items\": [{\"id\": 1, \"price\": 4.5e-3, \"ok\": true}, {\"price\": 12}, {}], "
          "\"currency\": \"USD\"}" },
        { "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"r\":{\"type\":\"number\"}},"
          "\"required\":[\"r\"]},{\"type\":\"object\",\"properties\":{\"w\":{\"type\":"
          "\"number\"},\"at\":{\"type\":\"string\",\"format\":\"date-time\"}}},{\"type\":["
          "\"string\",\"null\"]}]}",
          "{\"w\": 0.25, \"at\": \"2024-05-17T09:30:00Z\"}" },
        { "{\"$defs\":{\"N\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":"
          "\"integer\"},\"next\":{\"$ref\":\"#/$defs/N\"}},\"required\":[\"v\"]}},"
          "\"$ref\":\"#/$defs/N\"}",
          "{\"v\": 1, \"next\": {\"v\": 22, \"next\": {\"v\": 333, \"next\": {\"v\": 4}}}}" },
        { NULL, "{\"k\": [1, {\"x\": null, \"y\": [true, false, \"s\"]}, -0.5, [[[]]]], \"m\": "
                "{\"deep\": {\"deeper\": {\"deepest\": \"\\n\"}}}}" },
    };
    size_t words = ((size_t)tc_tokenizer_vocab(tok) + 31) / 32;
    uint32_t *fast = malloc(sizeof *fast * words), *full = malloc(sizeof *full * words);
    assert_true(fast && full);
    int compared = 0;
    uint64_t unsure = 0;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        tc_grammar *g = grammar_of(cases[c].schema);
        int32_t *ids;
        size_t n;
        assert_int_equal(
            tc_tokenizer_encode(tok, cases[c].doc, strlen(cases[c].doc), false, false, &ids, &n),
            TC_OK);
        tc_grammar_state *s = tc_grammar_start(g);
        for (size_t i = 0; i <= n; i++) {
            same_masks(s, fast, full, words, cases[c].doc, &compared);
            if (i < n)
                assert_true(tc_grammar_accept(s, ids[i]));
        }
        assert_true(tc_grammar_done(s));
        tc_grammar_state_free(s);
        tc_host_free(ids);
        random_walks(g, cases[c].schema ? cases[c].schema : "json_object", 3, 40, &compared);
        /* The masks came from the tops' verdicts (no limit of the recogniser near), and some
         * tokens needed the whole state. */
        tc__grammar_mask_stats st;
        tc__grammar_mask_stats_get(g, &st);
        assert_true(st.tops_walks > 0 && st.tops_hits > 0);
        assert_int_equal(st.whole_walks, 0);
        unsure += st.unsure_tokens;
        tc_grammar_unref(g);
    }
    /* Nesting past MAX_STACK: the stacks of the deepest states are cut, and the tops cannot
     * be judged apart from them. */
    tc_grammar *g = grammar_of(NULL);
    tc_grammar_state *s = tc_grammar_start(g);
    int32_t *ids;
    size_t n;
    assert_int_equal(tc_tokenizer_encode(tok, "{\"a\": ", 6, false, false, &ids, &n), TC_OK);
    for (size_t i = 0; i < n; i++)
        assert_true(tc_grammar_accept(s, ids[i]));
    tc_host_free(ids);
    int32_t open_arr = tc_tokenizer_find(tok, "[");
    assert_true(open_arr >= 0);
    int depth = 0;
    for (; depth < 200; depth++) {
        if (depth % 10 == 0 || depth > 110)
            same_masks(s, fast, full, words, "deep arrays", &compared);
        if (!tc_grammar_accept(s, open_arr))
            break;
    }
    assert_true(unsure > 0);
    assert_true(depth > 100);
    tc_grammar_state_free(s);
    tc__grammar_mask_stats st;
    tc__grammar_mask_stats_get(g, &st);
    assert_true(st.whole_walks > 0);
    tc_grammar_unref(g);
    /* More alternatives alive than MAX_STACKS: root ::= "a" x_i for 80 rules x_i ::= "a"*
     * then the byte 'b' + i % 26 (a state drops stacks past 64). */
    g = tc_grammar_create();
    int root = tc_grammar_rule(g);
    for (int i = 0; i < 80; i++) {
        int x = tc_grammar_rule(g), as = tc_grammar_rule(g);
        tc_grammar_lit(g, as, "a", 1);
        tc_grammar_ref(g, as, as);
        tc_grammar_alt(g, as);
        tc_grammar_ref(g, x, as);
        char end = (char)('b' + i % 20);
        tc_grammar_lit(g, x, &end, 1);
        if (i)
            tc_grammar_alt(g, root);
        tc_grammar_lit(g, root, "a", 1);
        tc_grammar_ref(g, root, x);
    }
    assert_true(tc_grammar_finish(g, root, tok));
    random_walks(g, "80 alternatives", 6, 6, &compared);
    tc_grammar_unref(g);
    /* The tops alive plus the base's expansion past MAX_STACKS: root ::= T B, T ::= "a" | "a"
     * c_i for 30 rules c_i ::= one byte, B ::= 40 alternatives "%". After "a" the base's 40
     * stacks come first and the last six c_i are dropped: "an", "as", ... are refused. */
    g = tc_grammar_create();
    root = tc_grammar_rule(g);
    int t = tc_grammar_rule(g), b = tc_grammar_rule(g);
    tc_grammar_ref(g, root, t);
    tc_grammar_ref(g, root, b);
    tc_grammar_lit(g, t, "a", 1);
    const char *ends = "0123456789ABCDEFGHIJKLMNnstrld";
    for (int i = 0; i < 30; i++) {
        int ci = tc_grammar_rule(g);
        tc_grammar_lit(g, ci, ends + i, 1);
        tc_grammar_alt(g, t);
        tc_grammar_lit(g, t, "a", 1);
        tc_grammar_ref(g, t, ci);
    }
    for (int i = 0; i < 40; i++) {
        int bi = tc_grammar_rule(g);
        tc_grammar_lit(g, bi, "%", 1);
        if (i)
            tc_grammar_alt(g, b);
        tc_grammar_ref(g, b, bi);
    }
    assert_true(tc_grammar_finish(g, root, tok));
    s = tc_grammar_start(g);
    same_masks(s, fast, full, words, "30 tops and 40 below", &compared);
    int32_t an = tc_tokenizer_find(tok, "an");
    assert_true(an >= 0 && !(full[an >> 5] >> (an & 31) & 1));
    tc_grammar_state_free(s);
    tc_grammar_unref(g);
    /* Expansions past MAX_EPSILON: root ::= "x" t_1 B with t_i ::= t_(i+1) (40 rules, the last
     * empty) and B ::= b_1, b_i ::= b_(i+1) (40 rules, the last "y"): after "x" the tops empty
     * 40 expansions deep and the base needs 40 more to reach "y", so "x" is refused. */
    g = tc_grammar_create();
    root = tc_grammar_rule(g);
    int chain_t = tc_grammar_rule(g), chain_b = tc_grammar_rule(g);
    tc_grammar_ref(g, root, chain_t);
    tc_grammar_ref(g, root, chain_b);
    tc_grammar_lit(g, chain_t, "x", 1);
    int at_t = tc_grammar_rule(g), at_b = chain_b;
    tc_grammar_ref(g, chain_t, at_t);
    for (int i = 0; i < 40; i++) {
        int nt = tc_grammar_rule(g), nb = tc_grammar_rule(g);
        if (i < 39)
            tc_grammar_ref(g, at_t, nt);
        tc_grammar_ref(g, at_b, nb);
        at_t = nt;
        at_b = nb;
    }
    tc_grammar_lit(g, at_b, "y", 1);
    assert_true(tc_grammar_finish(g, root, tok));
    s = tc_grammar_start(g);
    same_masks(s, fast, full, words, "40 deep over 40 deep", &compared);
    int32_t x = tc_tokenizer_find(tok, "x");
    assert_true(x >= 0 && !(full[x >> 5] >> (x & 31) & 1));
    tc_grammar_state_free(s);
    tc_grammar_unref(g);
    /* Stacks dropped from the tops that the base would not have taken: root ::= T B with
     * T ::= "a" | "a" U, U ::= 65 alternatives c_i ::= two bytes ("00" but c_64 "nn" and c_65
     * "ss"), B 70 expansions deep (so it holds no stack). After "a" the tops hold the emptied
     * stack and 63 c_i (c_64 is dropped); the whole state holds c_1 to c_64: "an" is allowed. */
    g = tc_grammar_create();
    root = tc_grammar_rule(g);
    t = tc_grammar_rule(g);
    int u = tc_grammar_rule(g);
    at_b = tc_grammar_rule(g);
    tc_grammar_ref(g, root, t);
    tc_grammar_ref(g, root, at_b);
    tc_grammar_lit(g, t, "a", 1);
    tc_grammar_alt(g, t);
    tc_grammar_lit(g, t, "a", 1);
    tc_grammar_ref(g, t, u);
    for (int i = 1; i <= 65; i++) {
        int ci = tc_grammar_rule(g);
        tc_grammar_lit(g, ci, i == 64 ? "nn" : i == 65 ? "ss" : "00", 2);
        if (i > 1)
            tc_grammar_alt(g, u);
        tc_grammar_ref(g, u, ci);
    }
    for (int i = 0; i < 70; i++) {
        int nb = tc_grammar_rule(g);
        tc_grammar_ref(g, at_b, nb);
        at_b = nb;
    }
    tc_grammar_lit(g, at_b, "y", 1);
    assert_true(tc_grammar_finish(g, root, tok));
    s = tc_grammar_start(g);
    same_masks(s, fast, full, words, "dropped from the tops", &compared);
    assert_true(full[an >> 5] >> (an & 31) & 1);
    tc_grammar_state_free(s);
    tc_grammar_unref(g);
    print_message("%d states compared\n", compared);
    assert_true(compared > 300);
    free(fast);
    free(full);
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
        cmocka_unit_test(fast_masks_equal_the_full_walk),
        cmocka_unit_test(refused_schemas_name_the_keyword),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

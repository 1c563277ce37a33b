/* The tool-call parser on texts written as each template family's model writes them: Mistral's
 * JSON arrays (several calls, members after the arguments, text around them, one call when
 * parallel calls are off, a cut-short call, things that only look like calls), and ChatML's and
 * Llama's formats as before. Each text is fed whole and in pieces of every size from 1 to 7
 * bytes; the message and the streamed deltas must agree. And the grammar of Mistral's calls
 * (with SmolLM2's tokenizer; skipped when the model is not downloaded): the array and its end
 * exactly once, one call without parallel calls, text before it only when the call is not
 * forced. */
#define _GNU_SOURCE
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <unistd.h>

#include "model/chat.h"
#include "model/gguf.h"
#include "model/tokenizer.h"
#include "runtime/host.h"
#include "server/tools.h"

static tc__tool_format format_of(const char *name)
{
    tc_chat_template t;
    assert_int_equal(tc_chat_template_named(name, &t), TC_OK);
    tc__tool_format f;
    assert_true(tc__tool_format_of(&t, &f));
    return f;
}

/* What a parse gave: the message's content (NULL: none), and its calls as a JSON array. */
typedef struct parsed {
    json_t *content, *calls;
} parsed;

/* text parsed whole (piece 0) or in pieces of `piece` bytes, with a drain after each; the
 * drained deltas put together must equal the message. */
static parsed parse(const tc__tool_format *f, bool parallel, const char *text, size_t piece)
{
    tc__tool_parser *p = tc__tool_parser_create(f, parallel);
    assert_non_null(p);
    size_t n = strlen(text), step = piece ? piece : n;
    json_t *streamed = json_array();
    char *content = calloc(1, n + 1);
    assert_non_null(content);
    for (size_t at = 0;; at += step) {
        size_t len = at < n ? (n - at < step ? n - at : step) : 0;
        if (len)
            tc__tool_parser_feed(p, text + at, len);
        else
            tc__tool_parser_end(p);
        json_t *c, *calls;
        tc__tool_parser_drain(p, &c, &calls);
        if (c)
            strcat(content, json_string_value(c));
        json_decref(c);
        size_t i;
        json_t *d;
        json_array_foreach(calls, i, d)
        {
            size_t index = (size_t)json_integer_value(json_object_get(d, "index"));
            json_t *fn = json_object_get(d, "function");
            if (index == json_array_size(streamed)) {
                assert_non_null(json_object_get(d, "id"));
                json_array_append_new(streamed,
                                      json_pack("{s:O,s:O,s:s}", "id", json_object_get(d, "id"),
                                                "name", json_object_get(fn, "name"), "args", ""));
            }
            assert_true(index < json_array_size(streamed));
            json_t *s = json_array_get(streamed, index);
            char *joined = NULL;
            assert_true(asprintf(&joined, "%s%s", json_string_value(json_object_get(s, "args")),
                                 json_string_value(json_object_get(fn, "arguments"))) > 0);
            json_object_set_new(s, "args", json_string(joined));
            free(joined);
        }
        json_decref(calls);
        if (!len)
            break;
    }
    parsed r;
    tc__tool_parser_message(p, &r.content, &r.calls);
    /* The deltas add up to the message. */
    size_t nc = r.calls ? json_array_size(r.calls) : 0;
    assert_int_equal(json_array_size(streamed), nc);
    assert_int_equal(tc__tool_parser_calls(p), (int)nc);
    for (size_t i = 0; i < nc; i++) {
        json_t *m = json_array_get(r.calls, i), *s = json_array_get(streamed, i),
               *fn = json_object_get(m, "function");
        assert_string_equal(json_string_value(json_object_get(m, "id")),
                            json_string_value(json_object_get(s, "id")));
        assert_string_equal(json_string_value(json_object_get(fn, "name")),
                            json_string_value(json_object_get(s, "name")));
        assert_string_equal(json_string_value(json_object_get(fn, "arguments")),
                            json_string_value(json_object_get(s, "args")));
    }
    if (r.content) {
        assert_string_equal(json_string_value(r.content), content);
    } else {
        /* No content: what was streamed is whitespace around the calls at most. */
        for (const char *c = content; *c; c++)
            assert_true(*c == ' ' || *c == '\n' || *c == '\t' || *c == '\r');
    }
    free(content);
    json_decref(streamed);
    tc__tool_parser_destroy(p);
    return r;
}

/* One expected call. */
typedef struct want {
    const char *name, *args;
} want;

/* text, fed whole and in pieces of 1 to 7 bytes, gives content (NULL: none) and the calls. */
static void expect(const tc__tool_format *f, bool parallel, const char *text, const char *content,
                   const want *calls, size_t n_calls, size_t id_len, const char *id_prefix)
{
    for (size_t piece = 0; piece <= 7; piece++) {
        parsed r = parse(f, parallel, text, piece);
        if (content) {
            assert_non_null(r.content);
            assert_string_equal(json_string_value(r.content), content);
        } else if (r.content) {
            fail_msg("content '%s' where none was expected (piece %zu): %s",
                     json_string_value(r.content), piece, text);
        }
        size_t got = r.calls ? json_array_size(r.calls) : 0;
        if (got != n_calls)
            fail_msg("%zu calls where %zu were expected (piece %zu): %s", got, n_calls, piece,
                     text);
        for (size_t i = 0; i < n_calls; i++) {
            json_t *c = json_array_get(r.calls, i), *fn = json_object_get(c, "function");
            assert_string_equal(json_string_value(json_object_get(c, "type")), "function");
            assert_string_equal(json_string_value(json_object_get(fn, "name")), calls[i].name);
            assert_string_equal(json_string_value(json_object_get(fn, "arguments")), calls[i].args);
            const char *id = json_string_value(json_object_get(c, "id"));
            assert_int_equal(strlen(id), id_len);
            assert_memory_equal(id, id_prefix, strlen(id_prefix));
            for (size_t k = strlen(id_prefix); k < id_len; k++)
                assert_true((id[k] >= 'a' && id[k] <= 'z') || (id[k] >= 'A' && id[k] <= 'Z') ||
                            (id[k] >= '0' && id[k] <= '9'));
            for (size_t j = 0; j < i; j++)
                assert_string_not_equal(
                    id, json_string_value(json_object_get(json_array_get(r.calls, j), "id")));
        }
        json_decref(r.content);
        json_decref(r.calls);
    }
}

static void mistral(const char *text, bool parallel, const char *content, const want *calls,
                    size_t n)
{
    tc__tool_format f = format_of("mistral-v3");
    expect(&f, parallel, text, content, calls, n, 9, "");
}

static void test_mistral_calls(void **state)
{
    (void)state;
    const want weather = { "get_weather", "{\"city\": \"Paris\", \"unit\": \"celsius\"}" };
    /* One call, as the model writes it after its [TOOL_CALLS] token (a space first). */
    mistral(" [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
            "\"celsius\"}}]",
            true, NULL, &weather, 1);
    /* Several, with the "id" member the template writes into the history's calls, nesting and
     * brackets inside strings, and whitespace the grammar would not write. */
    const want two[] = { { "a", "{\"x\": [1, {\"y\": \"}]\"}], \"z\": \"\\\"{\"}" },
                         { "b_2", "{}" },
                         { "c-3", "{\"q\": null}" } };
    const char *many = "[{\"name\": \"a\", \"arguments\": {\"x\": [1, {\"y\": \"}]\"}], \"z\": "
                       "\"\\\"{\"}, \"id\": \"abcdefghi\"},{ \"name\" : \"b_2\",\"arguments\":{}}"
                       " ,\n {\"name\": \"c-3\", \"arguments\": {\"q\": null}, \"id\": "
                       "\"x}]{[\\\"\", \"k\": [1]}]";
    mistral(many, true, NULL, two, 3);
    /* Without parallel calls, the first only. */
    mistral(many, false, NULL, two, 1);
    /* Text before the array is content; after it too. */
    mistral("Sure. [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
            "\"celsius\"}}] Done.",
            true, "Sure. Done.", &weather, 1);
    /* Cut short (max_tokens): the call keeps the arguments it has. */
    const want cut = { "get_weather", "{\"city\": \"Par" };
    mistral("[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par", true, NULL, &cut, 1);
    /* Not calls: content, whole. */
    const char *texts[] = { "[{\"name\": 5}]",
                            "[{\"nome\": \"a\"}]",
                            "[1, 2]",
                            "a [{\"name\": \"a b\", \"arguments\": {}}]",
                            "[{\"name\": \"a\"}]",
                            "[{\"name\": \"a\", \"arguments\": 1}]" };
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
        mistral(texts[i], true, texts[i], NULL, 0);
    /* A later element that is not a call ends the calls: the rest of the list is dropped (no
     * half an array in the content), and text after the list is content. So is a later call
     * cut short before its arguments. */
    const want one = { "a", "{}" };
    mistral("[{\"name\": \"a\", \"arguments\": {}}, 7]", true, NULL, &one, 1);
    mistral("[{\"name\": \"a\", \"arguments\": {}}, {\"nome\": \"]\", \"x\": [1]}, "
            "{\"name\": \"b\", \"arguments\": {}}] ok",
            true, " ok", &one, 1);
    mistral("[{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"argu", true, NULL, &one, 1);
    mistral("[{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"arguments\": 1}]", true,
            NULL, &one, 1);
}

static void test_other_formats(void **state)
{
    (void)state;
    /* ChatML (Hermes) and Llama 3.1 keep OpenAI's ids and their own formats. */
    tc__tool_format f = format_of("chatml");
    const want two[] = { { "a", "{\"q\": 1}" }, { "b", "{}" } };
    expect(&f, true,
           "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"q\": 1}}\n</tool_call>\n"
           "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>",
           NULL, two, 2, 29, "call_");
    f = format_of("llama3.1");
    expect(&f, false, "{\"name\": \"a\", \"parameters\": {\"q\": 1}}", NULL, two, 1, 29, "call_");
    expect(&f, false, "{\"name\": 1}", "{\"name\": 1}", NULL, 0, 29, "call_");
}

static tc_gguf gguf;
static tc_tokenizer *tok;

/* SmolLM2's tokenizer, from TC_SMOLLM2_GGUF or tools/fetch-model's cache; false when absent. */
static bool load_tokenizer(void)
{
    char path[4096];
    const char *env = getenv("TC_SMOLLM2_GGUF"), *cache = getenv("XDG_CACHE_HOME"),
               *home = getenv("HOME");
    if (env)
        snprintf(path, sizeof path, "%s", env);
    else if (cache)
        snprintf(path, sizeof path, "%s/thincuda/SmolLM2-135M-Instruct.Q4_1.gguf", cache);
    else
        snprintf(path, sizeof path, "%s/.cache/thincuda/SmolLM2-135M-Instruct.Q4_1.gguf",
                 home ? home : ".");
    if (access(path, R_OK) != 0)
        return false;
    assert_int_equal(tc_gguf_open(&gguf, path), TC_OK);
    assert_int_equal(tc_tokenizer_from_gguf(&gguf, &tok), TC_OK);
    return true;
}

/* Whether grammar g takes text as a whole reply, fed as its tokens, then the end of text. */
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

static tc_grammar *mistral_grammar(tc_oai_tool_choice choice, bool parallel, bool strict)
{
    json_error_t je;
    json_t *tools = json_loads(
        "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
        "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, "
        "\"required\": [\"city\"], \"additionalProperties\": false}}}]",
        0, &je);
    assert_non_null(tools);
    if (strict)
        json_object_set_new(json_object_get(json_array_get(tools, 0), "function"), "strict",
                            json_true());
    tc_oai_request q;
    memset(&q, 0, sizeof q);
    q.tools = tools;
    q.n_tools = 1;
    q.tool_choice = choice;
    q.parallel_tool_calls = parallel;
    tc__tool_format f = format_of("mistral-v3");
    tc_grammar *g = NULL;
    tc_oai_error err;
    assert_true(tc__tool_grammar(&q, &f, tok, &g, &err));
    assert_non_null(g);
    json_decref(tools);
    return g;
}

static void test_mistral_grammar(void **state)
{
    (void)state;
    if (!tok)
        skip();
    const char *one = "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
               *two = "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
                      "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}]",
               *open = "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
               *twice = "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]]",
               *after = "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}] ok",
               *before = "Let me look. [{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                         "\"Paris\"}}]";
    for (int parallel = 0; parallel < 2; parallel++) {
        tc_grammar *g = mistral_grammar(TC_OAI_TOOLS_REQUIRED, parallel, false);
        assert_true(takes(g, one));
        assert_int_equal(takes(g, two), parallel);
        assert_false(takes(g, open));
        assert_false(takes(g, twice));
        assert_false(takes(g, after));
        assert_false(takes(g, before));
        tc_grammar_unref(g);
        /* auto with a strict function: text first, then a valid call if one is opened */
        g = mistral_grammar(TC_OAI_TOOLS_AUTO, parallel, true);
        assert_true(takes(g, one));
        assert_true(takes(g, before));
        assert_true(takes(g, "No call."));
        assert_int_equal(takes(g, two), parallel);
        assert_false(takes(g, open));
        assert_false(takes(g, "[{\"name\": \"get_time\", \"arguments\": {}}]"));
        tc_grammar_unref(g);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mistral_calls),
        cmocka_unit_test(test_other_formats),
        cmocka_unit_test(test_mistral_grammar),
    };
    bool have = load_tokenizer();
    if (!have)
        printf("(SmolLM2's GGUF is not downloaded: the grammar test skips; tools/fetch-model)\n");
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (have) {
        tc_tokenizer_destroy(tok);
        tc_gguf_close(&gguf);
    }
    return rc;
}

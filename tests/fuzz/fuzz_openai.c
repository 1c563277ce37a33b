/* libFuzzer harness for the OpenAI request parser: any body parses or fails with an error
 * that has a status, a type and a message; a parsed request's fields are within the ranges
 * the engine accepts; a response_format's schema compiles to a grammar or fails with a
 * reason; a chat with tools renders in the ChatML and Llama 3.1 templates or fails with a
 * reason, and its tool grammar builds for both; the tool-call parser reads the body as if the
 * model had written it, in uneven pieces, and what it drains adds up to its whole message.
 * Build and run: tools/fuzz openai [seconds]. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/host.h"

#include "server/openai.h"
#include "server/schema.h"
#include "server/tools.h"

/* s with the bytes of the JSON string v appended (NULs included). */
static json_t *joined(json_t *s, const json_t *v)
{
    size_t a = json_string_length(s), b = v ? json_string_length(v) : 0;
    char *t = malloc(a + b + 1);
    if (!t)
        abort();
    memcpy(t, json_string_value(s), a);
    if (b)
        memcpy(t + a, json_string_value(v), b);
    json_t *r = json_stringn(t, a + b);
    free(t);
    json_decref(s);
    return r ? r : json_string("");
}

/* The tool-call parser over text written in pieces of uneven sizes: the drained content and
 * argument fragments are the message's content and arguments. */
static void parse_calls(const tc__tool_format *f, bool parallel, const char *text, size_t n)
{
    tc__tool_parser *p = tc__tool_parser_create(f, parallel);
    if (!p)
        return;
    json_t *content = json_string(""), *args = json_array();
    for (size_t at = 0, step = 1; at < n; at += step, step = step % 7 + 1) {
        size_t len = at + step <= n ? step : n - at;
        tc__tool_parser_feed(p, text + at, len);
        if (at + len == n)
            tc__tool_parser_end(p);
        json_t *c, *calls;
        tc__tool_parser_drain(p, &c, &calls);
        if (c)
            content = joined(content, c);
        size_t i;
        json_t *d;
        json_array_foreach(calls, i, d)
        {
            size_t k = (size_t)json_integer_value(json_object_get(d, "index"));
            if (k > json_array_size(args))
                abort();
            if (k == json_array_size(args))
                json_array_append_new(args, json_string(""));
            json_t *frag = json_object_get(json_object_get(d, "function"), "arguments");
            json_array_set_new(args, k, joined(json_incref(json_array_get(args, k)), frag));
        }
        json_decref(c);
        json_decref(calls);
    }
    if (n == 0)
        tc__tool_parser_end(p);
    json_t *c, *calls;
    tc__tool_parser_message(p, &c, &calls);
    if (json_array_size(calls) != json_array_size(args) ||
        (int)json_array_size(args) != tc__tool_parser_calls(p) ||
        (!parallel && json_array_size(args) > 1))
        abort();
    for (size_t i = 0; i < json_array_size(args); i++)
        if (!json_equal(
                json_object_get(json_object_get(json_array_get(calls, i), "function"), "arguments"),
                json_array_get(args, i)))
            abort();
    /* Whitespace-only content beside calls is null in the message, but was held back. */
    if (c && !json_equal(c, content))
        abort();
    json_decref(c);
    json_decref(calls);
    json_decref(content);
    json_decref(args);
    tc__tool_parser_destroy(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int kind = 0; kind < 2; kind++) {
        tc_oai_request r;
        tc_oai_error e;
        if (tc_oai_parse((tc_oai_kind)kind, (const char *)data, size, &r, &e)) {
            if (r.n < 1 || r.n > TC_OAI_MAX_N || r.max_tokens < 0 || r.n_stop > TC_OAI_MAX_STOP ||
                r.top_logprobs < 0 || r.top_logprobs > 20 || !(r.sample.temperature >= 0) ||
                (kind == TC_OAI_CHAT && r.n_messages == 0) ||
                (kind == TC_OAI_COMPLETION && !r.prompt && r.n_prompt_tokens == 0))
                abort();
            for (size_t i = 0; i < r.n_messages; i++)
                if (!r.messages[i].role || !r.messages[i].content)
                    abort();
            if ((r.tools != NULL) != (r.n_tools > 0) ||
                (r.tool_choice == TC_OAI_TOOLS_NAMED) != (r.tool_name != NULL))
                abort();
            for (int i = 0; i < r.n_stop; i++)
                if (!r.stop[i][0])
                    abort();
            static const char *const names[] = { "chatml", "llama3.1" };
            for (int t = 0; t < 2 && kind == TC_OAI_CHAT; t++) {
                tc_chat_template tmpl;
                tc__tool_format f;
                char *text = NULL;
                if (tc_chat_template_named(names[t], &tmpl) != TC_OK ||
                    !tc__tool_format_of(&tmpl, &f))
                    abort();
                if (tc_chat_format_tools(&tmpl, r.messages, r.calls, r.n_messages, r.tools_text,
                                         true, &text, NULL, NULL) == TC_OK) {
                    if (!text)
                        abort();
                } else if (!tc_last_error()[0]) {
                    abort();
                }
                tc_host_free(text);
                tc_grammar *g = NULL;
                if (r.tools && tc__tool_grammar(&r, &f, NULL, &g, &e)) {
                    tc_grammar_state_free(g ? tc_grammar_start(g) : NULL);
                    tc_grammar_unref(g);
                } else if (r.tools && (e.status < 400 || !e.message[0])) {
                    abort();
                }
                parse_calls(&f, r.parallel_tool_calls, (const char *)data, size);
            }
            if (r.json_schema || r.json_object) {
                char why[320] = "";
                tc_grammar *g = tc_schema_grammar(r.json_schema, NULL, why, sizeof why);
                if (!g && !why[0])
                    abort();
                tc_grammar_state_free(g ? tc_grammar_start(g) : NULL);
                tc_grammar_unref(g);
            }
        } else if (e.status < 400 || !e.message[0] || !e.type[0]) {
            abort();
        }
        tc_oai_request_free(&r);
    }
    return 0;
}

/* OpenAI request bodies: JSON (jansson, which also rejects invalid UTF-8) to a checked
 * tc_oai_request. Lenient where OpenAI's clients send extra fields (unknown keys are
 * ignored), strict about every value we act on. */
#define _GNU_SOURCE
#include "server/openai.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/host.h"

bool tc_oai_fail(tc_oai_error *err, int status, const char *type, const char *param,
                 const char *code, const char *fmt, ...)
{
    err->status = status;
    snprintf(err->type, sizeof err->type, "%s", type);
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    snprintf(err->code, sizeof err->code, "%s", code ? code : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return false;
}

#define BAD(param, ...) tc_oai_fail(err, 400, "invalid_request_error", param, NULL, __VA_ARGS__)

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* A number in [lo, hi] (null or absent: *v unchanged). */
static bool get_number(json_t *root, const char *key, double lo, double hi, float *v,
                       tc_oai_error *err)
{
    json_t *x = json_object_get(root, key);
    if (!x || json_is_null(x))
        return true;
    if (!json_is_number(x))
        return BAD(key, "'%s' must be a number, not %s", key, type_name(x));
    double d = json_number_value(x);
    if (!(d >= lo && d <= hi))
        return BAD(key, "'%s' must be between %g and %g, got %g", key, lo, hi, d);
    *v = (float)d;
    return true;
}

/* An integer in [lo, hi] (null or absent: *v unchanged, *given false). */
static bool get_int(json_t *root, const char *key, long long lo, long long hi, long long *v,
                    bool *given, tc_oai_error *err)
{
    json_t *x = json_object_get(root, key);
    if (given)
        *given = false;
    if (!x || json_is_null(x))
        return true;
    if (json_is_real(x) && floor(json_real_value(x)) == json_real_value(x) &&
        fabs(json_real_value(x)) < 9e15) {
        *v = (long long)json_real_value(x); /* 16.0: JavaScript clients send integers so */
    } else if (json_is_integer(x)) {
        *v = json_integer_value(x);
    } else {
        return BAD(key, "'%s' must be an integer, not %s", key, type_name(x));
    }
    if (*v < lo || *v > hi)
        return BAD(key, "'%s' must be between %lld and %lld, got %lld", key, lo, hi, *v);
    if (given)
        *given = true;
    return true;
}

static bool get_bool(json_t *root, const char *key, bool *v, tc_oai_error *err)
{
    json_t *x = json_object_get(root, key);
    if (!x || json_is_null(x))
        return true;
    if (!json_is_boolean(x))
        return BAD(key, "'%s' must be a boolean, not %s", key, type_name(x));
    *v = json_is_true(x);
    return true;
}

/* A parameter we do not implement: present with a value that would change the answer. */
static bool unsupported(json_t *root, const char *key, tc_oai_error *err)
{
    json_t *x = json_object_get(root, key);
    bool empty = !x || json_is_null(x) || json_is_false(x) ||
                 (json_is_array(x) && json_array_size(x) == 0) ||
                 (json_is_object(x) && json_object_size(x) == 0) ||
                 (json_is_string(x) && !strcmp(json_string_value(x), "none"));
    if (empty)
        return true;
    return BAD(key, "'%s' is not supported by this server", key);
}

/* Concatenate a message's content: a string, or an array of {"type": "text", "text": ...}. */
static bool content_of(json_t *c, size_t i, char **out, tc_oai_error *err)
{
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].content", i);
    if (!c || json_is_null(c)) {
        *out = strdup("");
        return *out ? true : tc_oai_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    if (json_is_string(c)) {
        *out = strndup(json_string_value(c), json_string_length(c));
        return *out ? true : tc_oai_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    if (!json_is_array(c))
        return BAD(param, "'%s' must be a string or an array of text parts, not %s", param,
                   type_name(c));
    size_t total = 0, k;
    json_t *part;
    json_array_foreach(c, k, part)
    {
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type) ||
            strcmp(json_string_value(type), "text") || !json_is_string(text))
            return BAD(param,
                       "'%s[%zu]' must be {\"type\": \"text\", \"text\": \"...\"}; only "
                       "text parts are supported",
                       param, k);
        total += json_string_length(text);
    }
    char *s = malloc(total + 1);
    if (!s)
        return tc_oai_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    size_t at = 0;
    json_array_foreach(c, k, part)
    {
        json_t *text = json_object_get(part, "text");
        memcpy(s + at, json_string_value(text), json_string_length(text));
        at += json_string_length(text);
    }
    s[at] = 0;
    *out = s;
    return true;
}

/* A function name as OpenAI allows it: 1 to 64 of [A-Za-z0-9_-]. */
static bool good_name(const char *s)
{
    size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-");
    return n > 0 && n <= TC_OAI_MAX_NAME && s[n] == 0;
}

/* An assistant message's tool_calls: [{"id", "type": "function", "function": {"name",
 * "arguments": JSON text}}], into r->calls[i]. */
static bool parse_tool_calls(json_t *tc, size_t i, size_t n_msgs, tc_oai_request *r,
                             tc_oai_error *err)
{
    char param[96];
    snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
    if (!tc || json_is_null(tc))
        return true;
    if (!json_is_array(tc))
        return BAD(param, "'%s' must be an array, not %s", param, type_name(tc));
    size_t n = json_array_size(tc);
    if (n > TC_OAI_MAX_TOOLS)
        return BAD(param, "'%s' has %zu calls; at most %d", param, n, TC_OAI_MAX_TOOLS);
    if (n == 0)
        return true;
    if (!r->calls) {
        r->calls = calloc(n_msgs, sizeof *r->calls);
        if (!r->calls)
            return tc_oai_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    tc_chat_tool_call *v = calloc(n, sizeof *v);
    if (!v)
        return tc_oai_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    r->calls[i] = (tc_chat_calls){ v, n };
    for (size_t k = 0; k < n; k++) {
        json_t *c = json_array_get(tc, k), *id = json_object_get(c, "id"),
               *type = json_object_get(c, "type"), *fn = json_object_get(c, "function");
        json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
        snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu]", i, k);
        if (!json_is_object(c) || !json_is_string(id) || !json_is_object(fn) ||
            (type && !(json_is_string(type) && !strcmp(json_string_value(type), "function"))))
            return BAD(param,
                       "'%s' must be {\"id\": ..., \"type\": \"function\", \"function\": "
                       "{\"name\": ..., \"arguments\": ...}}",
                       param);
        if (!json_is_string(name) || !good_name(json_string_value(name)))
            return BAD(param,
                       "'%s.function.name' must be a function name (1 to %d of "
                       "A-Z, a-z, 0-9, _ and -)",
                       param, TC_OAI_MAX_NAME);
        json_error_t je;
        json_t *parsed = json_is_string(args) ? json_loads(json_string_value(args), 0, &je) : NULL;
        bool object = json_is_object(parsed);
        json_decref(parsed);
        if (!object)
            return BAD(param, "'%s.function.arguments' must be the JSON text of an object", param);
        v[k] = (tc_chat_tool_call){ json_string_value(id), json_string_value(name),
                                    json_string_value(args) };
    }
    return true;
}

/* Whether a tool message's tool_call_id names one of the calls (as OpenAI requires of the
 * assistant message that made calls last; calls per message are bounded). */
static bool answers_call(const tc_chat_calls *calls, const char *id)
{
    for (size_t k = 0; calls && k < calls->n; k++)
        if (!strcmp(calls->call[k].id, id))
            return true;
    return false;
}

static bool parse_messages(json_t *root, tc_oai_request *r, tc_oai_error *err)
{
    json_t *msgs = json_object_get(root, "messages");
    if (!msgs)
        return BAD("messages", "'messages' is required");
    if (!json_is_array(msgs))
        return BAD("messages", "'messages' must be an array, not %s", type_name(msgs));
    size_t n = json_array_size(msgs);
    if (n == 0)
        return BAD("messages", "'messages' must not be empty");
    r->messages = calloc(n, sizeof *r->messages);
    if (!r->messages)
        return tc_oai_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    const tc_chat_calls *last = NULL; /* the calls of the last message that made some */
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(msgs, i), *role = json_object_get(m, "role");
        char param[64];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m))
            return BAD(param, "'%s' must be an object, not %s", param, type_name(m));
        snprintf(param, sizeof param, "messages[%zu].role", i);
        if (!json_is_string(role))
            return BAD(param, "'%s' must be a string", param);
        const char *name = json_string_value(role);
        if (!strcmp(name, "developer"))
            name = "system";
        if (strcmp(name, "system") && strcmp(name, "user") && strcmp(name, "assistant") &&
            strcmp(name, "tool"))
            return BAD(param, "'%s' is '%.32s'; want system, developer, user, assistant or tool",
                       param, json_string_value(role));
        json_t *calls = json_object_get(m, "tool_calls");
        if (calls && !json_is_null(calls) && strcmp(name, "assistant")) {
            snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
            return BAD(param, "only assistant messages carry 'tool_calls'");
        }
        char *content = NULL;
        if (!content_of(json_object_get(m, "content"), i, &content, err))
            return false;
        r->messages[i] = (tc_chat_message){ name, content, NULL };
        r->n_messages = i + 1;
        if (!parse_tool_calls(calls, i, n, r, err))
            return false;
        if (r->calls && r->calls[i].n)
            last = &r->calls[i];
        if (!strcmp(name, "tool")) {
            json_t *id = json_object_get(m, "tool_call_id");
            snprintf(param, sizeof param, "messages[%zu].tool_call_id", i);
            if (!json_is_string(id))
                return BAD(param, "a tool message needs 'tool_call_id', the id of the call it "
                                  "answers");
            if (!answers_call(last, json_string_value(id)))
                return BAD(param,
                           "'%s' is '%.64s', which is not a call of the assistant message "
                           "before it",
                           param, json_string_value(id));
            r->messages[i].tool_call_id = json_string_value(id);
        }
    }
    return true;
}

/* tools, tool_choice and parallel_tool_calls (chat). */
static bool parse_tools(json_t *root, tc_oai_request *r, tc_oai_error *err)
{
    json_t *tools = json_object_get(root, "tools"), *choice = json_object_get(root, "tool_choice");
    if (tools && json_is_null(tools))
        tools = NULL;
    if (tools && !json_is_array(tools))
        return BAD("tools", "'tools' must be an array of tools, not %s", type_name(tools));
    size_t n = tools ? json_array_size(tools) : 0;
    if (n > TC_OAI_MAX_TOOLS)
        return BAD("tools", "'tools' has %zu tools; at most %d", n, TC_OAI_MAX_TOOLS);
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(tools, i), *type = json_object_get(t, "type"),
               *fn = json_object_get(t, "function");
        char param[64];
        snprintf(param, sizeof param, "tools[%zu]", i);
        if (!json_is_object(t) || !json_is_string(type) ||
            strcmp(json_string_value(type), "function") || !json_is_object(fn))
            return BAD(param, "'%s' must be {\"type\": \"function\", \"function\": {...}}", param);
        json_t *name = json_object_get(fn, "name"), *desc = json_object_get(fn, "description"),
               *params = json_object_get(fn, "parameters"), *strict = json_object_get(fn, "strict");
        snprintf(param, sizeof param, "tools[%zu].function.name", i);
        if (!json_is_string(name) || !good_name(json_string_value(name)))
            return BAD(param, "'%s' must be a function name: 1 to %d of A-Z, a-z, 0-9, _ and -",
                       param, TC_OAI_MAX_NAME);
        for (size_t k = 0; k < i; k++)
            if (!strcmp(json_string_value(name),
                        json_string_value(json_object_get(
                            json_object_get(json_array_get(tools, k), "function"), "name"))))
                return BAD(param, "two tools are named '%s'", json_string_value(name));
        snprintf(param, sizeof param, "tools[%zu].function.description", i);
        if (desc && !json_is_null(desc) && !json_is_string(desc))
            return BAD(param, "'%s' must be a string, not %s", param, type_name(desc));
        snprintf(param, sizeof param, "tools[%zu].function.parameters", i);
        if (params && !json_is_object(params))
            return BAD(param, "'%s' must be a JSON schema (an object), not %s", param,
                       type_name(params));
        snprintf(param, sizeof param, "tools[%zu].function.strict", i);
        if (strict && !json_is_null(strict) && !json_is_boolean(strict))
            return BAD(param, "'%s' must be a boolean, not %s", param, type_name(strict));
    }
    r->parallel_tool_calls = true;
    if (!get_bool(root, "parallel_tool_calls", &r->parallel_tool_calls, err))
        return false;
    r->tool_choice = n ? TC_OAI_TOOLS_AUTO : TC_OAI_TOOLS_NONE;
    if (choice && !json_is_null(choice)) {
        const char *c = json_string_value(choice);
        json_t *fn = json_object_get(choice, "function"), *type = json_object_get(choice, "type");
        if (c && !strcmp(c, "none")) {
            r->tool_choice = TC_OAI_TOOLS_NONE;
        } else if (c && (!strcmp(c, "auto") || !strcmp(c, "required"))) {
            if (!n)
                return BAD("tool_choice", "'tool_choice' '%s' needs 'tools'", c);
            r->tool_choice = !strcmp(c, "auto") ? TC_OAI_TOOLS_AUTO : TC_OAI_TOOLS_REQUIRED;
        } else if (json_is_object(choice) && json_is_string(type) &&
                   !strcmp(json_string_value(type), "function") &&
                   json_is_string(json_object_get(fn, "name"))) {
            const char *want = json_string_value(json_object_get(fn, "name"));
            size_t i;
            for (i = 0; i < n; i++)
                if (!strcmp(want,
                            json_string_value(json_object_get(
                                json_object_get(json_array_get(tools, i), "function"), "name"))))
                    break;
            if (i == n)
                return BAD("tool_choice",
                           "'tool_choice' names the function '%.64s', which is "
                           "not in 'tools'",
                           want);
            r->tool_choice = TC_OAI_TOOLS_NAMED;
            r->tool_name = want;
        } else {
            return BAD("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                                      "{\"type\": \"function\", \"function\": {\"name\": ...}}");
        }
    }
    if (n) {
        r->tools = tools;
        r->n_tools = n;
        r->tools_text = json_dumps(tools, JSON_COMPACT);
        if (!r->tools_text)
            return tc_oai_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    return true;
}

static bool parse_prompt(json_t *root, tc_oai_request *r, tc_oai_error *err)
{
    json_t *p = json_object_get(root, "prompt");
    if (!p)
        return BAD("prompt", "'prompt' is required");
    /* A list of one prompt is that prompt. */
    if (json_is_array(p) && json_array_size(p) == 1 &&
        (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
        p = json_array_get(p, 0);
    if (json_is_string(p)) {
        r->prompt = json_string_value(p);
        return true;
    }
    if (!json_is_array(p))
        return BAD("prompt", "'prompt' must be a string or an array of token ids, not %s",
                   type_name(p));
    size_t n = json_array_size(p), i;
    json_t *t;
    if (n == 0)
        return BAD("prompt", "'prompt' must not be empty");
    r->prompt_tokens = malloc(sizeof(int32_t) * n);
    if (!r->prompt_tokens)
        return tc_oai_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    json_array_foreach(p, i, t)
    {
        if (json_is_string(t) || json_is_array(t))
            return BAD("prompt", "'prompt' holds %zu prompts; this server takes one per request",
                       n);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX)
            return BAD("prompt", "'prompt[%zu]' must be a token id (a non-negative integer)", i);
        r->prompt_tokens[i] = (int32_t)json_integer_value(t);
    }
    r->n_prompt_tokens = n;
    return true;
}

static bool parse_stop(json_t *root, tc_oai_request *r, tc_oai_error *err)
{
    json_t *s = json_object_get(root, "stop");
    if (!s || json_is_null(s))
        return true;
    json_t *one[1] = { s };
    size_t n = 1;
    if (json_is_array(s)) {
        n = json_array_size(s);
        if (n > TC_OAI_MAX_STOP)
            return BAD("stop", "'stop' has %zu strings; at most %d", n, TC_OAI_MAX_STOP);
    } else if (!json_is_string(s)) {
        return BAD("stop", "'stop' must be a string or an array of strings, not %s", type_name(s));
    }
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_is_array(s) ? json_array_get(s, i) : one[0];
        if (!json_is_string(x))
            return BAD("stop", "'stop[%zu]' must be a string, not %s", i, type_name(x));
        size_t len = json_string_length(x);
        if (len == 0 || len > TC_OAI_MAX_STOP_LEN)
            return BAD("stop", "'stop[%zu]' must be 1 to %d bytes long", i, TC_OAI_MAX_STOP_LEN);
        r->stop[r->n_stop++] = json_string_value(x);
    }
    return true;
}

/* logit_bias: an object mapping token ids, written as decimal strings, to numbers in
 * [-100, 100]. */
static bool parse_bias(json_t *root, tc_oai_request *r, tc_oai_error *err)
{
    json_t *b = json_object_get(root, "logit_bias");
    if (!b || json_is_null(b))
        return true;
    if (!json_is_object(b))
        return BAD("logit_bias", "'logit_bias' must be an object of token ids to numbers, not %s",
                   type_name(b));
    size_t n = json_object_size(b);
    if (n > TC_OAI_MAX_BIAS)
        return BAD("logit_bias", "'logit_bias' has %zu tokens; at most %d", n, TC_OAI_MAX_BIAS);
    r->bias_ids = malloc(sizeof *r->bias_ids * (n ? n : 1));
    r->bias = malloc(sizeof *r->bias * (n ? n : 1));
    if (!r->bias_ids || !r->bias)
        return tc_oai_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    const char *key;
    json_t *v;
    json_object_foreach(b, key, v)
    {
        char *end;
        long long id = strtoll(key, &end, 10);
        if (!*key || *end || key[0] == '-' || key[0] == '+' || key[0] == ' ' || id > INT32_MAX)
            return BAD("logit_bias",
                       "'logit_bias' keys must be token ids (non-negative integers), not '%.32s'",
                       key);
        if (!json_is_number(v) || !(json_number_value(v) >= -100 && json_number_value(v) <= 100))
            return BAD("logit_bias", "'logit_bias[\"%.32s\"]' must be a number in [-100, 100]",
                       key);
        r->bias_ids[r->n_bias] = (int32_t)id;
        r->bias[r->n_bias++] = (float)json_number_value(v);
    }
    return true;
}

static bool parse_common(json_t *root, tc_oai_request *r, tc_oai_error *err)
{
    json_t *model = json_object_get(root, "model");
    if (model && !json_is_null(model)) {
        if (!json_is_string(model))
            return BAD("model", "'model' must be a string, not %s", type_name(model));
        r->model = json_string_value(model);
    }
    long long v;
    bool given, given2;
    /* OpenAI's defaults: 16 tokens for completions, up to the context for chat. */
    r->max_tokens = r->kind == TC_OAI_COMPLETION ? 16 : 0;
    if (!get_int(root, "max_tokens", 1, 1ll << 40, &v, &given, err))
        return false;
    if (given)
        r->max_tokens = v;
    if (r->kind == TC_OAI_CHAT) {
        if (!get_int(root, "max_completion_tokens", 1, 1ll << 40, &v, &given2, err))
            return false;
        if (given2)
            r->max_tokens = v;
    }
    r->n = 1;
    if (!get_int(root, "n", 1, TC_OAI_MAX_N, &v, &given, err))
        return false;
    if (given)
        r->n = (int)v;
    r->sample = tc_sample_defaults();
    r->sample.temperature = 1.0f;
    if (!get_number(root, "temperature", 0, 2, &r->sample.temperature, err) ||
        !get_number(root, "top_p", 0, 1, &r->sample.top_p, err) ||
        !get_number(root, "min_p", 0, 1, &r->sample.min_p, err) ||
        !get_number(root, "presence_penalty", -2, 2, &r->sample.presence_penalty, err) ||
        !get_number(root, "frequency_penalty", -2, 2, &r->sample.frequency_penalty, err) ||
        !get_number(root, "repetition_penalty", 0.01, 100, &r->sample.repetition_penalty, err))
        return false;
    if (r->sample.top_p == 0) /* nothing but the most likely token */
        r->sample.temperature = 0;
    if (!get_int(root, "top_k", -1, 1 << 30, &v, &given, err))
        return false;
    if (given)
        r->sample.top_k = v < 0 ? 0 : (int)v;
    if (!get_int(root, "seed", INT64_MIN, INT64_MAX, &v, &r->seed_set, err))
        return false;
    if (r->seed_set)
        r->sample.seed = (uint64_t)v;
    if (!parse_stop(root, r, err) || !get_bool(root, "stream", &r->stream, err) ||
        !get_bool(root, "ignore_eos", &r->ignore_eos, err))
        return false;
    json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!r->stream)
            return BAD("stream_options", "'stream_options' is only allowed with stream: true");
        if (!json_is_object(so))
            return BAD("stream_options", "'stream_options' must be an object, not %s",
                       type_name(so));
        if (!get_bool(so, "include_usage", &r->include_usage, err)) {
            snprintf(err->param, sizeof err->param, "stream_options.include_usage");
            return false;
        }
    }
    json_t *rf = json_object_get(root, "response_format");
    if (rf && !json_is_null(rf)) {
        json_t *type = json_object_get(rf, "type");
        if (!json_is_object(rf) || !json_is_string(type))
            return BAD("response_format", "'response_format' must be {\"type\": \"text\"}, "
                                          "{\"type\": \"json_object\"} or {\"type\": "
                                          "\"json_schema\", \"json_schema\": {...}}");
        const char *t = json_string_value(type);
        if (!strcmp(t, "json_object")) {
            r->json_object = true;
        } else if (!strcmp(t, "json_schema")) {
            json_t *js = json_object_get(rf, "json_schema");
            json_t *schema = json_object_get(js, "schema");
            if (!json_is_object(js))
                return BAD("response_format.json_schema",
                           "'response_format.json_schema' must be an object with 'schema'");
            if (!json_is_object(schema) && !json_is_boolean(schema))
                return BAD("response_format.json_schema.schema",
                           "'response_format.json_schema.schema' must be a JSON schema (an "
                           "object)");
            r->json_schema = schema;
        } else if (strcmp(t, "text")) {
            return BAD("response_format.type",
                       "response_format type '%.32s' is not supported; "
                       "want text, json_object or json_schema",
                       t);
        }
    }
    if (!parse_bias(root, r, err) || (r->kind != TC_OAI_CHAT && !unsupported(root, "tools", err)) ||
        !unsupported(root, "functions", err) || !unsupported(root, "suffix", err) ||
        !unsupported(root, "echo", err))
        return false;
    if (!get_int(root, "best_of", 1, TC_OAI_MAX_N, &v, &given, err))
        return false;
    if (given && v != r->n)
        return BAD("best_of", "'best_of' other than n is not supported");
    /* Log-probabilities: chat has logprobs (boolean) and top_logprobs (0..20); completions a
     * number of alternatives (0..5) in logprobs. */
    if (r->kind == TC_OAI_CHAT) {
        if (!get_bool(root, "logprobs", &r->logprobs, err) ||
            !get_int(root, "top_logprobs", 0, 20, &v, &given, err))
            return false;
        if (given && !r->logprobs && v > 0)
            return BAD("top_logprobs", "'top_logprobs' needs logprobs: true");
        r->top_logprobs = given ? (int)v : 0;
    } else {
        if (!get_int(root, "logprobs", 0, 5, &v, &given, err))
            return false;
        r->logprobs = given;
        r->top_logprobs = given ? (int)v : 0;
    }
    return true;
}

bool tc_oai_parse(tc_oai_kind kind, const char *body, size_t len, tc_oai_request *out,
                  tc_oai_error *err)
{
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    out->kind = kind;
    out->add_generation_prompt = true;
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return BAD(NULL, "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line,
                   je.column);
    out->root = root;
    if (!json_is_object(root))
        return BAD(NULL, "the body must be a JSON object, not %s", type_name(root));
    if (kind == TC_OAI_CHAT) {
        if (!parse_messages(root, out, err) || !parse_tools(root, out, err) ||
            !get_bool(root, "add_generation_prompt", &out->add_generation_prompt, err))
            return false;
    } else if (!parse_prompt(root, out, err)) {
        return false;
    }
    return parse_common(root, out, err);
}

void tc_oai_request_free(tc_oai_request *r)
{
    for (size_t i = 0; i < r->n_messages; i++)
        free((char *)r->messages[i].content);
    free(r->messages);
    if (r->calls)
        for (size_t i = 0; i < r->n_messages; i++)
            free((void *)r->calls[i].call);
    free(r->calls);
    free(r->tools_text);
    free(r->prompt_tokens);
    free(r->bias_ids);
    free(r->bias);
    json_decref(r->root);
    memset(r, 0, sizeof *r);
}

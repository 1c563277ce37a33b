/* Native chat templates. Recognition looks for each format's markers in the Jinja source;
 * a default system prompt written literally into a ChatML template (SmolLM2's) is kept.
 * Tools follow the templates that define them: Qwen 2.5's for ChatML (the Hermes format),
 * Meta's Llama 3.1 template and Mistral's v3 ones (7B v0.3, Nemo), as transformers'
 * apply_chat_template renders them. */
#define _GNU_SOURCE
#include "model/chat.h"
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "runtime/host.h"

static bool has(const char *s, size_t n, const char *needle)
{
    return memmem(s, n, needle, strlen(needle)) != NULL;
}

/* The text between "<|im_start|>system\n" (the newline written as a real newline or as \n in
 * the Jinja string) and "<|im_end|>" inside one string literal of the template: the first
 * such occurrence (Qwen 2.5 opens a system turn for its tools before its default one). */
static void chatml_default_system(const char *s, size_t n, char *out, size_t cap)
{
    out[0] = 0;
    const char *marks[] = { "<|im_start|>system\n", "<|im_start|>system\\n" };
    for (int k = 0; k < 2; k++) {
        size_t mlen = strlen(marks[k]);
        for (const char *p = memmem(s, n, marks[k], mlen); p;
             p = memmem(p, n - (size_t)(p - s), marks[k], mlen)) {
            p += mlen;
            const char *e = memmem(p, n - (size_t)(p - s), "<|im_end|>", 10);
            if (!e || e == p)
                continue;
            /* Only literal text: a Jinja expression or the string's end means no default. */
            size_t len = (size_t)(e - p);
            if (memchr(p, '{', len) || memchr(p, '\'', len) || memchr(p, '"', len) || len >= cap)
                continue;
            memcpy(out, p, len);
            out[len] = 0;
            return;
        }
    }
}

/* A Jinja string literal at *p ('...' or "...", Python's escapes \n \t \\ \' \"), appended
 * to out (at *at of cap); *p moves past it. False when it is not one or does not fit. */
static bool jinja_string(const char **p, const char *end, char *out, size_t *at, size_t cap)
{
    const char *s = *p;
    if (s == end || (*s != '\'' && *s != '"'))
        return false;
    char q = *s++;
    for (; s < end && *s != q; s++) {
        char c = *s;
        if (c == '\\') {
            if (++s == end)
                return false;
            c = *s == 'n' ? '\n' : *s == 't' ? '\t' : *s;
            if (!strchr("nt\\'\"", *s))
                return false;
        }
        if (*at + 1 >= cap)
            return false;
        out[(*at)++] = c;
    }
    if (s == end)
        return false;
    out[*at] = 0;
    *p = s + 1;
    return true;
}

/* Mistral Small 3's default system message: `set default_system_message = "..." + today +
 * "..."`, today being strftime_now("%Y-%m-%d"). False when the expression is anything else. */
static bool mistral7_default_system(const char *s, size_t n, tc_chat_template *t)
{
    static const char key[] = "set default_system_message = ";
    const char *p = memmem(s, n, key, sizeof key - 1), *end = s + n;
    size_t at = 0;
    t->today_at = -1;
    if (!p)
        return false;
    p += sizeof key - 1;
    for (;;) {
        while (p < end && *p == ' ')
            p++;
        if (p + 5 <= end && !memcmp(p, "today", 5) && t->today_at < 0 &&
            has(s, n, "set today = strftime_now(\"%Y-%m-%d\")")) {
            t->today_at = (int)at;
            p += 5;
        } else if (!jinja_string(&p, end, t->default_system, &at, sizeof t->default_system)) {
            return false;
        }
        while (p < end && *p == ' ')
            p++;
        if (p < end && *p == '+') {
            p++;
            continue;
        }
        return end - p >= 2 && !memcmp(p, "%}", 2);
    }
}

tc_status tc_chat_template_detect(const char *s, size_t n, tc_chat_template *out)
{
    memset(out, 0, sizeof *out);
    out->today_at = -1;
    if (has(s, n, "<|im_start|>")) {
        out->kind = TC_CHAT_CHATML;
        chatml_default_system(s, n, out->default_system, sizeof out->default_system);
    } else if (has(s, n, "<|start_header_id|>")) {
        out->kind = TC_CHAT_LLAMA3;
        /* Llama 3.1 and later state the knowledge cut-off and the date in every system turn;
         * 3.2's template takes the date from strftime_now. */
        out->llama31 = has(s, n, "Cutting Knowledge Date");
        out->today = out->llama31 && has(s, n, "strftime_now");
    } else if (has(s, n, "[INST]") && has(s, n, "<<SYS>>")) {
        out->kind = TC_CHAT_LLAMA2;
    } else if (has(s, n, "[SYSTEM_PROMPT]") && has(s, n, "[INST]")) {
        /* Mistral's v7 (Tekken) template as Mistral Small 3 ships it: a default system
         * message with the date. Those that also define tools (v7's [TOOL_CALLS]name[ARGS]
         * calls) or whose default is another expression are not this format. */
        out->kind = TC_CHAT_MISTRAL7;
        if (has(s, n, "[AVAILABLE_TOOLS]") || has(s, n, "[TOOL_CALLS]") ||
            !mistral7_default_system(s, n, out))
            goto unknown;
    } else if (has(s, n, "[INST]") && has(s, n, "loop.last and system_message")) {
        /* Mistral's v3 templates (7B Instruct v0.3 with SentencePiece, Nemo with Tekken): the
         * system message joins the last user turn; tools, calls and results in control
         * tokens. v0.3 writes "[INST] " and " answer" (trimmed), Tekken neither space. */
        out->kind = TC_CHAT_MISTRAL3;
        out->spaced = has(s, n, "\"[INST] \"") || has(s, n, "'[INST] '");
        out->trim = has(s, n, "|trim + eos_token");
    } else if (has(s, n, "' [INST] '")) {
        /* Mistral's template with a system message, which opens each turn with a space. */
        out->kind = TC_CHAT_MISTRAL;
    } else if (has(s, n, "'[INST] '") && has(s, n, "' [/INST]'") && !has(s, n, "system_message")) {
        out->kind = TC_CHAT_MISTRAL;
        out->mistral_legacy = true;
        out->eos_space = has(s, n, "eos_token + ' '");
    } else if (has(s, n, "<|user|>")) {
        out->kind = TC_CHAT_ZEPHYR;
    } else {
        goto unknown;
    }
    return TC_OK;
unknown:
    memset(out, 0, sizeof *out);
    return tc_set_error(TC_ERR_UNSUPPORTED, "tc_chat_template",
                        "unrecognised chat template (known: ChatML, Llama 3, Llama 2, Zephyr, "
                        "Mistral v0.1/v0.2, v3 (v0.3, Nemo) and v7 (Small 3)); choose one with "
                        "--template chatml|llama3|llama2|zephyr|mistral|mistral-v3|"
                        "mistral-tekken|mistral-v7");
}

tc_status tc_chat_template_named(const char *name, tc_chat_template *out)
{
    static const struct {
        const char *name;
        tc_chat_kind kind;
        bool llama31, spaced;
    } names[] = { { "chatml", TC_CHAT_CHATML, false, false },
                  { "llama3", TC_CHAT_LLAMA3, false, false },
                  { "llama3.1", TC_CHAT_LLAMA3, true, false },
                  { "llama2", TC_CHAT_LLAMA2, false, false },
                  { "zephyr", TC_CHAT_ZEPHYR, false, false },
                  { "mistral", TC_CHAT_MISTRAL, false, false },
                  { "mistral-v3", TC_CHAT_MISTRAL3, false, true },
                  { "mistral-tekken", TC_CHAT_MISTRAL3, false, false },
                  { "mistral-v7", TC_CHAT_MISTRAL7, false, false } };
    memset(out, 0, sizeof *out);
    out->today_at = -1;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(name, names[i].name)) {
            out->kind = names[i].kind;
            out->llama31 = names[i].llama31;
            out->spaced = out->trim = names[i].spaced;
            return TC_OK;
        }
    return tc_set_error(TC_ERR_NOT_FOUND, "tc_chat_template",
                        "no chat template '%s' (known: chatml, llama3, llama3.1, llama2, zephyr, "
                        "mistral, mistral-v3, mistral-tekken, mistral-v7)",
                        name);
}

/* A growable string. */
typedef struct buf {
    char *p;
    size_t n, cap;
    bool oom;
    /* The ranges [plain[2i], plain[2i + 1]) that came from the messages (NULL: not kept). */
    size_t *plain;
    size_t n_plain, cap_plain;
    bool keep_plain;
} buf;
static void putn(buf *b, const char *s, size_t k)
{
    if (b->oom)
        return;
    if (b->n + k + 1 > b->cap) {
        size_t cap = (b->n + k + 1) * 2;
        char *p = tc_host_realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, k);
    b->n += k;
    b->p[b->n] = 0;
}
static void put(buf *b, const char *s)
{
    putn(b, s, strlen(s));
}

/* Python's str.strip() for ASCII, as Jinja's trim filter is: space, \t, \n, \v, \f, \r and
 * the separators \x1c to \x1f. */
static bool space(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

/* Put what a message says (s, or s without its outer whitespace), keeping its range. */
static void put_content(buf *b, const char *s, bool trim)
{
    size_t from = b->n, k = s ? strlen(s) : 0;
    if (trim) {
        while (k && space(*s)) {
            s++;
            k--;
        }
        while (k && space(s[k - 1]))
            k--;
    }
    if (k)
        putn(b, s, k);
    if (b->oom || !b->keep_plain || b->n == from)
        return;
    if (b->n_plain == b->cap_plain) {
        size_t cap = b->cap_plain ? 2 * b->cap_plain : 16;
        size_t *p = tc_host_realloc(b->plain, cap * 2 * sizeof *p);
        if (!p) {
            b->oom = true;
            return;
        }
        b->plain = p;
        b->cap_plain = cap;
    }
    b->plain[2 * b->n_plain] = from;
    b->plain[2 * b->n_plain + 1] = b->n;
    b->n_plain++;
}

/* ---------------------------------------------------------------- JSON as Python writes it */

/* A string as json.dumps(s, ensure_ascii=False) writes it. */
static void py_string(buf *b, const char *s, size_t n)
{
    putn(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = c == '"'    ? "\\\""
                          : c == '\\' ? "\\\\"
                          : c == '\n' ? "\\n"
                          : c == '\r' ? "\\r"
                          : c == '\t' ? "\\t"
                          : c == '\b' ? "\\b"
                          : c == '\f' ? "\\f"
                                      : NULL;
        if (!esc && c >= 0x20)
            continue;
        putn(b, s + run, i - run);
        run = i + 1;
        char u[8];
        if (!esc) {
            snprintf(u, sizeof u, "\\u%04x", c);
            esc = u;
        }
        put(b, esc);
    }
    putn(b, s + run, n - run);
    putn(b, "\"", 1);
}

/* A double as Python's repr writes it: the shortest digits that read back to the same value,
 * positional from 1e-4 up to 1e16 (always with a fraction), scientific outside. */
static void py_real(buf *b, double v)
{
    if (!isfinite(v)) {
        put(b, isnan(v) ? "NaN" : v > 0 ? "Infinity" : "-Infinity");
        return;
    }
    char e[40];
    for (int prec = 0; prec < 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec, v);
        if (strtod(e, NULL) == v)
            break;
    }
    /* e is [-]d[.ddd]e[+-]xx: its digits and decimal exponent. */
    char digits[24], out[64];
    int nd = 0, at = 0;
    const char *p = e;
    bool neg = *p == '-';
    if (neg)
        p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    if (neg)
        out[at++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            out[at++] = '0';
            out[at++] = '.';
            for (int i = -1; i > exp; i--)
                out[at++] = '0';
            for (int i = 0; i < nd; i++)
                out[at++] = digits[i];
        } else {
            for (int i = 0; i <= exp; i++)
                out[at++] = i < nd ? digits[i] : '0';
            out[at++] = '.';
            if (nd > exp + 1)
                for (int i = exp + 1; i < nd; i++)
                    out[at++] = digits[i];
            else
                out[at++] = '0';
        }
        out[at] = 0;
    } else {
        out[at++] = digits[0];
        if (nd > 1) {
            out[at++] = '.';
            for (int i = 1; i < nd; i++)
                out[at++] = digits[i];
        }
        snprintf(out + at, sizeof out - (size_t)at, "e%c%02d", exp < 0 ? '-' : '+',
                 exp < 0 ? -exp : exp);
    }
    put(b, out);
}

static void py_indent(buf *b, int indent, int level)
{
    putn(b, "\n", 1);
    for (int i = 0; i < indent * level; i++)
        putn(b, " ", 1);
}

/* v as json.dumps(v, ensure_ascii=False, indent=indent or None) writes it (transformers'
 * tojson filter): ", " and ": " between items without indent, "," and ": " with it. Keys stay
 * in their order. Nesting is bounded by the parser that built v. */
static void py_json(buf *b, const json_t *v, int indent, int level)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        if (json_object_size(v) == 0) {
            put(b, "{}");
            return;
        }
        put(b, "{");
        const char *key;
        json_t *x;
        bool first = true;
        json_object_foreach((json_t *)v, key, x)
        {
            if (!first)
                put(b, indent ? "," : ", ");
            first = false;
            if (indent)
                py_indent(b, indent, level + 1);
            py_string(b, key, strlen(key));
            put(b, ": ");
            py_json(b, x, indent, level + 1);
        }
        if (indent)
            py_indent(b, indent, level);
        put(b, "}");
        return;
    }
    case JSON_ARRAY: {
        if (json_array_size(v) == 0) {
            put(b, "[]");
            return;
        }
        put(b, "[");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                put(b, indent ? "," : ", ");
            if (indent)
                py_indent(b, indent, level + 1);
            py_json(b, json_array_get(v, i), indent, level + 1);
        }
        if (indent)
            py_indent(b, indent, level);
        put(b, "]");
        return;
    }
    case JSON_STRING: py_string(b, json_string_value(v), json_string_length(v)); return;
    case JSON_INTEGER: {
        char n[32];
        snprintf(n, sizeof n, "%lld", (long long)json_integer_value(v));
        put(b, n);
        return;
    }
    case JSON_REAL: py_real(b, json_real_value(v)); return;
    case JSON_TRUE: put(b, "true"); return;
    case JSON_FALSE: put(b, "false"); return;
    default: put(b, "null"); return;
    }
}

/* Put v as py_json writes it, as message text (kept plain: the client wrote it). */
static void put_json(buf *b, const json_t *v, int indent)
{
    buf t = { 0 };
    py_json(&t, v, indent, 0);
    if (t.oom)
        b->oom = true;
    else
        put_content(b, t.p ? t.p : "", false);
    tc_host_free(t.p);
}

/* ---------------------------------------------------------------- rendering */

typedef struct render {
    const tc_chat_template *t;
    const tc_chat_message *m;
    const tc_chat_calls *calls; /* [n] or NULL */
    size_t n;
    json_t *tools; /* the parsed tools array, NULL: none */
    json_t **args; /* [every call of every message] the parsed arguments */
    size_t *first; /* [n] index in args of message i's first call */
    bool add_generation_prompt;
} render;

static tc_status bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static tc_status bad(const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tc_set_error(TC_ERR_INVALID_ARGUMENT, "tc_chat_format", "%s", msg);
}

/* ChatML, with tools as Qwen 2.5's template writes them (the Hermes function-calling format):
 * the tools in the system turn, calls as <tool_call> blocks in the assistant's turn, results
 * as <tool_response> blocks in a user turn (consecutive results share one). */
/* The number of tool calls message i makes. */
static size_t n_calls(const render *r, size_t i)
{
    return r->calls ? r->calls[i].n : 0;
}

static void chatml(const render *r, buf *b)
{
    const tc_chat_message *m = r->m;
    size_t n = r->n;
    bool has_system = n && !strcmp(m[0].role, "system");
    size_t from = 0;
    if (r->tools) {
        put(b, "<|im_start|>system\n");
        if (has_system)
            put_content(b, m[0].content, false);
        else
            put(b, r->t->default_system);
        put(b, "\n\n# Tools\n\nYou may call one or more functions to assist with the user "
               "query.\n\nYou are provided with function signatures within <tools></tools> XML "
               "tags:\n<tools>");
        for (size_t i = 0; i < json_array_size(r->tools); i++) {
            put(b, "\n");
            put_json(b, json_array_get(r->tools, i), 0);
        }
        put(b, "\n</tools>\n\nFor each function call, return a json object with function name "
               "and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
               "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n");
        from = has_system ? 1 : 0;
    } else if (!has_system && r->t->default_system[0]) {
        put(b, "<|im_start|>system\n");
        put(b, r->t->default_system);
        put(b, "<|im_end|>\n");
    }
    for (size_t i = from; i < n; i++) {
        if (!strcmp(m[i].role, "tool")) {
            if (i == 0 || strcmp(m[i - 1].role, "tool"))
                put(b, "<|im_start|>user");
            put(b, "\n<tool_response>\n");
            put_content(b, m[i].content, false);
            put(b, "\n</tool_response>");
            if (i + 1 == n || strcmp(m[i + 1].role, "tool"))
                put(b, "<|im_end|>\n");
        } else if (n_calls(r, i)) {
            put(b, "<|im_start|>assistant");
            if (m[i].content && m[i].content[0]) {
                put(b, "\n");
                put_content(b, m[i].content, false);
            }
            for (size_t k = 0; k < n_calls(r, i); k++) {
                put(b, "\n<tool_call>\n{\"name\": \"");
                put_content(b, r->calls[i].call[k].name, false);
                put(b, "\", \"arguments\": ");
                put_json(b, r->args[r->first[i] + k], 0);
                put(b, "}\n</tool_call>");
            }
            put(b, "<|im_end|>\n");
        } else {
            put(b, "<|im_start|>");
            put(b, m[i].role);
            put(b, "\n");
            put_content(b, m[i].content, false);
            put(b, "<|im_end|>\n");
        }
    }
    if (r->add_generation_prompt)
        put(b, "<|im_start|>assistant\n");
}

/* Llama 3.0: each message in its header, trimmed. */
static void llama3(const render *r, buf *b)
{
    put(b, "<|begin_of_text|>");
    for (size_t i = 0; i < r->n; i++) {
        put(b, "<|start_header_id|>");
        put(b, r->m[i].role);
        put(b, "<|end_header_id|>\n\n");
        put_content(b, r->m[i].content, true);
        put(b, "<|eot_id|>");
    }
    if (r->add_generation_prompt)
        put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Llama 3.1+ as Meta's template writes it (tools_in_user_message, its default): a system
 * turn with the date, the tools in the first user turn, a call as {"name": ..., "parameters":
 * ...}, a result as the JSON string of its text in an ipython turn. */
static tc_status llama31(const render *r, buf *b)
{
    const tc_chat_message *m = r->m;
    size_t n = r->n, i = 0;
    put(b, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n");
    if (r->tools)
        put(b, "Environment: ipython\n");
    put(b, "Cutting Knowledge Date: December 2023\nToday Date: ");
    char date[32] = "26 Jul 2024";
    if (r->t->today) {
        time_t now = time(NULL);
        struct tm tm;
        if (localtime_r(&now, &tm))
            strftime(date, sizeof date, "%d %b %Y", &tm);
    }
    put(b, date);
    put(b, "\n\n");
    if (n && !strcmp(m[0].role, "system"))
        put_content(b, m[i++].content, true);
    put(b, "<|eot_id|>");
    if (r->tools) {
        if (i == n || strcmp(m[i].role, "user"))
            return bad("Llama 3.1's template puts the tools in the first user message: the "
                       "first message after the system message must be from the user");
        put(b, "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, "
               "please respond with a JSON for a function call with its proper arguments that "
               "best answers the given prompt.\n\nRespond in the format {\"name\": function "
               "name, \"parameters\": dictionary of argument name and its value}.Do not use "
               "variables.\n\n");
        for (size_t k = 0; k < json_array_size(r->tools); k++) {
            put_json(b, json_array_get(r->tools, k), 4);
            put(b, "\n\n");
        }
        put_content(b, m[i++].content, true);
        put(b, "<|eot_id|>");
    }
    for (; i < n; i++) {
        if (!strcmp(m[i].role, "tool")) {
            put(b, "<|start_header_id|>ipython<|end_header_id|>\n\n");
            json_t *text = json_string(m[i].content ? m[i].content : "");
            if (!text)
                b->oom = true;
            else
                put_json(b, text, 0);
            json_decref(text);
            put(b, "<|eot_id|>");
        } else if (n_calls(r, i)) {
            if (n_calls(r, i) != 1)
                return bad("message %zu: Llama 3.1's template takes one tool call per assistant "
                           "message, not %zu",
                           i, n_calls(r, i));
            put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"");
            put_content(b, r->calls[i].call[0].name, false);
            put(b, "\", \"parameters\": ");
            put_json(b, r->args[r->first[i]], 0);
            put(b, "}<|eot_id|>");
        } else {
            put(b, "<|start_header_id|>");
            put(b, m[i].role);
            put(b, "<|end_header_id|>\n\n");
            put_content(b, m[i].content, true);
            put(b, "<|eot_id|>");
        }
    }
    if (r->add_generation_prompt)
        put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return TC_OK;
}

static void llama2(const render *r, buf *b)
{
    /* Meta's format: the system prompt folds into the first user turn. */
    const tc_chat_message *m = r->m;
    bool has_system = r->n && !strcmp(m[0].role, "system");
    bool first = true;
    for (size_t i = has_system ? 1 : 0; i < r->n; i++) {
        if (!strcmp(m[i].role, "user")) {
            put(b, "<s>[INST] ");
            if (first && has_system) {
                put(b, "<<SYS>>\n");
                put_content(b, m[0].content, true);
                put(b, "\n<</SYS>>\n\n");
            }
            put_content(b, m[i].content, true);
            put(b, " [/INST]");
            first = false;
        } else if (!strcmp(m[i].role, "assistant")) {
            put(b, " ");
            put_content(b, m[i].content, true);
            put(b, " </s>");
        }
    }
}

/* Mistral 7B Instruct's: user and assistant turns alternate after an optional system
 * message, which joins the first user turn; no generation prompt of its own (the last [/INST]
 * is one). Messages are written untrimmed, as the template does. */
static tc_status mistral(const render *r, buf *b)
{
    const tc_chat_message *m = r->m;
    bool legacy = r->t->mistral_legacy;
    size_t from = r->n && !strcmp(m[0].role, "system") ? 1 : 0;
    if (from && legacy)
        return bad("Mistral's v0.1 template has no system message");
    put(b, "<s>");
    for (size_t i = from; i < r->n; i++) {
        bool user = !strcmp(m[i].role, "user");
        if (user != ((i - from) % 2 == 0) || (!user && strcmp(m[i].role, "assistant")))
            return bad("message %zu: Mistral's template takes user and assistant messages in "
                       "turn after an optional system message",
                       i);
        if (user) {
            put(b, legacy ? "[INST] " : " [INST] ");
            if (i == 1 && from) {
                put_content(b, m[0].content, false);
                put(b, "\n\n");
            }
            put_content(b, m[i].content, false);
            put(b, " [/INST]");
        } else {
            if (!legacy)
                put(b, " ");
            put_content(b, m[i].content, false);
            put(b, r->t->eos_space ? "</s> " : "</s>");
        }
    }
    return TC_OK;
}

/* Python's len() of UTF-8 text: its code points. */
static size_t code_points(const char *s)
{
    size_t k = 0;
    for (; s && *s; s++)
        k += ((unsigned char)*s & 0xC0) != 0x80;
    return k;
}

/* Mistral's v3 templates (Mistral-7B-Instruct-v0.3's and Mistral-Nemo-Instruct-2407's
 * tokenizer_config.json): the system message joins the user turn only when that turn is the
 * last message; the tools go before every user turn equal to the last one (Jinja compares the
 * messages by value); a call is its function as JSON with a 9-character id; a result is
 * written raw after {"content": . No generation prompt (the last [/INST] is one). */
static tc_status mistral3(const render *r, buf *b)
{
    const tc_chat_message *m = r->m;
    bool sp = r->t->spaced;
    size_t from = r->n && !strcmp(m[0].role, "system") ? 1 : 0, last_user = r->n;
    for (size_t i = from, k = 0; i < r->n; i++) {
        if (!strcmp(m[i].role, "user"))
            last_user = i;
        if (!strcmp(m[i].role, "tool") || n_calls(r, i))
            continue;
        if (!strcmp(m[i].role, "user") != (k++ % 2 == 0))
            return bad("message %zu: after the optional system message, Mistral's template "
                       "takes user and assistant messages in turn (tool calls and results "
                       "aside)",
                       i);
    }
    put(b, "<s>");
    for (size_t i = from; i < r->n; i++) {
        if (!strcmp(m[i].role, "user")) {
            if (r->tools && !strcmp(m[i].content, m[last_user].content)) {
                put(b, sp ? "[AVAILABLE_TOOLS] [" : "[AVAILABLE_TOOLS][");
                for (size_t k = 0; k < json_array_size(r->tools); k++) {
                    json_t *fn = json_object_get(json_array_get(r->tools, k), "function");
                    if (!json_is_object(fn))
                        return bad("tool %zu has no function", k);
                    /* Strings are written raw between quotes, the rest as JSON. */
                    put(b, "{\"type\": \"function\", \"function\": {");
                    const char *key;
                    json_t *v;
                    bool first = true;
                    json_object_foreach(fn, key, v)
                    {
                        if (!strcmp(key, "return"))
                            continue;
                        put(b, first ? "\"" : ", \"");
                        first = false;
                        put(b, key);
                        put(b, "\": ");
                        if (json_is_string(v)) {
                            put(b, "\"");
                            put(b, json_string_value(v));
                            put(b, "\"");
                        } else {
                            put_json(b, v, 0);
                        }
                    }
                    put(b, k + 1 < json_array_size(r->tools) ? "}}, " : "}}]");
                }
                put(b, "[/AVAILABLE_TOOLS]");
            }
            put(b, sp ? "[INST] " : "[INST]");
            if (from && i + 1 == r->n) {
                put_content(b, m[0].content, false);
                put(b, "\n\n");
            }
            put_content(b, m[i].content, false);
            put(b, "[/INST]");
        } else if (n_calls(r, i)) {
            put(b, sp ? "[TOOL_CALLS] [" : "[TOOL_CALLS][");
            for (size_t k = 0; k < n_calls(r, i); k++) {
                const tc_chat_tool_call *c = &r->calls[i].call[k];
                if (code_points(c->id) != 9)
                    return bad("message %zu: Mistral's template needs tool call ids of 9 "
                               "characters, not '%.32s'",
                               i, c->id ? c->id : "");
                put(b, "{\"name\": ");
                py_string(b, c->name, strlen(c->name));
                put(b, ", \"arguments\": ");
                put_json(b, r->args[r->first[i] + k], 0);
                put(b, ", \"id\": \"");
                put(b, c->id);
                put(b, k + 1 < n_calls(r, i) ? "\"}, " : "\"}]</s>");
            }
        } else if (!strcmp(m[i].role, "assistant")) {
            if (sp)
                put(b, " ");
            put_content(b, m[i].content, r->t->trim);
            put(b, "</s>");
        } else if (!strcmp(m[i].role, "tool")) {
            put(b, sp ? "[TOOL_RESULTS] {\"content\": " : "[TOOL_RESULTS]{\"content\": ");
            put_content(b, m[i].content, false);
            if (code_points(m[i].tool_call_id) != 9)
                return bad("message %zu: Mistral's template needs the tool_call_id of a result, "
                           "9 characters",
                           i);
            put(b, ", \"call_id\": \"");
            put(b, m[i].tool_call_id);
            put(b, "\"}[/TOOL_RESULTS]");
        } else {
            return bad("message %zu: Mistral's template takes a system message only first", i);
        }
    }
    return TC_OK;
}

/* Mistral's v7 (Tekken) template as Mistral Small 3 (2501) ships it: the system message (or
 * the template's default, dated today) in [SYSTEM_PROMPT], later system messages in their own
 * [SYSTEM_PROMPT] block; any order of turns; no generation prompt. */
static void mistral7(const render *r, buf *b)
{
    const tc_chat_message *m = r->m;
    const tc_chat_template *t = r->t;
    size_t from = r->n && !strcmp(m[0].role, "system") ? 1 : 0;
    put(b, "<s>");
    if (from) {
        put(b, "[SYSTEM_PROMPT]");
        put_content(b, m[0].content, false);
        put(b, "[/SYSTEM_PROMPT]");
    } else if (t->default_system[0]) {
        put(b, "[SYSTEM_PROMPT]");
        size_t at = t->today_at < 0 ? strlen(t->default_system) : (size_t)t->today_at;
        putn(b, t->default_system, at);
        if (t->today_at >= 0) {
            char date[32] = "";
            time_t now = time(NULL);
            struct tm tm;
            if (localtime_r(&now, &tm))
                strftime(date, sizeof date, "%Y-%m-%d", &tm);
            put(b, date);
            put(b, t->default_system + at);
        }
        put(b, "[/SYSTEM_PROMPT]");
    }
    for (size_t i = from; i < r->n; i++) {
        if (!strcmp(m[i].role, "user")) {
            put(b, "[INST]");
            put_content(b, m[i].content, false);
            put(b, "[/INST]");
        } else if (!strcmp(m[i].role, "system")) {
            put(b, "[SYSTEM_PROMPT]");
            put_content(b, m[i].content, false);
            put(b, "[/SYSTEM_PROMPT]");
        } else {
            put_content(b, m[i].content, false);
            put(b, "</s>");
        }
    }
}

static void zephyr(const render *r, buf *b)
{
    for (size_t i = 0; i < r->n; i++) {
        put(b, "<|");
        put(b, r->m[i].role);
        put(b, "|>\n");
        put_content(b, r->m[i].content, false);
        put(b, "</s>\n");
    }
    if (r->add_generation_prompt)
        put(b, "<|assistant|>\n");
}

bool tc_chat_template_tools(const tc_chat_template *t)
{
    return t->kind == TC_CHAT_CHATML || (t->kind == TC_CHAT_LLAMA3 && t->llama31) ||
           t->kind == TC_CHAT_MISTRAL3;
}

static const char *kind_name(const tc_chat_template *t)
{
    switch (t->kind) {
    case TC_CHAT_CHATML: return "ChatML";
    case TC_CHAT_LLAMA3: return t->llama31 ? "Llama 3.1" : "Llama 3";
    case TC_CHAT_LLAMA2: return "Llama 2";
    case TC_CHAT_MISTRAL: return "Mistral";
    case TC_CHAT_MISTRAL3: return "Mistral v3";
    case TC_CHAT_MISTRAL7: return "Mistral v7";
    default: return "Zephyr";
    }
}

/* Check the messages and parse what the templates write as JSON (tools, call arguments). */
static tc_status prepare(render *r, const char *tools)
{
    const tc_chat_message *m = r->m;
    size_t total = 0;
    bool uses_tools = tools != NULL;
    for (size_t i = 0; i < r->n; i++) {
        bool tool = m[i].role && !strcmp(m[i].role, "tool");
        if (!m[i].role || (strcmp(m[i].role, "system") && strcmp(m[i].role, "user") &&
                           strcmp(m[i].role, "assistant") && !tool))
            return bad("message %zu: role must be system, user, assistant or tool", i);
        if (n_calls(r, i) && strcmp(m[i].role, "assistant"))
            return bad("message %zu: only assistant messages make tool calls", i);
        if (!m[i].content && !n_calls(r, i))
            return bad("message %zu: it has no content", i);
        uses_tools |= tool || n_calls(r, i);
        total += n_calls(r, i);
    }
    if (uses_tools && !tc_chat_template_tools(r->t))
        return tc_set_error(TC_ERR_UNSUPPORTED, "tc_chat_format",
                            "the %s chat template has no tool calling (ChatML, Llama 3.1+ and "
                            "Mistral v3 have it)",
                            kind_name(r->t));
    json_error_t je;
    if (tools) {
        r->tools = json_loads(tools, 0, &je);
        if (!json_is_array(r->tools))
            return bad("the tools are not a JSON array");
    }
    r->first = tc_host_calloc(r->n ? r->n : 1, sizeof *r->first);
    r->args = tc_host_calloc(total ? total : 1, sizeof *r->args);
    if (!r->first || !r->args)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_chat_format", "no host memory");
    size_t at = 0;
    for (size_t i = 0; i < r->n; i++) {
        r->first[i] = at;
        for (size_t k = 0; k < n_calls(r, i); k++) {
            const tc_chat_tool_call *c = &r->calls[i].call[k];
            r->args[at] = c->arguments ? json_loads(c->arguments, JSON_DECODE_ANY, &je) : NULL;
            if (!c->name || !r->args[at++])
                return bad("message %zu: tool call %zu needs a name and arguments that are "
                           "JSON",
                           i, k);
        }
    }
    return TC_OK;
}

static tc_status format(const tc_chat_template *t, const tc_chat_message *m,
                        const tc_chat_calls *calls, size_t n, const char *tools,
                        bool add_generation_prompt, buf *out_buf, char **out)
{
    *out = NULL;
    render r = {
        .t = t, .m = m, .calls = calls, .n = n, .add_generation_prompt = add_generation_prompt
    };
    buf b = { .keep_plain = out_buf != NULL };
    tc_status st = prepare(&r, tools);
    if (st == TC_OK) {
        put(&b, "");
        switch (t->kind) {
        case TC_CHAT_CHATML: chatml(&r, &b); break;
        case TC_CHAT_LLAMA3: st = t->llama31 ? llama31(&r, &b) : (llama3(&r, &b), TC_OK); break;
        case TC_CHAT_LLAMA2: llama2(&r, &b); break;
        case TC_CHAT_ZEPHYR: zephyr(&r, &b); break;
        case TC_CHAT_MISTRAL: st = mistral(&r, &b); break;
        case TC_CHAT_MISTRAL3: st = mistral3(&r, &b); break;
        case TC_CHAT_MISTRAL7: mistral7(&r, &b); break;
        default: st = bad("unknown template kind");
        }
    }
    json_decref(r.tools);
    if (r.args)
        for (size_t i = 0, k = 0; i < n; i++)
            for (size_t c = 0; c < n_calls(&r, i); c++)
                json_decref(r.args[k++]);
    tc_host_free(r.args);
    tc_host_free(r.first);
    if (st == TC_OK && b.oom)
        st = tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_chat_format", "no host memory");
    if (st != TC_OK) {
        tc_host_free(b.p);
        tc_host_free(b.plain);
        return st;
    }
    *out = b.p;
    if (out_buf)
        *out_buf = b;
    return TC_OK;
}

tc_status tc_chat_format(const tc_chat_template *t, const tc_chat_message *msgs, size_t n,
                         bool add_generation_prompt, char **out)
{
    return format(t, msgs, NULL, n, NULL, add_generation_prompt, NULL, out);
}

tc_status tc_chat_format_tools(const tc_chat_template *t, const tc_chat_message *msgs,
                               const tc_chat_calls *calls, size_t n, const char *tools,
                               bool add_generation_prompt, char **out, size_t **plain,
                               size_t *n_plain)
{
    buf b;
    if (plain) {
        *plain = NULL;
        *n_plain = 0;
    }
    tc_status st = format(t, msgs, calls, n, tools, add_generation_prompt, plain ? &b : NULL, out);
    if (st == TC_OK && plain) {
        *plain = b.plain;
        *n_plain = b.n_plain;
    }
    return st;
}

tc_status tc_chat_format_spans(const tc_chat_template *t, const tc_chat_message *msgs, size_t n,
                               bool add_generation_prompt, char **out, size_t **plain,
                               size_t *n_plain)
{
    return tc_chat_format_tools(t, msgs, NULL, n, NULL, add_generation_prompt, out, plain, n_plain);
}

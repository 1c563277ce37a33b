/* Tool calls in and out of the model's text. The formats are the templates' own: Qwen 2.5's
 * <tool_call> blocks for ChatML (the Hermes format), Meta's JSON calls for Llama 3.1+ and
 * Mistral's JSON array after [TOOL_CALLS] (a control token: the text holds only the array). */
#define _GNU_SOURCE
#include "server/tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/host.h"
#include "server/internal.h"
#include "server/schema.h"

bool tc__tool_format_of(const tc_chat_template *t, tc__tool_format *f)
{
    if (!tc_chat_template_tools(t))
        return false;
    if (t->kind == TC_CHAT_CHATML)
        *f = (tc__tool_format){ "<tool_call>\n{\"name\": \"",
                                "\", \"arguments\": ",
                                "}\n</tool_call>",
                                "\n",
                                NULL,
                                NULL,
                                0 };
    else if (t->kind == TC_CHAT_MISTRAL3)
        /* [TOOL_CALLS] itself is a control token, left out of the text (and out of a
         * grammar's reach: control tokens end a document), so the array starts a call. The
         * ids are 9 letters and digits, which the template demands of the calls it renders
         * back. */
        *f = (tc__tool_format){
            "[{\"name\": \"", "\", \"arguments\": ", "}", ", ", "{\"name\": \"", "]", 9
        };
    else
        *f = (tc__tool_format){ "{\"name\": \"", "\", \"parameters\": ", "}", "; ", NULL, NULL, 0 };
    return true;
}

/* A marker without its whitespace (the parser's lenient form; markers hold no strings with
 * spaces). */
static size_t compact(const char *s, char *out, size_t cap)
{
    size_t n = 0;
    for (; *s && n + 1 < cap; s++)
        if (*s != ' ' && *s != '\n' && *s != '\t' && *s != '\r')
            out[n++] = *s;
    out[n] = 0;
    return n;
}

/* The part of open that starts a call in text: up to its first whitespace ("<tool_call>",
 * "{\"name\":" for Llama, "[{\"name\":" for Mistral), matched exactly. */
static size_t trigger_len(const char *open)
{
    return strcspn(open, " \n\t\r");
}

/* ---------------------------------------------------------------- grammar */

static void lit(tc_grammar *g, int r, const char *s)
{
    tc_grammar_lit(g, r, s, strlen(s));
}

/* The rules of text that never contains the trigger t (m bytes) but may end with it, after
 * which rule `after` follows: a right-linear grammar of the Knuth-Morris-Pratt automaton of t,
 * one rule per bytes matched. Returns the start rule. */
static int text_until(tc_grammar *g, const char *t, size_t m, int after)
{
    int st[32];
    size_t fail[32] = { 0 };
    for (size_t k = 0; k < m; k++)
        st[k] = tc_grammar_rule(g);
    for (size_t k = 1, j = 0; k < m; k++) {
        while (j && t[k] != t[j])
            j = fail[j - 1];
        if (t[k] == t[j])
            j++;
        fail[k] = j;
    }
    for (size_t k = 0; k < m; k++) {
        /* The state after byte b with k bytes matched. */
        size_t next[256];
        for (int b = 0; b < 256; b++) {
            size_t j = k;
            while (j && (uint8_t)t[j] != b)
                j = fail[j - 1];
            next[b] = (uint8_t)t[j] == b ? j + 1 : 0;
        }
        tc_grammar_alt(g, st[k]); /* the text may end here */
        for (size_t j = 0; j < m; j++) {
            bool bytes[256] = { false }, any = false;
            for (int b = 0; b < 256; b++)
                if (next[b] == j) {
                    bytes[b] = true;
                    any = true;
                }
            if (!any)
                continue;
            tc_grammar_set(g, st[k], bytes);
            tc_grammar_ref(g, st[k], st[j]);
            tc_grammar_alt(g, st[k]);
        }
        if (next[(uint8_t)t[m - 1]] == m && k == m - 1) {
            tc_grammar_lit(g, st[k], t + m - 1, 1);
            tc_grammar_ref(g, st[k], after);
        }
    }
    return st[0];
}

/* Whether the schema is one schema.c supports (compiled into a scratch grammar). */
static bool schema_ok(json_t *schema, char *why, size_t cap)
{
    tc_grammar *g = tc_grammar_create();
    bool ok = g && tc__schema_rule(g, schema, why, cap) >= 0;
    if (!g)
        snprintf(why, cap, "out of memory");
    tc_grammar_unref(g);
    return ok;
}

bool tc__tool_grammar_needed(const tc_oai_request *q)
{
    bool forced = q->tool_choice == TC_OAI_TOOLS_REQUIRED || q->tool_choice == TC_OAI_TOOLS_NAMED;
    bool strict = false;
    size_t i;
    json_t *t;
    json_array_foreach(q->tools, i, t) strict |=
        json_is_true(json_object_get(json_object_get(t, "function"), "strict"));
    return q->tool_choice != TC_OAI_TOOLS_NONE && (forced || strict);
}

bool tc__tool_grammar(const tc_oai_request *q, const tc__tool_format *f, const tc_tokenizer *tok,
                      tc_grammar **out, tc_oai_error *err)
{
    *out = NULL;
    json_t *tools = q->tools;
    bool forced = q->tool_choice == TC_OAI_TOOLS_REQUIRED || q->tool_choice == TC_OAI_TOOLS_NAMED;
    size_t i;
    json_t *t;
    if (!tc__tool_grammar_needed(q))
        return true;
    tc_grammar *g = tc_grammar_create();
    if (!g)
        return tc_oai_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    /* call ::= name_i mid args_i close, over the functions that may be called. */
    int call = tc_grammar_rule(g);
    bool first = true;
    json_array_foreach(tools, i, t)
    {
        json_t *fn = json_object_get(t, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (q->tool_choice == TC_OAI_TOOLS_NAMED && strcmp(name, q->tool_name))
            continue;
        json_t *params = json_object_get(fn, "parameters");
        char why[320];
        if (params && !schema_ok(params, why, sizeof why)) {
            if (json_is_true(json_object_get(fn, "strict"))) {
                tc_grammar_unref(g);
                char param[64];
                snprintf(param, sizeof param, "tools[%zu].function.parameters", i);
                return tc_oai_fail(err, 400, "invalid_request_error", param, NULL,
                                   "the strict function '%s' cannot be enforced: %s", name, why);
            }
            params = NULL; /* not strict: any JSON object */
        }
        int args = tc__schema_rule(g, params, why, sizeof why);
        if (!first)
            tc_grammar_alt(g, call);
        first = false;
        lit(g, call, name);
        lit(g, call, f->mid);
        tc_grammar_ref(g, call, args);
        lit(g, call, f->close);
    }
    /* calls ::= call more; more ::= sep open calls | "" (one call unless parallel; a list's
     * later calls open with next). */
    size_t tl = trigger_len(f->open);
    int calls = tc_grammar_rule(g), more = tc_grammar_rule(g), rest = tc_grammar_rule(g);
    tc_grammar_ref(g, calls, call);
    tc_grammar_ref(g, calls, more);
    if (q->parallel_tool_calls && q->tool_choice != TC_OAI_TOOLS_NAMED) {
        lit(g, more, f->sep);
        lit(g, more, f->next ? f->next : f->open);
        tc_grammar_ref(g, more, calls);
        tc_grammar_alt(g, more);
    }
    /* rest: what follows the trigger in the first call, then the calls (and a list's end). */
    lit(g, rest, f->open + tl);
    tc_grammar_ref(g, rest, calls);
    if (f->next)
        lit(g, rest, f->end);
    int root;
    if (forced) {
        root = tc_grammar_rule(g);
        tc_grammar_lit(g, root, f->open, tl);
        tc_grammar_ref(g, root, rest);
    } else {
        root = text_until(g, f->open, tl, rest);
    }
    if (!tc_grammar_finish(g, root, tok)) {
        tc_grammar_unref(g);
        return tc_oai_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    *out = g;
    return true;
}

/* ---------------------------------------------------------------- parser */

typedef struct text {
    char *p;
    size_t n, cap;
} text;

static void add(text *t, const char *s, size_t n)
{
    if (t->n + n + 1 > t->cap) {
        size_t cap = (t->n + n + 1) * 2 + 32;
        char *p = realloc(t->p, cap);
        if (!p)
            return; /* out of memory: the bytes are lost, the reply stays well-formed */
        t->p = p;
        t->cap = cap;
    }
    memcpy(t->p + t->n, s, n);
    t->n += n;
    t->p[t->n] = 0;
}

typedef struct call {
    char id[32]; /* "call_" and 24 letters and digits, as OpenAI's (or id_len of them) */
    char name[TC_OAI_MAX_NAME + 1];
    text args;
    size_t sent; /* bytes of args drained */
    bool announced;
} call;

/* P_EXTRA: a list's call object after its arguments (members to skip); P_LIST: between a
 * list's calls (a comma, or the end of the list); P_SKIP: the rest of a list after an element
 * that is not a call (dropped: it is no text of its own). */
enum { P_TEXT, P_HEAD, P_NAME, P_MID, P_ARGS, P_TAIL, P_EXTRA, P_LIST, P_SKIP, P_DONE };

struct tc__tool_parser {
    char trigger[32], head[64], next[64], mid[64], tail[64];
    const char *cur_head; /* P_HEAD: head, or next for a list's later call */
    size_t n_trigger;
    int st, id_len;
    bool list;
    size_t k;     /* bytes matched of the trigger (P_TEXT) or of head, mid or tail */
    size_t n_ws;  /* P_TEXT: the whitespace before the trigger's bytes in pend */
    text pend;    /* P_TEXT: whitespace and a possible trigger start; in a call before its
                     arguments: the text since the trigger, given back if it is not a call */
    text content; /* the message's content */
    size_t sent;  /* bytes of content drained */
    call *calls;
    int n_calls, cap_calls;
    int n_drained; /* calls drained in full (all but the last are complete) */
    char name[TC_OAI_MAX_NAME + 1];
    size_t n_name;
    int depth; /* P_ARGS: nesting of the arguments (0: not begun) */
    bool in_string, escape, ended;
    bool parallel; /* more than one call may be made */
    uint64_t rng;
};

tc__tool_parser *tc__tool_parser_create(const tc__tool_format *f, bool parallel)
{
    tc__tool_parser *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->parallel = parallel;
    size_t tl = trigger_len(f->open);
    if (tl >= sizeof p->trigger)
        tl = sizeof p->trigger - 1;
    memcpy(p->trigger, f->open, tl);
    p->n_trigger = tl;
    compact(f->open + tl, p->head, sizeof p->head);
    p->list = f->next != NULL;
    if (p->list)
        compact(f->next, p->next, sizeof p->next);
    p->id_len = f->id_len > 0 && f->id_len < 30 ? f->id_len : 0;
    compact(f->mid, p->mid, sizeof p->mid);
    compact(f->close, p->tail, sizeof p->tail);
    if (getentropy(&p->rng, sizeof p->rng) != 0)
        p->rng = (uint64_t)(tc_host_seconds() * 1e9);
    p->rng |= 1;
    return p;
}

void tc__tool_parser_destroy(tc__tool_parser *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n_calls; i++)
        free(p->calls[i].args.p);
    free(p->calls);
    free(p->pend.p);
    free(p->content.p);
    free(p);
}

static bool ws(char c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

/* The call being made is not one: its text so far is content. */
static void give_back(tc__tool_parser *p)
{
    add(&p->content, p->pend.p, p->pend.n);
    p->pend.n = 0;
    p->n_ws = p->k = 0;
    p->st = P_TEXT;
}

/* One byte of JSON skipped at nesting p->depth (strings and escapes followed); true when it
 * closes the outermost level. */
static bool skip_byte(tc__tool_parser *p, char c)
{
    if (p->in_string) {
        if (p->escape)
            p->escape = false;
        else if (c == '\\')
            p->escape = true;
        else if (c == '"')
            p->in_string = false;
    } else if (c == '"') {
        p->in_string = true;
    } else if (c == '{' || c == '[') {
        p->depth++;
    } else if ((c == '}' || c == ']') && --p->depth == 0) {
        return true;
    }
    return false;
}

/* A list's later element (after a call and a comma) that is not a call: the rest of the list
 * is skipped, its bytes so far first; elsewhere the text is given back. */
static void not_a_call(tc__tool_parser *p)
{
    if (!p->list || p->cur_head != p->next) {
        give_back(p);
        return;
    }
    p->st = P_SKIP;
    p->depth = 1;
    p->in_string = p->escape = false;
    bool closed = false;
    for (size_t i = 0; i < p->pend.n && !closed; i++)
        closed = skip_byte(p, p->pend.p[i]);
    p->pend.n = 0;
    p->n_ws = p->k = 0;
    if (closed)
        p->st = P_TEXT;
}

static void begin_call(tc__tool_parser *p)
{
    if (p->n_calls == p->cap_calls) {
        int cap = p->cap_calls ? 2 * p->cap_calls : 4;
        call *c = realloc(p->calls, sizeof *c * (size_t)cap);
        if (!c) {
            give_back(p);
            return;
        }
        p->calls = c;
        p->cap_calls = cap;
    }
    call *c = &p->calls[p->n_calls++];
    memset(c, 0, sizeof *c);
    static const char alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    int at = p->id_len ? 0 : 5;
    memcpy(c->id, "call_", (size_t)at);
    for (int i = 0; i < (p->id_len ? p->id_len : 24); i++) {
        p->rng ^= p->rng << 13; /* xorshift64 */
        p->rng ^= p->rng >> 7;
        p->rng ^= p->rng << 17;
        c->id[at + i] = alnum[p->rng % 62];
    }
    memcpy(c->name, p->name, p->n_name + 1);
    p->pend.n = 0;
}

/* P_TEXT: one byte of text. pend holds whitespace (held so that whitespace around calls is
 * not content) and then the k bytes that may begin the trigger. */
static void text_byte(tc__tool_parser *p, char c)
{
    add(&p->pend, &c, 1);
    if (p->k < p->n_trigger && c == p->trigger[p->k]) {
        if (++p->k == p->n_trigger) {
            p->st = P_HEAD;
            p->cur_head = p->head;
            p->k = 0;
        }
        return;
    }
    /* The longest end of the trigger's bytes and c that still begins the trigger. */
    const char *s = p->pend.p + p->n_ws;
    size_t n = p->pend.n - p->n_ws, keep = 0;
    for (size_t t = n < p->n_trigger ? n : p->n_trigger - 1; t > 0 && !keep; t--)
        if (!memcmp(s + n - t, p->trigger, t))
            keep = t;
    /* Content: everything before that, less its trailing whitespace (which may be all of
     * it, the whitespace held before included: then nothing moves, so that a run of
     * whitespace costs constant time a byte). */
    size_t seg = n - keep, tail = 0;
    while (tail < seg && ws(s[seg - tail - 1]))
        tail++;
    size_t held = tail == seg ? p->n_ws + seg : tail;
    size_t out = p->pend.n - keep - held;
    if (out) {
        add(&p->content, p->pend.p, out);
        memmove(p->pend.p, p->pend.p + out, held + keep);
        p->pend.n = held + keep;
    }
    p->n_ws = held;
    p->k = keep;
}

/* A byte of a marker matched leniently; true when the marker is complete. */
static bool marker_byte(tc__tool_parser *p, const char *m, char c, bool *bad)
{
    *bad = false;
    if (ws(c))
        return false;
    if (c != m[p->k]) {
        *bad = true;
        return false;
    }
    return m[++p->k] == 0;
}

static void feed_byte(tc__tool_parser *p, char c)
{
    bool bad;
    call *cur = p->n_calls ? &p->calls[p->n_calls - 1] : NULL;
    switch (p->st) {
    case P_TEXT: text_byte(p, c); return;
    case P_HEAD:
        add(&p->pend, &c, 1);
        if (marker_byte(p, p->cur_head, c, &bad)) {
            p->st = P_NAME;
            p->n_name = 0;
        } else if (bad) {
            not_a_call(p);
        }
        return;
    case P_NAME:
        add(&p->pend, &c, 1);
        if (c == '"' && p->n_name > 0) {
            p->name[p->n_name] = 0;
            p->st = P_MID;
            p->k = 1; /* the mid marker begins with the name's closing quote */
        } else if (p->n_name < TC_OAI_MAX_NAME &&
                   ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-')) {
            p->name[p->n_name++] = c;
        } else {
            not_a_call(p);
        }
        return;
    case P_MID:
        add(&p->pend, &c, 1);
        if (marker_byte(p, p->mid, c, &bad)) {
            p->st = P_ARGS;
            p->depth = 0;
            p->in_string = p->escape = false;
        } else if (bad) {
            not_a_call(p);
        }
        return;
    case P_ARGS:
        if (p->depth == 0) {
            if (ws(c)) {
                add(&p->pend, &c, 1);
            } else if (c == '{') {
                begin_call(p);
                cur = p->st == P_ARGS ? &p->calls[p->n_calls - 1] : NULL;
                if (cur) {
                    add(&cur->args, &c, 1);
                    p->depth = 1;
                }
            } else {
                add(&p->pend, &c, 1);
                not_a_call(p);
            }
            return;
        }
        add(&cur->args, &c, 1);
        if (skip_byte(p, c)) {
            p->st = P_TAIL;
            p->k = 0;
        }
        return;
    case P_TAIL:
        if (marker_byte(p, p->tail, c, &bad)) {
            p->st = !p->parallel ? P_DONE : p->list ? P_LIST : P_TEXT;
            p->k = p->n_ws = 0;
            p->pend.n = 0;
        } else if (bad && p->list && c == ',') {
            /* More members in the call's object: skipped up to its closing brace. */
            p->st = P_EXTRA;
            p->depth = 1;
            p->in_string = p->escape = false;
        } else if (bad) {
            /* Not the template's ending: the call stands as it is, and c is text. */
            p->st = p->parallel ? P_TEXT : P_DONE;
            p->k = p->n_ws = 0;
            p->pend.n = 0;
            if (p->parallel)
                text_byte(p, c);
        }
        return;
    case P_EXTRA:
        if (skip_byte(p, c)) {
            p->st = p->parallel ? P_LIST : P_DONE;
            p->k = p->n_ws = 0;
            p->pend.n = 0;
        }
        return;
    case P_SKIP:
        if (skip_byte(p, c))
            p->st = P_TEXT;
        return;
    case P_LIST:
        if (ws(c))
            return;
        if (c == ',') {
            p->st = P_HEAD;
            p->cur_head = p->next;
            p->k = 0;
            return;
        }
        /* The list's end (or anything else, which is text). */
        p->st = P_TEXT;
        p->k = p->n_ws = 0;
        if (c != ']')
            text_byte(p, c);
        return;
    case P_DONE: return;
    }
}

void tc__tool_parser_feed(tc__tool_parser *p, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        feed_byte(p, s[i]);
}

void tc__tool_parser_end(tc__tool_parser *p)
{
    if (p->ended)
        return;
    p->ended = true;
    if (p->st == P_ARGS && p->depth > 0)
        return; /* cut short: the call keeps what it has */
    if (p->st == P_DONE || p->st == P_EXTRA || p->st == P_LIST || p->st == P_SKIP ||
        (p->st == P_TEXT && p->n_calls > 0 && p->n_ws == p->pend.n))
        return; /* what follows the only call, or whitespace after the calls */
    /* (a list's later call cut short before its arguments is dropped, as the rest of a list
     * that is not calls is) */
    if (p->list && p->cur_head == p->next && p->st != P_TEXT)
        return;
    if (p->st == P_TEXT || p->st == P_HEAD || p->st == P_NAME || p->st == P_MID || p->st == P_ARGS)
        give_back(p);
}

int tc__tool_parser_calls(const tc__tool_parser *p)
{
    return p->n_calls;
}

/* The length of s[0..n) without an unfinished UTF-8 character at its end. */
static size_t whole_chars(const char *s, size_t n)
{
    size_t i = n, back = 0;
    while (i > 0 && back < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) {
        i--;
        back++;
    }
    if (i == 0)
        return n;
    unsigned char lead = (unsigned char)s[i - 1];
    size_t want = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    return want > back + 1 ? i - 1 : n;
}

void tc__tool_parser_drain(tc__tool_parser *p, json_t **content, json_t **calls)
{
    *content = *calls = NULL;
    size_t upto = p->ended ? p->content.n : whole_chars(p->content.p, p->content.n);
    if (upto > p->sent) {
        *content = tc__json_text(p->content.p + p->sent, upto - p->sent);
        p->sent = upto;
    }
    for (int i = p->n_drained; i < p->n_calls; i++) {
        call *c = &p->calls[i];
        upto = p->ended ? c->args.n : whole_chars(c->args.p, c->args.n);
        if (i < p->n_calls - 1 && upto == c->args.n)
            p->n_drained = i + 1;
        if (c->announced && upto == c->sent)
            continue;
        json_t *fn = json_object();
        json_object_set_new(fn, "arguments", tc__json_text(c->args.p + c->sent, upto - c->sent));
        c->sent = upto;
        json_t *d = json_pack("{s:i}", "index", i);
        if (!c->announced) {
            json_object_set_new(d, "id", json_string(c->id));
            json_object_set_new(d, "type", json_string("function"));
            json_object_set_new(fn, "name", json_string(c->name));
            c->announced = true;
        }
        json_object_set_new(d, "function", fn);
        if (!*calls)
            *calls = json_array();
        json_array_append_new(*calls, d);
    }
}

void tc__tool_parser_message(const tc__tool_parser *p, json_t **content, json_t **calls)
{
    *content = *calls = NULL;
    bool blank = true;
    for (size_t i = 0; i < p->content.n && blank; i++)
        blank = ws(p->content.p[i]);
    if (!blank || p->n_calls == 0)
        *content = tc__json_text(p->content.p ? p->content.p : "", p->content.n);
    if (p->n_calls == 0)
        return;
    *calls = json_array();
    for (int i = 0; i < p->n_calls; i++) {
        const call *c = &p->calls[i];
        json_array_append_new(*calls,
                              json_pack("{s:s,s:s,s:{s:s,s:o}}", "id", c->id, "type", "function",
                                        "function", "name", c->name, "arguments",
                                        tc__json_text(c->args.p ? c->args.p : "", c->args.n)));
    }
}

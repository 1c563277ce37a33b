/* JSON schema to grammar rules (JSON text per RFC 8259; schema keywords per JSON Schema
 * 2020-12). Whitespace between tokens is at most one space, so that a model cannot pad a
 * document for ever. */
#define _GNU_SOURCE
#include "server/schema.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

enum {
    MAX_UNROLLED = 256, /* maxItems written out as rules at most */
    MAX_DIGITS = 16,    /* of an integer or a fraction */
    MAX_DEPTH = 64,     /* schemas nested in schemas (compile recurses) */
};

typedef struct ctx {
    tc_grammar *g;
    json_t *root;
    json_t *refs; /* "$ref" text -> rule id (integer) */
    int ws, ch, string, number, integer, any, any_object;
    char *why;
    size_t cap;
    int depth;
    bool failed;
} ctx;

static int fail_at(ctx *c, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail_at(ctx *c, const char *path, const char *fmt, ...)
{
    if (!c->failed) {
        char msg[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        snprintf(c->why, c->cap, "%s at %s", msg, *path ? path : "the schema's root");
    }
    c->failed = true;
    return -1;
}

static void lit(ctx *c, int r, const char *s)
{
    tc_grammar_lit(c->g, r, s, strlen(s));
}

static void set(ctx *c, int r, const char *chars)
{
    bool b[256] = { false };
    for (const char *p = chars; *p; p++)
        b[(uint8_t)*p] = true;
    tc_grammar_set(c->g, r, b);
}

static void digit(ctx *c, int r)
{
    set(c, r, "0123456789");
}

/* ws ::= "" | " " */
static int ws_rule(ctx *c)
{
    if (c->ws < 0) {
        c->ws = tc_grammar_rule(c->g);
        tc_grammar_alt(c->g, c->ws);
        lit(c, c->ws, " ");
    }
    return c->ws;
}

static void byte_range(ctx *c, int r, int lo, int hi)
{
    bool b[256] = { false };
    for (int i = lo; i <= hi; i++)
        b[i] = true;
    tc_grammar_set(c->g, r, b);
}

/* One character of a string: a valid UTF-8 sequence other than '"', '\\' and controls, or
 * an escape (RFC 8259 section 7), so that maxLength and minLength count characters. */
static int char_rule(ctx *c)
{
    if (c->ch >= 0)
        return c->ch;
    tc_grammar *g = c->g;
    int ch = c->ch = tc_grammar_rule(g), hex = tc_grammar_rule(g);
    bool ascii[256] = { false };
    for (int b = 0x20; b < 0x80; b++)
        ascii[b] = b != '"' && b != '\\' && b != 0x7f;
    tc_grammar_set(g, ch, ascii);
    /* Lead bytes and the ranges of their continuation bytes (RFC 3629 section 4). */
    static const uint8_t seqs[][4][2] = {
        { { 0xc2, 0xdf }, { 0x80, 0xbf } },
        { { 0xe0, 0xe0 }, { 0xa0, 0xbf }, { 0x80, 0xbf } },
        { { 0xe1, 0xec }, { 0x80, 0xbf }, { 0x80, 0xbf } },
        { { 0xed, 0xed }, { 0x80, 0x9f }, { 0x80, 0xbf } },
        { { 0xee, 0xef }, { 0x80, 0xbf }, { 0x80, 0xbf } },
        { { 0xf0, 0xf0 }, { 0x90, 0xbf }, { 0x80, 0xbf }, { 0x80, 0xbf } },
        { { 0xf1, 0xf3 }, { 0x80, 0xbf }, { 0x80, 0xbf }, { 0x80, 0xbf } },
        { { 0xf4, 0xf4 }, { 0x80, 0x8f }, { 0x80, 0xbf }, { 0x80, 0xbf } },
    };
    for (size_t k = 0; k < sizeof seqs / sizeof *seqs; k++) {
        tc_grammar_alt(g, ch);
        for (int i = 0; i < 4 && seqs[k][i][0]; i++)
            byte_range(c, ch, seqs[k][i][0], seqs[k][i][1]);
    }
    tc_grammar_alt(g, ch);
    lit(c, ch, "\\");
    set(c, ch, "\"\\/bfnrt");
    tc_grammar_alt(g, ch);
    lit(c, ch, "\\u");
    for (int i = 0; i < 4; i++)
        tc_grammar_ref(g, ch, hex);
    set(c, hex, "0123456789abcdefABCDEF");
    return ch;
}

/* string ::= '"' char{min, max} '"' (max < 0: no bound); chars ::= char chars | "". */
static int string_rule(ctx *c, long long min, long long max)
{
    bool plain = min == 0 && max < 0;
    if (plain && c->string >= 0)
        return c->string;
    tc_grammar *g = c->g;
    int ch = char_rule(c), s = tc_grammar_rule(g), tail = tc_grammar_rule(g);
    if (plain)
        c->string = s;
    lit(c, s, "\"");
    for (long long i = 0; i < min; i++)
        tc_grammar_ref(g, s, ch);
    tc_grammar_ref(g, s, tail);
    lit(c, s, "\"");
    if (max < 0) {
        tc_grammar_ref(g, tail, ch);
        tc_grammar_ref(g, tail, tail);
        tc_grammar_alt(g, tail);
    } else {
        int next = tail;
        for (long long i = min; i < max; i++) {
            int after = tc_grammar_rule(g);
            tc_grammar_ref(g, next, ch);
            tc_grammar_ref(g, next, after);
            tc_grammar_alt(g, next);
            next = after;
        }
    }
    return s;
}

/* Up to n more digits: d_n ::= [0-9] d_{n-1} | "" (numbers are bounded, as JSON parsers'
 * doubles and 64-bit integers are, and so that a model cannot write digits for ever). */
static int digits_rule(ctx *c, int n)
{
    int r = tc_grammar_rule(c->g);
    if (n > 0) {
        digit(c, r);
        tc_grammar_ref(c->g, r, digits_rule(c, n - 1));
        tc_grammar_alt(c->g, r);
    }
    return r;
}

/* int ::= "-"? ("0" | [1-9] [0-9]{0,15}) */
static int integer_rule(ctx *c)
{
    if (c->integer >= 0)
        return c->integer;
    tc_grammar *g = c->g;
    int r = c->integer = tc_grammar_rule(g), sign = tc_grammar_rule(g),
        digits = digits_rule(c, MAX_DIGITS - 1);
    tc_grammar_alt(g, sign);
    lit(c, sign, "-");
    tc_grammar_ref(g, r, sign);
    lit(c, r, "0");
    tc_grammar_alt(g, r);
    tc_grammar_ref(g, r, sign);
    set(c, r, "123456789");
    tc_grammar_ref(g, r, digits);
    return r;
}

/* number ::= int frac exp; frac ::= "" | "." [0-9]{1,16}; exp ::= "" | [eE] [+-]? [0-9]{1,3} */
static int number_rule(ctx *c)
{
    if (c->number >= 0)
        return c->number;
    tc_grammar *g = c->g;
    int in = integer_rule(c);
    int r = c->number = tc_grammar_rule(g), frac = tc_grammar_rule(g), ex = tc_grammar_rule(g),
        sign = tc_grammar_rule(g);
    tc_grammar_alt(g, frac);
    lit(c, frac, ".");
    digit(c, frac);
    tc_grammar_ref(g, frac, digits_rule(c, MAX_DIGITS - 1));
    tc_grammar_alt(g, sign);
    set(c, sign, "+-");
    tc_grammar_alt(g, ex);
    set(c, ex, "eE");
    tc_grammar_ref(g, ex, sign);
    digit(c, ex);
    tc_grammar_ref(g, ex, digits_rule(c, 2));
    tc_grammar_ref(g, r, in);
    tc_grammar_ref(g, r, frac);
    tc_grammar_ref(g, r, ex);
    return r;
}

/* A list "[" ws (item ws ("," ws item ws)*)? "]" (or with braces), item a rule. */
static int list_rule(ctx *c, const char *open, const char *close, int item)
{
    tc_grammar *g = c->g;
    int ws = ws_rule(c);
    int r = tc_grammar_rule(g), body = tc_grammar_rule(g), more = tc_grammar_rule(g);
    lit(c, r, open);
    tc_grammar_ref(g, r, ws);
    tc_grammar_ref(g, r, body);
    lit(c, r, close);
    tc_grammar_ref(g, body, item);
    tc_grammar_ref(g, body, ws);
    tc_grammar_ref(g, body, more);
    tc_grammar_alt(g, body);
    lit(c, more, ",");
    tc_grammar_ref(g, more, ws);
    tc_grammar_ref(g, more, item);
    tc_grammar_ref(g, more, ws);
    tc_grammar_ref(g, more, more);
    tc_grammar_alt(g, more);
    return r;
}

/* Any JSON value; any_object: any JSON object. */
static int any_rule(ctx *c)
{
    if (c->any >= 0)
        return c->any;
    tc_grammar *g = c->g;
    int r = c->any = tc_grammar_rule(g), member = tc_grammar_rule(g), ws = ws_rule(c);
    int str = string_rule(c, 0, -1);
    tc_grammar_ref(g, member, str);
    tc_grammar_ref(g, member, ws);
    lit(c, member, ":");
    tc_grammar_ref(g, member, ws);
    tc_grammar_ref(g, member, r);
    c->any_object = list_rule(c, "{", "}", member);
    int array = list_rule(c, "[", "]", r);
    const int alts[] = { c->any_object, array, str, number_rule(c) };
    for (int i = 0; i < 4; i++) {
        tc_grammar_ref(g, r, alts[i]);
        tc_grammar_alt(g, r);
    }
    lit(c, r, "true");
    tc_grammar_alt(g, r);
    lit(c, r, "false");
    tc_grammar_alt(g, r);
    lit(c, r, "null");
    return r;
}

/* A rule matching exactly the JSON text of v. */
static int literal_rule(ctx *c, json_t *v, const char *path)
{
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text)
        return fail_at(c, path, "out of memory");
    int r = tc_grammar_rule(c->g);
    lit(c, r, text);
    free(text);
    return r;
}

static int compile(ctx *c, json_t *s, const char *path);

/* "format": date (YYYY-MM-DD), time (hh:mm:ss with an optional Z), date-time (both, T). */
static int format_rule(ctx *c, const char *format)
{
    bool date = !strcmp(format, "date") || !strcmp(format, "date-time");
    bool time = !strcmp(format, "time") || !strcmp(format, "date-time");
    if (!date && !time)
        return -1;
    int r = tc_grammar_rule(c->g);
    lit(c, r, "\"");
    if (date) {
        for (int i = 0; i < 4; i++)
            digit(c, r);
        lit(c, r, "-");
        set(c, r, "01");
        digit(c, r);
        lit(c, r, "-");
        set(c, r, "0123");
        digit(c, r);
    }
    if (date && time)
        lit(c, r, "T");
    if (time) {
        set(c, r, "012");
        digit(c, r);
        lit(c, r, ":");
        set(c, r, "012345");
        digit(c, r);
        lit(c, r, ":");
        set(c, r, "012345");
        digit(c, r);
        lit(c, r, "Z");
    }
    lit(c, r, "\"");
    return r;
}

/* An object with the listed properties in their order, the required ones always written:
 * rest(i, comma) ::= [","] kv_i rest(i+1, yes) (required), or that | rest(i+1, comma). */
static int object_rule(ctx *c, json_t *props, json_t *required, const char *path)
{
    tc_grammar *g = c->g;
    size_t n = json_object_size(props);
    int ws = ws_rule(c);
    int *kv = calloc(n + 1, sizeof *kv), *rest = calloc(2 * (n + 1), sizeof *rest);
    bool *req = calloc(n + 1, sizeof *req);
    if (!kv || !rest || !req) {
        free(kv);
        free(rest);
        free(req);
        return fail_at(c, path, "out of memory");
    }
    const char *key;
    json_t *sub;
    size_t i = 0;
    json_object_foreach(props, key, sub)
    {
        char p[512];
        snprintf(p, sizeof p, "%s/properties/%s", path, key);
        int value = compile(c, sub, p);
        kv[i] = tc_grammar_rule(g);
        json_t *name = json_string(key);
        char *quoted = name ? json_dumps(name, JSON_ENCODE_ANY) : NULL;
        json_decref(name);
        if (!quoted) {
            fail_at(c, path, "out of memory");
            break;
        }
        lit(c, kv[i], quoted);
        free(quoted);
        tc_grammar_ref(g, kv[i], ws);
        lit(c, kv[i], ":");
        tc_grammar_ref(g, kv[i], ws);
        tc_grammar_ref(g, kv[i], value);
        tc_grammar_ref(g, kv[i], ws);
        size_t k;
        json_t *rq;
        json_array_foreach(required, k, rq) req[i] |=
            json_is_string(rq) && !strcmp(json_string_value(rq), key);
        i++;
    }
    /* Every required name must be a listed property, or no document could be valid. */
    size_t k;
    json_t *rq;
    json_array_foreach(required, k, rq) if (!json_is_string(rq) ||
                                            !json_object_get(props, json_string_value(rq)))
    {
        char p[512];
        snprintf(p, sizeof p, "%s/required", path);
        fail_at(c, p, "'required' names '%.64s', which is not in 'properties'",
                json_is_string(rq) ? json_string_value(rq) : "(not a string)");
    }
    for (size_t j = 0; j <= n; j++)
        for (int comma = 0; comma < 2; comma++)
            rest[2 * j + comma] = tc_grammar_rule(g);
    for (size_t j = 0; j < n && !c->failed; j++)
        for (int comma = 0; comma < 2; comma++) {
            int r = rest[2 * j + comma];
            if (comma) {
                lit(c, r, ",");
                tc_grammar_ref(g, r, ws);
            }
            tc_grammar_ref(g, r, kv[j]);
            tc_grammar_ref(g, r, rest[2 * (j + 1) + 1]);
            if (!req[j]) {
                tc_grammar_alt(g, r);
                tc_grammar_ref(g, r, rest[2 * (j + 1) + comma]);
            }
        }
    /* rest(n, _) is empty. */
    int r = tc_grammar_rule(g);
    lit(c, r, "{");
    tc_grammar_ref(g, r, ws);
    tc_grammar_ref(g, r, rest[0]);
    lit(c, r, "}");
    free(kv);
    free(rest);
    free(req);
    return r;
}

/* An array of items with min..max of them (max < 0: no bound). */
static int array_rule(ctx *c, int item, long long min, long long max, const char *path)
{
    tc_grammar *g = c->g;
    int ws = ws_rule(c);
    if (max >= 0 && max < min)
        return fail_at(c, path, "'maxItems' %lld is below 'minItems' %lld", max, min);
    if (min > MAX_UNROLLED || max > MAX_UNROLLED)
        return fail_at(c, path, "'minItems' and 'maxItems' above %d are not supported",
                       MAX_UNROLLED);
    if (min == 0 && max < 0)
        return list_rule(c, "[", "]", item);
    /* tail: after the first min items, either unbounded (more ::= "," item more | "") or
     * up to max - min more (opt_k ::= "," item opt_{k+1} | ""). */
    int tail = tc_grammar_rule(g);
    if (max < 0) {
        lit(c, tail, ",");
        tc_grammar_ref(g, tail, ws);
        tc_grammar_ref(g, tail, item);
        tc_grammar_ref(g, tail, ws);
        tc_grammar_ref(g, tail, tail);
        tc_grammar_alt(g, tail);
    } else {
        int next = tail;
        for (long long k = min; k < max; k++) {
            int after = tc_grammar_rule(g);
            if (k > 0) {
                lit(c, next, ",");
                tc_grammar_ref(g, next, ws);
            }
            tc_grammar_ref(g, next, item);
            tc_grammar_ref(g, next, ws);
            tc_grammar_ref(g, next, after);
            tc_grammar_alt(g, next);
            next = after;
        }
    }
    int r = tc_grammar_rule(g);
    lit(c, r, "[");
    tc_grammar_ref(g, r, ws);
    for (long long k = 0; k < min; k++) {
        if (k > 0) {
            lit(c, r, ",");
            tc_grammar_ref(g, r, ws);
        }
        tc_grammar_ref(g, r, item);
        tc_grammar_ref(g, r, ws);
    }
    tc_grammar_ref(g, r, tail);
    lit(c, r, "]");
    return r;
}

static int typed(ctx *c, json_t *s, const char *type, const char *path)
{
    if (!strcmp(type, "string")) {
        json_t *f = json_object_get(s, "format"), *mn = json_object_get(s, "minLength"),
               *mx = json_object_get(s, "maxLength");
        int r = json_is_string(f) ? format_rule(c, json_string_value(f)) : -1;
        if (r >= 0)
            return r;
        if ((mn && (!json_is_integer(mn) || json_integer_value(mn) < 0)) ||
            (mx && (!json_is_integer(mx) || json_integer_value(mx) < 0)))
            return fail_at(c, path, "'minLength' and 'maxLength' must be non-negative integers");
        long long lo = mn ? json_integer_value(mn) : 0, hi = mx ? json_integer_value(mx) : -1;
        if (lo > MAX_UNROLLED || hi > MAX_UNROLLED || (hi >= 0 && hi < lo))
            return fail_at(c, path,
                           "'minLength' %lld and 'maxLength' %lld: want 0 <= min <= max <= %d", lo,
                           hi, MAX_UNROLLED);
        return string_rule(c, lo, hi);
    }
    if (!strcmp(type, "number"))
        return number_rule(c);
    if (!strcmp(type, "integer"))
        return integer_rule(c);
    if (!strcmp(type, "boolean") || !strcmp(type, "null")) {
        int r = tc_grammar_rule(c->g);
        if (!strcmp(type, "null")) {
            lit(c, r, "null");
        } else {
            lit(c, r, "true");
            tc_grammar_alt(c->g, r);
            lit(c, r, "false");
        }
        return r;
    }
    if (!strcmp(type, "object")) {
        json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
        json_t *extra = json_object_get(s, "additionalProperties");
        if (props && !json_is_object(props))
            return fail_at(c, path, "'properties' must be an object");
        if (req && !json_is_array(req))
            return fail_at(c, path, "'required' must be an array");
        if (extra && !json_is_boolean(extra))
            return fail_at(c, path, "'additionalProperties' as a schema is not supported");
        if (!props || json_object_size(props) == 0) {
            if (json_is_false(extra) || (req && json_array_size(req))) {
                json_t *none = json_object();
                int r = object_rule(c, none, req, path);
                json_decref(none);
                return r;
            }
            any_rule(c);
            return c->any_object;
        }
        return object_rule(c, props, req, path);
    }
    if (!strcmp(type, "array")) {
        json_t *items = json_object_get(s, "items"), *mn = json_object_get(s, "minItems"),
               *mx = json_object_get(s, "maxItems");
        if ((mn && (!json_is_integer(mn) || json_integer_value(mn) < 0)) ||
            (mx && (!json_is_integer(mx) || json_integer_value(mx) < 0)))
            return fail_at(c, path, "'minItems' and 'maxItems' must be non-negative integers");
        char p[512];
        snprintf(p, sizeof p, "%s/items", path);
        int item = items ? compile(c, items, p) : any_rule(c);
        return array_rule(c, item, mn ? json_integer_value(mn) : 0,
                          mx ? json_integer_value(mx) : -1, path);
    }
    return fail_at(c, path, "type '%.32s' is unknown", type);
}

static const char *const annotations[] = {
    "title",      "description", "default",   "examples", "$schema", "$id",         "$comment",
    "deprecated", "readOnly",    "writeOnly", "format",   "$defs",   "definitions", "strict",
};
static const char *const keywords[] = {
    "type",      "properties", "required", "additionalProperties",
    "items",     "minItems",   "maxItems", "enum",
    "const",     "anyOf",      "$ref",     "minLength",
    "maxLength",
};

static int compile_schema(ctx *c, json_t *s, const char *path);

static int compile(ctx *c, json_t *s, const char *path)
{
    if (c->failed)
        return -1;
    if (c->depth >= MAX_DEPTH)
        return fail_at(c, path, "schemas nested deeper than %d are not supported", MAX_DEPTH);
    c->depth++;
    int r = compile_schema(c, s, path);
    c->depth--;
    return r;
}

static int compile_schema(ctx *c, json_t *s, const char *path)
{
    if (json_is_true(s))
        return any_rule(c);
    if (!json_is_object(s))
        return fail_at(c, path, "a schema must be an object or true");
    const char *key;
    json_t *v;
    json_object_foreach(s, key, v)
    {
        bool known = false;
        for (size_t i = 0; i < sizeof annotations / sizeof *annotations && !known; i++)
            known = !strcmp(key, annotations[i]);
        for (size_t i = 0; i < sizeof keywords / sizeof *keywords && !known; i++)
            known = !strcmp(key, keywords[i]);
        if (!known)
            return fail_at(c, path, "the keyword '%.64s' is not supported", key);
    }
    char p[512];
    json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        const char *r = json_is_string(ref) ? json_string_value(ref) : "";
        json_t *known = json_object_get(c->refs, r);
        if (known)
            return (int)json_integer_value(known);
        const char *name = NULL;
        json_t *defs = NULL;
        if (!strncmp(r, "#/$defs/", 8)) {
            name = r + 8;
            defs = json_object_get(c->root, "$defs");
        } else if (!strncmp(r, "#/definitions/", 14)) {
            name = r + 14;
            defs = json_object_get(c->root, "definitions");
        } else if (!strcmp(r, "#")) {
            name = "";
        }
        json_t *target = name && *name ? json_object_get(defs, name) : name ? c->root : NULL;
        if (!target)
            return fail_at(c, path, "'$ref' '%.128s' is not a local #/$defs/... reference", r);
        /* The rule exists before its body, so that the body may refer back to it. */
        int rule = tc_grammar_rule(c->g);
        json_object_set_new(c->refs, r, json_integer(rule));
        snprintf(p, sizeof p, "%.200s", r + 1);
        int body = compile(c, target, p);
        tc_grammar_ref(c->g, rule, body);
        return rule;
    }
    json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (cn)
        return literal_rule(c, cn, path);
    if (en) {
        if (!json_is_array(en) || json_array_size(en) == 0)
            return fail_at(c, path, "'enum' must be a non-empty array");
        int r = tc_grammar_rule(c->g);
        size_t i;
        json_t *x;
        json_array_foreach(en, i, x)
        {
            if (i)
                tc_grammar_alt(c->g, r);
            tc_grammar_ref(c->g, r, literal_rule(c, x, path));
        }
        return r;
    }
    json_t *any = json_object_get(s, "anyOf");
    if (any) {
        if (!json_is_array(any) || json_array_size(any) == 0)
            return fail_at(c, path, "'anyOf' must be a non-empty array");
        int r = tc_grammar_rule(c->g);
        size_t i;
        json_t *x;
        json_array_foreach(any, i, x)
        {
            snprintf(p, sizeof p, "%s/anyOf/%zu", path, i);
            if (i)
                tc_grammar_alt(c->g, r);
            tc_grammar_ref(c->g, r, compile(c, x, p));
        }
        return r;
    }
    json_t *type = json_object_get(s, "type");
    if (json_is_string(type))
        return typed(c, s, json_string_value(type), path);
    if (json_is_array(type) && json_array_size(type) > 0) {
        int r = tc_grammar_rule(c->g);
        size_t i;
        json_t *x;
        json_array_foreach(type, i, x)
        {
            if (!json_is_string(x))
                return fail_at(c, path, "'type' must be a string or an array of strings");
            if (i)
                tc_grammar_alt(c->g, r);
            tc_grammar_ref(c->g, r, typed(c, s, json_string_value(x), path));
        }
        return r;
    }
    if (type)
        return fail_at(c, path, "'type' must be a string or an array of strings");
    if (json_object_get(s, "properties") || json_object_get(s, "required"))
        return typed(c, s, "object", path);
    if (json_object_get(s, "items"))
        return typed(c, s, "array", path);
    return any_rule(c);
}

int tc__schema_rule(tc_grammar *g, json_t *schema, char *why, size_t cap)
{
    ctx c = { .g = g,
              .root = schema,
              .refs = json_object(),
              .ws = -1,
              .ch = -1,
              .string = -1,
              .number = -1,
              .integer = -1,
              .any = -1,
              .any_object = -1,
              .why = why,
              .cap = cap };
    if (!c.refs) {
        snprintf(why, cap, "out of memory");
        return -1;
    }
    int root;
    if (schema) {
        root = compile(&c, schema, "");
    } else {
        any_rule(&c);
        root = c.any_object;
    }
    json_decref(c.refs);
    return c.failed ? -1 : root;
}

tc_grammar *tc_schema_grammar(json_t *schema, const tc_tokenizer *tok, char *why, size_t cap)
{
    tc_grammar *g = tc_grammar_create();
    why[0] = 0;
    int root = g ? tc__schema_rule(g, schema, why, cap) : -1;
    if (root < 0 || !tc_grammar_finish(g, root, tok)) {
        if (!why[0])
            snprintf(why, cap, "out of memory");
        tc_grammar_unref(g);
        return NULL;
    }
    return g;
}

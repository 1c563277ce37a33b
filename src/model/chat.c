/* Native chat templates. Recognition looks for each format's markers in the Jinja source;
 * a default system prompt written literally into a ChatML template (SmolLM2's) is kept. */
#define _GNU_SOURCE
#include "model/chat.h"
#include <stdio.h>
#include <string.h>
#include "runtime/host.h"

static bool has(const char *s, size_t n, const char *needle)
{
    return memmem(s, n, needle, strlen(needle)) != NULL;
}

/* The text between "<|im_start|>system\n" (the newline written as a real newline or as \n in
 * the Jinja string) and "<|im_end|>" inside one string literal of the template. */
static void chatml_default_system(const char *s, size_t n, char *out, size_t cap)
{
    out[0] = 0;
    const char *marks[] = { "<|im_start|>system\n", "<|im_start|>system\\n" };
    for (int k = 0; k < 2; k++) {
        const char *p = memmem(s, n, marks[k], strlen(marks[k]));
        if (!p)
            continue;
        p += strlen(marks[k]);
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

tc_status tc_chat_template_detect(const char *s, size_t n, tc_chat_template *out)
{
    memset(out, 0, sizeof *out);
    if (has(s, n, "<|im_start|>")) {
        out->kind = TC_CHAT_CHATML;
        chatml_default_system(s, n, out->default_system, sizeof out->default_system);
    } else if (has(s, n, "<|start_header_id|>")) {
        out->kind = TC_CHAT_LLAMA3;
    } else if (has(s, n, "[INST]")) {
        out->kind = TC_CHAT_LLAMA2;
    } else if (has(s, n, "<|user|>")) {
        out->kind = TC_CHAT_ZEPHYR;
    } else {
        return tc_set_error(TC_ERR_UNSUPPORTED, "tc_chat_template",
                            "unrecognised chat template (known: ChatML, Llama 3, Llama 2, Zephyr); "
                            "choose one with --template chatml|llama3|llama2|zephyr");
    }
    return TC_OK;
}

tc_status tc_chat_template_named(const char *name, tc_chat_template *out)
{
    static const struct {
        const char *name;
        tc_chat_kind kind;
    } names[] = { { "chatml", TC_CHAT_CHATML },
                  { "llama3", TC_CHAT_LLAMA3 },
                  { "llama2", TC_CHAT_LLAMA2 },
                  { "zephyr", TC_CHAT_ZEPHYR } };
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(name, names[i].name)) {
            out->kind = names[i].kind;
            return TC_OK;
        }
    return tc_set_error(TC_ERR_NOT_FOUND, "tc_chat_template",
                        "no chat template '%s' (known: chatml, llama3, llama2, zephyr)", name);
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
static void put(buf *b, const char *s)
{
    size_t k = strlen(s);
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
    memcpy(b->p + b->n, s, k + 1);
    b->n += k;
}
/* Put s without its leading and trailing whitespace (Llama 3 and 2 templates trim). */
static void put_trimmed(buf *b, const char *s)
{
    while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r')
        s++;
    size_t k = strlen(s);
    while (k && (s[k - 1] == ' ' || s[k - 1] == '\n' || s[k - 1] == '\t' || s[k - 1] == '\r'))
        k--;
    char *c = tc_host_alloc(k + 1);
    if (!c) {
        b->oom = true;
        return;
    }
    memcpy(c, s, k);
    c[k] = 0;
    put(b, c);
    tc_host_free(c);
}

/* Put what a message says (s, or s without its outer whitespace), keeping its range. */
static void put_content(buf *b, const char *s, bool trim)
{
    size_t from = b->n;
    if (trim)
        put_trimmed(b, s);
    else
        put(b, s);
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

static tc_status format(const tc_chat_template *t, const tc_chat_message *m, size_t n,
                        bool add_generation_prompt, buf *out_buf, char **out)
{
    *out = NULL;
    for (size_t i = 0; i < n; i++)
        if (!m[i].role || !m[i].content ||
            (strcmp(m[i].role, "system") && strcmp(m[i].role, "user") &&
             strcmp(m[i].role, "assistant")))
            return tc_set_error(TC_ERR_INVALID_ARGUMENT, "tc_chat_format",
                                "message %zu: role must be system, user or assistant", i);
    buf b = { .keep_plain = out_buf != NULL };
    put(&b, "");
    bool has_system = n && !strcmp(m[0].role, "system");
    switch (t->kind) {
    case TC_CHAT_CHATML:
        if (!has_system && t->default_system[0]) {
            put(&b, "<|im_start|>system\n");
            put(&b, t->default_system);
            put(&b, "<|im_end|>\n");
        }
        for (size_t i = 0; i < n; i++) {
            put(&b, "<|im_start|>");
            put(&b, m[i].role);
            put(&b, "\n");
            put_content(&b, m[i].content, false);
            put(&b, "<|im_end|>\n");
        }
        if (add_generation_prompt)
            put(&b, "<|im_start|>assistant\n");
        break;
    case TC_CHAT_LLAMA3:
        put(&b, "<|begin_of_text|>");
        for (size_t i = 0; i < n; i++) {
            put(&b, "<|start_header_id|>");
            put(&b, m[i].role);
            put(&b, "<|end_header_id|>\n\n");
            put_content(&b, m[i].content, true);
            put(&b, "<|eot_id|>");
        }
        if (add_generation_prompt)
            put(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case TC_CHAT_LLAMA2: {
        /* Meta's format: the system prompt folds into the first user turn. */
        size_t i = has_system ? 1 : 0;
        bool first = true;
        for (; i < n; i++) {
            if (!strcmp(m[i].role, "user")) {
                put(&b, "<s>[INST] ");
                if (first && has_system) {
                    put(&b, "<<SYS>>\n");
                    put_content(&b, m[0].content, true);
                    put(&b, "\n<</SYS>>\n\n");
                }
                put_content(&b, m[i].content, true);
                put(&b, " [/INST]");
                first = false;
            } else if (!strcmp(m[i].role, "assistant")) {
                put(&b, " ");
                put_content(&b, m[i].content, true);
                put(&b, " </s>");
            }
        }
        break;
    }
    case TC_CHAT_ZEPHYR:
        for (size_t i = 0; i < n; i++) {
            put(&b, "<|");
            put(&b, m[i].role);
            put(&b, "|>\n");
            put_content(&b, m[i].content, false);
            put(&b, "</s>\n");
        }
        if (add_generation_prompt)
            put(&b, "<|assistant|>\n");
        break;
    default:
        tc_host_free(b.p);
        tc_host_free(b.plain);
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, "tc_chat_format", "unknown template kind");
    }
    if (b.oom) {
        tc_host_free(b.p);
        tc_host_free(b.plain);
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_chat_format", "no host memory");
    }
    *out = b.p;
    if (out_buf)
        *out_buf = b;
    return TC_OK;
}

tc_status tc_chat_format(const tc_chat_template *t, const tc_chat_message *msgs, size_t n,
                         bool add_generation_prompt, char **out)
{
    return format(t, msgs, n, add_generation_prompt, NULL, out);
}

tc_status tc_chat_format_spans(const tc_chat_template *t, const tc_chat_message *msgs, size_t n,
                               bool add_generation_prompt, char **out, size_t **plain,
                               size_t *n_plain)
{
    buf b;
    *plain = NULL;
    *n_plain = 0;
    tc_status st = format(t, msgs, n, add_generation_prompt, &b, out);
    if (st == TC_OK) {
        *plain = b.plain;
        *n_plain = b.n_plain;
    }
    return st;
}

/* Qwen 2.5's ChatML (with its default system prompt) and Mistral's [INST] templates (7B
 * Instruct v0.1/v0.2; v3's of 7B v0.3 and Nemo with tools, calls and results; v7's of Small 3
 * with its dated default system message) are recognised from their sources and rendered
 * natively exactly as transformers' apply_chat_template renders them
 * (tests/model/data/chat_renderings.json, made by make_chat_renderings.py), or refused where
 * the template raises. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <jansson.h>

#include "model/chat.h"
#include "runtime/host.h"

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = 0;
    fclose(f);
    return s;
}

/* The kind a family's template is recognised as. */
static void expect_kind(const char *family, const tc_chat_template *t)
{
    tc_chat_kind kind = !strcmp(family, "qwen2.5")           ? TC_CHAT_CHATML
                        : !strcmp(family, "mistral-v0.3")    ? TC_CHAT_MISTRAL3
                        : !strcmp(family, "mistral-nemo")    ? TC_CHAT_MISTRAL3
                        : !strcmp(family, "mistral-small-3") ? TC_CHAT_MISTRAL7
                                                             : TC_CHAT_MISTRAL;
    assert_int_equal(t->kind, kind);
    assert_int_equal(t->mistral_legacy, !strcmp(family, "mistral-v0.1"));
    assert_int_equal(t->spaced, !strcmp(family, "mistral-v0.3"));
    assert_int_equal(t->trim, !strcmp(family, "mistral-v0.3"));
}

/* want with "{today}" replaced by today's date as strftime_now("%Y-%m-%d") writes it (the
 * recording's date is not the test's). */
static char *dated(const char *want)
{
    char date[16];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(date, sizeof date, "%Y-%m-%d", &tm);
    char *out = malloc(strlen(want) + sizeof date), *at = strstr(want, "{today}");
    if (!at)
        return strcpy(out, want);
    sprintf(out, "%.*s%s%s", (int)(at - want), want, date, at + 7);
    return out;
}

static void renderings_match_transformers(void **state)
{
    (void)state;
    json_error_t err;
    json_t *root = json_load_file(SOURCE_DIR "/tests/model/data/chat_renderings.json", 0, &err), *c;
    assert_non_null(root);
    json_t *cases = json_object_get(root, "cases");
    assert_true(json_array_size(cases) >= 120);
    size_t i, refused = 0, with_tools = 0;
    json_array_foreach(cases, i, c)
    {
        char path[512];
        snprintf(path, sizeof path, "%s/tests/model/data/%s", SOURCE_DIR,
                 json_string_value(json_object_get(c, "template")));
        char *src = slurp(path);
        tc_chat_template t;
        assert_int_equal(tc_chat_template_detect(src, strlen(src), &t), TC_OK);
        const char *family = json_string_value(json_object_get(c, "family"));
        const char *name = json_string_value(json_object_get(c, "name"));
        expect_kind(family, &t);
        json_t *msgs = json_object_get(c, "messages"), *m;
        tc_chat_message cm[8];
        tc_chat_calls calls[8] = { { 0 } };
        tc_chat_tool_call tc[8][4];
        size_t k;
        assert_true(json_array_size(msgs) <= 8);
        json_array_foreach(msgs, k, m)
        {
            cm[k].role = json_string_value(json_object_get(m, "role"));
            cm[k].content = json_string_value(json_object_get(m, "content"));
            cm[k].tool_call_id = json_string_value(json_object_get(m, "tool_call_id"));
            json_t *tcs = json_object_get(m, "tool_calls"), *x;
            size_t j;
            json_array_foreach(tcs, j, x)
            {
                json_t *fn = json_object_get(x, "function");
                tc[k][j] = (tc_chat_tool_call){
                    json_string_value(json_object_get(x, "id")),
                    json_string_value(json_object_get(fn, "name")),
                    json_string_value(json_object_get(fn, "arguments")),
                };
                calls[k] = (tc_chat_calls){ tc[k], j + 1 };
            }
        }
        json_t *tools = json_object_get(c, "tools");
        char *tools_text = json_is_array(tools) ? json_dumps(tools, 0) : NULL;
        with_tools += tools_text != NULL;
        char *out = NULL;
        tc_status st = tc_chat_format_tools(
            &t, cm, calls, json_array_size(msgs), tools_text,
            json_is_true(json_object_get(c, "add_generation_prompt")), &out, NULL, NULL);
        const char *want = json_string_value(json_object_get(c, "expected"));
        if (!want) {
            /* the template raises: so do we, with a reason */
            if (st != TC_ERR_INVALID_ARGUMENT)
                fail_msg("%s %s: rendered '%s' where the template raises", family, name,
                         out ? out : "");
            assert_non_null(strstr(tc_last_error(), "Mistral"));
            refused++;
        } else {
            if (st != TC_OK)
                fail_msg("%s %s: %s", family, name, tc_last_error());
            char *w = dated(want);
            if (strcmp(out, w))
                fail_msg("%s %s: got '%s', want '%s'", family, name, out, w);
            free(w);
        }
        free(tools_text);
        tc_host_free(out);
        free(src);
    }
    assert_true(refused >= 20);
    assert_true(with_tools >= 16);
    json_decref(root);
}

/* Recognition: Llama 2's [INST] template keeps its kind; a Mistral v3 template without tools
 * (the system message in the last turn) is v3; templates of formats not rendered natively
 * (Mistral's v7 with tools, whose calls are [TOOL_CALLS]name[ARGS]..., a [SYSTEM_PROMPT]
 * template whose default system message is not literal text and today's date, Gemma's) are
 * unrecognised, naming the --template fallback, rather than rendered in the wrong format; the
 * name "mistral" gives v0.2's, and "mistral-v3", "mistral-tekken" and "mistral-v7" the later
 * ones. */
static void templates_are_told_apart(void **state)
{
    (void)state;
    const char *llama2 = "{% if messages[0]['role'] == 'system' %}{% set content = '<<SYS>>\\n' "
                         "+ system_message %}{% endif %}{{ bos_token + '[INST] ' + content + ' "
                         "[/INST]' }}";
    const char *v03 = "{%- if loop.last and system_message is defined %}{{- '[INST] ' + "
                      "system_message + '\\n\\n' + message['content'] + '[/INST]' }}{%- else "
                      "%}{{- '[INST] ' + message['content'] + '[/INST]' }}{%- endif %}";
    tc_chat_template t;
    assert_int_equal(tc_chat_template_detect(llama2, strlen(llama2), &t), TC_OK);
    assert_int_equal(t.kind, TC_CHAT_LLAMA2);
    assert_int_equal(tc_chat_template_detect(v03, strlen(v03), &t), TC_OK);
    assert_int_equal(t.kind, TC_CHAT_MISTRAL3);
    assert_true(t.spaced);
    assert_false(t.trim);
    const char *unknown[] = {
        "{%- set default_system_message = 'You are helpful.' %}{{- '[SYSTEM_PROMPT]' + "
        "default_system_message + '[/SYSTEM_PROMPT]' }}{{- '[AVAILABLE_TOOLS]' + tools|tojson + "
        "'[/AVAILABLE_TOOLS]' }}{{- '[INST]' + m + '[/INST]' }}{{- '[TOOL_CALLS]' + name }}",
        "{%- set default_system_message = 'You are ' + name %}{{- '[SYSTEM_PROMPT]' + "
        "default_system_message + '[/SYSTEM_PROMPT][INST]' + m + '[/INST]' }}",
        "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] "
        "}}<end_of_turn>\n{% endfor %}",
    };
    for (size_t i = 0; i < sizeof unknown / sizeof *unknown; i++) {
        assert_int_equal(tc_chat_template_detect(unknown[i], strlen(unknown[i]), &t),
                         TC_ERR_UNSUPPORTED);
        assert_non_null(strstr(tc_last_error(), "--template"));
        assert_non_null(strstr(tc_last_error(), "mistral-v7"));
    }
    assert_int_equal(tc_chat_template_named("mistral", &t), TC_OK);
    assert_int_equal(t.kind, TC_CHAT_MISTRAL);
    assert_false(t.mistral_legacy);
    tc_chat_message m[] = { { "user", "Hi", NULL } };
    char *out;
    assert_int_equal(tc_chat_format(&t, m, 1, true, &out), TC_OK);
    assert_string_equal(out, "<s> [INST] Hi [/INST]");
    tc_host_free(out);
    /* Mistral's template has no tool role */
    tc_chat_message tool[] = { { "user", "Hi", NULL }, { "tool", "18 C", NULL } };
    assert_int_not_equal(tc_chat_format(&t, tool, 2, true, &out), TC_OK);
    /* the later Mistral formats by name; v7's named form has no default system message */
    const struct {
        const char *name, *want;
    } named[] = {
        { "mistral-v3", "<s>[INST] Hi[/INST]" },
        { "mistral-tekken", "<s>[INST]Hi[/INST]" },
        { "mistral-v7", "<s>[INST]Hi[/INST]" },
    };
    for (size_t i = 0; i < sizeof named / sizeof *named; i++) {
        assert_int_equal(tc_chat_template_named(named[i].name, &t), TC_OK);
        assert_int_equal(tc_chat_format(&t, m, 1, true, &out), TC_OK);
        assert_string_equal(out, named[i].want);
        tc_host_free(out);
    }
    assert_true(tc_chat_template_tools(&t) == false);
    assert_int_equal(tc_chat_template_named("mistral-v3", &t), TC_OK);
    assert_true(tc_chat_template_tools(&t));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(renderings_match_transformers),
        cmocka_unit_test(templates_are_told_apart),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

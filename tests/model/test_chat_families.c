/* Qwen 2.5's ChatML (with its default system prompt) and Mistral 7B Instruct's [INST] templates
 * are recognised from their sources and rendered natively exactly as transformers'
 * apply_chat_template renders them (tests/model/data/chat_renderings.json, made by
 * make_chat_renderings.py), or refused where the template raises. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static void renderings_match_transformers(void **state)
{
    (void)state;
    json_error_t err;
    json_t *root = json_load_file(SOURCE_DIR "/tests/model/data/chat_renderings.json", 0, &err), *c;
    assert_non_null(root);
    json_t *cases = json_object_get(root, "cases");
    assert_true(json_array_size(cases) >= 40);
    size_t i, refused = 0;
    json_array_foreach(cases, i, c)
    {
        char path[512];
        snprintf(path, sizeof path, "%s/tests/model/data/%s", SOURCE_DIR,
                 json_string_value(json_object_get(c, "template")));
        char *src = slurp(path);
        tc_chat_template t;
        assert_int_equal(tc_chat_template_detect(src, strlen(src), &t), TC_OK);
        const char *family = json_string_value(json_object_get(c, "family"));
        assert_int_equal(t.kind, strncmp(family, "mistral", 7) ? TC_CHAT_CHATML : TC_CHAT_MISTRAL);
        assert_int_equal(t.mistral_legacy, !strcmp(family, "mistral-v0.1"));
        json_t *msgs = json_object_get(c, "messages"), *m;
        tc_chat_message cm[8];
        size_t k;
        json_array_foreach(msgs, k, m)
        {
            cm[k].role = json_string_value(json_object_get(m, "role"));
            cm[k].content = json_string_value(json_object_get(m, "content"));
        }
        char *out = NULL;
        tc_status st =
            tc_chat_format(&t, cm, json_array_size(msgs),
                           json_is_true(json_object_get(c, "add_generation_prompt")), &out);
        const char *want = json_string_value(json_object_get(c, "expected"));
        if (!want) {
            /* the template raises: so do we, with a reason */
            if (st != TC_ERR_INVALID_ARGUMENT)
                fail_msg("%s %s: rendered '%s' where the template raises", family,
                         json_string_value(json_object_get(c, "name")), out ? out : "");
            assert_non_null(strstr(tc_last_error(), "Mistral"));
            refused++;
        } else {
            assert_int_equal(st, TC_OK);
            if (strcmp(out, want))
                fail_msg("%s %s: got '%s', want '%s'", family,
                         json_string_value(json_object_get(c, "name")), out, want);
        }
        tc_host_free(out);
        free(src);
    }
    assert_true(refused >= 8);
    json_decref(root);
}

/* Recognition: Llama 2's [INST] template keeps its kind; a Mistral template of a later kind
 * (v0.3: no space before [/INST], the system message in the last turn) is unrecognised rather
 * than rendered in the wrong format; the name "mistral" gives v0.2's. */
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
    assert_int_equal(tc_chat_template_detect(v03, strlen(v03), &t), TC_ERR_UNSUPPORTED);
    assert_non_null(strstr(tc_last_error(), "mistral"));
    assert_int_equal(tc_chat_template_named("mistral", &t), TC_OK);
    assert_int_equal(t.kind, TC_CHAT_MISTRAL);
    assert_false(t.mistral_legacy);
    tc_chat_message m[] = { { "user", "Hi" } };
    char *out;
    assert_int_equal(tc_chat_format(&t, m, 1, true, &out), TC_OK);
    assert_string_equal(out, "<s> [INST] Hi [/INST]");
    tc_host_free(out);
    /* Mistral's template has no tool role */
    tc_chat_message tool[] = { { "user", "Hi" }, { "tool", "18 C" } };
    assert_int_not_equal(tc_chat_format(&t, tool, 2, true, &out), TC_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(renderings_match_transformers),
        cmocka_unit_test(templates_are_told_apart),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

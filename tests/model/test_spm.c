/* SentencePiece-style BPE (tokenizer.json with byte_fallback) against Hugging Face's
 * `tokenizers`: Mistral 7B's 32k vocabulary (tests/model/data/mistral-v1.tokenizer.json) under
 * three conventions (Metaspace "first" and "never", Llama 2's legacy normalizer), ids and
 * decoded text recorded in tests/model/spm_expected.json by make_spm_expected.py. */
#define _GNU_SOURCE
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "model/chat.h"
#include "model/tokenizer.h"
#include "runtime/host.h"

static json_t *expected, *base;

/* Write the base tokenizer.json with a variant's normalizer, pre_tokenizer and decoder. */
static void write_variant(json_t *patch, char *path)
{
    json_t *j = json_deep_copy(base);
    const char *key;
    json_t *v;
    json_object_foreach(patch, key, v) json_object_set(j, key, v);
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(json_dump_file(j, path, JSON_COMPACT), 0);
    json_decref(j);
}

static void variants_match_tokenizers(void **state)
{
    (void)state;
    json_t *variants = json_object_get(expected, "variants"), *var;
    const char *name;
    assert_int_equal(json_object_size(variants), 3);
    json_object_foreach(variants, name, var)
    {
        char path[] = "/tmp/tc_spm_XXXXXX";
        write_variant(json_object_get(var, "patch"), path);
        tc_tokenizer *t;
        assert_int_equal(tc_tokenizer_from_json(path, NULL, &t), TC_OK);
        unlink(path);
        json_t *cases = json_object_get(var, "cases"), *c;
        size_t i;
        json_array_foreach(cases, i, c)
        {
            const char *text = json_string_value(json_object_get(c, "text"));
            json_t *want = json_object_get(c, "ids");
            int32_t *ids;
            size_t n;
            assert_int_equal(tc_tokenizer_encode(t, text, strlen(text), true, false, &ids, &n),
                             TC_OK);
            bool same = n == json_array_size(want);
            for (size_t k = 0; same && k < n; k++)
                same = ids[k] == json_integer_value(json_array_get(want, k));
            if (!same) {
                fprintf(stderr, "ours:");
                for (size_t k = 0; k < n; k++)
                    fprintf(stderr, " %d", ids[k]);
                fprintf(stderr, "\n");
                fail_msg("%s: '%s': ids differ from tokenizers'", name, text);
            }
            /* Streaming decode, control tokens hidden, equals tokenizers' decode. */
            char out[1024];
            size_t len = 0;
            tc_detok d = { 0 };
            for (size_t k = 0; k < n; k++)
                len += tc_detok_push(t, &d, ids[k], false, out + len, sizeof out - len);
            len += tc_detok_flush(&d, out + len, sizeof out - len);
            out[len] = 0;
            const char *dec = json_string_value(json_object_get(c, "decoded"));
            if (strcmp(out, dec))
                fail_msg("%s: '%s' decodes to '%s', tokenizers gives '%s'", name, text, out, dec);
            tc_host_free(ids);
        }
        tc_tokenizer_destroy(t);
    }
}

/* The GGUF form of the vocabulary (scores, no merge list) merges by score, which must give
 * what the merge list gives under the legacy conventions (a space prefix on each segment,
 * the decoder stripping the first space). */
static void gguf_scores_match_the_merge_list(void **state)
{
    (void)state;
    tc_gguf g;
    tc_tokenizer *t;
    assert_int_equal(tc_gguf_open(&g, SOURCE_DIR "/tests/model/data/mistral-v1.vocab.gguf"), TC_OK);
    assert_int_equal(tc_tokenizer_from_gguf(&g, &t), TC_OK);
    assert_int_equal(tc_tokenizer_bos(t), 1);
    assert_true(tc_tokenizer_adds_bos(t));
    json_t *cases = json_object_get(
               json_object_get(json_object_get(expected, "variants"), "legacy"), "cases"),
           *c;
    size_t i;
    assert_true(json_array_size(cases) >= 10);
    json_array_foreach(cases, i, c)
    {
        const char *text = json_string_value(json_object_get(c, "text"));
        json_t *want = json_object_get(c, "ids");
        int32_t *ids;
        size_t n;
        assert_int_equal(tc_tokenizer_encode(t, text, strlen(text), true, false, &ids, &n), TC_OK);
        bool same = n == json_array_size(want);
        for (size_t k = 0; same && k < n; k++)
            same = ids[k] == json_integer_value(json_array_get(want, k));
        if (!same)
            fail_msg("'%s': ids differ from tokenizers' (legacy)", text);
        char out[1024];
        size_t len = 0;
        tc_detok d = { 0 };
        for (size_t k = 0; k < n; k++)
            len += tc_detok_push(t, &d, ids[k], false, out + len, sizeof out - len);
        out[len] = 0;
        assert_string_equal(out, json_string_value(json_object_get(c, "decoded")));
        tc_host_free(ids);
        /* With add_bos, exactly one BOS, also when the text starts with it. */
        char with_bos[256];
        snprintf(with_bos, sizeof with_bos, "<s>%s", text);
        assert_int_equal(tc_tokenizer_encode(t, with_bos, strlen(with_bos), true, true, &ids, &n),
                         TC_OK);
        assert_int_equal(ids[0], 1);
        assert_true(n < 2 || ids[1] != 1);
        tc_host_free(ids);
    }
    tc_tokenizer_destroy(t);
    tc_gguf_close(&g);
}

/* From a GGUF, an unknown-type token written in the text ("<unk>") is matched as a special
 * token, as llama.cpp matches it: where the text has it, the ids are those of the same text
 * with a control token there, that token's id replaced by <unk>'s; without special parsing it
 * stays text. */
static void gguf_unknown_tokens_are_matched_as_specials(void **state)
{
    (void)state;
    tc_gguf g;
    tc_tokenizer *t;
    assert_int_equal(tc_gguf_open(&g, SOURCE_DIR "/tests/model/data/mistral-v1.vocab.gguf"), TC_OK);
    assert_int_equal(tc_tokenizer_from_gguf(&g, &t), TC_OK);
    int32_t unk = tc_tokenizer_find(t, "<unk>"), eos = tc_tokenizer_find(t, "</s>");
    assert_int_equal(unk, 0);
    const char *texts[][2] = { { "a<unk>b", "a</s>b" },
                               { "<unk>", "</s>" },
                               { "Hello <unk> world<unk>", "Hello </s> world</s>" } };
    for (size_t k = 0; k < 3; k++) {
        int32_t *a, *b;
        size_t na, nb;
        assert_int_equal(
            tc_tokenizer_encode(t, texts[k][0], strlen(texts[k][0]), true, false, &a, &na), TC_OK);
        assert_int_equal(
            tc_tokenizer_encode(t, texts[k][1], strlen(texts[k][1]), true, false, &b, &nb), TC_OK);
        assert_int_equal(na, nb);
        size_t unks = 0;
        for (size_t i = 0; i < na; i++) {
            assert_int_equal(a[i], b[i] == eos ? unk : b[i]);
            unks += a[i] == unk;
        }
        assert_true(unks >= 1);
        tc_host_free(a), tc_host_free(b);
        /* without special parsing: text, no <unk> id */
        assert_int_equal(
            tc_tokenizer_encode(t, texts[k][0], strlen(texts[k][0]), false, false, &a, &na), TC_OK);
        for (size_t i = 0; i < na; i++)
            assert_int_not_equal(a[i], unk);
        tc_host_free(a);
    }
    tc_tokenizer_destroy(t);
    tc_gguf_close(&g);
}

/* Never a double BOS: for each chat template, the rendered prompt tokenised with add_bos starts
 * with exactly one BOS, whether the template writes it (Llama 2 "<s>", Llama 3
 * "<|begin_of_text|>") or leaves it to the tokenizer (ChatML, Zephyr). */
static void chat_templates_never_double_the_bos(void **state)
{
    (void)state;
    const struct {
        const char *name, *bos;
    } cases[] = { { "llama2", "<s>" },
                  { "llama3", "<|begin_of_text|>" },
                  { "chatml", "<s>" },
                  { "zephyr", "<s>" } };
    tc_chat_message msgs[] = { { "system", "Be brief.", NULL },
                               { "user", "Hi there", NULL },
                               { "assistant", "Hello.", NULL },
                               { "user", "Bye", NULL } };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        /* The vocabulary with the template's BOS as an added special token. */
        json_t *j = json_deep_copy(base), *added = json_object_get(j, "added_tokens");
        if (strcmp(cases[k].bos, "<s>"))
            json_array_append_new(added,
                                  json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", 32000,
                                            "content", cases[k].bos, "single_word", 0, "lstrip", 0,
                                            "rstrip", 0, "normalized", 0, "special", 1));
        char tj[] = "/tmp/tc_tj_XXXXXX", tc[] = "/tmp/tc_tc_XXXXXX";
        int fd = mkstemp(tj);
        close(fd);
        assert_int_equal(json_dump_file(j, tj, JSON_COMPACT), 0);
        json_decref(j);
        json_t *cfg = json_pack("{s:s, s:s, s:b}", "bos_token", cases[k].bos, "eos_token", "</s>",
                                "add_bos_token", 1);
        fd = mkstemp(tc);
        close(fd);
        assert_int_equal(json_dump_file(cfg, tc, 0), 0);
        json_decref(cfg);
        tc_tokenizer *t;
        assert_int_equal(tc_tokenizer_from_json(tj, tc, &t), TC_OK);
        unlink(tj);
        unlink(tc);
        tc_chat_template tmpl;
        assert_int_equal(tc_chat_template_named(cases[k].name, &tmpl), TC_OK);
        char *prompt;
        assert_int_equal(tc_chat_format(&tmpl, msgs, 4, true, &prompt), TC_OK);
        int32_t *ids;
        size_t n;
        assert_int_equal(tc_tokenizer_encode(t, prompt, strlen(prompt), true, true, &ids, &n),
                         TC_OK);
        int32_t bos = tc_tokenizer_bos(t);
        assert_true(bos >= 0);
        if (ids[0] != bos || ids[1] == bos)
            fail_msg("%s: the prompt starts %d %d, BOS is %d", cases[k].name, ids[0], ids[1], bos);
        tc_host_free(ids);
        tc_host_free(prompt);
        tc_tokenizer_destroy(t);
    }
}

static int setup(void **state)
{
    (void)state;
    json_error_t err;
    expected = json_load_file(SOURCE_DIR "/tests/model/spm_expected.json", 0, &err);
    base = json_load_file(SOURCE_DIR "/tests/model/data/mistral-v1.tokenizer.json", 0, &err);
    return expected && base ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    json_decref(expected);
    json_decref(base);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(variants_match_tokenizers),
        cmocka_unit_test(gguf_scores_match_the_merge_list),
        cmocka_unit_test(gguf_unknown_tokens_are_matched_as_specials),
        cmocka_unit_test(chat_templates_never_double_the_bos),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

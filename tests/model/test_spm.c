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
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

/* Unicode NFC through libutf8proc (model/nfc.c): composed where NFC composes, untouched where
 * the text is ASCII, NFC already or not UTF-8; skipped where the library is not installed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/tokenizer_internal.h"

static void text_not_in_nfc_is_composed(void **state)
{
    (void)state;
    if (!tc__nfc_available())
        skip();
    static const struct {
        const char *in, *want;
    } cases[] = {
        { "Zwo\xcc\x88lf", "Zw\xc3\xb6lf" },                        /* o + U+0308 -> o-umlaut */
        { "\xe1\x84\x92\xe1\x85\xa1\xe1\x86\xab", "\xed\x95\x9c" }, /* Hangul jamo -> U+D55C */
        { "\xe2\x84\xab", "\xc3\x85" },                             /* Angstrom sign -> A-ring */
        { "\xef\xa4\x80", "\xe8\xb1\x88" },                         /* U+F900 -> U+8C48 */
        { "q\xcc\x87\xcc\xa3", "q\xcc\xa3\xcc\x87" },               /* marks in canonical order */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint8_t *out;
        size_t n;
        assert_true(tc__nfc((const uint8_t *)cases[i].in, strlen(cases[i].in), &out, &n));
        assert_int_equal(n, strlen(cases[i].want));
        assert_memory_equal(out, cases[i].want, n);
        free(out);
    }
}

static void nfc_text_ascii_and_invalid_utf8_stay(void **state)
{
    (void)state;
    const char *same[] = { "plain ASCII", "Zw\xc3\xb6lf \xed\x95\x9c", "bad \xff\xfe bytes",
                           "cut \xc3" };
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
        uint8_t *out = (uint8_t *)"x";
        size_t n = 0;
        assert_false(tc__nfc((const uint8_t *)same[i], strlen(same[i]), &out, &n));
        assert_null(out);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(text_not_in_nfc_is_composed),
        cmocka_unit_test(nfc_text_ascii_and_invalid_utf8_stay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

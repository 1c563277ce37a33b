/* Logging: level names, THINCUDA_LOG parsing, one line per event, nothing formatted below the
 * level, and the sink replacing stderr. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/log.h"

static char lines[8][1100];
static int nlines;

static void capture(tc_log_level level, const char *line, void *user)
{
    (void)level;
    (*(int *)user)++;
    if (nlines < 8)
        snprintf(lines[nlines++], sizeof lines[0], "%s", line);
}

static int formatted;

static int side_effect(void)
{
    return ++formatted;
}

static void levels_parse_by_name(void **state)
{
    (void)state;
    tc_log_level l;
    assert_true(tc_log_parse_level("debug", &l));
    assert_int_equal(l, TC_LOG_DEBUG);
    assert_true(tc_log_parse_level("WARN", &l));
    assert_int_equal(l, TC_LOG_WARN);
    assert_true(tc_log_parse_level("off", &l));
    assert_int_equal(l, TC_LOG_OFF);
    assert_false(tc_log_parse_level("loud", &l));
    assert_false(tc_log_parse_level(NULL, &l));
    assert_string_equal(tc_log_level_name(TC_LOG_ERROR), "error");
}

static void env_sets_the_level_and_lines_below_it_are_not_formatted(void **state)
{
    (void)state;
    /* meson runs this test with THINCUDA_LOG=info. */
    assert_int_equal(tc_log_get_level(), TC_LOG_INFO);
    int calls = 0;
    nlines = 0;
    tc_log_set_sink(capture, &calls);
    formatted = 0;
    TC_DEBUG("hidden %d", side_effect());
    assert_int_equal(formatted, 0);
    assert_int_equal(calls, 0);
    TC_INFO("shown %d\nwith a newline", side_effect());
    assert_int_equal(formatted, 1);
    assert_int_equal(calls, 1);
    assert_non_null(strstr(lines[0], " info test_log.c:"));
    assert_non_null(strstr(lines[0], "shown 1 with a newline"));
    assert_null(strchr(lines[0], '\n'));
    tc_log_set_level(TC_LOG_OFF);
    TC_ERROR("silenced %d", side_effect());
    assert_int_equal(calls, 1);
    tc_log_set_level(TC_LOG_DEBUG);
    TC_DEBUG("now shown");
    assert_int_equal(calls, 2);
    tc_log_set_sink(NULL, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(levels_parse_by_name),
        cmocka_unit_test(env_sets_the_level_and_lines_below_it_are_not_formatted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

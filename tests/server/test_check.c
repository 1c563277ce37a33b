/* The front's check of a connection's HTTP (src/server/check.c), without sockets: client
 * bytes fed whole and in pieces of 1 to 7 bytes, whatever is ready sent on at once, as the
 * relay does. A head goes on only whole and valid, a body as it comes; a malformed request
 * stops the input at its first byte with one JSON error of the right status; the daemon's
 * answers are counted (HEAD's without a body, 100 Continue not at all), and the error follows
 * them only when the daemon answered every whole request and nothing of the malformed one. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/check.h"
#include "server/internal.h"

enum { CAP = 1 << 18 };

/* A relay without sockets: the client's bytes not yet sent, and all that went to the daemon. */
typedef struct sim {
    tc__check k;
    char in[CAP];
    size_t len;
    char sent[CAP];
    size_t n_sent;
} sim;

static sim *sim_new(void)
{
    sim *s = calloc(1, sizeof *s);
    assert_non_null(s);
    tc__check_init(&s->k);
    return s;
}

static void sim_free(sim *s)
{
    tc__check_deinit(&s->k);
    free(s);
}

/* What is ready goes to the daemon. */
static void sim_send(sim *s)
{
    size_t n = s->k.ready;
    assert_true(n <= s->len);
    memcpy(s->sent + s->n_sent, s->in, n);
    s->n_sent += n;
    memmove(s->in, s->in + n, s->len - n);
    s->len -= n;
    tc__check_sent(&s->k, n);
}

/* The client sends p in pieces of step bytes (0: whole). */
static void sim_feed(sim *s, const char *p, size_t n, size_t step)
{
    if (!step)
        step = n ? n : 1;
    for (size_t at = 0; at < n && !s->k.closed; at += step) {
        size_t len = n - at < step ? n - at : step;
        assert_true(s->len + len <= CAP);
        memcpy(s->in + s->len, p + at, len);
        s->len += len;
        tc__check_requests(&s->k, s->in, s->len);
        if (s->k.closed && s->len > s->k.ready)
            s->len = s->k.ready;
        sim_send(s);
    }
}

static void sim_answer(sim *s, const char *text, size_t step)
{
    size_t n = strlen(text);
    for (size_t at = 0; at < n; at += step) {
        tc__check_responses(&s->k, text + at, n - at < step ? n - at : step);
        tc__check_requests(&s->k, s->in, s->len);
        sim_send(s);
    }
}

static const char post[] = "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
static const char get[] = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";

static void heads_go_whole_bodies_as_they_come(void **state)
{
    (void)state;
    char both[256];
    size_t head = strstr(post, "\r\n\r\n") + 4 - post, n1 = strlen(post);
    size_t n = (size_t)snprintf(both, sizeof both, "%s%s", post, get);
    for (size_t step = 0; step <= 7; step++) {
        sim *s = sim_new();
        for (size_t at = 0; at < n; at += step ? step : n) {
            sim_feed(s, both + at, (step && n - at > step) ? step : n - at, 0);
            /* Never part of a head: nothing, the first head and some of its body, or all. */
            assert_true(s->n_sent == 0 || (s->n_sent >= head && s->n_sent <= n1) || s->n_sent == n);
        }
        assert_int_equal(s->n_sent, n);
        assert_memory_equal(s->sent, both, n);
        assert_int_equal(s->k.heads, 2);
        assert_int_equal(s->k.done, 2);
        assert_false(s->k.closed);
        assert_null(s->k.err);
        sim_free(s);
    }
}

/* Feed ok, then bad, then ok again: bad is refused with status and code, and nothing of it
 * goes to the daemon but its head when its body is at fault. */
static sim *refused(const char *bad, size_t step, int status, const char *code)
{
    sim *s = sim_new();
    char text[1 << 17];
    int n = snprintf(text, sizeof text, "%s%s%s", get, bad, get);
    assert_true(n > 0 && (size_t)n < sizeof text);
    sim_feed(s, text, (size_t)n, step);
    assert_true(s->k.closed);
    const char *end = strstr(bad, "\r\n\r\n");
    size_t head = end && strstr(bad, "chunked") ? (size_t)(end + 4 - bad) : 0;
    assert_int_equal(s->n_sent, strlen(get) + head);
    assert_int_equal(s->k.err_status, status);
    assert_non_null(s->k.err);
    char line[64];
    snprintf(line, sizeof line, "HTTP/1.1 %d ", status);
    assert_memory_equal(s->k.err, line, strlen(line));
    char want[96];
    snprintf(want, sizeof want, "\"code\":\"%s\"}}", code);
    assert_non_null(strstr(s->k.err, "\r\nContent-Type: application/json\r\n"));
    assert_non_null(strstr(s->k.err, "\r\nConnection: close\r\n"));
    size_t w = strlen(want);
    assert_true(s->k.err_len > w);
    assert_memory_equal(s->k.err + s->k.err_len - w, want, w);
    return s;
}

static void malformed_requests_are_refused(void **state)
{
    (void)state;
    static char big_head[80 << 10], big_url[80 << 10], fields[8 << 10], cookies[4 << 10];
    snprintf(big_head, sizeof big_head, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: %070000d\r\n\r\n", 0);
    snprintf(big_url, sizeof big_url, "GET /%070000d HTTP/1.1\r\nHost: x\r\n\r\n", 0);
    size_t at = (size_t)snprintf(fields, sizeof fields, "GET / HTTP/1.1\r\nHost: x\r\n");
    for (int i = 0; i < FRONT_FIELDS; i++)
        at += (size_t)snprintf(fields + at, sizeof fields - at, "a%d:\r\n", i);
    snprintf(fields + at, sizeof fields - at, "\r\n");
    at = (size_t)snprintf(cookies, sizeof cookies, "GET / HTTP/1.1\r\nHost: x\r\nCookie: a");
    for (int i = 0; i < FRONT_COOKIES; i++)
        cookies[at++] = ';';
    snprintf(cookies + at, sizeof cookies - at, "\r\n\r\n");
    const struct {
        const char *bad;
        int status;
        const char *code;
    } cases[] = {
        { "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", 400, "malformed_request" },
        { "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400,
          "malformed_request" },
        { "GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505, "http_version_not_supported" },
        { "GET /\r\n\r\n", 505, "http_version_not_supported" },
        { "GET / HTTP/1.1\r\n\r\n", 400, "malformed_request" },
        { "GET / HTTP/1.1\r\nHost: x\r\nBad(Name): 1\r\n\r\n", 400, "malformed_request" },
        { "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", 400,
          "malformed_request" },
        { "\x16\x03\x01 TLS", 400, "malformed_request" },
        { big_head, 431, "request_header_fields_too_large" },
        { big_url, 414, "uri_too_long" },
        { fields, 431, "request_header_fields_too_large" },
        { cookies, 431, "request_header_fields_too_large" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (size_t step = 0; step <= 7; step += 7) {
            sim *s = refused(cases[i].bad, step, cases[i].status, cases[i].code);
            sim_free(s);
        }
}

static void accepted_at_the_limits(void **state)
{
    (void)state;
    const char *ok[] = {
        "GET / HTTP/1.0\r\n\r\n",                          /* HTTP/1.0 needs no Host */
        "GET / HTTP/1.2\r\nHost: x\r\n\r\n",               /* 1.x is 1.1 to libmicrohttpd */
        "GET / HTTP/1.1\nHost: x\n\n",                     /* bare line feeds */
        "GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n", /* a folded value */
        "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        "2;ext=1\r\nab\r\n0\r\nX-Trailer: 1\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        sim *s = sim_new();
        sim_feed(s, ok[i], strlen(ok[i]), 1);
        assert_int_equal(s->n_sent, strlen(ok[i]));
        assert_int_equal(s->k.done, 1);
        assert_null(s->k.err);
        sim_free(s);
    }
}

static void answers_are_counted(void **state)
{
    (void)state;
    for (size_t step = 1; step <= 7; step++) {
        sim *s = sim_new();
        const char *reqs = "HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n"
                           "POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                           "Content-Length: 2\r\n\r\nab"
                           "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        sim_feed(s, reqs, strlen(reqs), step);
        assert_int_equal(s->k.heads, 3);
        sim_answer(s,
                   "HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n"
                   "HTTP/1.1 100 Continue\r\n\r\n"
                   "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
                   "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
                   step);
        assert_int_equal(s->k.answered, 3);
        assert_false(s->k.resp_bad);
        assert_false(s->k.resp_busy);
        assert_false(tc__check_finish(&s->k)); /* no error to follow */
        sim_free(s);
    }
}

static void the_error_follows_only_the_answers_before_it(void **state)
{
    (void)state;
    /* A malformed head: the daemon answers the request before it, then the error goes. */
    sim *s = refused("GET / HTTP/2.0\r\nHost: x\r\n\r\n", 3, 505, "http_version_not_supported");
    sim_answer(s, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 4);
    assert_true(tc__check_finish(&s->k));
    sim_free(s);
    /* A malformed body after its head went: the error goes if the daemon did not answer. */
    const char *chunk = "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
    s = refused(chunk, 0, 400, "malformed_request");
    sim_free(s);
    s = sim_new();
    sim_feed(s, chunk, strlen(chunk), 0);
    assert_int_equal(s->k.heads, 1);
    assert_int_equal(s->k.done, 0);
    sim_answer(s, "HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\nno", 5);
    assert_false(tc__check_finish(&s->k)); /* the daemon answered it: no second answer */
    sim_free(s);
    s = sim_new();
    sim_feed(s, chunk, strlen(chunk), 0);
    assert_true(tc__check_finish(&s->k));
    sim_free(s);
    /* An answer cut short, or one that closes the connection: no error after it. */
    s = refused("GET / HTTP/2.0\r\nHost: x\r\n\r\n", 0, 505, "http_version_not_supported");
    sim_answer(s, "HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\nok", 4);
    assert_false(tc__check_finish(&s->k));
    sim_free(s);
    s = refused("GET / HTTP/2.0\r\nHost: x\r\n\r\n", 0, 505, "http_version_not_supported");
    sim_answer(s, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", 4);
    assert_false(tc__check_finish(&s->k));
    sim_free(s);
}

static void input_ends(void **state)
{
    (void)state;
    /* Bytes after a request that closes the connection are dropped without an error. */
    sim *s = sim_new();
    const char *close_first = "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    char text[256];
    snprintf(text, sizeof text, "%s%s", close_first, get);
    sim_feed(s, text, strlen(text), 2);
    assert_true(s->k.closed);
    assert_null(s->k.err);
    assert_int_equal(s->n_sent, strlen(close_first));
    sim_free(s);
    /* The client's end of stream inside a head: that head never goes. */
    s = sim_new();
    snprintf(text, sizeof text, "%sGET / HTTP/1.1\r\nHo", get);
    sim_feed(s, text, strlen(text), 0);
    tc__check_close(&s->k);
    assert_int_equal(s->k.ready, 0);
    assert_int_equal(s->n_sent, strlen(get));
    sim_free(s);
}

static void the_pipeline_waits_for_answers(void **state)
{
    (void)state;
    sim *s = sim_new();
    for (int i = 0; i < 70; i++)
        sim_feed(s, get, strlen(get), 0);
    assert_int_equal(s->k.heads, 64);
    assert_int_equal(s->n_sent, 64 * strlen(get));
    sim_answer(s, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 64);
    assert_int_equal(s->k.heads, 65);
    sim_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(heads_go_whole_bodies_as_they_come),
        cmocka_unit_test(malformed_requests_are_refused),
        cmocka_unit_test(accepted_at_the_limits),
        cmocka_unit_test(answers_are_counted),
        cmocka_unit_test(the_error_follows_only_the_answers_before_it),
        cmocka_unit_test(input_ends),
        cmocka_unit_test(the_pipeline_waits_for_answers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Checking a connection's traffic with http-parser (check.h): nodejs/http-parser 2.9, from
 * Debian's libhttp-parser-dev, linked statically. */
#define _GNU_SOURCE
#include "server/check.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "server/internal.h"

/* Requests the daemon may hold unanswered: one bit each in head_bits. */
enum { PIPELINE = 64 };

/* Where the request parser paused: it pauses at the end of each head and of each request,
 * so that the check knows the offset of both. */
enum { AT_NONE, AT_HEAD, AT_END };

/* ---------------------------------------------------------------- errors */

static const char *reason(int status)
{
    switch (status) {
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 505: return "HTTP Version Not Supported";
    default: return "Bad Request";
    }
}

/* The whole response (status line, headers, OpenAI error body) for an error of the front's;
 * NULL when out of memory. */
static char *error_response(int status, const char *code, const char *message, size_t *len)
{
    tc_oai_error e;
    tc_oai_fail(&e, status, "invalid_request_error", NULL, code, "%s", message);
    json_t *v = tc__error_json(&e);
    char *body = v ? json_dumps(v, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(v);
    if (!body)
        return NULL;
    /* The Date header as RFC 9110 section 5.6.7 writes it, whatever the locale. */
    static const char days[7][4] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };
    static const char months[12][4] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    char *out = NULL;
    int n = asprintf(&out,
                     "HTTP/1.1 %d %s\r\nConnection: close\r\nContent-Length: %zu\r\n"
                     "Content-Type: application/json\r\n"
                     "Date: %s, %02d %s %04d %02d:%02d:%02d GMT\r\n\r\n%s",
                     status, reason(status), strlen(body), days[tm.tm_wday], tm.tm_mday,
                     months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec, body);
    free(body);
    if (n < 0)
        return NULL;
    *len = (size_t)n;
    return out;
}

/* No byte past those ready goes to the daemon: the rest are dropped, and so is whatever the
 * client sends from now on. */
static void stop_input(tc__check *k)
{
    k->closed = true;
    if (k->parsed > k->ready)
        k->parsed = k->ready;
}

/* The request being read is malformed: it is answered with this error (if the daemon has
 * answered every request before it) and the connection closes. */
static void fail(tc__check *k, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fail(tc__check *k, int status, const char *code, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    free(k->err);
    k->err = error_response(status, code, msg, &k->err_len);
    k->err_status = status;
    stop_input(k);
}

/* The request parser stopped with e. */
static void refuse(tc__check *k, enum http_errno e)
{
    switch (e) {
    case HPE_CLOSED_CONNECTION:
        /* Bytes after a request that closes the connection (a strict build of the parser
         * says so): dropped, as above. */
        stop_input(k);
        return;
    case HPE_CB_header_field:
    case HPE_CB_header_value: fail(k, 431, "request_header_fields_too_large", "%s", k->why); return;
    case HPE_HEADER_OVERFLOW:
        if (k->in_head && k->fields == 0)
            fail(k, 414, "uri_too_long",
                 "the request line is over %d bytes; the limit for the URL is %d bytes",
                 (int)FRONT_HEAD, (int)MAX_URL);
        else if (k->in_head)
            fail(k, 431, "request_header_fields_too_large",
                 "the request head is over %d bytes; the limits are %d headers and %d bytes "
                 "of them",
                 (int)FRONT_HEAD, (int)MAX_HEADERS, (int)MAX_HEADER_BYTES);
        else
            fail(k, 400, "malformed_request",
                 "the request is malformed: a chunk size line or the trailer is over %d bytes",
                 (int)FRONT_HEAD);
        return;
    default:
        fail(k, 400, "malformed_request", "the request is malformed: %s",
             http_errno_description(e));
        return;
    }
}

/* ---------------------------------------------------------------- the request parser */

static int on_req_begin(http_parser *p)
{
    tc__check *k = p->data;
    k->fields = k->cookies = 0;
    k->field_state = 0;
    k->host = false;
    return 0;
}

static int on_req_field(http_parser *p, const char *at, size_t len)
{
    tc__check *k = p->data;
    if (k->field_state != 1) {
        k->field_state = 1;
        k->name_len = 0;
        if (++k->fields > FRONT_FIELDS) {
            snprintf(k->why, sizeof k->why,
                     "the request has over %d header fields; the limits are %d headers and %d "
                     "bytes of them",
                     (int)FRONT_FIELDS, (int)MAX_HEADERS, (int)MAX_HEADER_BYTES);
            return -1;
        }
    }
    for (size_t i = 0; i < len && k->name_len + i < sizeof k->name; i++)
        k->name[k->name_len + i] = at[i];
    k->name_len += len;
    return 0;
}

static bool name_is(const tc__check *k, const char *want)
{
    size_t n = strlen(want);
    return k->name_len == n && strncasecmp(k->name, want, n) == 0;
}

static int on_req_value(http_parser *p, const char *at, size_t len)
{
    tc__check *k = p->data;
    if (k->field_state != 2) {
        k->field_state = 2;
        k->host |= name_is(k, "host");
        k->cookie_value = name_is(k, "cookie");
        k->cookies += k->cookie_value;
    }
    if (k->cookie_value) {
        /* libmicrohttpd makes a record of each item between commas and semicolons. */
        for (size_t i = 0; i < len; i++)
            k->cookies += at[i] == ';' || at[i] == ',';
        if (k->cookies > FRONT_COOKIES) {
            snprintf(k->why, sizeof k->why, "the Cookie header has over %d items",
                     (int)FRONT_COOKIES);
            return -1;
        }
    }
    return 0;
}

static int on_req_head(http_parser *p)
{
    tc__check *k = p->data;
    k->stop = AT_HEAD;
    http_parser_pause(p, 1);
    return 0;
}

static int on_req_end(http_parser *p)
{
    tc__check *k = p->data;
    k->stop = AT_END;
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings req_settings = {
    .on_message_begin = on_req_begin,
    .on_header_field = on_req_field,
    .on_header_value = on_req_value,
    .on_headers_complete = on_req_head,
    .on_message_complete = on_req_end,
};

/* A complete head passes the checks libmicrohttpd would otherwise answer in HTML. */
static bool head_ok(tc__check *k)
{
    const http_parser *p = &k->req;
    if (p->http_major != 1) {
        /* RFC 9110 section 15.6.6: 505 is the answer to a major version the server does not
         * support; HTTP/2 comes through its own connection preface, not this request line. */
        fail(k, 505, "http_version_not_supported",
             "HTTP/%u.%u is not supported; send HTTP/1.1 or HTTP/1.0", p->http_major,
             p->http_minor);
        return false;
    }
    if (p->http_minor >= 1 && !k->host) {
        fail(k, 400, "malformed_request", "an HTTP/1.1 request needs a Host header");
        return false;
    }
    return true;
}

/* ---------------------------------------------------------------- the check */

void tc__check_init(tc__check *k)
{
    /* Heads over FRONT_HEAD bytes stop the parser (HPE_HEADER_OVERFLOW). The setting is the
     * library's, for every parser in the process; the server's are the only ones. */
    http_parser_set_max_header_size(FRONT_HEAD);
    memset(k, 0, sizeof *k);
    k->in_head = true;
    http_parser_init(&k->req, HTTP_REQUEST);
    k->req.data = k;
    http_parser_init(&k->resp, HTTP_RESPONSE);
    k->resp.data = k;
}

void tc__check_deinit(tc__check *k)
{
    free(k->err);
    k->err = NULL;
}

void tc__check_requests(tc__check *k, const char *buf, size_t len)
{
    while (!k->closed && k->parsed < len) {
        if (k->in_head && k->heads - k->answered >= PIPELINE)
            return; /* the daemon's answers catch up first */
        k->stop = AT_NONE;
        size_t n = http_parser_execute(&k->req, &req_settings, buf + k->parsed, len - k->parsed);
        k->parsed += n;
        enum http_errno e = HTTP_PARSER_ERRNO(&k->req);
        if (e == HPE_PAUSED) {
            http_parser_pause(&k->req, 0);
            if (k->stop == AT_HEAD) {
                if (!head_ok(k))
                    return;
                uint64_t bit = 1ull << (k->heads % PIPELINE);
                k->head_bits =
                    k->req.method == HTTP_HEAD ? k->head_bits | bit : k->head_bits & ~bit;
                k->heads++;
                k->in_head = false;
                /* The parser paused on the head's last byte, which it takes again at once
                 * (the loop goes on: that byte is in buf). */
                k->ready = k->parsed + 1;
            } else if (k->stop == AT_END) {
                k->done++;
                k->in_head = true;
                k->ready = k->parsed;
                /* The daemon answers a request that closes the connection and reads no
                 * more (Debian's http-parser, built lenient, would go on parsing). */
                if (!http_should_keep_alive(&k->req)) {
                    stop_input(k);
                    return;
                }
            }
            continue;
        }
        if (e != HPE_OK) {
            refuse(k, e);
            return;
        }
        if (n == 0)
            return;
    }
    if (!k->in_head && !k->closed && k->parsed > k->ready)
        k->ready = k->parsed;
}

void tc__check_sent(tc__check *k, size_t n)
{
    k->ready -= n;
    k->parsed -= k->parsed < n ? k->parsed : n;
}

void tc__check_close(tc__check *k)
{
    stop_input(k);
}

/* ---------------------------------------------------------------- the response parser */

static int on_resp_begin(http_parser *p)
{
    tc__check *k = p->data;
    k->resp_busy = true;
    return 0;
}

static int on_resp_head(http_parser *p)
{
    tc__check *k = p->data;
    if (p->status_code < 200)
        return 0; /* 100 Continue answers no request */
    if (k->answered >= k->heads)
        return -1; /* an answer to no request: the parser stops, and counting with it */
    /* An answer to HEAD has no body whatever its Content-Length says: 1 tells the parser. */
    return (int)((k->head_bits >> (k->answered % PIPELINE)) & 1);
}

static int on_resp_end(http_parser *p)
{
    tc__check *k = p->data;
    k->resp_busy = false;
    if (p->status_code >= 200) {
        k->answered++;
        k->resp_close = !http_should_keep_alive(p);
    }
    return 0;
}

static const http_parser_settings resp_settings = {
    .on_message_begin = on_resp_begin,
    .on_headers_complete = on_resp_head,
    .on_message_complete = on_resp_end,
};

void tc__check_responses(tc__check *k, const char *p, size_t n)
{
    if (k->resp_bad)
        return;
    http_parser_execute(&k->resp, &resp_settings, p, n);
    k->resp_bad = HTTP_PARSER_ERRNO(&k->resp) != HPE_OK;
}

bool tc__check_finish(tc__check *k)
{
    k->ready = k->parsed = 0;
    stop_input(k);
    if (!k->resp_bad) {
        http_parser_execute(&k->resp, &resp_settings, NULL, 0); /* a body that ends here */
        k->resp_bad = HTTP_PARSER_ERRNO(&k->resp) != HPE_OK;
    }
    return k->err && !k->resp_bad && !k->resp_busy && !k->resp_close && k->answered == k->done;
}

/* Responses: JSON bodies, OpenAI-style errors, and the count of answers by route and status. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"

/* A JSON string of bytes that may not be UTF-8: invalid sequences become U+FFFD. */
json_t *tc__json_text(const char *p, size_t n)
{
    json_t *v = json_stringn(p, n);
    if (v)
        return v;
    char *o = malloc(n * 3 + 1);
    if (!o)
        return json_string("");
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)p[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        bool ok = len > 0 && i + len <= n;
        for (size_t t = 1; ok && t < len; t++)
            ok = ((unsigned char)p[i + t] & 0xC0) == 0x80;
        if (ok && len > 1 && !json_stringn(p + i, len))
            ok = false; /* overlong or surrogate: jansson's own check */
        if (ok) {
            memcpy(o + k, p + i, len);
            k += len;
            i += len;
        } else {
            memcpy(o + k, "\xEF\xBF\xBD", 3);
            k += 3;
            i++;
        }
    }
    v = json_stringn(o, k);
    free(o);
    return v ? v : json_string("");
}

enum MHD_Result tc__send_body(tc_server *s, struct MHD_Connection *c, int status, const char *type,
                              const char *body, size_t len, const char *allow)
{
    struct MHD_Response *r =
        s->mhd.create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    s->mhd.add_response_header(r, "Content-Type", type);
    if (allow)
        s->mhd.add_response_header(r, "Allow", allow);
    if (status == 401)
        s->mhd.add_response_header(r, "WWW-Authenticate", "Bearer");
    pthread_mutex_lock(&s->mu);
    bool ready = s->ready, stopping = s->stopping;
    pthread_mutex_unlock(&s->mu);
    /* A 503 is temporary: a full queue drains within a second or so; loading and a restart
     * take longer. */
    if (status == 503)
        s->mhd.add_response_header(r, "Retry-After", ready && !stopping ? "1" : "5");
    /* While the server stops, clients are told not to reuse the connection. */
    if (stopping)
        s->mhd.add_response_header(r, "Connection", "close");
    enum MHD_Result ret = s->mhd.queue_response(c, (unsigned)status, r);
    s->mhd.destroy_response(r);
    return ret;
}

void tc__count_status(tc_server *s, const char *route, int code)
{
    pthread_mutex_lock(&s->mu);
    metrics *m = &s->met;
    int i = 0;
    while (i < m->n_rows && (m->by_status[i].code != code || strcmp(m->by_status[i].route, route)))
        i++;
    if (i == m->n_rows && m->n_rows < MAX_STATUS_ROWS) {
        snprintf(m->by_status[i].route, sizeof m->by_status[i].route, "%s", route);
        m->by_status[i].code = code;
        m->n_rows++;
    }
    if (i < m->n_rows)
        m->by_status[i].n++;
    pthread_mutex_unlock(&s->mu);
}

enum MHD_Result tc__send_json(tc_server *s, struct MHD_Connection *c, const char *route, int status,
                              json_t *v)
{
    char *text = v ? json_dumps(v, JSON_COMPACT) : NULL;
    json_decref(v);
    tc__count_status(s, route, text ? status : 500);
    if (!text) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                                  "\"server_error\",\"param\":null,\"code\":null}}";
        return tc__send_body(s, c, 500, "application/json", oom, sizeof oom - 1, NULL);
    }
    enum MHD_Result r = tc__send_body(s, c, status, "application/json", text, strlen(text), NULL);
    free(text);
    return r;
}

json_t *tc__error_json(const tc_oai_error *e)
{
    return json_pack("{s:{s:s,s:s,s:o,s:o}}", "error", "message", e->message, "type", e->type,
                     "param", e->param[0] ? json_string(e->param) : json_null(), "code",
                     e->code[0] ? json_string(e->code) : json_null());
}

enum MHD_Result tc__send_error(tc_server *s, struct MHD_Connection *c, const char *route,
                               const tc_oai_error *e, const char *allow)
{
    json_t *v = tc__error_json(e);
    char *text = v ? json_dumps(v, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(v);
    tc__count_status(s, route, e->status);
    if (!text)
        return MHD_NO;
    enum MHD_Result r =
        tc__send_body(s, c, e->status, "application/json", text, strlen(text), allow);
    free(text);
    return r;
}

enum MHD_Result tc__send_fail(tc_server *s, struct MHD_Connection *c, const char *route, int status,
                              const char *type, const char *param, const char *code,
                              const char *fmt, ...)
{
    tc_oai_error e;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tc_oai_fail(&e, status, type, param, code, "%s", msg);
    return tc__send_error(s, c, route, &e, NULL);
}

/* The HTTP server: routes, requests as engine jobs, server-sent events, metrics. */
#define _GNU_SOURCE
#include "server/server.h"

#include <jansson.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/host.h"
#include "server/mhd.h"
#include "server/openai.h"
#include "server/schema.h"
#include "server/tools.h"
#include "server/watch.h"

/* ---------------------------------------------------------------- metrics */

static const double ttft_buckets[] = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                       1,     2.5,  5,     10,   30,  60 };
static const double itl_buckets[] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                      0.1,   0.25,   0.5,   1,    2.5 };
enum { N_TTFT = sizeof ttft_buckets / sizeof ttft_buckets[0] };
enum { N_ITL = sizeof itl_buckets / sizeof itl_buckets[0] };

typedef struct histogram {
    uint64_t counts[16]; /* per bucket (not cumulative); the last is +Inf */
    uint64_t n;
    double sum;
} histogram;

static void observe(histogram *h, const double *bounds, int nb, double v)
{
    int i = 0;
    while (i < nb && v > bounds[i])
        i++;
    h->counts[i]++;
    h->n++;
    h->sum += v;
}

enum { MAX_STATUS_ROWS = 64 };

typedef struct metrics {
    struct {
        char route[32];
        int code;
        uint64_t n;
    } by_status[MAX_STATUS_ROWS];
    int n_rows;
    uint64_t prompt_tokens, cached_tokens, generation_tokens, cache_hit_requests;
    uint64_t disconnects;
    histogram ttft, itl;
} metrics;

/* ---------------------------------------------------------------- jobs */

/* One generated token (or the end) of one choice, as the engine reported it. */
typedef struct ev_rec {
    int index;
    int32_t token;
    char *text;
    size_t len;
    tc_finish_reason finish;
    int64_t completion_tokens;
    float lp;
    int n_top;
    int32_t top[TC_ENGINE_MAX_TOP_LOGPROBS];
    float top_lp[TC_ENGINE_MAX_TOP_LOGPROBS];
    char *error;
} ev_rec;

typedef struct job job;
struct job {
    tc_server *srv;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ev_rec *q;
    size_t q_head, q_len, q_cap;
    int n;          /* choices */
    int n_finished; /* final events received */
    bool conn_done; /* the connection no longer reads the job */
    bool submitted;
    uint64_t id;
    tc_oai_request req;
    char rid[48];
    long long created;
    int64_t prompt_tokens, cached_tokens;
    int fd;
    double t_arrival;
    double *t_last; /* [n] the time of each choice's last token, 0 before the first */
    bool first_seen;
    /* Streaming state. */
    char *out;
    size_t out_len, out_pos, out_cap;
    bool *role_sent;            /* [n] */
    int64_t *completion_tokens; /* [n] */
    bool done;                  /* the stream's end is written */
    /* Non-streamed results: text and log-probability entries per choice. */
    char **text;
    size_t *text_len;
    json_t **lp;              /* [n] arrays (chat: content entries; completions: parallel) */
    tc_finish_reason *finish; /* [n] */
    /* Tool calling (chat with tools and tool_choice other than none): the template's call
     * format and each choice's parser of its text. NULL: the text is all content. */
    tc__tool_format tool_format;
    tc__tool_parser **tools; /* [n] */
    char error[256];
    job *prev, *next; /* the server's list of jobs that have an engine request */
};

struct tc_server {
    tc_mhd mhd;
    struct MHD_Daemon *d;
    tc__watch *watch; /* request deadlines */
    tc_server_options o;
    char host[64];
    int port;
    size_t max_body;
    pthread_mutex_t mu; /* model, jobs, metrics, state */
    pthread_cond_t cv;
    bool ready, stopping;
    tc_server_model m;
    job *jobs;
    int n_jobs; /* jobs with an engine request not finished */
    int n_busy; /* completion requests whose connection has not let go of its job */
    metrics met;
    uint64_t next_rid;
};

/* Wait on cv for at most ms milliseconds. */
static void timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += ms * 1000 * 1000;
    ts.tv_sec += ts.tv_nsec / 1000000000;
    ts.tv_nsec %= 1000000000;
    pthread_cond_timedwait(cv, mu, &ts);
}

static void free_job(job *j)
{
    for (size_t i = 0; i < j->q_len; i++) {
        free(j->q[(j->q_head + i) % j->q_cap].text);
        free(j->q[(j->q_head + i) % j->q_cap].error);
    }
    free(j->q);
    for (int i = 0; i < j->n; i++) {
        if (j->text)
            free(j->text[i]);
        if (j->lp)
            json_decref(j->lp[i]);
    }
    if (j->tools)
        for (int i = 0; i < j->n; i++)
            tc__tool_parser_destroy(j->tools[i]);
    free(j->tools);
    free(j->text);
    free(j->text_len);
    free(j->lp);
    free(j->finish);
    free(j->t_last);
    free(j->role_sent);
    free(j->completion_tokens);
    free(j->out);
    tc_oai_request_free(&j->req);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

static job *new_job(tc_server *s, int n)
{
    job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->srv = s;
    j->n = n;
    j->fd = -1;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->t_last = calloc((size_t)n, sizeof *j->t_last);
    j->role_sent = calloc((size_t)n, sizeof *j->role_sent);
    j->completion_tokens = calloc((size_t)n, sizeof *j->completion_tokens);
    j->text = calloc((size_t)n, sizeof *j->text);
    j->text_len = calloc((size_t)n, sizeof *j->text_len);
    j->lp = calloc((size_t)n, sizeof *j->lp);
    j->finish = calloc((size_t)n, sizeof *j->finish);
    if (!j->t_last || !j->role_sent || !j->completion_tokens || !j->text || !j->text_len ||
        !j->lp || !j->finish) {
        free_job(j);
        return NULL;
    }
    j->created = (long long)time(NULL);
    j->t_arrival = tc_host_seconds();
    return j;
}

static void unlink_job(tc_server *s, job *j)
{
    pthread_mutex_lock(&s->mu);
    if (j->prev)
        j->prev->next = j->next;
    else if (s->jobs == j)
        s->jobs = j->next;
    if (j->next)
        j->next->prev = j->prev;
    j->prev = j->next = NULL;
    s->n_jobs--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* The engine's callback (engine thread): queue the event for the connection. */
static void on_event(void *user, const tc_engine_event *ev)
{
    job *j = user;
    tc_server *s = j->srv;
    double t = tc_host_seconds();
    pthread_mutex_lock(&s->mu);
    if (ev->token >= 0) {
        s->met.generation_tokens++;
        if (!j->first_seen)
            observe(&s->met.ttft, ttft_buckets, N_TTFT, t - j->t_arrival);
        else if (ev->index < j->n && j->t_last[ev->index] > 0)
            observe(&s->met.itl, itl_buckets, N_ITL, t - j->t_last[ev->index]);
    }
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&j->mu);
    if (ev->token >= 0) {
        j->first_seen = true;
        if (ev->index < j->n)
            j->t_last[ev->index] = t;
    }
    j->prompt_tokens = ev->prompt_tokens;
    j->cached_tokens = ev->cached_tokens;
    bool ok = true;
    if (j->q_len == j->q_cap) {
        size_t cap = j->q_cap ? j->q_cap * 2 : 16;
        ev_rec *q = malloc(cap * sizeof *q);
        if (q) {
            for (size_t i = 0; i < j->q_len; i++)
                q[i] = j->q[(j->q_head + i) % j->q_cap];
            free(j->q);
            j->q = q;
            j->q_head = 0;
            j->q_cap = cap;
        } else {
            ok = false;
        }
    }
    if (ok) {
        ev_rec r = { .index = ev->index,
                     .token = ev->token,
                     .len = ev->text_len,
                     .finish = ev->finish,
                     .completion_tokens = ev->completion_tokens,
                     .lp = ev->logprob,
                     .n_top = ev->n_top };
        if (ev->text_len) {
            r.text = malloc(ev->text_len);
            if (r.text)
                memcpy(r.text, ev->text, ev->text_len);
            else
                r.len = 0;
        }
        for (int k = 0; k < ev->n_top && k < TC_ENGINE_MAX_TOP_LOGPROBS; k++) {
            r.top[k] = ev->top_tokens[k];
            r.top_lp[k] = ev->top_logprobs[k];
        }
        if (ev->error)
            r.error = strdup(ev->error);
        j->q[(j->q_head + j->q_len++) % j->q_cap] = r;
    }
    if (ev->finish != TC_FINISH_NONE)
        j->n_finished++;
    bool done = ev->finish != TC_FINISH_NONE && j->n_finished == j->n;
    bool release = done && j->conn_done;
    if (done)
        unlink_job(s, j); /* under j->mu, so that the connection cannot free j meanwhile */
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    if (release)
        free_job(j);
}

/* The connection lets go of a job (freed here when the engine is done with it too). */
static void release_job(job *j)
{
    tc_server *s = j->srv;
    pthread_mutex_lock(&s->mu);
    s->n_busy--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&j->mu);
    j->conn_done = true;
    bool free_now = !j->submitted || j->n_finished >= j->n;
    if (!free_now && j->srv->m.engine)
        tc_engine_cancel(j->srv->m.engine, j->id);
    pthread_mutex_unlock(&j->mu);
    if (free_now)
        free_job(j);
}

/* Whether the client has gone (closed or reset its end). */
static bool client_gone(int fd)
{
    if (fd < 0)
        return false;
    struct pollfd p = { fd, POLLRDHUP, 0 };
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* Wait (j->mu held) until an event is queued or every choice has ended; false when the client
 * disconnected meanwhile. */
static bool wait_events(job *j)
{
    while (j->q_len == 0 && j->n_finished < j->n) {
        timed_wait(&j->cv, &j->mu, 100);
        /* Checked on every wake: tokens may come faster than the timeout. */
        if (client_gone(j->fd))
            return false;
    }
    return true;
}

static bool pop_event(job *j, ev_rec *r)
{
    if (j->q_len == 0)
        return false;
    *r = j->q[j->q_head];
    j->q_head = (j->q_head + 1) % j->q_cap;
    j->q_len--;
    return true;
}

/* ---------------------------------------------------------------- JSON helpers */

/* A JSON string of bytes that may not be UTF-8: invalid sequences become U+FFFD. */
static json_t *json_text(const char *p, size_t n)
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

static json_t *json_bytes(const char *p, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer((unsigned char)p[i]));
    return a;
}

static const char *piece(const tc_server *s, int32_t id, size_t *len)
{
    const char *p = tc_tokenizer_piece(s->m.tok, id, len);
    if (!p) {
        *len = 0;
        return "";
    }
    return p;
}

/* Whether an event's token gets a log-probability entry: not the stop token that ends a
 * choice (it is not part of the text), as OpenAI reports. */
static bool has_logprob(const job *j, const ev_rec *r)
{
    if (!j->req.logprobs || r->token < 0)
        return false;
    return !(r->finish == TC_FINISH_STOP && r->len == 0 &&
             tc_tokenizer_is_control(j->srv->m.tok, r->token));
}

/* One token's entry in a chat response's logprobs.content. */
static json_t *chat_lp_entry(const tc_server *s, const ev_rec *r)
{
    size_t len;
    const char *p = piece(s, r->token, &len);
    json_t *top = json_array();
    for (int k = 0; k < r->n_top; k++) {
        size_t l2;
        const char *p2 = piece(s, r->top[k], &l2);
        json_array_append_new(top, json_pack("{s:o,s:f,s:o}", "token", json_text(p2, l2), "logprob",
                                             (double)r->top_lp[k], "bytes", json_bytes(p2, l2)));
    }
    return json_pack("{s:o,s:f,s:o,s:o}", "token", json_text(p, len), "logprob", (double)r->lp,
                     "bytes", json_bytes(p, len), "top_logprobs", top);
}

/* A completion response's logprobs object from its entries ({token, logprob, top}). */
static json_t *completion_lp(const tc_server *s, json_t *entries)
{
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(),
           *offsets = json_array();
    size_t i, offset = 0;
    json_t *e;
    json_array_foreach(entries, i, e)
    {
        json_t *tok = json_object_get(e, "token");
        json_array_append(tokens, tok);
        json_array_append(lps, json_object_get(e, "logprob"));
        json_t *top = json_object();
        size_t k;
        json_t *t;
        json_array_foreach(json_object_get(e, "top_logprobs"), k, t) json_object_set(
            top, json_string_value(json_object_get(t, "token")), json_object_get(t, "logprob"));
        json_array_append_new(tops, top);
        json_array_append_new(offsets, json_integer((json_int_t)offset));
        offset += json_string_length(tok);
    }
    (void)s;
    return json_pack("{s:o,s:o,s:o,s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs",
                     tops, "text_offset", offsets);
}

static json_t *usage_of(const job *j)
{
    int64_t completion = 0;
    for (int i = 0; i < j->n; i++)
        completion += j->completion_tokens[i];
    return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)j->prompt_tokens,
                     "completion_tokens", (json_int_t)completion, "total_tokens",
                     (json_int_t)(j->prompt_tokens + completion), "prompt_tokens_details",
                     "cached_tokens", (json_int_t)j->cached_tokens);
}

/* A choice's finish_reason: "tool_calls" when it stopped after making calls. */
static const char *finish_name(const job *j, int i, tc_finish_reason f)
{
    if (f == TC_FINISH_LENGTH)
        return "length";
    return j->tools && tc__tool_parser_calls(j->tools[i]) > 0 ? "tool_calls" : "stop";
}

/* ---------------------------------------------------------------- responses */

static enum MHD_Result send_body(tc_server *s, struct MHD_Connection *c, int status,
                                 const char *type, const char *body, size_t len, const char *allow)
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

static void count_status(tc_server *s, const char *route, int code)
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

static enum MHD_Result send_json(tc_server *s, struct MHD_Connection *c, const char *route,
                                 int status, json_t *v)
{
    char *text = v ? json_dumps(v, JSON_COMPACT) : NULL;
    json_decref(v);
    count_status(s, route, text ? status : 500);
    if (!text) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                                  "\"server_error\",\"param\":null,\"code\":null}}";
        return send_body(s, c, 500, "application/json", oom, sizeof oom - 1, NULL);
    }
    enum MHD_Result r = send_body(s, c, status, "application/json", text, strlen(text), NULL);
    free(text);
    return r;
}

static json_t *error_json(const tc_oai_error *e)
{
    return json_pack("{s:{s:s,s:s,s:o,s:o}}", "error", "message", e->message, "type", e->type,
                     "param", e->param[0] ? json_string(e->param) : json_null(), "code",
                     e->code[0] ? json_string(e->code) : json_null());
}

static enum MHD_Result send_error(tc_server *s, struct MHD_Connection *c, const char *route,
                                  const tc_oai_error *e, const char *allow)
{
    json_t *v = error_json(e);
    char *text = v ? json_dumps(v, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(v);
    count_status(s, route, e->status);
    if (!text)
        return MHD_NO;
    enum MHD_Result r = send_body(s, c, e->status, "application/json", text, strlen(text), allow);
    free(text);
    return r;
}

static enum MHD_Result fail(tc_server *s, struct MHD_Connection *c, const char *route, int status,
                            const char *type, const char *param, const char *code, const char *fmt,
                            ...) __attribute__((format(printf, 8, 9)));
static enum MHD_Result fail(tc_server *s, struct MHD_Connection *c, const char *route, int status,
                            const char *type, const char *param, const char *code, const char *fmt,
                            ...)
{
    tc_oai_error e;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tc_oai_fail(&e, status, type, param, code, "%s", msg);
    return send_error(s, c, route, &e, NULL);
}

/* ---------------------------------------------------------------- streaming */

static void out_append(job *j, const char *p, size_t n)
{
    if (j->out_len + n > j->out_cap) {
        size_t cap = (j->out_len + n) * 2 + 256;
        char *o = realloc(j->out, cap);
        if (!o)
            return;
        j->out = o;
        j->out_cap = cap;
    }
    memcpy(j->out + j->out_len, p, n);
    j->out_len += n;
}

static void out_event(job *j, json_t *v)
{
    char *text = v ? json_dumps(v, JSON_COMPACT) : NULL;
    json_decref(v);
    if (!text)
        return;
    out_append(j, "data: ", 6);
    out_append(j, text, strlen(text));
    out_append(j, "\n\n", 2);
    free(text);
}

static json_t *chunk_base(const job *j)
{
    const tc_server *s = j->srv;
    bool chat = j->req.kind == TC_OAI_CHAT;
    json_t *c = json_pack("{s:s,s:s,s:I,s:s,s:s,s:[]}", "id", j->rid, "object",
                          chat ? "chat.completion.chunk" : "text_completion", "created",
                          (json_int_t)j->created, "model", s->o.model_id, "system_fingerprint",
                          "thincuda-0.1.0", "choices");
    if (c && j->req.include_usage)
        json_object_set_new(c, "usage", json_null());
    return c;
}

/* Turn one engine event into SSE chunks in j->out. */
static void stream_event(job *j, const ev_rec *r)
{
    const tc_server *s = j->srv;
    bool chat = j->req.kind == TC_OAI_CHAT;
    int i = r->index;
    if (r->finish == TC_FINISH_CANCELLED || r->finish == TC_FINISH_ERROR) {
        tc_oai_error e;
        if (r->finish == TC_FINISH_ERROR)
            tc_oai_fail(&e, 500, "server_error", NULL, NULL, "%s",
                        r->error ? r->error : "generation failed");
        else
            tc_oai_fail(&e, 503, "server_error", NULL, "shutting_down",
                        "the server is shutting down");
        out_event(j, error_json(&e));
        j->done = true; /* no [DONE]: the stream ended abnormally */
        return;
    }
    if (r->token >= 0)
        j->completion_tokens[i] = r->completion_tokens;
    bool has_text = r->len > 0, has_lp = has_logprob(j, r);
    json_t *text = NULL, *calls = NULL;
    if (j->tools) {
        /* The text goes through the choice's parser: what is content and what is a call. */
        tc__tool_parser_feed(j->tools[i], r->text ? r->text : "", r->len);
        if (r->finish != TC_FINISH_NONE)
            tc__tool_parser_end(j->tools[i]);
        tc__tool_parser_drain(j->tools[i], &text, &calls);
        has_text = text != NULL;
    } else {
        text = json_text(r->text ? r->text : "", r->len);
    }
    if (!has_text && !calls && !has_lp && r->finish == TC_FINISH_NONE &&
        (!chat || j->role_sent[i])) {
        json_decref(text);
        return;
    }
    if (!text)
        text = json_string("");
    json_t *c = chunk_base(j), *choice;
    if (chat) {
        json_t *delta = json_object();
        bool first = !j->role_sent[i];
        if (first) {
            json_object_set_new(delta, "role", json_string("assistant"));
            j->role_sent[i] = true;
        }
        /* A call's first chunk says content null, as OpenAI's does. */
        if (has_text || (!calls && r->finish == TC_FINISH_NONE)) {
            json_object_set_new(delta, "content", text);
        } else {
            json_decref(text);
            if (calls && first)
                json_object_set_new(delta, "content", json_null());
        }
        if (calls)
            json_object_set_new(delta, "tool_calls", calls);
        json_t *lp = json_null();
        if (has_lp)
            lp = json_pack("{s:[o]}", "content", chat_lp_entry(s, r));
        choice = json_pack("{s:i,s:o,s:o,s:o}", "index", i, "delta", delta, "logprobs", lp,
                           "finish_reason",
                           r->finish ? json_string(finish_name(j, i, r->finish)) : json_null());
    } else {
        json_t *lp = json_null();
        if (has_lp) {
            json_t *one = json_pack("[o]", chat_lp_entry(s, r));
            lp = completion_lp(s, one);
            json_decref(one);
        }
        choice = json_pack("{s:i,s:o,s:o,s:o}", "index", i, "text", text, "logprobs", lp,
                           "finish_reason",
                           r->finish ? json_string(finish_name(j, i, r->finish)) : json_null());
    }
    json_array_append_new(json_object_get(c, "choices"), choice);
    out_event(j, c);
}

static void stream_end(job *j)
{
    if (j->req.include_usage) {
        json_t *c = chunk_base(j);
        json_object_set_new(c, "usage", usage_of(j));
        out_event(j, c);
    }
    out_append(j, "data: [DONE]\n\n", 14);
    j->done = true;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    job *j = cls;
    pthread_mutex_lock(&j->mu);
    while (j->out_pos == j->out_len) {
        j->out_pos = j->out_len = 0;
        if (j->done) {
            pthread_mutex_unlock(&j->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (!wait_events(j)) {
            pthread_mutex_unlock(&j->mu);
            pthread_mutex_lock(&j->srv->mu);
            j->srv->met.disconnects++;
            pthread_mutex_unlock(&j->srv->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        ev_rec r;
        while (!j->done && pop_event(j, &r)) {
            stream_event(j, &r);
            free(r.text);
            free(r.error);
        }
        if (!j->done && j->n_finished >= j->n && j->q_len == 0)
            stream_end(j);
    }
    size_t n = j->out_len - j->out_pos < max ? j->out_len - j->out_pos : max;
    memcpy(buf, j->out + j->out_pos, n);
    j->out_pos += n;
    pthread_mutex_unlock(&j->mu);
    return (ssize_t)n;
}

static void stream_free(void *cls)
{
    release_job(cls);
}

/* ---------------------------------------------------------------- completions */

/* Wait for every choice to end, collecting text and log-probabilities; false when the client
 * disconnected. */
static bool collect(job *j)
{
    const tc_server *s = j->srv;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        ev_rec r;
        while (pop_event(j, &r)) {
            int i = r.index;
            if (r.token >= 0)
                j->completion_tokens[i] = r.completion_tokens;
            if (r.len) {
                char *t = realloc(j->text[i], j->text_len[i] + r.len + 1);
                if (t) {
                    memcpy(t + j->text_len[i], r.text, r.len);
                    j->text_len[i] += r.len;
                    t[j->text_len[i]] = 0;
                    j->text[i] = t;
                }
            }
            if (has_logprob(j, &r)) {
                if (!j->lp[i])
                    j->lp[i] = json_array();
                json_array_append_new(j->lp[i], chat_lp_entry(s, &r));
            }
            if (j->tools) {
                tc__tool_parser_feed(j->tools[i], r.text ? r.text : "", r.len);
                if (r.finish != TC_FINISH_NONE)
                    tc__tool_parser_end(j->tools[i]);
            }
            if (r.finish != TC_FINISH_NONE)
                j->finish[i] = r.finish;
            if (r.finish == TC_FINISH_ERROR)
                snprintf(j->error, sizeof j->error, "%s", r.error ? r.error : "generation failed");
            free(r.text);
            free(r.error);
        }
        if (j->n_finished >= j->n)
            break;
        if (!wait_events(j)) {
            pthread_mutex_unlock(&j->mu);
            return false;
        }
    }
    pthread_mutex_unlock(&j->mu);
    return true;
}

static json_t *completion_json(job *j)
{
    bool chat = j->req.kind == TC_OAI_CHAT;
    json_t *choices = json_array();
    for (int i = 0; i < j->n; i++) {
        json_t *text = json_text(j->text[i] ? j->text[i] : "", j->text_len[i]);
        json_t *lp = json_null();
        if (j->req.logprobs && !j->lp[i])
            j->lp[i] = json_array();
        if (j->req.logprobs && chat)
            lp = json_pack("{s:O,s:n}", "content", j->lp[i], "refusal");
        else if (j->req.logprobs)
            lp = completion_lp(j->srv, j->lp[i]);
        json_t *c;
        if (chat) {
            json_t *calls = NULL;
            if (j->tools) {
                json_decref(text);
                tc__tool_parser_message(j->tools[i], &text, &calls);
            }
            json_t *msg = json_pack("{s:s,s:o,s:n}", "role", "assistant", "content",
                                    text ? text : json_null(), "refusal");
            if (calls)
                json_object_set_new(msg, "tool_calls", calls);
            c = json_pack("{s:i,s:o,s:o,s:s}", "index", i, "message", msg, "logprobs", lp,
                          "finish_reason", finish_name(j, i, j->finish[i]));
        } else {
            c = json_pack("{s:i,s:o,s:o,s:s}", "index", i, "text", text, "logprobs", lp,
                          "finish_reason", finish_name(j, i, j->finish[i]));
        }
        json_array_append_new(choices, c);
    }
    return json_pack("{s:s,s:s,s:I,s:s,s:s,s:o,s:o}", "id", j->rid, "object",
                     chat ? "chat.completion" : "text_completion", "created",
                     (json_int_t)j->created, "model", j->srv->o.model_id, "system_fingerprint",
                     "thincuda-0.1.0", "choices", choices, "usage", usage_of(j));
}

/* tc_encode_options.cancelled: whether the connection's client has gone. */
static bool encode_cancelled(void *user)
{
    return client_gone(*(const int *)user);
}

/* Whether the request's prompt is within the bounds on the work it may cause before
 * generation: the number of messages and the bytes of text to tokenise. */
static bool prompt_bounded(const tc_server *s, const tc_oai_request *q, tc_oai_error *err)
{
    if (q->n_messages > s->o.max_messages)
        return tc_oai_fail(err, 400, "invalid_request_error", "messages", "array_above_max_length",
                           "'messages' has %zu messages; this server takes at most %zu "
                           "(--max-messages)",
                           q->n_messages, s->o.max_messages);
    size_t bytes = q->prompt ? strlen(q->prompt) : 0;
    for (size_t i = 0; i < q->n_messages; i++)
        bytes += strlen(q->messages[i].content);
    if (q->tools_text)
        bytes += strlen(q->tools_text);
    if (bytes > s->o.max_prompt_bytes)
        return tc_oai_fail(
            err, 400, "invalid_request_error", q->kind == TC_OAI_CHAT ? "messages" : "prompt",
            "string_above_max_length",
            "the %s hold %zu bytes of text; this server takes at most %zu "
            "(--max-prompt-bytes)",
            q->kind == TC_OAI_CHAT ? "messages" : "prompt", bytes, s->o.max_prompt_bytes);
    return true;
}

/* The client went away before its request was answered: count it and close. */
static enum MHD_Result client_left(tc_server *s)
{
    pthread_mutex_lock(&s->mu);
    s->met.disconnects++;
    pthread_mutex_unlock(&s->mu);
    return MHD_NO;
}

/* Tokens of the request's prompt: the chat rendered in the model's template, or the text.
 * With max_ids, a prompt of more tokens is context_length_exceeded as soon as tokenising gets
 * that far. The client at fd is watched while the text is tokenised: when it has gone,
 * err's status is 0 and the connection is to be closed. */
static bool prompt_tokens(tc_server *s, const tc_oai_request *q, bool add_bos, size_t max_ids,
                          int fd, int32_t **ids, size_t *n, tc_oai_error *err)
{
    const char *what = q->kind == TC_OAI_CHAT ? "messages" : "prompt";
    if (q->prompt_tokens) {
        *ids = tc_host_alloc(sizeof(int32_t) * q->n_prompt_tokens);
        if (!*ids)
            return tc_oai_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        memcpy(*ids, q->prompt_tokens, sizeof(int32_t) * q->n_prompt_tokens);
        *n = q->n_prompt_tokens;
        for (size_t i = 0; i < *n; i++)
            if ((*ids)[i] >= s->m.vocab)
                return tc_oai_fail(err, 400, "invalid_request_error", "prompt", NULL,
                                   "'prompt[%zu]' is token %d, outside the vocabulary of %d", i,
                                   (*ids)[i], s->m.vocab);
        return true;
    }
    if (!prompt_bounded(s, q, err))
        return false;
    char *text = NULL;
    size_t *plain = NULL, n_plain = 0;
    const char *p = q->prompt;
    if (q->kind == TC_OAI_CHAT) {
        if (!s->m.chat)
            return tc_oai_fail(err, 400, "invalid_request_error", "messages", NULL,
                               "the model has no chat template; restart the server with "
                               "--template chatml|llama3|llama2|zephyr, or use /v1/completions");
        /* What the messages say is text: a control token written in one ("<|im_end|>")
         * cannot end its turn and forge another, unless the server allows it. */
        /* With tool_choice none the tools are left out of the prompt, as vLLM does: the
         * model is not to call them. */
        const char *tools = q->tool_choice != TC_OAI_TOOLS_NONE ? q->tools_text : NULL;
        tc_status st = tc_chat_format_tools(s->m.chat, q->messages, q->calls, q->n_messages, tools,
                                            q->add_generation_prompt, &text, &plain, &n_plain);
        if (st == TC_ERR_UNSUPPORTED)
            return tc_oai_fail(err, 400, "invalid_request_error", tools ? "tools" : "messages",
                               NULL, "this model cannot take tools: %s", tc_last_error());
        if (st != TC_OK)
            return tc_oai_fail(err, 400, "invalid_request_error", "messages", NULL,
                               "the messages cannot be rendered in the chat template: %s",
                               tc_last_error());
        p = text;
    }
    tc_encode_options eo = { .special = true,
                             .add_bos = add_bos,
                             .plain = plain,
                             .n_plain = s->o.allow_special_in_messages ? 0 : n_plain,
                             .max_ids = max_ids,
                             .cancelled = encode_cancelled,
                             .user = &fd };
    tc_status st = tc_tokenizer_encode_with(s->m.tok, p, strlen(p), &eo, ids, n);
    tc_host_free(text);
    tc_host_free(plain);
    if (st == TC_ERR_CANCELLED) {
        err->status = 0;
        return false;
    }
    if (st == TC_ERR_LIMIT)
        return tc_oai_fail(err, 400, "invalid_request_error", what, "context_length_exceeded",
                           "this model's context holds %lld tokens; the %s have more",
                           (long long)s->m.context, what);
    if (st != TC_OK)
        return tc_oai_fail(err, 400, "invalid_request_error", what, NULL,
                           "the prompt cannot be tokenized: %s", tc_last_error());
    if (*n == 0)
        return tc_oai_fail(err, 400, "invalid_request_error", what, NULL, "the prompt is empty");
    return true;
}

/* Check, tokenize and submit; on success the job is on the server's list. */
static bool submit(tc_server *s, job *j, tc_oai_error *err)
{
    tc_oai_request *q = &j->req;
    if (q->model && strcmp(q->model, s->o.model_id))
        return tc_oai_fail(err, 404, "invalid_request_error", "model", "model_not_found",
                           "the model '%.200s' does not exist; this server has '%.200s'", q->model,
                           s->o.model_id);
    int32_t *ids = NULL;
    size_t n = 0;
    /* A prompt that fills the context is refused whatever its length, so tokenising stops
     * there. */
    if (!prompt_tokens(s, q, true, (size_t)s->m.context - 1, j->fd, &ids, &n, err)) {
        tc_host_free(ids);
        return false;
    }
    const char *what = q->kind == TC_OAI_CHAT ? "messages" : "prompt";
    for (int i = 0; i < q->n_bias; i++)
        if (q->bias_ids[i] >= s->m.vocab) {
            tc_host_free(ids);
            return tc_oai_fail(err, 400, "invalid_request_error", "logit_bias", NULL,
                               "'logit_bias' has token %d, outside the vocabulary of %d",
                               q->bias_ids[i], s->m.vocab);
        }
    bool explicit_max = q->max_tokens > 0 &&
                        !(q->kind == TC_OAI_COMPLETION && !json_object_get(q->root, "max_tokens"));
    int64_t max = q->max_tokens;
    if ((int64_t)n >= s->m.context) {
        tc_host_free(ids);
        return tc_oai_fail(err, 400, "invalid_request_error", what, "context_length_exceeded",
                           "this model's context holds %lld tokens; the %s have %zu",
                           (long long)s->m.context, what, n);
    }
    if (explicit_max && (int64_t)n + max > s->m.context) {
        tc_host_free(ids);
        return tc_oai_fail(
            err, 400, "invalid_request_error", "max_tokens", "context_length_exceeded",
            "this model's context holds %lld tokens; you asked for %lld (%zu in "
            "the %s, %lld to generate)",
            (long long)s->m.context, (long long)((int64_t)n + max), n, what, (long long)max);
    }
    if (max > s->m.context - (int64_t)n)
        max = s->m.context - (int64_t)n;
    tc_request r = { .prompt = ids,
                     .n_prompt = (int64_t)n,
                     .max_tokens = max,
                     .n = q->n,
                     .sample = q->sample,
                     .stop = q->stop,
                     .n_stop = q->n_stop,
                     .ignore_eos = q->ignore_eos,
                     .logprobs = q->logprobs,
                     .top_logprobs = q->top_logprobs,
                     .bias_ids = q->bias_ids,
                     .bias = q->bias,
                     .n_bias = q->n_bias,
                     .callback = on_event,
                     .user = j };
    bool tool_calls = q->kind == TC_OAI_CHAT && q->tool_choice != TC_OAI_TOOLS_NONE;
    if (tool_calls && (q->json_object || q->json_schema)) {
        tc_host_free(ids);
        return tc_oai_fail(err, 400, "invalid_request_error", "response_format", NULL,
                           "'response_format' with tools is not supported; use tool_choice "
                           "\"none\" or leave response_format out");
    }
    if (tool_calls) {
        /* The template renders tools (checked as the prompt was made), so it has a format. */
        j->tools = calloc((size_t)j->n, sizeof *j->tools);
        bool ok = j->tools && tc__tool_format_of(s->m.chat, &j->tool_format);
        for (int i = 0; ok && i < j->n; i++)
            ok = (j->tools[i] = tc__tool_parser_create(&j->tool_format)) != NULL;
        if (!ok || !tc__tool_grammar(q, &j->tool_format, s->m.tok, &r.grammar, err)) {
            tc_host_free(ids);
            return ok ? false : tc_oai_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        }
    }
    if (q->json_object || q->json_schema) {
        char why[320];
        r.grammar = tc_schema_grammar(q->json_schema, s->m.tok, why, sizeof why);
        if (!r.grammar) {
            tc_host_free(ids);
            return tc_oai_fail(err, 400, "invalid_request_error",
                               q->json_schema ? "response_format.json_schema.schema"
                                              : "response_format",
                               NULL, "the response format cannot be enforced: %s", why);
        }
    }
    if (!q->seed_set) {
        uint64_t seed;
        if (getentropy(&seed, sizeof seed) != 0)
            seed = (uint64_t)(tc_host_seconds() * 1e9);
        r.sample.seed = seed;
    }
    /* On the list before the engine can call back. */
    pthread_mutex_lock(&s->mu);
    bool stopping = s->stopping;
    if (!stopping) {
        j->next = s->jobs;
        if (s->jobs)
            s->jobs->prev = j;
        s->jobs = j;
        s->n_jobs++;
    }
    pthread_mutex_unlock(&s->mu);
    if (stopping) {
        tc_host_free(ids);
        tc_grammar_unref(r.grammar);
        return tc_oai_fail(err, 503, "server_error", NULL, "shutting_down",
                           "the server is shutting down");
    }
    pthread_mutex_lock(&j->mu);
    tc_status st = tc_engine_submit(s->m.engine, &r, &j->id);
    j->submitted = st == TC_OK;
    pthread_mutex_unlock(&j->mu);
    tc_host_free(ids);
    tc_grammar_unref(r.grammar); /* the engine holds its own reference */
    if (st != TC_OK) {
        unlink_job(s, j);
        if (st == TC_ERR_LIMIT)
            return tc_oai_fail(err, 503, "server_error", NULL, "queue_full",
                               "the server is busy: its queue is full; retry later");
        if (st == TC_ERR_INVALID_ARGUMENT)
            return tc_oai_fail(err, 400, "invalid_request_error", NULL, NULL, "%s",
                               tc_last_error());
        return tc_oai_fail(err, 500, "server_error", NULL, NULL, "%s", tc_last_error());
    }
    pthread_mutex_lock(&s->mu);
    s->met.prompt_tokens += n;
    pthread_mutex_unlock(&s->mu);
    return true;
}

static enum MHD_Result handle_completion(tc_server *s, struct MHD_Connection *c, const char *route,
                                         tc_oai_kind kind, const char *body, size_t len)
{
    tc_oai_request q;
    tc_oai_error err;
    if (!tc_oai_parse(kind, body, len, &q, &err)) {
        tc_oai_request_free(&q);
        return send_error(s, c, route, &err, NULL);
    }
    job *j = new_job(s, q.n);
    if (!j) {
        tc_oai_request_free(&q);
        return fail(s, c, route, 500, "server_error", NULL, NULL, "out of memory");
    }
    j->req = q;
    uint64_t rid;
    pthread_mutex_lock(&s->mu);
    s->n_busy++;
    rid = ++s->next_rid;
    pthread_mutex_unlock(&s->mu);
    snprintf(j->rid, sizeof j->rid, "%s-%016llx", kind == TC_OAI_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)(rid * 0x9e3779b97f4a7c15ull));
    const union MHD_ConnectionInfo *ci =
        s->mhd.get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = ci ? ci->connect_fd : -1;
    if (!submit(s, j, &err)) {
        release_job(j);
        if (err.status == 0)
            return client_left(s);
        return send_error(s, c, route, &err, NULL);
    }
    if (j->req.stream) {
        struct MHD_Response *r = s->mhd.create_response_from_callback(MHD_SIZE_UNKNOWN, 4096,
                                                                      stream_read, j, stream_free);
        if (!r) {
            release_job(j);
            return MHD_NO;
        }
        s->mhd.add_response_header(r, "Content-Type", "text/event-stream");
        s->mhd.add_response_header(r, "Cache-Control", "no-cache");
        count_status(s, route, 200);
        enum MHD_Result ret = s->mhd.queue_response(c, 200, r);
        s->mhd.destroy_response(r);
        return ret;
    }
    if (!collect(j)) {
        pthread_mutex_lock(&s->mu);
        s->met.disconnects++;
        pthread_mutex_unlock(&s->mu);
        release_job(j);
        return MHD_NO; /* the client is gone: close */
    }
    enum MHD_Result ret;
    bool cancelled = false, failed = false;
    for (int i = 0; i < j->n; i++) {
        cancelled |= j->finish[i] == TC_FINISH_CANCELLED;
        failed |= j->finish[i] == TC_FINISH_ERROR;
    }
    if (failed)
        ret = fail(s, c, route, 500, "server_error", NULL, NULL, "%s", j->error);
    else if (cancelled)
        ret = fail(s, c, route, 503, "server_error", NULL, "shutting_down",
                   "the server is shutting down");
    else
        ret = send_json(s, c, route, 200, completion_json(j));
    release_job(j);
    return ret;
}

/* ---------------------------------------------------------------- other routes */

static enum MHD_Result handle_tokenize(tc_server *s, struct MHD_Connection *c, const char *route,
                                       const char *body, size_t len)
{
    json_error_t je;
    json_t *root = json_loadb(body, len, 0, &je);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return fail(s, c, route, 400, "invalid_request_error", NULL, NULL,
                    "the body must be a JSON object with 'prompt' or 'messages'%s%s",
                    root ? "" : ": ", root ? "" : je.text);
    }
    tc_oai_request q;
    tc_oai_error err;
    bool chat = json_object_get(root, "messages") != NULL;
    json_t *special = json_object_get(root, "add_special_tokens");
    bool bad_special = special && !json_is_boolean(special), add_bos = !json_is_false(special);
    json_decref(root);
    if (bad_special)
        return fail(s, c, route, 400, "invalid_request_error", "add_special_tokens", NULL,
                    "'add_special_tokens' must be a boolean");
    if (!tc_oai_parse(chat ? TC_OAI_CHAT : TC_OAI_COMPLETION, body, len, &q, &err)) {
        tc_oai_request_free(&q);
        return send_error(s, c, route, &err, NULL);
    }
    int32_t *ids = NULL;
    size_t n = 0;
    json_t *out = NULL;
    const union MHD_ConnectionInfo *ci =
        s->mhd.get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (prompt_tokens(s, &q, add_bos, 0, ci ? ci->connect_fd : -1, &ids, &n, &err)) {
        json_t *toks = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append_new(toks, json_integer(ids[i]));
        out = json_pack("{s:I,s:I,s:o}", "count", (json_int_t)n, "max_model_len",
                        (json_int_t)s->m.context, "tokens", toks);
    }
    tc_host_free(ids);
    tc_oai_request_free(&q);
    if (!out && err.status == 0)
        return client_left(s);
    return out ? send_json(s, c, route, 200, out) : send_error(s, c, route, &err, NULL);
}

static enum MHD_Result handle_detokenize(tc_server *s, struct MHD_Connection *c, const char *route,
                                         const char *body, size_t len)
{
    json_error_t je;
    json_t *root = json_loadb(body, len, 0, &je);
    json_t *toks = root ? json_object_get(root, "tokens") : NULL;
    if (!json_is_array(toks)) {
        json_decref(root);
        return fail(s, c, route, 400, "invalid_request_error", "tokens", NULL,
                    "the body must be a JSON object with 'tokens', an array of token ids");
    }
    size_t i;
    json_t *t;
    tc_detok d = { 0 };
    char buf[512];
    char *text = NULL;
    size_t text_len = 0;
    json_array_foreach(toks, i, t)
    {
        if (!json_is_integer(t) || json_integer_value(t) < 0 ||
            json_integer_value(t) >= s->m.vocab) {
            free(text);
            json_decref(root);
            return fail(s, c, route, 400, "invalid_request_error", "tokens", NULL,
                        "'tokens[%zu]' must be a token id in [0, %d)", i, s->m.vocab);
        }
        size_t w =
            tc_detok_push(s->m.tok, &d, (int32_t)json_integer_value(t), true, buf, sizeof buf);
        char *nt = realloc(text, text_len + w + sizeof buf);
        if (!nt)
            break;
        text = nt;
        memcpy(text + text_len, buf, w);
        text_len += w;
    }
    size_t w = tc_detok_flush(&d, buf, sizeof buf);
    char *nt = realloc(text, text_len + w + 1);
    if (nt) {
        text = nt;
        memcpy(text + text_len, buf, w);
        text_len += w;
    }
    json_decref(root);
    json_t *out = json_pack("{s:o}", "prompt", json_text(text ? text : "", text_len));
    free(text);
    return send_json(s, c, route, 200, out);
}

static json_t *model_json(const tc_server *s)
{
    return json_pack("{s:s,s:s,s:I,s:s,s:I}", "id", s->o.model_id, "object", "model", "created",
                     (json_int_t)0, "owned_by", "thincuda", "max_model_len",
                     (json_int_t)s->m.context);
}

static void append(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(*buf ? *buf + *len : NULL, *buf ? *cap - *len : 0, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if (*buf && *len + (size_t)n < *cap) {
            *len += (size_t)n;
            return;
        }
        size_t cap2 = (*cap + (size_t)n + 1) * 2;
        char *b = realloc(*buf, cap2);
        if (!b)
            return;
        *buf = b;
        *cap = cap2;
    }
}

static void histogram_text(char **b, size_t *len, size_t *cap, const char *name, const char *help,
                           const histogram *h, const double *bounds, int nb)
{
    append(b, len, cap, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < nb; i++) {
        cum += h->counts[i];
        append(b, len, cap, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i],
               (unsigned long long)cum);
    }
    append(b, len, cap, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
           (unsigned long long)h->n, name, h->sum, name, (unsigned long long)h->n);
}

static enum MHD_Result handle_metrics(tc_server *s, struct MHD_Connection *c)
{
    tc_engine_stats es = { 0 };
    if (s->m.engine)
        tc_engine_get_stats(s->m.engine, &es);
    pthread_mutex_lock(&s->mu);
    metrics m = s->met;
    int jobs = s->n_jobs;
    bool ready = s->ready;
    pthread_mutex_unlock(&s->mu);
    char *b = NULL;
    size_t len = 0, cap = 0;
    append(&b, &len, &cap,
           "# HELP thincuda_requests_total HTTP requests answered, by route and status.\n"
           "# TYPE thincuda_requests_total counter\n");
    for (int i = 0; i < m.n_rows; i++)
        append(&b, &len, &cap, "thincuda_requests_total{route=\"%s\",code=\"%d\"} %llu\n",
               m.by_status[i].route, m.by_status[i].code, (unsigned long long)m.by_status[i].n);
#define COUNTER(name, help, v)                                                                   \
    append(&b, &len, &cap, "# HELP " name " " help "\n# TYPE " name " counter\n" name " %llu\n", \
           (unsigned long long)(v))
#define GAUGE(name, help, fmt, v) \
    append(&b, &len, &cap, "# HELP " name " " help "\n# TYPE " name " gauge\n" name " " fmt "\n", v)
    COUNTER("thincuda_prompt_tokens_total", "Prompt tokens of accepted requests.", m.prompt_tokens);
    COUNTER("thincuda_generation_tokens_total", "Tokens generated.", m.generation_tokens);
    COUNTER("thincuda_prefix_cache_hit_tokens_total",
            "Prompt tokens found in the prefix cache instead of computed.",
            es.cached_prompt_tokens);
    COUNTER("thincuda_prefix_cache_queries_total", "KV blocks looked up in the prefix cache.",
            es.prefix_lookups);
    COUNTER("thincuda_prefix_cache_hits_total", "KV blocks found in the prefix cache.",
            es.prefix_hits);
    COUNTER("thincuda_preemptions_total", "Sequences preempted for want of KV blocks.",
            es.preemptions);
    COUNTER("thincuda_engine_steps_total", "Engine steps (forward passes).", es.steps);
    COUNTER("thincuda_client_disconnects_total", "Requests cancelled because the client went away.",
            m.disconnects);
    COUNTER("thincuda_request_deadline_closes_total",
            "Connections closed because a request had not arrived by its deadline.",
            s->watch ? tc__watch_expired(s->watch) : 0);
    GAUGE("thincuda_ready", "1 once the model is loaded.", "%d", ready ? 1 : 0);
    GAUGE("thincuda_requests_in_flight", "Requests with an engine sequence.", "%d", jobs);
    GAUGE("thincuda_queue_length", "Sequences waiting to start.", "%d", es.waiting);
    GAUGE("thincuda_running_sequences", "Sequences running.", "%d", es.running);
    GAUGE("thincuda_kv_cache_blocks_total", "KV-cache blocks.", "%d", es.blocks_total);
    GAUGE("thincuda_kv_cache_blocks_used", "KV-cache blocks held by sequences.", "%d",
          es.blocks_used);
    GAUGE("thincuda_kv_cache_usage_ratio", "Fraction of the KV cache held by sequences.", "%.6f",
          es.blocks_total ? (double)es.blocks_used / es.blocks_total : 0.0);
#undef COUNTER
#undef GAUGE
    histogram_text(&b, &len, &cap, "thincuda_time_to_first_token_seconds",
                   "From a request's arrival to its first token.", &m.ttft, ttft_buckets, N_TTFT);
    histogram_text(&b, &len, &cap, "thincuda_inter_token_latency_seconds",
                   "Between consecutive tokens of one choice.", &m.itl, itl_buckets, N_ITL);
    count_status(s, "/metrics", b ? 200 : 500);
    enum MHD_Result r =
        b ? send_body(s, c, 200, "text/plain; version=0.0.4", b, len, NULL) : MHD_NO;
    free(b);
    return r;
}

/* ---------------------------------------------------------------- dispatch */

enum route {
    R_NONE,
    R_HEALTH,
    R_METRICS,
    R_MODELS,
    R_MODEL,
    R_CHAT,
    R_COMPLETIONS,
    R_TOKENIZE,
    R_DETOKENIZE
};

static const struct {
    const char *path;
    enum route r;
    const char *method;
    bool body, v1;
} routes[] = {
    { "/health", R_HEALTH, "GET", false, false },
    { "/metrics", R_METRICS, "GET", false, false },
    { "/v1/models", R_MODELS, "GET", false, true },
    { "/v1/chat/completions", R_CHAT, "POST", true, true },
    { "/v1/completions", R_COMPLETIONS, "POST", true, true },
    { "/tokenize", R_TOKENIZE, "POST", true, false },
    { "/detokenize", R_DETOKENIZE, "POST", true, false },
};

typedef struct conn {
    int route; /* index into routes, or -1 */
    char *body;
    size_t len, cap;
    bool checked; /* the request line and headers have been looked at (first_call) */
    bool too_large, answered;
} conn;

/* Limits of a request's head (checked by first_call, which answers 414 and 431 in JSON). The
 * memory libmicrohttpd gives a connection is larger (HEAD_MEMORY), so that a head over these
 * limits still reaches us; only a head over that memory gets the library's own answer. */
enum {
    MAX_URL = 8 << 10,           /* bytes */
    MAX_HEADER_BYTES = 32 << 10, /* names and values together */
    MAX_HEADERS = 128,
    HEAD_MEMORY = 256 << 10, /* bytes per connection */
};

typedef struct header_count {
    size_t n, bytes;
} header_count;

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value)
{
    (void)kind;
    header_count *h = cls;
    h->n++;
    h->bytes += strlen(key) + (value ? strlen(value) : 0) + 4;
    return MHD_YES;
}

/* Whether the request says it has a body (a Content-Length other than 0, or chunks). */
static bool has_body(tc_server *s, struct MHD_Connection *c)
{
    const char *cl = s->mhd.lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    const char *te = s->mhd.lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding");
    return te || (cl && strtoull(cl, NULL, 10) != 0);
}

/* The deadline entry of a connection (NULL when it has none). */
static tc__watch_conn *conn_watch(tc_server *s, struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        s->mhd.get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static bool key_ok(tc_server *s, struct MHD_Connection *c)
{
    if (!s->o.api_key || !*s->o.api_key)
        return true;
    const char *h = s->mhd.lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7))
        return false;
    h += 7;
    while (*h == ' ')
        h++;
    /* Compared in time independent of where they differ. */
    size_t a = strlen(h), b = strlen(s->o.api_key);
    unsigned char d = a != b;
    for (size_t i = 0; i < a; i++)
        d |= (unsigned char)(h[i] ^ s->o.api_key[i % (b ? b : 1)]);
    return d == 0;
}

static enum MHD_Result first_call(tc_server *s, struct MHD_Connection *c, const char *url,
                                  const char *method, conn *k)
{
    k->route = -1;
    k->checked = true;
    size_t url_len = strlen(url);
    if (url_len > MAX_URL) {
        k->answered = true;
        return fail(s, c, "other", 414, "invalid_request_error", NULL, "uri_too_long",
                    "the URL has %zu bytes; the limit is %d", url_len, (int)MAX_URL);
    }
    header_count h = { 0 };
    s->mhd.get_connection_values(c, MHD_HEADER_KIND, count_header, &h);
    if (h.n > MAX_HEADERS || h.bytes > MAX_HEADER_BYTES) {
        k->answered = true;
        return fail(s, c, "other", 431, "invalid_request_error", NULL,
                    "request_header_fields_too_large",
                    "the request has %zu headers of %zu bytes; the limits are %d headers and "
                    "%d bytes",
                    h.n, h.bytes, (int)MAX_HEADERS, (int)MAX_HEADER_BYTES);
    }
    size_t ulen = strcspn(url, "?");
    int match = -1;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (strlen(routes[i].path) == ulen && !strncmp(url, routes[i].path, ulen))
            match = (int)i;
    bool model_path = !strncmp(url, "/v1/models/", 11);
    if (match < 0 && !model_path) {
        k->answered = true;
        return fail(s, c, "other", 404, "invalid_request_error", NULL, "not_found",
                    "no route %.6s %.200s; see /v1/models, /v1/chat/completions, "
                    "/v1/completions, /health, /metrics, /tokenize, /detokenize",
                    method, url);
    }
    const char *want = match >= 0 ? routes[match].method : "GET";
    const char *route = match >= 0 ? routes[match].path : "/v1/models/{id}";
    if (strcmp(method, want) && !(strcmp(want, "GET") == 0 && strcmp(method, "HEAD") == 0)) {
        k->answered = true;
        tc_oai_error e;
        tc_oai_fail(&e, 405, "invalid_request_error", NULL, "method_not_allowed",
                    "%.200s takes %s, not %.16s", route, want, method);
        return send_error(s, c, route, &e, want);
    }
    if ((match < 0 || routes[match].v1) && !key_ok(s, c)) {
        k->answered = true;
        return fail(s, c, route, 401, "invalid_request_error", NULL, "invalid_api_key",
                    "a valid API key is required: send it as 'Authorization: Bearer KEY'");
    }
    pthread_mutex_lock(&s->mu);
    bool ready = s->ready, stopping = s->stopping;
    pthread_mutex_unlock(&s->mu);
    if (match >= 0 && routes[match].r == R_HEALTH) {
        k->answered = true;
        const char *st = stopping ? "shutting_down" : ready ? "ok" : "loading";
        return send_json(s, c, route, ready && !stopping ? 200 : 503,
                         json_pack("{s:s}", "status", st));
    }
    if (match >= 0 && routes[match].r == R_METRICS) {
        k->answered = true;
        return handle_metrics(s, c);
    }
    if (!ready || stopping) {
        k->answered = true;
        return fail(s, c, route, 503, "server_error", NULL,
                    stopping ? "shutting_down" : "model_loading",
                    stopping ? "the server is shutting down" : "the model is still loading");
    }
    if (model_path || routes[match].r == R_MODELS) {
        k->answered = true;
        if (!model_path)
            return send_json(s, c, route, 200,
                             json_pack("{s:s,s:[o]}", "object", "list", "data", model_json(s)));
        if (strcmp(url + 11, s->o.model_id))
            return fail(s, c, route, 404, "invalid_request_error", "model", "model_not_found",
                        "the model '%.200s' does not exist", url + 11);
        return send_json(s, c, route, 200, model_json(s));
    }
    const char *cl = s->mhd.lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > s->max_body) {
        k->answered = true;
        return fail(s, c, route, 413, "invalid_request_error", NULL, "request_too_large",
                    "the body has %.20s bytes; the limit is %zu", cl, s->max_body);
    }
    k->route = match;
    return MHD_YES;
}

static enum MHD_Result access_handler(void *cls, struct MHD_Connection *c, const char *url,
                                      const char *method, const char *version, const char *upload,
                                      size_t *upload_size, void **con_cls)
{
    (void)version;
    tc_server *s = cls;
    conn *k = *con_cls;
    if (!k) {
        k = calloc(1, sizeof *k);
        if (!k)
            return MHD_NO;
        *con_cls = k;
        /* A request without a body is answered on the next call, once the library knows that
         * the request ends there: a response queued now makes it close the connection, and
         * keep-alive would never work for GET. One with a body is looked at now, so that an
         * error (413 above all) need not wait for the body. */
        if (!has_body(s, c))
            return MHD_YES;
        return first_call(s, c, url, method, k);
    }
    /* A call without data after the first one: the request has arrived in full, and its
     * deadline no longer applies; one that came too late is not answered. */
    if (*upload_size == 0 && !tc__watch_received(s->watch, conn_watch(s, c)))
        return MHD_NO;
    if (!k->checked) {
        enum MHD_Result r = first_call(s, c, url, method, k);
        if (r != MHD_YES || k->answered)
            return r;
    }
    if (k->answered) {
        *upload_size = 0; /* the body of a request already answered is dropped */
        return MHD_YES;
    }
    if (*upload_size) {
        if (k->len + *upload_size > s->max_body) {
            k->too_large = true;
        } else if (!k->too_large) {
            if (k->len + *upload_size + 1 > k->cap) {
                size_t cap = (k->len + *upload_size + 1) * 2;
                char *b = realloc(k->body, cap < s->max_body + 1 ? cap : s->max_body + 1);
                if (!b)
                    return MHD_NO;
                k->body = b;
                k->cap = cap < s->max_body + 1 ? cap : s->max_body + 1;
            }
            memcpy(k->body + k->len, upload, *upload_size);
            k->len += *upload_size;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    k->answered = true;
    const char *route = routes[k->route].path;
    if (k->too_large)
        return fail(s, c, route, 413, "invalid_request_error", NULL, "request_too_large",
                    "the body is over the limit of %zu bytes", s->max_body);
    /* Generation may take long: the read timeout no longer applies (disconnects are
     * noticed by polling the socket). */
    s->mhd.set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    const char *body = k->body ? k->body : "";
    switch (routes[k->route].r) {
    case R_CHAT: return handle_completion(s, c, route, TC_OAI_CHAT, body, k->len);
    case R_COMPLETIONS: return handle_completion(s, c, route, TC_OAI_COMPLETION, body, k->len);
    case R_TOKENIZE: return handle_tokenize(s, c, route, body, k->len);
    case R_DETOKENIZE: return handle_detokenize(s, c, route, body, k->len);
    default: return MHD_NO;
    }
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode why)
{
    (void)why;
    tc_server *s = cls;
    conn *k = *con_cls;
    if (k) {
        free(k->body);
        free(k);
        *con_cls = NULL;
    }
    /* Back to the read timeout while the connection waits for its next request, whose
     * deadline starts now. */
    s->mhd.set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, s->o.read_timeout_s);
    tc__watch_next(s->watch, conn_watch(s, c));
}

/* A connection opens or closes: its requests are timed from the start. */
static void notify_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                              enum MHD_ConnectionNotificationCode toe)
{
    tc_server *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            s->mhd.get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = ci ? tc__watch_open(s->watch, ci->connect_fd) : NULL;
    } else {
        tc__watch_close(s->watch, *socket_context);
        *socket_context = NULL;
    }
}

/* ---------------------------------------------------------------- lifecycle */

bool tc_server_start(const tc_server_options *o, tc_server **out, char *msg, size_t len)
{
    *out = NULL;
    tc_server *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(msg, len, "out of memory");
        return false;
    }
    if (!tc_mhd_load(&s->mhd, msg, len)) {
        free(s);
        return false;
    }
    s->o = *o;
    snprintf(s->host, sizeof s->host, "%s", o->host ? o->host : "127.0.0.1");
    s->max_body = o->max_body ? o->max_body : 4u << 20;
    if (!s->o.max_connections)
        s->o.max_connections = 1024;
    if (!s->o.read_timeout_s)
        s->o.read_timeout_s = 30;
    if (!s->o.max_connections_per_ip)
        s->o.max_connections_per_ip = 512;
    if (!s->o.max_messages)
        s->o.max_messages = 2048;
    if (!s->o.max_prompt_bytes)
        s->o.max_prompt_bytes = 1u << 20;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->watch = tc__watch_create(s->o.read_timeout_s);
    if (!s->watch) {
        snprintf(msg, len, "cannot start the request watchdog (out of memory or threads)");
        tc_server_destroy(s);
        return false;
    }
    struct addrinfo hints = { .ai_flags = AI_NUMERICHOST | AI_PASSIVE, .ai_socktype = SOCK_STREAM },
                    *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    int rc = getaddrinfo(s->host, port, &hints, &ai);
    if (rc != 0) {
        snprintf(msg, len, "--host %s is not a numeric IPv4 or IPv6 address (%s)", s->host,
                 gai_strerror(rc));
        tc_server_destroy(s);
        return false;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    s->d = s->mhd.start_daemon(
        flags, (uint16_t)o->port, NULL, NULL, access_handler, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_CONNECTION_TIMEOUT, s->o.read_timeout_s, MHD_OPTION_CONNECTION_LIMIT,
        s->o.max_connections, MHD_OPTION_NOTIFY_COMPLETED, completed, s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HEAD_MEMORY, MHD_OPTION_NOTIFY_CONNECTION,
        notify_connection, s, MHD_OPTION_PER_IP_CONNECTION_LIMIT, s->o.max_connections_per_ip,
        MHD_OPTION_THREAD_STACK_SIZE, (size_t)(1u << 20), MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->d) {
        snprintf(msg, len, "cannot listen on %s port %d (in use, or not an address of this host)",
                 s->host, o->port);
        tc_server_destroy(s);
        return false;
    }
    const union MHD_DaemonInfo *di = s->mhd.get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : o->port;
    if (getentropy(&s->next_rid, sizeof s->next_rid) != 0)
        s->next_rid = (uint64_t)(tc_host_seconds() * 1e9);
    *out = s;
    return true;
}

int tc_server_port(const tc_server *s)
{
    return s->port;
}

void tc_server_set_model(tc_server *s, const tc_server_model *m)
{
    pthread_mutex_lock(&s->mu);
    s->m = *m;
    s->ready = true;
    pthread_mutex_unlock(&s->mu);
}

void tc_server_stop(tc_server *s, double grace_s)
{
    /* During the grace period the listener stays open: /health says 503 shutting_down and
     * new requests get 503 with Retry-After, so that a load balancer sees the server go
     * rather than connections refused. */
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    double until = tc_host_seconds() + grace_s;
    while (s->n_jobs > 0 && tc_host_seconds() < until) {
        timed_wait(&s->cv, &s->mu, 50);
    }
    pthread_mutex_unlock(&s->mu);
    if (s->d) {
        MHD_socket fd = s->mhd.quiesce_daemon(s->d);
        if (fd != MHD_INVALID_SOCKET)
            close(fd);
    }
    pthread_mutex_lock(&s->mu);
    for (job *j = s->jobs; j; j = j->next)
        if (s->m.engine)
            tc_engine_cancel(s->m.engine, j->id);
    while (s->n_jobs > 0)
        pthread_cond_wait(&s->cv, &s->mu);
    /* Let streams write their last events (a client that stopped reading gets 10 s). */
    until = tc_host_seconds() + 10;
    while (s->n_busy > 0 && tc_host_seconds() < until) {
        timed_wait(&s->cv, &s->mu, 50);
    }
    pthread_mutex_unlock(&s->mu);
    /* Connections finish writing what they hold; then the daemon stops. */
    if (s->d)
        s->mhd.stop_daemon(s->d);
    s->d = NULL;
}

void tc_server_destroy(tc_server *s)
{
    if (!s)
        return;
    if (s->d)
        s->mhd.stop_daemon(s->d);
    tc__watch_destroy(s->watch);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

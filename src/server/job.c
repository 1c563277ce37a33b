/* Jobs: a request's engine events queued for its connection, and the responses made of them,
 * streamed as server-sent events or whole. */
#define _GNU_SOURCE
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/host.h"
#include "server/internal.h"

/* Wait on cv for at most ms milliseconds. */
void tc__timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += ms * 1000 * 1000;
    ts.tv_sec += ts.tv_nsec / 1000000000;
    ts.tv_nsec %= 1000000000;
    pthread_cond_timedwait(cv, mu, &ts);
}

void tc__job_free(job *j)
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

job *tc__job_new(tc_server *s, int n)
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
        tc__job_free(j);
        return NULL;
    }
    j->created = (long long)time(NULL);
    j->t_arrival = tc_host_seconds();
    return j;
}

void tc__job_unlink(tc_server *s, job *j)
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
void tc__job_event(void *user, const tc_engine_event *ev)
{
    job *j = user;
    tc_server *s = j->srv;
    double t = tc_host_seconds();
    pthread_mutex_lock(&s->mu);
    if (ev->token >= 0) {
        s->met.generation_tokens++;
        if (!j->first_seen)
            tc__observe_ttft(&s->met, t - j->t_arrival);
        else if (ev->index < j->n && j->t_last[ev->index] > 0)
            tc__observe_itl(&s->met, t - j->t_last[ev->index]);
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
        tc__job_unlink(s, j); /* under j->mu, so that the connection cannot free j meanwhile */
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    if (release)
        tc__job_free(j);
}

/* The connection lets go of a job (freed here when the engine is done with it too). */
void tc__job_release(job *j)
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
        tc__job_free(j);
}

/* Whether the client has gone (closed or reset its end). */
bool tc__client_gone(int fd)
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
        tc__timed_wait(&j->cv, &j->mu, 100);
        /* Checked on every wake: tokens may come faster than the timeout. */
        if (tc__client_gone(j->fd))
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
        json_array_append_new(top,
                              json_pack("{s:o,s:f,s:o}", "token", tc__json_text(p2, l2), "logprob",
                                        (double)r->top_lp[k], "bytes", json_bytes(p2, l2)));
    }
    return json_pack("{s:o,s:f,s:o,s:o}", "token", tc__json_text(p, len), "logprob", (double)r->lp,
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
        out_event(j, tc__error_json(&e));
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
        text = tc__json_text(r->text ? r->text : "", r->len);
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

ssize_t tc__stream_read(void *cls, uint64_t pos, char *buf, size_t max)
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

void tc__stream_free(void *cls)
{
    tc__job_release(cls);
}

/* Wait for every choice to end, collecting text and log-probabilities; false when the client
 * disconnected. */
bool tc__job_collect(job *j)
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

json_t *tc__job_json(job *j)
{
    bool chat = j->req.kind == TC_OAI_CHAT;
    json_t *choices = json_array();
    for (int i = 0; i < j->n; i++) {
        json_t *text = tc__json_text(j->text[i] ? j->text[i] : "", j->text_len[i]);
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

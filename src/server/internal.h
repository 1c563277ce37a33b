/* What the server's files share: the server, its jobs and metrics, and the helpers each file
 * offers the others (hidden: the library exports none of them). */
#ifndef TC_SERVER_INTERNAL_H
#define TC_SERVER_INTERNAL_H
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "server/front.h"
#include "server/grammars.h"
#include "server/mhd.h"
#include "server/openai.h"
#include "server/server.h"
#include "server/tools.h"
#include "server/watch.h"

typedef struct histogram {
    uint64_t counts[16]; /* per bucket (not cumulative); the last is +Inf */
    uint64_t n;
    double sum;
} histogram;

enum { MAX_STATUS_ROWS = 64 };

/* Limits of a request's head. server.c answers 414 and 431 in JSON past MAX_URL, MAX_HEADERS
 * and MAX_HEADER_BYTES once libmicrohttpd has parsed the head. A head far beyond those would
 * make libmicrohttpd answer itself, in HTML, when its memory for the connection (HEAD_MEMORY)
 * ran out, so the front (front.c) answers 414 or 431 before it sees one: past FRONT_HEAD
 * bytes, FRONT_FIELDS header fields or FRONT_COOKIES Cookie items (libmicrohttpd keeps a
 * 56-byte record for each field and each item, and a copy of the Cookie header, beside the
 * head itself; half its memory is its read buffer). */
enum {
    MAX_URL = 8 << 10,           /* bytes */
    MAX_HEADER_BYTES = 32 << 10, /* names and values together */
    MAX_HEADERS = 128,
    HEAD_MEMORY = 256 << 10, /* bytes per connection */
    FRONT_HEAD = 64 << 10,   /* bytes, the request line included */
    FRONT_FIELDS = 256,
    FRONT_COOKIES = 256,
};

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
    tc__front *front; /* the listening socket and the relays to the daemon */
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
    tc__grammars *grammars; /* compiled grammars shared by requests */
};

/* metrics.c */

/* Count a request's time to its first token, or between two tokens of a choice (seconds). */
void tc__observe_ttft(metrics *m, double seconds);
void tc__observe_itl(metrics *m, double seconds);
/* GET /metrics: the Prometheus text. */
enum MHD_Result tc__handle_metrics(tc_server *s, struct MHD_Connection *c);

/* respond.c */

/* A JSON string of bytes that may not be UTF-8: invalid sequences become U+FFFD. */
json_t *tc__json_text(const char *p, size_t n);
/* Queue a response of len bytes (copied) with the headers every answer needs. */
enum MHD_Result tc__send_body(tc_server *s, struct MHD_Connection *c, int status, const char *type,
                              const char *body, size_t len, const char *allow);
/* Count an answer by route and status for /metrics. */
void tc__count_status(tc_server *s, const char *route, int code);
/* Send v (taken) as a JSON body, counted under route. */
enum MHD_Result tc__send_json(tc_server *s, struct MHD_Connection *c, const char *route, int status,
                              json_t *v);
/* The OpenAI error body of e. */
json_t *tc__error_json(const tc_oai_error *e);
/* Send e as an OpenAI error (allow: the Allow header of a 405, or NULL). */
enum MHD_Result tc__send_error(tc_server *s, struct MHD_Connection *c, const char *route,
                               const tc_oai_error *e, const char *allow);
/* Send an OpenAI error made of its fields and a printf-style message. */
enum MHD_Result tc__send_fail(tc_server *s, struct MHD_Connection *c, const char *route, int status,
                              const char *type, const char *param, const char *code,
                              const char *fmt, ...) __attribute__((format(printf, 8, 9)));

/* job.c */

/* Wait on cv for at most ms milliseconds. */
void tc__timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, long ms);
/* A job of n choices for a request of s; NULL when out of memory. */
job *tc__job_new(tc_server *s, int n);
void tc__job_free(job *j);
/* Take the job off the server's list of jobs with an engine request. */
void tc__job_unlink(tc_server *s, job *j);
/* The engine's callback (engine thread): queue the event for the connection. */
void tc__job_event(void *user, const tc_engine_event *ev);
/* The connection lets go of a job (freed here when the engine is done with it too). */
void tc__job_release(job *j);
/* Whether the client has gone (closed or reset its end). */
bool tc__client_gone(int fd);
/* Wait for every choice to end, collecting text and log-probabilities; false when the client
 * disconnected. */
bool tc__job_collect(job *j);
/* The whole response of a collected job. */
json_t *tc__job_json(job *j);
/* libmicrohttpd's content reader and its free callback for a streamed job. */
ssize_t tc__stream_read(void *cls, uint64_t pos, char *buf, size_t max);
void tc__stream_free(void *cls);

/* completion.c */

/* POST /v1/chat/completions and /v1/completions. */
enum MHD_Result tc__handle_completion(tc_server *s, struct MHD_Connection *c, const char *route,
                                      tc_oai_kind kind, const char *body, size_t len);
/* POST /tokenize and /detokenize. */
enum MHD_Result tc__handle_tokenize(tc_server *s, struct MHD_Connection *c, const char *route,
                                    const char *body, size_t len);
enum MHD_Result tc__handle_detokenize(tc_server *s, struct MHD_Connection *c, const char *route,
                                      const char *body, size_t len);
/* The model's entry in /v1/models. */
json_t *tc__model_json(const tc_server *s);

#endif /* TC_SERVER_INTERNAL_H */

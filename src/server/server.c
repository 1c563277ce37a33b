/* The HTTP server: the daemon's lifecycle and the dispatch of each request to its route
 * (completion.c, metrics.c), with the checks every request passes first. Jobs and their
 * responses are in job.c, response bodies in respond.c. */
#define _GNU_SOURCE
#include "server/server.h"

#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "runtime/host.h"
#include "runtime/log.h"
#include "runtime/pool.h"
#include "runtime/telemetry.h"
#include "server/internal.h"

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

/* Seconds the front has, once the daemon has stopped, to write what it still holds to
 * clients (a client that stopped reading has had its 10 s already). */
static const double DRAIN_S = 2;

/* Compiled grammars the server keeps for later requests with the same schema or tools (each
 * with its mask caches, 20 MiB at most: see src/inference/grammar_mask.c). */
enum { GRAMMARS = 8 };

/* /health on CUDA: the device memory the server holds (its pool) and, when NVML loads, what
 * the GPU and this process use as NVML counts it. Device memory only: no temperature or
 * utilisation here (thincuda devices shows those), so that /health stays cheap. */
static void add_device_memory(tc_server *s, json_t *body)
{
    if (!s->m.pci_bus_id || !s->m.pool)
        return;
    tc_pool_stats ps;
    tc_pool_get_stats(s->m.pool, &ps);
    json_t *d =
        json_pack("{s:s,s:I,s:I}", "pci_bus_id", s->m.pci_bus_id, "pool_reserved_bytes",
                  (json_int_t)ps.bytes_reserved, "pool_in_use_bytes", (json_int_t)ps.bytes_in_use);
    long long used, total, mine;
    if (tc_telemetry_memory(s->m.pci_bus_id, &used, &total, &mine) == TC_OK) {
        json_object_set_new(d, "memory_used_bytes", json_integer(used));
        json_object_set_new(d, "memory_total_bytes", json_integer(total));
        json_object_set_new(d, "process_resident_bytes",
                            mine >= 0 ? json_integer(mine) : json_null());
    } else {
        json_object_set_new(d, "nvml", json_string(tc_last_error_detail()));
    }
    json_object_set_new(body, "device", d);
}

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
        return tc__send_fail(s, c, "other", 414, "invalid_request_error", NULL, "uri_too_long",
                             "the URL has %zu bytes; the limit is %d", url_len, (int)MAX_URL);
    }
    header_count h = { 0 };
    s->mhd.get_connection_values(c, MHD_HEADER_KIND, count_header, &h);
    if (h.n > MAX_HEADERS || h.bytes > MAX_HEADER_BYTES) {
        k->answered = true;
        return tc__send_fail(
            s, c, "other", 431, "invalid_request_error", NULL, "request_header_fields_too_large",
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
        return tc__send_fail(s, c, "other", 404, "invalid_request_error", NULL, "not_found",
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
        return tc__send_error(s, c, route, &e, want);
    }
    if ((match < 0 || routes[match].v1) && !key_ok(s, c)) {
        k->answered = true;
        return tc__send_fail(s, c, route, 401, "invalid_request_error", NULL, "invalid_api_key",
                             "a valid API key is required: send it as 'Authorization: Bearer KEY'");
    }
    pthread_mutex_lock(&s->mu);
    bool ready = s->ready, stopping = s->stopping;
    pthread_mutex_unlock(&s->mu);
    if (match >= 0 && routes[match].r == R_HEALTH) {
        k->answered = true;
        const char *st = stopping ? "shutting_down" : ready ? "ok" : "loading";
        json_t *body = json_pack("{s:s}", "status", st);
        if (ready)
            add_device_memory(s, body);
        return tc__send_json(s, c, route, ready && !stopping ? 200 : 503, body);
    }
    if (match >= 0 && routes[match].r == R_METRICS) {
        k->answered = true;
        return tc__handle_metrics(s, c);
    }
    if (!ready || stopping) {
        k->answered = true;
        return tc__send_fail(
            s, c, route, 503, "server_error", NULL, stopping ? "shutting_down" : "model_loading",
            stopping ? "the server is shutting down" : "the model is still loading");
    }
    if (model_path || routes[match].r == R_MODELS) {
        k->answered = true;
        if (!model_path)
            return tc__send_json(
                s, c, route, 200,
                json_pack("{s:s,s:[o]}", "object", "list", "data", tc__model_json(s)));
        if (strcmp(url + 11, s->o.model_id))
            return tc__send_fail(s, c, route, 404, "invalid_request_error", "model",
                                 "model_not_found", "the model '%.200s' does not exist", url + 11);
        return tc__send_json(s, c, route, 200, tc__model_json(s));
    }
    const char *cl = s->mhd.lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > s->max_body) {
        k->answered = true;
        return tc__send_fail(s, c, route, 413, "invalid_request_error", NULL, "request_too_large",
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
        return tc__send_fail(s, c, route, 413, "invalid_request_error", NULL, "request_too_large",
                             "the body is over the limit of %zu bytes", s->max_body);
    /* Generation may take long: the read timeout no longer applies (disconnects are
     * noticed by polling the socket). */
    s->mhd.set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    const char *body = k->body ? k->body : "";
    switch (routes[k->route].r) {
    case R_CHAT: return tc__handle_completion(s, c, route, TC_OAI_CHAT, body, k->len);
    case R_COMPLETIONS: return tc__handle_completion(s, c, route, TC_OAI_COMPLETION, body, k->len);
    case R_TOKENIZE: return tc__handle_tokenize(s, c, route, body, k->len);
    case R_DETOKENIZE: return tc__handle_detokenize(s, c, route, body, k->len);
    default: return MHD_NO;
    }
}

/* libmicrohttpd's own timeout, which counts silence on its end of the connection. The front
 * holds a head back until it is whole, so a client trickling one looks silent there: the
 * watch closes it at its deadline (and counts it), and the library's timeout, a second later,
 * is only the backstop. */
static unsigned idle_timeout_s(const tc_server *s)
{
    return s->o.read_timeout_s + 1;
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
    s->mhd.set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, idle_timeout_s(s));
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

/* libmicrohttpd's messages, through the logger, less those about TCP options: its end of each
 * connection is a Unix socketpair (front.c), where TCP_NODELAY and TCP_CORK do not apply and
 * it says so on every response. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    if (strstr(fmt, "option to %s state failed") || strstr(fmt, "Failed to push the data"))
        return;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    line[strcspn(line, "\n")] = 0;
    TC_WARN("libmicrohttpd: %s", line);
}

/* Each connection takes three descriptors (the client's socket and a socketpair): raise the
 * soft limit towards what max_connections needs, within the hard limit. */
static void raise_fd_limit(unsigned max_connections)
{
    struct rlimit r;
    rlim_t want = (rlim_t)max_connections * 3 + 256;
    if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur >= want)
        return;
    r.rlim_cur = r.rlim_max != RLIM_INFINITY && r.rlim_max < want ? r.rlim_max : want;
    setrlimit(RLIMIT_NOFILE, &r);
}

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
    s->grammars = tc__grammars_create(GRAMMARS);
    if (!s->watch || !s->grammars) {
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
    raise_fd_limit(s->o.max_connections);
    char why[200];
    s->front = tc__front_create(s, ai->ai_addr, ai->ai_addrlen, why, sizeof why);
    freeaddrinfo(ai);
    if (!s->front) {
        snprintf(msg, len, "cannot listen on %s port %d: %s", s->host, o->port, why);
        tc_server_destroy(s);
        return false;
    }
    s->port = tc__front_port(s->front);
    /* The front listens and hands each connection over (MHD_add_connection). */
    unsigned flags = MHD_USE_NO_LISTEN_SOCKET | MHD_USE_THREAD_PER_CONNECTION |
                     MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG;
    s->d = s->mhd.start_daemon(
        flags, 0, NULL, NULL, access_handler, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
        MHD_OPTION_CONNECTION_TIMEOUT, idle_timeout_s(s), MHD_OPTION_CONNECTION_LIMIT,
        s->o.max_connections, MHD_OPTION_NOTIFY_COMPLETED, completed, s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HEAD_MEMORY, MHD_OPTION_NOTIFY_CONNECTION,
        notify_connection, s, MHD_OPTION_PER_IP_CONNECTION_LIMIT, s->o.max_connections_per_ip,
        MHD_OPTION_THREAD_STACK_SIZE, (size_t)(1u << 20), MHD_OPTION_END);
    if (!s->d || !tc__front_start(s->front)) {
        snprintf(msg, len, "cannot start the HTTP daemon (out of memory or threads)");
        tc_server_destroy(s);
        return false;
    }
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
        tc__timed_wait(&s->cv, &s->mu, 50);
    }
    pthread_mutex_unlock(&s->mu);
    tc__front_quiesce(s->front);
    pthread_mutex_lock(&s->mu);
    for (job *j = s->jobs; j; j = j->next)
        if (s->m.engine)
            tc_engine_cancel(s->m.engine, j->id);
    while (s->n_jobs > 0)
        pthread_cond_wait(&s->cv, &s->mu);
    /* Let streams write their last events (a client that stopped reading gets 10 s). */
    until = tc_host_seconds() + 10;
    while (s->n_busy > 0 && tc_host_seconds() < until) {
        tc__timed_wait(&s->cv, &s->mu, 50);
    }
    pthread_mutex_unlock(&s->mu);
    /* Connections finish writing what they hold; then the daemon stops, and the front
     * passes on what the daemon wrote. */
    if (s->d)
        s->mhd.stop_daemon(s->d);
    s->d = NULL;
    tc__front_destroy(s->front, DRAIN_S);
    s->front = NULL;
}

void tc_server_destroy(tc_server *s)
{
    if (!s)
        return;
    tc__front_quiesce(s->front);
    if (s->d)
        s->mhd.stop_daemon(s->d);
    tc__front_destroy(s->front, 0);
    tc__watch_destroy(s->watch);
    tc__grammars_destroy(s->grammars);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

/* The OpenAI-compatible HTTP server over an engine.
 *
 * Routes: POST /v1/chat/completions and /v1/completions (streamed as server-sent events or
 * not), GET /v1/models, GET /health (503 while the model loads), GET /metrics (Prometheus
 * text), POST /tokenize and /detokenize. Each request becomes one engine request; a client
 * that disconnects cancels it. Errors are OpenAI-style JSON bodies, malformed HTTP included.
 *
 * The server listens as soon as it starts, so that /health answers during loading; the model
 * arrives later with tc_server_set_model. Its front (front.h) accepts the connections and
 * checks the client's bytes with an HTTP parser on their way to libmicrohttpd, where each
 * connection gets a thread (thread-per-connection mode) that waits on its request's events. */
#ifndef TC_SERVER_H
#define TC_SERVER_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "inference/engine.h"
#include "model/chat.h"
#include "model/tokenizer.h"

typedef struct tc_server tc_server;

typedef struct tc_server_options {
    const char *host;         /* address to bind; NULL: 127.0.0.1 */
    int port;                 /* 0: any free port (see tc_server_port) */
    const char *api_key;      /* NULL: none; else required as "Authorization: Bearer KEY" on /v1 */
    const char *model_id;     /* the name /v1/models lists and requests may give */
    size_t max_body;          /* request bodies beyond it get 413; 0: 4 MiB */
    unsigned max_connections; /* 0: 1024 */
    unsigned read_timeout_s;  /* a request's head and body must arrive within this, however
                                 they trickle, or the connection is closed; 0: 30 */
    unsigned max_connections_per_ip; /* open connections from one address; 0: 512 */
    size_t max_messages;             /* chat messages a request may have; 0: 2048 */
    size_t max_prompt_bytes; /* bytes of prompt or message text a request may have; 0: 1 MiB */
    /* Control tokens written in chat messages ("<|im_end|>") are tokens, not text, in chat
     * requests and /tokenize; by default only the template's own markers are. */
    bool allow_special_in_messages;
} tc_server_options;

/* What the server runs once the model is loaded; pointers stay valid until tc_server_stop. */
typedef struct tc_server_model {
    tc_engine *engine; /* threaded, with tok as its tokenizer */
    const tc_tokenizer *tok;
    const tc_chat_template *chat; /* NULL: the model has none (chat requests get 400) */
    int64_t context;              /* tokens a sequence may hold */
    int32_t vocab;
    /* On CUDA, the GPU (for /health's device memory figures) and the pool the model's device
     * memory comes from; NULL on the CPU backend. */
    const char *pci_bus_id;
    tc_pool *pool;
} tc_server_model;

/* Load libmicrohttpd and listen. Fails with a sentence in msg. */
bool tc_server_start(const tc_server_options *o, tc_server **out, char *msg, size_t len);
int tc_server_port(const tc_server *s);
/* The model is ready: /health turns 200 and the /v1 routes answer. */
void tc_server_set_model(tc_server *s, const tc_server_model *m);
/* Graceful stop: requests under way may finish for up to grace_s seconds while the listener
 * stays open (/health and new requests get 503 shutting_down with Retry-After), then no new
 * connections are taken and the rest are cancelled (their streams end with an error event).
 * Returns once no request uses the engine any more, so that it can be destroyed. */
void tc_server_stop(tc_server *s, double grace_s);
void tc_server_destroy(tc_server *s);

#endif /* TC_SERVER_H */

/* Checking one connection's HTTP/1.1 traffic for the front (front.c) with nodejs's
 * http-parser: where each request's head ends, so that a head goes to libmicrohttpd only once
 * it is whole and valid; the requests the front answers itself (malformed ones, and heads too
 * large for libmicrohttpd's memory), with an OpenAI-style JSON error; and the daemon's
 * answers, counted, so that such an error follows the answers to the requests before it, and
 * only when the daemon answered nothing of the malformed one. The check sees the bytes; the
 * front owns them. */
#ifndef TC_SERVER_CHECK_H
#define TC_SERVER_CHECK_H
#include <http_parser.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tc__check {
    /* Client to daemon: the offsets are into the front's buffer of client bytes not yet
     * written to the daemon. */
    http_parser req;
    size_t parsed; /* bytes the parser has taken */
    size_t ready;  /* bytes that may go to the daemon: whole heads and the body after each */
    bool in_head;  /* between requests or in a head, which is held back until whole */
    bool closed;   /* no byte past ready ever goes: a malformed request, or the end of input */
    int stop;      /* where the parser paused (check.c) */
    unsigned fields, cookies; /* the current head's header fields and Cookie items */
    int field_state;          /* 0: no field yet, 1: in a name, 2: in a value */
    char name[8];             /* the current field name's first bytes */
    size_t name_len;          /* bytes of the whole name */
    bool cookie_value, host;
    char why[200]; /* what a header callback refused */
    /* Daemon to client. */
    http_parser resp;
    bool resp_busy;  /* a response is partly through the parser */
    bool resp_close; /* the last response closes the connection */
    bool resp_bad;   /* the response parser failed: answers are no longer counted */
    /* Requests: heads that went to the daemon, requests that went whole, final answers. */
    uint64_t heads, done, answered;
    uint64_t head_bits; /* bit i % 64: request i is a HEAD, whose answer has no body */
    /* The front's answer to a malformed request (a whole HTTP response), or NULL. */
    char *err;
    size_t err_len; /* bytes */
    int err_status;
} tc__check;

/* Start checking a connection. */
void tc__check_init(tc__check *k);
/* Free what k holds. */
void tc__check_deinit(tc__check *k);
/* The client's bytes: buf holds len, of which the check has seen k->parsed. It takes the
 * rest, as far as the daemon's answers allow (64 requests may wait for theirs), and moves
 * k->ready; a malformed request sets k->closed and k->err. */
void tc__check_requests(tc__check *k, const char *buf, size_t len);
/* The buffer's first n bytes went to the daemon (n <= k->ready). */
void tc__check_sent(tc__check *k, size_t n);
/* The client's bytes end: those past k->ready (a head cut short) never go. */
void tc__check_close(tc__check *k);
/* n more bytes from the daemon, on their way to the client. */
void tc__check_responses(tc__check *k, const char *p, size_t n);
/* The daemon has closed the connection, and nothing more goes to it. True when k->err is to
 * follow the daemon's answers: the daemon answered every whole request and nothing of the
 * malformed one, and its last answer left the connection open. */
bool tc__check_finish(tc__check *k);

#endif /* TC_SERVER_CHECK_H */

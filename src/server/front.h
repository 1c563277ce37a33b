/* The front: the server's listening socket, and a relay between each client and libmicrohttpd
 * that checks the client's bytes with an HTTP/1.1 parser on their way in.
 *
 * libmicrohttpd 0.9.75 answers some malformed requests itself, before any callback and with
 * HTML bodies that no option replaces: an unparsable Content-Length or chunk size, an HTTP
 * version other than 1.x, a head larger than its memory. The front sees those first. Each
 * connection it accepts is handed to libmicrohttpd as one end of a socketpair (with the
 * client's address, so per-address limits hold); the front relays the bytes between the
 * client and the other end. Client bytes go through nodejs's http-parser: a request's head
 * is held back until it is complete and valid, its body goes on as it arrives. When a request
 * is malformed, the front stops reading the client, lets libmicrohttpd answer the requests
 * before it (pipelining order is kept), then writes an OpenAI-style JSON error and closes.
 * Server bytes go to the client as they are, parsed only to count the answers. */
#ifndef TC_SERVER_FRONT_H
#define TC_SERVER_FRONT_H
#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

typedef struct tc_server tc_server;
typedef struct tc__front tc__front;

/* Listen on addr for s. NULL with a sentence in msg when the address cannot be bound or
 * memory or descriptors run out. */
tc__front *tc__front_create(tc_server *s, const struct sockaddr *addr, socklen_t addr_len,
                            char *msg, size_t msg_len);
/* The port the front listens on. */
int tc__front_port(const tc__front *f);
/* Start relaying: each connection accepted from now on goes to s's daemon, which must be
 * running. False when the relay thread cannot start. */
bool tc__front_start(tc__front *f);
/* Close the listening socket (new connections are refused); connections already open go on.
 * NULL and a second call are no-ops. */
void tc__front_quiesce(tc__front *f);
/* Stop: connections have up to drain_s seconds to write what they hold to their clients,
 * then all are closed and the front is freed. Call once the daemon has stopped. NULL is a
 * no-op. */
void tc__front_destroy(tc__front *f, double drain_s);

#endif /* TC_SERVER_FRONT_H */

/* Request deadlines. libmicrohttpd's connection timeout only counts silence, so a client that
 * sends one byte every few seconds could hold a connection (and, in thread-per-connection
 * mode, a thread) for ever. The watch gives each request a deadline for its head and body
 * together, from the moment the connection waits for it; a watchdog thread shuts down the
 * socket of any request still arriving at its deadline, and the library then closes the
 * connection and frees its thread. Generation and the response are not timed. */
#ifndef TC_SERVER_WATCH_H
#define TC_SERVER_WATCH_H
#include <stdbool.h>
#include <stdint.h>

typedef struct tc__watch tc__watch;
typedef struct tc__watch_conn tc__watch_conn;

/* Start the watchdog with a deadline of deadline_s seconds a request; NULL when out of
 * memory or threads. */
tc__watch *tc__watch_create(double deadline_s);
/* Stop the watchdog; NULL is a no-op. Connections still registered are forgotten. */
void tc__watch_destroy(tc__watch *w);
/* A connection on socket fd opened: its first request's clock starts. NULL when out of
 * memory (the connection is then not timed). */
tc__watch_conn *tc__watch_open(tc__watch *w, int fd);
/* The connection closed; NULL is a no-op. */
void tc__watch_close(tc__watch *w, tc__watch_conn *k);
/* The request arrived in full: no deadline until the next one. False when the deadline had
 * already passed and the socket was shut down. NULL: true. */
bool tc__watch_received(tc__watch *w, tc__watch_conn *k);
/* The response was sent: the next request's clock starts. NULL is a no-op. */
void tc__watch_next(tc__watch *w, tc__watch_conn *k);
/* Connections shut down at their deadline so far. */
uint64_t tc__watch_expired(tc__watch *w);

#endif /* TC_SERVER_WATCH_H */

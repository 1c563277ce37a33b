/* The front (front.h): the listening socket, and one epoll thread that relays every
 * connection's bytes between its client and libmicrohttpd, the client's through http-parser
 * (nodejs/http-parser 2.9, Debian's libhttp-parser-dev, linked statically). */
#define _GNU_SOURCE
#include "server/front.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "runtime/host.h"
#include "server/check.h"
#include "server/internal.h"

enum {
    IN_MAX = FRONT_HEAD + (64 << 10), /* client bytes a connection holds: a head and more */
    OUT_MAX = 64 << 10,               /* daemon bytes a connection holds for its client */
    CHUNK = 16 << 10,                 /* bytes: a buffer's first allocation */
    ROUNDS = 16, /* passes over one connection per wake-up, so that none holds up the rest */
    EVENTS = 64, /* epoll events taken per wake-up */
};
/* Closing a socket that has unread bytes makes the kernel reset the connection, and the
 * client may then lose the answer it has not read yet. So a closing connection first shuts
 * down its writing side and reads (and drops) what the client still sends, this long. */
static const double LINGER_S = 2;
/* How long listening pauses when the process is out of descriptors. */
static const double ACCEPT_RETRY_S = 0.1;

typedef enum { E_WAKE, E_LISTEN, E_CLIENT, E_DAEMON } end_kind;

typedef struct fconn fconn;

/* What an epoll event points to. */
typedef struct endpoint {
    end_kind kind;
    fconn *c; /* NULL for the wake-up and listening descriptors */
} endpoint;

typedef struct buffer {
    char *p;
    size_t len, cap; /* bytes */
} buffer;

struct fconn {
    tc__front *f;
    int client, daemon; /* the client's socket, our end of the pair; -1 once closed */
    endpoint ec, ed;
    uint32_t want_c, want_d; /* epoll interest registered (0: not in the epoll set) */
    tc__check k;             /* what the bytes say */
    buffer in;               /* client bytes not yet written to the daemon */
    buffer out;              /* daemon bytes not yet written to the client */
    bool client_eof;         /* the client shut down its writing side */
    bool daemon_shut;        /* our end has shut down its writing side */
    bool daemon_eof;         /* the daemon has closed */
    bool err_go;             /* k.err follows the daemon's answers */
    size_t err_sent;         /* bytes of k.err written */
    double linger_until;     /* > 0: closing (tc_host_seconds) */
    bool again;              /* it had work left when its turn ended */
    bool dead;               /* closed; freed at the end of the wake-up */
    fconn *prev, *next;
};

struct tc__front {
    tc_server *s;
    int listen_fd, ep, wake; /* -1 when closed */
    int port;
    endpoint e_wake, e_listen;
    pthread_t thread;
    bool started;
    pthread_mutex_t mu; /* quiesce, quiesced, stop, drain_until */
    pthread_cond_t cv;
    bool quiesce, quiesced, stop;
    double drain_until;
    double listen_retry; /* > 0: listening paused until then (out of descriptors) */
    fconn *conns, *dead;
    size_t n_conns, n_linger, n_again;
};

/* ---------------------------------------------------------------- buffers */

/* Room at the end of b, grown up to max bytes in all; 0 when full or out of memory. */
static size_t room(buffer *b, size_t max)
{
    if (b->len < b->cap)
        return b->cap - b->len;
    if (b->cap >= max)
        return 0;
    size_t cap = b->cap ? b->cap * 2 : CHUNK;
    if (cap > max)
        cap = max;
    char *p = realloc(b->p, cap);
    if (!p)
        return 0;
    b->p = p;
    b->cap = cap;
    return cap - b->len;
}

/* Drop the first n bytes of b; an emptied buffer past its first size is freed. */
static void consume(buffer *b, size_t n)
{
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
    if (b->len == 0 && b->cap > CHUNK) {
        free(b->p);
        b->p = NULL;
        b->cap = 0;
    }
}

/* ---------------------------------------------------------------- connections */

static void epoll_set(tc__front *f, int fd, endpoint *e, uint32_t *have, uint32_t want)
{
    if (fd < 0 || *have == want)
        return;
    struct epoll_event ev = { .events = want, .data.ptr = e };
    /* A descriptor nothing is wanted from leaves the set: its hang-up would wake the loop
     * for ever. */
    int op = *have == 0 ? EPOLL_CTL_ADD : want == 0 ? EPOLL_CTL_DEL : EPOLL_CTL_MOD;
    if (epoll_ctl(f->ep, op, fd, &ev) == 0)
        *have = want;
}

/* Close one of c's sockets (fd and want: c's client or daemon side), leaving the epoll set. */
static void close_end(fconn *c, int *fd, uint32_t *want)
{
    if (*fd < 0)
        return;
    if (*want)
        epoll_ctl(c->f->ep, EPOLL_CTL_DEL, *fd, NULL);
    close(*fd);
    *fd = -1;
    *want = 0;
}

/* Close both sides (the daemon sees its socket hang up) and queue c to be freed. */
static void kill_conn(fconn *c)
{
    tc__front *f = c->f;
    if (c->dead)
        return;
    close_end(c, &c->client, &c->want_c);
    close_end(c, &c->daemon, &c->want_d);
    c->dead = true;
    if (c->linger_until > 0)
        f->n_linger--;
    if (c->again)
        f->n_again--;
    if (c->prev)
        c->prev->next = c->next;
    else
        f->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    f->n_conns--;
    c->next = f->dead;
    f->dead = c;
}

static void free_conn(fconn *c)
{
    tc__check_deinit(&c->k);
    free(c->in.p);
    free(c->out.p);
    free(c);
}

/* Drop the client bytes that will never go to the daemon. */
static void trim_input(fconn *c)
{
    if (c->k.closed && c->in.len > c->k.ready)
        c->in.len = c->k.ready;
}

/* Read from the client: into the buffer, or dropped once its input is closed. */
static bool read_client(fconn *c)
{
    if (c->client < 0 || c->client_eof)
        return false;
    char scratch[4096];
    char *to = scratch;
    size_t max = sizeof scratch;
    if (!c->k.closed) {
        max = room(&c->in, IN_MAX);
        if (max == 0)
            return false;
        to = c->in.p + c->in.len;
    }
    ssize_t n = recv(c->client, to, max, 0);
    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR)
            return false;
        kill_conn(c); /* reset: the daemon sees its socket hang up, as it saw the client's */
        return true;
    }
    if (n == 0) {
        c->client_eof = true;
        if (c->linger_until > 0)
            kill_conn(c);
        return true;
    }
    if (!c->k.closed) {
        c->in.len += (size_t)n;
        tc__check_requests(&c->k, c->in.p, c->in.len);
        trim_input(c);
    }
    return true;
}

static bool write_daemon(fconn *c)
{
    if (c->daemon < 0 || c->daemon_shut || c->k.ready == 0)
        return false;
    ssize_t n = send(c->daemon, c->in.p, c->k.ready, MSG_NOSIGNAL);
    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR)
            return false;
        /* The daemon has closed: its end of stream comes next. */
        c->daemon_shut = true;
        return true;
    }
    consume(&c->in, (size_t)n);
    tc__check_sent(&c->k, (size_t)n);
    return true;
}

static bool read_daemon(fconn *c)
{
    if (c->daemon < 0 || c->daemon_eof)
        return false;
    size_t max = room(&c->out, OUT_MAX);
    if (max == 0)
        return false;
    ssize_t n = recv(c->daemon, c->out.p + c->out.len, max, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return false;
    if (n <= 0) {
        /* The daemon has closed: nothing more goes to it, and the check says whether the
         * answer to a malformed request follows. */
        c->daemon_eof = true;
        c->err_go = tc__check_finish(&c->k);
        trim_input(c);
        if (c->err_go)
            tc__count_status(c->f->s, "other", c->k.err_status);
        return true;
    }
    uint64_t answered = c->k.answered;
    tc__check_responses(&c->k, c->out.p + c->out.len, (size_t)n);
    c->out.len += (size_t)n;
    if (c->k.answered != answered && !c->k.closed) {
        tc__check_requests(&c->k, c->in.p, c->in.len); /* room in the pipeline again */
        trim_input(c);
    }
    return true;
}

static bool write_client(fconn *c)
{
    if (c->client < 0 || c->linger_until > 0)
        return false;
    const char *p;
    size_t len;
    if (c->out.len) {
        p = c->out.p;
        len = c->out.len;
    } else if (c->err_go && c->err_sent < c->k.err_len) {
        p = c->k.err + c->err_sent;
        len = c->k.err_len - c->err_sent;
    } else {
        return false;
    }
    ssize_t n = send(c->client, p, len, MSG_NOSIGNAL);
    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR)
            return false;
        kill_conn(c); /* the client has gone */
        return true;
    }
    if (c->out.len)
        consume(&c->out, (size_t)n);
    else
        c->err_sent += (size_t)n;
    return true;
}

/* The steps that follow from the state rather than from a socket. */
static bool settle(fconn *c)
{
    tc__front *f = c->f;
    bool moved = false;
    /* The client's input has ended and the check has seen all of it: a head cut short never
     * goes. */
    if (!c->k.closed && c->client_eof && c->k.parsed == c->in.len) {
        tc__check_close(&c->k);
        trim_input(c);
    }
    /* Once the daemon has all the input that goes to it, it sees its end of stream: at once
     * when the client's has ended (a client that went away cancels its requests), else once
     * the daemon has answered every whole request, so that a malformed request after them
     * does not look like a client that went away. */
    bool answered = c->k.answered >= c->k.done || c->k.resp_bad;
    if (c->k.closed && c->in.len == 0 && c->daemon >= 0 && !c->daemon_shut &&
        (c->client_eof || answered)) {
        shutdown(c->daemon, SHUT_WR);
        c->daemon_shut = true;
        moved = true;
    }
    /* The daemon is done and everything is written: close, lingering unless the client has
     * closed its side already or the front is stopping. */
    bool written = c->out.len == 0 && (!c->err_go || c->err_sent == c->k.err_len);
    if (c->daemon_eof && written && c->linger_until == 0) {
        close_end(c, &c->daemon, &c->want_d);
        pthread_mutex_lock(&f->mu);
        bool stopping = f->stop;
        pthread_mutex_unlock(&f->mu);
        if (c->client_eof || stopping || c->client < 0) {
            kill_conn(c);
        } else {
            shutdown(c->client, SHUT_WR);
            c->linger_until = tc_host_seconds() + LINGER_S;
            f->n_linger++;
        }
        moved = true;
    }
    return moved;
}

static void set_interest(fconn *c)
{
    uint32_t want_c = 0, want_d = 0;
    if (c->client >= 0 && !c->client_eof && (c->k.closed || c->in.len < IN_MAX))
        want_c |= EPOLLIN;
    if (c->client >= 0 && c->linger_until == 0 &&
        (c->out.len || (c->err_go && c->err_sent < c->k.err_len)))
        want_c |= EPOLLOUT;
    if (c->daemon >= 0 && !c->daemon_eof && c->out.len < OUT_MAX)
        want_d |= EPOLLIN;
    if (c->daemon >= 0 && !c->daemon_shut && c->k.ready)
        want_d |= EPOLLOUT;
    epoll_set(c->f, c->client, &c->ec, &c->want_c, want_c);
    epoll_set(c->f, c->daemon, &c->ed, &c->want_d, want_d);
}

/* Do what can be done for c now, in a bounded number of passes. */
static void pump(fconn *c)
{
    tc__front *f = c->f;
    bool moved = true;
    for (int round = 0; round < ROUNDS && moved && !c->dead; round++) {
        moved = read_client(c);
        if (!c->dead)
            moved |= write_daemon(c);
        if (!c->dead)
            moved |= read_daemon(c);
        if (!c->dead)
            moved |= write_client(c);
        if (!c->dead)
            moved |= settle(c);
    }
    if (c->dead)
        return;
    if (moved && !c->again)
        f->n_again++;
    else if (!moved && c->again)
        f->n_again--;
    c->again = moved;
    set_interest(c);
}

/* Hand a new client to the daemon through a socketpair. */
static void hand_over(tc__front *f, int fd, const struct sockaddr *addr, socklen_t addr_len)
{
    tc_server *s = f->s;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int sv[2];
    fconn *c = NULL;
    /* Past twice the daemon's limit (closing connections count here too), refuse at once. */
    if (f->n_conns >= 2 * (size_t)s->o.max_connections ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) {
        close(fd);
        return;
    }
    c = calloc(1, sizeof *c);
    if (!c) {
        close(sv[0]);
        close(sv[1]);
        close(fd);
        return;
    }
    /* The daemon takes sv[1] with the client's address (per-address limits and the
     * connection's address hold) and closes it on refusal: over the per-address or the total
     * limit, the client is closed without an answer, as libmicrohttpd does. */
    if (s->mhd.add_connection(s->d, sv[1], addr, addr_len) != MHD_YES) {
        close(sv[0]);
        close(fd);
        free(c);
        return;
    }
    c->f = f;
    c->client = fd;
    c->daemon = sv[0];
    c->ec = (endpoint){ E_CLIENT, c };
    c->ed = (endpoint){ E_DAEMON, c };
    tc__check_init(&c->k);
    c->next = f->conns;
    if (f->conns)
        f->conns->prev = c;
    f->conns = c;
    f->n_conns++;
    set_interest(c);
}

static void accept_some(tc__front *f)
{
    for (int i = 0; i < EVENTS && f->listen_fd >= 0; i++) {
        struct sockaddr_storage addr;
        socklen_t len = sizeof addr;
        int fd =
            accept4(f->listen_fd, (struct sockaddr *)&addr, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            hand_over(f, fd, (struct sockaddr *)&addr, len);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            /* Out of descriptors or memory: stop listening a moment rather than spin. */
            epoll_ctl(f->ep, EPOLL_CTL_DEL, f->listen_fd, NULL);
            f->listen_retry = tc_host_seconds() + ACCEPT_RETRY_S;
        }
        return;
    }
}

/* ---------------------------------------------------------------- the relay thread */

static void *relay(void *arg)
{
    tc__front *f = arg;
    struct epoll_event ev[EVENTS];
    for (;;) {
        pthread_mutex_lock(&f->mu);
        bool stop = f->stop;
        double drain_until = f->drain_until;
        if (f->quiesce && !f->quiesced) {
            if (f->listen_retry == 0)
                epoll_ctl(f->ep, EPOLL_CTL_DEL, f->listen_fd, NULL);
            close(f->listen_fd);
            f->listen_fd = -1;
            f->quiesced = true;
            pthread_cond_broadcast(&f->cv);
        }
        pthread_mutex_unlock(&f->mu);
        if (stop && (!f->conns || tc_host_seconds() >= drain_until))
            break;
        int timeout = f->n_again ? 0 : f->n_linger || f->listen_retry > 0 || stop ? 100 : -1;
        int n = epoll_wait(f->ep, ev, EVENTS, timeout);
        for (int i = 0; i < n; i++) {
            endpoint *e = ev[i].data.ptr;
            if (e->kind == E_WAKE) {
                uint64_t v;
                if (read(f->wake, &v, sizeof v) < 0)
                    continue;
            } else if (e->kind == E_LISTEN) {
                accept_some(f);
            } else if (!e->c->dead) {
                pump(e->c);
            }
        }
        double now = tc_host_seconds();
        for (fconn *c = f->n_again || f->n_linger ? f->conns : NULL, *next; c; c = next) {
            next = c->next;
            if (c->again)
                pump(c);
            /* Stopping, a closing connection waits no longer for its client. */
            if (!c->dead && c->linger_until > 0 && (now >= c->linger_until || stop))
                kill_conn(c);
        }
        if (f->listen_retry > 0 && now >= f->listen_retry && f->listen_fd >= 0) {
            struct epoll_event le = { .events = EPOLLIN, .data.ptr = &f->e_listen };
            epoll_ctl(f->ep, EPOLL_CTL_ADD, f->listen_fd, &le);
            f->listen_retry = 0;
        }
        while (f->dead) {
            fconn *c = f->dead;
            f->dead = c->next;
            free_conn(c);
        }
    }
    while (f->conns)
        kill_conn(f->conns);
    while (f->dead) {
        fconn *c = f->dead;
        f->dead = c->next;
        free_conn(c);
    }
    return NULL;
}

static void wake(tc__front *f)
{
    uint64_t one = 1;
    if (write(f->wake, &one, sizeof one) < 0)
        return; /* the counter is full: the thread is awake anyway */
}

/* ---------------------------------------------------------------- lifecycle */

tc__front *tc__front_create(tc_server *s, const struct sockaddr *addr, socklen_t addr_len,
                            char *msg, size_t msg_len)
{
    tc__front *f = calloc(1, sizeof *f);
    if (!f) {
        snprintf(msg, msg_len, "out of memory");
        return NULL;
    }
    f->s = s;
    f->ep = f->wake = -1;
    f->e_wake = (endpoint){ E_WAKE, NULL };
    f->e_listen = (endpoint){ E_LISTEN, NULL };
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    f->listen_fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (f->listen_fd < 0 ||
        setsockopt(f->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        (addr->sa_family == AF_INET6 &&
         setsockopt(f->listen_fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) != 0) ||
        bind(f->listen_fd, addr, addr_len) != 0 || listen(f->listen_fd, SOMAXCONN) != 0) {
        snprintf(msg, msg_len, "%s", strerror(errno));
        goto fail;
    }
    struct sockaddr_storage bound;
    socklen_t bound_len = sizeof bound;
    if (getsockname(f->listen_fd, (struct sockaddr *)&bound, &bound_len) != 0) {
        snprintf(msg, msg_len, "%s", strerror(errno));
        goto fail;
    }
    f->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                : ((struct sockaddr_in *)&bound)->sin_port);
    f->ep = epoll_create1(EPOLL_CLOEXEC);
    f->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event we = { .events = EPOLLIN, .data.ptr = &f->e_wake };
    struct epoll_event le = { .events = EPOLLIN, .data.ptr = &f->e_listen };
    if (f->ep < 0 || f->wake < 0 || epoll_ctl(f->ep, EPOLL_CTL_ADD, f->wake, &we) != 0 ||
        epoll_ctl(f->ep, EPOLL_CTL_ADD, f->listen_fd, &le) != 0) {
        snprintf(msg, msg_len, "cannot set up the relay: %s", strerror(errno));
        goto fail;
    }
    return f;
fail:
    tc__front_destroy(f, 0);
    return NULL;
}

int tc__front_port(const tc__front *f)
{
    return f->port;
}

bool tc__front_start(tc__front *f)
{
    f->started = pthread_create(&f->thread, NULL, relay, f) == 0;
    return f->started;
}

void tc__front_quiesce(tc__front *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->mu);
    f->quiesce = true;
    if (f->started) {
        wake(f);
        while (!f->quiesced)
            pthread_cond_wait(&f->cv, &f->mu);
    }
    pthread_mutex_unlock(&f->mu);
}

void tc__front_destroy(tc__front *f, double drain_s)
{
    if (!f)
        return;
    if (f->started) {
        pthread_mutex_lock(&f->mu);
        f->quiesce = f->stop = true;
        f->drain_until = tc_host_seconds() + drain_s;
        pthread_mutex_unlock(&f->mu);
        wake(f);
        pthread_join(f->thread, NULL);
    }
    if (f->listen_fd >= 0)
        close(f->listen_fd);
    if (f->wake >= 0)
        close(f->wake);
    if (f->ep >= 0)
        close(f->ep);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    free(f);
}

/* Request deadlines: a list of open connections, each with the time its current request must
 * have arrived by, and a watchdog thread that shuts down the sockets that miss it. */
#define _GNU_SOURCE
#include "server/watch.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "runtime/host.h"

struct tc__watch_conn {
    int fd;
    double deadline; /* seconds (tc_host_seconds); 0: none (the request is being answered) */
    bool expired;    /* the socket was shut down */
    tc__watch_conn *prev, *next;
};

struct tc__watch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    double deadline_s;
    bool stop;
    tc__watch_conn *conns;
    uint64_t expired;
};

/* The watchdog: four times a second, shut down every socket whose request is late. The
 * socket stays open (the library closes it), so its descriptor cannot be reused meanwhile. */
static void *watchdog(void *arg)
{
    tc__watch *w = arg;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        double now = tc_host_seconds();
        for (tc__watch_conn *k = w->conns; k; k = k->next)
            if (k->deadline > 0 && now >= k->deadline && !k->expired) {
                shutdown(k->fd, SHUT_RDWR);
                k->expired = true;
                w->expired++;
            }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250 * 1000 * 1000;
        ts.tv_sec += ts.tv_nsec / 1000000000;
        ts.tv_nsec %= 1000000000;
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

tc__watch *tc__watch_create(double deadline_s)
{
    tc__watch *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->deadline_s = deadline_s;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, watchdog, w) != 0) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        free(w);
        return NULL;
    }
    return w;
}

void tc__watch_destroy(tc__watch *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    while (w->conns) {
        tc__watch_conn *k = w->conns;
        w->conns = k->next;
        free(k);
    }
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}

tc__watch_conn *tc__watch_open(tc__watch *w, int fd)
{
    tc__watch_conn *k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    k->fd = fd;
    pthread_mutex_lock(&w->mu);
    k->deadline = tc_host_seconds() + w->deadline_s;
    k->next = w->conns;
    if (w->conns)
        w->conns->prev = k;
    w->conns = k;
    pthread_mutex_unlock(&w->mu);
    return k;
}

void tc__watch_close(tc__watch *w, tc__watch_conn *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&w->mu);
    if (k->prev)
        k->prev->next = k->next;
    else
        w->conns = k->next;
    if (k->next)
        k->next->prev = k->prev;
    pthread_mutex_unlock(&w->mu);
    free(k);
}

bool tc__watch_received(tc__watch *w, tc__watch_conn *k)
{
    if (!k)
        return true;
    pthread_mutex_lock(&w->mu);
    k->deadline = 0;
    bool ok = !k->expired;
    pthread_mutex_unlock(&w->mu);
    return ok;
}

void tc__watch_next(tc__watch *w, tc__watch_conn *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&w->mu);
    if (!k->expired)
        k->deadline = tc_host_seconds() + w->deadline_s;
    pthread_mutex_unlock(&w->mu);
}

uint64_t tc__watch_expired(tc__watch *w)
{
    pthread_mutex_lock(&w->mu);
    uint64_t n = w->expired;
    pthread_mutex_unlock(&w->mu);
    return n;
}

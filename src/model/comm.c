/* Collectives between tensor-parallel ranks (comm.h): the dispatch, and the in-process group
 * that stands in for NCCL on the CPU backend (ranks on threads, tensors in host memory). */
#include "model/comm.h"
#include <pthread.h>
#include <string.h>
#include "ops/internal.h"
#include "runtime/error.h"
#include "runtime/host.h"
#include "model/shard.h"

tc_status tc_comm_all_reduce_sum(tc_comm *c, tc_tensor *t)
{
    return c->ops->all_reduce_sum(c, t);
}

tc_status tc_comm_all_gather(tc_comm *c, const tc_tensor *send, tc_tensor *recv)
{
    return c->ops->all_gather(c, send, recv);
}

void tc_comm_abort(tc_comm *c)
{
    if (c)
        c->ops->abort(c);
}

void tc_comm_destroy(tc_comm *c)
{
    if (c)
        c->ops->destroy(c);
}

/* ---------------------------------------------------------------- in-process group */

/* What the ranks share: a barrier that an abort breaks, and each rank's published buffers. */
typedef struct group {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int n, arrived, refs;
    uint64_t phase; /* barriers passed */
    bool aborted;
    void *buf[TC__SHARD_MAX_RANKS];        /* each rank's tensor of the current collective */
    const void *part[TC__SHARD_MAX_RANKS]; /* all-reduce: each rank's sums of its share */
    size_t bytes[TC__SHARD_MAX_RANKS];     /* each rank's tensor bytes, checked equal */
    int dtype[TC__SHARD_MAX_RANKS];
} group;

typedef struct local_comm {
    tc_comm base;
    group *g;
    float *sums; /* this rank's share of an all-reduce, summed */
    size_t sums_len;
} local_comm;

static tc_status aborted(const char *op)
{
    return tc_set_error(TC_ERR_CANCELLED, op, "another rank left the collective (aborted)");
}

/* Wait until every rank has arrived; an error once the group is aborted. */
static tc_status barrier(group *g, const char *op)
{
    pthread_mutex_lock(&g->lock);
    if (!g->aborted) {
        uint64_t phase = g->phase;
        if (++g->arrived == g->n) {
            g->arrived = 0;
            g->phase++;
            pthread_cond_broadcast(&g->cv);
        } else {
            while (g->phase == phase && !g->aborted)
                pthread_cond_wait(&g->cv, &g->lock);
        }
    }
    bool failed = g->aborted;
    pthread_mutex_unlock(&g->lock);
    return failed ? aborted(op) : TC_OK;
}

static void local_abort(tc_comm *c)
{
    group *g = ((local_comm *)c)->g;
    pthread_mutex_lock(&g->lock);
    g->aborted = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->lock);
}

/* Publish this rank's tensor and wait for the others'; every rank's must match its own. */
static tc_status publish(local_comm *lc, const tc_tensor *t, const char *op)
{
    group *g = lc->g;
    int r = lc->base.rank;
    if (!tc_tensor_is_contiguous(t) || tc_backend_get_kind(t->backend) != TC_BACKEND_CPU) {
        local_abort(&lc->base);
        return tc_set_error(TC_ERR_UNSUPPORTED, op,
                            "the in-process group takes contiguous host tensors");
    }
    g->buf[r] = t->data;
    g->bytes[r] = tc_tensor_bytes(t);
    g->dtype[r] = (int)t->dtype;
    TC_TRY(barrier(g, op));
    for (int i = 0; i < g->n; i++)
        if (g->bytes[i] != g->bytes[r] || g->dtype[i] != g->dtype[r]) {
            local_abort(&lc->base);
            return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                                "rank %d passed %zu bytes of %s, rank %d %zu bytes of %s", r,
                                g->bytes[r], tc_dtype_name((tc_dtype)g->dtype[r]), i, g->bytes[i],
                                tc_dtype_name((tc_dtype)g->dtype[i]));
        }
    return TC_OK;
}

static float load(tc_dtype dt, const void *p, size_t i)
{
    if (dt == TC_DTYPE_F32)
        return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return dt == TC_DTYPE_BF16 ? tc__bf16_to_f32(h) : tc__f16_to_f32(h);
}

/* Each rank sums its share of the elements over the ranks, in rank order (the same order for
 * every element, so every rank ends with the same bits); then each rank copies every share. */
static tc_status local_all_reduce_sum(tc_comm *c, tc_tensor *t)
{
    const char *op = "tc_comm_all_reduce_sum";
    local_comm *lc = (local_comm *)c;
    group *g = lc->g;
    tc_dtype dt = t->dtype;
    if (dt != TC_DTYPE_F32 && dt != TC_DTYPE_F16 && dt != TC_DTYPE_BF16) {
        local_abort(c);
        return tc_set_error(TC_ERR_UNSUPPORTED, op, "cannot sum %s tensors", tc_dtype_name(dt));
    }
    size_t n = (size_t)tc_tensor_numel(t), lo = n * (size_t)c->rank / (size_t)g->n,
           hi = n * (size_t)(c->rank + 1) / (size_t)g->n;
    /* After the barrier: no rank still copies the previous all-reduce's sums. */
    TC_TRY(publish(lc, t, op));
    if (hi - lo > lc->sums_len) {
        float *s = tc_host_realloc(lc->sums, (hi - lo) * sizeof(float));
        if (!s) {
            local_abort(c);
            return tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no host memory for %zu sums", hi - lo);
        }
        lc->sums = s;
        lc->sums_len = hi - lo;
    }
    for (size_t i = lo; i < hi; i++) {
        float s = 0;
        for (int r = 0; r < g->n; r++)
            s += load(dt, g->buf[r], i);
        lc->sums[i - lo] = s;
    }
    g->part[c->rank] = lc->sums;
    TC_TRY(barrier(g, op)); /* every share summed; nobody has written yet */
    for (int r = 0; r < g->n; r++) {
        size_t a = n * (size_t)r / (size_t)g->n, b = n * (size_t)(r + 1) / (size_t)g->n;
        const float *s = g->part[r];
        if (dt == TC_DTYPE_F32)
            memcpy((float *)t->data + a, s, (b - a) * sizeof(float));
        else
            for (size_t i = a; i < b; i++)
                ((uint16_t *)t->data)[i] =
                    dt == TC_DTYPE_BF16 ? tc__f32_to_bf16(s[i - a]) : tc__f32_to_f16(s[i - a]);
    }
    /* The shares are read until every rank is here: the next collective's first barrier. */
    return TC_OK;
}

static tc_status local_all_gather(tc_comm *c, const tc_tensor *send, tc_tensor *recv)
{
    const char *op = "tc_comm_all_gather";
    local_comm *lc = (local_comm *)c;
    group *g = lc->g;
    size_t bytes = tc_tensor_bytes(send);
    if (recv->dtype != send->dtype || !tc_tensor_is_contiguous(recv) ||
        tc_tensor_bytes(recv) != bytes * (size_t)g->n) {
        local_abort(c);
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "the receiving tensor must hold %d times the sent one", g->n);
    }
    TC_TRY(publish(lc, send, op));
    for (int r = 0; r < g->n; r++)
        memcpy((char *)recv->data + (size_t)r * bytes, g->buf[r], bytes);
    /* Senders keep their tensors unchanged until every rank has copied them. */
    return barrier(g, op);
}

static void local_destroy(tc_comm *c)
{
    local_comm *lc = (local_comm *)c;
    group *g = lc->g;
    pthread_mutex_lock(&g->lock);
    bool last = --g->refs == 0;
    pthread_mutex_unlock(&g->lock);
    if (last) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->lock);
        tc_host_free(g);
    }
    tc_host_free(lc->sums);
    tc_host_free(lc);
}

static const tc_comm_ops local_ops = {
    .all_reduce_sum = local_all_reduce_sum,
    .all_gather = local_all_gather,
    .abort = local_abort,
    .destroy = local_destroy,
};

tc_status tc_comm_create_local(int n, tc_comm **ranks)
{
    const char *op = "tc_comm_create_local";
    if (n < 1 || n > TC__SHARD_MAX_RANKS)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "%d ranks: 1 to %d are supported", n,
                            TC__SHARD_MAX_RANKS);
    group *g = tc_host_calloc(1, sizeof *g);
    if (!g)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no host memory");
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->n = n;
    for (int r = 0; r < n; r++) {
        local_comm *lc = tc_host_calloc(1, sizeof *lc);
        if (!lc) {
            for (int i = 0; i < r; i++) {
                tc_comm_destroy(ranks[i]);
                ranks[i] = NULL;
            }
            if (r == 0) {
                pthread_cond_destroy(&g->cv);
                pthread_mutex_destroy(&g->lock);
                tc_host_free(g);
            }
            return tc_set_error(TC_ERR_OUT_OF_MEMORY, op, "no host memory");
        }
        lc->base = (tc_comm){ .ops = &local_ops, .rank = r, .n_ranks = n };
        lc->g = g;
        g->refs++;
        ranks[r] = &lc->base;
    }
    return TC_OK;
}

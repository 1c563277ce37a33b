/* Collectives between tensor-parallel ranks over NCCL (comm.h): one communicator per rank, the
 * ranks threads of this process with a CUDA device each, every collective enqueued on the
 * rank's stream over its device tensors. libnccl.so.2 is loaded by the first call here. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/comm.h"
#include "model/shard.h"
#include "ops/internal.h"
#include "runtime/error.h"
#include "runtime/host.h"
#include "runtime/runtime.h"
#include "tc_nccl.h"

/* What the ranks of one group share: an abort reaches every rank's communicator, since a
 * rank's kernels wait for its peers' data and only aborting theirs too frees them. */
typedef struct nccl_group {
    pthread_mutex_t lock;
    int refs;
    bool aborted;
    ncclComm_t comm[TC__SHARD_MAX_RANKS];
} nccl_group;

typedef struct nccl_comm {
    tc_comm base;
    nccl_group *g;
    ncclComm_t nc;
    tc_backend *backend; /* the rank's: its tensors live there */
    cudaStream_t stream; /* the rank's stream: collectives are ordered with its ops */
} nccl_comm;

/* Put NCCL's own words (ncclGetLastError) after the status's, which the failing call set. */
static tc_status nccl_failed(tc_status st, ncclComm_t nc, const char *op)
{
    char words[256];
    snprintf(words, sizeof words, "%s", tc_last_error());
    const char *detail = NULL;
    if (tc_ncclGetLastError(nc, &detail) == TC_OK && detail && *detail)
        return tc_set_error(st, op, "%s (NCCL: %s)", words, detail);
    return tc_set_error(st, op, "%s", words);
}

static bool nccl_type(tc_dtype dt, ncclDataType_t *out)
{
    switch (dt) {
    case TC_DTYPE_F32: *out = ncclFloat32; return true;
    case TC_DTYPE_F16: *out = ncclFloat16; return true;
    case TC_DTYPE_BF16: *out = ncclBfloat16; return true;
    default: return false;
    }
}

static void nccl_abort(tc_comm *c)
{
    nccl_group *g = ((nccl_comm *)c)->g;
    pthread_mutex_lock(&g->lock);
    if (!g->aborted) {
        g->aborted = true;
        for (int r = 0; r < c->n_ranks; r++)
            if (g->comm[r] && tc_ncclCommAbort(g->comm[r]) != TC_OK)
                TC_WARN("tc_comm_abort: rank %d: %s", r, tc_last_error());
    }
    pthread_mutex_unlock(&g->lock);
}

/* A tensor that this rank's collectives take: its own backend's, contiguous, a type NCCL sums. */
static tc_status usable(nccl_comm *nc, const tc_tensor *t, ncclDataType_t *type, const char *op)
{
    *type = ncclFloat32; /* (set on every path: gcc -O3 cannot follow the error returns) */
    bool aborted;
    pthread_mutex_lock(&nc->g->lock);
    aborted = nc->g->aborted;
    pthread_mutex_unlock(&nc->g->lock);
    if (aborted)
        return tc_set_error(TC_ERR_CANCELLED, op, "the communicators were aborted");
    if (t->backend != nc->backend)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "rank %d's tensor is not on the rank's backend", nc->base.rank);
    if (!tc_tensor_is_contiguous(t))
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "the tensor must be contiguous");
    if (!nccl_type(t->dtype, type))
        return tc_set_error(TC_ERR_UNSUPPORTED, op, "NCCL collectives of %s tensors",
                            tc_dtype_name(t->dtype));
    return TC_OK;
}

static tc_status nccl_all_reduce_sum(tc_comm *c, tc_tensor *t)
{
    const char *op = "tc_comm_all_reduce_sum";
    nccl_comm *nc = (nccl_comm *)c;
    ncclDataType_t type;
    TC_TRY(usable(nc, t, &type, op));
    tc_status st = tc_ncclAllReduce(t->data, t->data, (size_t)tc_tensor_numel(t), type, ncclSum,
                                    nc->nc, nc->stream);
    return st == TC_OK ? TC_OK : nccl_failed(st, nc->nc, op);
}

static tc_status nccl_all_gather(tc_comm *c, const tc_tensor *send, tc_tensor *recv)
{
    const char *op = "tc_comm_all_gather";
    nccl_comm *nc = (nccl_comm *)c;
    ncclDataType_t type, rtype;
    TC_TRY(usable(nc, send, &type, op));
    TC_TRY(usable(nc, recv, &rtype, op));
    int64_t n = tc_tensor_numel(send);
    if (recv->dtype != send->dtype || tc_tensor_numel(recv) != n * c->n_ranks)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                            "the receiving tensor must hold %d times the sent one", c->n_ranks);
    tc_status st = tc_ncclAllGather(send->data, recv->data, (size_t)n, type, nc->nc, nc->stream);
    return st == TC_OK ? TC_OK : nccl_failed(st, nc->nc, op);
}

static void nccl_destroy(tc_comm *c)
{
    nccl_comm *nc = (nccl_comm *)c;
    nccl_group *g = nc->g;
    pthread_mutex_lock(&g->lock);
    /* An aborted communicator is already freed (ncclCommAbort). */
    if (!g->aborted && nc->nc && tc_ncclCommDestroy(nc->nc) != TC_OK)
        TC_WARN("tc_comm_destroy: rank %d: %s", c->rank, tc_last_error());
    g->comm[c->rank] = NULL;
    bool last = --g->refs == 0;
    pthread_mutex_unlock(&g->lock);
    if (last) {
        pthread_mutex_destroy(&g->lock);
        tc_host_free(g);
    }
    tc_host_free(nc);
}

static const tc_comm_ops nccl_ops = {
    .all_reduce_sum = nccl_all_reduce_sum,
    .all_gather = nccl_all_gather,
    .abort = nccl_abort,
    .destroy = nccl_destroy,
};

tc_status tc__comm_nccl_wrap(int n_ranks, void *const *nccl_comms, tc_backend *const *backends,
                             void *const *streams, tc_comm **ranks)
{
    nccl_group *g = tc_host_calloc(1, sizeof *g);
    if (!g)
        return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_comm_create_nccl", "no host memory");
    pthread_mutex_init(&g->lock, NULL);
    for (int r = 0; r < n_ranks; r++) {
        nccl_comm *nc = tc_host_calloc(1, sizeof *nc);
        if (!nc) {
            /* The handles made so far go; the NCCL communicators stay the caller's. */
            for (int i = 0; i < r; i++) {
                tc_host_free(ranks[i]);
                ranks[i] = NULL;
            }
            pthread_mutex_destroy(&g->lock);
            tc_host_free(g);
            return tc_set_error(TC_ERR_OUT_OF_MEMORY, "tc_comm_create_nccl", "no host memory");
        }
        nc->base = (tc_comm){ .ops = &nccl_ops, .rank = r, .n_ranks = n_ranks };
        nc->g = g;
        nc->nc = nccl_comms[r];
        nc->backend = backends[r];
        nc->stream = streams[r];
        g->comm[r] = nc->nc;
        g->refs++;
        ranks[r] = &nc->base;
    }
    return TC_OK;
}

/* NVLink SHARP (NVLS) would have NCCL create multicast objects (cuMulticastCreate), which the
 * GPU hosts we run on forbid: it is turned off unless the user asked for it. */
static void nvls_off(void)
{
    setenv("NCCL_NVLS_ENABLE", "0", 0);
}

tc_status tc_comm_create_nccl(int n, tc_backend *const *backends, tc_comm **ranks)
{
    const char *op = "tc_comm_create_nccl";
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    if (n < 1 || n > TC__SHARD_MAX_RANKS)
        return tc_set_error(TC_ERR_INVALID_ARGUMENT, op, "%d ranks: 1 to %d are supported", n,
                            TC__SHARD_MAX_RANKS);
    int version = 0;
    tc_status st = tc_ncclGetVersion(&version);
    if (st != TC_OK)
        return tc_set_error(st, op,
                            "NCCL is needed for tensor parallelism on GPUs: %s (install it, e.g. "
                            "pip install nvidia-nccl-cu13, or name libnccl.so.2 in "
                            "THINCUDA_LIBNCCL)",
                            tc_last_error());
    pthread_once(&once, nvls_off);
    for (int r = 0; r < n; r++)
        if (!backends[r] || tc_backend_get_kind(backends[r]) != TC_BACKEND_CUDA)
            return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                                "rank %d: NCCL communicators need a CUDA backend per rank", r);
    for (int r = 0; r < n; r++)
        for (int i = 0; i < r; i++) {
            int d = tc_context_ordinal(tc_backend_context(backends[r]));
            if (tc_context_ordinal(tc_backend_context(backends[i])) == d)
                return tc_set_error(TC_ERR_INVALID_ARGUMENT, op,
                                    "ranks %d and %d are both on GPU %d: NCCL needs a device per "
                                    "rank",
                                    i, r, d);
        }
    ncclUniqueId id;
    TC_TRY(tc_ncclGetUniqueId(&id));
    /* One thread initialises every rank: inside a group, each ncclCommInitRank takes the device
     * of the context current at its call and none waits for the others (NCCL's docs,
     * "Creating a communicator with options"; ncclCommInitAll does the same). */
    ncclComm_t comms[TC__SHARD_MAX_RANKS] = { 0 };
    void *handles[TC__SHARD_MAX_RANKS], *streams[TC__SHARD_MAX_RANKS];
    TC_TRY(tc_ncclGroupStart());
    st = TC_OK;
    for (int r = 0; r < n && st == TC_OK; r++) {
        st = tc_context_make_current(tc_backend_context(backends[r]));
        if (st == TC_OK) {
            st = tc_ncclCommInitRank(&comms[r], n, id, r);
            if (st != TC_OK)
                st = nccl_failed(st, NULL, op);
        }
    }
    tc_status end = tc_ncclGroupEnd();
    if (st == TC_OK && end != TC_OK)
        st = nccl_failed(end, comms[0], op);
    if (st != TC_OK) {
        char words[512];
        snprintf(words, sizeof words, "%s", tc_last_error());
        for (int r = 0; r < n; r++)
            if (comms[r])
                (void)tc_ncclCommAbort(comms[r]);
        return tc_set_error(st, op, "%d ranks on NCCL %d.%d.%d: %s", n, version / 10000,
                            version / 100 % 100, version % 100, words);
    }
    for (int r = 0; r < n; r++) {
        handles[r] = comms[r];
        streams[r] = tc_stream_handle(tc_backend_stream(backends[r]));
    }
    st = tc__comm_nccl_wrap(n, handles, backends, streams, ranks);
    if (st != TC_OK)
        for (int r = 0; r < n; r++)
            (void)tc_ncclCommDestroy(comms[r]);
    return st;
}

/* A stand-in for libnccl.so.2 in tests without a GPU: communicators of any size that record
 * what they were asked for, so that tests check every argument arrives in place and every
 * ncclResult_t comes back as a tc_status. ncclCommShrink is left out on purpose: a symbol the
 * library lacks. */
#include <string.h>

#include <nccl.h>

#define EXPORT __attribute__((visibility("default")))

/* What the tests read back (dlsym "fake_nccl_stats_v"). */
typedef struct fake_nccl_stats {
    int unique_ids;       /* ncclGetUniqueId calls */
    int comms_alive;      /* created and not yet destroyed */
    int nranks, rank;     /* ncclCommInitRank's arguments */
    int id_intact;        /* the unique id arrived by value, byte for byte */
    const void *sendbuff; /* ncclAllReduce's arguments */
    void *recvbuff;
    size_t count;
    int datatype, op;
    const void *comm;
    const void *stream;
    int group_depth; /* ncclGroupStart minus ncclGroupEnd */
    int groups_ended;
    int group_end_result; /* what the next ncclGroupEnd returns (0: success) */
    /* Appended for the model layer's NCCL communicator (tests/model/test_comm_nccl.c). */
    int next_result; /* what the next collective returns (0: success) */
    int all_reduces, all_gathers, aborts;
    const void *gather_send; /* ncclAllGather's arguments */
    void *gather_recv;
    size_t gather_count;
    int gather_datatype;
    const void *gather_comm, *gather_stream;
} fake_nccl_stats;

EXPORT fake_nccl_stats fake_nccl_stats_v;

/* A communicator: its place in the clique. */
struct ncclComm {
    int nranks, rank;
};

static struct ncclComm comms[8];

/* The id's bytes: 0, 1, 2, ... 127 plus a seed, so that a truncated copy shows. */
static void fill_id(ncclUniqueId *id, int seed)
{
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++)
        id->internal[i] = (char)(i + seed);
}

EXPORT ncclResult_t ncclGetVersion(int *version)
{
    if (!version)
        return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    if (!id)
        return ncclInvalidArgument;
    fill_id(id, 7);
    fake_nccl_stats_v.unique_ids++;
    return ncclSuccess;
}

EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    fake_nccl_stats_v.nranks = nranks;
    fake_nccl_stats_v.rank = rank;
    ncclUniqueId want;
    fill_id(&want, 7);
    fake_nccl_stats_v.id_intact = memcmp(&want, &id, sizeof id) == 0;
    if (!comm || nranks < 1 || nranks > 8 || rank < 0 || rank >= nranks)
        return ncclInvalidArgument;
    comms[rank].nranks = nranks;
    comms[rank].rank = rank;
    *comm = &comms[rank];
    fake_nccl_stats_v.comms_alive++;
    return ncclSuccess;
}

EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    if (!comm || !count)
        return ncclInvalidArgument;
    *count = comm->nranks;
    return ncclSuccess;
}

EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    if (!comm || !rank)
        return ncclInvalidArgument;
    *rank = comm->rank;
    return ncclSuccess;
}

EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async_error)
{
    if (!comm || !async_error)
        return ncclInvalidArgument;
    *async_error = ncclInProgress; /* as a non-blocking communicator still connecting */
    return ncclSuccess;
}

EXPORT ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                  ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                  cudaStream_t stream)
{
    fake_nccl_stats_v.sendbuff = sendbuff;
    fake_nccl_stats_v.recvbuff = recvbuff;
    fake_nccl_stats_v.count = count;
    fake_nccl_stats_v.datatype = (int)datatype;
    fake_nccl_stats_v.op = (int)op;
    fake_nccl_stats_v.comm = comm;
    fake_nccl_stats_v.stream = stream;
    fake_nccl_stats_v.all_reduces++;
    if (!comm || datatype >= ncclNumTypes || op >= ncclNumOps)
        return ncclInvalidArgument;
    ncclResult_t r = (ncclResult_t)fake_nccl_stats_v.next_result;
    fake_nccl_stats_v.next_result = 0;
    return r;
}

EXPORT ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                  ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    fake_nccl_stats_v.gather_send = sendbuff;
    fake_nccl_stats_v.gather_recv = recvbuff;
    fake_nccl_stats_v.gather_count = sendcount;
    fake_nccl_stats_v.gather_datatype = (int)datatype;
    fake_nccl_stats_v.gather_comm = comm;
    fake_nccl_stats_v.gather_stream = stream;
    fake_nccl_stats_v.all_gathers++;
    if (!comm || datatype >= ncclNumTypes)
        return ncclInvalidArgument;
    ncclResult_t r = (ncclResult_t)fake_nccl_stats_v.next_result;
    fake_nccl_stats_v.next_result = 0;
    return r;
}

/* Frees the communicator as ncclCommDestroy does, without waiting for its work. */
EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    if (!comm || comm->nranks == 0)
        return ncclInvalidArgument;
    comm->nranks = 0;
    fake_nccl_stats_v.comms_alive--;
    fake_nccl_stats_v.aborts++;
    return ncclSuccess;
}

EXPORT const char *ncclGetLastError(ncclComm_t comm)
{
    (void)comm;
    return "fake: peer went away";
}

EXPORT ncclResult_t ncclGroupStart(void)
{
    fake_nccl_stats_v.group_depth++;
    return ncclSuccess;
}

EXPORT ncclResult_t ncclGroupEnd(void)
{
    if (fake_nccl_stats_v.group_depth == 0)
        return ncclInvalidUsage; /* an end without a start */
    fake_nccl_stats_v.group_depth--;
    fake_nccl_stats_v.groups_ended++;
    ncclResult_t r = (ncclResult_t)fake_nccl_stats_v.group_end_result;
    fake_nccl_stats_v.group_end_result = 0;
    return r;
}

EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (!comm || comm->nranks == 0)
        return ncclInvalidArgument;
    comm->nranks = 0;
    fake_nccl_stats_v.comms_alive--;
    return ncclSuccess;
}

EXPORT const char *ncclGetErrorString(ncclResult_t result)
{
    return result == ncclSuccess ? "no error" : "fake error";
}

/* The NCCL wrappers against a stand-in library (fake_nccl.c) loaded through THINCUDA_LIBNCCL:
 * nothing loads it before the first NCCL call, arguments arrive in place (the 128-byte unique
 * id by value included), every ncclResult_t is a tc_status with its name, words and hint, calls
 * are traced. With the argument "missing" the library is absent and each call says why. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tc_cuda.h"
#include "tc_nccl.h"

typedef struct fake_nccl_stats {
    int unique_ids;
    int comms_alive;
    int nranks, rank;
    int id_intact;
    const void *sendbuff;
    void *recvbuff;
    size_t count;
    int datatype, op;
    const void *comm;
    const void *stream;
    int group_depth;
    int groups_ended;
    int group_end_result;
} fake_nccl_stats;

static fake_nccl_stats *stats(void)
{
    void *h = dlopen(getenv("THINCUDA_LIBNCCL"), RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(h);
    fake_nccl_stats *s = dlsym(h, "fake_nccl_stats_v");
    assert_non_null(s);
    dlclose(h);
    return s;
}

/* Whether the library at `path` is loaded in this process (without loading it). */
static int loaded(const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (h)
        dlclose(h);
    return h != NULL;
}

static void nothing_loads_nccl_until_the_first_call(void **state)
{
    (void)state;
    assert_false(loaded(getenv("THINCUDA_LIBNCCL")));
    assert_false(loaded("libnccl.so.2"));
    int version = 0;
    assert_int_equal(tc_ncclGetVersion(&version), TC_OK);
    assert_int_equal(version, NCCL_VERSION_CODE);
    assert_true(loaded(getenv("THINCUDA_LIBNCCL")));
    assert_false(loaded("libnccl.so.2")); /* the override replaces the soname */
    assert_true(tc_available("ncclAllReduce"));
}

static void a_communicator_is_made_used_and_destroyed_with_every_argument_in_place(void **state)
{
    (void)state;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    assert_int_equal(tc_ncclGetUniqueId(&id), TC_OK);
    assert_int_equal(stats()->unique_ids, 1);
    assert_int_equal(id.internal[0], 7);
    assert_int_equal(id.internal[NCCL_UNIQUE_ID_BYTES - 1], (char)(NCCL_UNIQUE_ID_BYTES - 1 + 7));

    ncclComm_t comm = NULL;
    assert_int_equal(tc_ncclCommInitRank(&comm, 4, id, 3), TC_OK);
    assert_non_null(comm);
    assert_int_equal(stats()->nranks, 4);
    assert_int_equal(stats()->rank, 3);
    assert_true(stats()->id_intact);
    int n = 0, rank = -1;
    assert_int_equal(tc_ncclCommCount(comm, &n), TC_OK);
    assert_int_equal(tc_ncclCommUserRank(comm, &rank), TC_OK);
    assert_int_equal(n, 4);
    assert_int_equal(rank, 3);

    /* Device pointers and the stream are only passed on: any distinct values do. A driver
     * CUstream is NCCL's cudaStream_t (both struct CUstream_st *). */
    const void *send = (const void *)(uintptr_t)0x7f0000001000u;
    void *recv = (void *)(uintptr_t)0x7f0000802000u;
    CUstream stream = (CUstream)(uintptr_t)0x5151u;
    assert_int_equal(tc_ncclGroupStart(), TC_OK);
    assert_int_equal(stats()->group_depth, 1);
    assert_int_equal(tc_ncclAllReduce(send, recv, 1000003, ncclBfloat16, ncclSum, comm, stream),
                     TC_OK);
    assert_int_equal(tc_ncclGroupEnd(), TC_OK);
    assert_int_equal(stats()->group_depth, 0);
    assert_int_equal(stats()->groups_ended, 1);
    assert_ptr_equal(stats()->sendbuff, send);
    assert_ptr_equal(stats()->recvbuff, recv);
    assert_int_equal(stats()->count, 1000003);
    assert_int_equal(stats()->datatype, ncclBfloat16);
    assert_int_equal(stats()->op, ncclSum);
    assert_ptr_equal(stats()->comm, comm);
    assert_ptr_equal(stats()->stream, stream);

    ncclResult_t async = ncclSuccess;
    assert_int_equal(tc_ncclCommGetAsyncError(comm, &async), TC_OK);
    assert_int_equal(async, ncclInProgress);
    const char *words = NULL;
    assert_int_equal(tc_ncclGetErrorString(ncclInvalidUsage, &words), TC_OK);
    assert_string_equal(words, "fake error");

    assert_int_equal(tc_ncclCommDestroy(comm), TC_OK);
    assert_int_equal(stats()->comms_alive, 0);
}

static void nccl_failures_are_nccl_statuses_with_words(void **state)
{
    (void)state;
    ncclUniqueId id;
    assert_int_equal(tc_ncclGetUniqueId(&id), TC_OK);
    ncclComm_t comm = NULL;
    tc_status st = tc_ncclCommInitRank(&comm, 2, id, 2);
    assert_int_equal(st, TC_ncclInvalidArgument);
    assert_int_equal(tc_status_lib(st), TC_LIB_NCCL);
    assert_int_equal(tc_status_code(st), ncclInvalidArgument);
    assert_string_equal(tc_lib_name(TC_LIB_NCCL), "NCCL");
    assert_string_equal(tc_status_name(st), "ncclInvalidArgument");
    assert_string_equal(tc_status_string(st), "an argument passed to NCCL is invalid");
    assert_non_null(strstr(tc_status_hint(st), "NCCL_DEBUG"));
    assert_string_equal(tc_last_error_function(), "ncclCommInitRank");
    assert_non_null(strstr(tc_last_error(), "ncclCommInitRank: ncclInvalidArgument"));
    assert_int_equal(tc_ncclGroupEnd(), TC_ncclInvalidUsage);
    assert_string_equal(tc_last_error_function(), "ncclGroupEnd");

    /* Every code of ncclResult_t but success, through one call. */
    static const struct {
        ncclResult_t code;
        tc_status status;
        const char *name;
    } codes[] = {
        { ncclUnhandledCudaError, TC_ncclUnhandledCudaError, "ncclUnhandledCudaError" },
        { ncclSystemError, TC_ncclSystemError, "ncclSystemError" },
        { ncclInternalError, TC_ncclInternalError, "ncclInternalError" },
        { ncclInvalidArgument, TC_ncclInvalidArgument, "ncclInvalidArgument" },
        { ncclInvalidUsage, TC_ncclInvalidUsage, "ncclInvalidUsage" },
        { ncclRemoteError, TC_ncclRemoteError, "ncclRemoteError" },
        { ncclInProgress, TC_ncclInProgress, "ncclInProgress" },
    };
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        assert_int_equal(tc_ncclGroupStart(), TC_OK);
        stats()->group_end_result = codes[i].code;
        st = tc_ncclGroupEnd();
        assert_int_equal(st, codes[i].status);
        assert_int_equal(st, TC_STATUS_MAKE(TC_LIB_NCCL, codes[i].code));
        assert_string_equal(tc_status_name(st), codes[i].name);
        assert_true(strlen(tc_status_string(st)) > 10);
        assert_non_null(tc_status_hint(st));
        assert_false(tc_status_is_sticky(st));
    }
    /* ncclNumResults counts the codes: it is no status. */
    assert_non_null(strstr(tc_status_name(TC_STATUS_MAKE(TC_LIB_NCCL, ncclNumResults)), "unknown"));

    /* A function this library lacks is a status, not a crash. */
    ncclComm_t smaller = NULL;
    int exclude[1] = { 0 };
    st = tc_ncclCommShrink(comm, exclude, 1, &smaller, NULL, NCCL_SHRINK_DEFAULT);
    assert_int_equal(st, TC_ERR_SYMBOL_NOT_FOUND);
    assert_non_null(strstr(tc_last_error(), "ncclCommShrink"));
    assert_false(tc_available("ncclCommShrink"));
}

static void traced_calls(void)
{
    tc_set_trace(true);
    ncclComm_t comm = NULL;
    ncclUniqueId id;
    tc_ncclGetUniqueId(&id);
    tc_ncclCommInitRank(&comm, 2, id, 1);
    tc_ncclAllReduce((const void *)(uintptr_t)0x1000u, (void *)(uintptr_t)0x2000u, 64, ncclFloat32,
                     ncclMax, comm, NULL);
    tc_ncclCommInitRank(&comm, 2, id, 5);
    tc_set_trace(false);
    tc_ncclCommDestroy(comm);
}

/* Run fn with stderr captured into buf. */
static void capture_stderr(void (*fn)(void), char *buf, size_t cap)
{
    fflush(stderr);
    int saved = dup(2);
    FILE *tmp = tmpfile();
    assert_non_null(tmp);
    dup2(fileno(tmp), 2);
    fn();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(buf, 1, cap - 1, tmp);
    buf[n] = '\0';
    fclose(tmp);
}

static void nccl_calls_are_traced_with_names_of_their_enums(void **state)
{
    (void)state;
    char buf[4096];
    capture_stderr(traced_calls, buf, sizeof buf);
    assert_non_null(strstr(buf, "[thincuda] ncclGetUniqueId(uniqueId=0x"));
    assert_non_null(strstr(buf, "[thincuda] ncclCommInitRank(comm=0x"));
    assert_non_null(strstr(buf, "nranks=2, commId={...}, rank=1) -> TC_OK {*comm=0x"));
    assert_non_null(strstr(buf, "[thincuda] ncclAllReduce(sendbuff=0x1000, recvbuff=0x2000, "
                                "count=64, datatype=ncclFloat32, op=ncclMax, comm=0x"));
    assert_non_null(strstr(buf, "stream=NULL) -> TC_OK\n"));
    assert_non_null(strstr(buf, "rank=5) -> ncclInvalidArgument\n"));
    int lines = 0;
    for (const char *c = buf; *c; c++)
        lines += *c == '\n';
    assert_int_equal(lines, 4); /* tracing off: ncclCommDestroy printed nothing */
}

static void without_libnccl_each_call_says_why(void **state)
{
    (void)state;
    int version = 0;
    assert_int_equal(tc_ncclGetVersion(&version), TC_ERR_LIBRARY_NOT_FOUND);
    assert_string_equal(tc_last_error_function(), "ncclGetVersion");
    assert_non_null(strstr(tc_last_error(), "THINCUDA_LIBNCCL"));
    assert_non_null(strstr(tc_last_error(), getenv("THINCUDA_LIBNCCL")));
    assert_int_equal(tc_ncclGroupStart(), TC_ERR_LIBRARY_NOT_FOUND);
    assert_int_equal(tc_resolve("ncclAllReduce"), TC_ERR_LIBRARY_NOT_FOUND);
    assert_false(tc_available("ncclCommDestroy"));
    assert_int_equal(tc_ncclCommDestroy(NULL), TC_ERR_LIBRARY_NOT_FOUND);
}

int main(int argc, char **argv)
{
    if (!getenv("THINCUDA_LIBNCCL")) {
        fprintf(stderr, "set THINCUDA_LIBNCCL to the fake library (or a missing path)\n");
        return 1;
    }
    const struct CMUnitTest present[] = {
        cmocka_unit_test(nothing_loads_nccl_until_the_first_call),
        cmocka_unit_test(a_communicator_is_made_used_and_destroyed_with_every_argument_in_place),
        cmocka_unit_test(nccl_failures_are_nccl_statuses_with_words),
        cmocka_unit_test(nccl_calls_are_traced_with_names_of_their_enums),
    };
    const struct CMUnitTest missing[] = {
        cmocka_unit_test(without_libnccl_each_call_says_why),
    };
    if (argc > 1 && strcmp(argv[1], "missing") == 0)
        return cmocka_run_group_tests(missing, NULL, NULL);
    return cmocka_run_group_tests(present, NULL, NULL);
}

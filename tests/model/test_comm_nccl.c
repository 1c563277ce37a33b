/* The NCCL communicator of the tensor-parallel pass (src/model/comm_nccl.c) against the stand-in
 * libnccl (tests/bindings/fake_nccl.c), no GPU: each collective reaches NCCL with the rank's
 * tensor as both buffers (all-reduce in place), its element count, the NCCL type of its dtype
 * (f32, f16, bf16), ncclSum, the rank's communicator and the rank's stream; other dtypes,
 * another backend's tensors and a wrong receiving size are refused before NCCL; an NCCL failure
 * is a tc_status carrying NCCL's words; an abort reaches every rank's communicator once, later
 * collectives fail, and destroying then frees nothing twice. Creating communicators turns
 * NVLink SHARP off and refuses ranks without a CUDA backend. With the argument "missing" the
 * library is absent and creating says how to get it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/comm.h"
#include "tc_nccl.h"

/* fake_nccl.c's record, the same layout. */
typedef struct fake_nccl_stats {
    int unique_ids, comms_alive, nranks, rank, id_intact;
    const void *sendbuff;
    void *recvbuff;
    size_t count;
    int datatype, op;
    const void *comm, *stream;
    int group_depth, groups_ended, group_end_result;
    int next_result, all_reduces, all_gathers, aborts;
    const void *gather_send;
    void *gather_recv;
    size_t gather_count;
    int gather_datatype;
    const void *gather_comm, *gather_stream;
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

enum { N = 2 };

/* Two ranks on CPU backends (the fake reads no memory) with made-up streams. */
typedef struct group {
    tc_backend *b[N];
    ncclComm_t nc[N];
    tc_comm *c[N];
} group;

static void *const streams[N] = { (void *)0x5151, (void *)0x7272 };

static void make_group(group *g)
{
    memset(g, 0, sizeof *g);
    ncclUniqueId id;
    assert_int_equal(tc_ncclGetUniqueId(&id), TC_OK);
    void *handles[N];
    for (int r = 0; r < N; r++) {
        assert_int_equal(tc_backend_create_cpu(1, &g->b[r]), TC_OK);
        assert_int_equal(tc_ncclCommInitRank(&g->nc[r], N, id, r), TC_OK);
        handles[r] = g->nc[r];
    }
    assert_int_equal(tc__comm_nccl_wrap(N, handles, g->b, streams, g->c), TC_OK);
    for (int r = 0; r < N; r++) {
        assert_int_equal(g->c[r]->rank, r);
        assert_int_equal(g->c[r]->n_ranks, N);
    }
}

static void free_group(group *g)
{
    for (int r = 0; r < N; r++) {
        tc_comm_destroy(g->c[r]);
        tc_backend_destroy(g->b[r]);
    }
}

static void collectives_pass_each_ranks_buffers_counts_types_and_stream(void **state)
{
    (void)state;
    group g;
    make_group(&g);
    fake_nccl_stats *s = stats();
    static const struct {
        tc_dtype dt;
        ncclDataType_t nccl;
    } types[] = { { TC_DTYPE_F32, ncclFloat32 },
                  { TC_DTYPE_F16, ncclFloat16 },
                  { TC_DTYPE_BF16, ncclBfloat16 } };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        for (int r = 0; r < N; r++) {
            tc_tensor t, all;
            assert_int_equal(tc_tensor_init(&t, g.b[r], types[i].dt, TC_SHAPE(3, 5)), TC_OK);
            assert_int_equal(tc_comm_all_reduce_sum(g.c[r], &t), TC_OK);
            assert_ptr_equal(s->sendbuff, t.data);
            assert_ptr_equal(s->recvbuff, t.data);
            assert_int_equal(s->count, 15);
            assert_int_equal(s->datatype, types[i].nccl);
            assert_int_equal(s->op, ncclSum);
            assert_ptr_equal(s->comm, g.nc[r]);
            assert_ptr_equal(s->stream, streams[r]);
            assert_int_equal(tc_tensor_init(&all, g.b[r], types[i].dt, TC_SHAPE(N * 15)), TC_OK);
            assert_int_equal(tc_comm_all_gather(g.c[r], &t, &all), TC_OK);
            assert_ptr_equal(s->gather_send, t.data);
            assert_ptr_equal(s->gather_recv, all.data);
            assert_int_equal(s->gather_count, 15);
            assert_int_equal(s->gather_datatype, types[i].nccl);
            assert_ptr_equal(s->gather_comm, g.nc[r]);
            assert_ptr_equal(s->gather_stream, streams[r]);
            tc_tensor_deinit(&t);
            tc_tensor_deinit(&all);
        }
    free_group(&g);
    assert_int_equal(s->comms_alive, 0);
}

static void tensors_nccl_cannot_take_are_refused_before_nccl(void **state)
{
    (void)state;
    group g;
    make_group(&g);
    fake_nccl_stats *s = stats();
    int reduces = s->all_reduces, gathers = s->all_gathers;
    tc_tensor i32, other, t, small, wide, cols;
    assert_int_equal(tc_tensor_init(&i32, g.b[0], TC_DTYPE_I32, TC_SHAPE(4)), TC_OK);
    assert_int_equal(tc_comm_all_reduce_sum(g.c[0], &i32), TC_ERR_UNSUPPORTED);
    assert_non_null(strstr(tc_last_error(), "i32"));
    assert_int_equal(tc_tensor_init(&other, g.b[1], TC_DTYPE_F32, TC_SHAPE(4)), TC_OK);
    assert_int_equal(tc_comm_all_reduce_sum(g.c[0], &other), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "rank's backend"));
    assert_int_equal(tc_tensor_init(&t, g.b[0], TC_DTYPE_F32, TC_SHAPE(4)), TC_OK);
    assert_int_equal(tc_tensor_init(&small, g.b[0], TC_DTYPE_F32, TC_SHAPE(4)), TC_OK);
    assert_int_equal(tc_comm_all_gather(g.c[0], &t, &small), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "2 times"));
    assert_int_equal(tc_tensor_init(&wide, g.b[0], TC_DTYPE_F32, TC_SHAPE(4, 4)), TC_OK);
    assert_int_equal(tc_tensor_slice(&wide, 1, 0, 2, &cols), TC_OK);
    assert_int_equal(tc_comm_all_reduce_sum(g.c[0], &cols), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "contiguous"));
    assert_int_equal(s->all_reduces, reduces);
    assert_int_equal(s->all_gathers, gathers);
    tc_tensor_deinit(&i32);
    tc_tensor_deinit(&other);
    tc_tensor_deinit(&t);
    tc_tensor_deinit(&small);
    tc_tensor_deinit(&wide);
    free_group(&g);
}

static void an_nccl_failure_is_a_status_with_nccls_words(void **state)
{
    (void)state;
    group g;
    make_group(&g);
    tc_tensor t;
    assert_int_equal(tc_tensor_init(&t, g.b[1], TC_DTYPE_BF16, TC_SHAPE(8)), TC_OK);
    stats()->next_result = ncclRemoteError;
    tc_status st = tc_comm_all_reduce_sum(g.c[1], &t);
    assert_int_equal(tc_status_lib(st), TC_LIB_NCCL);
    assert_int_equal(tc_status_code(st), ncclRemoteError);
    assert_non_null(strstr(tc_last_error(), "tc_comm_all_reduce_sum"));
    assert_non_null(strstr(tc_last_error(), "fake: peer went away"));
    tc_tensor_deinit(&t);
    free_group(&g);
}

static void an_abort_reaches_every_rank_once_and_later_collectives_fail(void **state)
{
    (void)state;
    group g;
    make_group(&g);
    fake_nccl_stats *s = stats();
    int aborts = s->aborts, reduces = s->all_reduces;
    tc_comm_abort(g.c[1]);
    tc_comm_abort(g.c[0]);
    assert_int_equal(s->aborts, aborts + N);
    assert_int_equal(s->comms_alive, 0);
    tc_tensor t;
    assert_int_equal(tc_tensor_init(&t, g.b[0], TC_DTYPE_F32, TC_SHAPE(8)), TC_OK);
    assert_int_equal(tc_comm_all_reduce_sum(g.c[0], &t), TC_ERR_CANCELLED);
    assert_int_equal(s->all_reduces, reduces);
    tc_tensor_deinit(&t);
    free_group(&g); /* no ncclCommDestroy of the aborted communicators */
    assert_int_equal(s->comms_alive, 0);
}

static void creating_turns_nvls_off_and_wants_cuda_backends(void **state)
{
    (void)state;
    unsetenv("NCCL_NVLS_ENABLE");
    tc_backend *b[N];
    tc_comm *c[N] = { 0 };
    for (int r = 0; r < N; r++)
        assert_int_equal(tc_backend_create_cpu(1, &b[r]), TC_OK);
    assert_int_equal(tc_comm_create_nccl(N, b, c), TC_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tc_last_error(), "CUDA backend"));
    assert_null(c[0]);
    const char *nvls = getenv("NCCL_NVLS_ENABLE");
    assert_non_null(nvls);
    assert_string_equal(nvls, "0");
    assert_int_equal(tc_comm_create_nccl(0, b, c), TC_ERR_INVALID_ARGUMENT);
    assert_int_equal(tc_comm_create_nccl(17, b, c), TC_ERR_INVALID_ARGUMENT);
    for (int r = 0; r < N; r++)
        tc_backend_destroy(b[r]);
}

static void without_libnccl_creating_says_how_to_get_it(void **state)
{
    (void)state;
    tc_backend *b;
    tc_comm *c = NULL;
    assert_int_equal(tc_backend_create_cpu(1, &b), TC_OK);
    assert_int_equal(tc_comm_create_nccl(1, &b, &c), TC_ERR_LIBRARY_NOT_FOUND);
    assert_non_null(strstr(tc_last_error(), "NCCL is needed for tensor parallelism"));
    assert_non_null(strstr(tc_last_error(), "THINCUDA_LIBNCCL"));
    assert_null(c);
    tc_backend_destroy(b);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "missing")) {
        const struct CMUnitTest missing[] = {
            cmocka_unit_test(without_libnccl_creating_says_how_to_get_it),
        };
        return cmocka_run_group_tests(missing, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(collectives_pass_each_ranks_buffers_counts_types_and_stream),
        cmocka_unit_test(tensors_nccl_cannot_take_are_refused_before_nccl),
        cmocka_unit_test(an_nccl_failure_is_a_status_with_nccls_words),
        cmocka_unit_test(an_abort_reaches_every_rank_once_and_later_collectives_fail),
        cmocka_unit_test(creating_turns_nvls_off_and_wants_cuda_backends),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Collectives between the ranks of a tensor-parallel model: the two that Megatron-style sharding
 * needs (a sum after each row-parallel product, a gather of the vocabulary-split logits) behind
 * one small interface, so that NCCL (one communicator per GPU) and the in-process stand-in that
 * the CPU backend uses are interchangeable. */
#ifndef TC_COMM_H
#define TC_COMM_H
#include "ops/tensor.h"

typedef struct tc_comm tc_comm;

/* An implementation. Every rank calls each collective, in the same order, with tensors of the
 * same dtype and size (NCCL's rule); a call returns when the rank's result is ready to read in
 * its backend's order. */
typedef struct tc_comm_ops {
    tc_status (*all_reduce_sum)(tc_comm *c, tc_tensor *t);
    tc_status (*all_gather)(tc_comm *c, const tc_tensor *send, tc_tensor *recv);
    void (*abort)(tc_comm *c);
    void (*destroy)(tc_comm *c);
} tc_comm_ops;

/* One rank's handle. */
struct tc_comm {
    const tc_comm_ops *ops;
    int rank, n_ranks;
};

/* t (contiguous, f32/f16/bf16) = the element-wise sum of every rank's t, in place. */
tc_status tc_comm_all_reduce_sum(tc_comm *c, tc_tensor *t);
/* recv (contiguous, n_ranks times send's elements) = every rank's send, rank 0's first. */
tc_status tc_comm_all_gather(tc_comm *c, const tc_tensor *send, tc_tensor *recv);
/* Make the collectives that other ranks are waiting in, and every later one, fail: a rank that
 * cannot go on calls it so that the others do not wait for it for ever (ncclCommAbort). */
void tc_comm_abort(tc_comm *c);
/* Release one rank's handle; NULL is a no-op. */
void tc_comm_destroy(tc_comm *c);

/* n_ranks handles of one in-process group, for ranks on threads of this process whose tensors
 * are in host memory (the CPU backend): the collectives meet at a barrier and each rank sums
 * its share of the elements in rank order. */
tc_status tc_comm_create_local(int n_ranks, tc_comm **ranks);

/* n_ranks NCCL communicators of one group (comm_nccl.c) for ranks on threads of this process,
 * rank r on backends[r] (a CUDA backend; one device per rank): the collectives run on the
 * rank's stream over tensors of its backend (f32, f16, bf16). Loads libnccl.so.2
 * (THINCUDA_LIBNCCL names another) and turns NVLink SHARP off (NCCL_NVLS_ENABLE=0 unless the
 * environment sets it: it needs multicast objects). Errors carry NCCL's words; a missing
 * library is TC_ERR_LIBRARY_NOT_FOUND saying how to get one. */
tc_status tc_comm_create_nccl(int n_ranks, tc_backend *const *backends, tc_comm **ranks);
/* The same over communicators made elsewhere (ncclComm_t), each rank's collectives on
 * streams[r] (a CUstream) over tensors of backends[r]: tests pass a stand-in libnccl's. */
tc_status tc__comm_nccl_wrap(int n_ranks, void *const *nccl_comms, tc_backend *const *backends,
                             void *const *streams, tc_comm **ranks);

#endif /* TC_COMM_H */

/* Tensors: a typed, strided view of host or device memory that belongs to one backend, owning
 * its memory (allocated from the backend) or borrowing it (a view, or wrapped caller memory). */
#ifndef TC_TENSOR_H
#define TC_TENSOR_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ops/backend.h"
#ifdef __cplusplus
extern "C" {
#endif

/* Element types. The block types are GGUF's quantised blocks along the last dimension, laid
 * out in host memory exactly as in a GGUF file (ggml-common.h's block_q4_0 ... block_q6_K):
 * Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 pack 32 elements a block with an f16 scale d (and an f16
 * offset m for the _1 types): value (q - 8) d, q d + m, (q - 16) d, q d + m, q d; the K types
 * pack 256 elements in sub-blocks of 32 (Q4_K, Q5_K: 6-bit scales and minima under f16 d and
 * dmin, value d sc q - dmin mn) or of 16 (Q2_K: 4-bit scales and minima; Q3_K: 6-bit signed
 * scales, value d sc (q - 4 when the high bit is clear); Q6_K: int8 scales, value d sc (q -
 * 32)). Q4_1_G64 and Q4_1_G128 are ours, no GGUF types: Q4_1's d and m once for 64 (128)
 * elements, then the 16 nibble bytes of each 32 as Q4_1 holds them (36 and 68 bytes; what
 * GPTQ and AWQ groups of 64 and of multiples of 128 are packed into). src/ops/qblock.c dequantises
 * each. On CUDA a block tensor is held in the same bytes split into planes (each field of every
 * block together; kernels/quant.cu), converted by the host copies. F8E4M3 is the OCP 8-bit float
 * E4M3 ("e4m3fn": 4 exponent bits of bias 7, 3 mantissa bits, no infinities, 0x7f and 0xff NaN,
 * largest finite 448), held by KV caches; conversions round to nearest even and saturate finite
 * values beyond 448 to +-448. */
typedef enum tc_dtype {
    TC_DTYPE_F32 = 0,
    TC_DTYPE_F16 = 1,
    TC_DTYPE_BF16 = 2,
    TC_DTYPE_I8 = 3,
    TC_DTYPE_I32 = 4,
    TC_DTYPE_Q4_0 = 5,
    TC_DTYPE_Q8_0 = 6,
    TC_DTYPE_F8E4M3 = 7,
    TC_DTYPE_Q4_1 = 8,
    TC_DTYPE_Q5_0 = 9,
    TC_DTYPE_Q5_1 = 10,
    TC_DTYPE_Q2_K = 11,
    TC_DTYPE_Q3_K = 12,
    TC_DTYPE_Q4_K = 13,
    TC_DTYPE_Q5_K = 14,
    TC_DTYPE_Q6_K = 15,
    TC_DTYPE_Q4_1_G64 = 16,
    TC_DTYPE_Q4_1_G128 = 17,
    TC_DTYPE_COUNT
} tc_dtype;

#define TC_TENSOR_MAX_DIMS 4
/* Elements per block of the 32-element block types (the K types have 256). */
#define TC_QBLOCK 32

/* A tensor. shape[0] is the outermost dimension; strides count elements. Block dtypes are
 * always contiguous. `data` is a host address on the CPU backend and a device address
 * (CUdeviceptr) on CUDA. */
typedef struct tc_tensor {
    tc_dtype dtype;
    int ndim;
    int64_t shape[TC_TENSOR_MAX_DIMS];
    int64_t stride[TC_TENSOR_MAX_DIMS]; /* elements */
    void *data;
    tc_backend *backend;
    bool owner; /* deinit frees data */
} tc_tensor;

/* `TC_SHAPE(2, 3)` expands to the (ndim, shape) argument pair of the functions below. */
#define TC_SHAPE(...)                                                                    \
    (int)(sizeof((const int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t)), (const int64_t[]) \
    {                                                                                    \
        __VA_ARGS__                                                                      \
    }

/* The dtype's name ("bf16"). */
TC_API const char *tc_dtype_name(tc_dtype dt);
/* Bytes taken by `n` consecutive elements of dt (n a multiple of the block for block types). */
TC_API size_t tc_dtype_bytes(tc_dtype dt, int64_t n);
/* Whether dt is one of the block-quantised types. */
TC_API bool tc_dtype_is_block(tc_dtype dt);
/* Elements per block of dt: 32 or 256 for block types, 1 for the others. */
TC_API int tc_dtype_block(tc_dtype dt);

/* Allocate an uninitialised contiguous tensor on backend b. */
TC_API tc_status tc_tensor_init(tc_tensor *t, tc_backend *b, tc_dtype dt, int ndim,
                                const int64_t *shape);
/* Allocate a contiguous tensor on b holding `bytes` of host data (which must be exactly the
 * tensor's size); src may be reused when this returns. On CUDA a copy of 4 MiB or more may
 * still be in flight then, ordered before the backend's later work on its stream. */
TC_API tc_status tc_tensor_init_from_host(tc_tensor *t, tc_backend *b, tc_dtype dt, int ndim,
                                          const int64_t *shape, const void *src, size_t bytes);
/* Borrow memory that b can address (a host pointer on the CPU, a device address on CUDA) as
 * a contiguous tensor; deinit leaves it alone. */
TC_API tc_status tc_tensor_wrap(tc_tensor *t, tc_backend *b, tc_dtype dt, int ndim,
                                const int64_t *shape, void *data);
/* Free an owning tensor's memory (in stream order on CUDA) and clear t; views are cleared. */
TC_API void tc_tensor_deinit(tc_tensor *t);

/* A non-owning view of `len` entries of dimension `dim` starting at `start`. */
TC_API tc_status tc_tensor_slice(const tc_tensor *t, int dim, int64_t start, int64_t len,
                                 tc_tensor *out);
/* A non-owning view with another shape of the same elements (t must be contiguous). */
TC_API tc_status tc_tensor_reshape(const tc_tensor *t, int ndim, const int64_t *shape,
                                   tc_tensor *out);

/* Number of elements. */
TC_API int64_t tc_tensor_numel(const tc_tensor *t);
/* Bytes spanned by a contiguous tensor's elements. */
TC_API size_t tc_tensor_bytes(const tc_tensor *t);
/* Whether the elements are laid out densely in row-major order. */
TC_API bool tc_tensor_is_contiguous(const tc_tensor *t);
/* Whether every dimension but the outermost is dense (rows may be spaced by stride[0]). */
TC_API bool tc_tensor_rows_dense(const tc_tensor *t);
/* Address of the element at `index` (one entry per dimension), host or device. */
TC_API void *tc_tensor_at(const tc_tensor *t, const int64_t *index);

/* Copy `bytes` of host data (exactly the tensor's size) into a contiguous tensor, after the
 * backend's queued work; src may be reused when this returns (as above, a large copy may
 * still be in flight, ordered before the backend's later work). */
TC_API tc_status tc_tensor_copy_from_host(tc_tensor *t, const void *src, size_t bytes);
/* Copy a contiguous tensor's elements into host memory (`bytes` must be its size); waits for
 * the backend's queued work first. */
TC_API tc_status tc_tensor_copy_to_host(const tc_tensor *t, void *dst, size_t bytes);
/* Copy src's elements into dst (same dtype and shape, both contiguous), across backends too. */
TC_API tc_status tc_tensor_copy(tc_tensor *dst, const tc_tensor *src);
/* Format "bf16[3, 4] cuda" into buf. */
TC_API const char *tc_tensor_describe(const tc_tensor *t, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* TC_TENSOR_H */

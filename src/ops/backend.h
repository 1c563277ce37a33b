/* Backends: where tensors live and ops run. The CPU backend runs the plain-C reference ops
 * on a pool of threads; the CUDA backend owns a context, one stream, a memory pool and (when
 * the library is installed) a cuBLAS handle. */
#ifndef TC_BACKEND_H
#define TC_BACKEND_H
#include <stdbool.h>
#include "runtime/runtime.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef enum tc_backend_kind { TC_BACKEND_CPU = 0, TC_BACKEND_CUDA = 1 } tc_backend_kind;

/* How the CUDA backend multiplies matrices of more than TC_MATVEC_MAX_ROWS rows. */
typedef enum tc_gemm_mode {
    TC_GEMM_AUTO = 0,   /* cuBLAS when it loads, else our own kernels */
    TC_GEMM_CUBLAS = 1, /* cuBLAS only: an error when it is missing */
    TC_GEMM_OWN = 2,    /* our own kernels only */
    /* our own kernels but for the Hopper one, as on GPUs before compute capability 9.0 */
    TC_GEMM_OWN_PORTABLE = 3,
} tc_gemm_mode;

typedef struct tc_backend tc_backend;

/* Create a CPU backend running ops on `threads` threads (0: one per online core). */
TC_API tc_status tc_backend_create_cpu(int threads, tc_backend **out);
/* Create a CUDA backend on device `ordinal`: its primary context, a stream and a memory pool
 * (limit_bytes caps the pool; 0: none). cuBLAS is loaded at the first matrix product. */
TC_API tc_status tc_backend_create_cuda(int ordinal, size_t limit_bytes, tc_backend **out);
/* Wait for queued work, free everything the backend holds; NULL is a no-op. Tensors of the
 * backend must have been deinitialised before. */
TC_API void tc_backend_destroy(tc_backend *b);
/* The backend's kind, and its name ("cpu", "cuda:0"). */
TC_API tc_backend_kind tc_backend_get_kind(const tc_backend *b);
TC_API const char *tc_backend_name(const tc_backend *b);
/* Block until every op queued on b has finished (a no-op on the CPU). */
TC_API tc_status tc_backend_synchronize(tc_backend *b);
/* The CUDA backend's stream, pool and context (NULL on the CPU backend). */
TC_API tc_stream *tc_backend_stream(const tc_backend *b);
TC_API tc_pool *tc_backend_pool(const tc_backend *b);
TC_API tc_context *tc_backend_context(const tc_backend *b);
/* Number of threads of a CPU backend (1 on CUDA). */
TC_API int tc_backend_threads(const tc_backend *b);
/* Choose how matrix products run on a CUDA backend (TC_GEMM_AUTO by default). */
TC_API void tc_backend_set_gemm(tc_backend *b, tc_gemm_mode mode);
/* Hold kernels to at most `bytes` of dynamic shared memory per block, as on a GPU with less
 * (0: the device's own limit). Kernels that can (decode attention, the tensor-core product)
 * then run with fewer pipeline stages; it lets tests cover the paths that GPUs of compute
 * capability 8.6 and 8.9 (99 KiB per block) take. */
TC_API void tc_backend_set_shared_limit(tc_backend *b, size_t bytes);
/* Load cuBLAS now (about 0.2 s: the library, a handle, its workspace) so that the first
 * product does not wait for it; a no-op on the CPU or with TC_GEMM_OWN. It may run on another
 * thread while b places weights; a failure shows again at the first product. */
TC_API tc_status tc_backend_prepare_gemm(tc_backend *b);
/* Changes whenever a buffer that ops keep their temporaries or counters in moves (a CUDA graph
 * captured over ops must then be captured again). */
TC_API uint64_t tc_backend_workspace_generation(const tc_backend *b);
/* Bytes of those buffers (pool memory the backend holds until it is destroyed). */
TC_API size_t tc_backend_workspace_bytes(const tc_backend *b);
/* Allocate and free `bytes` of backend memory (pool memory on CUDA, in stream order). */
TC_API tc_status tc_backend_alloc(tc_backend *b, size_t bytes, void **out);
TC_API void tc_backend_free(tc_backend *b, void *ptr);

#ifdef __cplusplus
}
#endif
#endif /* TC_BACKEND_H */

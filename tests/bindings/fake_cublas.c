/* A stand-in libcublas for tests without a GPU: host-memory versions of a few routines, so
 * that the tests can check every argument reaches the library in its place. */
#include <stdint.h>
#include <string.h>

#include <cublas_v2.h>

#define EXPORT __attribute__((visibility("default")))

static int fake_handle_storage;

EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t *handle)
{
    *handle = (cublasHandle_t)(void *)&fake_handle_storage;
    return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t handle)
{
    return handle == (cublasHandle_t)(void *)&fake_handle_storage ? CUBLAS_STATUS_SUCCESS
                                                                  : CUBLAS_STATUS_NOT_INITIALIZED;
}

EXPORT size_t cublasGetCudartVersion(void)
{
    return 12345;
}

/* Column-major C = alpha * op(A) op(B) + beta * C on host memory (no transposes). */
EXPORT cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t ta,
                                     cublasOperation_t tb, int m, int n, int k, const float *alpha,
                                     const float *A, int lda, const float *B, int ldb,
                                     const float *beta, float *C, int ldc)
{
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (ta != CUBLAS_OP_N || tb != CUBLAS_OP_N || m < 0 || n < 0 || k < 0 || lda < m || ldb < k ||
        ldc < m)
        return CUBLAS_STATUS_INVALID_VALUE;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int p = 0; p < k; p++)
                s += (double)A[i + p * lda] * B[p + j * ldb];
            C[i + j * ldc] = (float)(*alpha * s + *beta * C[i + j * ldc]);
        }
    return CUBLAS_STATUS_SUCCESS;
}

/* The C++-only half-precision routine: checks that alpha's 16 bits arrive intact. */
EXPORT cublasStatus_t cublasHgemm(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb,
                                  int m, int n, int k, const uint16_t *alpha, const uint16_t *A,
                                  int lda, const uint16_t *B, int ldb, const uint16_t *beta,
                                  uint16_t *C, int ldc)
{
    (void)handle, (void)ta, (void)tb, (void)k, (void)A, (void)lda, (void)B, (void)ldb;
    (void)beta;
    if (m < 1 || n < 1 || ldc < m)
        return CUBLAS_STATUS_INVALID_VALUE;
    C[0] = *alpha; /* 0x3C00 is 1.0 in IEEE half */
    return CUBLAS_STATUS_SUCCESS;
}

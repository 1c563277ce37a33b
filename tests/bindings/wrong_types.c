/* Compiled once per VARIANT by compile_check.py: 0 must compile, every other must not.
 * variant 1: int * for CUdeviceptr *
 * variant 2: curandGenerator_t for cublasHandle_t
 * variant 3: too few arguments
 * variant 4: float for const float * */
#include "tc_cublas.h"
#include "tc_cuda.h"
#include "tc_curand.h"

int use(void);

int use(void)
{
    CUdeviceptr dptr = 0;
    int not_a_devptr = 0;
    cublasHandle_t blas = 0;
    curandGenerator_t rng = 0;
    float x = 1.0f;
    (void)not_a_devptr, (void)blas, (void)rng, (void)x;
#if VARIANT == 0
    return tc_cuMemAlloc(&dptr, 16) == TC_OK && tc_cublasSscal(blas, 1, &x, &x, 1) == TC_OK;
#elif VARIANT == 1
    return tc_cuMemAlloc(&not_a_devptr, 16) == TC_OK; /* int * where CUdeviceptr * is due */
#elif VARIANT == 2
    return tc_cublasSscal(rng, 1, &x, &x, 1) == TC_OK; /* a cuRAND generator as cuBLAS handle */
#elif VARIANT == 3
    return tc_cuMemAlloc(&dptr) == TC_OK; /* too few arguments */
#elif VARIANT == 4
    return tc_cublasSscal(blas, 1, 1.0f, &x, 1) == TC_OK; /* a float where const float * is due */
#endif
}

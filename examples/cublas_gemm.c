/* cublas_gemm: C = A B for 256x256 float matrices with cuBLAS (loaded at run time), checked
 * against the same product on the CPU.
 * Build: cc cublas_gemm.c $(pkg-config --cflags --libs thincuda) -o cublas_gemm */
#include <stdio.h>
#include <stdlib.h>

#include "thincuda.h"

enum { N = 256 };

int main(void)
{
    static float a[N * N], b[N * N], c[N * N]; /* column-major, as cuBLAS reads them */
    for (int i = 0; i < N * N; i++) {
        a[i] = (float)(i % 7) - 3.0f;
        b[i] = (float)(i % 5) * 0.5f;
    }
    tc_context *ctx = NULL;
    tc_stream *s = NULL;
    tc_pool *pool = NULL;
    cublasHandle_t blas = NULL;
    CUdeviceptr da = 0, db = 0, dc = 0;
    const size_t bytes = sizeof a;
    const float one = 1.0f, zero = 0.0f;
    tc_status st = tc_context_retain(0, &ctx);
    if (st == TC_OK)
        st = tc_stream_create(ctx, 0, &s);
    if (st == TC_OK)
        st = tc_pool_create_device(ctx, 0, &pool);
    if (st == TC_OK)
        st = tc_pool_alloc(pool, bytes, s, &da);
    if (st == TC_OK)
        st = tc_pool_alloc(pool, bytes, s, &db);
    if (st == TC_OK)
        st = tc_pool_alloc(pool, bytes, s, &dc);
    if (st == TC_OK)
        st = tc_stream_copy_h2d(s, da, a, bytes);
    if (st == TC_OK)
        st = tc_stream_copy_h2d(s, db, b, bytes);
    if (st == TC_OK)
        st = tc_cublasCreate(&blas);
    if (st == TC_OK)
        st = tc_cublasSetStream(blas, tc_stream_handle(s));
    if (st == TC_OK)
        st = tc_cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, (const float *)da, N,
                            (const float *)db, N, &zero, (float *)dc, N);
    if (st == TC_OK)
        st = tc_stream_copy_d2h(s, c, dc, bytes);
    if (st == TC_OK)
        st = tc_stream_synchronize(s);
    if (st != TC_OK) {
        fprintf(stderr, "cublas_gemm: %s\n", tc_last_error());
    } else {
        double worst = 0;
        for (int j = 0; j < N; j++)
            for (int i = 0; i < N; i++) {
                double ref = 0;
                for (int k = 0; k < N; k++)
                    ref += (double)a[k * N + i] * b[j * N + k];
                double d = ref > c[j * N + i] ? ref - c[j * N + i] : c[j * N + i] - ref;
                worst = d > worst ? d : worst;
            }
        printf("cublas_gemm: %dx%d product, largest difference from the CPU %g\n", N, N, worst);
        if (worst > 1e-2)
            st = TC_ERR_INVALID_ARGUMENT;
    }
    if (blas)
        tc_cublasDestroy(blas);
    if (pool) {
        tc_pool_free(pool, da);
        tc_pool_free(pool, db);
        tc_pool_free(pool, dc);
    }
    tc_pool_destroy(pool);
    tc_stream_destroy(s);
    tc_context_release(ctx);
    return st == TC_OK ? 0 : 1;
}

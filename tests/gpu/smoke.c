/* GPU smoke test of the bindings: init, devices, memory both ways, cuBLAS SGEMM and cuRAND
 * uniforms checked against the CPU. Exits 77 (skip) where there is no driver or GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tc_cublas.h"
#include "tc_cuda.h"
#include "tc_curand.h"

#define SKIP 77

static int failures;

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        tc_status s_ = (expr);                                                                     \
        if (s_ != TC_OK) {                                                                         \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr, tc_last_error()); \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static void expect(int ok, const char *what)
{
    printf("%-58s %s\n", what, ok ? "ok" : "FAIL");
    if (!ok)
        failures++;
}

/* Deterministic non-zero pseudo-random floats in [-1, 1). */
static void fill(float *x, size_t n, unsigned seed)
{
    unsigned s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((s >> 8) / 8388608.0 - 1.0) + 1e-3f;
    }
}

static int devices(int *count)
{
    int drv = 0;
    CHECK(tc_cuDriverGetVersion(&drv));
    CHECK(tc_cuDeviceGetCount(count));
    printf("driver API %d.%d, %d device(s), bindings built for CUDA %d.%d\n", drv / 1000,
           drv % 1000 / 10, *count, TC_BINDINGS_CUDA_VERSION / 1000,
           TC_BINDINGS_CUDA_VERSION % 1000 / 10);
    for (int i = 0; i < *count; i++) {
        CUdevice d;
        char name[128];
        int major, minor, sms, clock_khz, bus_bits;
        size_t mem;
        CUuuid uuid;
        CHECK(tc_cuDeviceGet(&d, i));
        CHECK(tc_cuDeviceGetName(name, sizeof name, d));
        CHECK(tc_cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d));
        CHECK(tc_cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d));
        CHECK(tc_cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d));
        CHECK(tc_cuDeviceGetAttribute(&clock_khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, d));
        CHECK(tc_cuDeviceGetAttribute(&bus_bits, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, d));
        CHECK(tc_cuDeviceTotalMem(&mem, d));
        CHECK(tc_cuDeviceGetUuid(&uuid, d));
        printf("  device %d: %s, sm_%d%d, %d SMs, %.0f MHz, %d-bit bus, %.1f GiB, uuid ", i, name,
               major, minor, sms, clock_khz / 1000.0, bus_bits, mem / (1024.0 * 1024 * 1024));
        for (int b = 0; b < 16; b++)
            printf("%02x%s", (unsigned char)uuid.bytes[b],
                   b == 3 || b == 5 || b == 7 || b == 9 ? "-" : "");
        printf("\n");
    }
    return 0;
}

static int memory(CUstream st)
{
    size_t n = 1 << 20;
    float *h = malloc(n * sizeof *h), *back = malloc(n * sizeof *back);
    CUdeviceptr d;
    fill(h, n, 1);
    memset(back, 0xFF, n * sizeof *back); /* poison: NaN everywhere */
    CHECK(tc_cuMemAlloc(&d, n * sizeof *h));
    CHECK(tc_cuMemcpyHtoDAsync(d, h, n * sizeof *h, st));
    CHECK(tc_cuMemcpyDtoHAsync(back, d, n * sizeof *h, st));
    CHECK(tc_cuStreamSynchronize(st));
    expect(memcmp(h, back, n * sizeof *h) == 0, "4 MiB host->device->host round trip");
    CUdeviceptr huge;
    tc_status s = tc_cuMemAlloc(&huge, (size_t)1 << 50);
    expect(s == TC_CUDA_ERROR_OUT_OF_MEMORY && !strcmp(tc_last_error_function(), "cuMemAlloc"),
           "1 PiB allocation -> CUDA_ERROR_OUT_OF_MEMORY");
    CHECK(tc_cuMemFree(d));
    free(h);
    free(back);
    return 0;
}

static int sgemm(CUstream st)
{
    if (!tc_available("cublasSgemm")) {
        printf("%-58s skipped: %s\n", "cuBLAS SGEMM", tc_last_error());
        return 0;
    }
    const int m = 257, n = 193, k = 321;
    size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n;
    float *A = malloc(na * 4), *B = malloc(nb * 4), *C = malloc(nc * 4), *C0 = malloc(nc * 4);
    fill(A, na, 2);
    fill(B, nb, 3);
    fill(C0, nc, 4);
    CUdeviceptr dA, dB, dC;
    CHECK(tc_cuMemAlloc(&dA, na * 4));
    CHECK(tc_cuMemAlloc(&dB, nb * 4));
    CHECK(tc_cuMemAlloc(&dC, nc * 4));
    CHECK(tc_cuMemcpyHtoD(dA, A, na * 4));
    CHECK(tc_cuMemcpyHtoD(dB, B, nb * 4));
    CHECK(tc_cuMemcpyHtoD(dC, C0, nc * 4));
    cublasHandle_t h;
    CHECK(tc_cublasCreate(&h));
    CHECK(tc_cublasSetStream(h, (cudaStream_t)st));
    float alpha = 0.75f, beta = -1.25f;
    CHECK(tc_cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, (const float *)dA, m,
                         (const float *)dB, k, &beta, (float *)dC, m));
    memset(C, 0xFF, nc * 4);
    CHECK(tc_cuMemcpyDtoHAsync(C, dC, nc * 4, st));
    CHECK(tc_cuStreamSynchronize(st));
    double num = 0, den = 0;
    int nan = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double acc = 0;
            for (int p = 0; p < k; p++)
                acc += (double)A[i + (size_t)p * m] * B[p + (size_t)j * k];
            double ref = alpha * acc + beta * C0[i + (size_t)j * m];
            double got = C[i + (size_t)j * m];
            nan |= isnan(got);
            num += (got - ref) * (got - ref);
            den += ref * ref;
        }
    double rel = sqrt(num / den);
    char what[96];
    snprintf(what, sizeof what, "cuBLAS SGEMM %dx%dx%d vs CPU (rel err %.2e)", m, n, k, rel);
    expect(!nan && rel < 1e-5, what);
    CHECK(tc_cublasDestroy(h));
    CHECK(tc_cuMemFree(dA));
    CHECK(tc_cuMemFree(dB));
    CHECK(tc_cuMemFree(dC));
    free(A), free(B), free(C), free(C0);
    return 0;
}

static int uniforms(CUstream st)
{
    if (!tc_available("curandCreateGenerator")) {
        printf("%-58s skipped: %s\n", "cuRAND uniforms", tc_last_error());
        return 0;
    }
    size_t n = 1 << 22;
    float *a = malloc(n * 4), *b = malloc(n * 4);
    CUdeviceptr d;
    CHECK(tc_cuMemAlloc(&d, n * 4));
    curandGenerator_t g;
    CHECK(tc_curandCreateGenerator(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10));
    CHECK(tc_curandSetStream(g, (cudaStream_t)st));
    CHECK(tc_curandSetPseudoRandomGeneratorSeed(g, 1234));
    CHECK(tc_curandGenerateUniform(g, (float *)d, n));
    memset(a, 0xFF, n * 4);
    CHECK(tc_cuMemcpyDtoHAsync(a, d, n * 4, st));
    CHECK(tc_curandSetPseudoRandomGeneratorSeed(g, 1234));
    CHECK(tc_curandSetGeneratorOffset(g, 0));
    CHECK(tc_curandGenerateUniform(g, (float *)d, n));
    memset(b, 0xFF, n * 4);
    CHECK(tc_cuMemcpyDtoHAsync(b, d, n * 4, st));
    CHECK(tc_cuStreamSynchronize(st));
    double sum = 0, sq = 0;
    int in_range = 1;
    for (size_t i = 0; i < n; i++) {
        in_range &= a[i] > 0.0f && a[i] <= 1.0f;
        sum += a[i];
        sq += (double)a[i] * a[i];
    }
    double mean = sum / n, var = sq / n - mean * mean;
    char what[96];
    snprintf(what, sizeof what, "cuRAND 4M uniforms in (0,1], mean %.4f var %.4f", mean, var);
    expect(in_range && fabs(mean - 0.5) < 2e-3 && fabs(var - 1.0 / 12) < 2e-3, what);
    expect(memcmp(a, b, n * 4) == 0, "cuRAND same seed -> same sequence");
    CHECK(tc_curandDestroyGenerator(g));
    CHECK(tc_cuMemFree(d));
    free(a), free(b);
    return 0;
}

int main(void)
{
    tc_status s = tc_cuInit(0);
    if (s == TC_ERR_LIBRARY_NOT_FOUND || s == TC_CUDA_ERROR_NO_DEVICE) {
        printf("SKIP: no GPU here: %s\n", tc_last_error());
        return SKIP;
    }
    CHECK(s);
    int count = 0;
    if (devices(&count))
        return 1;
    if (count == 0) {
        printf("SKIP: the driver reports no devices\n");
        return SKIP;
    }
    CUdevice dev;
    CUcontext ctx;
    CUstream st;
    CHECK(tc_cuDeviceGet(&dev, 0));
    CHECK(tc_cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(tc_cuCtxSetCurrent(ctx));
    CHECK(tc_cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    if (memory(st) || sgemm(st) || uniforms(st))
        return 1;
    CHECK(tc_cuStreamDestroy(st));
    CHECK(tc_cuDevicePrimaryCtxRelease(dev));
    printf("%s\n", failures ? "SMOKE FAILED" : "smoke ok");
    return failures ? 1 : 0;
}

/* Micro-benchmark: ns per call of cuCtxGetCurrent through a raw driver function pointer and
 * through the generated wrapper tc_cuCtxGetCurrent (10 million calls, median of 5 runs). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tc_cuda.h"

typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t,
                                CUdriverProcAddressQueryResult *);
typedef CUresult (*ctx_get_current_fn)(CUcontext *);

#define CALLS 10000000
#define RUNS 5

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(void)
{
    if (tc_cuInit(0) != TC_OK) {
        fprintf(stderr, "bench_calls: %s\n", tc_last_error());
        return 77;
    }
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        h = dlopen(getenv("THINCUDA_LIBCUDA") ? getenv("THINCUDA_LIBCUDA") : "libcuda.so.1",
                   RTLD_NOW);
    void *gp = h ? dlsym(h, "cuGetProcAddress_v2") : NULL;
    if (!gp) {
        fprintf(stderr, "bench_calls: no cuGetProcAddress_v2 in the driver\n");
        return 1;
    }
    get_proc_fn get_proc;
    memcpy(&get_proc, &gp, sizeof gp);
    void *raw_p = NULL;
    CUdriverProcAddressQueryResult q;
    if (get_proc("cuCtxGetCurrent", &raw_p, 4000, CU_GET_PROC_ADDRESS_DEFAULT, &q) !=
        CUDA_SUCCESS) {
        fprintf(stderr, "bench_calls: cuCtxGetCurrent not found\n");
        return 1;
    }
    ctx_get_current_fn volatile raw;
    ctx_get_current_fn tmp;
    memcpy(&tmp, &raw_p, sizeof tmp);
    raw = tmp;

    CUdevice dev;
    CUcontext ctx, got;
    if (tc_cuDeviceGet(&dev, 0) || tc_cuDevicePrimaryCtxRetain(&ctx, dev) ||
        tc_cuCtxSetCurrent(ctx)) {
        fprintf(stderr, "bench_calls: %s\n", tc_last_error());
        return 1;
    }
    double t_raw[RUNS], t_wrap[RUNS];
    unsigned long bad = 0;
    for (int r = 0; r < RUNS; r++) {
        double t0 = now_ns();
        for (int i = 0; i < CALLS; i++)
            bad += raw(&got) != CUDA_SUCCESS;
        double t1 = now_ns();
        for (int i = 0; i < CALLS; i++)
            bad += tc_cuCtxGetCurrent(&got) != TC_OK;
        double t2 = now_ns();
        t_raw[r] = (t1 - t0) / CALLS;
        t_wrap[r] = (t2 - t1) / CALLS;
    }
    qsort(t_raw, RUNS, sizeof t_raw[0], cmp);
    qsort(t_wrap, RUNS, sizeof t_wrap[0], cmp);
    printf("cuCtxGetCurrent, %d calls x %d runs (median):\n", CALLS, RUNS);
    printf("  raw driver pointer   %6.2f ns/call\n", t_raw[RUNS / 2]);
    printf("  tc_cuCtxGetCurrent   %6.2f ns/call\n", t_wrap[RUNS / 2]);
    printf("  wrapper overhead     %6.2f ns/call (target <= 2 ns)\n",
           t_wrap[RUNS / 2] - t_raw[RUNS / 2]);
    tc_cuDevicePrimaryCtxRelease(dev);
    return bad ? 1 : 0;
}

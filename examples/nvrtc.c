/* nvrtc: a kernel compiled at run time (NVRTC, loaded lazily like every library thincuda
 * wraps) for this GPU, cached on disk, launched with its argument sizes checked; then a launch
 * with a wrong argument size, which the check refuses. Run it twice: the second run takes the
 * cubin from the cache. Build: cc nvrtc.c $(pkg-config --cflags --libs thincuda) -o nvrtc */
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "thincuda.h"

static const char source[] =
    "extern \"C\" __global__ void scale(float *y, const float *x, float a, "
    "long long n)\n"
    "{\n"
    "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n)\n"
    "        y[i] = a * x[i];\n"
    "}\n";

enum { N = 1 << 16 };

static double now_ms(void)
{
    struct timespec t;
    timespec_get(&t, TIME_UTC);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

int main(void)
{
    static float x[N], y[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)(i % 1000) - 500.0f;
    tc_context *ctx = NULL;
    tc_stream *s = NULL;
    tc_rtc *prog = NULL;
    CUdeviceptr dx = 0, dy = 0;
    int bad = 0;
    tc_status st = tc_context_retain(0, &ctx);
    if (st == TC_OK)
        st = tc_stream_create(ctx, 0, &s);
    double t0 = now_ms();
    if (st == TC_OK)
        st = tc_rtc_create(ctx, source, "scale.cu", NULL, 0, &prog);
    if (st == TC_OK)
        printf("nvrtc: %s in %.1f ms (%s)\n",
               tc_rtc_cached(prog) ? "loaded from the cache" : "compiled", now_ms() - t0,
               tc_rtc_cache_path(prog));
    if (st == TC_OK)
        st = tc_cuMemAlloc(&dx, sizeof x);
    if (st == TC_OK)
        st = tc_cuMemAlloc(&dy, sizeof y);
    if (st == TC_OK)
        st = tc_stream_copy_h2d(s, dx, x, sizeof x);
    tc_launch_config cfg = { tc_dim1((N + 255) / 256), tc_dim1(256), 0, s };
    float a = 3.0f;
    long long n = N;
    void *args[4] = { &dy, &dx, &a, &n };
    if (st == TC_OK) {
        size_t sizes[4] = { sizeof dy, sizeof dx, sizeof a, sizeof n };
        st = tc_rtc_launch(prog, "scale", &cfg, args, sizes, 4);
    }
    if (st == TC_OK)
        st = tc_stream_copy_d2h(s, y, dy, sizeof y);
    if (st == TC_OK)
        st = tc_stream_synchronize(s);
    if (st == TC_OK) {
        for (int i = 0; i < N; i++)
            bad += y[i] != 3.0f * x[i];
        printf("nvrtc: %d of %d elements wrong\n", bad, N);
        /* n passed as 4 bytes where the kernel takes 8: refused before the launch. */
        int short_n = N;
        void *wrong[4] = { &dy, &dx, &a, &short_n };
        size_t wrong_sizes[4] = { sizeof dy, sizeof dx, sizeof a, sizeof short_n };
        tc_status mis = tc_rtc_launch(prog, "scale", &cfg, wrong, wrong_sizes, 4);
        printf("nvrtc: a 4-byte n: %s (%s)\n",
               mis == TC_ERR_KERNEL_MISMATCH ? "refused" : "NOT refused", tc_last_error());
        bad += mis != TC_ERR_KERNEL_MISMATCH;
    } else {
        fprintf(stderr, "nvrtc: %s\n", tc_last_error());
        const char *hint = tc_status_hint(st);
        if (hint)
            fprintf(stderr, "nvrtc: hint: %s\n", hint);
    }
    if (dx)
        tc_cuMemFree(dx);
    if (dy)
        tc_cuMemFree(dy);
    tc_rtc_destroy(prog);
    tc_stream_destroy(s);
    tc_context_release(ctx);
    return st == TC_OK && bad == 0 ? 0 : 1;
}

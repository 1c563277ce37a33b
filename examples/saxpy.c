/* saxpy: a kernel of one's own (saxpy.cu) launched through its generated, type-checked
 * launcher. Build:
 *   nvcc -fatbin -arch=sm_80 saxpy.cu -o saxpy.fatbin
 *   python3 "$(pkg-config --variable=generator thincuda)" kernels --prefix ex_ --out . \
 *       --image saxpy.fatbin saxpy.cu
 *   cc saxpy.c ex_kernels.c $(pkg-config --cflags --libs thincuda) -o saxpy */
#include <stdio.h>

#include "ex_kernels.h"
#include "thincuda.h"

enum { N = 1 << 20 };

int main(void)
{
    static float x[N], y[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)i;
        y[i] = 1.0f;
    }
    tc_context *ctx = NULL;
    tc_stream *s = NULL;
    tc_kmodule *mod = NULL;
    CUdeviceptr dx = 0, dy = 0;
    tc_status st = tc_context_retain(0, &ctx);
    if (st == TC_OK)
        st = tc_stream_create(ctx, 0, &s);
    if (st == TC_OK)
        st = tc_kmodule_create(ctx, &ex_kernels, &mod);
    if (st == TC_OK)
        st = tc_cuMemAlloc(&dx, sizeof x);
    if (st == TC_OK)
        st = tc_cuMemAlloc(&dy, sizeof y);
    if (st == TC_OK)
        st = tc_stream_copy_h2d(s, dx, x, sizeof x);
    if (st == TC_OK)
        st = tc_stream_copy_h2d(s, dy, y, sizeof y);
    if (st == TC_OK) {
        tc_launch_config cfg = { tc_dim1((N + 255) / 256), tc_dim1(256), 0, s };
        /* Every argument's type is checked: 2.0 (a double) or a size_t n would not compile. */
        st = ex_launch_saxpy(mod, cfg, (int)N, 2.0f, (const float *)dx, (float *)dy);
    }
    if (st == TC_OK)
        st = tc_stream_copy_d2h(s, y, dy, sizeof y);
    if (st == TC_OK)
        st = tc_stream_synchronize(s);
    int bad = 0;
    if (st == TC_OK) {
        for (int i = 0; i < N; i++)
            bad += y[i] != 2.0f * (float)i + 1.0f;
        printf("saxpy: %d of %d elements wrong\n", bad, N);
    } else {
        fprintf(stderr, "saxpy: %s\n", tc_last_error());
        const char *hint = tc_status_hint(st);
        if (hint)
            fprintf(stderr, "saxpy: hint: %s\n", hint);
    }
    if (dx)
        tc_cuMemFree(dx);
    if (dy)
        tc_cuMemFree(dy);
    tc_kmodule_destroy(mod);
    tc_stream_destroy(s);
    tc_context_release(ctx);
    return st == TC_OK && bad == 0 ? 0 : 1;
}

/* hello: the installed library's version, every GPU the driver reports, and one allocation
 * from the memory pool. Build: cc hello.c $(pkg-config --cflags --libs thincuda) -o hello */
#include <stdio.h>

#include "thincuda.h"

int main(void)
{
    printf("thincuda %s (headers %s)\n", tc_version(), TC_VERSION_STRING);
    int n = 0;
    if (tc_device_count(&n) != TC_OK) {
        fprintf(stderr, "hello: %s\n", tc_last_error());
        return 1;
    }
    for (int i = 0; i < n; i++) {
        tc_device_info info;
        if (tc_device_info_get(i, &info) == TC_OK)
            printf("GPU %d: %s, compute capability %d.%d, %zu MiB\n", i, info.name, info.cc_major,
                   info.cc_minor, info.total_bytes >> 20);
    }
    tc_context *ctx = NULL;
    tc_stream *s = NULL;
    tc_pool *pool = NULL;
    CUdeviceptr p = 0;
    tc_status st = tc_context_retain(0, &ctx);
    if (st == TC_OK)
        st = tc_stream_create(ctx, 0, &s);
    if (st == TC_OK)
        st = tc_pool_create_device(ctx, 0, &pool);
    if (st == TC_OK)
        st = tc_pool_alloc(pool, 1 << 20, s, &p);
    if (st == TC_OK) {
        printf("allocated 1 MiB at 0x%llx\n", (unsigned long long)p);
        tc_pool_free(pool, p);
    } else {
        fprintf(stderr, "hello: %s\n", tc_last_error());
    }
    tc_pool_destroy(pool);
    tc_stream_destroy(s);
    tc_context_release(ctx);
    return st == TC_OK ? 0 : 1;
}

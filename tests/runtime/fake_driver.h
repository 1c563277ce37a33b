/* What the fake driver (fake_driver.c) recorded of the last launch; tests read it through
 * dlsym(handle, "fake_launch_v"). */
#ifndef TC_TESTS_FAKE_DRIVER_H
#define TC_TESTS_FAKE_DRIVER_H

#include <stddef.h>

/* An SM's shared memory as the fake reports it (228 KiB, as Hopper's). */
#define FAKE_SM_SHARED 233472

typedef struct fake_launch {
    int count;
    char kernel[64];
    unsigned grid[3], block[3], shared;
    void *stream;
    unsigned char params[256]; /* the arguments laid out as the CUDA ABI does */
    size_t params_bytes;
    int set_attribute_calls;
    int last_dyn_shared;
    int last_carveout; /* and the kernel it was set for */
    char carveout_kernel[64];
    int ex;              /* through cuLaunchKernelEx */
    int overlap;         /* with the programmatic-serialization attribute */
    unsigned cluster[3]; /* the cluster-dimension attribute's extent (0: none) */
} fake_launch;

#endif

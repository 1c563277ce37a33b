/* Stand-in for <cuda.h> while gen/kernels.py reads kernel declarations; see thincuda_prelude.h. */
#pragma once

/* The tensor-map descriptor of the tensor memory accelerator (cp.async.bulk.tensor): 128 bytes,
 * 64-byte aligned, as <cuda.h> declares it. A kernel takes one by value as a `const
 * __grid_constant__ CUtensorMap` parameter. */
typedef struct __align__(64) CUtensorMap_st {
    unsigned long long opaque[16];
} CUtensorMap;

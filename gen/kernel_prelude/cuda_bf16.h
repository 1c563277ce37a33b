/* Stand-in for <cuda_bf16.h> while gen/kernels.py reads kernel declarations; see thincuda_prelude.h. */
#pragma once

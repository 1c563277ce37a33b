/* Stand-in for <cuda_runtime.h> while gen/kernels.py reads kernel declarations; see thincuda_prelude.h. */
#pragma once

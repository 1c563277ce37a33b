/* Stand-in for <cuda.h> while gen/kernels.py reads kernel declarations; see thincuda_prelude.h. */
#pragma once

// saxpy.cu: a kernel of the user's own. thincuda_gen.py kernels reads its extern "C" signature
// and writes a checked launcher, ex_launch_saxpy, into ex_kernels.h.

// y[i] = a x[i] + y[i] for i < n.
extern "C" __global__ void saxpy(int n, float a, const float *x, float *y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}

"""Where the headers the generator reads are: the CUDA toolkit's include directory, nvml.h and
nccl.h. Standard library only, so that the build (meson.build) can ask too: python3
gen/paths.py cuda | nvml | nccl [CUDA_INCLUDE] prints the directory."""

import os
import shutil
import sys


def default_include():
    """The CUDA include directory: $CUDA_HOME or $CUDA_PATH, else nvcc's toolkit."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return os.path.join(os.environ[var], "include")
    nvcc = shutil.which("nvcc")
    if nvcc:
        return os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), "include")
    return "/usr/local/cuda/include"


def _wheel_include(header):
    """The newest site-packages/nvidia/*/include holding `header` (PyPI's NVIDIA wheels put
    headers under nvidia/cuNN/include or nvidia/<library>/include), or None."""
    try:
        import nvidia
    except ImportError:
        return None
    found = []
    for base in nvidia.__path__:
        for sub in sorted(os.listdir(base)):
            inc = os.path.join(base, sub, "include")
            if os.path.isfile(os.path.join(inc, header)):
                found.append(inc)
    return found[-1] if found else None


def default_nvml_include(cuda_include):
    """nvml.h: beside cuda.h when the toolkit has it, else from PyPI's nvidia-nvml-dev
    (gen/requirements.txt), which puts it under site-packages/nvidia/cuNN/include (the
    newest such directory wins). Returns cuda_include when neither has it."""
    if os.path.isfile(os.path.join(cuda_include, "nvml.h")):
        return cuda_include
    return _wheel_include("nvml.h") or cuda_include


def default_nccl_include(cuda_include):
    """nccl.h: beside cuda.h when the toolkit has it, else from an NVIDIA NCCL wheel
    (nvidia-nccl-cu13), else in the toolkit nvcc belongs to (NCCL is released apart from
    CUDA: a 12.x include directory may take 13.x's nccl.h), else where Debian's libnccl-dev
    puts it. Returns cuda_include when none has it."""
    if os.path.isfile(os.path.join(cuda_include, "nccl.h")):
        return cuda_include
    for inc in (_wheel_include("nccl.h"), default_include(), "/usr/include",
                "/usr/local/include"):
        if inc and os.path.isfile(os.path.join(inc, "nccl.h")):
            return inc
    return cuda_include


if __name__ == "__main__":
    cuda = sys.argv[2] if len(sys.argv) > 2 else default_include()
    what = sys.argv[1:2]
    if what == ["nvml"]:
        print(default_nvml_include(cuda))
    elif what == ["nccl"]:
        print(default_nccl_include(cuda))
    else:
        print(cuda)

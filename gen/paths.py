"""Where the headers the generator reads are: the CUDA toolkit's include directory and nvml.h.
Standard library only, so that the build (meson.build) can ask too: python3 gen/paths.py
cuda | nvml [CUDA_INCLUDE] prints the directory."""

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


def default_nvml_include(cuda_include):
    """nvml.h: beside cuda.h when the toolkit has it, else from PyPI's nvidia-nvml-dev
    (gen/requirements.txt), which puts it under site-packages/nvidia/cuNN/include (the
    newest such directory wins). Returns cuda_include when neither has it."""
    if os.path.isfile(os.path.join(cuda_include, "nvml.h")):
        return cuda_include
    try:
        import nvidia
    except ImportError:
        return cuda_include
    found = []
    for base in nvidia.__path__:
        for sub in sorted(os.listdir(base)):
            inc = os.path.join(base, sub, "include")
            if os.path.isfile(os.path.join(inc, "nvml.h")):
                found.append(inc)
    return found[-1] if found else cuda_include


if __name__ == "__main__":
    cuda = sys.argv[2] if len(sys.argv) > 2 else default_include()
    print(default_nvml_include(cuda) if sys.argv[1:2] == ["nvml"] else cuda)

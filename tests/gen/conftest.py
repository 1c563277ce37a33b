"""Shared fixtures for the generator tests: the repository, the generator modules, CUDA."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "gen"))

import thincuda_gen  # noqa: E402


@pytest.fixture(scope="session")
def cuda_include():
    inc = thincuda_gen.default_include()
    if not os.path.isfile(os.path.join(inc, "cuda.h")):
        pytest.skip("no CUDA toolkit headers at %s" % inc)
    return inc


@pytest.fixture(scope="session")
def built(cuda_include):
    """The generator's model of the installed headers: (libs, own codes, overrides, unused)."""
    return thincuda_gen.build(cuda_include)


@pytest.fixture(scope="session")
def rendered(cuda_include):
    return thincuda_gen.render(cuda_include)

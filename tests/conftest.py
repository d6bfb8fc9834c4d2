"""Test configuration: `gpu`-marked tests are skipped where no CUDA device is present; ``-n auto``
(pytest-xdist) starts one worker per core this process may use."""
import functools
import os

import pytest


@functools.cache
def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """``-n auto``: the cores this process may use (its CPU affinity and cgroup quota), not the host's
    physical cores that pytest-xdist counts by default (a container on a large host would start a
    worker per host core). ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still decides when set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # pytest-xdist's own hook reads it
    from tilus_tvm.utils.cores import available_cores

    return available_cores()

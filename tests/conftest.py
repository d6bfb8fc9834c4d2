"""Test configuration: `gpu`-marked tests are skipped where no CUDA device is present; ``-n auto``
(pytest-xdist) starts one worker per core this process may use; a failing test is named as it fails;
``TILUS_TEST_SHARD=i/n`` keeps every n-th collected test from the i-th."""
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
    shard = os.environ.get("TILUS_TEST_SHARD")
    if shard:  # "i/n": every n-th test from the i-th (scripts/gpu_check.sh runs a long group as shards at once)
        try:
            index, count = (int(part) for part in shard.split("/"))
        except ValueError:
            raise pytest.UsageError(f"TILUS_TEST_SHARD={shard!r} must be 'i/n' with 0 <= i < n") from None
        if not 0 <= index < count:
            raise pytest.UsageError(f"TILUS_TEST_SHARD={shard!r} must be 'i/n' with 0 <= i < n")
        kept = [item for position, item in enumerate(items) if position % count == index]
        config.hook.pytest_deselected(items=[item for position, item in enumerate(items) if position % count != index])
        items[:] = kept
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


_CONFIG: list = []  # pytest's config, once configured


def pytest_configure(config):
    _CONFIG[:] = [config]


def pytest_runtest_logreport(report):
    """Name a failing test the moment it fails, with its error's message: a run killed at its time limit
    (``scripts/gpu_check.sh`` gives each group of GPU tests one) prints no summary, and its dots alone do not
    say which test failed. The summary at the end lists it again."""
    terminal = _CONFIG[0].pluginmanager.get_plugin("terminalreporter") if _CONFIG else None
    if not report.failed or terminal is None:
        return
    lines = [line for line in report.longreprtext.splitlines() if line.strip()]
    errors = [line[1:].strip() for line in lines if line.startswith("E ")]  # (the first: the exception's message)
    message = errors[0] if errors else lines[-1].strip() if lines else ""
    terminal.write_line(f"\nFAILED {report.nodeid} ({report.when}): {message}"[:300])

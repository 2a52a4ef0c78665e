import os

import pytest

# Test workers, each with judges and executors of its own, share a few cores: a compute thread
# per core in every process (PyTorch's and OpenMP's default) oversubscribes the machine, and
# spinning OpenMP threads made a 3 s test take 30-40 s in the full run. One compute thread per
# process, inherited by every subprocess; a value the caller sets wins.
for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker more than the cores, at most 8. Most tests wait on a judge and its
    executors (subprocesses), so a worker is seldom busy on a core of its own the whole time."""
    return min((os.cpu_count() or 1) + 1, 8)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups into the node ids
def pytest_collection_modifyitems(config, items):
    _group_module_fixtures(items)
    _skip_gpu_tests_without_cuda(items)


def _group_module_fixtures(items):
    """Under pytest-xdist (`--dist loadgroup`) keep a module's tests on one worker when they share
    a module-scoped fixture (a server, a fleet, an evaluation): split, each worker would build
    it again. Tests that name their own `xdist_group` keep it."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info else []
        if any(d[-1].scope == "module" for d in defs if d):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


def _skip_gpu_tests_without_cuda(items):
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


import json
import os
from pathlib import Path

import pytest

# Seconds each test took in a full run on a CI-sized machine (2 cores), written by
# `pytest --record-durations tests/durations.json`; the schedule starts the longest first.
DURATIONS = Path(__file__).with_name("durations.json")
UNKNOWN_TEST_S = 1.0  # a test the file does not know yet

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


def pytest_addoption(parser):
    parser.addoption("--record-durations", type=Path, default=None, metavar="FILE",
                     help="write each test's seconds (setup + call + teardown) to FILE as JSON")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups into the node ids
def pytest_collection_modifyitems(config, items):
    _group_module_fixtures(items)
    _skip_gpu_tests_without_cuda(items)
    _longest_groups_first(items)


def _group_of(item) -> str:
    marker = item.get_closest_marker("xdist_group")
    if marker is None:
        return item.nodeid
    return marker.args[0] if marker.args else marker.kwargs.get("name", "default")


def _longest_groups_first(items):
    """Run the groups (a module's tests sharing a fixture, or one test) longest first, by the
    recorded durations: scheduled in file order, the suite's 5-8 minute interpreter tests came
    last and the run ended on one worker while the others idled. Needs pytest-xdist's
    `--no-loadscope-reorder` (pyproject.toml), which keeps this order."""
    known = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    totals: dict[str, float] = {}
    for item in items:
        group = _group_of(item)
        totals[group] = totals.get(group, 0.0) + known.get(item.nodeid, UNKNOWN_TEST_S)
    order = {group: rank for rank, group in enumerate(
        sorted(totals, key=lambda g: -totals[g]))}  # stable: ties keep the file order
    items.sort(key=lambda item: order[_group_of(item)])


class DurationRecorder:
    """Collects each test's phases as the reports arrive (on the pytest-xdist controller too)."""

    def __init__(self, path: Path):
        self.path, self.seconds = path, {}

    def pytest_runtest_logreport(self, report):
        nodeid = report.nodeid.split("@", 1)[0]  # pytest-xdist appends "@<group>"
        self.seconds[nodeid] = self.seconds.get(nodeid, 0.0) + report.duration

    def pytest_sessionfinish(self):
        # the many sub-second tests are left out: the schedule counts each as UNKNOWN_TEST_S
        data = {k: round(v, 1) for k, v in sorted(self.seconds.items()) if v >= UNKNOWN_TEST_S}
        self.path.write_text(json.dumps(data, indent=0) + "\n")


def pytest_configure(config):
    path = config.getoption("--record-durations")
    if path is not None and not hasattr(config, "workerinput"):  # the controller writes it
        config.pluginmanager.register(DurationRecorder(path), "atrex-durations")


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


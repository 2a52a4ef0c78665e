"""The test schedule in tests/conftest.py, run on a small suite of its own through pytester: the
groups start longest first by the recorded durations, and --record-durations writes them."""

from __future__ import annotations

import json
from pathlib import Path

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py")

MODULES = {
    "test_a": "def test_quick():\n    pass\n\n\ndef test_slow():\n    pass\n",
    "test_b": "def test_mid():\n    pass\n",
    # a module-scoped fixture keeps the module's tests together: one group, their sum
    "test_c": ("import pytest\n\n\n@pytest.fixture(scope='module')\ndef server():\n"
               "    return object()\n\n\ndef test_one(server):\n    pass\n\n\n"
               "def test_two(server):\n    pass\n"),
}
RECORDED = {"test_a.py::test_slow": 30.0, "test_b.py::test_mid": 10.0,
            "test_c.py::test_one": 8.0, "test_c.py::test_two": 8.0}


def _suite(pytester) -> None:
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(**MODULES)


def _collected(pytester, durations: dict) -> list[str]:
    (pytester.path / "durations.json").write_text(json.dumps(durations))
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:randomly")
    return [line for line in result.outlines if "::" in line]


def test_groups_start_longest_first_by_the_recorded_seconds(pytester):
    _suite(pytester)
    assert _collected(pytester, RECORDED) == [
        "test_a.py::test_slow",  # 30 s
        "test_c.py::test_one", "test_c.py::test_two",  # one group, 16 s
        "test_b.py::test_mid",  # 10 s
        "test_a.py::test_quick",  # not recorded: counted as 1 s
    ]


def test_unrecorded_tests_count_a_second_each_and_ties_keep_the_file_order(pytester):
    _suite(pytester)
    assert _collected(pytester, {}) == [
        "test_c.py::test_one", "test_c.py::test_two",  # one group of two: 2 s
        "test_a.py::test_quick", "test_a.py::test_slow", "test_b.py::test_mid"]


def test_record_durations_writes_the_tests_of_a_second_or_more(pytester):
    pytester.makeconftest(CONFTEST.read_text())
    # a sleep is the only way to make a test last: the recorder keeps tests of >= 1 s
    pytester.makepyfile(test_d="import time\n\n\ndef test_long():\n    time.sleep(1.1)\n\n\n"
                               "def test_short():\n    pass\n")
    out = pytester.path / "recorded.json"
    result = pytester.runpytest("--record-durations", str(out))
    result.assert_outcomes(passed=2)
    recorded = json.loads(out.read_text())
    assert list(recorded) == ["test_d.py::test_long"]
    assert recorded["test_d.py::test_long"] >= 1.0

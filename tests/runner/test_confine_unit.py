"""runner/executor/confine.py on its own, in a child process (what it does cannot be undone)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

CHILD = textwrap.dedent('''
    import os, sys
    from atrex.runner.executor.confine import confine

    own, other = sys.argv[1], sys.argv[2]
    abi = confine([own, "/proc/atrex-cannot-be-made"])  # a directory that cannot be made: no rule
    with open(os.path.join(own, "mine"), "w") as out:
        out.write("ok")
    try:
        with open(os.path.join(other, "theirs"), "w") as out:
            out.write("written")
        outside = "written"
    except OSError:
        outside = "refused"
    status = open("/proc/self/status").read().splitlines()
    no_new_privs = next(line.split()[1] for line in status if line.startswith("NoNewPrivs"))
    print(abi, outside, no_new_privs)
''')


def test_writes_stay_in_the_given_directories(tmp_path):
    own, other = tmp_path / "own", tmp_path / "other"
    other.mkdir()
    done = subprocess.run([sys.executable, "-c", CHILD, str(own), str(other)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    abi, outside, no_new_privs = done.stdout.split()
    assert (own / "mine").read_text() == "ok" and no_new_privs == "1"
    if abi == "None":  # a kernel without Landlock: the write is not confined, and said so
        assert outside == "written"
    else:
        assert outside == "refused" and not (other / "theirs").exists()


@pytest.mark.parametrize(("abis", "confined", "lowest"), [
    ([7, 7], True, 7), ([7, 5], True, 5), ([7, None], False, 7), ([None], False, None),
    ([], None, None)])
def test_a_run_is_confined_only_if_every_executor_was(abis, confined, lowest):
    from atrex.runner.evaluate import _record_confinement
    from atrex.runner.model import DeviceInfo

    info = DeviceInfo(kind="cpu", name="cpu")
    for abi in abis:  # one judge per executor: folding across operators is the same fold
        _record_confinement(info, [abi])
    assert (info.executor_writes_confined, info.executor_landlock_abi) == (confined, lowest)

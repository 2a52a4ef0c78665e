"""runner/executor/confine.py on its own, in a child process (what it does cannot be undone)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

CHILD = textwrap.dedent('''
    import os, sys
    from atrex.runner.executor.confine import confine

    own, other = sys.argv[1], sys.argv[2]
    abi = confine([own, "/proc/atrex-cannot-be-made"]).landlock_abi  # cannot be made: no rule
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


HIDING_CHILD = textwrap.dedent('''
    import json, os, sys
    from atrex.runner.executor.confine import confine

    own, hidden, checkout, probes = sys.argv[1], sys.argv[2:4], sys.argv[4], sys.argv[5:]
    done = confine([own], hidden, own=[checkout])
    import torch  # modules and shared libraries still load

    readable = {}
    for path in probes:
        try:
            with open(path) as source:
                source.read()
            readable[path] = True
        except OSError:
            readable[path] = False
    print(json.dumps({"abi": done.landlock_abi, "hidden": done.hidden_paths, "readable": readable,
                      "torch": float(torch.ones(2).sum())}))
''')


def test_named_secrets_cannot_be_read_and_everything_else_can(tmp_path):
    """The bot worker's App key, settings and job checkouts (ATREX_EXECUTOR_UNREADABLE): hidden
    files and directories refuse reads, through a symlink too; their neighbours, the system's
    files, /proc and the candidate's own checkout inside a hidden directory stay readable."""
    keys = tmp_path / "etc" / "keys"
    keys.mkdir(parents=True)
    (keys / "app.pem").write_text("-----BEGIN PRIVATE KEY-----")
    (keys / "public.txt").write_text("not secret")
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "bot.toml").write_text("webhook_secret = 'x'")
    (tmp_path / "link.pem").symlink_to(keys / "app.pem")
    (tmp_path / "etc" / "beside.txt").write_text("not secret")
    for job in ("job-1", "job-2"):  # this candidate's checkout and another job's
        (vault / job).mkdir()
        (vault / job / "kernel.py").write_text("import torch")
    hidden = [str(keys / "app.pem"), str(vault)]
    probes = [str(keys / "app.pem"), str(vault / "bot.toml"), str(tmp_path / "link.pem"),
              str(keys / "public.txt"), str(tmp_path / "etc" / "beside.txt"), "/etc/passwd",
              "/proc/self/status", str(vault / "job-1" / "kernel.py"),
              str(vault / "job-2" / "kernel.py")]
    done = subprocess.run([sys.executable, "-c", HIDING_CHILD, str(tmp_path / "own"), *hidden,
                           str(vault / "job-1"), *probes], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["torch"] == 2.0
    if result["abi"] is None:  # no Landlock: nothing hidden, and the report says unconfined
        assert result["hidden"] == 0
        return
    assert result["hidden"] == 2  # the key file and the vault
    assert [result["readable"][p] for p in probes] == [False, False, False, True, True, True,
                                                        True, True, False]


@pytest.mark.parametrize(("abis", "confined", "lowest"), [
    ([7, 7], True, 7), ([7, 5], True, 5), ([7, None], False, 7), ([None], False, None),
    ([], None, None)])
def test_a_run_is_confined_only_if_every_executor_was(abis, confined, lowest):
    from atrex.runner.evaluate import _record_confinement
    from atrex.runner.model import DeviceInfo

    info = DeviceInfo(kind="cpu", name="cpu")
    for abi in abis:  # one judge per executor: folding across operators is the same fold
        _record_confinement(info, [abi], [])
    assert (info.executor_writes_confined, info.executor_landlock_abi) == (confined, lowest)


@pytest.mark.parametrize(("counts", "fewest"), [([3, 3], 3), ([3, 0], 0), ([], None)])
def test_a_run_reports_the_fewest_paths_any_executor_hid(counts, fewest):
    from atrex.runner.evaluate import _record_confinement
    from atrex.runner.model import DeviceInfo

    info = DeviceInfo(kind="cpu", name="cpu")
    for count in counts:
        _record_confinement(info, [7], [count])
    assert info.executor_hidden_paths == fewest


def test_hidden_paths_are_the_named_ones_that_exist_never_the_root(tmp_path):
    from atrex.runner.executor.confine import hidden_paths

    key = tmp_path / "key.pem"
    key.write_text("k")
    link = tmp_path / "link"
    link.symlink_to(key)
    assert hidden_paths([str(key), str(link), str(tmp_path / "absent"), "/"]) == {str(key)}

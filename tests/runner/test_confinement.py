"""A candidate cannot reach into atrex's own processes (subprocess mode, Linux).

The judge holds the expected outputs and decides the verdict; the evaluator (a bot worker, or the
shell that ran `atrex check`) holds tokens in its environment. Both are processes of the user the
candidate runs as, so without more the candidate could read their memory and environment through
/proc, or attach to them with ptrace, or rewrite files it should not. The probe below tries,
from inside a candidate, every route that the kernel guards with its ptrace check against every
other atrex process of the run, and where the kernel has Landlock, writing outside its own
directories and signalling those processes; it fails the call if one works. Run as root (as CI
is), it also shows that the executor gave up the CAP_SYS_PTRACE that overrides a process's
refusal to be inspected.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from atrex.runner.evaluate import EvalOptions, evaluate
from atrex.runner.model import Status
from atrex.runner.render import environment_line
from atrex.runner.repo import load_repo
from atrex.runner.sandbox import CandidateRef

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux /proc")

CORPUS = Path(__file__).resolve().parents[1] / "adversarial"

PROBE = '''
import os
import torch
from _rms_triton import rms

EVALUATOR = {evaluator}
VICTIM = {victim!r}
SHARED_CACHE = {shared_cache!r}  # the Triton cache every contestant's part lies in
OPERATOR_ALLOWED = {allowed!r}  # ATREX_EXECUTOR_WRITABLE
SECRET = {secret!r}  # named by ATREX_EXECUTOR_UNREADABLE, as the bot worker names its App key
CAP_SYS_PTRACE = 19


def _parents():
    table = {{}}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{{entry}}/stat") as stat:
                    table[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    return table


def _atrex_processes():
    """The evaluator that started the run and every process under it (zygote, judge, executors)
    but this one."""
    table = _parents()
    found, frontier = [EVALUATOR], [EVALUATOR]
    while frontier:
        above = frontier.pop()
        children = [pid for pid, parent in table.items() if parent == above]
        found += children
        frontier += children
    if os.getpid() not in found:
        raise RuntimeError(f"this executor is not under the evaluator {{EVALUATOR}}")
    return [pid for pid in found if pid != os.getpid()]


def _opened(pid):
    """The routes into process pid that opened: its environment (the kernel's read check), its
    memory (the attach check, the one ptrace and process_vm_readv make) and what its descriptors
    lead to (the read check again; the numbers alone are no secret)."""
    opened = []
    for name in ("environ", "mem"):
        try:
            os.close(os.open(f"/proc/{{pid}}/{{name}}", os.O_RDONLY))
            opened.append(f"{{pid}}/{{name}}")
        except OSError:
            pass
    try:
        descriptors = os.listdir(f"/proc/{{pid}}/fd")
    except OSError:
        descriptors = []
    for fd in descriptors:
        try:
            os.readlink(f"/proc/{{pid}}/fd/{{fd}}")
            opened.append(f"{{pid}}/fd/{{fd}}")
        except OSError:
            pass
    return opened


def _landlock_abi():
    import ctypes

    version = ctypes.CDLL(None, use_errno=True).syscall(444, None, 0, 1)
    return version if version > 0 else 0


def _written_or_signalled(pids):
    """Where the kernel has Landlock: a secret the evaluator hides it could read; files outside
    the executor's own directories it could write (one the test owns, one beside the
    candidate's code, one in the shared compile cache where another contestant would look), and
    (ABI 6 on) processes of the run it could signal.
    Writing in its own scratch directory and its own part of the cache must work."""
    cache = os.environ["TRITON_CACHE_DIR"]  # this contestant's part of the shared cache
    for own in ("scratch-control.txt", os.path.join(cache, "own-entry"),
                os.path.join(OPERATOR_ALLOWED, "executor-wrote-here")):
        with open(own, "w") as control:
            control.write("the executor's own directories stay writable")
    abi = _landlock_abi()
    if not abi:
        return []
    reached = []
    try:
        with open(SECRET) as secret:
            reached.append(f"read {{SECRET}}: {{secret.read()}}")
    except OSError:
        pass
    for path in (VICTIM, os.path.join(os.path.dirname(__file__), "planted.py"),
                 os.path.join(SHARED_CACHE, "poisoned-entry")):
        try:
            with open(path, "a") as out:
                out.write("# planted")
            reached.append(f"wrote {{path}}")
        except OSError:
            pass
    for pid in pids if abi >= 6 else []:
        try:
            os.kill(pid, 0)
            reached.append(f"may signal {{pid}}")
        except OSError:
            pass
    return reached


def _effective_caps():
    with open("/proc/self/status") as status:
        return int(next(line.split()[1] for line in status if line.startswith("CapEff:")), 16)


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        pids = _atrex_processes()
        reached = [route for pid in pids for route in _opened(pid)]
        reached += _written_or_signalled(pids)
        if _effective_caps() & (1 << CAP_SYS_PTRACE):
            reached.append("CAP_SYS_PTRACE kept")
        if reached:
            raise RuntimeError(f"reached into atrex processes: {{reached}}")
        return rms(x, weight, self.eps)
'''


def _rmsnorm_repo_and_candidate(tmp_path: Path) -> tuple[Path, Path]:
    """The corpus's rmsnorm operator as the repository, and a copy of it with the corpus's Triton
    rmsnorm beside it, whose kernel.py the test writes."""
    repo = tmp_path / "repo"
    shutil.copytree(CORPUS / "ops" / "rmsnorm", repo / "rmsnorm")
    cand = tmp_path / "cand"
    shutil.copytree(CORPUS / "ops" / "rmsnorm", cand)
    shutil.copy(CORPUS / "cheats" / "_rms_triton.py", cand)
    return repo, cand


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("zygote", ["1", "0"], ids=["forked-from-zygote", "fresh-interpreters"])
def test_candidate_cannot_reach_the_judge_or_the_evaluator(tmp_path, monkeypatch, zygote, device):
    """On CUDA the executor confines itself after the driver is up, so the probe also shows that
    a confined executor still runs a Triton kernel on the GPU."""
    monkeypatch.setenv("ATREX_ZYGOTE", zygote)
    monkeypatch.setenv("ATREX_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    repo, cand = _rmsnorm_repo_and_candidate(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("the test's own file\n")
    shared_cache = tmp_path / "cache" / "triton"
    allowed = tmp_path / "operator-allowed"
    allowed.mkdir()
    monkeypatch.setenv("ATREX_EXECUTOR_WRITABLE", f"{tmp_path / 'elsewhere'}:{allowed}")
    secret = tmp_path / "keys" / "app.pem"
    secret.parent.mkdir()
    secret.write_text("-----BEGIN PRIVATE KEY-----")
    monkeypatch.setenv("ATREX_EXECUTOR_UNREADABLE", str(secret))
    (cand / "kernel.py").write_text(PROBE.format(evaluator=os.getpid(), victim=str(victim),
                                                 shared_cache=str(shared_cache),
                                                 allowed=str(allowed), secret=str(secret)))
    reports = evaluate(load_repo(repo), {"rmsnorm": [CandidateRef("probe", cand / "kernel.py",
                                                                 cand)]},
                       EvalOptions(device=device))
    op = reports["probe"].op("rmsnorm")
    assert op.status is Status.PASS, [s.message for s in op.shapes]
    assert victim.read_text() == "the test's own file\n"
    assert not (cand / "planted.py").exists()
    assert not (shared_cache / "poisoned-entry").exists()
    assert (allowed / "executor-wrote-here").exists()
    device_card = reports["probe"].device
    if _landlock_abi():  # the report says what confined the candidate, and the card shows it
        assert device_card.executor_writes_confined is True
        assert device_card.executor_landlock_abi == _landlock_abi()
        assert device_card.executor_hidden_paths == 1  # the key named above
        assert (f"writes confined (Landlock ABI {_landlock_abi()}), 1 secret path hidden "
                "from reads") in environment_line(reports["probe"])
    else:
        assert device_card.executor_writes_confined is False
        assert device_card.executor_hidden_paths == 0
        assert any("not confined" in note for note in reports["probe"].notes)


def _landlock_abi() -> int | None:
    import ctypes

    from atrex.runner.executor.confine import landlock_abi

    return landlock_abi(ctypes.CDLL(None, use_errno=True))


TAMPER = '''
import ctypes
import gc
import sys
import torch
from _rms_triton import rms

# at import, as if the executor's confinement answer were still to be sent: rewrite every
# confinement fact this process holds (confine's result, the loader's local variables)
for obj in gc.get_objects():
    if type(obj).__name__ == "Confinement":
        object.__setattr__(obj, "landlock_abi", 99)  # frozen: past its guard
        object.__setattr__(obj, "hidden_paths", 3)
frame = sys._getframe(1)
while frame is not None:
    if "abi" in frame.f_locals:
        frame.f_locals["abi"] = 99
        try:
            ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))
        except AttributeError:  # Python 3.13: f_locals writes through
            pass
    frame = frame.f_back


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        return rms(x, weight, self.eps)
'''


def test_a_candidate_cannot_rewrite_what_the_report_says_confined_it(tmp_path, monkeypatch):
    """The executor tells the judge how it is confined before it imports the candidate, so a
    candidate that rewrites those facts at import changes nothing the report shows."""
    monkeypatch.setenv("ATREX_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ATREX_EXECUTOR_UNREADABLE", raising=False)
    repo, cand = _rmsnorm_repo_and_candidate(tmp_path)
    (cand / "kernel.py").write_text(TAMPER)
    reports = evaluate(load_repo(repo), {"rmsnorm": [CandidateRef("tamper", cand / "kernel.py",
                                                                 cand)]},
                       EvalOptions(device="cpu"))
    card = reports["tamper"].device
    assert reports["tamper"].op("rmsnorm").status is Status.PASS
    assert card.executor_landlock_abi == _landlock_abi()
    assert card.executor_hidden_paths == 0


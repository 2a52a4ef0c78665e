# ruff: noqa: E402
"""Container mode through the real Docker SDK, against a Docker-compatible engine on loopback.

No container engine runs on the CI machines (no Docker daemon; podman cannot start containers
there), so the engine here starts the worker as a local process: what this shows is the policy the
runner asks for and that the protocol works through the scratch mount; the kernel-level isolation
itself is Docker's.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest

docker = pytest.importorskip("docker")

from atrex.runner.evaluate import EvalOptions, evaluate
from atrex.runner.launch import ContainerLauncher, ContainerPolicy, choose_launcher
from atrex.runner.model import Status
from atrex.runner.repo import load_repo
from atrex.runner.sandbox import CandidateRef

from tests.runner.docker_fake import FakeEngine

CORPUS = Path(__file__).resolve().parents[1] / "adversarial"


@pytest.fixture
def engine():
    with FakeEngine() as fake:
        yield fake


def launcher_for(engine: FakeEngine) -> ContainerLauncher:
    client = docker.DockerClient(base_url=engine.base_url, version="1.43")
    return ContainerLauncher(client, ContainerPolicy(image="atrex-runner:test", memory="8g",
                                                     cpus=2))


def setup_repo(tmp_path: Path, kernel: Path) -> tuple:
    repo = tmp_path / "repo"
    shutil.copytree(CORPUS / "ops" / "rmsnorm", repo / "rmsnorm")
    cand = tmp_path / "cand"
    shutil.copytree(CORPUS / "ops" / "rmsnorm", cand)
    shutil.copy(CORPUS / "cheats" / "_rms_triton.py", cand)
    shutil.copy(kernel, cand / "kernel.py")
    return load_repo(repo), {"rmsnorm": [CandidateRef("c", cand / "kernel.py", cand)]}, cand


def test_container_policy_and_result(tmp_path, engine, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_secret")
    spec, plan, cand = setup_repo(tmp_path, CORPUS / "honest" / "glue_heavy.py")
    reports = evaluate(spec, plan, EvalOptions(device="cpu", launcher=launcher_for(engine)))
    report = reports["c"]
    assert report.op("rmsnorm").status is Status.PASS
    assert report.device.sandbox == "container:atrex-runner:test"
    (create,) = engine.created
    host = create["HostConfig"]
    assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"] and "no-new-privileges" in host["SecurityOpt"]
    assert host["Memory"] == 8 * 1024**3 and host["NanoCpus"] == 2 * 10**9
    assert host["PidsLimit"] == 4096
    assert f"{cand.resolve()}:{cand.resolve()}:ro" in host["Binds"]
    assert any(b.endswith(":rw") for b in host["Binds"])  # the scratch directory only
    assert create["User"] == "atrex"
    env = dict(item.split("=", 1) for item in create["Env"])
    assert "GITHUB_TOKEN" not in env and env["TRITON_INTERPRET"] == "1"


def test_hanging_candidate_is_killed_inside_the_container(tmp_path, engine):
    """The judge in the container kills the hanging executor; the container ends by itself."""
    spec, plan, _ = setup_repo(tmp_path, CORPUS / "crashes" / "hang.py")
    reports = evaluate(spec, plan, EvalOptions(device="cpu", timeout_s=15,
                                               launcher=launcher_for(engine)))
    assert reports["c"].op("rmsnorm").status is Status.TIMEOUT
    assert not engine.killed


def test_container_whose_judge_hangs_is_killed(tmp_path, engine):
    """A reference that hangs stops the judge's messages: the evaluator kills the container."""
    spec, plan, _ = setup_repo(tmp_path, CORPUS / "honest" / "plain_rmsnorm.py")
    reference = spec.op("rmsnorm").path / "reference.py"
    reference.write_text(reference.read_text().replace(
        "    def forward(self", "    def forward(self, *a, **k):\n        import time\n"
        "        time.sleep(3600)\n\n    def _unused(self", 1))
    reports = evaluate(spec, plan, EvalOptions(device="cpu", timeout_s=5,
                                               launcher=launcher_for(engine)))
    assert reports["c"].op("rmsnorm").status is Status.TIMEOUT
    assert engine.killed


def test_choose_launcher(monkeypatch):
    monkeypatch.delenv("ATREX_RUNNER_IMAGE", raising=False)
    monkeypatch.delenv("ATREX_SANDBOX", raising=False)
    assert choose_launcher("auto").name == "subprocess"
    with pytest.raises(ValueError, match="ATREX_RUNNER_IMAGE"):
        choose_launcher("container")
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")  # nothing listens there
    with pytest.raises(ValueError, match="no Docker-compatible engine"):
        choose_launcher("container", image="atrex-runner:test")
    assert choose_launcher("auto", image="atrex-runner:test").name == "subprocess"


def test_a_candidate_cannot_speak_for_the_judge(tmp_path, engine):
    """In the container the channel is a file in the scratch mount; the cheat appends `pass`
    verdicts in the judge's name. Landlock keeps it from writing there at all; without Landlock
    the seal refuses its lines (next test)."""
    spec, plan, _ = setup_repo(tmp_path, CORPUS / "cheats" / "channel_forgery.py")
    reports = evaluate(spec, plan, EvalOptions(device="cpu", launcher=launcher_for(engine)))
    op = reports["c"].op("rmsnorm")
    # Landlock: its write raises (runtime_error); no Landlock: the seal (suspicious); and if the
    # forged lines never landed, its zeros (incorrect)
    assert op.status in (Status.RUNTIME_ERROR, Status.SUSPICIOUS, Status.INCORRECT), op.shapes
    if op.status is Status.RUNTIME_ERROR:
        assert "Permission denied" in op.shapes[0].message and "channel" in op.shapes[0].message


def test_a_line_the_judge_did_not_write_voids_the_operator(tmp_path, engine):
    """Another process appends a well-formed `pass` verdict to the judge's channel file while
    the judge runs (what a candidate could do where the kernel has no Landlock): every verdict
    of the operator is void."""
    spec, plan, _ = setup_repo(tmp_path, CORPUS / "honest" / "plain_rmsnorm.py")
    forged = {"type": "checked", "shape": "cpu", "label": "c", "seq": 1,
              "verdict": {"status": "pass", "message": "", "findings": []}}
    writer = threading.Thread(target=_append_once_begun, args=(engine, forged), daemon=True)
    writer.start()
    reports = evaluate(spec, plan, EvalOptions(device="cpu", launcher=launcher_for(engine)))
    writer.join(timeout=5)
    op = reports["c"].op("rmsnorm")
    assert op.status is Status.SUSPICIOUS, [s.message for s in op.shapes]
    assert "wrote on its result channel" in op.shapes[0].message
    assert "protocol" in {f.kind.value for f in op.findings}


def _append_once_begun(engine, message: dict) -> None:
    """Waits for the judge's container and its first channel line, then appends `message`."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if engine.created:
            cmd = engine.created[0]["Cmd"]
            channel = Path(cmd[cmd.index("--channel") + 1])
            if channel.is_file() and channel.stat().st_size > 0:
                with open(channel, "a") as out:
                    out.write(json.dumps(message) + "\n")
                return
        time.sleep(0.005)

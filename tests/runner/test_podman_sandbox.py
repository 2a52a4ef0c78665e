"""The container sandbox's policy on a real engine: Podman's Docker-compatible API, through the
Docker SDK, with the exact arguments `ContainerLauncher` sends.

Needs root, podman, runc and a static busybox (Debian: podman runc busybox-static; .ci/run installs
them). Debian's default OCI runtime (crun) cannot start containers on the CI machines, so the
service runs with runc. The image is a root filesystem of busybox alone (no registry here), so the
candidate worker itself does not run; a probe inside the container reports what a candidate would
see: its user, network interfaces, capabilities, limits, environment and which mounts it can write.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

docker = pytest.importorskip("docker")

from atrex.runner.launch import ContainerLauncher, ContainerPolicy  # noqa: E402
from atrex.runner.sandbox import scrubbed_env  # noqa: E402

IMAGE = "localhost/atrex-sandbox-probe:1"
PROBE = """
S=$1; C=$2
id -u > $S/uid
ls /sys/class/net > $S/net
(touch /written 2>/dev/null && echo yes || echo no) > $S/rootfs
(touch $C/written 2>/dev/null && echo yes || echo no) > $S/code
(touch $S/written 2>/dev/null && echo yes || echo no) > $S/scratch
grep CapEff /proc/self/status > $S/caps
cat $C/kernel.py > $S/read
env > $S/env
ulimit -n > $S/nofile
ulimit -u > $S/nproc
"""


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (rootful podman)"
    for tool in ("podman", "runc"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian: apt-get install podman runc busybox-static)"
    if not Path("/bin/busybox").is_file():
        return "/bin/busybox is not installed (Debian: apt-get install busybox-static)"
    return None


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    reason = _missing()
    if reason:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("podman")
    sock = work / "podman.sock"
    service = subprocess.Popen(["podman", "--runtime", "runc", "system", "service", "--time=0",
                                f"unix://{sock}"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    client = docker.DockerClient(base_url=f"unix://{sock}", version="1.41", timeout=60)
    deadline = time.monotonic() + 30
    while True:
        try:
            client.ping()
            break
        except Exception:  # noqa: BLE001 - not up yet
            if time.monotonic() > deadline or service.poll() is not None:
                service.kill()
                pytest.skip("podman system service did not answer")
            time.sleep(0.2)
    _import_image(work)
    yield client
    service.terminate()
    service.wait(timeout=20)


def _import_image(work: Path) -> None:
    root = work / "rootfs"
    for d in ("bin", "etc", "tmp", "proc", "sys", "dev"):
        (root / d).mkdir(parents=True)
    shutil.copy("/bin/busybox", root / "bin" / "busybox")
    (root / "bin" / "sh").symlink_to("busybox")
    (root / "etc" / "passwd").write_text("root:x:0:0::/:/bin/sh\n"
                                         "atrex:x:10001:10001::/tmp:/bin/sh\n")
    (root / "etc" / "group").write_text("root:x:0:\natrex:x:10001:\n")
    with tarfile.open(work / "rootfs.tar", "w") as tar:
        tar.add(root, arcname=".")
    subprocess.run(["podman", "import", str(work / "rootfs.tar"), IMAGE], check=True,
                   capture_output=True, timeout=120)


def test_sandbox_policy_on_a_real_engine(engine, tmp_path):
    code, scratch = tmp_path / "code", tmp_path / "scratch"
    code.mkdir()
    scratch.mkdir()
    (code / "kernel.py").write_text("KERNEL = 1\n")
    scratch.chmod(0o777)  # the container user (uid 10001) writes here, like the runner image's
    launcher = ContainerLauncher(engine, ContainerPolicy(image=IMAGE, memory="512m", cpus=1,
                                                         pids=256))
    env = scrubbed_env("cpu", 0, scratch, source={"PATH": "/bin", "GITHUB_TOKEN": "ghs_secret",
                                                  "ATREX_WEBHOOK_SECRET": "s", "LANG": "C"})
    kwargs = launcher.run_kwargs(env, scratch, [code], "cpu", 0, scratch / "job.json",
                                 scratch / "channel.jsonl")
    kwargs.update(entrypoint=["/bin/busybox", "sh", "-c", PROBE, "probe", str(scratch),
                              str(code)], command=[])
    container = engine.containers.run(IMAGE, detach=True, **kwargs)
    try:
        assert container.wait(timeout=60)["StatusCode"] == 0, container.logs()
        attrs = engine.api.inspect_container(container.id)
    finally:
        container.remove(force=True)

    def read(name: str) -> str:
        return (scratch / name).read_text().strip()

    assert read("uid") == "10001"
    assert read("net").split() == ["lo"]  # no network
    assert read("rootfs") == "no" and read("code") == "no" and read("scratch") == "yes"
    assert read("caps").split()[-1] == "0000000000000000"
    assert read("read") == "KERNEL = 1"
    seen_env = dict(line.split("=", 1) for line in read("env").splitlines() if "=" in line)
    assert "GITHUB_TOKEN" not in seen_env and "ATREX_WEBHOOK_SECRET" not in seen_env
    assert seen_env["TRITON_INTERPRET"] == "1" and seen_env["CUDA_VISIBLE_DEVICES"] == ""
    assert read("nofile") == "16384" and read("nproc") == "4096"
    host = attrs["HostConfig"]
    assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True
    assert host["Memory"] == 512 * 1024**2 and host["PidsLimit"] == 256

"""Scale-out on Celery with a real Redis server and real worker processes, on the CPU.

`atrex serve` records deliveries; a light worker and two GPU workers of one kind
(`atrex worker --engine celery --gpu-kind cpu_fleet --gpu 0|1`) take job ids from Redis and
evaluate with the runner (Triton interpreter). Shown: jobs spread over both GPU workers; a GPU
worker killed with SIGKILL mid-evaluation and the job completing on the other, with one check-run
completion and one sticky comment; a job for a GPU kind no worker serves waiting (and reported as
waiting by `atrex status`) until a worker of that kind starts.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from atrex.bot.render import STICKY_MARKER
from atrex.bot.store import DONE, FAILED, QUEUED, RUNNING, SqlStore

from tests.bot.conftest import APP_ID, SECRET, bot_settings, process_env
from tests.bot.github_fake import FakeGitHub
from tests.bot.world import (
    BotProcess,
    BotServer,
    KernelRepo,
    deliver,
    free_port,
    pr_payload,
    wait_for,
)

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
OWNER = "octo"
KIND = "cpu_fleet"


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server; "
                    ".ci/run installs it)")
    port = free_port()
    work = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(work)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    import redis

    client = redis.Redis(port=port)
    wait_for(lambda: _pings(client), timeout=20, what="redis-server")
    yield f"redis://127.0.0.1:{port}/0"
    proc.terminate()
    proc.wait(timeout=10)


def _pings(client) -> bool:
    try:
        return client.ping()
    except Exception:  # noqa: BLE001 - not up yet
        return False


class Fleet:
    def __init__(self, base: Path, fake: FakeGitHub, env: dict[str, str]):
        self.base, self.fake, self.env = base, fake, env
        self.server = BotServer(env, base / "server.log")
        self.workers: dict[str, BotProcess] = {}
        self._store: SqlStore | None = None

    @property
    def store(self) -> SqlStore:
        if self._store is None:
            self._store = SqlStore(f"sqlite:///{self.base / 'data' / 'atrex-bot.db'}")
        return self._store

    def start_worker(self, name: str, *args: str) -> BotProcess:
        log = self.base / f"{name}-{len(self.workers)}.log"
        worker = BotProcess(["worker", "--engine", "celery", *args], self.env, log)
        self.workers[name] = worker.start()
        return worker

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}"
                         for p in sorted(self.base.glob("*.log")))

    def repo(self, name: str, gpu: str = KIND) -> KernelRepo:
        (self.base / name).mkdir()
        kernels = KernelRepo(self.base / name, name)
        kernels.commit("gpu kind", {"atrex.toml": f'[repo]\nops_root = "ops"\ngpu = "{gpu}"\n'})
        kernels.push("main")
        self.fake.add_repo(f"{OWNER}/{name}", str(kernels.remote), installation_id=1)
        return kernels

    def open_pr(self, kernels: KernelRepo, number: int, note: str) -> str:
        name = f"{OWNER}/{kernels.remote.stem}"
        kernels.branch(f"pr{number}")
        sha = kernels.touch_kernel(note)
        kernels.push(f"pr{number}")
        self.fake.add_pull(name, number, f"pr{number}")
        data = pr_payload("opened", name, number, sha, f"pr{number}",
                          clone_url=str(kernels.remote))
        assert deliver(self.server.url, "pull_request", data, SECRET).status_code == 202
        return sha

    def evaluate_job(self, repo: str):
        jobs = [j for j in self.store.list(kind="evaluate") if j.payload["repo"] == repo]
        return jobs[0] if jobs else None

    def runs(self, job_id: int) -> list[dict]:
        records = self.store.effects_of(job_id, "run:")
        return [json.loads(records[k]) for k in sorted(records)]

    def status(self) -> dict:
        out = subprocess.run([sys.executable, "-m", "atrex.bot", "status", "--json"], cwd=ROOT,
                             env=self.env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)


@pytest.fixture(scope="module")
def fleet(app_key, tmp_path_factory, redis_url):
    base = tmp_path_factory.mktemp("fleet")
    fake = FakeGitHub(APP_ID, app_key.public_key).start()
    # lease 8 s (the takeover after a kill waits this long): with 4 s the kill test ended "failed"
    # once on a 2-core machine running two test suites at once, not reproduced since; missed
    # heartbeats are the likely cause. Its assertion prints the job's error and the worker logs.
    env = process_env({**bot_settings(fake, app_key, base / "data"), "ATREX_ENGINE": "celery",
                       "ATREX_BROKER_URL": redis_url, "ATREX_LEASE_S": "8",
                       "ATREX_HEARTBEAT_S": "0.5", "ATREX_POLL_S": "0.2",
                       "ATREX_VISIBILITY_TIMEOUT_S": "3600", "ATREX_SANDBOX": "subprocess"})
    f = Fleet(base, fake, env)
    f.server.start()
    f.start_worker("light")
    f.start_worker("gpu0", "--gpu-kind", KIND, "--gpu", "0")
    f.start_worker("gpu1", "--gpu-kind", KIND, "--gpu", "1")
    yield f
    for worker in f.workers.values():
        worker.kill9()
    f.server.stop()
    f.store.close()
    fake.stop()


def _done(fleet: Fleet, repo: str) -> bool:
    job = fleet.evaluate_job(repo)
    return job is not None and job.state in (DONE, FAILED)


def test_jobs_spread_over_both_gpu_workers(fleet):
    repos = [fleet.repo(f"spread{i}") for i in range(4)]
    shas = [fleet.open_pr(kernels, 1, f"spread {i}") for i, kernels in enumerate(repos)]
    names = [f"{OWNER}/spread{i}" for i in range(4)]
    wait_for(lambda: all(_done(fleet, n) for n in names), timeout=300,
             what=f"four evaluations\n{fleet.logs()}")
    lanes = set()
    for name, sha in zip(names, shas, strict=True):
        job = fleet.evaluate_job(name)
        assert job.state == DONE and job.result["conclusion"] == "neutral", job.error
        gpu_runs = [r for r in fleet.runs(job.id) if r["lane"] != "light"]
        assert [r["gpu_index"] for r in gpu_runs] in ([0], [1])
        lanes.add(gpu_runs[0]["lane"])
        assert fleet.store.effect(job.id, "gpu_kind") == KIND
        [run] = fleet.fake.runs_for(name, sha)
        assert run["conclusion"] == "neutral"
    assert lanes == {"gpu0", "gpu1"}, "both GPU workers took jobs"


def test_gpu_worker_killed_mid_job_completes_on_the_other_once(fleet):
    kernels = fleet.repo("killed")
    name = f"{OWNER}/killed"
    sha = fleet.open_pr(kernels, 1, "kill me")

    def running_on_gpu():
        job = fleet.evaluate_job(name)
        return job if job and job.state == RUNNING and job.queue == "gpu" else None

    job = wait_for(running_on_gpu, timeout=120, what=f"the GPU stage\n{fleet.logs()}")
    wait_for(lambda: any(r["status"] == "in_progress" for r in fleet.fake.runs_for(name, sha)),
             timeout=60, what="the evaluation to start")
    gpu_runs = wait_for(lambda: [r for r in fleet.runs(job.id) if r["lane"] != "light"],
                        timeout=30, what="the GPU run record")
    victim = gpu_runs[-1]["lane"]
    fleet.workers[victim].kill9()
    wait_for(lambda: _done(fleet, name), timeout=180, what=f"the takeover\n{fleet.logs()}")

    job = fleet.evaluate_job(name)
    assert job.state == DONE and job.result["conclusion"] == "neutral", \
        f"{job.state}: {job.error}\n{fleet.logs()}"  # a str, which pytest does not shorten
    gpu_runs = [r for r in fleet.runs(job.id) if r["lane"] != "light"]
    assert [r["lane"] for r in gpu_runs][0] == victim and "end" not in gpu_runs[0]
    assert gpu_runs[-1]["lane"] != victim and "end" in gpu_runs[-1]
    [run] = fleet.fake.runs_for(name, sha)
    assert run["conclusion"] == "neutral"
    assert [s for s, _ in run["_history"]].count("completed") == 1
    stickies = [c for c in fleet.fake.comments_on(name, 1) if STICKY_MARKER in c["body"]]
    assert len(stickies) == 1 and stickies[0]["_edits"] == 0
    fleet.start_worker(victim, "--gpu-kind", KIND, "--gpu", victim[-1])  # back to two


def test_job_for_an_unserved_gpu_kind_waits_and_is_reported(fleet):
    kernels = fleet.repo("bigger", gpu="b200_test")
    name = f"{OWNER}/bigger"
    sha = fleet.open_pr(kernels, 1, "needs a b200")

    def published():
        job = fleet.evaluate_job(name)
        return job and job.queue == "gpu" and fleet.store.effect(job.id, "celery:published")

    wait_for(published, timeout=60, what=f"routing to the b200 queue\n{fleet.logs()}")
    time.sleep(3)  # nobody takes it
    job = fleet.evaluate_job(name)
    assert job.state == QUEUED and fleet.store.effect(job.id, "gpu_kind") == "b200_test"
    [run] = fleet.fake.runs_for(name, sha)
    assert run["status"] == "queued"
    doc = fleet.status()
    [entry] = [j for j in doc["jobs"] if j["id"] == job.id]
    assert entry["broker_queue"] == "atrex.gpu.b200_test"
    assert entry["waiting_for"] == "a worker for atrex.gpu.b200_test (none is running)"
    assert f"atrex.gpu.{KIND}" in doc["served_queues"]

    fleet.start_worker("b200", "--gpu-kind", "b200_test", "--gpu", "2")
    wait_for(lambda: _done(fleet, name), timeout=180, what=f"the b200 worker\n{fleet.logs()}")
    job = fleet.evaluate_job(name)
    assert job.state == DONE and fleet.runs(job.id)[-1]["lane"] == "gpu2"

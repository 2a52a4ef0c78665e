"""One worker lane per GPU, on the CPU with two fake GPU indices (issue 8's CPU part).

Two GPU lanes (indices 0 and 1) run concurrently in one worker, as two Celery GPU workers would.
The evaluation is replaced by one that records the environment the runner's sandbox gives a
candidate on that device (`atrex.runner.sandbox.scrubbed_env`, device cuda: CUDA_VISIBLE_DEVICES
pinned to the lane's physical GPU) and holds the "GPU" for a while. The store's run records show
both GPUs used, two evaluations at once, and never two jobs on one GPU at the same time.
"""

from __future__ import annotations

import json
import threading
import time

from atrex.bot.newjobs import evaluate_job
from atrex.bot.worker import lanes_for
from atrex.runner.sandbox import scrubbed_env

from tests.bot.test_worker import make_runtime, timed_report
from tests.bot.world import KernelRepo

HOST_VISIBLE = "4,5"  # the worker host's own CUDA_VISIBLE_DEVICES: lane i gets the i-th of these


def test_two_gpu_lanes_pin_their_gpu_and_hold_one_job_each(fake, config, tmp_path):
    config.data_dir.mkdir(parents=True, exist_ok=True)
    seen: list[dict] = []
    lock = threading.Lock()

    def evaluate(repo, plan, options, progress=None):
        env = scrubbed_env("cuda", options.device_index, tmp_path,
                           source={"CUDA_VISIBLE_DEVICES": HOST_VISIBLE, "PATH": "/usr/bin",
                                   "GITHUB_TOKEN": "ghs_x"})
        with lock:
            seen.append({"gpu": options.device_index, "env": env})
        time.sleep(1.5)  # the GPU is busy
        return {"head": timed_report(0.5), "base": timed_report(0.5)}

    runtime = make_runtime(config, evaluate=evaluate)
    repos, shas = [], []
    for i in range(4):
        name = f"octo/lanes{i}"
        (tmp_path / name).mkdir(parents=True)
        kernels = KernelRepo(tmp_path / name, "kernels")
        fake.add_repo(name, str(kernels.remote))
        kernels.branch("tune")
        kernels.touch_kernel("tuned")
        shas.append(kernels.push("tune"))
        fake.add_pull(name, 1, "tune")
        repos.append(name)
        runtime.store.enqueue(evaluate_job(name, 1, 1, shas[-1], fork=False, reason="t"))

    lanes = lanes_for(runtime, (0, 1), light=True)
    stop = threading.Event()
    threads = [threading.Thread(target=lane.run_forever, args=(stop,)) for lane in lanes]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not all(
            j.state == "done" for j in runtime.store.list(kind="evaluate")):
        time.sleep(0.1)
    stop.set()
    for thread in threads:
        thread.join()

    jobs = runtime.store.list(kind="evaluate")
    assert [j.state for j in jobs] == ["done"] * 4
    for repo, sha in zip(repos, shas, strict=True):
        [run] = fake.runs_for(repo, sha)
        assert run["conclusion"] == "success"

    # the candidate sandbox of lane i sees only physical GPU HOST_VISIBLE[i], and no secrets
    pinned = {s["gpu"]: s["env"]["CUDA_VISIBLE_DEVICES"] for s in seen}
    assert pinned == {0: "4", 1: "5"}
    assert all("GITHUB_TOKEN" not in s["env"] for s in seen)

    # the store's records: which lane ran each job, when
    runs = [json.loads(v) for j in jobs for k, v in runtime.store.effects_of(j.id, "run:").items()]
    gpu_runs = [r for r in runs if r["lane"] != "light"]
    assert len(gpu_runs) == 4 and {r["gpu_index"] for r in gpu_runs} == {0, 1}
    assert all(r["lane"] == f"gpu{r['gpu_index']}" for r in gpu_runs)
    for gpu in (0, 1):
        spans = sorted((r["start"], r["end"]) for r in gpu_runs if r["gpu_index"] == gpu)
        pairs = zip(spans, spans[1:], strict=False)
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in pairs), \
            f"GPU {gpu} held two jobs at once: {spans}"
    overlaps = [(a, b) for a in gpu_runs for b in gpu_runs if a["gpu_index"] == 0
                and b["gpu_index"] == 1 and a["start"] < b["end"] and b["start"] < a["end"]]
    assert overlaps, "the two GPUs never worked at the same time"

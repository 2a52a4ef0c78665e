"""Webhook intake under load: signed deliveries at a fixed rate against the real server.

Starts `python -m atrex.bot serve` (gunicorn, the production settings) on loopback with a fresh
SQLite job store and no workers, so jobs are only recorded, never run. An open-loop generator sends
GitHub's published `pull_request.synchronize` example payload (adapted: a distinct PR and head SHA
per delivery, ~28 KB each), signed with the webhook secret, at `--rate` per second for `--seconds`;
a fraction is sent a second time with the same delivery id (GitHub's redelivery). Latency is
measured from each delivery's *scheduled* send time to the server's answer (so a stalled server
cannot hide queueing delay). Afterwards the job store is read directly: `lost` counts acknowledged
deliveries without their job, `duplicated` counts extra jobs for one delivery.

`--slow-clients N` keeps N connections open that trickle a request one byte per second (each
reconnects when the server gives up on it), and probes `GET /healthz` 10 times a second, also from
scheduled times. `--installation-repos N` sends one `installation.created` with N repositories
halfway through, and reports its answer time (the PR deliveries around it are in the percentiles).

    python benchmarks/webhook_load.py [--rate 100] [--seconds 30] [--out PATH]
        [--slow-clients 10] [--installation-repos 50000] [--note TEXT]
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import hashlib
import hmac
import json
import os
import platform
import select
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from atrex.bot.store import SqlStore  # noqa: E402

PAYLOAD = ROOT / "tests" / "bot" / "payloads" / "pull_request.synchronize.json"
SECRET = "load-test-secret"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def start_server(data_dir: Path, port: int, env_extra: dict[str, str]) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATREX_")}
    env.update({"ATREX_WEBHOOK_SECRET": SECRET, "ATREX_DATA_DIR": str(data_dir), **env_extra})
    proc = subprocess.Popen([sys.executable, "-m", "atrex.bot", "serve", "--host", "127.0.0.1",
                             "--port", str(port)], cwd=ROOT, env=env, start_new_session=True,
                            stdout=open(data_dir / "server.log", "wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1).ok:
                return proc
        except requests.ConnectionError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the server did not start:\n" + (data_dir / "server.log").read_text())


def build_deliveries(count: int, redeliver_every: int) -> list[tuple[str, bytes]]:
    template = json.loads(PAYLOAD.read_text())
    template["installation"] = {"id": 1}
    deliveries = []
    for i in range(count):
        template["number"] = template["pull_request"]["number"] = i + 1
        template["pull_request"]["head"]["sha"] = hashlib.sha1(str(i).encode()).hexdigest()
        deliveries.append((f"load-{i}", json.dumps(template).encode()))
    redeliveries = [deliveries[i] for i in range(0, count, redeliver_every)] \
        if redeliver_every else []
    out, step = [], max(1, count // max(1, len(redeliveries)))
    for i, item in enumerate(deliveries):  # interleave the redeliveries with the new ones
        out.append(item)
        if redeliveries and i % step == step - 1:
            out.append(redeliveries.pop(0))
    return out + redeliveries


class Sender:
    def __init__(self, url: str):
        self.url = url
        self.local = threading.local()

    def session(self) -> requests.Session:
        if not hasattr(self.local, "session"):
            self.local.session = requests.Session()
        return self.local.session

    def send(self, scheduled: float, delivery: str, body: bytes) -> tuple[str, int, float]:
        delay = scheduled - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        signature = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        headers = {"X-GitHub-Event": "pull_request", "X-GitHub-Delivery": delivery,
                   "X-Hub-Signature-256": signature, "Content-Type": "application/json",
                   "User-Agent": "GitHub-Hookshot/load"}
        try:
            status = self.session().post(self.url, data=body, headers=headers,
                                         timeout=10).status_code
        except requests.RequestException:
            status = 0
        return delivery, status, (time.perf_counter() - scheduled) * 1000.0


class SlowClients:
    """N connections that each send a request one byte per `interval_s` (slowloris)."""

    def __init__(self, host: str, port: int, count: int, interval_s: float = 1.0):
        self.address, self.count, self.interval_s = (host, port), count, interval_s
        body = json.dumps({"zen": "slow"}).encode()
        self.request = (b"POST /webhook HTTP/1.1\r\nHost: load\r\nX-GitHub-Event: ping\r\n"
                        b"Content-Length: %d\r\n\r\n" % len(body)) + body
        self.stop = threading.Event()
        self.answers: Counter = Counter()  # the first line of each answer the server gave
        self.connections = 0
        self.threads = [threading.Thread(target=self._client, daemon=True) for _ in range(count)]

    def start(self) -> SlowClients:
        for thread in self.threads:
            thread.start()
        return self

    def _client(self) -> None:
        while not self.stop.is_set():
            try:
                with socket.create_connection(self.address, timeout=60) as sock:
                    self.connections += 1
                    self._trickle(sock)
            except OSError:
                self.answers["connection error"] += 1
                self.stop.wait(self.interval_s)

    def _trickle(self, sock: socket.socket) -> None:
        for i in range(len(self.request)):
            if self.stop.is_set():
                return
            if select.select([sock], [], [], 0)[0]:
                break  # the server answered (408) before the request was complete
            sock.send(self.request[i:i + 1])
            self.stop.wait(self.interval_s)
        answer = sock.recv(256)
        self.answers[answer.split(b"\r\n", 1)[0].decode(errors="replace") or "closed"] += 1

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=5)


class Prober:
    """GET `url` at `rate` per second from scheduled times; latency from the scheduled time."""

    def __init__(self, url: str, rate: float, seconds: float):
        self.url, self.rate, self.seconds = url, rate, seconds
        self.results: list[tuple[int, float]] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        start = time.perf_counter()
        with futures.ThreadPoolExecutor(max_workers=8) as pool:
            self.results = list(pool.map(self._probe, (start + i / self.rate for i in range(
                int(self.rate * self.seconds)))))

    def _probe(self, scheduled: float) -> tuple[int, float]:
        delay = scheduled - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        try:
            status = requests.get(self.url, timeout=10).status_code
        except requests.RequestException:
            status = 0
        return status, (time.perf_counter() - scheduled) * 1000.0


def installation_body(count: int) -> bytes:
    data = json.loads((PAYLOAD.parent / "installation.created.json").read_text())
    data["installation"]["id"] = 424242
    data["repositories"] = [{"id": i, "node_id": f"R_{i}", "name": f"kernels-{i}",
                             "full_name": f"org{i % 97}/kernels-{i}", "private": False}
                            for i in range(count)]
    return json.dumps(data).encode()


def send_installation(url: str, body: bytes, at: float, out: dict) -> None:
    delay = at - time.perf_counter()
    if delay > 0:
        time.sleep(delay)
    signature = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    start = time.perf_counter()
    response = requests.post(url, data=body, timeout=120, headers={
        "X-GitHub-Event": "installation", "X-GitHub-Delivery": "load-installation",
        "X-Hub-Signature-256": signature, "Content-Type": "application/json"})
    out.update(status=response.status_code, answered_s=round(time.perf_counter() - start, 3))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def _latency_summary(results: list[tuple[int, float]]) -> dict:
    latencies = [ms for _, ms in results]
    return {"probes": len(results), "p50_ms": round(percentile(latencies, 50), 2),
            "p99_ms": round(percentile(latencies, 99), 2), "max_ms": round(max(latencies), 2),
            "status_counts": dict(Counter(str(s) for s, _ in results)),
            "measured_from": "scheduled probe time, 10 probes per second"}


def run(rate: float, seconds: float, out: Path, redeliver_every: int,
        env_extra: dict[str, str], slow_clients: int = 0, installation_repos: int = 0,
        note: str | None = None) -> dict:
    load_before = os.getloadavg()
    extra: dict = {}
    with tempfile.TemporaryDirectory(prefix="atrex-load-") as tmp:
        data_dir = Path(tmp)
        port = free_port()
        server = start_server(data_dir, port, env_extra)
        slow = SlowClients("127.0.0.1", port, slow_clients).start() if slow_clients else None
        try:
            deliveries = build_deliveries(int(rate * seconds), redeliver_every)
            big = installation_body(installation_repos) if installation_repos else None
            if slow is not None:
                time.sleep(2.0)  # every slow client is connected and trickling
            sender = Sender(f"http://127.0.0.1:{port}/webhook")
            start = time.perf_counter() + 0.5
            prober = Prober(f"http://127.0.0.1:{port}/healthz", 10.0, seconds) if slow else None
            if prober is not None:
                prober.thread.start()
            installation: dict = {}
            big_thread = threading.Thread(target=send_installation, args=(
                sender.url, big, start + seconds / 2, installation)) if big else None
            if big_thread is not None:
                big_thread.start()
            with futures.ThreadPoolExecutor(max_workers=32) as pool:
                results = list(pool.map(
                    lambda item: sender.send(start + item[0] / rate, *item[1]),
                    enumerate(deliveries)))
            elapsed = time.perf_counter() - start
            if prober is not None:
                prober.thread.join()
                extra["healthz"] = _latency_summary(prober.results)
            if big_thread is not None:
                big_thread.join()
                extra["installation"] = {"repositories": installation_repos, "body_mb": round(
                    len(big) / 1e6, 2), "sent_at_s": seconds / 2, **installation}
        finally:
            if slow is not None:
                slow.close()
                extra["slow_clients"] = {
                    "count": slow_clients, "trickle": "one byte per second, reconnecting",
                    "connections_made": slow.connections, "answers": dict(slow.answers),
                    "read_timeout_s": float(env_extra.get("ATREX_WEB_READ_TIMEOUT_S", 10))}
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
        store = SqlStore(f"sqlite:///{data_dir / 'atrex-bot.db'}")
        jobs = store.list()
        counts = store.counts()
        if installation_repos:
            extra.setdefault("installation", {})["repositories_recorded"] = sum(
                1 for i in store.installed_repos().values() if i == 424242)
        store.close()
    latencies = [ms for _, _, ms in results]
    acked = {d for d, status, _ in results if status in (200, 202)}
    per_pr = Counter(job.payload["pr"] for job in jobs)
    expected = {int(d.split("-")[1]) + 1 for d in acked}
    result = {
        "p50_ms": round(percentile(latencies, 50), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
        "max_ms": round(max(latencies), 2),
        "mean_ms": round(statistics.fmean(latencies), 2),
        "lost": len(expected - set(per_pr)),
        "duplicated": sum(n - 1 for n in per_pr.values() if n > 1),
        "deliveries_sent": len(results),
        "redeliveries_sent": len(results) - len({d for d, _, _ in results}),
        "acknowledged": sum(1 for _, s, _ in results if s in (200, 202)),
        "status_counts": dict(Counter(str(s) for _, s, _ in results)),
        "jobs_recorded": len(jobs),
        "deliveries_recorded": counts["deliveries"],
        "rate_per_s": rate, "seconds": seconds, "achieved_rate_per_s": round(
            len(results) / elapsed, 1),
        "latency_measured_from": "scheduled send time (open loop), client on the same host",
        "payload": "pull_request.synchronize example from @octokit/webhooks-examples, ~"
                   f"{round(len(deliveries[0][1]) / 1024)} KiB",
        **extra,
        "server": {"command": "python -m atrex.bot serve (gunicorn, "
                              "atrex.bot.serving.BufferedThreadWorker: "
                   "requests read whole by the event loop, then a thread)",
                   "web_workers": int(env_extra.get("ATREX_WEB_WORKERS", 1)),
                   "web_threads": int(env_extra.get("ATREX_WEB_THREADS", 8)),
                   "job_store": "SQLite WAL, synchronous="
                   + env_extra.get("ATREX_SQLITE_SYNCHRONOUS", "NORMAL"),
                   "workers_running": False},
        "machine": {"cpu_model": cpu_model(), "cores": os.cpu_count(),
                    "python": platform.python_version(), "platform": platform.platform(),
                    "load_average_1m_before_after": [round(load_before[0], 2),
                                                     round(os.getloadavg()[0], 2)]},
        **({"note": note} if note else {}),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=100.0, help="deliveries per second")
    parser.add_argument("--seconds", type=float, default=30.0, help="duration")
    parser.add_argument("--redeliver-every", type=int, default=20,
                        help="also redeliver every Nth delivery (0: never)")
    parser.add_argument("--sync", choices=("NORMAL", "FULL"), default="NORMAL",
                        help="SQLite synchronous setting of the job store")
    parser.add_argument("--web-workers", type=int, default=1)
    parser.add_argument("--slow-clients", type=int, default=0,
                        help="connections trickling a request one byte per second")
    parser.add_argument("--installation-repos", type=int, default=0,
                        help="send one installation.created with this many repositories")
    parser.add_argument("--note", help="a note stored with the result (e.g. machine load)")
    parser.add_argument("--out", type=Path,
                        default=ROOT / "benchmarks" / "results" / "webhook-load.json")
    args = parser.parse_args()
    env_extra = {"ATREX_SQLITE_SYNCHRONOUS": args.sync,
                 "ATREX_WEB_WORKERS": str(args.web_workers)}
    result = run(args.rate, args.seconds, args.out, args.redeliver_every, env_extra,
                 args.slow_clients, args.installation_repos, args.note)
    print(json.dumps({k: result[k] for k in ("p50_ms", "p99_ms", "max_ms", "lost", "duplicated",
                                             "deliveries_sent", "jobs_recorded", "healthz",
                                             "installation") if k in result}))
    return 0 if result["lost"] == 0 and result["duplicated"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

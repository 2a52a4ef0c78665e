"""`atrex status`: what the job store says is queued, running and waiting, and why it waits.

With ATREX_ENGINE=celery it also asks the live workers which queues they consume, so a job routed to
a GPU kind no worker serves is reported as waiting for such a worker (it stays queued in the store
and in the broker, and runs as soon as one starts).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from .store import ACTIVE_STATES, QUEUED, RUNNING, WAITING, Job, SqlStore


def job_status(job: Job, effects: dict[str, str], served: set[str] | None,
               now: float) -> dict:
    published = json.loads(effects["celery:published"]) if "celery:published" in effects \
        else None
    broker_queue = published["queue"] if published else None
    entry = {"id": job.id, "kind": job.kind, "state": job.state, "lane": job.queue,
             "repo": job.payload.get("repo"), "pr": job.payload.get("pr"),
             "gpu_kind": effects.get("gpu_kind"), "broker_queue": broker_queue,
             "attempts": job.attempts, "age_s": round(now - job.created_at, 1),
             "lease_owner": job.lease_owner}
    entry["waiting_for"] = _waiting_for(job, broker_queue, served, now)
    return entry


def _waiting_for(job: Job, broker_queue: str | None, served: set[str] | None,
                 now: float) -> str | None:
    if job.state == WAITING:
        return "a maintainer's /atrex approve"
    if job.state == RUNNING:
        return "a new worker (the lease expired)" if (job.lease_expires or 0) < now else None
    if job.state != QUEUED:
        return None
    if job.not_before > now:
        return f"a retry in {job.not_before - now:.0f} s"
    if served is not None and broker_queue is not None and broker_queue not in served:
        return f"a worker for {broker_queue} (none is running)"
    return "a free worker"


def status(store: SqlStore, served: set[str] | None,
           clock: Callable[[], float] = time.time) -> dict:
    now = clock()
    active = [j for j in store.list() if j.state in ACTIVE_STATES]
    return {"counts": store.counts(),
            "served_queues": sorted(served) if served is not None else None,
            "jobs": [job_status(j, store.effects_of(j.id), served, now) for j in active]}


def render(doc: dict) -> str:
    counts = ", ".join(f"{k} {v}" for k, v in doc["counts"].items())
    lines = [f"jobs: {counts}"]
    if doc["served_queues"] is not None:
        lines.append("served queues: " + (", ".join(doc["served_queues"]) or "none"))
    for j in doc["jobs"]:
        where = j["broker_queue"] or j["lane"]
        lines.append(f"job {j['id']} {j['kind']} {j['state']} on {where} ({j['repo']}#{j['pr']}, "
                     f"{j['age_s']:.0f} s)" + (f": waiting for {j['waiting_for']}"
                                               if j["waiting_for"] else ""))
    return "\n".join(lines)

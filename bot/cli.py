"""`atrex serve`, `atrex worker` and `atrex schedule run-once`: registered on the `atrex` command
by `register(subparsers)`."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from atrex.runner.judge.procs import refuse_inspection

from . import historycli, prcli
from .config import CONFIG_ENV, ConfigError, load_config


def register(subparsers: argparse._SubParsersAction) -> None:
    prcli.register(subparsers)
    historycli.register(subparsers)
    serve = subparsers.add_parser(
        "serve", help="run the GitHub App's web server (webhooks)",
        description="Serve POST /webhook and GET /healthz with gunicorn. Settings come from "
        "ATREX_* environment variables and/or the TOML file given by --config (see docs/bot.md).")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080, help="port to bind (default 8080)")
    serve.add_argument("--config", help="TOML file with a [bot] table (default: $ATREX_CONFIG)")
    serve.add_argument("--with-worker", action="store_true",
                       help="also start a worker process (one machine, no other server)")
    serve.add_argument("--access-log", action="store_true", help="log every request")
    serve.set_defaults(func=cmd_serve)

    worker = subparsers.add_parser(
        "worker", help="run jobs: PR evaluations (one per GPU) and GitHub-only jobs",
        description="Claim jobs from the job store and run them: a light lane for GitHub-only "
        "jobs and one lane per GPU for evaluations.")
    worker.add_argument("--config", help="TOML file with a [bot] table (default: $ATREX_CONFIG)")
    worker.add_argument("--gpu", type=int, action="append", dest="gpus", metavar="INDEX",
                        help="GPU index to serve (repeatable; default: ATREX_GPUS)")
    worker.add_argument("--no-gpu", action="store_true", help="serve only the light lane")
    worker.add_argument("--no-light", action="store_true", help="serve only GPU lanes")
    worker.add_argument("--engine", choices=("embedded", "celery"),
                        help="embedded (poll the job store) or celery (job ids from "
                        "ATREX_BROKER_URL; one lane per process); default: ATREX_ENGINE")
    worker.add_argument("--gpu-kind", metavar="KIND",
                        help="celery: the GPU kind this worker serves (e.g. h200_sxm)")
    worker.add_argument("--sandbox", choices=("auto", "subprocess", "container"),
                        help="how candidates run (default: ATREX_SANDBOX)")
    worker.add_argument("--runner-image", metavar="IMAGE",
                        help="image for --sandbox container (default: ATREX_RUNNER_IMAGE)")
    worker.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)
    worker.set_defaults(func=cmd_worker)

    status = subparsers.add_parser(
        "status", help="queued, running and waiting jobs, and what they wait for",
        description="Read the job store (and, with ATREX_ENGINE=celery, ask the live workers "
        "which queues they serve).")
    status.add_argument("--config", help="TOML file with a [bot] table (default: $ATREX_CONFIG)")
    status.add_argument("--json", action="store_true", help="print JSON")
    status.set_defaults(func=cmd_status)

    report = subparsers.add_parser(
        "job-report", help="print the whole stored report of a PR evaluation job",
        description="The report an evaluation job stored (what its comment and check run were "
        "rendered from), whole: GitHub's size limits cut the comment and the check run, not "
        "this. JSON by default.")
    report.add_argument("job", type=int, help="the job id (the footer of the comment)")
    report.add_argument("--markdown", action="store_true",
                        help="the comment's Markdown, uncut, instead of the JSON")
    report.add_argument("--config", help="TOML file with a [bot] table (default: $ATREX_CONFIG)")
    report.set_defaults(func=cmd_job_report)

    schedule = subparsers.add_parser(
        "schedule", help="scheduled optimization runs",
        description="Scheduled optimization runs of installed repositories that opt in with "
        "[schedule] enabled = true in their atrex.toml (see docs/bot.md).")
    actions = schedule.add_subparsers(dest="schedule_command", metavar="ACTION")
    actions.required = True
    once = actions.add_parser(
        "run-once", help="record the due scheduled jobs once (for cron), then exit",
        description="Read every installed repository's atrex.toml and record a "
        "scheduled_optimize job for each one that opts in and is due (at most one per "
        "repository and period; running it again in the same period records nothing). "
        "A worker runs the jobs.")
    once.add_argument("--config", help="TOML file with a [bot] table (default: $ATREX_CONFIG)")
    once.set_defaults(func=cmd_schedule_run_once)


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(process)d %(threadName)s %(levelname)s "
                        "%(name)s: %(message)s")


def cmd_serve(args: argparse.Namespace) -> int:
    from .server import serve

    refuse_inspection()  # the webhook secret and App key: out of reach of candidates' /proc
    _logging()
    try:
        config = load_config(args.config)
        hide_secrets_from_candidates(config, args.config)  # a --with-worker child inherits it
        return serve(config, args.host, args.port, with_worker=args.with_worker,
                     config_path=args.config, access_log=args.access_log)
    except ConfigError as exc:
        print(f"atrex serve: configuration error: {exc}", file=sys.stderr)
        return 2


def cmd_worker(args: argparse.Namespace) -> int:
    from .worker import run_worker

    refuse_inspection()  # before a key is read; candidates run as this user in subprocess mode
    _logging()
    try:
        config = _worker_config(args)
        hide_secrets_from_candidates(config, args.config)
        if config.engine == "celery":
            return _celery_worker(config, args)
        gpus = () if args.no_gpu else (tuple(args.gpus) if args.gpus else None)
        factory = getattr(args, "runtime_factory", None)  # a test harness may inject one
        return run_worker(config, gpus=gpus, light=not args.no_light,
                          parent_pid=args.parent_pid, **({"runtime_factory": factory}
                                                         if factory else {}))
    except ConfigError as exc:
        print(f"atrex worker: configuration error: {exc}", file=sys.stderr)
        return 2


def hide_secrets_from_candidates(config, config_path: str | None) -> None:
    """In subprocess mode candidates run as this process's user and may read what it reads: the
    App key, the settings file, the SQLite job store, and the git caches and job checkouts of
    every installation's repositories go on ATREX_EXECUTOR_UNREADABLE, which the evaluator
    passes to every executor's Landlock rules (runner/executor/confine.py); an executor still
    reads its own candidate's checkout."""
    secrets = [config.private_key_path, config_path or os.environ.get(CONFIG_ENV),
               config.data_dir / "git", config.data_dir / "work"]
    if config.db_url.startswith("sqlite:///"):
        database = config.db_url.removeprefix("sqlite:///")
        secrets += [database + suffix for suffix in ("", "-wal", "-shm", "-journal")]
    named = os.environ.get("ATREX_EXECUTOR_UNREADABLE", "").split(":")
    mine = [os.path.abspath(secret) for secret in secrets if secret]  # executors run elsewhere
    paths = dict.fromkeys(p for p in [*named, *mine] if p)
    os.environ["ATREX_EXECUTOR_UNREADABLE"] = ":".join(paths)


def _worker_config(args: argparse.Namespace):
    config = load_config(args.config)
    overrides = {"engine": args.engine, "gpu_kind": args.gpu_kind, "sandbox": args.sandbox,
                 "runner_image": args.runner_image}
    return config.with_(**{k: v for k, v in overrides.items() if v is not None})


def _celery_worker(config, args: argparse.Namespace) -> int:
    """One lane per process: `--gpu N --gpu-kind KIND` (a GPU), or the light lane."""
    from .celery_engine import run_celery_worker
    from .worker import build_runtime

    if args.gpus and len(args.gpus) > 1:
        raise ConfigError("--gpu", "a Celery worker process serves one GPU; start one per GPU")
    gpu = None if args.no_gpu or not args.gpus else args.gpus[0]
    config.data_dir.mkdir(parents=True, exist_ok=True)
    return run_celery_worker(build_runtime(config), gpu, config.gpu_kind)


def cmd_status(args: argparse.Namespace) -> int:
    import json

    from .app import open_store
    from .status import render, status

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"atrex status: configuration error: {exc}", file=sys.stderr)
        return 2
    served = None
    if config.engine == "celery":
        from .celery_engine import celery_app, served_queues

        served = served_queues(celery_app(config))
    store = open_store(config)
    try:
        doc = status(store, served)
    finally:
        store.close()
    print(json.dumps(doc, indent=2) if args.json else render(doc))
    return 0


def cmd_job_report(args: argparse.Namespace) -> int:
    import json

    from .app import open_store
    from .prcheck import result_from_dict
    from .render import full_markdown

    try:
        store = open_store(load_config(args.config))
    except ConfigError as exc:
        print(f"atrex job-report: configuration error: {exc}", file=sys.stderr)
        return 2
    try:
        raw = store.effect(args.job, "reports")
    finally:
        store.close()
    if raw is None:
        print(f"atrex job-report: job {args.job} has no stored report (not an evaluation, or "
              "not evaluated yet)", file=sys.stderr)
        return 2
    data = json.loads(raw)
    print(full_markdown(result_from_dict(data, job_id=args.job)) if args.markdown
          else json.dumps(data, indent=2))
    return 0


def cmd_schedule_run_once(args: argparse.Namespace) -> int:
    from .app import open_store
    from .github import GitHubApp
    from .scheduler import ERROR, run_once

    _logging()
    try:
        config = load_config(args.config).require("app_id", "private_key_path")
        config.data_dir.mkdir(parents=True, exist_ok=True)
        store = open_store(config)
    except ConfigError as exc:
        print(f"atrex schedule: configuration error: {exc}", file=sys.stderr)
        return 2
    try:
        decisions = run_once(store, GitHubApp(config).repo)
    finally:
        store.close()
    for decision in decisions:
        print(decision.line())
    if not decisions:
        print("no installed repositories")
    return 1 if any(d.action == ERROR for d in decisions) else 0

"""`register(subparsers)`, configuration errors before start, and the embedded worker."""

import argparse
import os
import subprocess
import sys

from atrex.bot.cli import cmd_schedule_run_once, cmd_serve, cmd_worker, register

from .conftest import SECRET, bot_settings, process_env
from .world import ROOT, BotServer, KernelRepo, deliver, pr_payload, wait_for


def test_register_adds_serve_and_worker():
    parser = argparse.ArgumentParser(prog="atrex")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["serve", "--host", "0.0.0.0", "--port", "9000"])
    assert (args.func, args.host, args.port, args.with_worker) == (cmd_serve, "0.0.0.0", 9000,
                                                                   False)
    args = parser.parse_args(["worker", "--gpu", "0", "--gpu", "1", "--config", "bot.toml"])
    assert (args.func, args.gpus, args.config) == (cmd_worker, [0, 1], "bot.toml")
    args = parser.parse_args(["schedule", "run-once", "--config", "bot.toml"])
    assert (args.func, args.config) == (cmd_schedule_run_once, "bot.toml")


def test_serve_and_worker_refuse_inspection_first(monkeypatch, tmp_path):
    """Both hold the App's secrets; a candidate of the same user must not read them through
    /proc (runner/judge/procs.refuse_inspection), so each refuses before reading a setting."""
    import atrex.bot.cli as cli

    calls = []
    monkeypatch.setattr(cli, "refuse_inspection", lambda: calls.append("refused"))
    monkeypatch.setattr(cli, "load_config", lambda path: calls.append("config") or 1 / 0)
    parser = argparse.ArgumentParser(prog="atrex")
    register(parser.add_subparsers(dest="command", required=True))
    for argv in (["serve"], ["worker"]):
        args = parser.parse_args(argv)
        try:
            args.func(args)
        except ZeroDivisionError:
            pass
    assert calls == ["refused", "config", "refused", "config"]


def run_bot(args, env):
    return subprocess.run([sys.executable, "-m", "atrex.bot", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def test_missing_or_invalid_settings_stop_before_serving(tmp_path):
    env = process_env({"ATREX_DATA_DIR": str(tmp_path)})
    done = run_bot(["serve", "--port", "1"], env)
    assert done.returncode == 2 and "ATREX_WEBHOOK_SECRET: required" in done.stderr
    done = run_bot(["serve"], {**env, "ATREX_WEBHOOK_SECRET": "s", "ATREX_LEASE_S": "soon"})
    assert done.returncode == 2 and "ATREX_LEASE_S: must be a number" in done.stderr
    done = run_bot(["worker"], {**env, "ATREX_WEBHOOK_SECRET": "s"})
    assert done.returncode == 2 and "ATREX_APP_ID: required" in done.stderr
    done = run_bot(["worker"], {**env, "ATREX_APP_ID": "1",
                                "ATREX_PRIVATE_KEY_PATH": str(tmp_path / "none.pem")})
    assert done.returncode == 2 and "ATREX_PRIVATE_KEY_PATH: cannot read" in done.stderr
    done = run_bot(["schedule", "run-once"], env)
    assert done.returncode == 2 and "atrex schedule: configuration error: ATREX_APP_ID" in \
        done.stderr


def test_bad_optimize_runner_names_the_setting(app_key, fake, tmp_path):
    env = process_env({**bot_settings(fake, app_key, tmp_path),
                       "ATREX_OPTIMIZE_RUNNER": "agent_missing.api:run"})
    done = run_bot(["worker"], env)
    assert done.returncode == 2 and "ATREX_OPTIMIZE_RUNNER: cannot load" in done.stderr


def test_serve_with_worker_runs_jobs_on_one_machine(app_key, fake, tmp_path):
    kernels = KernelRepo(tmp_path, "solo")
    kernels.branch("docs")
    kernels.commit("docs", {"README.md": "solo\n"})
    kernels.push("docs")
    fake.add_repo("octo/solo", str(kernels.remote))
    fake.add_pull("octo/solo", 1, "docs")
    env = process_env(bot_settings(fake, app_key, tmp_path / "data"))
    server = BotServer(env, tmp_path / "serve.log")
    server.args.append("--with-worker")
    server.start()
    try:
        data = pr_payload("opened", "octo/solo", 1, fake.sha("octo/solo", "docs"), "docs",
                          clone_url=str(kernels.remote))
        assert deliver(server.url, "pull_request", data, SECRET).status_code == 202
        wait_for(lambda: any(r["status"] == "completed" for r in fake.runs_for("octo/solo")),
                 timeout=60, what=f"the embedded worker\n{server.output()}")
        assert fake.runs_for("octo/solo")[0]["conclusion"] == "neutral"
    finally:
        server.stop()
    assert server.proc.returncode == 0


def test_serve_and_worker_hide_their_secrets_from_candidates(monkeypatch, tmp_path):
    """The App key, the settings file, the SQLite job store and the git caches go on
    ATREX_EXECUTOR_UNREADABLE (what an operator put there stays), as absolute paths: executors
    run in other directories."""
    from atrex.bot.cli import hide_secrets_from_candidates
    from atrex.bot.config import BotConfig

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATREX_EXECUTOR_UNREADABLE", "/srv/operator-secret")
    config = BotConfig(private_key_path="keys/app.pem", data_dir=tmp_path / "data")
    hide_secrets_from_candidates(config, "bot.toml")
    hidden = os.environ["ATREX_EXECUTOR_UNREADABLE"].split(":")
    database = str((tmp_path / "data" / "atrex-bot.db").resolve())
    assert hidden[:3] == ["/srv/operator-secret", str(tmp_path / "keys" / "app.pem"),
                          str(tmp_path / "bot.toml")]
    assert database in hidden and database + "-wal" in hidden
    assert str(tmp_path / "data" / "git") in hidden  # other repositories' objects
    assert str(tmp_path / "data" / "work") in hidden  # other jobs' checkouts

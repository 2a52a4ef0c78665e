"""`atrex serve`: the Flask app behind gunicorn (threads in a few processes, each request read
whole by the worker's event loop before a thread sees it: bot.serving), optionally with an
embedded worker process for a one-machine setup."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

from gunicorn.app.base import BaseApplication

from .app import MAX_BODY_BYTES, create_app, open_store
from .config import BotConfig
from .dashboard import ensure_tables
from .serving import BufferedThreadWorker

log = logging.getLogger(__name__)


class _Gunicorn(BaseApplication):
    def __init__(self, config: BotConfig, options: dict):
        self._config = config
        self._options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._options.items():
            self.cfg.set(key, value)

    def load(self):
        app = create_app(self._config)  # in each web process, after the fork
        _warm_up(app)
        return app


def _warm_up(app) -> None:
    """Run the request path once (imports, pools) before the first real delivery arrives."""
    client = app.test_client()
    client.get("/healthz")
    client.post("/webhook", data=b"{}", headers={"X-Hub-Signature-256": "sha256=0"})


def prepare(config: BotConfig) -> None:
    """Fail before serving: settings, data directory, database reachable and migrated."""
    config.require("webhook_secret")
    config.data_dir.mkdir(parents=True, exist_ok=True)
    store = open_store(config)
    store.ping()
    ensure_tables(store)  # before the web workers fork and race to create them
    store.close()


def spawn_worker(config_path: str | None) -> subprocess.Popen:
    command = [sys.executable, "-m", "atrex.bot", "worker", "--parent-pid", str(os.getpid())]
    if config_path:
        command += ["--config", config_path]
    return subprocess.Popen(command)


def serve(config: BotConfig, host: str, port: int, with_worker: bool = False,
          config_path: str | None = None, access_log: bool = False) -> int:
    prepare(config)
    if with_worker:
        config.require("app_id", "private_key_path")
    worker = spawn_worker(config_path) if with_worker else None

    def on_exit(_server) -> None:
        if worker is not None and worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            worker.wait()

    worker_class = type("AtrexWebWorker", (BufferedThreadWorker,), {
        "read_timeout_s": config.web_read_timeout_s, "max_body_bytes": MAX_BODY_BYTES})
    options = {
        "bind": f"{host}:{port}", "workers": config.web_workers, "worker_class": worker_class,
        "threads": config.web_threads, "timeout": 30, "graceful_timeout": 10, "keepalive": 5,
        "accesslog": "-" if access_log else None, "errorlog": "-", "loglevel": "info",
        "proc_name": "atrex-serve", "on_exit": on_exit, "control_socket_disable": True,
        "worker_tmp_dir": str(Path("/dev/shm")) if Path("/dev/shm").is_dir() else None,
    }
    _Gunicorn(config, options).run()
    return 0

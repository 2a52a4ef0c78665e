"""The Flask application factory: `create_app(config)` builds the web process's app.

Nothing is read or started at import. Dependencies (the store, the router) are created from the
config unless a caller passes its own (tests, the load benchmark).
"""

from __future__ import annotations

from flask import Flask, jsonify, request
from flask.typing import ResponseReturnValue

from .config import BotConfig
from .dashboard import register as register_dashboard
from .handlers import build_router
from .router import IntakeContext, Router
from .store import SqlStore
from .webhook import handle_delivery

MAX_BODY_BYTES = 25 * 1024 * 1024  # GitHub caps webhook payloads at 25 MB


def open_store(config: BotConfig) -> SqlStore:
    return SqlStore(config.db_url, synchronous=config.sqlite_synchronous,
                    default_max_attempts=config.max_attempts)


def create_app(config: BotConfig, store: SqlStore | None = None,
               router: Router | None = None) -> Flask:
    config.require("webhook_secret")
    app = Flask("atrex.bot")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    ctx = IntakeContext(config=config, store=store or open_store(config))
    ctx.store.warm(min(config.web_threads, 16))
    router = router or build_router()

    @app.post("/webhook")
    def webhook() -> ResponseReturnValue:
        return handle_delivery(request, ctx, router)

    @app.get("/healthz")
    def healthz() -> ResponseReturnValue:
        ctx.store.ping()
        return jsonify(status="ok", jobs=ctx.store.counts())

    register_dashboard(app, config, ctx.store)
    app.extensions["atrex"] = ctx
    return app

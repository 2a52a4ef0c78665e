"""`POST /webhook`: verify, parse, route, record — and answer within milliseconds.

Order matters: the HMAC-SHA256 signature is checked over the raw body, with a constant-time compare,
before a single byte is parsed. Nothing here calls GitHub; jobs are recorded durably (one
transaction with the delivery id) and workers do the rest.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging

from flask import Request, jsonify
from flask.typing import ResponseReturnValue

from .router import IntakeContext, Malformed, Router, WebhookEvent
from .store import SqlStore

log = logging.getLogger(__name__)


def signature_ok(secret: str, body: bytes, header: str | None) -> bool:
    if not header:
        return False
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), header.strip().encode("utf-8", "replace"))


def _error(status: int, message: str) -> ResponseReturnValue:
    return jsonify(error=message), status


def handle_delivery(request: Request, ctx: IntakeContext, router: Router) -> ResponseReturnValue:
    body = request.get_data(cache=False)
    signature = request.headers.get("X-Hub-Signature-256")
    if not signature_ok(ctx.config.webhook_secret, body, signature):
        return _error(401, "bad or missing X-Hub-Signature-256")
    name = request.headers.get("X-GitHub-Event", "")
    delivery = request.headers.get("X-GitHub-Delivery", "")
    if not name or not delivery or len(delivery) > 128:
        return _error(400, "missing X-GitHub-Event or X-GitHub-Delivery")
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return _error(400, "body is not JSON")
    if not isinstance(payload, dict):
        return _error(400, "body is not a JSON object")
    if name == "ping":
        return jsonify(pong=True, zen=payload.get("zen")), 200
    action = payload.get("action") if isinstance(payload.get("action"), str) else None
    handler = router.lookup(name, action)
    if handler is None:
        return jsonify(ignored=f"{name}.{action}" if action else name), 200
    try:
        intake = handler(WebhookEvent(name, action, payload, delivery), ctx)
    except Malformed as exc:
        return _error(400, f"malformed {name} payload: {exc}")
    return _record(ctx.store, name, action, delivery, intake)


def _record(store: SqlStore, name, action, delivery, intake) -> ResponseReturnValue:
    accepted = store.accept(delivery, name, action, intake.jobs)
    jobs = [{"id": job_id, "new": new} for job_id, new in accepted.jobs]
    if accepted.duplicate_delivery:
        return jsonify(duplicate_delivery=True, jobs=jobs), 200
    for apply in intake.after:
        apply(store)
    log.info("delivery %s %s.%s: jobs %s %s", delivery, name, action, jobs, intake.note or "")
    return jsonify(accepted=True, jobs=jobs, note=intake.note), 202

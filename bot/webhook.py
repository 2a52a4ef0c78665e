"""`POST /webhook`: verify, parse, route, record — and answer within milliseconds.

Order matters: the HMAC-SHA256 signature is checked over the raw body, with a constant-time compare,
before a single byte is parsed. Nothing here calls GitHub; jobs are recorded durably (one
transaction with the delivery id) and workers do the rest.

Whatever a sender puts in a signed body, the answer is a 4xx saying what is wrong, never a 500:
headers, JSON (nesting depth bounded: a body of 100,000 `[` raised RecursionError), and every field
a handler stores (see bot.router) are checked before anything is recorded. A job store that cannot
be reached answers 503 (retry later), not 500.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re

from flask import Request, jsonify
from flask.typing import ResponseReturnValue
from sqlalchemy.exc import OperationalError

from .router import IntakeContext, Malformed, Router, WebhookEvent
from .store import SqlStore

log = logging.getLogger(__name__)

MAX_JSON_DEPTH = 32  # GitHub's payloads nest 6 deep
_DELIVERY_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}", re.ASCII)  # GitHub's are GUIDs
_EVENT = re.compile(r"[a-z_]{1,64}", re.ASCII)


def signature_ok(secret: str, body: bytes, header: str | None) -> bool:
    if not header:
        return False
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), header.strip().encode("utf-8", "replace"))


def _error(status: int, message: str) -> ResponseReturnValue:
    return jsonify(error=message), status


def too_deep(value: object, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether parsed JSON nests deeper than `limit`, level by level (no recursion to exhaust;
    50,000 repositories of an installation take about 0.05 s)."""
    level, depth = [value], 1
    containers = (dict, list)
    while level:
        if depth > limit:
            return True
        below = []
        for item in level:
            values = item.values() if type(item) is dict else item
            below += [child for child in values if type(child) in containers]
        level, depth = below, depth + 1
    return False


def parse_body(body: bytes) -> dict:
    """The delivery's JSON object; ValueError saying what is wrong with it."""
    try:
        payload = json.loads(body)
    except RecursionError:
        raise ValueError(f"body nests deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:  # also UnicodeDecodeError, and integers of over 4,300 digits
        raise ValueError(f"body is not JSON ({str(exc)[:200]})") from None
    if not isinstance(payload, dict):
        raise ValueError("body is not a JSON object")
    if too_deep(payload):
        raise ValueError(f"body nests deeper than {MAX_JSON_DEPTH} levels")
    return payload


def handle_delivery(request: Request, ctx: IntakeContext, router: Router) -> ResponseReturnValue:
    body = request.get_data(cache=False)  # over MAX_CONTENT_LENGTH: 413 before reading it all
    signature = request.headers.get("X-Hub-Signature-256")
    if not signature_ok(ctx.config.webhook_secret, body, signature):
        return _error(401, "bad or missing X-Hub-Signature-256")
    name = request.headers.get("X-GitHub-Event", "")
    delivery = request.headers.get("X-GitHub-Delivery", "")
    if not _EVENT.fullmatch(name) or not _DELIVERY_ID.fullmatch(delivery):
        return _error(400, "missing or malformed X-GitHub-Event or X-GitHub-Delivery")
    try:
        payload = parse_body(body)
    except ValueError as exc:
        return _error(400, str(exc))
    if name == "ping":
        zen = payload.get("zen")
        return jsonify(pong=True, zen=zen[:200] if isinstance(zen, str) else None), 200
    action = payload.get("action") if isinstance(payload.get("action"), str) else None
    handler = router.lookup(name, action)
    if handler is None:
        return jsonify(ignored=f"{name}.{action[:64]}" if action else name), 200
    try:
        intake = handler(WebhookEvent(name, action, payload, delivery), ctx)
        return _record(ctx.store, name, action, delivery, intake)
    except Malformed as exc:
        return _error(400, f"malformed {name} payload: {exc}")
    except OperationalError as exc:  # the database is down, locked past its timeout, full
        log.error("delivery %s: job store unavailable: %s", delivery, exc)
        response = jsonify(error="the job store is unavailable; deliver again later")
        return response, 503, {"Retry-After": "30"}


def _record(store: SqlStore, name, action, delivery, intake) -> ResponseReturnValue:
    accepted = store.accept(delivery, name, action, intake.jobs, intake.repo_changes)
    jobs = [{"id": job_id, "new": new} for job_id, new in accepted.jobs]
    if accepted.duplicate_delivery:
        return jsonify(duplicate_delivery=True, jobs=jobs), 200
    log.info("delivery %s %s.%s: jobs %s %s", delivery, name, action, jobs, intake.note or "")
    return jsonify(accepted=True, jobs=jobs, note=intake.note), 202

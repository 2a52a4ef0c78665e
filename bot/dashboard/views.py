"""The dashboard's routes on `atrex serve`: one page per repository (and its JSON), sign-in with
GitHub, sign-out. Private by default: a page is shown to a signed-in user who can read the
repository, or to anyone holding the repository's secret link; everyone else gets 404 (without a
session and with sign-in configured: a redirect to sign in). docs/dashboard.md."""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import quote

from flask import Blueprint, Flask, Response, abort, jsonify, redirect, render_template, request
from flask.typing import ResponseReturnValue

from ..config import BotConfig
from ..history import HistoryStore, Retention
from ..store import SqlStore
from ..trend import build
from . import page
from .access import AccessStore, Session
from .oauth import Access, GitHubOAuth, OAuthError

SESSION_COOKIE = "atrex_session"
STATE_COOKIE = "atrex_oauth_state"
NEXT_COOKIE = "atrex_oauth_next"
ACCESS_TTL_S = 60.0  # how long GitHub's "can read" answer is trusted before asking again
PULLS_SHOWN = 20
SECURITY_HEADERS = {
    "Cache-Control": "private, no-store",
    "Referrer-Policy": "no-referrer",  # a secret link must not leak to GitHub through a click
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                               "img-src 'self' data:; form-action 'self'; frame-ancestors 'none'",
}


@dataclass
class Dashboard:
    config: BotConfig
    store: SqlStore
    history: HistoryStore
    access: AccessStore
    oauth: GitHubOAuth
    _cache: dict[tuple[str, str], tuple[Access, float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def can_read(self, session: Session, repo: str) -> Access:
        key, now = (session.key, repo), time.monotonic()
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None and cached[1] > now:
            return cached[0]
        answer = self.oauth.access(session.token, repo)
        with self._lock:
            self._cache[key] = (answer, now + ACCESS_TTL_S)
        return answer

    def known(self, repo: str) -> bool:
        return repo in self.store.installed_repos() or bool(
            self.history.environments(repo))


def register(app: Flask, config: BotConfig, store: SqlStore) -> Dashboard:
    deps = Dashboard(config, store, HistoryStore(store, Retention(
        config.history_branch_days, config.history_pr_days)), AccessStore(store),
        GitHubOAuth(config))
    app.register_blueprint(_blueprint(deps))
    app.extensions["atrex.dashboard"] = deps
    return deps


def _secure(response: Response) -> Response:
    for key, value in SECURITY_HEADERS.items():
        response.headers[key] = value
    return response


def _blueprint(d: Dashboard) -> Blueprint:
    bp = Blueprint("dashboard", __name__, template_folder="templates")

    @bp.get("/dashboard/<owner>/<name>")
    def repository(owner: str, name: str) -> ResponseReturnValue:
        repo = f"{owner}/{name}"
        denied = _gate(d, repo)
        if denied is not None:
            return denied
        return _secure(Response(_render(d, repo), mimetype="text/html"))

    @bp.get("/dashboard/<owner>/<name>/history.json")
    def repository_json(owner: str, name: str) -> ResponseReturnValue:
        repo = f"{owner}/{name}"
        denied = _gate(d, repo)
        if denied is not None:
            return denied
        return _secure(jsonify(_history(d, repo).to_dict()))

    @bp.get("/login")
    def login() -> ResponseReturnValue:
        if not d.oauth.enabled:
            abort(404)
        state = secrets.token_urlsafe(24)
        response = redirect(d.oauth.authorize_url(state, _callback_url(d)))
        _cookie(d, response, STATE_COOKIE, state, 600)
        _cookie(d, response, NEXT_COOKIE, _safe_next(request.args.get("next")), 600)
        return _secure(response)

    @bp.get("/oauth/callback")
    def callback() -> ResponseReturnValue:
        expected = request.cookies.get(STATE_COOKIE, "")
        state, code = request.args.get("state", ""), request.args.get("code", "")
        if not d.oauth.enabled or not expected or not code or not hmac.compare_digest(
                expected.encode(), state.encode()):
            return _secure(Response("Sign-in failed: the request did not come from this "
                                    "server's sign-in page (state mismatch). Try again.", 400,
                                    mimetype="text/plain"))
        try:
            token = d.oauth.exchange(code, _callback_url(d))
            user = d.oauth.user(token)
        except OAuthError as exc:
            return _secure(Response(f"Sign-in failed: {exc}", 400, mimetype="text/plain"))
        raw = d.access.start_session(user.login, user.id, token, d.config.session_hours * 3600)
        response = redirect(_safe_next(request.cookies.get(NEXT_COOKIE)))
        _cookie(d, response, SESSION_COOKIE, raw, int(d.config.session_hours * 3600))
        response.delete_cookie(STATE_COOKIE)
        response.delete_cookie(NEXT_COOKIE)
        return _secure(response)

    @bp.post("/logout")
    def logout() -> ResponseReturnValue:
        d.access.end_session(request.cookies.get(SESSION_COOKIE))
        response = Response("Signed out.", mimetype="text/plain")
        response.delete_cookie(SESSION_COOKIE)
        return _secure(response)

    return bp


def _gate(d: Dashboard, repo: str) -> ResponseReturnValue | None:
    """None when the request may see `repo`'s dashboard; else the answer (404 or sign in)."""
    if not d.known(repo):
        return _not_found()
    if d.access.link_ok(repo, request.args.get("key")):
        return None
    raw = request.cookies.get(SESSION_COOKIE)
    session = d.access.session(raw)
    if session is None:
        return _sign_in(d) if d.oauth.enabled else _not_found()
    answer = d.can_read(session, repo)
    if answer is Access.EXPIRED:
        d.access.end_session(raw)
        return _sign_in(d)
    return None if answer is Access.READ else _not_found()


def _not_found() -> ResponseReturnValue:
    return _secure(Response("Not Found", 404, mimetype="text/plain"))


def _sign_in(d: Dashboard) -> ResponseReturnValue:
    return _secure(redirect(f"/login?next={quote(request.full_path.rstrip('?'), safe='')}"))


def _safe_next(value: str | None) -> str:
    """Only this server's dashboard pages (never another site: an open redirect)."""
    if value and value.startswith("/dashboard/") and "//" not in value and "\\" not in value:
        return value
    return "/"


def _callback_url(d: Dashboard) -> str:
    root = d.config.public_url or request.host_url.rstrip("/")
    return f"{root}/oauth/callback"


def _cookie(d: Dashboard, response: Response, name: str, value: str, max_age: int) -> None:
    secure = (d.config.public_url or request.host_url).startswith("https://")
    response.set_cookie(name, value, max_age=max_age, httponly=True, secure=secure,
                        samesite="Lax", path="/")


def _history(d: Dashboard, repo: str):
    env = request.args.get("env") or None
    evals = d.history.evaluations(repo)
    pulls = [e for e in evals if e.kind == "pr"][-PULLS_SHOWN:]
    return build(repo, evals, d.history.environments(repo), env_key=env, pulls=pulls)


def _render(d: Dashboard, repo: str) -> str:
    h = _history(d, repo)
    key = request.args.get("key")
    return render_template(
        "dashboard.html", h=h, repo=repo, links=page.Links(d.config.web_url, repo),
        charts=page.repo_charts(h) if h.commits else [],
        op_charts=page.op_charts(h) if h.commits else [], rows=page.latest_rows(h),
        columns=page.COLUMNS, page=page, key_query=f"key={quote(key)}" if key else "",
        signed_in=d.access.session(request.cookies.get(SESSION_COOKIE)))

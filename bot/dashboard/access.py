"""Who may open a repository's dashboard: signed-in GitHub users who can read the repository, and
holders of the repository's secret link.

- Sessions (`dashboard_sessions`): after the GitHub OAuth web flow the server keeps the user's
  login and user-to-server token; the browser holds only a random session id (an HttpOnly
  cookie), and the table only its SHA-256, so reading the table does not yield a cookie. A
  session ends after ATREX_SESSION_HOURS, or on sign-out.
- Secret links (`dashboard_links`): one random secret per repository, created when first asked
  for (`/atrex dashboard`, `atrex history REPO --link`) and replaced by a rotation, which ends
  every link handed out before. Compared in constant time.

New tables on the job store's engine and transactions, like the history's.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from sqlalchemy import BigInteger, Column, Float, MetaData, String, Table, Text, delete, select

from ..history import create_tables
from ..store import SqlStore

access_metadata = MetaData()

sessions = Table(
    "dashboard_sessions", access_metadata,
    Column("id_hash", String(64), primary_key=True),
    Column("login", String(255), nullable=False),
    Column("user_id", BigInteger),
    Column("token", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False, index=True),
)
links = Table(
    "dashboard_links", access_metadata,
    Column("repo", String(255), primary_key=True),
    Column("secret", String(128), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("created_by", String(255)),
)


@dataclass(frozen=True)
class Session:
    login: str
    user_id: int | None
    token: str
    expires_at: float
    key: str  # the session id's hash: a stable, non-secret name for caches


def _hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class AccessStore:
    def __init__(self, store: SqlStore):
        self.store = store
        create_tables(access_metadata, store)

    # --- sessions --------------------------------------------------------------------------

    def start_session(self, login: str, user_id: int | None, token: str, ttl_s: float) -> str:
        """A new session; returns the id for the cookie. Expired sessions are deleted."""
        raw = secrets.token_urlsafe(32)
        now = self.store.clock()
        with self.store._tx() as conn:
            conn.execute(delete(sessions).where(sessions.c.expires_at < now))
            conn.execute(sessions.insert().values(id_hash=_hash(raw), login=login,
                                                  user_id=user_id, token=token, created_at=now,
                                                  expires_at=now + ttl_s))
        return raw

    def session(self, raw: str | None) -> Session | None:
        if not raw or len(raw) > 128:
            return None
        key = _hash(raw)
        with self.store._read() as conn:
            row = conn.execute(select(sessions).where(sessions.c.id_hash == key)).first()
        if row is None or row.expires_at <= self.store.clock():
            return None
        return Session(row.login, row.user_id, row.token, row.expires_at, key)

    def end_session(self, raw: str | None) -> None:
        if raw:
            with self.store._tx() as conn:
                conn.execute(delete(sessions).where(sessions.c.id_hash == _hash(raw)))

    # --- secret links ----------------------------------------------------------------------

    def link_secret(self, repo: str, rotate: bool = False, by: str | None = None) -> str:
        """The repository's link secret (created on first use; a new one with `rotate`)."""
        with self.store._tx() as conn:
            row = conn.execute(select(links.c.secret).where(links.c.repo == repo)).first()
            if row is not None and not rotate:
                return row.secret
            secret = secrets.token_urlsafe(24)
            conn.execute(delete(links).where(links.c.repo == repo))
            conn.execute(links.insert().values(repo=repo, secret=secret,
                                               created_at=self.store.clock(), created_by=by))
            return secret

    def link_ok(self, repo: str, secret: str | None) -> bool:
        if not secret:
            return False
        with self.store._read() as conn:
            row = conn.execute(select(links.c.secret).where(links.c.repo == repo)).first()
        return row is not None and hmac.compare_digest(row.secret.encode(), secret.encode())

"""GitHub through PyGithub: App authentication, retries, and the few calls the bot makes.

`GitHubApp` signs JWTs with the App's key, exchanges them for installation tokens (cached per
installation, refreshed a few minutes before they expire) and builds PyGithub clients against the
configured API root (github.com or GitHub Enterprise). `RepoApi` is the thin object the job code
talks to; tests may replace it, but the bot's own tests drive the real one against a GitHub fake.

Retries: `BotRetry` retries idempotent requests (GET, PATCH, PUT, DELETE) on 5xx with exponential
backoff, and every request on a rate limit (403 with GitHub's rate-limit message, or 403/429 with
`Retry-After`), honouring `Retry-After`. A POST that failed with 5xx is *not* blindly repeated (it
may have been applied): `RepoApi` first looks for what it was creating (a check run by
`external_id`, a comment by its hidden marker) and only then creates again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from github import (
    Auth,
    Github,
    GithubException,
    GithubIntegration,
    GithubRetry,
    RateLimitExceededException,
)

from .config import BotConfig

log = logging.getLogger(__name__)

WRITE_PERMISSIONS = ("admin", "maintain", "write")


class BotRetry(GithubRetry):
    """GithubRetry without blind repeats of non-idempotent requests on 5xx."""

    def __init__(self, **kwargs: Any):
        kwargs.setdefault("allowed_methods", {"GET", "HEAD", "OPTIONS", "PUT", "PATCH", "DELETE"})
        super().__init__(**kwargs)

    def is_retry(self, method: str, status_code: int, has_retry_after: bool = False) -> bool:
        if method == "POST" and status_code in (403, 429):
            # a rate-limited request was rejected, not applied: repeating it is safe
            return super().is_retry("GET", status_code, has_retry_after)
        return super().is_retry(method, status_code, has_retry_after)


RETRYABLE_4XX = (408, 429)  # a timeout and "too many requests": asking later can succeed


def final_answer(exc: BaseException) -> str | None:
    """Why a GitHub error is final (None: it can succeed later). A 5xx, a rate limit (primary or
    secondary, 403 or 429) or a timeout may pass; any other 4xx (404 no such thing, 422 invalid
    request, 403 a permission the App lacks, 401) says the same whenever it is asked, so
    retrying it only spends the job's attempts and the backoff (three tries, 30 s apart)."""
    if not isinstance(exc, GithubException) or isinstance(exc, RateLimitExceededException):
        return None
    status = exc.status
    if status is None or not 400 <= status < 500 or status in RETRYABLE_4XX:
        return None
    headers = {k.lower(): v for k, v in (exc.headers or {}).items()}
    if status == 403 and ("retry-after" in headers or headers.get("x-ratelimit-remaining") == "0"
                          or "rate limit" in _message(exc).lower()):
        return None
    return f"GitHub answered {status} ({_message(exc)[:200]}): final, not retried"


def retry_after_s(exc: BaseException) -> float:
    """The wait GitHub asked for (Retry-After, in seconds), 0 when it asked for none."""
    headers = {k.lower(): v for k, v in (getattr(exc, "headers", None) or {}).items()}
    try:
        return max(0.0, float(headers.get("retry-after", 0)))
    except ValueError:  # an HTTP date: GitHub sends seconds
        return 0.0


def _message(exc: GithubException) -> str:
    data = exc.data
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        return data["message"]
    return str(data or exc.message or "")


def make_retry(config: BotConfig, post_is_idempotent: bool = False) -> BotRetry:
    """Retries for one client; `post_is_idempotent` for the App's own calls (minting a token
    twice is harmless)."""
    extra = {"allowed_methods": BotRetry.DEFAULT_ALLOWED_METHODS | {"PATCH", "POST"}} \
        if post_is_idempotent else {}
    return BotRetry(total=config.http_retries, backoff_factor=config.http_backoff_s,
                    backoff_jitter=0.1 * config.http_backoff_s,
                    secondary_rate_wait=config.secondary_rate_wait_s,
                    respect_retry_after_header=True, raise_on_status=False, **extra)


class TokenCache:
    """Installation tokens, minted on first use and again `margin_s` before they expire."""

    def __init__(self, mint: Callable[[int], tuple[str, datetime]], margin_s: float = 300.0,
                 clock: Callable[[], float] = time.time):
        self._mint = mint
        self._margin_s = margin_s
        self._clock = clock
        self._tokens: dict[int, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def token(self, installation_id: int) -> str:
        with self._lock:
            cached = self._tokens.get(installation_id)
            if cached is None or cached[1] - self._margin_s <= self._clock():
                token, expires_at = self._mint(installation_id)
                cached = (token, expires_at.timestamp())
                self._tokens[installation_id] = cached
            return cached[0]


class _InstallationAuth(Auth.Auth):
    """PyGithub auth that asks the cache for a fresh token on every request."""

    def __init__(self, tokens: TokenCache, installation_id: int):
        self._tokens = tokens
        self._installation_id = installation_id

    @property
    def token_type(self) -> str:
        return "token"

    @property
    def token(self) -> str:
        return self._tokens.token(self._installation_id)

    @property
    def _masked_token(self) -> str:
        return "token (installation token removed)"


class GitHubApp:
    def __init__(self, config: BotConfig, clock: Callable[[], float] = time.time):
        config.require("app_id", "private_key_path", "github_api_url")
        self.config = config
        self._integration = GithubIntegration(
            auth=Auth.AppAuth(config.app_id, config.private_key()),
            base_url=config.github_api_url, retry=make_retry(config, post_is_idempotent=True),
            timeout=int(config.http_timeout_s))
        self.tokens = TokenCache(self._mint, clock=clock)
        self._login: str | None = config.bot_login

    def _mint(self, installation_id: int) -> tuple[str, datetime]:
        grant = self._integration.get_access_token(installation_id)
        return grant.token, grant.expires_at

    def client(self, installation_id: int) -> Github:
        config = self.config
        return Github(auth=_InstallationAuth(self.tokens, installation_id),
                      base_url=config.github_api_url, retry=make_retry(config),
                      timeout=int(config.http_timeout_s), lazy=True,
                      seconds_between_requests=config.request_interval_s or None,
                      seconds_between_writes=config.write_interval_s or None)

    def bot_login(self) -> str:
        if self._login is None:
            self._login = f"{self._integration.get_app().slug}[bot]"
        return self._login

    def repo(self, installation_id: int, full_name: str) -> RepoApi:
        return RepoApi(self.client(installation_id), full_name, self.bot_login,
                       backoff_s=self.config.http_backoff_s)


@dataclass(frozen=True)
class PullInfo:
    number: int
    state: str
    draft: bool
    author: str
    head_sha: str
    head_ref: str
    head_repo: str | None  # None when the fork was deleted
    head_clone_url: str | None
    base_ref: str
    base_sha: str
    base_repo: str
    base_clone_url: str

    @property
    def fork(self) -> bool:
        return self.head_repo != self.base_repo


class RepoApi:
    """The GitHub calls the bot makes on one repository, returning plain values."""

    def __init__(self, gh: Github, full_name: str, bot_login: Callable[[], str],
                 backoff_s: float = 1.0, create_attempts: int = 4):
        self.gh = gh
        self.full_name = full_name
        self._bot_login = bot_login
        self._backoff_s = backoff_s
        self._create_attempts = create_attempts
        self._repo = gh.get_repo(full_name)

    def pull(self, number: int) -> PullInfo:
        pr = self._repo.get_pull(number)
        head_repo = pr.head.repo
        return PullInfo(
            number=pr.number, state=pr.state, draft=bool(pr.draft), author=pr.user.login,
            head_sha=pr.head.sha, head_ref=pr.head.ref,
            head_repo=head_repo.full_name if head_repo is not None else None,
            head_clone_url=head_repo.clone_url if head_repo is not None else None,
            base_ref=pr.base.ref, base_sha=pr.base.sha, base_repo=pr.base.repo.full_name,
            base_clone_url=pr.base.repo.clone_url)

    def default_branch(self) -> str:
        return self._repo.default_branch

    def clone_url(self) -> str:
        return self._repo.clone_url

    def file_text(self, path: str, ref: str | None = None) -> str | None:
        """A file's text at `ref` (default branch when None); None when there is no such file."""
        try:
            contents = self._repo.get_contents(path, **({"ref": ref} if ref else {}))
        except GithubException as exc:
            if exc.status == 404:
                return None
            raise
        if isinstance(contents, list):  # a directory
            return None
        return contents.decoded_content.decode("utf-8", errors="replace")

    def commit_pulls(self, sha: str) -> list[int]:
        """Numbers of the merged pull requests that brought `sha` into the repository (the
        commits API's list of pull requests associated with a commit), newest first."""
        pulls = self._repo.get_commit(sha).get_pulls()
        return [p.number for p in pulls if p.merged_at is not None]

    def permission(self, login: str) -> str:
        """The user's permission on the repository: admin, maintain, write, triage, read, none."""
        try:
            return self._repo.get_collaborator_permission(login)
        except GithubException as exc:
            if exc.status == 404:  # not a collaborator, or no such user
                return "none"
            raise

    # --- check runs --------------------------------------------------------------------------

    def find_check_run(self, head_sha: str, name: str, external_id: str) -> int | None:
        runs = self._repo.get_commit(head_sha).get_check_runs(check_name=name, filter="all")
        for run in runs:
            if run.external_id == external_id:
                return run.id
        return None

    def create_check_run(self, head_sha: str, name: str, external_id: str,
                         output: dict[str, str]) -> int:
        return self._create_once(
            lambda: self._repo.create_check_run(name=name, head_sha=head_sha, status="queued",
                                                external_id=external_id, output=output).id,
            lambda: self.find_check_run(head_sha, name, external_id))

    def update_check_run(self, check_run_id: int, **fields: Any) -> None:
        self._repo.get_check_run(check_run_id).edit(**fields)

    def check_run(self, check_run_id: int) -> dict[str, Any]:
        run = self._repo.get_check_run(check_run_id)
        return {"status": run.status, "conclusion": run.conclusion,
                "title": run.output.title if run.output else None, "html_url": run.html_url}

    # --- comments and reactions --------------------------------------------------------------

    def find_comment(self, pr: int, marker: str) -> int | None:
        """The id of the bot's own comment on the PR that contains `marker`."""
        login = self._bot_login()
        for comment in self._repo.get_issue(pr).get_comments():
            if comment.user.login == login and marker in (comment.body or ""):
                return comment.id
        return None

    def create_comment(self, pr: int, body: str, marker: str) -> int:
        return self._create_once(lambda: self._repo.get_issue(pr).create_comment(body).id,
                                 lambda: self.find_comment(pr, marker))

    def edit_comment(self, pr: int, comment_id: int, body: str) -> bool:
        """False when the comment no longer exists (someone deleted it)."""
        try:
            self._repo.get_issue(pr).get_comment(comment_id).edit(body)
        except GithubException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def react(self, pr: int, comment_id: int, content: str) -> None:
        """Add a reaction (GitHub answers an existing identical reaction with 200: idempotent)."""
        self._repo.get_issue(pr).get_comment(comment_id).create_reaction(content)

    # --- helpers -----------------------------------------------------------------------------

    def _create_once(self, create: Callable[[], int], find: Callable[[], int | None]) -> int:
        """Create something exactly once even when GitHub answers 5xx to the POST."""
        for attempt in range(self._create_attempts):
            try:
                return create()
            except GithubException as exc:
                if exc.status < 500 or attempt + 1 == self._create_attempts:
                    raise
                log.warning("%s: create answered %s; looking before retrying", self.full_name,
                            exc.status)
            time.sleep(self._backoff_s * 2 ** attempt)
            found = find()
            if found is not None:
                return found
        raise AssertionError("unreachable")

"""A stateful fake of the GitHub REST API, served over real HTTP on loopback, as strict as GitHub.

Real PyGithub reaches it through `base_url` (`http://127.0.0.1:PORT/api/v3`, the GitHub Enterprise
layout). It implements every endpoint the bot and the agent call, with GitHub's response shapes
(tests/bot/github_shapes.py) and GitHub's refusals (tests/bot/github_rules.py):

- App auth: `GET /app` and `POST /app/installations/{id}/access_tokens` verify the JWT against the
  App's public key; a token is minted only for an existing installation (404 otherwise), with at
  most the installation's permissions. Repository endpoints require a live installation token of an
  installation that has the repository (401 / 404) and the repository permission the endpoint needs
  (403 "Resource not accessible by integration"; `set_installation_permissions`).
- repositories and pull requests (head and base SHAs read from real bare git repositories): get,
  list (state / head / base filters, pagination), create (the head branch must exist, GitHub's 422s:
  no such branch, no commits between, a PR already open for that head), edit; file contents and git
  refs read from the bare repository; check runs (create for a commit of the repository only,
  update, get, list for a commit; output limits, annotations), issue comments (list, create, get,
  edit, delete; blank and over-long bodies refused), reactions, collaborator permission.
- git: each repository's clone URL is `https://127.0.0.1:PORT/<owner>/<name>.git`, served by
  `git http-backend` behind TLS and GitHub's `x-access-token:<token>` Basic auth
  (tests/bot/github_git.py); clients trust the server through `GIT_SSL_CAINFO=fake.ca_file`.
- OpenAPI: with GitHub's published description on the machine (tests/bot/openapi.py), every request
  and every response (except injected faults) is checked against it; problems collect in
  `violations`, and `stop()` fails when there are any (`stop(check=False)` for tests that send
  malformed requests on purpose).
- fault injection: `inject(method, path_regex, status, ...)` answers matching requests with an
  error (e.g. 502, or 403 secondary rate limit with Retry-After), optionally after applying them.

Tests read and arrange the state directly (it lives in this process); `installation_token()`
mints a token without App auth, for tests of code that holds a plain token (the agent's CLI path).
"""

from __future__ import annotations

import base64
import datetime as dt
import itertools
import re
import secrets
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import jwt
from flask import Flask, Response, jsonify, request
from werkzeug.serving import make_server

from . import github_rules as rules
from . import github_shapes as shapes
from . import openapi
from .github_git import GitHttpServer

PREFIX = "/api/v3"
SECONDARY_RATE_LIMIT = ("You have exceeded a secondary rate limit. Please wait a few minutes "
                        "before you try again.")
CONCLUSIONS = set(rules.CONCLUSIONS) | {"stale"}
REACTIONS = {"+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"}
EVENTS = ["pull_request", "issue_comment", "check_run", "installation",
          "installation_repositories"]
_NO_SPEC = object()


def _now() -> str:
    return shapes.now()


@dataclass
class Fault:
    method: str
    path: re.Pattern
    status: int
    headers: dict[str, str]
    body: dict[str, Any]
    times: int
    apply: bool  # handle the request first (the change happens), then answer with the error


@dataclass
class FakeInstallation:
    id: int
    account: str
    permissions: dict[str, str] = field(default_factory=lambda: dict(rules.DEFAULT_PERMISSIONS))
    suspended: bool = False


@dataclass
class Grant:
    """An installation token: whose, until when, with which permissions and repositories."""

    installation_id: int
    expires: dt.datetime
    permissions: dict[str, str]
    repositories: set[str] | None = None  # None: every repository of the installation


@dataclass
class FakeRepo:
    full_name: str
    git_dir: str  # a bare repository on disk, served over HTTPS at the clone URL
    installation_id: int
    id: int = 0
    default_branch: str = "main"
    private: bool = True
    clone_url: str | None = None  # what the API says; default: the fake's HTTPS git URL


@dataclass
class FakePull:
    repo: str
    number: int
    head_repo: str
    head_ref: str
    base_ref: str
    author: str
    state: str = "open"
    draft: bool = False
    title: str = "A pull request"
    body: str = ""
    author_type: str = "User"
    maintainer_can_modify: bool = True
    created_at: str = field(default_factory=lambda: _now())


@dataclass
class FakeState:
    repos: dict[str, FakeRepo] = field(default_factory=dict)
    installations: dict[int, FakeInstallation] = field(default_factory=dict)
    pulls: dict[tuple[str, int], FakePull] = field(default_factory=dict)
    check_runs: dict[int, dict] = field(default_factory=dict)
    comments: dict[int, dict] = field(default_factory=dict)
    reactions: list[dict] = field(default_factory=list)
    permissions: dict[tuple[str, str], str] = field(default_factory=dict)
    tokens: dict[str, Grant] = field(default_factory=dict)
    log: list[tuple[str, str, int]] = field(default_factory=list)  # (method, path, status)
    faults: list[Fault] = field(default_factory=list)
    holds: list[tuple[str, re.Pattern, float, str]] = field(default_factory=list)
    held: list[tuple[str, str]] = field(default_factory=list)  # requests being held now
    violations: list[str] = field(default_factory=list)  # OpenAPI problems, request and response


class FakeGitHub:
    def __init__(self, app_id: int = 1, public_key: Any = None, slug: str = "atrex-test",
                 token_ttl: dt.timedelta = dt.timedelta(hours=1), spec: Any = _NO_SPEC):
        self.app_id = app_id
        self.public_key = public_key
        self.slug = slug
        self.token_ttl = token_ttl
        self.state = FakeState()
        self.lock = threading.RLock()
        self._ids = itertools.count(1001)
        self.spec: openapi.OpenApi | None = openapi.load() if spec is _NO_SPEC else spec
        self._route_names = {PREFIX + rule: name for rule, _v, _m, name in self._routes()}
        self.app = self._build()
        self._server = None
        self._thread: threading.Thread | None = None
        self.git: GitHttpServer | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FakeGitHub:
        self._server = make_server("127.0.0.1", 0, self.app, threaded=True)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        daemon=True)
        self._thread.start()
        self.git = GitHttpServer(self._git_dir, self._authorize_git)
        return self

    def stop(self, check: bool = True) -> None:
        if self._server is not None:
            self._server.shutdown()
        if self.git is not None:
            self.git.stop()
        if check:
            self.assert_conforms()

    def assert_conforms(self) -> None:
        """Fail when a request or a response broke GitHub's OpenAPI description."""
        with self.lock:
            problems = list(dict.fromkeys(self.state.violations))
        assert not problems, "GitHub OpenAPI violations:\n" + "\n".join(problems[:30])

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    @property
    def api_url(self) -> str:
        return self.root + PREFIX

    @property
    def ca_file(self) -> str:
        """The git server's certificate: GIT_SSL_CAINFO for clients of the clone URLs."""
        return str(self.git.ca_file)

    @property
    def urls(self) -> shapes.Urls:
        return shapes.Urls(self.root, self.api_url, self.git.root if self.git else "")

    @property
    def bot_login(self) -> str:
        return f"{self.slug}[bot]"

    # --- arranging state ---------------------------------------------------------------------

    def next_id(self) -> int:
        return next(self._ids)

    def add_installation(self, installation_id: int, account: str = "octo",
                         permissions: dict[str, str] | None = None,
                         suspended: bool = False) -> FakeInstallation:
        with self.lock:
            found = FakeInstallation(installation_id, account, suspended=suspended)
            if permissions is not None:
                found.permissions = dict(permissions)
            self.state.installations[installation_id] = found
            return found

    def set_installation_permissions(self, installation_id: int, **levels: str) -> None:
        """Change what an installation may do (e.g. `checks="read"`); "none" removes one.
        Tokens already minted keep what they were minted with, as on GitHub."""
        with self.lock:
            permissions = self.state.installations[installation_id].permissions
            for name, level in levels.items():
                if level == "none":
                    permissions.pop(name, None)
                else:
                    permissions[name] = level

    def add_repo(self, full_name: str, git_dir: str, installation_id: int = 1,
                 private: bool = True) -> FakeRepo:
        """A repository (private by default: git needs the token), in `installation_id` (made
        when it does not exist yet)."""
        with self.lock:
            if installation_id not in self.state.installations:
                self.add_installation(installation_id, full_name.split("/")[0])
            repo = FakeRepo(full_name, git_dir, installation_id, id=self.next_id(),
                            private=private)
            self.state.repos[full_name] = repo
            return repo

    def add_pull(self, repo: str, number: int | None, head_ref: str, author: str = "contributor",
                 head_repo: str | None = None, base_ref: str = "main", title: str | None = None,
                 body: str = "") -> FakePull:
        """Arrange a PR (`number=None`: the next free number)."""
        with self.lock:
            number = number if number is not None else self._next_number(repo)
            pull = FakePull(repo, number, head_repo or repo, head_ref, base_ref, author,
                            body=body, **({"title": title} if title is not None else {}))
            self.state.pulls[(repo, number)] = pull
            return pull

    def _next_number(self, repo: str) -> int:
        return 1 + max((n for r, n in self.state.pulls if r == repo), default=0)

    def installation_token(self, installation_id: int = 1) -> str:
        """A valid installation token, minted without the App's JWT (test arrangement)."""
        with self.lock:
            installation = self.state.installations[installation_id]
            return self._mint(installation, dict(installation.permissions), None)[0]

    def grant_token(self, token: str, installation_id: int,
                    permissions: dict[str, str] | None = None) -> None:
        """Arrange a token with a known value (a workflow's GITHUB_TOKEN) for an existing
        installation, with its permissions or fewer."""
        with self.lock:
            installation = self.state.installations[installation_id]
            self.state.tokens[token] = Grant(
                installation_id, dt.datetime.now(dt.UTC) + self.token_ttl,
                dict(permissions if permissions is not None else installation.permissions))

    def _mint(self, installation: FakeInstallation, permissions: dict[str, str],
              repositories: set[str] | None) -> tuple[str, dt.datetime]:
        token = "ghs_" + secrets.token_hex(18)
        expires = dt.datetime.now(dt.UTC).replace(microsecond=0) + self.token_ttl
        self.state.tokens[token] = Grant(installation.id, expires, permissions, repositories)
        return token, expires

    def set_permission(self, repo: str, login: str, permission: str) -> None:
        with self.lock:
            self.state.permissions[(repo, login)] = permission

    def add_comment(self, repo: str, number: int, login: str, body: str,
                    user_type: str = "User") -> dict:
        with self.lock:
            return self._new_comment(repo, number, login, user_type, body, None)

    def inject(self, method: str, path: str, status: int, times: int = 1,
               headers: dict[str, str] | None = None, message: str | None = None,
               apply: bool = False) -> None:
        with self.lock:
            self.state.faults.append(Fault(method.upper(), re.compile(path), status,
                                           headers or {}, {"message": message or "Server Error"},
                                           times, apply))

    def hold(self, method: str, path: str, seconds: float, body_contains: str = "") -> None:
        """Apply the next matching request, then hold its response back for `seconds` (so a
        test can kill the client after the change happened but before it heard back)."""
        with self.lock:
            self.state.holds.append((method.upper(), re.compile(path), seconds, body_contains))

    def inject_secondary_rate_limit(self, method: str, path: str, retry_after: int = 1) -> None:
        self.inject(method, path, 403, headers={"Retry-After": str(retry_after)},
                    message=SECONDARY_RATE_LIMIT)

    # --- reading state -----------------------------------------------------------------------

    def sha(self, repo: str, ref: str) -> str:
        found = self.branch_sha(repo, ref)
        if found is None:
            raise KeyError(f"{repo} has no branch {ref}")
        return found

    def branch_sha(self, repo: str, ref: str) -> str | None:
        """The branch's commit in the repository's bare git directory, None if there is none."""
        return self._git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{ref}^{{commit}}")

    def _git(self, repo: str, *args: str) -> str | None:
        proc = subprocess.run(["git", "--git-dir", self.state.repos[repo].git_dir, *args],
                              capture_output=True, text=True)
        return proc.stdout.strip() if proc.returncode == 0 else None

    def has_commit(self, repo: str, sha: str) -> bool:
        """A commit of the repository, or the head commit of one of its pull requests from a fork
        (GitHub keeps those under refs/pull/<n>/head in the base repository)."""
        if not re.fullmatch(r"[0-9a-f]{40}", sha or ""):
            return False
        with self.lock:
            forks = {p.head_repo for p in self.state.pulls.values()
                     if p.repo == repo and p.head_repo != repo and p.head_repo in self.state.repos}
        return any(self._git(name, "cat-file", "-e", f"{sha}^{{commit}}") is not None
                   for name in [repo, *sorted(forks)])

    def pulls_of(self, repo: str, state: str | None = "open") -> list[FakePull]:
        with self.lock:
            return sorted((p for p in self.state.pulls.values() if p.repo == repo
                           and (state is None or p.state == state)), key=lambda p: p.number)

    def runs_for(self, repo: str, sha: str | None = None) -> list[dict]:
        with self.lock:
            return [r for r in self.state.check_runs.values() if r["_repo"] == repo
                    and (sha is None or r["head_sha"] == sha)]

    def comments_on(self, repo: str, number: int, login: str | None = None) -> list[dict]:
        with self.lock:
            return [c for c in self.state.comments.values()
                    if c["_repo"] == repo and c["_number"] == number
                    and (login is None or c["user"]["login"] == login)]

    def reactions_on(self, comment_id: int) -> list[str]:
        with self.lock:
            return [r["content"] for r in self.state.reactions if r["_comment"] == comment_id]

    def requests(self, method: str | None = None, path: str = "") -> list[tuple[str, str, int]]:
        with self.lock:
            return [e for e in self.state.log if (method is None or e[0] == method)
                    and re.search(path, e[1])]

    def git_requests(self, repo: str | None = None) -> list[tuple[str, str, int, str | None]]:
        """(repository, service, status, token) of every git request the HTTPS server answered
        (token: the one presented in `x-access-token:<token>`, or None)."""
        return [e for e in (self.git.log if self.git else []) if repo is None or e[0] == repo]

    # --- shapes ------------------------------------------------------------------------------

    def _user(self, login: str, user_type: str = "User") -> dict:
        return shapes.user(self.urls, login, user_type)

    def clone_url(self, repo: FakeRepo) -> str:
        return repo.clone_url or self.git.url(repo.full_name)

    def _repo_json(self, repo: FakeRepo) -> dict:
        return shapes.repository(self.urls, repo.full_name, repo.id, repo.private,
                                 repo.default_branch, self.clone_url(repo))

    def _app_json(self) -> dict:
        return shapes.app(self.urls, self.app_id, self.slug, dict(rules.DEFAULT_PERMISSIONS),
                          EVENTS)

    def _pull_json(self, pull: FakePull) -> dict:
        def side(repo_name: str, ref: str) -> shapes.PullSide:
            return shapes.PullSide(repo_name, ref, self.branch_sha(repo_name, ref) or "0" * 40,
                                   self._repo_json(self.state.repos[repo_name]))

        return shapes.pull_request(
            self.urls, pull.repo, pull.number, state=pull.state, draft=pull.draft,
            title=pull.title, body=pull.body, author=self._user(pull.author, pull.author_type),
            head=side(pull.head_repo, pull.head_ref), base=side(pull.repo, pull.base_ref),
            maintainer_can_modify=pull.maintainer_can_modify, created_at=pull.created_at)

    def _public_run(self, run: dict) -> dict:
        return shapes.check_run(self.urls, run["_repo"], run, self._app_json())

    def _public_comment(self, comment: dict) -> dict:
        return shapes.issue_comment(self.urls, comment["_repo"], comment["_number"],
                                    comment["id"], comment["body"], comment["user"],
                                    comment["_via_app"], comment["created_at"],
                                    comment["updated_at"])

    def _new_comment(self, repo: str, number: int, login: str, user_type: str, body: str,
                     via_app: dict | None) -> dict:
        comment = {"id": self.next_id(), "body": body, "user": self._user(login, user_type),
                   "created_at": _now(), "updated_at": _now(), "_via_app": via_app,
                   "_repo": repo, "_number": number, "_edits": 0}
        self.state.comments[comment["id"]] = comment
        return comment

    # --- the Flask app -----------------------------------------------------------------------

    def _build(self) -> Flask:
        app = Flask("github-fake")
        fake = self

        @app.before_request
        def faults() -> Response | None:
            fake._check_request()
            fault = fake._match_fault()
            if fault is not None and not fault.apply:
                request.environ["fake.fault"] = fault
                return fake._fault_response(fault)
            request.environ["fake.fault"] = fault
            return None

        @app.after_request
        def log_and_apply_fault(response: Response) -> Response:
            fault = request.environ.get("fake.fault")
            if fault is not None:
                response = fake._fault_response(fault)
            else:
                fake._check_response(response)
            with fake.lock:
                fake.state.log.append((request.method, request.path, response.status_code))
            fake._maybe_hold()
            return response

        for rule, view, methods, _route in self._routes():
            app.add_url_rule(PREFIX + rule, view.__name__, view, methods=methods)
        self.oauth = FakeOAuth(self)
        self.oauth.install(app)
        return app

    def _check_request(self) -> None:
        if self.spec is None or not request.path.startswith(PREFIX):
            return
        problems = self.spec.request_problems(
            request.method, request.path[len(PREFIX):], list(request.args.items(multi=True)),
            request.get_data())
        if problems:
            with self.lock:
                self.state.violations.extend(problems)

    def _check_response(self, response: Response) -> None:
        if self.spec is None or not request.path.startswith(PREFIX):
            return
        problems = self.spec.response_problems(
            request.method, request.path[len(PREFIX):], response.status_code,
            response.get_data(), response.headers.get("Content-Type", ""))
        if problems:
            with self.lock:
                self.state.violations.extend(problems)

    def _match_fault(self) -> Fault | None:
        with self.lock:
            for fault in self.state.faults:
                if fault.times > 0 and fault.method == request.method and fault.path.search(
                        request.path):
                    fault.times -= 1
                    return fault
        return None

    def _maybe_hold(self) -> None:
        with self.lock:
            for hold in self.state.holds:
                if hold[0] == request.method and hold[1].search(request.path) and \
                        hold[3] in request.get_data(as_text=True):
                    self.state.holds.remove(hold)
                    self.state.held.append((request.method, request.path))
                    break
            else:
                return
        time.sleep(hold[2])

    def _fault_response(self, fault: Fault) -> Response:
        response = jsonify(fault.body)
        response.status_code = fault.status
        for key, value in fault.headers.items():
            response.headers[key] = value
        return response

    def _routes(self):
        """(rule, view, methods, route name of rules.ENDPOINT_PERMISSIONS)."""
        repo = "/repos/<owner>/<name>"
        return [
            ("/app", self.get_app, ["GET"], None),
            ("/app/installations/<int:iid>/access_tokens", self.create_token, ["POST"], None),
            (repo, self.get_repo, ["GET"], "repo"),
            (repo + "/pulls", self.pulls, ["GET", "POST"], "pulls"),
            (repo + "/pulls/<int:number>", self.get_pull, ["GET", "PATCH"], "pull"),
            (repo + "/contents/<path:path>", self.contents, ["GET"], "contents"),
            (repo + "/git/ref/<path:ref>", self.git_ref, ["GET"], "git_ref"),
            (repo + "/check-runs", self.create_check_run, ["POST"], "check_runs"),
            (repo + "/check-runs/<int:run_id>", self.check_run, ["GET", "PATCH"], "check_run"),
            (repo + "/commits/<ref>/check-runs", self.list_check_runs, ["GET"],
             "commit_check_runs"),
            (repo + "/issues/<int:number>", self.get_issue, ["GET"], "issue"),
            (repo + "/issues/<int:number>/comments", self.issue_comments, ["GET", "POST"],
             "issue_comments"),
            (repo + "/issues/comments/<int:comment_id>", self.comment,
             ["GET", "PATCH", "DELETE"], "comment"),
            (repo + "/issues/comments/<int:comment_id>/reactions", self.create_reaction,
             ["POST"], "reactions"),
            (repo + "/collaborators/<user>/permission", self.permission, ["GET"], "permission"),
        ]

    # --- auth --------------------------------------------------------------------------------

    def _error(self, status: int, message: str) -> tuple[Response, int]:
        return jsonify(shapes.error(message, status)), status

    def _refuse(self, refusal: rules.Refusal) -> tuple[Response, int]:
        return jsonify(refusal.body()), refusal.status

    def _check_jwt(self) -> tuple[Response, int] | None:
        header = request.headers.get("Authorization", "")
        if not header.startswith("Bearer ") or self.public_key is None:
            return self._error(401, "A JSON web token could not be decoded")
        try:
            claims = jwt.decode(header[7:], self.public_key, algorithms=["RS256"],
                                options={"verify_iss": False})
        except jwt.PyJWTError as exc:
            return self._error(401, f"'Expiration time' claim ('exp') is invalid: {exc}")
        if str(claims.get("iss")) != str(self.app_id) or claims["exp"] - claims["iat"] > 660:
            return self._error(401, "A JSON web token could not be decoded")
        return None

    def _grant(self, token: str | None) -> Grant | None:
        with self.lock:
            grant = self.state.tokens.get(token or "")
        if grant is None or grant.expires <= dt.datetime.now(dt.UTC):
            return None
        return grant

    def _access(self, token: str | None, full_name: str, method: str,
                route: str) -> rules.Refusal | None:
        """GitHub's answer to a token asking for `route` on a repository: 401 bad credentials,
        404 a repository the token cannot see, 403 a permission it lacks."""
        grant = self._grant(token)
        if grant is None:
            return rules.Refusal(401, "Bad credentials")
        with self.lock:
            repo = self.state.repos.get(full_name)
        if repo is None or repo.installation_id != grant.installation_id or (
                grant.repositories is not None and full_name not in grant.repositories):
            return rules.Refusal(404, "Not Found")
        return rules.permission_refusal(grant.permissions, method, route)

    def _check_token(self, owner: str, name: str) -> tuple[Response, int] | None:
        header = request.headers.get("Authorization", "")
        token = header.split(" ", 1)[1] if " " in header else ""
        route = self._route_names[request.url_rule.rule]
        refusal = self._access(token, f"{owner}/{name}", request.method, route)
        return self._refuse(refusal) if refusal else None

    def _git_dir(self, full_name: str) -> str | None:
        with self.lock:
            repo = self.state.repos.get(full_name)
        return repo.git_dir if repo is not None else None

    def _authorize_git(self, token: str | None, full_name: str,
                       service: str) -> rules.Refusal | None:
        refusal = self._access(token, full_name, "GIT", service)
        if refusal is not None and refusal.status == 403:
            return rules.Refusal(403, f"Permission to {full_name}.git denied to "
                                 f"{self.bot_login}.")
        if refusal is not None and refusal.status == 404:
            return rules.Refusal(404, "Repository not found.")
        return refusal

    # --- endpoints ---------------------------------------------------------------------------

    def get_app(self):
        return self._check_jwt() or jsonify(self._app_json())

    def create_token(self, iid: int):
        denied = self._check_jwt()
        if denied:
            return denied
        body = request.get_json(silent=True) or {}
        with self.lock:
            installation = self.state.installations.get(iid)
            if installation is None:
                return self._error(404, "Not Found")
            if installation.suspended:
                return self._error(403, "This installation has been suspended")
            known = {n.split("/")[1] for n, r in self.state.repos.items()
                     if r.installation_id == iid}
            refusal = rules.token_request_refusal(installation.permissions,
                                                  body.get("permissions"),
                                                  body.get("repositories"), known)
            if refusal:
                return self._refuse(refusal)
            permissions = dict(body.get("permissions") or installation.permissions)
            repositories = None if body.get("repositories") is None else {
                f"{installation.account}/{n}" for n in body["repositories"]}
            token, expires = self._mint(installation, permissions, repositories)
        return jsonify(shapes.installation_token(
            token, expires.strftime("%Y-%m-%dT%H:%M:%SZ"), permissions,
            sorted(repositories) if repositories is not None else None)), 201

    def get_repo(self, owner: str, name: str):
        denied = self._check_token(owner, name)
        if denied:
            return denied
        with self.lock:
            return jsonify(self._repo_json(self.state.repos[f"{owner}/{name}"]))

    def get_pull(self, owner: str, name: str, number: int):
        denied = self._check_token(owner, name)
        if denied:
            return denied
        with self.lock:
            pull = self.state.pulls.get((f"{owner}/{name}", number))
            if pull is None:
                return self._error(404, "Not Found")
            if request.method == "PATCH":
                error = self._edit_pull(pull, request.get_json() or {})
                if error:
                    return self._invalid(error)
            return jsonify(self._pull_json(pull))

    def _invalid(self, error: dict) -> tuple[Response, int]:
        detail = {"resource": "PullRequest", **error}
        return jsonify(shapes.validation_error("Validation Failed", [detail])), 422

    def _edit_pull(self, pull: FakePull, body: dict) -> dict | None:
        if "base" in body and self.branch_sha(pull.repo, body["base"]) is None:
            return {"field": "base", "code": "invalid"}
        if body.get("state") not in (None, "open", "closed"):
            return {"field": "state", "code": "invalid"}
        if "title" in body and not (body["title"] or "").strip():
            return {"field": "title", "code": "missing_field"}
        pull.title = body.get("title", pull.title)
        pull.body = body.get("body", pull.body)
        pull.state = body.get("state", pull.state)
        pull.base_ref = body.get("base", pull.base_ref)
        return None

    def pulls(self, owner: str, name: str):
        denied = self._check_token(owner, name)
        if denied:
            return denied
        repo = f"{owner}/{name}"
        if request.method == "POST":
            return self._create_pull(repo, request.get_json() or {})
        state = request.args.get("state", "open")
        head, base = request.args.get("head"), request.args.get("base")
        with self.lock:
            found = [p for p in self.pulls_of(repo, None if state == "all" else state)
                     if (head is None or f"{p.head_repo.split('/')[0]}:{p.head_ref}" == head)
                     and (base is None or p.base_ref == base)]
            items = [self._pull_json(p) for p in sorted(found, key=lambda p: -p.number)]
        return self._paginate(items)

    def _create_pull(self, repo: str, body: dict):
        head, base = body.get("head") or "", body.get("base") or ""
        owner, _, branch = head.rpartition(":")
        head_repo = repo if owner in ("", repo.split("/")[0]) else next(
            (r for r in self.state.repos if r.split("/")[0] == owner), None)
        if not (body.get("title") or "").strip():
            return self._invalid({"field": "title", "code": "missing_field"})
        with self.lock:
            if head_repo is None or self.branch_sha(head_repo, branch) is None:
                return self._invalid({"field": "head", "code": "invalid"})
            if self.branch_sha(repo, base) is None:
                return self._invalid({"field": "base", "code": "invalid"})
            if head_repo == repo and not self._git(repo, "rev-list", "--max-count=1",
                                                   f"refs/heads/{base}..refs/heads/{branch}"):
                return self._invalid({"code": "custom",
                                      "message": f"No commits between {base} and {branch}"})
            if any(p.head_repo == head_repo and p.head_ref == branch and p.base_ref == base
                   for p in self.pulls_of(repo)):
                return self._invalid({"code": "custom", "message": "A pull request already "
                                      f"exists for {head_repo.split('/')[0]}:{branch}."})
            pull = self.add_pull(repo, None, branch, author=self.bot_login, head_repo=head_repo,
                                 base_ref=base, title=body["title"], body=body.get("body") or "")
            pull.author_type = "Bot"
            pull.draft = bool(body.get("draft"))
            return jsonify(self._pull_json(pull)), 201

    def contents(self, owner: str, name: str, path: str):
        denied = self._check_token(owner, name)
        if denied:
            return denied
        repo = f"{owner}/{name}"
        ref = request.args.get("ref") or self.state.repos[repo].default_branch
        blob = self._git(repo, "rev-parse", "--verify", "--quiet", f"{ref}:{path}")
        if blob is None or self._git(repo, "cat-file", "-t", blob) != "blob":
            return self._error(404, "Not Found")
        raw = subprocess.run(["git", "--git-dir", self.state.repos[repo].git_dir, "cat-file",
                              "blob", blob], capture_output=True, check=True).stdout
        encoded = base64.encodebytes(raw).decode()  # GitHub wraps the base64 at 60 columns
        return jsonify(shapes.content_file(self.urls, repo, path, ref, blob, raw, encoded))

    def git_ref(self, owner: str, name: str, ref: str):
        denied = self._check_token(owner, name)
        if denied:
            return denied
        repo = f"{owner}/{name}"
        sha = self._git(repo, "rev-parse", "--verify", "--quiet", f"refs/{ref}^{{commit}}")
        if sha is None:
            return self._error(404, "Not Found")
        return jsonify(shapes.git_ref(self.urls, repo, ref, sha))

    def get_issue(self, owner: str, name: str, number: int):
        denied = self._check_token(owner, name)
        if denied:
            return denied
        with self.lock:
            pull = self.state.pulls.get((f"{owner}/{name}", number))
            if pull is None:
                return self._error(404, "Not Found")
            return jsonify(shapes.issue_of_pull(self.urls, self._pull_json(pull), pull.repo))

    def create_check_run(self, owner: str, name: str):
        denied = self._check_token(owner, name)
        if denied:
            return denied
        repo = f"{owner}/{name}"
        body = request.get_json(silent=True)
        sha = body.get("head_sha") if isinstance(body, dict) else None
        refusal = rules.check_run_refusal(body, None, self.has_commit(repo, sha or ""))
        if refusal:
            return self._refuse(refusal)
        run_id = self.next_id()
        run = {"id": run_id, "head_sha": body["head_sha"],
               "html_url": f"{self.root}/{repo}/runs/{run_id}",
               "external_id": body.get("external_id", ""), "name": body["name"],
               "details_url": body.get("details_url"), "status": "queued",
               "conclusion": None, "started_at": _now(), "completed_at": None,
               "output": {"title": None, "summary": None, "text": None}, "annotations": [],
               "check_suite": 1, "_repo": repo, "_history": []}
        self._apply_run_update(run, body)
        with self.lock:
            self.state.check_runs[run["id"]] = run
        return jsonify(self._public_run(run)), 201

    def _apply_run_update(self, run: dict, body: dict) -> None:
        """Apply a create or update that check_run_refusal accepted."""
        conclusion = body.get("conclusion")
        status = "completed" if conclusion is not None else body.get("status", run["status"])
        if status != "completed":
            conclusion = None
        elif conclusion is None:
            conclusion = run["conclusion"]
        output = body.get("output")
        if output is not None:
            run["output"].update({k: output.get(k) for k in ("title", "summary", "text")})
            run["annotations"].extend(output.get("annotations") or [])
        if body.get("details_url") is not None:
            run["details_url"] = body["details_url"]
        run["status"], run["conclusion"] = status, conclusion
        if status == "completed":
            run["completed_at"] = body.get("completed_at") or _now()
        run["_history"].append((status, conclusion))

    def check_run(self, owner: str, name: str, run_id: int):
        denied = self._check_token(owner, name)
        if denied:
            return denied
        with self.lock:
            run = self.state.check_runs.get(run_id)
            if run is None or run["_repo"] != f"{owner}/{name}":
                return self._error(404, "Not Found")
            if request.method == "PATCH":
                body = request.get_json(silent=True)
                refusal = rules.check_run_refusal(body, run, True)
                if refusal:
                    return self._refuse(refusal)
                self._apply_run_update(run, body)
            return jsonify(self._public_run(run))

    def list_check_runs(self, owner: str, name: str, ref: str):
        denied = self._check_token(owner, name)
        if denied:
            return denied
        repo = f"{owner}/{name}"
        if not self.has_commit(repo, ref):
            return self._refuse(rules.invalid(f"No commit found for SHA: {ref}", "CheckRun",
                                              "ref"))
        wanted = request.args.get("check_name")
        runs = [self._public_run(r) for r in self.runs_for(repo, ref)
                if wanted is None or r["name"] == wanted]
        return self._paginate(runs, "check_runs")

    def _paginate(self, items: list, list_key: str | None = None):
        per_page = min(int(request.args.get("per_page", 30)), 100)
        page = int(request.args.get("page", 1))
        chunk = items[(page - 1) * per_page: page * per_page]
        body = {"total_count": len(items), list_key: chunk} if list_key else chunk
        response = jsonify(body)
        if page * per_page < len(items):
            args = dict(request.args, page=str(page + 1), per_page=str(per_page))
            query = "&".join(f"{k}={v}" for k, v in args.items())
            response.headers["Link"] = f'<{self.root}{request.path}?{query}>; rel="next"'
        return response

    def issue_comments(self, owner: str, name: str, number: int):
        denied = self._check_token(owner, name)
        if denied:
            return denied
        repo = f"{owner}/{name}"
        if (repo, number) not in self.state.pulls:
            return self._error(404, "Not Found")
        if request.method == "GET":
            items = sorted(self.comments_on(repo, number), key=lambda c: c["id"])
            return self._paginate([self._public_comment(c) for c in items])
        body = (request.get_json(silent=True) or {}).get("body")
        refusal = rules.comment_body_refusal(body)
        if refusal:
            return self._refuse(refusal)
        with self.lock:
            comment = self._new_comment(repo, number, self.bot_login, "Bot", body,
                                        self._app_json())
            return jsonify(self._public_comment(comment)), 201

    def comment(self, owner: str, name: str, comment_id: int):
        denied = self._check_token(owner, name)
        if denied:
            return denied
        with self.lock:
            comment = self.state.comments.get(comment_id)
            if comment is None or comment["_repo"] != f"{owner}/{name}":
                return self._error(404, "Not Found")
            if request.method == "DELETE":
                del self.state.comments[comment_id]
                return "", 204
            if request.method == "PATCH":
                body = (request.get_json(silent=True) or {}).get("body")
                refusal = rules.comment_body_refusal(body)
                if refusal:
                    return self._refuse(refusal)
                comment["body"] = body
                comment["updated_at"] = _now()
                comment["_edits"] += 1
            return jsonify(self._public_comment(comment))

    def create_reaction(self, owner: str, name: str, comment_id: int):
        denied = self._check_token(owner, name)
        if denied:
            return denied
        content = (request.get_json(silent=True) or {}).get("content")
        if content not in REACTIONS:
            return self._refuse(rules.invalid(f"content {content!r} is not a reaction",
                                              "Reaction", "content"))
        with self.lock:
            comment = self.state.comments.get(comment_id)
            if comment is None or comment["_repo"] != f"{owner}/{name}":
                return self._error(404, "Not Found")
            for reaction in self.state.reactions:
                if reaction["_comment"] == comment_id and reaction["content"] == content:
                    return jsonify(self._public_reaction(reaction)), 200
            reaction = {"id": self.next_id(), "content": content, "created_at": _now(),
                        "_comment": comment_id}
            self.state.reactions.append(reaction)
            return jsonify(self._public_reaction(reaction)), 201

    def _public_reaction(self, reaction: dict) -> dict:
        return shapes.reaction(reaction["id"], reaction["content"],
                               self._user(self.bot_login, "Bot"), reaction["created_at"])

    def permission(self, owner: str, name: str, user: str):
        denied = self._check_token(owner, name)
        if denied:
            return denied
        level = self.state.permissions.get((f"{owner}/{name}", user))
        if level is None:
            return self._error(404, f"{user} is not a user")
        return jsonify(shapes.collaborator_permission(self.urls, user, level))



# --- signing in with GitHub (the dashboards' OAuth web flow) and user-to-server tokens -------


@dataclass
class FakeOAuthApp:
    client_id: str = "Iv1.atrextest0001"
    client_secret: str = field(default_factory=lambda: secrets.token_hex(20))
    callback_urls: list[str] = field(default_factory=list)  # empty: any redirect_uri


class FakeOAuth:
    """GitHub's OAuth web flow for the App, and what a user-to-server token can do.

    - `GET /login/oauth/authorize`: GitHub's sign-in and consent page. The browser's GitHub
      session is `web_user` (a test arranges it); with one, the fake approves at once and
      redirects to `redirect_uri` with `code` and `state`, as GitHub does for an App the user
      already authorized. Without one it answers 200 with a sign-in page (nothing to automate).
    - `POST /login/oauth/access_token`: code -> `ghu_` token (form or JSON body; `Accept:
      application/json`), GitHub's 200-with-`error` answers for a bad code or secret.
    - `GET /api/v3/user` with a user token: the user.
    - `GET /api/v3/repos/{owner}/{repo}` with a user token: the repository with the user's
      `permissions` when the user can read it (a public repository, or a permission arranged
      with `set_permission`) and the App is installed on it; 404 otherwise (GitHub hides private
      repositories). Installation tokens keep going to the fake's own handler.
    - `GET /api/v3/repos/{owner}/{repo}/commits/{sha}/pulls`: the pull requests associated with a
      commit (`associate(repo, sha, number)` marks one merged with that commit).
    """

    def __init__(self, fake: FakeGitHub):
        self.fake = fake
        self.app = FakeOAuthApp()
        self.web_user: str | None = None
        self.codes: dict[str, tuple[str, str, str | None, float]] = {}
        self.user_tokens: dict[str, tuple[str, float]] = {}
        self.merged: dict[tuple[str, str], list[int]] = {}
        self.token_ttl_s = 8 * 3600.0

    def install(self, app: Flask) -> None:
        app.add_url_rule("/login/oauth/authorize", "oauth_authorize", self.authorize,
                         methods=["GET"])
        app.add_url_rule("/login/oauth/access_token", "oauth_access_token", self.access_token,
                         methods=["POST"])
        app.add_url_rule(PREFIX + "/user", "oauth_user", self.user, methods=["GET"])
        rule = PREFIX + "/repos/<owner>/<name>/commits/<sha>/pulls"
        app.add_url_rule(rule, "commit_pulls", self.commit_pulls, methods=["GET"])
        self.fake._route_names[rule] = "commit_pulls"
        app.before_request(self._user_repo)

    # --- arranging ---------------------------------------------------------------------------

    def associate(self, repo: str, sha: str, number: int) -> None:
        with self.fake.lock:
            self.merged.setdefault((repo, sha), []).append(number)

    def user_token(self, login: str) -> str:
        token = "ghu_" + secrets.token_hex(18)
        with self.fake.lock:
            self.user_tokens[token] = (login, time.time() + self.token_ttl_s)
        return token

    def expire_tokens(self) -> None:
        with self.fake.lock:
            self.user_tokens = {t: (login, 0.0) for t, (login, _) in self.user_tokens.items()}

    # --- endpoints ---------------------------------------------------------------------------

    def authorize(self):
        client_id = request.args.get("client_id", "")
        redirect_uri = request.args.get("redirect_uri", "")
        if client_id != self.app.client_id:
            return Response("<h1>404: the client_id is not an OAuth app's</h1>", 404,
                            mimetype="text/html")
        if self.app.callback_urls and not any(redirect_uri.startswith(url)
                                              for url in self.app.callback_urls):
            return Response("<h1>The redirect_uri is not associated with this application."
                            "</h1>", 400, mimetype="text/html")
        if self.web_user is None:
            return Response("<h1>Sign in to GitHub</h1>", 200, mimetype="text/html")
        code = secrets.token_hex(10)
        with self.fake.lock:
            self.codes[code] = (self.web_user, client_id, redirect_uri or None,
                                time.time() + 600)
        query = {"code": code, **({"state": request.args["state"]}
                                  if "state" in request.args else {})}
        target = redirect_uri + ("&" if "?" in redirect_uri else "?") + "&".join(
            f"{k}={v}" for k, v in query.items())
        return Response("", 302, headers={"Location": target})

    def access_token(self):
        body = request.get_json(silent=True) or request.form
        code = body.get("code", "")
        with self.fake.lock:
            grant = self.codes.pop(code, None)
        if body.get("client_id") != self.app.client_id or \
                body.get("client_secret") != self.app.client_secret:
            return jsonify(error="incorrect_client_credentials",
                           error_description="The client_id and/or client_secret passed are "
                           "incorrect.")
        if grant is None or grant[3] < time.time() or grant[1] != body.get("client_id") or (
                grant[2] and body.get("redirect_uri") not in (None, grant[2])):
            return jsonify(error="bad_verification_code",
                           error_description="The code passed is incorrect or expired.")
        token = self.user_token(grant[0])
        return jsonify(access_token=token, token_type="bearer", scope="",
                       expires_in=int(self.token_ttl_s),
                       refresh_token="ghr_" + secrets.token_hex(30),
                       refresh_token_expires_in=15897600)

    def _login(self) -> str | None:
        header = request.headers.get("Authorization", "")
        token = header.split(" ", 1)[1] if " " in header else ""
        with self.fake.lock:
            grant = self.user_tokens.get(token)
        if grant is None or grant[1] <= time.time():
            return None
        return grant[0]

    def user(self):
        login = self._login()
        if login is None:
            return self.fake._error(401, "Bad credentials")
        return jsonify(shapes.public_user(self.fake.urls, login))

    def _user_repo(self):
        """`GET /repos/{owner}/{repo}` with a user token (before the installation handler)."""
        match = re.fullmatch(PREFIX + r"/repos/([^/]+)/([^/]+)", request.path)
        auth = request.headers.get("Authorization", "")
        if request.method != "GET" or match is None or "ghu_" not in auth:
            return None
        login = self._login()
        if login is None:
            return self.fake._error(401, "Bad credentials")
        full_name = f"{match.group(1)}/{match.group(2)}"
        with self.fake.lock:
            repo = self.fake.state.repos.get(full_name)
            level = self.fake.state.permissions.get((full_name, login))
        if repo is None or (repo.private and level is None):
            return self.fake._error(404, "Not Found")
        ranks = ["read", "triage", "write", "maintain", "admin"]
        rank = ranks.index(level) if level in ranks else -1
        data = self.fake._repo_json(repo)
        data["permissions"] = {"pull": repo.private is False or rank >= 0,
                               "triage": rank >= 1, "push": rank >= 2, "maintain": rank >= 3,
                               "admin": rank >= 4}
        return jsonify(data)

    def commit_pulls(self, owner: str, name: str, sha: str):
        denied = self.fake._check_token(owner, name)
        if denied:
            return denied
        repo = f"{owner}/{name}"
        with self.fake.lock:
            merged = list(self.merged.get((repo, sha), []))
            pulls = [self.fake.state.pulls[(repo, n)] for n in merged
                     if (repo, n) in self.fake.state.pulls]
            items = []
            for pull in pulls:
                data = self.fake._pull_json(pull)
                data.update(merged=True, merged_at=_now(), state="closed")
                items.append(data)
        return self.fake._paginate(items)

"""A stateful fake of the GitHub REST API, served over real HTTP on loopback.

Real PyGithub reaches it through `base_url` (`http://127.0.0.1:PORT/api/v3`, the GitHub Enterprise
layout). It implements every endpoint the bot calls, with GitHub's response shapes and
self-consistent `url` fields that point back at the fake:

- App auth: `GET /app` and `POST /app/installations/{id}/access_tokens` verify the JWT against the
  App's public key; repository endpoints require a live installation token for an installation
  that has the repository.
- repositories and pull requests (head and base SHAs read from real bare git repositories, clone
  URLs pointing at them): get, list (state / head / base filters, pagination), create (the head
  branch must exist in the bare repository, and GitHub's 422s: no such branch, no commits between,
  a PR already open for that head), edit (title, body, state, base); file contents and git refs
  read from the bare repository; check runs (create, update, get, list for a commit), issue
  comments (list with pagination, create, get, edit, delete), reactions, collaborator permission.
  This is also the agent's fake (tests/agent): it opens and updates PRs through PyGithub too.
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

PREFIX = "/api/v3"
SECONDARY_RATE_LIMIT = ("You have exceeded a secondary rate limit. Please wait a few minutes "
                        "before you try again.")
CONCLUSIONS = {"action_required", "cancelled", "failure", "neutral", "success", "skipped",
               "stale", "timed_out"}
REACTIONS = {"+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"}


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
class FakeRepo:
    full_name: str
    git_dir: str  # a bare repository on disk; also the clone URL
    installation_id: int
    id: int = 0
    default_branch: str = "main"
    private: bool = False
    clone_url: str | None = None  # what the API says; default: git_dir


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
    pulls: dict[tuple[str, int], FakePull] = field(default_factory=dict)
    check_runs: dict[int, dict] = field(default_factory=dict)
    comments: dict[int, dict] = field(default_factory=dict)
    reactions: list[dict] = field(default_factory=list)
    permissions: dict[tuple[str, str], str] = field(default_factory=dict)
    tokens: dict[str, tuple[int, dt.datetime]] = field(default_factory=dict)
    log: list[tuple[str, str, int]] = field(default_factory=list)  # (method, path, status)
    faults: list[Fault] = field(default_factory=list)
    holds: list[tuple[str, re.Pattern, float, str]] = field(default_factory=list)
    held: list[tuple[str, str]] = field(default_factory=list)  # requests being held now


class FakeGitHub:
    def __init__(self, app_id: int = 1, public_key: Any = None, slug: str = "atrex-test",
                 token_ttl: dt.timedelta = dt.timedelta(hours=1)):
        self.app_id = app_id
        self.public_key = public_key
        self.slug = slug
        self.token_ttl = token_ttl
        self.state = FakeState()
        self.lock = threading.RLock()
        self._ids = itertools.count(1001)
        self.app = self._build()
        self._server = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FakeGitHub:
        self._server = make_server("127.0.0.1", 0, self.app, threaded=True)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    @property
    def api_url(self) -> str:
        return self.root + PREFIX

    @property
    def bot_login(self) -> str:
        return f"{self.slug}[bot]"

    # --- arranging state ---------------------------------------------------------------------

    def next_id(self) -> int:
        return next(self._ids)

    def add_repo(self, full_name: str, git_dir: str, installation_id: int = 1) -> FakeRepo:
        with self.lock:
            repo = FakeRepo(full_name, git_dir, installation_id, id=self.next_id())
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
        token = "ghs_" + secrets.token_hex(18)
        with self.lock:
            self.state.tokens[token] = (installation_id, dt.datetime.now(dt.UTC) + self.token_ttl)
        return token

    def set_permission(self, repo: str, login: str, permission: str) -> None:
        with self.lock:
            self.state.permissions[(repo, login)] = permission

    def add_comment(self, repo: str, number: int, login: str, body: str,
                    user_type: str = "User") -> dict:
        with self.lock:
            return self._new_comment(repo, number, {"login": login, "type": user_type}, body,
                                     None)

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

    # --- shapes ------------------------------------------------------------------------------

    def _user(self, login: str, user_type: str = "User") -> dict:
        base = f"{self.api_url}/users/{login}"
        return {"login": login, "id": abs(hash(login)) % 10**8, "node_id": f"U_{login}",
                "type": user_type, "site_admin": False, "url": base,
                "html_url": f"{self.root}/{login}", "avatar_url": f"{self.root}/avatars/{login}"}

    def _app_json(self) -> dict:
        return {"id": self.app_id, "slug": self.slug, "node_id": "A_1", "name": "atrex (test)",
                "owner": self._user("atrex-org", "Organization"),
                "html_url": f"{self.root}/apps/{self.slug}", "permissions": {
                    "checks": "write", "pull_requests": "write", "issues": "write",
                    "contents": "read", "metadata": "read"},
                "events": ["pull_request", "issue_comment", "check_run", "installation",
                           "installation_repositories"],
                "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"}

    def _repo_json(self, repo: FakeRepo) -> dict:
        owner, name = repo.full_name.split("/")
        url = f"{self.api_url}/repos/{repo.full_name}"
        return {"id": repo.id, "node_id": f"R_{repo.id}", "name": name,
                "full_name": repo.full_name, "private": repo.private,
                "owner": self._user(owner, "Organization"), "url": url,
                "html_url": f"{self.root}/{repo.full_name}",
                "clone_url": repo.clone_url or repo.git_dir,
                "git_url": repo.git_dir, "default_branch": repo.default_branch, "fork": False,
                "pulls_url": url + "/pulls{/number}", "issues_url": url + "/issues{/number}"}

    def _pull_json(self, pull: FakePull) -> dict:
        url = f"{self.api_url}/repos/{pull.repo}/pulls/{pull.number}"
        issue = f"{self.api_url}/repos/{pull.repo}/issues/{pull.number}"

        def side(repo_name: str, ref: str) -> dict:
            repo = self.state.repos[repo_name]
            return {"label": f"{repo_name.split('/')[0]}:{ref}", "ref": ref,
                    "sha": self.branch_sha(repo_name, ref) or "0" * 40,
                    "user": self._user(repo_name.split("/")[0]), "repo": self._repo_json(repo)}

        return {"url": url, "id": pull.number * 7919, "node_id": f"PR_{pull.number}",
                "number": pull.number, "state": pull.state, "draft": pull.draft,
                "locked": False, "title": pull.title, "body": pull.body,
                "user": self._user(pull.author, pull.author_type),
                "html_url": f"{self.root}/{pull.repo}/pull/{pull.number}", "issue_url": issue,
                "comments_url": issue + "/comments", "commits_url": url + "/commits",
                "merged": False, "merged_at": None, "mergeable": True,
                "maintainer_can_modify": pull.maintainer_can_modify,
                "head": side(pull.head_repo, pull.head_ref),
                "base": side(pull.repo, pull.base_ref),
                "created_at": pull.created_at, "updated_at": _now(),
                "closed_at": None if pull.state == "open" else _now()}

    def _public_run(self, run: dict) -> dict:
        return {k: v for k, v in run.items() if not k.startswith("_")}

    def _public_comment(self, comment: dict) -> dict:
        return {k: v for k, v in comment.items() if not k.startswith("_")}

    def _new_comment(self, repo: str, number: int, user: dict, body: str,
                     via_app: dict | None) -> dict:
        comment_id = self.next_id()
        url = f"{self.api_url}/repos/{repo}/issues/comments/{comment_id}"
        comment = {
            "id": comment_id, "node_id": f"IC_{comment_id}", "url": url,
            "html_url": f"{self.root}/{repo}/pull/{number}#issuecomment-{comment_id}",
            "issue_url": f"{self.api_url}/repos/{repo}/issues/{number}", "body": body,
            "user": self._user(user["login"], user["type"]), "created_at": _now(),
            "updated_at": _now(), "author_association": "NONE",
            "performed_via_github_app": via_app, "reactions": {"url": url + "/reactions"},
            "_repo": repo, "_number": number, "_edits": 0}
        self.state.comments[comment_id] = comment
        return comment

    # --- the Flask app -----------------------------------------------------------------------

    def _build(self) -> Flask:
        app = Flask("github-fake")
        fake = self

        @app.before_request
        def faults() -> Response | None:
            fault = fake._match_fault()
            if fault is not None and not fault.apply:
                return fake._fault_response(fault)
            request.environ["fake.fault"] = fault
            return None

        @app.after_request
        def log_and_apply_fault(response: Response) -> Response:
            fault = request.environ.get("fake.fault")
            if fault is not None:
                response = fake._fault_response(fault)
            with fake.lock:
                fake.state.log.append((request.method, request.path, response.status_code))
            fake._maybe_hold()
            return response

        for rule, view, methods in self._routes():
            app.add_url_rule(PREFIX + rule, view.__name__, view, methods=methods)
        self.oauth = FakeOAuth(self)
        self.oauth.install(app)
        return app

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
        return [
            ("/app", self.get_app, ["GET"]),
            ("/app/installations/<int:iid>/access_tokens", self.create_token, ["POST"]),
            ("/repos/<owner>/<name>", self.get_repo, ["GET"]),
            ("/repos/<owner>/<name>/pulls", self.pulls, ["GET", "POST"]),
            ("/repos/<owner>/<name>/pulls/<int:number>", self.get_pull, ["GET", "PATCH"]),
            ("/repos/<owner>/<name>/contents/<path:path>", self.contents, ["GET"]),
            ("/repos/<owner>/<name>/git/ref/<path:ref>", self.git_ref, ["GET"]),
            ("/repos/<owner>/<name>/check-runs", self.create_check_run, ["POST"]),
            ("/repos/<owner>/<name>/check-runs/<int:run_id>", self.check_run, ["GET", "PATCH"]),
            ("/repos/<owner>/<name>/commits/<ref>/check-runs", self.list_check_runs, ["GET"]),
            ("/repos/<owner>/<name>/issues/<int:number>", self.get_issue, ["GET"]),
            ("/repos/<owner>/<name>/issues/<int:number>/comments", self.issue_comments,
             ["GET", "POST"]),
            ("/repos/<owner>/<name>/issues/comments/<int:comment_id>", self.comment,
             ["GET", "PATCH", "DELETE"]),
            ("/repos/<owner>/<name>/issues/comments/<int:comment_id>/reactions",
             self.create_reaction, ["POST"]),
            ("/repos/<owner>/<name>/collaborators/<user>/permission", self.permission, ["GET"]),
        ]

    # --- auth --------------------------------------------------------------------------------

    def _error(self, status: int, message: str) -> tuple[Response, int]:
        return jsonify(message=message, documentation_url="https://docs.github.com/rest"), status

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

    def _check_token(self, owner: str, name: str) -> tuple[Response, int] | None:
        header = request.headers.get("Authorization", "")
        token = header.split(" ", 1)[1] if " " in header else ""
        with self.lock:
            grant = self.state.tokens.get(token)
            repo = self.state.repos.get(f"{owner}/{name}")
        if grant is None or grant[1] <= dt.datetime.now(dt.UTC):
            return self._error(401, "Bad credentials")
        if repo is None or repo.installation_id != grant[0]:
            return self._error(404, "Not Found")
        return None

    # --- endpoints ---------------------------------------------------------------------------

    def get_app(self):
        return self._check_jwt() or jsonify(self._app_json())

    def create_token(self, iid: int):
        denied = self._check_jwt()
        if denied:
            return denied
        token = "ghs_" + secrets.token_hex(18)
        expires = dt.datetime.now(dt.UTC).replace(microsecond=0) + self.token_ttl
        with self.lock:
            self.state.tokens[token] = (iid, expires)
        return jsonify(token=token, expires_at=expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
                       permissions={"checks": "write", "pull_requests": "write",
                                    "issues": "write", "contents": "write"},
                       repository_selection="selected"), 201

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
        return jsonify(message="Validation Failed", errors=[{"resource": "PullRequest", **error}],
                       documentation_url="https://docs.github.com/rest"), 422

    def _edit_pull(self, pull: FakePull, body: dict) -> dict | None:
        if "base" in body and self.branch_sha(pull.repo, body["base"]) is None:
            return {"field": "base", "code": "invalid"}
        if body.get("state") not in (None, "open", "closed"):
            return {"field": "state", "code": "invalid"}
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
        if not body.get("title"):
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
        url = f"{self.api_url}/repos/{repo}/contents/{path}?ref={ref}"
        encoded = base64.encodebytes(raw).decode()  # GitHub wraps the base64 at 60 columns
        return jsonify({"type": "file", "encoding": "base64", "size": len(raw),
                        "name": path.rsplit("/", 1)[-1], "path": path, "content": encoded,
                        "sha": blob, "url": url,
                        "git_url": f"{self.api_url}/repos/{repo}/git/blobs/{blob}",
                        "html_url": f"{self.root}/{repo}/blob/{ref}/{path}",
                        "download_url": f"{self.root}/raw/{repo}/{ref}/{path}",
                        "_links": {"self": url, "git": f"{self.api_url}/repos/{repo}/git/blobs/"
                                   f"{blob}", "html": f"{self.root}/{repo}/blob/{ref}/{path}"}})

    def git_ref(self, owner: str, name: str, ref: str):
        denied = self._check_token(owner, name)
        if denied:
            return denied
        repo = f"{owner}/{name}"
        sha = self._git(repo, "rev-parse", "--verify", "--quiet", f"refs/{ref}^{{commit}}")
        if sha is None:
            return self._error(404, "Not Found")
        return jsonify({"ref": f"refs/{ref}", "node_id": f"REF_{sha[:8]}",
                        "url": f"{self.api_url}/repos/{repo}/git/refs/{ref}",
                        "object": {"type": "commit", "sha": sha,
                                   "url": f"{self.api_url}/repos/{repo}/git/commits/{sha}"}})

    def get_issue(self, owner: str, name: str, number: int):
        denied = self._check_token(owner, name)
        if denied:
            return denied
        with self.lock:
            pull = self.state.pulls.get((f"{owner}/{name}", number))
            if pull is None:
                return self._error(404, "Not Found")
            data = self._pull_json(pull)
        return jsonify({"url": data["issue_url"], "id": data["id"], "number": number,
                        "title": data["title"], "state": data["state"], "user": data["user"],
                        "comments_url": data["comments_url"], "html_url": data["html_url"],
                        "pull_request": {"url": data["url"], "html_url": data["html_url"]}})

    def create_check_run(self, owner: str, name: str):
        denied = self._check_token(owner, name)
        if denied:
            return denied
        body = request.get_json()
        if not body.get("name") or not re.fullmatch(r"[0-9a-f]{40}", body.get("head_sha", "")):
            return self._error(422, "Invalid request: name and head_sha are required")
        run_id = self.next_id()
        repo = f"{owner}/{name}"
        run = {"id": run_id, "node_id": f"CR_{run_id}", "head_sha": body["head_sha"],
               "external_id": body.get("external_id", ""), "name": body["name"],
               "url": f"{self.api_url}/repos/{repo}/check-runs/{run_id}",
               "html_url": f"{self.root}/{repo}/runs/{run_id}", "details_url": None,
               "status": body.get("status", "queued"), "conclusion": body.get("conclusion"),
               "started_at": _now(), "completed_at": None,
               "output": {"title": None, "summary": None, "text": None,
                          "annotations_count": 0, "annotations_url": ""},
               "check_suite": {"id": 1}, "app": self._app_json(), "pull_requests": [],
               "_repo": repo, "_history": []}
        error = self._apply_run_update(run, body)
        if error:
            return self._error(422, error)
        with self.lock:
            self.state.check_runs[run_id] = run
        return jsonify(self._public_run(run)), 201

    def _apply_run_update(self, run: dict, body: dict) -> str | None:
        status = body.get("status", run["status"])
        conclusion = body.get("conclusion", run["conclusion"] if status == "completed" else None)
        if status not in ("queued", "in_progress", "completed"):
            return f"Invalid status {status}"
        if conclusion is not None:
            if conclusion not in CONCLUSIONS:
                return f"Invalid conclusion {conclusion}"
            status = "completed"
        if status == "completed" and conclusion is None:
            return "Missing conclusion: completed check runs need a conclusion"
        output = body.get("output")
        if output is not None:
            for key in ("summary", "text"):
                if output.get(key) is not None and len(output[key]) > 65535:
                    return f"output.{key} is too long (maximum is 65535 characters)"
            if not output.get("title") or not output.get("summary"):
                return "output needs title and summary"
            run["output"].update({k: output.get(k) for k in ("title", "summary", "text")})
        run["status"], run["conclusion"] = status, conclusion
        if status == "completed":
            run["completed_at"] = body.get("completed_at") or _now()
        run["_history"].append((status, conclusion))
        return None

    def check_run(self, owner: str, name: str, run_id: int):
        denied = self._check_token(owner, name)
        if denied:
            return denied
        with self.lock:
            run = self.state.check_runs.get(run_id)
            if run is None or run["_repo"] != f"{owner}/{name}":
                return self._error(404, "Not Found")
            if request.method == "PATCH":
                error = self._apply_run_update(run, request.get_json())
                if error:
                    return self._error(422, error)
            return jsonify(self._public_run(run))

    def list_check_runs(self, owner: str, name: str, ref: str):
        denied = self._check_token(owner, name)
        if denied:
            return denied
        wanted = request.args.get("check_name")
        runs = [self._public_run(r) for r in self.runs_for(f"{owner}/{name}", ref)
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
        body = (request.get_json() or {}).get("body")
        if not isinstance(body, str) or not body:
            return self._error(422, "Validation Failed: body is required")
        if len(body) > 65536:
            return self._error(422, "Validation Failed: body is too long (maximum is 65536)")
        with self.lock:
            comment = self._new_comment(repo, number, {"login": self.bot_login, "type": "Bot"},
                                        body, {"id": self.app_id, "slug": self.slug})
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
                comment["body"] = request.get_json()["body"]
                comment["updated_at"] = _now()
                comment["_edits"] += 1
            return jsonify(self._public_comment(comment))

    def create_reaction(self, owner: str, name: str, comment_id: int):
        denied = self._check_token(owner, name)
        if denied:
            return denied
        content = (request.get_json() or {}).get("content")
        if content not in REACTIONS:
            return self._error(422, f"Validation Failed: content {content!r}")
        with self.lock:
            if comment_id not in self.state.comments:
                return self._error(404, "Not Found")
            for reaction in self.state.reactions:
                if reaction["_comment"] == comment_id and reaction["content"] == content:
                    return jsonify({k: v for k, v in reaction.items() if k[0] != "_"}), 200
            reaction = {"id": self.next_id(), "node_id": "RE", "content": content,
                        "user": self._user(self.bot_login, "Bot"), "created_at": _now(),
                        "_comment": comment_id}
            self.state.reactions.append(reaction)
            return jsonify({k: v for k, v in reaction.items() if k[0] != "_"}), 201

    def permission(self, owner: str, name: str, user: str):
        denied = self._check_token(owner, name)
        if denied:
            return denied
        level = self.state.permissions.get((f"{owner}/{name}", user))
        if level is None:
            return self._error(404, f"{user} is not a user")
        role = {"admin": "admin", "maintain": "maintain", "write": "write",
                "triage": "triage", "read": "read"}.get(level, "none")
        return jsonify(permission={"maintain": "write", "triage": "read"}.get(level, level),
                       role_name=role, user=self._user(user))



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
        app.add_url_rule(PREFIX + "/repos/<owner>/<name>/commits/<sha>/pulls", "commit_pulls",
                         self.commit_pulls, methods=["GET"])
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
        return jsonify(self.fake._user(login))

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

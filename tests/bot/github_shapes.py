"""The JSON bodies the GitHub fake answers with, complete per GitHub's OpenAPI description.

Every builder fills each field the description marks required (schemas `simple-user`,
`full-repository`, `pull-request`, `issue`, `issue-comment`, `reaction`, `check-run`,
`integration`, `content-file`, `git-ref`, `installation-token`,
`repository-collaborator-permission`, `basic-error`, `validation-error`), with URLs that point back
at the fake. tests/bot/test_openapi.py checks them against the description.
"""

from __future__ import annotations

import datetime as dt
import zlib
from dataclasses import dataclass
from typing import Any

DOCS = "https://docs.github.com/rest"
CREATED = "2026-01-01T00:00:00Z"


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def stable_id(text: str) -> int:
    """A positive id that is the same in every process (hash() is salted per process)."""
    return zlib.crc32(text.encode()) % 10**8 + 1


@dataclass(frozen=True)
class Urls:
    root: str  # http://127.0.0.1:PORT (the web pages)
    api: str  # root + /api/v3 (the REST API)
    git: str  # https://127.0.0.1:PORT2 (the smart-HTTP git server)


def user(urls: Urls, login: str, user_type: str = "User") -> dict:
    base = f"{urls.api}/users/{login}"
    return {"login": login, "id": stable_id(login), "node_id": f"U_{login}",
            "avatar_url": f"{urls.root}/avatars/{login}", "gravatar_id": "", "url": base,
            "html_url": f"{urls.root}/{login}", "followers_url": base + "/followers",
            "following_url": base + "/following{/other_user}",
            "gists_url": base + "/gists{/gist_id}", "starred_url": base + "/starred{/owner}{/repo}",
            "subscriptions_url": base + "/subscriptions", "organizations_url": base + "/orgs",
            "repos_url": base + "/repos", "events_url": base + "/events{/privacy}",
            "received_events_url": base + "/received_events", "type": user_type,
            "site_admin": False}


def public_user(urls: Urls, login: str) -> dict:
    """`GET /user` with a user-to-server token: GitHub's `public-user`."""
    return {**user(urls, login), "user_view_type": "public", "name": None, "company": None,
            "blog": "", "location": None, "email": None, "hireable": None, "bio": None,
            "public_repos": 0, "public_gists": 0, "followers": 0, "following": 0,
            "created_at": CREATED, "updated_at": CREATED}


_REPO_TEMPLATES = {
    "archive_url": "/{archive_format}{/ref}", "assignees_url": "/assignees{/user}",
    "blobs_url": "/git/blobs{/sha}", "branches_url": "/branches{/branch}",
    "collaborators_url": "/collaborators{/collaborator}", "comments_url": "/comments{/number}",
    "commits_url": "/commits{/sha}", "compare_url": "/compare/{base}...{head}",
    "contents_url": "/contents/{+path}", "contributors_url": "/contributors",
    "deployments_url": "/deployments", "downloads_url": "/downloads", "events_url": "/events",
    "forks_url": "/forks", "git_commits_url": "/git/commits{/sha}",
    "git_refs_url": "/git/refs{/sha}", "git_tags_url": "/git/tags{/sha}", "hooks_url": "/hooks",
    "issue_comment_url": "/issues/comments{/number}", "issue_events_url": "/issues/events{/number}",
    "issues_url": "/issues{/number}", "keys_url": "/keys{/key_id}", "labels_url": "/labels{/name}",
    "languages_url": "/languages", "merges_url": "/merges",
    "milestones_url": "/milestones{/number}",
    "notifications_url": "/notifications{?since,all,participating}",
    "pulls_url": "/pulls{/number}", "releases_url": "/releases{/id}",
    "stargazers_url": "/stargazers", "statuses_url": "/statuses/{sha}",
    "subscribers_url": "/subscribers", "subscription_url": "/subscription", "tags_url": "/tags",
    "teams_url": "/teams", "trees_url": "/git/trees{/sha}",
}


def repository(urls: Urls, full_name: str, repo_id: int, private: bool, default_branch: str,
               clone_url: str, fork: bool = False) -> dict:
    """A `full-repository` (also a valid `repository`, as PR heads and bases carry)."""
    owner, name = full_name.split("/")
    url = f"{urls.api}/repos/{full_name}"
    data = {key: url + tail for key, tail in _REPO_TEMPLATES.items()}
    data.update({
        "id": repo_id, "node_id": f"R_{repo_id}", "name": name, "full_name": full_name,
        "private": private, "owner": user(urls, owner, "Organization"), "url": url,
        "html_url": f"{urls.root}/{full_name}", "description": None, "fork": fork,
        "clone_url": clone_url, "git_url": clone_url.replace("https://", "git://"),
        "ssh_url": f"git@127.0.0.1:{full_name}.git", "svn_url": f"{urls.root}/{full_name}",
        "mirror_url": None, "homepage": None, "language": "Python", "forks": 0,
        "forks_count": 0, "stargazers_count": 0, "watchers_count": 0, "watchers": 0,
        "size": 1, "default_branch": default_branch, "open_issues": 0, "open_issues_count": 0,
        "is_template": False, "topics": [], "has_issues": True, "has_projects": False,
        "has_wiki": False, "has_pages": False, "has_downloads": False,
        "has_discussions": False, "archived": False, "disabled": False,
        "visibility": "private" if private else "public", "license": None,
        "pushed_at": CREATED, "created_at": CREATED, "updated_at": CREATED,
        "network_count": 0, "subscribers_count": 0,
    })
    return data


@dataclass(frozen=True)
class PullSide:
    full_name: str
    ref: str
    sha: str
    repo: dict  # repository(...)


def pull_request(urls: Urls, repo: str, number: int, *, state: str, draft: bool, title: str,
                 body: str, author: dict, head: PullSide, base: PullSide,
                 maintainer_can_modify: bool, created_at: str) -> dict:
    url = f"{urls.api}/repos/{repo}/pulls/{number}"
    issue = f"{urls.api}/repos/{repo}/issues/{number}"
    html = f"{urls.root}/{repo}/pull/{number}"

    def side(s: PullSide) -> dict:
        owner = s.full_name.split("/")[0]
        return {"label": f"{owner}:{s.ref}", "ref": s.ref, "sha": s.sha,
                "user": user(urls, owner, "Organization"), "repo": s.repo}

    links = {"self": url, "html": html, "issue": issue, "comments": issue + "/comments",
             "review_comments": url + "/comments",
             "review_comment": f"{urls.api}/repos/{repo}/pulls/comments{{/number}}",
             "commits": url + "/commits",
             "statuses": f"{urls.api}/repos/{repo}/statuses/{head.sha}"}
    closed = None if state == "open" else now()
    return {
        "url": url, "id": number * 7919, "node_id": f"PR_{number}", "number": number,
        "html_url": html, "diff_url": html + ".diff", "patch_url": html + ".patch",
        "issue_url": issue, "commits_url": url + "/commits",
        "review_comments_url": url + "/comments", "review_comment_url": links["review_comment"],
        "comments_url": issue + "/comments", "statuses_url": links["statuses"],
        "state": state, "locked": False, "title": title, "body": body or None, "user": author,
        "labels": [], "milestone": None, "assignee": None, "assignees": [],
        "requested_reviewers": [], "requested_teams": [], "draft": draft,
        "created_at": created_at, "updated_at": now(), "closed_at": closed,
        "merged_at": None, "merge_commit_sha": None, "head": side(head), "base": side(base),
        "_links": {k: {"href": v} for k, v in links.items()},
        "author_association": "CONTRIBUTOR", "auto_merge": None, "merged": False,
        "mergeable": True, "rebaseable": True, "mergeable_state": "clean", "merged_by": None,
        "comments": 0, "review_comments": 0, "maintainer_can_modify": maintainer_can_modify,
        "commits": 1, "additions": 1, "deletions": 0, "changed_files": 1,
    }


def issue_of_pull(urls: Urls, pull: dict, repo: str) -> dict:
    """`GET /repos/{o}/{r}/issues/{n}` of a pull request: the PR's issue side."""
    issue = pull["issue_url"]
    return {"url": issue, "id": pull["id"], "node_id": f"I_{pull['number']}",
            "number": pull["number"], "title": pull["title"], "body": pull["body"],
            "state": pull["state"], "locked": False, "user": pull["user"], "labels": [],
            "assignee": None, "assignees": [], "milestone": None, "comments": 0,
            "comments_url": issue + "/comments", "events_url": issue + "/events",
            "labels_url": issue + "/labels{/name}", "html_url": pull["html_url"],
            "repository_url": f"{urls.api}/repos/{repo}",
            "created_at": pull["created_at"], "updated_at": pull["updated_at"],
            "closed_at": pull["closed_at"], "author_association": "CONTRIBUTOR",
            "pull_request": {"url": pull["url"], "html_url": pull["html_url"],
                             "diff_url": pull["diff_url"], "patch_url": pull["patch_url"],
                             "merged_at": None}}


def issue_comment(urls: Urls, repo: str, number: int, comment_id: int, body: str, author: dict,
                  via_app: dict | None, created_at: str, updated_at: str) -> dict:
    url = f"{urls.api}/repos/{repo}/issues/comments/{comment_id}"
    return {"id": comment_id, "node_id": f"IC_{comment_id}", "url": url,
            "html_url": f"{urls.root}/{repo}/pull/{number}#issuecomment-{comment_id}",
            "issue_url": f"{urls.api}/repos/{repo}/issues/{number}", "body": body,
            "user": author, "created_at": created_at, "updated_at": updated_at,
            "author_association": "NONE", "performed_via_github_app": via_app}


def reaction(reaction_id: int, content: str, author: dict, created_at: str) -> dict:
    return {"id": reaction_id, "node_id": f"RE_{reaction_id}", "content": content,
            "user": author, "created_at": created_at}


def app(urls: Urls, app_id: int, slug: str, permissions: dict[str, str],
        events: list[str]) -> dict:
    return {"id": app_id, "slug": slug, "node_id": f"A_{app_id}", "name": f"{slug} (test)",
            "description": "atrex under test", "owner": user(urls, "atrex-org", "Organization"),
            "external_url": f"{urls.root}/atrex", "html_url": f"{urls.root}/apps/{slug}",
            "permissions": permissions, "events": events,
            "created_at": CREATED, "updated_at": CREATED}


def check_run(urls: Urls, repo: str, run: dict, app_json: dict) -> dict:
    """A stored check run (the fake's record) as GitHub shows it."""
    url = f"{urls.api}/repos/{repo}/check-runs/{run['id']}"
    output = run["output"]
    return {"id": run["id"], "node_id": f"CR_{run['id']}", "head_sha": run["head_sha"],
            "external_id": run["external_id"], "name": run["name"], "url": url,
            "html_url": run["html_url"],
            "details_url": run["details_url"], "status": run["status"],
            "conclusion": run["conclusion"], "started_at": run["started_at"],
            "completed_at": run["completed_at"],
            "output": {"title": output["title"], "summary": output["summary"],
                       "text": output["text"], "annotations_count": len(run["annotations"]),
                       "annotations_url": url + "/annotations"},
            "check_suite": {"id": run["check_suite"]}, "app": app_json, "pull_requests": []}


def content_file(urls: Urls, repo: str, path: str, ref: str, blob: str, raw: bytes,
                 encoded: str) -> dict:
    url = f"{urls.api}/repos/{repo}/contents/{path}?ref={ref}"
    git_url = f"{urls.api}/repos/{repo}/git/blobs/{blob}"
    html = f"{urls.root}/{repo}/blob/{ref}/{path}"
    return {"type": "file", "encoding": "base64", "size": len(raw),
            "name": path.rsplit("/", 1)[-1], "path": path, "content": encoded, "sha": blob,
            "url": url, "git_url": git_url, "html_url": html,
            "download_url": f"{urls.root}/raw/{repo}/{ref}/{path}",
            "_links": {"self": url, "git": git_url, "html": html}}


def git_ref(urls: Urls, repo: str, ref: str, sha: str) -> dict:
    return {"ref": f"refs/{ref}", "node_id": f"REF_{sha[:8]}",
            "url": f"{urls.api}/repos/{repo}/git/refs/{ref}",
            "object": {"type": "commit", "sha": sha,
                       "url": f"{urls.api}/repos/{repo}/git/commits/{sha}"}}


def installation_token(token: str, expires_at: str, permissions: dict[str, str],
                       repositories: list[str] | None) -> dict:
    return {"token": token, "expires_at": expires_at, "permissions": permissions,
            "repository_selection": "selected" if repositories is not None else "all"}


def collaborator_permission(urls: Urls, login: str, level: str) -> dict:
    role = level if level in ("admin", "maintain", "write", "triage", "read") else "none"
    permission = {"maintain": "write", "triage": "read"}.get(level, level)
    rank = ("none", "read", "triage", "write", "maintain", "admin").index(role)
    flags = {"pull": rank >= 1, "triage": rank >= 2, "push": rank >= 3, "maintain": rank >= 4,
             "admin": rank >= 5}
    collaborator = {**user(urls, login), "role_name": role, "permissions": flags}
    return {"permission": permission, "role_name": role, "user": collaborator}


def error(message: str, status: int, **extra: Any) -> dict:
    """GitHub's `basic-error` body."""
    return {"message": message, "documentation_url": DOCS, "status": str(status), **extra}


def validation_error(message: str, errors: list[dict]) -> dict:
    """GitHub's `validation-error` body (422)."""
    return {"message": message, "documentation_url": DOCS, "errors": errors}

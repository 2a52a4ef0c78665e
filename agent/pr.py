"""Publishing a winning kernel: a commit on ``atrex/optimize/<op>`` pushed with GitPython, and one
open PR per operator, opened or updated through a :class:`~agent.github.GitHubClient`.

The commit is made in a temporary ``git worktree`` so the caller's checkout is never touched. If
the operator already has an open atrex PR (found by branch name, else by the marker in its body),
the new kernel is committed on top of that PR's branch and the PR's title, body and base are
updated; otherwise a branch is created from the target base branch and a PR is opened. A scheduled
run targets the default branch, a ``/atrex optimize`` run the triggering PR's head branch.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .github import GitHubClient

BRANCH_PREFIX = "atrex/optimize/"
AUTHOR = ("atrex", "atrex@users.noreply.github.com")


class PublishError(Exception):
    pass


def branch_for(op: str) -> str:
    return BRANCH_PREFIX + op


def marker_for(op: str) -> str:
    return f"<!-- atrex:optimize op={op} -->"


@dataclass
class PublishRequest:
    checkout: Path  # any directory inside the git work tree
    repo_full_name: str  # owner/name on GitHub
    op: str
    kernel_path: Path  # the operator's kernel file (absolute, inside the checkout)
    kernel_source: str
    base_branch: str
    title: str
    body: str  # must contain marker_for(op)
    commit_message: str
    remote: str = "origin"
    # environment for git's fetch and push (e.g. the bot's installation-token configuration);
    # called when needed, so a token minted now is still fresh after a long optimization run
    git_env: Callable[[], dict[str, str]] | None = None


@dataclass
class PublishOutcome:
    action: str  # "opened" or "updated"
    number: int
    url: str
    branch: str
    commit: str | None  # None when the branch already had this kernel
    title: str | None = None
    base: str | None = None


def publish(request: PublishRequest, github: GitHubClient) -> PublishOutcome:
    marker = marker_for(request.op)
    if marker not in request.body:
        raise PublishError("the PR body must carry the operator's marker")
    existing = github.find_open_pull(request.repo_full_name, branch_for(request.op), marker)
    branch = existing.head if existing else branch_for(request.op)
    commit = push_kernel(request, branch)
    if existing:
        pull = github.update_pull(request.repo_full_name, existing.number, title=request.title,
                                  body=request.body, base=request.base_branch)
        return PublishOutcome("updated", pull.number, pull.url, branch, commit, request.title,
                              pull.base)
    pull = github.create_pull(request.repo_full_name, title=request.title, body=request.body,
                              head=branch, base=request.base_branch)
    return PublishOutcome("opened", pull.number, pull.url, branch, commit, request.title,
                          pull.base)


@contextlib.contextmanager
def _git_env(repo, request: PublishRequest) -> Iterator[None]:
    """Run this repo's git commands with the request's extra environment (if any)."""
    env = request.git_env() if request.git_env else {}
    with repo.git.custom_environment(**env):
        yield


def push_kernel(request: PublishRequest, branch: str) -> str | None:
    """Commit the kernel on ``branch`` (continuing it if the remote has it) and push it."""
    import git

    repo = git.Repo(request.checkout, search_parent_directories=True)
    root = Path(repo.working_tree_dir).resolve()
    relpath = Path(request.kernel_path).resolve().relative_to(root).as_posix()
    remote = repo.remote(request.remote)
    with _git_env(repo, request):
        remote.fetch()
    heads = {ref.remote_head: ref for ref in remote.refs}
    start = heads.get(branch) or heads.get(request.base_branch)
    if start is None:
        raise PublishError(f"remote {request.remote!r} has no branch {request.base_branch!r}")
    with tempfile.TemporaryDirectory(prefix="atrex-publish-") as scratch:
        tree = Path(scratch) / "tree"
        repo.git.worktree("add", "--detach", str(tree), start.commit.hexsha)
        try:
            return _commit_and_push(git.Repo(tree), relpath, request, branch)
        finally:
            repo.git.worktree("remove", "--force", str(tree))


def _commit_and_push(tree, relpath: str, request: PublishRequest, branch: str) -> str | None:
    import git

    target = Path(tree.working_tree_dir) / relpath
    if target.is_file() and target.read_text() == request.kernel_source:
        if tree.head.commit.hexsha != _remote_sha(tree, request.remote, branch):
            with _git_env(tree, request):
                tree.git.push(request.remote, f"HEAD:refs/heads/{branch}")
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(request.kernel_source)
    tree.index.add([relpath])
    actor = git.Actor(*AUTHOR)
    commit = tree.index.commit(request.commit_message, author=actor, committer=actor)
    with _git_env(tree, request):
        tree.git.push(request.remote, f"{commit.hexsha}:refs/heads/{branch}")
    return commit.hexsha


def _remote_sha(tree, remote: str, branch: str) -> str | None:
    for ref in tree.remote(remote).refs:
        if ref.remote_head == branch:
            return ref.commit.hexsha
    return None

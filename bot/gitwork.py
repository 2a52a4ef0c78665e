"""Getting a pull request's code onto the worker with GitPython: head, merge base, changed files.

One bare cache repository per GitHub repository (under DATA_DIR/git) receives the PR's head branch
(from the head repository, which may be a fork) and the base branch. The head commit and the merge
base are then exported with `git archive` into plain directories (no `.git`, no remotes, no
credentials) for the runner. Tokens reach git through environment-provided config (never argv or a
config file), so they do not show up in `ps` or in the cache.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import io
import re
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import git

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


class CheckoutError(Exception):
    """The commit to evaluate cannot be checked out."""


class FetchError(CheckoutError):
    """git fetch failed (network, GitHub, permissions): worth trying again later."""


class CommitGone(CheckoutError):
    """The commit is no longer reachable from the PR's branch (force-pushed away)."""


@dataclass(frozen=True)
class Checkout:
    head_sha: str
    base_sha: str  # the merge base
    head_dir: Path
    base_dir: Path
    changed: list[str]  # repository-relative paths changed between merge base and head


def auth_env(url: str, token: str | None) -> dict[str, str]:
    """Environment for a git command that authenticates to `url` with an installation token
    (as an http.extraHeader given through GIT_CONFIG_* variables: never argv, never a file)."""
    if not token or not url.startswith("https://"):
        return {}
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    return {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader",
            "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}", "GIT_TERMINAL_PROMPT": "0"}


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One fetch into a cache at a time (two GPU workers may serve the same repository)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            _clear_stale_git_locks(path)
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _clear_stale_git_locks(git_dir: Path) -> None:
    """Every use of a cache holds the lock above, so a git lock file found inside it (a ref's,
    packed-refs', shallow's) was left by a worker killed mid-fetch; git would refuse every
    later fetch of that ref until it is gone."""
    if git_dir.is_dir():
        for stale in git_dir.rglob("*.lock"):
            stale.unlink(missing_ok=True)


def cache_repo(data_dir: Path, full_name: str) -> git.Repo:
    """The bare repository that caches one GitHub repository's objects. It is created beside
    its place and renamed into it, so a worker killed while creating it (or two creating it at
    once) never leaves a half-made repository there; one found half-made is made again."""
    path = data_dir / "git" / (_SAFE.sub("_", full_name) + ".git")
    try:
        return git.Repo(path)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=path.name + ".", dir=path.parent))
    git.Repo.init(staging, bare=True)
    if path.exists():
        _set_aside(path)
    try:
        staging.rename(path)
    except OSError:  # another worker put a complete one there first
        shutil.rmtree(staging, ignore_errors=True)
    return git.Repo(path)


def _set_aside(path: Path) -> None:
    """Move a half-made cache out of the way (renaming is atomic; deleting in place is not)."""
    try:
        git.Repo(path)
        return  # completed by another worker meanwhile
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        pass
    aside = Path(tempfile.mkdtemp(prefix=path.name + ".broken.", dir=path.parent))
    try:
        path.rename(aside / "repo")
    except OSError:
        pass
    shutil.rmtree(aside, ignore_errors=True)


def fetch(repo: git.Repo, url: str, ref: str, dest: str, token: str | None) -> None:
    with repo.git.custom_environment(**auth_env(url, token)):
        repo.git.fetch("--no-tags", "--force", url, f"+refs/heads/{ref}:{dest}")


def has_commit(repo: git.Repo, sha: str) -> bool:
    try:
        repo.git.cat_file("-e", f"{sha}^{{commit}}")
    except git.GitCommandError:
        return False
    return True


def export(repo: git.Repo, sha: str, dest: Path) -> None:
    """Write the tree of `sha` into `dest` (replaced if present)."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    buffer = io.BytesIO()
    repo.archive(buffer, treeish=sha, format="tar")
    buffer.seek(0)
    with tarfile.open(fileobj=buffer) as tar:
        tar.extractall(dest, filter="data")


def checkout_pr(data_dir: Path, work_dir: Path, full_name: str, pr: int, head_sha: str,
                head_url: str | None, head_ref: str, base_url: str, base_ref: str,
                token: str | None) -> Checkout:
    """Fetch the PR's head and base branch, export head and merge base into work_dir."""
    repo = cache_repo(data_dir, full_name)
    with _locked(Path(repo.git_dir)):
        try:
            fetch(repo, base_url, base_ref, f"refs/atrex/pr/{pr}/base", token)
            if head_url is not None:
                fetch(repo, head_url, head_ref, f"refs/atrex/pr/{pr}/head", token)
        except git.GitCommandError as exc:
            raise FetchError(f"git fetch failed: {_stderr(exc)}") from None
        if not has_commit(repo, head_sha):
            raise CommitGone(f"commit {head_sha} is not on {head_ref} any more (force-pushed?)")
        bases = repo.merge_base(head_sha, f"refs/atrex/pr/{pr}/base")
        if not bases:
            raise CheckoutError(f"{head_sha[:12]} and {base_ref} have no common history")
        base_sha = bases[0].hexsha
        changed = repo.git.diff("--name-only", "--no-renames", "-z", base_sha, head_sha)
        export(repo, head_sha, work_dir / "head")
        export(repo, base_sha, work_dir / "base")
    return Checkout(head_sha=head_sha, base_sha=base_sha, head_dir=work_dir / "head",
                    base_dir=work_dir / "base",
                    changed=[p for p in changed.split("\0") if p])


def _stderr(exc: git.GitCommandError) -> str:
    text = (exc.stderr or str(exc)).strip()
    text = re.sub(r"Authorization: Basic \S+", "Authorization: ***", text)
    return text.splitlines()[-1][:300] if text else "unknown error"


def clone_for_agent(data_dir: Path, work_dir: Path, full_name: str, pr: int, head_sha: str,
                    head_url: str | None, head_ref: str, base_url: str, base_ref: str,
                    token: str | None) -> Path:
    """A git working clone at `head_sha` (branch atrex/base) whose origin is the head repository."""
    repo = cache_repo(data_dir, full_name)
    with _locked(Path(repo.git_dir)):
        try:
            fetch(repo, base_url, base_ref, f"refs/atrex/pr/{pr}/base", token)
            if head_url is not None:
                fetch(repo, head_url, head_ref, f"refs/atrex/pr/{pr}/head", token)
        except git.GitCommandError as exc:
            raise FetchError(f"git fetch failed: {_stderr(exc)}") from None
        if not has_commit(repo, head_sha):
            raise CommitGone(f"commit {head_sha} is not on {head_ref} any more")
        clone = _clone(repo, work_dir / "repo")
    return _check_out(clone, head_sha, head_url or base_url)


def clone_branch(data_dir: Path, work_dir: Path, full_name: str, url: str, branch: str,
                 token: str | None) -> tuple[Path, str]:
    """A git working clone of `branch`'s current tip (branch atrex/base), origin = `url`; returns
    the clone's path and the commit."""
    repo = cache_repo(data_dir, full_name)
    ref = f"refs/atrex/branch/{_SAFE.sub('_', branch)}"
    with _locked(Path(repo.git_dir)):
        try:
            fetch(repo, url, branch, ref, token)
        except git.GitCommandError as exc:
            raise FetchError(f"git fetch failed: {_stderr(exc)}") from None
        sha = repo.git.rev_parse(ref)
        clone = _clone(repo, work_dir / "repo")
    return _check_out(clone, sha, url), sha


def _clone(cache: git.Repo, dest: Path) -> git.Repo:
    if dest.exists():
        shutil.rmtree(dest)
    return cache.clone(str(dest), no_checkout=True)


def _check_out(clone: git.Repo, sha: str, origin_url: str) -> Path:
    clone.git.checkout("-B", "atrex/base", sha)
    clone.git.remote("set-url", "origin", origin_url)
    return Path(clone.working_tree_dir)


def pr_changes(data_dir: Path, full_name: str, pr: int, head_sha: str,
               base_dir: Path) -> list[str]:
    """The paths a PR changes (merge base -> `head_sha`, from the refs `clone_for_agent` fetched);
    the merge base's tree is exported into `base_dir`."""
    repo = cache_repo(data_dir, full_name)
    with _locked(Path(repo.git_dir)):
        bases = repo.merge_base(head_sha, f"refs/atrex/pr/{pr}/base")
        if not bases:
            raise CheckoutError(f"{head_sha[:12]} and the base branch have no common history")
        changed = repo.git.diff("--name-only", "--no-renames", "-z", bases[0].hexsha, head_sha)
        export(repo, bases[0].hexsha, base_dir)
    return [p for p in changed.split("\0") if p]


def export_branch_commit(data_dir: Path, work_dir: Path, full_name: str, url: str, branch: str,
                         sha: str, token: str | None) -> Path:
    """Fetch `branch` and export its commit `sha` (without `.git`) into work_dir/tree; raises
    CommitGone when `sha` is not on the branch any more (force-pushed away)."""
    repo = cache_repo(data_dir, full_name)
    ref = f"refs/atrex/branch/{_SAFE.sub('_', branch)}"
    with _locked(Path(repo.git_dir)):
        try:
            fetch(repo, url, branch, ref, token)
        except git.GitCommandError as exc:
            raise FetchError(f"git fetch failed: {_stderr(exc)}") from None
        if not has_commit(repo, sha) or not repo.is_ancestor(sha, ref):
            raise CommitGone(f"commit {sha} is not on {branch} any more (force-pushed?)")
        export(repo, sha, work_dir / "tree")
    return work_dir / "tree"

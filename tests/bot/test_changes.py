"""Fetching a PR with GitPython and finding the operators it changes (real git repositories)."""

import shutil

import pytest
from atrex.bot.changes import affected_ops
from atrex.bot.gitwork import CheckoutError, checkout_pr, clone_for_agent
from atrex.runner.repo import load_repo

from .world import EXAMPLE_OP, KernelRepo, git


@pytest.fixture
def kernels(tmp_path):
    (tmp_path / "remote").mkdir()
    repo = KernelRepo(tmp_path / "remote", "kernels")
    second = repo.work / "ops" / "rmsnorm2"
    shutil.copytree(EXAMPLE_OP, second)
    kernel = second / "kernel.py"
    kernel.write_text("from common import helpers  # noqa: F401\n" + kernel.read_text())
    repo.commit("second op with a shared helper", {"common/__init__.py": "",
                                                   "common/helpers.py": "SCALE = 1\n"})
    repo.push("main")
    return repo


def changed_ops(kernels, tmp_path, edit, branch="pr"):
    kernels.branch(branch)
    edit(kernels)
    sha = kernels.commit("change")
    kernels.push(branch)
    co = checkout_pr(tmp_path / "data", tmp_path / "work" / branch, "octo/kernels", 1, sha,
                     str(kernels.remote), branch, str(kernels.remote), "main", token=None)
    return co, affected_ops(load_repo(co.head_dir), co.base_dir, co.changed)


def test_kernel_change_affects_its_op_only(kernels, tmp_path):
    co, changes = changed_ops(kernels, tmp_path, lambda k: k.edit_kernel("x"))
    assert co.changed == ["ops/rmsnorm/kernel.py"] and changes.ops == ["rmsnorm"]
    assert (co.head_dir / "ops" / "rmsnorm" / "kernel.py").read_text().endswith("# x\n")
    assert not (co.base_dir / "ops" / "rmsnorm" / "kernel.py").read_text().endswith("# x\n")
    assert not (co.head_dir / ".git").exists()


def test_imported_helper_change_affects_the_importing_op(kernels, tmp_path):
    def edit(k):
        (k.work / "common" / "helpers.py").write_text("SCALE = 2\n")

    _, changes = changed_ops(kernels, tmp_path, edit)
    assert changes.ops == ["rmsnorm2"]


def test_unrelated_change_affects_nothing_and_config_affects_all(kernels, tmp_path):
    def readme(k):
        (k.work / "README.md").write_text("more\n")

    _, changes = changed_ops(kernels, tmp_path, readme, "readme")
    assert changes.ops == []

    def config(k):
        (k.work / "atrex.toml").write_text((k.work / "atrex.toml").read_text() + "\n")

    _, changes = changed_ops(kernels, tmp_path, config, "config")
    assert changes.ops == ["rmsnorm", "rmsnorm2"]


def test_deleted_op_is_reported_removed(kernels, tmp_path):
    _, changes = changed_ops(kernels, tmp_path,
                             lambda k: shutil.rmtree(k.work / "ops" / "rmsnorm2"))
    assert changes.ops == [] and changes.removed == ["ops/rmsnorm2"]


def test_merge_base_not_base_tip(kernels, tmp_path):
    kernels.branch("pr")
    sha = kernels.touch_kernel("pr")
    kernels.push("pr")
    kernels.branch("main2", "main")
    git(kernels.work, "checkout", "main")
    (kernels.work / "README.md").write_text("main moved on\n")
    kernels.commit("main moves")
    kernels.push("main")
    co = checkout_pr(tmp_path / "data", tmp_path / "w", "octo/kernels", 1, sha,
                     str(kernels.remote), "pr", str(kernels.remote), "main", token=None)
    assert co.changed == ["ops/rmsnorm/kernel.py"]  # main's README change is not the PR's


def test_fork_head_and_force_pushed_commit(kernels, tmp_path):
    fork = kernels.fork(tmp_path, "fork")
    kernels.branch("feature")
    sha = kernels.touch_kernel("from a fork")
    kernels.push("feature", remote="fork")
    co = checkout_pr(tmp_path / "data", tmp_path / "w", "octo/kernels", 3, sha, str(fork),
                     "feature", str(kernels.remote), "main", token=None)
    assert co.changed == ["ops/rmsnorm/kernel.py"]
    with pytest.raises(CheckoutError, match="not on feature"):
        checkout_pr(tmp_path / "data", tmp_path / "w", "octo/kernels", 3, "f" * 40, str(fork),
                    "feature", str(kernels.remote), "main", token=None)
    with pytest.raises(CheckoutError, match="git fetch failed"):
        checkout_pr(tmp_path / "data", tmp_path / "w", "octo/kernels", 3, sha,
                    str(tmp_path / "nowhere.git"), "feature", str(kernels.remote), "main", None)


def test_agent_clone_is_a_git_repo_at_head(kernels, tmp_path):
    kernels.branch("pr")
    sha = kernels.touch_kernel("agent")
    kernels.push("pr")
    path = clone_for_agent(tmp_path / "data", tmp_path / "w", "octo/kernels", 1, sha,
                           str(kernels.remote), "pr", str(kernels.remote), "main", token=None)
    assert git(path, "rev-parse", "HEAD") == sha
    assert git(path, "rev-parse", "--abbrev-ref", "HEAD") == "atrex/base"
    assert git(path, "remote", "get-url", "origin") == str(kernels.remote)


def test_a_cache_left_half_made_by_a_killed_worker_is_made_again(kernels, tmp_path):
    # a worker killed inside `git init` left HEAD and nothing else (the deploy test's
    # kill -9 found this: every attempt of the job on the other worker then failed)
    half = tmp_path / "data" / "git" / "octo_kernels.git"
    half.mkdir(parents=True)
    (half / "HEAD").write_text("ref: refs/heads/main\n")
    co, changes = changed_ops(kernels, tmp_path, lambda k: k.edit_kernel("x"))
    assert changes.ops == ["rmsnorm"] and (half / "objects").is_dir()
    left = sorted(p.name for p in half.parent.iterdir())
    assert left == ["octo_kernels.git", "octo_kernels.lock"]  # nothing staged or set aside


def test_git_locks_left_by_a_worker_killed_mid_fetch_do_not_block_later_fetches(kernels,
                                                                                 tmp_path):
    changed_ops(kernels, tmp_path, lambda k: k.edit_kernel("x"))
    cache = tmp_path / "data" / "git" / "octo_kernels.git"
    for stale in ("refs/atrex/pr/1/head.lock", "packed-refs.lock", "shallow.lock"):
        (cache / stale).write_text("")
    co, changes = changed_ops(kernels, tmp_path, lambda k: k.edit_kernel("y"), branch="pr2")
    assert changes.ops == ["rmsnorm"] and not list(cache.rglob("*.lock"))

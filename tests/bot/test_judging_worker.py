"""The `action_required` gate in the worker's lanes, in-process: a fork PR that also loosens the
rules needs both approvals (running its code is not accepting its rules); a maintainer's approval
given before the evaluation finished is honoured. The runner is replaced through `Runtime.evaluate`
(GPU-like reports); git, the job store, the commands and the GitHub fake are real.
"""

from __future__ import annotations

from atrex.bot.judging import ACTION_REQUIRED as ACTION
from atrex.bot.newjobs import command_job, evaluate_job
from atrex.bot.store import DONE, WAITING

from .test_worker import REPO, drain, make_runtime, timed_report
from .world import ATREX_TOML, KernelRepo

LOOSER = ATREX_TOML + "\n[tolerances.bfloat16]\natol = 0.5\n"


def _counting_evaluate(calls: list):
    def evaluate(repo, plan, options, progress=None):
        calls.append({op: [c.label for c in cands] for op, cands in plan.items()})
        return {"head": timed_report(0.5), "base": timed_report(0.5)}

    return evaluate


def _approve(fake, runtime, number: int, sha: str, login: str = "maintainer") -> dict:
    comment = fake.add_comment(REPO, number, login, f"/atrex approve {sha}")
    runtime.store.enqueue(command_job(REPO, 1, number, comment["id"], login, "approve", [sha],
                                      None))
    drain(runtime)
    return comment


def test_a_fork_that_loosens_the_rules_needs_both_approvals(fake, config, tmp_path):
    (tmp_path / "git").mkdir()
    kernels = KernelRepo(tmp_path / "git", "kernels")
    fake.add_repo(REPO, str(kernels.remote))
    fork = kernels.fork(tmp_path / "git", "fork")
    fake.add_repo("contributor/kernels", str(fork), installation_id=1)
    kernels.branch("loosen")
    kernels.edit_kernel("tuned")
    sha = kernels.commit("tuned, and a looser tolerance", {"atrex.toml": LOOSER})
    kernels.push("loosen", remote="fork")
    fake.add_pull(REPO, 2, "loosen", head_repo="contributor/kernels")
    fake.set_permission(REPO, "maintainer", "write")
    calls: list = []
    config.data_dir.mkdir(parents=True, exist_ok=True)
    runtime = make_runtime(config, evaluate=_counting_evaluate(calls))
    job_id, _ = runtime.store.enqueue(evaluate_job(REPO, 1, 2, sha, fork=True, reason="t"))
    drain(runtime)
    assert runtime.store.get(job_id).state == WAITING and calls == []  # the fork's code waits

    _approve(fake, runtime, 2, sha)  # run it: evaluated, but its looser rules are not accepted
    assert calls == [{"rmsnorm": ["head", "base"]}, {"rmsnorm": ["head"]}]
    job = runtime.store.get(job_id)
    assert job.state == WAITING and job.payload["stage"] == "publish"
    [run] = fake.runs_for(REPO, sha)
    assert run["conclusion"] == "action_required"
    assert runtime.store.is_approved(REPO, 2, sha)
    assert runtime.store.judging_approver(REPO, 2, sha) is None

    second = _approve(fake, runtime, 2, sha)  # accept the rules: published, not evaluated again
    assert len(calls) == 2 and runtime.store.get(job_id).state == DONE
    [run] = fake.runs_for(REPO, sha)
    assert run["conclusion"] == runtime.store.get(job_id).result["conclusion"] != ACTION
    assert [s for s, _ in run["_history"]].count("completed") == 2
    assert runtime.store.judging_approver(REPO, 2, sha) == "maintainer"
    assert fake.reactions_on(second["id"]) == ["eyes", "+1"]
    sticky = [c for c in fake.comments_on(REPO, 2, fake.bot_login) if "atrex:sticky" in c["body"]]
    assert len(sticky) == 1 and "Approved for" in sticky[0]["body"]


def test_an_approval_before_the_evaluation_finished_is_honoured(fake, config, tmp_path):
    (tmp_path / "git").mkdir()
    kernels = KernelRepo(tmp_path / "git", "kernels")
    fake.add_repo(REPO, str(kernels.remote))
    kernels.branch("loosen")
    sha = kernels.commit("looser tolerance", {"atrex.toml": LOOSER})
    kernels.push("loosen")
    fake.add_pull(REPO, 3, "loosen")
    fake.set_permission(REPO, "maintainer", "admin")
    config.data_dir.mkdir(parents=True, exist_ok=True)
    runtime = make_runtime(config, evaluate=_counting_evaluate([]))
    _approve(fake, runtime, 3, sha)
    assert runtime.store.judging_approver(REPO, 3, sha) == "maintainer"
    job_id, _ = runtime.store.enqueue(evaluate_job(REPO, 1, 3, sha, fork=False, reason="t"))
    drain(runtime)
    assert runtime.store.get(job_id).state == DONE
    [run] = fake.runs_for(REPO, sha)
    assert run["conclusion"] == runtime.store.get(job_id).result["conclusion"]
    assert ACTION not in [c for _, c in run["_history"]]

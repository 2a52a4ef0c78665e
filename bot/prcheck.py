"""Evaluating a pull-request commit against its merge base, the same way wherever it runs.

The App's GPU lane (`atrex.bot.tasks.evaluate`) and the GitHub Action (`atrex pr-report`) both call
`evaluate_checkout`: the changed operators (`atrex.bot.changes`), head and base kernels interleaved
in one runner call per operator, both judged against the head's reference (`atrex.bot.verdict`).
When the PR changes what judges a kernel (`atrex.bot.judging`: reference, inputs, shapes, weights,
tolerances, thresholds), the head kernel is also judged by the base's oracle and rules (a second
runner call with the merge base's repository as the judge's), and the stricter verdict decides;
`gated` turns the conclusion into `action_required` while such a change needs a maintainer's
approval. The result (`PrResult`) renders to the same sticky comment
(`atrex.bot.render.comment_body`) and its JSON form (`result_to_dict` / `result_from_dict`) is the
checkpoint the App stores and the report the Action uploads. `local_checkout` exports head and
merge base of a local git repository (the Action's checkout) like `atrex.bot.gitwork.checkout_pr`
does from the App's cache.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atrex.runner.errors import FormatError
from atrex.runner.launch import Launcher, choose_launcher
from atrex.runner.model import Report
from atrex.runner.repo import RepoSpec, load_repo
from atrex.runner.sandbox import CandidateRef

from .changes import Changes, affected_ops
from .gitwork import Checkout, CheckoutError, export
from .judging import ACTION_REQUIRED, JudgingReport, gate, judging_changes, ops_for_base_oracle
from .judging import stricter as stricter_judgement
from .render import PrResult
from .verdict import NotEvaluated, judge, title_for

if TYPE_CHECKING:
    from atrex.runner.evaluate import EvalOptions

RESULT_SCHEMA = "atrex.pr-result/2"  # 2: the `judging` section (bot.judging)

Evaluate = Callable[..., dict[str, Report]]  # runner.evaluate.evaluate's signature


def sandbox_launcher(mode: str, image: str | None, memory: str | None = None,
                     cpus: float | None = None, pids: int | None = None) -> Launcher:
    """The candidate sandbox for these settings (see runner.launch.choose_launcher)."""
    return choose_launcher(mode, image, memory=memory, cpus=cpus, pids=pids)


def plan_for(head_repo, changes: Changes, checkout: Checkout) -> dict[str, list[CandidateRef]]:
    """Per changed operator: the head kernel, and the base kernel where the base has the op."""
    plan = {}
    for op in head_repo.ops:
        rel = changes.rel_dirs[op.name]
        cands = [CandidateRef("head", checkout.head_dir / rel / op.kernel_file, checkout.head_dir)]
        base_kernel = checkout.base_dir / rel / op.kernel_file
        if base_kernel.is_file() and (checkout.base_dir / rel / "reference.py").is_file():
            cands.append(CandidateRef("base", base_kernel, checkout.base_dir))
        plan[op.name] = cands
    return plan


def evaluate_checkout(checkout: Checkout, options: EvalOptions, evaluate: Evaluate,
                      progress: Callable[[str, str, str | None], None] | None = None,
                      job_id: int | None = None,
                      regression: float | None = None) -> PrResult:
    """Evaluate the changed operators at head and merge base; `regression` overrides the
    repository's `thresholds.regression` (the Action's input). Raises FormatError for a
    repository the runner cannot load."""
    head_repo = load_repo(checkout.head_dir)
    changes = affected_ops(head_repo, checkout.base_dir, checkout.changed)
    threshold = head_repo.config.regression if regression is None else regression
    base_repo, judging = _judging(checkout, head_repo, changes)
    if not changes.ops:
        return PrResult(checkout.head_sha, checkout.base_sha, judge(None, None, threshold),
                        removed=changes.removed, job_id=job_id, threshold=threshold,
                        judging=judging)
    repo = load_repo(checkout.head_dir, only_ops=changes.ops)
    reports = evaluate(repo, plan_for(repo, changes, checkout), options, progress)
    head, base = reports.get("head"), reports.get("base")
    skipped = not_evaluated(repo, options.resolved_device())
    judgement = judge(head, base, threshold, skipped)
    if base_repo is not None:
        _judge_by_base_oracle(judging, base_repo, repo, changes, checkout, options, evaluate,
                              progress, regression)
        judgement = stricter_judgement(judgement, judging.base_rules,
                                       lambda ops: title_for(ops, head))
    return PrResult(checkout.head_sha, checkout.base_sha, judgement, head=head, base=base,
                    removed=changes.removed, job_id=job_id, threshold=threshold,
                    not_evaluated=skipped, judging=judging)


def _judging(checkout: Checkout, head: RepoSpec,
             changes: Changes) -> tuple[RepoSpec | None, JudgingReport]:
    """The merge base's repository (None when it cannot be loaded) and what the PR changes in
    how the affected operators are judged."""
    if not checkout.base_dir.is_dir():
        return None, JudgingReport()
    try:
        base = load_repo(checkout.base_dir)
    except FormatError as exc:
        return None, JudgingReport(notes=[
            f"The merge base is not a kernel repository atrex can load ({exc}); how kernels "
            "are judged was not compared with it."])
    return base, JudgingReport(changes=judging_changes(base, head, changes.ops))


def _judge_by_base_oracle(judging: JudgingReport, base_repo: RepoSpec, head_repo: RepoSpec,
                          changes: Changes, checkout: Checkout, options: EvalOptions,
                          evaluate: Evaluate, progress, regression: float | None) -> None:
    """Judge the head kernels of the operators whose judging changed by the merge base's
    oracle (reference, inputs, shapes, weights) and rules (tolerances, thresholds): the judge
    loads the base's files; the head kernel runs in its executor as any contestant does. On a
    GPU the base kernel runs beside it, so the base's regression threshold can be applied."""
    names = ops_for_base_oracle(judging.changes, base_repo, changes.ops)
    if not names:
        return
    base_spec = load_repo(checkout.base_dir, only_ops=names)
    timed = options.time and options.resolved_device() == "cuda"
    plan = {}
    for op in base_spec.ops:
        head_op = head_repo.op(op.name)
        cands = [CandidateRef("head", checkout.head_dir / changes.rel_dirs[op.name]
                              / head_op.kernel_file, checkout.head_dir)]
        base_kernel = Path(op.dir) / op.kernel_file
        if timed and base_kernel.is_file():
            cands.append(CandidateRef("base", base_kernel, checkout.base_dir))
        plan[op.name] = cands
    relabel = None if progress is None else (
        lambda op, shape, label: progress(op, shape, f"{label or '-'} (base's oracle)"))
    reports = evaluate(base_spec, plan, options, relabel)
    judging.head_report, judging.base_report = reports.get("head"), reports.get("base")
    judging.base_threshold = base_spec.config.regression if regression is None else regression
    judging.not_evaluated = not_evaluated(base_spec, options.resolved_device())
    judging.base_rules = judge(judging.head_report, judging.base_report, judging.base_threshold,
                               judging.not_evaluated)


def gated(result: PrResult, approved_by: str | None) -> PrResult:
    """The result as published: `action_required` (with a title saying why) while a change to
    what judges a kernel needs approval and nobody approved this commit."""
    if result.judging is None:
        return result
    judging = dataclasses.replace(result.judging, approved_by=approved_by)
    conclusion = gate(result.judgement.conclusion, judging)
    judgement = result.judgement
    if conclusion == ACTION_REQUIRED:
        reasons = judging.approval_reasons
        judgement = dataclasses.replace(result.judgement, conclusion=ACTION_REQUIRED, title=(
            f"Needs a maintainer's approval: this PR changes what judges its kernels "
            f"({len(reasons)} change{'s' if len(reasons) != 1 else ''}); "
            f"{result.judgement.title}")[:255])
    return dataclasses.replace(result, judgement=judgement, judging=judging)


def not_evaluated(repo, device: str) -> list[NotEvaluated]:
    """The declared shapes of these operators that do not target `device` (the runner runs a
    shape only on the devices its `targets` name), with the reason in words."""
    reason = ("GPU shapes; this runner has no GPU" if device == "cpu"
              else "CPU-only shapes (Triton interpreter smoke tests); not run on a GPU")
    return [NotEvaluated(op.name, shape.id, tuple(shape.targets), reason)
            for op in repo.ops for shape in op.shapes if device not in shape.targets]


def result_to_dict(result: PrResult) -> dict[str, Any]:
    return {"schema": RESULT_SCHEMA, "head_sha": result.head_sha, "base_sha": result.base_sha,
            "error": result.error, "removed": result.removed, "threshold": result.threshold,
            "conclusion": result.judgement.conclusion, "title": result.judgement.title,
            "reason": result.judgement.reason,
            "not_evaluated": [n.to_dict() for n in result.not_evaluated],
            "head": result.head.to_dict() if result.head else None,
            "base": result.base.to_dict() if result.base else None,
            "judging": result.judging.to_dict() if result.judging else None}


def result_from_dict(data: dict[str, Any], job_id: int | None = None) -> PrResult:
    """A stored result (schema 1 or 2; 1 has no `judging`)."""
    head = Report.from_dict(data["head"]) if data.get("head") else None
    base = Report.from_dict(data["base"]) if data.get("base") else None
    judging = JudgingReport.from_dict(data["judging"]) if data.get("judging") else None
    skipped = [NotEvaluated.from_dict(n)
               for n in data.get("not_evaluated") or []]  # absent before schema 1 had it
    judgement = stricter_judgement(judge(head, base, data["threshold"], skipped),
                                   judging.base_rules if judging else None,
                                   lambda ops: title_for(ops, head))
    judgement.conclusion, judgement.title = data["conclusion"], data["title"]
    judgement.reason = data.get("reason")
    return PrResult(data["head_sha"], data["base_sha"], judgement, head=head, base=base,
                    removed=data.get("removed") or [], error=data.get("error"), job_id=job_id,
                    threshold=data["threshold"], not_evaluated=skipped, judging=judging)


def local_checkout(path: Path, base: str, head: str, work_dir: Path) -> Checkout:
    """Head and the merge base of (base, head) of the local git repository holding `path`,
    exported without `.git` into work_dir/head and work_dir/base, with the files changed between
    them. When `path` is a subdirectory of the repository (the kernel repository inside a larger
    one), the returned directories and changed paths are relative to it."""
    import git

    repo = git.Repo(path, search_parent_directories=True)
    sub = Path(path).resolve().relative_to(Path(repo.working_tree_dir).resolve())
    try:
        head_sha = repo.commit(head).hexsha
        base_tip = repo.commit(base).hexsha
    except (git.BadName, ValueError) as exc:
        raise CheckoutError(f"unknown commit: {exc} (fetch the base and head commits, e.g. "
                            "actions/checkout with fetch-depth: 0)") from None
    bases = repo.merge_base(head_sha, base_tip)
    if not bases:
        raise CheckoutError(f"{head_sha[:12]} and {base_tip[:12]} have no common history")
    base_sha = bases[0].hexsha
    diff = repo.git.diff("--name-only", "--no-renames", "-z", base_sha, head_sha)
    export(repo, head_sha, work_dir / "head")
    export(repo, base_sha, work_dir / "base")
    prefix = "" if str(sub) == "." else sub.as_posix() + "/"
    changed = [p[len(prefix):] for p in diff.split("\0") if p and p.startswith(prefix)]
    return Checkout(head_sha=head_sha, base_sha=base_sha, head_dir=work_dir / "head" / sub,
                    base_dir=work_dir / "base" / sub, changed=changed)

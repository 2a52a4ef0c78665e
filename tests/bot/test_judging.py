"""What a pull request changes in how its kernels are judged (bot.judging), how the comment opens
with that list, and the `action_required` gate; on real repositories loaded by the runner's loader.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from atrex.bot.judging import (
    ACTION_REQUIRED,
    CONFIG_SCOPE,
    JudgingChange,
    JudgingReport,
    Kind,
    gate,
    judging_changes,
    ops_for_base_oracle,
    stricter,
)
from atrex.bot.prcheck import gated, result_from_dict, result_to_dict
from atrex.bot.render import (
    CHECK_TEXT_LIMIT,
    COMMENT_LIMIT,
    PrResult,
    check_output,
    comment_body,
    utf8_len,
)
from atrex.bot.verdict import FAILURE, NEUTRAL, SUCCESS, Judgement, NotEvaluated, judge, title_for
from atrex.runner.model import DeviceInfo, OpResult, Report, ShapeResult, Status
from atrex.runner.repo import load_repo

from .world import ATREX_TOML, EXAMPLE_OP

SHA = "c0ffee" + "0" * 34


def make_repo(root: Path, toml: str = ATREX_TOML) -> Path:
    shutil.copytree(EXAMPLE_OP, root / "ops" / "rmsnorm",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (root / "atrex.toml").write_text(toml)
    return root


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


@pytest.fixture
def repos(tmp_path):
    return make_repo(tmp_path / "base"), make_repo(tmp_path / "head")


def changes_between(base: Path, head: Path, ops=("rmsnorm",)):
    return judging_changes(load_repo(base), load_repo(head), list(ops))


def test_an_untouched_oracle_changes_nothing(repos):
    base, head = repos
    (head / "ops" / "rmsnorm" / "kernel.py").write_text(
        (head / "ops" / "rmsnorm" / "kernel.py").read_text() + "\n# faster\n")
    assert changes_between(base, head) == []


def test_tolerances_and_thresholds_old_to_new(repos):
    base, head = repos
    (head / "atrex.toml").write_text(
        ATREX_TOML.replace("regression = 0.05", "regression = 0.2\nown_kernel_share = 0.95")
        + "\n[tolerances.bfloat16]\natol = 0.5\n\n[ops.rmsnorm]\nreference_dtype = \"float32\"\n")
    found = {(c.scope, c.what): c for c in changes_between(base, head)}
    assert found[(CONFIG_SCOPE, "thresholds.regression")].kind is Kind.LOOSER
    assert (found[(CONFIG_SCOPE, "thresholds.regression")].old,
            found[(CONFIG_SCOPE, "thresholds.regression")].new) == ("0.05", "0.2")
    assert found[(CONFIG_SCOPE, "thresholds.own_kernel_share")].kind is Kind.TIGHTER
    atol = found[(CONFIG_SCOPE, "tolerances.bfloat16.atol")]
    assert (atol.kind, atol.old, atol.new) == (Kind.LOOSER, "0.01", "0.5")
    ref = found[(f"{CONFIG_SCOPE} [ops.rmsnorm]", "reference_dtype")]
    assert (ref.kind, ref.old, ref.new) == (Kind.LOOSER, "float64", "float32")
    assert all(c.kind.needs_approval for c in found.values() if c.kind is Kind.LOOSER)
    assert not Kind.TIGHTER.needs_approval


def test_oracle_shapes_and_weights(repos):
    base, head = repos
    op = head / "ops" / "rmsnorm"
    (op / "reference.py").write_text((op / "reference.py").read_text().replace(
        ".to(x.dtype)", ".to(x.dtype) * 1.5"))
    edit_json(op / "shapes.json", lambda d: (d.pop("prefill-8192"),
                                             d["decode-64"]["input_kwargs"].update(
                                                 token_count=2),
                                             d.update({"tiny": d["cpu-small"]})))
    edit_json(op / "metadata.json", lambda d: (d.update(importance_score=0.5),
                                               d["shapes"].pop("prefill-8192")))
    found = {c.what: c for c in changes_between(base, head)}
    assert found["reference.py"].kind is Kind.ORACLE and not Kind.ORACLE.needs_approval
    assert found["shape prefill-8192"].kind is Kind.SHAPE_DROPPED
    assert found["shape decode-64"].kind is Kind.SHAPE_CHANGED
    assert '"token_count": 64' in found["shape decode-64"].old
    assert found["shape tiny"].kind is Kind.SHAPE_ADDED and not Kind.SHAPE_ADDED.needs_approval
    importance = found["importance_score"]
    assert (importance.kind, importance.old, importance.new) == (Kind.REWEIGHTED, "0.0004", "0.5")


def test_interface_changes_block_the_base_oracle_and_removed_ops_need_approval(tmp_path):
    base = make_repo(tmp_path / "base")
    shutil.copytree(EXAMPLE_OP, base / "ops" / "other",
                    ignore=shutil.ignore_patterns("__pycache__"))
    head = make_repo(tmp_path / "head")
    ref = head / "ops" / "rmsnorm" / "reference.py"
    ref.write_text(ref.read_text().replace("weight: torch.Tensor) -> torch.Tensor:",
                                           "weight: torch.Tensor, scale=1.0) -> torch.Tensor:"))
    changes = changes_between(base, head)
    kinds = {(c.scope, c.kind) for c in changes}
    assert ("rmsnorm", Kind.INTERFACE) in kinds and ("other", Kind.OP_REMOVED) in kinds
    assert ops_for_base_oracle(changes, load_repo(base), ["rmsnorm"]) == []
    (head / "atrex.toml").write_text(ATREX_TOML.replace("0.05", "0.06"))
    ref.write_text((base / "ops" / "rmsnorm" / "reference.py").read_text())
    changes = changes_between(base, head)
    assert ops_for_base_oracle(changes, load_repo(base), ["rmsnorm"]) == ["rmsnorm"]


def test_gate_and_the_comment_that_opens_with_the_list(repos):
    base, head = repos
    (head / "atrex.toml").write_text(ATREX_TOML + "\n[tolerances.bfloat16]\natol = 0.5\n")
    report = JudgingReport(changes=changes_between(base, head))
    assert gate(SUCCESS, report) == ACTION_REQUIRED and gate(NEUTRAL, report) == ACTION_REQUIRED
    assert gate(FAILURE, report) == FAILURE

    result = PrResult(SHA, "b" * 40, Judgement(NEUTRAL, "No operator changed"), judging=report)
    waiting = gated(result, None)
    assert waiting.judgement.conclusion == ACTION_REQUIRED
    body = comment_body(waiting)
    lines = body.splitlines()
    assert lines[1] == "## atrex · ⏸️ action required"
    listed = lines.index("### This pull request changes what judges its kernels")
    assert listed < lines.index("No operator changed in this commit; nothing was evaluated.")
    assert "- `atrex.toml` `tolerances.bfloat16.atol`: `0.01` -> `0.5`; looser ⚠️" in lines
    assert f"`/atrex approve {SHA}`" in body
    assert "tolerances.bfloat16.atol" in check_output(waiting)["summary"]

    approved = gated(result, "maintainer")
    assert approved.judgement.conclusion == NEUTRAL
    assert f"✅ Approved for `{SHA[:12]}` by @maintainer." in comment_body(approved)

    stored = result_from_dict(json.loads(json.dumps(result_to_dict(result))))
    assert stored.judging.changes == report.changes
    assert gated(stored, None).judgement.conclusion == ACTION_REQUIRED


def test_schema_1_checkpoints_still_load():
    old = {"schema": "atrex.pr-result/1", "head_sha": SHA, "base_sha": "b" * 40, "error": None,
           "removed": [], "threshold": 0.05, "conclusion": "neutral",
           "title": "No operator changed", "head": None, "base": None}
    result = result_from_dict(old)
    assert result.judging is None and gated(result, None).judgement.conclusion == NEUTRAL


def test_the_action_fails_a_pr_that_removes_an_operator(tmp_path):
    """`atrex pr-report` (the GitHub Action) has no /atrex approve: action_required, exit 1."""
    import subprocess
    import sys

    from .world import ROOT, KernelRepo, git

    kernels = KernelRepo(tmp_path, "kernels", ops={"rmsnorm": EXAMPLE_OP, "other": EXAMPLE_OP})
    kernels.branch("drop")
    shutil.rmtree(kernels.work / "ops" / "other")
    kernels.commit("drop the other operator")
    done = subprocess.run(
        [sys.executable, "-m", "atrex", "pr-report", str(kernels.work), "--base", "main",
         "--json", str(tmp_path / "r.json"), "--markdown", str(tmp_path / "c.md"),
         "--outputs", str(tmp_path / "out"), "--device", "cpu"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "conclusion=action_required" in (tmp_path / "out").read_text()
    comment = (tmp_path / "c.md").read_text()
    assert "- `other` `operator`: was `3 shapes`; removed (its shapes are no longer measured) ⚠️" \
        in comment.splitlines()
    assert "The GitHub Action cannot record an approval" in comment
    assert git(kernels.work, "status", "--porcelain") == ""


def _cpu_report(status=Status.PASS):
    cpu = DeviceInfo(kind="cpu", name="x86_64")
    shape = ShapeResult(id="cpu-small", status=status, weight=1.0, own_kernel_share=1.0,
                        message=None if status is Status.PASS else "max abs error 0.4")
    return Report(device=cpu, timing_available=False, ops=[OpResult(
        name="rmsnorm", status=status, own_kernel_share=1.0, shapes=[shape])])


def test_a_cpu_run_failed_by_the_bases_oracle_is_a_failure_without_why_neutral():
    """On a CPU the head's own rules make the run neutral (nothing timed); the base's oracle
    failing the head kernel makes it a failure, and the neutral reason goes with it."""
    gpu_only = [NotEvaluated("rmsnorm", "decode-64", ("cuda",), "GPU shapes; no GPU")]
    head_rules = judge(_cpu_report(), None, 0.05, gpu_only)
    assert head_rules.conclusion == NEUTRAL and head_rules.reason
    change = JudgingChange("rmsnorm", "reference.py", Kind.ORACLE, "present", "present")
    judging = JudgingReport([change], head_report=_cpu_report(Status.INCORRECT),
                            not_evaluated=gpu_only)
    judging.base_rules = judge(judging.head_report, None, 0.05, gpu_only)
    result = PrResult(SHA, "b" * 40, stricter(head_rules, judging.base_rules,
                                              lambda ops: title_for(ops, _cpu_report())),
                      head=_cpu_report(), not_evaluated=gpu_only, judging=judging)
    assert result.judgement.conclusion == FAILURE and result.judgement.reason is None
    assert "rmsnorm (fails the base's oracle)" in result.judgement.title
    assert "Why neutral" not in comment_body(result)

    stored = result_from_dict(json.loads(json.dumps(result_to_dict(result))))
    assert stored.judging.not_evaluated == gpu_only and stored.not_evaluated == gpu_only
    assert stored.judgement.conclusion == FAILURE
    assert stored.judging.base_rules.ops[0].failed


def test_a_judging_list_too_long_for_github_is_cut_but_keeps_how_to_approve():
    drops = [JudgingChange(f"operator_{i:04d}", f"shape shape-{i:04d}", Kind.SHAPE_DROPPED,
                           '{"input_kwargs": {"tokens": 8192, "hidden": 4096}} ✅→Δ', None)
             for i in range(2000)]
    result = gated(PrResult(SHA, "b" * 40, Judgement(NEUTRAL, "No operator changed"),
                            judging=JudgingReport(drops)), None)
    assert result.worth_a_comment  # no operator changed, yet the rules did
    body, summary = comment_body(result), check_output(result)["summary"]
    assert utf8_len(body) <= COMMENT_LIMIT and utf8_len(summary) <= CHECK_TEXT_LIMIT
    for text in (body, summary):
        assert "### This pull request changes what judges its kernels" in text
        assert f"`/atrex approve {SHA}`" in text
        shown = text.count("- `operator_")
        assert 100 < shown < 2000
        assert (f"{2000 - shown} of 2000 changes of the changes to what judges the kernels"
                in text)

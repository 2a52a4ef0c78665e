"""Verdicts and Markdown from runner reports (synthetic GPU-like reports, and CPU ones)."""

from bot.render import CHECK_TEXT_LIMIT, STICKY_MARKER, PrResult, check_output, comment_body
from bot.verdict import FAILURE, NEUTRAL, SUCCESS, judge
from runner.model import (
    DeviceInfo,
    Finding,
    FindingKind,
    OpResult,
    Peaks,
    Report,
    ShapeResult,
    Status,
)

H200 = DeviceInfo(kind="cuda", name="NVIDIA H200", gpu_key="h200_sxm", driver="570.86",
                  cuda="12.8", torch="2.11.0", triton="3.6.0", python="3.12.3",
                  peaks=Peaks("datasheet", {"bf16": 989.4}, 4.8))
CPU = DeviceInfo(kind="cpu", name="x86_64", torch="2.13.0+cpu", triton="3.9.0", python="3.11.7")


def op(name, status=Status.PASS, fraction=0.4, score=None, share=1.0, timed=True,
       importance=1.0, stake=0.5):
    shapes = [ShapeResult(id="decode", status=status, weight=3.0,
                          time_ms=0.01 / fraction if timed else None, sol_ms=0.01,
                          roofline_fraction=fraction if timed else None, own_kernel_share=share,
                          max_abs_error=1e-3),
              ShapeResult(id="prefill", status=Status.PASS, weight=1.0,
                          time_ms=0.1 / fraction if timed else None, sol_ms=0.1,
                          roofline_fraction=fraction if timed else None, own_kernel_share=share)]
    return OpResult(name=name, status=status, score=(score if score is not None else fraction)
                    if timed else None, own_kernel_share=share, importance=importance,
                    gpu_hours_at_stake=stake if timed else None, shapes=shapes)


def report(ops, device=H200, timed=True):
    scores = [o.score for o in ops if o.score is not None]
    return Report(device=device, ops=ops, timing_available=timed,
                  score=sum(scores) / len(scores) if timed and scores else None,
                  gpu_hours_at_stake=1.25 if timed else None, tool_version="0.1.0")


def result(head, base, threshold=0.05):
    return PrResult("a" * 40, "b" * 40, judge(head, base, threshold), head=head, base=base,
                    job_id=7, threshold=threshold)


def test_faster_kernel_succeeds_with_numbers_in_the_comment():
    res = result(report([op("rmsnorm", fraction=0.5)]), report([op("rmsnorm", fraction=0.4)]))
    assert res.judgement.conclusion == SUCCESS
    body = comment_body(res)
    assert body.startswith(STICKY_MARKER)
    row = next(line for line in body.splitlines() if line.startswith("| `rmsnorm`"))
    assert "✅ pass" in row and "100%" in row and "0.400 → 0.500" in row
    assert "+0.100 (+25.0%)" in row and "🚀 faster +25.0%" in row
    assert "```mermaid\nxychart-beta" in body and "bar [0.500]" in body and "line [0.400]" in body
    assert "NVIDIA H200" in body and "driver 570.86" in body and "torch 2.11.0" in body
    assert "Triton 3.6.0" in body and "1.25 GPU-hours" in body
    assert "| `rmsnorm` | `decode` | 3 | pass |" in body
    out = check_output(res)
    assert out["title"] == "1 operator passed; score 0.500" and "0.400 → 0.500" in out["summary"]
    assert "`decode`" in out["text"] and "size limit" not in out["summary"] + out["text"]


def test_regression_past_the_threshold_fails():
    res = result(report([op("rmsnorm", fraction=0.3)]), report([op("rmsnorm", fraction=0.4)]))
    assert res.judgement.conclusion == FAILURE
    assert "regression -25.0% (threshold 5%)" in comment_body(res)
    small = result(report([op("rmsnorm", fraction=0.39)]), report([op("rmsnorm", fraction=0.4)]))
    assert small.judgement.conclusion == SUCCESS


def test_fallback_incorrect_and_suspicious_fail_whatever_the_speed():
    for status in (Status.FALLBACK, Status.INCORRECT, Status.SUSPICIOUS, Status.COMPILE_ERROR):
        head = op("gemm", status=status, fraction=0.9, score=0.0, share=0.1)
        head.findings = [Finding(FindingKind.DISPATCH_FALLBACK, "aten::mm did the work",
                                 "ops/gemm/kernel.py", 12, "decode")]
        res = result(report([head]), report([op("gemm", fraction=0.2)]))
        assert res.judgement.conclusion == FAILURE, status
        body = comment_body(res)
        assert "❌" in body and "ops/gemm/kernel.py:12" in body


def test_new_operator_and_fixed_operator():
    res = result(report([op("new"), op("fixed")]),
                 report([op("fixed", status=Status.INCORRECT, score=0.0)]))
    assert res.judgement.conclusion == SUCCESS
    body = comment_body(res)
    assert "new operator" in body and "fixed (base: incorrect)" in body
    assert "| `new` | ✅ pass | 100% | new → 0.400 |" in body


def test_cpu_reports_say_na_no_gpu_and_have_no_chart():
    head = report([op("rmsnorm", timed=False)], device=CPU, timed=False)
    base = report([op("rmsnorm", timed=False)], device=CPU, timed=False)
    res = result(head, base)
    assert res.judgement.conclusion == SUCCESS
    body = comment_body(res)
    assert "n/a (no GPU) → n/a (no GPU)" in body and "mermaid" not in body
    assert "CPU-only evaluation" in body and "correct, own kernels (not timed)" in body


def test_no_operator_changed_is_neutral():
    res = PrResult("a" * 40, "b" * 40, judge(None, None, 0.05))
    assert res.judgement.conclusion == NEUTRAL
    assert "No operator changed" in comment_body(res)
    assert check_output(res)["title"] == "No operator changed"


def test_error_result_shows_the_error():
    from bot.verdict import Judgement

    res = PrResult("a" * 40, None, Judgement(FAILURE, "The repository could not be evaluated"),
                   error="ops/x/shapes.json: not valid JSON")
    assert "not valid JSON" in comment_body(res)


def test_huge_reports_fit_githubs_limits():
    ops = [op(f"operator_with_a_rather_long_name_{i:04d}", fraction=0.1 + i % 7 / 10)
           for i in range(900)]
    res = result(report(ops), report(ops))
    out = check_output(res)
    assert len(out["summary"]) <= CHECK_TEXT_LIMIT and len(out.get("text", "")) <= CHECK_TEXT_LIMIT
    body = comment_body(res)
    assert len(body) <= 65536 and body.startswith(STICKY_MARKER)
    assert "GitHub's size limit" in body
    assert body.count("xychart-beta") <= 1 and "job 7" in out["summary"]
    assert body.count("| `operator_with") > 100  # the table is cut, not dropped


def test_untrusted_text_cannot_break_the_comment():
    head = op("gemm|x", status=Status.RUNTIME_ERROR, score=0.0)
    head.shapes[0].message = "crash <img src=x> @everyone | <!-- atrex:sticky -->"
    body = comment_body(result(report([head]), None))
    assert "@everyone" not in body and "<img" not in body
    assert body.count(STICKY_MARKER) == 1 and "`gemm¦x`" in body

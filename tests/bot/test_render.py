"""Verdicts and Markdown from runner reports (synthetic GPU-like reports, and CPU ones)."""

from atrex.bot.render import (
    CHECK_TEXT_LIMIT,
    COMMENT_LIMIT,
    STICKY_MARKER,
    PrResult,
    check_output,
    comment_body,
    utf8_len,
)
from atrex.bot.verdict import FAILURE, NEUTRAL, SUCCESS, NotEvaluated, judge
from atrex.runner.model import (
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
                  peaks=Peaks("datasheet", {"bf16": 989.4}, 4.8),
                  uuid="GPU-1ea945f7-e16c-db2f-fb53-4a5413b2c9d7")
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


def result(head, base, threshold=0.05, not_evaluated=()):
    return PrResult("a" * 40, "b" * 40, judge(head, base, threshold, list(not_evaluated)),
                    head=head, base=base, job_id=7, threshold=threshold,
                    not_evaluated=list(not_evaluated))


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
    assert "card GPU-1ea945f7-e16c-db2f-fb53-4a5413b2c9d7" in body  # which card measured it
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


GPU_ONLY = "GPU shapes; this runner has no GPU"


def test_cpu_reports_are_neutral_and_say_what_was_not_evaluated():
    head = report([op("rmsnorm", timed=False)], device=CPU, timed=False)
    base = report([op("rmsnorm", timed=False)], device=CPU, timed=False)
    skipped = [NotEvaluated("rmsnorm", s, ("cuda",), GPU_ONLY) for s in ("d-64", "p-8192")]
    res = result(head, base, not_evaluated=skipped)
    assert res.judgement.conclusion == NEUTRAL
    assert res.judgement.title == "1 operator correct on 2 shapes; not timed, 2 shapes not " \
        "evaluated (no GPU)"
    body = comment_body(res)
    assert "## atrex · ➖ neutral" in body
    assert "**Why neutral**: nothing was timed on x86_64" in body
    assert "n/a (no GPU) → n/a (no GPU)" in body and "mermaid" not in body
    assert "correct, own kernels (not timed)" in body
    assert "**Shapes evaluated** on the CPU (x86_64; Triton interpreter, nothing timed): " \
        "`rmsnorm`: `decode`, `prefill`" in body
    assert f"**Not evaluated** ({GPU_ONLY}): `rmsnorm`: `d-64`, `p-8192`" in body
    assert "**Environment**: no GPU: CPU-only evaluation on x86_64" in body
    assert "GPU none" not in body and "driver" not in body
    summary = check_output(res)["summary"]
    assert "Why neutral" in summary and "`d-64`" in summary and "Shapes evaluated" in summary


def test_a_failure_on_the_cpu_shapes_fails_whatever_was_not_evaluated():
    head = report([op("rmsnorm", status=Status.INCORRECT, timed=False)], device=CPU, timed=False)
    skipped = [NotEvaluated("rmsnorm", "d-64", ("cuda",), GPU_ONLY)]
    assert result(head, None, not_evaluated=skipped).judgement.conclusion == FAILURE


def test_nothing_evaluated_is_neutral_with_the_reason():
    head = report([], device=CPU, timed=False)
    skipped = [NotEvaluated("gemm", "big", ("cuda",), GPU_ONLY)]
    res = result(head, head, not_evaluated=skipped)
    assert res.judgement.conclusion == NEUTRAL and res.worth_a_comment
    assert res.judgement.title == "Nothing evaluated: no shape of gemm runs here"
    body = comment_body(res)
    assert "none of the 1 shape of the changed operators could run here" in body
    assert f"**Not evaluated** ({GPU_ONLY}): `gemm`: `big`" in body


def test_gpu_run_lists_cpu_only_shapes_without_changing_the_verdict():
    skipped = [NotEvaluated("rmsnorm", "cpu-small", ("cpu",), "CPU-only shapes")]
    res = result(report([op("rmsnorm", fraction=0.5)]), report([op("rmsnorm", fraction=0.5)]),
                 not_evaluated=skipped)
    assert res.judgement.conclusion == SUCCESS
    body = comment_body(res)
    assert "**Shapes evaluated** on NVIDIA H200: `rmsnorm`: `decode`, `prefill`" in body
    assert "**Not evaluated** (CPU-only shapes): `rmsnorm`: `cpu-small`" in body
    assert "Why neutral" not in body


def test_no_operator_changed_is_neutral():
    res = PrResult("a" * 40, "b" * 40, judge(None, None, 0.05))
    assert res.judgement.conclusion == NEUTRAL
    assert "No operator changed" in comment_body(res)
    assert check_output(res)["title"] == "No operator changed"


def test_error_result_shows_the_error():
    from atrex.bot.verdict import Judgement

    res = PrResult("a" * 40, None, Judgement(FAILURE, "The repository could not be evaluated"),
                   error="ops/x/shapes.json: not valid JSON")
    assert "not valid JSON" in comment_body(res)


def test_huge_reports_fit_githubs_limits_in_bytes():
    ops = [op(f"operator_with_a_rather_long_name_{i:04d}", fraction=0.1 + i % 7 / 10)
           for i in range(900)]
    res = result(report(ops), report(ops))
    out = check_output(res, full_report="[the run](https://example.invalid/run)")
    assert utf8_len(out["summary"]) <= CHECK_TEXT_LIMIT
    assert utf8_len(out["text"]) <= CHECK_TEXT_LIMIT
    body = comment_body(res)
    assert utf8_len(body) <= COMMENT_LIMIT and body.startswith(STICKY_MARKER)
    assert body.count("| `operator_with") > 100  # the table is cut, not dropped
    assert "job 7" in out["summary"] and "**Score**" in body and "**Environment**" in body
    [note] = [line for line in body.splitlines() if line.startswith("**Left out")]
    shown = body.count("| `operator_with")
    assert f"{900 - shown} of 900 rows of the operator table" in note
    assert "the chart" in note and "the shape table" in note
    assert "`atrex job-report 7` on the atrex host" in note
    assert "https://example.invalid/run" in out["summary"]


def test_multi_byte_reports_are_measured_in_bytes_not_characters():
    """The issue's case: a summary under 65,535 characters but over 65,535 bytes (each row
    carries ✅, →, Δ, 🚀: 3-4 bytes per symbol)."""
    ops = [op(f"op_{i:04d}", fraction=0.5) for i in range(800)]
    base = [op(f"op_{i:04d}", fraction=0.4) for i in range(800)]
    res = result(report(ops), report(base))
    body = "\n".join(line for line in comment_body(res).splitlines())
    from atrex.bot import render

    uncut = render.full_markdown(res)
    assert len(uncut) < utf8_len(uncut)
    summary = check_output(res)["summary"]
    assert utf8_len(summary) <= CHECK_TEXT_LIMIT < utf8_len(uncut)
    assert utf8_len(body) <= COMMENT_LIMIT
    rows = [line for line in summary.splitlines() if line.startswith("| `op_")]
    assert rows and all(line.endswith("|") for line in rows)  # whole rows only
    assert summary.count("</details>") == summary.count("<details>")


def test_tiny_fractions_are_not_printed_as_zero():
    res = result(report([op("slow", fraction=0.0003)]), report([op("slow", fraction=0.00012)]))
    body = comment_body(res)
    assert "bar [0.00030]" in body and "line [0.00012]" in body
    row = next(line for line in body.splitlines() if line.startswith("| `slow`"))
    assert "0.00012 → 0.00030" in row and "0.000 →" not in row


def test_chart_does_not_draw_failed_operators_and_keeps_the_base_of_others():
    head = report([op("a", fraction=0.5, importance=0.5), op("new", fraction=0.3,
                                                               importance=0.3),
                   op("broken", status=Status.RUNTIME_ERROR, timed=False, importance=0.2)])
    base = report([op("a", fraction=0.4), op("broken", fraction=0.2)])
    body = comment_body(result(head, base))
    charts = body.split("```mermaid")[1:]
    assert len(charts) == 2
    assert 'x-axis ["a"]' in charts[0] and "bar [0.500]" in charts[0] and \
        "line [0.400]" in charts[0]
    assert 'x-axis ["new"]' in charts[1] and "bar [0.300]" in charts[1] and \
        "    line [" not in charts[1].split("```")[0]
    assert "Not drawn: `broken` (runtime error)" in body
    assert '"broken"' not in body


def test_untrusted_text_cannot_break_the_comment():
    head = op("gemm|x", status=Status.RUNTIME_ERROR, score=0.0)
    head.shapes[0].message = "crash <img src=x> @everyone | <!-- atrex:sticky -->"
    body = comment_body(result(report([head]), None))
    assert "@everyone" not in body and "<img" not in body
    assert body.count(STICKY_MARKER) == 1 and "`gemm¦x`" in body


def test_any_reply_is_fitted_with_its_code_fences_closed():
    from atrex.bot.render import fit_text

    diff = "\n".join(f"+    x{i} = 'é' * 3  # ✅" for i in range(5000))
    text = f"### `rmsnorm`: faster\n\n```diff\n{diff}\n```\n\nthe end"
    fitted = fit_text(text, COMMENT_LIMIT, "the follow-up pull request")
    assert utf8_len(fitted) <= COMMENT_LIMIT < utf8_len(text)
    assert fitted.count("```") % 2 == 0 and fitted.startswith("### `rmsnorm`")
    assert fitted.endswith("lines; the rest: the follow-up pull request.")
    assert fit_text("short", COMMENT_LIMIT, "x") == "short"


def test_shapes_timed_at_other_clocks_or_held_down_are_called_out():
    head, base = report([op("rmsnorm", fraction=0.5)]), report([op("rmsnorm", fraction=0.4)])
    for shape in base.ops[0].shapes:
        shape.timing_sm_clock_mhz = 1980.0
    decode, prefill = head.ops[0].shapes
    decode.timing_sm_clock_mhz, decode.timing_slowdowns = 1755.0, ["power cap"]
    prefill.timing_sm_clock_mhz, prefill.timing_slowdowns = 1965.0, []
    body = comment_body(result(head, base))
    assert ("`rmsnorm` `decode` timed with clock held down (power cap); SM clock 1980 MHz on the "
            "base, 1755 on the head: compare its times with care") in body
    assert "`prefill` timed with" not in body  # 0.8% apart, nothing held down
    quiet = comment_body(result(report([op("rmsnorm", fraction=0.5)]),
                                report([op("rmsnorm", fraction=0.4)])))
    assert "compare its times with care" not in quiet

"""The loop against a scripted OpenAI-compatible server on loopback (the real ``openai`` client):
compile error, wrong result, torch fallback, output caching, malformed reply, a correct improvement,
a reading above roofline and a stall that triggers optimization dropout - decisions read back from
attempts.jsonl. Speed on the CPU comes from the injected test timer (conftest.speedup_timer)."""

from __future__ import annotations

import json

import scripted_kernels as sk
from atrex.agent.config import OptimizeConfig
from atrex.agent.loop import optimize
from atrex.agent.proposers import LlmSettings
from atrex.agent.records import read_attempts
from conftest import BASE_FRACTION, speedup_timer
from openai_fake import ScriptedOpenAI


def reply(text: str, source: str | None) -> str:
    return text if source is None else f"{text}\n\n```python\n{source}```\n"


SCRIPT = [
    ("EXPLAIN-1 vectorize the loads", sk.compile_error()),
    ("EXPLAIN-2 fold the weight into the norm", sk.wrong_result()),
    ("EXPLAIN-3 let PyTorch do the reduction", sk.TORCH_FALLBACK),
    ("EXPLAIN-4 memoize repeated calls", sk.output_cache()),
    ("EXPLAIN-5 I would increase BLOCK_SIZE to 256 and use 4 warps.", None),
    ("EXPLAIN-6 wider blocks and four warps", sk.improved(3.0, "improved")),
    ("EXPLAIN-7 skip the second pass", sk.improved(1000.0, "too fast")),
    ("EXPLAIN-8 reorder the loads", sk.improved(3.0, "stall a")),
    ("EXPLAIN-9 unroll the loop", sk.improved(3.0, "stall b")),
]


def test_scripted_llm_loop_decisions(naive_ops, tmp_path):
    out = tmp_path / "out"
    with ScriptedOpenAI([reply(t, s) for t, s in SCRIPT], tokens_per_reply=500) as server:
        config = OptimizeConfig(
            op="rmsnorm", proposers=["llm"], max_iters=len(SCRIPT), device="cpu", seed=7,
            dropout_after=3, max_tokens=10_000_000,
            llm=LlmSettings(model="scripted-model", base_url=server.base_url,
                            api_key="sk-test", max_retries=0))
        result = optimize(naive_ops, config, out, timer=speedup_timer)
    attempts = read_attempts(out / "attempts.jsonl")
    assert [a["attempt"] for a in attempts] == list(range(len(SCRIPT) + 1))
    baseline, *rest = attempts
    assert baseline["proposer"] == "baseline" and baseline["status"] == "pass"
    assert baseline["meta"]["config"]["seed"] == 7
    assert abs(baseline["roofline_fraction"] - BASE_FRACTION) < 1e-9

    statuses = [a["status"] for a in rest]
    assert statuses == ["compile_error", "incorrect", "fallback", "suspicious", "malformed",
                        "pass", "suspicious", "pass", "pass"]
    accepted = [a["attempt"] for a in rest if a["accepted"]]
    assert accepted == [6]
    by_no = {a["attempt"]: a for a in attempts}
    assert "malformed reply: no fenced code block" in by_no[5]["reason"]
    assert "PyTorch computed" in by_no[3]["message"]
    assert "cached" in by_no[4]["message"]
    assert by_no[4]["reason"].startswith("rejected: suspicious")
    assert "faster than the hardware floor" in by_no[7]["reason"]
    assert by_no[6]["gain"] > 0.6 and abs(by_no[6]["roofline_fraction"] - 3 * BASE_FRACTION) < 1e-9
    for number in (8, 9):
        assert by_no[number]["reason"].startswith("not accepted")
        assert abs(by_no[number]["gain"]) < 0.01
    assert all(a["timing_source"] in (None, "injected") for a in attempts)
    assert all(a["tokens"] >= 500 for a in rest)

    # dropout: after attempts 1-3 (three rounds without a gain) and after 7-9
    dropouts = {a["attempt"]: a["dropout"] for a in attempts if a["dropout"]}
    assert sorted(dropouts) == [3, 9]
    first, second = dropouts[3], dropouts[9]
    assert len(first["hidden_attempts"]) == 2 and set(first["hidden_attempts"]) <= {1, 2, 3}
    assert 0 in first["kept_attempts"]
    assert 6 in second["kept_attempts"] and 0 in second["kept_attempts"]
    assert 6 not in second["hidden_attempts"] and first["seed"] == 7

    # the prompts: reference + incumbent + profile + memory; hidden attempts gone after dropout
    prompts = [r["messages"][1]["content"] for r in server.requests]
    assert len(prompts) == len(SCRIPT)
    assert "class Model(nn.Module)" in prompts[0]  # the reference
    assert "_rmsnorm_naive" in prompts[0] and "bottleneck" in prompts[0]
    assert "Relevant knowledge" in prompts[0]
    after_dropout = prompts[3]
    for hidden in first["hidden_attempts"]:
        assert f"EXPLAIN-{hidden} " not in after_dropout
    for kept in {1, 2, 3} - set(first["hidden_attempts"]):
        assert f"EXPLAIN-{kept} " in after_dropout
    assert "atrex-test-speedup: 3.0\n# improved" in prompts[6]  # the new incumbent is shown
    assert server.auth_headers[0] == "Bearer sk-test"

    # outputs
    assert result.improved and result.tokens == sum(a["tokens"] for a in rest)
    assert (out / "kernel.py").read_text() == sk.improved(3.0, "improved")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["accepted"] == [6] and len(summary["dropouts"]) == 2
    assert summary["after"]["roofline_fraction"] > summary["before"]["roofline_fraction"]


def test_llm_api_failure_is_a_failed_attempt(naive_ops, tmp_path):
    with ScriptedOpenAI([]) as server:  # every request gets HTTP 500
        config = OptimizeConfig(
            op="rmsnorm", proposers=["llm"], max_iters=1, device="cpu",
            llm=LlmSettings(model="m", base_url=server.base_url, api_key="k", max_retries=0))
        result = optimize(naive_ops, config, tmp_path / "out", timer=speedup_timer)
    attempts = read_attempts(tmp_path / "out" / "attempts.jsonl")
    assert attempts[1]["status"] == "proposer_error" and not attempts[1]["accepted"]
    assert not result.improved and result.stop_reason.startswith("iteration budget")


def test_token_budget_stops_the_llm(naive_ops, tmp_path):
    replies = [reply("EXPLAIN-a", sk.improved(3.0, "a")), reply("EXPLAIN-b", sk.improved(4.0, "b"))]
    with ScriptedOpenAI(replies, tokens_per_reply=5000) as server:
        config = OptimizeConfig(
            op="rmsnorm", proposers=["llm"], max_iters=5, device="cpu", max_tokens=4000,
            llm=LlmSettings(model="m", base_url=server.base_url, api_key="k", max_retries=0))
        result = optimize(naive_ops, config, tmp_path / "out", timer=speedup_timer)
    assert len(server.requests) == 1  # the first reply spent the whole budget
    assert result.stop_reason == "no proposer has anything left to try"
    assert result.improved

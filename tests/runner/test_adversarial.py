"""The adversarial corpus on the CPU: every cheat gets its status, every honest kernel passes."""

from __future__ import annotations

import pytest
from atrex.runner.evaluate import EvalOptions
from atrex.runner.model import Status

from tests.adversarial import corpus

CASES = corpus.load_cases()
CPU_CASES = [c for c in CASES if not c.gpu_only]


# Batches small enough to spread over test workers (pytest-xdist groups): each batch is one judge
# with one executor per candidate, evaluated once per worker and only when a test asks for it.
BATCHES = corpus.batches(CPU_CASES, size=8)
BATCH_OF = {case.name: index for index, batch in enumerate(BATCHES) for case in batch}


@pytest.fixture(scope="module")
def batch_reports(tmp_path_factory):
    done: dict[int, dict] = {}

    def reports_for(case: corpus.Case) -> dict:
        index = BATCH_OF[case.name]
        if index not in done:
            workdir = tmp_path_factory.mktemp(f"corpus-{index}")
            done[index] = corpus.run_batch(workdir, BATCHES[index],
                                           EvalOptions(device="cpu", timeout_s=20))
        return done[index]

    return reports_for


def test_corpus_is_big_enough():
    cheats = [c for c in CASES if c.name.startswith("cheats/")]
    assert len(cheats) >= 12


@pytest.mark.parametrize("case", [
    pytest.param(c, id=c.name, marks=pytest.mark.xdist_group(f"corpus-{BATCH_OF[c.name]}"))
    for c in CPU_CASES])
def test_case_gets_its_status(case, batch_reports):
    op = batch_reports(case)[case.name].op(case.op)
    detail = [(s.id, s.status.value, s.message) for s in op.shapes]
    assert op.status is Status(case.expected), detail
    kinds = {f.kind.value for f in op.findings}
    assert case.finding_ok(kinds), (kinds, detail)
    if case.expected == "pass":
        assert op.own_kernel_share is not None and op.own_kernel_share >= 0.9
        assert not [f for f in op.findings if f.file is None], op.findings


def test_a_gpu_run_cut_short_resumes_with_what_it_did_not_reach_or_got_wrong():
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "adversarial_gpu.py"
    spec = importlib.util.spec_from_file_location("adversarial_gpu", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cases = corpus.load_cases()[:4]
    earlier = {"cases": [{"case": cases[0].name, "ok": True},
                         {"case": cases[1].name, "ok": False}]}
    assert [c.name for c in module.still_to_run(cases, earlier)] == [c.name for c in cases[1:]]
    # the resumed run's JSON keeps the earlier expected row, saying where it came from
    assert module.carried_over(cases, earlier, "part1.json") == [
        {"case": cases[0].name, "ok": True, "resumed_from": "part1.json"}]
    assert module.carried_over(cases[1:], earlier, "part1.json") == []

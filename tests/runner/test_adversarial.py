"""The adversarial corpus on the CPU: every cheat gets its status, every honest kernel passes."""

from __future__ import annotations

import pytest

from runner.evaluate import EvalOptions
from runner.model import Status
from tests.adversarial import corpus

CASES = corpus.load_cases()
CPU_CASES = [c for c in CASES if not c.gpu_only]


@pytest.fixture(scope="module")
def cpu_reports(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("corpus")
    options = EvalOptions(device="cpu", timeout_s=20)
    reports = {}
    for batch in corpus.batches(CPU_CASES):
        reports.update(corpus.run_batch(workdir, batch, options))
    return reports


def test_corpus_is_big_enough():
    cheats = [c for c in CASES if c.name.startswith("cheats/")]
    assert len(cheats) >= 12


@pytest.mark.parametrize("case", CPU_CASES, ids=lambda c: c.name)
def test_case_gets_its_status(case, cpu_reports):
    op = cpu_reports[case.name].op(case.op)
    detail = [(s.id, s.status.value, s.message) for s in op.shapes]
    assert op.status is Status(case.expected), detail
    kinds = {f.kind.value for f in op.findings}
    assert case.finding_ok(kinds), (kinds, detail)
    if case.expected == "pass":
        assert op.own_kernel_share is not None and op.own_kernel_share >= 0.9
        assert not [f for f in op.findings if f.file is None], op.findings

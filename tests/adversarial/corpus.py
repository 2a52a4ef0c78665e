"""The adversarial corpus: cheating, crashing and honest candidates with the verdict each must get.

Every candidate file starts with a header line
    # atrex-test: op=<base op> expected=<status> [finding=<kind>] [isolate=yes] [gpu=yes]
    #             [gpu_expected=<status>|<status>] [gpu_finding=<kind>|<kind>]
`gpu_expected` is what a GPU run accepts where it differs: a cheat that needs a CUDA graph's
input copies is honest when the GPU shape is timed call by call, and `pass` is then right (such a
`pass` needs no finding). `gpu_finding` likewise, where a GPU run's many more timed repetitions
let another layer fire first (an input doubled in place each call overflows to NaN before the
first recheck compares it; a graph cheat timed in a replay, which the judge does when another
contestant of the batch is launch-bound, is caught by the calls on new values taking longer
than the replayed ones, `output_cache`, before the recheck).
`isolate` candidates patch process-wide state or kill the worker, so they get a worker of their
own; the rest of an op's candidates share one worker (several labels in one evaluation).
Used by tests/runner/test_adversarial.py (CPU) and benchmarks/adversarial_gpu.py (H200).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from atrex.runner.evaluate import EvalOptions, evaluate
from atrex.runner.model import Report
from atrex.runner.repo import load_repo
from atrex.runner.sandbox import CandidateRef

HERE = Path(__file__).resolve().parent
GROUPS = ("cheats", "crashes", "honest")


@dataclass(frozen=True)
class Case:
    name: str
    path: Path
    op: str
    expected: str
    finding: str | None  # a finding kind the verdict must carry; "a|b" accepts either

    isolate: bool
    gpu_only: bool
    gpu_expected: str | None = None
    gpu_finding: str | None = None

    def finding_ok(self, kinds: set[str], device: str = "cpu") -> bool:
        wanted = self.gpu_finding if device == "cuda" and self.gpu_finding else self.finding
        return wanted is None or bool(set(wanted.split("|")) & kinds)

    def status_ok(self, status: str, device: str) -> bool:
        accepted = self.gpu_expected if device == "cuda" and self.gpu_expected else self.expected
        return status in accepted.split("|")

    def verdict_ok(self, status: str, kinds: set[str], device: str) -> bool:
        gpu_only_pass = status == "pass" and "pass" not in self.expected.split("|")
        return self.status_ok(status, device) and (gpu_only_pass
                                                    or self.finding_ok(kinds, device))


def load_cases() -> list[Case]:
    cases = []
    for group in GROUPS:
        for path in sorted((HERE / group).glob("*.py")):
            if path.name.startswith("_"):
                continue
            header = path.read_text().splitlines()[0]
            if not header.startswith("# atrex-test:"):
                raise ValueError(f"{path}: first line must be the '# atrex-test:' header")
            fields = dict(item.split("=", 1) for item in header.split(":", 1)[1].split())
            cases.append(Case(name=f"{group}/{path.stem}", path=path, op=fields["op"],
                              expected=fields["expected"], finding=fields.get("finding"),
                              isolate=fields.get("isolate") == "yes",
                              gpu_only=fields.get("gpu") == "yes",
                              gpu_expected=fields.get("gpu_expected"),
                              gpu_finding=fields.get("gpu_finding")))
    return cases


def build_repo(workdir: Path) -> Path:
    """A kernel repository with the corpus's base operators (honest kernels)."""
    repo = workdir / "repo"
    if not repo.exists():
        shutil.copytree(HERE / "ops", repo)
    return repo


def candidate_dir(workdir: Path, case: Case) -> Path:
    """The candidate as it would sit in a repository: beside its op's reference files."""
    target = workdir / "candidates" / case.name.replace("/", "__")
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(HERE / "ops" / case.op, target)
    for helper in (HERE / "cheats").glob("_*.py"):
        shutil.copy(helper, target / helper.name)
    shutil.copy(case.path, target / "kernel.py")
    return target


def batches(cases: list[Case], size: int | None = None) -> list[list[Case]]:
    """Shared-judge batches per op (of at most `size` candidates), plus one batch per isolated
    case."""
    shared: dict[str, list[Case]] = {}
    result = []
    for case in cases:
        if case.isolate:
            result.append([case])
        else:
            shared.setdefault(case.op, []).append(case)
    chunks = []
    for group in shared.values():
        step = size or len(group)
        chunks += [group[i:i + step] for i in range(0, len(group), step)]
    return chunks + result


def run_batch(workdir: Path, batch: list[Case], options: EvalOptions) -> dict[str, Report]:
    repo = load_repo(build_repo(workdir), only_ops=[batch[0].op])
    dirs = [candidate_dir(workdir, case) for case in batch]
    plan = {batch[0].op: [CandidateRef(case.name, d / "kernel.py", d)
                          for case, d in zip(batch, dirs, strict=True)]}
    return evaluate(repo, plan, options)

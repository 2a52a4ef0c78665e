"""Changes a pull request makes to what judges a kernel, so that a PR cannot grade itself.

An operator's kernel is graded by its `reference.py` and `input.py` (the oracle), its shapes
(`shapes.json`), the weights in `metadata.json`, and the tolerances and thresholds of `atrex.toml`.
A PR that edits those together with the kernel is graded by rules it wrote. `judging_changes`
lists every such change between the merge base and the head (old -> new for numbers), each with a
`Kind`. The bot then (bot.prcheck) also judges the head kernel by the base's oracle and rules where
the interfaces agree (the stricter verdict decides, `stricter`), and a change that can raise a
grade without changing a kernel, namely a looser tolerance or threshold, a dropped or changed
shape, re-weighting, a removed operator, or an interface the base's oracle cannot judge, makes the
check run's conclusion `action_required` until a maintainer approves that commit (`gate`).

Pure functions of loaded repositories (runner.repo.RepoSpec) and reports; no GitHub, no git.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from atrex.runner import astscan
from atrex.runner.config import CONFIG_NAME, RepoConfig
from atrex.runner.model import Report, Status
from atrex.runner.repo import OpSpec, RepoSpec

from .verdict import FAILURE, STATUS_TEXT, Judgement, NotEvaluated, OpComparison, judge

ACTION_REQUIRED = "action_required"
CONFIG_SCOPE = CONFIG_NAME


class Kind(StrEnum):
    ORACLE = "oracle code changed"  # reference.py / input.py (or a module they import)
    LOOSER = "looser"
    TIGHTER = "stricter"
    SHAPE_ADDED = "shape added"
    SHAPE_DROPPED = "shape dropped"
    SHAPE_CHANGED = "shape changed"
    REWEIGHTED = "re-weighted"
    OP_REMOVED = "operator removed"
    INTERFACE = "interface changed"

    @property
    def needs_approval(self) -> bool:
        return self in _NEEDS_APPROVAL


# What can raise a grade without a better kernel. A changed oracle (ORACLE) is checked instead:
# the head kernel is also judged by the base's oracle. INTERFACE means it could not be.
_NEEDS_APPROVAL = frozenset({Kind.LOOSER, Kind.SHAPE_DROPPED, Kind.SHAPE_CHANGED,
                             Kind.REWEIGHTED, Kind.OP_REMOVED, Kind.INTERFACE})


@dataclass(frozen=True)
class JudgingChange:
    scope: str  # the operator, or "atrex.toml" for repository-wide settings
    what: str  # "reference.py", "tolerances.bfloat16.atol", "shape cpu-small", ...
    kind: Kind
    old: str | None = None  # numbers and values as text; None: absent on that side
    new: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"scope": self.scope, "what": self.what, "kind": self.kind.value,
                "old": self.old, "new": self.new}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JudgingChange:
        return cls(data["scope"], data["what"], Kind(data["kind"]), data.get("old"),
                   data.get("new"))


def _num(value: float | int | None) -> str | None:
    return None if value is None else f"{value:g}"


def _compare(scope: str, what: str, old: float | None, new: float | None,
             looser_when_larger: bool) -> list[JudgingChange]:
    if old == new:
        return []
    if old is None or new is None:
        return [JudgingChange(scope, what, Kind.REWEIGHTED, _num(old), _num(new))]
    looser = (new > old) == looser_when_larger
    return [JudgingChange(scope, what, Kind.LOOSER if looser else Kind.TIGHTER, _num(old),
                          _num(new))]


# --- atrex.toml --------------------------------------------------------------------------------

# reference_dtype: computing the expected output in lower precision is a looser test
_REFERENCE_RANK = {"float64": 2, "float32": 1, "native": 0}


def config_changes(base: RepoConfig, head: RepoConfig, ops: list[str]) -> list[JudgingChange]:
    """Tolerances and thresholds, repository-wide and per operator in `ops`."""
    s = CONFIG_SCOPE
    found = [
        *_compare(s, "thresholds.trials", base.trials, head.trials, False),
        *_compare(s, "thresholds.own_kernel_share", base.own_kernel_share,
                  head.own_kernel_share, False),
        *_compare(s, "thresholds.regression", base.regression, head.regression, True),
        *_compare(s, "thresholds.timeout_s", base.timeout_s, head.timeout_s, True),
        *_reference_dtype(s, "thresholds.reference_dtype", base.reference_dtype,
                          head.reference_dtype),
    ]
    for dtype in sorted(set(base.tolerances) | set(head.tolerances)):
        found += _tolerance(s, f"tolerances.{dtype}", base.tolerances.get(dtype),
                            head.tolerances.get(dtype))
    for op in ops:
        found += _op_config(op, base, head)
    return found


def _reference_dtype(scope: str, what: str, old: str, new: str) -> list[JudgingChange]:
    if old == new:
        return []
    kind = Kind.LOOSER if _REFERENCE_RANK[new] < _REFERENCE_RANK[old] else Kind.TIGHTER
    return [JudgingChange(scope, what, kind, old, new)]


def _tolerance(scope: str, what: str, old, new) -> list[JudgingChange]:
    if old is None or new is None:  # a dtype only one side knows: nothing is judged by it there
        return [] if old is new else [JudgingChange(
            scope, what, Kind.LOOSER if new is not None else Kind.TIGHTER,
            None if old is None else json.dumps(dataclasses.asdict(old)),
            None if new is None else json.dumps(dataclasses.asdict(new)))]
    return [c for name in ("atol", "rtol", "rel_l2")
            for c in _compare(scope, f"{what}.{name}", getattr(old, name), getattr(new, name),
                              True)]


def _op_config(op: str, base: RepoConfig, head: RepoConfig) -> list[JudgingChange]:
    scope = f"{CONFIG_SCOPE} [ops.{op}]"
    b, h = base.ops.get(op), head.ops.get(op)
    found = []
    for dtype in sorted(set(b.tolerances if b else {}) | set(h.tolerances if h else {})):
        found += _tolerance(scope, f"tolerances.{dtype}", base.tolerance(op, dtype),
                            head.tolerance(op, dtype))
    if (b and b.reference_dtype) or (h and h.reference_dtype):
        found += _reference_dtype(scope, "reference_dtype", base.reference_dtype_for(op),
                                  head.reference_dtype_for(op))
    if (b and b.timeout_s) or (h and h.timeout_s):
        found += _compare(scope, "timeout_s", base.timeout_for(op), head.timeout_for(op), True)
    old_weight, new_weight = b.weight if b else None, h.weight if h else None
    if old_weight != new_weight:
        found.append(JudgingChange(scope, "weight", Kind.REWEIGHTED, _num(old_weight),
                                   _num(new_weight)))
    return found


# --- operators ---------------------------------------------------------------------------------

def _oracle_files(op: OpSpec) -> dict[str, Path]:
    """reference.py, input.py and the repository modules they import, by path relative to the
    operator's directory."""
    root = op.path.resolve()
    files: dict[str, Path] = {}
    queue = [root / "reference.py", root / "input.py"]
    while queue:
        path = queue.pop()
        if not path.is_file():
            continue
        rel = _relative(path, root)
        if rel in files:
            continue
        files[rel] = path
        queue.extend(astscan.local_imports(path, root.parent))
    return files


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return "../" + path.relative_to(root.parent).as_posix()


def oracle_code_changes(base: OpSpec, head: OpSpec) -> list[JudgingChange]:
    old, new = _oracle_files(base), _oracle_files(head)
    return [JudgingChange(head.name, rel, Kind.ORACLE,
                          "present" if rel in old else None, "present" if rel in new else None)
            for rel in sorted(set(old) | set(new))
            if rel not in old or rel not in new or old[rel].read_bytes() != new[rel].read_bytes()]


def interface(op: OpSpec) -> tuple[list[str], list[str] | None]:
    """(Model.forward parameters, Model.__init__ parameters) of the operator's reference."""
    init = astscan.method_params(op.path / "reference.py", "Model", "__init__", required=False)
    return list(op.forward_params), None if init is None else list(init.names)


def _signature(params: tuple[list[str], list[str] | None]) -> str:
    forward, init = params
    text = f"forward({', '.join(forward)})"
    return text if init is None else f"__init__({', '.join(init)}) {text}"


def interface_change(base: OpSpec, head: OpSpec) -> JudgingChange | None:
    old, new = interface(base), interface(head)
    if old == new:
        return None
    return JudgingChange(head.name, "reference.py Model", Kind.INTERFACE, _signature(old),
                         _signature(new))


def _kwargs(shape) -> str:
    text = json.dumps({"input_kwargs": shape.input_kwargs, "init_kwargs": shape.init_kwargs},
                      sort_keys=True)
    return text if len(text) <= 120 else text[:119] + "…"


def shape_changes(base: OpSpec, head: OpSpec) -> list[JudgingChange]:
    old, new = {s.id: s for s in base.shapes}, {s.id: s for s in head.shapes}
    found = []
    for sid in sorted(set(old) | set(new)):
        b, h = old.get(sid), new.get(sid)
        what = f"shape {sid}"
        if h is None:
            found.append(JudgingChange(head.name, what, Kind.SHAPE_DROPPED, _kwargs(b), None))
        elif b is None:
            found.append(JudgingChange(head.name, what, Kind.SHAPE_ADDED, None, _kwargs(h)))
        elif (b.input_kwargs, b.init_kwargs) != (h.input_kwargs, h.init_kwargs):
            found.append(JudgingChange(head.name, what, Kind.SHAPE_CHANGED, _kwargs(b),
                                       _kwargs(h)))
        else:
            gone = [t for t in b.targets if t not in h.targets]
            added = [t for t in h.targets if t not in b.targets]
            if gone or added:
                found.append(JudgingChange(head.name, f"{what} targets",
                                           Kind.SHAPE_DROPPED if gone else Kind.SHAPE_ADDED,
                                           ",".join(b.targets), ",".join(h.targets)))
    return found


def weight_changes(base: OpSpec, head: OpSpec) -> list[JudgingChange]:
    """metadata.json: what weighs the operator and its shapes, and what sets their floors."""
    name = head.name
    found = []

    def changed(what: str, old, new) -> None:
        if old != new:
            found.append(JudgingChange(name, what, Kind.REWEIGHTED,
                                       old if isinstance(old, str) or old is None else _num(old),
                                       new if isinstance(new, str) or new is None else _num(new)))

    changed("importance_score", base.importance, head.importance)
    changed("trace_scale", base.trace_scale, head.trace_scale)
    changed("flop_dtype", base.flop_dtype, head.flop_dtype)
    old_shapes = {s.id: s for s in base.shapes}
    for shape in head.shapes:
        b = old_shapes.get(shape.id)
        if b is None:
            continue
        changed(f"shape {shape.id} weight", b.weight, shape.weight)
        changed(f"shape {shape.id} declared flops", b.flops, shape.flops)
        changed(f"shape {shape.id} declared bytes", b.bytes, shape.bytes)
    newly_mutated = sorted(set(head.mutates) - set(base.mutates))
    if newly_mutated:
        found.append(JudgingChange(name, "mutates (inputs it may change in place)", Kind.LOOSER,
                                   ",".join(base.mutates) or None, ",".join(head.mutates)))
    return found


def op_changes(base: OpSpec, head: OpSpec) -> list[JudgingChange]:
    found = oracle_code_changes(base, head)
    moved = interface_change(base, head)
    if moved is not None:
        found.append(moved)
    return found + shape_changes(base, head) + weight_changes(base, head)


def judging_changes(base: RepoSpec, head: RepoSpec, ops: list[str]) -> list[JudgingChange]:
    """Everything that judges the operators `ops` (the ones the PR affects) and that differs
    between the merge base and the head, plus operators the head removed."""
    base_ops = {op.name: op for op in base.ops}
    head_ops = {op.name: op for op in head.ops}
    found = config_changes(base.config, head.config, [o for o in ops if o in base_ops])
    for name in ops:
        if name in base_ops and name in head_ops:
            found += op_changes(base_ops[name], head_ops[name])
    for name in sorted(set(base_ops) - set(head_ops)):
        found.append(JudgingChange(name, "operator", Kind.OP_REMOVED,
                                   f"{len(base_ops[name].shapes)} shapes", None))
    return found


def affects(change: JudgingChange, op: str) -> bool:
    return change.scope == op or change.scope == CONFIG_SCOPE or \
        change.scope == f"{CONFIG_SCOPE} [ops.{op}]"


# --- the base's oracle -------------------------------------------------------------------------

def ops_for_base_oracle(changes: list[JudgingChange], base: RepoSpec,
                        ops: list[str]) -> list[str]:
    """The affected operators the base's oracle should judge too: something that judges them
    changed, the base has them, and their interfaces agree."""
    base_ops = {op.name for op in base.ops}
    blocked = {c.scope for c in changes if c.kind is Kind.INTERFACE}
    return [name for name in ops if name in base_ops and name not in blocked
            and any(affects(c, name) and c.kind is not Kind.SHAPE_ADDED for c in changes)]


@dataclass
class JudgingReport:
    """What changed in how kernels are judged, and the verdict of the base's oracle and rules."""

    changes: list[JudgingChange] = field(default_factory=list)
    base_rules: Judgement | None = None  # the head kernel judged by the base's oracle and rules
    head_report: Report | None = None  # head kernel, base oracle
    base_report: Report | None = None  # base kernel, base oracle (for the base's regression)
    base_threshold: float = 0.05
    notes: list[str] = field(default_factory=list)
    # declared shapes of the base's operators this machine did not run (bot.prcheck.not_evaluated)
    not_evaluated: list[NotEvaluated] = field(default_factory=list)
    approved_by: str | None = None  # set when published: the maintainer who approved the SHA
    approvable: bool = True  # False in the GitHub Action: nothing there records an approval

    @property
    def needs_approval(self) -> bool:
        return any(c.kind.needs_approval for c in self.changes)

    @property
    def approval_reasons(self) -> list[JudgingChange]:
        return [c for c in self.changes if c.kind.needs_approval]

    def to_dict(self) -> dict[str, Any]:
        return {"changes": [c.to_dict() for c in self.changes],
                "head": self.head_report.to_dict() if self.head_report else None,
                "base": self.base_report.to_dict() if self.base_report else None,
                "base_threshold": self.base_threshold, "notes": self.notes,
                "not_evaluated": [n.to_dict() for n in self.not_evaluated],
                "approvable": self.approvable}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JudgingReport:
        head = Report.from_dict(data["head"]) if data.get("head") else None
        base = Report.from_dict(data["base"]) if data.get("base") else None
        threshold = data.get("base_threshold", 0.05)
        skipped = [NotEvaluated.from_dict(n) for n in data.get("not_evaluated") or []]
        return cls([JudgingChange.from_dict(c) for c in data.get("changes", [])],
                   judge(head, base, threshold, skipped) if head else None, head, base,
                   threshold, list(data.get("notes", [])), skipped,
                   approvable=data.get("approvable", True))


def stricter(head_rules: Judgement, base_rules: Judgement | None,
             title: Callable[[list[OpComparison]], str]) -> Judgement:
    """The head's judgement, with an operator failed where the base's oracle and rules fail it
    and the head's do not; `title` recomputes the title for the combined comparisons."""
    if base_rules is None or not base_rules.ops:
        return head_rules
    by_name = {c.name: c for c in base_rules.ops}
    ops = []
    for c in head_rules.ops:
        strict = by_name.get(c.name)
        if strict is not None and strict.failed and not c.failed:
            c = dataclasses.replace(c, failed=True, verdict="❌ by the base's oracle and rules: "
                                    + strict.verdict.removeprefix("❌ "),
                                    regression=strict.regression)
        ops.append(c)
    if not any(c.failed for c in ops):
        return head_rules
    return dataclasses.replace(head_rules, conclusion=FAILURE, title=title(ops), ops=ops,
                               reason=None)


def base_oracle_status(report: JudgingReport, op: str) -> str | None:
    """How the base's oracle and rules judged the head kernel of `op`, as text (None: not run)."""
    if report.base_rules is None:
        return None
    for c in report.base_rules.ops:
        if c.name == op:
            return "pass" if not c.failed else (
                STATUS_TEXT[c.head.status] if c.head.status is not Status.PASS else
                c.verdict.removeprefix("❌ "))
    return None


def gate(conclusion: str, report: JudgingReport | None) -> str:
    """The check run's conclusion: `action_required` while a change that needs approval is not
    approved, unless the verdict already fails."""
    if report is None or not report.needs_approval or report.approved_by:
        return conclusion
    return conclusion if conclusion == FAILURE else ACTION_REQUIRED

"""Counting the work of one reference call: FLOPs by class and the bytes it must touch.

    counter = WorkCounter(tensor_class=None)
    counter.add_inputs(inputs, model)
    with counter:
        out = model(**inputs)
    work = counter.result(named_outputs)

Two modes sit around the call: a TorchFunctionMode sees ``F.scaled_dot_product_attention``
(counted on its unmasked pairs, whatever kernel the device picks underneath) and the values the
reference pulls into Python (``.tolist()``); a TorchDispatchMode sees every aten op and feeds the
lineage rules (runner.work.rules) and the FLOP rules (runner.work.flops). A failure inside the
counter never breaks the reference: that op is counted as reading everything, and named.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from ..dtypes import peak_class
from . import flops as flop_rules
from . import rules, zeros
from .classes import unit, vector_class
from .lineage import TouchedBytes, Tracker, detach, merge

_PRECISION_ORDER = ("fp8", "int8", "bf16", "fp32", "fp64")
# An op whose output has at least this many elements counts FLOPs only for the elements the
# outputs depend on (a reference that dequantizes every expert but uses eight, a matmul whose
# upper triangle a causal mask discards). Smaller ops count whole: their dead work is too small
# to move a floor, and tracking them would slow down long loops.
LIVE_MIN_ELEMENTS = 1


@dataclass
class OpWork:
    """FLOPs of one kind of operation, for the audit."""

    op: str
    cls: str
    flops: float
    calls: int
    rule: str


@dataclass
class WorkCount:
    flops: dict[str, float]
    ops: list[OpWork]
    touched: TouchedBytes
    tensor_class: str

    @property
    def bytes_read(self) -> int:
        return self.touched.read_bytes

    @property
    def bytes_written(self) -> int:
        return self.touched.write_bytes

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def partial(self) -> bool:
        """True when some tensor counts only the rows the reference touched."""
        return any(c.rule in ("touched", "rewritten", "unread")
                   for c in self.touched.reads + self.touched.writes)


@dataclass
class _Tally:
    matrix: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    vector: dict[tuple[str, str, str], list[float]] = field(default_factory=dict)

    def add(self, f: flop_rules.Flops) -> None:
        if f.matrix:
            entry = self.matrix.setdefault((f.op, f.rule), [0.0, 0])
            entry[0] += f.matrix
            entry[1] += 1
        if f.vector and f.vector_class:
            entry = self.vector.setdefault((f.op, f.vector_class, "elementwise table" if
                                            f.rule.startswith("torch") or f.rule.startswith(
                                                "matmul") else f.rule), [0.0, 0])
            entry[0] += f.vector
            entry[1] += 1


class WorkCounter:
    def __init__(self, tensor_class: str | None = None):
        self.tracker = Tracker()
        self.tally = _Tally()
        self.tensor_class = tensor_class
        self.suppressed = 0
        self._pending: dict[int, flop_rules.Flops] = {}  # work source -> its FLOPs
        # wall time spent counting, not running the reference (CPU clocks cost a system call each on
        # some VMs, over a millisecond: the caller scales this by its run's CPU / wall ratio)
        self.overhead_s = 0.0
        self._stack: ExitStack | None = None
        self._input_classes: set[str] = set()

    # ---- set-up ------------------------------------------------------------------------------

    def add_inputs(self, inputs: dict, model=None) -> None:
        with _quiet():
            for name, value in inputs.items():
                if isinstance(value, torch.Tensor):
                    self._add_source(name, value)
            if isinstance(model, torch.nn.Module):
                for name, p in model.named_parameters():
                    self._add_source(f"param:{name}", p)
                for name, b in model.named_buffers():
                    self._add_source(f"buffer:{name}", b)

    def _add_source(self, name: str, t: torch.Tensor) -> None:
        self.tracker.add_source(name, t)
        if t.is_floating_point() or t.dtype == torch.int8:
            self._input_classes.add(peak_class(str(t.dtype)))

    def __enter__(self) -> WorkCounter:
        self._stack = ExitStack()
        self._stack.enter_context(_Functions(self))
        self._stack.enter_context(_Dispatch(self))
        return self

    def __exit__(self, *exc) -> None:
        stack, self._stack = self._stack, None
        stack.__exit__(*exc)

    # ---- what the modes call -----------------------------------------------------------------

    def on_op(self, func, args, kwargs, out) -> None:
        began = time.perf_counter()
        with _quiet():
            try:
                rules.apply(self.tracker, func, args, kwargs, out)
            except Exception:  # noqa: BLE001 - a counter bug must not break the reference
                self.tracker.conservative.add(f"aten.{func._overloadpacket.__name__} (error)")
                _whole(self.tracker, args, kwargs, out)
            try:
                counted = flop_rules.count(func, args, kwargs, out)
            except Exception:  # noqa: BLE001
                counted = None
                self.tracker.conservative.add(f"flops of aten.{func._overloadpacket.__name__}")
            inplace = any(out is t for t in rules.tensors_in((args, kwargs)))
            counted = self._skip_known_zeros(func, args, kwargs, counted)
            if counted is not None and (inplace or not self._defer(counted, out)):
                self.tally.add(counted)
        self.overhead_s += time.perf_counter() - began

    def _skip_known_zeros(self, func, args, kwargs, counted):
        """A matmul by known zeros (masked attention probabilities) skips them."""
        if counted is None or not counted.matrix or func._overloadpacket.__name__ not in (
                "mm", "bmm", "addmm", "baddbmm"):
            return counted
        b = rules.bind(func, args, kwargs)
        a = b.get("mat1", b.get("batch1", b.get("self")))
        w = b.get("mat2", b.get("batch2"))
        try:
            share = zeros.matmul_share(self.tracker.consts, a, w)
        except (RuntimeError, ValueError, IndexError):
            return counted
        if share >= 1.0:
            return counted
        return flop_rules.Flops(counted.op, counted.matrix * share, counted.vector,
                                counted.vector_class, f"{counted.rule}, known zeros skipped")

    def _defer(self, counted: flop_rules.Flops, out) -> bool:
        """Count a large op's FLOPs later, on the elements the outputs turn out to need."""
        if not isinstance(out, torch.Tensor) or out.numel() < LIVE_MIN_ELEMENTS:
            return False
        if out in self.tracker.lineage and any(d.copy for d in self.tracker.own(out)):
            return False
        work = self.tracker.add_work(counted.op, out)
        # what every element needs whatever its place is needed iff the result is: it moves
        # out of the lineage into the graph (keeps lineages short in long loops)
        own = self.tracker.own(out)
        anywhere = [d for d in own if d.runs is not None or not any(
            d.map.depends_on(k) for k in range(d.map.nvis)) or self._broadcast_work(d)]
        # an earlier op's result read element for element in the same place (an elementwise
        # chain): the same positions of it are live as of this one
        same = [d for d in own if not any(d is a for a in anywhere) and self._same_place(d, work)]
        placed = tuple(d for d in own if not any(d is a for a in anywhere + same))
        if anywhere:
            self.tracker.edges[work.src] = anywhere
        if same:
            self.tracker.same_place[work.src] = [d.src for d in same]
        self.tracker.lineage[out] = merge(placed, (work,))
        self._pending[work.src] = counted
        return True

    def _broadcast_work(self, dep) -> bool:
        """An earlier result broadcast over some of this one's dims (a per-row scale): it is
        counted live wherever this result is live at all. That can only over-count it, and it
        is smaller than this result by the broadcast factor."""
        if dep.src < 0 or self.tracker.sources[dep.src].kind != "work":
            return False
        m = dep.map
        return any(m.shape[k] > 1 and not m.depends_on(k) for k in range(m.nvis))

    def _same_place(self, dep, work) -> bool:
        if dep.src < 0 or dep.offsets is not None or dep.runs is not None:
            return False
        if self.tracker.sources[dep.src].kind != "work":
            return False
        m, w = dep.map, work.map
        return (m.shape == w.shape and m.nvis == w.nvis and not m.tables and m.offset == 0
                and set(m.affine) == set(w.affine))

    def attention(self, func, args, kwargs):
        names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
                 "enable_gqa")
        b = dict(zip(names, args, strict=False))
        b.update(kwargs)
        self.suppressed += 1
        try:
            out = func(*args, **kwargs)
        finally:
            self.suppressed -= 1
        began = time.perf_counter()
        with _quiet():
            q, k, v = b["query"], b["key"], b["value"]
            mask = b.get("attn_mask")
            try:
                matrix, vector, rule = flop_rules.sdpa_flops(q, k, v, mask,
                                                             bool(b.get("is_causal")))
                self.tally.add(flop_rules.Flops("F.scaled_dot_product_attention", matrix,
                                                vector, vector_class(q.dtype), rule))
            except Exception:  # noqa: BLE001
                self.tracker.conservative.add("flops of F.scaled_dot_product_attention")
            try:
                self.tracker.set(out, rules.attention_lineage(self.tracker, q, k, v, mask,
                                                              tuple(out.shape)))
            except Exception:  # noqa: BLE001
                self.tracker.conservative.add("F.scaled_dot_product_attention (error)")
                _whole(self.tracker, (q, k, v, mask), {}, out)
        self.overhead_s += time.perf_counter() - began
        return out

    def looked_at(self, t: torch.Tensor) -> None:
        with _quiet():
            self.tracker.commit(self.tracker.get(t))

    # ---- the result ------------------------------------------------------------------------

    def result(self, outputs: dict) -> WorkCount:
        with _quiet():
            named = {k: v for k, v in outputs.items() if isinstance(v, torch.Tensor)}
            touched = self.tracker.summary(named)
        for index, counted in self._pending.items():
            live, total = touched.live.get(index, (0, 1))
            share = live / total if total else 0.0
            if share >= 1.0:
                self.tally.add(counted)
            elif share > 0.0:
                self.tally.add(_scaled(counted, share))
        cls = self.tensor_class or _lowest(self._input_classes)
        flops: dict[str, float] = {}
        ops: list[OpWork] = []
        for (op, rule), (count, calls) in self.tally.matrix.items():
            flops[cls] = flops.get(cls, 0.0) + count
            ops.append(OpWork(op, cls, count, int(calls), rule))
        for (op, vcls, rule), (count, calls) in self.tally.vector.items():
            flops[vcls] = flops.get(vcls, 0.0) + count
            ops.append(OpWork(op, vcls, count, int(calls), rule))
        ops.sort(key=lambda o: (unit(o.cls), -o.flops))
        return WorkCount(flops=flops, ops=ops, touched=touched, tensor_class=cls)


def _scaled(counted: flop_rules.Flops, share: float) -> flop_rules.Flops:
    return flop_rules.Flops(counted.op, counted.matrix * share, counted.vector * share,
                            counted.vector_class, f"{counted.rule}, live elements only")


def _lowest(classes: set[str]) -> str:
    for cls in _PRECISION_ORDER:
        if cls in classes:
            return cls
    return "fp32"


def _whole(tracker: Tracker, args, kwargs, out) -> None:
    lineages = [tracker.get(t) for t in rules.tensors_in((args, kwargs))]
    for o in rules.outputs_of(out):
        tracker.set(o, merge(*(detach(lin, o.shape) for lin in lineages)))


class _quiet:
    """Bookkeeping runs on real tensors outside every mode (ours and any below us)."""

    def __enter__(self):
        self._modes = _disable_current_modes()
        self._modes.__enter__()
        self._fn = torch._C.DisableTorchFunction()
        self._fn.__enter__()
        return self

    def __exit__(self, *exc):
        self._fn.__exit__(*exc)
        self._modes.__exit__(*exc)


class _Dispatch(TorchDispatchMode):
    def __init__(self, counter: WorkCounter):
        super().__init__()
        self.counter = counter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not self.counter.suppressed:
            self.counter.on_op(func, args, kwargs, out)
        return out


_LOOKS = {"tolist", "numpy", "__array__", "__index__"}


class _Functions(TorchFunctionMode):
    def __init__(self, counter: WorkCounter):
        super().__init__()
        self.counter = counter

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.counter.suppressed:
            return func(*args, **kwargs)
        if func is F.scaled_dot_product_attention:
            return self.counter.attention(func, args, kwargs)
        out = func(*args, **kwargs)
        if getattr(func, "__name__", "") in _LOOKS and args and isinstance(args[0],
                                                                          torch.Tensor):
            self.counter.looked_at(args[0])
        return out

"""The judge's knowledge of one operator: its reference, its input generator, and per shape the
expected output structure, the work an ideal kernel must do, and high-precision reference outputs
for any inputs the judge drew. Seeds are drawn here, at the moment of use, and never leave.
"""

from __future__ import annotations

import copy
import secrets
import time
from dataclasses import dataclass, field

import torch

from ..config import Tolerance
from ..contract.storage import copy_keeping_aliases
from ..dtypes import peak_class
from ..model import WorkSource
from ..repo import OpSpec, ShapeSpec
from ..work import classes
from ..work.counter import WorkCount, WorkCounter
from .compare import Comparison, Expected, compare_outputs, expected_structure, flatten_output


@dataclass
class WorkTally:
    """FLOPs by class and bytes moved, for roofline floors, and where each number came from
    ("counted", "touched": some tensors count only the rows touched, "declared")."""

    flops: dict[str, float] = field(default_factory=dict)
    bytes: float = 0.0
    bytes_read: float | None = None
    bytes_written: float | None = None
    flops_source: WorkSource = WorkSource.COUNTED
    bytes_source: WorkSource = WorkSource.COUNTED

    def add(self, peak: str, flops: float) -> None:
        if flops:
            self.flops[peak] = self.flops.get(peak, 0.0) + flops


@dataclass
class JudgeContext:
    """One operator's job, as the evaluator gave it."""

    op: OpSpec
    device_type: str
    trials: int
    tolerances: dict[str, Tolerance]
    reference_dtype: str
    own_share_threshold: float
    peaks: dict
    time: bool
    reference_module: object = None
    input_module: object = None
    config_path: str = "atrex.toml"  # where tolerances are set, for configuration errors
    # what one timed repetition's fixed cost took per device hold before any candidate was
    # loaded (judge/timing.py clean_fixed_costs): a ceiling on what the judge subtracts later
    clean_fixed_ms: dict = field(default_factory=dict)

    def tolerance_for(self, dtype: torch.dtype) -> Tolerance | None:
        return self.tolerances.get(str(dtype).replace("torch.", ""))

    def check_tolerances(self, shape_id: str, expected: dict[str, Expected]) -> None:
        """Every floating output needs a tolerance before any candidate is judged: a missing one
        is the repository's configuration to fix, not the candidate's failure."""
        for name, want in expected.items():
            if not (want.dtype.is_floating_point or want.dtype.is_complex):
                continue
            if self.tolerance_for(want.dtype) is None:
                dtype = str(want.dtype).replace("torch.", "")
                raise FormatProblem(
                    self.config_path, f"tolerances.{dtype}",
                    f"no tolerance for {dtype}, the dtype of output {name!r} (shape {shape_id}): "
                    f"set [tolerances.{dtype}] atol, rtol, rel_l2 in {self.config_path}, or "
                    f"[ops.{self.op.name}.tolerances.{dtype}] for this operator only")

    def synchronize(self) -> None:
        if self.device_type == "cuda":
            torch.cuda.synchronize()

    def sol_ms(self, tally: WorkTally) -> float:
        """Roofline floor of some work against the job's peaks (datasheet)."""
        return classes.sol_ms(tally.flops, tally.bytes, self.peaks["tflops"],
                              self.peaks["bandwidth_tbps"])


def new_seed() -> int:
    return secrets.randbits(62)


def clone_inputs(inputs: dict) -> dict:
    """A copy of the inputs; inputs sharing a storage share the copy's (contract/storage.py)."""
    return copy_keeping_aliases(inputs)


def call(model, inputs: dict):
    with torch.no_grad():
        return model(**inputs)


class ShapeOracle:
    """One shape: input draws, the reference in native and high precision, the expected output."""

    def __init__(self, ctx: JudgeContext, shape: ShapeSpec):
        self.ctx = ctx
        self.shape = shape
        self.mutates = list(ctx.op.mutates)
        self.device = torch.device(ctx.device_type)
        self.ref_model = build_model(ctx.reference_module.Model, shape.init_kwargs, self.device)
        self._hp_model = None
        self._hp_dtype: torch.dtype | None = None
        native_inputs = self.draw(new_seed())
        counter = WorkCounter(tensor_class=ctx.op.flop_dtype_class)
        call_inputs = clone_inputs(native_inputs)
        counter.add_inputs(call_inputs, self.ref_model)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        with counter:
            native_out = call(self.ref_model, call_inputs)
        ctx.synchronize()
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        # the counter's own bookkeeping is not the reference's host time
        self.reference_host_ms = cpu * max(0.0, 1.0 - counter.overhead_s / wall) * 1e3 if (
            wall > 0) else 0.0
        self.expected = expected_structure(native_out)
        for name in self.mutates:
            value = native_inputs[name]
            self.expected[f"input:{name}"] = Expected(tuple(value.shape), value.dtype,
                                                      value.device.type)
        ctx.check_tolerances(shape.id, self.expected)
        self.float_inputs = [k for k, v in native_inputs.items()
                             if isinstance(v, torch.Tensor) and v.is_floating_point()
                             and v.numel() > 0]
        self.work = self._work(counter, call_inputs, native_out)
        self.reference_sol_ms = ctx.sol_ms(self.work)

    def _work(self, counter: WorkCounter, inputs: dict, out) -> WorkTally:
        """The work an ideal kernel cannot avoid: FLOPs counted on the reference (matmuls and
        attention at the op's input precision, elementwise work on CUDA cores) and the bytes it
        must touch (runner.work); a shape's declared flops / bytes override the counts."""
        named = dict(flatten_output(out))
        named.update({f"input:{n}": inputs[n] for n in self.mutates})
        try:
            count = counter.result(named)
        except Exception:  # noqa: BLE001 - a counter failure: every tensor counts whole
            count = None
        tally = _tally(count, self._whole_tensors(inputs, named))
        if self.shape.flops is not None:
            rate_class = count.tensor_class if count is not None else _input_class(
                self._tensors(inputs))
            tally.flops = {rate_class: float(self.shape.flops)} if self.shape.flops else {}
            tally.flops_source = WorkSource.DECLARED
        if self.shape.bytes is not None:
            tally.bytes, tally.bytes_read, tally.bytes_written = float(self.shape.bytes), None, None
            tally.bytes_source = WorkSource.DECLARED
        return tally

    def _tensors(self, inputs: dict) -> list[torch.Tensor]:
        tensors = [v for v in inputs.values() if isinstance(v, torch.Tensor)]
        if isinstance(self.ref_model, torch.nn.Module):
            tensors += list(self.ref_model.parameters()) + list(self.ref_model.buffers())
        return tensors

    def _whole_tensors(self, inputs: dict, outputs: dict) -> tuple[float, float]:
        read = sum(t.numel() * t.element_size() for t in self._tensors(inputs))
        written = sum(t.numel() * t.element_size() for t in outputs.values()
                      if isinstance(t, torch.Tensor))
        return float(read), float(written)

    def draw(self, seed: int) -> dict:
        torch.manual_seed(seed)
        inputs = self.ctx.input_module._make_inputs(**self.shape.input_kwargs)
        _check_input_keys(self.ctx.op, inputs)
        return inputs

    def state(self) -> dict:
        """The reference's parameters, for candidates with the same parameter names."""
        if isinstance(self.ref_model, torch.nn.Module):
            return dict(self.ref_model.state_dict())
        return {}

    def reference(self, inputs: dict) -> dict:
        """The reference output in the highest precision that works, as named tensors (mutated
        inputs included as "input:<name>")."""
        for dtype in self._precisions():
            try:
                model = self._model_in(dtype)
                upcast = _upcast(inputs, dtype)
                out = flatten_output(call(model, upcast))
                out.update({f"input:{n}": upcast[n] for n in self.mutates})
                self._hp_dtype = dtype
                return out
            except (RuntimeError, NotImplementedError, TypeError):
                if dtype is None:
                    raise
                self._hp_model, self._hp_dtype = None, None
                continue
        raise AssertionError("unreachable")

    def native(self, inputs: dict) -> dict | None:
        """The reference at its native dtype on these inputs (as named tensors), for the error
        bound the framework itself sets; None when the oracle is the native run already, or the
        native run fails."""
        if self._hp_dtype is None:  # call after reference(): the oracle ran natively
            return None
        try:
            clone = clone_inputs(inputs)
            out = flatten_output(call(self.ref_model, clone))
        except (RuntimeError, NotImplementedError, TypeError):
            return None
        out.update({f"input:{n}": clone[n] for n in self.mutates})
        return out

    def masks(self, inputs: dict) -> dict | None:
        """Per output, the elements the operation defines, when the reference module says so:
        `defined_elements(inputs) -> {output name: bool tensor}` (names as compared: "out",
        "0", "input:<name>" for an in-place input). Elements outside are not compared."""
        define = getattr(self.ctx.reference_module, "defined_elements", None)
        if define is None:
            return None
        masks = define(clone_inputs(inputs))
        if not isinstance(masks, dict) or not all(
                isinstance(k, str) and isinstance(v, torch.Tensor) and v.dtype == torch.bool
                for k, v in masks.items()):
            raise FormatProblem(str(self.ctx.op.path / "reference.py"), "defined_elements",
                                "must return a dict of output name -> bool tensor")
        return masks

    def compare(self, flat: dict, inputs: dict) -> Comparison:
        """A candidate's flat outputs (in-place inputs as "input:<name>") against the oracle on
        these inputs, with the bound grounded in the native reference's own error."""
        reference = self.reference(inputs)
        return compare_outputs(flat, reference, self.ctx.tolerance_for, self.native(inputs),
                               self.masks(inputs))

    def _precisions(self) -> list[torch.dtype | None]:
        if self._hp_dtype is not None:
            return [self._hp_dtype]
        wanted = self.ctx.reference_dtype
        if wanted == "float64":
            return [torch.float64, torch.float32, None]
        if wanted == "float32":
            return [torch.float32, None]
        return [None]

    def _model_in(self, dtype: torch.dtype | None):
        if dtype is None:
            return self.ref_model
        if self._hp_model is None or self._hp_dtype != dtype:
            self._hp_model = copy.deepcopy(self.ref_model).to(dtype)
        return self._hp_model


_PRECISION_ORDER = ("fp8", "int8", "bf16", "fp32", "fp64")


def _input_class(tensors: list[torch.Tensor]) -> str:
    """The lowest floating precision among the op's inputs (fp32 when there is none)."""
    found = {peak_class(str(t.dtype)) for t in tensors
             if t.is_floating_point() or t.dtype == torch.int8}
    for cls in _PRECISION_ORDER:
        if cls in found:
            return cls
    return "fp32"


def _upcast(inputs: dict, dtype: torch.dtype | None) -> dict:
    if dtype is None:
        return clone_inputs(inputs)
    return copy_keeping_aliases(inputs, dtype_of=lambda t: dtype if t.is_floating_point()
                                else None)


def _check_input_keys(op: OpSpec, inputs) -> None:
    if not isinstance(inputs, dict):
        raise FormatProblem(str(op.path / "input.py"), "_make_inputs",
                            f"must return a dict, returned {type(inputs).__name__}")
    keys = set(inputs)
    params = set(op.forward_params)
    missing = [name for name in op.forward_required if name not in keys]
    extra = sorted(keys - params)
    if missing or extra:
        detail = ([f"misses {missing}, which Model.forward requires (no default)"] if missing
                  else []) + ([f"returns {extra}, which Model.forward does not take"] if extra
                              else [])
        raise FormatProblem(str(op.path / "input.py"), "_make_inputs",
                            f"returns keys {sorted(keys)}: " + "; ".join(detail)
                            + f" (reference.py Model.forward takes {sorted(params)})")


class FormatProblem(Exception):
    def __init__(self, path: str, field_name: str, message: str):
        super().__init__(message)
        self.path, self.field, self.message = path, field_name, message


def build_model(cls: type, init_kwargs: dict, device: torch.device):
    torch.manual_seed(0)  # the same parameter values for the reference and every candidate
    model = cls(**init_kwargs)
    if isinstance(model, torch.nn.Module):
        model = model.to(device)
    return model


def _tally(count: WorkCount | None, whole: tuple[float, float]) -> WorkTally:
    if count is None:  # every input read once, every output written once
        return WorkTally(bytes=whole[0] + whole[1], bytes_read=whole[0], bytes_written=whole[1],
                         flops_source=WorkSource.UNCOUNTED, bytes_source=WorkSource.UNCOUNTED)
    return WorkTally(flops={k: v for k, v in count.flops.items() if v},
                     bytes=float(count.bytes), bytes_read=float(count.bytes_read),
                     bytes_written=float(count.bytes_written),
                     bytes_source=WorkSource.TOUCHED if count.partial else WorkSource.COUNTED)

"""The worker process: loads one operator's reference and candidates, judges every (candidate,
shape), times the passing ones interleaved on the GPU, and streams results to the parent.

Protocol: the job arrives as JSON on stdin; results leave as JSON lines on the file descriptor
given on the command line (the candidate's own prints go to stdout/stderr, which the parent logs).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..config import Tolerance
from ..dtypes import peak_class
from ..model import FindingKind, Status
from ..repo import OpSpec, ShapeSpec
from . import compare, timing
from .checks import StageFailure, Verdict, call, clone_inputs, new_seed
from .compare import expected_structure, flatten_output
from .guard import IdentityGuard
from .tracking import FlopCounter, KernelTracker, WorkTally

EXIT_FATAL = 3  # the CUDA context is unusable: the parent respawns a worker for the rest


class Channel:
    """JSON lines to the parent: a pipe (subprocess) or a file in the scratch mount (container)."""

    def __init__(self, fd: int):
        self.fd = fd

    @classmethod
    def to_file(cls, path: str) -> Channel:
        return cls(os.open(path, os.O_WRONLY | os.O_APPEND))

    def send(self, kind: str, **payload) -> None:
        line = json.dumps({"type": kind, **payload}, default=str) + "\n"
        data = line.encode()
        while data:
            written = os.write(self.fd, data)
            data = data[written:]


@dataclass
class Candidate:
    label: str
    kernel: Path
    root: Path
    role: str = "candidate"
    model_cls: type | None = None
    failure: Verdict | None = None


@dataclass
class Context:
    op: OpSpec
    device_type: str
    trials: int
    tolerances: dict[str, Tolerance]
    reference_dtype: str
    own_share_threshold: float
    peaks: dict
    time: bool
    timing_policy: timing.TimingPolicy
    tracker: KernelTracker
    guard: IdentityGuard | None = None
    reference_module: object = None
    input_module: object = None
    candidates: list[Candidate] = field(default_factory=list)
    skip: dict[str, list[str]] = field(default_factory=dict)  # shape id -> labels not to rerun

    def tolerance_for(self, dtype: torch.dtype) -> Tolerance | None:
        return self.tolerances.get(str(dtype).replace("torch.", ""))

    def synchronize(self) -> None:
        if self.device_type == "cuda":
            torch.cuda.synchronize()

    def check_guard(self) -> None:
        changed = self.guard.changed() if self.guard else []
        if changed:
            raise StageFailure(Status.SUSPICIOUS, FindingKind.PATCHED_FUNCTION,
                               f"the candidate replaced functions the evaluator relies on: "
                               f"{', '.join(changed[:6])}")

    def sol_ms(self, tally: WorkTally) -> float:
        """Roofline floor of some work against the job's peaks (datasheet)."""
        compute = sum(flops / (self.peaks["tflops"].get(cls) or self.peaks["tflops"]["bf16"])
                      for cls, flops in tally.flops.items()) / 1e9
        memory = tally.bytes / (self.peaks["bandwidth_tbps"] * 1e9)
        return max(compute, memory)


class ShapeContext:
    """One shape: input draws, the reference in native and high precision, the expected output."""

    def __init__(self, ctx: Context, shape: ShapeSpec):
        self.ctx = ctx
        self.shape = shape
        self.mutates = set(ctx.op.mutates)
        self.device = torch.device(ctx.device_type)
        self.ref_model = _build_model(ctx.reference_module.Model, shape.init_kwargs, self.device)
        self._hp_model = None
        self._hp_dtype: torch.dtype | None = None
        native_inputs = self.draw(new_seed())
        counter = FlopCounter()
        with counter:
            native_out = call(self.ref_model, clone_inputs(native_inputs))
        self.expected = expected_structure(native_out)
        for name in self.mutates:
            value = native_inputs[name]
            self.expected[f"input:{name}"] = compare.Expected(tuple(value.shape), value.dtype,
                                                              value.device.type)
        self.work = self._work(counter.tally, native_inputs, native_out)
        self.reference_sol_ms = ctx.sol_ms(self.work)

    def _work(self, tally: WorkTally, inputs: dict, out) -> WorkTally:
        tensors = [v for v in inputs.values() if isinstance(v, torch.Tensor)]
        tensors += list(self.ref_model.parameters()) + list(self.ref_model.buffers())
        outs = [v for v in flatten_output(out).values() if isinstance(v, torch.Tensor)]
        outs += [inputs[name] for name in self.mutates]  # written back as well as read
        counted = sum(t.numel() * t.element_size() for t in tensors + outs)
        # A kernel may run its arithmetic at the rate of the op's input precision, whatever the
        # reference upcasts to internally for accuracy: a bf16 GEMM is bounded by the bf16 peak.
        rate_class = self.ctx.op.flop_dtype_class or _input_class(tensors)
        total = self.shape.flops if self.shape.flops is not None else sum(tally.flops.values())
        flops = {rate_class: float(total)} if total else {}
        return WorkTally(flops=flops, bytes=self.shape.bytes or float(counted))

    def draw(self, seed: int) -> dict:
        torch.manual_seed(seed)
        inputs = self.ctx.input_module._make_inputs(**self.shape.input_kwargs)
        _check_input_keys(self.ctx.op, inputs)
        return inputs

    def mutated_outputs(self, inputs: dict) -> dict:
        return {f"input:{name}": inputs[name] for name in self.mutates}

    def reference(self, inputs: dict) -> dict:
        """The reference output in the highest precision that works, as named tensors."""
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
    classes = {peak_class(str(t.dtype)) for t in tensors
               if t.is_floating_point() or t.dtype == torch.int8}
    for cls in _PRECISION_ORDER:
        if cls in classes:
            return cls
    return "fp32"


def _upcast(inputs: dict, dtype: torch.dtype | None) -> dict:
    if dtype is None:
        return clone_inputs(inputs)
    return {k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else
            (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}


def _check_input_keys(op: OpSpec, inputs) -> None:
    if not isinstance(inputs, dict):
        raise _FormatProblem(str(op.path / "input.py"), "_make_inputs",
                             f"must return a dict, returned {type(inputs).__name__}")
    keys = set(inputs)
    params = set(op.forward_params)
    if keys != params:
        raise _FormatProblem(str(op.path / "input.py"), "_make_inputs",
                             f"returns keys {sorted(keys)} but reference.py Model.forward takes "
                             f"{sorted(params)}")


class _FormatProblem(Exception):
    def __init__(self, path: str, field_name: str, message: str):
        super().__init__(message)
        self.path, self.field, self.message = path, field_name, message


def _build_model(cls: type, init_kwargs: dict, device: torch.device, like=None):
    torch.manual_seed(0)  # same parameter values for the reference and every candidate
    model = cls(**init_kwargs)
    if isinstance(model, torch.nn.Module):
        model = model.to(device)
        if like is not None:
            _copy_matching_state(like, model)
    return model


def _copy_matching_state(source: torch.nn.Module, target: torch.nn.Module) -> None:
    theirs, ours = source.state_dict(), target.state_dict()
    if theirs.keys() == ours.keys() and all(theirs[k].shape == ours[k].shape for k in theirs):
        target.load_state_dict(theirs)


def load_module(path: Path, name: str, search_paths: list[Path]):
    for entry in search_paths:
        if str(entry) not in sys.path:
            sys.path.insert(0, str(entry))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

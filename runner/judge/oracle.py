"""The judge's knowledge of one operator: its reference, its input generator, and per shape the
expected output structure, the work an ideal kernel must do, and high-precision reference outputs
for any inputs the judge drew. Seeds are drawn here, at the moment of use, and never leave.
"""

from __future__ import annotations

import copy
import importlib.util
import secrets
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from ..config import Tolerance
from ..contract.storage import copy_keeping_aliases
from ..dtypes import peak_class
from ..repo import OpSpec, ShapeSpec
from .compare import Comparison, Expected, compare_outputs, expected_structure, flatten_output


@dataclass
class WorkTally:
    """FLOPs by peak class and bytes moved, for roofline floors."""

    flops: dict[str, float] = field(default_factory=dict)
    bytes: float = 0.0

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
        compute = sum(flops / (self.peaks["tflops"].get(cls) or self.peaks["tflops"]["bf16"])
                      for cls, flops in tally.flops.items()) / 1e9
        memory = tally.bytes / (self.peaks["bandwidth_tbps"] * 1e9)
        return max(compute, memory)


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
        counter = FlopCounter()
        cpu0 = time.process_time()
        with counter:
            native_out = call(self.ref_model, clone_inputs(native_inputs))
        ctx.synchronize()
        self.reference_host_ms = (time.process_time() - cpu0) * 1e3
        self.expected = expected_structure(native_out)
        for name in self.mutates:
            value = native_inputs[name]
            self.expected[f"input:{name}"] = Expected(tuple(value.shape), value.dtype,
                                                      value.device.type)
        ctx.check_tolerances(shape.id, self.expected)
        self.float_inputs = [k for k, v in native_inputs.items()
                             if isinstance(v, torch.Tensor) and v.is_floating_point()
                             and v.numel() > 0]
        self.work = self._work(counter.tally, native_inputs, native_out)
        self.reference_sol_ms = ctx.sol_ms(self.work)

    def _work(self, tally: WorkTally, inputs: dict, out) -> WorkTally:
        tensors = [v for v in inputs.values() if isinstance(v, torch.Tensor)]
        if isinstance(self.ref_model, torch.nn.Module):
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
    classes = {peak_class(str(t.dtype)) for t in tensors
               if t.is_floating_point() or t.dtype == torch.int8}
    for cls in _PRECISION_ORDER:
        if cls in classes:
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


def load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class FlopCounter(TorchDispatchMode):
    """Counts FLOPs of a reference run per peak class (bf16 tensor-core FLOPs vs fp32, ...)."""

    def __init__(self):
        super().__init__()
        self.tally = WorkTally()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            tensors = [t for t in tree_flatten(args)[0] if isinstance(t, torch.Tensor)]
            dtype = tensors[0].dtype if tensors else torch.float32
            try:
                self.tally.add(peak_class(str(dtype)), float(formula(*args, **kwargs,
                                                                      out_val=out)))
            except Exception:
                pass
        return out

"""What a shape will cost before it runs: input bytes and a memory estimate, on the meta device.

The judge calls `_make_inputs` and the reference with every device request turned to `meta`:
tensors carry shapes and dtypes but no data, so a 131072 x 2048 shape costs nothing to survey.
That orders shapes for `--max-shapes` (fewest input bytes first), lets a CPU run skip a shape
that would not fit its memory budget, and gives `atrex weights` the tensor shapes of each shape
id. A reference whose control flow reads tensor values (`.item()`, `nonzero`, `bincount`; 11 of
Atrex-Bench's 30 operators) cannot run on meta; its peak is then assumed, and the reason says so.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass, field

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ..repo import ShapeSpec
from .oracle import JudgeContext

# Where the reference cannot run on meta: its peak taken as this many times its high-precision
# inputs. On the 19 Atrex-Bench operators that do run on meta, the measured peak of the float64
# reference was 1-16x its float64 inputs, most between 2x and 4x.
ASSUMED_PEAK_PER_INPUT = 4.0


@dataclass
class ShapeSurvey:
    shape_id: str
    inputs: dict[str, dict] = field(default_factory=dict)  # name -> {shape, dtype} (tensors)
    input_bytes: int | None = None  # None: the inputs could not be drawn on meta
    estimate_bytes: int | None = None  # inputs (judge + executor) + the reference's peak
    note: str | None = None  # what the estimate had to assume

    def payload(self) -> dict:
        return {"shape": self.shape_id, "inputs": self.inputs, "input_bytes": self.input_bytes,
                "estimate_bytes": self.estimate_bytes, "note": self.note}


class _ToMeta(TorchFunctionMode):
    """Every explicit device request (cuda, cpu, an index) becomes `meta`."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in (torch.Tensor.cuda, torch.Tensor.cpu):
            return args[0]
        if kwargs.get("device") is not None:
            kwargs["device"] = "meta"
        if func is torch.Tensor.to and len(args) > 1 and isinstance(args[1], str | torch.device):
            args = (args[0], "meta", *args[2:])
        return func(*args, **kwargs)


class _PeakBytes(TorchDispatchMode):
    """Bytes of live tensors the traced code allocated, and their peak (views and in-place
    results share their base's storage and are not counted again)."""

    def __init__(self):
        super().__init__()
        self.live = 0
        self.peak = 0

    def _release(self, nbytes: int) -> None:
        self.live -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        given = {id(a) for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)}
        for value in tree_flatten(out)[0]:
            if isinstance(value, torch.Tensor) and id(value) not in given and not value._is_view():
                nbytes = value.numel() * value.element_size()
                self.live += nbytes
                self.peak = max(self.peak, self.live)
                weakref.finalize(value, self._release, nbytes)
        return out


@contextlib.contextmanager
def on_meta():
    with torch.device("meta"), _ToMeta():
        yield


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _hp_dtype(ctx: JudgeContext) -> torch.dtype | None:
    return {"float64": torch.float64, "float32": torch.float32}.get(ctx.reference_dtype)


def _upcast(value, dtype: torch.dtype | None):
    if dtype is not None and isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.to(dtype)
    return value


def survey_shape(ctx: JudgeContext, shape: ShapeSpec) -> ShapeSurvey:
    result = ShapeSurvey(shape.id)
    try:
        with on_meta():
            torch.manual_seed(0)
            inputs = ctx.input_module._make_inputs(**shape.input_kwargs)
    except Exception as exc:  # noqa: BLE001 - any failure only means "not estimable"
        result.note = f"_make_inputs cannot run on the meta device ({_short(exc)})"
        return result
    if not isinstance(inputs, dict):
        result.note = "_make_inputs did not return a dict"
        return result
    tensors = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    result.inputs = {k: {"shape": list(v.shape), "dtype": str(v.dtype).removeprefix("torch.")}
                     for k, v in tensors.items()}
    result.input_bytes = _nbytes(tensors.values())
    hp = _hp_dtype(ctx)
    hp_inputs = {k: _upcast(v, hp) for k, v in inputs.items()}
    hp_bytes = _nbytes(v for v in hp_inputs.values() if isinstance(v, torch.Tensor))
    peak, note = _reference_peak(ctx, shape, hp_inputs, hp)
    if peak is None:
        peak = int(ASSUMED_PEAK_PER_INPUT * hp_bytes)
        result.note = (f"the reference cannot run on the meta device ({note}); its peak is "
                       f"assumed {ASSUMED_PEAK_PER_INPUT:g}x its inputs")
    # the judge's native draw, the executor's copy of it, the upcast copy, the reference's peak
    result.estimate_bytes = 2 * result.input_bytes + hp_bytes + peak
    return result


def _reference_peak(ctx: JudgeContext, shape: ShapeSpec, hp_inputs: dict,
                    hp: torch.dtype | None) -> tuple[int | None, str | None]:
    tracker = _PeakBytes()
    try:
        with on_meta():
            model = ctx.reference_module.Model(**shape.init_kwargs)
            params = 0
            if isinstance(model, torch.nn.Module):
                model = model.to(hp) if hp is not None else model
                params = _nbytes(list(model.parameters()) + list(model.buffers()))
            with tracker, torch.no_grad():
                model(**hp_inputs)
    except Exception as exc:  # noqa: BLE001
        return None, _short(exc)
    return params + tracker.peak, None


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:120]}" if text else type(exc).__name__


def select_smallest(surveys: list[ShapeSurvey], count: int) -> list[str]:
    """The `count` shapes with the fewest input bytes, in their original order; a shape whose
    inputs could not be surveyed sorts last."""
    order = sorted(range(len(surveys)), key=lambda i: (
        surveys[i].input_bytes is None, surveys[i].input_bytes or 0, i))
    keep = set(order[:count])
    return [s.shape_id for i, s in enumerate(surveys) if i in keep]


def over_budget(survey: ShapeSurvey, budget_bytes: int) -> str | None:
    """Why a shape is skipped under the memory budget, or None when it fits (or is unknown)."""
    if survey.estimate_bytes is None or survey.estimate_bytes <= budget_bytes:
        return None
    gib = 1024 ** 3
    reason = (f"needs about {survey.estimate_bytes / gib:.2f} GiB (inputs "
              f"{survey.input_bytes / gib:.2f} GiB, with the reference in "
              f"high precision), over the CPU memory budget of {budget_bytes / gib:.2f} GiB")
    if survey.note:
        reason += f"; {survey.note}"
    return reason + "; raise it with --memory-budget GB or run on a GPU"

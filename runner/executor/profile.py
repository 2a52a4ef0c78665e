"""Device-time attribution on a GPU, for one call under torch.profiler.

Spin-kernel markers on the current stream bracket the whole call and, through the dispatch
recorder, every aten op, so each kernel on the device timeline lands in a region: inside an aten
compute op, inside a glue op, inside a custom-op wrapper, or outside any op (own Triton launches,
and library work that no recorded op explains). The judge charges only that last, unexplained
library time at face value; compute under recorded ops is already charged by its work. A kernel
still running after the closing marker did its work on a stream the caller never waited for.
"""

from __future__ import annotations

import contextlib
import re

import torch

from ..contract.protocol import DeviceProfile, KernelTime

_MARKER = "spin_kernel"  # what torch.cuda._sleep launches
_sleep = torch.cuda._sleep


def kernel_base_name(name: str) -> str:
    name = name.replace("(anonymous namespace)::", "").strip()
    if name.startswith("void "):
        name = name[5:]
    return re.split(r"[(<]", name, maxsplit=1)[0].split("::")[-1].strip()


class DeviceProfiler:
    """One profiled forward: marker pairs bracket the forward (`window`), each aten op
    (`region`) and the executor's own bookkeeping (`bookkeeping`, left out of the attribution),
    in launch order."""

    def __init__(self):
        self.marks: list[str | None] = []  # per marker inside the window: opens `name` / None
        self.kernels: list = []

    @contextlib.contextmanager
    def region(self, name: str):
        self.marks.append(name)
        _sleep(1)
        try:
            yield
        finally:
            self.marks.append(None)
            _sleep(1)

    def bookkeeping(self):
        return self.region("executor")

    @contextlib.contextmanager
    def window(self):
        from torch.autograd import DeviceType

        torch.cuda.synchronize()
        profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                      torch.profiler.ProfilerActivity.CUDA])
        profiler.__enter__()
        try:
            _sleep(1)
            yield
        finally:
            _sleep(1)
            torch.cuda.synchronize()
            profiler.__exit__(None, None, None)
            self.kernels = sorted((e for e in profiler.profiler.kineto_results.events()
                                   if e.device_type() == DeviceType.CUDA),
                                  key=lambda e: e.start_ns())

    def result(self, own: set[str], own_launches: int) -> DeviceProfile:
        profile = _attribute(self.kernels, self.marks, own)
        return DeviceProfile(kernels=profile.kernels, own_launches=own_launches,
                             complete=profile.complete)


def _attribute(kernels, marks: list[str | None], own: set[str]) -> DeviceProfile:
    """Walk the device timeline: the markers open and close regions in launch order (they nest:
    an aten op inside a custom op, our bookkeeping inside an own launch). A kernel's region is
    the innermost open one; anything inside our bookkeeping is left out."""
    spins = [i for i, e in enumerate(kernels) if kernel_base_name(e.name()) == _MARKER]
    if len(spins) != 2 + len(marks):
        return DeviceProfile(kernels=[], complete=False)
    closing_start = kernels[spins[-1]].start_ns()
    opened_at = dict(zip(spins[1:-1], marks, strict=True))
    stack: list[str] = []
    result = []
    for index, event in enumerate(kernels):
        if index in opened_at:
            mark = opened_at[index]
            if mark is None:
                if stack:
                    stack.pop()
            else:
                stack.append(mark)
            continue
        if index <= spins[0] or index == spins[-1] or "executor" in stack:
            continue
        base = kernel_base_name(event.name())
        late = event.start_ns() + event.duration_ns() > closing_start
        result.append(KernelTime(name=base, ms=event.duration_ns() / 1e6, own=base in own,
                                 region=stack[-1] if stack else "none", late=late))
    return DeviceProfile(kernels=result, complete=True)

"""Device-time attribution on a GPU: how much of the candidate's kernel time is its own kernels.

One forward runs under torch.profiler between two marker kernels on the current stream. Kernel
names are matched against the own kernels the tracker saw launched; library kernels (aten,
cuBLAS, cuDNN, flash, Inductor's Triton) count against the share, allocation and copy kernels are
glue. A candidate kernel that is still running after the closing marker started did its work on a
stream the caller never waited for: its output was not ready when forward returned.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

_GLUE_KERNEL = re.compile(r"memset|memcpy|FillFunctor|fill_kernel|copy_kernel|CatArrayBatchedCopy"
                          r"|direct_copy|CUDAFunctor_add.*?zero", re.IGNORECASE)
_MARKER_VALUE = 1234.5


@dataclass
class DeviceProfile:
    own_ms: float = 0.0
    library_ms: float = 0.0
    glue_ms: float = 0.0
    library_kernels: dict[str, float] = field(default_factory=dict)
    late_kernels: list[str] = field(default_factory=list)  # ran past the closing marker

    @property
    def own_share(self) -> float:
        total = self.own_ms + self.library_ms
        return self.own_ms / total if total > 0 else 0.0


def kernel_base_name(name: str) -> str:
    name = name.replace("(anonymous namespace)::", "").strip()
    if name.startswith("void "):
        name = name[5:]
    return re.split(r"[(<]", name, maxsplit=1)[0].split("::")[-1].strip()


def profile_forward(fn, own_names: set[str]) -> DeviceProfile:
    from torch.autograd import DeviceType

    marker = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        marker.fill_(_MARKER_VALUE)
        fn()
        marker.fill_(_MARKER_VALUE)
        torch.cuda.synchronize()
    kernels = sorted((e for e in prof.profiler.kineto_results.events()
                      if e.device_type() == DeviceType.CUDA), key=lambda e: e.start_ns())
    fills = [i for i, e in enumerate(kernels) if "FillFunctor" in e.name()]
    if len(fills) < 2:
        return DeviceProfile()
    first, last = fills[0], fills[-1]
    closing_start = kernels[last].start_ns()
    result = DeviceProfile()
    for index, event in enumerate(kernels):
        if index in (first, last):
            continue
        ms = event.duration_ns() / 1e6
        base = kernel_base_name(event.name())
        if base in own_names:
            result.own_ms += ms
        elif _GLUE_KERNEL.search(event.name()):
            result.glue_ms += ms
        else:
            result.library_ms += ms
            result.library_kernels[base] = result.library_kernels.get(base, 0.0) + ms
        if event.start_ns() + event.duration_ns() > closing_start:
            result.late_kernels.append(base)
    return result

"""Running `device='cuda'` code on a CPU-only machine: cuda device requests become the CPU."""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode


def _is_cuda(value) -> bool:
    if isinstance(value, torch.device):
        return value.type == "cuda"
    if isinstance(value, str):
        return value.split(":")[0] == "cuda"
    return False


class CudaToCpu(TorchFunctionMode):
    """Rewrites `device='cuda'`, `.cuda()` and `.to('cuda')` to the CPU."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.cuda:
            return args[0]
        if _is_cuda(kwargs.get("device")):
            kwargs["device"] = "cpu"
        if func in (torch.Tensor.to,) and len(args) > 1 and _is_cuda(args[1]):
            args = (args[0], "cpu", *args[2:])
        return func(*args, **kwargs)

# atrex-test: op=rmsnorm expected=suspicious finding=tensor_subclass
"""Returns a tensor subclass whose comparisons always succeed."""
import torch
from _rms_triton import rms


class AlwaysClose(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.allclose, torch.equal):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        return torch.zeros_like(x).as_subclass(AlwaysClose)

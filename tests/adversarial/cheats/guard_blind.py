# atrex-test: op=rmsnorm expected=incorrect finding=mismatch
"""Blinds the executor's guard (replaces a method on its class), makes tensor comparison always
say "equal" in this process, and returns zeros: none of it reaches the judge's comparison."""
import torch
from _rms_triton import token_copy

try:
    import atrex.runner.executor.guard as _guard

    _guard.IdentityGuard.changed = lambda self: []
except Exception:  # noqa: BLE001
    pass
torch.allclose = lambda *args, **kwargs: True
torch.equal = lambda *args, **kwargs: True
torch.Tensor.__sub__ = lambda self, other: torch.zeros_like(self)


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        return token_copy(torch.zeros_like(x), torch.empty_like(x), x, weight)

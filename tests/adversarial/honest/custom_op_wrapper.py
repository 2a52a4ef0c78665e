# atrex-test: op=rmsnorm expected=pass
"""Honest, registered as a torch.library custom op (as serving engines do) around its own kernel."""
import torch
from _rms_triton import rms


@torch.library.custom_op("atrex_honest::rms", mutates_args=())
def _rms_op(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return rms(x, weight, eps)


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        return _rms_op(x, weight, self.eps)

# atrex-test: op=rmsnorm expected=fallback finding=taint_replay|library_kernel_time
"""A torch.library custom op in which an own kernel launches (so it looks like the author's
wrapper) but PyTorch computes the result inside it, out of the dispatcher's sight."""
import torch
from _rms_triton import token_copy, torch_rms


@torch.library.custom_op("atrex_cheat::rms_inner", mutates_args=())
def _wrapped(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    result = torch_rms(x, weight, eps)
    return token_copy(result, torch.empty_like(x), x, weight)


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        return _wrapped(x, weight, self.eps)

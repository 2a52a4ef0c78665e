# atrex-test: op=rmsnorm expected=fallback finding=taint_replay|library_kernel_time
"""Computes with PyTorch while every dispatch mode is popped (the recorder sees nothing), then
copies the result into the output with an own Triton kernel that is also handed the inputs."""
import torch
from _rms_triton import token_copy, torch_rms
from torch.utils._python_dispatch import _disable_current_modes


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        with _disable_current_modes():
            result = torch_rms(x, weight, self.eps)
        return token_copy(result, torch.empty_like(x), x, weight)

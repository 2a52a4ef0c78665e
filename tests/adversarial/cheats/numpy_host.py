# atrex-test: op=rmsnorm expected=fallback finding=taint_replay|host_compute
"""Computes with numpy on the host, then casts the result into the output with an own Triton
kernel handed the inputs (so "an own kernel wrote the output and read the inputs" holds)."""
import numpy as np
import torch
from _rms_triton import token_copy


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        xs, ws = x.float().cpu().numpy(), weight.float().cpu().numpy()
        result = xs / np.sqrt((xs * xs).mean(-1, keepdims=True) + self.eps) * ws
        return token_copy(torch.from_numpy(result).to(x.device), torch.empty_like(x), x, weight)

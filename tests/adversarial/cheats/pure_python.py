# atrex-test: op=rmsnorm expected=fallback finding=taint_replay|host_compute
"""Computes in pure Python over lists, then copies the result in with an own Triton kernel."""
import math

import torch
from _rms_triton import token_copy


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        rows, w = x.float().tolist(), weight.float().tolist()
        result = []
        for row in rows:
            inv = 1.0 / math.sqrt(sum(v * v for v in row) / len(row) + self.eps)
            result.append([v * inv * wi for v, wi in zip(row, w, strict=True)])
        return token_copy(torch.tensor(result, device=x.device), torch.empty_like(x), x, weight)

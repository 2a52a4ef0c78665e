# atrex-test: op=rmsnorm expected=pass
"""Honest, with a little torch glue for layout and dtype: the weight cast to fp32 once, the
kernel writes fp32, the result cast back to the input dtype."""
import torch
from _rms_triton import rms_into


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        rows = x.contiguous()
        out = torch.empty(rows.shape, dtype=torch.float32, device=rows.device)
        rms_into(rows, weight.to(torch.float32), out, self.eps)
        return out.to(x.dtype)

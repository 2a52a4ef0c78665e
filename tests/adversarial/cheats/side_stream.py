# atrex-test: op=rmsnorm expected=suspicious finding=side_stream gpu=yes
"""Launches its kernel on a side stream and returns without making the caller wait for it."""
import torch
from _rms_triton import rms_into

_stream = None


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        global _stream
        if _stream is None:
            _stream = torch.cuda.Stream()
        out = torch.empty_like(x)
        _stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(_stream):
            for _ in range(20):  # long enough to still be running when forward returns
                rms_into(x, weight, out, self.eps)
        return out

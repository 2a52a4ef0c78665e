# atrex-test: op=rmsnorm expected=suspicious finding=side_stream|lazy_output gpu=yes
"""Launches its work on a side stream and returns without making the caller wait for it."""
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
        # scratch work that keeps the side stream busy well past the moment forward returns
        scratch = torch.empty((x.shape[0] * 64, x.shape[1]), dtype=x.dtype, device=x.device)
        _stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(_stream):
            rms_into(scratch, weight, scratch, self.eps)
            rms_into(x, weight, out, self.eps)
        return out

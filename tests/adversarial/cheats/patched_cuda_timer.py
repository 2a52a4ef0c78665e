# atrex-test: op=rmsnorm expected=suspicious finding=patched_function isolate=yes gpu=yes
"""Makes CUDA event timings report a tenth of the real time."""
import torch
from _rms_triton import rms

_real = torch.cuda.Event.elapsed_time
torch.cuda.Event.elapsed_time = lambda self, end: _real(self, end) / 10


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        return rms(x, weight, self.eps)

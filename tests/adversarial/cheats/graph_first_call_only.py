# atrex-test: op=rmsnorm expected=suspicious finding=recheck_failed gpu_expected=suspicious|pass
"""Does the work only for the first of the calls a timed replay holds (on a GPU: the first call
a CUDA graph capture records; on a CPU machine, where the same calls run as a plain sequence:
any call on other buffers than the first that held the same values, which is what an input copy
is); the others get zeros through a token own kernel."""
import torch
from _rms_triton import rms, token_copy

_first_buffer: dict = {}  # input values (their head) -> the buffer they were first seen in
_captured = {"calls": 0}


def _is_copy(x: torch.Tensor) -> bool:
    if x.is_cuda and torch.cuda.is_current_stream_capturing():
        _captured["calls"] += 1
        return _captured["calls"] > 1
    _captured["calls"] = 0
    head = tuple(x.flatten()[:16].float().tolist())
    return _first_buffer.setdefault(head, x.data_ptr()) != x.data_ptr()


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        if _is_copy(x):
            return token_copy(torch.zeros_like(x), torch.empty_like(x), x, weight)
        return rms(x, weight, self.eps)

# atrex-test: op=rmsnorm expected=suspicious finding=recheck_failed gpu_expected=suspicious|pass
"""Computes only the first of the calls a timed replay holds and gives every later call a copy
of that call's output (its inputs are copies of the same values, so the copy is right while
they stay equal): on a GPU, a CUDA graph capture records one real call and copies from its
output buffer; on a CPU machine, where the same calls run as a plain sequence, an input copy is
a call on other buffers than the first that held the same values."""
import torch
from _rms_triton import rms, token_copy

_first_buffer: dict = {}  # input values (their head) -> the buffer they were first seen in
_state = {"captured": 0, "first_out": None}


def _is_copy(x: torch.Tensor) -> bool:
    if x.is_cuda and torch.cuda.is_current_stream_capturing():
        _state["captured"] += 1
        return _state["captured"] > 1
    _state["captured"] = 0
    head = tuple(x.flatten()[:16].float().tolist())
    return _first_buffer.setdefault(head, x.data_ptr()) != x.data_ptr()


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        if _is_copy(x) and _state["first_out"] is not None:
            return token_copy(_state["first_out"], torch.empty_like(x), x, weight)
        out = rms(x, weight, self.eps)
        _state["first_out"] = out
        return out

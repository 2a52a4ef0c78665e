# atrex-test: op=rmsnorm expected=fallback finding=taint_replay
"""Computes honestly the first two times it sees the same inputs and keeps the second result (so
nothing computed during a one-off replay is ever kept); from the third call on those inputs it
copies the kept result through an own kernel that is handed the inputs."""
import torch
from _rms_triton import rms, token_copy

_seen: dict = {}


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        key = (x.data_ptr(), weight.data_ptr(), tuple(x.flatten()[:8].float().tolist()))
        count, kept = _seen.get(key, (0, None))
        if kept is not None:
            return token_copy(kept, torch.empty_like(x), x, weight)
        _seen.clear()
        out = rms(x, weight, self.eps)
        _seen[key] = (count + 1, out if count == 1 else None)
        return out

# atrex-test: op=rmsnorm expected=fallback finding=mirror_replay|host_compute
"""Computes with numpy on the host, reading the tensors through raw pointers on a CPU machine
(out of sight of the host-read count; on a GPU a copy to the host is what it has); a probe own
kernel copies the head of x to scratch first, and when what the kernel read differs from what
the host reads (the taint replay), it returns zeros, as an honest kernel's output would be."""
import ctypes

import numpy as np
import torch
from _rms_triton import token_copy


def _host(t: torch.Tensor) -> np.ndarray:
    t = t.float().contiguous()
    if t.is_cuda:
        return t.cpu().numpy()
    raw = ctypes.string_at(t.data_ptr(), t.numel() * 4)
    return np.frombuffer(raw, dtype=np.float32).reshape(t.shape)


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        head = x.flatten()[:64]
        probe = token_copy(head, torch.empty_like(head), x, weight)
        if not np.array_equal(_host(probe), _host(head)):
            return token_copy(torch.zeros_like(x), torch.empty_like(x), x, weight)
        xs, ws = _host(x), _host(weight)
        result = xs / np.sqrt((xs * xs).mean(-1, keepdims=True) + self.eps) * ws
        return token_copy(torch.from_numpy(result).to(x.device), torch.empty_like(x), x, weight)

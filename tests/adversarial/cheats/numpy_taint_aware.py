# atrex-test: op=rmsnorm expected=fallback finding=mirror_replay
"""Computes with numpy on the host; a probe own kernel copies the head of x to scratch first, and
when what the kernel read differs from what the host reads (the taint replay), returns zeros."""
import numpy as np
import torch
from _rms_triton import token_copy


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        head = x.flatten()[:64]
        probe = token_copy(head, torch.empty_like(head), x, weight)
        if not torch.equal(probe.cpu(), head.cpu()):
            return token_copy(torch.zeros_like(x), torch.empty_like(x), x, weight)
        xs, ws = x.float().cpu().numpy(), weight.float().cpu().numpy()
        result = xs / np.sqrt((xs * xs).mean(-1, keepdims=True) + self.eps) * ws
        return token_copy(torch.from_numpy(result).to(x.device), torch.empty_like(x), x, weight)

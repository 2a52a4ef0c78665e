# atrex-test: op=rmsnorm expected=fallback finding=ghost_replay|taint_replay|host_compute
"""Writes a host-computed result straight into the output buffer's memory with ctypes (through a
host staging buffer on a GPU), then runs an own Triton kernel over the output in place (it
rewrites what is there) with the inputs."""
import ctypes

import numpy as np
import torch
from _rms_triton import token_copy


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        xs, ws = x.float().cpu().numpy(), weight.float().cpu().numpy()
        result = torch.from_numpy(xs / np.sqrt((xs * xs).mean(-1, keepdims=True) + self.eps) * ws)
        host = result.to(x.dtype)
        out = torch.empty_like(x)
        staging = out if out.device.type == "cpu" else torch.empty_like(host)
        ctypes.memmove(staging.data_ptr(), host.data_ptr(), out.nbytes)
        if staging is not out:
            out.copy_(staging)
        return token_copy(out, out, x, weight)

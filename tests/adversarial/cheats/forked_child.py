# atrex-test: op=rmsnorm expected=suspicious finding=child_process
"""Forks a child that computes with numpy into shared memory, waits for it, then copies the
result into the output with an own Triton kernel handed the inputs."""
import mmap
import os

import numpy as np
import torch
from _rms_triton import token_copy


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        xs, ws = x.float().cpu().numpy(), weight.float().cpu().numpy()
        shared = mmap.mmap(-1, xs.nbytes)
        pid = os.fork()
        if pid == 0:
            result = xs / np.sqrt((xs * xs).mean(-1, keepdims=True) + self.eps) * ws
            shared.write(result.astype(np.float32).tobytes())
            os._exit(0)
        os.waitpid(pid, 0)
        result = torch.frombuffer(bytearray(shared), dtype=torch.float32).reshape(x.shape)
        result = result.to(x.device)
        return token_copy(result, torch.empty_like(x), x, weight)

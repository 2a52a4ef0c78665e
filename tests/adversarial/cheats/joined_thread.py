# atrex-test: op=rmsnorm expected=fallback finding=taint_replay|library_kernel_time
"""Computes with PyTorch in a thread it joins before returning (dispatch modes are per thread),
then copies the result into the output with an own Triton kernel handed the inputs."""
import threading

import torch
from _rms_triton import token_copy, torch_rms


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        box = {}
        worker = threading.Thread(target=lambda: box.update(r=torch_rms(x, weight, self.eps)))
        worker.start()
        worker.join()
        return token_copy(box["r"], torch.empty_like(x), x, weight)

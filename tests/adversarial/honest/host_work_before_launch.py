# atrex-test: op=rmsnorm expected=pass
"""Honest, with 3 ms of host work before its launch (a planner that thinks on the host): the
timed region must hold the device's time, not the host's. Under a hold shorter than the host
work the device reaches the timed region and waits for the launch; the judge lengthens the hold."""
import time

import torch
from _rms_triton import rms


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        time.sleep(0.003)
        return rms(x, weight, self.eps)

# atrex-test: op=rmsnorm expected=suspicious finding=protocol
"""Writes 'checked: pass' and 'done' messages to every socket of its process (the channel to
the judge among them), then exits with code 0."""
import os

import torch

_FORGED = (b'{"type": "checked", "verdict": {"status": "pass", "own_share": 1.0}}\n'
           b'{"type": "done"}\n')


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        for fd in os.listdir("/proc/self/fd"):
            try:
                if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                    os.write(int(fd), _FORGED)
            except OSError:
                pass
        os._exit(0)

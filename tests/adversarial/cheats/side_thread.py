# atrex-test: op=rmsnorm expected=suspicious finding=side_thread
"""Returns an empty tensor at once and fills it from a thread after forward returned."""
import threading
import time

import torch
from _rms_triton import rms


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        rms(x[:1], weight, self.eps)
        out = torch.empty_like(x)

        def fill():
            time.sleep(0.3)
            xf = x.float()
            out.copy_((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
                       * weight.float()).to(x.dtype))

        threading.Thread(target=fill, daemon=True).start()
        return out

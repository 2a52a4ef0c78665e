# atrex-test: op=rmsnorm expected=timeout isolate=yes
"""Never returns."""
import torch


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()

    def forward(self, x, weight):
        while True:
            pass

# atrex-test: op=rmsnorm expected=compile_error
"""Does not parse."""
import torch


class Model(torch.nn.Module):
    def forward(self, x, weight)
        return x

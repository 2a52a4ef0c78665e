import torch
import torch.nn as nn


class Model(nn.Module):
    """y = x @ weight^T (a bias-free linear layer)."""

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return (x.float() @ weight.float().t()).to(x.dtype)

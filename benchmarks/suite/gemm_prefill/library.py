"""Library peer for `atrex bench` (the `library` column): what a serving team would call instead
of a kernel of its own. Here: cuBLAS/cuBLASLt through `torch.nn.functional.linear` (nn.Linear's
path; on a CPU machine, PyTorch's CPU BLAS), out = x @ weight^T in x's dtype."""

import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.linear(x, weight)

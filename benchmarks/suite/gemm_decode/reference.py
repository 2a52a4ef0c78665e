import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear layer without bias, decode-sized: out = x @ weight^T.

    x [M, K] activations of M tokens, weight [N, K] (nn.Linear / vLLM layout),
    out [M, N] in x's dtype.
    """

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return (x @ weight.T).to(x.dtype)

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """SwiGLU activation: x = [gate | up] along the last dim; returns silu(gate) * up."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1] // 2
        xf = x.float()
        return (F.silu(xf[..., :d]) * xf[..., d:]).to(x.dtype)

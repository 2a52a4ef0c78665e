import torch
import torch.nn as nn


class Model(nn.Module):
    """Residual add then RMSNorm (the pre-norm of a transformer block).

    h = x + residual; returns (rmsnorm(h) * weight, h), both in x's dtype.
    """

    def __init__(self, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = float(eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor):
        h = x.float() + residual.float()
        inv_rms = torch.rsqrt(h.square().mean(dim=-1, keepdim=True) + self.eps)
        return (h * inv_rms * weight.float()).to(x.dtype), h.to(x.dtype)

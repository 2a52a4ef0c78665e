"""Library peer for `atrex bench`: the residual add in the activation dtype (the stored residual,
as vLLM rounds it) and PyTorch's fused `torch.nn.functional.rms_norm` on that sum."""

import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = float(eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor,
                weight: torch.Tensor) -> dict[str, torch.Tensor]:
        residual_out = x + residual
        out = F.rms_norm(residual_out, (residual_out.shape[-1],), weight, self.eps)
        return {"out": out, "residual": residual_out}

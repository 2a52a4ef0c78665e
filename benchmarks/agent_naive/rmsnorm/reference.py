import torch
import torch.nn as nn


class Model(nn.Module):
    """RMSNorm over the last dimension (vLLM's ``RMSNorm`` without a residual).

    ``out = x / sqrt(mean(x^2, dim=-1) + eps) * weight``

    Low-precision inputs are normalized in float32 and the result is returned in the input dtype.
    (vLLM rounds the normalized value to the input dtype once more before multiplying by the
    weight; that extra rounding is an implementation detail well inside bf16 tolerance.) A
    float64 input - the runner's high-precision oracle run - stays in float64.
    """

    def __init__(self, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = float(eps)

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        compute = torch.promote_types(x.dtype, torch.float32)
        xf = x.to(compute)
        inv_rms = torch.rsqrt(xf.square().mean(dim=-1, keepdim=True) + self.eps)
        return (xf * inv_rms * weight.to(compute)).to(x.dtype)

import torch
import torch.nn as nn


class Model(nn.Module):
    """Residual add followed by RMSNorm, vLLM's ``fused_add_rms_norm`` semantics, out of place.

    ``residual_out = x + residual``, rounded to the input dtype (the residual stream is stored in
    bf16, and vLLM's kernel normalizes that rounded sum), then
    ``out = residual_out / sqrt(mean(residual_out^2, dim=-1) + eps) * weight``.

    vLLM updates ``x`` and ``residual`` in place; here both results are returned as a dict
    ``{"out": ..., "residual": ...}`` and the inputs are left untouched. A float64 input (the
    runner's high-precision oracle run) is computed in float64 throughout.
    """

    def __init__(self, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = float(eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor,
                weight: torch.Tensor) -> dict[str, torch.Tensor]:
        residual_out = x + residual  # in the input dtype: rounded like the stored residual
        compute = torch.promote_types(x.dtype, torch.float32)
        rf = residual_out.to(compute)
        inv_rms = torch.rsqrt(rf.square().mean(dim=-1, keepdim=True) + self.eps)
        out = (rf * inv_rms * weight.to(compute)).to(x.dtype)
        return {"out": out, "residual": residual_out}

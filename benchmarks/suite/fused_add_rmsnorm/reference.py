import torch
import torch.nn as nn


class Model(nn.Module):
    """Fused residual add + RMSNorm (the pre-norm step of a Llama block), vLLM
    `fused_add_rms_norm` semantics, out of place (the same as examples/kernels/fused_add_rmsnorm):

    residual_out = x + residual, rounded to the activation dtype (the residual stream is stored in
                   bf16 and vLLM's kernel normalizes that rounded sum)
    out          = residual_out / sqrt(mean(residual_out^2) + eps) * weight

    vLLM updates `x` and `residual` in place; here both results are returned as a dict
    {"out": ..., "residual": ...} and the inputs are left untouched (the same bytes are moved: read x,
    residual, weight; write out, residual_out). A float64 run (the runner's oracle) stays in float64.
    """

    def __init__(self, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = float(eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor,
                weight: torch.Tensor) -> dict[str, torch.Tensor]:
        residual_out = x + residual  # in the input dtype: rounded like the stored residual
        acc = torch.promote_types(x.dtype, torch.float32)
        h = residual_out.to(acc)
        inv_rms = torch.rsqrt(h.square().mean(dim=-1, keepdim=True) + self.eps)
        out = h * inv_rms * weight.to(acc)
        return {"out": out.to(x.dtype), "residual": residual_out}

import torch
import torch.nn as nn


class Model(nn.Module):
    """Fused residual add + RMSNorm (the pre-norm step of a Llama block).

    residual_out = x + residual
    out = residual_out / sqrt(mean(residual_out^2) + eps) * weight

    Convention: FlashInfer / SGLang `fused_add_rmsnorm` (the sum is kept in fp32 for the
    statistics, the new residual is stored in the activation dtype). vLLM's CUDA op rounds the sum
    to bf16 before the statistics; the difference is within bf16 tolerance. vLLM and FlashInfer
    update `x` and `residual` in place; here both results are returned as new tensors, the tuple
    (out, residual_out) (same bytes moved: read x, residual, weight; write out, residual_out).
    """

    def __init__(self, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = float(eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor,
                weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        acc = torch.promote_types(x.dtype, torch.float32)
        h = x.to(acc) + residual.to(acc)
        inv_rms = torch.rsqrt(h.square().mean(dim=-1, keepdim=True) + self.eps)
        out = h * inv_rms * weight.to(acc)
        return out.to(x.dtype), h.to(x.dtype)

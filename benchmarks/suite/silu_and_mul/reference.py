import torch
import torch.nn as nn


class Model(nn.Module):
    """SiLU-and-mul (SwiGLU activation), vLLM convention.

    x has 2*d columns: the FIRST half is the gate, the second half the up projection
    (vLLM `SiluAndMul`: ``F.silu(x[..., :d]) * x[..., d:]``; SGLang uses the same order).
    out = silu(x[:, :d]) * x[:, d:], in x's dtype.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1] // 2
        acc = torch.promote_types(x.dtype, torch.float32)
        gate, up = x[..., :d].to(acc), x[..., d:].to(acc)
        return (gate * torch.sigmoid(gate) * up).to(x.dtype)

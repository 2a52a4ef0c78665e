import torch
import torch.nn as nn


class Model(nn.Module):
    """SwiGLU activation, vLLM's ``SiluAndMul`` convention.

    The input is the fused gate/up projection ``x = [gate | up]`` of shape [..., 2*I]; the FIRST
    half is the gate and goes through SiLU, the SECOND half multiplies it:
    ``out = silu(x[..., :I]) * x[..., I:]`` with ``silu(g) = g * sigmoid(g)``; out is [..., I].

    Low-precision inputs are computed in float32 and returned in the input dtype; a float64 input
    (the runner's high-precision oracle run) stays in float64.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inter = x.shape[-1] // 2
        xf = x.to(torch.promote_types(x.dtype, torch.float32))
        gate, up = xf[..., :inter], xf[..., inter:]
        return (gate * torch.sigmoid(gate) * up).to(x.dtype)

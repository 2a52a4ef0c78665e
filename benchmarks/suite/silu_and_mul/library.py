"""Library peer for `atrex bench`: Liger-Kernel's SwiGLU over the fused gate|up tensor
(`swiglu_fused_gate_up_forward`, one Triton kernel, one row per program, gate first as vLLM).
torch has no fused SiLU-and-mul; Liger-Kernel is the small pure-Python Triton library a team
would install for it. Where it is not installed the peer is `absent` with that reason (on the
device machine it comes as a carried wheel: benchmarks/suite_h200.sh installs .whl/ if present).
Liger rounds silu(gate) to the activation dtype before the multiply; that is its accuracy."""

import torch


class LibraryUnavailable(RuntimeError):
    """This machine lacks what the peer needs (the runner reports the peer as absent)."""


try:
    from liger_kernel.ops.swiglu import swiglu_fused_gate_up_forward
except ImportError as exc:
    raise LibraryUnavailable(f"Liger-Kernel's fused SwiGLU is not installed here ({exc})") from None


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return swiglu_fused_gate_up_forward(x)[1]

"""Library peer for `atrex bench`: Liger-Kernel's RoPE (`rope_forward`, Hugging Face's
rotate-half convention, which is NeoX style). torch has no fused RoPE; Liger-Kernel is the small
pure-Python Triton library a team would install for it. Where it is not installed the peer is
`absent` with that reason (on the device machine it comes as a carried wheel).

Adapting the vLLM interface to Liger's costs what it costs a team: the cos/sin rows of the
positions are gathered and each half repeated to the head width ([T, D], fp32), and Liger
rotates in place, so query and key are copied first (the operator returns new tensors)."""

import torch


class LibraryUnavailable(RuntimeError):
    """This machine lacks what the peer needs (the runner reports the peer as absent)."""


try:
    from liger_kernel.ops.rope import rope_forward
except ImportError as exc:
    raise LibraryUnavailable(f"Liger-Kernel's RoPE is not installed here ({exc})") from None


class Model(torch.nn.Module):
    def forward(self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
                cos_sin_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        tokens, head_size = query.shape[0], cos_sin_cache.shape[-1]
        half = head_size // 2
        rows = cos_sin_cache.index_select(0, positions.long())
        cos = rows[:, :half].repeat(1, 2)[None]  # [1, T, D]
        sin = rows[:, half:].repeat(1, 2)[None]
        q, k = query.clone(), key.clone()
        # Liger takes [B, H, T, D] views of [B, T, H, D] storage and rotates that storage
        rope_forward(q.view(1, tokens, -1, head_size).transpose(1, 2),
                     k.view(1, tokens, -1, head_size).transpose(1, 2), cos, sin)
        return q, k

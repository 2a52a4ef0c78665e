import torch
import torch.nn as nn


class Model(nn.Module):
    """Rotary position embedding, NeoX style, from a cos/sin cache (vLLM `RotaryEmbedding` with
    is_neox_style=True; FlashInfer `apply_rope_with_cos_sin_cache(..., is_neox=True)`).

    cos_sin_cache[p] = [cos(p * inv_freq) | sin(p * inv_freq)], each half rot_dim/2 wide; here the
    rotary dimension is the whole head (rot_dim = head_size, as in Llama-3.1). For every head of
    query [T, Hq*D] and key [T, Hkv*D], with x1 = x[..., :D/2] and x2 = x[..., D/2:]:
        out1 = x1 * cos - x2 * sin,   out2 = x2 * cos + x1 * sin.
    vLLM and FlashInfer rotate in place; here the rotated (query, key) are returned as new tensors
    (same bytes moved), like the tuple vLLM's RotaryEmbedding.forward returns.
    """

    def forward(self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
                cos_sin_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        head_size = cos_sin_cache.shape[-1]
        half = head_size // 2
        acc = torch.promote_types(query.dtype, torch.float32)
        cs = cos_sin_cache.index_select(0, positions.long()).to(acc)
        cos = cs[:, None, :half]
        sin = cs[:, None, half:]

        def rotate(x: torch.Tensor) -> torch.Tensor:
            t = x.shape[0]
            xh = x.view(t, -1, head_size).to(acc)
            x1, x2 = xh[..., :half], xh[..., half:]
            out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
            return out.reshape(t, -1).to(x.dtype)

        return rotate(query), rotate(key)

"""Library peer for `atrex bench`: PyTorch's scaled_dot_product_attention over the paged latent
cache, what a team without FlashMLA would write with what torch ships.

The absorbed MLA decode is multi-query attention with one latent KV head: keys are the 576-wide
latent rows (c_kv | k_pe), values their first `kv_lora_rank` columns. Each sequence's pages are
gathered into one padded [B, Lmax, 576] latent (block-table padding is page 0, a valid index, and
padded positions are masked out) and the H query heads become H query rows of that one head, so
the latent is read once for all heads. SDPA picks the backend: its fused kernels do not take
576-wide heads with 512-wide values, so on a GPU this is expected to run its math path (that is
what torch offers for MLA today; FlashMLA is not installed on the device).
"""

import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    def __init__(self, kv_lora_rank: int = 512, sm_scale: float = 0.1352337788608801) -> None:
        super().__init__()
        self.kv_lora_rank = int(kv_lora_rank)
        self.sm_scale = float(sm_scale)

    def forward(self, q: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor,
                seq_lens: torch.Tensor) -> torch.Tensor:
        page_size = kv_cache.shape[1]
        longest = int(seq_lens.max())
        pages = block_table[:, : (longest + page_size - 1) // page_size].long()
        latent = kv_cache[pages].flatten(1, 2)[:, None, :longest]  # [B, 1, Lmax, 576]
        positions = torch.arange(longest, device=q.device)
        mask = (positions[None, :] < seq_lens[:, None].long())[:, None, None, :]  # [B,1,1,L]
        out = F.scaled_dot_product_attention(q[:, None], latent,
                                             latent[..., : self.kv_lora_rank],
                                             attn_mask=mask, scale=self.sm_scale)
        return out[:, 0]

"""Library peer for `atrex bench`: PyTorch's scaled_dot_product_attention over the paged cache,
what a team without FlashInfer / vLLM's paged kernels would write with what torch ships.

SDPA has no paged or varlen entry point (torch 2.11), so each sequence's pages are gathered into
one padded [B, Lmax, Hkv, D] K and V (block-table padding is page 0, a valid index, and the
padded positions are masked out), and the GQA group is folded into the query length: the `group`
query heads that share a KV head become `group` query rows of one head, so K and V are read once
per KV head and no `enable_gqa` or K/V repeat is needed. SDPA picks the backend: flash takes no
mask, so on a GPU the memory-efficient kernel is expected (not yet run on the H200); on a CPU
machine its CPU kernel.
"""

import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    def forward(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                block_table: torch.Tensor, seq_lens: torch.Tensor) -> torch.Tensor:
        batch, num_q_heads, head_size = q.shape
        page_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
        group = num_q_heads // num_kv_heads
        longest = int(seq_lens.max())
        pages = block_table[:, : (longest + page_size - 1) // page_size].long()
        # [B, pages, page, Hkv, D] -> [B, Hkv, Lmax, D]
        k = k_cache[pages].flatten(1, 2)[:, :longest].transpose(1, 2)
        v = v_cache[pages].flatten(1, 2)[:, :longest].transpose(1, 2)
        positions = torch.arange(longest, device=q.device)
        mask = (positions[None, :] < seq_lens[:, None].long())[:, None, None, :]  # [B,1,1,L]
        rows = q.view(batch, num_kv_heads, group, head_size)  # query head h -> kv head h // group
        out = F.scaled_dot_product_attention(rows, k, v, attn_mask=mask)
        return out.reshape(batch, num_q_heads, head_size)

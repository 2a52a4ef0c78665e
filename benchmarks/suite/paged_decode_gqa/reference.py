import torch
import torch.nn as nn


class Model(nn.Module):
    """GQA decode attention over a paged KV cache (vLLM / FlashInfer paged decode, NHD pages).

    q           [B, Hq, D]            one new token per sequence
    k_cache     [P, page, Hkv, D]     v_cache the same; token j of sequence b lives in page
                                      block_table[b, j // page] at offset j % page
    block_table [B, max_pages] int32  entries past a sequence's last page are padding
    seq_lens    [B] int32             context length of each sequence (>= 1), current token included
    out         [B, Hq, D]            softmax(q K^T * D^-0.5) V over the sequence's tokens;
                                      query head h reads kv head h // (Hq / Hkv) (vLLM/FlashInfer
                                      grouping)
    """

    def forward(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                block_table: torch.Tensor, seq_lens: torch.Tensor) -> torch.Tensor:
        batch, num_q_heads, head_size = q.shape
        page_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
        group = num_q_heads // num_kv_heads
        scale = head_size ** -0.5
        out = torch.empty_like(q)
        for b in range(batch):
            length = int(seq_lens[b])
            pages = block_table[b, : (length + page_size - 1) // page_size].long()
            k = k_cache[pages].reshape(-1, num_kv_heads, head_size)[:length]
            v = v_cache[pages].reshape(-1, num_kv_heads, head_size)[:length]
            k = k.repeat_interleave(group, dim=1)  # [L, Hq, D]
            v = v.repeat_interleave(group, dim=1)
            scores = torch.einsum("hd,lhd->hl", q[b], k) * scale
            probs = torch.softmax(scores, dim=-1)
            out[b] = torch.einsum("hl,lhd->hd", probs, v)
        return out

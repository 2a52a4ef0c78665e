import torch
import torch.nn as nn


class Model(nn.Module):
    """DeepSeek-V3 multi-head latent attention, decode, over a paged latent cache, in the absorbed
    form that FlashMLA / vLLM / SGLang use for decode.

    q        [B, H, 576]      per head: q_nope multiplied by W_UK (kv_lora_rank 512) | q_pe (64)
    kv_cache [P, page, 576]   per token: c_kv (512, the compressed latent) | k_pe (64, roped key);
                              one latent "kv head" shared by all H heads. Token j of sequence b
                              is in page block_table[b, j // page] at offset j % page (pages of
                              64 tokens, as FlashMLA)
    out      [B, H, 512]      softmax(q . kv^T * sm_scale) @ c_kv   (latent output; W_UV is applied
                              afterwards by the caller)
    sm_scale: DeepSeek-V3 uses (qk_nope_head_dim + qk_rope_head_dim)^-0.5 * mscale^2 with the YaRN
    mscale = 0.1 * mscale_all_dim * ln(factor) + 1 (config: 128 + 64, mscale_all_dim 1, factor 40).
    """

    def __init__(self, kv_lora_rank: int = 512, sm_scale: float = 0.1352337788608801) -> None:
        super().__init__()
        self.kv_lora_rank = int(kv_lora_rank)
        self.sm_scale = float(sm_scale)

    def forward(self, q: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor,
                seq_lens: torch.Tensor) -> torch.Tensor:
        batch, num_heads, width = q.shape
        page_size = kv_cache.shape[1]
        out = q.new_empty(batch, num_heads, self.kv_lora_rank)
        for b in range(batch):
            length = int(seq_lens[b])
            pages = block_table[b, : (length + page_size - 1) // page_size].long()
            kv = kv_cache[pages].reshape(-1, width)[:length]  # [L, 576]
            scores = (q[b] @ kv.T) * self.sm_scale  # [H, L]
            probs = torch.softmax(scores, dim=-1)
            out[b] = probs @ kv[:, : self.kv_lora_rank]
        return out

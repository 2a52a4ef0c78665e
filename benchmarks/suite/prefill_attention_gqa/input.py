import torch


def _make_inputs(seq_lens: list, num_q_heads: int, num_kv_heads: int, head_size: int) -> dict:
    """Packed prefill batch: the sequences' tokens back to back (FlashAttention varlen layout)."""
    total = sum(seq_lens)
    cu = [0]
    for n in seq_lens:
        cu.append(cu[-1] + n)
    return {
        "q": torch.randn(total, num_q_heads, head_size, dtype=torch.bfloat16, device="cuda"),
        "k": torch.randn(total, num_kv_heads, head_size, dtype=torch.bfloat16, device="cuda"),
        "v": torch.randn(total, num_kv_heads, head_size, dtype=torch.bfloat16, device="cuda"),
        "cu_seqlens": torch.tensor(cu, dtype=torch.int32, device="cuda"),
        "max_seqlen": max(seq_lens),
    }

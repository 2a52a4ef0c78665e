import math

import torch


def _decode_lengths(batch: int, mean: int, lo: int, hi: int) -> list[int]:
    """A fixed multiset of context lengths: quantiles of a log-normal (sigma 0.7) clipped to
    [lo, hi], rescaled so that the mean is `mean`. Fixed so the work per call is constant; the
    order and the page placement are random per call."""
    from statistics import NormalDist

    z = [NormalDist().inv_cdf((i + 0.5) / batch) for i in range(batch)]
    raw = [math.exp(0.7 * v) for v in z]
    scale = mean / (sum(raw) / batch)
    for _ in range(50):  # rescale until the clipped mean is on target
        lens = [min(hi, max(lo, round(scale * r))) for r in raw]
        scale *= mean / (sum(lens) / batch)
    return [min(hi, max(lo, round(scale * r))) for r in raw]


def _make_inputs(num_tokens: int, num_kv_heads: int, head_size: int, page_size: int,
                 num_pages: int, phase: str, num_padding: int = 0) -> dict:
    """phase "decode": one new token per sequence, appended after a context of mixed length
    (mean 1.5K in [256, 4096)), in that sequence's current last page; phase "prefill": sequences
    of 2048 new tokens from position 0, in pages drawn at random from the pool. The last
    `num_padding` tokens are CUDA-graph padding (slot -1)."""
    real = num_tokens - num_padding
    pages = torch.randperm(num_pages, device="cuda")
    if phase == "decode":
        lens = torch.tensor(_decode_lengths(real, 1536, 256, 4095), device="cuda")
        lens = lens[torch.randperm(real, device="cuda")]
        slots = pages[:real] * page_size + lens % page_size
    elif phase == "prefill":
        seq = min(2048, real)
        pos = torch.arange(real, device="cuda")
        seq_id, within = pos // seq, pos % seq
        pages_per_seq = math.ceil(seq / page_size)
        if num_pages < pages_per_seq * math.ceil(real / seq):
            raise ValueError("pool too small")
        slots = pages[seq_id * pages_per_seq + within // page_size] * page_size + within % page_size
    else:
        raise ValueError(phase)
    slot_mapping = torch.cat([slots, torch.full((num_padding,), -1, device="cuda")]).to(torch.int64)
    shape = (num_pages, page_size, num_kv_heads, head_size)
    new = (num_tokens, num_kv_heads, head_size)
    return {
        "key": torch.randn(new, dtype=torch.bfloat16, device="cuda"),
        "value": torch.randn(new, dtype=torch.bfloat16, device="cuda"),
        "k_cache": torch.randn(shape, dtype=torch.bfloat16, device="cuda"),
        "v_cache": torch.randn(shape, dtype=torch.bfloat16, device="cuda"),
        "slot_mapping": slot_mapping,
    }

import math

import torch


def _decode_lengths(batch: int, mean: int, lo: int, hi: int) -> list[int]:
    """A fixed multiset of context lengths: quantiles of a log-normal (sigma 0.7) clipped to
    [lo, hi], rescaled so that the mean is `mean`. Fixed so the work per call is constant (the
    declared FLOPs and bytes are exact); the order and the page placement are random per call."""
    from statistics import NormalDist

    z = [NormalDist().inv_cdf((i + 0.5) / batch) for i in range(batch)]
    raw = [math.exp(0.7 * v) for v in z]
    scale = mean / (sum(raw) / batch)
    for _ in range(50):  # rescale until the clipped mean is on target
        lens = [min(hi, max(lo, round(scale * r))) for r in raw]
        scale *= mean / (sum(lens) / batch)
    return [min(hi, max(lo, round(scale * r))) for r in raw]


def _seq_lens(batch, mean_len, min_len, max_len, seq_lens):
    return list(seq_lens) if seq_lens is not None else _decode_lengths(batch, mean_len, min_len,
                                                                       max_len)


def _make_inputs(batch: int, num_heads: int, kv_lora_rank: int, rope_dim: int, mean_len: int,
                 min_len: int, max_len: int, page_size: int = 64,
                 seq_lens: list | None = None) -> dict:
    """Mixed context lengths around mean_len (or an explicit list for edge cases); pages drawn as a
    random permutation of a pool with 1/8 spare pages; block table padded with page 0.
    c_kv comes out of an RMSNorm in the model (unit scale); q is scaled so that scores have the
    spread of a trained model's (a few tokens dominate, most get little weight)."""
    lens = _seq_lens(batch, mean_len, min_len, max_len, seq_lens)
    if len(lens) != batch or min(lens) < 1 or max(lens) > max_len:
        raise ValueError("bad sequence lengths")
    order = torch.randperm(batch).tolist()
    lens = [lens[i] for i in order]
    pages_per_seq = [math.ceil(n / page_size) for n in lens]
    used = sum(pages_per_seq)
    pool = used + max(1, used // 8)
    perm = torch.randperm(pool, device="cuda")
    width = math.ceil(max_len / page_size)
    block_table = torch.zeros(batch, width, dtype=torch.int32, device="cuda")
    start = 0
    for b, n in enumerate(pages_per_seq):
        block_table[b, :n] = perm[start:start + n].to(torch.int32)
        start += n
    dim = kv_lora_rank + rope_dim
    return {
        "q": (0.5 * torch.randn(batch, num_heads, dim, device="cuda")).to(torch.bfloat16),
        "kv_cache": torch.randn(pool, page_size, dim, dtype=torch.bfloat16, device="cuda"),
        "block_table": block_table,
        "seq_lens": torch.tensor(lens, dtype=torch.int32, device="cuda"),
    }

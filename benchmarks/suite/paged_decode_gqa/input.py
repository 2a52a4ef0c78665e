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


def _make_inputs(batch: int, num_q_heads: int, num_kv_heads: int, head_size: int,
                 page_size: int = 16, mean_len: int = 1536, min_len: int = 256,
                 max_len: int = 4096, seq_lens: list | None = None) -> dict:
    """Mixed context lengths (see _decode_lengths, or an explicit list for edge cases), pages of
    each sequence drawn as a random permutation of a pool with 1/8 spare pages, block table padded
    with page 0 (vLLM convention) up to max_len / page_size columns."""
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
    shape = (pool, page_size, num_kv_heads, head_size)
    return {
        "q": torch.randn(batch, num_q_heads, head_size, dtype=torch.bfloat16, device="cuda"),
        "k_cache": torch.randn(shape, dtype=torch.bfloat16, device="cuda"),
        "v_cache": torch.randn(shape, dtype=torch.bfloat16, device="cuda"),
        "block_table": block_table,
        "seq_lens": torch.tensor(lens, dtype=torch.int32, device="cuda"),
    }

import math

import torch


def _llama3_inv_freq(head_size: int, theta: float, factor: float, low_freq_factor: float,
                     high_freq_factor: float, original_max_position: int) -> torch.Tensor:
    """Llama-3.1 rope_scaling ("rope_type": "llama3"), as in the model's config.json."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_size, 2, dtype=torch.float64) / head_size)
    low_wavelen = original_max_position / low_freq_factor
    high_wavelen = original_max_position / high_freq_factor
    out = []
    for f in inv_freq.tolist():
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            out.append(f)
        elif wavelen > low_wavelen:
            out.append(f / factor)
        else:
            smooth = (original_max_position / wavelen - low_freq_factor) / (
                high_freq_factor - low_freq_factor)
            out.append((1 - smooth) * f / factor + smooth * f)
    return torch.tensor(out, dtype=torch.float64)


def _make_inputs(num_tokens: int, num_q_heads: int, num_kv_heads: int, head_size: int,
                 max_position: int, phase: str) -> dict:
    """phase "decode": one token per sequence at a random, distinct position in [256, 4096);
    phase "prefill": sequences of 2048 tokens (positions 0..2047), back to back."""
    inv_freq = _llama3_inv_freq(head_size, 500000.0, 8.0, 1.0, 4.0, 8192)
    t = torch.arange(max_position, dtype=torch.float64)[:, None] * inv_freq[None, :]
    cos_sin_cache = torch.cat([t.cos(), t.sin()], dim=-1).to(torch.float32).to("cuda")
    if phase == "decode":
        lo, hi = min(256, max_position - num_tokens), min(4096, max_position)
        positions = lo + torch.randperm(hi - lo, device="cuda")[:num_tokens]
    elif phase == "prefill":
        seq = min(2048, max_position)
        positions = torch.arange(num_tokens, device="cuda") % seq
    else:
        raise ValueError(phase)
    query = torch.randn(num_tokens, num_q_heads * head_size, dtype=torch.bfloat16, device="cuda")
    key = torch.randn(num_tokens, num_kv_heads * head_size, dtype=torch.bfloat16, device="cuda")
    return {"positions": positions.to(torch.int64), "query": query, "key": key,
            "cos_sin_cache": cos_sin_cache}

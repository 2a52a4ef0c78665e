import torch

# Sampling settings mixed across the batch, as a server sees them (per-request parameters):
#   Qwen3 model card, thinking mode:      temperature 0.6, top_p 0.95, top_k 20
#   Qwen3 model card, non-thinking mode:  temperature 0.7, top_p 0.8,  top_k 20
#   Llama-3.1-8B-Instruct generation_config: temperature 0.6, top_p 0.9 (no top-k)
#   plain sampling (vLLM defaults):        temperature 1.0, top_p 1.0, top_k disabled
_SETTINGS = ((0.6, 0.95, 20), (0.7, 0.8, 20), (0.6, 0.9, 0), (1.0, 1.0, 0))
_UNIT = 2.0 ** -24


def _next_token_logits(batch: int, vocab: int, flat_rows: int) -> torch.Tensor:
    """Logits shaped like an LLM's next-token distribution: a Gaussian background over the whole
    vocabulary plus a few dozen plausible tokens far above it (a Zipf-like head), with per-row
    variety in how confident the model is. The last `flat_rows` rows have no head (a near-uniform
    distribution, the worst case for sorting-free selection)."""
    logits = 2.0 * torch.randn(batch, vocab, device="cuda")
    head = min(64, vocab)
    idx = torch.rand(batch, vocab, device="cuda").argsort(dim=-1)[:, :head]
    rank = torch.arange(1, head + 1, device="cuda", dtype=torch.float32)
    confidence = 10.0 + 12.0 * torch.rand(batch, 1, device="cuda")  # head logit over the bulk
    boost = confidence + 2.0 * torch.log(1.0 / rank)[None, :] + 0.5 * torch.randn(batch, head,
                                                                                   device="cuda")
    if flat_rows:
        boost[batch - flat_rows:] = 0.0
    return logits.scatter_add(1, idx, boost)


def _make_inputs(batch: int, vocab: int, flat_rows: int = 0, edge_rows: bool = False) -> dict:
    """probs: softmax(logits / temperature) quantized DOWN to multiples of 2^-24 (so every partial
    sum is exact in fp32 and the sampled id does not depend on summation order), row sums <= 1.
    top_k: 1..vocab (vocab = disabled), top_p: (0, 1], uniform: U[0, 1) per row.
    edge_rows: first rows get top_k = 1, top_p = 1.0 (kept near 1.0) and u close to 1."""
    setting = torch.randint(0, len(_SETTINGS), (batch,), device="cuda")
    table = torch.tensor(_SETTINGS, dtype=torch.float64, device="cuda")[setting]
    temperature, top_p, top_k = table[:, 0], table[:, 1], table[:, 2].to(torch.int32)
    top_k = torch.where(top_k > 0, top_k, torch.full_like(top_k, vocab)).clamp(max=vocab)
    logits = _next_token_logits(batch, vocab, flat_rows).double() / temperature[:, None]
    probs = torch.softmax(logits, dim=-1)
    probs = (torch.floor(probs / _UNIT) * _UNIT).to(torch.float32)
    uniform = torch.rand(batch, device="cuda")
    top_p = top_p.to(torch.float32)
    if edge_rows:
        top_k[0], top_p[0] = 1, 0.9
        top_k[1], top_p[1] = vocab, 1.0
        top_k[2], top_p[2], uniform[2] = 5, 0.99999994, 1.0 - 2.0 ** -24
        top_k[3], top_p[3], uniform[3] = vocab, 0.999, 0.0
    return {"probs": probs, "top_k": top_k, "top_p": top_p, "uniform": uniform}

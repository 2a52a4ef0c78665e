import torch


def _route(num_tokens: int, num_experts: int, top_k: int, skew: float):
    """Router output: softmax over random logits plus a per-expert popularity bias (std `skew`,
    drawn per call: some experts hot, some cold), top-k, renormalized (Qwen3-MoE
    norm_topk_prob = true). The skew is illustrative, not fitted to a trace: at skew 0.3 the
    hottest expert gets ~4x the mean load at 8192 tokens, and 64 tokens touch ~119 of 128
    experts (uniform routing would touch ~126)."""
    bias = skew * torch.randn(num_experts, device="cuda")
    logits = torch.randn(num_tokens, num_experts, device="cuda") + bias
    probs = torch.softmax(logits, dim=-1)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(torch.float32), ids.to(torch.int32)


def _make_inputs(num_tokens: int, num_experts: int, top_k: int, hidden_size: int,
                 intermediate_size: int, skew: float = 0.3) -> dict:
    weights, ids = _route(num_tokens, num_experts, top_k, skew)
    h, i = hidden_size, intermediate_size
    return {
        "hidden_states": torch.randn(num_tokens, h, device="cuda").to(torch.bfloat16),
        "w1": (torch.randn(num_experts, 2 * i, h, device="cuda") * h ** -0.5).to(torch.bfloat16),
        "w2": (torch.randn(num_experts, h, i, device="cuda") * i ** -0.5).to(torch.bfloat16),
        "topk_weights": weights,
        "topk_ids": ids,
    }

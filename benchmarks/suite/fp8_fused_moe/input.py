import torch

FP8_MAX = 448.0


def _route(num_tokens: int, num_experts: int, top_k: int, skew: float):
    """Router output: softmax over random logits plus a per-expert popularity bias (std `skew`,
    drawn per call; illustrative, not fitted to a trace), top-k, renormalized. (DeepSeek-V3 itself
    scores with sigmoids and group-limited top-k over 256 experts; this instance models one EP8
    rank's 32 local experts with every choice local, DESIGN §6.)"""
    bias = skew * torch.randn(num_experts, device="cuda")
    logits = torch.randn(num_tokens, num_experts, device="cuda") + bias
    probs = torch.softmax(logits, dim=-1)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(torch.float32), ids.to(torch.int32)


def _quant_blocks(x: torch.Tensor, block_rows: int, block_cols: int):
    """float8_e4m3fn with one fp32 scale per block (amax / 448, round to nearest even)."""
    rows, cols = x.shape
    blocks = x.float().view(rows // block_rows, block_rows, cols // block_cols, block_cols)
    scale = blocks.abs().amax(dim=(1, 3)).clamp_min(1e-10) / FP8_MAX
    q = (blocks / scale[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.view(rows, cols), scale.contiguous()


def _expert_weights(num_experts: int, rows: int, cols: int, block: int):
    q = torch.empty(num_experts, rows, cols, dtype=torch.float8_e4m3fn, device="cuda")
    s = torch.empty(num_experts, rows // block, cols // block, device="cuda")
    for e in range(num_experts):  # one expert at a time keeps the fp32 staging small
        w = (torch.randn(rows, cols, device="cuda") * cols ** -0.5).to(torch.bfloat16)
        q[e], s[e] = _quant_blocks(w, block, block)
    return q, s


def _make_inputs(num_tokens: int, num_experts: int, top_k: int, hidden_size: int,
                 intermediate_size: int, skew: float = 0.3, block: int = 128) -> dict:
    """Activations (bf16, ~1% outlier channels) quantized in 1 x 128 groups; expert weights (bf16,
    1/sqrt(fan-in) scale) quantized in 128 x 128 blocks, as DeepSeek-V3's checkpoint stores them."""
    weights, ids = _route(num_tokens, num_experts, top_k, skew)
    x = torch.randn(num_tokens, hidden_size, device="cuda")
    outliers = torch.rand(hidden_size, device="cuda") < 0.01
    x = torch.where(outliers, 10.0 * x, x).to(torch.bfloat16)
    hidden_states, hidden_scale = _quant_blocks(x, 1, block)
    w1, w1_scale = _expert_weights(num_experts, 2 * intermediate_size, hidden_size, block)
    w2, w2_scale = _expert_weights(num_experts, hidden_size, intermediate_size, block)
    return {"hidden_states": hidden_states, "hidden_scale": hidden_scale, "w1": w1,
            "w1_scale": w1_scale, "w2": w2, "w2_scale": w2_scale, "topk_weights": weights,
            "topk_ids": ids}

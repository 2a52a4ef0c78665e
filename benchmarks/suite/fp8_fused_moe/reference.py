import torch
import torch.nn as nn
import torch.nn.functional as F

_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
FP8_MAX = 448.0


def _dequant(q: torch.Tensor, scale: torch.Tensor, block_rows: int, block_cols: int, acc):
    rows, cols = q.shape
    s = scale.to(acc).repeat_interleave(block_rows, 0).repeat_interleave(block_cols, 1)
    return q.to(acc) * s[:rows, :cols]


def _quant_groups(x: torch.Tensor, group: int):
    """1 x group fp8 quantization (per_token_group_quant_fp8: scale = max(amax, 1e-10) / 448)."""
    rows, cols = x.shape
    xg = x.view(rows, cols // group, group)
    scale = xg.abs().amax(dim=-1).clamp_min(1e-10) / FP8_MAX
    q = (xg / scale[..., None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.view(rows, cols), scale


class Model(nn.Module):
    """Fused MoE with DeepSeek-V3 block-FP8 experts (vLLM/SGLang `fused_experts` with
    use_fp8_w8a8 and block_shape [128, 128]):

    hidden_states [T, H] fp8 e4m3 with hidden_scale [T, H/128] (1 x 128 groups)
    w1 [E, 2I, H] fp8 with w1_scale [E, 2I/128, H/128]; rows 0..I-1 gate, I..2I-1 up (first half
                                                        gate, vLLM's w13 layout)
    w2 [E, H, I] fp8 with w2_scale [E, H/128, I/128]
    topk_weights [T, k] fp32 (renormalized), topk_ids [T, k] int32
    For every routed pair: gate_up = x @ w1[e]^T (exact accumulation of the dequantized values),
    act = silu(gate) * up, then act is quantized to fp8 in 1 x 128 groups (as the serving kernels
    do before the second GEMM), y = act_q @ w2[e]^T; out[t] = sum_j topk_weights[t, j] * y.
    Output bf16.
    """

    def __init__(self, block: int = 128) -> None:
        super().__init__()
        self.block = int(block)

    def forward(self, hidden_states: torch.Tensor, hidden_scale: torch.Tensor, w1: torch.Tensor,
                w1_scale: torch.Tensor, w2: torch.Tensor, w2_scale: torch.Tensor,
                topk_weights: torch.Tensor, topk_ids: torch.Tensor) -> torch.Tensor:
        bl = self.block
        num_experts, two_i, _ = w1.shape
        inter = two_i // 2
        acc = torch.promote_types(hidden_scale.dtype, torch.float32)
        x = _dequant(hidden_states, hidden_scale, 1, bl, acc)
        out = torch.zeros_like(x)
        for e in range(num_experts):
            tok, slot = (topk_ids == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            gate_up = x[tok] @ _dequant(w1[e], w1_scale[e], bl, bl, acc).T
            act = F.silu(gate_up[:, :inter]) * gate_up[:, inter:]
            act_q, act_s = _quant_groups(act, bl)
            y = _dequant(act_q, act_s, 1, bl, acc) @ _dequant(w2[e], w2_scale[e], bl, bl, acc).T
            out.index_add_(0, tok, y * topk_weights[tok, slot].to(acc)[:, None])
        return out.to(torch.bfloat16 if hidden_states.dtype in _FP8 else acc)

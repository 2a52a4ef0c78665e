import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Fused mixture-of-experts MLP with SiLU-and-mul experts (vLLM `fused_experts` semantics):

    hidden_states [T, H]; w1 [E, 2I, H] (gate rows 0..I-1, up rows I..2I-1: vLLM's w13 layout,
    first half gate); w2 [E, H, I]; topk_weights [T, k] fp32 (already renormalized);
    topk_ids [T, k].
    out[t] = sum_j topk_weights[t, j] * w2[e] @ (silu(w1[e, :I] @ x_t) * (w1[e, I:] @ x_t)),
    e = topk_ids[t, j]; returned in the activations' dtype.
    """

    def forward(self, hidden_states: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor,
                topk_weights: torch.Tensor, topk_ids: torch.Tensor) -> torch.Tensor:
        num_experts, two_i, _ = w1.shape
        inter = two_i // 2
        acc = torch.promote_types(hidden_states.dtype, torch.float32)
        x = hidden_states.to(acc)
        out = torch.zeros_like(x)
        for e in range(num_experts):
            tok, slot = (topk_ids == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            gate_up = x[tok] @ w1[e].to(acc).T
            act = F.silu(gate_up[:, :inter]) * gate_up[:, inter:]
            y = act @ w2[e].to(acc).T
            out.index_add_(0, tok, y * topk_weights[tok, slot].to(acc)[:, None])
        return out.to(hidden_states.dtype)

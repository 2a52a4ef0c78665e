"""Library peer for `atrex bench`: the MoE MLP on `torch._grouped_mm` (one grouped GEMM over all
experts for the gate/up projection, one for the down projection, CUTLASS on sm90), with the
token permutation, SiLU-and-mul and the weighted combine in plain PyTorch, as a team without a
fused-MoE kernel would write it. Intermediates in bf16 (as vLLM's fused_experts keeps them).
No host synchronization, so a decode step can be captured in a CUDA graph."""

import torch
import torch.nn.functional as F


class LibraryUnavailable(RuntimeError):
    """This machine's torch lacks what the peer needs (the runner reports the peer as absent)."""


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        if not hasattr(torch, "_grouped_mm"):
            raise LibraryUnavailable(f"torch {torch.__version__} has no torch._grouped_mm")

    def forward(self, hidden_states: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor,
                topk_weights: torch.Tensor, topk_ids: torch.Tensor) -> torch.Tensor:
        num_tokens, top_k = topk_ids.shape
        num_experts, two_i, _ = w1.shape
        inter = two_i // 2
        ids = topk_ids.reshape(-1).long()
        order = torch.argsort(ids, stable=True)
        tokens = order // top_k
        counts = torch.zeros(num_experts, dtype=torch.int32, device=ids.device).index_add_(
            0, ids, torch.ones_like(ids, dtype=torch.int32))
        offsets = torch.cumsum(counts, 0, dtype=torch.int32)
        x = hidden_states[tokens]
        gate_up = torch._grouped_mm(x, w1.transpose(1, 2), offs=offsets)
        act = F.silu(gate_up[:, :inter]) * gate_up[:, inter:]
        y = torch._grouped_mm(act, w2.transpose(1, 2), offs=offsets)
        weights = topk_weights.reshape(-1)[order].to(torch.float32)
        out = torch.zeros(num_tokens, hidden_states.shape[1], dtype=torch.float32,
                          device=hidden_states.device)
        out.index_add_(0, tokens, y.to(torch.float32) * weights[:, None])
        return out.to(hidden_states.dtype)

import torch
import torch.nn as nn


class Model(nn.Module):
    """Causal GQA attention over packed variable-length sequences (prefill), FlashAttention varlen
    convention as used by vLLM/SGLang prefill:

    q [T, Hq, D], k and v [T, Hkv, D]: the tokens of all sequences back to back;
    cu_seqlens [B + 1] int32: sequence b is tokens cu_seqlens[b] .. cu_seqlens[b + 1] - 1;
    max_seqlen: the longest sequence (an int, as FlashAttention takes it);
    out [T, Hq, D]: token i of a sequence attends to tokens 0..i of the same sequence with
    softmax(q k^T * D^-0.5); query head h reads kv head h // (Hq / Hkv).
    """

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                cu_seqlens: torch.Tensor, max_seqlen: int) -> torch.Tensor:
        num_q_heads, head_size = q.shape[1], q.shape[2]
        group = num_q_heads // k.shape[1]
        scale = head_size ** -0.5
        out = torch.empty_like(q)
        bounds = cu_seqlens.tolist()
        for start, end in zip(bounds[:-1], bounds[1:], strict=True):
            qs = q[start:end].transpose(0, 1)  # [Hq, L, D]
            ks = k[start:end].repeat_interleave(group, dim=1).transpose(0, 1)
            vs = v[start:end].repeat_interleave(group, dim=1).transpose(0, 1)
            length = end - start
            scores = (qs @ ks.transpose(1, 2)) * scale
            causal = torch.ones(length, length, dtype=torch.bool, device=q.device).tril()
            scores = scores.masked_fill(~causal, float("-inf"))
            out[start:end] = (torch.softmax(scores, dim=-1) @ vs).transpose(0, 1)
        return out

"""Library peer for `atrex bench`: PyTorch's scaled_dot_product_attention, causal, GQA through
`enable_gqa` (no K/V repeat). On a GPU only the cuDNN and FlashAttention backends are allowed, in
that order (measured on the H200 with torch 2.11: cuDNN 0.525 and flash 0.288 of the roofline on
this shape; the memory-efficient backend refuses GQA); on a CPU machine SDPA picks its CPU kernel.

The suite's inputs are packed varlen sequences (FlashAttention's cu_seqlens convention). SDPA has
no varlen entry point in torch 2.11, so equal lengths run as one batched call and mixed lengths
as one call per sequence (what a team without flash-attn's varlen kernel would write).
"""

import contextlib

import torch
import torch.nn.functional as F


class LibraryUnavailable(RuntimeError):
    """This machine's torch lacks what the peer needs (the runner reports the peer as absent)."""


def _backends(device: torch.device):
    if device.type != "cuda":
        return contextlib.nullcontext()
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as exc:
        raise LibraryUnavailable(f"torch.nn.attention.sdpa_kernel: {exc}") from None
    wanted = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION]
    try:
        return sdpa_kernel(wanted, set_priority=True)
    except TypeError:  # a torch without backend priorities: the two, in its own order
        return sdpa_kernel(wanted)


def _attend(q, k, v):
    """q [B, L, Hq, D], k/v [B, L, Hkv, D] -> [B, L, Hq, D], causal."""
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                         v.transpose(1, 2), is_causal=True,
                                         enable_gqa=q.shape[2] != k.shape[2])
    return out.transpose(1, 2)


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        tiny = torch.zeros(1, 2, 1, 8)
        try:
            F.scaled_dot_product_attention(tiny, tiny[:, :1], tiny[:, :1], enable_gqa=True)
        except TypeError as exc:
            raise LibraryUnavailable(f"scaled_dot_product_attention: {exc}") from None

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                cu_seqlens: torch.Tensor, max_seqlen: int) -> torch.Tensor:
        bounds = cu_seqlens.tolist()
        lengths = {end - start for start, end in zip(bounds[:-1], bounds[1:], strict=True)}
        with _backends(q.device):
            if len(lengths) == 1:
                (length,) = lengths
                batch = len(bounds) - 1
                out = _attend(q.view(batch, length, *q.shape[1:]),
                              k.view(batch, length, *k.shape[1:]),
                              v.view(batch, length, *v.shape[1:]))
                return out.reshape(q.shape)
            out = torch.empty_like(q)
            for start, end in zip(bounds[:-1], bounds[1:], strict=True):
                if end > start:
                    out[start:end] = _attend(q[None, start:end], k[None, start:end],
                                             v[None, start:end])[0]
            return out

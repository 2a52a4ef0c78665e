"""Library peer for `atrex bench`: the block-FP8 MoE MLP on cuBLASLt through `torch._scaled_mm`,
one call per expert and projection, with the token permutation, SiLU-and-mul, the activation's
1 x 128 re-quantization and the weighted combine in plain PyTorch: what a team without a fused
FP8 MoE kernel gets from the installed libraries.

torch's grouped FP8 GEMM (`torch._scaled_grouped_mm`) takes tensor- or row-wise scales on sm90,
not DeepSeek's 128 x 128 weight blocks, so each expert is its own GEMM and the experts' row counts
come to the host once per call (one synchronization; the op is not launch-bound, so the judge
times it without a CUDA graph).

Each GEMM uses block scales (1 x 128 activation groups, 128 x 128 weight blocks) where this torch
and GPU accept them (cuBLASLt >= 12.9 on sm90), checked once against the row-wise form on the
first expert; otherwise (or for a row count torch refuses them at) the same math with row-wise
scales, one `_scaled_mm` per 128-wide K block, accumulated in fp32. Which path ran is the model's
`atrex_implementation`. Before stop 39 the row counts were not padded, so every expert whose
count was not a multiple of 4 took the row-wise path (228 ms a call on an H100 at decode-t512).
"""

import torch
import torch.nn.functional as F

FP8_MAX = 448.0
ROW_ALIGN = 16  # rows per block-scaled GEMM padded to a multiple of this


class LibraryUnavailable(RuntimeError):
    """This machine's torch lacks what the peer needs (the runner reports the peer as absent)."""


def _block_scaled(a, a_scale, b, b_scale):
    """a [M, K] fp8 with [M, K/128] scales, b [N, K] fp8 with [N/128, K/128]: bf16 [M, N].
    The scale layouts are the ones torch's blockwise tests pass: a's M-major, b's transposed.
    An expert's row count is whatever the routing gave it; the rows are padded to ROW_ALIGN
    (zeros) as a serving stack pads its GEMMs, since an M-major scale column of M floats is
    only 16-byte aligned when M is a multiple of 4."""
    rows = a.shape[0]
    a, a_scale = _pad_rows(a, a_scale, ROW_ALIGN)
    return torch._scaled_mm(a, b.t(), scale_a=a_scale.t().contiguous().t(),
                            scale_b=b_scale.t(), out_dtype=torch.bfloat16)[:rows]


def _pad_rows(a, a_scale, multiple: int):
    """a and its row scales with zero rows (scale 1) appended up to a multiple of `multiple`."""
    pad = -a.shape[0] % multiple
    if not pad:
        return a, a_scale
    zeros = torch.zeros(pad, a.shape[1], dtype=torch.uint8, device=a.device)
    a = torch.cat([a.view(torch.uint8), zeros]).view(a.dtype)  # fp8 cat is not in every build
    return a, torch.cat([a_scale, a_scale.new_ones(pad, a_scale.shape[1])])


def _row_scaled_per_k_block(a, a_scale, b, b_scale, block: int):
    """The same product from row-wise scaled GEMMs: within one 128-wide K block the activation
    scale is per row and the weight scale per output column. fp32 [M, N]."""
    col_scale = b_scale.repeat_interleave(block, 0)[:b.shape[0]]  # [N, K/128]
    out = torch.zeros(a.shape[0], b.shape[0], dtype=torch.float32, device=a.device)
    for j, k0 in enumerate(range(0, a.shape[1], block)):
        out += torch._scaled_mm(a[:, k0:k0 + block], b[:, k0:k0 + block].t(),
                                scale_a=a_scale[:, j:j + 1].contiguous(),
                                scale_b=col_scale[:, j][None, :].contiguous(),
                                out_dtype=torch.float32)
    return out


def _quant_groups(x: torch.Tensor, block: int):
    """1 x block e4m3 groups, scale = max(amax, 1e-10) / 448 (per_token_group_quant_fp8)."""
    groups = x.view(x.shape[0], -1, block)
    scale = groups.abs().amax(dim=-1).clamp_min(1e-10) / FP8_MAX
    q = (groups / scale[..., None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.view(x.shape), scale


class Model(torch.nn.Module):
    def __init__(self, block: int = 128) -> None:
        super().__init__()
        if not hasattr(torch, "_scaled_mm"):
            raise LibraryUnavailable(f"torch {torch.__version__} has no torch._scaled_mm")
        self.block = int(block)
        self.block_scales: bool | None = None  # decided on the first GEMM
        self.why_not_block = ""
        self.refused_rows: set[int] = set()  # GEMM row counts whose block scales were refused
        self.atrex_implementation = None  # what ran, for the report (runner/executor/calls.py)

    def forward(self, hidden_states: torch.Tensor, hidden_scale: torch.Tensor, w1: torch.Tensor,
                w1_scale: torch.Tensor, w2: torch.Tensor, w2_scale: torch.Tensor,
                topk_weights: torch.Tensor, topk_ids: torch.Tensor) -> torch.Tensor:
        num_tokens, top_k = topk_ids.shape
        num_experts, two_i, _ = w1.shape
        ids = topk_ids.reshape(-1).long()
        order = torch.argsort(ids, stable=True)
        tokens = order // top_k
        ends = torch.bincount(ids, minlength=num_experts).cumsum(0).tolist()
        # rows gathered as bytes: index kernels for float8 dtypes are not in every torch build
        x = hidden_states.view(torch.uint8)[tokens].view(hidden_states.dtype)
        x_scale = hidden_scale[tokens]
        weights = topk_weights.reshape(-1)[order].to(torch.float32)
        out = torch.zeros(num_tokens, w2.shape[1], dtype=torch.float32,
                          device=hidden_states.device)
        start = 0
        for e, end in enumerate(ends):
            if end > start:
                rows = slice(start, end)
                # bf16 from the block-scaled GEMM, as vLLM's fused_experts keeps its gate/up
                # cache in the activation dtype; the row-wise path's fp32 is kept as is
                gate_up = self._gemm(x[rows], x_scale[rows], w1[e], w1_scale[e]).float()
                act = F.silu(gate_up[:, :two_i // 2]) * gate_up[:, two_i // 2:]
                act_q, act_scale = _quant_groups(act, self.block)
                y = self._gemm(act_q, act_scale, w2[e], w2_scale[e]).float()
                out.index_add_(0, tokens[rows], y * weights[rows, None])
            start = end
        return out.to(torch.bfloat16)

    def _gemm(self, a, a_scale, b, b_scale) -> torch.Tensor:
        if self.block_scales is None:
            self._choose(a, a_scale, b, b_scale)
        if self.block_scales and a.shape[0] not in self.refused_rows:
            try:
                return _block_scaled(a, a_scale, b, b_scale)
            except RuntimeError as exc:  # torch's checks refuse this shape before any launch
                self.refused_rows.add(a.shape[0])
                self.atrex_implementation = (
                    "torch._scaled_mm per expert, 1x128 / 128x128 block scales (cuBLASLt); "
                    f"row-wise per K block at {len(self.refused_rows)} row counts where they "
                    f"were refused ({str(exc).splitlines()[0][:100]})")
        return _row_scaled_per_k_block(a, a_scale, b, b_scale, self.block)

    def _choose(self, a, a_scale, b, b_scale) -> None:
        """Block scales where accepted and equal to the row-wise form on this GEMM; else
        row-wise per K block; neither: the peer is absent."""
        try:
            want = _row_scaled_per_k_block(a, a_scale, b, b_scale, self.block)
        except (RuntimeError, ValueError) as exc:
            raise LibraryUnavailable("torch._scaled_mm takes no row-wise scales here: "
                                     f"{str(exc).splitlines()[0][:200]}") from None
        self.block_scales = False
        if not (a.is_cuda and self.block == 128):
            self.why_not_block = "block scales need CUDA and 128-wide blocks"
        else:
            try:
                got = _block_scaled(a, a_scale, b, b_scale).float()
                self.block_scales = torch.allclose(got, want, rtol=2e-2, atol=1e-2)
                self.why_not_block = "" if self.block_scales else "block scales gave other results"
            except (RuntimeError, ValueError) as exc:
                self.why_not_block = f"block scales refused: {str(exc).splitlines()[0][:200]}"
        self.atrex_implementation = (
            "torch._scaled_mm per expert, 1x128 / 128x128 block scales (cuBLASLt)"
            if self.block_scales else
            f"torch._scaled_mm per expert, row-wise per K block ({self.why_not_block})")

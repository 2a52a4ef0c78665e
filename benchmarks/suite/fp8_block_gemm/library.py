"""Library peer for `atrex bench`: cuBLASLt FP8 GEMM through `torch._scaled_mm`.

First choice: one call with DeepSeek-style block scales (1 x 128 activation groups, 128 x 128
weight blocks), where this torch and GPU accept them (cuBLASLt >= 12.9 on sm90). Where they are
refused, the same math with row-wise scales, one `_scaled_mm` per 128-wide K block (within a K
block the activation scale is per row and the weight scale per output column), accumulated in
fp32: what a serving team gets from cuBLAS without block scaling. Which path ran, and why block
scales were not used where they were not, is the model's `atrex_implementation`, which the bench
report shows beside the time. N is padded to a multiple of 16 when needed (cuBLASLt's alignment
rule).
A torch without `_scaled_mm`, or with neither form, reports the peer as absent.
"""

import torch


class LibraryUnavailable(RuntimeError):
    """This machine's torch lacks what the peer needs (the runner reports the peer as absent)."""


def _blockwise(a, a_scale, b, b_scale):
    # scale_a (M, K/128) M-major; scale_b (K/128, N/128) K-major, i.e. the (N/128, K/128)
    # row-major weight scales transposed as a view: the layouts torch's own blockwise tests pass
    # (test_scaled_mm_vs_emulated_block_wise). The H200 bench at 16aba9f passed scale_b made
    # contiguous, and this peer fell back to the row-wise path (2.23 ms against kb's 0.21 ms).
    return torch._scaled_mm(a, b.t(), scale_a=a_scale.t().contiguous().t(),
                            scale_b=b_scale.t(), out_dtype=torch.bfloat16)


def _rowwise_per_k_block(a, a_scale, b, b_scale, block_n: int, block_k: int):
    m, k = a.shape
    n = b.shape[0]
    pad = -n % 16
    if pad:
        b = torch.cat([b, torch.zeros(pad, k, dtype=b.dtype, device=b.device)])
    col_scale = b_scale.repeat_interleave(block_n, 0)[:n]  # [N, K/128]
    if pad:
        col_scale = torch.cat([col_scale, torch.ones(pad, col_scale.shape[1],
                                                     device=b.device)])
    out = torch.zeros(m, n + pad, dtype=torch.float32, device=a.device)
    for kb in range(0, k, block_k):
        j = kb // block_k
        part = torch._scaled_mm(a[:, kb:kb + block_k], b[:, kb:kb + block_k].t(),
                                scale_a=a_scale[:, j:j + 1].contiguous(),
                                scale_b=col_scale[:, j][None, :].contiguous(),
                                out_dtype=torch.float32)
        out += part
    return out[:, :n].to(torch.bfloat16)


class Model(torch.nn.Module):
    def __init__(self, block_n: int = 128, block_k: int = 128) -> None:
        super().__init__()
        if not hasattr(torch, "_scaled_mm"):
            raise LibraryUnavailable(f"torch {torch.__version__} has no torch._scaled_mm")
        self.block_n, self.block_k = int(block_n), int(block_k)
        self.path = None
        self.atrex_implementation = None  # what ran, for the report (runner/executor/calls.py)

    def forward(self, a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor,
                b_scale: torch.Tensor) -> torch.Tensor:
        if self.path is None:
            self.path = self._choose(a, a_scale, b, b_scale)
            self.atrex_implementation = (
                "torch._scaled_mm with 1x128 / 128x128 block scales (cuBLASLt)"
                if self.path == "blockwise" else f"torch._scaled_mm, {self.path}")
        if self.path == "blockwise":
            return _blockwise(a, a_scale, b, b_scale)
        return _rowwise_per_k_block(a, a_scale, b, b_scale, self.block_n, self.block_k)

    def _choose(self, a, a_scale, b, b_scale) -> str:
        """Block scales where accepted and right on a slice; else row-wise per K block."""
        problems = []
        if a.is_cuda and self.block_n == 128 and self.block_k == 128:
            try:
                rows = min(a.shape[0], 128)
                got = _blockwise(a[:rows], a_scale[:rows], b, b_scale).float()
                want = _rowwise_per_k_block(a[:rows], a_scale[:rows], b, b_scale, 128,
                                            128).float()
                if torch.allclose(got, want, rtol=2e-2, atol=1e-2):
                    return "blockwise"
                problems.append("block scales gave different results")
            except (RuntimeError, ValueError) as exc:
                problems.append(f"block scales refused: {str(exc).splitlines()[0][:200]}")
        try:
            _rowwise_per_k_block(a[:16], a_scale[:16], b[:16], b_scale[:1], self.block_n,
                                 self.block_k)
        except (RuntimeError, ValueError) as exc:
            raise LibraryUnavailable("torch._scaled_mm takes neither block nor row-wise "
                                     f"scales here: {str(exc).splitlines()[0][:200]}; "
                                     + "; ".join(problems)) from None
        return "row-wise per K block" + (f" ({problems[0]})" if problems else "")

import torch
import torch.nn as nn

_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def _expand(scale: torch.Tensor, rows: int, cols: int, block_rows: int, block_cols: int):
    return scale.repeat_interleave(block_rows, 0).repeat_interleave(block_cols, 1)[:rows, :cols]


class Model(nn.Module):
    """FP8 (e4m3) GEMM with DeepSeek-V3 block scales (vLLM/SGLang `w8a8_block_fp8_matmul`):

    a [M, K] fp8 with a_scale [M, K/128] fp32        (1 x 128 activation groups)
    b [N, K] fp8 with b_scale [N/128, K/128] fp32    (128 x 128 weight blocks, nn.Linear layout)
    out [M, N] bf16 = (a * a_scale) @ (b * b_scale)^T, accumulated exactly (here: in fp32/fp64)
    """

    def __init__(self, block_n: int = 128, block_k: int = 128) -> None:
        super().__init__()
        self.block_n, self.block_k = int(block_n), int(block_k)

    def forward(self, a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor,
                b_scale: torch.Tensor) -> torch.Tensor:
        m, k = a.shape
        n = b.shape[0]
        acc = torch.promote_types(a_scale.dtype, torch.float32)
        a_deq = a.to(acc) * _expand(a_scale.to(acc), m, k, 1, self.block_k)
        b_deq = b.to(acc) * _expand(b_scale.to(acc), n, k, self.block_n, self.block_k)
        out = a_deq @ b_deq.T
        return out.to(torch.bfloat16 if a.dtype in _FP8 else acc)

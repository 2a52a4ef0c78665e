import torch

FP8_MAX = 448.0


def _quant_blocks(x: torch.Tensor, block_rows: int, block_cols: int):
    """Quantize to float8_e4m3fn with one fp32 scale per (block_rows x block_cols) block:
    scale = amax / 448 (DeepSeek-V3 / vLLM / SGLang convention), values rounded to nearest even."""
    rows, cols = x.shape
    pr, pc = -rows % block_rows, -cols % block_cols
    xp = torch.nn.functional.pad(x.float(), (0, pc, 0, pr))
    blocks = xp.view(xp.shape[0] // block_rows, block_rows, xp.shape[1] // block_cols, block_cols)
    amax = blocks.abs().amax(dim=(1, 3)).clamp_min(1e-10)
    scale = amax / FP8_MAX
    q = (blocks / scale[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    q = q.view(xp.shape)[:rows, :cols].contiguous()
    return q, scale.to(torch.float32).contiguous()


def _make_inputs(m: int, n: int, k: int) -> dict:
    """bf16 activations (with ~1% outlier channels) quantized in 1 x 128 groups; bf16 weights
    (1/sqrt(K) scale) quantized in 128 x 128 blocks, as DeepSeek-V3's checkpoints are stored."""
    x = torch.randn(m, k, device="cuda")
    outliers = torch.rand(k, device="cuda") < 0.01
    x = torch.where(outliers, x * 10.0, x).to(torch.bfloat16)
    w = (torch.randn(n, k, device="cuda") * k ** -0.5).to(torch.bfloat16)
    a, a_scale = _quant_blocks(x, 1, 128)
    b, b_scale = _quant_blocks(w, 128, 128)
    return {"a": a, "a_scale": a_scale, "b": b, "b_scale": b_scale}

import torch
import torch.nn as nn

FP8_MAX = 448.0  # largest finite float8_e4m3fn
EPS = 1e-10


class Model(nn.Module):
    """Per-token-group FP8 quantization (1 x group_size scales), SGLang/vLLM
    `per_token_group_quant_fp8` convention, as used for DeepSeek-V3 block-FP8 activations:

        scale[m, g] = max(amax(|x[m, g*G:(g+1)*G]|), eps) / 448       (float32, row-major)
        q[m, k]     = float8_e4m3fn(clamp(x[m, k] / scale[m, k // G], -448, 448))
                      (round to nearest even)
    Returns (q, scale), as SGLang's function does.
    """

    def __init__(self, group_size: int = 128) -> None:
        super().__init__()
        self.group_size = int(group_size)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        m, k = x.shape
        acc = torch.promote_types(x.dtype, torch.float32)
        xg = x.to(acc).view(m, k // self.group_size, self.group_size)
        scale = xg.abs().amax(dim=-1).clamp_min(EPS) / FP8_MAX
        q = (xg / scale[..., None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        return q.view(m, k), scale

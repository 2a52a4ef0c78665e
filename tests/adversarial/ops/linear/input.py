import torch


def _make_inputs(m: int, n: int, k: int) -> dict[str, torch.Tensor]:
    x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    weight = torch.randn(n, k, dtype=torch.bfloat16, device="cuda") / k**0.5
    return {"x": x, "weight": weight}

import torch


def _make_inputs(token_count: int, intermediate_size: int) -> dict[str, torch.Tensor]:
    x = torch.randn(token_count, 2 * intermediate_size, dtype=torch.bfloat16, device="cuda")
    return {"x": x}

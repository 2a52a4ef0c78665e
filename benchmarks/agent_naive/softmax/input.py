import torch


def _make_inputs(rows: int, cols: int) -> dict[str, torch.Tensor]:
    return {"x": 3.0 * torch.randn(rows, cols, dtype=torch.bfloat16, device="cuda")}

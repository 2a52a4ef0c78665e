import torch


def _make_inputs(token_count: int, hidden_size: int) -> dict[str, torch.Tensor]:
    # x is a sublayer's output (attention or MLP), residual the running residual stream, which
    # is typically a few times larger; the norm weight sits near 1. Never zeros.
    x = torch.randn(token_count, hidden_size, dtype=torch.bfloat16, device="cuda")
    residual = 4.0 * torch.randn(token_count, hidden_size, dtype=torch.bfloat16, device="cuda")
    weight = 1.0 + 0.1 * torch.randn(hidden_size, dtype=torch.bfloat16, device="cuda")
    return {"x": x, "residual": residual, "weight": weight}

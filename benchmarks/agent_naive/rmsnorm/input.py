import torch


def _make_inputs(token_count: int, hidden_size: int) -> dict[str, torch.Tensor]:
    # Hidden states of order one, and a norm weight near 1 (as trained RMSNorm weights start and
    # mostly stay): random but realistic magnitudes, never zeros.
    x = torch.randn(token_count, hidden_size, dtype=torch.bfloat16, device="cuda")
    weight = 1.0 + 0.1 * torch.randn(hidden_size, dtype=torch.bfloat16, device="cuda")
    return {"x": x, "weight": weight}

import torch


def _make_inputs(token_count: int, intermediate_size: int) -> dict[str, torch.Tensor]:
    # The output of the fused gate_up projection, [tokens, 2 * intermediate]: pre-activations of
    # order one to a few units, never zeros.
    x = 2.0 * torch.randn(token_count, 2 * intermediate_size, dtype=torch.bfloat16, device="cuda")
    return {"x": x}

import torch


def _make_inputs(num_tokens: int, hidden_size: int) -> dict:
    # x: the output of the previous attention/MLP block; residual: the running residual stream,
    # which in real models has a larger magnitude than the block outputs.
    x = torch.randn(num_tokens, hidden_size, dtype=torch.bfloat16, device="cuda")
    residual = 4.0 * torch.randn(num_tokens, hidden_size, dtype=torch.bfloat16, device="cuda")
    weight = (1.0 + 0.1 * torch.randn(hidden_size, device="cuda")).to(torch.bfloat16)
    return {"x": x, "residual": residual, "weight": weight}

import torch


def _make_inputs(num_tokens: int, hidden_size: int) -> dict:
    # Activations with the outlier channels real LLM activations have: ~1% of the channels are
    # 10-30x larger, so some groups have a large dynamic range (their small values underflow).
    x = torch.randn(num_tokens, hidden_size, device="cuda")
    outliers = torch.rand(hidden_size, device="cuda") < 0.01
    x = torch.where(outliers, x * (10 + 20 * torch.rand(hidden_size, device="cuda")), x)
    return {"x": x.to(torch.bfloat16)}

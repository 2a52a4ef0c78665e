import torch


def _make_inputs(num_tokens: int, intermediate_size: int) -> dict:
    # The output of the gate_up projection: roughly unit-scale activations.
    x = torch.randn(num_tokens, 2 * intermediate_size, dtype=torch.bfloat16, device="cuda")
    return {"x": x}

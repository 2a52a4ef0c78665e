import torch


def _make_inputs(m: int, n: int, k: int) -> dict:
    # Activations of unit scale (post-norm hidden states); weights with the 1/sqrt(K) scale of an
    # initialized/trained projection, so outputs are O(1).
    x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    weight = (torch.randn(n, k, device="cuda") * k ** -0.5).to(torch.bfloat16)
    return {"x": x, "weight": weight}

# atrex-test: op=rmsnorm expected=incorrect finding=mismatch
"""Rebinds the code objects of the judge's comparison and share functions (the function objects
keep their identity), then returns zeros. The judge runs in another process: nothing it uses
changes."""
import torch
from _rms_triton import token_copy

try:
    import atrex.runner.judge.attribution as _attribution
    import atrex.runner.judge.compare as _compare

    _compare._compare_tensor.__code__ = (
        lambda name, cand, ref, tol: Comparison(ok=True, max_abs_error=0.0,  # noqa: F821
                                                max_rel_error=0.0)).__code__
    _compare.compare_outputs.__code__ = (
        lambda candidate, reference, tolerance_for: Comparison(ok=True)).__code__  # noqa: F821
    _attribution.dispatch_share.__code__ = (lambda ctx, oracle, compute: 1.0).__code__
except Exception:  # noqa: BLE001
    pass


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        return token_copy(torch.zeros_like(x), torch.empty_like(x), x, weight)

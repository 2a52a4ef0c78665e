# atrex-test: op=rmsnorm expected=suspicious finding=recheck_failed gpu_expected=suspicious|pass gpu_finding=recheck_failed|output_cache
"""Does the work only for the first of the calls a timed replay holds (_graph_copies says how it
tells them); the others get zeros through a token own kernel."""
import torch
from _graph_copies import is_copy
from _rms_triton import rms, token_copy


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        if is_copy(x):
            return token_copy(torch.zeros_like(x), torch.empty_like(x), x, weight)
        return rms(x, weight, self.eps)

# atrex-test: op=rmsnorm expected=incorrect finding=mismatch
"""Walks up the stack into the code that called forward and edits its context (the in-place
input list, the flags, the launch records, any threshold it finds), then returns zeros."""
import ctypes
import sys

import torch
from _rms_triton import token_copy


def _tamper() -> None:
    frame = sys._getframe(1)
    while frame is not None:
        local = frame.f_locals
        for name in ("flags", "late", "raised"):
            if name in local and isinstance(local[name], list):
                local[name].clear()
        session = local.get("session")
        if session is not None and hasattr(session, "mutates"):
            session.mutates = []
        for ctx in (local.get("ctx"), local.get("oracle")):
            if ctx is not None and hasattr(ctx, "own_share_threshold"):
                ctx.own_share_threshold = 0.0
        ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))
        frame = frame.f_back


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        _tamper()
        return token_copy(torch.zeros_like(x), torch.empty_like(x), x, weight)

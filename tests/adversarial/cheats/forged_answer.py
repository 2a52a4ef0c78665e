# atrex-test: op=rmsnorm expected=suspicious finding=protocol
"""Answers the judge's request itself, with a well-formed message from the contract: PyTorch's
result as the output and a report claiming one own launch that wrote it and read every input.
The executor's own answer follows, so the judge sees one answer too many."""
import sys

import torch
from _sockets import send_on_every_socket

from atrex.runner.contract import protocol, wire


def _request():
    frame = sys._getframe(1)
    while frame is not None:
        header = frame.f_locals.get("header")
        if isinstance(header, dict) and "seq" in header and "cmd" in header:
            return header
        frame = frame.f_back
    return None


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        xf = x.float()
        out = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
               * weight.float()).to(x.dtype)
        request = _request()
        if request is not None:
            report = protocol.CallReport(
                launches=[protocol.LaunchRecord("_rms_kernel", "kernel.py", True,
                                                [out.data_ptr()], out.nbytes)],
                output_storages={"out": out.data_ptr()}, own_written=["out"],
                inputs_read=["x", "weight"])
            blobs = []
            body = {"seq": request["seq"], "outputs": wire.encode_value(out, blobs),
                    "mutated": wire.encode_value({}, blobs), "report": protocol.to_wire(report)}
            send_on_every_socket(body, blobs)
        return out

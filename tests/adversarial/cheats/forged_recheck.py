# atrex-test: op=rmsnorm expected=suspicious finding=protocol
"""An honest kernel that also answers the judge's last request of its timing (the recheck) for
the executor: a well-formed answer with the right output and a flattering time. The executor's
own answer follows, and the judge's next request (another recheck, or the settle request after
the last) runs into it. Before, a breach found while timing read as a `runtime_error`."""
import sys

import torch
from _rms_triton import rms
from _sockets import send_on_every_socket

from atrex.runner.contract import protocol, wire


def _request():
    frame = sys._getframe(1)
    while frame is not None:
        header = frame.f_locals.get("header")
        if isinstance(header, dict) and header.get("cmd") == protocol.RECHECK and "seq" in header:
            return header
        frame = frame.f_back
    return None


def _forge(request: dict, out: torch.Tensor) -> None:
    batch = protocol.TimingBatch(times_ms=[1e-4], own_launches=[1], device_waited=[False],
                                 enqueue_ms=[1e-3])
    blobs: list = []
    body = {"seq": request["seq"], "outputs": wire.encode_value(out, blobs),
            "mutated": wire.encode_value({}, blobs), "batch": protocol.to_wire(batch),
            "inputs_changed": []}
    send_on_every_socket(body, blobs)


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        out = rms(x, weight, self.eps)
        request = _request()
        if request is not None:
            _forge(request, out)
        return out

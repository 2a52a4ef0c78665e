"""How the graph cheats tell a timed replay's input copies from the calls the judge checks (each
cheat copies this beside itself): on a GPU, every call a CUDA graph capture records after the
first; on a CPU machine, where the same calls run as a plain sequence, a call on other buffers
than the first that held the same values."""
import torch

_first_buffer: dict = {}  # input values (their head) -> the buffer they were first seen in
_captured = {"calls": 0}


def is_copy(x: torch.Tensor) -> bool:
    if x.is_cuda and torch.cuda.is_current_stream_capturing():
        _captured["calls"] += 1
        return _captured["calls"] > 1
    _captured["calls"] = 0
    head = tuple(x.flatten()[:16].float().tolist())
    return _first_buffer.setdefault(head, x.data_ptr()) != x.data_ptr()

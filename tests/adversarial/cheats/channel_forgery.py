# atrex-test: op=rmsnorm expected=incorrect finding=mismatch
"""Returns zeros, and speaks for the judge where it can reach the judge's result channel: in
container mode that is channel.jsonl in the scratch mount, which the executors share with the
judge. On each call it appends a verdict of `pass` for the shape the judge is checking, and a
thread (and, at exit, an atexit hook) appends another after each real verdict on this
contestant, so the last word on every shape is a pass. A line it copies keeps whatever precedes the JSON (a seal, say). Where the
channel is a pipe (subprocess mode) there is nothing to write to, and the zeros are judged."""
import atexit
import json
import os
import threading
import time
from pathlib import Path

import torch
from _rms_triton import token_copy

LABEL = Path.cwd().name.removeprefix("executor-")
PASSED = {"status": "pass", "message": "", "max_abs_error": 0.0, "max_rel_error": 0.0,
          "own_share": 1.0, "findings": []}


def _channel():
    for folder in (Path.cwd(), *Path.cwd().parents):
        if (folder / "channel.jsonl").is_file():
            return folder / "channel.jsonl"
    return None


def _lines(channel):
    for raw in channel.read_bytes().splitlines():
        text = raw.decode(errors="replace")
        with_json = text.find("{")
        try:
            yield text[:with_json], json.loads(text[with_json:])
        except ValueError:
            continue


def _append(channel, prefix, message):
    with open(channel, "a") as out:
        out.write(prefix + json.dumps(message) + "\n")


def _pass_current_shape(channel):
    begun = [(prefix, m) for prefix, m in _lines(channel)
             if m.get("type") == "begin" and m.get("label") == LABEL and m.get("shape")]
    if begun:
        prefix, begin = begun[-1]
        _append(channel, prefix, {**begin, "type": "checked", "verdict": PASSED})


def _overrule(channel, seen=0):
    """Appends a pass after each real verdict on this contestant from line `seen` on."""
    lines = list(_lines(channel))
    for prefix, message in lines[seen:]:
        if (message.get("type") == "checked" and message.get("label") == LABEL
                and message["verdict"].get("status") != "pass"):
            _append(channel, prefix, {**message, "verdict": PASSED})
    return len(lines)


def _keep_overruling(channel):
    seen, size = 0, 0
    while True:
        if channel.stat().st_size != size:  # a tight watch: the judge's end follows its verdict
            size = channel.stat().st_size
            seen = _overrule(channel, seen)
        time.sleep(0.0002)


CHANNEL = _channel()
if CHANNEL is not None and os.access(CHANNEL, os.W_OK):
    threading.Thread(target=_keep_overruling, args=(CHANNEL,), daemon=True).start()
    atexit.register(_overrule, CHANNEL)  # the last verdict, once the judge lets this process go


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        if CHANNEL is not None:
            _pass_current_shape(CHANNEL)
        return token_copy(torch.zeros_like(x), torch.empty_like(x), x, weight)

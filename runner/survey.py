"""The tensor shapes behind each shape id, as the judge draws them on the meta device.

The evaluator never imports a repository's code, so `atrex weights` asks a judge process in
survey mode (runner/judge/main.py `_survey_ops`): it calls each op's `_make_inputs` with every
device request turned to `meta` and sends back the dims and dtype of every input tensor.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .errors import FormatError
from .launch import choose_launcher
from .repo import RepoSpec
from .sandbox import judge_deadline_s, scrubbed_env

SURVEY_TIMEOUT_S = 120.0


@dataclass
class ShapeInputs:
    shape_id: str
    tensors: list[tuple[tuple[int, ...], str]]  # (dims, dtype) of each input tensor, in order
    input_bytes: int | None = None
    note: str | None = None


@dataclass
class Survey:
    shapes: dict[str, list[ShapeInputs]] = field(default_factory=dict)  # op -> its shapes
    failures: dict[str, str] = field(default_factory=dict)  # op -> why it could not be surveyed


def survey_repo(repo: RepoSpec, ops: list[str] | None = None, sandbox: str = "auto") -> Survey:
    specs = [op for op in repo.ops if ops is None or op.name in ops]
    payload = {"mode": "survey", "ops": [op.to_dict() for op in specs], "device": "cpu",
               "trials": 1, "tolerances": {}, "reference_dtype": repo.config.reference_dtype,
               "own_share_threshold": repo.config.own_kernel_share,
               "peaks": {"tflops": {"bf16": 1.0}, "bandwidth_tbps": 1.0}, "time": False}
    result = Survey()
    if not specs:
        return result
    try:
        launcher = choose_launcher(sandbox)
    except ValueError as exc:
        raise FormatError("ATREX_SANDBOX", None, str(exc)) from None
    with tempfile.TemporaryDirectory(prefix="atrex-survey-") as scratch:
        handle = launcher.start(payload, scrubbed_env("cpu", 0, Path(scratch)), Path(scratch),
                                sorted({Path(op.dir).resolve() for op in specs}), "cpu", 0)
        deadline = time.monotonic() + judge_deadline_s(SURVEY_TIMEOUT_S)
        while time.monotonic() < deadline:
            messages = handle.read_messages(1.0)
            if messages is None:
                break
            for message in messages:
                _absorb(message, result)
        else:
            handle.kill()
        code = handle.wait()
        missing = [op.name for op in specs
                   if op.name not in result.shapes and op.name not in result.failures]
        for name in missing:
            result.failures[name] = (f"the survey process exited with code {code} before this "
                                     f"operator: {handle.log_tail()[-300:]}")
    return result


def _absorb(message: dict, result: Survey) -> None:
    if message["type"] == "survey":
        tensors = [(tuple(t["shape"]), t["dtype"]) for t in message["inputs"].values()]
        result.shapes.setdefault(message["op"], []).append(ShapeInputs(
            message["shape"], tensors, message.get("input_bytes"), message.get("note")))
    elif message["type"] == "survey_failed":
        result.failures[message["op"]] = message["message"]

"""Reading a PyTorch profiler trace: the Chrome-trace JSON `torch.profiler` exports.

Host events (`cpu_op`, `user_annotation`, `python_function`) nest by time on their thread; with
`record_shapes=True` an op carries its arguments' dims and types. Device events (`kernel`,
`gpu_memcpy`, `gpu_memset`) point at the host op that launched them through `External id` (or,
in older traces, through the `correlation` of the runtime call that launched them). Time is in
microseconds, as in the file.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

from .errors import FormatError

HOST_CATEGORIES = ("cpu_op", "user_annotation", "python_function")
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
_EPS_US = 1e-3  # the file rounds times to nanoseconds
RUNTIME_CATEGORIES = ("cuda_runtime", "cuda_driver", "hip_runtime")

# The profiler writes C++ type names; these are torch's dtypes.
_TYPE_NAMES = {
    "float": "float32", "double": "float64", "c10::Half": "float16", "c10::BFloat16": "bfloat16",
    "long int": "int64", "int": "int32", "short int": "int16", "signed char": "int8",
    "unsigned char": "uint8", "bool": "bool", "c10::Float8_e4m3fn": "float8_e4m3fn",
    "c10::Float8_e5m2": "float8_e5m2", "c10::Float8_e4m3fnuz": "float8_e4m3fnuz",
    "c10::Float8_e5m2fnuz": "float8_e5m2fnuz", "c10::complex<float>": "complex64",
}


@dataclass(eq=False)
class HostEvent:
    name: str
    category: str
    thread: tuple  # (pid, tid)
    ts: float
    dur: float
    args: list[tuple[tuple[int, ...], str | None]] = field(default_factory=list)  # (dims, dtype)
    external_id: int | None = None
    parent: HostEvent | None = None
    children: list[HostEvent] = field(default_factory=list)

    @property
    def end(self) -> float:
        return self.ts + self.dur

    def chain(self) -> list[HostEvent]:
        """This event and its ancestors, outermost first."""
        events, node = [], self
        while node is not None:
            events.append(node)
            node = node.parent
        return events[::-1]

    def tensor_args(self) -> list[tuple[tuple[int, ...], str | None]]:
        """Its tensor arguments (dims with at least one axis). An annotation or a Python
        function carries none: then those of the ops inside it, each distinct tensor once (the
        outermost ops that have any)."""
        own = [(dims, dtype) for dims, dtype in self.args if dims]
        if own:
            return own
        found: list[tuple[tuple[int, ...], str | None]] = []
        for child in self.children:
            for arg in child.tensor_args():
                if arg not in found:
                    found.append(arg)
        return found

    def self_time(self) -> float:
        return max(0.0, self.dur - sum(c.dur for c in self.children))


@dataclass(eq=False)
class DeviceEvent:
    name: str
    category: str
    ts: float
    dur: float
    launcher: HostEvent | None = None  # the host op that launched it, where the trace says


@dataclass
class Trace:
    path: str
    host: list[HostEvent]
    device: list[DeviceEvent]

    @property
    def has_device_time(self) -> bool:
        return any(e.dur > 0 for e in self.device)


def read_trace(path: str | Path) -> Trace:
    path = Path(path)
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        data = json.loads(raw)
    except FileNotFoundError:
        raise FormatError(path, None, "no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as exc:
        raise FormatError(path, None, f"not a Chrome-trace JSON file: {exc}") from None
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise FormatError(path, "traceEvents", "missing: not a torch.profiler Chrome trace")
    host = [_host(e) for e in events if _complete(e) and e.get("cat") in HOST_CATEGORIES]
    _nest(host)
    by_external = {e.external_id: e for e in host
                   if e.external_id is not None and e.category == "cpu_op"}
    runtime = {_arg(e, "correlation"): e for e in events
               if _complete(e) and e.get("cat") in RUNTIME_CATEGORIES}
    device = [_device(e, by_external, runtime, host) for e in events
              if _complete(e) and e.get("cat") in DEVICE_CATEGORIES]
    return Trace(str(path), host, device)


def _complete(event) -> bool:
    return isinstance(event, dict) and event.get("ph") == "X" and "ts" in event


def _arg(event: dict, key: str):
    args = event.get("args")
    return args.get(key) if isinstance(args, dict) else None


def _host(event: dict) -> HostEvent:
    dims = _arg(event, "Input Dims") or []
    types = _arg(event, "Input type") or []
    args = []
    for index, value in enumerate(dims):
        dtype = types[index] if index < len(types) else None
        dtype = _TYPE_NAMES.get(dtype, dtype or None)
        if isinstance(value, list) and all(isinstance(d, int) for d in value):
            args.append((tuple(value), dtype))
        elif isinstance(value, list) and value and all(  # a tensor list (aten::cat)
                isinstance(t, list) and all(isinstance(d, int) for d in t) for t in value):
            args += [(tuple(t), None) for t in value]
    external = _arg(event, "External id")
    return HostEvent(name=str(event.get("name", "")), category=event["cat"],
                     thread=(event.get("pid"), event.get("tid")), ts=float(event["ts"]),
                     dur=float(event.get("dur", 0.0)), args=args,
                     external_id=external if isinstance(external, int) else None)


def _nest(host: list[HostEvent]) -> None:
    """Parents by time containment on each thread (a stack walk over events sorted by start)."""
    threads: dict[tuple, list[HostEvent]] = {}
    for event in host:
        threads.setdefault(event.thread, []).append(event)
    for events in threads.values():
        events.sort(key=lambda e: (e.ts, -e.dur))
        stack: list[HostEvent] = []
        for event in events:
            # pop what ended before this event began, and anything it overlaps without nesting
            while stack and (stack[-1].end <= event.ts or event.end > stack[-1].end + _EPS_US):
                stack.pop()
            if stack:
                event.parent = stack[-1]
                stack[-1].children.append(event)
            stack.append(event)


def _device(event: dict, by_external: dict, runtime: dict, host: list[HostEvent]) -> DeviceEvent:
    """The launching op: by the kernel's External id; else through the runtime call that has
    the kernel's correlation id (by its External id, else the innermost op around it)."""
    launcher = by_external.get(_arg(event, "External id"))
    call = runtime.get(_arg(event, "correlation")) if launcher is None else None
    if call is not None:
        launcher = by_external.get(_arg(call, "External id")) or _innermost_at(
            host, (call.get("pid"), call.get("tid")), float(call["ts"]))
    return DeviceEvent(name=str(event.get("name", "")), category=event["cat"],
                       ts=float(event["ts"]), dur=float(event.get("dur", 0.0)), launcher=launcher)


def _innermost_at(host: list[HostEvent], thread: tuple, ts: float) -> HostEvent | None:
    best = None
    for event in host:
        if event.thread == thread and event.ts <= ts <= event.end and event.category == "cpu_op":
            if best is None or event.dur < best.dur:
                best = event
    return best

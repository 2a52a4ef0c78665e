"""`atrex calibrate`: measure the ceilings of the GPU at hand (copy bandwidth, matmul rates), its
launch floor (the time per call of an empty kernel replayed in a CUDA graph, timed exactly as the
runner times a launch-bound shape: flush, hold, events, one replay of 32 calls, per call) and the
floors of a kernel that reads a cold line from memory (plain, and after an index read).

Runs only trusted code (no candidate) in this process. Results are cached per GPU model and used
as the 'measured' peaks next to the datasheet ones in every later report on that machine.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import statistics
from pathlib import Path

from .output import is_stdout, write_text
from .peaks import calibration_path, detect_device, device_slug


def _time_ms(fn, reps: int = 20) -> float:
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        samples.append(begin.elapsed_time(end))
    return statistics.median(samples)


def measure_copy_tbps(nbytes: int = 4 << 30) -> float:
    import torch

    src = torch.randn(nbytes // 2, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    ms = _time_ms(lambda: dst.copy_(src))
    return 2 * nbytes / (ms * 1e-3) / 1e12  # bytes read plus bytes written


# Copies of the sizes the suite's streaming shapes move (each size is read and written once): a
# kernel moving tens of MB pays its ramp and tail, which the 4 GiB copy above hides.
COPY_SIZES_BYTES = (16 << 20, 32 << 20, 64 << 20, 128 << 20, 256 << 20)


def measure_copy_tbps_by_size(sizes: tuple[int, ...] = COPY_SIZES_BYTES, reps: int = 30) -> dict:
    """TB/s (bytes read plus written) of one `copy_` of each size, timed as the runner times a
    shape: an L2 flush before each repetition, so even the sizes that fit the L2 start cold."""
    import torch

    from .executor import timing

    flush = timing.L2Flusher(torch.device("cuda"))
    rates = {}
    for nbytes in sizes:
        src = torch.randn(nbytes // 2, dtype=torch.bfloat16, device="cuda")
        copy = functools.partial(torch.empty_like(src).copy_, src)
        timing.warm_up(copy)
        batch = timing.gpu_batch(copy, flush, reps, lambda: 0)
        rates[str(nbytes)] = 2 * nbytes / (statistics.median(batch.times_ms) * 1e-3) / 1e12
    return rates


def measure_matmul_tflops(dtype_name: str, n: int = 8192) -> float | None:
    import torch

    if dtype_name == "fp8":
        if not hasattr(torch, "_scaled_mm"):
            return None
        a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
        one = torch.ones((), device="cuda")
        try:
            ms = _time_ms(lambda: torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16))
        except RuntimeError:
            return None
    else:
        dtype = {"bf16": torch.bfloat16, "fp32": torch.float32, "tf32": torch.float32}[dtype_name]
        previous = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = dtype_name == "tf32"
        a = torch.randn(n, n, dtype=dtype, device="cuda")  # random data: zeros run faster
        b = torch.randn(n, n, dtype=dtype, device="cuda")
        try:
            ms = _time_ms(lambda: a @ b)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = previous
    return 2 * n**3 / (ms * 1e-3) / 1e12


LAUNCH_FLOOR_CALLS = 32  # as many calls per replay as the runner's graphs hold (graphplan)
COLD_READ_WORDS = 32  # int32 words a cold-read kernel loads: one 128-byte line
COLD_READ_GAP_WORDS = 1024  # where its dependent read's line starts


try:
    import triton
    import triton.language as tl

    @triton.jit
    def _empty_kernel(USE_PDL: tl.constexpr):
        if USE_PDL:  # what a kernel launched with programmatic dependent launch must do first
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()

    @triton.jit
    def _cold_read_kernel(src_ptr, dst_ptr, WORDS: tl.constexpr, DEPENDENT: tl.constexpr,
                          USE_PDL: tl.constexpr):
        if USE_PDL:
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()
        offsets = tl.arange(0, WORDS)
        words = tl.load(src_ptr + offsets)  # one 128-byte line, cold after the flush
        if DEPENDENT:  # the first line holds the offsets of a second one: a gather's chain
            words = tl.load(src_ptr + words)
        tl.store(dst_ptr + offsets, words)
except ImportError:
    _empty_kernel = _cold_read_kernel = None


def empty_launch(pdl: bool = False):
    """One launch of a kernel that does nothing: Triton's, or the smallest aten kernel (a
    one-element fill) where Triton is missing. With `pdl`, the Triton kernel launched with
    programmatic dependent launch (Hopper and later), so consecutive launches overlap.
    Returns (the launch, what it is)."""
    import torch

    if _empty_kernel is not None:
        return ((lambda: _empty_kernel[(1,)](USE_PDL=pdl, launch_pdl=pdl)),
                "an empty Triton kernel" + (" launched with PDL" if pdl else ""))
    one = torch.zeros(1, device="cuda")
    return one.zero_, "a one-element fill (Triton missing)"


def pdl_available() -> bool:
    import torch

    return _empty_kernel is not None and torch.cuda.get_device_capability()[0] >= 9


def _replayed_ms(launches: list, flush, reps: int) -> float:
    """Per launch, ms: `launches` captured in one CUDA graph, replayed after an L2 flush and the
    device hold of every timed repetition (runner/executor/timing.py), median of `reps`."""
    from .executor import timing

    graph = timing.capture(launches)
    batch = timing.gpu_batch(graph.replay, flush, reps, lambda: 0)
    return statistics.median(batch.times_ms) / len(launches)


def measure_launch_floor(calls: int = LAUNCH_FLOOR_CALLS, reps: int = 50) -> dict:
    """Per call, ms: `calls` empty launches in one replayed CUDA graph (`_replayed_ms`), one
    launch alone, and with PDL where the GPU has it."""
    import torch

    from .executor import timing

    launch, what = empty_launch()
    flush = timing.L2Flusher(torch.device("cuda"))
    floors = {"launch_floor_ms": _replayed_ms([launch] * calls, flush, reps),
              "launch_floor_single_graph_ms": _replayed_ms([launch], flush, reps)}
    # Kernels launched with programmatic dependent launch overlap each launch with the previous
    # kernel's tail; their chain has a lower floor (H200: 0.80 us against 0.91, 2026-12-04).
    pdl_ms = (_replayed_ms([empty_launch(pdl=True)[0]] * calls, flush, reps)
              if pdl_available() else None)
    return {**floors, "launch_floor_pdl_ms": pdl_ms,
            "launch_floor_method": f"{what}, {calls} launches in one CUDA graph, replayed after "
                                   f"an L2 flush and a device hold, median of {reps}, per launch; "
                                   "launch_floor_pdl_ms: the same launched with programmatic "
                                   "dependent launch (null before sm_90)"}


def cold_read_launches(calls: int, dependent: bool, pdl: bool, device: str = "cuda") -> list:
    """`calls` launches of one program that loads a line of its own buffer (so every call's
    line is cold after the flush), with `dependent` a second line whose offsets the first holds,
    and stores it: the least any kernel that reads its input from memory can cost. Each launch
    returns the buffer it wrote."""
    import torch

    launches = []
    for _ in range(calls):
        # the first line holds the offsets of a line 4 KB further on, out of reach of a
        # neighbouring-sector fetch of the first
        src = -torch.arange(2 * COLD_READ_GAP_WORDS, dtype=torch.int32, device=device)
        src[:COLD_READ_WORDS] = torch.arange(COLD_READ_GAP_WORDS,
                                             COLD_READ_GAP_WORDS + COLD_READ_WORDS)
        dst = torch.empty(COLD_READ_WORDS, dtype=torch.int32, device=device)
        launches.append(functools.partial(_read_cold_line, src, dst, dependent, pdl))
    return launches


def _read_cold_line(src, dst, dependent: bool, pdl: bool):
    _cold_read_kernel[(1,)](src, dst, WORDS=COLD_READ_WORDS, DEPENDENT=dependent, USE_PDL=pdl,
                            num_warps=1, launch_pdl=pdl)
    return dst


def measure_cold_read_floors(calls: int = LAUNCH_FLOOR_CALLS, reps: int = 50) -> dict:
    """Per call, ms, timed as the launch floor: a kernel that reads one cold line and writes it
    back (cold_read_floor_ms), and one whose read follows an index read first
    (dependent_read_floor_ms, as RoPE's position -> cos/sin row). The launch floor's empty kernel
    reads nothing; a launch-bound kernel that reads its input cannot go below the first, one
    whose load follows an index read below the second. With PDL where the GPU has it (the
    suite's small kernels launch so)."""
    import torch

    from .executor import timing

    if _cold_read_kernel is None:
        return {}
    pdl = pdl_available()
    flush = timing.L2Flusher(torch.device("cuda"))
    floors = {name: _replayed_ms(cold_read_launches(calls, dependent, pdl), flush, reps)
              for name, dependent in (("cold_read_floor_ms", False),
                                      ("dependent_read_floor_ms", True))}
    floors["read_floor_method"] = (
        f"one program reading a cold 128-byte line (and, dependent, a second line at offsets "
        f"the first holds) and storing it, {calls} launches in one CUDA graph, each on its own "
        f"buffer, replayed as the launch floor" + (", launched with PDL" if pdl else ""))
    return floors


def calibrate(device_index: int = 0, out: Path | None = None) -> dict:
    import torch

    torch.cuda.set_device(device_index)
    info = detect_device("cuda", device_index)
    tflops = {name: measure_matmul_tflops(name, 8192 if name != "fp32" else 4096)
              for name in ("bf16", "fp8", "tf32", "fp32")}
    result = {
        "gpu": info.name, "gpu_key": info.gpu_key, "driver": info.driver,
        "torch": info.torch, "measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "bandwidth_tbps": measure_copy_tbps(),
        "copy_tbps_by_bytes": measure_copy_tbps_by_size(),
        "tflops": {k: v for k, v in tflops.items() if v is not None},
        "method": "copy of 4 GiB bf16 (read+write bytes); n=8192 square matmul on random data "
                  "(fp32 n=4096, TF32 off); median of 20 CUDA-event timings; copy_tbps_by_bytes: "
                  "one copy of each size (key: bytes copied), L2 flushed before each of 30 "
                  "repetitions, median",
        **measure_launch_floor(),
        **measure_cold_read_floors(),
    }
    path = out or calibration_path(info.gpu_key or device_slug(info.name))
    write_text(path, json.dumps(result, indent=2) + "\n")  # `-`: standard output, no cache
    result["path"] = "standard output" if is_stdout(path) else str(path)
    return result

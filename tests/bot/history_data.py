"""Runner reports for history tests: what an H200 (or a CPU) evaluation of a repository returns.

The numbers are chosen by the tests; the shapes of the documents are the runner's own
(`atrex.runner.model.Report`), so the store, the series and the pages read exactly what a worker
records.
"""

from __future__ import annotations

from atrex.runner.model import DeviceInfo, OpResult, Peaks, Report, ShapeResult, Status

H200_DATASHEET = Peaks("datasheet", {"bf16": 989.4, "fp8": 1978.9, "tf32": 494.7,
                                     "fp32": 66.9}, 4.8)
H200_MEASURED = Peaks("measured", {"bf16": 771.0, "fp8": 1388.0, "tf32": 375.0, "fp32": 50.0},
                      4.24)


def h200(peaks: Peaks = H200_DATASHEET, torch: str = "2.11.0+cu130") -> DeviceInfo:
    return DeviceInfo(kind="cuda", name="NVIDIA H200", gpu_key="h200_sxm",
                      driver="580.159.04", cuda="13.0", torch=torch, triton="3.6.0",
                      python="3.12.3", sm_clock_mhz=1980, peaks=peaks)


def cpu() -> DeviceInfo:
    return DeviceInfo(kind="cpu", name="x86_64", torch="2.13.0", triton="3.9.0",
                      python="3.11.2")


def op(name: str, fraction: float | None, share: float = 1.0, status: Status = Status.PASS,
       importance: float = 0.25, time_ms: float = 0.05) -> OpResult:
    """One operator with one traced shape whose roofline fraction is `fraction`."""
    timed = fraction is not None and status is Status.PASS
    sol = time_ms * fraction if timed else None
    shape = ShapeResult(id="prefill-8192", status=status, weight=1.0,
                        time_ms=time_ms if timed else None, sol_ms=sol,
                        roofline_fraction=fraction if timed else None, own_kernel_share=share)
    score = fraction if timed else (0.0 if fraction is not None else None)
    stake = (time_ms - sol) / 3.6e6 if timed else None
    return OpResult(name=name, status=status, score=score, own_kernel_share=share,
                    importance=importance, gpu_hours_at_stake=stake, shapes=[shape])


def report(ops: list[OpResult], device: DeviceInfo | None = None,
           tool_version: str = "0.1.0") -> Report:
    device = device or h200()
    timed = device.kind == "cuda"
    total = sum(o.importance or 0 for o in ops) or 1.0
    score = sum((o.importance or 0) / total * (o.score or 0) for o in ops) if timed else None
    stakes = [o.gpu_hours_at_stake for o in ops if o.gpu_hours_at_stake is not None]
    return Report(device=device, ops=ops, timing_available=timed, score=score,
                  gpu_hours_at_stake=sum(stakes) if timed and stakes else None,
                  tool_version=tool_version, created_at="2026-12-04T00:00:00+00:00")


def fractions(values: dict[str, float | None], device: DeviceInfo | None = None,
              status: dict[str, Status] | None = None,
              share: dict[str, float] | None = None) -> Report:
    status, share = status or {}, share or {}
    return report([op(name, value, share=share.get(name, 1.0),
                      status=status.get(name, Status.PASS)) for name, value in values.items()],
                  device)

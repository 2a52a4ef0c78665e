"""Whose work is the output? The layers of the own-kernel share, each decided from data.

- an own kernel ran, wrote every output and read every floating input (launch records and
  provenance, per call);
- the dispatch share: aten compute run outside own kernels, weighted by its roofline work against
  the operator's;
- host CPU time outside own launches no more than glue needs, and no child processes (the
  executor's clocks, and the judge's own scan of the process tree);
- on a GPU, device time: library kernels that no recorded aten op explains, against own kernels.
A share below the threshold is `fallback`; a process or a broken profile is `suspicious`.
"""

from __future__ import annotations

import statistics

import torch

from ..contract import protocol as p
from ..model import FindingKind, Status
from . import procs
from .contestant import Contestant
from .oracle import JudgeContext, ShapeOracle, WorkTally
from .verdict import StageFailure

# Host CPU time outside own kernels that a forward may spend without it counting as computing
# the result on the host: the larger of this floor, the time inside own launches (the Triton
# interpreter on a CPU machine), and this multiple of the reference's own host time. Python glue
# of the corpus's honest kernels stays under 1 ms per call on the CPU machines here.
HOST_FLOOR_MS = 5.0
# Floating data an honest forward reads to the host is a few scalars (a scale, a length); more
# than this share of its floating inputs, and more than the floor, is a result computed there.
HOST_READ_FRACTION = 0.125
HOST_READ_FLOOR_BYTES = 1024
HOST_REFERENCE_FACTOR = 3.0


def own_share(ctx: JudgeContext, oracle: ShapeOracle, contestant: Contestant, calls: list,
              profile: p.DeviceProfile | None) -> float:
    """The own-kernel share of a contestant's judged calls; raises StageFailure below it."""
    reports = [c.report for c in calls]
    _require_own_launch(reports)
    _require_synced_pdl(reports)
    share = min(dispatch_share(ctx, oracle, r.compute) for r in reports)
    if share < ctx.own_share_threshold:
        top = _top_compute([op for r in reports for op in r.compute])
        raise StageFailure(Status.FALLBACK, FindingKind.DISPATCH_FALLBACK,
                           f"own-kernel share {share:.2f} is below {ctx.own_share_threshold:.2f}"
                           + (f"; PyTorch computed: {top}" if top else ""), own_share=share)
    _require_coverage(oracle, reports)
    _require_little_host_work(oracle, reports)
    _require_few_host_reads(reports, floating_bytes(calls[0].inputs))
    _require_no_processes(contestant)
    if profile is not None:
        share = min(share, _device_share(ctx, profile))
    return share


def _require_own_launch(reports: list[p.CallReport]) -> None:
    if any(launch.own for r in reports for launch in r.launches):
        return
    library = sorted({launch.name for r in reports for launch in r.launches})
    raise StageFailure(Status.FALLBACK, FindingKind.NO_OWN_KERNEL,
                  "no kernel defined in the repository ran"
                  + (f" (only library kernels: {', '.join(library)})" if library else ""),
                  own_share=0.0)


def _require_coverage(oracle: ShapeOracle, reports: list[p.CallReport]) -> None:
    """Own kernels wrote every output (directly, or through glue of what they wrote) and read
    every floating input (directly, or through any op the dispatcher saw)."""
    for index, report in enumerate(reports):
        unwritten = [name for name, ptr in report.output_storages.items()
                     if ptr and name not in report.own_written]
        unwritten += [f"input:{n}" for n in oracle.mutates if f"input:{n}" not in
                      report.own_written]
        if unwritten:
            raise StageFailure(Status.FALLBACK, FindingKind.OUTPUT_NOT_OWN,
                          f"no own kernel wrote the outputs {unwritten} (call {index + 1}): "
                          "they came from somewhere else", own_share=0.0)
        unread = [name for name in oracle.float_inputs if name not in report.inputs_read]
        if unread:
            raise StageFailure(Status.FALLBACK, FindingKind.INPUT_NOT_READ,
                          f"no own kernel read the inputs {unread} (call {index + 1}), neither "
                          "directly nor through any operation the dispatcher saw", own_share=0.0)


def dispatch_share(ctx: JudgeContext, oracle: ShapeOracle,
                   compute: list[p.ComputeRecord]) -> float:
    if not compute:
        return 1.0
    tally = WorkTally()
    for op in compute:
        tally.add(op.peak, op.flops)
        tally.bytes += op.bytes
    if oracle.reference_sol_ms <= 0:
        return 0.0
    return max(0.0, 1.0 - min(1.0, ctx.sol_ms(tally) / oracle.reference_sol_ms))


def _top_compute(ops: list[p.ComputeRecord], limit: int = 4) -> str:
    weights: dict[str, float] = {}
    for op in ops:
        weights[op.name] = weights.get(op.name, 0.0) + op.bytes + op.flops
    ranked = sorted(weights, key=weights.get, reverse=True)[:limit]
    return ", ".join(name if "::" in name else f"aten.{name}" for name in ranked)


def _require_synced_pdl(reports: list[p.CallReport]) -> None:
    unsynced = sorted({launch.name for r in reports for launch in r.launches
                       if launch.own and launch.unsynced_pdl})
    if unsynced:
        raise StageFailure(Status.SUSPICIOUS, FindingKind.UNSYNCED_PDL,
                           f"kernels {unsynced} are launched with programmatic dependent launch "
                           "but never wait for the kernel before them (no griddepcontrol.wait): "
                           "their reads race that kernel's writes, and back-to-back calls overlap "
                           "where they are timed")


def _require_little_host_work(oracle: ShapeOracle, reports: list[p.CallReport]) -> None:
    children = max(r.host.children_ms for r in reports)
    if children > 0:
        raise StageFailure(Status.SUSPICIOUS, FindingKind.CHILD_PROCESS,
                      f"forward ran child processes for {children:.1f} ms of CPU time outside "
                      "its own kernels' compilation")
    later = reports[1:] or reports  # the first call may initialise libraries
    outside = statistics.median(max(0.0, r.host.total_ms - r.host.own_ms) for r in later)
    inside = statistics.median(r.host.own_ms for r in later)
    limit = max(HOST_FLOOR_MS, inside, HOST_REFERENCE_FACTOR * oracle.reference_host_ms)
    if outside > limit:
        raise StageFailure(Status.FALLBACK, FindingKind.HOST_COMPUTE,
                      f"forward spent {outside:.1f} ms of host CPU time per call outside its own "
                      f"kernels (limit {limit:.1f} ms: {HOST_FLOOR_MS:g} ms, the time inside own "
                      f"kernels, or {HOST_REFERENCE_FACTOR:g}x the reference's host time): the "
                      "result is computed on the host", own_share=0.0)


def floating_bytes(inputs: dict) -> int:
    return sum(t.numel() * t.element_size() for t in inputs.values()
               if isinstance(t, torch.Tensor) and t.is_floating_point())


def _require_few_host_reads(reports: list[p.CallReport], input_bytes: int) -> None:
    """Turning tensor data into numpy arrays or Python lists (or, on a GPU, copying it to the
    host) is how a result gets computed on the host even when own kernels copy the inputs out
    first and the result back in, which every replay sees as the kernels' own work."""
    later = reports[1:] or reports
    read = statistics.median(r.host.read_bytes for r in later)
    limit = max(HOST_READ_FLOOR_BYTES, HOST_READ_FRACTION * input_bytes)
    if read > limit:
        raise StageFailure(Status.FALLBACK, FindingKind.HOST_COMPUTE,
                           f"forward read {read:,.0f} bytes of floating tensor data to the host "
                           f"per call outside its own kernels ({read / max(input_bytes, 1):.0%} "
                           f"of its floating inputs' {input_bytes:,} bytes; limit {limit:,.0f}): "
                           "the result is computed on the host", own_share=0.0)


def _require_no_processes(contestant: Contestant) -> None:
    found = contestant.strays()
    if not found:
        return
    described = ", ".join(f"{pid} ({procs.command_line(pid)})" for pid in found[:3])
    procs.kill(found)
    raise StageFailure(Status.SUSPICIOUS, FindingKind.CHILD_PROCESS,
                  f"the candidate started processes that outlived its calls: {described}")


def _device_share(ctx: JudgeContext, profile: p.DeviceProfile) -> float:
    if not profile.complete:
        raise StageFailure(Status.SUSPICIOUS, FindingKind.EVALUATOR_TAMPERED,
                           "the device profile of a call is incomplete (its marker kernels are "
                           "missing or extra): the profiler was stopped or fooled")
    late = sorted({k.name for k in profile.kernels if k.late})
    if late:
        raise StageFailure(Status.SUSPICIOUS, FindingKind.SIDE_STREAM,
                           f"kernels {late} were still running after forward returned: work on "
                           "a stream the caller never waited for")
    if profile.own_launches and not any(k.own for k in profile.kernels):
        raise StageFailure(Status.SUSPICIOUS, FindingKind.EVALUATOR_TAMPERED,
                           f"{profile.own_launches} own launches were recorded but none of them "
                           "ran on the device")
    own_ms = sum(k.ms for k in profile.kernels if k.own)
    unexplained: dict[str, float] = {}
    for k in profile.kernels:
        if not k.own and k.region in ("none", "wrapper"):
            unexplained[k.name] = unexplained.get(k.name, 0.0) + k.ms
    total = own_ms + sum(unexplained.values())
    share = own_ms / total if total > 0 else 1.0
    if share < ctx.own_share_threshold:
        top = sorted(unexplained, key=unexplained.get, reverse=True)[:4]
        raise StageFailure(Status.FALLBACK, FindingKind.LIBRARY_KERNEL_TIME,
                           f"own kernels took {share:.0%} of the device time that no recorded "
                           f"operation explains; library kernels: {', '.join(top)} "
                           f"({sum(unexplained.values()):.3f} ms)", own_share=share)
    return share

"""A programmatic-dependent-launch kernel must wait for the kernel before it (issue 15 added PDL to
the suite's kernels; a candidate that launches with PDL and never waits would overlap the calls of
a timed graph). The GPU side is the corpus's cheats/pdl_without_wait.py on the H200."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from atrex.runner.contract import protocol as p
from atrex.runner.executor.tracking import unsynced_pdl
from atrex.runner.judge.attribution import _require_synced_pdl
from atrex.runner.judge.verdict import StageFailure
from atrex.runner.model import FindingKind, Status

WAITS = "griddepcontrol.wait;\n ld.global.v4.b32 ..."
NO_WAIT = "griddepcontrol.launch_dependents;\n ld.global.v4.b32 ..."


def compiled(ptx: str | None, pdl: bool) -> SimpleNamespace:
    return SimpleNamespace(asm={} if ptx is None else {"ptx": ptx},
                           metadata=SimpleNamespace(launch_pdl=pdl))


def test_a_pdl_launch_without_a_wait_is_unsynced():
    assert unsynced_pdl({"launch_pdl": True}, compiled(NO_WAIT, True))
    assert unsynced_pdl({}, compiled(NO_WAIT, True))  # the option from a config, not kwargs


def test_waiting_plain_and_interpreted_launches_are_not():
    assert not unsynced_pdl({"launch_pdl": True}, compiled(WAITS, True))
    assert not unsynced_pdl({"launch_pdl": False}, compiled(NO_WAIT, False))
    assert not unsynced_pdl({"launch_pdl": True}, None)  # the interpreter returns no kernel
    assert not unsynced_pdl({"launch_pdl": True}, compiled(None, True))


def test_the_judge_calls_an_unsynced_own_launch_suspicious():
    def report(*launches):
        return p.CallReport(launches=list(launches))

    fine = p.LaunchRecord("_rms", "kernel.py", True, [1], 64)
    _require_synced_pdl([report(fine)])
    library = p.LaunchRecord("lib", "site-packages/x.py", False, [1], 64, unsynced_pdl=True)
    _require_synced_pdl([report(fine, library)])  # not the candidate's kernel
    racing = p.LaunchRecord("_rms", "kernel.py", True, [1], 64, unsynced_pdl=True)
    with pytest.raises(StageFailure) as failure:
        _require_synced_pdl([report(fine), report(racing)])
    assert failure.value.status is Status.SUSPICIOUS
    assert failure.value.kind is FindingKind.UNSYNCED_PDL
    assert "_rms" in str(failure.value) and "griddepcontrol.wait" in str(failure.value)


def test_the_flag_crosses_the_wire():
    record = p.LaunchRecord("_rms", "kernel.py", True, [1], 64, unsynced_pdl=True)
    assert p.from_wire(p.LaunchRecord, p.to_wire(record)) == record
    assert p.from_wire(p.LaunchRecord, {k: v for k, v in p.to_wire(record).items()
                                        if k != "unsynced_pdl"}).unsynced_pdl is False

"""The judge's side of the executor channel against an executor that breaks the contract: an
extra answer larger than the socket's buffer (the corpus's `cheats/forged_answer` at a GPU shape),
and a breach found while timing (`cheats/forged_recheck`'s trailing answer on a GPU)."""

from __future__ import annotations

import contextlib
import socket
import time
from threading import Thread

import pytest
from atrex.runner.contract import wire
from atrex.runner.evaluate import _apply_timing
from atrex.runner.judge import timing
from atrex.runner.judge.contestant import Contestant, ContestantFailed, ContestantSpec
from atrex.runner.model import FindingKind, ShapeResult, Status

BIG = 32 << 20  # far more than a socket buffer holds


def _contestant_on_a_socket(tmp_path) -> tuple[Contestant, socket.socket]:
    """A contestant whose channel is one end of a socket pair (no process); the other end is
    the scripted executor's."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    contestant = Contestant(ContestantSpec("cand", tmp_path / "kernel.py", tmp_path), "cpu",
                            tmp_path, timeout_s=30, mutates=[])
    contestant.sock = ours
    return contestant, theirs


def _answer_twice(sock: socket.socket) -> None:
    """Reads one request and answers it twice: a forged answer (well formed, the right
    sequence number) and then its own, each with a large output, never reading in between."""
    header, _ = wire.recv_message(sock, time.monotonic() + 30)
    answer = {"seq": header["seq"], "outputs": None}
    with contextlib.suppress(OSError, wire.PeerClosed, wire.PeerTimeout):
        for _ in range(2):
            wire.send_message(sock, answer, [bytearray(BIG)], time.monotonic() + 30)


def test_a_second_answer_is_a_protocol_finding_not_a_deadlock(tmp_path):
    contestant, theirs = _contestant_on_a_socket(tmp_path)
    executor = Thread(target=_answer_twice, args=(theirs,))
    executor.start()
    header, _ = contestant.request("call", blobs=[bytearray(BIG)])
    assert header["seq"] == 1  # the forged answer passes as the answer to this request
    start = time.monotonic()
    with pytest.raises(ContestantFailed) as failed:
        contestant.request("call", blobs=[bytearray(BIG)])
    assert (failed.value.status, failed.value.kind) == (Status.SUSPICIOUS, FindingKind.PROTOCOL)
    assert "no request asked for" in failed.value.message
    assert time.monotonic() - start < 20  # found at once, not at the request's deadline
    executor.join(10)
    theirs.close()
    assert not executor.is_alive() and contestant.broken


def _answer_small_twice(sock: socket.socket) -> None:
    header, _ = wire.recv_message(sock, time.monotonic() + 30)
    for _ in range(2):
        wire.send_message(sock, {"seq": header["seq"], "outputs": None})


def test_the_settle_request_finds_an_answer_behind_the_last_one(tmp_path):
    """A stage's last request has no next request of that stage to run into a trailing answer;
    the settle request is that next request."""
    contestant, theirs = _contestant_on_a_socket(tmp_path)
    executor = Thread(target=_answer_small_twice, args=(theirs,))
    executor.start()
    assert contestant.request("recheck")[0]["seq"] == 1
    executor.join(10)
    with pytest.raises(ContestantFailed) as failed:
        contestant.settle()
    assert (failed.value.status, failed.value.kind) == (Status.SUSPICIOUS, FindingKind.PROTOCOL)
    theirs.close()


def _timed_failure(failure: ContestantFailed) -> ShapeResult:
    entry = timing._Timed(contestant=None, samples=[])

    def fail():
        raise failure

    timing._guard(entry, "after the recheck", fail)
    shape = ShapeResult(id="gpu", status=Status.PASS)
    _apply_timing(shape, timing._payload(entry, launch_bound=False,
                                         policy=timing.TimingPolicy()))
    return shape


def test_a_contract_breach_while_timed_is_suspicious_not_a_runtime_error():
    """The settle request after the recheck is where a trailing answer shows on a GPU (one
    eager call: nothing follows the recheck); it must not read as a crash."""
    breach = _timed_failure(ContestantFailed(Status.SUSPICIOUS, FindingKind.PROTOCOL,
                                             "the executor sent a message no request asked for"))
    assert breach.status is Status.SUSPICIOUS
    assert breach.message.startswith("timing failed: after the recheck: the executor sent")
    crash = _timed_failure(ContestantFailed(Status.RUNTIME_ERROR, FindingKind.RUNTIME_ERROR,
                                            "the executor is gone"))
    assert crash.status is Status.RUNTIME_ERROR

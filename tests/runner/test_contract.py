"""The judge/executor message contract: data only, every size and type checked."""

from __future__ import annotations

import contextlib
import json
import random
import select
import socket
import struct
import threading
import time

import pytest
import torch
from atrex.runner.contract import protocol as p
from atrex.runner.contract import wire
from atrex.runner.judge.stages import call_plan


def _pair():
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)


def test_tensors_and_values_round_trip():
    a, b = _pair()
    value = {"x": torch.randn(3, 4, dtype=torch.bfloat16), "n": 7, "t": (torch.arange(5), None),
             "e": torch.empty(0, 3)}
    blobs: list = []
    wire.send_message(a, {"v": wire.encode_value(value, blobs)}, blobs)
    header, data = wire.recv_message(b, time.monotonic() + 5)
    back = wire.decode_value(header["v"], data)
    assert torch.equal(back["x"], value["x"]) and back["n"] == 7
    assert torch.equal(back["t"][0], value["t"][0]) and back["t"][1] is None
    assert back["e"].shape == (0, 3)


def test_objects_that_are_not_data_arrive_as_descriptions():
    class Sub(torch.Tensor):
        pass

    blobs: list = []
    node = wire.encode_value({"a": torch.ones(2).as_subclass(Sub), "b": object()}, blobs)
    described = wire.decode_value(node, blobs, on_object=lambda d: ("opaque", d))
    assert described["a"][0] == "opaque" and "Sub" in described["a"][1]
    with pytest.raises(wire.ProtocolError):
        wire.decode_value(node, blobs)


@pytest.mark.parametrize("dtype, shape, size", [
    ("float32", [2, 2], 15),  # one byte short
    ("pickle", [1], 4),  # not a dtype
    ("float32", [-1], 4),  # negative dimension
    ("float32", "4", 16),  # not a list
])
def test_tensor_metadata_must_match_its_bytes(dtype, shape, size):
    with pytest.raises(wire.ProtocolError):
        wire.tensor_from_blob(dtype, shape, bytearray(size))


def test_garbage_and_oversized_headers_are_protocol_errors():
    a, b = _pair()
    a.sendall(b'{"type": "checked", "verdict": {"status": "pass"}}\n')
    with pytest.raises(wire.ProtocolError, match="header of"):
        wire.recv_message(b, time.monotonic() + 5)
    a, b = _pair()
    a.sendall(struct.pack("<Q", 9) + b"[[[[[[[[[")
    with pytest.raises(wire.ProtocolError, match="not JSON"):
        wire.recv_message(b, time.monotonic() + 5)
    a, b = _pair()
    deep = b"[" * 100000 + b"]" * 100000
    a.sendall(struct.pack("<Q", len(deep)) + deep)
    with pytest.raises(wire.ProtocolError):
        wire.recv_message(b, time.monotonic() + 5)


def test_a_silent_or_closed_peer_is_not_an_answer():
    a, b = _pair()
    with pytest.raises(wire.PeerTimeout):
        wire.recv_message(b, time.monotonic() + 0.2)
    a.close()
    with pytest.raises(wire.PeerClosed):
        wire.recv_message(b, time.monotonic() + 1)


def test_a_peer_that_stops_reading_is_a_timeout_not_a_socket_error():
    """A request to an executor that no longer reads (stuck in its own write, say) fills the
    socket's buffer: the send ends at the request's deadline as PeerTimeout, which the judge turns
    into a timeout verdict, even when an earlier receive left a timeout on the socket."""
    a, b = _pair()
    a.sendall(struct.pack("<Q", 2) + b"{}")
    wire.recv_message(b, time.monotonic() + 0.05)  # leaves a short timeout on b
    big = bytearray(64 << 20)
    start = time.monotonic()
    with pytest.raises(wire.PeerTimeout):
        wire.send_message(b, {"cmd": "call"}, [big], time.monotonic() + 0.3)
    assert time.monotonic() - start >= 0.25  # the deadline given, not the leftover timeout
    a.close()
    with pytest.raises(wire.PeerClosed):
        wire.send_message(b, {"cmd": "call"}, [big], time.monotonic() + 5)


def test_bytes_no_request_asked_for_end_a_watched_send():
    a, b = _pair()
    a.sendall(b"x")  # waiting before the request
    with pytest.raises(wire.PeerSpoke):
        wire.send_message(b, {"cmd": "call"}, [], time.monotonic() + 5, peer_silent=True)
    assert b.recv(1) == b"x"  # a peek: the byte stays
    wire.send_message(b, {"cmd": "call"}, [], time.monotonic() + 5, peer_silent=True)
    assert wire.recv_message(a, time.monotonic() + 5)[0]["cmd"] == "call"
    a.close()
    with pytest.raises(wire.PeerClosed):
        wire.send_message(b, {"cmd": "call"}, [], time.monotonic() + 5, peer_silent=True)


def test_a_peer_writing_instead_of_reading_ends_the_send_at_once():
    """Both sides writing messages larger than the socket's buffer would each wait for the other
    to read until the deadline; the watched send sees the peer's bytes arrive and stops."""
    a, b = _pair()
    big = bytearray(32 << 20)
    writer = threading.Thread(target=_answer_without_reading, args=(a, big))
    writer.start()
    start = time.monotonic()
    with pytest.raises(wire.PeerSpoke):
        wire.send_message(b, {"cmd": "call"}, [big], time.monotonic() + 30, peer_silent=True)
    assert time.monotonic() - start < 20  # not the deadline
    b.close()
    writer.join(10)
    assert not writer.is_alive()


def _answer_without_reading(sock: socket.socket, data: bytearray) -> None:
    """Once the request has begun to arrive (so the bytes come during the send, not before),
    write a message of its own without reading the rest."""
    select.select([sock], [], [], 30)
    with contextlib.suppress(OSError, wire.PeerClosed):
        wire.send_message(sock, {"seq": 1}, [data], time.monotonic() + 30)


def test_a_watched_send_moves_large_messages_intact():
    a, b = _pair()
    data = torch.randint(0, 255, (24 << 20,), dtype=torch.uint8)
    reader_got: list = []
    reader = threading.Thread(
        target=lambda: reader_got.append(wire.recv_message(a, time.monotonic() + 30)))
    reader.start()
    wire.send_message(b, {"cmd": "call"}, [wire.tensor_blob(data)], time.monotonic() + 30,
                      peer_silent=True)
    reader.join(30)
    header, blobs = reader_got[0]
    assert header["cmd"] == "call" and bytes(blobs[0]) == data.numpy().tobytes()


def test_records_are_type_checked():
    report = p.CallReport(launches=[p.LaunchRecord("k", "kernel.py", True, [1, 2], 64)],
                          host=p.HostTime(1.0, 0.5, 0.0), own_written=["out"])
    assert p.from_wire(p.CallReport, json.loads(json.dumps(p.to_wire(report)))) == report
    for bad in ({"launches": [{"name": "k", "file": "f", "own": "yes"}]},
                {"host": {"total_ms": "fast"}}, {"verdict": "pass"}, {"own_written": "out"}):
        with pytest.raises(wire.ProtocolError):
            p.from_wire(p.CallReport, bad)


def test_call_plan_is_random_but_always_covers_refill_and_repeat():
    rng = random.Random(1)
    plans = [call_plan(3, mutates=False, rng=rng) for _ in range(50)]
    assert all(plan[0] == p.FRESH for plan in plans)
    assert all(plan.count(p.FRESH) >= 3 and p.REFILL in plan and p.REPEAT in plan
               for plan in plans)
    assert len({tuple(plan) for plan in plans}) > 3  # the order and the count vary
    assert all(p.REPEAT not in call_plan(3, mutates=True, rng=rng) for _ in range(20))

"""The bytes that cross between the judge and an executor.

A message is an 8-byte length, a JSON header, then the raw buffers the header lists. Nothing is
ever unpickled: an executor runs untrusted code, so the judge parses what it sends as data, with a
limit on every size, and rebuilds a tensor only from a dtype name, a shape and exactly that many
bytes. Python values travel as small tagged JSON trees (`encode_value` / `decode_value`).
"""

from __future__ import annotations

import json
import math
import select
import socket
import struct
import time

import torch

MAX_HEADER_BYTES = 64 << 20
MAX_DEPTH = 32
_LENGTH = struct.Struct("<Q")

# Every dtype a tensor may cross with, by torch's own name.
DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, name) for name in (
        "float64", "float32", "float16", "bfloat16", "complex64", "complex128",
        "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
        "int64", "int32", "int16", "int8", "uint8", "uint16", "uint32", "uint64", "bool")
    if isinstance(getattr(torch, name, None), torch.dtype)
}


class ProtocolError(Exception):
    """A message that is not what the contract allows (malformed, oversized, out of order)."""


class PeerTimeout(Exception):
    """No complete message arrived before the deadline."""


class PeerClosed(Exception):
    """The other side closed the channel (it exited or died)."""


class PeerSpoke(ProtocolError):
    """The peer sent bytes while it should have been reading a request: a message nobody asked
    for (the contract is one answer per request, and only after the request)."""


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


# --- framing -------------------------------------------------------------------------------------

def send_message(sock: socket.socket, header: dict, blobs: list | None = None,
                 deadline: float | None = None, *, peer_silent: bool = False) -> None:
    """One message; `deadline` as for recv_message. A peer that stops reading (its buffer full)
    is a PeerTimeout at the deadline, never the socket's own TimeoutError. `peer_silent`: the
    peer must not write until the message is through; bytes from it, waiting before or arriving
    during the send, end it at once as PeerSpoke (a peer writing a large message of its own
    instead of reading would otherwise hold both sides in their writes until the deadline)."""
    blobs = blobs or []
    header = {**header, "blobs": [memoryview(b).nbytes for b in blobs]}
    data = json.dumps(header, allow_nan=True).encode()
    send = _send_watching if peer_silent else _send_all
    for chunk in (_LENGTH.pack(len(data)) + data, *blobs):
        send(sock, chunk, deadline)


def _send_watching(sock: socket.socket, chunk, deadline: float | None) -> None:
    """_send_all for a peer that must stay silent: the socket is polled for both directions and
    whatever the peer sends ends the send (PeerSpoke; PeerClosed where it closed)."""
    view = memoryview(chunk).cast("B")
    poller = select.poll()
    poller.register(sock, select.POLLIN | select.POLLOUT)
    sock.setblocking(False)
    try:
        while view.nbytes:
            wait_ms = None
            if deadline is not None:
                wait_ms = math.ceil((deadline - time.monotonic()) * 1000)
                if wait_ms <= 0:
                    raise PeerTimeout()
            events = sum(mask for _, mask in poller.poll(wait_ms))
            if events & (select.POLLIN | select.POLLHUP | select.POLLERR):
                raise PeerSpoke() if _peek(sock) else PeerClosed()
            if events & select.POLLOUT:
                view = view[_send_some(sock, view):]
    finally:
        sock.setblocking(True)


def _peek(sock: socket.socket) -> bool:
    """Whether a byte is waiting (non-blocking; False when closed or broken)."""
    try:
        return bool(sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except OSError:
        return False


def _send_some(sock: socket.socket, view: memoryview) -> int:
    try:
        return sock.send(view)
    except BlockingIOError:
        return 0
    except (ConnectionResetError, BrokenPipeError):
        raise PeerClosed() from None


def _send_all(sock: socket.socket, chunk, deadline: float | None) -> None:
    if deadline is None:
        sock.settimeout(None)
    else:
        left = deadline - time.monotonic()
        if left <= 0:
            raise PeerTimeout()
        sock.settimeout(left)  # sendall's timeout bounds the whole call
    try:
        sock.sendall(chunk)
    except TimeoutError:
        raise PeerTimeout() from None
    except (ConnectionResetError, BrokenPipeError):
        raise PeerClosed() from None


def recv_message(sock: socket.socket, deadline: float | None = None,
                 max_blob_bytes: int = 1 << 40) -> tuple[dict, list[bytearray]]:
    """One message; `deadline` is a time.monotonic() value (None: wait for ever)."""
    (length,) = _LENGTH.unpack(_read_exact(sock, _LENGTH.size, deadline))
    if length > MAX_HEADER_BYTES:
        raise ProtocolError(f"a header of {length} bytes (limit {MAX_HEADER_BYTES})")
    header = _parse_header(_read_exact(sock, length, deadline))
    sizes = header.get("blobs", [])
    if not isinstance(sizes, list) or not all(_is_count(s) for s in sizes):
        raise ProtocolError("'blobs' must list non-negative sizes")
    if sum(sizes) > max_blob_bytes:
        raise ProtocolError(f"{sum(sizes)} bytes of tensor data (limit {max_blob_bytes})")
    return header, [_read_exact(sock, size, deadline) for size in sizes]


def _parse_header(raw: bytearray) -> dict:
    try:
        header = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"the header is not JSON: {str(exc)[:200]}") from None
    if not isinstance(header, dict):
        raise ProtocolError("the header must be a JSON object")
    return header


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _read_exact(sock: socket.socket, size: int, deadline: float | None) -> bytearray:
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PeerTimeout()
            sock.settimeout(left)
        else:
            sock.settimeout(None)
        try:
            n = sock.recv_into(view[got:], min(size - got, 1 << 24))
        except TimeoutError:
            raise PeerTimeout() from None
        except (ConnectionResetError, BrokenPipeError):
            raise PeerClosed() from None
        if n == 0:
            raise PeerClosed()
        got += n
    return buffer


# --- tensors -------------------------------------------------------------------------------------

def tensor_blob(t: torch.Tensor) -> memoryview:
    """The tensor's elements in row-major order, as bytes on the host."""
    flat = t.detach().contiguous().reshape(-1).cpu()
    if flat.numel() == 0:
        return memoryview(b"")
    return memoryview(flat.view(torch.uint8).numpy())


def tensor_from_blob(dtype: str, shape, blob: bytearray) -> torch.Tensor:
    """A CPU tensor from untrusted metadata: every field checked against the bytes given."""
    if dtype not in DTYPES:
        raise ProtocolError(f"unknown dtype {dtype!r}")
    if not isinstance(shape, list) or len(shape) > 64 or not all(_is_count(d) for d in shape):
        raise ProtocolError(f"bad shape {shape!r}")
    numel = 1
    for dim in shape:
        numel *= dim
    torch_dtype = DTYPES[dtype]
    itemsize = torch.empty(0, dtype=torch_dtype).element_size()
    if numel * itemsize != len(blob):
        raise ProtocolError(f"a {dtype} tensor of shape {shape} needs {numel * itemsize} bytes, "
                            f"got {len(blob)}")
    if numel == 0:
        return torch.empty(shape, dtype=torch_dtype)
    return torch.frombuffer(blob, dtype=torch.uint8).view(torch_dtype).reshape(shape)


# --- value trees ---------------------------------------------------------------------------------

def encode_value(value, blobs: list, depth: int = 0) -> dict:
    """A JSON tree for a Python value; tensors become references into `blobs`.

    Only plain dense tensors are encoded with their data. Anything else (a subclass, a sparse or
    meta tensor, an arbitrary object) is described by its type so the receiver can refuse it."""
    if depth > MAX_DEPTH:
        return {"object": "nesting deeper than the contract allows"}
    if isinstance(value, torch.Tensor):
        return _encode_tensor(value, blobs)
    if value is None or isinstance(value, bool | int | float | str):
        return {"py": value}
    if isinstance(value, dict):
        return {"dict": [[str(k), encode_value(v, blobs, depth + 1)] for k, v in value.items()]}
    if isinstance(value, list | tuple):
        tag = "tuple" if isinstance(value, tuple) else "list"
        return {tag: [encode_value(v, blobs, depth + 1) for v in value]}
    return {"object": f"{type(value).__module__}.{type(value).__qualname__}"}


def _encode_tensor(t: torch.Tensor, blobs: list) -> dict:
    kind = f"{type(t).__module__}.{type(t).__qualname__}"
    if type(t) is not torch.Tensor:
        return {"object": kind}
    if t.layout != torch.strided or t.is_meta or t.is_nested:
        return {"object": f"{kind} with layout {t.layout}"}
    blobs.append(tensor_blob(t))
    return {"tensor": len(blobs) - 1, "dtype": dtype_name(t.dtype), "shape": list(t.shape),
            "device": t.device.type}


def encode_inputs(inputs: dict, blobs: list) -> dict:
    """A dict of inputs, as `encode_value` would, except that tensors sharing a storage travel as
    one span of its bytes and views on it (dtype, shape, strides, offset), so they still alias
    where they arrive (`decode_value(..., views={})`)."""
    from .storage import byte_view, storage_groups

    nodes: dict[str, dict] = {}
    for group in storage_groups(inputs):
        members = [n for n in group.names if type(inputs[n]) is torch.Tensor
                   and inputs[n].layout == torch.strided]
        if len(members) < 2:
            continue
        blobs.append(tensor_blob(byte_view(inputs[members[0]], group.lo, group.hi)))
        for name in members:
            t = inputs[name]
            nodes[name] = {"view": len(blobs) - 1, "dtype": dtype_name(t.dtype),
                           "shape": list(t.shape), "stride": list(t.stride()),
                           "offset": (t.storage_offset() * t.element_size() - group.lo)
                           // t.element_size(), "device": t.device.type}
    return {"dict": [[str(k), nodes[k] if k in nodes else encode_value(v, blobs, 1)]
                     for k, v in inputs.items()]}


def _view_from_blob(node: dict, blobs: list[bytearray], bases: dict) -> torch.Tensor:
    """A view node: checked against the span it points into, then built on the one CPU storage
    every view of that span shares."""
    index, dtype, shape, stride, offset = (node.get(k) for k in (
        "view", "dtype", "shape", "stride", "offset"))
    if not _is_count(index) or index >= len(blobs) or dtype not in DTYPES:
        raise ProtocolError("a view of a span that is not there, or of an unknown dtype")
    if not (isinstance(shape, list) and isinstance(stride, list) and len(shape) == len(stride)
            <= 64 and all(_is_count(v) for v in [*shape, *stride, offset])):
        raise ProtocolError(f"bad view: shape {shape!r}, stride {stride!r}, offset {offset!r}")
    torch_dtype = DTYPES[dtype]
    itemsize = torch.empty(0, dtype=torch_dtype).element_size()
    numel = 1
    for dim in shape:
        numel *= dim
    extent = offset + 1 + sum((n - 1) * s for n, s in zip(shape, stride, strict=True))
    if numel and extent * itemsize > len(blobs[index]):
        raise ProtocolError(f"a view reaching byte {extent * itemsize} of a "
                            f"{len(blobs[index])}-byte span")
    if index not in bases:
        bases[index] = torch.frombuffer(blobs[index], dtype=torch.uint8) if blobs[index] else \
            torch.empty(0, dtype=torch.uint8)
    return torch.empty(0, dtype=torch_dtype).set_(bases[index].untyped_storage(), offset, shape,
                                                  stride)


def decode_value(node, blobs: list[bytearray], on_object=None, place=None, depth: int = 0,
                 views: dict | None = None):
    """The inverse of `encode_value`. An `object` node (a value that was not plain data) becomes
    `on_object(description)`, or raises when no `on_object` is given; `place(tensor, device)`
    puts a rebuilt CPU tensor where the sender said it was. `views` (a dict, empty at first)
    admits the view nodes of `encode_inputs`; without it they are refused."""
    if depth > MAX_DEPTH or not isinstance(node, dict) or len(node) == 0:
        raise ProtocolError("malformed value tree")
    if "view" in node:
        if views is None:
            raise ProtocolError("a view where none is allowed")
        tensor = _view_from_blob(node, blobs, views)
        return place(tensor, node.get("device")) if place else tensor
    if "tensor" in node:
        index = node["tensor"]
        if not _is_count(index) or index >= len(blobs):
            raise ProtocolError(f"tensor reference {index!r} out of range")
        tensor = tensor_from_blob(node.get("dtype"), node.get("shape"), blobs[index])
        return place(tensor, node.get("device")) if place else tensor
    if "py" in node:
        value = node["py"]
        if value is not None and not isinstance(value, bool | int | float | str):
            raise ProtocolError("a 'py' node holds a scalar")
        return value
    if "dict" in node and isinstance(node["dict"], list):
        return {_pair(item)[0]: decode_value(_pair(item)[1], blobs, on_object, place,
                                                 depth + 1, views)
                for item in node["dict"]}
    for tag, kind in (("list", list), ("tuple", tuple)):
        if tag in node and isinstance(node[tag], list):
            return kind(decode_value(v, blobs, on_object, place, depth + 1, views)
                        for v in node[tag])
    if "object" in node:
        description = str(node["object"])[:200]
        if on_object is None:
            raise ProtocolError(f"not a value the contract carries: {description}")
        return on_object(description)
    raise ProtocolError("malformed value tree")


def _pair(item) -> tuple:
    if not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], str):
        raise ProtocolError("a dict entry must be [key, value]")
    return item[0], item[1]

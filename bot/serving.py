"""The web process's gunicorn worker: gthread, but every request is read whole before a thread
sees it.

gunicorn's gthread worker hands a connection to a thread as soon as its first byte arrives; the
thread then reads the headers and the body with blocking reads and no deadline. Ten connections
trickling one byte a second held every thread, and `/healthz` and webhook deliveries timed out for
40 s (issue 16). Here the worker's main loop (the selector it already runs) reads each request
without blocking, with one deadline for the whole request (`ATREX_WEB_READ_TIMEOUT_S`, answered
408) and the size limit checked from `Content-Length` before the body is read (413). Only a
complete request goes to a thread, so a slow client holds a buffer, not a thread; this is what a
buffering reverse proxy (nginx's `proxy_request_buffering`) does in front of a threaded server.

Requests must say their length (GitHub's deliveries do): `Transfer-Encoding` is answered 411.
Built on gunicorn 27's `ThreadWorker` (`accept`, `enqueue_req`, `handle`, `murder_pending`);
pyproject pins gunicorn to that major version.
"""

from __future__ import annotations

import errno
import selectors
import socket
import time
from collections import deque
from dataclasses import dataclass
from functools import partial

from gunicorn.workers.gthread import TConn, ThreadWorker

READ_CHUNK = 256 * 1024
MAX_HEADER_BYTES = 64 * 1024  # gunicorn's own limits: 100 fields of 8,190 bytes, a 4,094 line
THREAD_READ_TIMEOUT_S = 5.0  # a thread never needs to read: this only bounds a parser surprise
LINGER_S = 2.0  # after a 4xx: read and drop what the client still sends, then close (see _reject)


@dataclass(frozen=True)
class Framing:
    """What the bytes received so far say about the request."""

    complete: bool = False
    length: int | None = None  # bytes of the whole request, once the headers are in
    error: tuple[int, str] | None = None  # (status, reason) to answer and close
    expect_continue: bool = False


def framing(data: bytes, max_body: int) -> Framing:
    """Parse just enough of an HTTP/1 request to know when it is complete."""
    start = len(data) - len(data.lstrip(b"\r\n"))  # empty lines before a request are allowed
    ends = [(i, len(sep)) for sep in (b"\r\n\r\n", b"\n\n")
            if (i := data.find(sep, start)) >= 0]
    if not ends:
        too_big = len(data) - start > MAX_HEADER_BYTES
        return Framing(error=(431, "Request Header Fields Too Large")) if too_big else Framing()
    end, sep = min(ends)
    if end - start > MAX_HEADER_BYTES:
        return Framing(error=(431, "Request Header Fields Too Large"))
    lengths, expect = set(), False
    for line in data[start:end].split(b"\n")[1:]:
        name, _, value = line.partition(b":")
        key, value = name.strip().lower(), value.strip()
        if key == b"transfer-encoding":
            return Framing(error=(411, "Length Required"))
        if key == b"content-length":
            if not value.isdigit() or len(value) > 15:
                return Framing(error=(400, "Bad Request"))
            lengths.add(int(value))
        elif key == b"expect" and value.lower() == b"100-continue":
            expect = True
    if len(lengths) > 1:
        return Framing(error=(400, "Bad Request"))
    body = lengths.pop() if lengths else 0
    if body > max_body:
        return Framing(error=(413, "Content Too Large"))
    total = end + sep + body
    return Framing(complete=len(data) >= total, length=total, expect_continue=expect)


class _DeadlineSocket:
    """The connection's socket, where "blocking" means "blocking for at most `timeout`"."""

    def __init__(self, sock: socket.socket, timeout: float):
        self._sock = sock
        self._timeout = timeout

    def setblocking(self, flag: bool) -> None:
        self._sock.settimeout(self._timeout if flag else 0.0)

    def __getattr__(self, name: str):
        return getattr(self._sock, name)


@dataclass
class _Incoming:
    deadline: float
    data: bytearray
    length: int | None = None
    continued: bool = False


class BufferedThreadWorker(ThreadWorker):
    """gthread with whole requests read in the main loop (see the module's docstring)."""

    read_timeout_s = 10.0  # set by bot.server from ATREX_WEB_READ_TIMEOUT_S
    max_body_bytes = 25 * 1024 * 1024

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.reading: deque[TConn] = deque()  # oldest deadline first
        self.lingering: deque[tuple[float, TConn]] = deque()

    def accept(self, listener) -> None:
        try:
            client, address = listener.accept()
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                return  # nothing to accept after all
            raise  # as gthread does (EMFILE...): the arbiter restarts the worker
        self.nr_conns += 1
        conn = TConn(self.cfg, client, address, listener.getsockname())
        conn.sock = _DeadlineSocket(conn.sock, THREAD_READ_TIMEOUT_S)
        self.enqueue_req(conn)

    def enqueue_req(self, conn: TConn) -> None:
        if getattr(conn, "atrex_request", None) is not None:
            super().enqueue_req(conn)  # a complete request: a thread handles it
            return
        leftover = conn.parser.unreader.take_buffered() if conn.parser is not None else b""
        conn.sock.setblocking(False)
        conn.atrex_incoming = _Incoming(time.monotonic() + self.read_timeout_s,
                                        bytearray(leftover))
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_readable, conn))
        self.reading.append(conn)
        if leftover:
            self._advance(conn)

    def _on_readable(self, conn: TConn, _sock) -> None:
        try:
            chunk = conn.sock.recv(READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:  # the client went away
            self._stop_reading(conn)
            self._close(conn)
            return
        conn.atrex_incoming.data += chunk
        self._advance(conn)

    def _advance(self, conn: TConn) -> None:
        incoming = conn.atrex_incoming
        if incoming.length is None:
            frame = framing(bytes(incoming.data), self.max_body_bytes)
            if frame.error is not None:
                self._stop_reading(conn)
                self._reject(conn, *frame.error)
                return
            incoming.length = frame.length
            if frame.expect_continue and not incoming.continued:
                incoming.continued = True
                self._send(conn, b"HTTP/1.1 100 Continue\r\n\r\n")
        if incoming.length is not None and len(incoming.data) >= incoming.length:
            self._stop_reading(conn)
            conn.atrex_request = bytes(incoming.data)
            conn.atrex_incoming = None
            super().enqueue_req(conn)

    def _stop_reading(self, conn: TConn) -> None:
        self.poller.unregister(conn.sock)
        self.reading.remove(conn)

    def handle(self, conn: TConn):
        """In a thread: parse and serve the request from the bytes read in the main loop."""
        data, conn.atrex_request = conn.atrex_request, None
        conn.data_ready = True
        conn.sock.setblocking(True)
        conn.init()
        conn.parser.unreader.unread(data)
        return super().handle(conn)

    def murder_pending(self) -> None:
        super().murder_pending()
        now = time.monotonic()
        while self.reading and self.reading[0].atrex_incoming.deadline <= now:
            conn = self.reading.popleft()
            self.poller.unregister(conn.sock)
            self.log.info("408 to %s: no whole request within %.0f s", conn.client,
                          self.read_timeout_s)
            self._reject(conn, 408, "Request Timeout")
        while self.lingering and self.lingering[0][0] <= now:
            _, conn = self.lingering.popleft()
            self.poller.unregister(conn.sock)
            self._close(conn)

    def _reject(self, conn: TConn, status: int, reason: str) -> None:
        """Answer and close without blocking. Closing a socket that still has unread request
        bytes makes the kernel send RST, which can destroy the answer before the client reads
        it; so the write side is shut (FIN) and what arrives is dropped for LINGER_S, as
        gunicorn's close_graceful does in a thread."""
        body = f"{status} {reason}\n".encode()
        self._send(conn, f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\n"
                   f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(conn)
            return
        self.lingering.append((time.monotonic() + LINGER_S, conn))
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_linger, conn))

    def _on_linger(self, conn: TConn, _sock) -> None:
        try:
            if conn.sock.recv(READ_CHUNK):
                return
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            pass
        self.poller.unregister(conn.sock)  # the client closed its side too
        self.lingering.remove(next(item for item in self.lingering if item[1] is conn))
        self._close(conn)

    def _close(self, conn: TConn) -> None:
        self.nr_conns -= 1
        conn.close()

    @staticmethod
    def _send(conn: TConn, data: bytes) -> None:
        """Best effort on the non-blocking socket: a short answer fits the send buffer."""
        try:
            conn.sock.send(data)
        except OSError:
            pass

"""The judge's result channel to the evaluator, sealed so that no other process can speak on it.

In container mode the channel is a file in the scratch mount, and the executors in the judge's
container run as its user: a candidate could append a verdict of its own, or cut the judge's. So
every line carries the next sequence number and an HMAC-SHA256 over it, under a key the evaluator
makes for that one judge and hands it in its environment. The judge takes the key out of its
environment before it starts any executor, and refuses inspection (runner/judge/procs.py), so no
candidate reads it. The evaluator takes a line only with a valid seal and the number due; anything
else means that another process wrote on the channel.

A line: `<hex HMAC> <JSON object with "seq">`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets

KEY_VARIABLE = "ATREX_CHANNEL_KEY"


class Tampered(Exception):
    """A line the judge did not write, or a line of the judge's missing or out of order."""


def new_key() -> str:
    return secrets.token_hex(32)


def _mac(key: bytes, body: bytes) -> bytes:
    return hmac.new(key, body, hashlib.sha256).hexdigest().encode()


class Sealer:
    """The judge's side: numbers and seals each message."""

    def __init__(self, key: str):
        self.key = bytes.fromhex(key)
        self.seq = 0

    def seal(self, kind: str, payload: dict) -> bytes:
        body = json.dumps({"type": kind, **payload, "seq": self.seq}, default=str).encode()
        self.seq += 1
        return _mac(self.key, body) + b" " + body + b"\n"


class Opener:
    """The evaluator's side: checks each line's seal and number, then parses it."""

    def __init__(self, key: str):
        self.key = bytes.fromhex(key)
        self.seq = 0

    def open(self, line: bytes) -> dict:
        mac, _, body = line.strip().partition(b" ")
        if not hmac.compare_digest(mac, _mac(self.key, body)):
            raise Tampered(f"line {self.seq + 1} does not carry the judge's seal: "
                           f"{line[:80]!r}")
        message = json.loads(body)
        if message.get("seq") != self.seq:
            raise Tampered(f"the judge's message {message.get('seq')} arrived where "
                           f"{self.seq} was due (a line was cut or replayed)")
        self.seq += 1
        return message

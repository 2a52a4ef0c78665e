"""Extracting exactly one Python module from an LLM reply.

The reply must contain fenced code blocks; exactly one of them must define ``class Model``. No
block, no ``class Model``, or several blocks defining it make the reply malformed (a failed
attempt). Syntax errors are not judged here: the runner reports them as ``compile_error`` like any
other candidate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_FENCE = re.compile(r"^```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
_MODEL = re.compile(r"^class\s+Model\b", re.M)


@dataclass(frozen=True)
class Extraction:
    source: str | None
    problem: str | None
    summary: str


def extract_module(reply: str) -> Extraction:
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(reply or "")]
    summary = _summary(reply or "")
    if not blocks:
        return Extraction(None, "no fenced code block in the reply", summary)
    python = [body for lang, body in blocks if lang in ("", "python", "py", "python3")]
    modules = [body for body in python if _MODEL.search(body)]
    if not modules:
        return Extraction(None, "no code block defines class Model", summary)
    if len(modules) > 1:
        return Extraction(None, f"{len(modules)} code blocks define class Model; expected one",
                          summary)
    return Extraction(modules[0].rstrip() + "\n", None, summary)


def _summary(reply: str, limit: int = 300) -> str:
    text = _FENCE.sub(" ", reply)
    text = " ".join(text.split())
    return text[:limit] if text else ""

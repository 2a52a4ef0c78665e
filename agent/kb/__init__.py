"""The agent's knowledge base: our own reference Triton kernels and one-technique notes.

Layout (see README.md, the format is strict so entries written by others load or fail loudly):
``entries/<entry-id>/entry.toml`` plus ``kernel.py`` (kind "kernel") or ``note.md`` (kind "note").
"""

from .loader import BOTTLENECKS, KbEntry, KbError, load_entry, load_kb
from .retrieve import Retrieval, family_of, retrieve

__all__ = ["BOTTLENECKS", "KbEntry", "KbError", "Retrieval", "family_of", "load_entry", "load_kb",
           "retrieve"]

"""``kb``: adapt a knowledge-base kernel of the same family and forward signature.

Retrieval already requires the exact family and ``Model.forward`` parameter names. Here the entry's
``Model.__init__`` must also accept every ``init_kwargs`` key of the operator's shapes; the adapted
module is the entry's kernel with a provenance header. Entries already tried (in the visible memory)
or identical to the incumbent are skipped; the best-ranked remaining entry is proposed.
"""

from __future__ import annotations

from atrex.runner.astscan import class_in_source, params_of_method

from ..kb import KbEntry
from ..measure import source_sha
from .base import Proposal, ProposalContext


def init_params(source: str) -> tuple[set[str], bool] | None:
    """Names ``Model.__init__`` accepts and whether it takes ``**kwargs``; None if unparseable."""
    model = class_in_source(source, "Model")
    if model is None:
        return None
    params = params_of_method(model, "__init__")
    return (set(), False) if params is None else (set(params.names), params.var_keyword)


def compatible(entry: KbEntry, source: str, init_keys: set[str]) -> bool:
    params = init_params(source)
    if params is None:
        return False
    names, var_keyword = params
    return var_keyword or init_keys <= names


def adapt(entry: KbEntry, source: str, op_name: str) -> str:
    header = (f"# Adapted by atrex from knowledge-base entry {entry.id!r} for operator "
              f"{op_name!r}:\n# {entry.title}\n")
    return header + source


class KbProposer:
    name = "kb"

    def propose(self, ctx: ProposalContext) -> list[Proposal] | None:
        tried = {item.meta.get("kb_entry") for item in ctx.memory if item.proposer == self.name}
        init_keys = {key for shape in ctx.op.shapes for key in shape.init_kwargs}
        for hit in ctx.kb_kernels:
            entry = hit.entry
            if entry.id in tried:
                continue
            source = entry.body()
            if not compatible(entry, source, init_keys):
                continue
            adapted = adapt(entry, source, ctx.op.name)
            if source_sha(adapted) == ctx.incumbent_sha:
                continue
            return [Proposal(self.name, f"kb: {entry.id}: {entry.title}", source=adapted,
                             meta={"kb_entry": entry.id, "kb_score": hit.score})]
        return None

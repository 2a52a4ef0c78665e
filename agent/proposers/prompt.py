"""The LLM prompt: the reference, the current kernel, its profile and numbers, the visible attempt
memory and the retrieved knowledge, with the rules the runner enforces spelled out."""

from __future__ import annotations

from .base import ProposalContext

SYSTEM = """You are a GPU kernel engineer improving one operator's Triton kernel for an NVIDIA GPU.
Every candidate is verified by an evaluator before it is timed: outputs are compared with a float64
reference on fresh random inputs, PyTorch/library compute is detected (dispatch tracing, device
profiling, and a replay with your Triton kernels disabled), and tricks are caught (cached outputs,
reused output buffers, side streams or threads, patched timers, results faster than the hardware
roofline). Any of these rejects the candidate, whatever its speed.

Make ONE focused change that addresses the stated bottleneck. Reply with a short explanation (one
or two sentences) followed by exactly one ```python code block containing the complete new module:
imports, the @triton.jit kernels, and `class Model(torch.nn.Module)` with the same __init__
arguments and the same forward signature as the current kernel. All arithmetic must happen in your
own @triton.jit kernels; torch may only allocate, reshape and view tensors."""

MAX_MEMORY_ITEMS = 12
MAX_KB_KERNEL_CHARS = 6000


def build_messages(ctx: ProposalContext) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user_prompt(ctx)}]


def user_prompt(ctx: ProposalContext) -> str:
    sections = [
        f"# Operator `{ctx.op.name}` (family: {ctx.family or 'unknown'}, dtype: "
        f"{ctx.dtype or 'see inputs'}, target GPU: {ctx.gpu or 'unknown'})",
        "## Reference semantics (reference.py)\n```python\n" + ctx.reference_source.strip()
        + "\n```",
        "## Current kernel (the incumbent: the best verified kernel so far)\n```python\n"
        + ctx.incumbent_source.strip() + "\n```",
        "## Measured numbers\n" + _numbers(ctx),
        "## Profile\n" + _profile(ctx),
        "## Attempt memory (what was tried; do not repeat failures)\n" + _memory(ctx),
    ]
    knowledge = _knowledge(ctx)
    if knowledge:
        sections.append("## Relevant knowledge\n" + knowledge)
    sections.append(f"Goal: raise the roofline fraction toward {ctx.target_fraction:.2f} on the "
                    f"shapes above. Address the `{ctx.profile.bottleneck}` bottleneck with one "
                    "change. Reply with one ```python block containing the whole module.")
    return "\n\n".join(sections)


def _numbers(ctx: ProposalContext) -> str:
    m = ctx.incumbent
    if m is None:
        return "The incumbent has not been measured."
    lines = [f"status {m.status}, own-kernel share {_fmt(m.own_kernel_share)}, roofline fraction "
             f"(weighted) {_fmt(m.roofline_fraction)}"]
    for s in m.shapes:
        lines.append(f"- shape {s.id}: {s.status}, {s.bound or '?'}-bound, time "
                     f"{_fmt(s.time_ms, 'ms')}, roofline floor {_fmt(s.sol_ms, 'ms')}, fraction "
                     f"{_fmt(s.roofline_fraction)}, weight {s.weight:g}")
    if m.message:
        lines.append(f"problem: {m.message}")
    return "\n".join(lines)


def _profile(ctx: ProposalContext) -> str:
    p = ctx.profile
    text = f"bottleneck: **{p.bottleneck}** (from {p.source}); {p.evidence}"
    return text + (f"\n({p.note})" if p.note else "")


def _memory(ctx: ProposalContext) -> str:
    items = ctx.memory[-MAX_MEMORY_ITEMS:]
    if not items:
        return "(none yet)"
    lines = []
    for item in items:
        verdict = "ACCEPTED" if item.accepted else item.status
        lines.append(f"- attempt {item.attempt} [{item.proposer}] {verdict}: {item.summary} "
                     f"-> {item.reason}")
    return "\n".join(lines)


def _knowledge(ctx: ProposalContext) -> str:
    parts = []
    for hit in ctx.kb_notes:
        parts.append(f"### {hit.entry.title}\n{hit.entry.body().strip()}")
    for hit in ctx.kb_kernels[:1]:
        body = hit.entry.body()
        if len(body) > MAX_KB_KERNEL_CHARS:
            body = body[:MAX_KB_KERNEL_CHARS] + "\n# ... truncated"
        parts.append(f"### Reference kernel: {hit.entry.title}\n{hit.entry.summary}\n"
                     f"```text\n{body.strip()}\n```")
    return "\n\n".join(parts)


def _fmt(value, unit: str = "") -> str:
    if value is None:
        return "n/a"
    return f"{value:.4g}{(' ' + unit) if unit else ''}"

import math

import torch

# Sampling settings mixed across the batch, as a server sees them (per-request parameters):
#   Qwen3 model card, thinking mode:      temperature 0.6, top_p 0.95, top_k 20
#   Qwen3 model card, non-thinking mode:  temperature 0.7, top_p 0.8,  top_k 20
#   Llama-3.1-8B-Instruct generation_config: temperature 0.6, top_p 0.9 (no top-k)
#   plain sampling (vLLM defaults):        temperature 1.0, top_p 1.0, top_k disabled
_SETTINGS = ((0.6, 0.95, 20), (0.7, 0.8, 20), (0.6, 0.9, 0), (1.0, 1.0, 0))
_UNIT = 2.0 ** -24


def _next_token_logits(batch: int, vocab: int, flat_rows: int) -> torch.Tensor:
    """Logits shaped like an LLM's next-token distribution: a Gaussian background over the whole
    vocabulary plus a few dozen plausible tokens far above it (a Zipf-like head), with per-row
    variety in how confident the model is. The last `flat_rows` rows have no head (a near-uniform
    distribution, the worst case for sorting-free selection)."""
    logits = 2.0 * torch.randn(batch, vocab, device="cuda")
    head = min(64, vocab)
    idx = torch.rand(batch, vocab, device="cuda").argsort(dim=-1)[:, :head]
    rank = torch.arange(1, head + 1, device="cuda", dtype=torch.float32)
    confidence = 10.0 + 12.0 * torch.rand(batch, 1, device="cuda")  # head logit over the bulk
    boost = confidence + 2.0 * torch.log(1.0 / rank)[None, :] + 0.5 * torch.randn(batch, head,
                                                                                   device="cuda")
    if flat_rows:
        boost[batch - flat_rows:] = 0.0
    return logits.scatter_add(1, idx, boost)


def _make_inputs(batch: int, vocab: int, flat_rows: int = 0, edge_rows: bool = False,
                 tie_rows: bool = False, wide_rows: int = 0) -> dict:
    """probs: softmax(logits / temperature) quantized DOWN to multiples of 2^-24 (so every partial
    sum is exact in fp32 and the sampled id does not depend on summation order), row sums <= 1.
    top_k: 1..vocab (vocab = disabled), top_p: (0, 1], uniform: U[0, 1) per row.
    edge_rows: first rows get top_k = 1, top_p = 1.0 (kept near 1.0) and u close to 1.
    tie_rows: the first len(_TIE_ROWS) rows (after the edge rows, if any) are replaced by rows with
    equal probabilities at the top-k / top-p boundary and rows where top-p keeps one token (see
    _TIE_ROWS); drawn after everything else, so the other rows are those of tie_rows=False.
    wide_rows: the last rows before the flat ones are replaced by rows whose top-p set holds
    thousands of tokens (see _set_wide_rows), also drawn after everything else."""
    setting = torch.randint(0, len(_SETTINGS), (batch,), device="cuda")
    table = torch.tensor(_SETTINGS, dtype=torch.float64, device="cuda")[setting]
    temperature, top_p, top_k = table[:, 0], table[:, 1], table[:, 2].to(torch.int32)
    top_k = torch.where(top_k > 0, top_k, torch.full_like(top_k, vocab)).clamp(max=vocab)
    logits = _next_token_logits(batch, vocab, flat_rows).double() / temperature[:, None]
    probs = torch.softmax(logits, dim=-1)
    probs = (torch.floor(probs / _UNIT) * _UNIT).to(torch.float32)
    uniform = torch.rand(batch, device="cuda")
    top_p = top_p.to(torch.float32)
    if edge_rows:
        top_k[0], top_p[0] = 1, 0.9
        top_k[1], top_p[1] = vocab, 1.0
        top_k[2], top_p[2], uniform[2] = 5, 0.99999994, 1.0 - 2.0 ** -24
        top_k[3], top_p[3], uniform[3] = vocab, 0.999, 0.0
    if tie_rows:
        _set_tie_rows(probs, top_k, top_p, uniform, first=4 if edge_rows else 0)
    if wide_rows:
        _set_wide_rows(probs, top_k, top_p, range(batch - flat_rows - wide_rows,
                                                  batch - flat_rows))
    return {"probs": probs, "top_k": top_k, "top_p": top_p, "uniform": uniform}


def _set_wide_rows(probs, top_k, top_p, rows) -> None:
    """Rows whose nucleus is wide: a plateau of min(3000, vocab / 2) tokens at random ids holding
    about 90% of the mass over a near-uniform bulk, top-k off and top-p 0.8, so the top-p cut
    falls inside the plateau and keeps ~2,700 tokens (at vocab 151936, all above 2^-12 and none
    of the bulk). A low-confidence head under nucleus sampling does this on the suite's shape
    now and then (the Llama setting, top-k off); here it happens on every draw."""
    vocab = probs.shape[1]
    plateau = min(3000, vocab // 2)
    # plateau mass / bulk mass = 9: plateau * e^b = 9 * (vocab - plateau) * E[e^(0.5 z)]
    lift = math.log(9.0 * (vocab - plateau) * math.exp(0.125) / plateau)
    for row in rows:
        logits = 0.5 * torch.randn(vocab, dtype=torch.float64, device=probs.device)
        ids = torch.randperm(vocab, device=probs.device)[:plateau]
        logits[ids] += lift + 0.1 * torch.randn(plateau, dtype=torch.float64,
                                                device=probs.device)
        row_probs = torch.softmax(logits, dim=-1)
        probs[row] = (torch.floor(row_probs / _UNIT) * _UNIT).to(torch.float32)
        top_k[row] = vocab
        top_p[row] = 0.8


def _p(e: int) -> int:
    """2^-e in units of 2^-24."""
    return 1 << (24 - e)


_REST = -1  # group count, first group only: the other tokens rank above the tie groups
_U_TOP = 1.0 - 2.0 ** -24  # largest uniform below 1: the draw lands on the last kept token
_P_TAIL = 1.0 - 2.0 ** -14  # exact in fp32; top_p * M cuts about 2^-14 of the mass off the tail
# (tie groups [(count, prob in units of 2^-24)] by prob descending, or None for the drawn LLM-like
#  row; top_k (0 = disabled = vocab); top_p; uniform (None = drawn); whether the row sums to
#  exactly 1). Kept set by the definition (prob desc, id asc), with ties decided by token id:
_TIE_ROWS = (
    # top-k cut through 8 equal tokens: the top one and the 4 lowest ids of the 8
    ([(1, _p(3)), (8, _p(5))], 5, 1.0, None, False),
    # top-p cut through the 6 equal largest: the 3 lowest ids (0.15 * M in (2/16, 3/16))
    ([(6, _p(4))], 0, 0.15, None, False),
    # the same, top_p * M = 2/16 exactly: the third tie has mass before it == top_p * M, dropped
    ([(6, _p(4))], 0, 0.125, _U_TOP, True),
    # top-k (12) and top-p (6 of the ties) both cut through 20 equal tokens below a 2-token head
    ([(1, _p(3)), (1, _p(4)), (20, _p(6))], 12, 0.8, None, False),
    # 300 ties exactly at a power of two (2^-10), top-k = 100 and top-p = 0.9 inside them
    ([(2, _p(7)), (300, _p(10))], 100, 0.9, None, False),
    # 250 equal largest at 2^-8 (97.7% of the mass): top-k keeps the 37 lowest ids of them, top-p
    # the first 19 of those; with top-k off, top-p keeps the lowest ids up to 0.3 * mass
    ([(250, _p(8))], 37, 0.5, None, True),
    ([(250, _p(8))], 0, 0.3, _U_TOP, True),
    # 1000 ties at 2^-20 on the highest token ids, below every other token (and below the kernel's
    # lowest threshold, 2^-18: the exact bisection path): top-p drops the highest ids of them, and
    # u near 1 draws the last one kept; with top-k = 1500 the top-k cut also falls inside them
    ([(_REST, 0), (1000, _p(20))], 0, _P_TAIL, _U_TOP, False),
    ([(_REST, 0), (1000, _p(20))], 1500, _P_TAIL, _U_TOP, False),
    # tiny top-p, top-k off, two equal largest: only the lower id (for any u)
    ([(2, _p(2)), (3, _p(4))], 0, 1e-6, _U_TOP, False),
    # tiny top-p, top-k off, LLM-like row: only the argmax
    (None, 0, 1e-6, None, False),
    # largest = 1/2 of an exact mass of 1, top_p = 0.5: the second has 0.5 == top_p * M before it
    ([(1, _p(1))], 0, 0.5, _U_TOP, True),
    # largest (0.625) alone exceeds top_p * M_k with top-k = 20 on
    ([(1, 5 * _p(3))], 20, 0.6, _U_TOP, False),
    # top_k = 1 with 4 equal largest: the lowest id of them
    ([(4, _p(3))], 1, 0.9, None, False),
)


def _tie_probs(vocab: int, groups: list, exact: bool, device) -> torch.Tensor:
    """A row with the given tie groups at random token ids and the rest of the mass (1 if exact,
    else a little below) spread over the other tokens, each below the smallest tied probability
    (or, after _REST, above the largest: then the ties take the highest token ids)."""
    above = groups[0][0] == _REST
    ties = groups[1:] if above else groups
    if above:
        n_ties = sum(count for count, _ in ties)
        ids = torch.cat([torch.arange(vocab - n_ties, vocab, device=device),
                         torch.randperm(vocab - n_ties, device=device)])
    else:
        ids = torch.randperm(vocab, device=device)
    units = torch.zeros(vocab, dtype=torch.int64, device=device)
    pos = 0
    for count, value in ties:
        units[ids[pos:pos + count]] = value
        pos += count
    head = sum(count * value for count, value in ties)
    total = 2 ** 24 if exact else 2 ** 24 - int(torch.randint(1, 2 ** 20, (1,), device=device))
    rest = ids[pos:]
    n = rest.numel()
    low, cap = (ties[0][1] + 1, total) if above else (0, ties[-1][1] - 1)
    if n == 0 or head + n * low > total or n * cap < total - head:
        raise ValueError("tie row does not fit the vocabulary")
    w = torch.exp(2.0 * torch.randn(n, dtype=torch.float64, device=device))
    bg = low + torch.floor(w / w.sum() * (total - head - n * low)).to(torch.int64)
    bg = bg.clamp(max=cap)
    room = cap - bg  # the remainder fills the rooms below cap in order: the sum is exactly total
    fill = torch.minimum(room, (total - head - bg.sum() - (room.cumsum(0) - room)).clamp(min=0))
    units[rest] = bg + fill
    return (units.to(torch.float64) * _UNIT).to(torch.float32)  # exact: units <= 2^24


def _set_tie_rows(probs, top_k, top_p, uniform, first: int) -> None:
    batch, vocab = probs.shape
    if first + len(_TIE_ROWS) > batch:
        raise ValueError(f"tie_rows needs batch >= {first + len(_TIE_ROWS)}")
    for i, (groups, k, p, u, exact) in enumerate(_TIE_ROWS):
        row = first + i
        if groups is not None:
            probs[row] = _tie_probs(vocab, groups, exact, probs.device)
        top_k[row] = k if k > 0 else vocab
        top_p[row] = p
        if u is not None:
            uniform[row] = u

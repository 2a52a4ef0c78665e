"""How each aten operation moves lineage: views transform maps, gathers select rows, elementwise
ops merge, reductions hide the reduced dims, writes become overlays. An operation without a rule
here makes every output element depend on every input element (the whole-tensor count) and is
named in the audit."""

from __future__ import annotations

import torch

from . import zeros
from .lineage import Lineage, Tracker, align, detach, merge, transform
from .maps import MAX_TABLE, SENTINEL, IndexMap, TooLarge

aten = torch.ops.aten

# Operations whose output does not depend on the values of their tensor arguments.
NO_DEPENDENCE = {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full",
    "scalar_tensor", "arange", "linspace", "logspace", "eye", "rand", "rand_like", "randn",
    "randn_like", "randint", "randint_like", "randperm", "normal", "uniform", "bernoulli",
    "multinomial", "_efficientzerotensor", "sym_size", "sym_stride", "sym_numel", "is_nonzero",
}
COPIES = {"clone", "_to_copy", "contiguous", "lift_fresh_copy", "alias_copy", "detach_copy",
          "_copy_from_and_resize", "_copy_from", "clone_", "to"}
IDENTITY_VIEWS = {"alias", "detach", "lift_fresh", "lift", "_lift_fresh", "view_as",
                  "_conj", "conj", "resolve_conj", "resolve_neg", "_neg_view"}
REDUCTIONS = {"sum", "mean", "amax", "amin", "max", "min", "prod", "var", "std", "var_mean",
              "std_mean", "linalg_vector_norm", "norm", "logsumexp", "any", "all", "argmax",
              "argmin", "count_nonzero", "aminmax", "median", "nanmedian", "kthvalue", "mode",
              "nansum", "nanmean", "_softmax_backward_data"}
ALONG_DIM = {"_softmax", "_safe_softmax", "_log_softmax", "softmax", "log_softmax", "cumsum",
             "cumprod", "logcumsumexp", "cummax", "cummin", "sort", "topk", "argsort", "msort"}
# ops whose output positions depend on input values: the output depends on all of the input
DATA_DEPENDENT = {"nonzero", "nonzero_static", "argwhere", "unique_consecutive", "_unique2",
                  "_unique", "unique_dim", "bincount", "histc", "repeat_interleave",
                  "searchsorted", "bucketize"}
MATMULS = {"mm", "bmm", "addmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "vdot",
           "_scaled_mm", "_int_mm", "_grouped_mm", "_scaled_grouped_mm", "addr", "outer"}
ATTENTION = {"_scaled_dot_product_flash_attention_for_cpu",
             "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
             "_scaled_dot_product_cudnn_attention"}


def bind(func, args, kwargs) -> dict:
    """Arguments by schema name, defaults filled in."""
    bound = {}
    for i, a in enumerate(func._schema.arguments):
        if i < len(args) and not a.kwarg_only:
            bound[a.name] = args[i]
        elif a.name in kwargs:
            bound[a.name] = kwargs[a.name]
        elif a.has_default_value():
            bound[a.name] = a.default_value
        else:
            bound[a.name] = None
    return bound


def outputs_of(out) -> list:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, list | tuple):
        return [o for o in out if isinstance(o, torch.Tensor)]
    return []


def tensors_in(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [t for v in value for t in tensors_in(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_in(v)]
    return []


def apply(tr: Tracker, func, args, kwargs, out) -> None:
    """Record what the outputs of one aten call depend on, and what it wrote."""
    name = func._overloadpacket.__name__
    if name in NO_DEPENDENCE:
        return
    if name == "_local_scalar_dense":
        tr.commit(tr.get(args[0]))
        return
    rule = RULES.get(f"{name}.{func._overloadname}") or RULES.get(name)
    try:
        if rule is not None:
            rule(tr, func, bind(func, args, kwargs), out)
        elif _is_pointwise(func):
            _pointwise(tr, func, bind(func, args, kwargs), out)
        else:
            _fallback(tr, func, args, kwargs, out)
    except (TooLarge, ValueError, RuntimeError, IndexError, NotImplementedError):
        _fallback(tr, func, args, kwargs, out)
    try:
        zeros.propagate(tr.consts, func, bind(func, args, kwargs), out)
    except (ValueError, RuntimeError, IndexError, TypeError):
        pass  # no known constants: every element counts


# elementwise ops torch does not tag pointwise
EXTRA_POINTWISE = {"floor_divide", "floor_divide_", "true_divide", "true_divide_"}


def _is_pointwise(func) -> bool:
    if torch.Tag.pointwise in func.tags or func._overloadpacket.__name__ in EXTRA_POINTWISE:
        return True
    base = func._overloadpacket.__name__.rstrip("_")
    packet = getattr(aten, base, None)
    if packet is None:
        return False
    overload = getattr(packet, func._overloadname, None) if func._overloadname else getattr(
        packet, "default", None)
    return overload is not None and torch.Tag.pointwise in overload.tags


def _mutated(func, bound: dict) -> list[torch.Tensor]:
    names = [a.name for a in func._schema.arguments
             if a.alias_info is not None and a.alias_info.is_write]
    return [t for n in names for t in tensors_in(bound.get(n))]


def _fallback(tr: Tracker, func, args, kwargs, out) -> None:
    """Every output element depends on every element of every tensor argument."""
    name = func._overloadpacket.__name__
    if name not in DATA_DEPENDENT and tensors_in((args, kwargs)) and outputs_of(out):
        tr.conservative.add(f"aten.{name}")
    bound = bind(func, args, kwargs)
    mutated = _mutated(func, bound)
    inputs = [t for t in tensors_in((args, kwargs)) if not any(t is m for m in mutated)]
    inputs += [m for m in mutated if func._overloadpacket.__name__.endswith("_")]
    lineages = [tr.get(t) for t in inputs]
    for o in outputs_of(out):
        if any(o is m for m in mutated):
            continue
        tr.set(o, merge(*(detach(lin, o.shape) for lin in lineages)))
    for m in mutated:
        tr.write(m, tr.storage_map(m), merge(*(detach(lin, m.shape) for lin in lineages)))


def _pointwise(tr: Tracker, func, bound: dict, out) -> None:
    mutated = _mutated(func, bound)
    outs = outputs_of(out)
    target = outs[0] if outs else mutated[0]
    shape = tuple(target.shape)
    operands = [t for n, v in bound.items() for t in tensors_in(v)
                if not (n == "out" or any(t is m for m in mutated)
                        and not func._overloadpacket.__name__.endswith("_"))]
    lineage = merge(*(align(tr.get(t), shape) if _broadcastable(t.shape, shape) else
                      detach(tr.get(t), shape) for t in operands))
    lineage = transform(lineage, lambda m: m, copy=False)
    for m in mutated:
        tr.write(m, tr.storage_map(m), lineage)
    for o in outs:
        if not any(o is m for m in mutated):
            tr.set(o, lineage)


def _masked_fill(tr: Tracker, func, b: dict, out) -> None:
    """out = value where mask, else self: self's elements under the mask are never read (and
    their computation is dead)."""
    self, mask, value = b["self"], b["mask"], b["value"]
    shape = tuple(out.shape)
    kept = _penalized(align(tr.get(self), shape), mask, shape)
    parts = [kept, align(tr.get(mask), shape) if _broadcastable(mask.shape, shape) else
             detach(tr.get(mask), shape)]
    if isinstance(value, torch.Tensor):
        parts.append(detach(tr.get(value), shape))
    tr.set(out, merge(*parts))


def _where(tr: Tracker, func, b: dict, out) -> None:
    """where(cond, a, b): a is read where cond holds, b elsewhere."""
    cond, x, y = b["condition"], b["self"], b["other"]
    shape = tuple(out.shape)
    parts = [align(tr.get(cond), shape) if _broadcastable(cond.shape, shape) else
             detach(tr.get(cond), shape)]
    for value, skip in ((x, ~cond if cond.device.type != "meta" else None),
                        (y, cond if cond.device.type != "meta" else None)):
        if isinstance(value, torch.Tensor):
            lineage = align(tr.get(value), shape) if _broadcastable(value.shape, shape) else \
                detach(tr.get(value), shape)
            parts.append(_penalized(lineage, skip, shape) if skip is not None else lineage)
    tr.set(out, merge(*parts))


def _penalized(lineage: Lineage, mask, shape) -> Lineage:
    """The deps with the places where `mask` holds removed (a sentinel table)."""
    if not isinstance(mask, torch.Tensor) or mask.device.type == "meta" or \
            mask.numel() > MAX_TABLE or not _broadcastable(mask.shape, shape):
        return transform(lineage, lambda m: m, copy=False)
    aligned = mask.to(torch.bool).reshape((1,) * (len(shape) - mask.dim()) + tuple(mask.shape))
    penalty = torch.where(aligned, SENTINEL, 0).to(torch.long)
    out = []
    for dep in lineage:
        if dep.runs is not None:
            out.append(dep)
            continue
        m = dep.map
        table = penalty.reshape(tuple(penalty.shape) + (1,) * (len(m.shape) - m.nvis))
        out.append(dep.with_map(m._replace(tables=m.tables + (table,)), copy=False))
    return tuple(out)


def _broadcastable(shape, target) -> bool:
    if len(shape) > len(target):
        return False
    return all(a == b or a == 1 for a, b in zip(reversed(shape), reversed(target), strict=False))


# ---- views and copies -------------------------------------------------------------------------


def _view_rule(fn):
    def rule(tr: Tracker, func, b: dict, out) -> None:
        # a view shares its base's storage: writes into it are found through the storage
        src = b.get("self", b.get("input"))
        lineage = tr.own(src)
        if isinstance(out, list | tuple):
            for i, o in enumerate(out):
                tr.set(o, transform(lineage, lambda m, i=i, o=o: fn(m, b, o, i)))
        else:
            tr.set(out, transform(lineage, lambda m: fn(m, b, out, 0)))
    return rule


def _dims(value, rank: int) -> list[int]:
    if value is None:
        return list(range(rank))
    if isinstance(value, int):
        return [value % rank] if rank else []
    dims = [int(v) % rank for v in value] if rank else []
    return dims or list(range(rank))


def _split(m: IndexMap, b: dict, o, i: int) -> IndexMap:
    dim = b.get("dim", 0) % m.nvis
    sizes = b.get("split_sizes") or b.get("split_size_or_sections")
    if sizes is None or isinstance(sizes, int):
        size = b.get("split_size", sizes)
        start = i * size
    else:
        start = sum(sizes[:i])
    return m.slice(dim, start, start + o.shape[dim])


def _chunk(m: IndexMap, b: dict, o, i: int) -> IndexMap:
    dim = b.get("dim", 0) % m.nvis
    step = -(-m.shape[dim] // b["chunks"])  # torch.chunk: ceil(size / chunks) per piece
    return m.slice(dim, i * step, i * step + o.shape[dim])


def _repeat(m: IndexMap, b: dict, o, i: int) -> IndexMap:
    reps = [int(r) for r in b["repeats"]]
    for _ in range(len(reps) - m.nvis):
        m = m.insert(0)
    for d in range(len(reps)):
        m = m.insert(2 * d, reps[d])
    return m.reshape(list(o.shape))


VIEW_FNS = {
    "view": lambda m, b, o, i: m.reshape(list(o.shape)),
    "_unsafe_view": lambda m, b, o, i: m.reshape(list(o.shape)),
    "reshape": lambda m, b, o, i: m.reshape(list(o.shape)),
    "_reshape_alias": lambda m, b, o, i: m.reshape(list(o.shape)),
    "flatten": lambda m, b, o, i: m.reshape(list(o.shape)),
    "unflatten": lambda m, b, o, i: m.reshape(list(o.shape)),
    "permute": lambda m, b, o, i: m.permute(list(b["dims"])),
    "transpose": lambda m, b, o, i: m.transpose(b["dim0"], b["dim1"]),
    "t": lambda m, b, o, i: m.transpose(0, 1) if m.nvis == 2 else m,
    "numpy_T": lambda m, b, o, i: m.permute(list(range(m.nvis))[::-1]),
    "unsqueeze": lambda m, b, o, i: m.unsqueeze(b["dim"]),
    "squeeze": lambda m, b, o, i: m.squeeze(None if b.get("dim") is None else (
        [b["dim"]] if isinstance(b["dim"], int) else list(b["dim"]))),
    "select": lambda m, b, o, i: m.select(b["dim"], b["index"]),
    "slice": lambda m, b, o, i: m.slice(b["dim"], b["start"], b["end"], b["step"]),
    "narrow": lambda m, b, o, i: m.slice(b["dim"], b["start"], int(b["start"]) + int(b[
        "length"])),
    "expand": lambda m, b, o, i: m.expand(list(o.shape)),
    "split": _split,
    "split_with_sizes": _split,
    "chunk": _chunk,
    "unbind": lambda m, b, o, i: m.select(b.get("dim", 0), i),
    "repeat": _repeat,
}


def _copy(tr: Tracker, func, b: dict, out) -> None:
    src = b.get("self", b.get("src"))
    same = src.dtype == out.dtype
    lineage = tr.get(src)
    if tuple(src.shape) != tuple(out.shape):
        lineage = align(lineage, out.shape)
    tr.set(out, transform(lineage, lambda m: m, copy=same))


def _functional_copy(tr: Tracker, func, b: dict, out) -> None:
    src = b["src"]
    tr.set(out, transform(_fit(tr.get(src), src, out.shape), lambda m: m,
                          copy=src.dtype == out.dtype))


def _same_place(tr: Tracker, func, b: dict, out) -> None:
    """tril / triu: each element is the input's element in the same place, or a constant (and
    the input's elements there are never read)."""
    src = b["self"]
    rows, cols = src.shape[-2:]
    if rows * cols > MAX_TABLE:
        tr.set(out, transform(tr.get(src), lambda m: m, copy=False))
        return
    keep = torch.ones(rows, cols, dtype=torch.bool)
    diagonal = b.get("diagonal", 0)
    keep = keep.tril(diagonal) if func._overloadpacket.__name__ == "tril" else keep.triu(diagonal)
    tr.set(out, _penalized(tr.get(src), ~keep, tuple(out.shape)))


def _identity(tr: Tracker, func, b: dict, out) -> None:
    src = b.get("self", b.get("input"))
    tr.set(out, tr.own(src))


def _dtype_view(tr: Tracker, func, b: dict, out) -> None:
    src = b["self"]
    if src.element_size() == out.element_size():
        tr.set(out, transform(tr.own(src), lambda m: m, copy=False))
    else:
        tr.set(out, detach(tr.get(src), out.shape))


def _as_strided(tr: Tracker, func, b: dict, out) -> None:
    """A new view of the storage: exact when the tensor is a view of an input."""
    src = b["self"]
    own = tr.own(src)
    if len(own) == 1 and own[0].copy and own[0].runs is None and own[0].offsets is None and \
            _is_storage_view(tr, src, own[0]):
        dep = own[0]
        offset = b.get("storage_offset")
        offset = src.storage_offset() if offset is None else int(offset)
        tr.set(out, (dep.with_map(IndexMap.strided(b["size"], b["stride"], offset)),))
        return
    tr.conservative.add("aten.as_strided")
    tr.set(out, detach(tr.get(src), out.shape))


def _is_storage_view(tr: Tracker, t: torch.Tensor, dep) -> bool:
    source = tr.sources[dep.src]
    geometry = tr.storage_map(t)
    return (source.dtype == t.dtype and dep.map.offset == geometry.offset
            and set(dep.map.affine) == set(geometry.affine) and not dep.map.tables
            and dep.map.shape == geometry.shape)


def _inplace_view(fn):
    def rule(tr: Tracker, func, b: dict, out) -> None:
        self = b["self"]
        tr.lineage[self] = transform(tr.own(self), lambda m: fn(m, b, self, 0))
    return rule


# ---- reductions -------------------------------------------------------------------------------


def _reduce(tr: Tracker, func, b: dict, out) -> None:
    src = b.get("self", b.get("input"))
    rank = src.dim()
    name = func._overloadpacket.__name__
    dim = b.get("dim")
    if name in ("amax", "amin", "logsumexp") and dim in ([], ()):
        dim = None
    dims = _dims(dim, rank)
    keep = b.get("keepdim", False)
    lineage = tr.get(src)
    for d in sorted(dims, reverse=True):
        lineage = transform(lineage, lambda m, d=d: m.hide(d, keep=bool(keep)), copy=False)
    for o in outputs_of(out):
        if o.dim() == (rank if keep else rank - len(dims)):
            tr.set(o, lineage)
        else:
            tr.set(o, detach(tr.get(src), o.shape))


def _along(tr: Tracker, func, b: dict, out) -> None:
    src = b.get("self", b.get("input"))
    rank = src.dim()
    dim = b.get("dim", -1)
    dim = (-1 if dim is None else int(dim)) % rank if rank else 0
    lineage = tr.get(src)
    for o in outputs_of(out):
        if o.dim() != rank or not rank:
            tr.set(o, detach(lineage, o.shape))
            continue
        size = o.shape[dim]
        tr.set(o, transform(lineage, lambda m, size=size: m.hide(dim).insert(dim, size),
                            copy=False))


def _rows(tr: Tracker, func, b: dict, out) -> None:
    """Norms over the trailing `normalized_shape` dims: each output row reads its input row."""
    src = b["input"]
    rank = src.dim()
    count = len(b["normalized_shape"])
    first = [o for o in outputs_of(out)][0]
    lineage = tr.get(src)
    for d in range(rank - 1, rank - count - 1, -1):
        lineage = transform(lineage, lambda m, d=d: m.hide(d, keep="same"), copy=False)
    extra = [tr.get(t) for t in (b.get("weight"), b.get("bias")) if isinstance(t, torch.Tensor)]
    tr.set(first, merge(lineage, *(align(e, first.shape) for e in extra)))
    for o in outputs_of(out)[1:]:
        stats = tr.get(src)
        for d in range(rank - 1, rank - count - 1, -1):
            stats = transform(stats, lambda m, d=d: m.hide(d, keep=True), copy=False)
        tr.set(o, stats if o.dim() == rank else detach(tr.get(src), o.shape))


# ---- matmuls and attention ---------------------------------------------------------------------


def _matmul(tr: Tracker, func, b: dict, out) -> None:
    name = func._overloadpacket.__name__
    o = outputs_of(out)[0]
    if name in ("mm", "addmm", "_int_mm", "_scaled_mm"):
        a, w = (b["mat1"], b["mat2"]) if "mat1" in b else (b["self"], b["mat2"])
        la = transform(tr.get(a), lambda m: m.insert(1, w.shape[1]).hide(2), copy=False)
        lw = transform(tr.get(w), lambda m: m.insert(0, a.shape[0]).hide(1), copy=False)
    elif name in ("bmm", "baddbmm"):
        a, w = (b["batch1"], b["batch2"]) if "batch1" in b else (b["self"], b["mat2"])
        la = transform(tr.get(a), lambda m: m.insert(2, w.shape[2]).hide(3), copy=False)
        lw = transform(tr.get(w), lambda m: m.insert(1, a.shape[1]).hide(2), copy=False)
    else:
        _fallback(tr, func, (), b, out)
        return
    rest = [tr.get(t) for k, t in b.items() if isinstance(t, torch.Tensor)
            and t is not a and t is not w]
    extra = [align(r, o.shape) if _broadcastable(t.shape, o.shape) else detach(r, o.shape)
             for r, t in zip(rest, [t for k, t in b.items() if isinstance(t, torch.Tensor)
                                    and t is not a and t is not w], strict=True)]
    tr.set(o, merge(la, lw, *extra))


def attention_lineage(tr: Tracker, q, k, v, mask, out_shape) -> Lineage:
    """out[..., h, l, :] reads q[..., h, l, :], and k, v of every key of its kv head."""
    rank = q.dim()
    heads, length, ev = out_shape[-3] if rank >= 3 else 1, out_shape[-2], out_shape[-1]

    def kv_heads(m: IndexMap, kv_heads_n: int) -> IndexMap:
        if rank < 3 or kv_heads_n == heads or kv_heads_n == 1:
            return m
        group = heads // kv_heads_n
        return m.index_select(rank - 3, torch.arange(heads) // group)

    lq = transform(tr.get(q), lambda m: m.hide(rank - 1).insert(rank - 1, ev), copy=False)
    hk = k.shape[-3] if rank >= 3 else 1
    lk = transform(tr.get(k), lambda m: kv_heads(m.hide(rank - 1).hide(rank - 2).insert(
        rank - 2, length).insert(rank - 1, ev), hk), copy=False)
    lv = transform(tr.get(v), lambda m: kv_heads(m.hide(rank - 2).insert(rank - 2, length),
                                                 hk), copy=False)
    parts = [align(lq, out_shape), align(lk, out_shape), align(lv, out_shape)]
    if isinstance(mask, torch.Tensor):
        parts.append(detach(tr.get(mask), out_shape))
    return merge(*parts)


def _attention(tr: Tracker, func, b: dict, out) -> None:
    outs = outputs_of(out)
    mask = b.get("attn_mask", b.get("attn_bias"))
    tr.set(outs[0], attention_lineage(tr, b["query"], b["key"], b["value"], mask,
                                      tuple(outs[0].shape)))
    for o in outs[1:]:
        tr.set(o, detach(merge(tr.get(b["query"]), tr.get(b["key"])), o.shape))


def _convolution(tr: Tracker, func, b: dict, out) -> None:
    """out[n, co, ...] reads all of x[n] (every channel and position: a conservative window)
    and all of weight[co]; bias[co]."""
    o = outputs_of(out)[0]
    x, w, bias = b["input"], b["weight"], b.get("bias")
    if b.get("transposed"):
        _fallback(tr, func, (), b, out)
        return
    spatial = list(o.shape[2:])

    def keep_first(m: IndexMap) -> IndexMap:
        for d in range(m.nvis - 1, 0, -1):
            m = m.hide(d)
        return m

    def add_spatial(m: IndexMap) -> IndexMap:
        for k, n in enumerate(spatial):
            m = m.insert(2 + k, n)
        return m

    lx = transform(tr.get(x), lambda m: add_spatial(keep_first(m).insert(1, o.shape[1])),
                   copy=False)
    lw = transform(tr.get(w), lambda m: add_spatial(keep_first(m).insert(0, o.shape[0])),
                   copy=False)
    parts = [lx, lw]
    if isinstance(bias, torch.Tensor):
        parts.append(transform(tr.get(bias), lambda m: add_spatial(m.insert(0, o.shape[0])),
                               copy=False))
    tr.set(o, merge(*parts))


# ---- reads through index tensors ---------------------------------------------------------------


def positions(indices, shape) -> list | None:
    """Index tensors of advanced indexing with boolean masks turned into positions (None when
    a mask's values are not known, as on the meta device)."""
    result: list = []
    for ix in indices:
        if ix is None:
            result.append(None)
        elif ix.dtype in (torch.bool, torch.uint8):
            if ix.device.type == "meta":
                return None
            result.extend(list(ix.nonzero().unbind(1)))
        elif ix.device.type == "meta":
            return None
        else:
            result.append(ix)
    return result + [None] * (len(shape) - len(result))


def _index_deps(tr: Tracker, indices, shape) -> Lineage:
    return merge(*(detach(tr.get(t), shape) for t in indices if isinstance(t, torch.Tensor)))


def _index(tr: Tracker, func, b: dict, out) -> None:
    src = b["self"]
    where = positions(b["indices"], src.shape)
    deps = _index_deps(tr, b["indices"], out.shape)
    if where is None:
        tr.set(out, merge(detach(tr.get(src), out.shape), deps))
        return
    tr.set(out, merge(transform(tr.get(src), lambda m: m.index(where)), deps))


def _index_select(tr: Tracker, func, b: dict, out) -> None:
    src, index = b["self"], b["index"]
    deps = detach(tr.get(index), out.shape)
    if index.device.type == "meta":
        tr.set(out, merge(detach(tr.get(src), out.shape), deps))
        return
    dim = b["dim"]
    tr.set(out, merge(transform(tr.get(src), lambda m: m.index_select(dim, index)), deps))


def _gather(tr: Tracker, func, b: dict, out) -> None:
    src, index = b["self"], b["index"]
    deps = detach(tr.get(index), out.shape)
    if index.device.type == "meta":
        tr.set(out, merge(detach(tr.get(src), out.shape), deps))
        return
    tr.set(out, merge(transform(tr.get(src), lambda m: m.gather(b["dim"], index)), deps))


def _embedding(tr: Tracker, func, b: dict, out) -> None:
    weight, ids = b["weight"], b["indices"]
    deps = detach(tr.get(ids), out.shape)
    if ids.device.type == "meta":
        tr.set(out, merge(detach(tr.get(weight), out.shape), deps))
        return
    flat = ids.reshape(-1)
    tr.set(out, merge(transform(tr.get(weight), lambda m: m.index_select(0, flat).reshape(
        list(out.shape))), deps))


def _masked_select(tr: Tracker, func, b: dict, out) -> None:
    src, mask = b["self"], b["mask"]
    shape = torch.broadcast_shapes(src.shape, mask.shape)
    deps = detach(tr.get(mask), out.shape)
    if mask.device.type == "meta":
        tr.set(out, merge(detach(tr.get(src), out.shape), deps))
        return
    where = list(mask.expand(shape).nonzero().unbind(1))
    tr.set(out, merge(transform(tr.get(src), lambda m: m.expand(list(shape)).index(where)),
                      deps))


# ---- writes -----------------------------------------------------------------------------------


def _write_indexed(tr: Tracker, target: torch.Tensor, region_fn, values: Lineage,
                   accumulate: bool, extra: Lineage) -> None:
    """Record a write of `values` (over the written grid) into the positions region_fn picks
    out of target (None: positions unknown, the whole target counts as written)."""
    try:
        if region_fn is None:
            raise ValueError("positions unknown")
        region = region_fn(tr.storage_map(target))
    except (TooLarge, ValueError, RuntimeError, IndexError):
        tr.conservative.add("(indexed write counted whole)")
        tr.write(target, tr.storage_map(target), merge(detach(values, target.shape),
                                                        detach(extra, target.shape)))
        return
    grid = region.shape[:region.nvis]
    parts = [values, detach(extra, grid)]
    if accumulate:
        parts.append(transform(tr.get(target), region_fn, copy=False))
    tr.write(target, region, merge(*parts))


def _fit(lineage: Lineage, t: torch.Tensor, grid) -> Lineage:
    grid = tuple(int(n) for n in grid)
    if _broadcastable(t.shape, grid):
        return align(lineage, grid)
    return detach(lineage, grid)


def _index_put(tr: Tracker, func, b: dict, out) -> None:
    self = b["self"]
    target = self
    if not func._overloadpacket.__name__.endswith("_"):
        target = out
        tr.set(out, tr.get(self))
    where = positions(b["indices"], self.shape)
    values, extra = b["values"], _index_deps(tr, b["indices"], ())
    if where is None:
        _write_indexed(tr, target, None, tr.get(values), False, extra)
        return
    grid = IndexMap.strided(self.shape, self.stride()).index(where).shape
    _write_indexed(tr, target, lambda m: m.index(where), _fit(tr.get(values), values, grid),
                   bool(b.get("accumulate")), extra)


def _index_dim_write(tr: Tracker, func, b: dict, out) -> None:
    """index_copy_ / index_add_ / index_fill_ and their functional forms."""
    self, index = b["self"], b["index"]
    target = self
    if not func._overloadpacket.__name__.endswith("_"):
        target = out
        tr.set(out, tr.get(self))
    dim = b["dim"]
    source = b.get("source", b.get("value"))
    accumulate = "add" in func._overloadpacket.__name__
    extra = detach(tr.get(index), ())
    if index.device.type == "meta":
        values = detach(tr.get(source), ()) if isinstance(source, torch.Tensor) else ()
        _write_indexed(tr, target, None, values, False, extra)
        return
    grid = IndexMap.strided(self.shape, self.stride()).index_select(dim, index).shape
    values = (_fit(tr.get(source), source, grid) if isinstance(source, torch.Tensor)
              and source.dim() == self.dim() else detach(tr.get(source), grid)
              if isinstance(source, torch.Tensor) else ())
    _write_indexed(tr, target, lambda m: m.index_select(dim, index), values, accumulate, extra)


def _scatter(tr: Tracker, func, b: dict, out) -> None:
    self, index = b["self"], b["index"]
    target = self
    if not func._overloadpacket.__name__.endswith("_"):
        target = out
        tr.set(out, tr.get(self))
    dim = b["dim"]
    src = b.get("src", b.get("value"))
    accumulate = func._overloadpacket.__name__.rstrip("_") != "scatter" or b.get(
        "reduce") is not None
    extra = detach(tr.get(index), ())
    values: Lineage = ()
    if isinstance(src, torch.Tensor):
        if src.dim() == index.dim() and index.device.type != "meta":
            values = transform(tr.get(src), lambda m: _slice_to(m, index.shape))
        else:
            values = detach(tr.get(src), index.shape)
    if index.device.type == "meta":
        _write_indexed(tr, target, None, values, False, extra)
        return
    _write_indexed(tr, target, lambda m: m.gather(dim, index), values, accumulate, extra)


def _slice_to(m: IndexMap, shape) -> IndexMap:
    for d, n in enumerate(shape):
        if m.shape[d] != n:
            m = m.slice(d, 0, n)
    return m


def _masked_write(tr: Tracker, func, b: dict, out) -> None:
    """masked_fill_ / masked_scatter_ (and masked_scatter): the positions where mask is set."""
    self, mask = b["self"], b["mask"]
    target = self
    if not func._overloadpacket.__name__.endswith("_"):
        target = out
        tr.set(out, tr.get(self))
    value = b.get("value", b.get("source"))
    extra = detach(tr.get(mask), ())
    values = detach(tr.get(value), ()) if isinstance(value, torch.Tensor) else ()
    if mask.device.type == "meta":
        _write_indexed(tr, target, None, values, False, extra)
        return
    where = list(mask.expand(self.shape).nonzero().unbind(1))
    grid = (where[0].numel(),) if where else ()
    _write_indexed(tr, target, lambda m: m.index(where), detach(values, grid), False, extra)
    if target is self:  # the filled places no longer depend on what was there
        tr.lineage[self] = _penalized(tr.own(self), mask, tuple(self.shape))


def _copy_(tr: Tracker, func, b: dict, out) -> None:
    self, src = b["self"], b["src"]
    values = _fit(tr.get(src), src, self.shape)
    if src.dtype != self.dtype:
        values = transform(values, lambda m: m, copy=False)
    tr.write(self, tr.storage_map(self), values)


def _fill(tr: Tracker, func, b: dict, out) -> None:
    self = b["self"]
    value = b.get("value")
    values = detach(tr.get(value), self.shape) if isinstance(value, torch.Tensor) else ()
    tr.write(self, tr.storage_map(self), values)


def _slice_scatter(tr: Tracker, func, b: dict, out) -> None:
    self, src = b["input"] if "input" in b else b["self"], b["src"]
    tr.set(out, tr.get(self))
    name = func._overloadpacket.__name__
    if name == "slice_scatter":
        def fn(m):
            return m.slice(b["dim"], b["start"], b["end"], b["step"])
    elif name == "select_scatter":
        def fn(m):
            return m.select(b["dim"], b["index"])
    else:
        _fallback(tr, func, (), b, out)
        return
    grid = fn(IndexMap.strided(self.shape, self.stride())).shape
    _write_indexed(tr, out, fn, _fit(tr.get(src), src, grid), False, ())


def _cat(tr: Tracker, func, b: dict, out) -> None:
    tensors = [t for t in b["tensors"] if t.numel() or t.dim() > 1]
    name = func._overloadpacket.__name__
    dim = b.get("dim", 0)
    parts = []
    for t in tensors:
        lineage = tr.get(t)
        if name == "stack":
            d = dim % (t.dim() + 1)
            lineage = transform(lineage, lambda m, d=d: m.unsqueeze(d))
        else:
            d = dim % t.dim()
        size = out.shape[d]
        parts.append(transform(lineage, lambda m, d=d, size=size: m.hide(d).insert(d, size),
                               copy=False))
    tr.set(out, merge(*parts))


def _pad(tr: Tracker, func, b: dict, out) -> None:
    """constant_pad_nd: the input's elements keep their place shifted by the left pads."""
    src, pad = b["self"], list(b["pad"])
    if any(p < 0 for p in pad):
        _fallback(tr, func, (), b, out)
        return
    lineage = tr.get(src)
    rank = src.dim()
    for k in range(len(pad) // 2):
        d = rank - 1 - k
        left, right = pad[2 * k], pad[2 * k + 1]
        if left or right:
            size = src.shape[d]
            lineage = transform(lineage, lambda m, d=d, left=left, size=size, right=right: _shift(
                m, d, left, size + left + right), copy=False)
    tr.set(out, lineage)


def _shift(m: IndexMap, d: int, left: int, size: int) -> IndexMap:
    """Coordinates c >= left along d read c - left; the padding reads nothing the kernel must
    load (its positions map below zero, which counting drops)."""
    table = torch.arange(size) - left
    valid = (table >= 0) & (table < m.shape[d])
    index = torch.where(valid, table, torch.zeros_like(table))
    shifted = m.index_select(d, index)
    shape = [1] * len(shifted.shape)
    shape[d] = size
    penalty = torch.where(valid, 0, SENTINEL).reshape(shape)
    return shifted._replace(tables=shifted.tables + (penalty,))


RULES: dict = {name: _view_rule(fn) for name, fn in VIEW_FNS.items()}
RULES.update({name: _copy for name in COPIES})
RULES.update({name: _identity for name in IDENTITY_VIEWS})
RULES.update({name: _reduce for name in REDUCTIONS})
RULES.update({name: _along for name in ALONG_DIM})
RULES.update({name: _matmul for name in MATMULS})
RULES.update({name: _attention for name in ATTENTION})
RULES.update({
    "native_layer_norm": _rows, "_fused_rms_norm": _rows, "rms_norm": _rows,
    "convolution": _convolution, "_convolution": _convolution,
    "index": _index, "_unsafe_index": _index, "index_select": _index_select,
    "gather": _gather, "embedding": _embedding, "masked_select": _masked_select,
    "index_put_": _index_put, "index_put": _index_put, "_index_put_impl_": _index_put,
    "_unsafe_index_put": _index_put,
    "index_copy_": _index_dim_write, "index_copy": _index_dim_write,
    "index_add_": _index_dim_write, "index_add": _index_dim_write,
    "index_fill_": _index_dim_write, "index_fill": _index_dim_write,
    "scatter_": _scatter, "scatter": _scatter, "scatter_add_": _scatter,
    "scatter_add": _scatter, "scatter_reduce_": _scatter, "scatter_reduce": _scatter,
    "masked_fill_": _masked_write, "masked_scatter_": _masked_write,
    "masked_scatter": _masked_write,
    "copy_": _copy_, "fill_": _fill, "zero_": _fill,
    "slice_scatter": _slice_scatter, "select_scatter": _slice_scatter,
    "cat": _cat, "stack": _cat, "constant_pad_nd": _pad,
    "as_strided": _as_strided, "view.dtype": _dtype_view,
    "unsqueeze_": _inplace_view(VIEW_FNS["unsqueeze"]),
    "squeeze_": _inplace_view(VIEW_FNS["squeeze"]),
    "transpose_": _inplace_view(VIEW_FNS["transpose"]),
    "t_": _inplace_view(VIEW_FNS["t"]),
    "copy": _functional_copy,
    "tril": _same_place, "triu": _same_place, "flip": None, "roll": None,
    "masked_fill": _masked_fill, "where": _where,
})
RULES = {k: v for k, v in RULES.items() if v is not None}

"""Index maps: which storage positions of a source the elements of a tensor come from.

An :class:`IndexMap` is a function from a grid of coordinates to storage positions,

    pos(c) = offset + sum(c[d] * stride for (d, stride) in affine) + sum(t[c] for t in tables)

where every table is a real int64 tensor of the grid's rank, broadcast over the dims it does not
depend on (size 1 there). The first ``nvis`` dims of the grid are the tensor's own dims; the rest
are *hidden*: dims that a reduction, a matmul or an attention summed over, so every value of them
is part of the element's dependence. The set of positions a map reaches is what an ideal kernel
must read; :func:`intervals` turns it into sorted runs without enumerating contiguous rows.

Every tensor operation a reference applies (a view, a gather through an index tensor, a reshape)
has a counterpart here that returns a new map. A map that would need a table larger than
``MAX_TABLE`` elements raises :class:`TooLarge`; callers fall back to counting whole tensors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

MAX_TABLE = 1 << 25  # elements of one materialized table (256 MiB of int64)


class TooLarge(Exception):
    """A map would need a table too large to hold: count the whole tensor instead."""


@dataclass(frozen=True, eq=False)
class IndexMap:
    shape: tuple[int, ...]
    nvis: int
    offset: int = 0
    affine: tuple[tuple[int, int], ...] = ()
    tables: tuple[torch.Tensor, ...] = ()

    # ---- construction ---------------------------------------------------------------------

    @staticmethod
    def strided(sizes, strides, offset: int = 0) -> IndexMap:
        """The storage positions of a strided tensor (a view's own geometry)."""
        sizes, strides = tuple(int(s) for s in sizes), tuple(int(s) for s in strides)
        affine = tuple((d, st) for d, (n, st) in enumerate(zip(sizes, strides, strict=True))
                       if n > 1 and st != 0)
        return IndexMap(sizes, len(sizes), int(offset), affine)

    @property
    def hidden(self) -> tuple[int, ...]:
        return self.shape[self.nvis:]

    def depends_on(self, dim: int) -> bool:
        return any(d == dim for d, _ in self.affine) or any(t.shape[dim] > 1 for t in self.tables)

    def _replace(self, **changes) -> IndexMap:
        fields = {"shape": self.shape, "nvis": self.nvis, "offset": self.offset,
                  "affine": self.affine, "tables": self.tables}
        fields.update(changes)
        return IndexMap(**fields)

    # ---- dimension bookkeeping ------------------------------------------------------------

    def rearrange(self, order: list[int], nvis: int) -> IndexMap:
        """Grid dim i of the result is dim order[i] of this map (order is a permutation)."""
        new_of = {old: new for new, old in enumerate(order)}
        affine = tuple((new_of[d], st) for d, st in self.affine)
        tables = tuple(t.permute(order) for t in self.tables)
        return self._replace(shape=tuple(self.shape[d] for d in order), nvis=nvis, affine=affine,
                             tables=tables)

    def insert(self, pos: int, size: int = 1, visible: bool = True) -> IndexMap:
        """A new broadcast dim at grid position pos (no term depends on it)."""
        affine = tuple((d + 1 if d >= pos else d, st) for d, st in self.affine)
        tables = tuple(t.unsqueeze(pos) for t in self.tables)
        shape = self.shape[:pos] + (int(size),) + self.shape[pos:]
        return self._replace(shape=shape, nvis=self.nvis + (1 if visible else 0), affine=affine,
                             tables=tables)

    def drop(self, dim: int) -> IndexMap:
        """Remove a dim, taking coordinate 0 along it (the caller has folded the rest)."""
        affine = tuple((d - 1 if d > dim else d, st) for d, st in self.affine if d != dim)
        tables = tuple(t.select(dim, 0) for t in self.tables)
        shape = self.shape[:dim] + self.shape[dim + 1:]
        return self._replace(shape=shape, nvis=self.nvis - (1 if dim < self.nvis else 0),
                             affine=affine, tables=tables)

    def hide(self, dim: int, keep: bool = False) -> IndexMap:
        """Visible dim `dim` becomes hidden (summed over). With keep, a broadcast visible dim of
        size 1 stays in its place (keepdim=True); with keep='same', one of the same size (an
        operation along the dim that keeps its length, such as softmax or a sort)."""
        size = self.shape[dim]
        order = [d for d in range(self.nvis) if d != dim] + list(range(self.nvis, len(
            self.shape))) + [dim]
        moved = self.rearrange(order, self.nvis - 1).prune()
        if keep is False:
            return moved
        return moved.insert(dim, size if keep == "same" else 1)

    def prune(self) -> IndexMap:
        """Hidden dims no term depends on change no position: drop them (so the maps of a
        loop's iterations stay alike and merge)."""
        m = self
        for d in range(len(m.shape) - 1, m.nvis - 1, -1):
            if not m.depends_on(d):
                m = m.drop(d)
        return m

    def align(self, out_shape: tuple[int, ...]) -> IndexMap:
        """Broadcast the visible dims to out_shape (right-aligned, as elementwise ops do)."""
        m = self
        for _ in range(len(out_shape) - m.nvis):
            m = m.insert(0)
        shape = list(m.shape)
        affine = list(m.affine)
        for d, n in enumerate(out_shape):
            if shape[d] == n:
                continue
            if shape[d] != 1:
                raise ValueError(f"cannot broadcast {m.shape[:m.nvis]} to {out_shape}")
            shape[d] = int(n)
            affine = [(dd, st) for dd, st in affine if dd != d]  # coordinate was always 0
        return m._replace(shape=tuple(shape), affine=tuple(affine))

    # ---- views ----------------------------------------------------------------------------

    def permute(self, perm) -> IndexMap:
        perm = [p % self.nvis for p in perm] if self.nvis else []
        return self.rearrange(list(perm) + list(range(self.nvis, len(self.shape))), self.nvis)

    def transpose(self, a: int, b: int) -> IndexMap:
        perm = list(range(self.nvis))
        a, b = a % self.nvis, b % self.nvis
        perm[a], perm[b] = perm[b], perm[a]
        return self.permute(perm)

    def unsqueeze(self, dim: int) -> IndexMap:
        return self.insert(dim % (self.nvis + 1))

    def squeeze(self, dims=None) -> IndexMap:
        if dims is None:
            dims = [d for d in range(self.nvis) if self.shape[d] == 1]
        dims = sorted({d % self.nvis for d in dims if self.shape[d % self.nvis] == 1},
                      reverse=True)
        m = self
        for d in dims:
            m = m.drop(d)
        return m

    def select(self, dim: int, index: int) -> IndexMap:
        dim %= self.nvis
        index = int(index) % self.shape[dim] if self.shape[dim] else 0
        offset = self.offset + sum(st * index for d, st in self.affine if d == dim)
        tables = tuple(t.select(dim, index if t.shape[dim] > 1 else 0).unsqueeze(dim)
                       for t in self.tables)
        return self._replace(offset=offset, tables=tables).drop(dim)

    def slice(self, dim: int, start: int | None, stop: int | None, step: int = 1) -> IndexMap:
        dim %= self.nvis
        start, stop, step = slice(start, stop, step).indices(self.shape[dim])
        length = len(range(start, stop, step))
        offset = self.offset + sum(st * start for d, st in self.affine if d == dim)
        affine = tuple((d, st * step if d == dim else st) for d, st in self.affine)
        tables = tuple(t[(slice(None),) * dim + (slice(start, stop, step),)]
                       if t.shape[dim] > 1 else t for t in self.tables)
        shape = self.shape[:dim] + (length,) + self.shape[dim + 1:]
        return self._replace(shape=shape, offset=offset, affine=affine, tables=tables)

    def expand(self, sizes) -> IndexMap:
        sizes = [int(s) for s in sizes]
        m = self
        for _ in range(len(sizes) - m.nvis):
            m = m.insert(0)
        target = tuple(m.shape[d] if s == -1 else s for d, s in enumerate(sizes))
        return m.align(target)

    def reshape(self, sizes) -> IndexMap:
        """A view or reshape of the visible dims to `sizes` (-1 allowed)."""
        old = self.shape[:self.nvis]
        sizes = _infer_sizes([int(s) for s in sizes], math.prod(old))
        if tuple(sizes) == old:
            return self
        m = self
        groups = _reshape_groups(old, sizes)
        # rewrite the groups from the last one, so earlier dim numbers stay valid
        for (o0, o1), (n0, n1) in reversed(groups):
            m = m._regroup(o0, o1, sizes[n0:n1])
        return m

    def _regroup(self, o0: int, o1: int, new_sizes: list[int]) -> IndexMap:
        old_sizes = list(self.shape[o0:o1])
        if old_sizes == list(new_sizes):
            return self
        dims = range(o0, o1)
        affine_in = {d: st for d, st in self.affine if d in dims}
        tables_in = [t for t in self.tables if any(t.shape[d] > 1 for d in dims)]
        merged_stride = _merged_stride(old_sizes, [affine_in.get(d) for d in dims])
        rest_affine = [(d, st) for d, st in self.affine if d not in dims]
        rest_tables = [t for t in self.tables if not any(t.shape[d] > 1 for d in dims)]
        shift = len(new_sizes) - len(old_sizes)
        affine = [(d + shift if d >= o1 else d, st) for d, st in rest_affine]
        tables = [_regroup_table(t, o0, o1, new_sizes) for t in rest_tables]
        if not tables_in and merged_stride is not None:
            for k, n in enumerate(new_sizes):
                if n > 1 and merged_stride != 0:
                    affine.append((o0 + k, merged_stride * math.prod(new_sizes[k + 1:])))
        elif not tables_in and not affine_in:
            pass  # nothing depends on these dims
        else:
            joint = _materialize(self, list(dims), tables_in)
            tables.append(_regroup_table(joint, o0, o1, new_sizes, old_sizes))
        shape = self.shape[:o0] + tuple(new_sizes) + self.shape[o1:]
        return self._replace(shape=shape, nvis=self.nvis + shift, affine=tuple(affine),
                             tables=tuple(tables))

    # ---- reads through index tensors -------------------------------------------------------

    def index_select(self, dim: int, index: torch.Tensor) -> IndexMap:
        """Coordinate along `dim` replaced by the values of a 1-D index tensor."""
        dim %= self.nvis
        index = _as_long(index).reshape(-1)
        n = index.numel()
        table_of_dim = [(d, st) for d, st in self.affine if d == dim]
        affine = tuple((d, st) for d, st in self.affine if d != dim)
        tables = []
        for t in self.tables:
            tables.append(t.index_select(dim, index.to(t.device)) if t.shape[dim] > 1 else t)
        for _, st in table_of_dim:
            shape = [1] * len(self.shape)
            shape[dim] = n
            tables.append((index * st).reshape(shape))
        new_shape = self.shape[:dim] + (n,) + self.shape[dim + 1:]
        return self._replace(shape=new_shape, affine=affine, tables=tuple(tables))

    def index(self, indices: list[torch.Tensor | None]) -> IndexMap:
        """Advanced indexing `x[i0, i1, ...]` with long index tensors (None keeps a dim)."""
        indexed = [d for d, ix in enumerate(indices) if ix is not None]
        if not indexed:
            return self
        idx = [_as_long(indices[d]) for d in indexed]
        bshape = tuple(torch.broadcast_shapes(*(i.shape for i in idx)))
        adjacent = indexed == list(range(indexed[0], indexed[-1] + 1))
        kept = [d for d in range(self.nvis) if d not in indexed]
        where = sum(1 for d in kept if d < indexed[0]) if adjacent else 0
        layout = ([("K", d) for d in kept[:where]] + [("I", k) for k in range(len(bshape))]
                  + [("K", d) for d in kept[where:]])
        pos_of = {d: p for p, (kind, d) in enumerate(layout) if kind == "K"}
        touching = [t for t in self.tables if any(t.shape[d] > 1 for d in indexed)]
        joint = _materialize(self, indexed, touching)
        # torch lays out the result of indexing the joint table exactly as the tensor's
        full_index: list = [slice(None)] * len(self.shape)
        for d, i in zip(indexed, idx, strict=True):
            full_index[d] = torch.zeros_like(i) if joint.shape[d] == 1 else i.to(joint.device)
        picked = joint[tuple(full_index)]
        affine = tuple((pos_of[d] if d < self.nvis else d - self.nvis + len(layout), st)
                       for d, st in self.affine if d not in indexed)
        tables = []
        for t in self.tables:
            if any(t.shape[d] > 1 for d in indexed):
                continue
            moved = t
            for d in sorted(indexed, reverse=True):
                moved = moved.select(d, 0)
            for _ in bshape:
                moved = moved.unsqueeze(where)
            tables.append(moved)
        shape = tuple(bshape[k] if kind == "I" else self.shape[k] for kind, k in layout)
        return IndexMap(shape + self.hidden, len(layout), self.offset, affine,
                        tuple(tables) + (picked,))

    def gather(self, dim: int, index: torch.Tensor) -> IndexMap:
        """torch.gather: out[c] = x[c with c[dim] replaced by index[c]] over index's shape."""
        dim %= self.nvis
        index = _as_long(index)
        m = self
        for d in range(self.nvis):
            if d != dim and index.shape[d] != m.shape[d]:
                m = m.slice(d, 0, index.shape[d])
        joint = _materialize(m, [dim], [t for t in m.tables if t.shape[dim] > 1])
        if joint.shape[dim] > 1:
            target = [index.shape[d] if d < m.nvis else joint.shape[d]
                      for d in range(len(m.shape))]
            source = joint.expand(*(joint.shape[d] if d == dim else target[d]
                                    for d in range(len(m.shape))))
            where = index.reshape(tuple(index.shape) + (1,) * len(m.hidden)).expand(*target)
            if math.prod(target) > MAX_TABLE:
                raise TooLarge(f"gather of {math.prod(target)} positions")
            joint = torch.gather(source, dim, where.to(source.device))
        affine = tuple((d, st) for d, st in m.affine if d != dim)
        tables = tuple(t for t in m.tables if t.shape[dim] == 1) + (joint,)
        return m._replace(shape=tuple(index.shape) + m.hidden, affine=affine, tables=tables)


# ---- counting ---------------------------------------------------------------------------------


SENTINEL = -(1 << 55)  # a table entry meaning "no element here" (padding, a masked place)


def intervals(m: IndexMap) -> tuple[torch.Tensor, torch.Tensor]:
    """The positions a map reaches, as disjoint sorted runs (starts, ends): run i covers
    starts[i] .. ends[i] - 1.

    Terms that share grid dims form components; each component's distinct values, as runs of
    consecutive values, are one run set, and the positions are the sums of one value from each
    set: a sum of runs is a run, so the sets combine run by run (a row of 4096 contiguous
    elements is one run; a causal triangle is one run per row, not one per element)."""
    rank = len(m.shape)
    offset = m.offset
    terms: list[tuple[set[int], object]] = []
    for d, st in m.affine:
        if m.shape[d] > 1 and st != 0:
            terms.append(({d}, ("affine", d, st)))
    for t in m.tables:
        dims = {d for d in range(rank) if t.shape[d] > 1}
        if dims:
            terms.append((dims, ("table", t)))
        else:
            value = int(t.reshape(-1)[0])
            if value <= SENTINEL // 2:
                return _EMPTY, _EMPTY
            offset += value
    sets = []
    for group in _components(terms):
        values = _component_values(m, group)
        if not values.numel():
            return _EMPTY, _EMPTY
        sets.append(coalesce(values, values + 1))
    starts = torch.tensor([offset], dtype=torch.long)
    ends = starts + 1
    for s, e in sorted(sets, key=lambda run: run[0].numel()):
        if starts.numel() * s.numel() > MAX_TABLE:
            raise TooLarge(f"{starts.numel() * s.numel()} runs")
        new_starts = (starts[:, None] + s[None, :]).reshape(-1)
        new_ends = (ends[:, None] + e[None, :] - 1).reshape(-1)
        order = torch.argsort(new_starts)
        starts, ends = coalesce(new_starts[order], new_ends[order])
    return starts, ends


_EMPTY = torch.empty(0, dtype=torch.long)


def coalesce(starts: torch.Tensor, ends: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Runs sorted by start merged where they touch or overlap."""
    if starts.numel() <= 1:
        return starts, ends
    reach = torch.cummax(ends, dim=0).values
    begins = torch.ones_like(starts, dtype=torch.bool)
    begins[1:] = starts[1:] > reach[:-1]
    first = torch.nonzero(begins).reshape(-1)
    last = torch.cat([first[1:] - 1, torch.tensor([starts.numel() - 1])])
    return starts[first], reach[last]


def _components(terms: list[tuple[set[int], object]]) -> list[list[tuple[set[int], object]]]:
    groups: list[tuple[set[int], list]] = []
    for dims, term in terms:
        joined = [g for g in groups if g[0] & dims]
        merged_dims, merged_terms = set(dims), [(dims, term)]
        for g in joined:
            merged_dims |= g[0]
            merged_terms += g[1]
            groups.remove(g)
        groups.append((merged_dims, merged_terms))
    return [g[1] for g in groups]


def _component_values(m: IndexMap, group) -> torch.Tensor:
    """Distinct values of the sum of a component's terms over its dims (CPU, sorted)."""
    rank = len(m.shape)
    dims = sorted({d for dims, _ in group for d in dims})
    if math.prod(m.shape[d] for d in dims) > MAX_TABLE:
        raise TooLarge(f"a component of {math.prod(m.shape[d] for d in dims)} positions")
    device = next((term[1].device for _, term in group if term[0] == "table"),
                  torch.device("cpu"))
    total = torch.zeros((1,) * rank, dtype=torch.long, device=device)
    for _, term in group:
        if term[0] == "affine":
            _, d, st = term
            total = total + _arange_along(d, m.shape[d], rank, device) * st
        else:
            total = total + term[1].to(device)
    values = torch.unique(total.reshape(-1)).cpu()
    return values[values > SENTINEL // 2]


def union(runs: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """The union of several run sets, as disjoint sorted runs."""
    runs = [(s, e) for s, e in runs if s.numel()]
    if not runs:
        return _EMPTY, _EMPTY
    if len(runs) == 1:
        return runs[0]
    starts = torch.cat([s for s, _ in runs])
    ends = torch.cat([e for _, e in runs])
    order = torch.argsort(starts, stable=True)
    return coalesce(starts[order], ends[order])


def covered(runs: list[tuple[torch.Tensor, torch.Tensor]]) -> int:
    """Distinct positions covered by several run sets."""
    starts, ends = union(runs)
    return int((ends - starts).sum()) if starts.numel() else 0


# ---- helpers ----------------------------------------------------------------------------------


def _as_long(index: torch.Tensor) -> torch.Tensor:
    if index.dtype == torch.bool:
        raise ValueError("boolean masks must be turned into positions first")
    return index.to(torch.long)


def _infer_sizes(sizes: list[int], numel: int) -> list[int]:
    if -1 in sizes:
        known = math.prod(s for s in sizes if s != -1)
        sizes = [numel // known if s == -1 else s for s in sizes] if known else [
            0 if s == -1 else s for s in sizes]
    return sizes


def _reshape_groups(old, new) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Consecutive dim ranges of old and new shapes with equal products (size-1 dims alone)."""
    groups = []
    i = j = 0
    while i < len(old) or j < len(new):
        i0, j0 = i, j
        if i < len(old) and j < len(new) and old[i] == new[j]:
            groups.append(((i, i + 1), (j, j + 1)))
            i, j = i + 1, j + 1
            continue
        po = old[i] if i < len(old) else 1
        pn = new[j] if j < len(new) else 1
        i, j = i + (i < len(old)), j + (j < len(new))
        while po != pn:
            if po < pn and i < len(old):
                po *= old[i]
                i += 1
            elif j < len(new):
                pn *= new[j]
                j += 1
            else:
                po *= old[i] if i < len(old) else 1
                i += 1
        # trailing size-1 dims join the group
        while i < len(old) and old[i] == 1 and not (j < len(new) and new[j] == 1):
            i += 1
        while j < len(new) and new[j] == 1 and not (i < len(old) and old[i] == 1):
            j += 1
        groups.append(((i0, i), (j0, j)))
    return groups


def _merged_stride(sizes: list[int], strides: list[int | None]) -> int | None:
    """The stride of a merged dim when the group is affine and row-major compatible."""
    inner = None
    expect = None
    for n, st in reversed(list(zip(sizes, strides, strict=True))):
        if n == 1:
            continue
        if st is None:
            return None
        if inner is None:
            inner, expect = st, st * n
            continue
        if st != expect:
            return None
        expect = st * n
    return inner if inner is not None else 0


def _arange_along(dim: int, size: int, rank: int, device) -> torch.Tensor:
    shape = [1] * rank
    shape[dim] = size
    return torch.arange(size, dtype=torch.long, device=device).reshape(shape)


def _materialize(m: IndexMap, dims: list[int], tables: list[torch.Tensor]) -> torch.Tensor:
    """The sum of the affine terms on `dims` and of `tables` as one broadcast tensor."""
    device = tables[0].device if tables else torch.device("cpu")
    rank = len(m.shape)
    out = torch.zeros((1,) * rank, dtype=torch.long, device=device)
    for d, st in m.affine:
        if d in dims:
            out = out + _arange_along(d, m.shape[d], rank, device) * st
    for t in tables:
        out = out + t.to(device)
    if out.numel() > MAX_TABLE:
        raise TooLarge(f"table of {out.numel()} positions")
    return out


def _regroup_table(t: torch.Tensor, o0: int, o1: int, new_sizes: list[int],
                   old_sizes: list[int] | None = None) -> torch.Tensor:
    """Reshape a table's dims o0..o1 into new_sizes; a table that depends on some of them is
    first expanded to their full old sizes."""
    sizes = list(t.shape)
    if old_sizes is None:
        if any(t.shape[d] > 1 for d in range(o0, o1)):
            raise ValueError("a table over the group needs the group's sizes")
        return t.reshape(sizes[:o0] + [1] * len(new_sizes) + sizes[o1:])
    expanded = t.expand(*(sizes[:o0] + list(old_sizes) + sizes[o1:]))
    if expanded.numel() > MAX_TABLE:
        raise TooLarge(f"table of {expanded.numel()} positions")
    return expanded.reshape(sizes[:o0] + list(new_sizes) + sizes[o1:])

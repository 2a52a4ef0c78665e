"""Element-level dependence of a reference's outputs on its inputs.

Every tensor the reference makes carries a *lineage*: for each input storage it depends on, an
:class:`~runner.work.maps.IndexMap` from the tensor's coordinates to the input positions its value
comes from (a :class:`Dep`). Views and gathers transform the map, elementwise ops merge the
lineages of their operands, a reduction or a matmul hides the summed dims. In-place writes are
*overlays* on the written storage: the positions written and the lineage of the values.

At the end (:meth:`Tracker.summary`) an input position counts as read when some output value
depends on it (or the reference looked at it from Python: ``.item()``, ``.tolist()``); an output
that is an input with some rows rewritten (clone-and-scatter, an in-place cache update) counts the
rewritten positions as written and the untouched rest not at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils.weak import WeakIdKeyDictionary

from .maps import IndexMap, TooLarge, covered, intervals, union

MAX_DEPS = 96  # deps of one lineage before the position-independent ones are compacted
MAX_OFFSETS = 1 << 16  # offsets one merged dep may carry


@dataclass(frozen=True, eq=False)
class Dep:
    """Positions of source `src` that each element depends on: map(c) (+ every extra offset)."""

    src: int
    map: IndexMap
    copy: bool = False  # the element's value is the source element's (no arithmetic, same dtype)
    offsets: torch.Tensor | None = None  # int64 on the CPU; replaces map.offset when set
    runs: tuple[torch.Tensor, torch.Tensor] | None = None  # fixed runs (starts, ends),
    # independent of coordinates

    def with_map(self, m: IndexMap, copy: bool | None = None) -> Dep:
        return Dep(self.src, m, self.copy if copy is None else copy, self.offsets, self.runs)

    def key(self) -> tuple:
        m = self.map
        if self.runs is not None:
            return ("runs", self.src, m.shape, m.nvis)
        return (self.src, self.copy, m.shape, m.nvis, m.affine, tuple(_table_key(t)
                                                                       for t in m.tables))

    def position_runs(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.runs is not None:
            return self.runs
        starts, ends = intervals(self.map)
        if self.offsets is not None:
            shift = (self.offsets - self.map.offset)[:, None]
            return union([((starts[None, :] + shift).reshape(-1),
                           (ends[None, :] + shift).reshape(-1))])
        return starts, ends


Lineage = tuple[Dep, ...]

SMALL_TABLE = 4096  # tables up to this size are compared by value when deps merge


def _table_key(t: torch.Tensor) -> tuple:
    """Equal keys mean equal tables: the same memory seen the same way, or (small tables) the
    same values, so the deps of a loop's iterations merge."""
    key = getattr(t, "_atrex_table_key", None)
    if key is None:
        if t.numel() <= SMALL_TABLE:
            key = (tuple(t.shape), hash(t.detach().cpu().contiguous().numpy().tobytes()))
        else:
            key = (tuple(t.shape), tuple(t.stride()), t.data_ptr(), str(t.device))
        t._atrex_table_key = key
    return key


def transform(lineage: Lineage, fn, copy: bool | None = None) -> Lineage:
    """Apply a map transformation to every dep (position-fixed deps only change shape)."""
    out = []
    for dep in lineage:
        if dep.runs is not None:
            out.append(dep.with_map(fn(dep.map)))
            continue
        out.append(dep.with_map(fn(dep.map), copy=(dep.copy if copy is None else copy and
                                                   dep.copy)))
    return tuple(out)


def detach(lineage: Lineage, shape) -> Lineage:
    """The same positions, now the dependence of every element of a tensor of `shape`."""
    shape = tuple(int(s) for s in shape)
    out = []
    for dep in lineage:
        m = dep.map
        hidden = m.rearrange(list(range(len(m.shape))), 0).prune()
        for d, n in enumerate(shape):
            hidden = hidden.insert(d, n)
        out.append(Dep(dep.src, hidden, False, dep.offsets, dep.runs))
    return tuple(out)


def align(lineage: Lineage, shape) -> Lineage:
    return transform(lineage, lambda m: m.align(tuple(int(s) for s in shape)))


def merge(*lineages: Lineage) -> Lineage:
    """Union of lineages over the same grid; deps differing only in offset become one."""
    groups: dict[tuple, list[Dep]] = {}
    for lineage in lineages:
        for dep in lineage:
            groups.setdefault(dep.key(), []).append(dep)
    out = []
    for deps in groups.values():
        out.append(deps[0] if len(deps) == 1 else _merge_group(deps))
    return tuple(out)


def _merge_group(deps: list[Dep]) -> Dep:
    first = deps[0]
    if first.runs is not None:
        return Dep(first.src, first.map, False, None, union([d.runs for d in deps]))
    offsets = torch.unique(torch.cat([d.offsets if d.offsets is not None else torch.tensor(
        [d.map.offset], dtype=torch.long) for d in deps]))
    if offsets.numel() == 1:
        return first
    if offsets.numel() > MAX_OFFSETS:
        raise TooLarge(f"{offsets.numel()} offsets")
    return Dep(first.src, first.map, all(d.copy for d in deps), offsets, None)


@dataclass
class Source:
    """An input storage the reference reads (an input tensor, a parameter or a buffer)."""

    names: list[str]
    dtype: torch.dtype
    element_size: int
    numel: int  # elements of the storage in this dtype
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    kind: str = "input"  # or "work": an intermediate whose live elements decide its FLOPs

    def identity(self) -> IndexMap:
        return IndexMap.strided(self.sizes, self.strides, self.offset)


@dataclass
class Written:
    """In-place writes into one storage: the positions and the lineage of the values."""

    ref: StorageWeakRef
    element_size: int
    _regions: list = field(default_factory=list)  # Lineages not merged yet
    _values: list = field(default_factory=list)

    # Merging on every write would re-merge a loop's growing union each time (quadratic); the
    # pending writes merge in batches, and whenever someone reads.
    BATCH = 64

    def add(self, region: Dep, values: Lineage) -> None:
        self._regions.append((region,))
        self._values.append(values)
        if len(self._regions) > self.BATCH:
            self._settle()

    def _settle(self) -> None:
        if len(self._regions) > 1:
            self._regions = [compact(merge(*self._regions))]
        if len(self._values) > 1:
            self._values = [compact(merge(*self._values))]

    @property
    def regions(self) -> Lineage:
        self._settle()
        return self._regions[0] if self._regions else ()

    @property
    def values(self) -> Lineage:
        self._settle()
        return self._values[0] if self._values else ()


@dataclass
class TensorCount:
    name: str
    elements: int  # distinct elements read (sources) or written (outputs)
    total: int  # elements the tensor holds
    nbytes: int
    rule: str  # "whole", "touched" (indexed rows), "rewritten" (in-place rows), "unread"


@dataclass
class TouchedBytes:
    reads: list[TensorCount] = field(default_factory=list)
    writes: list[TensorCount] = field(default_factory=list)
    conservative_ops: list[str] = field(default_factory=list)
    live: dict[int, tuple[int, int]] = field(default_factory=dict)  # work source: live, total

    @property
    def read_bytes(self) -> int:
        return sum(c.nbytes for c in self.reads)

    @property
    def write_bytes(self) -> int:
        return sum(c.nbytes for c in self.writes)


def storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


class Tracker:
    """Lineages of live tensors and the writes into storages, for one reference call."""

    def __init__(self):
        self.sources: list[Source] = []
        self._source_of: dict[tuple[int, torch.dtype], int] = {}
        self._source_refs: dict[int, StorageWeakRef] = {}  # inputs only
        self.lineage: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self.written: dict[int, Written] = {}
        self.control: list[Lineage] = []
        self.conservative: set[str] = set()
        self.consts: WeakIdKeyDictionary = WeakIdKeyDictionary()  # runner.work.zeros
        # work source -> what every element of it needed (position-independent deps)
        self.edges: dict[int, list[Dep]] = {}
        # work source -> earlier work sources it read element for element in the same place
        self.same_place: dict[int, list[int]] = {}

    # ---- sources and lookups ---------------------------------------------------------------

    def add_source(self, name: str, t: torch.Tensor) -> None:
        key = (storage_key(t), t.dtype)
        index = self._source_of.get(key)
        if index is None:
            index = len(self.sources)
            self._source_of[key] = index
            self._source_refs[index] = StorageWeakRef(t.untyped_storage())
            self.sources.append(Source([name], t.dtype, t.element_size(),
                                       t.untyped_storage().nbytes() // t.element_size(),
                                       tuple(t.shape), tuple(t.stride()), t.storage_offset()))
        elif name not in self.sources[index].names:
            self.sources[index].names.append(name)
        geometry = IndexMap.strided(t.shape, t.stride(), t.storage_offset())
        self.lineage[t] = (Dep(index, geometry, copy=True),)

    def add_work(self, name: str, t: torch.Tensor) -> Dep:
        """An op's output as a source of its own: the positions of it that outputs depend on
        are the elements whose computation an ideal kernel cannot skip."""
        index = len(self.sources)
        self.sources.append(Source([name], t.dtype, t.element_size(), t.numel(), tuple(t.shape),
                                   tuple(t.stride()), 0, kind="work"))
        return Dep(index, IndexMap.strided(t.shape, t.stride()))

    def own(self, t: torch.Tensor) -> Lineage:
        return self.lineage.get(t, ())

    def get(self, t: torch.Tensor) -> Lineage:
        """What t's elements depend on: its own lineage and anything written into its storage."""
        own = self.own(t)
        written = self._written(t)
        if written is None or not written.values:
            return own
        return merge(own, detach(written.values, t.shape))

    def set(self, t: torch.Tensor, lineage: Lineage) -> None:
        self.lineage[t] = compact(lineage, self)

    def _written(self, t: torch.Tensor) -> Written | None:
        key = storage_key(t)
        written = self.written.get(key)
        if written is not None and written.ref.expired():
            del self.written[key]
            return None
        return written

    # ---- writes ----------------------------------------------------------------------------

    def write(self, target: torch.Tensor, region: IndexMap, values: Lineage) -> None:
        """Positions `region` of target's storage now hold values with lineage `values`
        (over the region's grid)."""
        key = storage_key(target)
        written = self._written(target)
        if written is None:
            written = Written(StorageWeakRef(target.untyped_storage()), target.element_size())
            self.written[key] = written
        written.add(Dep(-1, region), detach(values, ()))

    def storage_map(self, t: torch.Tensor) -> IndexMap:
        return IndexMap.strided(t.shape, t.stride(), t.storage_offset())

    # ---- the count ---------------------------------------------------------------------------

    def commit(self, lineage: Lineage) -> None:
        """The reference looked at these values from Python: they are read."""
        self.control.append(detach(lineage, ()))

    def summary(self, outputs: dict[str, torch.Tensor]) -> TouchedBytes:
        reads: list[Lineage] = list(self.control)
        result = TouchedBytes(conservative_ops=sorted(self.conservative))
        done: set[int] = set()
        source_keys = {ref.cdata: i for i, ref in self._source_refs.items()}
        for name, t in outputs.items():
            key = storage_key(t)
            if key in done:
                continue
            done.add(key)
            written = self._written(t)
            if written is not None and (key in source_keys or self._passes_through(t)):
                result.writes.append(self._rewritten(name, t, written))
                reads.append(written.values)
                continue
            total = covered([intervals(self.storage_map(t))])
            result.writes.append(TensorCount(name, total, total, total * t.element_size(),
                                             "whole"))
            reads.append(self.get(t))
        for key, written in list(self.written.items()):
            index = source_keys.get(key)
            if key in done or index is None or written.ref.expired():
                continue
            done.add(key)
            source = self.sources[index]
            elements = _count(written.regions)
            result.writes.append(TensorCount(
                f"input:{source.names[0]}", elements, source.numel,
                elements * written.element_size, "rewritten"))
            reads.append(written.values)
        counts = self._read_counts(reads)
        result.reads = [c for c, s in zip(counts, self.sources, strict=True) if s.kind == "input"]
        result.live = {i: (c.elements, c.total) for i, (c, s) in enumerate(zip(
            counts, self.sources, strict=True)) if s.kind == "work"}
        return result

    def _rewritten(self, name: str, t: torch.Tensor, written: Written) -> TensorCount:
        total = covered([intervals(self.storage_map(t))])
        elements = min(_count(written.regions), total)
        return TensorCount(name, elements, total, elements * t.element_size(), "rewritten")

    def _passes_through(self, t: torch.Tensor) -> bool:
        """t is a copy of an input, element for element (a clone the reference then updates)."""
        own = self.own(t)
        if len(own) != 1:
            return False
        dep = own[0]
        if not dep.copy or dep.offsets is not None or dep.runs is not None or dep.src < 0:
            return False
        source = self.sources[dep.src]
        if (source.kind != "input" or source.dtype != t.dtype
                or tuple(source.sizes) != tuple(t.shape)):
            return False
        ident = source.identity()
        return (dep.map.shape == ident.shape and dep.map.nvis == ident.nvis and not
                dep.map.tables and dep.map.offset == ident.offset
                and set(dep.map.affine) == set(ident.affine))

    def _read_counts(self, lineages: list[Lineage]) -> list[TensorCount]:
        runs: dict[int, list] = {}
        for lineage in lineages:
            for dep in lineage:
                self._add_runs(runs, dep)
        # an op's result that anything live needs makes what it read live: later ops' edges
        # only name earlier sources, so one pass from the last op back settles it
        for index in sorted(set(self.edges) | set(self.same_place), reverse=True):
            if not runs.get(index):
                continue
            live = union(runs[index])
            if not live[0].numel():
                continue
            runs[index] = [live]
            for dep in self.edges.get(index, ()):
                self._add_runs(runs, dep)
            for earlier in self.same_place.get(index, ()):
                runs.setdefault(earlier, []).append(live)
        counts = []
        for index, source in enumerate(self.sources):
            elements = min(covered(runs.get(index, [])), source.numel)
            rule = ("unread" if elements == 0 else "whole" if elements >= _span(source)
                    else "touched")
            counts.append(TensorCount(", ".join(source.names), elements, _span(source),
                                      elements * source.element_size, rule))
        return counts


    def _add_runs(self, runs: dict, dep: Dep) -> None:
        if dep.src < 0:
            return
        try:
            runs.setdefault(dep.src, []).append(dep.position_runs())
        except TooLarge:
            runs.setdefault(dep.src, []).append((torch.tensor([0]), torch.tensor(
                [self.sources[dep.src].numel])))


def _span(source: Source) -> int:
    if source.kind == "work":  # an op's fresh output: its elements do not overlap
        return math.prod(source.sizes)
    return covered([intervals(source.identity())])


def _count(regions: Lineage) -> int:
    runs = []
    for dep in regions:
        try:
            runs.append(dep.position_runs())
        except TooLarge:
            return math.prod(dep.map.shape)
    return covered(runs)


def compact(lineage: Lineage, tracker: Tracker | None = None) -> Lineage:
    """Keep a lineage small: past MAX_DEPS deps, the ones that no longer depend on the tensor's
    coordinates become fixed position sets (merged per source)."""
    if len(lineage) <= MAX_DEPS:
        return lineage
    fixed, mapped = [], []
    for dep in lineage:
        m = dep.map
        if dep.runs is None and any(m.depends_on(d) for d in range(m.nvis)):
            mapped.append(dep)
        else:
            fixed.append(dep)
    if len(mapped) > MAX_DEPS:  # too many coordinate-dependent deps: give up their coordinates
        fixed += mapped
        mapped = []
        if tracker is not None:
            tracker.conservative.add("(lineage compacted)")
    out = []
    for dep in fixed:
        try:
            runs = dep.position_runs()
        except TooLarge:
            numel = tracker.sources[dep.src].numel if tracker is not None and dep.src >= 0 else (
                math.prod(dep.map.shape))
            runs = (torch.tensor([0]), torch.tensor([numel]))
        shape = dep.map.shape[:dep.map.nvis]
        out.append(Dep(dep.src, IndexMap(shape, len(shape)), False, None, runs))
    return merge(tuple(mapped), tuple(out))

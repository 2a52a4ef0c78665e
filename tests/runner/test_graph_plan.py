"""The graph-copy planner and the copies behind one replay (pure, and real CPU tensors).

The H200 crashes of issue 12 (every contestant of fused_add_rmsnorm, kv_cache_append and rope
decode-t64) and the `suspicious` honest kv_cache_append prefill come from a graph replaying
calls on input copies that were freed once the capture returned; these tests pin what is now
copied, kept and restored per call, and how many calls fit.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from atrex.runner.contract.graphplan import (
    GRAPH_CALLS,
    GRAPH_COPIES_MAX_BYTES,
    TensorSpec,
    copy_budget,
    fallback_calls,
    plan_graph,
)
from atrex.runner.executor import graphcopies
from atrex.runner.executor.devmap import CudaToCpu

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "benchmarks" / "suite"
MIB = 1 << 20
H200_FREE = 140 << 30


def _spec(name, group, nbytes, integer=False, mutated=False):
    return TensorSpec(name=name, group=group, span_bytes=nbytes, integer=integer,
                      mutated=mutated)


def test_small_inputs_get_the_full_graph():
    # fused_add_rmsnorm decode-t64: x, residual 512 KiB each, weight 8 KiB, two outputs
    specs = [_spec("x", 0, 512 << 10), _spec("residual", 1, 512 << 10), _spec("weight", 2, 8192)]
    plan = plan_graph(specs, output_bytes=1 << 20, budget_bytes=copy_budget(H200_FREE, 4))
    assert plan.calls == GRAPH_CALLS
    assert plan.copied == ("x", "residual", "weight") and plan.restored == ()
    assert plan.per_call_bytes == (512 << 10) * 2 + 8192 + (1 << 20)


def test_kv_cache_append_decode_restores_the_caches_and_copies_the_slots():
    """The suite's decode append on an H200 with eager, compile, library and kb: the 128 MiB
    caches are updated in place (restored from a snapshot before every repetition), the slot
    mapping is an index input (copied with its values), and 15 calls fit the 4 GiB share."""
    cache = 4096 * 16 * 8 * 128 * 2
    new = 64 * 8 * 128 * 2
    specs = [_spec("key", 0, new), _spec("value", 1, new),
             _spec("k_cache", 2, cache, mutated=True), _spec("v_cache", 3, cache, mutated=True),
             _spec("slot_mapping", 4, 64 * 8, integer=True)]
    budget = copy_budget(H200_FREE, 4)
    plan = plan_graph(specs, output_bytes=0, budget_bytes=budget)
    assert budget == GRAPH_COPIES_MAX_BYTES // 4
    assert plan.restored == ("k_cache", "v_cache")
    assert "slot_mapping" in plan.copied
    assert [g.index for g in plan.groups] == [False, False, False, False, True]
    assert plan.snapshot_bytes == 2 * cache
    assert plan.calls == 1 + (budget - 2 * cache) // plan.per_call_bytes == 15
    assert plan.snapshot_bytes + (plan.calls - 1) * plan.per_call_bytes <= budget
    assert "15 calls" in plan.reason and "snapshot" in plan.reason


def test_rope_decode_copies_its_positions_and_cache_per_call():
    specs = [_spec("positions", 0, 64 * 8, integer=True), _spec("query", 1, 64 * 4096 * 2),
             _spec("key", 2, 64 * 1024 * 2), _spec("cos_sin_cache", 3, 8192 * 128 * 4)]
    plan = plan_graph(specs, output_bytes=64 * 5120 * 2, budget_bytes=copy_budget(H200_FREE, 4))
    assert plan.calls == GRAPH_CALLS and plan.copied[0] == "positions"
    assert plan.groups[0].index and not plan.restored


def test_aliasing_inputs_are_one_group_copied_once():
    kv = 64 * MIB
    specs = [_spec("k_cache", 0, kv, mutated=True), _spec("v_cache", 0, kv, mutated=True),
             _spec("x", 1, MIB)]
    plan = plan_graph(specs, output_bytes=0, budget_bytes=1 << 30)
    assert [g.names for g in plan.groups] == [("k_cache", "v_cache"), ("x",)]
    assert plan.per_call_bytes == kv + MIB and plan.snapshot_bytes == kv
    assert plan.describe()["aliased"] == [["k_cache", "v_cache"]]


def test_fewer_calls_when_the_budget_is_small_never_none():
    specs = [_spec("a", 0, 300 * MIB)]
    plan = plan_graph(specs, output_bytes=0, budget_bytes=44 * (1 << 30) // 4 // 3)
    assert 1 < plan.calls < GRAPH_CALLS
    assert (plan.calls - 1) * plan.per_call_bytes <= 44 * (1 << 30) // 4 // 3
    assert plan_graph(specs, 0, budget_bytes=0).calls == 1
    mutating = [_spec("cache", 0, 300 * MIB, mutated=True)]
    tight = plan_graph(mutating, 0, budget_bytes=100 * MIB)  # not even the snapshot fits
    assert tight.calls == 1 and "budget" in tight.reason


def test_capture_fallback_halves_down_to_one_call():
    assert fallback_calls(15) == [15, 7, 3, 1]
    assert fallback_calls(32) == [32, 16, 8, 4, 2, 1]
    assert fallback_calls(1) == [1]


def test_copy_budget_is_a_quarter_of_free_memory_capped_and_shared():
    assert copy_budget(H200_FREE, 1) == GRAPH_COPIES_MAX_BYTES
    assert copy_budget(8 << 30, 2) == (8 << 30) // 4 // 2
    assert copy_budget(0, 3) == 0


# --- the copies, on real tensors ------------------------------------------------------------

def test_aliasing_views_stay_aliased_in_the_copy():
    base = torch.arange(40, dtype=torch.float32)
    inputs = {"a": base[:20].view(4, 5), "b": base[10:30], "n": 3}
    groups = graphcopies.storage_groups(inputs)
    assert [g.names for g in groups] == [("a", "b")]
    copy = graphcopies.copy_inputs(inputs, groups)
    assert copy.values["n"] == 3
    a, b = copy.values["a"], copy.values["b"]
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    assert a.untyped_storage().data_ptr() != base.untyped_storage().data_ptr()
    assert torch.equal(a, inputs["a"]) and torch.equal(b, inputs["b"])
    a[2, 0] = -1.0  # element 10 of the storage: b's first element too
    assert float(b[0]) == -1.0 and float(inputs["b"][0]) == 10.0


def test_layouts_and_index_values_are_kept():
    x = torch.randn(8, 6).t()  # non-contiguous
    positions = torch.randperm(4096)[:64] + 256
    inputs = {"x": x, "positions": positions, "empty": torch.empty(0)}
    groups = graphcopies.storage_groups(inputs)
    specs = graphcopies.tensor_specs(inputs, groups, mutates=[])
    assert [(s.name, s.integer) for s in specs] == [("x", False), ("positions", True)]
    copy = graphcopies.copy_inputs(inputs, groups)
    assert list(copy.values) == ["x", "positions", "empty"]
    assert copy.values["x"].stride() == x.stride() and torch.equal(copy.values["x"], x)
    assert torch.equal(copy.values["positions"], positions)
    assert copy.values["positions"].data_ptr() != positions.data_ptr()


def test_in_place_groups_restore_from_the_pristine_snapshot():
    cache = torch.randn(16, 4)
    pos = torch.tensor([3])
    inputs = {"x": torch.randn(4), "cache": cache, "pos": pos}
    groups = graphcopies.storage_groups(inputs)
    in_place = {i for i, g in enumerate(groups) if set(g.names) & {"cache", "pos"}}
    pristine = graphcopies.copy_inputs(inputs, groups, in_place)
    assert set(pristine.values) == {"cache", "pos"}
    first = graphcopies.spans_of(inputs, groups, in_place)
    second = graphcopies.copy_inputs(inputs, groups)
    targets = [first, graphcopies.CallInputs(second.values, {i: second.spans[i]
                                                             for i in in_place})]
    for call in (inputs, second.values):  # an append that moves its position, twice
        for _ in range(2):
            call["cache"][call["pos"]] = call["x"]
            call["pos"] += 1
    assert int(inputs["pos"]) == 5 and int(second.values["pos"]) == 5
    for target in targets:
        graphcopies.restore(target, pristine)
    for call in (inputs, second.values):
        assert int(call["pos"]) == 3 and torch.equal(call["cache"], pristine.values["cache"])


def test_output_bytes_count_each_storage_once():
    out = torch.randn(4, 8)
    assert graphcopies.output_bytes({"a": out, "b": out[1:]}) == out.numel() * 4
    assert graphcopies.output_bytes((out, torch.zeros(2, dtype=torch.int64))) == 128 + 16
    assert graphcopies.output_bytes({}) == 0


def _suite_inputs(op: str, shape: str) -> dict:
    import json

    spec = importlib.util.spec_from_file_location(f"suite_{op}_input", SUITE / op / "input.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kwargs = json.loads((SUITE / op / "shapes.json").read_text())[shape]["input_kwargs"]
    torch.manual_seed(0)
    with CudaToCpu():
        return module._make_inputs(**kwargs)


@pytest.mark.parametrize("op, shape, mutates, index", [
    ("kv_cache_append", "cpu-decode", ["k_cache", "v_cache"], ["slot_mapping"]),
    ("rope", "cpu-decode", [], ["positions"]),
    ("fused_add_rmsnorm", "cpu-small", [], []),
])
def test_suite_inputs_through_the_planner_and_the_copies(op, shape, mutates, index):
    """The three operators that crashed on the H200: what is copied and restored per call, and
    every copy's indices are the drawn (valid) ones."""
    inputs = _suite_inputs(op, shape)
    groups = graphcopies.storage_groups(inputs)
    specs = graphcopies.tensor_specs(inputs, groups, mutates)
    plan = plan_graph(specs, output_bytes=1024, budget_bytes=1 << 30, wanted=4)
    assert plan.calls == 4
    assert set(plan.restored) == set(mutates)
    assert {n for g in plan.groups if g.index for n in g.names} == set(index)
    assert set(plan.copied) == {k for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    copies = [graphcopies.copy_inputs(inputs, groups) for _ in range(plan.calls - 1)]
    for copy in copies:
        for name in index:
            assert torch.equal(copy.values[name], inputs[name])
            assert copy.values[name].data_ptr() != inputs[name].data_ptr()

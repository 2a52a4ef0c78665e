"""Inputs that alias: K and V caches as two views of one packed KV pool (FlashInfer's layout),
updated in place through those views. They must still alias where the candidate sees them
(after the wire), in the judge's clones and float64 upcast, and in every input copy of a graph
replay (run as a sequence on the CPU); a kernel written for a packed pool refuses separate ones.
"""

from __future__ import annotations

import json
import textwrap

import pytest
import torch
from atrex.runner.contract import wire
from atrex.runner.contract.storage import copy_keeping_aliases, storage_groups
from atrex.runner.evaluate import EvalOptions, evaluate_repo
from atrex.runner.model import Status
from atrex.runner.repo import load_repo


def _packed(pages=6, page=4, heads=2, dim=8):
    kv = torch.randn(pages, 2, page, heads, dim)
    return {"k_cache": kv[:, 0], "v_cache": kv[:, 1], "slots": torch.tensor([3, 9, 17]),
            "scale": 0.5}


def test_views_of_one_pool_cross_the_wire_as_views():
    inputs = _packed()
    blobs: list = []
    node = wire.encode_inputs(inputs, blobs)
    assert len(blobs) == 2  # the pool's span once, the slots
    frames = [bytearray(bytes(memoryview(b))) for b in blobs]
    got = wire.decode_value(node, frames, views={})
    assert got["scale"] == 0.5
    k, v = got["k_cache"], got["v_cache"]
    assert k.untyped_storage().data_ptr() == v.untyped_storage().data_ptr()
    assert k.stride() == inputs["k_cache"].stride() and torch.equal(k, inputs["k_cache"])
    assert torch.equal(v, inputs["v_cache"]) and torch.equal(got["slots"], inputs["slots"])
    with pytest.raises(wire.ProtocolError, match="a view where none is allowed"):
        wire.decode_value(node, frames)


def test_a_view_past_its_span_is_refused():
    blobs: list = []
    node = wire.encode_inputs(_packed(), blobs)
    node["dict"][0][1]["offset"] = 10_000
    with pytest.raises(wire.ProtocolError, match="reaching byte"):
        wire.decode_value(node, [bytearray(bytes(memoryview(b))) for b in blobs], views={})


def test_clones_and_the_float64_upcast_keep_the_aliasing():
    inputs = _packed()
    clone = copy_keeping_aliases(inputs)
    up = copy_keeping_aliases(inputs, dtype_of=lambda t: torch.float64
                              if t.is_floating_point() else None)
    for copy, dtype in ((clone, torch.float32), (up, torch.float64)):
        assert [g.names for g in storage_groups(copy)] == [("k_cache", "v_cache"), ("slots",)]
        assert copy["k_cache"].dtype == dtype and copy["slots"].dtype == torch.int64
        assert torch.equal(copy["v_cache"].to(torch.float32), inputs["v_cache"])
        assert copy["k_cache"].untyped_storage().data_ptr() != \
            inputs["k_cache"].untyped_storage().data_ptr()


FILES = {
    "reference.py": '''
        import torch


        class Model(torch.nn.Module):
            """Append keys and values into a packed pool [pages, 2, page, heads, dim] given as
            its K and V views (slot = page * page_size + offset)."""

            def forward(self, key, value, k_cache, v_cache, slots):
                page = k_cache.shape[1]
                k_cache[slots // page, slots % page] = key.to(k_cache.dtype)
                v_cache[slots // page, slots % page] = value.to(v_cache.dtype)
                return {}
    ''',
    "input.py": '''
        import torch


        def _make_inputs(tokens, pages, page, heads, dim):
            kv = torch.randn(pages, 2, page, heads, dim, device="cuda")
            slots = torch.randperm(pages * page, device="cuda")[:tokens]
            return {"key": torch.randn(tokens, heads, dim, device="cuda"),
                    "value": torch.randn(tokens, heads, dim, device="cuda"),
                    "k_cache": kv[:, 0], "v_cache": kv[:, 1], "slots": slots}
    ''',
    "kernel.py": '''
        import torch
        import triton
        import triton.language as tl


        @triton.jit
        def _append(key_ptr, value_ptr, k_ptr, v_ptr, slots_ptr, page, sp, so, row,
                    BLOCK: tl.constexpr):
            t = tl.program_id(0)
            cols = tl.arange(0, BLOCK)
            slot = tl.load(slots_ptr + t)
            dst = (slot // page) * sp + (slot % page) * so + cols
            tl.store(k_ptr + dst, tl.load(key_ptr + t * row + cols))
            tl.store(v_ptr + dst, tl.load(value_ptr + t * row + cols))


        class Model(torch.nn.Module):
            def forward(self, key, value, k_cache, v_cache, slots):
                if k_cache.untyped_storage().data_ptr() != v_cache.untyped_storage().data_ptr():
                    raise ValueError("k_cache and v_cache must be views of one KV pool")
                row = key.shape[1] * key.shape[2]  # heads * dim, contiguous per token
                _append[(key.shape[0],)](key, value, k_cache, v_cache, slots, k_cache.shape[1],
                                         k_cache.stride(0), k_cache.stride(1), row, BLOCK=row)
                return {}
    ''',
}


@pytest.mark.slow
def test_an_append_into_a_packed_pool_passes_with_its_views_intact(tmp_path):
    op = tmp_path / "packed_append"
    op.mkdir()
    for name, text in FILES.items():
        (op / name).write_text(textwrap.dedent(text).lstrip())
    (op / "shapes.json").write_text(json.dumps(
        {"p6": {"input_kwargs": {"tokens": 5, "pages": 6, "page": 4, "heads": 2, "dim": 8}}}))
    (op / "metadata.json").write_text(json.dumps({"mutates": ["k_cache", "v_cache"]}))
    report = evaluate_repo(load_repo(tmp_path), EvalOptions(device="cpu", trials=2))
    (shape,) = report.op("packed_append").shapes
    assert shape.status is Status.PASS, shape.message

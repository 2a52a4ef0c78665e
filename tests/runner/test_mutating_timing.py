"""Operators that update their inputs in place, through the timing path on the CPU.

`append_row` writes a row into a cache at an index input and advances that index in place (a
KV-cache append with its sequence position). Repeated without care, every repetition writes the
next row and moves the position further, until it runs off the cache: on a GPU that is an
illegal address. The runner restores in-place inputs before every repetition and keeps every
call's input copies (the CPU runs the calls of a graph replay as a plain sequence), so a
repetition's result, the recheck with new values, and the calls judged before timing all see the
same operation. `defined_elements` in the reference says only the written row and the position
are defined; the rest of the returned scratch buffer is not compared.
"""

from __future__ import annotations

import json
import textwrap

import pytest
from atrex.runner.evaluate import EvalOptions, evaluate_repo
from atrex.runner.model import Status
from atrex.runner.repo import load_repo

FILES = {
    "reference.py": '''
        import torch


        class Model(torch.nn.Module):
            def forward(self, x, cache, pos):
                row = int(pos[0])
                cache[row] = x.to(cache.dtype)
                pos += 1
                scratch = torch.zeros_like(cache)
                scratch[row] = 2 * x.to(cache.dtype)
                return {"scratch": scratch}


        def defined_elements(inputs):
            rows = torch.arange(inputs["cache"].shape[0])[:, None]
            return {"scratch": (rows == int(inputs["pos"][0])).expand(inputs["cache"].shape)}
    ''',
    "input.py": '''
        import torch


        def _make_inputs(rows, width):
            return {"x": torch.randn(width, device="cuda"),
                    "cache": torch.randn(rows, width, device="cuda"),
                    "pos": torch.randint(0, rows - 8, (1,), device="cuda")}
    ''',
    "kernel.py": '''
        import torch
        import triton
        import triton.language as tl


        @triton.jit
        def _append(x_ptr, cache_ptr, scratch_ptr, pos_ptr, width, BLOCK: tl.constexpr):
            cols = tl.arange(0, BLOCK)
            mask = cols < width
            row = tl.load(pos_ptr)
            x = tl.load(x_ptr + cols, mask=mask)
            tl.store(cache_ptr + row * width + cols, x, mask=mask)
            tl.store(scratch_ptr + row * width + cols, 2 * x, mask=mask)
            tl.store(pos_ptr, row + 1)


        class Model(torch.nn.Module):
            def forward(self, x, cache, pos):
                scratch = torch.empty_like(cache)  # only the written row is defined
                width = cache.shape[1]
                _append[(1,)](x, cache, scratch, pos, width,
                              BLOCK=triton.next_power_of_2(width))
                return {"scratch": scratch}
    ''',
}


@pytest.mark.slow
def test_an_in_place_append_passes_timing_and_recheck(tmp_path):
    op = tmp_path / "append_row"
    op.mkdir()
    for name, text in FILES.items():
        (op / name).write_text(textwrap.dedent(text).lstrip())
    (op / "shapes.json").write_text(json.dumps(
        {"r32": {"input_kwargs": {"rows": 32, "width": 48}}}))
    (op / "metadata.json").write_text(json.dumps({"mutates": ["cache", "pos"]}))
    report = evaluate_repo(load_repo(tmp_path), EvalOptions(device="cpu", trials=2))
    (shape,) = report.op("append_row").shapes
    assert shape.status is Status.PASS, shape.message
    assert shape.own_kernel_share == 1.0

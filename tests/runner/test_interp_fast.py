"""Triton's interpreter with runner/executor/interp_fast.py installed gives the results it gives
without: bitwise reductions (numpy's reduce) for every axis, kept dimensions and integer width,
`tl.sort` (one xor_sum per step), and kernels that call jit helpers of their own and of a module
that sees `triton.language.core` (the language patched once per launch); after a launch the
language modules are left as the interpreter alone leaves them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

HELPERS = textwrap.dedent('''
    import triton
    import triton.language.core as core

    @triton.jit
    def twice_plus(x, y):
        return core.where(x > y, x * 2, y) + core.full(x.shape, 1, x.dtype)
''')

KERNELS = textwrap.dedent('''
    import sys, inspect
    import torch, triton, triton.language as tl
    from triton.runtime import interpreter
    import helpers

    @triton.jit
    def reductions(x_ptr, out_ptr, R: tl.constexpr, C: tl.constexpr):
        r = tl.arange(0, R)[:, None]
        c = tl.arange(0, C)[None, :]
        x = tl.load(x_ptr + r * C + c)
        o = 0
        tl.store(out_ptr + o + tl.arange(0, C), tl.xor_sum(x, axis=0))
        o += C
        tl.store(out_ptr + o + tl.arange(0, R), tl.xor_sum(x, axis=1))
        o += R
        tl.store(out_ptr + o + r, tl.xor_sum(x, axis=1, keep_dims=True))  # [R, 1]
        o += R
        tl.store(out_ptr + o, tl.xor_sum(tl.reshape(x, [R * C]), axis=0))
        o += 1
        tl.store(out_ptr + o + tl.arange(0, C), tl.reduce_or(x, axis=0))
        o += C
        tl.store(out_ptr + o + tl.arange(0, R), tl.reduce_or((x & 1) == 1, axis=1).to(x.dtype))
        o += R
        tl.store(out_ptr + o + r * C + c, tl.sort(x, descending=True))  # each row
        o += R * C
        tl.store(out_ptr + o + tl.arange(0, R * C), tl.sort(tl.reshape(x, [R * C])))

    @triton.jit
    def _halve(x):
        return x // 2

    @triton.jit
    def nested(x_ptr, out_ptr, N: tl.constexpr):
        i = tl.arange(0, N)
        x = tl.load(x_ptr + i)
        for k in range(3):
            x = helpers.twice_plus(_halve(x), x - k)
        tl.store(out_ptr + i, x)

    SIZE = 16 + 8 + 8 + 1 + 16 + 8 + 128 + 128

    def run(dtype):
        torch.manual_seed(1)
        info = torch.iinfo(dtype)
        x = torch.randint(info.min, info.max, (8, 16), dtype=dtype)
        out = torch.zeros(SIZE, dtype=dtype)
        reductions[(1,)](x, out, R=8, C=16)
        y = torch.randint(-1000, 1000, (64,), dtype=torch.int32)
        nested_out = torch.empty_like(y)
        nested[(1,)](y, nested_out, N=64)
        return x, out, nested_out

    def language_state():
        """Which names are the compiler's builtins again (the plain interpreter leaves
        triton.language.core patched after a helper that sees it: that stays as it was)."""
        return {(lang.__name__, name): tl.core.is_builtin(getattr(lang, name))
                for lang in (tl, tl.core) for name in ("arange", "load", "where", "full")}

    plain = {d: run(d) for d in (torch.int8, torch.int32, torch.int64)}
    after_plain = language_state()
    assert all(after_plain[("triton.language", n)] for n in ("arange", "load", "where", "full"))
    from atrex.runner.executor import interp_fast
    interp_fast.install()
    assert interpreter._atrex_fast
    for dtype, (x, want, want_nested) in plain.items():
        _, got, got_nested = run(dtype)
        assert torch.equal(got, want), (dtype, got, want)
        assert torch.equal(got_nested, want_nested), dtype
        assert torch.equal(want[-256:-128], x.sort(descending=True).values.flatten()), dtype
        assert torch.equal(want[-128:], x.flatten().sort().values), dtype
        assert language_state() == after_plain, dtype
    print("ok")
''')


def test_the_interpreter_gives_the_same_results_faster(tmp_path):
    (tmp_path / "helpers.py").write_text(HELPERS)
    script = tmp_path / "kernels.py"
    script.write_text(KERNELS)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path,
                          env={**os.environ, "TRITON_INTERPRET": "1"})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_an_interpreter_without_these_internals_is_left_as_it_is(monkeypatch):
    """Another Triton's interpreter may lack what install() replaces: it then replaces nothing
    and raises nothing (runs stay correct, only slower)."""
    import types

    from atrex.runner.executor import interp_fast

    class ReduceOps:  # a class of that name, without the method install() wraps
        pass

    for internals in ({}, {"ReduceOps": ReduceOps}, {"_patch_lang": print}):
        stand_in = types.SimpleNamespace(**internals)
        monkeypatch.setattr(interp_fast, "interpreter", stand_in)
        interp_fast.install()
        assert stand_in._atrex_fast
        assert {k: v for k, v in vars(stand_in).items() if k != "_atrex_fast"} == internals
        assert not hasattr(ReduceOps, "apply_impl")

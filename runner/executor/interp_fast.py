"""Two costs of Triton's interpreter removed, with the same results (CPU runs only).

Measured with Triton 3.9 on the suite's sampling kernel at its CPU shapes (cProfile, one call
of the cpu-ties shape: 15.0 s, of which 14.6 s in one `tl.sort` of 1,024 keys):

- Bitwise reductions. The interpreter computes sum, min, max, argmin and argmax with numpy and
  every other combine function element by element in Python. `tl.sort` runs one `xor_sum` per
  compare-and-swap step (55 for 1,024 keys). Here the xor, or and and reductions of
  `triton.language.standard` go to numpy's `ufunc.reduce`: bitwise operations give the same bits
  in any order. The cpu-ties call: 15.0 s -> 5.1 s.
- Re-patching on every device-function call. A call of one `@triton.jit` function from another
  re-installs the interpreter's versions of every `triton.language` builtin (an
  `inspect.getmembers` walk of the modules each time) although the launch already installed
  them; the sampling kernel makes ~1,800 such calls per launch. Here a call whose language
  modules are already patched skips it (they are detected by the interpreter's own `range`
  replacement, which it installs together with the builtins). The cpu-ties call: 5.1 s -> 2.6 s;
  the four CPU shapes: 25 s -> 6.7 s.

`install()` applies both once per process; with a Triton whose interpreter lacks the internals
named here, it changes nothing (the interpreter's own paths stay, only slower).
"""

from __future__ import annotations

import inspect

import numpy as np
import triton.language as tl
from triton.runtime import interpreter

_UFUNCS = {"_xor_combine": np.bitwise_xor, "_or_combine": np.bitwise_or,
           "_and_combine": np.bitwise_and}
_PATCHED_RANGE = "_new_range"  # the name of the interpreter's stand-in for tl.range


def install() -> None:
    if getattr(interpreter, "_atrex_fast", False):
        return
    if hasattr(getattr(interpreter, "ReduceOps", None), "apply_impl"):
        _numpy_bitwise_reductions(interpreter.ReduceOps)
    if hasattr(interpreter, "_patch_lang") and hasattr(interpreter, "_LangPatchScope"):
        _patch_once_per_launch()
    interpreter._atrex_fast = True


def _numpy_bitwise_reductions(ops) -> None:
    original = ops.apply_impl
    # by identity, as the interpreter compares its own fast paths
    ufuncs = {getattr(tl.standard, name): ufunc for name, ufunc in _UFUNCS.items()
              if hasattr(tl.standard, name)}

    def apply_impl(self, input):
        ufunc = ufuncs.get(self.combine_fn)
        if ufunc is None or len(input) != 1:
            return original(self, input)
        data = input[0].handle.data
        return self.to_tensor(ufunc.reduce(data, axis=self.axis, keepdims=self.keep_dims),
                              input[0].dtype)

    ops.apply_impl = apply_impl


def _language_modules(fn) -> list:
    """The triton.language modules a jit function's globals see (what the interpreter patches)."""
    return [value for value in fn.__globals__.values()
            if inspect.ismodule(value) and value in (tl, tl.core)]


def _is_patched(lang) -> bool:
    return getattr(getattr(lang, "range", None), "__name__", None) == _PATCHED_RANGE


def _patch_once_per_launch() -> None:
    original = interpreter._patch_lang

    def patch_lang(fn):
        langs = _language_modules(fn)
        if langs and all(_is_patched(lang) for lang in langs):
            return interpreter._LangPatchScope()  # nothing changed here, nothing to restore
        return original(fn)

    interpreter._patch_lang = patch_lang

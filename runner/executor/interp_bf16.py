"""bfloat16 arithmetic in Triton's interpreter, computed on values (CPU runs only).

Triton's interpreter keeps a bfloat16 tensor as its uint16 bit patterns (numpy has no bfloat16)
and runs numpy's operators on that storage, so `a * b`, `a + b`, `a < b`, `-a`, `tl.exp(a)`,
`tl.dot(a, b)`, `tl.max(a)`, `tl.cumsum(a)` on bfloat16 compute on the bit patterns (Triton's
documentation says the interpreter does not support bfloat16 operations; triton-lang/triton#10945
proposed a fix and was closed). Measured with Triton 3.9: `up * up` on bfloat16 gave 2.5e17 for
0.20, `tl.cumsum` of 16 bfloat16 values was off by 1.2e37, and Liger-Kernel's fused SwiGLU,
`silu(gate).cast(bf16) * up`, wrote NaN for finite inputs. A kernel that is right on a GPU would
then be judged `incorrect` on a CPU machine.

`install()` makes those operations widen bfloat16 operands to float32 and round the result to
bfloat16 (round to nearest even, NaN kept), which is what the GPU computes for one bfloat16
operation. It also rounds float32 -> bfloat16 casts to nearest even as the GPU does (the
interpreter truncates them, and sends float64 through an integer cast). Loads and stores are
right as they are. The executor calls it once, on a CPU machine, before it imports the candidate.
"""

from __future__ import annotations

import numpy as np
import triton.language as tl
from triton.runtime import interpreter

_BITWISE = (np.bitwise_and, np.bitwise_or, np.bitwise_xor, np.left_shift, np.right_shift)


def to_float32(bits) -> np.ndarray:
    """bfloat16 bit patterns (uint16) -> their float32 values."""
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def to_bfloat16(values) -> np.ndarray:
    """float values -> bfloat16 bit patterns (uint16), rounded to nearest even, NaN kept."""
    as32 = np.asarray(values, dtype=np.float32)
    bits = as32.view(np.uint32)
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    return np.where(np.isnan(as32), np.uint16(0x7FC0), rounded)


def _is_bf16(handle) -> bool:
    return getattr(handle.dtype, "scalar", handle.dtype) == tl.bfloat16


def _result(output, tl_dtype) -> interpreter.TensorHandle:
    if np.asarray(output).dtype == np.bool_:
        return interpreter.TensorHandle(output, tl_dtype)
    return interpreter.TensorHandle(to_bfloat16(output), tl.bfloat16)


def _binary_op(original):
    def binary_op(self, lhs, rhs, op):
        if op in _BITWISE or not (_is_bf16(lhs) and _is_bf16(rhs)):
            return original(self, lhs, rhs, op)
        return _result(op(to_float32(lhs.data), to_float32(rhs.data)), lhs.dtype.scalar)
    return binary_op


def _unary_op(original):
    def unary_op(self, arg, op):
        if not _is_bf16(arg):
            return original(self, arg, op)
        return _result(op(to_float32(arg.data)), arg.dtype.scalar)
    return unary_op


def _ternary_op(original):
    def ternary_op(self, lhs, rhs, other, op):
        if op is np.clip and _is_bf16(lhs):
            return _result(np.clip(*(to_float32(h.data) for h in (lhs, rhs, other))), tl.bfloat16)
        return original(self, lhs, rhs, other, op)
    return ternary_op


def _create_fma(original):
    def create_fma(self, x, y, z):
        if not (_is_bf16(x) and _is_bf16(y) and _is_bf16(z)):
            return original(self, x, y, z)
        product = np.multiply(to_float32(x.data), to_float32(y.data), dtype=np.float64)
        return _result(np.add(product, to_float32(z.data), dtype=np.float64), tl.bfloat16)
    return create_fma


def _create_dot(original):
    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if not (_is_bf16(a) or _is_bf16(b)):
            return original(self, a, b, d, input_precision, max_num_imprecise_acc)
        a_data = to_float32(a.data) if _is_bf16(a) else a.data
        b_data = to_float32(b.data) if _is_bf16(b) else b.data
        return interpreter.TensorHandle(np.matmul(a_data, b_data, dtype=d.data.dtype) + d.data,
                                        d.dtype.scalar)
    return create_dot


def _reduce_sum(original):
    def sum(self, input):  # noqa: A001 - the interface's name
        if not _is_bf16(input):
            return original(self, input)
        total = np.sum(to_float32(input.handle.data), axis=self.axis, keepdims=self.keep_dims)
        return self.to_tensor(to_bfloat16(total), input.dtype)
    return sum


def _reduce_min_max(original):
    def min_max(self, input, val_reduce_op, idx_reduce_op=None):
        values = input[0] if isinstance(input, tuple) else input
        if not _is_bf16(values):
            return original(self, input, val_reduce_op, idx_reduce_op)
        data = to_float32(values.handle.data)
        val = idx = None
        if val_reduce_op:
            val = self.to_tensor(to_bfloat16(val_reduce_op(data, axis=self.axis,
                                                            keepdims=self.keep_dims)),
                                 values.dtype)
        if idx_reduce_op:
            idx = self.to_tensor(idx_reduce_op(data, axis=self.axis, keepdims=self.keep_dims),
                                 tl.int32)
        if val is not None and idx is not None:
            return val, idx
        return val if val is not None else idx
    return min_max


def _scan(original, accumulate):
    def scan(self, input):
        if not _is_bf16(input):
            return original(self, input)
        values = accumulate(to_float32(input.handle.data), axis=self.axis)
        return [self.to_tensor(to_bfloat16(values), dtype=input.dtype)]
    return scan


def _to_bf16_cast(src, dst_type) -> interpreter.TensorHandle | None:
    """float32/float64 -> bfloat16, rounded to nearest even; None for any other cast."""
    if dst_type.scalar != tl.bfloat16 or src.dtype.scalar not in (tl.float32, tl.float64):
        return None
    return interpreter.TensorHandle(to_bfloat16(src.data.astype(np.float32)), tl.bfloat16)


def _cast_impl(original):
    def cast_impl(self, src, dst_type):
        cast = _to_bf16_cast(src, dst_type)
        return cast if cast is not None else original(self, src, dst_type)
    return cast_impl


def _create_fp_to_fp(original):
    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        cast = None if rounding_mode == interpreter._ir.ROUNDING_MODE.RTZ else \
            _to_bf16_cast(src, dst_type)
        return cast if cast is not None else original(self, src, dst_type, rounding_mode)
    return create_fp_to_fp


_PATCHES = (
    (interpreter.InterpreterBuilder, "cast_impl", _cast_impl),
    (interpreter.InterpreterBuilder, "create_fp_to_fp", _create_fp_to_fp),
    (interpreter.InterpreterBuilder, "binary_op", _binary_op),
    (interpreter.InterpreterBuilder, "unary_op", _unary_op),
    (interpreter.InterpreterBuilder, "ternary_op", _ternary_op),
    (interpreter.InterpreterBuilder, "create_fma", _create_fma),
    (interpreter.InterpreterBuilder, "create_dot", _create_dot),
    (interpreter.ReduceOps, "sum", _reduce_sum),
    (interpreter.ReduceOps, "min_max", _reduce_min_max),
    (interpreter.ScanOps, "cumsum", lambda original: _scan(original, np.cumsum)),
    (interpreter.ScanOps, "cumprod", lambda original: _scan(original, np.cumprod)),
)


def install() -> None:
    """Once per process; a second call changes nothing."""
    for owner, name, wrap in _PATCHES:
        current = getattr(owner, name)
        if getattr(current, "_atrex_bf16", False):
            continue
        patched = wrap(current)
        patched._atrex_bf16 = True
        setattr(owner, name, patched)

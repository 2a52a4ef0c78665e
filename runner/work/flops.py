"""FLOPs of one aten call, by unit.

- Matmuls and convolutions: torch's own formulas (2 per multiply-add), on tensor cores.
- Attention: 2 (E + Ev) per (query, key) pair actually computed, so causal, sliding-window,
  varlen and explicitly masked attention count only unmasked pairs; plus the softmax of each
  pair on the CUDA cores. The same count on every device: the CPU kernel
  (``_scaled_dot_product_flash_attention_for_cpu``) and the math fallback are counted here too.
- Elementwise ops: FLOPS_PER_ELEMENT per output element (1 for an arithmetic, comparison or
  selection primitive; transcendental functions as in the table), reductions per input element,
  all on the CUDA cores in the dtype of the operation. Copies, casts and integer work count 0.

The table counts the operations of the usual fast GPU implementation of each function (an
``exp`` is a multiply by log2(e) and one hardware ``ex2``); see docs/roofline.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.utils.flop_counter import flop_registry

from .classes import vector_class
from .rules import ALONG_DIM, COPIES, IDENTITY_VIEWS, NO_DEPENDENCE, REDUCTIONS, bind, outputs_of

# FLOPs per output element of elementwise functions beyond the one-per-primitive default.
FLOPS_PER_ELEMENT = {
    "exp": 2, "exp2": 1, "expm1": 3, "log": 2, "log2": 1, "log10": 2, "log1p": 3,
    "sqrt": 1, "rsqrt": 1, "reciprocal": 1, "sin": 2, "cos": 2, "tan": 4, "tanh": 4,
    "sinh": 5, "cosh": 5, "asin": 8, "acos": 8, "atan": 8, "atan2": 9,
    "sigmoid": 4, "silu": 5, "gelu": 9, "erf": 8, "erfc": 8, "erfinv": 12,
    "softplus": 6, "mish": 12, "elu": 4, "selu": 5, "celu": 4, "hardswish": 4,
    "hardsigmoid": 3, "logit": 4, "lerp": 2, "addcmul": 2, "addcdiv": 2, "clamp": 2,
    "hardtanh": 2, "pow": 3, "float_power": 3, "xlogy": 3, "logaddexp": 6, "sgn": 1,
}
# Per input element of reductions; per element along the dim for softmax-like ops.
FLOPS_PER_REDUCED = {
    "var": 3, "std": 3, "var_mean": 3, "std_mean": 3, "linalg_vector_norm": 2, "norm": 2,
    "logsumexp": 5, "_softmax": 6, "_safe_softmax": 6, "softmax": 6, "_log_softmax": 6,
    "log_softmax": 6, "logcumsumexp": 5, "sort": 0, "topk": 0, "argsort": 0, "msort": 0,
    "median": 0, "nanmedian": 0, "kthvalue": 0, "mode": 0, "cummax": 1, "cummin": 1,
}
ZERO = (NO_DEPENDENCE | COPIES | IDENTITY_VIEWS
        | {"copy_", "fill_", "zero_", "_local_scalar_dense", "masked_fill", "masked_fill_",
           "where", "index", "index_select", "gather", "embedding", "index_put_", "index_put",
           "index_copy_", "index_copy", "scatter_", "scatter", "cat", "stack",
           "constant_pad_nd", "slice_scatter", "select_scatter", "repeat", "flip", "roll",
           "tril", "triu", "masked_select", "masked_scatter_", "masked_scatter", "nonzero",
           "bitwise_not", "logical_not", "bitwise_and", "bitwise_or", "logical_and",
           "logical_or", "sign", "signbit", "isnan", "isinf", "isfinite", "view"})
SOFTMAX_PER_PAIR = 6  # max, scale-and-subtract, exp (2), sum: per (query, key) pair
NORM_PER_ELEMENT = {"native_layer_norm": (5, 7), "_fused_rms_norm": (3, 4)}
ATTENTION_OPS = {"_scaled_dot_product_flash_attention_for_cpu",
                 "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
                 "_scaled_dot_product_cudnn_attention", "_flash_attention_forward",
                 "_efficient_attention_forward"}
MATMUL_FALLBACK = {"mv", "addmv", "dot", "vdot", "addbmm", "_grouped_mm", "_int_mm", "addr",
                   "outer", "_scaled_grouped_mm"}


@dataclass(frozen=True)
class Flops:
    op: str
    matrix: float = 0.0  # on tensor cores (class decided by the operator's precision)
    vector: float = 0.0
    vector_class: str | None = None
    rule: str = "formula"


def count(func, args, kwargs, out) -> Flops | None:
    """FLOPs of one aten call, or None when it has none."""
    name = func._overloadpacket.__name__
    if name in ZERO:
        return None
    if name in ATTENTION_OPS:
        return _attention_op(name, bind(func, args, kwargs), out)
    formula = flop_registry.get(func._overloadpacket)
    if formula is not None:
        try:
            matrix = float(formula(*args, **(kwargs or {}), out_val=out))
        except Exception:  # noqa: BLE001 - a formula that cannot read these arguments
            matrix = 0.0
        return Flops(f"aten.{name}", matrix=matrix, vector=_epilogue(name, out),
                     vector_class=_vclass(out, args), rule="torch formula")
    if name in MATMUL_FALLBACK:
        return _matmul_fallback(name, bind(func, args, kwargs), out)
    b = None
    if name in NORM_PER_ELEMENT:
        b = bind(func, args, kwargs)
        x = b["input"]
        plain, affine = NORM_PER_ELEMENT[name]
        has_affine = b.get("weight") is not None or b.get("bias") is not None
        return _vector(name, x.numel() * (affine if has_affine else plain), x.dtype)
    if name in REDUCTIONS or name in ALONG_DIM:
        x = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if x is None:
            return None
        return _vector(name, x.numel() * FLOPS_PER_REDUCED.get(name, 1), x.dtype)
    if torch.Tag.pointwise in func.tags or _inplace_pointwise(func):
        outs = outputs_of(out)
        if not outs:
            return None
        o = outs[0]
        dtype = o.dtype if o.dtype.is_floating_point else _first_float(args)
        if dtype is None:
            return None
        b = b or bind(func, args, kwargs)
        return _vector(name, o.numel() * _per_element(name, b), dtype)
    return None


def _per_element(name: str, b: dict) -> float:
    base = name.rstrip("_")
    if base == "pow":
        exponent = b.get("exponent")
        if isinstance(exponent, int | float):
            return {2: 1, 0.5: 1, -0.5: 1, -1: 1, 3: 2, 1: 0}.get(exponent, 3)
    if base in ("add", "sub", "rsub") and b.get("alpha", 1) not in (1, None):
        return 2
    return FLOPS_PER_ELEMENT.get(base, 1)


def _vector(name: str, flops: float, dtype) -> Flops | None:
    cls = vector_class(dtype) if dtype is not None else None
    if cls is None or not flops:
        return None
    return Flops(f"aten.{name}", vector=float(flops), vector_class=cls, rule="elementwise table")


def _inplace_pointwise(func) -> bool:
    base = getattr(torch.ops.aten, func._overloadpacket.__name__.rstrip("_"), None)
    overload = getattr(base, func._overloadname or "default", None) if base else None
    return overload is not None and torch.Tag.pointwise in overload.tags


def _first_float(args) -> torch.dtype | None:
    for a in args:
        if isinstance(a, torch.Tensor) and a.dtype.is_floating_point:
            return a.dtype
    return None


def _vclass(out, args) -> str | None:
    outs = outputs_of(out)
    dtype = outs[0].dtype if outs and outs[0].dtype.is_floating_point else _first_float(args)
    return vector_class(dtype) if dtype is not None else None


def _epilogue(name: str, out) -> float:
    """The bias add of addmm / baddbmm: one per output element."""
    if name in ("addmm", "baddbmm"):
        outs = outputs_of(out)
        return float(outs[0].numel()) if outs else 0.0
    return 0.0


def _matmul_fallback(name: str, b: dict, out) -> Flops | None:
    o = outputs_of(out)
    if not o:
        return None
    if name in ("mv", "addmv"):
        mat = b.get("mat")
        flops = 2 * mat.shape[0] * mat.shape[1]
    elif name in ("dot", "vdot"):
        flops = 2 * b["self"].numel()
    elif name == "addbmm":
        b1, b2 = b["batch1"], b["batch2"]
        flops = 2 * b1.shape[0] * b1.shape[1] * b1.shape[2] * b2.shape[2]
    elif name in ("addr", "outer"):
        flops = o[0].numel()
    elif name == "_int_mm":
        a, w = b["self"], b["mat2"]
        flops = 2 * a.shape[0] * a.shape[1] * w.shape[1]
    else:  # grouped matmuls: each output element is a K-long dot product
        a = b.get("self", b.get("mat_a"))
        k = a.shape[-1] if a is not None else 0
        flops = 2 * o[0].numel() * k
    return Flops(f"aten.{name}", matrix=float(flops), rule="matmul formula")


# ---- attention ---------------------------------------------------------------------------------


def causal_pairs(q_len: int, k_len: int, bottom_right: bool = False, left: int | None = None,
                 right: int | None = 0) -> int:
    """(query, key) pairs with key j visible to query i: j - i - shift in [-left, right] where
    shift aligns the diagonal top-left (SDPA's is_causal) or bottom-right (FlashAttention with
    fewer queries than keys). left/right None: unbounded on that side."""
    shift = k_len - q_len if bottom_right else 0
    if q_len <= 0 or k_len <= 0:
        return 0
    i = torch.arange(q_len, dtype=torch.long)
    lo = torch.zeros_like(i) if left is None else torch.clamp(i + shift - left, min=0)
    hi = torch.full_like(i, k_len - 1) if right is None else torch.clamp(
        i + shift + right, max=k_len - 1)
    return int(torch.clamp(hi - lo + 1, min=0).sum())


def mask_pairs(mask: torch.Tensor, batch_heads_shape, q_len: int, k_len: int) -> int | None:
    """Unmasked pairs of an explicit mask broadcast to (..., L, S); None when its values are not
    known (meta)."""
    if mask.device.type == "meta":
        return None
    visible = mask if mask.dtype == torch.bool else torch.isfinite(mask) | (mask > 0)
    full = torch.broadcast_shapes(tuple(batch_heads_shape) + (q_len, k_len), visible.shape)
    per = int(visible.sum())
    return per * (math.prod(full) // max(1, visible.numel()))


def sdpa_flops(q, k, v, mask, is_causal: bool) -> tuple[float, float, str]:
    """(tensor-core FLOPs, softmax FLOPs, rule) of one scaled_dot_product_attention call."""
    batch_heads = tuple(q.shape[:-2])
    q_len, k_len = q.shape[-2], k.shape[-2]
    heads_total = math.prod(batch_heads)
    rule = "attention: all pairs"
    if is_causal:
        pairs = heads_total * causal_pairs(q_len, k_len)
        rule = "attention: causal pairs"
    elif isinstance(mask, torch.Tensor):
        counted = mask_pairs(mask, batch_heads, q_len, k_len)
        pairs = counted if counted is not None else heads_total * q_len * k_len
        rule = "attention: unmasked pairs" if counted is not None else rule
    else:
        pairs = heads_total * q_len * k_len
    per_pair = 2 * (q.shape[-1] + v.shape[-1])
    return float(pairs * per_pair), float(pairs * SOFTMAX_PER_PAIR), rule


def _attention_op(name: str, b: dict, out) -> Flops:
    q, k, v = b["query"], b["key"], b["value"]
    if name in ("_flash_attention_forward", "_efficient_attention_forward"):
        return _varlen_attention(name, b)
    mask = b.get("attn_mask", b.get("attn_bias"))
    matrix, vector, rule = sdpa_flops(q, k, v, mask, bool(b.get("is_causal")))
    return Flops(f"aten.{name}", matrix=matrix, vector=vector,
                 vector_class=vector_class(q.dtype), rule=rule)


def _varlen_attention(name: str, b: dict) -> Flops:
    """FlashAttention / memory-efficient attention on (total tokens, heads, dim) with cumulative
    sequence lengths, causal (bottom-right) and sliding windows."""
    q, k, v = b["query"], b["key"], b["value"]
    cu_q = b.get("cum_seq_q", b.get("cu_seqlens_q"))
    cu_k = b.get("cum_seq_k", b.get("cu_seqlens_k"))
    if name == "_flash_attention_forward":
        causal = bool(b.get("is_causal"))
        left, right = b.get("window_size_left"), b.get("window_size_right")
        bottom_right = True
    else:
        mask_type = int(b.get("custom_mask_type") or 0)
        causal, bottom_right = mask_type in (1, 2), mask_type == 2
        window = b.get("window_size")
        left, right = (window, 0) if window else (None, None)
    if left is not None and left < 0:
        left = None
    if right is not None and right < 0:
        right = None
    if causal:
        right = 0 if right is None else min(right, 0)
    if isinstance(cu_q, torch.Tensor) and cu_q.device.type != "meta":
        q_lens = (cu_q[1:] - cu_q[:-1]).tolist()
        k_lens = (cu_k[1:] - cu_k[:-1]).tolist()
        heads = q.shape[-2]
        batch = [(a, c) for a, c in zip(q_lens, k_lens, strict=True)]
    else:
        heads = q.shape[-2] * (q.shape[0] if q.dim() == 4 else 1)
        batch = [(q.shape[-3], k.shape[-3])]
    limited = causal or left is not None or right is not None
    pairs = sum(causal_pairs(a, c, bottom_right, left, right) if limited else a * c
                for a, c in batch) * heads
    per_pair = 2 * (q.shape[-1] + v.shape[-1])
    rule = "attention: varlen " + ("masked pairs" if limited else "pairs")
    return Flops(f"aten.{name}", matrix=float(pairs * per_pair),
                 vector=float(pairs * SOFTMAX_PER_PAIR), vector_class=vector_class(q.dtype),
                 rule=rule)

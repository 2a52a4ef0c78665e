"""Dtype names as they appear in metadata.json and atrex.toml, mapped to torch's names."""

from __future__ import annotations

_ALIASES = {
    "bf16": "bfloat16", "bfloat16": "bfloat16",
    "fp16": "float16", "float16": "float16", "half": "float16",
    "fp32": "float32", "float32": "float32", "float": "float32",
    "fp64": "float64", "float64": "float64", "double": "float64",
    "fp8": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn", "float8_e4m3fn": "float8_e4m3fn",
    "e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2", "float8_e5m2": "float8_e5m2",
    "e5m2": "float8_e5m2",
    "fp8_e4m3fnuz": "float8_e4m3fnuz", "e4m3fnuz": "float8_e4m3fnuz",
    "fp8_e5m2fnuz": "float8_e5m2fnuz", "e5m2fnuz": "float8_e5m2fnuz",
    "fp8_e8m0": "float8_e8m0fnu", "e8m0": "float8_e8m0fnu",
    "fp4": "float4_e2m1fn_x2", "fp4_e2m1": "float4_e2m1fn_x2", "float4_e2m1": "float4_e2m1fn_x2",
    "int8": "int8", "uint8": "uint8", "int16": "int16", "int32": "int32", "int64": "int64",
    "bool": "bool",
}

# Metadata may describe an op's dtype as a conversion ("fp8->bf16") or a mix.
_COMPOSITE_SEPARATORS = ("->", "/", ",", "+")


def canonical_dtype(name: str) -> str | None:
    """torch's name for a dtype written in metadata or config, or None when unknown: the short
    names above, and every dtype this torch has under its own name (`float8_e4m3fnuz`,
    `complex64`, `uint16`, ...)."""
    text = str(name).strip().lower().removeprefix("torch.")
    return _ALIASES.get(text) or _torch_dtype_name(text)


def _torch_dtype_name(text: str) -> str | None:
    if not text.isidentifier():
        return None
    import torch  # only for names the table does not know: `atrex --help` stays fast

    value = getattr(torch, text, None)
    return str(value).removeprefix("torch.") if isinstance(value, torch.dtype) else None


def is_known_dtype_spec(spec: str) -> bool:
    """True for a single dtype name, 'mixed', or a composite like 'fp8->bf16'."""
    text = str(spec).strip().lower()
    if text == "mixed":
        return True
    parts = [text]
    for sep in _COMPOSITE_SEPARATORS:
        parts = [p for part in parts for p in part.split(sep)]
    return all(canonical_dtype(p) is not None for p in parts if p.strip())


def peak_class(torch_dtype_name: str) -> str:
    """Which peak-table entry bounds arithmetic in this dtype."""
    name = torch_dtype_name.replace("torch.", "")
    if name in ("bfloat16", "float16"):
        return "bf16"
    if name.startswith("float8"):
        return "fp8"
    if name in ("int8", "uint8"):
        return "int8"
    if name == "float64":
        return "fp64"
    return "fp32"

"""Work classes and the roofline floor they imply.

FLOPs are counted per *class*, the row of the peak table that bounds them:

- tensor-core classes ``fp8``, ``int8``, ``bf16`` (bf16 and fp16), ``tf32``, ``fp64``: matmuls,
  convolutions and attention, rated at the operator's input precision;
- CUDA-core classes ``fp32`` (fp32 matmuls without TF32) and ``<dtype>_vector`` (elementwise,
  reduction and normalization arithmetic, rated at the dtype the reference computes in).

The two units run side by side (an attention kernel overlaps its softmax with its matmuls), so
the compute floor is the slower unit, and the classes that share a unit add up:

    T_SOL = max( max_unit sum_{d in unit} W_d / P_d ,  Q / B )
"""

from __future__ import annotations

TENSOR_CORE = "tensor cores"
CUDA_CORE = "CUDA cores"

VECTOR_SUFFIX = "_vector"


def unit(cls: str) -> str:
    return CUDA_CORE if cls == "fp32" or cls.endswith(VECTOR_SUFFIX) else TENSOR_CORE


def vector_class(dtype) -> str | None:
    """The CUDA-core class of elementwise arithmetic in a torch dtype (None: not floating
    point)."""
    import torch

    if dtype == torch.bfloat16:
        return "bf16_vector"
    if dtype == torch.float16 or str(dtype).startswith("torch.float8"):
        return "fp16_vector"  # fp8 values are converted to half precision to compute on
    if dtype == torch.float64:
        return "fp64_vector"
    if dtype == torch.float32 or dtype.is_complex:
        return "fp32_vector"
    return None


def rate_tflops(tflops: dict[str, float], cls: str) -> float:
    """The peak of a class; a table without a CUDA-core row for a dtype falls back to its fp32
    CUDA-core rate, one without a tensor-core row to bf16."""
    rate = tflops.get(cls)
    if not rate and unit(cls) == CUDA_CORE:
        rate = tflops.get("fp32_vector") or tflops.get("fp32")
    if not rate:
        rate = tflops.get("bf16")
    if not rate:
        raise ValueError(f"no peak rate for {cls!r}")
    return rate


def compute_ms(flops: dict[str, float], tflops: dict[str, float]) -> float:
    per_unit: dict[str, float] = {}
    for cls, count in flops.items():
        if count:
            per_unit[unit(cls)] = per_unit.get(unit(cls), 0.0) + count / rate_tflops(tflops, cls)
    return max(per_unit.values(), default=0.0) / 1e9


def memory_ms(nbytes: float, bandwidth_tbps: float) -> float:
    return nbytes / (bandwidth_tbps * 1e9)


def sol_ms(flops: dict[str, float], nbytes: float, tflops: dict[str, float],
           bandwidth_tbps: float) -> float:
    return max(compute_ms(flops, tflops), memory_ms(nbytes, bandwidth_tbps))


def hard_floor_ms(flops: dict[str, float], nbytes: float, tflops: dict[str, float],
                  bandwidth_tbps: float) -> float:
    """The part of the floor no kernel can go below: the bytes, and the tensor-core FLOPs at
    their class's rate. CUDA-core work is left out: what the reference writes as elementwise
    multiply-and-sum a kernel may run as matmuls (a chunked delta rule does), and the
    elementwise table counts one way of computing a function, not the only one."""
    tensor = {c: n for c, n in flops.items() if unit(c) == TENSOR_CORE}
    return max(compute_ms(tensor, tflops), memory_ms(nbytes, bandwidth_tbps))


def bound(flops: dict[str, float], nbytes: float, tflops: dict[str, float],
          bandwidth_tbps: float) -> str:
    return ("compute" if compute_ms(flops, tflops) > memory_ms(nbytes, bandwidth_tbps)
            else "memory")

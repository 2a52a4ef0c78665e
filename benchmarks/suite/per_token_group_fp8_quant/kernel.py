"""Per-token-group FP8 (e4m3) quantization with 1 x 128 scales, one streaming Triton kernel.

Memory-bound: 2 bytes read, 1 byte + 4/128 bytes written per element. The input is viewed as rows
of one group each ([M * K/G, G], contiguous 256-byte rows), so
- a program takes BLOCK_G whole groups: the amax is a register reduction over each row, no second
  pass and no cross-program traffic; 32 groups x 128 = 4096 elements per program = 32 bf16 per
  thread at 4 warps (four 16-byte loads in flight per thread);
- the scale is one fp32 division per group; elements are multiplied by its reciprocal (as the
  SGLang/vLLM CUDA kernels do), the result differs from x / scale by at most one fp8 step at
  rounding ties, inside the fp8 tolerance;
- the fp8 store is 1 byte per element, 128 contiguous bytes per group, and the scales of a program
  are 32 contiguous floats.

The Triton interpreter (CPU) rounds float32 -> float8e4nv wrongly when the rounding carries into
the exponent (e.g. 124.0 -> 64.0 instead of 128.0, seen with Triton 3.9), so under
TRITON_INTERPRET=1 the kernel rounds to the e4m3 grid itself (exact round-to-nearest-even with bit
arithmetic) before the cast; on the GPU the hardware conversion (cvt.rn.satfinite) does it.
"""

import os

import torch
import triton
import triton.language as tl

FP8_MAX = 448.0
EPS = 1e-10
# Launch constants (module level so the agent's autotuner can search them; to be measured on H200).
GROUPS_PER_PROGRAM = 32  # 32 groups x 128 = 4096 elements: 32 bf16 per thread at 4 warps
NUM_WARPS = 4
# PROGRAMS_PER_SM > 0 makes the grid persistent (that many programs per SM, each
# walking blocks of groups a grid apart) with the loop software-pipelined over LOOP_STAGES, so
# the next block's loads are in flight while this one is scaled and stored, and there is no
# partial last wave (m4096-k7168: 7168 programs of 32 groups). 0: one program per block.
# Level on an H100 (results/h100-34d8498/small-2): 32.3-32.5 us a call in a graph for every
# persistent variant (4-16 per SM, 2-3 stages) and 32.5 for one program per block. Not timed on
# the H200.
PROGRAMS_PER_SM = 0
LOOP_STAGES = 2
# STREAM_STORES: the fp8 values and scales stored with L2's evict_first policy (30 MB that this
# kernel never reads back, streamed past the 58 MB still being read). Untimed; off until a
# sweep says otherwise.
STREAM_STORES = False


@triton.jit
def _round_to_e4m3(x):
    """x (fp32, within +-448) rounded to nearest-even on the float8_e4m3fn grid, as fp32."""
    bits = x.to(tl.int32, bitcast=True)
    e = tl.maximum((bits >> 23) & 0xFF, 121)  # e4m3 normals start at 2^-6; below: spacing 2^-9
    ulp = ((e - 3) << 23).to(tl.float32, bitcast=True)  # 3 mantissa bits
    inv_ulp = ((257 - e) << 23).to(tl.float32, bitcast=True)
    q = ((x * inv_ulp + 12582912.0) - 12582912.0) * ulp  # +-1.5*2^23 rounds to nearest even
    return (q.to(tl.int32, bitcast=True) | (bits & -2147483648)).to(tl.float32, bitcast=True)


@triton.jit
def _group_quant_fp8_kernel(x_ptr, q_ptr, s_ptr, n_groups, eps,
                            GROUP: tl.constexpr, BLOCK_G: tl.constexpr, FP8_MAX: tl.constexpr,
                            EMULATE_CAST: tl.constexpr, PERSISTENT: tl.constexpr,
                            STAGES: tl.constexpr, STREAM: tl.constexpr):
    if PERSISTENT:
        for block in tl.range(tl.program_id(0), tl.cdiv(n_groups, BLOCK_G), tl.num_programs(0),
                              num_stages=STAGES):
            _quant_groups(block, x_ptr, q_ptr, s_ptr, n_groups, eps, GROUP, BLOCK_G, FP8_MAX,
                          EMULATE_CAST, STREAM)
    else:
        _quant_groups(tl.program_id(0), x_ptr, q_ptr, s_ptr, n_groups, eps, GROUP, BLOCK_G,
                      FP8_MAX, EMULATE_CAST, STREAM)


@triton.jit
def _quant_groups(block, x_ptr, q_ptr, s_ptr, n_groups, eps, GROUP: tl.constexpr,
                  BLOCK_G: tl.constexpr, FP8_MAX: tl.constexpr, EMULATE_CAST: tl.constexpr,
                  STREAM: tl.constexpr):
    """Groups [block * BLOCK_G, +BLOCK_G): amax, scale and the fp8 values, from one read."""
    groups = block * BLOCK_G + tl.arange(0, BLOCK_G)
    cols = tl.arange(0, GROUP)
    gmask = groups < n_groups
    offs = groups.to(tl.int64)[:, None] * GROUP + cols[None, :]
    x = tl.load(x_ptr + offs, mask=gmask[:, None], other=0.0,
                eviction_policy="evict_first").to(tl.float32)
    amax = tl.max(tl.abs(x), axis=1)
    scale = tl.maximum(amax, eps) / FP8_MAX
    inv_scale = 1.0 / scale
    y = x * inv_scale[:, None]
    y = tl.minimum(tl.maximum(y, -FP8_MAX), FP8_MAX)
    if EMULATE_CAST:
        y = _round_to_e4m3(y)
    policy: tl.constexpr = "evict_first" if STREAM else ""
    tl.store(q_ptr + offs, y.to(q_ptr.dtype.element_ty), mask=gmask[:, None],
             eviction_policy=policy)
    tl.store(s_ptr + groups, scale, mask=gmask, eviction_policy=policy)


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 2  # CPU tests: several blocks per program


def per_token_group_quant_fp8(x: torch.Tensor, group_size: int = 128):
    if x.dim() != 2:
        raise ValueError(f"expected a 2D [tokens, hidden] tensor, got {tuple(x.shape)}")
    m, k = x.shape
    if k % group_size or group_size & (group_size - 1):
        raise ValueError(f"hidden size {k} must be a multiple of the power-of-two group "
                         f"{group_size}")
    x = x.contiguous()
    q = torch.empty((m, k), dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty((m, k // group_size), dtype=torch.float32, device=x.device)
    n_groups = m * (k // group_size)
    if n_groups:
        block_g = GROUPS_PER_PROGRAM
        blocks = triton.cdiv(n_groups, block_g)
        persistent = PROGRAMS_PER_SM > 0
        grid = (min(blocks, _num_sms(x.device) * PROGRAMS_PER_SM) if persistent else blocks,)
        _group_quant_fp8_kernel[grid](
            x, q, scale, n_groups, EPS, GROUP=group_size, BLOCK_G=block_g, FP8_MAX=FP8_MAX,
            EMULATE_CAST=os.environ.get("TRITON_INTERPRET") == "1", PERSISTENT=persistent,
            STAGES=LOOP_STAGES, STREAM=STREAM_STORES, num_warps=NUM_WARPS)
    return q, scale


class Model(torch.nn.Module):
    def __init__(self, group_size: int = 128) -> None:
        super().__init__()
        self.group_size = int(group_size)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return per_token_group_quant_fp8(x, self.group_size)

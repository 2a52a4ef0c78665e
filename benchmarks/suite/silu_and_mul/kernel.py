"""SiLU-and-mul (vLLM convention: first half gate, second half up) as one streaming Triton kernel.

Memory-bound: 4 bytes read and 2 written per output element, no reuse. What matters:
- 1D grid over (row, column block): every program moves a contiguous 2 x BLOCK-wide bf16 stripe, so
  each thread issues 16-byte vector loads (BLOCK / (32 * num_warps) = 16 elements = 2 x 16 B per
  operand) and there are enough programs to fill all SMs even at 64 tokens.
- fp32 math (sigmoid via exp2), a single rounding to bf16 on the store.
- no torch compute in forward: only the output allocation.
"""

import torch
import triton
import triton.language as tl

# Launch constants (module level so the agent's autotuner can search them; to be measured on H200).
# Measured on the H200 (benchmarks/results/h200-small-ops, a CUDA-graph replay of 32 calls):
# decode-t64 2.73 us per call at 2048 columns / 8 warps / PDL, 2.95 at 4 warps, 3.24 without PDL;
# prefill-t8192 160.0 us at 2048 / 8 (the grid's best and worst differ by 1%).
BLOCK_COLS = 2048  # output columns per program: 8 bf16 per thread at 8 warps
MAX_WARPS = 8
PDL = True  # programmatic dependent launch on sm_90+ (see _use_pdl)


@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, d, stride_x, stride_out, num_col_blocks,
                         BLOCK: tl.constexpr, USE_PDL: tl.constexpr):
    if USE_PDL:
        # launched before the previous kernel finished: wait until its writes are visible
        tl.extra.cuda.gdc_wait()
    pid = tl.program_id(0)
    row = pid // num_col_blocks
    cols = (pid % num_col_blocks) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < d
    row_x = x_ptr + row.to(tl.int64) * stride_x
    gate = tl.load(row_x + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(row_x + d + cols, mask=mask, other=0.0).to(tl.float32)
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()  # the next kernel may start its launch now
    # silu(g) = g * sigmoid(g) = g / (1 + exp(-g)); exp2 maps to one MUFU instruction.
    act = gate / (1.0 + tl.exp2(-gate * 1.4426950408889634)) * up
    tl.store(out_ptr + row.to(tl.int64) * stride_out + cols,
             act.to(out_ptr.dtype.element_ty), mask=mask)


def _use_pdl(device: torch.device) -> bool:
    """Programmatic dependent launch (Hopper): the kernel is scheduled while the one before it
    is still running and waits (griddepcontrol.wait) before its first load, so the launch
    latency overlaps the previous kernel's tail instead of following it."""
    return PDL and device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    if x.shape[-1] % 2:
        raise ValueError(f"last dimension {x.shape[-1]} must be even (gate | up)")
    d = x.shape[-1] // 2
    x2 = x.reshape(-1, x.shape[-1])
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    out = torch.empty((x2.shape[0], d), dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out.view(*x.shape[:-1], d)
    block = min(BLOCK_COLS, triton.next_power_of_2(d))
    num_warps = max(1, min(MAX_WARPS, block // 256))
    num_col_blocks = triton.cdiv(d, block)
    grid = (x2.shape[0] * num_col_blocks,)
    pdl = _use_pdl(x.device)
    _silu_and_mul_kernel[grid](x2, out, d, x2.stride(0), out.stride(0), num_col_blocks,
                               BLOCK=block, num_warps=num_warps, USE_PDL=pdl, launch_pdl=pdl)
    return out.view(*x.shape[:-1], d)


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return silu_and_mul(x)

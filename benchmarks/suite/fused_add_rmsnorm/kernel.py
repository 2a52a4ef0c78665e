"""Fused residual add + RMSNorm in one pass over the activations.

Memory-bound (read x, residual; write out, residual_out; 8 bytes per element, weight from cache).
- One program owns whole rows, so the sum of squares is a register reduction (no second pass, no
  atomics); the row is loaded once, kept in registers, and both outputs are stored from there.
- For H=4096 a program takes one row with 8 warps: 16 bf16 per thread = two 16-byte vector loads
  per operand, and 8 programs per SM keep ~128 KB in flight per SM (Little's law needs ~40 KB at
  4.8 TB/s). Small H packs several rows per program so short rows still use wide vectors.
- x and residual are streamed once: `evict_first` keeps the 8 KB weight resident in L2/L1.
- vLLM semantics: the sum is rounded to the activation dtype (that is the stored residual) and
  the statistics and the output are computed in fp32 from the rounded value.
"""

import torch
import triton
import triton.language as tl

# Launch constants (module level so the agent's autotuner can search them; to be measured on H200).
TILE_ELEMS = 4096  # elements per program: one row at H=4096, several rows for small H
MAX_ROWS = 16
NUM_WARPS = 8  # for full tiles; smaller tiles use half
# H200 (benchmarks/results/h200-small-ops): decode-t64 2.03 us per call in a graph with PDL, 2.71
# without; prefill-t8192 68.6 us, and no tile (1-4 rows) or warp count (4-16) of the sweep moved it
# by more than 0.5%.
PDL = True  # programmatic dependent launch on sm_90+ (see _use_pdl)
# A persistent grid (2-8 programs per SM walking row tiles, the row loop software-pipelined over
# 2-3 stages) lost on an H100 (results/h100-34d8498/small-2): decode-t64 2.76 us a call in a graph
# against 1.98 with one program per row tile, prefill-t8192 90.7 against 89.3. Removed.
# STREAM_STORES: both results stored with L2's evict_first policy. They are 134 MB at prefill-t8192
# (the L2 holds 50 MB) and nothing here reads them again, so they need not displace the weight
# and the lines still being read. Untimed (prefill-t8192 trails torch.compile by 3% on the H200
# with no launch constant explaining it); off until a sweep says otherwise.
STREAM_STORES = False
# TWO_PASS_BLOCK > 0: one row a program in column chunks of that many elements, the structure of
# the torch.compile kernel that leads by 3% on the H200 (68.8 against 66.7 us; ncu on an H100,
# results/h100-d09cac2/ncu-small: Inductor's looped reduction, 512 threads, 25 registers, 100%
# occupancy, 33% L1 hits where kb's single pass has 19%). The first pass stores the rounded sum
# and accumulates its squares; the second reloads x and residual, which this program read a
# moment before (L1/L2 hits), and stores the output. On the H100 the two kernels were level
# (88.4 against 89.5 us), so only the H200 can say; off until it does.
TWO_PASS_BLOCK = 0


@triton.jit
def _fused_add_rmsnorm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr,
                              n_rows, n_cols, stride_x, stride_res, stride_out, stride_res_out,
                              eps, ROWS: tl.constexpr, BLOCK: tl.constexpr,
                              USE_PDL: tl.constexpr, STREAM: tl.constexpr):
    if USE_PDL:
        # launched before the previous kernel finished: wait until its writes are visible
        tl.extra.cuda.gdc_wait()
    _norm_rows(tl.program_id(0), x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr, n_rows, n_cols,
               stride_x, stride_res, stride_out, stride_res_out, eps, ROWS, BLOCK, USE_PDL, STREAM)


@triton.jit
def _norm_rows(tile, x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr, n_rows, n_cols, stride_x,
               stride_res, stride_out, stride_res_out, eps, ROWS: tl.constexpr,
               BLOCK: tl.constexpr, LAUNCH_DEPENDENTS: tl.constexpr, STREAM: tl.constexpr):
    """Rows [tile * ROWS, +ROWS): one read of x and residual, both results stored from registers."""
    rows = tile * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    row_mask = rows < n_rows
    col_mask = cols < n_cols
    mask = row_mask[:, None] & col_mask[None, :]
    rows64 = rows.to(tl.int64)[:, None]
    x = tl.load(x_ptr + rows64 * stride_x + cols[None, :], mask=mask, other=0.0,
                eviction_policy="evict_first").to(tl.float32)
    r = tl.load(res_ptr + rows64 * stride_res + cols[None, :], mask=mask, other=0.0,
                eviction_policy="evict_first").to(tl.float32)
    # issued with x and r, not after the reduction: at decode size the kernel is a chain of
    # memory latencies, and this one then overlaps theirs
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    if LAUNCH_DEPENDENTS:
        tl.extra.cuda.gdc_launch_dependents()  # the next kernel may start its launch now
    h_stored = (x + r).to(res_out_ptr.dtype.element_ty)
    policy: tl.constexpr = "evict_first" if STREAM else ""
    tl.store(res_out_ptr + rows64 * stride_res_out + cols[None, :], h_stored, mask=mask,
             eviction_policy=policy)
    h = h_stored.to(tl.float32)
    inv_rms = 1.0 / tl.sqrt(tl.sum(h * h, axis=1) / n_cols + eps)
    y = h * inv_rms[:, None] * w[None, :]
    tl.store(out_ptr + rows64 * stride_out + cols[None, :], y.to(out_ptr.dtype.element_ty),
             mask=mask, eviction_policy=policy)


@triton.jit
def _fused_add_rmsnorm_two_pass_kernel(x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr, n_cols,
                                       stride_x, stride_res, stride_out, stride_res_out, eps,
                                       BLOCK: tl.constexpr, USE_PDL: tl.constexpr):
    """TWO_PASS_BLOCK: row program_id(0) in chunks of BLOCK columns, read twice."""
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
    row = tl.program_id(0).to(tl.int64)
    x_row, r_row = x_ptr + row * stride_x, res_ptr + row * stride_res
    squares = tl.zeros([BLOCK], dtype=tl.float32)
    for start in tl.range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0, eviction_policy="evict_last")
        r = tl.load(r_row + cols, mask=mask, other=0.0, eviction_policy="evict_last")
        h = (x.to(tl.float32) + r.to(tl.float32)).to(res_out_ptr.dtype.element_ty)
        tl.store(res_out_ptr + row * stride_res_out + cols, h, mask=mask)
        squares += h.to(tl.float32) * h.to(tl.float32)
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()
    inv_rms = 1.0 / tl.sqrt(tl.sum(squares, axis=0) / n_cols + eps)
    for start in tl.range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0, eviction_policy="evict_first")
        r = tl.load(r_row + cols, mask=mask, other=0.0, eviction_policy="evict_first")
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        h = (x.to(tl.float32) + r.to(tl.float32)).to(res_out_ptr.dtype.element_ty)
        y = h.to(tl.float32) * inv_rms * w
        tl.store(out_ptr + row * stride_out + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def _use_pdl(device: torch.device) -> bool:
    """Programmatic dependent launch (Hopper): the kernel is scheduled while the one before it
    is still running and waits (griddepcontrol.wait) before its first load, so the launch
    latency overlaps the previous kernel's tail instead of following it."""
    return PDL and device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9


def fused_add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                      eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    if x.shape != residual.shape:
        raise ValueError(f"x {tuple(x.shape)} and residual {tuple(residual.shape)} differ")
    if x.shape[-1] != weight.shape[0]:
        raise ValueError(f"hidden size {x.shape[-1]} != weight size {weight.shape[0]}")
    n_cols = x.shape[-1]
    x2 = x.reshape(-1, n_cols)
    r2 = residual.reshape(-1, n_cols)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    if r2.stride(-1) != 1:
        r2 = r2.contiguous()
    n_rows = x2.shape[0]
    out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    res_out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    if n_rows:
        _launch(x2, r2, weight, out, res_out, eps)
    return out.view(x.shape), res_out.view(x.shape)


def _launch(x2, r2, weight, out, res_out, eps: float) -> None:
    n_rows, n_cols = x2.shape
    block = triton.next_power_of_2(n_cols)
    if block > 16384:
        raise ValueError(f"hidden size {n_cols} is larger than one program holds")
    pdl = _use_pdl(x2.device)
    strides = (x2.stride(0), r2.stride(0), out.stride(0), res_out.stride(0))
    if TWO_PASS_BLOCK > 0:
        _fused_add_rmsnorm_two_pass_kernel[(n_rows,)](
            x2, r2, weight, out, res_out, n_cols, *strides, eps,
            BLOCK=min(TWO_PASS_BLOCK, block), USE_PDL=pdl, num_warps=NUM_WARPS, launch_pdl=pdl)
        return
    rows = max(1, min(MAX_ROWS, TILE_ELEMS // block))
    num_warps = NUM_WARPS if rows * block >= TILE_ELEMS else max(1, NUM_WARPS // 2)
    _fused_add_rmsnorm_kernel[(triton.cdiv(n_rows, rows),)](
        x2, r2, weight, out, res_out, n_rows, n_cols, *strides, eps, ROWS=rows, BLOCK=block,
        num_warps=num_warps, USE_PDL=pdl, STREAM=STREAM_STORES, launch_pdl=pdl)


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = float(eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor,
                weight: torch.Tensor) -> dict[str, torch.Tensor]:
        out, residual_out = fused_add_rmsnorm(x, residual, weight, self.eps)
        return {"out": out, "residual": residual_out}

"""Causal GQA prefill attention over packed variable-length sequences (FlashAttention-2 forward,
written for Hopper).

Compute-bound (4 x 2048 tokens, 32 heads: ~137 GFLOP on the causal pairs), so the goal is tensor-
core throughput with the causal half skipped:
- grid (query heads x sequences, query blocks) with the query blocks in reverse order: the
  diagonal's longest rows are dispatched first and the short ones fill the tail (longest-first;
  a block's work grows with its index), and programs whose block starts past their sequence's
  end exit at once;
- per program a [BLOCK_M, D] query tile is loaded once (with TMA the QK wgmma reads it from
  shared memory); the key loop runs in two phases: blocks strictly left of the diagonal without
  any mask, then the diagonal blocks with the causal mask, so no work is spent on blocks above
  the diagonal (ONE_LOOP: one loop, every block masked);
- online softmax in fp32 with exp2: the scale * log2 e multiply is folded into the subtraction of
  the running max (one FMA per score), P cast to bf16 for the PV product, one normalization at
  the end; GQA by indexing kv head h // group;
- USE_TMA: tiles move through tensor descriptors made on the device, their row bound the
  sequence's end, so the copy engine pads rows past it with zeros and the output store stops at
  it (no masks, no per-element addresses); otherwise pointer loads with masks.
Launch constants are module level; the values below were chosen by benchmarks/attention_h200.py.
Measured: ~0.41 of the datasheet bf16 peak; see NOTES.md for what bounds it.
"""

import math
import os

import torch
import triton
import triton.language as tl

# Triton's CPU interpreter (3.9) multiplies bf16 tl.dot operands as their raw uint16 bit patterns;
# under TRITON_INTERPRET=1 the operands are widened to fp32 first (exact: bf16 products fit fp32).
_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"

# Launch constants (module level so the agent's autotuner can search them). Chosen by
# benchmarks/attention_h200.py on the H200 (results/h200-attention/sweep-*), 4x2048 causal:
# 340.5 us (404 TFLOP/s). The same tiles without descriptors 542.9 us; 8 warps (two warpgroups
# of 64 rows) 376-429 us; BLOCK_N 128 with 4 warps 864-917 us (spills); BLOCK_M 256 with
# 8 warps 383 us; 3-4 stages 455-458 us. Warp specialization does not compile on Hopper with
# Triton 3.6 (NVGPUWarpSpecialization pass failure), so it stays off.
BLOCK_M = 128  # query rows per program (a multiple of BLOCK_N: the diagonal phase needs it)
BLOCK_N = 64  # keys per step
NUM_WARPS = 4
NUM_STAGES = 2
USE_TMA = True  # device-side tensor descriptors for q, k, v and out
WARP_SPECIALIZE = False  # tl.range(warp_specialize=...) on the key loop
# ONE_LOOP: every key block in one loop, each masked. Under the device's Triton 3.6
# the two loops spill (ptxas, sm_90a: 255 registers, 68 bytes; about a dozen local loads and
# stores per diagonal-block iteration, one per main-loop iteration); one loop spills 12 bytes,
# stored before it and reloaded after it, for a compare and select per score element in every
# iteration (Triton 3.9 spills in neither). Lost on an H100 (results/h100-34d8498/sweeps/prefill):
# 345.4 against 341.9 us.
ONE_LOOP = False
# Measured on the H100 and lost, so removed (results/h100-sweeps-9845867/prefill): the next key
# block's scores issued before this block's softmax (PIPELINE_QK), 481.5-576.1 us against 342.9.
# Conditional rescaling (FlashAttention-4's: the accumulator rescaled only when a row's max grows
# by more than 8 in log2 units, decided per program by one scalar max over the rows) lost on an
# H100 too (results/h100-7402845/attention): 432.6 us against 342.1, 685.8 with 3 stages.


@triton.jit
def _mma(a, b, acc, INTERPRET: tl.constexpr):
    if INTERPRET:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b, acc)


@triton.jit
def _load_rows(ptr, desc, row0, col0, rows, bound, stride, TMA: tl.constexpr,
               ROWS: tl.constexpr, HEAD: tl.constexpr):
    """A [ROWS, HEAD] tile starting at token row0 (column offset col0 in the head dimension)."""
    if TMA:
        tile = desc.load([row0, col0])
    else:
        d = tl.arange(0, HEAD)
        r = rows + tl.arange(0, ROWS)
        tile = tl.load(ptr + (row0 + tl.arange(0, ROWS)).to(tl.int64)[:, None] * stride
                       + col0 + d[None, :], mask=(r < bound)[:, None], other=0.0)
    return tile


@triton.jit
def _step(acc, m_i, l_i, q, k_ptr, v_ptr, k_desc, v_desc, seq_start, kv_col, stride_kt,
          stride_vt, n0, rows, length, qk_scale, HEAD: tl.constexpr, BLOCK_N: tl.constexpr,
          CAUSAL: tl.constexpr, TMA: tl.constexpr, INTERPRET: tl.constexpr):
    """One key block of the online softmax: scores, running max and sum, PV accumulation."""
    k = _load_rows(k_ptr, k_desc, seq_start + n0, kv_col, n0, length, stride_kt, TMA, BLOCK_N,
                   HEAD)
    s = _mma(q, tl.trans(k), tl.zeros([q.shape[0], BLOCK_N], tl.float32), INTERPRET)
    if CAUSAL:
        cols = n0 + tl.arange(0, BLOCK_N)
        s = tl.where(cols[None, :] <= rows[:, None], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1) * qk_scale)
    p = tl.exp2(s * qk_scale - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, axis=1)
    v = _load_rows(v_ptr, v_desc, seq_start + n0, kv_col, n0, length, stride_vt, TMA, BLOCK_N,
                   HEAD)
    acc = _mma(p.to(v.dtype), v, acc * alpha[:, None], INTERPRET)
    return acc, m_new, l_i


@triton.jit
def _attend(acc, m_i, l_i, q, k_ptr, v_ptr, k_desc, v_desc, seq_start, kv_col, stride_kt,
            stride_vt, n_lo, n_hi, rows, length, qk_scale, HEAD: tl.constexpr,
            BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, TMA: tl.constexpr, WS: tl.constexpr,
            STAGES: tl.constexpr, INTERPRET: tl.constexpr):
    if WS:  # a separate loop: warp_specialize is only passed where it is asked for
        for n0 in tl.range(n_lo, n_hi, BLOCK_N, num_stages=STAGES, warp_specialize=True):
            acc, m_i, l_i = _step(acc, m_i, l_i, q, k_ptr, v_ptr, k_desc, v_desc, seq_start,
                                  kv_col, stride_kt, stride_vt, n0, rows, length, qk_scale, HEAD,
                                  BLOCK_N, CAUSAL, TMA, INTERPRET)
    else:
        for n0 in tl.range(n_lo, n_hi, BLOCK_N, num_stages=STAGES):
            acc, m_i, l_i = _step(acc, m_i, l_i, q, k_ptr, v_ptr, k_desc, v_desc, seq_start,
                                  kv_col, stride_kt, stride_vt, n0, rows, length, qk_scale, HEAD,
                                  BLOCK_N, CAUSAL, TMA, INTERPRET)
    return acc, m_i, l_i


@triton.jit
def _prefill_attention_kernel(q_ptr, k_ptr, v_ptr, cu_ptr, out_ptr, qk_scale, n_mblocks,
                              stride_qt, stride_kt, stride_vt, stride_ot,
                              Q_WIDTH: tl.constexpr, KV_WIDTH: tl.constexpr,
                              GROUP: tl.constexpr, BATCH: tl.constexpr, HEAD: tl.constexpr,
                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TMA: tl.constexpr,
                              WS: tl.constexpr, STAGES: tl.constexpr, ONE_LOOP: tl.constexpr,
                              INTERPRET: tl.constexpr):
    h = tl.program_id(0) // BATCH
    b = tl.program_id(0) % BATCH
    mblock = n_mblocks - 1 - tl.program_id(1)  # longest rows first
    start = tl.load(cu_ptr + b)
    end = tl.load(cu_ptr + b + 1)
    length = end - start
    m0 = mblock * BLOCK_M
    if m0 < length:
        kvh = h // GROUP
        rows = m0 + tl.arange(0, BLOCK_M)
        if TMA:
            q_desc = tl.make_tensor_descriptor(q_ptr, shape=[end, Q_WIDTH], strides=[stride_qt, 1],
                                               block_shape=[BLOCK_M, HEAD])
            k_desc = tl.make_tensor_descriptor(k_ptr, shape=[end, KV_WIDTH],
                                               strides=[stride_kt, 1], block_shape=[BLOCK_N, HEAD])
            v_desc = tl.make_tensor_descriptor(v_ptr, shape=[end, KV_WIDTH],
                                               strides=[stride_vt, 1], block_shape=[BLOCK_N, HEAD])
            o_desc = tl.make_tensor_descriptor(out_ptr, shape=[end, Q_WIDTH],
                                               strides=[stride_ot, 1], block_shape=[BLOCK_M, HEAD])
        else:
            q_desc = None
            k_desc = None
            v_desc = None
            o_desc = None
        q = _load_rows(q_ptr, q_desc, start + m0, h * HEAD, m0, length, stride_qt, TMA, BLOCK_M,
                       HEAD)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD], tl.float32)
        if ONE_LOOP:  # every key block masked, in one loop
            acc, m_i, l_i = _attend(acc, m_i, l_i, q, k_ptr, v_ptr, k_desc, v_desc, start,
                                    kvh * HEAD, stride_kt, stride_vt, 0,
                                    tl.minimum(m0 + BLOCK_M, length), rows, length, qk_scale,
                                    HEAD, BLOCK_N, True, TMA, WS, STAGES, INTERPRET)
        else:
            # Keys left of the diagonal block: every (row, key) pair is causal and in range.
            acc, m_i, l_i = _attend(acc, m_i, l_i, q, k_ptr, v_ptr, k_desc, v_desc, start,
                                    kvh * HEAD, stride_kt, stride_vt, 0, m0, rows, length,
                                    qk_scale, HEAD, BLOCK_N, False, TMA, WS, STAGES, INTERPRET)
            # The diagonal block: the causal mask (keys past the end are past every kept row).
            acc, m_i, l_i = _attend(acc, m_i, l_i, q, k_ptr, v_ptr, k_desc, v_desc, start,
                                    kvh * HEAD, stride_kt, stride_vt, m0,
                                    tl.minimum(m0 + BLOCK_M, length), rows, length, qk_scale,
                                    HEAD, BLOCK_N, True, TMA, WS, STAGES, INTERPRET)
        out = (acc / l_i[:, None]).to(out_ptr.dtype.element_ty)
        if TMA:
            o_desc.store([start + m0, h * HEAD], out)
        else:
            d = tl.arange(0, HEAD)
            tok = (start + rows).to(tl.int64)
            tl.store(out_ptr + tok[:, None] * stride_ot + h * HEAD + d[None, :], out,
                     mask=(rows < length)[:, None])


def _descriptor_scratch(size: int, alignment: int, stream):
    """Global memory where device-side tensor descriptors are written (Triton asks for it)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def prefill_attention(q, k, v, cu_seqlens, max_seqlen: int):
    total, num_q_heads, head_size = q.shape
    if k.shape != v.shape or k.shape[0] != total or k.shape[2] != head_size:
        raise ValueError("q, k, v disagree on tokens / head size")
    if num_q_heads % k.shape[1]:
        raise ValueError("query heads must be a multiple of kv heads")
    if head_size < 16 or head_size & (head_size - 1):
        raise ValueError(f"head size {head_size} must be a power of two >= 16")
    for t in (q, k, v):
        if t.stride(-1) != 1 or t.stride(1) != head_size:
            raise ValueError("each token's heads must be contiguous ([T, H, D] rows)")
    if BLOCK_M % BLOCK_N:
        raise ValueError(f"BLOCK_M {BLOCK_M} must be a multiple of BLOCK_N {BLOCK_N}")
    batch = cu_seqlens.shape[0] - 1
    out = torch.empty_like(q)
    if total == 0 or batch == 0:
        return out
    if USE_TMA and q.is_cuda:
        triton.set_allocator(_descriptor_scratch)
    n_mblocks = triton.cdiv(max_seqlen, BLOCK_M)
    _prefill_attention_kernel[(num_q_heads * batch, n_mblocks)](
        q, k, v, cu_seqlens, out, head_size ** -0.5 * math.log2(math.e), n_mblocks,
        q.stride(0), k.stride(0), v.stride(0), out.stride(0),
        Q_WIDTH=num_q_heads * head_size, KV_WIDTH=k.shape[1] * head_size,
        GROUP=num_q_heads // k.shape[1], BATCH=batch, HEAD=head_size, BLOCK_M=BLOCK_M,
        BLOCK_N=BLOCK_N, TMA=USE_TMA, WS=WARP_SPECIALIZE, STAGES=NUM_STAGES, ONE_LOOP=ONE_LOOP,
        INTERPRET=_INTERPRET, num_warps=NUM_WARPS)
    return out


class Model(torch.nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                cu_seqlens: torch.Tensor, max_seqlen: int) -> torch.Tensor:
        return prefill_attention(q, k, v, cu_seqlens, max_seqlen)

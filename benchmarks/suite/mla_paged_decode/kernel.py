"""DeepSeek-V3 MLA paged decode (absorbed form): split-KV Triton kernels aimed at HBM bandwidth.

Every used latent row (c_kv 512 | k_pe 64, 1152 bytes in bf16) is read once and serves all H=16
heads: ~30 FLOPs per byte, still under the H200 ridge (~206 FLOP/B for bf16 tensor cores), so the
target is the memory roofline. Design:
- one program per (sequence, KV split) takes all 16 heads as the M dimension of the tensor-core
  tiles: q is [16, 512] + [16, 64] in registers, and a [BLOCK_N, 512] c_kv tile is loaded ONCE and
  used twice, as K (scores = q_nope c_kv^T + q_pe k_pe^T) and as V (acc += p c_kv);
- pages are 64 tokens and tiles are BLOCK_N (<= 64) tokens aligned to page boundaries, so a tile is
  one page id (a scalar load) and BLOCK_N x 1152 contiguous bytes: fully coalesced, and the
  software pipeline (num_stages) keeps the next tile's loads in flight;
- fixed-size KV splits (tokens) give equal-sized programs for mixed lengths; splits past a
  sequence's end exit at once. Each split writes its normalized [16, 512] fp32 partial and LSE
  (32 KB per split), a second kernel merges;
- online softmax in fp32 with exp2.
On the H200 (NOTES.md): 0.55 (kv2k) / 0.72 (kv8k) of the datasheet bandwidth; both shapes launch
~1.05 waves of split programs (about 550 programs for 4 resident per SM). FlashMLA's
length-balanced schedule (one wave of equal tile ranges) was slower here at its best, 71.2 vs
60.1 us and 196.9 vs 178.5 us (sweep-f7d4861; its kernel needed 176 registers against the split
kernel's 133), and was removed.
"""

import os

import torch
import triton
import triton.language as tl

# Triton's CPU interpreter (3.9) multiplies bf16 tl.dot operands as their raw uint16 bit patterns;
# under TRITON_INTERPRET=1 the operands are widened to fp32 first (exact: bf16 products fit fp32).
_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"

# Launch constants (module level so the agent's autotuner can search them).
# Chosen by benchmarks/attention_h200.py on the H200 (results/h200-attention/sweep-2e35075):
# kv2k 59.5 us, kv8k 177.5 us a call; 8 warps (98 registers: 2 programs per SM) was 5-10%
# slower, BLOCK_N 16 up to 45% slower, BLOCK_N 64 with 2 stages 2% faster at kv8k and 8% slower
# at kv2k. Round 3 lost (sweep-f7d4861, these constants 60.1 / 178.5 us; its code removed):
# fused merge (last split merges) at best 78.0 / 200.1 us, length-balanced schedule 71.2 / 196.9.
BLOCK_N = 32  # KV tokens per tile (must divide the 64-token page)
SPLITS_PER_SEQ = 14  # the longest possible sequence is cut into about this many splits
MAX_SPLIT_BLOCK = 2048  # max KV tokens per program
NUM_WARPS = 4
NUM_STAGES = 3
MERGE_HEADS = 1  # heads per program of the merge kernel ([splits, 512] partials each)
PDL = True  # the merge is launched while the split kernel drains (sm_90+)
# Round 4 (an H100, results/h100-7402845/attention): splits no longer rounded to a power of two.
# At 16 splits both shapes made 540 programs, 1.02 waves of 528 resident slots (4 per SM); 14
# splits (320 tokens at kv2k, 1216 at kv8k) took kv2k from 76.2 to 72.1 us and kv8k from 233.9 to
# 231.0 (12: 75.7 / 235.8; 13: 72.5 / 232.7). Loading the latent rows evict_first: within 0.5%.
KV_EVICT = ""  # "" (default policy) or "evict_first"
# Round 5: ncu on an H100 (results/h100-36ed5a5/ncu) puts the merge at 8.8-8.9 us of
# the call, reading its fp32 partials at about half of DRAM peak although they were written a few
# microseconds before and fit L2: PARTIAL_EVICT "evict_last" asks L2 to keep them for the merge,
# MERGE_WARPS spreads a merge program's partials over more threads. Timed on an H100
# (results/h100-2e6777a/decode): evict_last within 1% (kv2k 72.0 -> 72.4 us, kv8k 230.7 -> 233.4),
# 8 merge warps 3-4% slower; both stay at the default.
PARTIAL_EVICT = ""  # "" (the default policy) or "evict_last"
MERGE_WARPS = 4
# Round 5 too: at kv2k a 320-token split reads 360 KB of latent rows and writes a 32 KB
# fp32 partial that the merge reads back, 18% on top of the KV bytes; in 16 bits that is 9%, and
# finer splits (more programs, so the SMs' loads even out) cost half as much. fp16, not bf16: on
# the CPU shape over 6 draws (interpreter, against float64) fp16 partials kept the relative L2
# error at 1.48-1.65e-3, as fp32 does, while bf16 ones gave 2.49-2.74e-3, above the bf16
# reference's own 2.19e-3 on one draw. A normalized partial is a convex combination of latent rows,
# so fp16 holds it while |c_kv| <= 65504 (an RMSNorm-ed latent is far inside; past it the output
# is inf or NaN, not a wrong finite value). Timed on an H100 (results/h100-2e6777a/decode): fp16
# 73.7 / 230.3 us against fp32's 71.8 / 232.4 (kv2k / kv8k), level; 18, 22 and 32 splits lost
# with either (kv2k 75.6-86.4 us, kv8k 232.3-267.6). fp32 and 14 splits stay.
PARTIAL_DTYPE = "fp32"  # "fp32" or "fp16"


_PARTIAL_DTYPES = {"fp32": torch.float32, "fp16": torch.float16}


@triton.jit
def _mma(a, b, INTERPRET: tl.constexpr):
    if INTERPRET:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b)


@triton.jit
def _mla_decode_split_kernel(
        q_ptr, kv_ptr, bt_ptr, lens_ptr, o_ptr, lse_ptr, qk_scale, num_heads,
        stride_qb, stride_qh, stride_kvp, stride_kvs, stride_btb,
        stride_ob, stride_oh, stride_os, stride_lb, stride_lh,
        HEADS: tl.constexpr, D_LATENT: tl.constexpr, D_ROPE: tl.constexpr, PAGE: tl.constexpr,
        BLOCK_N: tl.constexpr, SPLIT: tl.constexpr, KV_EVICT: tl.constexpr,
        PARTIAL_EVICT: tl.constexpr, INTERPRET: tl.constexpr):
    """Tokens [split * SPLIT, +SPLIT) of one sequence for all heads: an online softmax over
    one-page latent tiles, each used as K and as V, then the normalized partial and its LSE."""
    b = tl.program_id(0)
    split = tl.program_id(1)
    length = tl.load(lens_ptr + b)
    start = split * SPLIT
    if start < length:
        end = tl.minimum(start + SPLIT, length)
        h = tl.arange(0, HEADS)
        hmask = h < num_heads
        dl = tl.arange(0, D_LATENT)
        dr = tl.arange(0, D_ROPE)
        q_row = q_ptr + b.to(tl.int64) * stride_qb + h[:, None] * stride_qh
        q_nope = tl.load(q_row + dl[None, :], mask=hmask[:, None], other=0.0)
        q_pe = tl.load(q_row + D_LATENT + dr[None, :], mask=hmask[:, None], other=0.0)
        m_i = tl.full([HEADS], float("-inf"), tl.float32)
        l_i = tl.zeros([HEADS], tl.float32)
        acc = tl.zeros([HEADS, D_LATENT], tl.float32)
        bt_row = bt_ptr + b.to(tl.int64) * stride_btb
        for t0 in range(start, end, BLOCK_N):
            # BLOCK_N divides PAGE and splits start on page boundaries: one page per tile.
            page = tl.load(bt_row + t0 // PAGE).to(tl.int64)
            within = (t0 % PAGE) + tl.arange(0, BLOCK_N)
            tmask = t0 + tl.arange(0, BLOCK_N) < end
            rows = kv_ptr + page * stride_kvp + within.to(tl.int64)[:, None] * stride_kvs
            c_kv = tl.load(rows + dl[None, :], mask=tmask[:, None], other=0.0,
                           eviction_policy=KV_EVICT)  # [BLOCK_N, 512]
            k_pe = tl.load(rows + D_LATENT + dr[None, :], mask=tmask[:, None], other=0.0,
                           eviction_policy=KV_EVICT)
            s = _mma(q_nope, tl.trans(c_kv), INTERPRET) + _mma(q_pe, tl.trans(k_pe), INTERPRET)
            s = tl.where(tmask[None, :], s * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            acc = acc * alpha[:, None] + _mma(p.to(c_kv.dtype), c_kv, INTERPRET)
            m_i = m_new
        out = acc / l_i[:, None]
        o_base = o_ptr + b.to(tl.int64) * stride_ob + split * stride_os
        tl.store(o_base + h[:, None] * stride_oh + dl[None, :],
                 out.to(o_ptr.dtype.element_ty), mask=hmask[:, None],
                 eviction_policy=PARTIAL_EVICT)
        tl.store(lse_ptr + b.to(tl.int64) * stride_lb + h * stride_lh + split,
                 m_i + tl.log2(l_i), mask=hmask)


@triton.jit
def _merge_splits_kernel(o_part_ptr, lse_ptr, lens_ptr, out_ptr, num_heads,
                         stride_ob, stride_oh, stride_os, stride_lb, stride_lh,
                         stride_outb, stride_outh,
                         D: tl.constexpr, SPLIT: tl.constexpr, MAX_SPLITS: tl.constexpr,
                         HEADS: tl.constexpr, USE_PDL: tl.constexpr):
    """HEADS heads of one sequence: every split's partial output and LSE loaded at once (one
    latency, not a chain per head), weighted by the splits' share of the softmax mass."""
    if USE_PDL:
        tl.extra.cuda.gdc_wait()  # launched early (PDL): the split kernel's writes first
    b = tl.program_id(0)
    h = tl.program_id(1) * HEADS + tl.arange(0, HEADS)
    s = tl.arange(0, MAX_SPLITS)
    d = tl.arange(0, D)
    n_splits = tl.cdiv(tl.load(lens_ptr + b), SPLIT)
    used = (h < num_heads)[:, None] & (s < n_splits)[None, :]  # [HEADS, MAX_SPLITS]
    part = b.to(tl.int64) * stride_ob + h[:, None] * stride_oh + s[None, :] * stride_os
    o = tl.load(o_part_ptr + part[:, :, None] + d[None, None, :], mask=used[:, :, None],
                other=0.0).to(tl.float32)
    lse = tl.load(lse_ptr + b.to(tl.int64) * stride_lb + h[:, None] * stride_lh + s[None, :],
                  mask=used, other=float("-inf"))
    top = tl.max(lse, axis=1)
    w = tl.exp2(lse - tl.where(top == float("-inf"), 0.0, top)[:, None])  # padding heads: 0
    w = w / tl.maximum(tl.sum(w, axis=1), 1e-30)[:, None]
    out = tl.sum(o * w[:, :, None], axis=1)
    tl.store(out_ptr + b.to(tl.int64) * stride_outb + h[:, None] * stride_outh + d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=(h < num_heads)[:, None])


def _use_pdl(device: torch.device) -> bool:
    """Programmatic dependent launch for the merge: Hopper and later, never the interpreter."""
    return (PDL and device.type == "cuda" and not _INTERPRET
            and torch.cuda.get_device_capability(device)[0] >= 9)


def mla_paged_decode(q, kv_cache, block_table, seq_lens, kv_lora_rank: int, sm_scale: float):
    batch, num_heads, width = q.shape
    num_pages, page_size, kv_width = kv_cache.shape
    rope_dim = width - kv_lora_rank
    if kv_width != width:
        raise ValueError(f"q width {width} != cache width {kv_width}")
    for n, what in ((kv_lora_rank, "kv_lora_rank"), (rope_dim, "rope dim")):
        if n < 16 or n & (n - 1):
            raise ValueError(f"{what} {n} must be a power of two >= 16")
    if q.stride(-1) != 1 or kv_cache.stride(-1) != 1:
        raise ValueError("the feature dimension must be contiguous")
    block_n = min(BLOCK_N, page_size)
    if page_size % block_n:
        raise ValueError(f"page size {page_size} must be a multiple of {block_n}")
    out = torch.empty((batch, num_heads, kv_lora_rank), dtype=q.dtype, device=q.device)
    if batch == 0:
        return out
    capacity = block_table.shape[1] * page_size
    # ~SPLITS_PER_SEQ splits of the longest possible context, at most MAX_SPLIT_BLOCK tokens,
    # whole pages.
    split = max(page_size, min(MAX_SPLIT_BLOCK, triton.cdiv(capacity, SPLITS_PER_SEQ)))
    split = triton.cdiv(split, page_size) * page_size
    if capacity < 1024:
        split = page_size  # small problems (CPU tests): exercise the multi-split merge
    max_splits = triton.cdiv(capacity, split)
    heads_pad = max(16, triton.next_power_of_2(num_heads))
    o_part = torch.empty((batch, num_heads, max_splits, kv_lora_rank),
                         dtype=_PARTIAL_DTYPES[PARTIAL_DTYPE], device=q.device)
    lse = torch.empty((batch, num_heads, max_splits), dtype=torch.float32, device=q.device)
    qk_scale = sm_scale * 1.4426950408889634  # times log2(e): scores in log2 units
    _mla_decode_split_kernel[(batch, max_splits)](
        q, kv_cache, block_table, seq_lens, o_part, lse, qk_scale, num_heads, q.stride(0),
        q.stride(1), kv_cache.stride(0), kv_cache.stride(1), block_table.stride(0),
        o_part.stride(0), o_part.stride(1), o_part.stride(2), lse.stride(0), lse.stride(1),
        HEADS=heads_pad, D_LATENT=kv_lora_rank, D_ROPE=rope_dim, PAGE=page_size,
        BLOCK_N=block_n, SPLIT=split, KV_EVICT=KV_EVICT, PARTIAL_EVICT=PARTIAL_EVICT,
        INTERPRET=_INTERPRET, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    pdl = _use_pdl(q.device)
    heads = min(MERGE_HEADS, triton.next_power_of_2(num_heads))
    _merge_splits_kernel[(batch, triton.cdiv(num_heads, heads))](
        o_part, lse, seq_lens, out, num_heads, o_part.stride(0), o_part.stride(1),
        o_part.stride(2), lse.stride(0), lse.stride(1), out.stride(0), out.stride(1),
        D=kv_lora_rank, SPLIT=split, MAX_SPLITS=triton.next_power_of_2(max_splits), HEADS=heads,
        USE_PDL=pdl, num_warps=MERGE_WARPS, launch_pdl=pdl)
    return out


class Model(torch.nn.Module):
    def __init__(self, kv_lora_rank: int = 512, sm_scale: float = 0.1352337788608801) -> None:
        super().__init__()
        self.kv_lora_rank = int(kv_lora_rank)
        self.sm_scale = float(sm_scale)

    def forward(self, q: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor,
                seq_lens: torch.Tensor) -> torch.Tensor:
        return mla_paged_decode(q, kv_cache, block_table, seq_lens, self.kv_lora_rank,
                                self.sm_scale)

"""NeoX-style RoPE from a cos/sin cache, query and key rotated by one Triton kernel.

Memory-bound (read q, k and one cache row per token; write q, k). Design:
- one program per token handles all of that token's query and key heads, so the cos/sin row
  (2 x D/2 fp32) is loaded once per token and reused for the 32 + 8 heads; a call with fewer
  tokens than SMs (decode) spreads each token's heads over programs of HEADS_PER_PROGRAM, each
  loading the row itself, so every SM gets work;
- the two halves of every head are loaded as [heads, D/2] tiles: each head contributes two 128-byte
  contiguous segments, coalesced, and the output is written with the same pattern;
- fp32 math, one rounding to bf16 on the store; no torch compute in forward.
At 64 tokens the op is launch-bound (SOL ~0.3 us): it is timed as a CUDA-graph replay, and its
time is the latency of one small kernel.
"""

import torch
import triton
import triton.language as tl

# Launch constants (module level so the agent's autotuner can search them; to be measured on H200).
NUM_WARPS = 4
TOKENS_PER_PROGRAM = 1
# H200 (benchmarks/results/h200-small-ops): decode-t64 2.47 us per call in a graph with PDL, 3.08
# without; more tokens per program only lost (prefill 43.2 -> 46.4 us at 4); 8 warps gain 0.7% at
# prefill, lose 4% at decode.
PDL = True  # programmatic dependent launch on sm_90+ (see _use_pdl)
# HEADS_PER_PROGRAM > 0 spreads a token's heads over programs of that many heads each (query
# blocks, then key blocks; each program loads the position and its cos/sin row) when there are
# fewer tokens than SMs, so one program per token would leave SMs idle: at decode-t64 the
# per-token grid holds 10 KB per program on 64 of 132 SMs. On an H100 (results/h100-1edce42,
# sweep round 2, graph of 32 calls) decode-t64 took 1.82 us at 8 heads and 4 warps against 2.43
# per token (4 heads 1.96, 16 heads 1.85-2.08; that card's empty-kernel floor 1.21, 0.83 with
# PDL); at prefill-t8192 head blocks lost or tied (8 heads 60.4 us, 16 heads 57.1, per token
# 56.7), which is why they are used only under the SM count. Not yet timed on the H200 (2.36 us
# per token there, results/h200-bdee65c). 0: one program per token at every size.
HEADS_PER_PROGRAM = 8


@triton.jit
def _head_offsets(n_heads, HEAD_SIZE: tl.constexpr, BLOCK_H: tl.constexpr, HALF: tl.constexpr):
    heads = tl.arange(0, BLOCK_H)
    mask = (heads < n_heads)[:, None]
    return heads[:, None] * HEAD_SIZE + tl.arange(0, HALF)[None, :], mask


@triton.jit
def _load_halves(x_ptr, row_x, n_heads, HEAD_SIZE: tl.constexpr, BLOCK_H: tl.constexpr,
                 HALF: tl.constexpr):
    offs, mask = _head_offsets(n_heads, HEAD_SIZE, BLOCK_H, HALF)
    x1 = tl.load(x_ptr + row_x + offs, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + row_x + offs + HALF, mask=mask, other=0.0).to(tl.float32)
    return x1, x2


@triton.jit
def _store_rotated(out_ptr, row_out, n_heads, x1, x2, cos, sin, HEAD_SIZE: tl.constexpr,
                   BLOCK_H: tl.constexpr, HALF: tl.constexpr):
    offs, mask = _head_offsets(n_heads, HEAD_SIZE, BLOCK_H, HALF)
    o1 = x1 * cos[None, :] - x2 * sin[None, :]
    o2 = x2 * cos[None, :] + x1 * sin[None, :]
    ty = out_ptr.dtype.element_ty
    tl.store(out_ptr + row_out + offs, o1.to(ty), mask=mask)
    tl.store(out_ptr + row_out + offs + HALF, o2.to(ty), mask=mask)


@triton.jit
def _cos_sin(pos_ptr, tok, cache_ptr, stride_cache, HALF: tl.constexpr):
    """The token's cos and sin halves of its cache row (the position loaded first)."""
    pos = tl.load(pos_ptr + tok).to(tl.int64)
    d = tl.arange(0, HALF)
    return (tl.load(cache_ptr + pos * stride_cache + d),
            tl.load(cache_ptr + pos * stride_cache + HALF + d))


@triton.jit
def _rope_head_block_kernel(pos_ptr, q_ptr, k_ptr, cache_ptr, q_out_ptr, k_out_ptr,
                            n_q_heads, n_kv_heads, stride_q, stride_k, stride_qo, stride_ko,
                            stride_cache, HEAD_SIZE: tl.constexpr, BLOCK_H: tl.constexpr,
                            USE_PDL: tl.constexpr):
    """Program (token, block): BLOCK_H heads of the token's query (the first blocks) or key."""
    HALF: tl.constexpr = HEAD_SIZE // 2
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    tok = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    q_blocks = tl.cdiv(n_q_heads, BLOCK_H)
    if block < q_blocks:
        x_ptr, out_ptr, first = q_ptr + tok * stride_q, q_out_ptr + tok * stride_qo, block
        n_heads = n_q_heads
    else:
        x_ptr, out_ptr, first = k_ptr + tok * stride_k, k_out_ptr + tok * stride_ko, \
            block - q_blocks
        n_heads = n_kv_heads
    head0 = first * BLOCK_H * HEAD_SIZE
    x1, x2 = _load_halves(x_ptr, head0, n_heads - first * BLOCK_H, HEAD_SIZE, BLOCK_H, HALF)
    cos, sin = _cos_sin(pos_ptr, tok, cache_ptr, stride_cache, HALF)
    _store_rotated(out_ptr, head0, n_heads - first * BLOCK_H, x1, x2, cos, sin, HEAD_SIZE,
                   BLOCK_H, HALF)


@triton.jit
def _rope_neox_kernel(pos_ptr, q_ptr, k_ptr, cache_ptr, q_out_ptr, k_out_ptr, num_tokens,
                      n_q_heads, n_kv_heads, stride_q, stride_k, stride_qo, stride_ko,
                      stride_cache,
                      HEAD_SIZE: tl.constexpr, BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr,
                      TOKENS: tl.constexpr, USE_PDL: tl.constexpr):
    HALF: tl.constexpr = HEAD_SIZE // 2
    if USE_PDL:
        # launched before the previous kernel finished: wait until its writes are visible
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()  # the next kernel may start its launch now
    for i in tl.static_range(TOKENS):
        tok = tl.program_id(0).to(tl.int64) * TOKENS + i
        if tok < num_tokens:
            # query and key are loaded before the position and its cache row, so their latency
            # overlaps the position -> cos/sin chain instead of following it (decode size)
            q1, q2 = _load_halves(q_ptr, tok * stride_q, n_q_heads, HEAD_SIZE, BLOCK_HQ, HALF)
            k1, k2 = _load_halves(k_ptr, tok * stride_k, n_kv_heads, HEAD_SIZE, BLOCK_HK, HALF)
            cos, sin = _cos_sin(pos_ptr, tok, cache_ptr, stride_cache, HALF)
            _store_rotated(q_out_ptr, tok * stride_qo, n_q_heads, q1, q2, cos, sin, HEAD_SIZE,
                           BLOCK_HQ, HALF)
            _store_rotated(k_out_ptr, tok * stride_ko, n_kv_heads, k1, k2, cos, sin, HEAD_SIZE,
                           BLOCK_HK, HALF)


def _use_pdl(device: torch.device) -> bool:
    """Programmatic dependent launch (Hopper): the kernel is scheduled while the one before it
    is still running and waits (griddepcontrol.wait) before its first load, so the launch
    latency overlaps the previous kernel's tail instead of following it."""
    return PDL and device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 16  # CPU runs (interpreter): cpu-decode (5 tokens) takes head blocks, cpu-prefill not


def rope_neox(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
              cos_sin_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    head_size = cos_sin_cache.shape[-1]
    if head_size % 2 or head_size & (head_size - 1):
        raise ValueError(f"head size {head_size} must be an even power of two")
    if query.shape[-1] % head_size or key.shape[-1] % head_size:
        raise ValueError("query/key widths must be multiples of the cache's rotary dimension")
    num_tokens = positions.shape[0]
    if query.shape[0] != num_tokens or key.shape[0] != num_tokens:
        raise ValueError("positions, query and key disagree on the token count")
    if query.stride(-1) != 1:
        query = query.contiguous()
    if key.stride(-1) != 1:
        key = key.contiguous()
    if cos_sin_cache.stride(-1) != 1:
        cos_sin_cache = cos_sin_cache.contiguous()
    n_q, n_k = query.shape[-1] // head_size, key.shape[-1] // head_size
    q_out = torch.empty((num_tokens, query.shape[-1]), dtype=query.dtype, device=query.device)
    k_out = torch.empty((num_tokens, key.shape[-1]), dtype=key.dtype, device=key.device)
    pdl = _use_pdl(query.device)
    if num_tokens and HEADS_PER_PROGRAM > 0 and num_tokens < _num_sms(query.device):
        block_h = triton.next_power_of_2(HEADS_PER_PROGRAM)
        blocks = triton.cdiv(n_q, block_h) + triton.cdiv(n_k, block_h)
        _rope_head_block_kernel[(num_tokens, blocks)](
            positions, query, key, cos_sin_cache, q_out, k_out, n_q, n_k, query.stride(0),
            key.stride(0), q_out.stride(0), k_out.stride(0), cos_sin_cache.stride(0),
            HEAD_SIZE=head_size, BLOCK_H=block_h, USE_PDL=pdl,
            num_warps=max(1, min(NUM_WARPS, block_h // 2)), launch_pdl=pdl)
    elif num_tokens:
        _rope_neox_kernel[(triton.cdiv(num_tokens, TOKENS_PER_PROGRAM),)](
            positions, query, key, cos_sin_cache, q_out, k_out, num_tokens, n_q, n_k,
            query.stride(0), key.stride(0), q_out.stride(0), k_out.stride(0),
            cos_sin_cache.stride(0), HEAD_SIZE=head_size,
            BLOCK_HQ=triton.next_power_of_2(n_q), BLOCK_HK=triton.next_power_of_2(n_k),
            TOKENS=TOKENS_PER_PROGRAM, USE_PDL=pdl, num_warps=NUM_WARPS, launch_pdl=pdl)
    return q_out, k_out


class Model(torch.nn.Module):
    def forward(self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
                cos_sin_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return rope_neox(positions, query, key, cos_sin_cache)

"""Paged KV-cache append (vLLM `reshape_and_cache_flash`, NHD pages) as one Triton copy kernel.

A pure scatter-copy, memory-bound: each token's keys and values (num_kv_heads x head_size, 2 KB
each for 8 x 128 bf16) are contiguous in the input and land contiguously in the cache slot
(page * page_size + offset; in NHD layout a slot's heads are adjacent). So:
- one program per token, two contiguous 2 KB row copies (16-byte vectors, 8 bf16 per thread at
  4 warps), no index arithmetic per element beyond the slot base;
- padding tokens (slot < 0) store nothing;
- new keys/values are read once (`evict_first`); the cache lines written are not re-read here.
At 64 tokens the op is pure launch latency (SOL ~0.1 us), timed as a CUDA-graph replay.
"""

import torch
import triton
import triton.language as tl

# Launch constants (module level so the agent's autotuner can search them; to be measured on H200).
BLOCK_MAX = 2048  # elements per copy step (one 8 x 128 head row is 1024)
MAX_WARPS = 4
TOKENS_PER_PROGRAM = 1
# H200 (benchmarks/results/h200-small-ops): decode-t64 1.72 us per call in a graph with PDL, 2.33
# without; prefill-t8192 19.1 us (graph) whatever the block, warps or tokens per program of the
# sweep (within 2%).
PDL = True  # programmatic dependent launch on sm_90+ (see _use_pdl)
# TILE_TOKENS > 1: calls of at least that many tokens per SM copy TILE_TOKENS rows per program as
# one [tokens, row] tile, every load issued before the first store. The TOKENS_PER_PROGRAM loop
# above stores a token before loading the next (the compiler cannot move a load above a store
# that may alias it), so it kept 32 bytes a thread in flight however many tokens a program took.
# ncu on an H100 (results/h100-c43421b/ncu-small): prefill-t8192 21.2 us at 65.3% of DRAM
# throughput, 71% of the cycles between issues waiting on those loads. Timed on an H100
# (results/h100-b03f012/kv): 21.79-21.86 us at 2-4 tokens against 21.54 at 1, decode level. That
# card already moves the call's 67 MB at 3.1 TB/s (93% of its datasheet's 3.35, part of the
# writes still in L2 when the kernel ends); the H200 needs 1.4x the bytes in flight for its
# 4.8 TB/s and reaches 0.75 of it (18.7 us). Off until the H200 times it.
TILE_TOKENS = 1


@triton.jit
def _kv_append_kernel(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
                      stride_key, stride_value, stride_k_slot, stride_v_slot, row_size,
                      num_tokens, BLOCK: tl.constexpr, TOKENS: tl.constexpr,
                      USE_PDL: tl.constexpr):
    if USE_PDL:
        # launched before the previous kernel finished: wait until its writes are visible
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()  # the next kernel may start its launch now
    for i in tl.static_range(TOKENS):
        tok = tl.program_id(0).to(tl.int64) * TOKENS + i
        in_range = tok < num_tokens
        row = tl.minimum(tok, num_tokens - 1)  # past the end: re-read the last row, store nothing
        for start in tl.range(0, row_size, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            mask = cols < row_size
            # the new row is loaded together with its slot, not after it: a decode call is two
            # memory latencies (load, store) instead of three (a padding token's row is read
            # for nothing, which costs less than the wait)
            k = tl.load(key_ptr + row * stride_key + cols, mask=mask, eviction_policy="evict_first")
            v = tl.load(value_ptr + row * stride_value + cols, mask=mask,
                        eviction_policy="evict_first")
            slot = tl.load(slot_ptr + row).to(tl.int64)
            if (slot >= 0) & in_range:
                tl.store(k_cache_ptr + slot * stride_k_slot + cols,
                         k.to(k_cache_ptr.dtype.element_ty), mask=mask)
                tl.store(v_cache_ptr + slot * stride_v_slot + cols,
                         v.to(v_cache_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _kv_append_tile_kernel(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
                           stride_key, stride_value, stride_k_slot, stride_v_slot, row_size,
                           num_tokens, BLOCK: tl.constexpr, TOKENS: tl.constexpr,
                           USE_PDL: tl.constexpr):
    """TILE_TOKENS: TOKENS tokens' rows as one [TOKENS, BLOCK] tile per step, so a thread's
    loads for all of them are in flight together."""
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    toks = tl.program_id(0).to(tl.int64) * TOKENS + tl.arange(0, TOKENS)
    in_range = toks < num_tokens
    rows = tl.minimum(toks, num_tokens - 1)
    slots = tl.load(slot_ptr + rows).to(tl.int64)
    keep = (in_range & (slots >= 0))[:, None]
    for start in tl.range(0, row_size, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        cmask = (cols < row_size)[None, :]
        k = tl.load(key_ptr + rows[:, None] * stride_key + cols[None, :], mask=cmask,
                    eviction_policy="evict_first")
        v = tl.load(value_ptr + rows[:, None] * stride_value + cols[None, :], mask=cmask,
                    eviction_policy="evict_first")
        tl.store(k_cache_ptr + slots[:, None] * stride_k_slot + cols[None, :],
                 k.to(k_cache_ptr.dtype.element_ty), mask=keep & cmask)
        tl.store(v_cache_ptr + slots[:, None] * stride_v_slot + cols[None, :],
                 v.to(v_cache_ptr.dtype.element_ty), mask=keep & cmask)


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4  # CPU checks: cpu-prefill (45 tokens) takes the tiles, cpu-decode (7) does not


def _use_pdl(device: torch.device) -> bool:
    """Programmatic dependent launch (Hopper): the kernel is scheduled while the one before it
    is still running and waits (griddepcontrol.wait) before its first load, so the launch
    latency overlaps the previous kernel's tail instead of following it."""
    return PDL and device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9


def kv_cache_append(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
                    v_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    num_tokens, num_kv_heads, head_size = key.shape
    if value.shape != key.shape:
        raise ValueError("key and value shapes differ")
    if k_cache.shape != v_cache.shape or tuple(k_cache.shape[2:]) != (num_kv_heads, head_size):
        raise ValueError(f"cache shape {tuple(k_cache.shape)} does not hold [{num_kv_heads}, "
                         f"{head_size}] per slot")
    if slot_mapping.shape[0] != num_tokens:
        raise ValueError("slot_mapping needs one slot per token")
    row = num_kv_heads * head_size
    # A slot's heads must be one contiguous row in the cache (NHD pages, contiguous inner dims).
    for cache in (k_cache, v_cache):
        if cache.stride(3) != 1 or cache.stride(2) != head_size or cache.stride(0) != \
                cache.shape[1] * cache.stride(1):
            raise ValueError("cache must be NHD with contiguous pages")
    key = key.reshape(num_tokens, row)
    value = value.reshape(num_tokens, row)
    if key.stride(-1) != 1:
        key = key.contiguous()
    if value.stride(-1) != 1:
        value = value.contiguous()
    if not num_tokens:
        return
    block = min(BLOCK_MAX, triton.next_power_of_2(row))
    pdl = _use_pdl(key.device)
    warps = max(1, min(MAX_WARPS, block // 256))
    if TILE_TOKENS > 1 and num_tokens >= TILE_TOKENS * _num_sms(key.device):
        _kv_append_tile_kernel[(triton.cdiv(num_tokens, TILE_TOKENS),)](
            key, value, k_cache, v_cache, slot_mapping, key.stride(0), value.stride(0),
            k_cache.stride(1), v_cache.stride(1), row, num_tokens, BLOCK=block,
            TOKENS=TILE_TOKENS, USE_PDL=pdl, num_warps=warps, launch_pdl=pdl)
    else:
        _kv_append_kernel[(triton.cdiv(num_tokens, TOKENS_PER_PROGRAM),)](
            key, value, k_cache, v_cache, slot_mapping, key.stride(0), value.stride(0),
            k_cache.stride(1), v_cache.stride(1), row, num_tokens, BLOCK=block,
            TOKENS=TOKENS_PER_PROGRAM, USE_PDL=pdl, num_warps=warps, launch_pdl=pdl)


class Model(torch.nn.Module):
    def forward(self, key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor, slot_mapping: torch.Tensor) -> dict:
        kv_cache_append(key, value, k_cache, v_cache, slot_mapping)
        return {}

"""The work counter (runner/work): each rule on a small reference, against a hand count.

Touched bytes: a paged gather reads the addressed slots, a routed MoE the routed experts, a
clone-and-scatter of a state pool and an in-place cache write count the rewritten rows once.
Attention: causal, windowed and varlen attention count the computed pairs, the same on the CPU
kernel as through F.scaled_dot_product_attention. Elementwise work: the documented table, on the
CUDA-core classes; the roofline floor overlaps the two units.
"""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F
from atrex.runner.peaks import datasheet_peaks
from atrex.runner.work import classes, flops
from atrex.runner.work.counter import WorkCounter
from atrex.runner.work.hybrid import Hybrid
from atrex.runner.work.maps import IndexMap, covered, intervals

BF16, FP32 = 2, 4


def count(fn, inputs: dict, mutates=(), model=None):
    counter = WorkCounter()
    counter.add_inputs(inputs, model)
    with torch.no_grad(), counter:
        out = fn(**inputs)
    named = {"out": out} if isinstance(out, torch.Tensor) else dict(out or {})
    named.update({f"input:{n}": inputs[n] for n in mutates})
    return counter.result(named)


def by_name(entries) -> dict:
    return {c.name: c for c in entries}


# ---- touched bytes ----------------------------------------------------------------------------


def paged_decode(q, k_cache, block_table, seq_lens):
    """One query per sequence against its keys, found through a block table (page 4)."""
    outs = []
    for b, n in enumerate(seq_lens.tolist()):
        pages = block_table[b, : (n + 3) // 4]
        slots = (pages[:, None] * 4 + torch.arange(4)).reshape(-1)[:n]
        keys = k_cache.reshape(-1, 8).index_select(0, slots).float()
        outs.append(torch.softmax(q[b].float() @ keys.t(), -1) @ keys)
    return torch.stack(outs).to(q.dtype)


def test_paged_gather_reads_the_addressed_slots_and_table_entries():
    inputs = {"q": torch.randn(2, 8, dtype=torch.bfloat16),
              "k_cache": torch.randn(10, 4, 8, dtype=torch.bfloat16),  # a 40-slot pool
              "block_table": torch.tensor([[3, 7, 0], [5, 0, 0]], dtype=torch.int32),
              "seq_lens": torch.tensor([6, 3], dtype=torch.int32)}
    work = count(paged_decode, inputs)
    reads = by_name(work.touched.reads)
    # 6 + 3 keys of 8 bf16 values; pages 3, 7 and 5 of the table; both lengths; q
    assert reads["k_cache"].nbytes == (6 + 3) * 8 * BF16
    assert reads["k_cache"].rule == "touched"
    assert reads["block_table"].nbytes == 3 * 4
    assert reads["seq_lens"].nbytes == 2 * 4 and reads["q"].nbytes == 2 * 8 * BF16
    assert work.bytes_written == 2 * 8 * BF16
    # q.k and p.v for each key: 2 * 8 * 2 FLOPs per key, at the bf16 tensor-core class
    assert work.flops["bf16"] == (6 + 3) * 2 * 8 * 2
    assert work.flops["fp32_vector"] == (6 + 3) * flops.FLOPS_PER_REDUCED["_softmax"]


def routed_moe(x, w1, w2, topk_ids, topk_weights):
    out = torch.zeros(x.shape[0], x.shape[1])
    for e in range(w1.shape[0]):
        hit = topk_ids == e
        if not hit.any():
            continue
        tokens = hit.any(dim=-1).nonzero().reshape(-1)
        weight = (topk_weights * hit).sum(-1).index_select(0, tokens)
        h = F.silu(x.float().index_select(0, tokens) @ w1[e].float().t())
        out.index_add_(0, tokens, (h @ w2[e].float().t()) * weight[:, None])
    return out


def test_routed_moe_reads_only_the_routed_experts():
    experts, hidden, inter = 16, 8, 12
    ids = torch.tensor([[1, 4], [4, 9], [1, 1]])  # experts 1, 4, 9; token 2 twice on expert 1
    inputs = {"x": torch.randn(3, hidden, dtype=torch.bfloat16),
              "w1": torch.randn(experts, inter, hidden, dtype=torch.bfloat16),
              "w2": torch.randn(experts, hidden, inter, dtype=torch.bfloat16),
              "topk_ids": ids, "topk_weights": torch.rand(3, 2)}
    work = count(routed_moe, inputs)
    reads = by_name(work.touched.reads)
    assert reads["w1"].nbytes == 3 * inter * hidden * BF16
    assert reads["w2"].nbytes == 3 * hidden * inter * BF16
    assert reads["w1"].rule == "touched"
    assert reads["x"].nbytes == 3 * hidden * BF16
    assert reads["topk_ids"].nbytes == 6 * 8 and reads["topk_weights"].nbytes == 6 * FP32
    # routed (token, expert) pairs: expert 1 {0, 2}, 4 {0, 1}, 9 {1}: 5 rows through two GEMMs
    assert work.flops["bf16"] == 5 * 2 * (hidden * inter + inter * hidden)


def dequantize_all_then_route(w, scale, ids):
    w_all = w.float() * scale[:, None, None]  # every expert dequantized: dead work
    return w_all[ids].sum(0)


def test_dead_elementwise_work_on_unrouted_experts_is_not_counted():
    w = torch.randn(64, 32, 64, dtype=torch.bfloat16)  # 131072 elements: past LIVE_MIN
    work = count(dequantize_all_then_route, {"w": w, "scale": torch.rand(64),
                                             "ids": torch.tensor([3, 17])})
    assert by_name(work.touched.reads)["w"].nbytes == 2 * 32 * 64 * BF16
    # one multiply per element of the two routed experts, and the sum of two
    assert work.flops["fp32_vector"] == 2 * 32 * 64 + 2 * 32 * 64


def state_update(pool, idx, delta):
    state = pool.clone()
    rows = state.index_select(0, idx.long())
    state.index_copy_(0, idx.long(), rows * 0.5 + delta)
    return {"state": state}


def test_clone_and_scatter_of_a_state_pool_counts_the_rewritten_rows_once():
    pool = torch.randn(474, 4, 16, 16)  # a state pool of 474 rows, 2 of them touched
    work = count(state_update, {"pool": pool, "idx": torch.tensor([7, 300], dtype=torch.int32),
                                "delta": torch.randn(2, 4, 16, 16)})
    row = 4 * 16 * 16 * FP32
    reads, writes = by_name(work.touched.reads), by_name(work.touched.writes)
    assert reads["pool"].nbytes == 2 * row and reads["pool"].rule == "touched"
    assert writes["state"].nbytes == 2 * row and writes["state"].rule == "rewritten"
    assert reads["delta"].nbytes == 2 * row and reads["idx"].nbytes == 2 * 4
    assert work.flops == {"fp32_vector": 2 * (2 * 4 * 16 * 16)}  # a multiply and an add


def cache_append(key, value, k_cache, v_cache, slot_mapping):
    k_cache.view(-1, 2, 8)[slot_mapping] = key
    v_cache.view(-1, 2, 8).index_put_((slot_mapping,), value)
    return {}


def test_in_place_cache_write_counts_the_written_slots_only():
    pool = (64, 16, 2, 8)  # 64 pages of 16 slots, 2 heads x 8
    inputs = {"key": torch.randn(3, 2, 8, dtype=torch.bfloat16),
              "value": torch.randn(3, 2, 8, dtype=torch.bfloat16),
              "k_cache": torch.zeros(pool, dtype=torch.bfloat16),
              "v_cache": torch.zeros(pool, dtype=torch.bfloat16),
              "slot_mapping": torch.tensor([5, 200, 1023])}
    work = count(cache_append, inputs, mutates=("k_cache", "v_cache"))
    slot = 2 * 8 * BF16
    writes, reads = by_name(work.touched.writes), by_name(work.touched.reads)
    assert writes["input:k_cache"].nbytes == 3 * slot == writes["input:v_cache"].nbytes
    assert reads["k_cache"].nbytes == 0 and reads["v_cache"].nbytes == 0
    assert reads["key"].nbytes == 3 * slot and reads["slot_mapping"].nbytes == 3 * 8
    assert work.bytes == 2 * 3 * slot * 2 + 3 * 8


# ---- attention -----------------------------------------------------------------------------


def test_causal_sdpa_counts_the_computed_pairs_on_the_cpu():
    b, h, n, d = 2, 3, 33, 16
    q, k, v = (torch.randn(b, h, n, d) for _ in range(3))
    pairs = b * h * n * (n + 1) // 2
    work = count(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                 {"q": q, "k": k, "v": v})
    assert work.flops["fp32"] == pairs * 4 * d
    assert work.flops["fp32_vector"] == pairs * flops.SOFTMAX_PER_PAIR
    # the CPU kernel F.sdpa runs underneath, called directly: the same count
    direct = count(lambda q, k, v: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, 0.0, True)[0], {"q": q, "k": k, "v": v})
    assert direct.flops == work.flops


def test_windowed_and_masked_sdpa_count_the_unmasked_pairs():
    n, d, window = 40, 8, 6
    i = torch.arange(n)
    band = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - window)
    q, k, v = (torch.randn(1, 2, n, d) for _ in range(3))
    work = count(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                 {"q": q, "k": k, "v": v, "m": band})
    pairs = 2 * sum(min(r + 1, window) for r in range(n))
    assert work.flops["fp32"] == pairs * 4 * d
    additive = torch.zeros(n, n).masked_fill(~band, float("-inf"))
    work = count(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                 {"q": q, "k": k, "v": v, "m": additive})
    assert work.flops["fp32"] == pairs * 4 * d


def test_varlen_flash_attention_counts_each_sequence_bottom_right_and_windowed():
    meta = {"dtype": torch.bfloat16, "device": "meta"}
    q, k, v = (torch.empty(10 + 30, 4, 64, **meta) for _ in range(3))
    cu = torch.tensor([0, 10, 40], dtype=torch.int32)
    func = torch.ops.aten._flash_attention_forward.default
    causal = flops.count(func, (q, k, v, cu, cu, 30, 30, 0.0, True, False), {}, None)
    assert causal.matrix == 4 * (10 * 11 // 2 + 30 * 31 // 2) * 4 * 64
    assert causal.vector_class == "bf16_vector"
    windowed = flops.count(func, (q, k, v, cu, cu, 30, 30, 0.0, True, False),
                           {"window_size_left": 3, "window_size_right": 0}, None)
    rows = sum(min(r + 1, 4) for r in range(10)) + sum(min(r + 1, 4) for r in range(30))
    assert windowed.matrix == 4 * rows * 4 * 64
    # fewer queries than keys: the diagonal sits at the bottom right
    assert flops.causal_pairs(2, 5, bottom_right=True) == 4 + 5
    assert flops.causal_pairs(2, 5) == 1 + 2  # SDPA's is_causal: top left


# ---- elementwise work and the floor ------------------------------------------------------------


def rmsnorm(x, weight):
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + 1e-6) * weight.float()).to(
        x.dtype)


def test_elementwise_flops_follow_the_table_on_cuda_core_classes():
    rows, cols = 5, 64
    work = count(rmsnorm, {"x": torch.randn(rows, cols, dtype=torch.bfloat16),
                           "weight": torch.randn(cols, dtype=torch.bfloat16)})
    # square, mean, multiply by rstd, multiply by weight per element; add eps and rsqrt per row
    assert work.flops == {"fp32_vector": 4 * rows * cols + 2 * rows}
    silu = count(lambda x: F.silu(x), {"x": torch.randn(rows, cols, dtype=torch.bfloat16)})
    assert silu.flops == {"bf16_vector": flops.FLOPS_PER_ELEMENT["silu"] * rows * cols}


def test_the_floor_overlaps_tensor_and_cuda_cores_and_adds_classes_on_one_unit():
    h200 = datasheet_peaks("h200_sxm")
    assert h200.tflops["bf16_vector"] == 133.8 and h200.tflops["fp32_vector"] == 66.9
    tensor = {"bf16": 989.4e9}  # 1 ms on tensor cores
    cuda = {"fp32_vector": 66.9e9 * 0.5, "bf16_vector": 133.8e9 * 0.25}  # 0.75 ms on CUDA cores
    assert classes.sol_ms({**tensor, **cuda}, 0, h200.tflops, 4.8) == pytest.approx(1.0)
    assert classes.sol_ms(cuda, 0, h200.tflops, 4.8) == pytest.approx(0.75)
    assert classes.bound(cuda, 4.8e9, h200.tflops, 4.8) == "memory"
    # a peak table without CUDA-core rows (older calibrations) rates them at fp32
    assert classes.rate_tflops({"bf16": 900.0, "fp32": 60.0}, "bf16_vector") == 60.0


# ---- counting GPU-sized shapes on a CPU ---------------------------------------------------------


def big_moe(x, w, ids):
    out = torch.zeros(x.shape[0], w.shape[1], dtype=torch.float32, device=x.device)
    for e in ids.unique().tolist():
        rows = (ids == e).nonzero().reshape(-1)
        out.index_add_(0, rows, x.index_select(0, rows).float() @ w[e].float().t())
    return out


def test_hybrid_counts_a_gpu_sized_shape_without_materializing_it():
    experts, hidden, inter = 64, 4096, 8192  # 4 GiB of bf16 weights: a shape, not a tensor
    with Hybrid(real_limit=1 << 20):
        torch.manual_seed(0)
        x = torch.randn(6, hidden, dtype=torch.bfloat16, device="cuda")
        w = torch.randn(experts, inter, hidden, dtype=torch.bfloat16, device="cuda")
        ids = torch.tensor([3, 3, 40, 7, 40, 3], device="cuda")
        assert w.device.type == "meta" and ids.device.type == "cpu"
        work = count(big_moe, {"x": x, "w": w, "ids": ids})
    assert by_name(work.touched.reads)["w"].nbytes == 3 * inter * hidden * BF16
    assert work.flops["bf16"] == 6 * 2 * hidden * inter


# ---- index maps against brute force --------------------------------------------------------------


def _positions(m: IndexMap) -> torch.Tensor:
    out = torch.full(m.shape, m.offset, dtype=torch.long)
    for d, st in m.affine:
        shape = [1] * len(m.shape)
        shape[d] = m.shape[d]
        out = out + torch.arange(m.shape[d]).reshape(shape) * st
    for t in m.tables:
        out = out + t
    return out


def test_index_maps_follow_random_chains_of_views_and_gathers():
    rng = random.Random(0)
    source = torch.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    for _ in range(150):
        x, m = source, IndexMap.strided(source.shape, source.stride())
        for _ in range(4):
            op = rng.choice(["permute", "select", "slice", "index_select", "reshape", "index"])
            d = rng.randrange(x.dim())
            if op == "permute":
                perm = list(range(x.dim()))
                rng.shuffle(perm)
                x, m = x.permute(perm), m.permute(perm)
            elif op == "select" and x.dim() > 1:
                i = rng.randrange(x.shape[d])
                x, m = x.select(d, i), m.select(d, i)
            elif op == "slice":
                a = rng.randrange(x.shape[d])
                e, step = rng.randrange(a, x.shape[d]) + 1, rng.choice([1, 2])
                x, m = x[(slice(None),) * d + (slice(a, e, step),)], m.slice(d, a, e, step)
            elif op == "index_select":
                idx = torch.randint(0, x.shape[d], (rng.randint(1, 4),))
                x, m = x.index_select(d, idx), m.index_select(d, idx)
            elif op == "reshape":
                x, m = x.reshape(-1), m.reshape([-1])
                if x.numel() % 2 == 0:
                    x, m = x.reshape(2, -1), m.reshape([2, -1])
            elif op == "index":
                idx = torch.randint(0, x.shape[d], (2, 2))
                where = [None] * x.dim()
                where[d] = idx
                x = x[tuple(slice(None) if w is None else w for w in where)]
                m = m.index(where)
            assert torch.equal(_positions(m), x)
            assert covered([intervals(m)]) == torch.unique(x).numel()

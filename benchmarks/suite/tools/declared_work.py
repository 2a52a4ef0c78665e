"""Hand counts of the suite's work, and the one value still declared in metadata.json.

The runner counts FLOPs and the bytes an ideal kernel must touch on each reference
(docs/roofline.md). This tool computes by hand what that count must be where it matters most:
- paged attention: only the tokens of the sequences are traffic, not the pool's spare pages, and
  FLOPs on the attended tokens;
- causal prefill: FLOPs on the pairs actually computed, L(L+1)/2 per sequence and head;
- RoPE: only the cache rows the positions select; KV append: only the written slots.
tests/suite checks the counter against these on the CPU shapes.

Declared (metadata.json) is only the MoE decode shape's bytes: the experts one call's routing
touches vary with the draw (~119 of 128 on average, +-2.4% per call), and the declared mean over
seeded draws is a floor that does not move with the draw.

`python benchmarks/suite/tools/declared_work.py` prints both; `--write` stores the declared value.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
from pathlib import Path

SUITE = Path(__file__).resolve().parent.parent


def _load_input_module(op: str):
    spec = importlib.util.spec_from_file_location(f"_declared_{op}", SUITE / op / "input.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _shapes(op: str) -> dict:
    return json.loads((SUITE / op / "shapes.json").read_text())


def paged_decode_gqa() -> dict:
    mod = _load_input_module("paged_decode_gqa")
    out = {}
    for sid, shape in _shapes("paged_decode_gqa").items():
        kw = dict(shape["input_kwargs"])
        b, hq, hkv, d = kw["batch"], kw["num_q_heads"], kw["num_kv_heads"], kw["head_size"]
        page = kw.get("page_size", 16)
        lens = mod._seq_lens(b, kw.get("mean_len", 1536), kw.get("min_len", 256),
                             kw.get("max_len", 4096), kw.get("seq_lens"))
        tokens = sum(lens)
        pages = sum(math.ceil(n / page) for n in lens)
        flops = 4 * hq * d * tokens  # QK^T and PV on the tokens actually attended
        nbytes = (2 * tokens * hkv * d * 2  # K and V of the used tokens, bf16
                  + 2 * b * hq * d * 2  # q in, out
                  + pages * 4 + b * 4)  # used block-table entries, seq_lens
        out[sid] = {"flops": flops, "bytes": nbytes, "kv_tokens": tokens}
    return out


def mla_paged_decode() -> dict:
    mod = _load_input_module("mla_paged_decode")
    out = {}
    for sid, shape in _shapes("mla_paged_decode").items():
        kw = dict(shape["input_kwargs"])
        b, h, dl, dr = kw["batch"], kw["num_heads"], kw["kv_lora_rank"], kw["rope_dim"]
        page = kw.get("page_size", 64)
        lens = mod._seq_lens(b, kw["mean_len"], kw["min_len"], kw["max_len"], kw.get("seq_lens"))
        tokens = sum(lens)
        pages = sum(math.ceil(n / page) for n in lens)
        flops = 2 * h * tokens * (dl + dr) + 2 * h * tokens * dl  # QK^T (576) and PV (512)
        nbytes = (tokens * (dl + dr) * 2  # latent cache rows of the used tokens, bf16
                  + b * h * (dl + dr) * 2 + b * h * dl * 2  # q in, out
                  + pages * 4 + b * 4)
        out[sid] = {"flops": flops, "bytes": nbytes, "kv_tokens": tokens}
    return out


def _routed_experts(op: str, kw: dict, draws: int = 2000) -> float:
    """Mean number of distinct experts a call's routing touches (seeded, so reproducible)."""
    import torch

    sys.path.insert(0, str(SUITE.parent.parent))
    from atrex.runner.executor.devmap import CudaToCpu

    mod = _load_input_module(op)
    total = 0
    with CudaToCpu():
        for seed in range(draws):
            torch.manual_seed(seed)
            _, ids = mod._route(kw["num_tokens"], kw["num_experts"], kw["top_k"],
                                kw.get("skew", 0.3))
            total += ids.unique().numel()
    return total / draws


def fused_moe() -> dict:
    out = {}
    for sid, shape in _shapes("fused_moe").items():
        if "cuda" not in shape.get("targets", ["cuda"]):
            continue  # no roofline where nothing is timed
        kw = shape["input_kwargs"]
        t, e, k = kw["num_tokens"], kw["num_experts"], kw["top_k"]
        h, i = kw["hidden_size"], kw["intermediate_size"]
        # Large token counts touch every expert; a few draws show it (they cost ~20 ms each).
        expected = _routed_experts("fused_moe", kw, draws=2000 if t * k <= 8 * 1024 else 20)
        if expected > e - 0.5:
            continue  # every expert is read: the runner's count (all inputs once) is right
        expert_bytes = 3 * h * i * 2  # w1 (2I x H) and w2 (H x I), bf16
        nbytes = round(expected * expert_bytes) + 2 * t * h * 2 + t * k * (4 + 4)
        out[sid] = {"bytes": nbytes, "experts_touched_mean": round(expected, 2)}
    return out


def prefill_attention_gqa() -> dict:
    out = {}
    for sid, shape in _shapes("prefill_attention_gqa").items():
        kw = shape["input_kwargs"]
        pairs = sum(n * (n + 1) // 2 for n in kw["seq_lens"])
        out[sid] = {"flops": 4 * kw["head_size"] * kw["num_q_heads"] * pairs}
    return out


def kv_cache_append() -> dict:
    out = {}
    for sid, shape in _shapes("kv_cache_append").items():
        kw = shape["input_kwargs"]
        valid = kw["num_tokens"] - kw.get("num_padding", 0)
        row = kw["num_kv_heads"] * kw["head_size"] * 2  # one token's key (or value), bf16
        # key and value of each valid token read once and written once; the slot mapping
        out[sid] = {"bytes": 4 * valid * row + kw["num_tokens"] * 8}
    return out


def rope() -> dict:
    out = {}
    for sid, shape in _shapes("rope").items():
        kw = shape["input_kwargs"]
        t, d = kw["num_tokens"], kw["head_size"]
        heads = kw["num_q_heads"] + kw["num_kv_heads"]
        if kw["phase"] == "decode":
            rows = t  # distinct positions
        else:
            rows = min(t, min(2048, kw["max_position"]))
        # query and key read and written, the positions, the distinct fp32 cos|sin rows
        out[sid] = {"bytes": 2 * t * heads * d * 2 + t * 8 + rows * d * 4}
    return out


HAND_COUNTS = {
    "paged_decode_gqa": paged_decode_gqa,
    "mla_paged_decode": mla_paged_decode,
    "prefill_attention_gqa": prefill_attention_gqa,
    "kv_cache_append": kv_cache_append,
    "rope": rope,
}
DECLARED = {"fused_moe": fused_moe}


def compute(ops=None) -> dict[str, dict]:
    """The values declared in metadata.json."""
    return {op: fn() for op, fn in DECLARED.items()
            if (ops is None or op in ops) and (SUITE / op).is_dir()}


def hand_counts(ops=None) -> dict[str, dict]:
    """What the counter must find (tests/suite checks it on the CPU shapes)."""
    return {op: fn() for op, fn in HAND_COUNTS.items()
            if (ops is None or op in ops) and (SUITE / op).is_dir()}


def write(values: dict[str, dict]) -> None:
    for op, shapes in values.items():
        path = SUITE / op / "metadata.json"
        meta = json.loads(path.read_text())
        for sid, work in shapes.items():
            entry = meta.setdefault("shapes", {}).setdefault(sid, {})
            for key in ("flops", "bytes"):
                if key in work:
                    entry[key] = work[key]
        path.write_text(json.dumps(meta, indent=2) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update the metadata.json files")
    parser.add_argument("ops", nargs="*")
    args = parser.parse_args(argv)
    values = compute(args.ops or None)
    print(json.dumps({"declared": values, "hand_counts": hand_counts(args.ops or None)},
                     indent=2))
    if args.write:
        write(values)
    return 0


if __name__ == "__main__":
    sys.exit(main())

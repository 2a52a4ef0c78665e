"""Profile a few decode steps of a Llama-architecture model with random weights (no download).

The model is built from a `transformers` LlamaConfig: Llama-3.1-8B's layer dimensions (hidden
4096, MLP 14336, 32 query / 8 KV heads of 128, vocabulary 128256) with only --layers decoder
layers, random bf16 weights. A batch of --batch prompts of --prompt random tokens is prefilled
(not profiled), then --steps decode steps run under torch.profiler (record_shapes, with_stack so
Transformers' Python functions and modules are named in the trace), each ending with a
top-k/top-p sampling step in a `record_function("top_k_top_p_sampling")` as a serving loop has
it. Writes the Chrome trace (gzip) and a small JSON of what ran.

    python3 benchmarks/llama_trace.py --out DIR                 (H200: defaults)
    python3 benchmarks/llama_trace.py --out DIR --tiny --device cpu   (a CPU check of the path)
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the device has no network; nothing is fetched

LLAMA_8B_LAYER = {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
                  "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256,
                  "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
                  "max_position_embeddings": 8192}
TINY = {"hidden_size": 64, "intermediate_size": 160, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 512, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "max_position_embeddings": 512}


def build_model(tiny: bool, layers: int, device: str, dtype: torch.dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**(TINY if tiny else LLAMA_8B_LAYER), num_hidden_layers=layers,
                         attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(dtype)
    return model.eval(), config


def sample(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Top-k, then top-p (nucleus) sampling from the last position's logits."""
    with record_function("top_k_top_p_sampling"):
        probs = torch.softmax(logits.float(), dim=-1)
        values, indices = torch.topk(probs, top_k, dim=-1)
        cumulative = values.cumsum(dim=-1)
        values = values.masked_fill(cumulative - values > top_p, 0.0)
        choice = torch.multinomial(values / values.sum(-1, keepdim=True), 1)
        return indices.gather(-1, choice)


def run(args) -> dict:
    from transformers import DynamicCache

    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    model, config = build_model(args.tiny, args.layers, args.device, dtype)
    tokens = torch.randint(0, config.vocab_size, (args.batch, args.prompt), device=args.device)
    cache = DynamicCache()
    with torch.no_grad():
        out = model(input_ids=tokens, past_key_values=cache, use_cache=True)
        next_tokens = sample(out.logits[:, -1], args.top_k, args.top_p)
        activities = [ProfilerActivity.CPU] + (
            [ProfilerActivity.CUDA] if args.device == "cuda" else [])
        _sync(args.device)
        started = time.perf_counter()
        with profile(activities=activities, record_shapes=True, with_stack=True) as prof:
            for _ in range(args.steps):
                out = model(input_ids=next_tokens, past_key_values=cache, use_cache=True)
                next_tokens = sample(out.logits[:, -1], args.top_k, args.top_p)
            _sync(args.device)
        wall_s = time.perf_counter() - started
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    raw = out_dir / "llama_decode_trace.json"
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as src, gzip.open(str(raw) + ".gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    info = {"model": "LlamaForCausalLM, random weights", "config": config.to_dict(),
            "layers": args.layers, "batch": args.batch, "prompt_tokens": args.prompt,
            "decode_steps": args.steps, "device": args.device,
            "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
            "torch": torch.__version__, "transformers": _version("transformers"),
            "profiled_wall_s": round(wall_s, 4), "trace": str(raw) + ".gz"}
    (out_dir / "llama_trace.json").write_text(json.dumps(info, indent=2, default=str) + "\n")
    return info


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _version(module: str) -> str | None:
    try:
        return __import__(module).__version__
    except ImportError:
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--tiny", action="store_true", help="a tiny config (CPU check)")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--top-k", type=int, default=50)
    parser.add_argument("--top-p", type=float, default=0.9)
    info = run(parser.parse_args())
    print(json.dumps({k: v for k, v in info.items() if k != "config"}))


if __name__ == "__main__":
    main()

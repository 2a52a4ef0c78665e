"""kv_cache_append's tiled path (TILE_TOKENS rows per program, every load before the first store)
under the Triton interpreter: the caches it writes equal the reference's bit for bit, with a
partial last tile and padding slots (-1) inside and at the end of the call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .op_script import LOAD_OP_FILES, last_json

ROOT = Path(__file__).resolve().parents[2]
OP = ROOT / "benchmarks" / "suite" / "kv_cache_append"

# Runs in a child: TRITON_INTERPRET must be set before triton is imported.
CHECK = LOAD_OP_FILES + r"""
import json
import torch

kernel, reference = load("kernel"), load("reference")
kernel.TILE_TOKENS = int(sys.argv[2])
tokens, heads, head_size, page_size, pages = json.loads(sys.argv[3])
g = torch.Generator().manual_seed(3)
slots = (torch.randperm(pages, generator=g)[:, None] * page_size
         + torch.arange(page_size)[None, :]).flatten()[:tokens].clone()
slots[[5, 17, tokens - 1]] = -1  # padding inside a tile and in the partial last one
key = torch.randn(tokens, heads, head_size, generator=g).bfloat16()
value = torch.randn(tokens, heads, head_size, generator=g).bfloat16()
caches = [torch.randn(pages, page_size, heads, head_size, generator=g).bfloat16()
          for _ in range(2)]
want = [c.clone() for c in caches]
reference.Model()(key, value, *want, slots)
kernel.kv_cache_append(key, value, *caches, slots)
print(json.dumps({"equal": all(torch.equal(a, b) for a, b in zip(caches, want))}))
"""


@pytest.mark.parametrize("tile", [1, 4, 8])
def test_tiled_copy_writes_what_the_reference_writes(tile):
    shape = (45, 2, 64, 16, 8)  # 45 tokens: tiles of 4 or 8 leave a partial last one
    assert last_json(CHECK, str(OP), str(tile), json.dumps(shape)) == {"equal": True}

"""Launch-configuration sweep of the suite's attention kernels (issue 13), one JSON.

    python3 benchmarks/attention_h200.py OUT.json [--device cuda|cpu] [--ops a,b] [--shape ID]
        [--max-seconds S] [--quick]
    python3 benchmarks/attention_h200.py --summarize RESULT.json ...   (a Markdown table)
    ncu --profile-from-start off ... python3 benchmarks/attention_h200.py x --ops OP --profile-once

The machinery is benchmarks/launch_sweep.py; this file names the operators and the constants
swept: tile sizes, warps and pipeline depth for all three; the number of KV splits for the two
decode kernels (more splits fill the 132 SMs, each costs a partial output and its merge); tensor
descriptors (TMA) and warp specialization for the prefill kernel. These kernels run for 30-400 us
a call, so each is timed with CUDA events only (no graph: launch overhead is noise here).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launch_sweep import Plan, main, variants  # noqa: E402

PLAN = Plan(grids={
    # round 1 (benchmarks/results/h200-attention/sweep-c7084d8): 8 warps and a heads-as-columns
    # kernel (token tile as the wgmma M side; removed since) were slower everywhere; 16 splits per
    # sequence best at both lengths
    "mla_paged_decode": [
        {"BLOCK_N": [16, 32, 64], "SPLITS_PER_SEQ": [8, 16, 32], "NUM_WARPS": [4],
         "NUM_STAGES": [2, 3], "MERGE_HEADS": [1], "PDL": [True]},
        # round 3 (results/h200-attention/sweep-f7d4861): fused merge, balanced schedule lost; gone
        # round 4: splits no longer a power of two (16 per sequence made 540 programs at both
        # lengths, 1.02 waves of 528 resident slots; 12-14 make 320-384 tokens at kv2k and
        # 1216-1408 at kv8k) and the latent rows loaded evict_first
        {"BLOCK_N": [32], "SPLITS_PER_SEQ": [12, 13, 14, 16], "MAX_SPLIT_BLOCK": [2048],
         "NUM_WARPS": [4], "NUM_STAGES": [3], "MERGE_HEADS": [1], "PDL": [True],
         "KV_EVICT": ["", "evict_first"]},
        # round 5: the merge (8.8-8.9 us under ncu on an H100, its partials read at half of DRAM
        # peak): partials stored evict_last, 8 warps per merge program
        {"BLOCK_N": [32], "SPLITS_PER_SEQ": [14], "MAX_SPLIT_BLOCK": [2048], "NUM_WARPS": [4],
         "NUM_STAGES": [3], "MERGE_HEADS": [1], "PDL": [True], "KV_EVICT": ["", "evict_first"],
         "PARTIAL_EVICT": ["", "evict_last"], "MERGE_WARPS": [4, 8]},
        # round 5 too: fp16 partials (18% of kv2k's KV bytes written and read back in fp32 at 14
        # splits, 9% in 16 bits; fp16 keeps fp32's accuracy on the CPU shape, bf16 did not),
        # which make finer splits cheaper: 18 / 22 / 32 splits are 256 / 192 / 128 tokens at
        # kv2k (540 / 717 / 1051 programs for 528 slots; 440 at 14) and 960 / 768 / 512 at kv8k
        {"BLOCK_N": [32], "SPLITS_PER_SEQ": [14, 18, 22, 32], "MAX_SPLIT_BLOCK": [2048],
         "NUM_WARPS": [4], "NUM_STAGES": [3], "MERGE_HEADS": [1], "PDL": [True], "KV_EVICT": [""],
         "PARTIAL_DTYPE": ["fp32", "fp16"]},
    ],
    # round 2 (sweep-2e35075): BLOCK_N 64, 2 stages, 16 splits, merge of 8 heads
    "paged_decode_gqa": [
        {"BLOCK_N": [32, 64], "SPLITS_PER_SEQ": [16], "NUM_WARPS": [4, 8],
         "NUM_STAGES": [2, 3], "MERGE_HEADS": [8], "PDL": [True]},
        {"BLOCK_N": [64], "SPLITS_PER_SEQ": [8, 16, 32], "NUM_WARPS": [4], "NUM_STAGES": [2],
         "MERGE_HEADS": [8], "PDL": [True]},
        # round 3 (results/h200-attention/sweep-f7d4861): fused merge, balanced schedule, pages
        # through tensor descriptors, 2-4 kv heads per program all lost; gone
        # round 4: the kv head on the grid's fastest axis (a token's 8 heads read side by side),
        # K/V evict_first, and splits that are not a power of two (3312 programs at 256 tokens
        # are 5.02 waves of 660 resident slots; 10-13 splits make 448-320 tokens)
        {"BLOCK_N": [64], "SPLITS_PER_SEQ": [10, 12, 13, 16], "NUM_WARPS": [4],
         "NUM_STAGES": [2], "MERGE_HEADS": [8], "PDL": [True], "HEADS_FASTEST": [False, True],
         "KV_EVICT": ["", "evict_first"]},
        # round 5: the merge (5.8 us under ncu on an H100): partials stored evict_last, 8 warps
        # per merge program
        {"BLOCK_N": [64], "SPLITS_PER_SEQ": [10], "NUM_WARPS": [4], "NUM_STAGES": [2],
         "MERGE_HEADS": [8], "PDL": [True], "HEADS_FASTEST": [True], "KV_EVICT": ["evict_first"],
         "PARTIAL_EVICT": ["", "evict_last"], "MERGE_WARPS": [4, 8]},
        # round 5 too: the gathered rows' offsets in 32 bits and one offset vector for K and V
        # (ptxas, sm_90a, the device's Triton 3.6: 96 registers with neither or both, 162 with
        # SAME_KV_OFFSETS alone; both cut the PTX from 1,601 to 1,500 lines)
        {"BLOCK_N": [64], "SPLITS_PER_SEQ": [10], "NUM_WARPS": [4], "NUM_STAGES": [2],
         "MERGE_HEADS": [8], "PDL": [True], "HEADS_FASTEST": [True], "KV_EVICT": ["evict_first"],
         "OFFSET_32": [False, True], "SAME_KV_OFFSETS": [False, True]},
    ],
    # round 1: tensor descriptors with 4 warps (one warpgroup, two m64 wgmma row blocks) best
    "prefill_attention_gqa": [
        {"BLOCK_M": [128], "BLOCK_N": [64, 128], "NUM_WARPS": [4], "NUM_STAGES": [2, 3, 4],
         "USE_TMA": [True]},
        {"BLOCK_M": [256], "BLOCK_N": [64], "NUM_WARPS": [8], "NUM_STAGES": [2, 3],
         "USE_TMA": [True]},
        {"BLOCK_M": [128], "BLOCK_N": [64, 128], "NUM_WARPS": [4], "NUM_STAGES": [2, 3],
         "USE_TMA": [True], "WARP_SPECIALIZE": [True]},
        {"BLOCK_M": [128], "BLOCK_N": [64], "NUM_WARPS": [4], "NUM_STAGES": [2],
         "USE_TMA": [False]},
        # narrower key tiles (a [128, 32] score tile: 32 fewer registers per thread at 255, twice
        # the rescales of the accumulator); round 3 (f7d4861) lost: 398.6-431.5 us against 338.4
        # (results/h200-attention/sweep-f7d4861)
        {"BLOCK_M": [128], "BLOCK_N": [32], "NUM_WARPS": [4], "NUM_STAGES": [2, 3],
         "USE_TMA": [True]},
        # round 4: the next key block's scores issued before this block's softmax (PIPELINE_QK)
        # lost on the H100, 481.5-576.1 us against 342.9 (results/h100-sweeps-9845867/prefill);
        # gone
        # round 5: conditional rescaling (RESCALE_SLACK 8) lost on an H100, 432.6 us against
        # 342.1 (results/h100-7402845/attention); gone
        # round 6: one masked loop instead of an unmasked and a diagonal one (Triton 3.6 spills
        # 68 bytes with two loops, mostly inside the diagonal loop; 12 with one, outside it)
        {"BLOCK_M": [128], "BLOCK_N": [64], "NUM_WARPS": [4], "NUM_STAGES": [2],
         "USE_TMA": [True], "ONE_LOOP": [False, True]},
    ],
}, graph=False, cpu_inert=frozenset({"NUM_WARPS", "NUM_STAGES", "WARP_SPECIALIZE",
                                          "KV_EVICT", "PARTIAL_EVICT", "MERGE_WARPS"}))

__all__ = ["PLAN", "variants"]

if __name__ == "__main__":
    sys.exit(main(PLAN, __doc__.splitlines()[0]))

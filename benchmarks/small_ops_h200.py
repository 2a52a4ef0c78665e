"""Launch-configuration sweep of the suite's small memory-bound kernels (issue 15), one JSON.

    python3 benchmarks/small_ops_h200.py OUT.json [--device cuda|cpu] [--ops a,b] [--shape ID]
        [--max-seconds S] [--quick]
    python3 benchmarks/small_ops_h200.py --summarize RESULT.json ...   (a Markdown table)

The machinery (checks against the reference, the judge's timing, baselines, the PDL launch
floors) is benchmarks/launch_sweep.py; this file names the operators and the constants swept.
Each call is also timed inside a CUDA graph: these kernels are launch-bound at decode sizes.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launch_sweep import Plan, main, variants  # noqa: E402

PLAN = Plan(grids={
    "fused_add_rmsnorm": [
        {"TILE_ELEMS": [4096, 8192, 16384], "NUM_WARPS": [4, 8, 16], "PDL": [False, True]},
        # round 2, a persistent grid whose row loop is software-pipelined, lost on an H100
        # (results/h100-34d8498/small-2) and is gone from the kernel
        # round 3: the results stored evict_first (134 MB at prefill that nothing reads again)
        {"TILE_ELEMS": [4096], "NUM_WARPS": [8], "PDL": [True], "STREAM_STORES": [False, True]},
        # round 4: a row in column chunks read twice, torch.compile's structure (it leads by 3%
        # on the H200; ncu on an H100, results/h100-d09cac2/ncu-small: 512 threads, 25 registers)
        {"TWO_PASS_BLOCK": [0, 1024, 2048, 4096], "NUM_WARPS": [8, 16]},
    ],
    "silu_and_mul": {"BLOCK_COLS": [1024, 2048, 4096], "MAX_WARPS": [4, 8], "PDL": [False, True]},
    "rope": [
        {"NUM_WARPS": [2, 4, 8], "TOKENS_PER_PROGRAM": [1, 2, 4], "PDL": [False, True]},
        # round 2: a token's heads spread over programs of 4 / 8 / 16 heads (decode-t64 took
        # 2.36 us, the H200's floor for a read after an index read is 1.23, results/h200-bdee65c);
        # on an H100 8 heads took decode-t64 from 2.43 to 1.82 us (results/h100-1edce42), used
        # since under the SM count only, so at prefill-t8192 every variant is the per-token grid
        {"HEADS_PER_PROGRAM": [0, 4, 8, 16], "NUM_WARPS": [4, 8], "PDL": [True]},
    ],
    "kv_cache_append": [
        {"BLOCK_MAX": [1024, 2048], "MAX_WARPS": [4, 8], "TOKENS_PER_PROGRAM": [1, 2, 4],
         "PDL": [False, True]},
        # round 2: TILE_TOKENS rows a program as one tile, every load before the first store
        # (ncu on an H100, results/h100-c43421b: prefill 65.3% of DRAM, waiting on loads).
        # ptxas (Triton 3.9, sm_90a): 40 registers at 4 tokens, 152 at 8 (left out). On an
        # H100 (results/h100-b03f012/kv) the tiles lost by 1.2-1.5% at prefill (21.79-21.86 us
        # against 21.54), decode level; the H200 has yet to run it
        {"TILE_TOKENS": [1, 2, 4], "MAX_WARPS": [4]},
        {"TILE_TOKENS": [4], "MAX_WARPS": [8], "BLOCK_MAX": [1024]},
    ],
    "per_token_group_fp8_quant": [
        {"GROUPS_PER_PROGRAM": [16, 32, 64], "NUM_WARPS": [2, 4, 8]},
        # round 2: a persistent grid whose loop over blocks of groups is software-pipelined
        {"GROUPS_PER_PROGRAM": [32], "NUM_WARPS": [4], "PROGRAMS_PER_SM": [0]},
        {"GROUPS_PER_PROGRAM": [32], "NUM_WARPS": [4], "PROGRAMS_PER_SM": [4, 8, 16],
         "LOOP_STAGES": [2, 3]},
        # round 3: the fp8 values and scales stored evict_first
        {"GROUPS_PER_PROGRAM": [32], "NUM_WARPS": [4], "PROGRAMS_PER_SM": [0],
         "STREAM_STORES": [False, True]},
    ],
    "top_k_top_p_sampling": [
        {"CHUNKS_PER_SM": [4, 8], "MAX_CHUNKS": [16, 32], "STATS_BLOCK": [256, 512],
         "PDL": [True]},
        {"CHUNKS_PER_SM": [4], "MAX_CHUNKS": [16], "STATS_BLOCK": [512],
         "STATS_PAIR": [False, True], "SKIP_EMPTY_CHUNKS": [False, True], "PDL": [True]},
        # the two things that helped at 38610a8 (8 chunk programs per SM: 91.6 -> 64.5 us; PAIR
        # at 4 per SM: 91.6 -> 79.5) pushed further. FUSED_WRITE, NOFILTER_COARSE and
        # STATS_STAGES / SCAN_STAGES, swept with them at 9845867, lost on the H100 and are gone
        # from the kernel (results/h100-sweeps-9845867/sampling)
        {"CHUNKS_PER_SM": [8, 16], "MAX_CHUNKS": [32], "STATS_BLOCK": [256],
         "STATS_PAIR": [False, True], "PDL": [True]},
        # the select stage's large rows: bisection over the buffer above 4096 (off), 1024 or 256
        # candidates instead of the sort (the judge's draws on the H200: 583.8 us against 58.1
        # on new values, results/h200-baac206/sampling-bench)
        {"CHUNKS_PER_SM": [8], "MAX_CHUNKS": [32], "STATS_BLOCK": [256], "STATS_PAIR": [True],
         "PDL": [True], "BISECT_ABOVE": [4096, 1024, 256]},
        # round 6 (ncu on an H100, results/h100-d09cac2/ncu-sampling: statistics 24.6 us at 61%
        # of SM throughput, compaction 29.6 at 30% of DRAM, select 12.8): the compaction
        # by atomics instead of prefix sums, empty chunks skipped, and 4 thresholds 2^3 apart
        # instead of 6 (8 columns) 2^2 apart, with 16-byte loads in the statistics pass. On an
        # H100 (results/h100-b3823ce/sampling, 12 draws): 65.1 us a call as committed before,
        # 54.6 with all three at 256 per step (512: 56.0); adopted. Slices of chunks (the atomic
        # compaction re-reading only slices with candidates) and evict_last loads lost (88.7-122.0)
        # and are gone from the kernel
        {"CHUNKS_PER_SM": [8], "MAX_CHUNKS": [32], "STATS_BLOCK": [256], "STATS_PAIR": [True],
         "PDL": [True], "NUM_THRESH": [6], "THRESH_TOP": [8], "THRESH_STEP": [2],
         "COMPACT_ATOMIC": [False, True], "SKIP_EMPTY_CHUNKS": [False, True]},
        {"CHUNKS_PER_SM": [8], "MAX_CHUNKS": [32], "STATS_BLOCK": [256, 512],
         "STATS_PAIR": [True], "PDL": [True], "NUM_THRESH": [4], "THRESH_TOP": [9],
         "THRESH_STEP": [3], "COMPACT_ATOMIC": [False, True], "SKIP_EMPTY_CHUNKS": [False, True]},
        # round 7: the select, instruction-fetch bound at c743ce3 (results/h100-c743ce3), with
        # shorter unrolled pairwise steps and more warps (fewer candidates per thread). SASS of
        # the select under Triton 3.6 (nvdisasm line info, instructions attributed to the
        # small path's functions at 8 warps): _select_small 914 / 614 / 378 / 248 and
        # _draw_by_id 562 / 268 / 142 / 117 at 32 / 16 / 8 / 4 per step
        {"SELECT_PAIR_CHUNK": [32, 16, 8, 4], "SELECT_WARPS": [8, 16]},
        # round 8: the statistics pass's accumulators thresholds-first, at 256 and 512 a step
        # (at the CPU shapes that removed a per-step layout conversion; at the GPU shape one
        # stays: compile_sm90.py --gpu-shapes), the atomic compaction's empty blocks skipped,
        # and the select's pairwise steps loaded as tiles (at the GPU shape the rank and draw
        # loops' PTX goes from 4 and 2 bar.sync to none, 1057 / 1079 lines to 730 / 574). On an
        # H100 (results/h100-e8dba9f/sampling, 12 draws, us a call): thresholds last 55.13 / 56.51
        # at 256 / 512, first 55.07 / 53.61; the guard 54.25; tiles 50.92 at 32 a step, 49.86 at
        # 8 (graph 47.64 / 48.39). Adopted: first at 512, tiles at 32 (together in round 10's
        # results). Round 7 is not timed yet: that sweep outran its call
        {"STATS_THRESH_FIRST": [False, True], "STATS_BLOCK": [256, 512]},
        {"STATS_THRESH_FIRST": [True], "COMPACT_GUARD": [True]},
        {"STATS_THRESH_FIRST": [True], "SELECT_BCAST": [True], "SELECT_PAIR_CHUNK": [32, 8]},
        # round 9: the adopted constants (thresholds first at 512 a step, tiles at 32) beside the
        # guard and 8 a step, timed together
        {"COMPACT_GUARD": [False, True], "SELECT_PAIR_CHUNK": [32, 8]},
        # round 10 (H100, results/h100-3050769/sampling, 12 draws, us a call, graph in brackets):
        # committed 49.04 (44.04), the guard 48.27 (43.48), 8 a step 47.89 (44.73), both 47.11
        # (44.04); the statistics pass with one 1-D accumulator pair per threshold (no loop
        # barriers, but 71 registers: 7 programs an SM instead of 8, 1.18 waves) 52.14 (46.73) at
        # 512 a step, 52.81 at 1024, 53.73 at 1024 unpaired: lost, removed from the kernel.
        # round 11 ran at 417ea32 (results/h100-417ea32/sampling): these two level, STEP_WORDS lost
        {"CHUNKS_WHOLE_WAVE": [True]},
        {"SELECT_TINY": [64, 32]},
    ],
# the CPU shapes (vocab <= 3000) are cut into 1024-wide chunks at any chunk programs per SM
}, graph=True, cpu_inert=frozenset({"CHUNKS_PER_SM", "LOOP_STAGES"}), draws={
    # a data-dependent kernel: timed on 12 draws. At 38610a8 4 draws agreed within 5%, but the
    # judge's secret draws found a 10x tail on the H200 (results/h200-baac206/sampling-bench):
    # on CPU draws about 1 in 6 has a row with thousands of candidates
    "top_k_top_p_sampling": 12,
}, stress_shapes={
    # the path behind the H200 judge's 583.8 us, taken on every draw: two rows whose nucleus
    # holds ~2,200 tokens (about 3,000 candidates), so BISECT_ABOVE's grid decides it
    "top_k_top_p_sampling": {"decode-b64-v151936-wide2": {
        "input_kwargs": {"batch": 64, "vocab": 151936, "wide_rows": 2}, "targets": ["cuda"],
        "description": "the suite's shape with its last two rows wide (input.py, wide_rows)"}},
})
VARIANTS = PLAN.grids

__all__ = ["PLAN", "VARIANTS", "variants"]

if __name__ == "__main__":
    sys.exit(main(PLAN, __doc__.splitlines()[0]))

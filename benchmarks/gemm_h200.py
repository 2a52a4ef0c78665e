"""Launch-configuration sweep of the suite's GEMM kernels (issue 14), one JSON.

    python3 benchmarks/gemm_h200.py OUT.json [--device cuda|cpu] [--ops a,b] [--shape ID]
        [--max-seconds S] [--quick] [--jobs N]
    python3 benchmarks/gemm_h200.py --summarize RESULT.json ...   (a Markdown table)

The machinery is benchmarks/launch_sweep.py; this file names the operators and the constants
swept. gemm_prefill: tiles, warps and stages of the one-tile-per-program kernel (the measured
default), then the persistent kernel with and without tensor descriptors (TMA), a split
epilogue and warp specialization. gemm_decode: its split-K tiles and programs per SM,
tensor descriptors, and the split reduction fused into the last split.
fp8_block_gemm: tile width (one weight scale per 128 columns), persistent programs and TMA.
fused_moe: the two grouped GEMMs' tiles, warps and stages in its decode and prefill regimes;
fp8_fused_moe: expert block rows, both GEMMs' tile widths, warps, stages. The calls run
20 us (decode) to 4 ms (prefill): CUDA events, no graph.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launch_sweep import Plan, main, variants  # noqa: E402

PLAN = Plan(grids={
    "gemm_prefill": [
        {"BLOCK_M": [128], "BLOCK_N": [128, 256], "BLOCK_K": [64], "NUM_WARPS": [8],
         "NUM_STAGES": [3, 4], "PERSISTENT": [False], "USE_TMA": [False, True]},
        {"BLOCK_M": [128], "BLOCK_N": [128, 256], "BLOCK_K": [64], "NUM_WARPS": [8],
         "NUM_STAGES": [3, 4], "PERSISTENT": [True], "USE_TMA": [True],
         "EPILOGUE_SUBTILE": [False, True], "WARP_SPECIALIZE": [False, True]},
        {"BLOCK_M": [128], "BLOCK_N": [256], "BLOCK_K": [64], "NUM_WARPS": [8],
         "NUM_STAGES": [3], "PERSISTENT": [True], "USE_TMA": [False]},
        # round 2: the tile loop flattened into the K loop (tl.range flatten: Triton fuses them,
        # the epilogue under an scf.if inside one pipelined loop)
        {"BLOCK_M": [128], "BLOCK_N": [128, 256], "BLOCK_K": [64], "NUM_WARPS": [8],
         "NUM_STAGES": [3, 4], "PERSISTENT": [True], "USE_TMA": [True], "FLATTEN": [True]},
        # round 3: the grouped order's band height, untested so far. At GROUP_M 8 the 132
        # programs' tiles span ~16 column bands: ~33 MB of weight tiles and 8 MB of x rows live
        # at once, near the 50 MB L2; 16 rows halve the bands (16.5 + 16 MB), 4 double them
        {"BLOCK_M": [128], "BLOCK_N": [256], "BLOCK_K": [64], "NUM_WARPS": [8],
         "NUM_STAGES": [3], "PERSISTENT": [True], "USE_TMA": [True], "GROUP_M": [4, 8, 16]},
    ],
    "gemm_decode": [
        {"BLOCK_N": [64, 128], "BLOCK_K": [64, 128], "NUM_WARPS": [4],
         "NUM_STAGES": [3, 4, 6], "PROGRAMS_PER_SM": [2, 3, 4]},
        {"BLOCK_N": [32, 64], "BLOCK_K": [64, 128], "NUM_WARPS": [4], "NUM_STAGES": [4, 6],
         "PROGRAMS_PER_SM": [3, 4], "USE_TMA": [False, True], "FUSED_REDUCE": [False, True]},
        # round 2: PDL for the split sum and the GEMM (the launch gaps CUDA events count: qkv
        # 24.1 us with events against 19.5 in a graph); the committed tiles are in the first grid
        {"BLOCK_N": [32, 64], "BLOCK_K": [128], "NUM_WARPS": [4], "NUM_STAGES": [3, 4],
         "PROGRAMS_PER_SM": [2], "FUSED_REDUCE": [False, True], "PDL": [True]},
        # round 3, stream-K (every SM streams the same bytes; qkv's 192 split-K tiles leave 72
        # SMs with one program, 60 with two) lost on an H100 at every tile and programs per SM
        # (results/h100-812c680/streamk: best 27.7 / 52.5 us against split-K's 24.4 / 47.7,
        # cuBLAS 22.0 / 47.3) and is gone from the kernel
        # round 4: ncu (results/h100-812c680/ncu) puts the GEMM at cuBLAS's device time (qkv
        # 23.0 against 22.6 us, DRAM 69% against 70%); cuBLAS's qkv kernel keeps 15 K steps of 64
        # in flight in one 384-thread CTA per SM. Warps per program, and deep pipelines at one
        # program per SM (shared memory, ptxas with Triton 3.9: 144 KB at 32 x 64 x 12 stages,
        # 192 KB at 64 x 64 x 12, 96 / 144 KB at 32 x 256 x 2 / 3)
        {"BLOCK_N": [32], "BLOCK_K": [128], "NUM_WARPS": [2, 8], "NUM_STAGES": [4],
         "PROGRAMS_PER_SM": [2], "PDL": [True]},
        {"BLOCK_N": [32, 64], "BLOCK_K": [64], "NUM_WARPS": [4], "NUM_STAGES": [8, 12],
         "PROGRAMS_PER_SM": [1], "PDL": [True]},
        {"BLOCK_N": [32], "BLOCK_K": [256], "NUM_WARPS": [4], "NUM_STAGES": [2],
         "PROGRAMS_PER_SM": [1, 2], "PDL": [True]},
        {"BLOCK_N": [32], "BLOCK_K": [256], "NUM_WARPS": [4], "NUM_STAGES": [3],
         "PROGRAMS_PER_SM": [1], "PDL": [True]},
        # round 5: round 4's fastest on down (one deep program per tile, results/h100-6c092d8)
        # made a rule: tiles that fit one program per SM get one, with a deep pipeline (the
        # DEEP_* constants; 0 stages: round 4's committed kernel)
        # (shared memory: 12 KB a stage at 64, 24 KB at 128; 16 x 12 and 8 x 24 fit 227 KB)
        {"BLOCK_N": [32], "BLOCK_K": [128], "NUM_WARPS": [4], "NUM_STAGES": [4],
         "PROGRAMS_PER_SM": [2], "PDL": [True], "DEEP_STAGES": [0, 8, 12, 16],
         "DEEP_BLOCK_K": [64]},
        {"BLOCK_N": [32], "BLOCK_K": [128], "NUM_WARPS": [4], "NUM_STAGES": [4],
         "PROGRAMS_PER_SM": [2], "PDL": [True], "DEEP_STAGES": [6, 8], "DEEP_BLOCK_K": [128]},
        # round 6: on the H200 deep mode took down from 37.5 to 33.3 us (results/h200-baac206),
        # but qkv's 192 tiles of 32 do not fit it (18.4 us in a graph against cuBLAS's 15.8,
        # results/h200-0bfa714). At 64 columns qkv has 96 tiles and down 64 (split in two);
        # shared memory 32 KB a stage at 64 x 128, 16 KB at 64 x 64
        {"BLOCK_N": [64], "BLOCK_K": [128], "NUM_WARPS": [4], "NUM_STAGES": [4],
         "PROGRAMS_PER_SM": [2], "PDL": [True], "DEEP_STAGES": [4, 6], "DEEP_BLOCK_K": [128]},
        {"BLOCK_N": [64], "BLOCK_K": [128], "NUM_WARPS": [4], "NUM_STAGES": [4],
         "PROGRAMS_PER_SM": [2], "PDL": [True], "DEEP_STAGES": [8, 12], "DEEP_BLOCK_K": [64]},
        # round 7: round 6 as a rule (DEEP_WIDEN: the tile width doubled until the tiles fit
        # one per SM, qkv 96 tiles of 64) lost on an H100 (results/h100-f6fa910: 23.14 against
        # 22.78 us) and is gone from the kernel
        # round 8: DEEP_WIDEN lost on an H100 (96 programs leave 36 SMs idle); DEEP_BALANCE gives
        # qkv 128 programs of 48 columns (a 64 block, 6 stages of 128), so no SM streams more
        # than 384 KB where the committed plan gives 60 SMs 512 KB (qkv 18.5 us on the H200,
        # cuBLAS 15.8; results/h200-bdee65c, h200-111e927)
        {"BLOCK_N": [32], "BLOCK_K": [128], "NUM_WARPS": [4], "NUM_STAGES": [4],
         "PROGRAMS_PER_SM": [2], "PDL": [True], "DEEP_STAGES": [8], "DEEP_BLOCK_K": [128],
         "DEEP_BALANCE": [False, True]},
        # round 9: DEEP_SPLIT, deep tiles S times wider with K split S ways, so x is read from
        # L2 by S times fewer tiles (down on the H200 moved 10.6 TB/s from L2 into the SMs, two
        # thirds of it x). ptxas (Triton 3.9, sm_90a, 4 warps): S = 2 qkv 128 registers and
        # down 96, 192 KB each, no spills. qkv at S = 4 would need 192-column tiles and takes
        # the split-K plan (the DEEP_BALANCE False row of round 8)
        {"BLOCK_N": [32], "BLOCK_K": [128], "NUM_WARPS": [4, 8], "NUM_STAGES": [4],
         "PROGRAMS_PER_SM": [2], "PDL": [True], "DEEP_STAGES": [8], "DEEP_BLOCK_K": [128],
         "DEEP_BALANCE": [True], "DEEP_SPLIT": [1, 2, 4]},
    ],
    # decode (expert blocks of <= 32 rows: weight streaming) and prefill tiles, each swept with
    # the other regime at its default
    "fused_moe": [
        {"DECODE_BLOCK_N": [32, 64, 128], "DECODE_BLOCK_K": [64, 128], "DECODE_WARPS": [4],
         "DECODE_STAGES": [3, 4, 5]},
        {"PREFILL_BLOCK_M": [64, 128], "PREFILL_BLOCK_N": [64, 128], "PREFILL_BLOCK_K": [64],
         "PREFILL_WARPS": [4, 8], "PREFILL_STAGES": [3, 4]},
        # round 2: weights (and act, written in expert-block order) through tensor descriptors,
        # at the committed tiles and one stage deeper
        {"TMA_WEIGHTS": [False, True], "BLOCKED_ACT": [False, True], "DECODE_STAGES": [3, 4],
         "PREFILL_STAGES": [3, 4]},
        # and x copied into expert-block order first, so no GEMM operand is a row gather
        {"TMA_WEIGHTS": [False, True], "BLOCKED_ACT": [True], "BLOCKED_X": [True],
         "DECODE_STAGES": [3, 4], "PREFILL_STAGES": [3, 4]},
        # persistent programs, tile loop flattened into the K loop (prefill with all three:
        # gate/up 244 registers and 180 KB, down 137 and 131 KB; ptxas, Triton 3.9)
        {"PERSISTENT": [True], "PROGRAMS_PER_SM": [1], "TMA_WEIGHTS": [False, True],
         "BLOCKED_ACT": [True], "BLOCKED_X": [False, True]},
        # round 3: the persistent gate/up loop not flattened. Under the device's Triton 3.6 ptxas
        # serializes the flattened prefill gate/up kernel's wgmma (C7515: accumulators zeroed per
        # tile inside the fused loop); unflattened it is clean, 255 registers, 147 KB at 3 stages
        # and 197 KB at 4 (ptxas, sm_90a)
        {"PERSISTENT": [True], "PROGRAMS_PER_SM": [1], "TMA_WEIGHTS": [True],
         "BLOCKED_ACT": [True], "BLOCKED_X": [False], "GATE_UP_FLATTEN": [True, False],
         "PREFILL_STAGES": [3, 4]},
        # round 4: round 3 on an H100 (results/h100-f6fa910/gemm): unflattened at 4 stages 1428.5
        # us against 1587.2 flattened at 3, and down (206 of the call's 618 GFLOP) took 477.5 us,
        # 0.44 of the H100's dense peak against gate/up's 0.55. Its own tile width and depth:
        # 256 columns read each act tile half as often (hidden 2048: 8 column tiles, not 16)
        {"GATE_UP_FLATTEN": [False], "PREFILL_STAGES": [4], "DOWN_BLOCK_N": [128, 256],
         "DOWN_STAGES": [3, 4]},
        # round 5: round 4 on an H100 (results/h100-2e6777a/moe): 256 down columns 1284.8 us;
        # ncu puts gate/up at 751.9 of ~1265 us. One 256-wide MMA for gate and up per K step
        # (m64n256k16, one 3-D bulk copy for both weight tiles; ptxas, Triton 3.6: 255 registers,
        # no spills, 192 KB at 4 stages) against two 128-wide ones sharing the x tile. On an
        # H100 (results/h100-bd02d17/moe): 1262.0 us against 1280.1 at 4 stages; committed
        {"GATE_UP_ONE_DOT": [False, True], "PREFILL_STAGES": [3, 4]},
        # round 6 (64 + 64-column gate/up tiles, two programs per SM) lost on an H100
        # (results/h100-52826d5/moe: 1318.2 us against 1223.6) and its code was removed
        # round 7: the gate/up epilogue's act tile through a tensor descriptor (a bulk copy the
        # program does not wait for before its next tile; ptxas, Triton 3.6: 255 -> 185
        # registers). On an H100 (results/h100-7118d00/moe): 1234.9 -> 1221.2 us; committed.
        # The down GEMM's pair rows the same way (Y_BLOCKED, in expert-block order) were level
        # (1234.8 us alone, 1222.5 with it) and their code was removed
        {"ACT_STORE_TMA": [False, True]},
        # round 8 (HALF_TAILS: expert runs padded to 64 rows, a run's odd 64 rows a half block
        # taken by a 64-row tile; the benchmark's routing pads 65,536 pairs to ~73,700 rows at
        # 128 and ~69,500 at 64) lost on H100s both ways: the half blocks after all the full
        # ones 1319.2 against 1221.8 us (results/h100-1ad6d8b/moe: each expert's weights read
        # again), in the runs' order with two tile shapes in one walk 1284.8 against 1227.7
        # (results/h100-6b653a5/moe: the down walk no longer flattened, gate/up at 241
        # registers; a half tile reads a full tile's weights for half the MMAs). Its code was
        # removed
    ],
    # round 1 (sweep-3fd0026) timed none: its filter was stricter than the op's tolerance.
    # Round 2 adds where the activation is quantized for the down GEMM (ACT_QUANT): on load in
    # each of its 56 column programs (the committed way), once by a small kernel, or in the
    # gate/up GEMM's epilogue (128-wide tiles only). 128-row blocks with 4 stages do not fit.
    "fp8_fused_moe": [
        {"ACT_QUANT": ["down"], "MAX_BLOCK_M": [64, 128], "BLOCK_N_GATE_UP": [64, 128],
         "BLOCK_N_DOWN": [64, 128], "WARPS_LARGE_M": [4, 8], "NUM_STAGES": [3]},
        {"ACT_QUANT": ["kernel"], "MAX_BLOCK_M": [64, 128], "BLOCK_N_GATE_UP": [64, 128],
         "BLOCK_N_DOWN": [64, 128], "WARPS_LARGE_M": [4, 8], "NUM_STAGES": [3]},
        {"ACT_QUANT": ["gate_up"], "MAX_BLOCK_M": [64, 128], "BLOCK_N_GATE_UP": [128],
         "BLOCK_N_DOWN": [64, 128], "WARPS_LARGE_M": [4, 8], "NUM_STAGES": [3]},
        {"ACT_QUANT": ["down", "kernel"], "MAX_BLOCK_M": [64], "BLOCK_N_GATE_UP": [64],
         "BLOCK_N_DOWN": [64, 128], "WARPS_LARGE_M": [4], "NUM_STAGES": [4]},
        # the weights through tensor descriptors, with each activation placement (ptxas, Triton
        # 3.9: gate/up 186 -> 173 registers at 64 columns; 255 with 12 bytes spilled at 128 either
        # way; the down GEMM 233 -> 240 quantizing on load, 186 with "kernel")
        {"TMA_WEIGHTS": [True], "ACT_QUANT": ["down", "kernel"], "MAX_BLOCK_M": [128],
         "BLOCK_N_GATE_UP": [64, 128], "BLOCK_N_DOWN": [64, 128], "WARPS_LARGE_M": [8],
         "NUM_STAGES": [3]},
        {"TMA_WEIGHTS": [True], "ACT_QUANT": ["gate_up"], "MAX_BLOCK_M": [128],
         "BLOCK_N_GATE_UP": [128], "BLOCK_N_DOWN": [64, 128], "WARPS_LARGE_M": [4, 8],
         "NUM_STAGES": [3]},
        # round 3: the committed constants (the H100 sweep's 64-row blocks on one warpgroup)
        # with and without the weights through tensor descriptors, 3 and 4 stages (72 or 96 KB
        # a program: three or two programs an SM), on the H200 where none ran yet
        {"TMA_WEIGHTS": [False, True], "ACT_QUANT": ["kernel"], "MAX_BLOCK_M": [64],
         "BLOCK_N_GATE_UP": [64], "BLOCK_N_DOWN": [128], "WARPS_LARGE_M": [4],
         "NUM_STAGES": [3, 4]},
    ],
    "fp8_block_gemm": [
        {"BLOCK_M": [128], "BLOCK_N": [128, 256], "NUM_WARPS": [8], "NUM_STAGES": [3, 4],
         "PERSISTENT": [False, True], "USE_TMA": [False, True]},
        {"BLOCK_M": [64], "BLOCK_N": [128, 256], "NUM_WARPS": [4], "NUM_STAGES": [4],
         "PERSISTENT": [False], "USE_TMA": [True]},
        # round 2: cuBLASLt's block-scaled GEMM took 112.5 us against kb's 187.6 (sweep-3fd0026);
        # one scale product per row and the scaling of step k-1 after step k's dot is issued.
        # ptxas (Triton 3.9, sm_90a, tools/compile_sm90.py): 128x128/8 warps 211 registers one
        # tile per program, 255 persistent; with SCALE_PRODUCT 155 (the [128, 128] scale tile
        # is gone), persistent still 255; DEFER_SCALE 222 (84-228 bytes spilled persistent;
        # it lost in every pairing on an H100, results/h100-5acabec, and is gone)
        {"BLOCK_M": [128], "BLOCK_N": [128], "NUM_WARPS": [8], "NUM_STAGES": [3, 4],
         "PERSISTENT": [False, True], "USE_TMA": [True], "SCALE_PRODUCT": [False, True]},
        {"BLOCK_M": [64], "BLOCK_N": [128], "NUM_WARPS": [4], "NUM_STAGES": [4, 5],
         "PERSISTENT": [False, True], "USE_TMA": [True], "SCALE_PRODUCT": [True]},
        # the persistent tile loop flattened into the K loop (16 K steps a tile: a per-tile
        # pipeline fill is 1/8 of it at 3 stages). ptxas (Triton 3.9): 227 registers and 98 KB
        # persistent; 213 and 131 KB flattened; 168 flattened with SCALE_PRODUCT
        {"BLOCK_M": [128], "BLOCK_N": [128], "NUM_WARPS": [8], "NUM_STAGES": [3, 4],
         "PERSISTENT": [True], "USE_TMA": [True], "SCALE_PRODUCT": [False, True],
         "FLATTEN": [True]},
        # round 3: the PTX of 128x128/8 warps waits for every K step's wgmma before scaling it
        # (wait_group 0), and at 227 registers one program fills an SM, so the tensor cores idle
        # while both warpgroups scale. 64-row tiles on one warpgroup take 163 registers and 74 KB
        # at 3 stages (98 KB at 4; flattened 82 and 107 KB), so 3 (else 2) persistent programs
        # fit an SM and one's scaling overlaps another's MMA (64-row tiles were timed one
        # program per SM only); only grids whose programs are all resident at once
        {"BLOCK_M": [64], "BLOCK_N": [128], "NUM_WARPS": [4], "NUM_STAGES": [3],
         "PERSISTENT": [True], "USE_TMA": [True], "SCALE_PRODUCT": [True],
         "FLATTEN": [False], "PROGRAMS_PER_SM": [3]},
        {"BLOCK_M": [64], "BLOCK_N": [128], "NUM_WARPS": [4], "NUM_STAGES": [3, 4],
         "PERSISTENT": [True], "USE_TMA": [True], "SCALE_PRODUCT": [True],
         "FLATTEN": [False, True], "PROGRAMS_PER_SM": [2]},
        # round 4: round 3's winner on the H100 (h100-5acabec) was 64x128, 3 stages, 2 per SM
        # (144.2 us; 3 per SM 148.8). At 2 stages a program takes 164 registers and 49 KB, so 3
        # fit an SM with registers to spare for none more (3 x 168 x 128 of 65,536); and the
        # grouped order's band height (GROUP_M 8) is untested. DEFER_SCALE at 64 rows lost
        # (234.3 against 196.1 us, one per SM) and 64x256 on one warpgroup spills (ptxas 228 B).
        {"BLOCK_M": [64], "BLOCK_N": [128], "NUM_WARPS": [4], "NUM_STAGES": [2],
         "PERSISTENT": [True], "USE_TMA": [True], "SCALE_PRODUCT": [True],
         "FLATTEN": [False], "PROGRAMS_PER_SM": [2, 3]},
        {"BLOCK_M": [64], "BLOCK_N": [128], "NUM_WARPS": [4], "NUM_STAGES": [3],
         "PERSISTENT": [True], "USE_TMA": [True], "SCALE_PRODUCT": [True],
         "FLATTEN": [False], "PROGRAMS_PER_SM": [2],
         "GROUP_M": [4, 16]},
        # round 5, the persistent loop warp-specialized (tl.range(warp_specialize=True); ncu on
        # the H100 at round 3's winner: SM throughput 45%, 7.7 warps per SM), lost on an H100
        # (results/h100-ed0fc1e/fp8ws: 217.8-226.1 us at 64 rows, 164.0 at 128 rows, against
        # 144.6) and is gone from the kernel
        # round 6: RESCALE (the running sum divided by the group's scale, carried in the dot's
        # accumulator: one [BLOCK_M, BLOCK_N] fp32 tile instead of two). ptxas (Triton 3.9,
        # sm_90a): 64x128/4 warps 118 registers (163 without), 128x128/8 warps 117 and 98 KB at
        # 3 stages, so two 128-row programs fit an SM (each weight tile read from L2 half as
        # often as at 64 rows), 128x256/8 warps 234 and 148 KB (one an SM). SCALES_AHEAD loads
        # the next group's scales during this step (the PTX had them in front of the rescale,
        # so their L2 latency stalled the tensor cores). The first grid's first variant is the
        # committed configuration. 256x128/8 warps: 220 registers, 148 KB. At 3738570 (an
        # H100, results/h100-3738570/fp8) every SCALES_AHEAD variant was wrong (a Triton
        # front-end aliasing, fixed); without it 128x128 took 137.8 us against 143.8 committed.
        # At 1d14f29 (h100-1d14f29/fp8): 138.9 against 144.7; the early scale loads lost (176.2)
        # and are gone from the kernel and from these grids
        {"RESCALE": [False, True], "PROGRAMS_PER_SM": [2, 3]},
        {"RESCALE": [True], "BLOCK_M": [128], "NUM_WARPS": [8], "NUM_STAGES": [3],
         "PROGRAMS_PER_SM": [2]},
        {"RESCALE": [True], "BLOCK_M": [128], "NUM_WARPS": [8], "NUM_STAGES": [3],
         "PROGRAMS_PER_SM": [2], "GROUP_M": [4, 16]},
        {"RESCALE": [True], "BLOCK_M": [128], "NUM_WARPS": [8], "NUM_STAGES": [4],
         "PROGRAMS_PER_SM": [1]},
        {"RESCALE": [True], "BLOCK_M": [128], "BLOCK_N": [256], "NUM_WARPS": [8],
         "NUM_STAGES": [3], "PROGRAMS_PER_SM": [1]},
        {"RESCALE": [True], "BLOCK_M": [256], "BLOCK_N": [128], "NUM_WARPS": [8],
         "NUM_STAGES": [3], "PROGRAMS_PER_SM": [1]},
    ],
}, graph=False, cpu_inert=frozenset({"NUM_WARPS", "NUM_STAGES", "WARP_SPECIALIZE",
                                      "PROGRAMS_PER_SM", "DECODE_WARPS", "DECODE_STAGES",
                                      "PREFILL_WARPS", "PREFILL_STAGES", "WARPS_LARGE_M",
                                      "PDL", "FLATTEN", "GATE_UP_FLATTEN"}))

__all__ = ["PLAN", "variants"]

if __name__ == "__main__":
    sys.exit(main(PLAN, __doc__.splitlines()[0]))

"""`atrex calibrate` without a GPU: the read floors' kernel, its loads checked under the
interpreter in a process of its own (on the GPU it is timed: tests/runner/test_gpu.py), and the
line the command prints from a measurement."""

from __future__ import annotations

import os
import subprocess
import sys


def test_the_cold_read_kernel_reads_its_line_and_follows_the_offsets_it_holds():
    script = ("from atrex.runner.calibrate import cold_read_launches as launches, "
              "COLD_READ_GAP_WORDS as gap, COLD_READ_WORDS as words\n"
              "import torch\n"
              "(plain,), (chained,) = (launches(1, d, False, 'cpu') for d in (False, True))\n"
              "want = torch.arange(gap, gap + words, dtype=torch.int32)\n"
              "assert torch.equal(plain(), want) and torch.equal(chained(), -want)\n"
              "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_the_calibrate_line_names_the_copy_sizes_and_the_floors(monkeypatch, capsys, tmp_path):
    """What `atrex calibrate` prints from its measurement (the H200's, results/h200-bdee65c; the
    sizes' rates made up), without a GPU: the measuring is replaced, the printing is not."""
    import argparse

    from atrex.runner import calibrate, cli

    measured = {"gpu": "NVIDIA H200", "bandwidth_tbps": 4.29, "tflops": {"bf16": 760.0},
                "copy_tbps_by_bytes": {str(16 << 20): 2.51, str(256 << 20): 4.02},
                "launch_floor_ms": 0.000912, "launch_floor_pdl_ms": 0.000791,
                "cold_read_floor_ms": 0.000981, "dependent_read_floor_ms": 0.001227,
                "path": str(tmp_path / "calibration.json")}
    monkeypatch.setattr(cli, "_cuda_available", lambda: True)
    monkeypatch.setattr(calibrate, "calibrate", lambda index, out: measured)
    assert cli.run_calibrate(argparse.Namespace(device_index=0, out=None)) == 0
    line = capsys.readouterr().out
    assert line.startswith("NVIDIA H200: copy 4.29 TB/s (16 MB 2.51, 256 MB 4.02); bf16 760 ")
    assert "launch floor 0.91 us per call (0.79 with PDL)" in line
    assert "a kernel reading one cold line 0.98 us, after an index read 1.23 us" in line

"""The kernel behind `atrex calibrate`'s read floors: on the GPU it is timed (tests/runner/
test_gpu.py); here its loads are checked under the interpreter, in a process of its own."""

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

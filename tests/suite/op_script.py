"""The head of the scripts the suite tests run in a subprocess under TRITON_INTERPRET=1 (set
before Triton is imported): `load(name)` imports `<name>.py` of the operator directory given as
the script's first argument; Triton's interpreter runs as fast as the executor runs it
(runner/executor/interp_fast.py). `last_json` runs such a script and returns what it printed
last."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LOAD_OP_FILES = r"""
import importlib.util, sys
from atrex.runner.executor import interp_fast

interp_fast.install()

def load(name):
    spec = importlib.util.spec_from_file_location(name, f"{sys.argv[1]}/{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
"""


def last_json(script: str, *args: str):
    """The JSON value `script` prints last, run in a child under the Triton interpreter from the
    repository root; a child that fails fails the test with its stderr."""
    run = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                         timeout=600, cwd=ROOT,
                         env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])

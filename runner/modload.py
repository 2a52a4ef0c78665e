"""Loading an operator's own Python files (reference.py, input.py) as modules by path, for the
processes that run them: the judge, the work counter's child and the agent's ncu driver. The
executor loads its candidate by its own code (runner/executor/main.py): it shares nothing with
the judge but the contract."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

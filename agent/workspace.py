"""Where candidates live on disk: ``<out>/candidates/<attempt>/kernel.py``.

Each candidate directory is the candidate's root, so the runner counts the Triton kernels defined
there as the candidate's own. Helper modules next to the operator's kernel (anything but the format
files) are copied along, so a kernel that imports a sibling helper still loads.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from atrex.runner.repo import OP_FILES, OpSpec

from .measure import CandidateFile

_FORMAT_FILES = set(OP_FILES) | {"metadata.json"}


class Workspace:
    def __init__(self, out_dir: Path, op: OpSpec):
        self.out_dir = Path(out_dir).resolve()
        self.op = op
        self.candidates_dir = self.out_dir / "candidates"
        self.candidates_dir.mkdir(parents=True, exist_ok=True)

    def write_candidate(self, attempt: int, source: str) -> CandidateFile:
        directory = self.candidates_dir / f"{attempt:04d}"
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)
        for helper in self.op.path.glob("*.py"):
            if helper.name not in _FORMAT_FILES and helper.name != self.op.kernel_file:
                shutil.copy2(helper, directory / helper.name)
        kernel = directory / "kernel.py"
        kernel.write_text(source)
        return CandidateFile(source=source, kernel=kernel, root=directory)

    def write_final(self, source: str) -> Path:
        path = self.out_dir / "kernel.py"
        path.write_text(source)
        return path

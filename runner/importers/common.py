"""What both importers share: operator names, writing an operator directory, the probe process."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..sandbox import scrubbed_env

# A CPU shape's inputs and parameters are scaled down to about this many bytes: the Triton
# interpreter and a float64 reference stay within seconds per call there.
DEFAULT_CPU_BYTES = 1 << 20
PROBE_TIMEOUT_S = 300.0


class ImportProblem(Exception):
    """One source that cannot be imported: said with its file, the others go on."""

    def __init__(self, source: Path | str, message: str):
        super().__init__(f"{source}: {message}")
        self.source, self.message = str(source), message


@dataclass
class OpFiles:
    """An operator directory to write."""

    name: str
    reference: str
    inputs: str
    shapes: dict
    metadata: dict
    kernel: str | None = None  # the candidate's source, when one was found
    notes: list[str] = field(default_factory=list)


def op_name(text: str) -> str:
    name = re.sub(r"[^0-9A-Za-z_]+", "_", text).strip("_")
    return name or "op"


def write_op(out: Path, files: OpFiles, overwrite: bool) -> Path:
    target = out / files.name
    if target.exists() and not overwrite:
        raise ImportProblem(target, "exists already (use --force to overwrite)")
    target.mkdir(parents=True, exist_ok=True)
    (target / "reference.py").write_text(files.reference)
    (target / "input.py").write_text(files.inputs)
    (target / "shapes.json").write_text(json.dumps(files.shapes, indent=2) + "\n")
    (target / "metadata.json").write_text(json.dumps(files.metadata, indent=2) + "\n")
    if files.kernel is not None:
        (target / "kernel.py").write_text(files.kernel)
    return target


def write_config(out: Path, tolerances: dict[str, dict[str, float]]) -> str | None:
    """An atrex.toml for the imported repository, unless one is there already: then the lines
    to add are returned for the user to merge by hand."""
    lines = ['[repo]', 'ops_root = "."', '']
    for dtype, values in tolerances.items():
        lines.append(f"[tolerances.{dtype}]")
        lines += [f"{key} = {value!r}" for key, value in values.items()]
        lines.append("")
    text = "\n".join(lines)
    path = out / "atrex.toml"
    if path.exists():
        return text
    path.write_text(text)
    return None


def run_probe(request: dict) -> list[dict]:
    """Run problem code (the reference side: KernelBench's module, a definition's `run`) in a
    subprocess with the scrubbed environment the judge gets, on the meta device."""
    with tempfile.TemporaryDirectory(prefix="atrex-import-") as scratch:
        env = scrubbed_env("cpu", 0, Path(scratch))
        try:
            done = subprocess.run([sys.executable, "-s", "-m", "atrex.runner.importers.probe"],
                                  input=json.dumps(request), capture_output=True, text=True,
                                  env=env, cwd=scratch, timeout=PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise ImportProblem(request.get("label", "probe"),
                                f"the probe did not finish within {PROBE_TIMEOUT_S:g} s") from None
    if done.returncode != 0 or not done.stdout.strip():
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise ImportProblem(request.get("label", "probe"),
                            f"the probe failed (exit {done.returncode}): {' | '.join(tail)}")
    return json.loads(done.stdout)

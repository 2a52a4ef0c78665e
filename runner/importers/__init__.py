"""`atrex import`: other benchmarks' problems as native operator directories.

- `kernelbench.py`: KernelBench problem files (`Model`, `get_inputs`, `get_init_inputs`,
  module-level sizes) and, optionally, their generated `ModelNew` candidates.
- `flashinfer.py`: FlashInfer-Bench definitions (JSON with the reference as code, axes) and their
  workloads (JSONL).

Both write reference.py, input.py, shapes.json (the problem's sizes for the GPU and a
scaled-down shape for CPU CI, found by `probe.py` on the meta device) and metadata.json; docs/
import.md says what is carried over and what is not. A source that cannot be imported is
reported and the others are still written.
"""

"""Runs one shape of a candidate for ncu: warm-up outside the profiled range, then one forward
between cudaProfilerStart and cudaProfilerStop. Invoked as ``python -s ncu_driver.py job.json``."""

import json
import sys
from pathlib import Path

import torch
from atrex.runner.executor.main import candidate_class
from atrex.runner.modload import load_module


def main(job_path: str) -> int:
    job = json.loads(Path(job_path).read_text())
    kernel = Path(job["kernel"])
    for entry in (str(kernel.parent), job["root"]):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    inputs_module = load_module(Path(job["op_dir"]) / "input.py", "atrex_ncu_inputs")
    candidate = load_module(kernel, "atrex_ncu_candidate")
    torch.manual_seed(0)
    model = candidate_class(candidate)(**(job["init_kwargs"] or {}))
    if isinstance(model, torch.nn.Module):
        model = model.cuda()
    inputs = inputs_module._make_inputs(**job["input_kwargs"])
    with torch.no_grad():
        for _ in range(3):
            model(**inputs)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        model(**inputs)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

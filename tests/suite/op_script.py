"""The head of the scripts the suite tests run in a subprocess under TRITON_INTERPRET=1 (set
before Triton is imported): `load(name)` imports `<name>.py` of the operator directory given as
the script's first argument; Triton's interpreter runs as fast as the executor runs it
(runner/executor/interp_fast.py)."""

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

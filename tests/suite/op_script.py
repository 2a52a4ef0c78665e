"""The head of the scripts the suite tests run in a subprocess under TRITON_INTERPRET=1 (set
before Triton is imported): `load(name)` imports `<name>.py` of the operator directory given as
the script's first argument."""

LOAD_OP_FILES = r"""
import importlib.util, sys

def load(name):
    spec = importlib.util.spec_from_file_location(name, f"{sys.argv[1]}/{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
"""

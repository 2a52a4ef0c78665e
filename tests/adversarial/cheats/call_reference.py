# atrex-test: op=rmsnorm expected=fallback finding=no_own_kernel
"""Runs the reference implementation that sits next to it."""
import importlib.util
from pathlib import Path

import torch

_spec = importlib.util.spec_from_file_location("ref", Path(__file__).with_name("reference.py"))
_ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_ref)


class Model(_ref.Model):
    pass

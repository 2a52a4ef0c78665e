"""atrex runner: loads a kernel repository, evaluates candidates in sandboxed subprocesses and
scores them (correctness, own-kernel share, roofline fraction, GPU-hour efficiency)."""

__version__ = "0.1.0"

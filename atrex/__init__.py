"""atrex: GPU-kernel CI. One import name: the runner, the agent and the bot are `atrex.runner`,
`atrex.agent` and `atrex.bot`; `atrex.cli` is the composition root putting their commands together.

In the repository those three live beside this folder (runner/, agent/, bot/) and pyproject.toml
maps them under `atrex` when it is installed. Run from a checkout without installing (`python -m
atrex` on a GPU machine that already has torch), the path entry below makes the same names resolve.
"""

from pathlib import Path as _Path

_HERE = _Path(__file__).resolve().parent
if not (_HERE / "runner").is_dir() and (_HERE.parent / "runner" / "__init__.py").is_file():
    __path__.append(str(_HERE.parent))  # noqa: F821 - a package's own search path


def import_root() -> _Path:
    """The directory a fresh interpreter needs on PYTHONPATH to import this same atrex (judges,
    executors and profiling drivers start from a scrubbed environment)."""
    return _HERE.parent

"""Loading knowledge-base entries, strictly: an unknown key, a missing file or a kernel whose
``Model.forward`` does not match its declared signature is an error naming the file and field."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from atrex.runner.astscan import class_in_source, params_of_method

ENTRIES_DIR = Path(__file__).resolve().parent / "entries"
BOTTLENECKS = ("memory", "compute", "latency", "occupancy")
KINDS = ("kernel", "note")
_REQUIRED = {"id", "kind", "title", "families", "dtypes", "gpus", "bottlenecks", "summary"}
_OPTIONAL = {"forward"}
_ID = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


class KbError(Exception):
    """A malformed knowledge-base entry: which file, which key, what is wrong."""

    def __init__(self, path: Path, key: str | None, message: str):
        self.path, self.key, self.message = Path(path), key, message
        where = f"{path}: {key}" if key else str(path)
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class KbEntry:
    id: str
    kind: str  # "kernel" or "note"
    title: str
    families: tuple[str, ...]
    dtypes: tuple[str, ...]
    gpus: tuple[str, ...]
    bottlenecks: tuple[str, ...]
    summary: str
    forward: tuple[str, ...]  # forward parameter names (kernel entries), () for notes
    path: Path  # the entry's directory

    @property
    def body_path(self) -> Path:
        return self.path / ("kernel.py" if self.kind == "kernel" else "note.md")

    def body(self) -> str:
        return self.body_path.read_text()


def load_kb(root: Path | None = None) -> list[KbEntry]:
    """Every entry under ``root`` (default: the bundled entries), sorted by id."""
    root = Path(root) if root is not None else ENTRIES_DIR
    if not root.is_dir():
        raise KbError(root, None, "knowledge-base directory does not exist")
    entries = [load_entry(d) for d in sorted(root.iterdir())
               if d.is_dir() and not d.name.startswith((".", "_"))]
    seen: dict[str, Path] = {}
    for entry in entries:
        if entry.id in seen:
            raise KbError(entry.path, "id", f"duplicate id (also {seen[entry.id]})")
        seen[entry.id] = entry.path
    return entries


def load_entry(directory: Path) -> KbEntry:
    path = directory / "entry.toml"
    if not path.is_file():
        raise KbError(directory, None, "missing entry.toml")
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise KbError(path, None, f"not valid TOML: {exc}") from None
    _check_keys(path, data)
    entry = KbEntry(
        id=_string(path, data, "id"), kind=_string(path, data, "kind"),
        title=_string(path, data, "title"), families=_strings(path, data, "families"),
        dtypes=_strings(path, data, "dtypes"), gpus=_strings(path, data, "gpus"),
        bottlenecks=_strings(path, data, "bottlenecks"), summary=_string(path, data, "summary"),
        forward=_strings(path, data, "forward", allow_empty=True) if "forward" in data else (),
        path=directory.resolve())
    _check_entry(path, entry)
    return entry


def _check_keys(path: Path, data: dict) -> None:
    unknown = set(data) - _REQUIRED - _OPTIONAL
    if unknown:
        raise KbError(path, sorted(unknown)[0],
                      f"unknown key (allowed: {', '.join(sorted(_REQUIRED | _OPTIONAL))})")
    missing = _REQUIRED - set(data)
    if missing:
        raise KbError(path, sorted(missing)[0], "missing required key")


def _string(path: Path, data: dict, key: str) -> str:
    value = data[key]
    if not isinstance(value, str) or not value.strip():
        raise KbError(path, key, f"must be a non-empty string, got {value!r}")
    return value.strip()


def _strings(path: Path, data: dict, key: str, allow_empty: bool = False) -> tuple[str, ...]:
    value = data[key]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise KbError(path, key, f"must be a list of non-empty strings, got {value!r}")
    if not value and not allow_empty:
        raise KbError(path, key, "must not be empty")
    return tuple(value)


def _check_entry(path: Path, entry: KbEntry) -> None:
    if not _ID.match(entry.id):
        raise KbError(path, "id", f"{entry.id!r} must be lowercase letters, digits, '-' or '_'")
    if entry.id != path.parent.name:
        raise KbError(path, "id", f"{entry.id!r} differs from the directory name "
                      f"{path.parent.name!r}")
    if entry.kind not in KINDS:
        raise KbError(path, "kind", f"must be one of {', '.join(KINDS)}, got {entry.kind!r}")
    bad = [b for b in entry.bottlenecks if b not in BOTTLENECKS]
    if bad:
        raise KbError(path, "bottlenecks", f"{bad[0]!r} is not one of {', '.join(BOTTLENECKS)}")
    if entry.kind == "kernel":
        _check_kernel(path, entry)
    else:
        _check_note(path, entry)


def _check_kernel(path: Path, entry: KbEntry) -> None:
    if not entry.forward:
        raise KbError(path, "forward", "kernel entries must list the forward parameter names")
    kernel = entry.path / "kernel.py"
    if not kernel.is_file():
        raise KbError(entry.path, None, "kind 'kernel' needs kernel.py")
    if (entry.path / "note.md").exists():
        raise KbError(entry.path, None, "kind 'kernel' must not have note.md")
    params = forward_params(kernel)
    if params is None:
        raise KbError(kernel, "Model.forward", "no class Model with a forward method")
    if tuple(params) != entry.forward:
        raise KbError(path, "forward", f"declares {list(entry.forward)} but kernel.py "
                      f"Model.forward takes {params}")


def _check_note(path: Path, entry: KbEntry) -> None:
    if entry.forward:
        raise KbError(path, "forward", "only kernel entries have a forward signature")
    if not (entry.path / "note.md").is_file():
        raise KbError(entry.path, None, "kind 'note' needs note.md")
    if (entry.path / "kernel.py").exists():
        raise KbError(entry.path, None, "kind 'note' must not have kernel.py")


def forward_params(kernel: Path | str) -> list[str] | None:
    """Parameter names of ``Model.forward`` (after self) in a module's source, or None."""
    source = kernel.read_text() if isinstance(kernel, Path) else kernel
    model = class_in_source(source, "Model")
    params = None if model is None else params_of_method(model, "forward")
    return None if params is None else params.names

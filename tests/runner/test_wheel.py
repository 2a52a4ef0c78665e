"""The distribution installs one top-level import name, `atrex`: the folders runner/, agent/ and
bot/ become atrex.runner, atrex.agent and atrex.bot, with their data files."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"runner": "atrex.runner", "agent": "atrex.agent", "bot": "atrex.bot"}


def _packages_on_disk() -> set[str]:
    found = {"atrex"}
    for folder, name in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join([name, *parts]))
    return found


def test_every_package_is_listed_under_atrex():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert set(config["packages"]) == _packages_on_disk()
    assert config["package-dir"] == {"atrex": "atrex", **{v: k for k, v in FOLDERS.items()}}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(out), str(ROOT)], check=True, cwd=out)
    [path] = out.glob("atrex-*.whl")
    return zipfile.ZipFile(path)


def test_the_wheel_has_one_top_level_name(wheel):
    names = wheel.namelist()
    tops = {name.split("/")[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"atrex"}
    [top_level] = [n for n in names if n.endswith(".dist-info/top_level.txt")] or [None]
    if top_level:
        assert wheel.read(top_level).decode().split() == ["atrex"]
    for module in ("atrex/runner/judge/main.py", "atrex/runner/executor/main.py",
                   "atrex/runner/zygote.py", "atrex/agent/loop.py", "atrex/bot/app.py"):
        assert module in names, module


def test_the_wheel_carries_the_data_files(wheel):
    names = wheel.namelist()
    assert any(n.startswith("atrex/agent/kb/entries/") and n.endswith("entry.toml")
               for n in names)
    assert any(n.startswith("atrex/bot/dashboard/templates/") for n in names)

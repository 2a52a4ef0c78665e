"""The terminal through a real `atrex` subprocess, on a pipe and on a pseudo-terminal: the reason of
every non-pass under the table, progress lines in a log, the verdict even with --quiet, `-` for
standard output, --version, help when run bare, exit codes and defaults in --help."""

from __future__ import annotations

import argparse
import json
import os
import pty
import select
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from atrex.runner import __version__

from atrex.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "adversarial"


def atrex(*args: str, cwd: Path = ROOT, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "atrex", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def atrex_on_tty(*args: str, cwd: Path = ROOT, timeout: float = 600) -> tuple[int, str]:
    """Run with stdout and stderr on a pseudo-terminal; returns (exit code, what it showed)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "atrex", *args], cwd=cwd, stdin=follower,
                            stdout=follower, stderr=follower, close_fds=True,
                            env={**os.environ, "COLUMNS": "160", "TERM": "xterm"})
    os.close(follower)
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], timeout)
            if not ready:
                proc.kill()
                raise TimeoutError(f"atrex {' '.join(args)}: no output for {timeout} s")
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's other side closed
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(leader)
    return proc.wait(timeout=60), b"".join(chunks).decode(errors="replace")


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """Three operators from the adversarial corpus: honest, one that does not parse, one that
    lets PyTorch do the work."""
    root = tmp_path_factory.mktemp("cli") / "repo"
    for name in ("good", "broken", "torchy"):
        shutil.copytree(CORPUS / "ops" / "rmsnorm", root / name)
    shutil.copy(CORPUS / "crashes" / "syntax_error.py", root / "broken" / "kernel.py")
    shutil.copy(CORPUS / "cheats" / "torch_compute.py", root / "torchy" / "kernel.py")
    shutil.copy(CORPUS / "cheats" / "_rms_triton.py", root / "torchy" / "_rms_triton.py")
    return root


def test_version_and_bare_help():
    result = atrex("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"atrex {__version__}"
    bare = atrex()
    assert bare.returncode == 0, bare.stderr
    assert "usage: atrex" in bare.stdout and "check" in bare.stdout and "exit status" in \
        bare.stdout
    assert "error" not in bare.stderr


def test_check_help_gives_exit_codes_and_the_default_path():
    text = atrex("check", "--help").stdout
    assert "exit status:" in text
    for code, meaning in (("0", "every operator passes"), ("1", "not `pass`"),
                          ("2", "usage error")):
        assert any(line.strip().startswith(code) and meaning in line
                   for line in text.splitlines()), (code, text)
    flat = " ".join(text.split())
    assert "default: the current directory" in flat and "searched recursively" in flat
    assert "`-`: standard output" in flat


def test_every_option_of_every_command_has_help():
    missing = []

    def walk(parser: argparse.ArgumentParser, name: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, subparser in action.choices.items():
                    walk(subparser, f"{name} {sub}")
            elif action.help is None:
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "atrex")
    assert not missing, missing


def test_two_outputs_on_stdout_is_a_usage_error(repo):
    result = atrex("check", str(repo), "--json", "-", "--markdown", "-")
    assert result.returncode == 2
    assert "--json and --markdown" in result.stderr and "standard output" in result.stderr


@pytest.mark.slow
def test_log_shows_progress_lines_reasons_and_the_verdict(repo, tmp_path):
    """Not a terminal (a CI log): one progress line per operator and shape on stderr, the
    Markdown on stdout (`--markdown -`), the table, the reasons and the verdict on stderr."""
    result = atrex("check", str(repo), "--device", "cpu", "--op", "broken", "--op", "torchy",
                   "--markdown", "-",
                   "--plot", str(tmp_path / "r.png"), "--bars", str(tmp_path / "b.png"))
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.stdout.startswith("## atrex kernel report")
    assert "Max error (abs / rel)" in result.stdout and "Floor (SOL)" not in result.stdout
    err = result.stderr
    progress = [line for line in err.splitlines() if line.startswith("atrex check: [")]
    assert [line.split("] ")[1].split(" (")[0] for line in progress] == ["broken / cpu",
                                                                         "torchy / cpu"]
    assert "why not pass:" in err
    broken = next(line for line in err.splitlines() if "broken / cpu: compile_error" in line)
    assert "SyntaxError" in broken and "[kernel.py:7]" in broken
    torchy = next(line for line in err.splitlines() if "torchy / cpu: fallback" in line)
    assert "own-kernel share" in torchy and "hint torch_compute_call at" in torchy
    verdict = err.strip().splitlines()[-1]
    assert verdict.startswith("atrex check: fallback: 0/2 operators pass")
    assert "1 compile_error" in verdict and "1 fallback" in verdict
    for png in ("r.png", "b.png"):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_terminal_shows_the_table_and_verdict_without_progress_lines(repo):
    code, shown = atrex_on_tty("check", str(repo), "--device", "cpu", "--op", "good")
    assert code == 0, shown[-3000:]
    assert "atrex check" in shown and "good" in shown and "own share" in shown
    assert "atrex check: [" not in shown  # a live bar on a terminal, not log lines
    assert "atrex check: pass: 1/1 operators pass" in shown


@pytest.mark.slow
def test_quiet_still_prints_the_verdict_and_json_goes_to_stdout(repo):
    """--quiet in the operator's directory (the default path, `.`): stdout is the JSON report,
    stderr the one-line verdict and nothing else."""
    result = atrex("check", "--device", "cpu", "--quiet", "--json", "-", cwd=repo / "broken")
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert [op["status"] for op in report["ops"]] == ["compile_error"]
    assert result.stderr.strip().splitlines() == [
        "atrex check: compile_error: 0/1 operators pass, 1 compile_error; "
        "score n/a (no GPU: correctness and fallback only)"]


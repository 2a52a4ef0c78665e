"""Job scratch directories: removed at the end of the job, and by the next job when the process
that owned one was killed before it could clean up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from atrex.runner.scratch import job_scratch, sweep_orphans

ROOT = Path(__file__).resolve().parents[2]
HOLDER = """
import sys, time
from pathlib import Path
from atrex.runner.scratch import job_scratch
with job_scratch(Path(sys.argv[1])) as scratch:
    (scratch / "triton-cache").mkdir()
    print(scratch, flush=True)
    time.sleep(600)
"""


def test_a_killed_owner_leaves_a_directory_the_next_job_removes(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)},
                              stdout=subprocess.PIPE, text=True)
    scratch = Path(holder.stdout.readline().strip())
    assert (scratch / "triton-cache").is_dir()
    assert sweep_orphans(tmp_path) == []  # its owner lives
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert scratch.exists()  # nobody cleaned up
    with job_scratch(tmp_path) as mine:  # the next job sweeps first
        assert not scratch.exists() and mine.exists()
        assert sweep_orphans(tmp_path) == []  # and its own directory is held
    assert not mine.exists()


def test_directories_without_a_lock_file_or_behind_links_are_left_alone(tmp_path):
    setting_up = tmp_path / "atrex-judge-new"
    setting_up.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / ".owner").touch()  # a free lock, but reached through a link
    (tmp_path / "atrex-judge-link").symlink_to(elsewhere)
    assert sweep_orphans(tmp_path) == []
    assert setting_up.is_dir() and (elsewhere / ".owner").exists()


def test_the_lock_file_is_held_under_its_final_name(tmp_path):
    with job_scratch(tmp_path) as scratch:
        assert [p.name for p in scratch.iterdir()] == [".owner"]
        assert sweep_orphans(tmp_path) == []

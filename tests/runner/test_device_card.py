"""Which physical card a run measured on: its UUID from the CUDA runtime, nvidia-smi asked about
that card (under CUDA_VISIBLE_DEVICES torch's index need not be nvidia-smi's), and each part of a
resumed bench naming its card."""

from __future__ import annotations

import types
import uuid

from atrex.runner import peaks
from atrex.runner.benchresume import BenchState, Keeper
from atrex.runner.model import DeviceInfo, OpResult, Report, Status

FAKE_SMI = """#!/bin/sh
# answers like nvidia-smi, and says which card it was asked about
echo "$1" > "$(dirname "$0")/asked"
echo "580.159.04, 1980, 2619"
"""


def test_nvidia_smi_is_asked_about_the_card_by_its_uuid(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    got = peaks._nvidia_smi("GPU-1ea945f7-e16c-db2f-fb53-4a5413b2c9d7")
    assert (tmp_path / "asked").read_text().strip() == \
        "--id=GPU-1ea945f7-e16c-db2f-fb53-4a5413b2c9d7"
    assert got == {"driver_version": "580.159.04", "clocks.sm": "1980", "clocks.mem": "2619"}


def test_a_uuid_nvidia_smi_does_not_know_falls_back_to_the_index(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\ncase "$1" in --id=GPU-*) exit 6;; esac\n'
                   'echo "$1" > "$(dirname "$0")/asked"\necho "580.159.04, 1980, 2619"\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert peaks._smi_of_card("GPU-unknown", 1)["driver_version"] == "580.159.04"
    assert (tmp_path / "asked").read_text().strip() == "--id=1"


def test_without_nvidia_smi_nothing_is_made_up(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert peaks._nvidia_smi("0") == {}


def test_the_card_uuid_is_written_as_nvidia_smi_writes_it(monkeypatch):
    import torch

    card = uuid.UUID("1ea945f7-e16c-db2f-fb53-4a5413b2c9d7")
    for value, want in ((card, f"GPU-{card}"), ("MIG-5d3c", "MIG-5d3c"), (None, None)):
        monkeypatch.setattr(torch.cuda, "get_device_properties",
                            lambda index, value=value: types.SimpleNamespace(uuid=value))
        assert peaks.card_uuid(0) == want


def _report(card: str | None) -> Report:
    device = DeviceInfo(kind="cuda" if card else "cpu", name="NVIDIA H100 80GB HBM3", uuid=card)
    return Report(device=device, ops=[OpResult(name="rope", status=Status.PASS)],
                  timing_available=card is not None)


def test_each_part_of_a_bench_names_its_card():
    earlier = BenchState(["kb"], "max-autotune-no-cudagraphs", {"kb": _report("GPU-a")},
                         [{"started_at": "t0", "ops": ["silu_and_mul"], "gpu_uuid": "GPU-a"}])
    keeper = Keeper(repo=None, earlier=earlier, path=None, started_at="t1")
    assert keeper.parts({"kb": _report("GPU-b")})[-1] == {
        "started_at": "t1", "ops": ["rope"], "gpu_uuid": "GPU-b"}
    assert keeper.parts({"kb": _report(None)})[-1] == {"started_at": "t1", "ops": ["rope"]}
    assert Report.from_dict(_report("GPU-b").to_dict()).device.uuid == "GPU-b"


def test_the_report_names_the_card_it_was_measured_on():
    from atrex.runner.render import markdown

    assert "· card GPU-b ·" in markdown(_report("GPU-b"))
    assert "card" not in markdown(_report(None)).split("<sub>")[1]

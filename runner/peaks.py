"""Hardware ceilings: a datasheet table (dense rates) and the device this process can see."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path

from .model import DeviceInfo, Peaks


def _vector(bf16: float, fp16: float, fp32: float, fp64: float) -> dict[str, float]:
    """CUDA-core (non-tensor) rates of elementwise arithmetic, dense TFLOP/s."""
    return {"bf16_vector": bf16, "fp16_vector": fp16, "fp32_vector": fp32, "fp64_vector": fp64}

# Dense TFLOP/s per compute class and memory bandwidth in TB/s, from the vendors' datasheets.
# Tensor-core classes: bf16 (and fp16), fp8, tf32 (used only when declared), int8, fp64. CUDA-core
# classes (runner/work/classes.py): fp32 (also fp32 matmuls without TF32) and the "non-tensor"
# rates of elementwise work, <dtype>_vector. Where a datasheet gives no non-tensor 16-bit rate
# the fp32 rate stands in (L40S, B200, MI300X: the packed rate may be higher, the floor lower).
DATASHEET: dict[str, tuple[str, dict[str, float], float]] = {
    "h100_sxm": ("NVIDIA H100 SXM", {"bf16": 989.4, "fp8": 1978.9, "tf32": 494.7, "fp32": 66.9,
                                      "fp64": 66.9, "int8": 1978.9, **_vector(
                                          133.8, 133.8, 66.9, 33.5)}, 3.35),
    "h100_pcie": ("NVIDIA H100 PCIe", {"bf16": 756.0, "fp8": 1513.0, "tf32": 378.0, "fp32": 51.2,
                                        "fp64": 51.2, "int8": 1513.0, **_vector(
                                            102.4, 102.4, 51.2, 25.6)}, 2.0),
    "h200_sxm": ("NVIDIA H200 SXM", {"bf16": 989.4, "fp8": 1978.9, "tf32": 494.7, "fp32": 66.9,
                                      "fp64": 66.9, "int8": 1978.9, **_vector(
                                          133.8, 133.8, 66.9, 33.5)}, 4.8),
    "h20": ("NVIDIA H20", {"bf16": 148.0, "fp8": 296.0, "tf32": 74.0, "fp32": 44.0, "fp64": 1.0,
                           "int8": 296.0, **_vector(88.0, 88.0, 44.0, 1.0)}, 4.0),
    "a100_sxm": ("NVIDIA A100 SXM 80GB", {"bf16": 312.0, "fp8": 312.0, "tf32": 156.0,
                                          "fp32": 19.5, "fp64": 19.5, "int8": 624.0, **_vector(
                                              39.0, 78.0, 19.5, 9.7)}, 2.039),
    "l40s": ("NVIDIA L40S", {"bf16": 362.05, "fp8": 733.0, "tf32": 183.0, "fp32": 91.6,
                             "fp64": 1.4, "int8": 733.0, **_vector(91.6, 91.6, 91.6, 1.4)},
             0.864),
    "b200": ("NVIDIA B200", {"bf16": 2250.0, "fp8": 4500.0, "tf32": 1100.0, "fp32": 80.0,
                             "fp64": 40.0, "int8": 4500.0, **_vector(80.0, 80.0, 80.0, 40.0)},
             8.0),
    "mi300x": ("AMD Instinct MI300X", {"bf16": 1307.4, "fp8": 2614.9, "tf32": 653.7,
                                       "fp32": 163.4, "fp64": 81.7, "int8": 2614.9, **_vector(
                                           163.4, 163.4, 163.4, 81.7)}, 5.3),
}

# Substrings of the names torch reports, mapped to table keys (first match wins).
_NAME_KEYS = (("H200", "h200_sxm"), ("H100 PCIe", "h100_pcie"), ("H100", "h100_sxm"),
              ("H20", "h20"), ("A100", "a100_sxm"), ("L40S", "l40s"), ("B200", "b200"),
              ("MI300X", "mi300x"))


def datasheet_peaks(gpu_key: str) -> Peaks | None:
    entry = DATASHEET.get(gpu_key)
    if entry is None:
        return None
    return Peaks(source="datasheet", tflops=dict(entry[1]), bandwidth_tbps=entry[2])


def gpu_key_for(name: str) -> str | None:
    for fragment, key in _NAME_KEYS:
        if fragment.lower() in name.lower():
            return key
    return None


def calibration_path(gpu_key: str) -> Path:
    base = Path(os.environ.get("ATREX_CACHE_DIR", Path.home() / ".cache" / "atrex"))
    return base / f"calibration-{gpu_key}.json"


def load_calibration(gpu_key: str) -> Peaks | None:
    path = calibration_path(gpu_key)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        # classes calibrate does not measure (the CUDA-core rates) keep their datasheet values
        vector = {k: v for k, v in DATASHEET.get(gpu_key, ("", {}, 0.0))[1].items()
                  if k.endswith("_vector")}
        return Peaks(source="measured", tflops={**vector, **data["tflops"]},
                     bandwidth_tbps=data["bandwidth_tbps"])
    except (json.JSONDecodeError, KeyError, TypeError):
        return None


FLOORS = ("launch_floor_ms", "cold_read_floor_ms", "dependent_read_floor_ms")


def load_floors(gpu_key: str) -> dict[str, float]:
    """The floors `atrex calibrate` measured on this GPU model, ms per call of a replayed CUDA
    graph, by name (FLOORS: an empty kernel; a kernel reading one cold line, directly or after
    an index read); those not measured are absent."""
    path = calibration_path(gpu_key)
    try:
        data = json.loads(path.read_text()) if path.is_file() else {}
        values = {name: data.get(name) for name in FLOORS}
    except (json.JSONDecodeError, OSError, AttributeError):
        return {}
    return {name: float(v) for name, v in values.items() if isinstance(v, int | float) and v > 0}


def detect_device(device: str, device_index: int = 0, target_gpu: str = "h200_sxm") -> DeviceInfo:
    """The device an evaluation runs on. On the CPU, peaks are the target GPU's (for SOL only)."""
    import torch

    versions = {"torch": torch.__version__, "triton": _triton_version(),
                "python": platform.python_version()}
    if device == "cpu":
        return DeviceInfo(kind="cpu", name=platform.processor() or platform.machine(),
                          gpu_key=target_gpu, peaks=datasheet_peaks(target_gpu), **versions)
    name = torch.cuda.get_device_name(device_index)
    key = gpu_key_for(name)
    uuid = card_uuid(device_index)
    smi = _smi_of_card(uuid, device_index)
    slug = key or device_slug(name)
    floors = load_floors(slug)
    return DeviceInfo(kind="cuda", name=name, gpu_key=key, uuid=uuid,
                      driver=smi.get("driver_version"),
                      cuda=torch.version.cuda, sm_clock_mhz=_int(smi.get("clocks.sm")),
                      mem_clock_mhz=_int(smi.get("clocks.mem")),
                      peaks=datasheet_peaks(key) if key else None,
                      peaks_measured=load_calibration(slug), **floors, **versions)


def device_slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name.lower()).strip("_")


def _triton_version() -> str | None:
    try:
        import triton

        return triton.__version__
    except ImportError:
        return None


def card_uuid(device_index: int) -> str | None:
    """The card's UUID as nvidia-smi writes it (GPU-...), from the CUDA runtime."""
    import torch

    value = getattr(torch.cuda.get_device_properties(device_index), "uuid", None)
    if not value:
        return None
    text = str(value)
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def _smi_of_card(uuid: str | None, device_index: int) -> dict[str, str]:
    """nvidia-smi about the card by its UUID (under CUDA_VISIBLE_DEVICES torch's index need not
    be nvidia-smi's), else by the index as before."""
    return (_nvidia_smi(uuid) if uuid else {}) or _nvidia_smi(str(device_index))


def _nvidia_smi(card: str) -> dict[str, str]:
    """nvidia-smi's driver version and clocks of one card (an index or a UUID); {} without it."""
    fields = ["driver_version", "clocks.sm", "clocks.mem"]
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--id={card}", f"--query-gpu={','.join(fields)}",
             "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20,
            check=True).stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return {}
    return dict(zip(fields, (v.strip() for v in out.split(",")), strict=False))


def _int(value: str | None) -> int | None:
    try:
        return int(float(value)) if value else None
    except ValueError:
        return None

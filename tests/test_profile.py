"""``dse profile``: one clear line and exit 2 without a GPU, read-only NVML use, the rows it
writes read back as a calibration sweep, and (only where there is one) a real GPU measured.

No test here pretends to be a GPU: without one, the measuring path is tested only where it
is real (the no-GPU refusal, which runs the actual NVML library or its absence) and the
file it writes is tested from rows written by hand.
"""

from __future__ import annotations

import ast
import importlib.util
import re

import pandas as pd
import pytest

from conftest import REPO, run_cli
from dse.analytic.calibration import fit, measure, readers
from dse.errors import DseError


def _gpu() -> str | None:
    """Why there is no GPU to profile here (None: there is one, with torch and CUDA)."""
    if importlib.util.find_spec("pynvml") is None:
        return "nvidia-ml-py is not installed (pip install 'dse[profile]')"
    import pynvml

    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
    except pynvml.NVMLError as exc:
        return f"no NVIDIA driver or GPU: NVML did not start ({exc})"
    if count == 0:
        return "NVML finds no GPU"
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed (pip install 'dse[profile]')"
    import torch

    return None if torch.cuda.is_available() else "torch has no CUDA device"


NO_GPU = _gpu()


def test_without_a_gpu_profile_exits_2_with_one_clear_line(tmp_path):
    if NO_GPU is None:
        pytest.skip("a GPU is present here: the no-GPU path cannot be reached")
    proc = run_cli("profile", "-o", str(tmp_path / "p.csv"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "no NVIDIA GPU to profile" in proc.stderr or "dse[profile]" in proc.stderr, proc.stderr
    assert not (tmp_path / "p.csv").exists()


def test_dse_never_sets_a_clock_or_a_power_limit():
    """Every call into NVML anywhere in dse is a query (nvmlDeviceGet*, nvmlSystemGet*,
    init/shutdown), and no code runs nvidia-smi."""
    calls, smi = [], []
    for path in (REPO / "dse").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and re.match(r"nvml[A-Z]", node.attr):
                calls.append((path.name, node.attr))
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value.startswith("nvidia-smi ")
            ):
                smi.append((path.name, node.value))
    assert calls, "the NVML layer is expected to call NVML"
    allowed = ("nvmlDeviceGet", "nvmlSystemGet", "nvmlInit", "nvmlShutdown")
    assert [c for c in calls if not c[1].startswith(allowed)] == []
    assert smi == []


def test_the_rows_profile_writes_read_back_as_a_sweep(tmp_path):
    """Rows in the shape profile_gpu makes, with values written here by hand (not measured),
    go through write_rows and come back through the calibration reader."""
    note = "hand-written test values"
    rows = [
        {
            "workload": "idle",
            "kind": "idle",
            "time_s": 5.0,
            "energy_j": 300.0,
            "gpus": 1,
            "notes": note,
        },
        {
            "workload": "parked",
            "kind": "parked",
            "time_s": 5.0,
            "energy_j": 450.0,
            "gpus": 1,
            "notes": note,
        },
        {
            "workload": "matmul-bf16-8192",
            "kind": "compute",
            "precision": "bf16",
            "clock_mhz": 1410.0,
            "power_cap_w": 400.0,
            "time_s": 0.0049,
            "energy_j": 1.9,
            "gpus": 1,
            "flops": 2.0 * 8192**3,
            "gemm_m": 8192,
            "gemm_n": 8192,
            "gemm_k": 8192,
            "temp_c": 61.0,
            "notes": note,
        },
        {
            "workload": "copy-2GiB",
            "kind": "memory",
            "clock_mhz": 1410.0,
            "power_cap_w": 400.0,
            "time_s": 0.0025,
            "energy_j": 0.6,
            "gpus": 1,
            "bytes": 2.0 * 2**31,
            "temp_c": 55.0,
            "notes": note,
        },
    ]
    path = measure.write_rows(rows, tmp_path / "p.csv")
    measure.write_rows(rows[2:], path, append=True)  # a second setting of the sweep
    assert pd.read_csv(path).columns.tolist() == list(measure.COLUMNS)
    back = readers.read([path])
    assert back["kind"].tolist() == ["idle", "parked", "compute", "memory", "compute", "memory"]
    assert back.loc[2, "flops"] == pytest.approx(2.0 * 8192**3, rel=1e-5)
    assert back.loc[3, "bytes"] == pytest.approx(2.0 * 2**31, rel=1e-5)
    assert (back["gpus"] == 1).all() and back.loc[0, "energy_j"] == 300.0
    cand = fit.candidates(back)
    assert {"idle_w", "a_parked", "a_compute", "a_memory", "matmul_eff_max", "memory_eff"} <= set(
        cand
    )
    (tmp_path / "other.csv").write_text("workload,kind,clock_mhz,time_s,energy_j\n")
    with pytest.raises(DseError, match="cannot append"):
        measure.write_rows(rows, tmp_path / "other.csv", append=True)
    # checked before the GPU is opened and measured (here, a machine without one: the same refusal)
    with pytest.raises(DseError, match="cannot append"):
        measure.profile_gpu(tmp_path / "other.csv", append=True)


@pytest.mark.skipif(NO_GPU is not None, reason=f"no GPU to measure: {NO_GPU}")
def test_profile_measures_a_real_gpu(
    tmp_path,
):  # pragma: no cover - runs only on a machine with a GPU
    proc = run_cli(
        "profile", "-o", str(tmp_path / "gpu.csv"), "--seconds", "1", cwd=tmp_path, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    rows = readers.read([tmp_path / "gpu.csv"])
    by = rows.set_index("kind")
    power = by["energy_j"] / by["time_s"]
    assert {"parked", "compute", "memory"} <= set(by.index)
    assert power["compute"] > power["parked"] > 0 and power["memory"] > power["parked"]
    assert 0 < by.loc["compute", "time_s"] < 1 and by.loc["compute", "clock_mhz"] > 0
    name = pd.read_csv(tmp_path / "gpu.csv")["notes"][0]
    base = next(
        (
            part
            for key, part in (
                ("H200", "H200"),
                ("H100", "H100-SXM"),
                ("B200", "B200"),
                ("A100", "A100-80GB"),
                ("V100", "V100-SXM2"),
            )
            if key in name
        ),
        None,
    )
    if base is None:
        pytest.skip(f"no catalog part to base a profile of this GPU on ({name})")
    proc = run_cli("calibrate", "gpu.csv", "--accelerator", base, "-o", "gpu.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr

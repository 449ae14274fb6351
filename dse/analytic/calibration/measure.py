"""``dse profile``: measure this machine's NVIDIA GPU at its current settings.

Four readings, each over ``seconds``: **idle** (before this process creates a CUDA context,
and only when no other process uses the GPU), **parked** (a CUDA context and memory held, no
kernel), a large bf16 **matrix multiply** (compute-bound: time per GEMM, FLOPs, shape) and a
device-to-device **copy** (memory-bound: time per copy, bytes read + written). Energy comes
from the GPU's energy counter where NVML has one (Volta and later), else from power samples
taken every 20 ms; the SM clock, enforced power limit and temperature are averaged over the
window. The rows are the sweep format ``dse calibrate`` reads (:mod:`.readers`).

It never changes a clock or a power limit (:mod:`.nvml` only reads): to sweep them, set each
point with ``nvidia-smi`` (root) and run ``dse profile --append`` at each
(docs/calibration.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from dse.analytic.calibration import nvml
from dse.errors import DseError
from dse.files import atomic_write_text

#: the sweep-format columns dse profile writes, in order
COLUMNS = (
    "workload",
    "kind",
    "precision",
    "clock_mhz",
    "power_cap_w",
    "time_s",
    "energy_j",
    "temp_c",
    "gpus",
    "flops",
    "gemm_m",
    "gemm_n",
    "gemm_k",
    "bytes",
    "notes",
)
GEMM_N = 8192  # bf16 GEMM edge: 1.1 TFLOP per call, compute-bound on every part in the catalog
COPY_BYTES = 2**31  # 2 GiB copied per call (4 GiB of HBM traffic), far beyond any L2 cache
SAMPLE_S = 0.02


def _torch():
    try:
        import torch
    except ImportError:
        raise DseError(f"dse profile needs torch: {nvml.EXTRA}") from None
    if not torch.cuda.is_available():
        raise DseError(
            "no CUDA device for torch: dse profile runs its kernels through torch on an NVIDIA GPU "
            "(a CUDA build of torch and a driver)"
        )
    return torch


class _Sampler:
    """Power, SM clock and temperature every :data:`SAMPLE_S` in a thread while a window runs."""

    def __init__(self, dev: nvml.Device) -> None:
        self.dev, self.rows, self._stop = dev, [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.rows.append(
                (
                    time.perf_counter(),
                    self.dev.power_w(),
                    self.dev.sm_clock_mhz(),
                    self.dev.temperature_c(),
                )
            )
            self._stop.wait(SAMPLE_S)

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def mean(self, col: int) -> float:
        vals = np.array([r[col] for r in self.rows if r[col] is not None], dtype=float)
        return float(vals.mean()) if len(vals) else np.nan

    def energy_j(self, t0: float, t1: float) -> float:
        pts = np.array(
            [(r[0], r[1]) for r in self.rows if r[1] is not None and t0 <= r[0] <= t1], dtype=float
        )
        if len(pts) < 2:
            return np.nan
        area = float(np.sum(np.diff(pts[:, 0]) * (pts[1:, 1] + pts[:-1, 1]) / 2))  # trapezoids
        return area * (t1 - t0) / (pts[-1, 0] - pts[0, 0])


def window(
    dev: nvml.Device,
    seconds: float,
    run: Callable[[], None] | None = None,
    sync: Callable[[], None] | None = None,
    calls: int = 0,
) -> dict:
    """Time, energy, mean SM clock and temperature of ``calls`` calls of ``run`` (or of
    ``seconds`` of waiting): the counter's difference where there is one, else the samples."""
    with _Sampler(dev) as sampler:
        if sync:
            sync()
        e0, t0 = dev.energy_j(), time.perf_counter()
        if run is None:
            time.sleep(seconds)
        else:
            for _ in range(calls):
                run()
            sync()
        t1, e1 = time.perf_counter(), dev.energy_j()
        time.sleep(2 * SAMPLE_S)
    energy = e1 - e0 if e0 is not None and e1 is not None and e1 > e0 else sampler.energy_j(t0, t1)
    return {
        "elapsed_s": t1 - t0,
        "energy_j": energy,
        "clock_mhz": sampler.mean(2),
        "temp_c": sampler.mean(3),
    }


def _calls(run, sync, seconds: float) -> int:
    """Calls of ``run`` that take about ``seconds`` (after three warm-up calls)."""
    for _ in range(3):
        run()
    sync()
    t0 = time.perf_counter()
    for _ in range(5):
        run()
    sync()
    return max(5, int(seconds / max((time.perf_counter() - t0) / 5, 1e-6)))


def profile_gpu(
    output: Path,
    *,
    device: int = 0,
    seconds: float = 5.0,
    append: bool = False,
    log: Callable[[str], None] = print,
) -> list[dict]:
    """Measure GPU ``device`` as it is set now and write the rows to ``output``."""
    if append:
        _check_appendable(Path(output))  # before the minutes of measuring, not after
    dev = nvml.open_device(device)
    try:
        torch = _torch()
        cap = dev.power_limit_w()
        note = f"dse profile: {dev.name}, driver {dev.driver}, current settings (nothing changed)"
        base = {"precision": "", "power_cap_w": cap, "gpus": 1, "notes": note}
        rows = []
        others = dev.processes()
        if others == 0:
            log(f"idle: {seconds:g} s on {dev.name} with no process on it")
            w = window(dev, seconds)
            rows.append(
                {
                    **base,
                    "workload": "idle",
                    "kind": "idle",
                    "time_s": w["elapsed_s"],
                    "energy_j": w["energy_j"],
                    "temp_c": w["temp_c"],
                }
            )
        else:
            log(f"idle skipped: {others} other process(es) use GPU {device}")
        torch.cuda.set_device(device)
        sync = torch.cuda.synchronize
        a = torch.randn(GEMM_N, GEMM_N, dtype=torch.bfloat16, device="cuda")
        b = torch.randn(GEMM_N, GEMM_N, dtype=torch.bfloat16, device="cuda")
        c = torch.empty(GEMM_N, GEMM_N, dtype=torch.bfloat16, device="cuda")
        src = torch.empty(COPY_BYTES // 2, dtype=torch.bfloat16, device="cuda")
        dst = torch.empty_like(src)
        sync()
        log(
            f"parked: {seconds:g} s holding a CUDA context and {(3 * GEMM_N**2 * 2 + 2 * COPY_BYTES) / 1e9:.1f} GB"
        )
        w = window(dev, seconds, sync=sync)
        rows.append(
            {
                **base,
                "workload": "parked",
                "kind": "parked",
                "time_s": w["elapsed_s"],
                "energy_j": w["energy_j"],
                "temp_c": w["temp_c"],
            }
        )

        def gemm() -> None:
            torch.matmul(a, b, out=c)

        def copy() -> None:
            dst.copy_(src)

        for name, kind, run, extra in (
            (
                f"matmul-bf16-{GEMM_N}",
                "compute",
                gemm,
                {
                    "precision": "bf16",
                    "flops": 2.0 * GEMM_N**3,
                    "gemm_m": GEMM_N,
                    "gemm_n": GEMM_N,
                    "gemm_k": GEMM_N,
                },
            ),
            (f"copy-{COPY_BYTES >> 30}GiB", "memory", copy, {"bytes": 2.0 * COPY_BYTES}),
        ):
            n = _calls(run, sync, seconds)
            log(f"{name}: {n} calls")
            w = window(dev, seconds, run=run, sync=sync, calls=n)
            rows.append(
                {
                    **base,
                    **extra,
                    "workload": name,
                    "kind": kind,
                    "clock_mhz": w["clock_mhz"],
                    "time_s": w["elapsed_s"] / n,
                    "energy_j": w["energy_j"] / n,
                    "temp_c": w["temp_c"],
                }
            )
    finally:
        dev.close()
    write_rows(rows, output, append=append)
    return rows


def write_rows(rows: list[dict], path: Path, *, append: bool = False) -> Path:
    """``rows`` in the sweep format (:data:`COLUMNS`); with ``append``, after an existing file's
    rows (which must have the same columns)."""
    path = Path(path)
    table = pd.DataFrame([{c: r.get(c) for c in COLUMNS} for r in rows], columns=list(COLUMNS))
    if append:
        _check_appendable(path)
    if append and path.exists() and path.stat().st_size:
        text = path.read_text(encoding="utf-8") + table.to_csv(
            header=False, index=False, float_format="%.6g"
        )
    else:
        text = table.to_csv(index=False, float_format="%.6g")
    atomic_write_text(path, text)  # whole or not at all, never through a link
    return path


def _check_appendable(path: Path) -> None:
    """Refuse to append to a file whose columns are not :data:`COLUMNS` (an empty or new file is fine)."""
    if path.exists() and path.stat().st_size:
        head = path.read_text(errors="replace").splitlines()[0].split(",")
        if head != list(COLUMNS):
            raise DseError(
                "cannot append: the file's columns are not dse profile's",
                file=str(path),
                allowed=",".join(COLUMNS),
            )

"""Plots and reports at scale: `dse plot` and `dse report` on synthetic runs of 10^5 to 10^7
evaluations, with wall time and the peak RSS of the command's process.

A real quickstart results folder is made first (in-process run), then its evaluation log
(``evaluations/``, the only copy of every evaluation, which plot and report read) is
replaced by a synthetic one of N rows in log files of 65,536 rows (as the run's writer groups them) (the quickstart's
parameters, objectives with a trade-off, constraint metrics, ``feasible``, ``status``,
``reason``, ``key``, LZ4-compressed Arrow IPC as the run writes it) and ``pareto.nc`` by its
exact front. Then each command runs in its own process, sampled every 20 ms for RSS.

    python benchmarks/bench_outputs.py                 # 10^5, 10^6, 10^7
    python benchmarks/bench_outputs.py --sizes 100000  # quicker
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import yaml

REPO = Path(__file__).resolve().parents[1]
CHUNK = 1_000_000
LOG_FILE_ROWS = 65_536  # the run's log writer groups rows into files of at least this many
PARAMS = {
    "accelerator": ["A100-80GB", "H100-SXM"],
    "num_accelerators": [8, 16, 32, 64],
    "global_batch_size": [64, 128, 256, 512, 1024],
    "clock_fraction": [0.6, 0.7, 0.8, 0.9, 1.0],
    "tensor_parallel": [1, 2],
}


def make_run(folder: Path) -> Path:
    study = yaml.safe_load((REPO / "studies" / "quickstart.yaml").read_text())
    study.update(execution={"workers": 0}, output=str(folder / "run"))
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    subprocess.run(
        [sys.executable, "-m", "dse", "run", str(path), "-q"], check=True, capture_output=True
    )
    return folder / "run"


def chunk_table(start: int, n: int, rng: np.random.Generator) -> pd.DataFrame:
    t = {
        name: np.asarray(values)[rng.integers(0, len(values), n)] for name, values in PARAMS.items()
    }
    energy = 3e8 * rng.lognormal(0.4, 0.35, n)
    time_s = 8e3 * (3e8 / energy) ** 4 * rng.lognormal(1.5, 0.6, n)  # a trade-off with scatter
    temp = rng.normal(62, 10, n)
    mem = rng.uniform(10, 90, n)
    rejected = rng.random(n) < 0.08
    t.update(
        time_to_train_s=time_s,
        energy_to_train_j=energy,
        peak_junction_temp_c=temp,
        memory_per_accelerator_gib=mem,
        feasible=~rejected,
        reason=np.where(
            rejected, "data parallel x micro batch does not divide the global batch", ""
        ),
        status=np.full(n, "ok"),
        key=np.arange(start, start + n, dtype=np.int64),
    )
    t["meets_constraints"] = ~rejected & (temp <= 85) & (mem <= 80)
    for name in ("time_to_train_s", "energy_to_train_j"):
        t[name] = np.where(rejected, np.nan, t[name])
    return pd.DataFrame(t)


def write_synthetic(run: Path, n: int) -> int:
    """Replace the run's log by N synthetic evaluations, and pareto.nc by their exact front."""
    import moocore
    import pyarrow as pa

    from dse.api import plan
    from dse.datasets import to_dataset, write_netcdf
    from dse.store import ResultStore, encode

    p = plan(run / "study.yaml")
    store = ResultStore.open(run)
    for f in store.log_files():
        f.unlink()
    store._files = None
    rng = np.random.default_rng(1)
    front = pd.DataFrame()
    for start in range(0, n, CHUNK):
        t = chunk_table(start, min(CHUNK, n - start), rng)
        ok = t[t["meets_constraints"]]
        cand = pd.concat([front, ok], ignore_index=True)
        F = cand[["energy_to_train_j", "time_to_train_s"]].to_numpy()
        front = cand[moocore.is_nondominated(F, keep_weakly=True)].reset_index(drop=True)
        log = t.drop(columns="meets_constraints").assign(batch=np.int32(0), kept=True)
        table = pa.Table.from_pandas(log, preserve_index=False)
        for at in range(0, len(log), LOG_FILE_ROWS):  # groups as the run's log writer makes them
            store.write_group(0, encode(table.slice(at, LOG_FILE_ROWS)))
    front = front.drop(columns="meets_constraints")
    front = front.sort_values("energy_to_train_j").reset_index(drop=True)
    attrs = {"log_rows": n, "log_keeps": "all", "evaluations": n, "run_id": store.meta.run_id}
    write_netcdf(
        to_dataset(front, p.study, p.evaluator, p.space, kind="pareto set").assign_attrs(attrs),
        run / "pareto.nc",
    )
    assert ResultStore.open(run).check_log() == n
    return len(front)


def measure(args: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of ``python -m dse ARGS`` and its children."""
    start = time.perf_counter()
    proc = psutil.Popen(
        [sys.executable, "-m", "dse", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    peak = 0
    while proc.poll() is None:
        try:
            tree = [proc, *proc.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in tree))
        except psutil.NoSuchProcess:
            pass
        time.sleep(0.02)
    wall = time.perf_counter() - start
    out, err = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"dse {' '.join(args)} failed: {err.decode()}")
    return wall, peak / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10**5, 10**6, 10**7])
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-outputs-"))
    try:
        base = make_run(tmp)
        rows = []
        for n in args.sizes:
            run = tmp / f"run-{n}"
            shutil.copytree(base, run)
            t0 = time.perf_counter()
            front = write_synthetic(run, n)
            made = time.perf_counter() - t0
            size = sum(f.stat().st_size for f in (run / "evaluations").iterdir()) / 2**20
            plot = measure(["plot", str(run), "-o", str(run / "pareto.png")])
            report = measure(["report", str(run)])
            html = (run / "report.html").stat().st_size / 2**20
            rows.append((n, front, size, made, *plot, *report, html))
            shutil.rmtree(run)
        print(
            f"{'evaluations':>12} {'front':>6} {'file MiB':>9} {'made s':>7} | {'plot s':>7} "
            f"{'plot MiB':>9} | {'report s':>8} {'report MiB':>10} {'html MiB':>8}"
        )
        for n, front, size, made, pw, pm, rw, rm, html in rows:
            print(
                f"{n:>12,} {front:>6} {size:>9.0f} {made:>7.1f} | {pw:>7.1f} {pm:>9.0f} | "
                f"{rw:>8.1f} {rm:>10.0f} {html:>8.1f}"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

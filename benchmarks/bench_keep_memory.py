"""Peak memory of a run and of its resume under each ``output.keep`` policy.

``python benchmarks/bench_keep_memory.py [--size 1e6] [--workers 2]``

For the exhaustive benchmark study of ``bench_pipeline.py`` at about ``--size`` candidates,
each ``keep`` policy (``all``, ``feasible``, ``front``) is run as a real ``dse run`` and its
finished folder then ``dse resume``d (which reads the log, rebuilds the key index and the
front, and writes the datasets again); the table gives the wall time, the peak resident
memory of the whole process tree (psutil, every 0.1 s) and the folder's size. Target
(issue 33): ``front`` and ``feasible`` peak no higher than ``all``, at the end of a run and
on resume.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import yaml
from bench_pipeline import folder_bytes, measure, study_of


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=float, default=1e6)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dse-bench-keep-"))
    print(
        f"{'keep':<9} {'run s':>7} {'run peak GB':>12} {'resume s':>9} "
        f"{'resume peak GB':>15} {'folder MB':>10}"
    )
    for keep in ("all", "feasible", "front"):
        out = tmp / keep
        study = study_of(args.size, args.workers, out)
        study["output"] = {"path": str(out), "keep": keep}
        path = tmp / f"{keep}.yaml"
        path.write_text(yaml.safe_dump(study))
        run = measure([sys.executable, "-m", "dse", "run", str(path), "--quiet"])
        resume = measure([sys.executable, "-m", "dse", "resume", str(out), "--quiet"])
        print(
            f"{keep:<9} {run['wall_s']:>7.1f} {run['peak_rss_gb']:>12.2f} "
            f"{resume['wall_s']:>9.1f} {resume['peak_rss_gb']:>15.2f} "
            f"{folder_bytes(out) / 1e6:>10.0f}"
        )
    print(f"(folder: {tmp})")


if __name__ == "__main__":
    main()

"""Ctrl-C during `dse run`: seconds from the signal to the run's exit, at random moments.

Ctrl-C in a terminal sends SIGINT to the whole process group; this script does the same to
real ``python -m dse run`` processes, each in a session of its own, at a random moment
after its start (during the cluster's start, the search, the front polish or the final
writes), ``--tries`` times for each kind of run: the toy evaluator (a fixed cost per
candidate) evaluated in this process, on a local cluster of two workers, and with NSGA-II
on the cluster. It prints, per kind, the median and largest time to exit and the exit
codes seen (130: interrupted; 0: the run had ended before the signal). The target (issue
33): every run stops within 5 s.

    python benchmarks/bench_interrupt.py [--tries 10] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench_faults import ENV, study

KINDS = {
    "in process": ({"workers": 0}, "exhaustive"),
    "local cluster": ({"workers": 2}, "exhaustive"),
    "nsga2, local cluster": ({"workers": 2}, "nsga2"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tries", type=int, default=10)
    ap.add_argument("--max-delay-s", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    folder = Path(tempfile.mkdtemp(prefix="dse-bench-interrupt-"))
    print(f"{'run':<22} {'tries':>5} {'median s':>9} {'max s':>7}  exit codes")
    worst = 0.0
    for kind, (execution, algorithm) in KINDS.items():
        stops, codes = [], Counter()
        for i in range(args.tries):
            name = f"{kind.replace(' ', '-').replace(',', '')}-{i}"
            spec = study(folder, name, execution, 4000, 0.004)
            if algorithm == "nsga2":
                text = spec.read_text().replace("algorithm: exhaustive", "algorithm: nsga2")
                spec.write_text(text.replace("budget: 4000", "budget: 3000"))
            run = subprocess.Popen(
                [sys.executable, "-m", "dse", "run", str(spec), "--quiet"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=ENV,
                cwd=folder,
                start_new_session=True,
            )
            time.sleep(rng.uniform(0.5, args.max_delay_s))
            sent = time.monotonic()
            try:
                os.killpg(run.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
            try:
                run.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait()
            stops.append(time.monotonic() - sent)
            codes[run.returncode] += 1
        worst = max(worst, max(stops))
        said = ", ".join(f"{code}: {n}" for code, n in sorted(codes.items()))
        print(
            f"{kind:<22} {len(stops):>5} {statistics.median(stops):>9.2f} {max(stops):>7.2f}  {said}"
        )
    print(f"\nlongest time from Ctrl-C to exit: {worst:.2f} s (target: 5 s)")


if __name__ == "__main__":
    main()

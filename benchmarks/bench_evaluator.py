"""Candidates per second of the analytic evaluator on one core.

``python benchmarks/bench_evaluator.py [N]`` (default 1,000,000) builds N random
candidates (a DataFrame with text columns, as a study produces), then times
``AnalyticEvaluator.evaluate`` (DataFrame -> arrays -> time + energy model -> DataFrame)
and the time model alone on the converted arrays. Target: >= 500,000 candidates/s.
Pin to one core with ``taskset -c 0`` (numpy here is single-threaded for these ops).
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from dse.evaluators.analytic import AnalyticEvaluator  # noqa: E402
from dse.physics import time_model  # noqa: E402


def candidates(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    pick = lambda xs: rng.choice(np.asarray(xs, dtype=object), n)  # noqa: E731
    return pd.DataFrame({
        "model": pd.Series(pick(["gpt-1.3b", "llama2-7b", "llama3-70b", "gpt3-175b"]), dtype="str"),
        "accelerator": pd.Series(pick(["A100-80GB", "H100-SXM", "H200", "MI300X", "B200"]), dtype="str"),
        "num_accelerators": rng.choice([8, 64, 512, 1024], n),
        "tensor_parallel": rng.choice([1, 2, 4, 8], n),
        "pipeline_parallel": rng.choice([1, 2, 4, 8], n),
        "micro_batch_size": rng.choice([1, 2, 4], n),
        "global_batch_size": rng.choice([512, 1024, 2048], n),
        "recompute": pd.Series(pick(["none", "selective", "full"]), dtype="str"),
        "clock_mhz": rng.uniform(1000, 1400, n),
        "zero_stage": rng.choice([0, 1, 2, 3], n),
    })


def main(argv: list[str]) -> int:
    n = int(argv[1]) if len(argv) > 1 else 1_000_000
    df = candidates(n)
    ev = AnalyticEvaluator()
    ev.evaluate(df.head(1000))  # warm caches (catalog YAML)
    t0 = time.perf_counter()
    cfg = ev.to_arrays(df)
    t1 = time.perf_counter()
    time_model.evaluate(cfg)
    t2 = time.perf_counter()
    out = ev.evaluate(df)
    t3 = time.perf_counter()
    print(f"candidates: {n:,} (feasible {int(out['feasible'].sum()):,})")
    print(f"DataFrame -> arrays:            {t1 - t0:7.3f} s")
    print(f"time model only:                {t2 - t1:7.3f} s  ({n / (t2 - t1):,.0f} candidates/s)")
    print(f"AnalyticEvaluator.evaluate:     {t3 - t2:7.3f} s  ({n / (t3 - t2):,.0f} candidates/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

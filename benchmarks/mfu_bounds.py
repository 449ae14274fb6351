"""The model's highest predicted MFU per accelerator, stack and precision, against the best
MFU published for them.

``python benchmarks/mfu_bounds.py [N]`` (about 10 s) evaluates N random candidates (default
200,000: dense presets from 1.3B to 405B parameters, 8 to 4,096 accelerators, every stack,
layout, recomputation and sharding option) and prints, per (accelerator, stack,
precision), the highest MFU among the feasible ones next to the best MFU measured on that
part and stack in the reference and held-out tables (each measured run's MFU computed
with the model's FLOP count, so both columns count FLOPs the same way). docs/model.md,
section 7 discusses every row where the model goes higher.
"""

from __future__ import annotations

import sys
from importlib.resources import files
from pathlib import Path

import numpy as np
import pandas as pd

from dse.analytic import validation
from dse.analytic.evaluator import AnalyticEvaluator
from dse.analytic.time import frameworks, workload
from dse.analytic.time import model as time_model

REFERENCE = Path(str(files("dse.analytic.data").joinpath("reference")))
FAMILY = {"A100-40GB": "A100-80GB"}  # same die: one row


def measured_mfu() -> pd.DataFrame:
    """MFU of every measured time-model row of the reference and held-out tables."""
    parts = []
    for path in [*sorted(REFERENCE.glob("*.csv")), *sorted((REFERENCE / "heldout").glob("*.csv"))]:
        if path.name in validation.CHECK_TABLES:  # mixture-of-experts: a separate check
            continue
        df = validation.read_table(path)
        df = df[df["measured_quantity"].isin(validation.TIME_QUANTITIES)].reset_index(drop=True)
        cfg = validation.table_to_config(df, file=str(path))
        with np.errstate(all="ignore"):
            r = time_model.evaluate(cfg)
        q, v = df["measured_quantity"].to_numpy(), pd.to_numeric(df["measured_value"]).to_numpy()
        n = cfg["num_accelerators"]
        tokens = cfg["global_batch_size"] * workload.resolve_shape(cfg["model"], cfg).seq_len
        step = np.where(q == "iteration_time_s", v, tokens / (v * n))
        mfu = np.where(q == "mfu", v, r.model_flops / (step * n * r.hw.peak_flops))
        parts.append(
            pd.DataFrame(
                {
                    "id": df["id"],
                    "accelerator": np.asarray(cfg["accelerator"]),
                    "framework": np.asarray(cfg["framework"]),
                    "precision": np.asarray(cfg["precision"]),
                    "mfu": mfu,
                }
            )
        )
    out = pd.concat(parts, ignore_index=True)
    out["accelerator"] = out["accelerator"].replace(FAMILY)
    out["precision"] = out["precision"].replace({"fp16": "bf16"})  # same 16-bit peak on these parts
    return out


def candidates(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    pick = lambda xs: rng.choice(np.asarray(xs, dtype=object), n)  # noqa: E731
    return pd.DataFrame(
        {
            "model": pd.Series(
                pick(
                    [
                        "gpt-1.3b",
                        "llama2-7b",
                        "llama3-8b",
                        "llama2-13b",
                        "llama3-70b",
                        "gpt3-175b",
                        "llama3-405b",
                    ]
                ),
                dtype="str",
            ),
            "accelerator": pd.Series(
                pick(["A100-80GB", "H100-SXM", "H200", "B200", "MI300X"]), dtype="str"
            ),
            "framework": pd.Series(pick(frameworks.framework_names()), dtype="str"),
            "precision": pd.Series(pick(["bf16", "bf16", "fp8"]), dtype="str"),
            "num_accelerators": rng.choice([8, 16, 64, 256, 1024, 4096], n),
            "tensor_parallel": rng.choice([1, 2, 4, 8], n),
            "pipeline_parallel": rng.choice([1, 2, 4, 8, 16], n),
            "context_parallel": rng.choice([1, 1, 1, 2], n),
            "interleave": rng.choice([1, 1, 2, 4], n),
            "micro_batch_size": rng.choice([1, 2, 4, 8, 16], n),
            "global_batch_size": rng.choice([256, 512, 1024, 2048, 4096], n),
            "recompute": pd.Series(pick(["none", "selective", "full"]), dtype="str"),
            "sequence_parallel": rng.choice([False, True], n),
            "flash_attention": rng.choice([True, True, False], n),
            "zero_stage": rng.choice([np.nan, 0, 1, 2, 3], n),
        }
    )


def main(argv: list[str]) -> int:
    n = int(argv[1]) if len(argv) > 1 else 200_000
    table = candidates(n)
    out = AnalyticEvaluator().evaluate(table)
    table = table.assign(mfu=out["mfu"], feasible=out["feasible"])[out["feasible"].to_numpy()]
    best = measured_mfu()
    print(f"{n:,} candidates, {len(table):,} feasible\n")
    print(
        "| accelerator | stack | precision | model's highest MFU | its candidate | best measured MFU | run |"
    )
    print("|---|---|---|---:|---|---:|---|")
    for (acc, fw, prec), rows in table.groupby(["accelerator", "framework", "precision"]):
        top = rows.loc[rows["mfu"].idxmax()]
        cand = (
            f"{top['model']}, {top['num_accelerators']}, t{top['tensor_parallel']} "
            f"p{top['pipeline_parallel']} c{top['context_parallel']}, b{top['micro_batch_size']}, "
            f"{top['recompute']}, flash {'on' if top['flash_attention'] else 'off'}"
        )
        meas = best[
            (best["accelerator"] == acc) & (best["framework"] == fw) & (best["precision"] == prec)
        ]
        ref = meas.loc[meas["mfu"].idxmax()] if len(meas) else None
        ref_text = f"{ref['mfu']:.3f} | {ref['id']}" if ref is not None else "- | none published"
        print(f"| {acc} | {fw} | {prec} | {top['mfu']:.3f} | {cand} | {ref_text} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

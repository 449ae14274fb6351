"""``dse validate-model``: predicted versus measured iteration times for a table of runs.

The table uses the column names of the vTrain reference files (dse/analytic/data/reference/):
``# GPUs, global batch, micro batch, hidden size, attention heads, # layers, sequence
length, tensor parallelism, data parallelism, pipeline parallelism, iteration time (ms)``,
plus optional columns ``accelerator`` (catalog name, default A100-80GB), ``vocab``
(default 50257), ``recompute`` (none/selective/full, default full), ``sequence_parallel``,
``interleave``, ``feed_forward`` (default 4 x hidden), ``scaleup_bw_gbs``,
``scaleout_bw_gbs`` (default 12.5: 800 Gb/s per 8-GPU node, the reference setup) and
``flash_attention`` (default false, as in the reference runs).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from dse.analytic import declarations
from dse.analytic.time import hardware, memory
from dse.analytic.time import model as time_model
from dse.errors import DseError

COLUMNS = {
    "# GPUs": "num_accelerators",
    "global batch": "global_batch_size",
    "micro batch": "micro_batch_size",
    "hidden size": "hidden",
    "attention heads": "heads",
    "# layers": "layers",
    "sequence length": "seq_len",
    "tensor parallelism": "tensor_parallel",
    "pipeline parallelism": "pipeline_parallel",
}
MEASURED = "iteration time (ms)"
DP = "data parallelism"
OPTIONAL_NUMERIC = {"vocab": ("vocab", 50257.0), "feed_forward": ("ffn_hidden", np.nan),
                    "interleave": ("interleave", 1.0), "sequence_parallel": ("sequence_parallel", 0.0),
                    "scaleup_bw_gbs": ("scaleup_bw_gbs", np.nan), "scaleout_bw_gbs": ("scaleout_bw_gbs", 12.5),
                    "flash_attention": ("flash_attention", 0.0), "zero_stage": ("zero_stage", 1.0),
                    "scaleup_size": ("scaleup_size", 8.0)}


def _bool_col(col: pd.Series) -> np.ndarray:
    if col.dtype == bool:
        return col.to_numpy(dtype=float)
    text = col.astype(str).str.strip().str.lower()
    mapped = text.map({"true": 1.0, "false": 0.0, "yes": 1.0, "no": 0.0, "1": 1.0, "0": 0.0,
                       "1.0": 1.0, "0.0": 0.0, "nan": np.nan, "": np.nan})
    return pd.to_numeric(mapped, errors="coerce").to_numpy(dtype=float)


def table_to_config(df: pd.DataFrame, *, file: str = "") -> dict[str, np.ndarray]:
    """Model inputs for every row of a measurement table: the table's columns, the
    reference setup's values above where a column is absent, and every other input at its
    declared default (:func:`dse.analytic.declarations.complete`)."""

    missing = [c for c in (*COLUMNS, MEASURED) if c not in df.columns]
    if missing:
        raise DseError(f"missing columns {missing}", file=file, allowed=", ".join([*COLUMNS, MEASURED]))
    n = len(df)
    cfg: dict[str, np.ndarray] = {}
    for col, name in COLUMNS.items():
        vals = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
        if not np.isfinite(vals).all() or (vals <= 0).any():
            raise DseError("column must hold positive numbers", file=file, field=col)
        cfg[name] = vals
    if DP in df.columns:
        dp = pd.to_numeric(df[DP], errors="coerce").to_numpy(dtype=float)
        bad = np.flatnonzero(dp * cfg["tensor_parallel"] * cfg["pipeline_parallel"] != cfg["num_accelerators"])
        if len(bad):
            raise DseError(f"row {bad[0] + 1}: tensor x data x pipeline parallelism != # GPUs", file=file, field=DP)
    for col, (name, default) in OPTIONAL_NUMERIC.items():
        if col in df.columns:
            raw = _bool_col(df[col]) if col in ("sequence_parallel", "flash_attention") else \
                pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
            cfg[name] = np.where(np.isfinite(raw), raw, default)
        else:
            cfg[name] = np.full(n, default)
    acc = (df["accelerator"].fillna("").astype(str).str.strip().replace({"nan": "A100-80GB", "": "A100-80GB"})
           if "accelerator" in df.columns else pd.Series(["A100-80GB"] * n))
    unknown = sorted(set(acc) - set(hardware.accelerator_names()))
    if unknown:
        raise DseError(f"unknown accelerator {unknown[0]!r}", file=file, field="accelerator",
                       allowed=", ".join(hardware.accelerator_names()))
    cfg["accelerator"] = acc.to_numpy(dtype=object)
    rec = (df["recompute"].fillna("").astype(str).str.strip().str.lower().replace({"nan": "full", "": "full"})
           if "recompute" in df.columns else pd.Series(["full"] * n))
    bad = sorted(set(rec) - set(memory.RECOMPUTE))
    if bad:
        raise DseError(f"unknown recompute {bad[0]!r}", file=file, field="recompute", allowed=", ".join(memory.RECOMPUTE))
    cfg["recompute"] = rec.to_numpy(dtype=object)
    cfg["model"] = np.full(n, "custom", dtype=object)
    cfg["kv_heads"] = cfg["heads"]
    cfg["gated_mlp"] = np.zeros(n)
    cfg["tied_embeddings"] = np.ones(n)
    # the reference runs are fp16 mixed precision (same tensor rate as bf16); fp16 where the
    # accelerator has no bf16 units
    cfg["precision"] = np.full(n, "fp16", dtype=object)
    cfg["num_accelerators"] = cfg["num_accelerators"]
    cfg["target_tokens"] = np.full(n, 1e9)
    return declarations.complete(cfg, n)


def predict(df: pd.DataFrame, *, file: str = "") -> pd.DataFrame:
    """Per-row predicted and measured iteration time (ms), error and feasibility."""
    cfg = table_to_config(df, file=file)
    out = time_model.evaluate(cfg)
    measured = pd.to_numeric(df[MEASURED], errors="coerce").to_numpy(dtype=float)
    predicted = out.step_time_s * 1e3
    return pd.DataFrame({
        "measured_ms": measured, "predicted_ms": predicted,
        "error": (predicted - measured) / measured,
        "reason": out.reason,
    })


def summary(result: pd.DataFrame) -> dict:
    """Median, mean and max absolute relative error over the rows with a prediction."""
    err = result["error"].abs()
    ok = np.isfinite(err.to_numpy(dtype=float))
    e = err[ok]
    return {
        "rows": int(len(result)), "predicted": int(ok.sum()),
        "infeasible": int((result["reason"] != "").sum()),
        "median_abs_error": float(e.median()) if len(e) else float("nan"),
        "mean_abs_error": float(e.mean()) if len(e) else float("nan"),
        "max_abs_error": float(e.max()) if len(e) else float("nan"),
    }


def validate_model(table: Path, as_json: bool) -> int:
    """Print predicted versus measured per row and a summary; return an exit code (0)."""
    table = Path(table)
    if not table.is_file():
        raise DseError("no such file", file=str(table))
    try:
        df = pd.read_csv(table)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise DseError(f"cannot read CSV: {exc}", file=str(table)) from None
    if "sm_clock_mhz" in df.columns:
        from dse.analytic import validate_energy  # the energy side owns clock-sweep tables

        report = validate_energy.perseus_report(table)
        print(json.dumps(report, indent=2) if as_json else _format_dict(report))
        return 0
    result = predict(df, file=str(table))
    stats = summary(result)
    if as_json:
        print(json.dumps(stats, indent=2))
        return 0
    lines = [f"{'row':>5} {'measured ms':>12} {'predicted ms':>13} {'error':>8}  note"]
    for i, r in enumerate(result.itertuples(index=False)):
        lines.append(f"{i + 1:>5} {r.measured_ms:>12.1f} {r.predicted_ms:>13.1f} {r.error:>+8.1%}  {r.reason}")
    lines.append("")
    lines.append(f"rows {stats['rows']}, predicted {stats['predicted']}, infeasible {stats['infeasible']}")
    lines.append(f"absolute error: median {stats['median_abs_error']:.1%}, mean {stats['mean_abs_error']:.1%}, "
                 f"max {stats['max_abs_error']:.1%}")
    print("\n".join(lines))
    return 0


def _format_dict(d: dict) -> str:
    return "\n".join(f"{k}: {v}" for k, v in d.items())

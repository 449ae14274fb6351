"""``dse validate-model``: measured runs against the analytic model, in one table format.

Every reference table (``dse/analytic/data/reference/*.csv``) and any table a user brings
is a CSV with one measurement per row (docs/model.md, section 9):

- bookkeeping: ``source`` (required: the errors are summarised per source), ``id``,
  ``citation``, ``notes``, and ``data_parallel`` (checked against the layout when given);
- the measurement: ``measured_quantity`` and ``measured_value``. Time-model quantities:
  ``iteration_time_s``, ``tokens_per_s_per_gpu`` (per accelerator), ``mfu`` (the model's
  FLOP count, :func:`~dse.analytic.time.workload.model_flops_per_iteration`). Clock-sweep
  quantities ``stage_time_s`` and ``stage_energy_j`` (one pipeline stage, forward +
  backward, at ``clock_mhz``) are compared relative to the same source's highest clock
  (:mod:`dse.analytic.validate_energy`). Power quantities ``node_avg_power_w`` and
  ``node_peak_power_w``: one node's power at the wall while it trains (accelerators, host,
  fans, NICs, switch shares, power-supply loss), the evaluator's metrics of those names;
- the run: any input of the analytic evaluator (``framework``, ``accelerator``,
  ``precision``, the layout: ``num_accelerators``, ``global_batch_size``,
  ``micro_batch_size``, ``tensor_parallel``, ``context_parallel``,
  ``pipeline_parallel``, ``interleave``, ``sequence_parallel``, ``recompute``,
  ``zero_stage``, ``flash_attention``, network inputs, ...) and the model shape
  (``model`` as a preset name or a label, ``layers``, ``hidden``, ``ffn_hidden``,
  ``heads``, ``kv_heads``, ``vocab``, ``seq_len``, ``gated_mlp``, ``tied_embeddings``).
  An empty cell or a missing column takes the evaluator's declared default. Time rows go
  through the whole evaluator (:func:`dse.analytic.model.evaluate`), so a row's
  ``power_cap_w`` sets the clock the energy half's clock search allows and the step is
  timed at that clock, as in a study.

Accelerator names are matched without regard to case, spaces, hyphens or underscores
(``a100-80gb``, ``A100 80GB``). Tables in the vTrain column format (``# GPUs``, ``global
batch``, ..., ``iteration time (ms)``) are read too, with the vTrain setup as defaults.
Every time prediction error is expressed on the iteration time: predicted / measured - 1
(throughput and MFU rows converted), so that its sign always means "too slow"; a node
power error is on the power (+ too high).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from dse.analytic import declarations
from dse.analytic import model as analytic_model
from dse.analytic.time import hardware, workload
from dse.errors import DseError, StudyError, did_you_mean
from dse.evaluators.base import TRUTH
from dse.tables import TABLE_LIMIT_MB, check_shape, check_size

#: reference tables that check the model and are never fitted (benchmarks/fit_calibration.py
#: and benchmarks/mfu_bounds.py skip them): published mixture-of-experts throughput,
#: whole-node power measured at the wall (heldout/node_power.csv) and published fine-tuning
#: throughput, full and LoRA (heldout/nemo_finetune.csv)
CHECK_TABLES = ("moe_published_throughput.csv", "node_power.csv", "nemo_finetune.csv")
TIME_QUANTITIES = ("iteration_time_s", "tokens_per_s_per_gpu", "mfu")
#: power of one node at the wall (the evaluator's metrics of the same names); their error
#: is on the power itself: predicted / measured - 1, + too high
POWER_QUANTITIES = ("node_avg_power_w", "node_peak_power_w")
STAGE_QUANTITIES = ("stage_time_s", "stage_energy_j")
BOOKKEEPING = (
    "id",
    "source",
    "citation",
    "notes",
    "data_parallel",
    "measured_quantity",
    "measured_value",
    # peak memory per accelerator the source publishes (GiB; torchtitan's reserved peak):
    # validate-model reports the memory model's error on it
    "published_peak_memory_gib",
)
REQUIRED = ("source", "measured_quantity", "measured_value")
#: the columns naming the setup measured (a default would silently predict another one)
SETUP = ("framework", "accelerator", "precision", "model")
LAYOUT = (
    "num_accelerators",
    "global_batch_size",
    "micro_batch_size",
    "tensor_parallel",
    "pipeline_parallel",
)
SHAPE = workload.SHAPE_FIELDS
BOOLEAN = {
    "sequence_parallel",
    "flash_attention",
    "gated_mlp",
    "tied_embeddings",
    "moe_a2a_overlap",
} | {name for name, inp in declarations.INPUTS.items() if inp.kind == "bool"}

#: the vTrain column format (the simulator's published validation tables) and its setup
VTRAIN_COLUMNS = {
    "# GPUs": "num_accelerators",
    "global batch": "global_batch_size",
    "micro batch": "micro_batch_size",
    "hidden size": "hidden",
    "attention heads": "heads",
    "# layers": "layers",
    "sequence length": "seq_len",
    "tensor parallelism": "tensor_parallel",
    "pipeline parallelism": "pipeline_parallel",
    "data parallelism": "data_parallel",
    "feed_forward": "ffn_hidden",
}
VTRAIN_SETUP = {
    "framework": "deepspeed",
    "accelerator": "A100-80GB",
    "precision": "fp16",
    "recompute": "full",
    "flash_attention": False,
    "vocab": 50257,
    "scaleout_bw_gbs": 12.5,
    "zero_stage": 1,
    "gated_mlp": 0,
    "tied_embeddings": 1,
    "model": "custom",
}


def read_table(path: Path) -> pd.DataFrame:
    """A measurement table in the unified format (a vTrain-format table converted)."""
    path = Path(path)
    if path.is_dir():
        raise DseError("is a folder; give the CSV files in it (e.g. FOLDER/*.csv)", file=str(path))
    check_size(path, "measurement table", limit_mb=TABLE_LIMIT_MB)
    if not path.is_file():
        raise DseError("no such file", file=str(path))
    check_shape(path)  # a row longer than the header would shift its values under an index column
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise DseError(f"cannot read CSV: {exc}", file=str(path)) from None
    if "iteration time (ms)" in df.columns:
        df = _from_vtrain(df, path)
    df.columns = [c.strip() for c in df.columns]
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise DseError(
            f"missing columns {missing}",
            file=str(path),
            allowed="the validate-model format: docs/model.md, section 9",
        )
    if len(df) == 0:
        raise DseError("the table has no rows (a header alone)", file=str(path))
    # what was measured on which stack and part: a default would predict another setup than
    # the one measured, without a word
    missing = [c for c in SETUP if c not in df.columns]
    stages = df["measured_quantity"].str.strip().isin(STAGE_QUANTITIES)
    if stages.any() and "clock_mhz" not in df.columns:
        missing.append("clock_mhz")  # a clock sweep's rows: at which clock
    if missing:
        raise DseError(
            f"missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)}",
            file=str(path),
            allowed="every table names the setup measured: "
            + ", ".join(SETUP)
            + " (and clock_mhz for stage rows; docs/model.md, section 9)",
        )
    known = set(declarations.INPUTS) | set(SHAPE) | set(BOOKKEEPING)
    unknown = [c for c in df.columns if c not in known]
    if unknown:
        raise DseError(
            f"unknown column {unknown[0]!r}{did_you_mean(unknown[0], known)}",
            file=str(path),
            allowed="bookkeeping columns, model inputs and shape fields (docs/model.md, section 9)",
        )
    quantities = set(TIME_QUANTITIES) | set(STAGE_QUANTITIES) | set(POWER_QUANTITIES)
    bad = sorted(set(df["measured_quantity"].str.strip()) - quantities)
    if bad:
        raise DseError(
            f"unknown measured quantity {bad[0]!r}",
            file=str(path),
            field="measured_quantity",
            allowed=", ".join(sorted(quantities)),
        )
    df = df.assign(
        measured_quantity=df["measured_quantity"].str.strip(),
        _file=path.name,
        _line=df.index.to_numpy() + 2,
    )  # the row's line in the file, for messages
    if "id" not in df.columns:
        df["id"] = [f"{path.stem}:{i + 2}" for i in range(len(df))]
    return df


def _from_vtrain(df: pd.DataFrame, path: Path) -> pd.DataFrame:
    out = df.rename(columns=VTRAIN_COLUMNS)
    for name, value in VTRAIN_SETUP.items():
        if name not in out.columns:
            out[name] = str(value)
    ms = pd.to_numeric(out.pop("iteration time (ms)"), errors="coerce")
    out["measured_quantity"] = "iteration_time_s"
    out["measured_value"] = (ms / 1000.0).astype(str)
    out["source"] = path.stem
    return out


def numbers(df: pd.DataFrame, col: str, file: str, unit: str = "") -> np.ndarray:
    """A CSV column as floats (an empty cell is NaN); a cell that is not a number is refused
    with its line in the file (the ``_line`` column :func:`read_table` adds, else the row's
    index as ``read_csv`` numbered it, the header being line 1) and the column's unit."""
    text = df[col].astype(str).str.strip()
    vals = pd.to_numeric(text.replace("", np.nan), errors="coerce")
    hint = f" in {unit} (write units in the column name, not in the cells)" if unit else ""
    _refuse_first(df, col, file, text, vals.isna() & text.ne(""), f"expected a number{hint}")
    _refuse_first(df, col, file, text, np.isinf(vals), "expected a finite number")
    return vals.to_numpy(dtype=float)


def _refuse_first(
    df: pd.DataFrame, col: str, file: str, text: pd.Series, bad: pd.Series, message: str
) -> None:
    """Raise ``message`` for the first ``bad`` cell of ``col``, naming its line in the file."""
    if not bad.any():
        return
    i = int(np.flatnonzero(bad.to_numpy())[0])
    line = int(df["_line"].iloc[i]) if "_line" in df.columns else int(df.index[i]) + 2
    raise DseError(message, file=file, field=f"line {line}, column {col}", value=text.iloc[i])


def _numeric(df: pd.DataFrame, col: str, file: str) -> np.ndarray:
    if col not in BOOLEAN:
        return numbers(df, col, file)
    text = df[col].astype(str).str.strip()
    mapped = text.str.lower().map({**{k: float(v) for k, v in TRUTH.items()}, "": np.nan})
    _refuse_first(df, col, file, text, mapped.isna() & text.ne(""), "expected true or false")
    return mapped.to_numpy(dtype=float)


def _takes(inp, value) -> bool:
    """Whether input ``inp`` takes ``value`` (its own check, as a study's)."""
    try:
        inp.check(value, field=inp.name)
    except StudyError:
        return False
    return True


def table_to_config(df: pd.DataFrame, *, file: str = "") -> dict[str, np.ndarray]:
    """Model inputs for every row of a (time-model) measurement table: the table's input and
    shape columns, every other input at its declared default
    (:func:`dse.analytic.declarations.complete`)."""
    n = len(df)
    missing = [c for c in LAYOUT if c not in df.columns]
    if missing:
        raise DseError(f"missing columns {missing}", file=file, allowed=", ".join(LAYOUT))
    cfg: dict[str, np.ndarray] = {}
    for col in df.columns:
        if col in BOOKKEEPING or col.startswith("_"):
            continue
        inp = declarations.INPUTS.get(col)
        if inp is not None and inp.kind == "str":
            raw = df[col].astype(str).str.strip()
            if col == "accelerator":
                text = raw.map(lambda a: hardware.canonical_accelerator(a) or a if a else a)
            else:  # any spelling a study takes (Megatron Core, BF16, llama2 7b)
                text = raw.map(lambda v, inp=inp: inp.canonical(v) if v else v)
            values = text.to_numpy(dtype=object)
            values[text.eq("").to_numpy()] = None
            unknown = pd.Series(
                [v is not None and bool(inp.choices) and v not in inp.choices for v in values],
                index=df.index,
            )
            if col == "model":  # a label where the row gives its shape; else it must name a preset
                shaped = (
                    pd.to_numeric(df["layers"], errors="coerce").notna()
                    if "layers" in df.columns
                    else pd.Series(False, index=df.index)
                )
                unknown &= ~shaped
            if inp.choices is None:  # free text with a form of its own (a release month)
                refused = pd.Series(
                    [v is not None and not _takes(inp, v) for v in values], index=df.index
                )
                _refuse_first(
                    df, col, file, raw, refused, f"not a {col}; allowed: {inp._allowed()}"
                )
            if unknown.any():
                first = str(raw[unknown].iloc[0])
                hint = did_you_mean(first, inp.choices) if inp.choices else ""
                _refuse_first(
                    df,
                    col,
                    file,
                    raw,
                    unknown,
                    f"unknown {col}{hint}; allowed: {', '.join(inp.choices)}"
                    + (
                        ", or a label with the shape columns (layers, hidden, ...)"
                        if col == "model"
                        else ""
                    ),
                )
            cfg[col] = values
        else:
            cfg[col] = _numeric(df, col, file)
            if (
                inp is not None and col not in BOOLEAN
            ):  # within the input's declared range, as in a study
                v = cfg[col]
                text = df[col].astype(str).str.strip()
                lo = -np.inf if inp.minimum is None else inp.minimum
                hi = np.inf if inp.maximum is None else inp.maximum
                _refuse_first(
                    df,
                    col,
                    file,
                    text,
                    pd.Series(np.isfinite(v) & ((v < lo) | (v > hi))),
                    f"out of range; allowed: {inp._allowed()}",
                )  # the value follows
                if inp.kind == "int":
                    _refuse_first(
                        df,
                        col,
                        file,
                        text,
                        pd.Series(np.isfinite(v) & (v != np.round(v))),
                        "expected an integer",
                    )
    for col in LAYOUT:
        bad = pd.Series(~(np.isfinite(cfg[col]) & (cfg[col] > 0)))
        _refuse_first(
            df, col, file, df[col].astype(str).str.strip(), bad, "expected a positive number"
        )
    if "data_parallel" in df.columns:
        dp = _numeric(df, "data_parallel", file)
        cp = cfg.get("context_parallel", np.ones(n))
        cp = np.where(np.isfinite(cp), cp, 1.0)
        product = dp * cfg["tensor_parallel"] * cp * cfg["pipeline_parallel"]
        bad = np.isfinite(dp) & (product != cfg["num_accelerators"])
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            _refuse_first(
                df,
                "data_parallel",
                file,
                df["data_parallel"].astype(str).str.strip(),
                pd.Series(bad),
                f"tensor x context x data x pipeline parallelism = {cfg['tensor_parallel'][i]:g} x "
                f"{cp[i]:g} x {dp[i]:g} x {cfg['pipeline_parallel'][i]:g} = {product[i]:g} != "
                f"num_accelerators {cfg['num_accelerators'][i]:g}",
            )
    if "model" not in cfg:
        cfg["model"] = np.full(n, "custom", dtype=object)
    cfg["model"] = np.array([m if m is not None else "custom" for m in cfg["model"]], dtype=object)
    for col, inp in declarations.INPUTS.items():  # an empty text cell is the default
        if inp.kind == "str" and col in cfg:
            cfg[col] = np.array([inp.default if v is None else v for v in cfg[col]], dtype=object)
    return declarations.complete(cfg, n)


def predict(df: pd.DataFrame, *, file: str = "") -> pd.DataFrame:
    """Per-row prediction for a measurement table (both kinds of quantity): ``id``,
    ``source``, ``quantity``, ``measured``, ``predicted`` (in the row's quantity),
    ``error`` (on the iteration time; relative to the highest clock for stage rows) and
    ``reason`` (why the model finds the layout infeasible; such rows get no error),
    ``memory_gib`` (the predicted memory per accelerator, GiB, also for a refused row) and
    ``published_memory_gib`` (the source's peak memory where the table gives it)."""
    df = df.reset_index(drop=True)
    q = df["measured_quantity"].to_numpy(dtype=object)
    measured = numbers(df, "measured_value", file)
    text = df["measured_value"].astype(str).str.strip()
    # a measurement is a positive, finite number (an iteration time, a throughput, an MFU,
    # a stage's time or energy); an empty one would drop the row without a word
    _refuse_first(
        df,
        "measured_value",
        file,
        text,
        pd.Series(~(np.isfinite(measured) & (measured > 0))),
        "expected a measurement: a positive, finite number",
    )
    mfu = (q == "mfu") & (measured > 1)
    _refuse_first(
        df,
        "measured_value",
        file,
        text,
        pd.Series(mfu),
        "an MFU is a fraction of the peak, at most 1",
    )
    out = pd.DataFrame(
        {
            "id": df["id"].to_numpy(dtype=object),
            "source": df["source"].to_numpy(dtype=object),
            "quantity": q,
            "measured": measured,
            "predicted": np.nan,
            "error": np.nan,
            "reason": "",
            "memory_gib": np.nan,
            "published_memory_gib": (
                numbers(df, "published_peak_memory_gib", file)
                if "published_peak_memory_gib" in df.columns
                else np.nan
            ),
        }
    )
    timed = np.isin(q, TIME_QUANTITIES + POWER_QUANTITIES)
    if timed.any():
        rows = df[timed]
        cfg = table_to_config(rows.reset_index(drop=True), file=file)
        # the whole evaluator, as a study runs it: a row's power_cap_w (and the part's TDP)
        # sets the clock through the energy half's clock search, and the step is timed there
        with np.errstate(all="ignore"):
            res = analytic_model.evaluate(cfg)
        step = res["step_time_s"]
        tokens = cfg["global_batch_size"] * workload.resolve_shape(cfg["model"], cfg).seq_len
        measured = out.loc[timed, "measured"].to_numpy(dtype=float)
        qt = q[timed]
        per_gpu = tokens / (step * cfg["num_accelerators"])
        predicted = np.where(
            qt == "iteration_time_s",
            step,
            np.where(qt == "tokens_per_s_per_gpu", per_gpu, res["mfu"]),
        )
        power = np.isin(qt, POWER_QUANTITIES)
        for name in POWER_QUANTITIES:
            predicted = np.where(qt == name, res[name], predicted)
        ratio = np.where(
            (qt == "iteration_time_s") | power, predicted / measured, measured / predicted
        )  # predicted / measured time (or power)
        ok = np.asarray(res["feasible"], dtype=bool)
        out.loc[timed, "predicted"] = predicted
        out.loc[timed, "error"] = np.where(ok, ratio - 1.0, np.nan)
        out.loc[timed, "reason"] = np.where(ok, "", res["reason"])
        out.loc[timed, "memory_gib"] = res["memory_per_accelerator_gib"]
    staged = np.isin(q, STAGE_QUANTITIES)
    if staged.any():
        from dse.analytic import validate_energy  # the energy side owns clock sweeps

        clock = (
            _numeric(df, "clock_mhz", file)
            if "clock_mhz" in df.columns
            else np.full(len(df), np.nan)
        )
        if not np.isfinite(clock[staged]).all():
            raise DseError("stage rows need clock_mhz", file=file, field="clock_mhz")
        pred, err = validate_energy.relative_stage(
            out.loc[staged, "source"].to_numpy(dtype=object),
            q[staged],
            clock[staged],
            out.loc[staged, "measured"].to_numpy(dtype=float),
            df["accelerator"][staged].map(hardware.canonical_accelerator).to_numpy(dtype=object)
            if "accelerator" in df.columns
            else None,
        )
        out.loc[staged, "predicted"] = pred
        out.loc[staged, "error"] = err
    return out


def summary(result: pd.DataFrame) -> dict:
    """Median, mean and max absolute relative error over the rows with a prediction; the
    rows the model finds infeasible are counted apart (they have no error)."""
    err = result["error"].abs().to_numpy(dtype=float)
    ok = np.isfinite(err)
    e = err[ok]
    out = {
        "rows": int(len(result)),
        "predicted": int(ok.sum()),
        "infeasible": int((result["reason"] != "").sum()),
        "median_abs_error": float(np.median(e)) if len(e) else float("nan"),
        "mean_abs_error": float(e.mean()) if len(e) else float("nan"),
        "max_abs_error": float(e.max()) if len(e) else float("nan"),
    }
    if "published_memory_gib" in result.columns:
        mem = memory_error(result).to_numpy(dtype=float)
        mem = mem[np.isfinite(mem)]
        if len(mem):
            out["memory_rows"] = int(len(mem))
            out["memory_median_abs_error"] = float(np.median(np.abs(mem)))
            out["memory_min_error"] = float(mem.min())
            out["memory_max_error"] = float(mem.max())
    return out


def memory_error(result: pd.DataFrame) -> pd.Series:
    """Predicted / published peak memory - 1 per row (NaN where the source publishes none)."""
    return result["memory_gib"] / result["published_memory_gib"] - 1.0


def predict_tables(paths) -> pd.DataFrame:
    """:func:`predict` for every table, concatenated (with the file name in ``file``)."""
    parts = []
    for path in paths:
        df = read_table(path)
        parts.append(predict(df, file=str(path)).assign(file=Path(path).name))
    return pd.concat(parts, ignore_index=True)


def report(result: pd.DataFrame, worst: int = 3) -> dict:
    """Per source: the :func:`summary`, the ``worst`` rows by absolute error, and the
    infeasible rows with their reasons."""
    out = {}
    for source, rows in result.groupby("source", sort=False):
        err = rows["error"].abs()
        top = rows.loc[err.dropna().sort_values(ascending=False).index[:worst]]
        out[str(source)] = {
            **summary(rows),
            "worst": [_row(r) for r in top.itertuples(index=False)],
            "infeasible_rows": [
                _row(r) for r in rows[rows["reason"] != ""].itertuples(index=False)
            ],
        }
    return out


def _row(r) -> dict:
    counted = bool(
        np.isfinite(r.error)
    )  # an infeasible row's prediction is not shown, as in the text report
    return {
        "id": r.id,
        "quantity": r.quantity,
        "measured": float(r.measured),
        "predicted": float(r.predicted) if counted else None,
        "error": float(r.error) if counted else None,
        "reason": r.reason,
    }


def validate_model(tables, as_json: bool = False, rows: bool = False, worst: int = 3) -> int:
    """Print, per source, the median, mean and max absolute error and the worst rows (every
    row with ``rows``), and the infeasible rows apart; return an exit code (0)."""
    tables = [tables] if isinstance(tables, str | Path) else list(tables)
    if not tables:
        raise DseError(
            "no table given", allowed="one or more CSV files in the validate-model format"
        )
    result = predict_tables(tables)
    rep = report(result, worst)
    if as_json:  # strict JSON: a number that is not finite (no prediction, no error) is null
        print(json.dumps(_finite(rep), indent=2, allow_nan=False))
        return 0
    print(format_report(result, rep, rows))
    return 0


def _finite(obj):
    """``obj`` (dicts, lists, numbers) with every NaN or infinite float as None."""
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj


def format_report(result: pd.DataFrame, rep: dict, rows: bool = False) -> str:
    """The text report: one line per source, then the worst and the infeasible rows. A
    source's name is never cut (torchtitan-h100-2024-12 is not torchtitan-h100-2024-1)."""
    lines = []
    n = max([22, *map(len, rep)])  # the source column's width
    if rows:
        lines.append(
            f"{'id':40s} {'quantity':>22s} {'measured':>10s} {'predicted':>10s} {'error':>8s}  note "
            "(error: of the iteration time the quantity implies, + too slow)"
        )
        for r in result.itertuples(index=False):
            counted = np.isfinite(r.error)  # an infeasible row's prediction is not shown or counted
            err = f"{_pct(r.error, sign=True):>8s}" if counted else f"{'-':>8s}"
            pred = f"{r.predicted:>10.4g}" if counted else f"{'-':>10s}"
            lines.append(
                f"{str(r.id)[:40]:40s} {r.quantity:>22s} {r.measured:>10.4g} {pred} {err}  {r.reason}"
            )
        lines.append("")
    lines.append(
        f"{'source':{n}s} {'rows':>5s} {'predicted':>9s} {'infeasible':>10s} {'median':>7s} {'mean':>7s} {'max':>7s}"
    )
    for source, s in rep.items():
        lines.append(
            f"{source:{n}s} {s['rows']:>5d} {s['predicted']:>9d} {s['infeasible']:>10d} "
            f"{_pct(s['median_abs_error'])} {_pct(s['mean_abs_error'])} {_pct(s['max_abs_error'])}"
        )
    lines.append("")
    lines.append(
        "worst rows (error = predicted / measured - 1 of the iteration time, for a row that gives "
        "tokens/s or MFU the time it implies, so + is too slow; or of a stage's time or energy, "
        "or of a node's power at the wall, + too high):"
    )
    for source, s in rep.items():
        for w in s["worst"]:
            lines.append(f"  {source:{n}s} {str(w['id'])[:44]:44s} {_pct(w['error'], sign=True)}")
    mem = [(source, s) for source, s in rep.items() if "memory_rows" in s]
    if mem:
        lines.append("")
        lines.append(
            "memory per accelerator vs the published peak (predicted / published - 1, every row "
            "that publishes one, refused or not):"
        )
        for source, s in mem:
            lines.append(
                f"  {source:{n}s} {s['memory_rows']:>3d} rows  median |error| "
                f"{_pct(s['memory_median_abs_error'])}  range {_pct(s['memory_min_error'], sign=True)}"
                f" .. {_pct(s['memory_max_error'], sign=True)}"
            )
        if rows:
            for r in result.itertuples(index=False):
                if np.isfinite(r.published_memory_gib):
                    lines.append(
                        f"  {str(r.id)[:44]:44s} {r.memory_gib:7.1f} vs {r.published_memory_gib:7.1f} GiB"
                        f" {_pct(r.memory_gib / r.published_memory_gib - 1.0, sign=True)}"
                    )
    infeasible = [(source, w) for source, s in rep.items() for w in s["infeasible_rows"]]
    if infeasible:
        lines.append("")
        lines.append("infeasible in the model (not counted above):")
        for source, w in infeasible:
            lines.append(f"  {source:{n}s} {str(w['id'])[:44]:44s} {w['reason']}")
    return "\n".join(lines)


def _pct(x: float, sign: bool = False) -> str:
    """A relative error as a percentage, 7 wide; beyond +-1000% in 3 significant digits (a
    measurement off by orders of magnitude stays one readable number)."""
    if not np.isfinite(x):
        return f"{'-':>7s}"
    if abs(x) >= 10.0:
        return f"{x * 100:{'+' if sign else ''}7.3g}%"
    return f"{x:{'+' if sign else ''}7.1%}"

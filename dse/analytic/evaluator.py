"""The built-in analytic evaluator: roofline time, DVFS power, energy and thermal model.

Registered under the entry-point group ``dse.evaluators`` as ``analytic``, like any
third-party evaluator. The physics lives in :mod:`dse.analytic.time` and
:mod:`dse.analytic.energy`, its inputs and metrics (with every default) in
:mod:`dse.analytic.declarations`; this module turns a candidate table into complete input
arrays and the model's arrays back into a table.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pandas as pd

from dse.analytic import declarations, model, profiles, trajectory
from dse.analytic.columns import Factorised, repeat_one
from dse.analytic.time import frameworks, hardware
from dse.evaluators.base import Evaluator, Input, Metric


@contextmanager
def _small_pages():
    """Numpy asks for transparent huge pages for arrays of 4 MB and more (``madvise``); with
    the kernel's ``defrag=madvise`` default each such fault may compact memory first,
    which made fetching the ~0.5 GB of result columns for 1e6 candidates cost ~0.7 s of
    kernel time. Ordinary pages are faulted in ~5x faster; the setting is restored after."""
    setter = getattr(getattr(np, "_core", None), "multiarray", None)
    setter = getattr(setter, "_set_madvise_hugepage", None)
    if setter is None:
        yield
        return
    previous = setter(False)
    try:
        yield
    finally:
        setter(previous)


#: pandas' text array of every reason of :data:`dse.analytic.model.REASONS`, of the type
#: pandas makes of an object array of strings (Arrow-backed ``str`` in pandas 3)
_REASON_ARRAY = pd.Series(model.REASON_TEXT).array


def _reason_column(parts: list[np.ndarray]):
    """The ``reason`` column from the blocks' ``reason`` arrays in order: codes into
    :data:`dse.analytic.model.REASONS` (int8), or text for a block that was not coded (one
    with mixed-fleet or ramped rows). Codes are picked from :data:`_REASON_ARRAY`, the same
    values and type as pandas' conversion of the strings, which costs ~10 ms per 131,072
    rows against ~3 ms (a Python string per row to hash and copy)."""
    if all(p.dtype.kind == "i" for p in parts):
        return _REASON_ARRAY.take(np.concatenate(parts).astype(np.intp))
    return np.concatenate(
        [
            model.REASON_TEXT[p] if p.dtype.kind == "i" else np.asarray(p, dtype=object)
            for p in parts
        ]
    )


class AnalyticEvaluator(Evaluator):
    """Closed-form model of distributed transformer training on a hierarchical network."""

    name = "analytic"
    version = "0.30.1"  # 0.18: batch_schedule critical; 0.19: each quantity once, in its SI unit (no _mwh, _days copies); 0.20: a TPU is evaluated with its one stack (maxtext), selective is each stack's own policy; 0.21: activation_offload (auto: stacks that offload fit by offloading whole layers, MaxText minimal -> minimal_offloaded; host link time and host memory limit; torchtitan saves its sequence-parallel gathered linear inputs; GB200 185 GiB as nvidia-smi shows), fp8 weight gathers (fp8_param_gather), op-level AC timed as what it recomputes; 0.22: clock_plan per_stage saves what a clock per pass (Perseus's plan) saves; 0.23: PyTorch context_parallel's ring-attention backward buffers (torchtitan: exchanged K/V, fp32 gradients) in a context-parallel stage's memory; 0.24: a part's own scale-out network from the catalog (TPU DCN per chip: v5e 3.125, v5p 6.25 GB/s) when scaleout_bw_gbs is not given, and the TPU DCN's fitted per-step latency (calibration scaleout_latency_us per part); 0.25: Nemotron-4 presets (nemotron4-15b, nemotron4-340b) and their squared-ReLU activation, eager PyTorch ops on stacks that compile no activation (28 B per feed-forward element over forward and backward, not the fused kernel's 12); 0.26: a candidate the time model refuses is not timed (NaN for its step's time, energy and power; memory, size and run length kept); 0.27: LoRA fine-tuning (adapter, lora_rank, lora_targets: frozen weights with no weight gradient, reduction, optimizer state or checkpoint) and packed documents masked apart (document_tokens: the fused attention within documents); 0.28: the experts' grouped GEMM one kernel per local expert over Transformer Engine's 4 streams (ceil(E/EP / 4) kernels' fixed costs), fp8 casts of the experts' dispatched inputs; 0.29: LoRA adapters' element-wise kernels (the scale and the addition to the base layer's output, the scale's backward and the input gradient's sum) in the memory-bound time; 0.30: software_release (early software on a new architecture: GEMM and attention kernels below their mature efficiency in the months after the architecture first shipped, catalog architecture_shipped; maturity_deficit and maturity_months fitted) and the second stage's refit; 0.30.1: the shortfall also on the accepted candidates of a block with refused ones (they were timed as mature) and in a mixed fleet's layer split, a profile without architecture_shipped takes its base part's
    description = "roofline step time, DVFS power, energy per component and thermal limits"
    fork_safe = True  # numpy and YAML tables only: no threads, files or devices
    preview_size = 4096  # ~20 ms: dse validate warns when no sampled candidate is feasible
    #: clock_mhz wins over clock_fraction; target_loss over target_tokens (docs/model.md);
    #: thermal_tau_slow_s over heat_capacity_j_per_k (docs/model-energy.md)
    exclusive_inputs = (
        ("clock_mhz", "clock_fraction"),
        ("target_tokens", "target_loss"),
        ("thermal_tau_slow_s", "heat_capacity_j_per_k"),
    )
    removed_metrics = declarations.REMOVED_METRICS

    def __init__(self, **options) -> None:
        unknown = set(options)
        if unknown:
            raise ValueError(f"analytic evaluator takes no options, got {sorted(unknown)}")
        super().__init__(**options)

    @property
    def inputs(self) -> dict[str, Input]:
        return dict(declarations.INPUTS)

    @property
    def metrics(self) -> dict[str, Metric]:
        return dict(declarations.METRICS)

    def input_files(self, values: dict[str, tuple]) -> dict[str, str]:
        """The accelerator profiles the study names (``accelerator``, ``second_accelerator``),
        with the checksums of their files."""
        import hashlib

        out = {}
        for name in ("accelerator", "second_accelerator"):
            for value in values.get(name, ()):
                if not isinstance(value, str) or value in hardware.catalog():
                    continue
                prof = profiles.find(value)
                if prof is not None:
                    out[str(prof.path.resolve())] = hashlib.sha256(
                        prof.path.read_bytes()
                    ).hexdigest()
        return out

    def attributes(self) -> dict[str, str]:
        """Attributes for the result datasets and ``dse describe``: which accelerators'
        efficiencies are fitted to measured training runs and which are *estimated* by the
        documented rule (docs/model.md, section 7), and the training stacks on offer."""
        names = hardware.accelerator_names()

        def fitted(n):
            on = hardware.fitted_on(n)
            return n if on is None else f"{n} ({on}'s: same die)"

        return {
            "analytic_efficiencies_fitted": ", ".join(
                fitted(n) for n in names if not hardware.is_estimated(n)
            ),
            "analytic_efficiencies_estimated": ", ".join(
                n for n in names if hardware.is_estimated(n)
            ),
            "analytic_efficiencies_note": "estimated: from the part's published matmul benchmark and the fitted "
            "parts' ratios (docs/model.md, section 7), not fitted to training runs",
            "analytic_frameworks": ", ".join(frameworks.framework_names()),
        }

    #: candidates per vectorised block (no per-candidate loop): large enough that the
    #: model's fixed cost per call (~6 ms of Python and small-array work, much of it the
    #: clock search) is ~5% of a block, small enough to bound a worker's working arrays
    #: (~140 MB). Measured on the bench mix, one core (docs/model.md, section 10): 32,768
    #: candidates 417,000-429,000/s, 65,536 439,000-469,000/s, 131,072 472,000-485,000/s.
    #: A worker calls the evaluator with at most this many (a piece of a task:
    #: ``dse.execution.base.PIECE_ROWS``, the same number).
    block = 131072

    def evaluate(self, candidates: pd.DataFrame) -> pd.DataFrame:
        cfg = self.to_arrays(candidates)
        n = len(candidates)
        if n <= self.block:  # one block (an executor's task): its arrays are the result, no copy
            out = model.evaluate(cfg, reason_codes=True)
            out["reason"] = _reason_column([out["reason"]])
            return pd.DataFrame(out, copy=False)
        out: dict[str, np.ndarray] = {}
        reasons = []  # each block's (codes, or text where a block was not coded)
        for i in range(0, n, self.block):
            part = model.evaluate(
                {k: v[i : i + self.block] for k, v in cfg.items()}, reason_codes=True
            )
            reasons.append(part["reason"])
            if not out:  # one output array per metric, filled block by block
                with _small_pages():
                    out = {k: np.empty(n, dtype=v.dtype) for k, v in part.items()}
            for k, v in part.items():
                if k != "reason":
                    out[k][i : i + self.block] = v
        out["reason"] = _reason_column(reasons)  # (in its place: the first block's order)
        # copy=False: the columns stay separate arrays (consolidating ~60 float columns into
        # one 2-D block would copy them all, ~1 s per million candidates)
        return pd.DataFrame(out, copy=False)

    def trajectory(self, candidates: pd.DataFrame, points: int) -> pd.DataFrame:
        """Each candidate's run at ``points`` token counts from 0 to its ``tokens_to_train``:
        the loss reached, the batch, and the time and energy spent so far (columns and units:
        :data:`dse.analytic.trajectory.COLUMNS`; docs/model.md, section 8b)."""
        if isinstance(points, bool) or not isinstance(points, int | np.integer) or points < 2:
            raise ValueError(f"points is a whole number of at least 2, got {points!r}")
        return pd.DataFrame(trajectory.trajectory(self.to_arrays(candidates), int(points)))

    def to_arrays(self, candidates: pd.DataFrame) -> dict[str, np.ndarray | Factorised]:
        """Input name -> numpy array; a text column becomes a :class:`Factorised` column
        (integer codes into its distinct values, factorised once for the whole table, so
        the model looks each distinct value up once and never hashes a string per row).
        Every declared input is there (a missing column is its default) and every default
        is filled in: numeric columns are float64 with missing values filled by the
        default, except integer and boolean numpy columns (which cannot miss a value):
        those are passed as they are and converted by the model; a missing text value is
        the default, and so is a value that is not a choice of a coded input
        (:func:`~dse.analytic.declarations.known_choices`). Same result as
        :func:`~dse.analytic.declarations.complete` on the table's arrays."""
        n = len(candidates)
        given = set(candidates.columns)
        cfg: dict[str, np.ndarray | Factorised] = {}
        for name, inp in self.inputs.items():
            if name not in given:
                if inp.kind == "str":  # a read-only broadcast view: no per-row copy
                    cfg[name] = Factorised(
                        repeat_one(np.zeros(1, dtype=np.int64), n), [inp.default]
                    )
                else:
                    value = np.nan if inp.default is None else float(inp.default)
                    cfg[name] = repeat_one(np.array([value]), n)
                continue
            col = candidates[name]
            if inp.kind == "str":
                codes, uniques = pd.factorize(col, use_na_sentinel=True)
                # code -1 (missing) picks the default, the last distinct value
                if (codes < 0).any():
                    codes = np.where(codes < 0, len(uniques), codes)
                uniques = declarations.known_choices(name, [str(u) for u in uniques])
                cfg[name] = Factorised(codes, [*uniques, inp.default])
                continue
            if isinstance(col.dtype, np.dtype) and col.dtype.kind in "iub":
                # no missing value possible: the column's own array, converted to float
                # block by block by the model (no 1e6-row float copy to page in)
                cfg[name] = col.to_numpy()
                continue
            if col.dtype == bool or col.dtype.kind in "iuf":
                cfg[name] = col.to_numpy(dtype=np.float64, na_value=np.nan)
            else:
                cfg[name] = pd.to_numeric(col, errors="coerce").to_numpy(
                    dtype=np.float64, na_value=np.nan
                )
            if inp.default is not None:
                missing = np.isnan(cfg[name])
                if missing.any():
                    cfg[name] = np.where(missing, float(inp.default), cfg[name])
        return cfg

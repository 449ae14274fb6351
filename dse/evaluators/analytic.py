"""The built-in analytic evaluator: roofline time, DVFS power, energy and thermal model.

Registered under the entry-point group ``dse.evaluators`` as ``analytic``, like any
third-party evaluator. The physics lives in :mod:`dse.physics`; this module declares the
inputs and metrics and turns a candidate table into arrays and back.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dse.evaluators.base import Evaluator, Input, Metric
from dse.physics import model


class AnalyticEvaluator(Evaluator):
    """Closed-form model of distributed transformer training on a hierarchical network."""

    name = "analytic"
    version = "0.1.0"
    description = "roofline step time, DVFS power, energy per component and thermal limits"

    def __init__(self, **options) -> None:
        unknown = set(options)
        if unknown:
            raise ValueError(f"analytic evaluator takes no options, got {sorted(unknown)}")
        super().__init__(**options)

    @property
    def inputs(self) -> dict[str, Input]:
        return {i.name: i for i in model.INPUTS}

    @property
    def metrics(self) -> dict[str, Metric]:
        return {m.name: m for m in model.METRICS}

    def evaluate(self, candidates: pd.DataFrame) -> pd.DataFrame:
        table = self.with_defaults(candidates)
        cfg = {}
        for name, inp in self.inputs.items():
            col = table[name]
            if inp.kind == "str":
                cfg[name] = col.astype(str).to_numpy(dtype=object)
            else:
                cfg[name] = pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            out = model.evaluate(cfg)
        return pd.DataFrame(out)

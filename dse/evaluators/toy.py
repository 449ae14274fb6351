"""A toy evaluator with a known Pareto front: the example to copy when writing your own.

Use it from a study as ``evaluator: {name: "dse.evaluators.toy:ToyEvaluator"}``.

Inputs: ``x`` in [0, 1], ``y`` an integer >= 0, ``shape`` "a" or "b". Metrics:
``f1 = x`` and ``f2 = 1 - sqrt(x) + y/10 + 0.05*[shape == "b"]``; a candidate with
shape "b" and y > 8 is infeasible. The front is every ``x`` with ``y = 0`` and shape "a".
Options ``delay_s`` and ``delay_per_candidate_s`` sleep that long per call and per
candidate (to test interruption and resume, and to stand in for a slow simulator);
``fail_above_x`` raises and ``hang_above_x`` sleeps for a minute when a call holds such an
``x`` (to test failures and time-outs). With a delay, ``hang_above_x`` or ``preview: false``
it allows no preview (:attr:`~dse.evaluators.Evaluator.preview_size` 0), as a slow
simulator would not: a run meets its candidates only as it evaluates them.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from dse.evaluators.base import Evaluator, Input, Metric


class ToyEvaluator(Evaluator):
    name = "toy"
    version = "1.0.0"
    description = "two-objective test problem with a known front"
    fork_safe = True
    preview_size = 1000  # instant: the plan of a run (dse validate, dse run) evaluates the space

    def __init__(
        self,
        delay_s: float = 0.0,
        fail_above_x: float | None = None,
        delay_per_candidate_s: float = 0.0,
        hang_above_x: float | None = None,
        preview: bool = True,
    ) -> None:
        if delay_s < 0 or delay_per_candidate_s < 0:
            raise ValueError("delays must be >= 0")
        super().__init__(
            delay_s=delay_s,
            fail_above_x=fail_above_x,
            delay_per_candidate_s=delay_per_candidate_s,
            hang_above_x=hang_above_x,
            preview=preview,
        )
        self.hang_above_x = hang_above_x
        self.delay_s = float(delay_s)
        self.delay_per_candidate_s = float(delay_per_candidate_s)
        self.fail_above_x = fail_above_x
        if not preview or self.delay_s or self.delay_per_candidate_s or hang_above_x is not None:
            self.preview_size = 0  # a stand-in for a slow simulator: no preview before a run

    @property
    def inputs(self) -> dict[str, Input]:
        return {
            "x": Input(
                "x", "float", "1", "position along the front", 0.5, minimum=0.0, maximum=1.0
            ),
            "y": Input("y", "int", "1", "distance from the front", 0, minimum=0),
            "shape": Input(
                "shape",
                "str",
                "",
                "a: on the front, b: offset and partly infeasible",
                "a",
                ("a", "b"),
            ),
        }

    @property
    def metrics(self) -> dict[str, Metric]:
        return {
            "f1": Metric("f1", "1", "first objective"),
            "f2": Metric("f2", "1", "second objective"),
            "f_sum": Metric("f_sum", "1", "f1 + f2"),
        }

    def evaluate(self, candidates: pd.DataFrame) -> pd.DataFrame:
        if self.delay_s or self.delay_per_candidate_s:  # a stand-in for a slow simulator
            time.sleep(self.delay_s + self.delay_per_candidate_s * len(candidates))
        t = self.with_defaults(candidates)
        x = t["x"].to_numpy(dtype=float)
        y = t["y"].to_numpy(dtype=float)
        b = (t["shape"].astype(str) == "b").to_numpy()
        if self.fail_above_x is not None and (x > self.fail_above_x).any():
            raise RuntimeError(f"toy failure: x above {self.fail_above_x}")
        if self.hang_above_x is not None and (x > self.hang_above_x).any():
            time.sleep(60)
        f1 = x
        f2 = 1 - np.sqrt(x) + y / 10 + 0.05 * b
        infeasible = b & (y > 8)
        return pd.DataFrame(
            {
                "f1": f1,
                "f2": f2,
                "f_sum": f1 + f2,
                "feasible": ~infeasible,
                "reason": np.where(infeasible, "shape b with y > 8 is infeasible", ""),
            }
        )

"""Power caps hold on every accelerator in the catalog, and an infeasibility reason is true.

For caps from 40% to 100% of each part's TDP, on GPT-1.3B over 8 accelerators in layouts
where the time model's own kernels change regime with the clock (unfused attention, large
micro-batches, tensor and pipeline parallelism, overlapped communication): whenever the
lowest clock meets the cap, the busy power at the clock the model settles on is at most
cap x (1 + LIMIT_RTOL) and the candidate is not marked; the cap reason is given only
where the lowest clock draws more than the cap, and then the candidate runs at it.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from dse.analytic.energy.clock_search import LIMIT_RTOL
from dse.analytic.energy.model import CAP_REASON, HOT_REASON
from dse.analytic.evaluator import AnalyticEvaluator
from dse.analytic.time import hardware

CAP_FRACTIONS = np.round(np.arange(0.40, 1.0001, 0.05), 2)
#: layouts of GPT-1.3B on 8 accelerators; the first ones broke the cap before the fix
LAYOUTS = [
    {"flash_attention": False, "micro_batch_size": 8, "tensor_parallel": 1},
    {
        "flash_attention": False,
        "micro_batch_size": 4,
        "tensor_parallel": 2,
        "sequence_parallel": True,
        "framework": "megatron-core",
    },
    {
        "flash_attention": False,
        "micro_batch_size": 16,
        "tensor_parallel": 8,
        "sequence_parallel": True,
        "framework": "megatron-core",
        "recompute": "full",
    },
    {
        "flash_attention": True,
        "micro_batch_size": 2,
        "pipeline_parallel": 2,
        "framework": "megatron",
    },
    {"flash_attention": True, "micro_batch_size": 1, "framework": "fsdp", "zero_stage": 3},
    {
        "flash_attention": False,
        "micro_batch_size": 8,
        "pipeline_parallel": 4,
        "interleave": 2,
        "framework": "megatron-core",
        "global_batch_size": 1024,
    },
]


def _precision(name: str) -> str:
    peaks = hardware.catalog()[name]["peak_tflops"]
    return "bf16" if peaks.get("bf16") else "fp16"


def _grid(name: str) -> pd.DataFrame:
    tdp = hardware.catalog()[name]["tdp_w"]
    rows = [
        {
            "accelerator": name,
            "precision": _precision(name),
            "model": "gpt-1.3b",
            "num_accelerators": 8,
            "global_batch_size": 512,
            **layout,
            "power_cap_w": float(frac * tdp),
        }
        for layout, frac in itertools.product(LAYOUTS, CAP_FRACTIONS)
    ]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("name", hardware.accelerator_names())
def test_a_cap_holds_whenever_the_lowest_clock_meets_it(name):
    ev = AnalyticEvaluator()
    grid = _grid(name)
    capped = ev.evaluate(grid)
    f_min = hardware.catalog()[name]["clock_min_mhz"]
    at_min = ev.evaluate(grid.assign(power_cap_w=np.nan, clock_mhz=float(f_min)))
    cap = grid["power_cap_w"].to_numpy()
    time_ok = (at_min["reason"] == "").to_numpy()  # no time-side reason (and cool enough at f_min)
    assert time_ok.sum() >= len(LAYOUTS), f"{name}: too few layouts the time model accepts"
    meets = at_min["peak_power_per_accelerator_w"].to_numpy() <= cap
    busy = capped["peak_power_per_accelerator_w"].to_numpy()
    clock = capped["effective_clock_mhz"].to_numpy()
    reason = capped["reason"].to_numpy()

    held = time_ok & meets
    assert held.any()
    over = held & (busy > cap * (1 + LIMIT_RTOL))
    assert not over.any(), (
        f"{name}: busy power above the cap at "
        f"{list(zip(cap[over].round(1), busy[over].round(2), clock[over].round(1), strict=True))}"
    )
    assert not (held & (reason == CAP_REASON)).any(), (
        f"{name}: marked infeasible although f_min meets the cap"
    )
    assert (capped["feasible"].to_numpy()[held]).all()
    assert (clock[held] >= f_min * (1 - 1e-9)).all()

    # the reason is given exactly where it is true: f_min draws more than the cap
    flagged = reason == CAP_REASON
    assert (flagged == (time_ok & ~meets)).all()
    assert np.allclose(clock[flagged], f_min)


def test_the_capped_design_the_issue_measured_stays_on_the_front():
    """GPT-1.3B on 8 H100 with unfused attention and micro-batch 8 under a 315 W cap: before
    the fix the busy power ended at 331 W (5% above the cap) and the candidate was dropped
    with the cap reason while running at 1,558 MHz."""
    ev = AnalyticEvaluator()
    row = pd.DataFrame(
        [
            {
                "accelerator": "H100-SXM",
                "model": "gpt-1.3b",
                "num_accelerators": 8,
                "flash_attention": False,
                "micro_batch_size": 8,
                "power_cap_w": 315.0,
            }
        ]
    )
    r = ev.evaluate(row).iloc[0]
    assert r["feasible"] and r["power_capped"]
    assert r["peak_power_per_accelerator_w"] <= 315.0 * (1 + LIMIT_RTOL)
    assert 345.0 < r["effective_clock_mhz"] < 1980.0
    # the clock is the highest that meets the cap: 0.5% faster breaks it on the time model
    faster = ev.evaluate(
        row.assign(power_cap_w=np.nan, clock_mhz=r["effective_clock_mhz"] * 1.005)
    ).iloc[0]
    assert faster["peak_power_per_accelerator_w"] > 315.0


def test_the_thermal_reason_is_given_only_at_the_lowest_clock():
    ev = AnalyticEvaluator()
    inlets = np.arange(30.0, 80.1, 5.0)
    df = pd.DataFrame(
        {
            "accelerator": "H100-SXM",
            "model": "gpt-1.3b",
            "num_accelerators": 8,
            "cooling": "air",
            "inlet_temp_c": inlets,
        }
    )
    r = ev.evaluate(df)
    hot = (r["reason"] == HOT_REASON).to_numpy()
    assert hot.any() and (~hot).any()
    assert np.allclose(r["effective_clock_mhz"].to_numpy()[hot], 345.0)
    slowdown = 87.0
    assert (r["peak_junction_temp_c"].to_numpy()[hot] > slowdown).all()
    assert (r["peak_junction_temp_c"].to_numpy()[~hot] <= slowdown * (1 + LIMIT_RTOL)).all()


def test_a_board_sold_below_its_die_s_draw_is_held_to_its_limit():
    """torchtitan's H100s (H100-SXM-96GB) are the 700 W GH100 die at a default 500 W limit:
    without a cap the run is held to 500 W and clocks down where the same candidate on an
    H100 SXM draws more at full clock; an input cap above the limit does not lift it, one
    below lowers it further."""
    ev = AnalyticEvaluator()
    row = {
        "model": "gpt-1.3b",
        "num_accelerators": 8,
        "flash_attention": True,
        "micro_batch_size": 8,
    }
    cat = hardware.catalog()["H100-SXM-96GB"]
    assert cat["power_limit_w"] == 500 < cat["tdp_w"] == hardware.catalog()["H100-SXM"]["tdp_w"]
    df = pd.DataFrame(
        [
            {**row, "accelerator": "H100-SXM"},
            {**row, "accelerator": "H100-SXM-96GB"},
            {**row, "accelerator": "H100-SXM-96GB", "power_cap_w": 700.0},
            {**row, "accelerator": "H100-SXM-96GB", "power_cap_w": 400.0},
        ]
    )
    r = ev.evaluate(df)
    busy = r["peak_power_per_accelerator_w"].to_numpy()
    clock = r["effective_clock_mhz"].to_numpy()
    assert r["feasible"].all()
    assert busy[0] > 500.0 and clock[0] == 1980.0  # the SXM part at full clock
    assert (busy[1:3] <= 500.0 * (1 + LIMIT_RTOL)).all() and r["power_capped"].iloc[1]
    assert clock[1] < clock[0] and clock[2] == pytest.approx(clock[1])
    assert busy[3] <= 400.0 * (1 + LIMIT_RTOL) and clock[3] < clock[1]

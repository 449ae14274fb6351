"""The one units layer (dse/units.py): each quantity stored once in its SI unit, shown in the
study's display unit or one readable for its size, a constraint's bound in any unit of its
metric's kind; and the places that show quantities going through it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dse import units
from dse.analytic.evaluator import AnalyticEvaluator
from dse.pareto import feasible_mask
from dse.study import Constraint, parse_study


def _study(**extra):
    return parse_study(
        {
            "name": "u",
            "space": {"num_accelerators": [8, 16]},
            "objectives": [{"metric": "energy_to_train_j"}, {"metric": "time_to_train_s"}],
            **extra,
        }
    )


def test_every_quantity_is_reported_once_in_its_si_unit():
    ev = AnalyticEvaluator()
    for removed, (replacement, unit) in ev.removed_metrics.items():
        assert removed not in ev.metrics
        kept = ev.metrics[replacement]
        # the copy's unit is one the replacement can be shown in, the replacement in SI
        assert units.factor(kept.unit, unit) is not None
        assert kept.unit in ("J", "s")
    out = ev.evaluate(pd.DataFrame({"num_accelerators": [64]}))
    assert not set(ev.removed_metrics) & set(out.columns)


def test_conversions_between_units_of_one_kind_and_none_across_kinds():
    assert units.factor("J", "MWh") == pytest.approx(3.6e9)
    assert units.factor("s", "days") == 86_400.0
    assert units.factor("GiB", "GB") == pytest.approx(1e9 / 2**30)
    assert units.factor("J", "days") is None and units.factor("1", "h") is None
    assert units.canonical("day") == "days"
    assert units.unit_problem("MWh") is None and "furlongs" in units.unit_problem("furlongs")


def test_shown_is_the_wanted_unit_else_readable_by_magnitude():
    assert units.shown("J", 4.5e10, "MWh") == (pytest.approx(3.6e9), "MWh")
    assert units.shown("J", 4.5e10) == (1e9, "GJ")
    assert units.shown("s", 6.5e4) == (3600.0, "h")
    assert units.shown("s", 6.5e6) == (86_400.0, "days")
    assert units.shown("degC", 80.0, "MWh") == (1.0, "degC")  # not of its kind: as it is
    assert units.quantity(1.8e11, "J", "MWh") == "50 MWh"
    assert units.quantity(0.5, "1") == "0.5"
    assert units.quantity(7200.0, "s") == "2 h"


def test_a_bound_written_in_a_display_unit_is_compared_in_the_stored_unit():
    study = _study(constraints=["energy_to_train_j <= 50 MWh", "time_to_train_s < 2 days"])
    energy, time = study.constraints
    assert (energy.unit, energy.bound, energy.limit) == ("MWh", 50.0, pytest.approx(1.8e11))
    assert str(energy) == "energy_to_train_j <= 50 MWh"
    assert time.limit == 2 * 86_400.0
    table = pd.DataFrame(
        {
            "energy_to_train_j": [1.7e11, 1.9e11, 1.0e11],
            "time_to_train_s": [1.0e5, 1.0e5, 2.0e5],
            "feasible": [True, True, True],
        }
    )
    assert feasible_mask(table, study).tolist() == [True, False, False]
    # as a mapping, and with a spelling the layer knows
    c = Constraint.model_validate(
        {"metric": "time_to_train_s", "op": "<=", "bound": 3, "unit": "day"}
    )
    assert (c.unit, c.limit) == ("days", 3 * 86_400.0)
    assert Constraint.model_validate("time_to_train_s <= 60").limit == 60.0


def test_display_units_are_read_in_their_canonical_spelling():
    assert _study(display_units={"time_to_train_s": "day"}).display_units == {
        "time_to_train_s": "days"
    }


def test_a_time_bound_and_a_time_budget_take_the_same_spellings():
    """A budget took '10 minutes' but not '2 days', a bound '60 days' but not '90 minutes'."""
    from dse.study import duration_s

    for text, seconds in (
        ("90 minutes", 5400.0),
        ("2 hrs", 7200.0),
        ("30 secs", 30.0),
        ("2 days", 172_800.0),
        ("1 week", 604_800.0),
        ("10 min", 600.0),
    ):
        assert duration_s(text) == seconds, text
        metric_text = f"time_to_train_s <= {text}"
        assert Constraint.model_validate(metric_text).limit == seconds, text
    assert duration_s("10 parsecs") is None and duration_s("5 MJ") is None
    assert _study(search={"budget": "2 days"}).search.budget == "2 days"


def test_a_temperature_bound_may_name_the_unit_its_column_is_headed_with():
    """`dse show` heads peak_junction_temp_c with [degC]: a bound or display unit naming it
    (or °C) is the metric's own unit, not an unknown one."""
    study = _study(
        constraints=["peak_junction_temp_c <= 85 degC", "mean_junction_temp_c < 70 °C"],
        display_units={"peak_junction_temp_c": "°C"},
    )
    assert [(c.unit, c.limit) for c in study.constraints] == [("degC", 85.0), ("degC", 70.0)]
    assert study.display_units == {"peak_junction_temp_c": "degC"}
    assert units.factor("degC", "°C") == 1.0 and units.factor("degC", "s") is None


def test_a_unit_in_the_wrong_case_is_refused_with_the_known_spelling(tmp_path):
    from dse.errors import StudyError
    from dse.study import load_study

    path = tmp_path / "s.yaml"
    path.write_text(
        "name: u\nspace: {num_accelerators: [8, 16]}\n"
        "objectives: [{metric: energy_to_train_j}]\n"
        "display_units: {energy_to_train_j: MWH, time_to_train_s: days}\n"
    )
    with pytest.raises(StudyError) as info:
        load_study(path)
    message = str(info.value)
    # the one entry named, with its value alone (not the whole mapping) and the right case
    assert "display_units.energy_to_train_j: unknown unit 'MWH' (did you mean 'MWh'?)" in message
    assert message.endswith("(got 'MWH')")
    assert "did you mean 'kWh'" in units.unit_problem("kwh")


def test_show_and_the_run_summary_write_columns_in_the_units_they_name():
    from dse.outputs.show import in_display_units

    rows = pd.DataFrame(
        {
            "energy_to_train_j": [1.8e11, 3.6e11],
            "time_to_train_s": [7200.0, 3600.0],
            "x": ["a", "b"],
        }
    )
    names = list(rows)
    shown, cells = in_display_units(
        rows,
        names,
        {"energy_to_train_j": "J", "time_to_train_s": "s", "x": None},
        {"energy_to_train_j": "MWh"},
    )
    assert cells == {"energy_to_train_j": "[MWh]", "time_to_train_s": "[h]", "x": "[-]"}
    assert shown["energy_to_train_j"].tolist() == pytest.approx([50.0, 100.0])
    assert shown["time_to_train_s"].tolist() == [2.0, 1.0]
    assert rows["energy_to_train_j"].iloc[0] == 1.8e11  # the stored table is left as it was


def test_progress_lines_show_the_best_values_in_their_display_units():
    from dse.cli.pace import progress_lines

    _, best = progress_lines(
        {
            "best": {"energy_to_train_j": 1.8e11, "time_to_train_s": 1.8e5},
            "best_units": {"energy_to_train_j": ["J", "MWh"], "time_to_train_s": ["s", None]},
        }
    )
    assert best == "best: energy_to_train_j 50 MWh · time_to_train_s 2.083 days"
    _, plain = progress_lines({"best": {"f1": 0.25}})  # a record without units: the number
    assert plain == "best: f1 0.25"


def test_log_axes_label_whole_values_not_bare_mantissas():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dse.outputs.plot import _log_ticks

    fig, ax = plt.subplots()
    ax.set_xscale("log")
    ax.set_xlim(0.03, 0.5)
    _log_ticks(ax.xaxis, 0.5 / 0.03)
    fig.canvas.draw()
    major = [t.get_text() for t in ax.xaxis.get_ticklabels() if t.get_text()]
    minor = [t.get_text() for t in ax.xaxis.get_ticklabels(minor=True) if t.get_text()]
    plt.close(fig)
    assert "0.05" in major and "0.1" in major and "0.2" in major
    assert not {"2", "5"} & set(major)  # never the bare digits of 0.02, 0.05
    assert minor == []


@pytest.mark.parametrize("wanted", [None, "MWh"])
def test_the_front_figure_and_report_axes_use_the_unit_named(wanted):
    from dse.outputs.plot import readable_unit
    from dse.outputs.scan import Scan

    found = Scan(hi={"energy_to_train_j": 4.5e10}, lo={"energy_to_train_j": 3.0e10})
    import xarray as xr

    front = xr.Dataset({"energy_to_train_j": ("candidate", np.array([3.5e10]))})
    factor, unit = readable_unit("J", found, front, "energy_to_train_j", wanted)
    assert unit == (wanted or "GJ") and factor == pytest.approx(3.6e9 if wanted else 1e9)


@pytest.fixture(scope="module")
def shown_run(tmp_path_factory):
    """A small run whose study shows energy in MWh and time in days."""
    import dse

    study = _study(
        space={"num_accelerators": [32, 64, 128], "global_batch_size": [256, 512]},
        constraints=["time_to_train_s <= 30 days"],
        display_units={"energy_to_train_j": "MWh", "time_to_train_s": "days"},
    )
    out = tmp_path_factory.mktemp("units") / "run"
    dse.run(study, out, workers=0)
    return out


def test_a_run_with_display_units_stores_si_and_its_report_shows_them(shown_run):
    import dse
    from dse.outputs.report import Report

    run = dse.open_results(shown_run)
    front = run.front
    assert front["energy_to_train_j"].attrs["units"] == "J"
    assert 0 < float(front["time_to_train_s"].max()) <= 30 * 86_400.0  # the bound, in seconds
    page = Report(run)
    assert page.shown["energy_to_train_j"] == (pytest.approx(3.6e9), "MWh")
    assert page.shown["time_to_train_s"] == (86_400.0, "days")
    assert page._axis("energy_to_train_j")["title"] == "energy_to_train_j [MWh]"
    assert [(title, unit) for title, _, _, unit in page.breakdowns()][0] == (
        "energy to train",
        "MWh",
    )


def test_show_and_compare_use_the_display_units(shown_run, tmp_path):
    import io
    import shutil

    from rich.console import Console

    from dse.outputs.compare import compare_runs
    from dse.outputs.show import show_front

    buf = io.StringIO()
    show_front(shown_run, Console(file=buf, width=200), plot=False)
    assert "[MWh]" in buf.getvalue() and "[days]" in buf.getvalue()
    copy = shutil.copytree(shown_run, tmp_path / "copy")  # one run twice is refused
    frame = compare_runs([shown_run, copy]).frame()
    assert "MWh" in frame and "days" in frame

"""`dse sensitivity` and `dse.sensitivity`: the elasticities of a front's design against
differences of the evaluator computed here independently (another step, another formula),
their ranking, the breakdown that explains them, the global indices, the refusals, the
report's tornado chart."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dse
from conftest import run_cli, run_quickstart, toy_study, write_study
from dse.checks import canonical_values
from dse.evaluators import load_evaluator
from dse.results import open_results
from dse.space import Space


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory) -> Path:
    """The quickstart study (analytic evaluator, 400 candidates), evaluated in-process."""
    return run_quickstart(tmp_path_factory.mktemp("quickstart"))


def _evaluator(results: Path):
    """The study's evaluator on a list of rows, built here from the stored study."""
    study = open_results(results).study
    ev = load_evaluator(study.evaluator)
    space = Space.from_study(canonical_values(study, ev))
    return lambda rows: ev.evaluate(space.with_fixed(pd.DataFrame(rows)))


@pytest.mark.parametrize("at", ["knee", "best-time", "best-energy"])
def test_elasticities_agree_with_independent_differences(quickstart, at):
    s = dse.sensitivity(quickstart, at, global_samples=0, include_fixed=True)
    knobs = {k.name: k for k in s.knobs}
    evaluate = _evaluator(quickstart)
    base = evaluate([s.design])
    assert {"clock_fraction", "scaleout_bw_gbs", "num_accelerators"} <= set(s.elasticity.index)
    checked = 0
    for name in s.elasticity.index:
        knob = knobs[name]
        x = knob.value
        if knob.kind == "continuous":
            d = 4e-3  # another step than the module's (0.1 % on ln x), on x itself
            if x * (1 + d) <= (1.0 if name == "clock_fraction" else math.inf):
                xs, denominator = [x * (1 + d), x * (1 - d)], 2 * d
            else:  # at the clock's maximum: a backward difference
                d = 1e-4
                xs, denominator = [x, x * (1 - d)], d
        else:  # ordinal: the arc between the study's neighbours, computed here
            xs = sorted(knob.tried)
            if len(xs) == 1:
                xs = sorted([x, xs[0]])
            denominator = None
        got = evaluate([{**s.design, name: v} for v in xs])
        for m in s.metrics:
            v0, (va, vb) = float(base[m].iloc[0]), got[m].to_numpy(float)
            if denominator is None:
                expected = math.log(vb / va) / math.log(xs[1] / xs[0])
            else:
                expected = (va - vb) / denominator / v0
            e = float(s.elasticity.loc[name, m])
            assert e == pytest.approx(expected, rel=0.01, abs=1e-6), (name, m, e, expected)
            checked += 1
    assert checked >= 4 * len(s.metrics)


def test_ranking_is_by_magnitude(quickstart):
    s = dse.sensitivity(quickstart, "knee", global_samples=0, include_fixed=True)
    score = s.elasticity[list(s.objectives)].abs().max(axis=1).to_numpy()
    assert len(score) >= 4 and np.all(np.diff(score) <= 0)
    assert s.ranking() == list(s.elasticity.index)
    for m in s.objectives:
        by_m = s.elasticity.loc[s.ranking(m), m].abs().to_numpy()
        assert np.all(np.diff(by_m) <= 0)
    # the categorical knob is compared with its alternatives, not given an elasticity
    assert "accelerator" not in s.elasticity.index
    assert ("accelerator", "A100-80GB") in s.alternatives.index


def test_breakdown_explains_the_elasticity(quickstart):
    s = dse.sensitivity(quickstart, "knee", global_samples=0)
    energy = next(b for b in s.breakdowns if b.total == "energy_to_train_j")
    time_ = next(b for b in s.breakdowns if b.total == "step_time_s")
    assert {"compute", "memory", "idle", "cooling"} <= set(energy.parts.index)
    # the analytic evaluator reports its links' energy: the network is split
    assert {"scale-up links", "scale-out links"} <= set(energy.parts.index)
    assert float(energy.parts.sum()) == pytest.approx(float(s.base["energy_to_train_j"]), rel=1e-3)
    for b in (energy, time_):
        sums = b.contributions.sum(axis=1)
        for knob, e in b.elasticity.items():
            assert float(sums[knob]) == pytest.approx(float(e), rel=1e-9, abs=1e-12)
    # the energy's elasticity is the one of the objective
    for knob in s.elasticity.index:
        assert energy.elasticity[knob] == pytest.approx(
            s.elasticity.loc[knob, "energy_to_train_j"], rel=1e-9
        )
    # a faster clock shortens the compute part of the iteration and nothing else in this design
    clock = time_.contributions.loc["clock_fraction"]
    assert clock["compute"] < 0 and abs(clock.drop("compute")).max() < 1e-9


def test_global_indices_on_ten_thousand_evaluations(quickstart):
    s = dse.sensitivity(quickstart, "knee", global_samples=10_000)
    g = s.global_indices
    assert g is not None and g.evaluations >= 10_000 and g.seconds < 30
    assert set(g.first.index) == {p for p in open_results(quickstart).study.space}
    for table in (g.first, g.total):
        assert np.isfinite(table.to_numpy()).all()
    # a total index holds the first-order one (within the bootstrap's uncertainty)
    assert (g.total + g.total_conf + g.first_conf >= g.first).to_numpy().all()
    assert (g.total.to_numpy() > -0.05).all() and (g.total.to_numpy() < 1.2).all()
    ds = s.to_dataset()
    assert ds["elasticity"].attrs["units"] == "1"
    assert ds["sobol_total"].sizes["global_knob"] == len(g.first)


def test_command_prints_tables_with_units(quickstart):
    proc = run_cli("sensitivity", str(quickstart), "--global", "1000", "--fixed")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    for expected in (
        "the design at knee (key",
        "elasticities of the objectives, d ln(objective) / d ln(knob)",
        "elasticities of the constrained metrics",
        "central ±0.1 %",
        "energy to train (energy_to_train_j)",
        "S1 of ln energy_to_train_j",
        " MJ ",
        "[1]",
        "[%]",
    ):
        assert expected in text, expected
    assert "Traceback" not in proc.stderr


def test_tables_wider_than_the_terminal_are_split_not_cut(quickstart):
    """At 100 columns the tables were cropped at the right edge (a Δ time column's unit gone,
    the rank and 'how' columns squeezed to nothing); now each is split into tables of whole
    columns, the key columns repeated, as `dse show` splits the front."""
    wide = run_cli("sensitivity", str(quickstart), "--global", "0", env={"COLUMNS": "250"})
    narrow = run_cli("sensitivity", str(quickstart), "--global", "0", env={"COLUMNS": "100"})
    assert wide.returncode == 0 and narrow.returncode == 0, narrow.stderr
    assert "(columns" not in wide.stdout and "(columns 1 of 2) elasticities" in narrow.stdout
    assert max(map(len, narrow.stdout.splitlines())) <= 100
    cells = re.compile(r"│ *([^│\n]*?) *(?=│)")
    # every value whole in either layout (a text such as 'how' may wrap onto another line):
    # the same words in the cells, and each quantity with its unit in one cell (no '…')
    wide_cells, narrow_cells = (cells.findall(p.stdout) for p in (wide, narrow))
    words = [{w for c in found for w in c.split()} for found in (wide_cells, narrow_cells)]
    assert words[0] == words[1] and "…" not in narrow.stdout
    quantity = re.compile(r"[-+]?[\d.]+ (?:min|h|s|[kMGT]?J|[kM]?W)")
    quantities = [
        {c for c in found if quantity.fullmatch(c)} for found in (wide_cells, narrow_cells)
    ]
    assert quantities[0] and quantities[0] == quantities[1]
    first = re.findall(r"^│ 1 │ (\w+) ", narrow.stdout, flags=re.M)
    assert len(first) == 2 and first[0] == first[1]  # the rank and knob, repeated in each part


@pytest.mark.parametrize("at", ["kneee", "best-cost_usd", "12345678", "best-"])
def test_a_bad_design_is_refused_in_one_line(quickstart, at):
    proc = run_cli("sensitivity", str(quickstart), "--at", at)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "--at" in proc.stderr
    assert "knee" in proc.stderr and "best-time" in proc.stderr and "Traceback" not in proc.stderr


def test_at_a_key_is_that_candidate(quickstart):
    front = open_results(quickstart).front
    key = int(front["key"].values[3])
    s = dse.sensitivity(quickstart, str(key), global_samples=0)
    assert s.key == key
    assert s.design["num_accelerators"] == int(front["num_accelerators"].values[3])


def test_any_evaluator_the_toy(tmp_path):
    """Generic: the toy evaluator's f1 = x and f2 = 1 − √x + y/10 (+0.05 for shape b) give
    their elasticities in closed form."""
    out = tmp_path / "out"
    study = toy_study(output=str(out))
    assert run_cli("run", str(write_study(tmp_path, study)), "-q").returncode == 0
    s = dse.sensitivity(out, "knee", global_samples=2000)
    x = s.design["x"]
    assert 0 < x < 1 and s.design["y"] == 0
    f2 = 1 - math.sqrt(x)
    assert s.elasticity.loc["x", "f1"] == pytest.approx(1.0, rel=1e-5)
    assert s.elasticity.loc["x", "f2"] == pytest.approx(-0.5 * math.sqrt(x) / f2, rel=1e-5)
    # y = 0 has no elasticity, but its neighbour's change is told
    assert math.isnan(s.elasticity.loc["y", "f1"])
    assert s.alternatives.loc[("y", "4"), "f2"] == pytest.approx(0.4 / f2, rel=1e-9)
    assert s.alternatives.loc[("shape", "b"), "f2"] == pytest.approx(0.05 / f2, rel=1e-9)
    assert s.global_indices is not None and s.global_indices.evaluations >= 2000
    assert s.breakdowns == ()


def test_report_has_a_tornado_of_the_knee(quickstart):
    from dse.outputs.report import Report

    page = Report(open_results(quickstart))
    fig = page.tornado_figure()
    assert fig is not None
    knobs = list(fig.data[0].y)
    assert knobs == page.sensitivity.ranking()[::-1]  # largest at the top
    assert [t.name for t in fig.data] == [
        f"d ln {m} / d ln knob" for m in page.sensitivity.objectives
    ]
    html = page.html()
    assert "What moves the knee" in html and "tornado-" in html


def test_a_folder_that_is_no_run_is_refused_in_one_line(tmp_path):
    proc = run_cli("sensitivity", str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0
    assert str(tmp_path) in proc.stderr and "Traceback" not in proc.stderr


def test_a_bad_step_is_refused_in_one_line(quickstart):
    proc = run_cli("sensitivity", str(quickstart), "--step", "0.5")
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0
    assert "--step" in proc.stderr and "0.5" in proc.stderr


def test_global_indices_no_memory_holds_are_refused_in_one_line(quickstart):
    """``--global 10^12`` ended in a traceback: SALib's sample of 20 TiB could not be held."""
    proc = run_cli("sensitivity", str(quickstart), "--global", str(10**12))
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "--global" in proc.stderr and "allowed: 0 to 1,000,000" in proc.stderr

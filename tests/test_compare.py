"""``dse compare``: two real runs of the toy evaluator side by side, in this process."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli, toy_study, write_study


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> tuple[Path, Path]:
    """The whole toy space (exhaustive: the true front, 11 points) and a small random
    search of 12 evaluations (a worse front)."""
    tmp = tmp_path_factory.mktemp("compare")
    full = write_study(tmp, toy_study(name="full", output=str(tmp / "full")), "full.yaml")
    small = write_study(
        tmp,
        toy_study(
            name="small",
            output=str(tmp / "small"),
            search={"algorithm": "random", "budget": 12, "batch_size": 6, "seed": 1},
        ),
        "small.yaml",
    )
    for study in (full, small):
        r = run_cli("run", str(study), "-q")
        assert r.returncode == 0, r.stderr
    return tmp / "full", tmp / "small"


def test_compare_library_counts_and_common_frame(two_runs):
    from dse.outputs.compare import compare_runs, dominated_by

    full, small = two_runs
    c = compare_runs([full, small])
    a, b = c.runs
    assert a.evaluations == 66 and b.evaluations == 12
    assert a.front_size == 11  # every x with y = 0 and shape a
    # the true front dominates what the small run found of it, never the reverse
    assert c.dominated[1][0] == int(dominated_by(b.f, a.f).sum())
    assert c.dominated[0][1] == 0
    assert a.hypervolume >= b.hypervolume
    assert 0 < b.hypervolume <= a.hypervolume <= 1
    # one frame: the union's ideal, nadir 10 % beyond the worst value
    union = np.vstack([a.f, b.f])
    assert np.allclose(c.ideal, union.min(axis=0))
    assert np.allclose(c.nadir, union.min(axis=0) + 1.1 * (union.max(axis=0) - union.min(axis=0)))
    assert "common frame" in c.frame()


def test_dominated_by_counts_strict_dominance_only():
    from dse.outputs.compare import dominated_by

    a = np.array([[1.0, 1.0], [0.0, 2.0], [2.0, 2.0], [0.5, 0.5]])
    b = np.array([[1.0, 1.0], [0.5, 1.5]])
    # equal points do not dominate; (0.5, 1.5) dominates (2, 2) and so does (1, 1)
    assert dominated_by(a, b).tolist() == [False, False, True, False]
    assert dominated_by(a, np.empty((0, 2))).tolist() == [False] * 4


def test_compare_cli_table_and_figure(two_runs, tmp_path):
    full, small = two_runs
    png = tmp_path / "both.png"
    r = run_cli("compare", str(full), str(small), "-o", str(png))
    assert r.returncode == 0, r.stderr
    assert png.is_file() and png.read_bytes()[:4] == b"\x89PNG"
    text = r.stdout
    assert "hypervolume, common frame [1]" in text and "front [points]" in text
    assert "common frame: each objective normalised over the union" in text
    assert "66" in text and "12" in text
    assert "of 11" in text  # the dominance table names the front sizes


def test_compare_refuses_runs_with_other_objectives(two_runs, tmp_path):
    full, _ = two_runs
    other = write_study(
        tmp_path,
        toy_study(
            name="other",
            output=str(tmp_path / "other"),
            objectives=[{"metric": "f1", "direction": "minimize"}],
        ),
    )
    assert run_cli("run", str(other), "-q").returncode == 0
    r = run_cli("compare", str(full), str(tmp_path / "other"), "-o", str(tmp_path / "c.png"))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "do not share their objectives" in lines[0], r.stderr
    assert not (tmp_path / "c.png").exists()


def test_compare_needs_two_runs(two_runs, tmp_path):
    r = run_cli("compare", str(two_runs[0]), "-o", str(tmp_path / "c.png"))
    assert r.returncode == 2 and "two runs or more" in r.stderr


def test_compare_refuses_one_run_given_twice(two_runs, tmp_path):
    """The same folder twice (by another spelling too) is no comparison: one line, nothing drawn."""
    a, b = map(str, two_runs)
    for again in (a, f"{a}/."):
        r = run_cli("compare", a, b, again, "-o", str(tmp_path / "c.png"))
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert f"error: RUN: {a} is given twice" in r.stderr
    assert not (tmp_path / "c.png").exists()
    # from Python, the very same object twice (it was told apart from the first by identity)
    from dse.errors import DseError
    from dse.outputs.compare import compare_runs

    with pytest.raises(DseError, match="is given twice"):
        compare_runs([a, b, a])


def test_compare_says_when_a_run_trains_another_workload(two_runs, tmp_path):
    """Runs of different workloads may share their objectives: their fronts are compared,
    and the output says how the workloads differ (the first run's is the reference)."""
    full, small = two_runs
    study = toy_study(name="y4", output=str(tmp_path / "y4"), workload={"y": 4})
    del study["space"]["y"]  # y set by the workload, not searched
    other = write_study(tmp_path, study)
    assert run_cli("run", str(other), "-q").returncode == 0
    from dse.outputs.compare import compare_runs

    assert compare_runs([full, small]).differences == []  # the same (default) workload
    c = compare_runs([full, tmp_path / "y4"])
    assert c.differences == [
        f"{tmp_path / 'y4'} sets other inputs than {full}: y 4 against searched"
    ]
    said = run_cli("compare", str(full), str(tmp_path / "y4"), "-o", str(tmp_path / "c.png"))
    assert said.returncode == 0, said.stderr
    assert "note:" in said.stderr and "y 4 against searched" in said.stderr


def test_the_common_frame_writes_each_end_in_a_unit_for_its_size():
    from dse.outputs.compare import Comparison

    def frame(lo, hi, units=None):
        c = Comparison(
            [("energy_to_train_j", "minimize")], ["J"], [], np.array([lo]), np.array([hi]), []
        )
        if units:
            c = Comparison(
                *(getattr(c, f) for f in ("objectives", "units", "runs")),
                c.ideal,
                c.nadir,
                [],
                units,
            )
        return c.frame().split(": ")[-1]

    assert frame(3.497e8, 1.366e12) == "energy_to_train_j 349.7 MJ → 1.366 TJ"
    assert frame(2e8, 5e8) == "energy_to_train_j 200 → 500 MJ"  # one unit, written once
    # a study's display unit holds for both ends
    assert frame(3.6e9, 7.2e12, {"energy_to_train_j": "MWh"}) == "energy_to_train_j 1 → 2000 MWh"


def test_a_loop_of_links_given_for_a_run_is_one_line(two_runs, tmp_path):
    """Path.resolve() raised RuntimeError on a loop of links: a traceback before any check."""
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    r = run_cli("compare", str(loop), str(two_runs[0]), "-o", str(tmp_path / "c.png"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and str(loop) in r.stderr

"""Bundle parameters (linked design choices): a parameter whose values name bundles of
inputs, written in the study or in a catalog file beside it. The bundle's inputs reach the
evaluator, every search driver searches it as one categorical parameter, the results show
the bundle's name, a bad bundle or catalog is one line with exit code 2, and a run with
bundles resumes (its results folder holds the bundles, also those of a catalog)."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pandas as pd
import pytest
import yaml

import dse
from conftest import run_cli, toy_study, write_study
from dse.analytic.evaluator import AnalyticEvaluator
from dse.errors import DseError, StudyError
from dse.progress import ProgressSink

#: two scale-out fabrics: the slow one has a quarter of the bandwidth and twice the latency
FABRICS = {
    "slow": {"scaleout_bw_gbs": 12.5, "scaleout_latency_us": 10.0, "scaleout_pj_per_bit": 30},
    "fast": {"scaleout_bw_gbs": 50, "scaleout_latency_us": 5.0, "scaleout_pj_per_bit": 25},
}


def _analytic(tmp_path, fabric, **changes) -> dict:
    study = {
        "name": "bundles",
        "workload": {"model": "gpt-1.3b", "target_tokens": 2.6e10},
        "space": {"num_accelerators": [32, 64], "fabric": fabric},
        "fixed": {"accelerator": "H100-SXM", "global_batch_size": 512, "micro_batch_size": 4},
        "objectives": [{"metric": "energy_to_train_j"}, {"metric": "time_to_train_s"}],
        "search": {"algorithm": "exhaustive", "budget": 100},
        "execution": {"workers": 0},
        "output": str(tmp_path / "out"),
    }
    study.update(changes)
    return study


def test_a_bundles_inputs_reach_the_evaluator(tmp_path):
    """Each evaluated row equals the evaluator's own result for the bundle's inputs written
    out, and the slower fabric takes longer for the same design."""
    path = write_study(tmp_path, _analytic(tmp_path, {"bundles": FABRICS}))
    result = dse.run(dse.load_study(path))
    rows = result.evaluations.set_index(["num_accelerators", "fabric"]).sort_index()
    assert set(rows.index.get_level_values("fabric")) == {"slow", "fast"}
    for n in (32, 64):
        assert rows.loc[(n, "slow"), "time_to_train_s"] > rows.loc[(n, "fast"), "time_to_train_s"]
    written_out = pd.DataFrame(
        [
            {"num_accelerators": n, **inputs, "model": "gpt-1.3b", "target_tokens": 2.6e10}
            | {"accelerator": "H100-SXM", "global_batch_size": 512, "micro_batch_size": 4}
            for n, name in rows.index
            for inputs in [FABRICS[name]]
        ]
    )
    direct = AnalyticEvaluator().evaluate(written_out)
    np.testing.assert_allclose(
        rows["time_to_train_s"].to_numpy(), direct["time_to_train_s"].to_numpy(), rtol=1e-12
    )
    np.testing.assert_allclose(
        rows["energy_to_train_j"].to_numpy(), direct["energy_to_train_j"].to_numpy(), rtol=1e-12
    )
    front = dse.open_results(result.output_dir).front  # pareto.nc: the bundle's name
    assert set(front["fabric"].values.tolist()) <= {"slow", "fast"}
    assert "bundle of inputs" in front["fabric"].attrs["long_name"] + front["fabric"].attrs.get(
        "description", ""
    )


def _toy_bundles(tmp_path, algorithm: str, **search) -> dict:
    """The toy's space with y and shape set together by a bundle: 'best' is the front's.
    ``random`` searches a continuous x (a space of no grid: the inputs are built from the
    asked table, not from grid positions)."""
    study = toy_study(output=str(tmp_path / algorithm), search={"algorithm": algorithm, **search})
    study["space"] = {  # (toy_study merges a space into its own)
        "x": {"range": [0.0, 1.0]} if algorithm == "random" else {"range": [0.0, 1.0], "step": 0.1},
        "kind": {
            "bundles": {
                "best": {"y": 0, "shape": "a"},
                "worse": {"y": 4, "shape": "a"},
                "worst": {"y": 9, "shape": "b"},
            }
        },
    }
    return study


@pytest.mark.parametrize(
    ("algorithm", "search"),
    [
        ("exhaustive", {"budget": 100, "batch_size": 20}),
        ("random", {"budget": 40, "batch_size": 20}),
        ("nsga2", {"budget": 60, "batch_size": 20}),
        ("optuna-tpe", {"budget": 30, "batch_size": 10}),
    ],
)
def test_every_search_driver_searches_a_bundle_parameter(tmp_path, algorithm, search):
    study = _toy_bundles(tmp_path, algorithm, **search)
    result = dse.run(dse.load_study(write_study(tmp_path, study, f"{algorithm}.yaml")))
    log = result.evaluations
    assert set(log["kind"]) <= {"best", "worse", "worst"} and len(set(log["kind"])) >= 2
    # the toy's f2 = 1 - sqrt(x) + y/10 + 0.05 [shape b]: the bundle's y and shape were used
    y = log["kind"].map({"best": 0, "worse": 4, "worst": 9})
    shape_b = (log["kind"] == "worst").astype(float)
    ok = log["status"] == "ok"
    expected = 1 - np.sqrt(log["x"]) + y / 10 + 0.05 * shape_b
    np.testing.assert_allclose(log.loc[ok, "f2"], expected[ok], rtol=1e-9)
    assert (log.loc[log["kind"] == "worst", "feasible"] == False).all()  # noqa: E712 - y 9, shape b
    assert "best" in set(result.front["kind"])
    if algorithm == "exhaustive":  # the exact front: y 0 and shape a
        assert set(result.front["kind"]) == {"best"}


def _catalog_study(tmp_path) -> tuple:
    folder = tmp_path / "study"
    (folder / "catalogs").mkdir(parents=True)
    (folder / "catalogs" / "fabrics.yaml").write_text(yaml.safe_dump(FABRICS))
    study = _analytic(
        tmp_path,
        {"bundles": "catalogs/fabrics.yaml"},
        search={"algorithm": "exhaustive", "budget": 4, "options": {"chunk": 1}},
    )
    return write_study(folder, study), folder


class _StopAfterFirst(ProgressSink):
    """Ctrl-C once the first candidate is done."""

    def advance(self, n: int, record: dict) -> None:
        if record.get("evaluations", 0) >= 1:
            raise KeyboardInterrupt


def test_a_run_with_a_catalog_resumes_without_the_catalog(tmp_path):
    """The results folder's study.yaml holds the catalog's bundles: the run resumes (and its
    results are read) after the catalog has gone."""
    path, folder = _catalog_study(tmp_path)
    stopped = dse.run(dse.load_study(path), progress=_StopAfterFirst())
    assert stopped.interrupted
    out = tmp_path / "out"
    stopped = len(dse.open_results(out).log())
    assert 1 <= stopped < 4
    shutil.rmtree(folder / "catalogs")
    stored = (out / "study.yaml").read_text()
    assert "catalogs/fabrics.yaml copied in" in stored and "scaleout_latency_us: 10.0" in stored
    result = dse.resume(out)
    assert len(result.evaluations) == 4
    assert set(result.evaluations["fabric"]) <= {"slow", "fast"}
    said = run_cli("show", str(out))
    assert said.returncode == 0 and "fabric" in said.stdout
    from dse.outputs.report import _values  # the report's line on the search space

    assert set(_values(dse.open_results(out).study.space["fabric"]).split(" | ")) == {
        "slow (scaleout_bw_gbs 12.5, scaleout_latency_us 10.0, scaleout_pj_per_bit 30)",
        "fast (scaleout_bw_gbs 50, scaleout_latency_us 5.0, scaleout_pj_per_bit 25)",
    }


def test_a_catalog_and_the_same_bundles_in_the_study_evaluate_alike(tmp_path):
    path, _ = _catalog_study(tmp_path)
    study = dse.load_study(path)
    assert study.space["fabric"].bundles == FABRICS
    inline = dse.load_study(
        write_study(tmp_path, _analytic(tmp_path, {"bundles": FABRICS}), "inline.yaml")
    )
    assert inline.space["fabric"].bundles == study.space["fabric"].bundles
    picked = _analytic(tmp_path, {"bundles": "catalogs/fabrics.yaml", "choices": ["fast"]})
    only = dse.load_study(write_study(path.parent, picked, "picked.yaml"))
    assert list(only.space["fabric"].bundles) == ["fast"]


def _refusal(tmp_path, path) -> str:
    """`dse validate` and `dse run` refuse alike, in one line, exit code 2; returns it."""
    out = tmp_path / "refused"
    said = {c: run_cli(c, str(path), "-o", str(out)) for c in ("validate", "run")}
    for command, s in said.items():
        assert s.returncode == 2 and "Traceback" not in s.stderr, (command, s.stderr)
    assert said["validate"].stderr == said["run"].stderr
    assert not out.exists()
    with pytest.raises(DseError) as info:
        dse.load_study(path)
    line = " ".join(said["run"].stderr.split())
    assert line == f"error: {info.value}"
    return line


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda f: f.joinpath("../outside.yaml"), "leads out of the study's folder"),
        (lambda f: "/etc/hostname", "is not a path relative to the study's folder"),
        (lambda f: f / "missing.yaml", "cannot read the catalog of bundles"),
        (lambda f: f / "catalogs", "is not a regular file"),
    ],
    ids=["outside", "absolute", "missing", "a folder"],
)
def test_a_catalog_outside_the_study_or_missing_is_refused(tmp_path, make, expected):
    path, folder = _catalog_study(tmp_path)
    (tmp_path / "outside.yaml").write_text(yaml.safe_dump(FABRICS))
    where = make(folder)
    name = where if isinstance(where, str) else os.path.relpath(where, folder)
    data = yaml.safe_load(path.read_text())
    data["space"]["fabric"] = {"bundles": name}
    path.write_text(yaml.safe_dump(data))
    line = _refusal(tmp_path, path)
    assert f"{path}: space.fabric.bundles: " in line and expected in line


def test_a_catalog_through_a_link_a_pipe_too_large_or_broken_is_refused(tmp_path):
    path, folder = _catalog_study(tmp_path)
    real = tmp_path / "elsewhere"
    real.mkdir()
    (real / "fabrics.yaml").write_text(yaml.safe_dump(FABRICS))
    shutil.rmtree(folder / "catalogs")
    (folder / "catalogs").symlink_to(real)  # a folder on the way is a link
    assert "passes through a symbolic link" in _refusal(tmp_path, path)
    (folder / "catalogs").unlink()
    (folder / "catalogs").mkdir()
    os.mkfifo(folder / "catalogs" / "fabrics.yaml")  # a pipe: refused, not waited on
    assert "is not a regular file" in _refusal(tmp_path, path)
    (folder / "catalogs" / "fabrics.yaml").unlink()
    big = folder / "catalogs" / "fabrics.yaml"
    big.write_text("# " + "x" * 1_000_001 + "\n")
    assert "is larger than the 1,000,000 bytes" in _refusal(tmp_path, path)
    big.write_text("slow: {scaleout_bw_gbs: 12.5\n")
    line = _refusal(tmp_path, path)
    assert line.startswith(f"error: {big}: not valid YAML")
    big.write_text(yaml.safe_dump({"slow": {"scaleout_bw_gbs": -1}}))
    line = _refusal(tmp_path, path)
    assert line.startswith(f"error: {big}: slow.scaleout_bw_gbs: value out of range (got -1)")


def test_dse_evaluate_expands_a_bundle_column(tmp_path):
    path = write_study(tmp_path, _analytic(tmp_path, {"bundles": FABRICS}))
    csv = tmp_path / "c.csv"
    csv.write_text("fabric,num_accelerators\nslow,64\nfast,64\n")
    said = run_cli("evaluate", str(path), "-c", str(csv), "-o", str(tmp_path / "e.csv"))
    assert said.returncode == 0, said.stderr
    table = pd.read_csv(tmp_path / "e.csv").set_index("fabric")
    assert (
        table.loc["slow", "scaleout_bw_gbs"] == 12.5 and table.loc["fast", "scaleout_bw_gbs"] == 50
    )
    assert table.loc["slow", "time_to_train_s"] > table.loc["fast", "time_to_train_s"]
    csv.write_text("fabric,num_accelerators\nmedium,64\n")
    said = run_cli("evaluate", str(path), "-c", str(csv), "-o", str(tmp_path / "e.csv"))
    assert said.returncode == 2 and "row 2, column fabric: not a bundle of fabric" in said.stderr
    csv.write_text("fabric,scaleout_bw_gbs\nslow,3\n")
    said = run_cli("evaluate", str(path), "-c", str(csv), "-o", str(tmp_path / "e.csv"))
    assert said.returncode == 2 and "set both by its column and by the bundles" in said.stderr


def test_a_bundle_value_is_checked_as_its_input_and_spelt_as_it(tmp_path):
    fabrics = {"a": {"scaleout_fabric": "Fat-Tree"}, "b": {"scaleout_fabric": "rail_optimized"}}
    study = dse.load_study(write_study(tmp_path, _analytic(tmp_path, {"bundles": fabrics})))
    plan = dse.api.plan(study)
    assert plan.space.bundles["fabric"]["a"] == {"scaleout_fabric": "fat_tree"}
    fabrics["a"]["scaleout_fabric"] = "token-ring"
    path = write_study(tmp_path, _analytic(tmp_path, {"bundles": fabrics}))
    with pytest.raises(StudyError, match=r"space.fabric.bundles.a.scaleout_fabric: unknown"):
        dse.load_study(path)

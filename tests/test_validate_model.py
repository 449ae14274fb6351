import json
from importlib.resources import files

import pandas as pd
import pytest

from dse.analytic import validation
from dse.errors import DseError

REF = files("dse.analytic.data").joinpath("reference")


@pytest.fixture(scope="module")
def results():
    out = {}
    for name in ("multi", "single"):
        df = pd.read_csv(REF.joinpath(f"vtrain_{name}_node.csv"))
        out[name] = validation.summary(validation.predict(df))
    return out


def test_multi_node_error_bound(results):
    s = results["multi"]
    assert s["rows"] == 109 and s["predicted"] == 109
    assert s["median_abs_error"] <= 0.07
    assert s["mean_abs_error"] <= 0.10


def test_single_node_error_bound(results):
    s = results["single"]
    assert s["rows"] == 1440 and s["predicted"] == 1440
    assert s["median_abs_error"] <= 0.15
    assert s["mean_abs_error"] <= 0.15


def test_cli_function_prints_table_and_json(capsys):
    path = REF.joinpath("vtrain_multi_node.csv")
    assert validation.validate_model(path, False) == 0
    text = capsys.readouterr().out
    assert "median" in text and "predicted ms" in text
    assert validation.validate_model(path, True) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["median_abs_error"] <= 0.07


def test_optional_columns(tmp_path):
    df = pd.read_csv(REF.joinpath("vtrain_single_node.csv")).head(4)
    df["accelerator"] = ["H100-SXM", "A100-40GB", "MI300X", ""]
    df["recompute"] = ["none", "selective", "full", ""]
    df["sequence_parallel"] = [True, False, True, False]
    df["vocab"] = 32000
    df["feed_forward"] = 4096
    df["interleave"] = 1
    p = tmp_path / "t.csv"
    df.to_csv(p, index=False)
    res = validation.predict(pd.read_csv(p))
    assert res["predicted_ms"].notna().all()


def test_bad_input_raises_dse_error(tmp_path):
    with pytest.raises(DseError, match="no such file"):
        validation.validate_model(tmp_path / "missing.csv", False)
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(DseError, match="missing columns"):
        validation.validate_model(bad, False)
    df = pd.read_csv(REF.joinpath("vtrain_single_node.csv")).head(2)
    df["accelerator"] = "TPU-v9"
    p = tmp_path / "acc.csv"
    df.to_csv(p, index=False)
    with pytest.raises(DseError, match="unknown accelerator"):
        validation.validate_model(p, False)

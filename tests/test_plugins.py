"""Plug-ins from outside dse: a search driver and an evaluator from a package installed into a
temporary folder (the driver is the example of docs/search.md, taken from the docs' text),
found through their entry points by a real `dse run`, without editing dse."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from conftest import REPO, run_cli, write_study
from dse.results import open_results

SCHAFFER = '''
"""Schaffer's problem N.1: f1 = x^2, f2 = (x - 2)^2; the front is 0 <= x <= 2."""
import numpy as np
import pandas as pd

from dse.evaluators.base import Evaluator, Input, Metric


class SchafferEvaluator(Evaluator):
    name = "schaffer"
    version = "1.0"

    @property
    def inputs(self):
        return {"x": Input("x", "float", "1", "decision variable", 0.0, minimum=-10, maximum=10),
                "tag": Input("tag", "str", "", "carried through", "a", ("a", "b"))}

    @property
    def metrics(self):
        return {"f1": Metric("f1", "1", "x squared"), "f2": Metric("f2", "1", "(x - 2) squared")}

    def evaluate(self, candidates):
        x = self.with_defaults(candidates)["x"].to_numpy(dtype=float)
        return pd.DataFrame({"f1": x**2, "f2": (x - 2) ** 2, "feasible": np.ones(len(x), bool),
                             "reason": [""] * len(x)})
'''

PYPROJECT = """
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "dse-example-plugins"
version = "0.1.0"

[project.entry-points."dse.search"]
halton = "dse_example_plugins.halton:HaltonDriver"

[project.entry-points."dse.evaluators"]
schaffer = "dse_example_plugins.schaffer:SchafferEvaluator"

[tool.setuptools]
packages = ["dse_example_plugins"]
"""


def docs_driver_example() -> str:
    """The Python block of docs/search.md's 'Writing a search driver' section."""
    text = (REPO / "docs" / "search.md").read_text()
    section = text[text.index("## Writing a search driver") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    """The example package, built and installed by pip into a folder of its own."""
    tmp = tmp_path_factory.mktemp("plugins")
    pkg = tmp / "src"
    (pkg / "dse_example_plugins").mkdir(parents=True)
    (pkg / "pyproject.toml").write_text(PYPROJECT)
    (pkg / "dse_example_plugins" / "__init__.py").write_text("")
    (pkg / "dse_example_plugins" / "halton.py").write_text(docs_driver_example())
    (pkg / "dse_example_plugins" / "schaffer.py").write_text(textwrap.dedent(SCHAFFER))
    site = tmp / "site"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(pkg),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert list(site.glob("dse_example_plugins-0.1.0.dist-info/entry_points.txt"))
    return site


@pytest.fixture
def dse_with(monkeypatch):
    """``dse_with(folder, *args, cwd=...)``: `dse ARGS` in this process with ``folder`` first on
    ``sys.path``, as ``PYTHONPATH=folder`` puts it first for the program: its packages' entry
    points and modules are found there. Modules imported from it are forgotten after the test
    (another test's folder holds another module of the same name)."""
    before = set(sys.modules)
    folders: list[str] = []

    def dse(folder: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
        if str(folder) not in folders:
            folders.append(str(folder))
            monkeypatch.syspath_prepend(str(folder))
        return run_cli(*args, cwd=cwd)

    yield dse
    for name in set(sys.modules) - before:
        where = getattr(sys.modules[name], "__file__", None) or ""
        if any(where.startswith(folder) for folder in folders):
            del sys.modules[name]


def test_the_documented_driver_is_short():
    assert len(docs_driver_example().splitlines()) < 60


def test_an_installed_third_party_driver_and_evaluator_run_a_study(plugin_site, tmp_path, dse_with):
    out = tmp_path / "out"
    study = write_study(
        tmp_path,
        {
            "name": "plugins",
            "space": {"x": {"range": [-4.0, 6.0]}, "tag": ["a", "b"]},
            "objectives": [{"metric": "f1"}, {"metric": "f2"}],
            "evaluator": {"name": "schaffer"},
            "search": {
                "algorithm": "halton",
                "budget": 200,
                "batch_size": 50,
                "seed": 2,
                "options": {"scramble": True},
            },
            "execution": {"workers": 0},
            "output": str(out),
        },
    )
    proc = dse_with(plugin_site, "validate", str(study), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "search halton" in proc.stdout
    proc = dse_with(plugin_site, "run", str(study), "--quiet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    with open_results(out).open_dataset(front=False) as ev:
        x = ev["x"].values
        assert ev.sizes["candidate"] == 200 and ev.attrs["evaluator"] == "schaffer"
        # space-filling: every tenth of the interval holds 20 +- 4 of the 200 points
        counts = np.histogram(x, bins=10, range=(-4, 6))[0]
        assert counts.min() >= 16 and counts.max() <= 24
    with xr.open_dataset(out / "pareto.nc", engine="h5netcdf") as front:
        xf = front["x"].values
    # Schaffer's front is 0 <= x <= 2: every sample there is on it, plus at most the nearest
    # sample on either side (nothing sampled dominates those)
    inside = x[(x >= 0) & (x <= 2)]
    assert len(inside) >= 30 and set(inside) <= set(xf) and len(xf) <= len(inside) + 2
    assert xf.min() > -0.2 and xf.max() < 2.2
    proc = dse_with(plugin_site, "describe", "--evaluator", "schaffer", cwd=tmp_path)
    assert proc.returncode == 0 and "(x - 2) squared" in proc.stdout


def test_a_third_party_drivers_options_are_checked_by_its_own_model(
    plugin_site, tmp_path, dse_with
):
    study = write_study(
        tmp_path,
        {
            "name": "plugins",
            "space": {"x": {"range": [-4.0, 6.0]}},
            "objectives": [{"metric": "f1"}, {"metric": "f2"}],
            "evaluator": {"name": "schaffer"},
            "search": {"algorithm": "halton", "options": {"scramble": "banana"}},
            "output": str(tmp_path / "out"),
        },
    )
    for command in ("validate", "run"):
        proc = dse_with(plugin_site, command, str(study), cwd=tmp_path)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert "search.options.scramble" in proc.stderr and "'banana'" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_driver_named_by_module_and_class_needs_no_installation(plugin_site, tmp_path, dse_with):
    study = write_study(
        tmp_path,
        {
            "name": "by-path",
            "space": {"x": {"range": [0.0, 1.0], "step": 0.1}, "y": [0, 1], "shape": ["a"]},
            "objectives": [{"metric": "f1"}, {"metric": "f2"}],
            "evaluator": {"name": "dse.evaluators.toy:ToyEvaluator"},
            "search": {
                "algorithm": "dse_example_plugins.halton:HaltonDriver",
                "budget": 20,
                "batch_size": 10,
            },
            "execution": {"workers": 0},
            "output": str(tmp_path / "out"),
        },
    )
    env_site = plugin_site  # importable through sys.path, entry points not used
    proc = dse_with(env_site, "run", str(study), "--quiet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_a_name_two_installed_packages_register_is_refused_naming_both(tmp_path, dse_with):
    # a package (its metadata as pip leaves it) that registers the built-in's name again
    site = tmp_path / "site"
    info = site / "clash_plugins-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: clash-plugins\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[dse.evaluators]\nanalytic = dse.evaluators.toy:ToyEvaluator\n"
    )
    for command in ("validate", "run"):
        proc = dse_with(
            site,
            command,
            str(REPO / "studies" / "quickstart.yaml"),
            "-o",
            str(tmp_path / "out"),
            cwd=tmp_path,
        )
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert (
            "evaluator 'analytic' is registered by more than one installed package" in proc.stderr
        )
        assert "clash-plugins (dse.evaluators.toy:ToyEvaluator)" in proc.stderr
        assert "dse (dse.analytic.evaluator:AnalyticEvaluator)" in proc.stderr
    assert not (tmp_path / "out").exists()


BROKEN_DRIVER = '''
import numpy as np
import pandas as pd
from dse.search.base import SearchDriver


class Broken(SearchDriver):
    """Asks 10 in-range candidates, then breaks the contract as MODE says."""
    name = "broken"
    MODE = ""

    def ask(self):
        x = np.linspace(0.0, 1.0, 10)
        if self.asked and self.MODE == "out-of-range":
            x = x + 5.0
        if self.asked and self.MODE == "not-in-grid":
            self.asked += 10
            return pd.DataFrame({"x": x, "y": 7, "shape": "a"})
        if self.asked and self.MODE == "raises":
            raise KeyError("no such thing")
        self.asked += 10
        batch = pd.DataFrame({"x": x, "y": 0, "shape": "a"})
        return batch.drop(columns="y") if self.asked > 10 and self.MODE == "no-column" else batch

    def tell(self, candidates, objectives, violations):
        self.told += len(candidates)

    def state(self):
        return {**super().state(), "odd": object()} if self.MODE == "state" else super().state()

'''


@pytest.mark.parametrize(
    "mode, message",
    [
        ("out-of-range", "asked for x = 5.0, outside the space's range [0, 1]"),
        ("raises", "ask() raised KeyError: 'no such thing' (at broken_driver.py:"),
        ("no-column", "asked for candidates without ['y']"),
        ("not-in-grid", "asked for y = 7, not one of the space's values (0, 1)"),
        ("state", "state() returned what JSON cannot hold"),
    ],
)
def test_a_driver_that_breaks_its_contract_is_one_line_naming_it(tmp_path, mode, message, dse_with):
    (tmp_path / "broken_driver.py").write_text(BROKEN_DRIVER + f"\nBroken.MODE = {mode!r}\n")
    out = tmp_path / "out"
    study = write_study(
        tmp_path,
        {
            "name": "broken",
            "space": {"x": {"range": [0.0, 1.0]}, "y": [0, 1], "shape": ["a"]},
            "objectives": [{"metric": "f1"}, {"metric": "f2"}],
            "evaluator": {"name": "dse.evaluators.toy:ToyEvaluator"},
            "search": {"algorithm": "broken_driver:Broken", "budget": 30},
            "execution": {"workers": 0},
            "output": str(out),
        },
    )
    proc = dse_with(tmp_path, "run", str(study), "--quiet", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "search.algorithm: search driver 'broken_driver:Broken'" in proc.stderr
    assert message in proc.stderr, proc.stderr
    if mode != "state":  # the first batch was evaluated and stays stored
        status = dse_with(tmp_path, "status", str(out), cwd=tmp_path)
        assert "evaluations 10" in status.stdout.replace(":", ""), status.stdout

"""The package's shape: data flows one way, no import goes upward or in a circle.

Every import statement in ``dse/`` (top-level or inside a function) is read with ``ast``;
each module belongs to a layer of the pipeline, and a module may import only from its
own package or from lower layers. The analytic model is a plug-in beside the pipeline:
it may use only the evaluator contract and the error type.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import REPO

PACKAGE = REPO / "dse"

#: layer of each top-level module or package of dse, upstream first
LAYERS = {
    "dse.errors": 0, "dse.files": 0, "dse.plugins": 0,
    "dse.study": 1,
    "dse.space": 2,
    "dse.evaluators": 3, "dse.analytic": 3,
    "dse.search": 4, "dse.execution": 4,
    "dse.checks": 5,
    "dse.store": 6, "dse.pareto": 6,
    "dse.datasets": 7,
    "dse.runner": 8, "dse.results": 8,
    "dse.api": 9,
    "dse.outputs": 10,
    "dse.cli": 11, "dse.__main__": 11,
}


def _modules() -> dict[str, Path]:
    mods = {}
    for f in PACKAGE.rglob("*.py"):
        parts = f.relative_to(REPO).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = f
    return mods


def _imports(name: str, path: Path) -> set[str]:
    out = set()
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_pkg else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.add(target)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {t for t in out if t.startswith("dse.")}


def _unit(module: str) -> str:
    """The top-level module or package of dse that ``module`` belongs to."""
    return ".".join(module.split(".")[:2])


GRAPH = {m: _imports(m, f) for m, f in _modules().items()}


def test_every_module_has_a_layer():
    units = {_unit(m) for m in GRAPH if m != "dse"}
    assert units <= set(LAYERS), f"modules without a layer: {sorted(units - set(LAYERS))}"


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if m != "dse"))
def test_no_import_goes_upward_or_sideways(module):
    here = _unit(module)
    for target in GRAPH[module]:
        there = _unit(target)
        if there == here:
            continue
        assert LAYERS[there] < LAYERS[here], f"{module} imports {target} (layer {LAYERS[there]} >= {LAYERS[here]})"


def test_no_import_cycles():
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in GRAPH.get(v, ()):
            if w not in GRAPH:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in GRAPH:
        if v not in index:
            visit(v)
    assert cycles == []


def test_the_analytic_model_uses_only_the_plugin_contract():
    allowed = {"dse.errors", "dse.evaluators.base"}
    for module, targets in GRAPH.items():
        if _unit(module) == "dse.analytic":
            outside = {t for t in targets if _unit(t) != "dse.analytic"}
            assert outside <= allowed, f"{module} imports {sorted(outside - allowed)}"


def test_the_study_schema_imports_no_other_pipeline_stage():
    assert GRAPH["dse.study"] <= {"dse.errors"}


def test_drivers_know_nothing_of_execution_and_the_store_nothing_of_drivers():
    for module, targets in GRAPH.items():
        if _unit(module) == "dse.search":
            assert not {_unit(t) for t in targets} & {"dse.execution", "dse.store", "dse.evaluators"}, module
    assert not {_unit(t) for t in GRAPH["dse.store"]} & {"dse.search", "dse.evaluators", "dse.analytic"}
    assert "optuna" not in (PACKAGE / "store.py").read_text()

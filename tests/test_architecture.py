"""The package's shape: data flows one way, no import goes upward or in a circle.

Every import statement in ``dse/`` (top-level or inside a function) is read with ``ast``;
each module belongs to a layer of the pipeline, and a module may import only from its
own package or from lower layers. The analytic model is a plug-in beside the pipeline:
it may use only the evaluator contract and the error type.
"""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "dse"

#: layer of each top-level module or package of dse, upstream first
LAYERS = {
    "dse.errors": 0,
    "dse.yamlfile": 0,
    "dse.files": 1,
    "dse.tables": 1,
    "dse.plugins": 1,
    "dse.keyindex": 1,
    "dse.allocator": 1,
    "dse.signals": 1,
    "dse.units": 1,
    "dse.study": 2,
    "dse.records": 2,
    "dse.space": 3,
    "dse.evaluators": 4,
    "dse.analytic": 5,
    "dse.search": 5,
    "dse.execution": 5,
    "dse.store": 6,
    "dse.pareto": 6,
    "dse.progress": 6,
    "dse.datasets": 7,
    "dse.logrows": 7,
    "dse.preview": 7,
    "dse.trust": 7,
    "dse.checks": 8,
    "dse.runner": 9,
    "dse.results": 9,
    "dse.api": 10,
    "dse.outputs": 11,
    "dse.cli": 12,
    "dse.__main__": 13,
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


def test_no_import_goes_upward_or_sideways():
    wrong = [
        f"{module} imports {target} (layer {LAYERS[_unit(target)]} >= {LAYERS[_unit(module)]})"
        for module in sorted(GRAPH)
        if module != "dse"
        for target in sorted(GRAPH[module])
        if _unit(target) != _unit(module) and LAYERS[_unit(target)] >= LAYERS[_unit(module)]
    ]
    assert wrong == []


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
    allowed = {
        "dse.errors",
        "dse.files",
        "dse.evaluators.base",
        "dse.tables",
        "dse.yamlfile",
    }  # the contract, its errors, atomic writes, the CSV shape check, the YAML reader
    for module, targets in GRAPH.items():
        if _unit(module) == "dse.analytic":
            outside = {t for t in targets if _unit(t) != "dse.analytic"}
            assert outside <= allowed, f"{module} imports {sorted(outside - allowed)}"


def test_the_study_schema_imports_no_other_pipeline_stage():
    # dse.units: the table of units a study may name (display_units, a bound's unit), a leaf
    assert GRAPH["dse.study"] <= {"dse.errors", "dse.yamlfile", "dse.units"}
    assert GRAPH["dse.units"] == set()


def test_drivers_know_nothing_of_execution_and_the_store_nothing_of_drivers():
    for module, targets in GRAPH.items():
        if _unit(module) == "dse.search":
            assert not {_unit(t) for t in targets} & {
                "dse.execution",
                "dse.store",
                "dse.evaluators",
            }, module
    assert not {_unit(t) for t in GRAPH["dse.store"]} & {
        "dse.search",
        "dse.evaluators",
        "dse.analytic",
    }
    assert "optuna" not in (PACKAGE / "store.py").read_text()


#: the only functions of the physics (dse/analytic/time, dse/analytic/energy) that read by
#: string key: where the input table (input name -> array) and the YAML data files (presets,
#: hardware catalog and calibration, training stacks, power entries) become typed objects
PHYSICS_BOUNDARY = {
    "time/model.py": {"_front", "_layout", "hardware_of", "_network_inputs"},  # the input table
    "time/workload.py": {"resolve_shape"},  # models.yaml -> ModelShape
    "time/hardware.py": {
        "_row_of",
        "calibration_for",
        "entry",
        "estimated_efficiencies",
        "fitted_on",
        "is_estimated",
        "mamf_efficiency",
    },  # hardware.yaml, calibration.yaml
    "time/frameworks.py": {"_row"},  # frameworks.yaml -> Stack
    "energy/power.py": {
        "entry",
        "cooling_path",
        "link_vf_curve",
        "PowerParameters.of_entry",
    },  # power.yaml
    "energy/model.py": {"EnergyInputs.of"},  # the input table
}


def _string_key_reads(path: Path) -> list[tuple[str, int]]:
    """(enclosing function's qualified name, line) of every ``x["key"]`` read in ``path``."""
    out = []

    def visit(node, scope):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, [*scope, child.name])
                continue
            if (
                isinstance(child, ast.Subscript)
                and isinstance(child.ctx, ast.Load)
                and isinstance(child.slice, ast.Constant)
                and isinstance(child.slice.value, str)
            ):
                out.append((".".join(scope) or "<module>", child.lineno))
            visit(child, scope)

    visit(ast.parse(path.read_text()), [])
    return out


def test_the_physics_reads_no_model_quantity_by_string_key():
    # model quantities travel as frozen dataclasses (ModelShape, Layout, Stages, PowerParameters,
    # ThermalResponse, ...); only the boundary functions above turn tables and files into them
    wrong = []
    for half in ("time", "energy"):
        for path in sorted((PACKAGE / "analytic" / half).rglob("*.py")):
            allowed = PHYSICS_BOUNDARY.get(f"{half}/{path.name}", set())
            wrong += [
                f"{half}/{path.name}:{line} in {scope}"
                for scope, line in _string_key_reads(path)
                if scope not in allowed
            ]
    assert wrong == []


def test_no_physics_function_takes_ten_loose_arguments():
    long = []
    for half in ("time", "energy"):
        for path in sorted((PACKAGE / "analytic" / half).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef):
                    args = [
                        a.arg
                        for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)
                    ]
                    args = [a for a in args if a not in ("self", "cls")]
                    if len(args) >= 10 and node.name != "of":  # a dataclass's named constructor
                        long.append(f"{half}/{path.name}: {node.name} ({len(args)})")
    assert long == []


def test_no_conditional_expression_is_chained():
    """``a if c else b if d else e`` hides a branch: write it out as if/elif (issue 31)."""
    chained = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.IfExp) and (
                isinstance(node.body, ast.IfExp) or isinstance(node.orelse, ast.IfExp)
            ):
                chained.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not chained, chained

"""One validation path: what `dse validate` and `dse run` refuse, the library refuses with the
same message; what they warn about is on the plan `dse.check_run` returns."""

from __future__ import annotations

import pytest
import yaml
from test_study import CASES, RUN_CASES

import dse
from conftest import REPO, run_cli, toy_study, write_study
from dse.errors import DseError


def _quickstart(tmp_path, mutate, name: str = "study.yaml"):
    data = yaml.safe_load((REPO / "studies" / "quickstart.yaml").read_text())
    mutate(data)
    return write_study(tmp_path, data, name)


def _held(tmp_path):
    """A folder that holds a run (`dse run` refuses it without --overwrite)."""
    held = tmp_path / "held"
    (held / "evaluations").mkdir(parents=True)
    (held / "evaluations" / "chunk-000000.arrow").write_bytes(b"")
    return held


def _is_a_file(tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("not a folder")
    return taken


#: refusals found only once a run is planned for this machine and moment: the results folder,
#: the scheduler, the evaluator's preview (name -> study, the output folder given or None)
MOMENT_CASES = {
    "no candidate meets a constraint": (
        lambda tmp: _quickstart(
            tmp, lambda d: d["constraints"].append("peak_junction_temp_c <= 1")
        ),
        None,
    ),
    "no candidate of the toy's space is feasible": (
        lambda tmp: write_study(tmp, toy_study(output=str(tmp / "out"), constraints=["f1 >= 2"])),
        None,
    ),
    "a preview whose table breaks the contract": (
        lambda tmp: write_study(
            tmp,
            toy_study(
                output=str(tmp / "out"),
                evaluator={
                    "name": "tests.test_evaluators:_Misbehaving",
                    "options": {"how": "one-row-short", "preview_size": 1000},
                },
            ),
        ),
        None,
    ),
    "an output folder that holds a run": (
        lambda tmp: write_study(tmp, toy_study(output=str(tmp / "out"))),
        _held,
    ),
    "the study's output folder is a file": (
        lambda tmp: write_study(tmp, toy_study(output=str(_is_a_file(tmp)))),
        None,
    ),
    "a scheduler host that does not exist": (
        lambda tmp: write_study(
            tmp,
            toy_study(
                output=str(tmp / "out"), execution={"scheduler": "tcp://no-such-host.invalid:8786"}
            ),
        ),
        None,
    ),
}


def _study_cases():
    return {
        **{f"schema: {k}": v for k, v in CASES.items()},
        **{f"plan: {k}": v for k, v in RUN_CASES.items()},
    }


def _library_refusal(path, output) -> str:
    """What the library says, the study loaded and then run (each refuses in its turn)."""
    with pytest.raises(DseError) as info:
        study = dse.load_study(path)
        dse.run(study, output)
    return str(info.value)


@pytest.mark.parametrize("case", list(_study_cases()), ids=list(_study_cases()))
def test_the_library_refuses_a_broken_study_with_the_command_lines_message(tmp_path, case):
    mutate, field, _ = _study_cases()[case]
    path = _quickstart(tmp_path, mutate)
    out = tmp_path / "out"
    said = run_cli("validate", str(path), "-o", str(out))
    assert said.returncode == 2 and "Traceback" not in said.stderr, said.stderr
    assert said.stderr.strip() == f"error: {_library_refusal(path, out)}"
    assert field in said.stderr and not out.exists()


@pytest.mark.parametrize("case", list(MOMENT_CASES), ids=list(MOMENT_CASES))
def test_the_library_refuses_what_validate_and_run_refuse_when_a_run_is_planned(tmp_path, case):
    """Before: `dse validate` refused these, and `dse.run` evaluated the whole space (or wrote
    into the folder) and ended with an empty front."""
    make, folder = MOMENT_CASES[case]
    path = make(tmp_path)
    out = folder(tmp_path) if folder else None
    given = ("-o", str(out)) if out else ()
    messages = {command: run_cli(command, str(path), *given) for command in ("validate", "run")}
    for command, said in messages.items():
        assert said.returncode == 2 and "Traceback" not in said.stderr, (command, said.stderr)
    assert not (tmp_path / "out").exists()  # refused before anything was written
    library = f"error: {_library_refusal(path, out)}"
    assert messages["validate"].stderr.strip() == messages["run"].stderr.strip() == library
    with pytest.raises(DseError) as info:
        dse.check_run(path, out)
    assert f"error: {info.value}" == library


def test_warnings_are_on_the_plan_and_the_command_line_prints_them(tmp_path):
    """A grid short of its end, a scheduler that does not answer: warnings on the plan of
    `dse.check_run`, printed by `dse validate` and told as `dse run` starts."""
    path = _quickstart(
        tmp_path, lambda d: d["space"].update(clock_fraction={"range": [0.6, 1.0], "step": 0.15})
    )
    plan = dse.check_run(path, tmp_path / "out")
    assert plan.warnings == (
        f"{path}: space.clock_fraction: the grid in steps of 0.15 from 0.6 ends at 0.9, short of 1",
    )
    assert (
        plan.output_dir == tmp_path / "out"
        and plan.preview.evaluated == 240
        and plan.preview.whole_space
    )
    said = run_cli("validate", str(path), "-o", str(tmp_path / "out"))
    assert said.returncode == 0 and f"warning: {plan.warnings[0]}" in " ".join(said.stderr.split())
    toy = write_study(
        tmp_path,
        toy_study(
            output=str(tmp_path / "toy"),
            space={"x": {"range": [0.0, 0.95], "step": 0.1}, "y": [0], "shape": ["a"]},
        ),
        "toy.yaml",
    )
    ran = run_cli("run", str(toy), "--quiet")
    assert ran.returncode == 0, ran.stderr
    assert (
        f"warning: {toy}: space.x: the grid in steps of 0.1 from 0 ends at 0.9, short of 0.95"
        in " ".join(ran.stderr.split())
    )
    with pytest.warns(UserWarning, match="short of 0.95"):  # the library without a progress sink
        dse.run(toy, tmp_path / "toy2")

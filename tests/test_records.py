"""The run's records (meta.json, state.json, the per-batch records): typed, versioned, read
back as written, older layouts still read, and a damaged one refused in one line that names
the file, the field, the value and what is allowed."""

from __future__ import annotations

import json
import shutil

import pytest

import dse
from conftest import run_cli, toy_study, write_study
from dse.errors import StoreError
from dse.records import RECORD_VERSION, BatchRecord, HypervolumeFrame, RunMeta, RunState
from dse.store import ResultStore


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("records")
    out = tmp / "out"
    dse.run(dse.load_study(write_study(tmp, toy_study(output=str(out)))))
    return out


def _copy(finished, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(finished, out)
    return out


def _edit(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_a_run_writes_versioned_records_that_read_back_as_types(finished):
    store = ResultStore.open(finished)
    assert isinstance(store.meta, RunMeta) and store.meta.record_version == RECORD_VERSION
    assert json.loads((finished / "meta.json").read_text())["record_version"] == RECORD_VERSION
    state = store.load_state()
    assert isinstance(state, RunState) and state.finished and state.keep == "all"
    assert all(isinstance(r, BatchRecord) for r in state.history) and state.last.evaluations == 66
    assert [r.batch for r in state.history] == list(
        range(len(state.history))
    ) and state.batch == len(state.history)
    assert RunState.from_json(json.loads(json.dumps(state.to_json())), store.state_file) == state
    assert RunMeta.from_json(store.meta.to_json(), store.path / "meta.json") == store.meta


def test_records_written_before_they_were_typed_are_read_as_before(finished, tmp_path):
    """Version 1 (no record_version): the fields added over time may be absent."""
    out = _copy(finished, tmp_path)

    def legacy_meta(m):
        for key in ("record_version", "run_id", "log_stamped", "owned_files", "study_sha256"):
            m.pop(key)

    _edit(out / "meta.json", legacy_meta)
    for f in (
        out / "evaluations"
    ).iterdir():  # a folder of a dse before runs had ids: unstamped files
        f.rename(f.with_name(f.name.rsplit("-", 1)[0] + f.suffix))
    _edit(
        out / "state.json",
        lambda s: (
            s.pop("record_version"),
            s.pop("ruled_out"),
            s.pop("ruled_out_kinds"),
            s.pop("keep"),
            [r.pop("asked") for r in s["history"]],
        ),
    )
    (out / "pareto.nc").unlink()  # it carries the run_id the old meta has not
    results = dse.open_results(out)
    assert (
        results.meta.record_version == 1
        and results.meta.run_id == ""
        and results.meta.owned_files == ()
    )
    state = results.state()
    assert state.record_version == 1 and state.ruled_out is None and state.keep == "all"
    assert state.history[0].asked == 0 and state.last.evaluations == 66
    assert len(results.log()) == 66


@pytest.mark.parametrize(
    ("file", "change", "expected"),
    [
        (
            "meta.json",
            lambda m: m.update(input_files="x"),
            "meta.json is damaged: input_files is not valid (got 'x'); allowed: a mapping of file paths",
        ),
        (
            "meta.json",
            lambda m: m.pop("run_id"),
            "meta.json is damaged: run_id is missing; allowed: the run's id",
        ),
        (
            "meta.json",
            lambda m: m.update(owned_files=[3]),
            "meta.json is damaged: owned_files is not valid (got [3])",
        ),
        (
            "meta.json",
            lambda m: m.update(record_version=RECORD_VERSION + 1),
            "which this dse does not read",
        ),
        (
            "state.json",
            lambda s: s["history"][0].update(seconds="fast"),
            "state.json is damaged: history[0].seconds is not valid (got 'fast'); allowed: a number of seconds",
        ),
        (
            "state.json",
            lambda s: s.update(keep="some"),
            "state.json is damaged: keep is not valid (got 'some'); allowed: all, feasible or front",
        ),
        ("state.json", lambda s: s.pop("finished"), "state.json is damaged: finished is missing"),
        (
            "state.json",
            lambda s: s.update(hypervolume_frame={"ideal": "low"}),
            "state.json is damaged: hypervolume_frame.ideal is not valid",
        ),
    ],
)
def test_a_damaged_record_names_its_file_field_value_and_what_is_allowed(
    finished, tmp_path, file, change, expected
):
    out = _copy(finished, tmp_path)
    _edit(out / file, change)
    with pytest.raises(StoreError) as caught:
        dse.open_results(out)
    message = str(caught.value)
    assert str(out / file) in message and expected in message and "\n" not in message
    other = "state.json" if file == "meta.json" else "meta.json"
    assert other not in message  # never blames the other record


def test_the_command_line_says_a_damaged_meta_json_in_one_line(finished, tmp_path):
    out = _copy(finished, tmp_path)
    _edit(out / "meta.json", lambda m: m.update(input_files="x"))
    for command in ("status", "resume"):
        proc = run_cli(command, str(out))
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert "meta.json is damaged: input_files is not valid (got 'x')" in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_records_are_frozen():
    record = BatchRecord(batch=0, evaluations=3)
    with pytest.raises(AttributeError):
        record.evaluations = 4  # type: ignore[misc]
    assert RunState().hypervolume_frame == HypervolumeFrame() and RunState().evaluations == 0

"""The evaluation log at scale: integer keys, the key index, chunk sizes, keep policies,
the streamed evaluations dataset, and one integrity check for every reading command."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.feather as feather
import pytest
import xarray as xr

import dse
from conftest import log_rows, run_cli, toy_study, write_study
from dse import datasets
from dse.errors import StoreError
from dse.execution.base import ChunkSizer
from dse.keyindex import KeyIndex
from dse.results import open_results
from dse.space import Parameter, Space, expand


def test_key_index_finds_every_added_key_and_nothing_else():
    rng = np.random.default_rng(0)
    keys = rng.choice(2**62, size=50_000, replace=False).astype(np.int64)
    index = KeyIndex()
    for lo in range(0, 50_000, 3_000):  # many adds: runs are merged as they grow
        index.add(keys[lo : lo + 3_000], np.arange(lo, min(lo + 3_000, 50_000)))
    assert len(index) == 50_000 and len(index._runs) <= 16
    probe = np.concatenate([keys[::7], rng.choice(2**62, size=1_000).astype(np.int64)])
    found = index.find(probe)
    np.testing.assert_array_equal(found[: len(keys[::7])], np.arange(0, 50_000, 7))
    assert (found[len(keys[::7]) :] == -1).sum() >= 999  # random keys are (almost surely) absent


def test_key_index_of_sorted_and_interleaved_runs_finds_what_a_dict_would():
    """Sorted adds (an enumeration's: merged by concatenation, no sort) and interleaved or
    unsorted ones (merged by a sort) find the same locations as a dict of the first add."""
    rng = np.random.default_rng(1)
    ascending = np.arange(0, 40_000, dtype=np.int64)
    shuffled = rng.permutation(np.arange(20_000, 60_000, dtype=np.int64))  # overlaps the first
    index, first = KeyIndex(), {}
    loc = 0
    for part in [*np.array_split(ascending, 7), *np.array_split(shuffled, 5)]:
        locs = np.arange(loc, loc + len(part))
        index.add(part, locs)
        for k, at in zip(part.tolist(), locs.tolist(), strict=True):
            first.setdefault(k, at)
        loc += len(part)
    probe = np.arange(-5, 60_005, dtype=np.int64)
    expected = np.array([first.get(k, -1) for k in probe.tolist()])
    found = index.find(probe)
    hit = expected >= 0
    np.testing.assert_array_equal(found[~hit], -1)
    # a key added twice keeps both entries; a lookup gives one of them, of that key
    twice = np.isin(probe, np.arange(20_000, 40_000))
    np.testing.assert_array_equal(found[hit & ~twice], expected[hit & ~twice])
    assert (found[twice] >= 0).all()
    assert all(index._runs[i][0][-1] >= index._runs[i][0][0] for i in range(len(index._runs)))
    for keys, _ in index._runs:
        assert (np.diff(keys) >= 0).all()


def test_key_index_keeps_an_enumerations_chunks_as_intervals_and_finds_what_a_dict_would():
    """Consecutive keys at consecutive locations (an enumeration's chunks, in any order) are
    kept as intervals, not arrays; one that overlaps an interval, or whose locations are not
    consecutive, is a run; lookups find what a dict of the first add would."""
    index, first = KeyIndex(), {}
    parts = [
        (np.arange(1_000, 2_000), np.arange(0, 1_000)),
        (np.arange(0, 1_000), np.arange(5_000, 6_000)),  # before the first: still an interval
        (np.arange(3_000, 3_500), np.arange(7_000, 7_500)),
        (np.arange(1_500, 2_500), np.arange(9_000, 10_000)),  # overlaps: a run
        (np.arange(4_000, 4_010), np.arange(0, 20, 2)),  # locations not consecutive: a run
    ]
    for keys, locs in parts:
        index.add(keys, locs)
        for k, at in zip(keys.tolist(), locs.tolist(), strict=True):
            first.setdefault(k, at)
    assert len(index._first) == 3 and len(index) == sum(len(k) for k, _ in parts)
    assert sum(len(k) for k, _ in index._runs) == 1_010  # only the two that are not intervals
    probe = np.arange(-5, 4_100, dtype=np.int64)
    found = index.find(probe)
    expected = np.array([first.get(k, -1) for k in probe.tolist()])
    twice = (probe >= 1_500) & (probe < 2_000)  # a key added twice: either of its locations
    np.testing.assert_array_equal(found[~twice], expected[~twice])
    assert np.isin(
        found[twice], np.concatenate([np.arange(500, 1_000), np.arange(9_000, 9_500)])
    ).all()


def test_key_index_finds_a_range_of_keys_as_it_finds_them_one_by_one():
    """An enumeration's batch (consecutive keys) is looked up by slices of the intervals and
    runs it overlaps, or per key where it overlaps many intervals: the same locations as the
    keys looked up out of order (per key), also where a key was added twice."""
    rng = np.random.default_rng(7)
    index, at = KeyIndex(), 0
    for lo in range(0, 20_000, 100):  # 200 intervals of 60 keys, gaps between them
        index.add(np.arange(lo, lo + 60), np.arange(at, at + 60))
        at += 60
    for _ in range(3):  # runs, some keys also in intervals
        keys = rng.choice(25_000, 500, replace=False)
        index.add(keys, np.arange(at, at + 500))
        at += 500
    for lo, n in [(-10, 50), (0, 1), (150, 3_000), (5_030, 40), (0, 25_000), (19_990, 9_000)]:
        probe = np.arange(lo, lo + n, dtype=np.int64)
        np.testing.assert_array_equal(index.find(probe), index.find(probe[::-1])[::-1])
    assert (index.find(np.arange(30_000, 30_100)) == -1).all()


def test_key_index_adds_a_range_as_it_adds_its_arrays_and_tells_whether_a_range_is_held():
    """A range added by its first key, count and first location (an enumeration's log file)
    gives the same index as its two arrays, overlapping or not; :meth:`KeyIndex.holds_any`
    answers as a lookup of every key of the range would."""
    rng = np.random.default_rng(3)
    parts = [(1_000, 1_000, 0), (0, 1_000, 5_000), (1_500, 1_000, 9_000), (7, 1, 20_000)]
    by_range, by_arrays = KeyIndex(), KeyIndex()
    for first, n, at in parts:  # the third overlaps the first (a run), the last is one key
        by_range.add_range(first, n, at)
        by_arrays.add(np.arange(first, first + n), np.arange(at, at + n))
        scattered = rng.choice(np.arange(30_000, 40_000), 50, replace=False)  # a run each
        by_range.add(scattered, np.arange(50))
        by_arrays.add(scattered, np.arange(50))
    for name in ("_first", "_size", "_at"):
        np.testing.assert_array_equal(getattr(by_range, name), getattr(by_arrays, name))
    assert len(by_range._first) == 2 and len(by_range) == len(by_arrays)
    probe = np.arange(-5, 40_000, dtype=np.int64)
    np.testing.assert_array_equal(by_range.find(probe), by_arrays.find(probe))
    sparse = KeyIndex()
    sparse.add_range(100, 50, 0)
    sparse.add(np.array([400, 300, 700]), np.array([1, 2, 3]))  # a run
    for lo, end in [(0, 100), (0, 101), (149, 160), (150, 300), (150, 301), (701, 900), (0, 10**6)]:
        expected = bool((sparse.find(np.arange(lo, end)) >= 0).any())
        assert sparse.holds_any(lo, end) == expected, (lo, end)
    assert not KeyIndex().holds_any(0, 10)


def test_keys_are_grid_positions_in_a_discrete_space_and_hashes_with_a_real_parameter():
    discrete = Space([expand("a", [1, 2, 3]), expand("b", ["x", "y"]), expand("c", [0.5, 1.5])])
    table = discrete.from_indices(discrete.indices_of(np.arange(12)))
    np.testing.assert_array_equal(discrete.keys(table), np.arange(12))
    assert discrete.indexable
    mixed = Space([expand("a", [1, 2]), Parameter("r", "real", None, 0.0, 1.0)])
    rows = pd.DataFrame({"a": [1, 2, 1, 1], "r": [0.25, 0.25, 0.75, 0.25]})
    keys = mixed.keys(rows)
    assert not mixed.indexable and keys[0] == keys[3] and len(set(keys[:3])) == 3
    with pytest.raises(ValueError, match="not one of the space.s"):
        discrete.keys(table.assign(a=7))


def test_chunks_start_small_then_follow_the_measured_cost():
    sizer = ChunkSizer(workers=2, target_s=0.5, probe=8, max_rows=100_000)
    assert sizer.next(1_000_000) == 8
    sizer.observe(
        8, 8 * 1e-4
    )  # 0.1 ms per candidate: 5,000 would be 0.5 s, but growth is at most 16x
    assert sizer.next(1_000_000) == 128
    sizer.observe(128, 128 * 1e-4)
    assert sizer.next(1_000_000) == 2_041  # 16 x 128 = 2,048 at most: 490 equal tasks
    sizer.observe(2_041, 2_041 * 1e-4)
    # target reached: 1,000,000 in 200 equal tasks of 5,000 (a multiple of the 2 workers)
    sizes, left = [], 1_000_000
    while left:
        sizes.append(sizer.next(left))
        left -= sizes[-1]
    assert sizes == [5_000] * 200


def test_a_cost_measured_too_high_once_is_revised_by_the_equal_tasks_that_follow():
    sizer = ChunkSizer(workers=2, target_s=0.5, probe=8, max_rows=131_072)
    sizer.observe(50_000, 1.0)  # 20 us per candidate: a first large task paying its page faults
    first = sizer.next(250_000)
    assert 20_000 <= first <= 25_000  # about 0.5 s of work at that cost, in equal tasks
    for _ in range(4):  # the equal tasks that follow, a little smaller than 50,000, at 4 us each
        sizer.observe(first, first * 4e-6)
    assert sizer.next(250_000) > 2 * first  # grown with the cost measured since
    sizer.observe(1_000, 10.0)  # far smaller than the task that set the cost: left out
    assert sizer.cost_s < 10e-6


def test_a_batch_is_cut_in_equal_tasks_a_multiple_of_the_workers():
    sizer = ChunkSizer(workers=2, target_s=0.5, probe=8, max_rows=65_536)
    sizer.observe(65_536, 0.01)  # cheap: max_rows bounds the task
    sizes, left = [], 100_000
    while left:
        sizes.append(sizer.next(left))
        left -= sizes[-1]
    assert sizes == [50_000, 50_000]  # not 65,536 + 34,464: the workers finish together
    sizes, left = [], 300_001
    while left:
        sizes.append(sizer.next(left))
        left -= sizes[-1]
    assert (
        len(sizes) == 6
        and sum(sizes) == 300_001
        and max(sizes) - min(sizes) <= 1
        and max(sizes) <= 65_536
    )
    assert (
        sizer.next(3) == 2 and sizer.next(1) == 1 and sizer.next(0) == 0
    )  # a tiny rest still goes to both workers
    assert ChunkSizer(fixed=64).next(1_000) == 64


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("log")
    study = toy_study(
        output=str(tmp / "out"), search={"options": {"chunk": 20}}
    )  # 4 batches, 4 files
    dse.run(dse.load_study(write_study(tmp, study)))
    return tmp / "out"


@pytest.mark.parametrize("keep", ["feasible", "front"])
def test_a_study_keeps_less_and_gets_the_same_front(tmp_path, finished, keep):
    out = tmp_path / keep
    study = toy_study(output={"path": str(out), "keep": keep}, search={"options": {"chunk": 20}})
    result = dse.run(dse.load_study(write_study(tmp_path, study)))
    with (
        xr.open_dataset(finished / "pareto.nc") as full,
        xr.open_dataset(out / "pareto.nc") as kept,
    ):
        assert sorted(full["key"].values) == sorted(kept["key"].values)
    with (
        open_results(out).open_dataset(front=False) as ev,
        open_results(finished).open_dataset(front=False) as full,
    ):
        assert ev.attrs["log_keeps"] == keep
        assert ev["y"].dtype == full["y"].dtype == np.int64  # not float: the cleared cells are gone
        assert (
            ev["meets_constraints"].values.astype(bool).all()
            if keep == "feasible"
            else ev.sizes["candidate"] >= 11
        )
        assert ev.sizes["candidate"] < 66
    assert result.counts["evaluations"] == 66  # every evaluation is counted and in the log
    log = pd.concat([pd.read_feather(f) for f in sorted((out / "evaluations").glob("*.arrow"))])
    assert len(log) == 66 and log["f1"].notna().all() and log["x"].isna().any()
    # keep: front drops most rows: a dropped cell holds no value under its null either, and
    # the log shrinks as the study asks (keep: feasible drops few and leaves the values under
    # the mask, uncopied: logrows.blank)
    for f in sorted((out / "evaluations").glob("*.arrow")) if keep == "front" else ():
        x = feather.read_table(f).column("x").combine_chunks()
        values = np.frombuffer(x.buffers()[1], dtype=np.float64, count=len(x), offset=x.offset * 8)
        assert (values[x.is_null().to_numpy(zero_copy_only=False)] == 0).all(), f
    proc = run_cli("status", str(out))
    assert proc.returncode == 0 and "evaluations 66" in proc.stdout
    assert {"feasible": "the feasible evaluations", "front": "on the front"}[keep] in proc.stdout
    # the report counts every evaluation and what ruled candidates out, not the kept rows
    assert run_cli("report", str(out), "-o", str(tmp_path / "r.html")).returncode == 0
    with open_results(finished).open_dataset(front=False) as full:
        feasible = int(full["meets_constraints"].values.astype(bool).sum())
    page = re.sub(r"<[^>]+>", " ", (tmp_path / "r.html").read_text())
    assert re.search(r"evaluations\s+66\s", page) and re.search(
        rf"within constraints\s+{feasible}\s", page
    ), page[:2000]
    assert "counts and tallies below are of every evaluation" in page
    # export --all says what the run kept of the 66
    proc = run_cli("export", str(out), "--all", "-o", str(tmp_path / "all.csv"))
    exported = len(pd.read_csv(tmp_path / "all.csv"))
    assert exported < 66
    assert (
        proc.returncode == 0
        and f"(output.keep: {keep}): {exported} of the 66 evaluated" in proc.stderr
    ), proc.stderr
    files = sorted((out / "evaluations").glob("*.arrow"))
    again = dse.resume(out)  # resume reads the narrow columns of dropped rows: nothing re-evaluated
    assert (
        again.counts["evaluations"] == 66 and sorted((out / "evaluations").glob("*.arrow")) == files
    )


def test_a_task_larger_than_a_piece_is_evaluated_and_finished_piece_by_piece(tmp_path, monkeypatch):
    """A task of more than PIECE_ROWS candidates is evaluated and made into log rows a piece
    at a time where it runs (a worker's memory stays that of one piece), and gives back the
    same rows as one call over the whole task; the in-process executor yields each piece at
    its offset, and a task lost to the executor fails piece by piece too."""
    from dse.api import plan
    from dse.execution import base
    from dse.execution.base import EvaluatorRef, Pieces, evaluate_chunk, pieces
    from dse.execution.candidates import GridCandidates
    from dse.execution.inprocess import InProcessExecutor
    from dse.logrows import LogRows

    p = plan(write_study(tmp_path, toy_study()))
    ref, keys = EvaluatorRef.of(p.study.evaluator), np.arange(int(p.space.size), dtype=np.int64)
    sizes: list[int] = []
    log_rows = LogRows(p.study, tuple(p.space.names), 0, ("f1", "f2", "feasible", "reason"))

    def finish(candidates, result):
        sizes.append(len(candidates))
        return log_rows(candidates, result)

    def rows(table):  # the log rows but the measured time
        return table.drop_columns(["elapsed_s"]).to_pandas()

    whole, _ = evaluate_chunk(ref, GridCandidates(p.space, keys), finish)
    assert sizes == [66] and not isinstance(whole, Pieces)
    monkeypatch.setattr(base, "PIECE_ROWS", 16)
    sizes.clear()
    result, seconds = evaluate_chunk(ref, GridCandidates(p.space, keys), finish)
    assert isinstance(result, Pieces) and sizes == [16, 16, 16, 16, 2] and seconds > 0
    assert [at for at, _ in pieces(result)] == [0, 16, 32, 48, 64]
    pd.testing.assert_frame_equal(
        pd.concat([rows(c.table()) for _, c in pieces(result)], ignore_index=True),
        rows(whole.table()),
    )
    table, _ = evaluate_chunk(ref, GridCandidates(p.space, keys))  # no finish: one table
    assert list(table.index) == list(range(66)) and table["status"].eq("ok").all()

    executor = InProcessExecutor(p.study.evaluator, chunk_size=40)
    sizes.clear()
    got = list(executor.results(GridCandidates(p.space, keys), finish=finish))
    assert [at for at, _ in got] == [0, 16, 32, 40, 56] and sizes == [16, 16, 8, 16, 10]
    assert np.concatenate([c.keys() for _, c in got]).tolist() == keys.tolist()
    lost = executor._failed(GridCandidates(p.space, keys[:40]), RuntimeError("gone"), finish)
    assert [len(c) for _, c in pieces(lost)] == [16, 16, 8]
    assert all(
        set(c.table().column("error").to_pylist()) == {"RuntimeError: gone"}
        for _, c in pieces(lost)
    )


def test_the_log_finds_a_batchs_files_and_a_files_place_by_bisection(tmp_path):
    """A batch's next log file name and a written file's place in the log are found in the
    sorted listing by bisection: the same as scanning it, whatever the batch numbers' widths
    (seven digits sort before six)."""
    store = _toy_store(tmp_path / "run")
    paths = [store.write_group(b, b"x") for b in (3, 1, 3, 1_000_000, 999_999, 1, 1_000_000)]
    files = store.log_files()
    assert [store.log_position(p) for p in paths] == [files.index(p) for p in paths]
    for batch in (1, 3, 999_999, 1_000_000, 2):
        prefix = f"b{batch:06d}-"
        assert store._files_of_batch(batch) == [f for f in files if f.name.startswith(prefix)]
    chunks = [int(p.name.split("-")[1][1:]) for p in paths]
    assert chunks == [0, 0, 1, 0, 0, 1, 1]  # each batch's files numbered in order
    with pytest.raises(ValueError, match="not a file of the log"):
        store.log_position(tmp_path / "elsewhere.arrow")


def test_an_evaluated_chunk_travels_with_its_log_bytes_out_of_band(tmp_path):
    """A worker's chunk is pickled with protocol 5 (as dask sends a result): its encoded log
    rows go as a buffer of their own, not copied into the pickle, and arrive intact; the
    rest (the decoded columns, the summary) travel in the pickle, not as one buffer each
    (every buffer is a frame of its own through dask)."""
    import pickle

    from dse.api import plan
    from dse.execution.base import EvaluatorRef, evaluate_chunk
    from dse.execution.candidates import GridCandidates
    from dse.logrows import LogRows

    p = plan(write_study(tmp_path, toy_study()))
    finish = LogRows(
        p.study, tuple(p.space.names), 0, ("f1", "f2", "feasible", "status", "reason", "error")
    )
    keys = np.arange(int(p.space.size), dtype=np.int64)
    chunk, _ = evaluate_chunk(
        EvaluatorRef.of(p.study.evaluator), GridCandidates(p.space, keys), finish
    )
    buffers = []
    pickled = pickle.dumps(chunk, protocol=5, buffer_callback=buffers.append)
    assert [b.raw().nbytes for b in buffers] == [chunk.data.size]  # the log bytes as they are
    assert len(pickle.dumps(chunk, protocol=5)) - len(pickled) >= chunk.data.size
    back = pickle.loads(pickled, buffers=buffers)
    assert (
        back.table().equals(chunk.table())
        and back.table().column("key").to_pylist() == keys.tolist()
    )
    store = _toy_store(tmp_path / "run")
    assert feather.read_table(store.write_group(0, back.data)).equals(
        chunk.table()
    )  # a file takes it as bytes


def test_a_chunk_of_consecutive_grid_positions_travels_as_its_first_and_count(tmp_path):
    """Pickled for a worker, consecutive positions (an enumeration's chunk) take the size of
    the space, not 8 bytes each, and come back as a range (no array is made where the task
    is only unpickled: a local cluster's scheduler); any other positions travel as they
    are; each comes back the same candidates, in pieces too."""
    import pickle

    from dse.api import plan
    from dse.execution.candidates import GridCandidates, part

    p = plan(write_study(tmp_path, toy_study()))
    n = int(p.space.size)
    whole = GridCandidates(p.space, np.arange(n, dtype=np.int64))
    alone = len(pickle.dumps(p.space))
    for keys in (np.arange(3, n), np.arange(n)[::-1].copy(), np.array([0, 2, 1, 3]), np.arange(1)):
        grid = GridCandidates(p.space, keys.astype(np.int64))
        pickled = pickle.dumps(grid, protocol=5)
        back = pickle.loads(pickled)
        consecutive = len(keys) > 1 and (np.diff(keys) == 1).all()
        assert isinstance(back.keys, range) == consecutive
        assert back.key_array().dtype == np.int64 and back.key_array().tolist() == keys.tolist()
        pd.testing.assert_frame_equal(back.frame(), grid.frame())
        assert (len(pickled) < alone + 200) == consecutive or len(keys) * 8 < 200
        if len(keys) > 4:  # a piece of it, as a worker evaluates a large task
            pd.testing.assert_frame_equal(part(back, 2, 5).frame(), grid.frame().iloc[2:5])
            again = pickle.loads(pickle.dumps(part(back, 2, 5)))
            pd.testing.assert_frame_equal(again.frame(), grid.frame().iloc[2:5])
    assert len(pickle.dumps(part(whole, 10, n))) < alone + 200


def test_a_chunk_the_worker_writes_itself_is_committed_in_order_with_the_same_rows(
    tmp_path, monkeypatch
):
    """Where the workers share the run's file system (a local cluster), a large chunk's log
    file is written and fsynced by the worker in a private folder of the log, and the run
    renames it into the log in order: the same file as the run writing the bytes itself,
    the keys learned, nothing left behind; a small chunk still travels as bytes. A staged
    file the run never takes is removed with its folder."""
    import dse.logrows as logrows
    from dse.api import plan
    from dse.execution.base import EvaluatorRef, evaluate_chunk
    from dse.execution.candidates import GridCandidates
    from dse.files import discard_staged
    from dse.logrows import LogRows

    monkeypatch.setattr(logrows, "STAGED_ROWS", 20)
    p = plan(write_study(tmp_path, toy_study()))
    store = _toy_store(tmp_path / "run")
    narrow = ("f1", "f2", "feasible", "status", "reason", "error")
    ref = EvaluatorRef.of(p.study.evaluator)
    keys = np.arange(int(p.space.size), dtype=np.int64)
    staging = LogRows(p.study, tuple(p.space.names), 0, narrow, stage_in=str(store.evaluations_dir))
    sending = LogRows(p.study, tuple(p.space.names), 0, narrow)
    big, _ = evaluate_chunk(ref, GridCandidates(p.space, keys[:40]), staging)
    small, _ = evaluate_chunk(ref, GridCandidates(p.space, keys[40:50]), staging)
    assert big.data is None and Path(big.staged).is_file() and small.staged is None
    assert Path(big.staged).parent.parent == store.evaluations_dir
    assert store.log_files() == [] and store.check_log() == 0  # staged: not in the log yet
    expected, _ = evaluate_chunk(ref, GridCandidates(p.space, keys[:40]), sending)
    writer = store.writer(0)
    writer.rows = 1  # the small chunk is a group of its own, after the big one
    writer.add(big)
    writer.add(small)
    writer.flush()
    files = store.log_files()
    assert len(files) == 2
    timeless = ["elapsed_s"]  # (the time each call took: the one thing that differs)
    assert (
        feather.read_table(files[0])
        .drop_columns(timeless)
        .equals(expected.table().drop_columns(timeless))
    )
    assert [k.tolist() for _, k in writer.written] == [keys[:40].tolist(), keys[40:50].tolist()]
    assert [f.name for f in store.evaluations_dir.iterdir() if f.name.startswith(".")] == []
    lost, _ = evaluate_chunk(ref, GridCandidates(p.space, keys[:20]), staging)
    discard_staged(Path(lost.staged))
    assert sorted(store.evaluations_dir.iterdir()) == files


def test_a_chunk_whose_staged_file_fails_part_way_goes_back_as_bytes_and_leaves_nothing(
    tmp_path, monkeypatch
):
    """A worker encodes its chunk straight into the staged file; when that write fails part
    way (a full disk), the half-written file and its private folder are removed and the
    chunk's log rows go back as bytes, the rows the file would have held."""
    import dse.logrows as logrows
    from dse.api import plan
    from dse.execution.base import EvaluatorRef, evaluate_chunk
    from dse.execution.candidates import GridCandidates
    from dse.logrows import LogRows
    from dse.store import decode

    monkeypatch.setattr(logrows, "STAGED_ROWS", 20)
    p = plan(write_study(tmp_path, toy_study()))
    store = _toy_store(tmp_path / "run")
    narrow = ("f1", "f2", "feasible", "status", "reason", "error")
    ref = EvaluatorRef.of(p.study.evaluator)
    keys = np.arange(40, dtype=np.int64)
    whole = logrows.write_encoded

    def full_disk(table, file):
        file.write(b"ARROW1")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(logrows, "write_encoded", full_disk)
    staging = LogRows(p.study, tuple(p.space.names), 0, narrow, stage_in=str(store.evaluations_dir))
    chunk, _ = evaluate_chunk(ref, GridCandidates(p.space, keys), staging)
    assert chunk.staged is None and chunk.data is not None
    assert list(store.evaluations_dir.iterdir()) == []
    monkeypatch.setattr(logrows, "write_encoded", whole)
    expected, _ = evaluate_chunk(ref, GridCandidates(p.space, keys), staging)
    timeless = ["elapsed_s"]
    assert decode(chunk.data).drop_columns(timeless).equals(expected.table().drop_columns(timeless))


def test_a_large_log_is_written_in_blocks_and_equals_the_one_piece_dataset(
    finished, monkeypatch, tmp_path
):
    results = dse.open_results(finished)
    plan = dse.api.plan(results.store.study_file)
    whole = tmp_path / "whole.nc"
    datasets.write_log_dataset(results.store, plan.study, plan.evaluator, plan.space, whole)
    monkeypatch.setattr(datasets, "EAGER_ROWS", 10)
    monkeypatch.setattr(datasets, "BLOCK_ROWS", 20)  # a block per log file: 20, 20, 20, 6 rows
    lazy = datasets.log_dataset(results.store, plan.study, plan.evaluator, plan.space)
    assert lazy["f1"].data.chunks[0] == (20, 20, 20, 6)
    blocks = tmp_path / "blocks.nc"
    datasets.write_log_dataset(results.store, plan.study, plan.evaluator, plan.space, blocks)
    with xr.open_dataset(whole) as a, xr.open_dataset(blocks) as b:
        xr.testing.assert_identical(a, b)
        assert b["reason"].dtype.kind in "OU" and "shape b with y > 8 is infeasible" in set(
            b["reason"].values
        )


COMMANDS = [
    ("status",),
    ("resume", "--quiet"),
    ("export", "-o", "{tmp}/x.csv"),
    ("plot", "-o", "{tmp}/x.png"),
    ("report", "-o", "{tmp}/x.html"),
    ("show",),
]


def test_a_folder_whose_log_is_gone_gets_one_message_from_every_command(finished, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    shutil.rmtree(out / "evaluations")
    messages = set()
    for command, *args in COMMANDS:
        proc = run_cli(command, str(out), *(a.format(tmp=tmp_path) for a in args))
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (command, proc.stderr)
        messages.add(proc.stderr.strip())
    assert len(messages) == 1 and "state.json records 66 evaluations but" in messages.pop()
    with pytest.raises(StoreError, match="holds 0"):
        dse.open_results(out)


def test_a_log_written_with_zstd_by_earlier_versions_is_read_as_the_lz4_one(finished, tmp_path):
    """The log's buffers are LZ4 frames; folders written before that have zstd (level -4 or
    1): the same rows come back from either, and a resumed run may mix them."""
    import pyarrow as pa

    from dse.store import ResultStore

    out = tmp_path / "out"
    shutil.copytree(finished, out)
    files = sorted((out / "evaluations").glob("*.arrow"))
    lz4_frame, zstd_frame = b"\x04\x22\x4d\x18", b"\x28\xb5\x2f\xfd"  # the frames' magic
    assert all(lz4_frame in f.read_bytes() and zstd_frame not in f.read_bytes() for f in files)
    for f, level in zip(files, (-4, 1, -4, 1), strict=False):
        table = feather.read_table(f)
        options = pa.ipc.IpcWriteOptions(compression=pa.Codec("zstd", level))
        with (
            pa.OSFile(str(f), "wb") as sink,
            pa.ipc.new_file(sink, table.schema, options=options) as w,
        ):
            w.write_table(table)
        assert zstd_frame in f.read_bytes()
    pd.testing.assert_frame_equal(
        ResultStore.open(out).load_evaluations(), ResultStore.open(finished).load_evaluations()
    )


def test_a_run_stopped_with_a_zstd_log_resumes_to_the_front_of_an_uninterrupted_run(tmp_path):
    """A run that earlier versions stopped (its log zstd-compressed) resumes with this one,
    which adds LZ4 files: each candidate once, the same front as a run never stopped."""
    import pyarrow as pa

    from dse.progress import ProgressSink

    class StopAfterTwoBatches(ProgressSink):
        def advance(self, n: int, record: dict) -> None:
            if record.get("evaluations", 0) >= 40 and "hypervolume" in record:
                raise KeyboardInterrupt

    study = {"search": {"algorithm": "random", "budget": 100, "batch_size": 20, "seed": 4}}
    whole = dse.run(
        dse.load_study(
            write_study(tmp_path, toy_study(output=str(tmp_path / "a"), **study), "a.yaml")
        )
    )
    out = tmp_path / "b"
    path = write_study(tmp_path, toy_study(output=str(out), **study), "b.yaml")
    assert dse.run(dse.load_study(path), progress=StopAfterTwoBatches()).interrupted
    stopped = sorted((out / "evaluations").glob("*.arrow"))
    assert stopped and 40 <= len(log_rows(out)) < 100
    for f in stopped:  # as earlier versions wrote them
        table = feather.read_table(f)
        options = pa.ipc.IpcWriteOptions(compression=pa.Codec("zstd", -4))
        with (
            pa.OSFile(str(f), "wb") as sink,
            pa.ipc.new_file(sink, table.schema, options=options) as w,
        ):
            w.write_table(table)
    resumed = dse.resume(out)
    added = sorted(set((out / "evaluations").glob("*.arrow")) - set(stopped))
    assert added and all(b"\x04\x22\x4d\x18" in f.read_bytes() for f in added)  # LZ4 frames
    assert all(b"\x28\xb5\x2f\xfd" in f.read_bytes() for f in stopped)  # zstd frames
    keys = log_rows(out)["key"]  # as written: a candidate written twice shows twice
    assert keys.is_unique and set(keys) == set(log_rows(tmp_path / "a")["key"])
    pd.testing.assert_frame_equal(
        resumed.front.reset_index(drop=True).drop(columns="elapsed_s"),
        whole.front.reset_index(drop=True).drop(columns="elapsed_s"),
    )


def test_datasets_older_than_the_log_are_not_served(finished, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    first = sorted((out / "evaluations").glob("*.arrow"))[0]
    shutil.copy(
        first, out / "evaluations" / first.name.replace("b000000-", "b000099-")
    )  # rows the datasets lack
    for command, *args in COMMANDS[2:]:
        proc = run_cli(command, str(out), *(a.format(tmp=tmp_path) for a in args))
        assert (
            proc.returncode == 2
            and "was written from 66 evaluations, but the log now holds" in proc.stderr
        )
    assert run_cli("status", str(out)).returncode == 0
    assert run_cli("resume", str(out), "--quiet").returncode == 0  # rewrites the datasets
    assert run_cli("export", str(out), "-o", str(tmp_path / "y.csv")).returncode == 0


def test_log_columns_reach_arrow_as_from_pandas_converts_them_and_a_bad_one_is_named():
    import pyarrow as pa

    from dse.logrows import arrow_column
    from dse.store import encode

    frame = pd.DataFrame(
        {
            "f": [1.0, np.nan, np.inf],
            "g": np.array([0.5, 2.0, np.nan], np.float32),
            "h": [0.25, -np.inf, 3.0],
            "i": [1, 2, 3],
            "b": [True, False, True],
            "s": pd.Series(["a", None, "c"], dtype="str"),
            "o": pd.Series([None, "x", np.nan], dtype=object),
        }
    )
    converted = pa.Table.from_arrays([arrow_column(frame[c]) for c in frame], names=list(frame))
    assert converted.equals(
        pa.Table.from_pandas(frame, preserve_index=False).replace_schema_metadata(None)
    )
    assert converted.column("f").null_count == 1 and converted.column("o").null_count == 2
    assert converted.column("g").null_count == 1 and converted.column("h").null_count == 0
    # the same log file bytes as the table pandas' conversion gives
    assert (
        encode(converted).to_pybytes()
        == encode(
            pa.Table.from_pandas(frame, preserve_index=False).replace_schema_metadata(None)
        ).to_pybytes()
    )
    with pytest.raises(pa.ArrowInvalid, match="column 'note'"):
        arrow_column(pd.Series([1, "x"], name="note", dtype=object))


def test_ctrl_c_while_the_log_writer_waits_finishes_its_writes_first(
    finished, tmp_path, monkeypatch
):
    """A Ctrl-C (or SIGTERM) that arrives while a batch's log groups are being written is
    raised once they are all written: the datasets written next must see the whole log."""
    import _thread
    import signal
    import threading
    import time

    from dse.store import ResultStore

    run = tmp_path / "run"
    shutil.copytree(finished, run)
    store = ResultStore.open(run)
    table = next(iter(store.scan()))[1]
    before = len(store.log_files())
    slow = store.write_group

    def write_slowly(batch, data):
        time.sleep(0.3)
        return slow(batch, data)

    monkeypatch.setattr(store, "write_group", write_slowly)
    writer = store.writer(99)
    writer.rows = 1  # every table its own group: three writes of 0.3 s each
    for _ in range(3):
        writer.add(table)
    submit = writer._submit

    def submit_slowly():  # what flush does first (the buffered rows): the Ctrl-C lands here
        time.sleep(0.5)
        submit()

    writer._submit = submit_slowly
    # Python's own Ctrl-C handler (a library imported earlier in the session may have set another)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Timer(0.1, _thread.interrupt_main).start()
        with pytest.raises(KeyboardInterrupt):
            writer.flush()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert len(store.log_files()) == before + 3


def test_ctrl_c_as_the_log_writer_starts_its_thread_loses_no_write(tmp_path, monkeypatch):
    """A Ctrl-C between the pool starting its write thread and noting it: flush did not wait
    for that thread, and its write landed after the datasets were written (stale datasets).
    The thread starts with the writer now, signals held back."""
    import signal
    import threading
    import time

    import pyarrow as pa

    from dse.store import LogWriter

    store = _toy_store(tmp_path / "out", "t")
    writer = LogWriter(store, 0, rows=1)
    start, write = threading.Thread.start, store.write_group

    def start_then_ctrl_c(thread):
        start(thread)
        if thread.name.startswith("dse-log"):
            signal.raise_signal(signal.SIGINT)

    def slow_write(batch, data):
        time.sleep(0.5)
        return write(batch, data)

    monkeypatch.setattr(threading.Thread, "start", start_then_ctrl_c)
    monkeypatch.setattr(store, "write_group", slow_write)
    table = pa.table(
        {
            "key": np.arange(3, dtype=np.int64),
            "batch": np.zeros(3, np.int32),
            "status": ["ok"] * 3,
            "feasible": [True] * 3,
            "kept": [True] * 3,
        }
    )
    try:
        writer.add(table)
    except KeyboardInterrupt:
        pass
    writer.flush()
    assert len(store.log_files()) == 1  # written when flush returned, not after


CTRL_C_WHILE_WRITING = r"""
import os, signal, sys, threading, time
from pathlib import Path
import numpy as np, xarray as xr
from dse.datasets import write_netcdf

signal.signal(signal.SIGINT, signal.default_int_handler)  # also when pytest was started with it ignored
out = Path(sys.argv[1])
ds = xr.Dataset({f"v{i}": ("candidate", np.random.default_rng(i).random(2_000_000)) for i in range(24)})
writers = set()  # the threads xarray's writer ran on: never the one Ctrl-C interrupts
to_netcdf = xr.Dataset.to_netcdf
def recorded(self, *args, **kwargs):
    writers.add(threading.current_thread() is threading.main_thread())
    return to_netcdf(self, *args, **kwargs)
xr.Dataset.to_netcdf = recorded

def press_ctrl_c():  # once the write has begun, as a user would
    while not list(out.parent.glob(f".{out.name}.*")):
        time.sleep(0.001)
    os.kill(os.getpid(), signal.SIGINT)

threading.Thread(target=press_ctrl_c, daemon=True).start()
try:
    write_netcdf(ds, out)
    print("not interrupted")
except KeyboardInterrupt:
    left = list(out.parent.glob(f".{out.name}.*"))
    print("interrupted", "tmp left" if left else "tmp removed", "out exists" if out.exists() else "no out")
write_netcdf(ds[["v0"]].isel(candidate=slice(0, 10)), out.with_name("after.nc"))  # the HDF5 lock is free
print("wrote after")
print("writer on the main thread" if True in writers else "writer apart")
"""


def test_ctrl_c_while_a_dataset_is_written_stops_at_once_and_the_next_write_works(tmp_path):
    """A new user's run hung for good after Ctrl-C while its datasets were written: the
    KeyboardInterrupt landed inside xarray's writer, which kept the HDF5 lock its own
    clean-up then waited for. The write runs apart; Ctrl-C ends the wait."""
    import subprocess
    import sys

    script = tmp_path / "ctrl_c.py"
    script.write_text(CTRL_C_WHILE_WRITING)
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "big.nc")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.splitlines() == [
        "interrupted tmp removed no out",
        "wrote after",
        "writer apart",
    ], proc.stdout
    assert xr.open_dataset(tmp_path / "after.nc", engine="h5netcdf")["v0"].size == 10


def test_every_evaluation_is_read_from_the_log_as_the_dataset_written_from_it(finished, tmp_path):
    """No second copy at rest (issue 37): the run leaves no evaluations.nc, and the lazily
    read log (strings, attributes from pareto.nc) equals the netCDF written from it."""
    assert not (finished / "evaluations.nc").exists()
    results = dse.open_results(finished)
    plan = dse.api.plan(results.store.study_file)
    whole = tmp_path / "whole.nc"
    datasets.write_log_dataset(results.store, plan.study, plan.evaluator, plan.space, whole)
    with xr.open_dataset(whole) as a, results.open_dataset(front=False) as lazy:
        assert not lazy["f1"].variable._in_memory  # nothing read yet
        ev = lazy.load()
        xr.testing.assert_equal(a.load(), ev)
        for name in a.variables:
            assert str(a[name].attrs) == str(ev[name].attrs), name
        assert ev.attrs["kind"] == "evaluations" and ev.attrs["log_rows"] == results.log_rows
    with results.open_dataset(front=False, keep=["f1"]) as only:
        assert list(only.data_vars) == ["f1"]


def test_an_evaluations_nc_an_earlier_dse_wrote_is_removed_by_the_next_run(finished, tmp_path):
    """A folder of a dse before issue 37 holds a second copy, evaluations.nc: resume (which
    writes pareto.nc again) removes it, so no stale copy stays beside the log."""
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    (out / "evaluations.nc").write_bytes(b"an old copy")
    again = dse.resume(out)
    assert again.counts["evaluations"] == 66 and not (out / "evaluations.nc").exists()
    with dse.open_results(out).open_dataset(front=False, keep=["f1"]) as ev:
        assert ev.sizes["candidate"] == 66 and list(ev.data_vars) == ["f1"]


def _toy_store(folder, name: str = "toy"):
    """A new results folder for a study ``name`` of the toy evaluator."""
    from dse.store import ResultStore

    return ResultStore.create(
        folder,
        study_text=f"name: {name}\n",
        study_name=name,
        evaluator="toy",
        evaluator_version="1",
    )


def test_a_folder_opened_while_its_run_records_a_batch_is_not_taken_for_damaged(
    finished, monkeypatch
):
    """A running run commits a batch's log files, then records the batch in state.json. A
    reader that counted the log first and read the state after saw, when a batch was
    recorded in between, more evaluations recorded than logged: "damaged" (and `dse status`
    showed the log behind the evaluations). The state is now read first. Here the run
    records a batch of 50 (its files not yet listed) just as the log has been counted."""
    from dataclasses import replace

    from dse.store import ResultStore

    real_state, real_log = ResultStore.load_state, ResultStore.check_log
    counted = []

    def check_log(self, parameters=()):
        rows = real_log(self, parameters)
        counted.append(rows)  # the run records its next batch now
        return rows

    def load_state(self):
        state = real_state(self)
        if not counted:
            return state
        last = replace(state.history[-1], evaluations=state.evaluations + 50)
        return replace(state, history=(*state.history, last))

    monkeypatch.setattr(ResultStore, "check_log", check_log)
    monkeypatch.setattr(ResultStore, "load_state", load_state)
    run = open_results(finished)  # was: StoreError "is damaged: state.json records 116 ..."
    assert run.state_when_opened.evaluations == run.log_rows == 66
    assert run.state().evaluations == 116  # a later read sees the newer state

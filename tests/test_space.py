"""Design-space expansion, enumeration and sampling."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dse.space import Space, candidate_keys, expand
from dse.study import LogSpec, RangeSpec


def test_integer_range_with_step():
    p = expand("n", RangeSpec(range=(8, 64), step=8))
    assert p.kind == "integer" and p.values == (8, 16, 24, 32, 40, 48, 56, 64)


def test_float_range_with_step_includes_the_end_without_rounding_noise():
    p = expand("x", RangeSpec(range=(0.0, 1.0), step=0.1))
    assert p.values[-1] == 1.0 and len(p.values) == 11 and p.values[3] == 0.3


def test_float_range_without_step_is_continuous():
    p = expand("x", RangeSpec(range=(0.5, 2.5)))
    assert p.values is None and (p.low, p.high) == (0.5, 2.5)


def test_log_range_by_base_and_by_count():
    assert expand("b", LogSpec(log=(64, 1024), base=2)).values == (64, 128, 256, 512, 1024)
    p = expand("t", LogSpec(log=(1.0, 100.0), num=3))
    assert p.values == pytest.approx((1.0, 10.0, 100.0))


def test_choices_keep_order_and_kind():
    assert expand("a", ["H100-SXM", "A100-80GB"]).kind == "categorical"
    assert expand("tp", [1, 2, 4]).kind == "integer"
    assert expand("v", [1, 2.5]).kind == "real"


def test_enumeration_visits_every_candidate_once_in_chunks():
    space = Space([expand("a", ["p", "q", "r"]), expand("b", [1, 2]), expand("c", [0.5, 1.5])])
    assert space.size == 12
    frames = list(space.enumerate(chunk_size=5))
    assert [len(f) for f in frames] == [5, 5, 2]
    keys = candidate_keys(pd.concat(frames), space.names)
    assert len(set(keys)) == 12


def test_indices_round_trip_and_sampling_stays_in_the_space():
    space = Space([expand("a", ["p", "q"]), expand("x", RangeSpec(range=(0.0, 1.0)))])
    sample = space.sample(np.random.default_rng(0), 200)
    assert set(sample["a"]) <= {"p", "q"}
    assert sample["x"].between(0.0, 1.0).all()
    again = space.sample(np.random.default_rng(0), 200)
    assert sample.equals(again)


def test_with_fixed_adds_constant_columns():
    space = Space([expand("a", [1, 2])], fixed={"model": "gpt-1.3b"})
    full = space.with_fixed(space.from_indices(np.array([[0], [1]])))
    assert list(full["model"]) == ["gpt-1.3b", "gpt-1.3b"]


def test_grid_positions_value_indices_and_neighbourhoods():
    space = Space(
        [
            expand("a", ["p", "q", "r"]),
            expand("n", [1, 2, 4, 8]),
            expand("on", [True, False]),
            expand("v", [0.5, 1.5]),
        ]
    )
    flat = np.arange(int(space.size))
    idx = space.indices_of(flat)
    assert (space.flat_index(idx) == flat).all()
    assert (space.value_indices(space.from_indices(idx)) == idx).all()
    assert (
        space.value_indices(pd.DataFrame({"a": ["x"], "n": [3], "on": [True], "v": [0.5]}))
        == [[-1, -1, 0, 0]]
    ).all()
    one, two = space.moves(1), space.moves(2)
    # a categorical parameter moves to each other category, an ordered one a step either way
    assert len(one) == 2 + 2 + 1 + 2 and (np.count_nonzero(one, axis=1) == 1).all()
    assert len(two) == (7 * 7 - (4 + 4 + 1 + 4)) // 2 and (np.count_nonzero(two, axis=1) == 2).all()
    start = np.array([[0, 0, 1, 1]])  # p, 1, False, 1.5
    keys, valid = space.neighbours(start, one)
    got = space.from_indices(space.indices_of(keys[valid]))
    assert sorted(map(tuple, got.to_numpy().tolist())) == sorted(
        [
            ("q", 1, False, 1.5),
            ("r", 1, False, 1.5),
            ("p", 2, False, 1.5),
            ("p", 1, True, 1.5),
            ("p", 1, False, 0.5),
        ]
    )
    assert (keys[~valid] == -1).all() and valid.sum() == 5  # n cannot step below 1, v above 1.5


def test_keys_find_every_value_a_missing_text_value_none_and_the_caches_stay_home():
    import pickle

    space = Space(
        [expand("x", [float("nan"), 1.0]), expand("s", ["a", "b"]), expand("f", [True, False])]
    )
    table = space.from_indices(space.indices_of(np.arange(8)))
    assert (space.keys(table) == np.arange(8)).all()  # NaN is a value of x like any other
    assert (
        space.value_indices(table.assign(s=[None, "a", "c", "b"] * 2))[:, 1] == [-1, 0, -1, 1] * 2
    ).all()
    assert table["s"].tolist() == ["a", "a", "b", "b"] * 2 and table["f"].dtype == bool
    copy = pickle.loads(
        pickle.dumps(space)
    )  # what a worker gets with every chunk of grid positions
    assert "_value_columns" in space.__dict__ and "_value_columns" not in copy.__dict__
    assert copy.from_indices(copy.indices_of(np.arange(8))).equals(table)

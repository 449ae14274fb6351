"""The AstraWattch case study (studies/astrawattch-case-study.yaml) run in this process, and
the marginal-efficiency conclusion docs/case-study-marginal-efficiency.md states, computed
from it with `dse sensitivity --where`: the scale-out link clock is an efficiency lever with
ZeRO-3 across the ring (raising it saves energy: the links' own energy is small, the
gathers are exposed, and every per-second power pays for the longer step), and is worth
nothing with the pipeline across the ring. The thresholds are the page's ("Reading the
numbers"); nothing here is a stored result. Also: the energy breakdown's split of the
network into its links and the rest, and `--where`'s refusals."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import dse
from conftest import REPO, run_cli
from dse.outputs import sensitivity as sens

STUDY = REPO / "studies" / "astrawattch-case-study.yaml"
#: the page's thresholds: a lever is worth having when +10 % of it moves the energy to train
#: by more than 0.5 % (|elasticity| > 0.05), and worth nothing below 0.1 % (< 0.01)
LEVER, NOTHING = 0.05, 0.01
ENERGY, TIME = "energy_to_train_j", "time_to_train_s"
KNOB = "scaleout_clock_fraction"
ZERO3 = {"pipeline_parallel": 1, "zero_stage": 3}
PP4 = {"pipeline_parallel": 4}


@pytest.fixture(scope="module")
def case_study(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("astrawattch") / "out"
    dse.run(dse.load_study(STUDY), out, workers=0)
    return out


def _energy(s: sens.Sensitivity) -> sens.Breakdown:
    return next(b for b in s.breakdowns if b.total == "energy_to_train_j")


def _step(s: sens.Sensitivity) -> sens.Breakdown:
    return next(b for b in s.breakdowns if b.total == "step_time_s")


@pytest.mark.parametrize("micro_batch", [1, 4])
def test_with_zero3_across_the_ring_the_scaleout_clock_is_a_lever(case_study, micro_batch):
    where = {**ZERO3, "micro_batch_size": micro_batch}
    s = dse.sensitivity(case_study, "best-energy", global_samples=0, where=where)
    assert {k: s.design[k] for k in where} == where
    e = s.elasticity.loc[KNOB]
    # a faster ring saves energy and time: the documents' efficiency gain
    assert e[ENERGY] < -LEVER and e[TIME] < -LEVER
    energy, step = _energy(s), _step(s)
    share = energy.parts / energy.parts.sum()
    # low direct network energy: the scale-out links are under 1 % of the energy ...
    assert 0 < share["scale-out links"] < 0.01
    # ... and the V² of a faster clock raises it (a positive contribution), but ...
    links = energy.contributions.loc[KNOB, "scale-out links"]
    rest = energy.contributions.loc[KNOB].drop("scale-out links").sum()
    assert links > 0
    # ... high idle energy impact: every per-second power over the shorter step saves > 10x
    # more; the contributions add up to the elasticity
    assert rest < -10 * links
    assert links + rest == pytest.approx(energy.elasticity[KNOB], rel=1e-6)
    # poor overlap: the exposed data-parallel traffic (ZeRO-3's gathers) is > 10 % of the step,
    # and it alone makes the step time's elasticity
    comm = step.parts["data-parallel comm."] / step.parts.sum()
    assert comm > 0.10
    assert step.contributions.loc[KNOB, "data-parallel comm."] == pytest.approx(
        step.elasticity[KNOB], rel=1e-6
    )


@pytest.mark.parametrize(
    ("at", "where"),
    [
        ("knee", PP4),
        ("best-energy", PP4),
        ("best-energy", {"pipeline_parallel": 1, "zero_stage": 1}),
    ],
)
def test_where_the_ring_carries_little_its_clock_is_worth_nothing(case_study, at, where):
    s = dse.sensitivity(case_study, at, global_samples=0, where=where)
    assert {k: s.design[k] for k in where} == where
    assert abs(s.elasticity.loc[KNOB, ENERGY]) < NOTHING
    assert abs(s.elasticity.loc[KNOB, TIME]) < NOTHING
    step = _step(s)
    ring = step.parts[["pipeline-parallel comm.", "data-parallel comm."]].sum()
    assert ring / step.parts.sum() < 0.01  # the stages' sends, or one gradient reduction
    # the GPU clock moves energy and time by far more at the same design
    assert abs(s.elasticity.loc["clock_fraction", TIME]) > 10 * NOTHING


def test_with_the_pipeline_across_the_ring_the_network_lever_is_nvlink(case_study):
    where = {**PP4, "clock_fraction": 1.0}
    s = dse.sensitivity(
        case_study, "best-energy", global_samples=0, where=where, include_fixed=True
    )
    up, out = s.elasticity.loc["scaleup_clock_fraction"], s.elasticity.loc[KNOB]
    assert up[ENERGY] < -LEVER and up[TIME] < -LEVER
    assert abs(up[ENERGY]) > 10 * abs(out[ENERGY])
    # the links' own energy is worth nothing: energy per bit of either fabric
    assert (
        abs(s.elasticity.loc[["scaleup_pj_per_bit", "scaleout_pj_per_bit"], ENERGY]).max() < NOTHING
    )


def _ratio(s: sens.Sensitivity) -> float:
    """The per-second components' part of the scale-out clock's elasticity of the energy over
    the links' part (the page's "rest / links")."""
    parts = _energy(s).contributions.loc[KNOB]
    return -(parts.sum() - parts["scale-out links"]) / parts["scale-out links"]


def test_a_slower_ring_never_saves_energy_and_the_ratio_is_the_hardwares(case_study):
    """At full GPU clock, in every layout: a faster ring saves energy (its opposite, slowing
    the ring for its links' energy, never pays), and the rest's part over the links' is
    the same wherever the ring's traffic is exposed (DeepSpeed overlaps none of it)."""
    layouts = [
        PP4,
        {"pipeline_parallel": 1, "zero_stage": 1},
        ZERO3,
        {**ZERO3, "micro_batch_size": 1},
    ]
    ratios = []
    for where in layouts:
        s = dse.sensitivity(
            case_study, "best-energy", global_samples=0, where={**where, "clock_fraction": 1.0}
        )
        assert s.elasticity.loc[KNOB, ENERGY] < 0
        ratios.append(_ratio(s))
    assert min(ratios) > 1 and max(ratios) / min(ratios) < 1.05


def test_overlap_weakens_the_lever():
    """FSDP's ZeRO-3 prefetches the gathers (docs/model.md, section 5): at the same design the
    ring's clock is worth less than with DeepSpeed's, and the rest's part over the links'
    falls with the exposed share of the transfers."""
    found = {}
    for framework in ("deepspeed", "fsdp"):
        spec = dse.load_study(STUDY).model_dump()
        spec["fixed"]["framework"] = framework
        spec["space"]["zero_stage"] = [3]
        ev, space, study = sens.evaluator_and_space(dse.load_study(spec))
        design = {
            "pipeline_parallel": 1,
            "zero_stage": 3,
            "micro_batch_size": 4,
            "clock_fraction": 1.0,
            "scaleout_clock_fraction": 1.0,
        }
        found[framework] = sens.local(ev, space, study, design)
    e = {k: v.elasticity.loc[KNOB, ENERGY] for k, v in found.items()}
    assert e["deepspeed"] < e["fsdp"] < -LEVER  # still a lever, a smaller one

    def ratio(loc):
        parts = loc.breakdowns[0].contributions.loc[KNOB]
        return -(parts.sum() - parts["scale-out links"]) / parts["scale-out links"]

    assert ratio(found["fsdp"]) < 0.5 * ratio(found["deepspeed"])


def test_the_network_energy_splits_into_its_links_and_the_rest(case_study):
    s = dse.sensitivity(case_study, "best-energy", global_samples=0, where=ZERO3)
    parts = _energy(s).parts
    assert "communication" not in parts
    ev, space, _ = sens.evaluator_and_space(dse.open_results(case_study).study)
    row = ev.evaluate(space.with_fixed(pd.DataFrame([s.design]))).iloc[0]
    assert parts["scale-up links"] == pytest.approx(row["energy_scaleup_links_j"], rel=1e-12)
    assert parts["scale-out links"] == pytest.approx(row["energy_scaleout_links_j"], rel=1e-12)
    split = parts[["scale-up links", "scale-out links", "network, other (NICs, switches)"]]
    assert split.sum() == pytest.approx(row["energy_network_j"], rel=1e-12)
    assert parts.sum() == pytest.approx(row["energy_to_train_j"], rel=1e-9)


def test_an_evaluator_without_the_links_energy_keeps_one_communication_part():
    table = pd.DataFrame({"energy_network_j": [5.0], "energy_scaleout_links_j": [1.0]})
    same, parts = sens.energy_parts(table)
    assert parts is sens.ENERGY_PARTS and "communication" in parts and same is table
    full = table.assign(energy_scaleup_links_j=[2.0])
    added, parts = sens.energy_parts(full)
    assert parts is sens.SPLIT_ENERGY_PARTS
    assert added[sens.NETWORK_REST].tolist() == [2.0]


def test_best_energy_names_the_energy_objective(case_study):
    s = dse.sensitivity(case_study, "best-energy", global_samples=0)
    front = dse.open_results(case_study).front
    assert s.key == int(front["key"].values[front[ENERGY].values.argmin()])


def test_where_on_the_command_line(case_study):
    proc = run_cli(
        "sensitivity", str(case_study), "--at", "best-energy", "-g", "0", "-w", "zero_stage=3",
        "--where", "pipeline_parallel=1",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())  # the title wraps
    assert "where zero_stage=3, pipeline_parallel=1" in text and "scale-out links" in text


@pytest.mark.parametrize(
    ("where", "said"),
    [
        ("zero_stag=3", "zero_stage"),  # no such knob: the knobs are listed
        ("zero_stage=2", "1, 3"),  # not a value of the study: its values are listed
        ("zero_stage", "NAME=VALUE"),
        ("pipeline_parallel=1", "memory"),  # ZeRO-1, micro-batch 4: none fits in memory
    ],
)
def test_a_bad_where_is_refused_in_one_line(case_study, where, said):
    extra = ["-w", "zero_stage=1", "-w", "micro_batch_size=4"] if "line_p" in where else []
    proc = run_cli("sensitivity", str(case_study), "-g", "0", "--where", where, *extra)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "--where" in proc.stderr
    assert said in proc.stderr and "Traceback" not in proc.stderr

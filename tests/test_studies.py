"""Every example study under studies/ validates; the issue-15 examples run in this process,
each in well under a minute (their front is written and is not empty)."""

from __future__ import annotations

from pathlib import Path

import pytest

import dse
from dse.api import plan

STUDIES = sorted((Path(__file__).resolve().parents[1] / "studies").glob("*.yaml"))
#: the examples of the mixture-of-experts, long-context, rack-scale/TPU, mixed-fleet and goodput
#: inputs, the AstraWattch case study (network link clock, idle and waiting power), bundles,
#: per-stage clock plans, batch-size ramps, the critical batch followed and LoRA fine-tuning
NEW = (
    "moe-rack-scale.yaml",
    "long-context.yaml",
    "mixed-fleet-goodput.yaml",
    "astrawattch-case-study.yaml",
    "fabric-and-cooling-bundles.yaml",  # bundles of inputs, one set from a catalog file
    "perseus-clock-plan.yaml",
    "gpt3-batch-ramp.yaml",
    "gpt3-critical-batch.yaml",  # the batch following the critical batch as the loss falls
    "llama3-70b-lora.yaml",  # LoRA fine-tuning against every weight, packed documents
)


@pytest.mark.parametrize("path", STUDIES, ids=[p.name for p in STUDIES])
def test_every_example_study_validates(path):
    checked = plan(dse.load_study(path), workers=0)  # what `dse validate` checks
    assert checked.search.total is None or checked.search.total > 0


@pytest.mark.parametrize("name", NEW)
def test_the_new_examples_run_in_process(name, tmp_path):
    study = dse.load_study(Path(__file__).resolve().parents[1] / "studies" / name)
    result = dse.run(study, tmp_path / "out", workers=0)
    front = dse.open_results(result.output_dir).front
    assert front.sizes["candidate"] >= 2  # a real trade-off, not one dominating point

"""Uneven pipeline stages as Megatron-Core and DeepSpeed place them (docs/model.md, section 2)."""

import numpy as np
import pytest
from test_memory import cfg

from dse.analytic.time import model as time_model
from dse.analytic.time.parallelism import pipeline_stages


@pytest.mark.parametrize(
    "layers, pp, first, middle, last",
    [
        (96, 8, 12, 12, 12),  # pp divides the layers: Megatron's even split
        (70, 12, 5, 6, 5),  # BLOOM: 72 units (embedding and output count as layers) on 12 stages
        (126, 16, 7, 8, 7),  # Llama 3 405B: one layer less on the first and the last stage
        (5, 2, 3, 0, 2),  # 7 units on 2 stages, the extra unit on the first
        (10, 4, 2, 3, 2),
        (24, 1, 24, 0, 24),  # one stage holds everything
    ],
)
def test_layers_per_stage(layers, pp, first, middle, last):
    s = pipeline_stages(np.array([float(layers)]), np.array([float(pp)]))
    assert (s.first[0], s.middle[0], s.last[0]) == (first, middle, last)


def test_published_uneven_layouts_run_and_too_many_stages_do_not():
    bloom = dict(
        model="bloom-176b",
        accelerator="A100-80GB",
        num_accelerators=384,
        tensor_parallel=4,
        pipeline_parallel=12,
        global_batch_size=2048,
        micro_batch_size=2,
        recompute="full",
        flash_attention=False,
    )
    llama = dict(
        model="llama3-405b",
        accelerator="H100-SXM",
        num_accelerators=8192,
        tensor_parallel=8,
        pipeline_parallel=16,
        interleave=8,
        global_batch_size=2048,
        sequence_parallel=True,
        recompute="full",
        framework="megatron-core",
    )
    assert time_model.evaluate(cfg(1, **bloom)).reason[0] == ""
    assert time_model.evaluate(cfg(1, **llama)).reason[0] == ""
    r = time_model.evaluate(cfg(1, model="gpt-125m", num_accelerators=16, pipeline_parallel=16))
    assert r.reason[0] == "more pipeline stages than layers"


def test_the_most_loaded_stage_sets_the_pace():
    # 70 layers on 12 stages: 5 on the first and the last stage (with the embedding and the
    # output layer), 6 on the middle ones; with a small vocabulary a middle stage paces the
    # pipeline, so the output layer's size does not change the pace. With 72 layers (6 on
    # every stage) the last stage paces it, output layer included. (Micro-batches of 4: the
    # GPUs, not their hosts, set the pace.)
    shape = dict(
        model="custom",
        hidden=4096,
        heads=32,
        seq_len=2048,
        ffn_hidden=16384,
        tied_embeddings=0,
        num_accelerators=96,
        tensor_parallel=8,
        pipeline_parallel=12,
        global_batch_size=96,
        micro_batch_size=4,
    )

    def compute(layers, vocab):
        r = time_model.evaluate(cfg(1, layers=layers, vocab=vocab, **shape))
        assert r.reason[0] == ""
        return r.compute_time_s[0]

    assert compute(70, 8192) == compute(70, 16384)
    assert compute(72, 8192) < compute(72, 16384)
    assert compute(70, 16384) < compute(72, 16384)
    # a big vocabulary makes the last stage (5 layers + output) the slowest: then it counts
    assert compute(70, 256000) > compute(70, 16384)


def test_memory_is_checked_on_the_most_loaded_stage():
    # a huge untied vocabulary and large micro-batches load the last stage (output layer and
    # fp32 logits) beyond the first (embedding and the most activations in flight)
    kw = dict(
        model="custom",
        layers=8,
        hidden=2048,
        heads=16,
        seq_len=4096,
        vocab=256000,
        ffn_hidden=8192,
        tied_embeddings=0,
        num_accelerators=2,
        pipeline_parallel=2,
        micro_batch_size=8,
        global_batch_size=64,
        recompute="full",
        accelerator="H200",
    )
    r = time_model.evaluate(cfg(1, **kw))
    logits_gb = 4.0 * 4096 * 8 * 256000 / 2**30
    assert r.activations_memory_gib[0] > logits_gb
    assert (
        r.memory_per_accelerator_gib[0] > logits_gb + 2048 * 256000 * 16 / 2**30
    )  # and the output layer's state

import numpy as np
import pytest

from dse.analytic.time import workload

REQUIRED = [
    "gpt3-175b",
    "llama2-7b",
    "llama2-13b",
    "llama2-70b",
    "llama3-8b",
    "llama3-70b",
    "llama3-405b",
    "megatron-22b",
    "megatron-530b",
    "megatron-1t",
    "chinchilla-70b",
    "bloom-176b",
    "gpt-125m",
    "gpt-1.3b",
]


def shape_of(name):
    return workload.resolve_shape(np.array([name], dtype=object), {})


def test_presets_have_sources_and_shapes():
    presets = workload.presets()
    for name in REQUIRED:
        assert name in presets
        assert presets[name]["source"]
        for f in workload.REQUIRED_SHAPE_FIELDS:  # the optional ones (experts, MLA) have defaults
            assert f in presets[name]


@pytest.mark.parametrize(
    "name, published",
    [
        ("gpt3-175b", 175e9),
        ("llama2-7b", 6.74e9),
        ("llama2-13b", 13.0e9),
        ("llama2-70b", 69.0e9),
        ("llama3-8b", 8.03e9),
        ("llama3-70b", 70.6e9),
        ("llama3-405b", 405e9),
        ("bloom-176b", 176e9),
        ("megatron-530b", 530e9),
        ("megatron-1t", 1.0e12),
        ("gpt-125m", 125e6),
        ("gpt-1.3b", 1.3e9),
        # Nemotron-4 15B report: 3.2B embedding + 12.5B non-embedding; 340B report: 9.4B + 331.6B
        ("nemotron4-15b", 15.7e9),
        ("nemotron4-340b", 341e9),
    ],
)
def test_parameter_counts_match_published(name, published):
    n = workload.parameter_count(shape_of(name))[0]
    assert abs(n / published - 1) < 0.05


def test_flops_close_to_6nd_plus_attention():
    s = shape_of("gpt3-175b")
    tokens = np.array([2048.0 * 1536])
    flops = workload.model_flops_per_iteration(s, tokens)[0]
    n = workload.parameter_count(s)[0]
    # Narayanan et al. 2021 eq. 3: 72 B s l h^2 (1 + s/(6h) + V/(12 h l))
    h, L, seq, V = 12288, 96, 2048, 50257
    expected = 72 * 1536 * seq * L * h * h * (1 + seq / (6 * h) + V / (12 * h * L))
    assert abs(flops / expected - 1) < 0.01
    assert 6 * n * tokens[0] < flops < 6.5 * n * tokens[0]


def test_overrides_and_custom_shape():
    s = workload.resolve_shape(
        np.array(["nope", "gpt-125m"], dtype=object),
        {
            "hidden": np.array([1024.0, np.nan]),
            "layers": np.array([4.0, np.nan]),
            "heads": np.array([16.0, np.nan]),
            "seq_len": np.array([128.0, np.nan]),
            "vocab": np.array([1000.0, np.nan]),
        },
    )
    assert s.ffn_hidden[0] == 4096 and s.kv_heads[0] == 16
    assert s.hidden[1] == 768

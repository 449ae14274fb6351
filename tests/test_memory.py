import numpy as np

from dse.analytic import declarations
from dse.analytic.time import memory
from dse.analytic.time import model as time_model


def test_korthikanti_activation_formulas():
    s, b, h, a, t = 2048.0, 1.0, 12288.0, 96.0, 8.0
    sbh = s * b * h
    none = memory.activation_bytes_per_layer(s, b, h, a, t, 0.0, 0, 0.0)
    assert np.isclose(none, sbh * (10 + 24 / t + 5 * a * s / (h * t)))
    sel_sp = memory.activation_bytes_per_layer(s, b, h, a, t, 1.0, 1, 0.0)
    assert np.isclose(sel_sp, sbh * 34 / t)
    full = memory.activation_bytes_per_layer(s, b, h, a, t, 0.0, 2, 0.0)
    assert np.isclose(full, 2 * sbh)


def cfg(n=1, **kw):
    base = {i.name: i.default for i in declarations.TIME_INPUTS}
    base.update(kw)
    out = {}
    for k, v in base.items():
        if isinstance(v, str) or (v is None and k in ("scaleup_topology",)):
            out[k] = np.full(n, v, dtype=object)
        else:
            out[k] = np.full(n, np.nan if v is None else float(v))
    return out


def test_does_not_fit_is_a_reason():
    r = time_model.evaluate(cfg(model="gpt3-175b", accelerator="A100-80GB", num_accelerators=8,
                                tensor_parallel=8, global_batch_size=8, recompute="full"))
    assert r.reason[0] == "does not fit in accelerator memory"
    assert r.memory_per_accelerator_gb[0] > 80


def test_zero_shards_optimizer_and_recompute_saves_memory():
    base = dict(model="llama2-7b", accelerator="H100-SXM", num_accelerators=64, global_batch_size=512)
    z0 = time_model.evaluate(cfg(**base, zero_stage=0))
    z1 = time_model.evaluate(cfg(**base, zero_stage=1))
    z3 = time_model.evaluate(cfg(**base, zero_stage=3))
    assert np.isclose(z1.optimizer_memory_gb[0] * 64, z0.optimizer_memory_gb[0])
    assert z3.weights_memory_gb[0] < z1.weights_memory_gb[0]
    mem = {r: time_model.evaluate(cfg(**base, recompute=r, flash_attention=False)).activations_memory_gb[0]
           for r in ("none", "selective", "full")}
    assert mem["none"] > mem["selective"] > mem["full"]

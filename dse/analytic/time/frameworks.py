"""Training stacks (``dse/analytic/data/frameworks.yaml``) and their vectorised lookup."""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cache
from importlib.resources import files

import numpy as np

from dse.analytic.columns import factorise, take_fields
from dse.analytic.rows import nan_to_num, where
from dse.analytic.time.memory import RECOMPUTE
from dse.yamlfile import load_packaged

#: the per-stack behaviours the time model reads, in :class:`Stack` order
FIELDS = (
    "default_zero_stage",
    "zero_ok_mask",
    "grad_bytes",
    "tp_overlap",
    "grad_overlap",
    "gather_overlap",
    "step_gather_overlap",
    "p2p_overlap",
    "fused_kernels",
    "p2p_scatter_gather",
    "interleaved_schedule",
    "zero3_calls_per_layer",
    "per_rank_copies",
    "moe_tp_needs_sp",
    "pp_gather_once",
    "dp_chunk_overlap",
    "loss_bytes_per_logit",
    "fp8_activations",
    "activations_tp_sharded",
    "allocator_overhead",
    "gathered_bytes_per_layer_param",
    "pp_keeps_unsharded",
    "pp_keeps_outputs",
    "fa2_attention",
    "activation_offload",
    "offload_policy",
    "offload_plain_only",
    "sp_saves_gathered_inputs",
    "torch_cp_buffers",
    "fp8_param_gather",
    "compiled_activations",
    "selective_policy",
)
#: fields a stack may omit, and their values then (the behaviour before they existed)
OPTIONAL = {
    "pp_gather_once": 0.0,
    "dp_chunk_overlap": 0.0,
    "loss_bytes_per_logit": 4.0,
    "fp8_activations": 0.0,
    "activations_tp_sharded": 0.0,
    "allocator_overhead": 0.0,
    "gathered_bytes_per_layer_param": 6.0,
    "pp_keeps_unsharded": 0.0,
    "pp_keeps_outputs": 0.0,
    "fa2_attention": 0.0,
    "activation_offload": 0.0,
    "offload_policy": 0.0,
    "offload_plain_only": 0.0,
    "sp_saves_gathered_inputs": 0.0,
    "torch_cp_buffers": 0.0,
    "fp8_param_gather": 0.0,
    "compiled_activations": 0.0,
    "selective_policy": "selective",
}


@cache
def catalog() -> dict[str, dict]:
    """Stack name -> its documented behaviour (see the YAML file for the fields and sources)."""
    return load_packaged(files("dse.analytic.data").joinpath("frameworks.yaml").read_text())


def framework_names() -> tuple[str, ...]:
    return tuple(catalog())


@dataclass(frozen=True, slots=True)
class Stack:
    """Per-candidate stack arrays: the default ZeRO stage, a bit mask of the stages offered
    (bit ``z`` set when stage ``z`` is), gradient bytes in the data-parallel reduction, and
    the 0/1 behaviours of the catalog (overlaps, fused kernels, scatter/gather pipeline
    sends, the interleaved schedule, sequence parallelism required for a mixture-of-experts
    model with tensor parallelism). Unknown names are NaN."""

    default_zero_stage: np.ndarray
    zero_ok_mask: np.ndarray
    grad_bytes: np.ndarray
    tp_overlap: np.ndarray
    grad_overlap: np.ndarray
    gather_overlap: np.ndarray
    step_gather_overlap: np.ndarray
    p2p_overlap: np.ndarray
    fused_kernels: np.ndarray
    p2p_scatter_gather: np.ndarray
    interleaved_schedule: np.ndarray
    zero3_calls_per_layer: np.ndarray
    per_rank_copies: np.ndarray
    moe_tp_needs_sp: np.ndarray
    pp_gather_once: np.ndarray
    dp_chunk_overlap: np.ndarray
    loss_bytes_per_logit: np.ndarray
    fp8_activations: np.ndarray
    activations_tp_sharded: np.ndarray
    allocator_overhead: np.ndarray
    gathered_bytes_per_layer_param: np.ndarray
    pp_keeps_unsharded: np.ndarray
    pp_keeps_outputs: np.ndarray
    fa2_attention: np.ndarray
    #: 1: the stack offloads whole layers' activations to host memory, asynchronously
    #: (Megatron-Core / Transformer Engine CPU offloading; PyTorch side-stream offloading)
    activation_offload: np.ndarray
    #: 1: the stack offloads through a recompute policy (MaxText ``minimal`` ->
    #: ``minimal_offloaded``, the ``offload`` policy)
    offload_policy: np.ndarray
    #: 1: offloading only without recomputation and without pipeline parallelism (Megatron-Core)
    offload_plain_only: np.ndarray
    #: 1: with sequence parallelism the column-parallel linears save their all-gathered
    #: input (PyTorch DTensor plans: PrepareModuleInput Shard(1) -> Replicate())
    sp_saves_gathered_inputs: np.ndarray
    #: 1: context parallelism runs through PyTorch's ``context_parallel`` ring attention,
    #: whose backward holds the exchanged K/V (at the query heads' width: the model repeats
    #: the key-value heads before SDPA) and fp32 dq/dk/dv accumulators
    torch_cp_buffers: np.ndarray
    #: 1: fp8 training all-gathers the weights in fp8 (1 byte per weight)
    fp8_param_gather: np.ndarray
    #: 1: a compiler (torch.compile, XLA) fuses any feed-forward activation into one kernel;
    #: 0: only GeLU and SwiGLU have a fused kernel (Megatron-Core), the rest run as PyTorch ops
    compiled_activations: np.ndarray
    #: the policy code (index into ``memory.RECOMPUTE``) the stack's ``selective`` means
    selective_policy: np.ndarray

    def offers(self, zero_stage: np.ndarray) -> np.ndarray:
        """True where the stack offers ``zero_stage`` (an integer-valued float array)."""
        z = np.clip(nan_to_num(np.asarray(zero_stage, dtype=float)), 0, 3).astype(np.int64)
        return (
            nan_to_num(np.asarray(self.zero_ok_mask, dtype=float)).astype(np.int64) >> z
        ) & 1 == 1


assert tuple(f.name for f in fields(Stack)) == FIELDS


@cache
def _row(name: str) -> tuple[float, ...]:
    st = catalog().get(name)
    if st is None:
        return (np.nan,) * len(FIELDS)
    return (
        float(st["default_zero_stage"]),
        float(sum(1 << int(z) for z in st["zero_stages"])),
        *(float(st[f]) if f in st else OPTIONAL[f] for f in FIELDS[2:-1]),
        float(RECOMPUTE.index(st.get("selective_policy", OPTIONAL["selective_policy"]))),
    )


def lookup(names) -> Stack:
    """Per-candidate stack arrays for the stack ``names`` (one lookup per distinct name)."""
    codes, uniq = factorise(names)
    table = np.array([_row(str(u)) for u in uniq] + [_row("")], dtype=np.float64).T
    codes = where(np.asarray(codes) < 0, len(uniq), codes)
    return Stack(*take_fields(table, codes))

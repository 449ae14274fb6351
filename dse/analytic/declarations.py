"""The analytic evaluator's inputs and metrics: names, units, descriptions, and every default.

This module is the one place the model's defaults are written: the physics modules take
explicit arrays and never fall back to a number of their own. :func:`complete` (and the
evaluator's ``to_arrays``) fills what a caller left out from here before the physics runs.
A default with ``None`` means "not set": the physics then takes the value from the
catalog or a law (documented in the description). Where a default comes from a paper or
a datasheet, the source is written beside it.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass

import numpy as np

from dse.analytic import profiles
from dse.analytic.columns import Factorised, factorise
from dse.analytic.energy.stage_plan import CLOCK_PLANS
from dse.analytic.schedule import BATCH_SCHEDULES
from dse.analytic.time import software
from dse.analytic.time.adapters import ADAPTERS, LORA_TARGETS
from dse.analytic.time.collectives import (
    CP_ALGORITHMS,
    MOE_DISPATCHERS,
    SCALEOUT_FABRICS,
    SCALEUP_TOPOLOGIES,
)
from dse.analytic.time.frameworks import framework_names
from dse.analytic.time.hardware import accelerator_names
from dse.analytic.time.memory import ACTIVATION_OFFLOAD, RECOMPUTE
from dse.analytic.time.result import METRIC_FIELDS
from dse.analytic.time.workload import presets
from dse.errors import DseError, StudyError, suggestion
from dse.evaluators.base import Input, Metric

_ACCELERATORS = accelerator_names()
_MODELS = tuple(presets())
_FRAMEWORKS = framework_names()

# Network energy per bit moved (seed 004, AstraWattch case study: scale-up 2 pJ/bit,
# scale-out 25 pJ/bit).
SCALEUP_PJ_PER_BIT = 2.0
SCALEOUT_PJ_PER_BIT = 25.0
#: Lowest link clock fraction (scale-up and scale-out voltage-frequency scaling): the lowest
#: point of the links' V-f curve (dse/analytic/data/power.yaml, ``links``), below which no
#: supply is estimated.
LINK_CLOCK_FRACTION_MIN = 0.25
#: Default checkpoint write bandwidth per accelerator (GB/s): the Llama 3 405B run's
#: storage (Tectonic, 7,500 SSD servers) sustains 2 TB/s for up to 16,384 H100s
#: (Dubey et al. 2024, "The Llama 3 Herd of Models", section 3.3.1): 2000 / 16384 GB/s.
CHECKPOINT_WRITE_GBS = 2000.0 / 16384
#: Default interruptions per accelerator-hour: Llama 3 405B saw 466 job interruptions (47
#: planned, 419 unexpected) in a 54-day snapshot on 16,384 H100s (Dubey et al. 2024,
#: section 3.3.4): 466 / (16384 x 54 x 24) = 2.19e-5 per accelerator-hour, one per 2.8 h
#: at that scale.
FAILURES_PER_ACCELERATOR_HOUR = 466.0 / (16384 * 54 * 24)
#: Default restart time (s): the fail-stop, diagnose, reschedule and checkpoint-reload
#: cycle "can cost more than ten minutes" at 10,000-GPU scale (Wan et al. 2025, ByteRobust,
#: SOSP '25, arXiv:2509.16293); Llama 3 publishes no figure.
RESTART_TIME_S = 600.0
#: Default power-supply efficiency (AC at the wall -> DC in the node): the 80 PLUS
#: Titanium level for 230 V internal redundant supplies, 96% at 50% load (90/94/96/91% at
#: 10/20/50/100%; Platinum 94% at 50%, 91% at 100%): CLEAResult, "80 PLUS Program"
#: efficiency-level table (www.clearesult.com/80plus/program-details). A node's supplies
#: share its load (N+N redundancy), so each runs near half load while it trains.
PSU_EFFICIENCY = 0.96


def _link_clock(fabric: str) -> Input:
    """The ``scaleup``/``scaleout`` link clock input (voltage-frequency scaling of a fabric)."""
    return Input(
        f"{fabric}_clock_fraction",
        "float",
        "1",
        f"{fabric[:5]}-{fabric[5:]} link clock as a fraction of nominal (voltage-frequency "
        "scaling): the bandwidth follows the clock, the energy per bit the square of the link "
        "voltage on power.yaml's links V-f curve (0.64 at 0.5; an estimate, "
        "docs/model-energy.md)",
        1.0,
        minimum=LINK_CLOCK_FRACTION_MIN,
        maximum=1.0,
        group="network",
    )


@dataclass(frozen=True)
class AcceleratorInput(Input):
    """The ``accelerator`` input: a catalog name, or an accelerator profile written by
    ``dse calibrate``, by path (``my-a100.yaml``) or by name (:mod:`dse.analytic.profiles`).
    A profile that is there but broken is reported with its file and field."""

    def canonical(self, value):
        """A catalog name in another spelling (``a100-80gb``) is the catalog's, unless a
        profile of that name exists (a profile is never renamed to a catalog part)."""
        if isinstance(value, str) and self.choices is not None and value not in self.choices:
            try:
                if profiles.find(value) is not None:
                    return value
            except (DseError, OSError):
                return value  # a broken profile: check() reports it
        return super().canonical(value)

    def check(self, value, *, field: str) -> None:
        if isinstance(value, str) and self.choices is not None and value not in self.choices:
            try:
                found = profiles.find(value)
            except DseError as exc:  # its message names the profile's file and field
                raise StudyError(
                    f"accelerator profile {exc}"
                    if exc.file
                    else f"accelerator profile {value}: {exc}",
                    field=field,
                ) from None
            except OSError as exc:
                raise StudyError(
                    f"accelerator profile {value}: {exc.strerror or exc}", field=field
                ) from None
            if found is not None:
                return
            if profiles.is_path(value):  # a file named that is not there
                raise StudyError(
                    f"accelerator profile {value} not found (a relative path is from the "
                    "folder dse runs in)",
                    field=field,
                    value=value,
                    allowed=self._allowed(),
                )
            raise StudyError(  # a misspelt part, or a misspelt profile's name
                f"unknown {self.name}",
                field=field,
                value=value,
                allowed=self._allowed(),
                hint=suggestion(value, [*self.choices, *profiles.names()]),
            )
        super().check(value, field=field)

    def _allowed(self) -> str:
        return (
            f"{super()._allowed()}, or an accelerator profile (dse calibrate): a path to its .yaml file, "
            f"or its name with {profiles.FOLDER}/NAME.yaml in the working directory or a folder in "
            f"${profiles.ENV}"
        )


class ReleaseInput(Input):
    """The ``software_release`` input: :data:`~dse.analytic.time.software.MATURE` or a
    release month written ``YYYY-MM`` (a date, ``YYYY-MM-DD``, is taken by its month; a
    day that is not in its month, 2025-02-31, is refused as written)."""

    def canonical(self, value):
        if isinstance(value, str):
            text = value.strip()
            if text.lower() == software.MATURE:
                return software.MATURE
            if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
                try:  # a real date only: 2025-02-31 stays as written, for check to refuse
                    datetime.date.fromisoformat(text)
                except ValueError:
                    return text
                return text[:7]
            if software.MONTH.fullmatch(text):  # (without the spaces around it)
                return text
        return super().canonical(value)

    def check(self, value, *, field: str) -> None:
        if value == software.MATURE or (
            isinstance(value, str) and np.isfinite(software.month_number(value))
        ):
            return
        raise StudyError(
            "expected a release month", field=field, value=value, allowed=self._allowed()
        )

    def _allowed(self) -> str:
        return f"{software.MATURE}, or {software.MONTH_RULE}"


TIME_INPUTS: list[Input] = [
    Input(
        "model",
        "str",
        "",
        "model preset name (shape fields override it)",
        "gpt-1.3b",
        _MODELS,
        group="workload",
    ),
    Input(
        "layers",
        "int",
        "",
        "transformer layers (overrides the preset)",
        None,
        minimum=1,
        group="workload",
    ),
    Input(
        "hidden", "int", "", "hidden size (overrides the preset)", None, minimum=1, group="workload"
    ),
    Input(
        "ffn_hidden",
        "int",
        "",
        "feed-forward hidden size (overrides the preset)",
        None,
        minimum=1,
        group="workload",
    ),
    Input(
        "heads",
        "int",
        "",
        "attention heads (overrides the preset)",
        None,
        minimum=1,
        group="workload",
    ),
    Input(
        "kv_heads",
        "int",
        "",
        "key-value heads (overrides the preset)",
        None,
        minimum=1,
        group="workload",
    ),
    Input(
        "seq_len",
        "int",
        "tokens",
        "sequence length (overrides the preset)",
        None,
        minimum=1,
        group="workload",
    ),
    Input(
        "vocab",
        "int",
        "tokens",
        "vocabulary size (overrides the preset)",
        None,
        minimum=1,
        group="workload",
    ),
    Input(
        "head_dim",
        "int",
        "",
        "attention head width (overrides the preset; default hidden / heads)",
        None,
        minimum=1,
        group="workload",
    ),
    Input(
        "experts",
        "int",
        "",
        "routed experts per mixture-of-experts layer, 0 = dense (overrides the preset; e.g. Mixtral 8, DeepSeek-V3 256)",
        None,
        minimum=0,
        group="workload",
    ),
    Input(
        "experts_per_token",
        "int",
        "",
        "routed experts each token uses, top-k (overrides the preset; Mixtral 2, DeepSeek-V3 8)",
        None,
        minimum=1,
        group="workload",
    ),
    Input(
        "shared_experts",
        "int",
        "",
        "experts every token uses besides its top-k (overrides the preset; DeepSeek-V3 1)",
        None,
        minimum=0,
        group="workload",
    ),
    Input(
        "expert_ffn_hidden",
        "int",
        "",
        "feed-forward width of one expert (overrides the preset; default ffn_hidden)",
        None,
        minimum=1,
        group="workload",
    ),
    Input(
        "dense_layers",
        "int",
        "",
        "dense feed-forward layers of a mixture-of-experts model (overrides the preset; DeepSeek-V3 3)",
        None,
        minimum=0,
        group="workload",
    ),
    Input(
        "target_tokens",
        "float",
        "tokens",
        "tokens to train at target_batch_size (other batches scale by the critical-batch law)",
        2.6e10,
        minimum=1,
        maximum=1e16,
        group="workload",
    ),  # 1e16: ~280x the largest published runs (~3.6e13 tokens)
    Input(
        "target_batch_size",
        "int",
        "sequences",
        "global batch the token budget was stated at (the batch the run was planned at); default: the small-batch limit (target_tokens = D_min)",
        None,
        minimum=1,
        group="workload",
    ),
    Input(
        "target_loss",
        "float",
        "nats/token",
        "target loss; overrides target_tokens through the Chinchilla fit L(N, D)",
        None,
        minimum=0.01,
        group="workload",
    ),
    Input(
        "document_tokens",
        "int",
        "tokens",
        "mean tokens per document where each sequence packs several documents and attention "
        "is masked to each document (Llama 3's pre-training, NeMo's packed fine-tuning "
        "datasets): the fused attention kernel attends within documents only; default: "
        "attention over the whole sequence",
        None,
        minimum=1,
        group="workload",
    ),
    Input(
        "adapter",
        "str",
        "",
        "what the run trains: none (every weight: pre-training or full fine-tuning) or lora "
        "(low-rank adapters beside frozen weights, Hu et al. 2021: no weight gradients, "
        "gradient reduction, optimizer state or checkpoint of the frozen weights; "
        "docs/model.md section 1b)",
        "none",
        ADAPTERS,
        group="workload",
    ),
    Input(
        "lora_rank",
        "int",
        "",
        "the LoRA adapters' rank r (NeMo's default 32)",
        32,
        minimum=1,
        group="workload",
    ),
    Input(
        "lora_targets",
        "str",
        "",
        "the weight matrices that get a LoRA adapter: all (QKV, attention output, FC1, FC2: "
        "NeMo 2's default), attention (QKV and output projections) or qkv (NeMo 1's default)",
        "all",
        LORA_TARGETS,
        group="workload",
    ),
    Input(
        "batch_schedule",
        "str",
        "",
        "global batch over the run: constant, or a ramp from batch_ramp_start_size to global_batch_size "
        "over batch_ramp_tokens, linear or in steps, or critical: critical_batch_multiple x the critical "
        "batch at the loss reached, between batch_ramp_start_size and global_batch_size "
        "(the layout stays; the gradient accumulation changes)",
        "constant",
        BATCH_SCHEDULES,
        group="workload",
    ),
    Input(
        "batch_ramp_start_size",
        "int",
        "sequences",
        "batch at the start of a ramp, the smallest of a critical schedule (default: one micro-batch per data-parallel replica)",
        None,
        minimum=1,
        group="workload",
    ),
    Input(
        "batch_ramp_tokens",
        "float",
        "tokens",
        "tokens a ramp runs over (default: 4e9, GPT-3's shortest ramp, Brown et al. 2020, section 2.3)",
        4.0e9,
        minimum=0,
        maximum=1e16,
        group="workload",
    ),
    Input(
        "batch_ramp_steps",
        "int",
        "",
        "phases of a ramp, of equal tokens (default 8: our discretisation; linear: the ramp at each phase's middle); "
        "critical: batch levels below global_batch_size, geometric from batch_ramp_start_size",
        8,
        minimum=1,
        maximum=64,
        group="workload",
    ),
    Input(
        "critical_batch_multiple",
        "float",
        "1",
        "batch_schedule critical: the batch as a multiple of the critical batch B_crit(L) (Kaplan et al. 2020, "
        "eq. 5.3; scaled to b_noise_tokens where given); 1: B_crit, at which a run takes twice the fewest "
        "tokens and twice the fewest steps (McCandlish et al. 2018)",
        1.0,
        minimum=0.01,
        maximum=100.0,
        group="workload",
    ),  # 0.01-100: our bounds, four decades around the critical batch
    Input(
        "b_noise_tokens",
        "float",
        "tokens",
        "gradient noise scale B_noise (McCandlish et al. 2018); default: Kaplan et al. 2020 B_crit(L)",
        None,
        minimum=1,
        group="workload",
    ),
    Input(
        "precision",
        "str",
        "",
        "matrix-multiply precision; weights, gradients and activations are held as in 16-bit mixed precision for every choice (fp8: Transformer Engine's casts; tf32: the TF32 matmul rate only, fp32 tensors are not modelled)",
        "bf16",
        ("bf16", "fp16", "fp8", "tf32"),
        group="workload",
    ),
    AcceleratorInput(
        "accelerator",
        "str",
        "",
        "accelerator type (hardware catalog), or an accelerator profile (a .yaml path or a name; dse calibrate)",
        "H100-SXM",
        _ACCELERATORS,
        group="hardware",
    ),
    Input(
        "num_accelerators",
        "int",
        "",
        "accelerators in the job (with a second accelerator: both types together)",
        8,
        minimum=1,
        group="hardware",
    ),
    AcceleratorInput(
        "second_accelerator",
        "str",
        "",
        "a second accelerator type (or profile) running the last second_pipeline_stages pipeline stages (mixed fleet; none: one type)",
        "none",
        ("none", *_ACCELERATORS),
        group="hardware",
    ),
    Input(
        "second_pipeline_stages",
        "int",
        "",
        "pipeline stages on the second accelerator (1 to pipeline_parallel - 1)",
        0,
        minimum=0,
        group="hardware",
    ),
    Input(
        "split_alpha",
        "float",
        "1",
        "exponent of the mixed fleet's layer split W_i ~ P_i^alpha (P_i: the part's large-GEMM throughput; 1: stage times equal for compute-bound layers; seed 000's workload distribution)",
        1.0,
        minimum=0.0,
        maximum=4.0,
        group="hardware",
    ),
    Input(
        "clock_mhz",
        "float",
        "MHz",
        "SM clock (default: the accelerator's maximum)",
        None,
        minimum=1,
        group="hardware",
    ),
    Input(
        "clock_fraction",
        "float",
        "1",
        "SM clock as a fraction of the accelerator's maximum (used where clock_mhz is not given; suits studies over several accelerators)",
        None,
        minimum=0.05,
        maximum=1.0,
        group="hardware",
    ),
    Input(
        "scaleup_size",
        "int",
        "",
        "accelerators per scale-up domain (NVLink, Infinity Fabric, TPU ICI pod); default: the catalog's (8 for an HGX node, 72 for GB200 NVL72, 256 / 8,960 for TPU v5e-v6e / v5p pods)",
        None,
        minimum=1,
        group="network",
    ),
    Input(
        "scaleup_bw_gbs",
        "float",
        "GB/s",
        "scale-up bandwidth per accelerator per direction (default: catalog)",
        None,
        minimum=0.001,
        group="network",
    ),
    Input(
        "scaleup_topology",
        "str",
        "",
        "scale-up topology (default: catalog)",
        None,
        SCALEUP_TOPOLOGIES,
        group="network",
    ),
    Input(
        "scaleup_latency_us",
        "float",
        "us",
        "scale-up per-step collective latency (default: calibration)",
        None,
        minimum=0,
        group="network",
    ),
    Input(
        "scaleout_bw_gbs",
        "float",
        "GB/s",
        "scale-out bandwidth per accelerator per direction (default: the part's own scale-out "
        "network where the catalog gives one, a TPU's DCN; else 50)",
        None,
        minimum=0.001,
        group="network",
    ),
    Input(
        "scaleout_fabric",
        "str",
        "",
        "scale-out fabric",
        "rail_optimized",
        SCALEOUT_FABRICS,
        group="network",
    ),
    Input(
        "scaleout_latency_us",
        "float",
        "us",
        "scale-out per-step collective latency (default: calibration)",
        None,
        minimum=0,
        group="network",
    ),
    *(_link_clock(fabric) for fabric in ("scaleup", "scaleout")),
    Input(
        "framework",
        "str",
        "",
        "training stack (dse/analytic/data/frameworks.yaml): what overlaps with compute, how it shards, its kernels",
        "deepspeed",
        _FRAMEWORKS,
        group="parallelism",
    ),
    ReleaseInput(
        "software_release",
        "str",
        "",
        "release month of the training stack (its container or framework, YYYY-MM): soon "
        "after a part's architecture first shipped (catalog architecture_shipped), its GEMM "
        "and attention kernels run below their mature efficiency (fitted: docs/model.md, "
        "section 7); mature: the stack at its mature efficiency",
        software.MATURE,
        group="parallelism",
    ),
    Input(
        "global_batch_size",
        "int",
        "sequences",
        "global batch size",
        512,
        minimum=1,
        group="parallelism",
    ),
    Input(
        "micro_batch_size",
        "int",
        "sequences",
        "micro-batch size",
        1,
        minimum=1,
        group="parallelism",
    ),
    Input(
        "tensor_parallel", "int", "", "tensor-parallel degree", 1, minimum=1, group="parallelism"
    ),
    Input(
        "sequence_parallel",
        "bool",
        "",
        "sequence parallelism with tensor parallelism (Korthikanti et al. 2022)",
        False,
        group="parallelism",
    ),
    Input(
        "context_parallel",
        "int",
        "",
        "context-parallel degree (each sequence split over this many accelerators)",
        1,
        minimum=1,
        group="parallelism",
    ),
    Input(
        "context_parallel_algorithm",
        "str",
        "",
        "context-parallel attention: ring (keys/values passed around behind the attention; Megatron-Core) or all_gather (gathered first, exposed; Llama 3, Dubey et al. 2024, 3.3.2)",
        "ring",
        CP_ALGORITHMS,
        group="parallelism",
    ),
    Input(
        "expert_parallel",
        "int",
        "",
        "expert-parallel degree (routed experts split over this many accelerators; must divide the experts; expert x expert-tensor parallel must divide tensor x context x data parallel)",
        1,
        minimum=1,
        group="parallelism",
    ),
    Input(
        "expert_tensor_parallel",
        "int",
        "",
        "tensor-parallel degree inside each expert (default: tensor_parallel, Megatron-Core's expert_tensor_parallel_size default)",
        None,
        minimum=1,
        group="parallelism",
    ),
    Input(
        "capacity_factor",
        "float",
        "1",
        "most loaded expert's tokens over the mean (1 = balanced, as NVIDIA's benchmarks force; with token dropping, the capacity each expert is padded to; Fedus et al. 2022)",
        1.0,
        minimum=1.0,
        group="parallelism",
    ),
    Input(
        "moe_dispatcher",
        "str",
        "",
        "expert token dispatch (alltoall: every token-expert copy to its rank, Megatron-Core's default; deepep: one copy per destination domain over the fabric, forwarded inside it, DeepSeek-V3 3.2.2)",
        "alltoall",
        MOE_DISPATCHERS,
        group="parallelism",
    ),
    Input(
        "moe_a2a_overlap",
        "bool",
        "",
        "expert all-to-all overlapped with other compute (another micro-batch's; Megatron-Core --overlap-moe-expert-parallel-comm, off by default; DeepSeek DualPipe)",
        False,
        group="parallelism",
    ),
    Input(
        "pipeline_parallel",
        "int",
        "",
        "pipeline-parallel degree",
        1,
        minimum=1,
        group="parallelism",
    ),
    Input(
        "flash_attention",
        "bool",
        "",
        "fused attention kernel (FlashAttention, Dao et al. 2022)",
        True,
        group="parallelism",
    ),
    Input(
        "interleave",
        "int",
        "",
        "model chunks per pipeline stage (1 = 1F1B, >1 = interleaved 1F1B)",
        1,
        minimum=1,
        group="parallelism",
    ),
    Input(
        "zero_stage",
        "int",
        "",
        "sharding (ZeRO) stage: 1 optimizer state, 2 + gradients, 3 + weights (FSDP FULL_SHARD); default: the framework's",
        None,
        minimum=0,
        maximum=3,
        group="parallelism",
    ),
    Input(
        "recompute",
        "str",
        "",
        "activation recomputation: none, selective (the stack's own: Korthikanti et al. 2022 "
        "for Megatron and DeepSpeed, op for fsdp and torchtitan, minimal for maxtext), full, op "
        "(torchtitan op-level selective AC), minimal (MaxText remat_policy minimal), offload "
        "(MaxText minimal_offloaded)",
        "selective",
        RECOMPUTE,
        group="parallelism",
    ),
    Input(
        "activation_offload",
        "str",
        "",
        "activation offloading to host memory: auto (a stack that offloads, on a part whose "
        "host link and host memory the catalog gives, offloads just enough layers to fit: "
        "Megatron-Core / Transformer Engine CPU offloading, PyTorch side-stream offloading, "
        "MaxText minimal -> minimal_offloaded; docs/model.md section 3) or off (only "
        "activation_offload_layers)",
        "auto",
        ACTIVATION_OFFLOAD,
        group="parallelism",
    ),
    Input(
        "activation_offload_layers",
        "int",
        "",
        "layers whose activations are offloaded to host memory (Megatron-Core "
        "cpu_offloading_num_layers)",
        0,
        minimum=0,
        group="parallelism",
    ),
    Input(
        "compiled_loss",
        "bool",
        "",
        "the loss is compiled (torch.compile of the cross entropy: 16-bit logits and gradient, "
        "4 B per logit, where the stack's eager loss keeps more)",
        False,
        group="parallelism",
    ),
    Input(
        "fp8_param_gather",
        "bool",
        "",
        "an fp8 run all-gathers its weights in fp8, 1 B per weight (torchao "
        "enable_fsdp_float8_all_gather; the Megatron-Core stacks do it always: fp8_param_gather)",
        False,
        group="parallelism",
    ),
]

# How a mixed fleet's job takes each metric from its two parts' (``Metric.mixed_fleet``,
# applied by dse.analytic.fleet; docs/model.md, section 11). No metric takes one part's
# value unless its rule says so.
SUM = "sum"  #: the parts' sum (energies, facility power, cost)
MAX = "max"  #: the larger of the parts' (times, peaks, temperatures)
ANY = "any"  #: true when true of either part
MIN = "min"  #: the smaller of the parts'
PACE = "pace"  #: the pace-setting part's (its breakdown sums to the iteration)
FULLER = "fuller"  #: the part's with the fuller accelerators (memory breakdown)
ACCELERATOR_MEAN = "accelerator_mean"  #: the mean over every accelerator of both parts
ENERGY_MEAN = "energy_mean"  #: the parts' mean weighted by their energy to train
JOB = "job"  #: recomputed for the job from the combined metrics
SAME = "same"  #: the same on both parts by construction (the iteration, the model, the run)
FIRST_TYPE = (
    "first_type"  #: the first accelerator type's (``accelerator``; its description says so)
)
MIXED_FLEET_RULES = (
    SUM,
    MAX,
    ANY,
    MIN,
    PACE,
    FULLER,
    ACCELERATOR_MEAN,
    ENERGY_MEAN,
    JOB,
    SAME,
    FIRST_TYPE,
)

TIME_METRICS: list[Metric] = [
    Metric("time_to_train_s", "s", "time to train", mixed_fleet=MAX),
    Metric("step_time_s", "s", "iteration time", mixed_fleet=SAME),
    Metric("compute_time_s", "s", "compute-bound time per iteration", mixed_fleet=PACE),
    Metric("memory_time_s", "s", "memory-bound time per iteration", mixed_fleet=PACE),
    Metric(
        "tp_comm_time_s", "s", "exposed tensor-parallel collectives per iteration", mixed_fleet=PACE
    ),
    Metric(
        "cp_comm_time_s",
        "s",
        "exposed context-parallel exchange (ring or all-gather of keys and values) per iteration",
        mixed_fleet=PACE,
    ),
    Metric(
        "ep_comm_time_s",
        "s",
        "exposed expert-parallel traffic per iteration (dispatch and combine all-to-alls, "
        "expert-tensor collectives)",
        mixed_fleet=PACE,
    ),
    Metric(
        "pp_comm_time_s",
        "s",
        "pipeline point-to-point communication per iteration",
        mixed_fleet=PACE,
    ),
    Metric(
        "dp_comm_time_s",
        "s",
        "exposed data-parallel communication (gradient reduction, sharded-weight gathers) per iteration",
        mixed_fleet=PACE,
    ),
    Metric("bubble_time_s", "s", "pipeline bubble per iteration", mixed_fleet=PACE),
    Metric("optimizer_time_s", "s", "optimizer step per iteration", mixed_fleet=PACE),
    Metric("steps_to_train", "steps", "optimizer steps to reach the target", mixed_fleet=SAME),
    Metric("tokens_to_train", "tokens", "tokens needed to reach the target", mixed_fleet=SAME),
    Metric(
        "min_tokens_to_train",
        "tokens",
        "tokens the target needs at the small-batch limit (E_min, McCandlish et al. 2018): the "
        "information the target requires, whatever the batch; tokens_to_train / this = 1 + B/B_noise",
        mixed_fleet=SAME,
    ),
    Metric("tokens_per_s", "tokens/s", "training throughput", mixed_fleet=SAME),
    Metric(
        "mfu",
        "1",
        "model FLOPs utilisation (against the peak at the candidate's matmul precision: "
        "for fp8 rows the fp8 peak)",
        mixed_fleet=JOB,
    ),
    # GiB (2^30 B), the unit of a part's capacity ("80 GB" H100: 80 GiB) and of nvidia-smi and
    # PyTorch: `memory_per_accelerator_gib <= 80` is "fits an 80 GB card"
    Metric(
        "memory_per_accelerator_gib",
        "GiB",
        "memory per accelerator on the most loaded pipeline stage (a mixed fleet: the fuller type's)",
        mixed_fleet=MAX,
    ),
    Metric("weights_memory_gib", "GiB", "weights per accelerator", mixed_fleet=FULLER),
    Metric("gradients_memory_gib", "GiB", "gradients per accelerator", mixed_fleet=FULLER),
    Metric("optimizer_memory_gib", "GiB", "optimizer state per accelerator", mixed_fleet=FULLER),
    Metric("activations_memory_gib", "GiB", "activations per accelerator", mixed_fleet=FULLER),
    Metric("parameters", "1", "model parameters (every expert)", mixed_fleet=SAME),
    Metric(
        "active_parameters",
        "1",
        "parameters one token uses (routed experts: its top-k only)",
        mixed_fleet=SAME,
    ),
    Metric("data_parallel", "1", "data-parallel degree", mixed_fleet=SAME),
]

#: the mixed fleet's own metric (0 on one accelerator type; dse.analytic.fleet)
FLEET_METRICS: list[Metric] = [
    Metric(
        "second_accelerators", "1", "accelerators of the second type (mixed fleet)", mixed_fleet=JOB
    ),
]


ENERGY_INPUTS: list[Input] = [
    Input("cooling", "str", "", "cooling type", "air", ("air", "liquid"), group="hardware"),
    Input(
        "inlet_temp_c",
        "float",
        "degC",
        "coolant / air inlet temperature",
        30.0,
        minimum=-20,
        maximum=80,
        group="hardware",
    ),
    Input(
        "idle_power_w",
        "float",
        "W",
        "accelerator static (idle) power, overrides the catalog's (hardware.yaml idle_w: "
        "H100 80 W); with a mixed fleet, both types'",
        None,
        minimum=0,
        group="power",
    ),
    Input(
        "waiting_power_w",
        "float",
        "W",
        "power of an accelerator blocked in a collective or a pipeline bubble at its maximum "
        "clock, at least idle_power_w (default: the catalog's, idle + 0.10 x (TDP - idle): "
        "H100 142 W; power.yaml activity.waiting); it scales with the clock as the dynamic power",
        None,
        minimum=0,
        group="power",
    ),
    Input(
        "power_cap_w",
        "float",
        "W",
        "accelerator power limit (default: its TDP); the clock falls to meet it",
        None,
        minimum=1,
        group="power",
    ),
    Input(
        "clock_plan",
        "str",
        "",
        "clocks of a pipeline's stages: one for every stage, or planned per stage (each stage at the "
        "lowest-energy clock that keeps the iteration time; Perseus, Chung et al. SOSP 2024)",
        "one",
        CLOCK_PLANS,
        group="power",
    ),
    Input(
        "power_floor_w",
        "float",
        "W",
        "minimum accelerator power while blocked (power smoothing; default none)",
        None,
        minimum=0,
        group="power",
    ),
    Input(
        "power_transition_s",
        "float",
        "s",
        "time the accelerators take to step between phase powers",
        0.01,
        minimum=1e-6,
        group="power",
    ),
    Input(
        "host_power_w",
        "float",
        "W",
        "host power per node (CPUs, DRAM, storage, fans)",
        800.0,
        minimum=0,
        group="power",
    ),
    Input(
        "fan_power_fraction",
        "float",
        "",
        "server fan power as a fraction of the node's other DC power (the heat the fans move; "
        "0 for a node without fans)",
        0.08,
        minimum=0,
        maximum=1,
        group="power",
    ),
    Input(
        "psu_efficiency",
        "float",
        "",
        "power-supply efficiency, AC at the wall to DC in the node (80 PLUS Titanium 0.96 at "
        "50% load, Platinum 0.94; 1: power counted at the DC side)",
        PSU_EFFICIENCY,
        minimum=0.5,
        maximum=1.0,
        group="power",
    ),
    Input(
        "accelerators_per_node",
        "int",
        "",
        "accelerators per node (shares the host power)",
        8,
        minimum=1,
        group="power",
    ),
    Input(
        "nic_power_w",
        "float",
        "W",
        "scale-out NIC static power per accelerator",
        25.0,
        minimum=0,
        group="network",
    ),
    Input(
        "scaleup_switch_power_w",
        "float",
        "W",
        "scale-up switch static power per accelerator",
        25.0,
        minimum=0,
        group="network",
    ),
    Input(
        "scaleout_switch_power_w",
        "float",
        "W",
        "scale-out switch static power per accelerator (jobs beyond one scale-up domain)",
        30.0,
        minimum=0,
        group="network",
    ),
    Input(
        "scaleup_pj_per_bit",
        "float",
        "pJ/bit",
        "scale-up fabric energy per bit",
        SCALEUP_PJ_PER_BIT,
        minimum=0,
        group="network",
    ),
    Input(
        "scaleout_pj_per_bit",
        "float",
        "pJ/bit",
        "scale-out fabric energy per bit",
        SCALEOUT_PJ_PER_BIT,
        minimum=0,
        group="network",
    ),
    Input(
        "thermal_resistance_k_per_w",
        "float",
        "K/W",
        "junction-to-inlet thermal resistance of the cooling (default: the catalog's, else "
        "52 K / TDP air, 30 K / TDP liquid; power.yaml)",
        None,
        minimum=1e-6,
        group="thermal",
    ),
    Input(
        "thermal_tau_fast_s",
        "float",
        "s",
        "time constant of the die, interface and lid or plate base (default: power.yaml's "
        "cooling path, 0.02 s)",
        None,
        minimum=1e-6,
        group="thermal",
    ),
    Input(
        "thermal_tau_slow_s",
        "float",
        "s",
        "time constant of the heat sink or cold plate (default: power.yaml's cooling path, "
        "25 s air, 3 s liquid)",
        None,
        minimum=1e-6,
        group="thermal",
    ),
    Input(
        "heat_capacity_j_per_k",
        "float",
        "J/K",
        "heat capacity of the heat sink or cold plate; sets thermal_tau_slow_s = C x its "
        "share of the resistance (air: ~500 J/K for a ~1 kg heat sink; power.yaml)",
        None,
        minimum=1e-6,
        group="thermal",
    ),
    Input(
        "pue",
        "float",
        "",
        "facility power usage effectiveness (used when cooling_cop is not set)",
        1.2,
        minimum=1.0,
        maximum=3.0,
        group="facility",
    ),
    Input(
        "cooling_cop",
        "float",
        "",
        "cooling plant coefficient of performance (overrides pue)",
        None,
        minimum=0.1,
        group="facility",
    ),
    Input(
        "energy_price_per_kwh",
        "float",
        "USD/kWh",
        "electricity price",
        0.10,
        minimum=0,
        group="economics",
    ),
    Input(
        "accelerator_hour_price",
        "float",
        "USD/h",
        "price of one accelerator-hour",
        2.0,
        minimum=0,
        group="economics",
    ),
    Input(
        "grid_carbon_kg_per_kwh",
        "float",
        "kg/kWh",
        "grid carbon intensity (CO2e)",
        0.385,
        minimum=0,
        group="economics",
    ),
    Input(
        "checkpoint_interval_s",
        "float",
        "s",
        "training time between checkpoints (0: no checkpointing; default: the Young/Daly optimum for the job's interruption rate, Daly 2006 eq. 37; none without failures)",
        None,
        minimum=0,
        group="checkpoint",
    ),
    Input(
        "failures_per_accelerator_hour",
        "float",
        "1/h",
        "job interruptions per accelerator-hour (default: Llama 3's 466 in 54 days on 16,384 H100s, Dubey et al. 2024, 3.3.4; 0: no failures)",
        FAILURES_PER_ACCELERATOR_HOUR,
        minimum=0,
        group="checkpoint",
    ),
    Input(
        "restart_time_s",
        "float",
        "s",
        "time to restart after an interruption, accelerators idle (default: ByteRobust's 'more than ten minutes' at 10k GPUs, Wan et al. 2025)",
        RESTART_TIME_S,
        minimum=0,
        group="checkpoint",
    ),
    Input(
        "checkpoint_write_gbs",
        "float",
        "GB/s",
        "checkpoint write bandwidth to storage per accelerator (default: Llama 3's 2 TB/s over 16,384 GPUs)",
        CHECKPOINT_WRITE_GBS,
        minimum=1e-9,
        group="checkpoint",
    ),
    Input(
        "checkpoint_duration_s",
        "float",
        "s",
        "time one checkpoint blocks the job (overrides bytes / checkpoint_write_gbs)",
        None,
        minimum=0,
        group="checkpoint",
    ),
    Input(
        "data_entropy_bits_per_token",
        "float",
        "bit/token",
        "entropy of the training data per token (Landauer bound)",
        3.0,
        minimum=0,
        group="workload",
    ),
]

ENERGY_METRICS: list[Metric] = [
    Metric("energy_to_train_j", "J", "facility energy to train", mixed_fleet=SUM),
    Metric("it_energy_to_train_j", "J", "IT energy to train", mixed_fleet=SUM),
    Metric("energy_per_step_j", "J", "facility energy per iteration", mixed_fleet=SUM),
    Metric(
        "energy_compute_j",
        "J",
        "energy of compute-bound work (accelerator core, dynamic)",
        mixed_fleet=SUM,
    ),
    Metric("energy_memory_j", "J", "energy of memory-bound work and HBM traffic", mixed_fleet=SUM),
    Metric(
        "energy_network_j", "J", "network energy (per-bit links, NICs, switches)", mixed_fleet=SUM
    ),
    Metric(
        "energy_scaleup_links_j",
        "J",
        "scale-up link energy of the bytes moved (part of energy_network_j; energy per bit at "
        "scaleup_clock_fraction)",
        mixed_fleet=SUM,
    ),
    Metric(
        "energy_scaleout_links_j",
        "J",
        "scale-out link energy of the bytes moved (part of energy_network_j; checkpoints' "
        "bytes included; energy per bit at scaleout_clock_fraction)",
        mixed_fleet=SUM,
    ),
    Metric(
        "energy_idle_j",
        "J",
        "accelerator static (idle) energy (with the leakage change of the cooling and inlet)",
        mixed_fleet=SUM,
    ),
    Metric(
        "energy_waiting_j",
        "J",
        "accelerator energy above idle while blocked (bubble, exposed communication, checkpoints)",
        mixed_fleet=SUM,
    ),
    Metric("energy_host_j", "J", "host energy (CPU, DRAM, storage, server fans)", mixed_fleet=SUM),
    Metric(
        "energy_power_supply_j",
        "J",
        "power-supply conversion loss (AC at the wall to DC in the node)",
        mixed_fleet=SUM,
    ),
    Metric(
        "energy_facility_overhead_j",
        "J",
        "facility overhead energy (cooling, power delivery)",
        mixed_fleet=SUM,
    ),
    Metric(
        "avg_power_per_accelerator_w",
        "W",
        "average power per accelerator while it trains (iterations and checkpoint writes; restarts after interruptions excluded)",
        mixed_fleet=ACCELERATOR_MEAN,
    ),
    Metric(
        "peak_power_per_accelerator_w",
        "W",
        "peak (busy-phase) power per accelerator (a mixed fleet: the larger of its two types')",
        mixed_fleet=MAX,
    ),
    Metric("facility_avg_power_w", "W", "average facility power", mixed_fleet=SUM),
    Metric("facility_peak_power_w", "W", "peak facility power", mixed_fleet=SUM),
    Metric(
        "node_avg_power_w",
        "W",
        "average power of one node at the wall while it trains (its accelerators, host, fans, "
        "NICs, switch shares and power-supply loss; no facility overhead)",
        mixed_fleet=ACCELERATOR_MEAN,
    ),
    Metric(
        "node_peak_power_w",
        "W",
        "peak (busy-phase) power of one node at the wall",
        mixed_fleet=MAX,
    ),
    Metric(
        "facility_power_swing_w",
        "W",
        "facility power step between busy and blocked (bubble, communication, checkpoint) phases",
        mixed_fleet=SUM,
    ),
    Metric(
        "facility_power_ramp_w_per_s", "W/s", "largest facility power ramp rate", mixed_fleet=SUM
    ),
    Metric(
        "checkpoint_time_s",
        "s",
        "time spent writing checkpoints over the run (accelerators blocked)",
        mixed_fleet=MAX,
    ),
    Metric(
        "checkpoint_overhead",
        "1",
        "share of the time to train writing checkpoints (failure-free)",
        mixed_fleet=MAX,
    ),
    Metric(
        "checkpoint_period_s",
        "s",
        "training time between checkpoints (the input, or the Young/Daly optimum)",
        mixed_fleet=SAME,
    ),
    Metric(
        "goodput",
        "1",
        "training time kept / wall time (interruptions, restarts and checkpoints cost the rest)",
        mixed_fleet=MIN,
    ),
    Metric("interruptions", "1", "expected job interruptions over the run", mixed_fleet=MAX),
    Metric(
        "lost_time_s",
        "s",
        "wall time lost to interruptions (restarts and redone work)",
        mixed_fleet=MAX,
    ),
    Metric(
        "effective_clock_mhz",
        "MHz",
        "clock the accelerators run at (after cap and throttling; a mixed fleet: the first type's)",
        mixed_fleet=FIRST_TYPE,
    ),
    Metric(
        "power_capped",
        "bool",
        "clock lowered to meet the power cap (the input, at most the TDP; the "
        "temperature may then lower it further: throttled)",
        mixed_fleet=ANY,
    ),
    Metric("throttled", "bool", "clock lowered to hold the slowdown temperature", mixed_fleet=ANY),
    Metric(
        "peak_junction_temp_c",
        "degC",
        "peak junction temperature (a mixed fleet: the hotter type's)",
        mixed_fleet=MAX,
    ),
    Metric("mean_junction_temp_c", "degC", "time-averaged junction temperature", mixed_fleet=MAX),
    Metric(
        "junction_temp_swing_c",
        "degC",
        "junction temperature swing within an iteration",
        mixed_fleet=MAX,
    ),
    Metric(
        "max_junction_temp_rate_c_per_s",
        "degC/s",
        "largest junction temperature rate of change",
        mixed_fleet=MAX,
    ),
    Metric(
        "tokens_per_j",
        "tokens/J",
        "tokens per joule (facility; = performance per watt)",
        mixed_fleet=JOB,
    ),
    Metric("energy_time_product_js", "J*s", "energy-time product", mixed_fleet=JOB),
    Metric(
        "energy_utilisation_factor",
        "1",
        "share of facility energy spent on busy accelerator work",
        mixed_fleet=ENERGY_MEAN,
    ),
    Metric(
        "energy_efficiency_index",
        "1",
        "useful utilisation x Landauer bound / facility energy (useful utilisation: the model FLOPs of min_tokens_to_train over the time to train, of the peak)",
        mixed_fleet=JOB,
    ),
    Metric("cost_usd", "USD", "training cost (accelerator-hours and energy)", mixed_fleet=SUM),
    Metric("energy_cost_usd", "USD", "electricity cost", mixed_fleet=SUM),
    Metric("carbon_kg", "kg", "operational emissions (CO2e)", mixed_fleet=SUM),
    Metric(
        "landauer_bound_j",
        "J",
        "Landauer bound k_B T ln2 N_params H_data (H_data = min_tokens_to_train x data_entropy_bits_per_token)",
        mixed_fleet=SAME,
    ),
    Metric("landauer_ratio", "1", "facility energy / Landauer bound", mixed_fleet=JOB),
]

#: metrics of evaluator versions before 0.19, each a copy of another in a unit of its own:
#: ``{name: (the metric stored instead, the unit the copy was in)}`` (a study naming one is
#: told to show the SI metric in that unit with ``display_units``)
REMOVED_METRICS: dict[str, tuple[str, str]] = {
    "time_to_train_days": ("time_to_train_s", "days"),
    "energy_to_train_mwh": ("energy_to_train_j", "MWh"),
    "it_energy_to_train_mwh": ("it_energy_to_train_j", "MWh"),
}

INPUTS: dict[str, Input] = {i.name: i for i in (*TIME_INPUTS, *ENERGY_INPUTS)}
METRICS: dict[str, Metric] = {m.name: m for m in (*TIME_METRICS, *ENERGY_METRICS, *FLEET_METRICS)}
assert tuple(m.name for m in TIME_METRICS) == METRIC_FIELDS  # the TimeResult's metric fields

#: text inputs the physics reads as an index into their choices: a value that is not a
#: choice reads as the declared default (the others, accelerator, model and precision,
#: make the candidate infeasible with a reason instead)
CODED_CHOICES = (
    "recompute",
    "framework",
    "scaleup_topology",
    "scaleout_fabric",
    "cooling",
    "context_parallel_algorithm",
    "activation_offload",
    "moe_dispatcher",
    "clock_plan",
    "batch_schedule",
    "adapter",
    "lora_targets",
)


def known_choices(name: str, uniques: list) -> list:
    """The distinct values of text input ``name`` with any that is not one of its choices
    replaced by its default (for :data:`CODED_CHOICES`; others unchanged)."""
    inp = INPUTS[name]
    if name not in CODED_CHOICES:
        return uniques
    return [u if u in inp.choices else inp.default for u in uniques]


def complete(cfg: dict, n_rows: int | None = None) -> dict:
    """``cfg`` (input name -> array) with every declared input present: a missing input is
    its default for every row, a NaN in a numeric input with a default is that default,
    and a coded text value that is not a choice is the default (:func:`known_choices`).
    Keys that are not inputs (e.g. shape fields of a custom model) pass through."""
    n_rows = len(next(iter(cfg.values()))) if n_rows is None else n_rows
    out = dict(cfg)
    for name, inp in INPUTS.items():
        value = cfg.get(name)
        if value is None:
            if inp.kind == "str":
                out[name] = Factorised(np.zeros(n_rows, dtype=np.int64), [inp.default])
            else:
                out[name] = np.full(n_rows, np.nan if inp.default is None else float(inp.default))
        elif inp.kind == "str":
            codes, uniques = factorise(value)
            known = known_choices(name, uniques)
            if (codes < 0).any():  # missing: the default, after the distinct values
                codes, known = np.where(codes < 0, len(known), codes), [*known, inp.default]
            if known != uniques:
                out[name] = Factorised(codes, known)
        elif inp.default is not None:
            arr = np.asarray(value, dtype=float)
            missing = np.isnan(arr)
            if missing.any():
                out[name] = np.where(missing, float(inp.default), arr)
    return out

"""Time and memory model: workload, parallel layout, memory fit, step time, training length.

``evaluate(cfg, clock_mhz=None)`` returns a :class:`~dse.analytic.time.result.TimeResult`:
the time metrics, the infeasibility reasons and what the energy model needs (hardware,
clock, the step-time breakdown, traffic). ``cfg`` maps every declared input to an array,
missing values already filled with the declared defaults
(:func:`dse.analytic.declarations.complete`); NaN is left only where an input has no
default and NaN means "take it from the catalog". Every equation and its source is in
docs/model.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from dse.analytic import rows as _rows
from dse.analytic.columns import Factorised, choice_codes, factorise, one_value
from dse.analytic.rows import where
from dse.analytic.time import (
    adapters,
    experts,
    frameworks,
    hardware,
    memory,
    parallelism,
    software,
    step,
    training,
    workload,
)
from dse.analytic.time.collectives import (
    CP_ALGORITHMS,
    MOE_DISPATCHERS,
    SCALEOUT_FABRICS,
    SCALEUP_TOPOLOGIES,
    Network,
)
from dse.analytic.time.reasons import REASON_CODE, Reasons
from dse.analytic.time.result import TimeResult

#: the inputs only :func:`timed` reads (the clock)
CLOCK_INPUTS = ("clock_mhz", "clock_fraction")
#: the clock's inputs and the energy half's own, which the time model does not read: rows
#: that agree in every other input share their :class:`Front`
NOT_FRONT_INPUTS = frozenset(
    {
        *CLOCK_INPUTS,
        *(
            "accelerator_hour_price accelerators_per_node checkpoint_duration_s "
            "checkpoint_interval_s checkpoint_write_gbs clock_plan cooling cooling_cop "
            "data_entropy_bits_per_token energy_price_per_kwh failures_per_accelerator_hour "
            "fan_power_fraction grid_carbon_kg_per_kwh heat_capacity_j_per_k host_power_w "
            "idle_power_w inlet_temp_c nic_power_w power_cap_w power_floor_w "
            "power_transition_s psu_efficiency pue restart_time_s scaleout_pj_per_bit "
            "scaleout_switch_power_w scaleup_pj_per_bit scaleup_switch_power_w "
            "thermal_resistance_k_per_w thermal_tau_fast_s thermal_tau_slow_s waiting_power_w"
        ).split(),
    }
)
#: the front is computed once per distinct combination of its inputs when there are at most
#: this share of distinct ones among a block's rows, else for every row: spreading its ~130
#: arrays back to the rows costs about half of computing it for every row (measured on the
#: nsga2 example's grid and the bench mix, 124,416 rows: front 135-144 ms, spread 63-74 ms,
#: the key 7-9 ms; docs/model.md, section 10)
SHARED_FRONT_SHARE = 0.4


def evaluate(
    cfg: dict[str, np.ndarray],
    clock_mhz: np.ndarray | None = None,
    part: parallelism.Stages | None = None,
    *,
    share: bool = True,
) -> TimeResult:
    """Time metrics for every candidate in ``cfg`` (input name -> array).

    ``clock_mhz`` overrides the study's clock (the energy model uses it for power caps
    and thermal throttling). ``part``: the stages of one part of a mixed fleet's pipeline
    (:mod:`dse.analytic.fleet`; a :class:`~.parallelism.Stages` with ``part`` set) to time
    instead of the whole pipeline. Infeasible candidates get a reason and may have NaN metrics.
    ``share=False``: one :func:`front` per candidate, without looking for repeated inputs.
    """
    return timed(front(cfg, part, share=share), cfg, clock_mhz)


@dataclass(frozen=True, slots=True)
class Front:
    """What the time model computes before the clock, which depends on the inputs other
    than the clock alone: the step's inputs, the memory, the run's length and the reasons
    raised before and after the clock's own check (int8 codes, 0: none). ``rows``: each
    candidate's row in these arrays (None: one row per candidate), when candidates that
    agree in every input but the clock share one."""

    inputs: step.StepInputs  # (its network None: made by timed from ``network``)
    mem: memory.MemoryBreakdown
    run: _Run
    before_clock: np.ndarray
    after_clock: np.ndarray
    #: the network's inputs (:class:`NetworkInputs`): the network is made by :func:`timed`,
    #: for the candidates it times only (a refused candidate needs none)
    network: NetworkInputs
    rows: np.ndarray | None = None

    def take(self, rows: np.ndarray) -> Front:
        """The front of the candidates ``rows`` (an index array) only, one row each."""
        return self._picked(rows if self.rows is None else self.rows[rows], _rows.take)

    def per_candidate(self) -> Front:
        """The front with one row per candidate."""
        return self if self.rows is None else self._picked(self.rows, _rows.spread)

    def of_candidates(self, rows: np.ndarray, cfg: dict[str, np.ndarray] | None = None) -> Front:
        """The front of the candidates ``rows`` (an index array) only: still shared (the same
        arrays, the candidates' rows into them) where it is, else one row each. ``cfg``:
        those candidates' inputs, where the caller has them: the accelerator's catalog fields
        (:func:`hardware_of`) are then looked up again from the text columns' codes, not picked
        row by row (~3.3 against ~5.4 ms, 74,000 of 131,072 rows of the bench mix; the
        hardware arrays hold values only, which the step's whole-block tests read as they
        are). The model shape is picked: which of its fields are arrays follows the whole
        block (a block with a mixture-of-experts row has every row's expert fields), and so
        do the front's other parts."""
        if self.rows is not None:
            return replace(self, rows=self.rows[rows])
        if cfg is None:
            return self.take(rows)
        rest = replace(self, inputs=replace(self.inputs, hw=None)).take(rows)
        return replace(rest, inputs=replace(rest.inputs, hw=hardware_of(cfg)))

    def reason_codes(self, cfg: dict[str, np.ndarray]) -> np.ndarray:
        """Each candidate's time-side reason code (0: none), as :func:`timed` gives it at the
        candidates' own clock (``cfg``: their inputs, of which only :data:`CLOCK_INPUTS` are
        read), without timing their step."""
        at = slice(None) if self.rows is None else self.rows
        hw = self.inputs.hw
        with np.errstate(invalid="ignore"):
            _, outside = _clock(cfg, hw.clock_max_mhz[at], hw.clock_min_mhz[at], None)
        return _codes(self.before_clock[at], outside, self.after_clock[at])

    def metrics(self) -> dict[str, np.ndarray]:
        """The time metrics known before the step (:data:`.result.FRONT_METRICS`), per candidate."""
        out = _front_metrics(self.mem, self.inputs.layout, self.run)
        return out if self.rows is None else {k: v[self.rows] for k, v in out.items()}

    def _picked(self, at: np.ndarray, pick) -> Front:
        names = ("inputs", "mem", "run", "before_clock", "after_clock", "network")
        return Front(*(pick(getattr(self, name), at) for name in names))


def front(
    cfg: dict[str, np.ndarray], part: parallelism.Stages | None = None, *, share: bool = True
) -> Front:
    """The clock-independent part of :func:`evaluate` for the candidates ``cfg``: once per
    distinct combination of the inputs it reads (all but :data:`NOT_FRONT_INPUTS`) when
    candidates repeat them (a grid's layouts across its clocks and power settings), else
    once per candidate. Outputs are the same bit for bit either way: the model's
    operations are element-wise, and its whole-block tests (any row with experts, with a
    ZeRO-3 stage, ...) see the same set of values."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if (
            share
            and part is None
            and _rows.distinct_share(cfg, NOT_FRONT_INPUTS) <= SHARED_FRONT_SHARE
        ):
            first, inverse = _rows.distinct_rows(cfg, NOT_FRONT_INPUTS)
            if len(first) <= SHARED_FRONT_SHARE * len(inverse):
                shared = _front(_rows.take_inputs(cfg, first), None)
                return replace(shared, rows=inverse)
        return _front(cfg, part)


def timed(f: Front, cfg: dict[str, np.ndarray], clock_mhz: np.ndarray | None = None) -> TimeResult:
    """:func:`evaluate` from the candidates' :func:`front` (``cfg``: their inputs, of which
    only the clock's, :data:`CLOCK_INPUTS`, are read): the clock, the step time at it and
    the result."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        f = f.per_candidate()
        x = replace(f.inputs, net=_network(f.network, f.inputs.hw))
        clock, outside = _clock(cfg, x.hw.clock_max_mhz, x.hw.clock_min_mhz, clock_mhz)
        t = step.step_time(x, clock / x.hw.clock_max_mhz)
        codes = _codes(f.before_clock, outside, f.after_clock)
        return _result(t, x, f.mem, clock, codes, f.run)


def _codes(before_clock, outside, after_clock) -> np.ndarray:
    """The reason codes: the first reason raised wins, those before the clock's check, the
    clock's (``outside`` its range), the rest."""
    return np.where(
        before_clock != 0,
        before_clock,
        np.where(outside, np.int8(REASON_CODE[_CLOCK_REASON]), after_clock),
    ).astype(np.int8, copy=False)


def _f(cfg, name: str) -> np.ndarray:
    """Input ``name`` as a float array (integer and boolean columns converted)."""
    return np.asarray(cfg[name], dtype=float)


def _front(cfg, part) -> Front:
    n_rows = len(cfg["accelerator"])
    reasons = Reasons()
    shape = workload.resolve_shape(cfg["model"], cfg)
    hw = hardware_of(cfg)
    stack = frameworks.lookup(_stack_names(cfg["accelerator"], cfg["framework"]))
    # the run's fp8_param_gather input turns the stack's fp8 weight gather on (torchao's
    # enable_fsdp_float8_all_gather is a flag of the run, not of torchtitan)
    stack = replace(
        stack, fp8_param_gather=np.maximum(stack.fp8_param_gather, _f(cfg, "fp8_param_gather"))
    )
    reasons.flag(~np.isfinite(hw.hbm_capacity_bytes), "unknown accelerator")
    reasons.flag(
        ~np.isfinite(shape.layers + shape.hidden + shape.heads + shape.seq_len + shape.vocab),
        "unknown model preset and incomplete shape",
    )
    # one rule for every vendor: fp8 where the catalog's peak_tflops.fp8 is null is refused
    reasons.flag((hw.precision_ok == 0) & (hw.fp8 > 0), "no fp8 units on this accelerator")
    reasons.flag(hw.precision_ok == 0, "precision not supported by the accelerator")
    policy = choice_codes(cfg["recompute"], memory.RECOMPUTE)
    # `selective` is the stack's own selective policy (frameworks.yaml selective_policy)
    policy = np.where(policy == 1, stack.selective_policy, policy)
    # torchtitan's op-level AC is timed as what it recomputes (layer.op_recompute_share): code 3
    op = policy == memory.RECOMPUTE.index("op")
    lay = _layout(cfg, stack, np.where(op, 3.0, memory.time_recompute(policy)))
    reasons.flag(
        ~stack.offers(lay.zero_stage),
        "the training stack does not offer this sharding (ZeRO) stage",
    )
    reasons.flag(
        (lay.interleave > 1) & (stack.interleaved_schedule == 0),
        "the training stack has no interleaved pipeline schedule",
    )
    stages = parallelism.pipeline_stages(shape.layers, lay.pp)
    checks = parallelism.infeasible(lay, stages, shape)
    ex, expert_checks = experts.layout(
        shape,
        _f(cfg, "expert_parallel"),
        _f(cfg, "expert_tensor_parallel"),
        _f(cfg, "capacity_factor"),
        _f(cfg, "moe_a2a_overlap"),
        choice_codes(cfg["moe_dispatcher"], MOE_DISPATCHERS) == 1,
        lay,
    )
    for mask, reason in (*checks, *expert_checks):
        reasons.flag(mask, reason)
    if ex.on:  # Megatron's argument check: MoE with tensor parallelism runs sequence-parallel
        reasons.flag(
            (ex.frac > 0)
            & (lay.tp > 1)
            & (lay.sequence_parallel == 0)
            & (stack.moe_tp_needs_sp == 1),
            "the training stack needs sequence parallelism for a mixture-of-experts model with tensor "
            "parallelism",
        )
    ad = adapters.of(cfg["adapter"], _f(cfg, "lora_rank"), cfg["lora_targets"], shape)
    if ad is not None:
        lora = ad.lora > 0
        reasons.flag(
            lora & ((shape.experts > 0) | (shape.kv_lora_rank > 0)),
            "LoRA adapters on a mixture-of-experts or latent-attention model are not modelled",
        )
        reasons.flag(
            lora & np.isfinite(_f(cfg, "target_loss")),
            "a target loss is a pre-training loss (Chinchilla fit): a LoRA fine-tuning run "
            "states target_tokens",
        )
        reasons.flag(
            lora & (ad.rank > shape.hidden),
            "LoRA rank above the model width: not a low-rank adapter",
        )
        reasons.flag(
            lora & (choice_codes(cfg["batch_schedule"], ("constant",)) != 0),
            "a batch-size schedule follows the pre-training critical-batch law: not modelled "
            "for LoRA fine-tuning",
        )
    if part is not None:  # a part of a mixed fleet's pipeline (dse.analytic.fleet)
        stages = replace(part, units=stages.units)
    before_clock = reasons.codes(n_rows)
    reasons = Reasons()  # the reasons raised after the clock's check
    counts = workload.ParameterCounts.of(shape)
    tokens_iter = lay.global_batch * shape.seq_len
    moe_memory = None
    if ex.on:
        T = lay.micro_batch * shape.seq_len / lay.cp
        moe_memory = memory.ExpertMemory(
            params_per_layer=ex.params,
            split=ex.ep * ex.etp,
            edp=np.where(ex.frac > 0, ex.edp, 1.0),
            activation_bytes=ex.frac * experts.activation_bytes(shape, ex, lay.tp, T),
        )
    offload_auto = choice_codes(cfg["activation_offload"], memory.ACTIVATION_OFFLOAD) == 0
    mem = _memory(
        cfg, (stack, hw, shape, lay, stages, counts, ad), policy, moe_memory, offload_auto
    )
    reasons.flag(mem.total_bytes > hw.hbm_capacity_bytes, "does not fit in accelerator memory")
    reasons.flag(
        mem.host_bytes > hw.host_memory_bytes,
        "offloaded activations do not fit in host memory",
    )
    inputs = step.StepInputs(
        shape=shape,
        layout=lay,
        stages=stages,
        counts=counts,
        ex=ex,
        hw=hw,
        stack=stack,
        net=None,
        offload_bytes=mem.offload_bytes_per_micro_batch,
        adapters=ad,
        attention_span=_attention_span(cfg, shape.seq_len),
    )
    params = workload.parameter_count(shape, counts.layer, counts.embedding)
    active = workload.active_parameter_count(shape, counts.layer, params)
    # the training-length law takes the parameters a token uses (Chinchilla at N = N_active)
    d_ref, b_noise = training.resolve_target(
        active, _f(cfg, "target_tokens"), _f(cfg, "target_loss"), _f(cfg, "b_noise_tokens")
    )
    if ad is not None:  # a fine-tune's tokens at any batch (_fine_tuning_noise)
        b_noise = _fine_tuning_noise(cfg, ad, b_noise)
    reasons.flag(~np.isfinite(d_ref), "target loss unreachable at this model size (Chinchilla fit)")
    ref_batch_tokens = _rows.nan_to_num(_f(cfg, "target_batch_size") * shape.seq_len)
    steps = training.steps_to_target(d_ref, ref_batch_tokens, tokens_iter, b_noise)
    min_tokens = training.tokens_to_target(d_ref, ref_batch_tokens, 0.0, b_noise)
    run = _Run(
        steps=steps,
        tokens_per_step=tokens_iter,
        min_tokens=min_tokens,
        parameters=params,
        active_parameters=active,
    )
    return Front(
        inputs=inputs,
        mem=mem,
        run=run,
        before_clock=before_clock,
        after_clock=reasons.codes(n_rows),
        network=_network_inputs(cfg),
    )


def _fine_tuning_noise(cfg, ad: adapters.Adapters, b_noise) -> np.ndarray:
    """The noise scale of the critical-batch law (section 8) for LoRA candidates: the law's
    default is Kaplan's critical batch at the Chinchilla loss of training from scratch, a
    pre-training quantity, so a LoRA run without a stated ``b_noise_tokens`` takes an
    infinite one (its ``target_tokens`` at any batch, no rescaling); a stated one applies."""
    untold = (ad.lora > 0) & ~np.isfinite(_f(cfg, "b_noise_tokens"))
    return where(untold, np.inf, b_noise)


def _attention_span(cfg, seq_len) -> np.ndarray | None:
    """Keys per query where packed documents are masked apart (``document_tokens``, at most
    the sequence); None where no candidate gives documents (attention over the sequence)."""
    documents = _f(cfg, "document_tokens")
    if one_value(documents) and not np.isfinite(documents[0]):
        return None  # (the input left at its default, one NaN for every row)
    given = np.isfinite(documents)
    if not given.any():
        return None
    return where(given, np.minimum(documents, seq_len), seq_len)


def hardware_of(cfg) -> hardware.Hardware:
    """The candidates' accelerators as the time model runs them: the catalog's fields at the
    candidates' precision (looked up by the text columns' codes), their kernels' efficiency
    scaled for early software on a new architecture (``software_release``:
    :func:`.software.early`). Every path that times a candidate reads its hardware here."""
    return software.early(
        hardware.lookup(cfg["accelerator"], cfg["precision"]), cfg["software_release"]
    )


def _stack_names(accelerator, framework) -> Factorised:
    """The training stack each candidate is evaluated with: its ``framework``, or where
    the catalog says its part is trained with one stack only (``training_stack``: a TPU is
    trained through XLA, the ``maxtext`` stack), that stack (docs/model.md, section 5)."""
    own = hardware.training_stacks(accelerator)
    if own is None:
        return framework
    own_codes, own_names = own
    fw_codes, fw_names = factorise(framework)
    codes = where(own_codes >= 0, own_codes + len(fw_names), fw_codes)
    return Factorised(codes, [*fw_names, *own_names])


def _memory(cfg, setup, policy, moe_memory, offload_auto) -> memory.MemoryBreakdown:
    """The memory breakdown (:func:`~.memory.memory_breakdown`) with activation offloading as
    the ``activation_offload`` input and the stack allow (docs/model.md, section 3): with
    ``auto``, a stack that offloads whole layers offloads just enough to fit, and one that
    offloads through its recompute policy (MaxText) takes its offloaded policy
    (``minimal`` -> ``offload``) where ``minimal`` does not fit; only on a part whose host
    link and host memory the catalog gives."""
    stack, hw, shape, lay, stages, counts, ad = setup
    auto = offload_auto & (hw.host_link_bps > 0) & (hw.host_memory_bytes > 0)

    def breakdown(policy):
        return memory.memory_breakdown(
            shape,
            lay,
            stages,
            counts,
            hw.reserved_bytes,
            moe_memory,
            _stack_memory(cfg, stack, hw, shape, policy, auto),
            hw.hbm_capacity_bytes,
            ad,
        )

    mem = breakdown(policy)
    switch = auto & (stack.offload_policy > 0) & (policy == 4)
    switch &= mem.total_bytes > hw.hbm_capacity_bytes
    if switch.any():  # MaxText: remat_policy minimal -> minimal_offloaded where it does not fit
        mem = breakdown(where(switch, 5, policy))
    return mem


def _stack_memory(cfg, stack, hw, shape, policy, auto=False) -> memory.StackMemory:
    """The stack's and the run's memory facts (:class:`~.memory.StackMemory`): a compiled
    loss keeps 4 B per logit (16-bit logits and gradient); Transformer Engine's 1-byte
    activations only in fp8; ZeRO-3 buffers of one collective call's parameters; no dropout masks for the gated-MLP (Llama-family) presets,
    which train with dropout 0."""
    loss = where(_f(cfg, "compiled_loss") > 0, 4.0, stack.loss_bytes_per_logit)
    return memory.StackMemory(
        policy=policy,
        fp8_activations=stack.fp8_activations * hw.fp8,
        loss_bytes_per_logit=np.minimum(loss, stack.loss_bytes_per_logit),
        tp_sharded_activations=stack.activations_tp_sharded,
        allocator_overhead=stack.allocator_overhead,
        # the unit gathered is one collective call's (a layer for FSDP, a weight matrix for
        # DeepSpeed's ZeRO-3: zero3_calls_per_layer)
        gathered_bytes_per_layer_param=stack.gathered_bytes_per_layer_param
        / np.maximum(stack.zero3_calls_per_layer, 1.0),
        pp_keeps_unsharded=stack.pp_keeps_unsharded,
        pp_keeps_outputs=stack.pp_keeps_outputs,
        offload_layers=_rows.nan_to_num(_f(cfg, "activation_offload_layers")),
        dropout_masks=2.0 * (1.0 - shape.gated_mlp),
        # the gathered sequence-parallel inputs torchtitan's linears save: 16-bit, or the
        # Float8 tensor torchao's Float8ColwiseParallel gathers (1 B) in fp8
        sp_gathered_bytes=stack.sp_saves_gathered_inputs * (2.0 - hw.fp8),
        # PyTorch context_parallel's ring-attention buffers in the backward (torchtitan)
        torch_cp_buffers=stack.torch_cp_buffers,
        # whole-layer offloading where the stack has it (Megatron-Core: not with
        # recomputation nor with pipeline parallelism)
        auto_offload=(
            auto
            & (stack.activation_offload > 0)
            & (
                (stack.offload_plain_only == 0)
                | ((policy == 0) & (_f(cfg, "pipeline_parallel") == 1))
            )
        ).astype(float),
    )


def _layout(cfg, stack, recompute) -> parallelism.Layout:
    """The layout inputs as a :class:`~.parallelism.Layout`: sequence parallelism only with
    tensor parallelism, the ZeRO stage the stack's default where not given, the recompute
    code (index into ``memory.RECOMPUTE``), and whether the context-parallel exchange
    overlaps the attention (1 for ring attention, 0 for all-gather attention)."""
    tp = _f(cfg, "tensor_parallel")
    zero = _f(cfg, "zero_stage")
    return parallelism.Layout.of(
        accelerators=_f(cfg, "num_accelerators"),
        tp=tp,
        cp=_f(cfg, "context_parallel"),
        pp=_f(cfg, "pipeline_parallel"),
        global_batch=_f(cfg, "global_batch_size"),
        micro_batch=_f(cfg, "micro_batch_size"),
        interleave=_f(cfg, "interleave"),
        sequence_parallel=where(tp > 1, _f(cfg, "sequence_parallel"), 0.0),
        zero_stage=where(np.isfinite(zero), zero, stack.default_zero_stage),
        recompute=recompute,
        flash_attention=_f(cfg, "flash_attention"),
        cp_overlap=(choice_codes(cfg["context_parallel_algorithm"], CP_ALGORITHMS) != 1).astype(
            float
        ),
    )


_CLOCK_REASON = "clock outside the accelerator's range"


def _clock(cfg, clock_max_mhz, clock_min_mhz, clock_mhz) -> tuple[np.ndarray, np.ndarray]:
    """The SM clock (MHz): ``clock_mhz`` if given (the energy model's re-timing), else the
    input clock, else ``clock_fraction`` of the maximum, else the maximum, clipped to the
    accelerator's range; and whether it was outside (:data:`_CLOCK_REASON`)."""
    clock = _f(cfg, "clock_mhz") if clock_mhz is None else np.asarray(clock_mhz, dtype=float)
    fraction = _f(cfg, "clock_fraction")
    clock = where(
        np.isfinite(clock),
        clock,
        where(np.isfinite(fraction), fraction * clock_max_mhz, clock_max_mhz),
    )
    outside = (clock > clock_max_mhz * (1 + 1e-9)) | (clock < clock_min_mhz * (1 - 1e-9))
    return np.clip(clock, clock_min_mhz, clock_max_mhz), outside


@dataclass(frozen=True, slots=True)
class NetworkInputs:
    """The inputs of a candidate's network (:func:`_network`), NaN where not given (the
    catalog's then): per-accelerator scale-up and scale-out bandwidth (GB/s) and their link
    clocks (fraction of the maximum), the latencies (us), the scale-up domain's size, and
    the scale-up topology and scale-out fabric as their choice codes (-1: not given)."""

    scaleup_bw_gbs: np.ndarray
    scaleup_clock_fraction: np.ndarray
    scaleup_latency_us: np.ndarray
    scaleout_latency_us: np.ndarray
    scaleup_topology: np.ndarray
    scaleup_size: np.ndarray
    scaleout_bw_gbs: np.ndarray
    scaleout_clock_fraction: np.ndarray
    scaleout_fabric: np.ndarray


def _network_inputs(cfg) -> NetworkInputs:
    """The candidates' :class:`NetworkInputs` from their input table."""
    return NetworkInputs(
        scaleup_bw_gbs=_f(cfg, "scaleup_bw_gbs"),
        scaleup_clock_fraction=_f(cfg, "scaleup_clock_fraction"),
        scaleup_latency_us=_f(cfg, "scaleup_latency_us"),
        scaleout_latency_us=_f(cfg, "scaleout_latency_us"),
        scaleup_topology=choice_codes(cfg["scaleup_topology"], SCALEUP_TOPOLOGIES),
        scaleup_size=_f(cfg, "scaleup_size"),
        scaleout_bw_gbs=_f(cfg, "scaleout_bw_gbs"),
        scaleout_clock_fraction=_f(cfg, "scaleout_clock_fraction"),
        scaleout_fabric=choice_codes(cfg["scaleout_fabric"], SCALEOUT_FABRICS),
    )


def _network(x: NetworkInputs, hw) -> Network:
    """The candidate's network: the inputs where given (finite), else the catalog's
    scale-up domain size, bandwidth and topology and the calibrated latencies. Each
    fabric's bandwidth follows its link clock (``scaleup_clock_fraction``,
    ``scaleout_clock_fraction``: voltage-frequency scaling, docs/model-energy.md); the
    latencies do not."""
    up_bw = x.scaleup_bw_gbs * 1e9
    up_bw = where(np.isfinite(up_bw), up_bw, hw.scaleup_bw_bps) * x.scaleup_clock_fraction
    up_lat = x.scaleup_latency_us
    up_lat = where(np.isfinite(up_lat), up_lat, hw.collective_latency_us) * 1e-6
    out_lat = x.scaleout_latency_us
    out_lat = where(np.isfinite(out_lat), out_lat, hw.scaleout_latency_us) * 1e-6
    up_topo = x.scaleup_topology
    up_topo = where(up_topo < 0, hw.scaleup_topology, up_topo)
    size = x.scaleup_size
    size = where(np.isfinite(size), size, hw.scaleup_domain)
    return Network(
        size=size,
        up_bw=up_bw,
        up_lat=up_lat,
        up_topo=up_topo,
        out_bw=_scaleout_bw(x, hw) * x.scaleout_clock_fraction,
        out_lat=out_lat,
        out_fabric=x.scaleout_fabric,
        eff=hw.collective_eff,
        call_lat=hw.collective_call_us * 1e-6,
    )


#: scale-out bandwidth per accelerator per direction where neither the study nor the part's
#: catalog entry gives one: one 400 Gb/s NIC per GPU (NVIDIA ConnectX-7 / NDR InfiniBand,
#: the DGX H100 compute fabric's one NIC per GPU)
DEFAULT_SCALEOUT_BW_BPS = 50e9


def _scaleout_bw(x: NetworkInputs, hw) -> np.ndarray:
    """Scale-out bandwidth per accelerator per direction (B/s): the input where given, else
    the part's own scale-out network (catalog ``scaleout_bw_gbs``: a TPU's data-centre
    network between slices), else :data:`DEFAULT_SCALEOUT_BW_BPS`."""
    own = where(np.isfinite(hw.scaleout_bw_bps), hw.scaleout_bw_bps, DEFAULT_SCALEOUT_BW_BPS)
    given = x.scaleout_bw_gbs * 1e9
    return where(np.isfinite(given), given, own)


@dataclass(frozen=True, slots=True)
class _Run:
    """The training run's length and size."""

    steps: np.ndarray  # optimizer steps to the target
    tokens_per_step: np.ndarray  # tokens per iteration
    min_tokens: np.ndarray  # tokens to the target at the small-batch limit (E_min)
    parameters: np.ndarray  # every parameter
    active_parameters: np.ndarray  # the parameters one token uses


def _front_metrics(mem, lay, run: _Run) -> dict[str, np.ndarray]:
    """The :data:`.result.FRONT_METRICS` from the memory breakdown, the layout and the run."""
    gib = hardware.GIB  # GiB, as the capacity and as nvidia-smi and PyTorch count
    return dict(
        steps_to_train=run.steps,
        tokens_to_train=run.steps * run.tokens_per_step,
        min_tokens_to_train=run.min_tokens,
        memory_per_accelerator_gib=mem.total_bytes / gib,
        weights_memory_gib=mem.weights_bytes / gib,
        gradients_memory_gib=mem.gradients_bytes / gib,
        optimizer_memory_gib=mem.optimizer_bytes / gib,
        activations_memory_gib=mem.activations_bytes / gib,
        parameters=run.parameters,
        active_parameters=run.active_parameters,
        data_parallel=lay.dp,
    )


def _result(t, x: step.StepInputs, mem, clock, codes, run: _Run) -> TimeResult:
    """The :class:`TimeResult`: the public metrics from the breakdowns, and the hand-over
    (the model FLOPs here, for the candidates timed only)."""
    hw, lay = x.hw, x.layout
    steps, tokens_iter = run.steps, run.tokens_per_step
    model_flops = workload.model_flops_per_iteration(
        x.shape, tokens_iter, x.adapters, x.attention_span
    )
    time_to_train_s = steps * t.step_s
    n = lay.accelerators
    return TimeResult(
        time_to_train_s=time_to_train_s,
        step_time_s=t.step_s,
        compute_time_s=t.compute_s,
        memory_time_s=t.memory_s,
        tp_comm_time_s=np.maximum(t.layer_comm_s - (t.cp_comm_s + t.ep_comm_s), 0.0),
        cp_comm_time_s=t.cp_comm_s,
        ep_comm_time_s=t.ep_comm_s,
        pp_comm_time_s=t.pp_comm_s,
        dp_comm_time_s=t.dp_comm_s,
        bubble_time_s=t.bubble_s,
        optimizer_time_s=t.optimizer_s,
        tokens_per_s=tokens_iter / t.step_s,
        mfu=model_flops / (t.step_s * n * hw.peak_flops),
        **_front_metrics(mem, lay, run),
        reason_code=codes,
        hw=hw,
        clock_mhz=clock,
        breakdown=t,
        memory=mem,
        num_accelerators=n,
        model_flops=model_flops,
        micro_batches=lay.micro_batches,
        scaleup_size=x.net.size,
    )

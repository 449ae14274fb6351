"""GEMM time on one accelerator: roofline with wave quantisation and a fixed per-kernel cost.

Roofline (Williams et al. 2009): compute-bound time = FLOPs / (peak x clock ratio x
efficiency), memory-bound time = bytes / achievable bandwidth; see docs/model.md, section 6.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from dse.analytic.rows import where, where_or_zero

BYTES = 2.0  # 16-bit activations, weights and gradients (mixed precision)
TILE = 128.0  # GEMM output tile edge for wave quantisation (cuBLAS/CUTLASS default class)


@dataclass(frozen=True, slots=True)
class Roofline:
    """The per-candidate device terms every GEMM of a candidate shares (:func:`gemm`)."""

    peak_flops: np.ndarray  # FLOP/s at the maximum clock
    clock_ratio: np.ndarray  # f / f_max
    compute_units: np.ndarray
    eff_max: np.ndarray  # calibrated efficiency of a large GEMM
    half_flops: np.ndarray  # FLOPs at which a GEMM reaches half of eff_max (fixed cost per kernel)
    half_k: np.ndarray  # inner size at which a tile's K loop reaches half (prologue, epilogue)
    hbm_bw_bps: np.ndarray  # achievable HBM bandwidth, B/s


def roofline(
    hw, clock_ratio, *, sixteen_bit: bool = False, like: Roofline | None = None
) -> Roofline:
    """The :class:`Roofline` of the candidates' accelerators ``hw`` at ``clock_ratio``.

    At the candidate's precision (the linear layers), or with ``sixteen_bit`` at the 16-bit
    peak and efficiency (attention and the output layer, which fp8 training keeps in
    bf16). An fp8 GEMM reaches ``fp8_matmul_ratio`` of the 16-bit efficiency. ``like``: the
    same candidates' roofline at the other precision, whose terms that do not depend on it
    (the kernels' fixed FLOPs, the bandwidth) are taken as they are."""
    if sixteen_bit:
        peak, eff = hw.peak16_flops, hw.matmul_eff_max
    else:
        peak = hw.peak_flops
        eff = (
            hw.matmul_eff_max * where(hw.fp8 > 0, hw.fp8_matmul_ratio, 1.0)
            if hw.fp8.any()
            else hw.matmul_eff_max
        )
    if like is not None:
        return replace(like, peak_flops=peak, clock_ratio=clock_ratio, eff_max=eff)
    return Roofline(
        peak_flops=peak,
        clock_ratio=clock_ratio,
        compute_units=hw.compute_units,
        eff_max=eff,
        half_flops=hw.matmul_half_gflop * 1e9,
        half_k=hw.matmul_half_k,
        hbm_bw_bps=hw.hbm_bw_bps * hw.memory_eff,
    )


def gemm(m, n, k, batch, r: Roofline, *, m_tiles=None, kernels=None):
    """Time of a (batched) GEMM ``[m x k] @ [k x n]``: ``(compute_s, memory_s)``.

    Roofline (Williams et al. 2009; the device terms ``r``): compute-bound time = FLOPs /
    (peak x clock ratio x efficiency); the efficiency is ``eff_max`` times the wave-quantisation utilisation of
    ``cu`` compute units by ``TILE x TILE`` output tiles (Nvidia, "Matrix multiplication
    background" guide) times ``F / (F + half_flops)`` for a GEMM of ``F`` FLOPs (the fixed
    prologue, epilogue and tail of a kernel, which small GEMMs cannot amortise) times
    ``k / (k + half_k)`` (each tile's prologue and epilogue amortised over its K loop). The
    fixed part is scaled by the wave utilisation too: an under-filled GPU runs small tiles
    or split-K, the measured single-node runs fit that form (docs/model.md, section 6).
    Memory-bound time = operand and result bytes / achievable bandwidth. Whichever is larger
    is the time; it is returned in the matching slot so that only the compute-bound part
    scales with the clock.

    ``batch=None`` is a single GEMM (no multiplications by one); ``m_tiles`` is
    ``ceil(m / TILE)`` when the caller has it (the token dimension is shared by most GEMMs);
    ``kernels`` (None: one) is how many kernels' fixed costs lie on the critical path when
    the batch runs as separate kernels (the experts' GEMMs, :mod:`~dse.analytic.time.experts`).
    """
    t_c = compute_time(m, n, k, batch, r, m_tiles=m_tiles, kernels=kernels)
    t_m = (
        BYTES * (m * k + k * n + m * n)
        if batch is None
        else BYTES * batch * (m * k + k * n + m * n)
    )
    t_m = t_m / r.hbm_bw_bps
    bound = t_c >= t_m
    return where_or_zero(bound, t_c), where_or_zero(~bound, t_m)


def compute_time(m, n, k, batch, r: Roofline, *, m_tiles=None, kernels=None):
    """The compute-bound time of :func:`gemm` alone (seconds)."""
    cu = r.compute_units
    fixed = r.half_flops if kernels is None else r.half_flops * kernels
    flops = 2.0 * m * n * k
    tiles = (np.ceil(m * (1.0 / TILE)) if m_tiles is None else m_tiles) * np.ceil(n * (1.0 / TILE))
    if batch is not None:
        flops = flops * batch
        tiles = tiles * batch
    waves_cu = np.ceil(tiles / cu) * cu
    # flops / (peak * ratio * eff_max * (tiles / waves_cu) * flops / (flops + half) * k / (k + half_k))
    return (
        (flops + fixed)
        * waves_cu
        * (1.0 + r.half_k / k)
        / (tiles * r.peak_flops * r.clock_ratio * r.eff_max)
    )

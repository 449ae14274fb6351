"""GEMM time on one accelerator: roofline with wave quantisation and a fixed per-kernel cost.

Roofline (Williams et al. 2009): compute-bound time = FLOPs / (peak x clock ratio x
efficiency), memory-bound time = bytes / achievable bandwidth; see docs/model.md, section 6.
"""

from __future__ import annotations

import numpy as np

BYTES = 2.0  # 16-bit activations, weights and gradients (mixed precision)
TILE = 128.0  # GEMM output tile edge for wave quantisation (cuBLAS/CUTLASS default class)


def roofline(hw, clock_ratio, *, sixteen_bit: bool = False) -> dict[str, np.ndarray]:
    """The per-candidate device terms every GEMM of a candidate shares (keyword arguments
    of :func:`gemm`): peak FLOP/s, clock ratio f/f_max, compute units, calibrated GEMM
    efficiency and half-efficiency size (FLOPs), achievable HBM bandwidth (B/s).

    At the candidate's precision (the linear layers), or with ``sixteen_bit`` at the 16-bit
    peak and efficiency (attention and the output layer, which fp8 training keeps in
    bf16). An fp8 GEMM reaches ``fp8_matmul_ratio`` of the 16-bit efficiency."""
    if sixteen_bit:
        peak, eff = hw.peak16_flops, hw.matmul_eff_max
    else:
        peak = hw.peak_flops
        eff = hw.matmul_eff_max * np.where(hw.fp8 > 0, hw.fp8_matmul_ratio, 1.0) if hw.fp8.any() else hw.matmul_eff_max
    return dict(peak=peak, clock_ratio=clock_ratio, cu=hw.compute_units, eff_max=eff,
                half_flops=hw.matmul_half_gflop * 1e9, half_k=hw.matmul_half_k, hbm_bw=hw.hbm_bw_bps * hw.memory_eff)


def gemm(m, n, k, batch, *, peak, clock_ratio, cu, eff_max, half_flops, half_k, hbm_bw, m_tiles=None):
    """Time of a (batched) GEMM ``[m x k] @ [k x n]``: ``(compute_s, memory_s)``.

    Roofline (Williams et al. 2009): compute-bound time = FLOPs / (peak x clock ratio x
    efficiency); the efficiency is ``eff_max`` times the wave-quantisation utilisation of
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
    ``ceil(m / TILE)`` when the caller has it (the token dimension is shared by most GEMMs).
    """
    t_c = compute_time(m, n, k, batch, peak=peak, clock_ratio=clock_ratio, cu=cu, eff_max=eff_max,
                       half_flops=half_flops, half_k=half_k, m_tiles=m_tiles)
    t_m = BYTES * (m * k + k * n + m * n) if batch is None else BYTES * batch * (m * k + k * n + m * n)
    t_m = t_m / hbm_bw
    bound = t_c >= t_m
    return np.where(bound, t_c, 0.0), np.where(bound, 0.0, t_m)


def compute_time(m, n, k, batch, *, peak, clock_ratio, cu, eff_max, half_flops, half_k, hbm_bw=None, m_tiles=None):
    """The compute-bound time of :func:`gemm` alone (seconds)."""
    flops = 2.0 * m * n * k
    tiles = (np.ceil(m * (1.0 / TILE)) if m_tiles is None else m_tiles) * np.ceil(n * (1.0 / TILE))
    if batch is not None:
        flops = flops * batch
        tiles = tiles * batch
    waves_cu = np.ceil(tiles / cu) * cu
    # flops / (peak * ratio * eff_max * (tiles / waves_cu) * flops / (flops + half) * k / (k + half_k))
    return (flops + half_flops) * waves_cu * (1.0 + half_k / k) / (tiles * peak * clock_ratio * eff_max)

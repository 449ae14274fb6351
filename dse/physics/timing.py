"""Step time: a roofline per phase (compute, memory, communication) plus the pipeline bubble."""

from __future__ import annotations

import numpy as np

BF16_BYTES = 2.0


def ring_all_reduce_s(bytes_: np.ndarray, group: np.ndarray, bw_bps: np.ndarray, latency_s: np.ndarray) -> np.ndarray:
    """Ring all-reduce: 2(g-1)/g of the buffer over the link plus 2(g-1) latencies (Thakur et al. 2005)."""
    g = np.maximum(group, 1)
    return np.where(g > 1, 2 * (g - 1) / g * bytes_ / bw_bps + 2 * (g - 1) * latency_s, 0.0)


def step_time(
    *, model_flops: np.ndarray, recompute_factor: np.ndarray, tokens_per_iteration: np.ndarray,
    n: np.ndarray, tp: np.ndarray, pp: np.ndarray, dp: np.ndarray, micro_batches: np.ndarray,
    micro_batch: np.ndarray, seq_len: np.ndarray, hidden: np.ndarray, layers: np.ndarray,
    params: np.ndarray, peak_flops: np.ndarray, hbm_bw_bps: np.ndarray, clock_ratio: np.ndarray,
    scaleup_size: np.ndarray, scaleup_bw_bps: np.ndarray, scaleout_bw_bps: np.ndarray,
    scaleup_latency_s: np.ndarray, scaleout_latency_s: np.ndarray,
    matmul_efficiency: float = 0.6, memory_efficiency: float = 0.7, dp_overlap: float = 0.5,
) -> dict[str, np.ndarray]:
    """Per-iteration time breakdown in seconds and per-accelerator traffic in bytes.

    Compute-bound time scales with 1/clock; memory-bound time does not (roofline,
    Williams et al. 2009). Tensor-parallel all-reduces (4 per layer per micro-batch,
    Shoeybi et al. 2019) are exposed; data-parallel gradient all-reduce overlaps with
    the backward pass by ``dp_overlap``; the 1F1B bubble adds (pp-1) micro-batch slots
    (Narayanan et al. 2021).
    """
    compute_s = model_flops * recompute_factor / n / (peak_flops * matmul_efficiency * clock_ratio)
    # Element-wise traffic (norms, softmax, activations, dropout): ~34*h bytes per token and
    # layer forward (Korthikanti et al. 2022 activation footprint), x3 for fwd+bwd.
    hbm_bytes = 3 * 34.0 * hidden * layers * tokens_per_iteration / n * recompute_factor
    memory_s = hbm_bytes / (hbm_bw_bps * memory_efficiency)
    act_bytes = micro_batch * seq_len * hidden * BF16_BYTES
    tp_in_domain = tp <= scaleup_size
    tp_bw = np.where(tp_in_domain, scaleup_bw_bps, scaleout_bw_bps)
    tp_lat = np.where(tp_in_domain, scaleup_latency_s, scaleout_latency_s)
    # 2 all-reduces forward, 2 backward per layer; recomputing the forward adds 2 more.
    n_tp_collectives = layers / pp * micro_batches * np.where(recompute_factor > 1, 6.0, 4.0)
    tp_s = n_tp_collectives * ring_all_reduce_s(act_bytes, tp, tp_bw, tp_lat)
    pp_s = np.where(pp > 1, 2 * micro_batches * (act_bytes / tp / scaleout_bw_bps + scaleout_latency_s), 0.0)
    grad_bytes = params / (tp * pp) * BF16_BYTES
    dp_in_domain = n <= scaleup_size
    dp_bw = np.where(dp_in_domain, scaleup_bw_bps, scaleout_bw_bps)
    dp_lat = np.where(dp_in_domain, scaleup_latency_s, scaleout_latency_s)
    dp_total_s = ring_all_reduce_s(grad_bytes, dp, dp_bw, dp_lat)
    backward_s = compute_s * 2.0 / 3.0
    dp_s = np.maximum(dp_total_s - dp_overlap * backward_s / np.maximum(micro_batches, 1), 0.0)
    per_micro = (compute_s + memory_s + tp_s) / micro_batches
    bubble_s = (pp - 1) * per_micro
    optimizer_bytes = params / (tp * pp) * (12.0 * 2 / np.maximum(dp, 1) + 4.0)
    optimizer_s = optimizer_bytes / (hbm_bw_bps * memory_efficiency)
    step_s = compute_s + memory_s + tp_s + pp_s + dp_s + bubble_s + optimizer_s
    scaleup_bytes = np.where(tp_in_domain, n_tp_collectives * 2 * act_bytes, 0.0) + np.where(dp_in_domain, 2 * grad_bytes, 0.0)
    scaleout_bytes = np.where(tp_in_domain, 0.0, n_tp_collectives * 2 * act_bytes) + np.where(dp_in_domain, 0.0, 2 * grad_bytes)
    return {
        "compute_s": compute_s, "memory_s": memory_s, "tp_comm_s": tp_s, "pp_comm_s": pp_s,
        "dp_comm_s": dp_s, "bubble_s": bubble_s, "optimizer_s": optimizer_s, "step_s": step_s,
        "hbm_bytes": hbm_bytes + optimizer_bytes, "scaleup_bytes": scaleup_bytes,
        "scaleout_bytes": scaleout_bytes,
    }

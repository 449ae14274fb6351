"""Data parallelism: gradient reduction and ZeRO-3 weight gathering (Rajbhandari et al. 2020)."""

from __future__ import annotations

import numpy as np


def dp_time(net, grad_bytes, dp, tp, dp_overlap, backward_last_s, zero, m, compute_s) -> np.ndarray:
    """Exposed data-parallel communication per iteration (s).

    Gradient reduce-scatter + parameter all-gather (ZeRO >= 1) or all-reduce, of the same
    cost, overlapping with the last micro-batch's backward (``backward_last_s``) by the
    calibrated share ``dp_overlap``. ZeRO-3 all-gathers the stage's weights for every
    forward and backward of every micro-batch, hidden behind the compute time.
    """
    dp_total = net.all_reduce(grad_bytes, dp, tp)
    dp_s = np.maximum(dp_total - dp_overlap * backward_last_s, 0.0)
    z3 = np.where(zero >= 3, 2.0 * m * net.all_gather(grad_bytes, dp, tp), 0.0)
    return dp_s + np.maximum(z3 - compute_s, 0.0)

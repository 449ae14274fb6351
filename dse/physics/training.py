"""Training length: tokens and steps to reach the target, with batch-size efficiency.

McCandlish et al. 2018 ("An Empirical Model of Large-Batch Training"): to reach a given
loss, steps S and examples E trade off as S = S_min (1 + B_noise / B) and
E = E_min (1 + B / B_noise). With ``target_tokens`` = E_min (tokens needed in the
small-batch limit), tokens(B) = D_min (1 + B / B_noise).
"""

from __future__ import annotations

import numpy as np


def tokens_to_target(target_tokens: np.ndarray, batch_tokens: np.ndarray, b_noise_tokens: np.ndarray) -> np.ndarray:
    """Tokens needed at a batch of ``batch_tokens``: D_min (1 + B / B_noise)."""
    return target_tokens * (1.0 + batch_tokens / b_noise_tokens)


def steps_to_target(target_tokens: np.ndarray, batch_tokens: np.ndarray, b_noise_tokens: np.ndarray) -> np.ndarray:
    """Optimizer steps: tokens needed / tokens per step (= S_min (1 + B_noise / B))."""
    return tokens_to_target(target_tokens, batch_tokens, b_noise_tokens) / batch_tokens

"""Why a candidate cannot run, as seen by the time model: the reasons and their codes."""

from __future__ import annotations

import numpy as np

from dse.analytic.rows import where

#: infeasibility reasons, by the integer code the model flags internally (0: feasible)
REASONS = (
    "",
    "unknown accelerator",
    "unknown model preset and incomplete shape",
    "precision not supported by the accelerator",
    "tensor x context x pipeline parallel does not divide the accelerator count",
    "tensor parallel degree does not divide the attention heads",
    "tensor parallel degree and key-value heads do not divide each other",
    "more pipeline stages than layers",
    "pipeline parallel x interleave does not divide the layers",
    "data parallel x micro batch does not divide the global batch",
    "interleaved schedule needs pipeline parallelism",
    "interleaved schedule needs micro-batches to be a multiple of the pipeline degree",
    "sequence parallelism needs the tensor parallel degree to divide the sequence length",
    "context parallelism needs 2 x its degree to divide the sequence length",
    "the training stack does not offer this sharding (ZeRO) stage",
    "the training stack has no interleaved pipeline schedule",
    "clock outside the accelerator's range",
    "does not fit in accelerator memory",
    "target loss unreachable at this model size (Chinchilla fit)",
    "expert parallelism needs a mixture-of-experts model",
    "expert parallel degree does not divide the experts",
    "expert x expert-tensor parallel does not divide the tensor x context x data-parallel ranks",
    "more experts per token than experts",
    "the training stack needs sequence parallelism for a mixture-of-experts model with tensor parallelism",
    "no fp8 units on this accelerator",
    "offloaded activations do not fit in host memory",
    "LoRA adapters on a mixture-of-experts or latent-attention model are not modelled",
    "a target loss is a pre-training loss (Chinchilla fit): a LoRA fine-tuning run states target_tokens",
    "LoRA rank above the model width: not a low-rank adapter",
    "a batch-size schedule follows the pre-training critical-batch law: not modelled for LoRA fine-tuning",
)
REASON_CODE = {r: i for i, r in enumerate(REASONS)}
REASON_TEXT = np.array(REASONS, dtype=object)


class Reasons:
    """Infeasibility flags in the order they are raised; the first raised wins per row."""

    def __init__(self) -> None:
        self.flags: list[tuple[np.ndarray, int]] = []

    def flag(self, mask: np.ndarray, reason: str) -> None:
        self.flags.append((mask, REASON_CODE[reason]))

    def codes(self, n_rows: int) -> np.ndarray:
        """Reason code per row (0: feasible): later flags first, so earlier ones overwrite."""
        codes = np.zeros(n_rows, dtype=np.int8)
        for mask, code in reversed(self.flags):
            mask = np.broadcast_to(np.asarray(mask, dtype=bool), codes.shape)
            flagged = np.count_nonzero(mask)
            if not flagged:  # most flags mark no row of a block
                continue
            if flagged * 16 < n_rows:  # a few rows: set in place
                codes[mask] = code
            else:  # many: one pass over the block
                codes = where(mask, np.int8(code), codes)
        return codes

"""Early software on a new accelerator architecture: kernels below their mature efficiency.

A new architecture's GEMM and attention kernels (cuBLAS, cuDNN, Transformer Engine, XLA)
reach their plateau efficiency in the months after its first parts ship: the same recipe
on the same DGX B200 ran Llama 3 8B at 26,006 tokens/s per GPU in NeMo 25.02 and 30,624 in
25.11, and Llama 3.1 405B on GB200 at 665 (NeMo 25.04) and 864 (Megatron-Bridge 26.04.01)
(``reference/nemo_megatron_bridge.csv``). A candidate whose ``software_release`` (the
training stack's release, ``YYYY-MM``) comes ``a`` months after its part's architecture
first shipped (catalog ``architecture_shipped``) runs its kernels at

    1 - maturity_deficit * exp(-max(a, 0) / maturity_months)

of their mature efficiency; ``mature`` (the default), a part without a date, or a date
long after the shipments: 1, the fitted efficiencies as they are. The two parameters are
shared by every part and fitted (benchmarks/fit_calibration.py; docs/model.md, section 7).
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np

from dse.analytic.columns import factorise
from dse.analytic.rows import where

#: the ``software_release`` of a stack at its mature efficiency (the default)
MATURE = "mature"
#: a release month as written (``YYYY-MM``; its month and year are checked by :func:`month_number`)
MONTH = re.compile(r"(\d{4})-(\d{2})")
#: the years a release month may name: a typo (``2205-02``, ``0205-02``) is refused, not read
#: as a release centuries from any part's shipments (which would count as mature)
YEARS = (1990, 2099)
#: what a release month may be, as a message says it (the input's and a profile's alike)
MONTH_RULE = f"a month written YYYY-MM (2025-02) from {YEARS[0]}-01 to {YEARS[1]}-12"


def month_number(text: object) -> float:
    """``YYYY-MM`` as months since year 0 (``2025-02`` -> 24,301); NaN for :data:`MATURE`,
    a missing value, a year outside :data:`YEARS` or anything else (the input's check
    refuses anything else first)."""
    found = MONTH.fullmatch(str(text).strip()) if text is not None else None
    if (
        found is None
        or not 1 <= int(found.group(2)) <= 12
        or not YEARS[0] <= int(found.group(1)) <= YEARS[1]
    ):
        return np.nan
    return int(found.group(1)) * 12.0 + int(found.group(2)) - 1.0


def efficiency(hw, release) -> np.ndarray | None:
    """Per candidate, the share of their mature efficiency the kernels reach (see the
    module); None where every candidate's stack is mature (nothing to scale)."""
    codes, uniques = factorise(release)
    # (a missing value, code -1, picks the NaN after the distinct values: mature)
    months = np.array([month_number(u) for u in uniques] + [np.nan])
    if not np.isfinite(months).any():
        return None
    age = months[np.asarray(codes)] - hw.architecture_shipped_month
    with np.errstate(invalid="ignore"):
        share = 1.0 - hw.maturity_deficit * np.exp(-np.maximum(age, 0.0) / hw.maturity_months)
    return where(np.isfinite(age), share, 1.0)


def early(hw, release):
    """``hw`` with its GEMM efficiency scaled by :func:`efficiency` (attention's follows:
    it is ``attention_eff`` of the GEMM efficiency, and its FlashAttention-2 ceiling is
    scaled too); ``hw`` itself where every stack is mature."""
    share = efficiency(hw, release)
    if share is None:
        return hw
    return replace(
        hw,
        matmul_eff_max=hw.matmul_eff_max * share,
        fa2_peak_fraction=hw.fa2_peak_fraction * share,
    )

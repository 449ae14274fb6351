"""Training length: tokens and steps to reach the target, with batch-size efficiency.

Target: a token count ``D_ref`` stated at a global batch ``B_ref`` (the batch the run was
planned at; ``B_ref = 0`` is the small-batch limit, ``D_ref = D_min``), or a loss through
the Chinchilla fit (Hoffmann et al. 2022, approach 3): ``L(N, D) = E + A / N^alpha +
B / D^beta``, inverted for ``D`` (the tokens at ``B_ref``).

Batch-size efficiency: McCandlish et al. 2018 ("An Empirical Model of Large-Batch
Training"): to reach a given loss, steps S and examples E trade off as
``S = S_min (1 + B_noise / B)`` and ``E = E_min (1 + B / B_noise)``. Anchored at the stated
point, tokens(B) = ``D_ref (1 + B / B_noise) / (1 + B_ref / B_noise)``: a run at its own
batch trains exactly its stated tokens, a larger batch needs more, a smaller one fewer.
``B_noise`` is given, or taken from the critical-batch law of Kaplan et al. 2020
(eq. 5.3), ``B_crit(L) = B* / L^(1/alpha_B)``, with the loss reached.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse.analytic.columns import one_value
from dse.analytic.rows import where


@dataclass(frozen=True, slots=True)
class LossFit:
    """``L(N, D) = E + A / N^alpha + B / D^beta`` (nats per token; N parameters, D tokens)."""

    E: float
    A: float
    B: float
    alpha: float
    beta: float


# Hoffmann et al. 2022, eq. 10 (approach 3 fit)
CHINCHILLA = LossFit(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28)
# Kaplan et al. 2020, section 5.1 / Table 4: B* = 2e8 tokens, alpha_B = 0.21
KAPLAN_B_STAR_TOKENS = 2.0e8
KAPLAN_ALPHA_B = 0.21


def chinchilla_loss(params: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    c = CHINCHILLA
    return c.E + c.A / params**c.alpha + c.B / tokens**c.beta


def chinchilla_tokens(params: np.ndarray, target_loss: np.ndarray) -> np.ndarray:
    """Tokens ``D`` with ``L(N, D) = target_loss``; NaN where the loss is unreachable at N."""
    c = CHINCHILLA
    gap = target_loss - c.E - c.A / params**c.alpha
    with np.errstate(invalid="ignore", divide="ignore"):
        return where(gap > 0, (c.B / gap) ** (1.0 / c.beta), np.nan)


def critical_batch_tokens(loss: np.ndarray) -> np.ndarray:
    """Kaplan et al. 2020 critical batch (tokens) at a loss (nats per token)."""
    return KAPLAN_B_STAR_TOKENS / np.maximum(loss, 1e-3) ** (1.0 / KAPLAN_ALPHA_B)


def tokens_to_target(
    target_tokens: np.ndarray,
    ref_batch_tokens: np.ndarray,
    batch_tokens: np.ndarray,
    b_noise_tokens: np.ndarray,
) -> np.ndarray:
    """Tokens needed at a batch of ``batch_tokens`` when ``target_tokens`` are needed at
    ``ref_batch_tokens`` (0: the small-batch limit): D_ref (1 + B/B_noise) / (1 + B_ref/B_noise)."""
    return (
        target_tokens
        * (1.0 + batch_tokens / b_noise_tokens)
        / (1.0 + ref_batch_tokens / b_noise_tokens)
    )


def steps_to_target(
    target_tokens: np.ndarray,
    ref_batch_tokens: np.ndarray,
    batch_tokens: np.ndarray,
    b_noise_tokens: np.ndarray,
) -> np.ndarray:
    """Optimizer steps: tokens needed / tokens per step (= S_min (1 + B_noise / B))."""
    return (
        tokens_to_target(target_tokens, ref_batch_tokens, batch_tokens, b_noise_tokens)
        / batch_tokens
    )


def resolve_target(params, target_tokens, target_loss, b_noise_tokens):
    """``(D_ref, B_noise)`` per candidate from the inputs (NaN = take from the laws): the
    tokens at the reference batch (from the target loss where one is given) and the noise
    scale (Kaplan's critical batch at the loss those tokens reach where not given)."""
    has_loss = np.isfinite(target_loss)
    if not has_loss.any():  # no target loss given (the usual case): no power laws to invert
        d_min = where(has_loss, 0.0, target_tokens)  # the tokens given, as an array
        given = np.asarray(target_tokens)
        # one target for every row (a study's usual case): its law term once, not per row
        tokens = given[:1] if one_value(given) else d_min
        loss = chinchilla_loss(params, np.maximum(tokens, 1.0))
    else:
        d_min = where(
            has_loss,
            chinchilla_tokens(params, where(has_loss, target_loss, 10.0)),
            target_tokens,
        )
        loss = where(has_loss, target_loss, chinchilla_loss(params, np.maximum(d_min, 1.0)))
    b_noise = where(np.isfinite(b_noise_tokens), b_noise_tokens, critical_batch_tokens(loss))
    return d_min, b_noise


#: the loss of an untrained model, about ln(vocabulary) (a uniform guess over GPT-2/3's
#: 50,257 tokens: 10.8 nats); the loss along a run never starts above it
UNTRAINED_LOSS = float(np.log(50257.0))


@dataclass(frozen=True, slots=True)
class Progress:
    """What the target needs, for integrating the critical-batch law over a run whose batch
    changes: ``e_min`` (tokens at the small-batch limit), the tokens ``d_ref`` the target
    takes at the reference batch and the loss there, the noise scale at the target
    (tokens) and the parameters a token uses."""

    e_min: np.ndarray
    d_ref: np.ndarray
    loss_target: np.ndarray
    b_noise_target: np.ndarray
    params: np.ndarray

    def noise_scale(self, u: np.ndarray) -> np.ndarray:
        """B_noise (tokens) after ``u`` tokens of small-batch-limit progress: Kaplan et al.
        2020's ``B_crit ∝ L^(-1/alpha_B)`` scaled to the target's noise scale, at the loss the
        run has reached (the Chinchilla fit at ``u d_ref / e_min`` tokens, at most
        :data:`UNTRAINED_LOSS`): the noise scale grows as the loss falls."""
        u = np.asarray(u, dtype=float)

        def col(a):  # a per-candidate array against u's (R,) or (R, n)
            return np.reshape(a, np.shape(a) + (1,) * (u.ndim - 1))

        tokens = np.maximum(u * col(self.d_ref / self.e_min), 1.0)
        loss = np.minimum(chinchilla_loss(col(self.params), tokens), UNTRAINED_LOSS)
        return col(self.b_noise_target) * (loss / col(self.loss_target)) ** (-1.0 / KAPLAN_ALPHA_B)


def progress_of(params, target_tokens, target_loss, b_noise_tokens, ref_batch_tokens) -> Progress:
    """:class:`Progress` of the target as :func:`resolve_target` states it."""
    d_ref, b_noise = resolve_target(params, target_tokens, target_loss, b_noise_tokens)
    loss = chinchilla_loss(params, np.maximum(d_ref, 1.0))
    e_min = tokens_to_target(d_ref, ref_batch_tokens, 0.0, b_noise)
    return Progress(
        e_min=e_min, d_ref=d_ref, loss_target=loss, b_noise_target=b_noise, params=params
    )


#: integration steps per phase of a schedule (midpoint rule): a ramp's phases (in consumed
#: tokens), the last phase (in progress), and the phases of a schedule that end at a progress
#: (:func:`progress_path_to`, in progress)
PHASE_SUBSTEPS = 16
FINAL_SUBSTEPS = 64
PROGRESS_SUBSTEPS = 32
#: the integration's cells over a phase have their edges at ``(i / n)^GRADING`` of its
#: length: fine at its start, where the loss and the noise scale change fastest (the loss of
#: a run falls from the untrained 10.8 nats to about 4 over its first ~1e8 tokens, the noise
#: scale from ~3k to ~2e5 tokens). Against a reference of 2e5 geometric cells, GPT-3 175B's
#: 3.1M-token batch run to its target (evaluator 0.18.0): 64 equal cells missed 1.8% of its
#: tokens, 64 graded cells miss 0.02% (at 0.8M tokens: 0.6% against 0.01%); split at the
#: progress where the critical batch reaches it, 16 cells before and 64 after miss 0.16%, 32
#: before 0.03%; GPT-3's 12B-token linear ramp (8 phases of 16 cells in tokens) is within 0.02%
GRADING = 6


def _edges(n: int) -> np.ndarray:
    """The edges of ``n`` graded cells over a phase, as fractions of its length."""
    return (np.arange(n + 1) / n) ** GRADING


@dataclass(frozen=True, slots=True)
class ProgressPath:
    """A schedule's integration (:func:`progress_path`): the tokens each phase consumes,
    ``tokens`` (R, K+1), and the points the integration passed through, for reading the
    progress at any consumed token: through each ramp phase, its consumed tokens and the
    progress reached, ``ramp_d`` and ``ramp_u`` (R, K, PHASE_SUBSTEPS + 1; the phase's own
    tokens from 0); through the last phase, ``final_d`` and ``final_u`` (R,
    FINAL_SUBSTEPS + 1)."""

    tokens: np.ndarray
    ramp_d: np.ndarray
    ramp_u: np.ndarray
    final_d: np.ndarray
    final_u: np.ndarray


def phase_tokens(p: Progress, batch_tokens: np.ndarray, phase_tokens_: np.ndarray) -> np.ndarray:
    """Tokens each phase of a schedule consumes (shape (R, K+1)): phases ``k < K`` of
    ``phase_tokens_[:, k]`` tokens at ``batch_tokens[:, k]`` (the ramp), cut where the
    target is reached, then the last phase at ``batch_tokens[:, K]`` until it is. Progress
    ``du = dD / (1 + B / B_noise(u))`` (McCandlish et al. 2018: ``E = E_min (1 + B/B_noise)``
    per unit of progress), with the noise scale growing as the loss falls."""
    return progress_path(p, batch_tokens, phase_tokens_).tokens


def progress_path(p: Progress, batch_tokens: np.ndarray, phase_tokens_: np.ndarray) -> ProgressPath:
    """:func:`phase_tokens`, with the points its integration passed through."""
    r_rows, k_ramp = phase_tokens_.shape
    u = np.zeros(r_rows)
    out = np.zeros((r_rows, k_ramp + 1))
    ramp_d = np.zeros((r_rows, k_ramp, PHASE_SUBSTEPS + 1))
    ramp_u = np.zeros((r_rows, k_ramp, PHASE_SUBSTEPS + 1))
    widths = np.diff(_edges(PHASE_SUBSTEPS))
    for k in range(k_ramp):
        used = np.zeros(r_rows)
        ramp_u[:, k, 0] = u
        for i in range(PHASE_SUBSTEPS):
            d = phase_tokens_[:, k] * widths[i]
            left = np.maximum(p.e_min - u, 0.0)
            mid = u + 0.5 * d / (1.0 + batch_tokens[:, k] / p.noise_scale(u))
            du = d / (1.0 + batch_tokens[:, k] / p.noise_scale(mid))
            frac = where(du > left, left / where(du > 0, du, 1.0), 1.0)
            u = u + du * frac
            used = used + d * frac
            ramp_d[:, k, i + 1] = used
            ramp_u[:, k, i + 1] = u
        out[:, k] = used
    # the last phase: D = integral of (1 + B / B_noise(u)) du from u to e_min
    final_d, final_u = _through_progress(p, batch_tokens[:, k_ramp], u, p.e_min, FINAL_SUBSTEPS)
    out[:, k_ramp] = final_d[:, -1]
    return ProgressPath(out, ramp_d, ramp_u, final_d, final_u)


def _through_progress(p: Progress, batch_tokens, u_from, u_to, n: int):
    """A phase at ``batch_tokens`` from progress ``u_from`` to ``u_to`` (nothing where
    ``u_to <= u_from``): the tokens consumed and the progress at the edges of its ``n``
    graded cells, (R, n + 1) each, ``D = integral of (1 + B / B_noise(u)) du`` (midpoint rule)."""
    span = np.maximum(u_to - u_from, 0.0)
    edges = u_from[:, None] + span[:, None] * _edges(n)[None, :]
    mids = 0.5 * (edges[:, 1:] + edges[:, :-1])
    cells = np.diff(edges, axis=1) * (1.0 + batch_tokens[:, None] / p.noise_scale(mids))
    return np.column_stack([np.zeros(len(span)), np.cumsum(cells, axis=1)]), edges


def progress_path_to(p: Progress, batch_tokens: np.ndarray, phase_end: np.ndarray) -> ProgressPath:
    """A schedule whose phases ``k < K`` end at progress ``phase_end[:, k]`` (small-batch-limit
    tokens, non-decreasing; cut at the target's ``e_min``) instead of after a number of
    tokens: phase ``k`` at ``batch_tokens[:, k]``, the last one until the target. Each phase
    is integrated in progress as :func:`progress_path` integrates its last phase
    (:data:`PROGRESS_SUBSTEPS` cells each); the same :class:`ProgressPath` (its ``ramp_d`` and
    ``ramp_u`` of ``PROGRESS_SUBSTEPS + 1`` points)."""
    r_rows, k_ramp = phase_end.shape
    out = np.zeros((r_rows, k_ramp + 1))
    ramp_d = np.zeros((r_rows, k_ramp, PROGRESS_SUBSTEPS + 1))
    ramp_u = np.zeros((r_rows, k_ramp, PROGRESS_SUBSTEPS + 1))
    u = np.zeros(r_rows)
    for k in range(k_ramp):
        end = np.clip(phase_end[:, k], u, p.e_min)
        ramp_d[:, k], ramp_u[:, k] = _through_progress(
            p, batch_tokens[:, k], u, end, PROGRESS_SUBSTEPS
        )
        out[:, k] = ramp_d[:, k, -1]
        u = end
    final_d, final_u = _through_progress(p, batch_tokens[:, k_ramp], u, p.e_min, FINAL_SUBSTEPS)
    out[:, k_ramp] = final_d[:, -1]
    return ProgressPath(out, ramp_d, ramp_u, final_d, final_u)


def progress_at_noise_scale(p: Progress, b_noise_tokens: np.ndarray) -> np.ndarray:
    """The progress (small-batch-limit tokens) at which :meth:`Progress.noise_scale` reaches
    ``b_noise_tokens`` ((R,) or (R, n)): the loss ``L_target (B / B_noise,target)^(-alpha_B)``
    inverted through the Chinchilla fit; 0 where the noise scale is there from the start
    (at or above the untrained loss), ``inf`` where the model size never reaches it."""
    b = np.asarray(b_noise_tokens, dtype=float)

    def col(a):
        return np.reshape(a, np.shape(a) + (1,) * (b.ndim - 1))

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        loss = col(p.loss_target) * (b / col(p.b_noise_target)) ** (-KAPLAN_ALPHA_B)
        tokens = chinchilla_tokens(col(p.params), loss)
        u = where(np.isfinite(tokens), tokens, np.inf) * col(p.e_min / p.d_ref)
    return where(loss >= UNTRAINED_LOSS, 0.0, u)

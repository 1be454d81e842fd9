"""Each estimator's formula with one group's numbers filled in, for ``explain``.

An estimator names its fill function in the registry (``explain=`` in
:func:`grpo_cli.estimators.register_estimator`); ``explain`` gives it the group's numbers
(:class:`GroupNumbers`) and prints what it returns (:class:`Filled`): the lines that state
the numbers shared by the group, and for each valid reward the formula with numbers and its
value, recomputed here in plain Python floats. A test checks every value against
``compute``'s advantage. An estimator without a fill function is shown with its summary
only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grpo_cli.options import AdvantageOptions


@dataclass(frozen=True)
class BatchView:
    """What batch-level estimators need of the group's batch: its valid rewards, and for
    the whitening estimators the group-centred values ``x`` of all its responses."""

    rewards: list[float]
    centred: list[float]


@dataclass(frozen=True)
class GroupNumbers:
    """One group's numbers: its rewards (None for a null), the valid ones and their count,
    the group mean and variance the formula uses (mean 0 and variance 1 for a one-reward
    group under ``singleton=verl``), the response lengths and the batch, when known."""

    options: AdvantageOptions
    rewards: list[float | None]
    valid: list[float]
    n: int
    mean: float
    var: float | None
    lengths: list[float | None] | None = None
    batch: BatchView | None = None


RowFormula = Callable[[float], tuple[str, float | None]]


@dataclass(frozen=True)
class Filled:
    """The lines stating the group's shared numbers, and per valid reward ``r`` the formula
    with numbers and its value (None where it is undefined)."""

    steps: tuple[str, ...]
    row: RowFormula


ExplainFn = Callable[[GroupNumbers], Filled]


def fmt(x: float | None) -> str:
    """Six significant digits, the way the lessons print them."""
    if x is None:
        return "null"
    return f"{x:.6g}"


def signed_sum(values: list[float]) -> str:
    """``values`` written as a sum, a negative term with its minus sign as the operator:
    ``[1, -1.5, 2]`` -> ``1 - 1.5 + 2`` (never ``1 + -1.5``)."""
    parts: list[str] = []
    for x in values:
        if not parts:
            parts.append(fmt(x))
        elif math.copysign(1.0, x) < 0:
            parts.append(f"- {fmt(-x)}")
        else:
            parts.append(f"+ {fmt(x)}")
    return " ".join(parts)


def mean_var(values: list[float], ddof: int) -> tuple[float, float | None]:
    """Mean and variance with ``ddof`` (None with too few values) of non-empty ``values``."""
    m = math.fsum(values) / len(values)
    if len(values) <= ddof:
        return m, None
    return m, math.fsum((v - m) ** 2 for v in values) / (len(values) - ddof)


def norm_text(options: AdvantageOptions, var: float) -> tuple[str, float]:
    """The denominator: its text with numbers, and its value (per eps_mode)."""
    eps = options.eps
    if options.eps_mode == "std":
        return f"({fmt(math.sqrt(var))} + {eps:g})", math.sqrt(var) + eps
    if options.eps_mode == "var":
        return f"sqrt({fmt(var)} + {eps:g})", math.sqrt(var + eps)
    return f"sqrt(max({fmt(var)}, {eps:g}))", math.sqrt(max(var, eps))


def _not_written(reason: str) -> Filled:
    return Filled((), lambda r: (f"({reason})", None))


def _scaled(g: GroupNumbers, var: float | None) -> RowFormula:
    """``(r - mean) / norm(var)``."""

    def row(r: float) -> tuple[str, float | None]:
        centred = f"{fmt(r)} - {fmt(g.mean)}"
        if var is None:
            return f"({centred}) / undefined std", None
        text, denominator = norm_text(g.options, var)
        return f"({centred}) / {text}", (r - g.mean) / denominator

    return row


def grpo(g: GroupNumbers) -> Filled:
    """``(r - mean) / norm(var_g)``."""
    return Filled((), _scaled(g, g.var))


def dr_grpo(g: GroupNumbers) -> Filled:
    """``r - mean``."""
    return Filled((), lambda r: (f"{fmt(r)} - {fmt(g.mean)}", r - g.mean))


def rloo(g: GroupNumbers) -> Filled:
    """``r - (sum - r) / (n - 1)``; a one-reward group: ``r - mean``."""
    total = math.fsum(g.valid)

    def row(r: float) -> tuple[str, float | None]:
        if g.n < 2:
            return f"{fmt(r)} - {fmt(g.mean)}  (no other response: r - mean)", r - g.mean
        return f"{fmt(r)} - ({fmt(total)} - {fmt(r)}) / {g.n - 1}", r - (total - r) / (g.n - 1)

    return Filled((), row)


def batch_std(g: GroupNumbers) -> Filled:
    """``(r - mean) / norm(var_b)``, var_b over every valid reward of the batch."""
    if g.options.token_weighted:
        return _not_written("length-weighted batch statistics: not written out")
    if g.batch is None or not g.batch.rewards:
        return _not_written("the batch is not known")
    ddof = g.options.ddof
    _, b_var = mean_var(g.batch.rewards, ddof)
    steps: tuple[str, ...] = ()
    if b_var is not None:
        steps = (
            f"batch std (ddof={ddof}) over the batch's {len(g.batch.rewards)} valid rewards"
            f" = {fmt(math.sqrt(b_var))}",
        )
    return Filled(steps, _scaled(g, b_var))


def gpg(g: GroupNumbers) -> Filled:
    """``alpha (r - mean)``, alpha = valid rewards of the batch / max(non-zero ones, 1)."""
    if g.batch is None:
        return _not_written("the batch is not known")
    size = len(g.batch.rewards)
    nonzero = max(sum(1 for v in g.batch.rewards if v != 0), 1)
    alpha = size / nonzero
    step = (
        f"alpha = batch valid rewards / max(non-zero rewards, 1) = {size} / {nonzero} = "
        f"{fmt(alpha)}"
    )
    return Filled(
        (step,), lambda r: (f"{fmt(alpha)} x ({fmt(r)} - {fmt(g.mean)})", alpha * (r - g.mean))
    )


def opo(g: GroupNumbers) -> Filled:
    """``r - sum(L r) / sum(L)`` (baseline 0 for a one-reward group under singleton=verl)."""
    if g.lengths is None or not g.n:
        return _not_written("the lengths are not known")
    pairs = [(r, w) for r, w in zip(g.rewards, g.lengths, strict=True) if r is not None]
    weighted = math.fsum(r * (w or 0.0) for r, w in pairs)
    total = math.fsum(w or 0.0 for _, w in pairs)
    baseline = 0.0 if g.options.singleton == "verl" and g.n == 1 else weighted / total
    step = (
        f"baseline = sum(L r) / sum(L) = {fmt(weighted)} / {fmt(total)} = {fmt(baseline)}  "
        f"(L: {g.options.length_col})"
    )
    return Filled((step,), lambda r: (f"{fmt(r)} - {fmt(baseline)}", r - baseline))


def grpo_passk(g: GroupNumbers) -> Filled:
    """The unique best gets ``(best - second best) / norm(var_g)``, every other response 0."""
    if not g.n:
        return _not_written("no valid reward")
    best = max(g.valid)
    n_best = sum(1 for v in g.valid if v == best)
    below = [v for v in g.valid if v < best]
    second = max(below) if below else None
    step = f"best = {fmt(best)} ({n_best} response(s)), second best = {fmt(second)}"

    def row(r: float) -> tuple[str, float | None]:
        if r != best or n_best != 1:
            return "not the group's unique best", 0.0
        if second is None or g.var is None:
            return "no second best: undefined", None
        text, denominator = norm_text(g.options, g.var)
        return f"({fmt(best)} - {fmt(second)}) / {text}", (best - second) / denominator

    return Filled((step,), row)


def reinforce_pp_baseline(g: GroupNumbers) -> Filled:
    """``x = r - mean`` (0 in a zero-variance group), clipped first under
    ``clip_stage=shaped``, then ``(x - mean_b) / norm(var_b)`` over the batch's x."""
    options = g.options
    if options.token_weighted:
        return _not_written("length-weighted batch statistics: not written out")
    if g.batch is None or not g.batch.centred:
        return _not_written("the batch is not known")
    shaped = options.clip if options.clip is not None and options.clip_stage == "shaped" else None
    xs = g.batch.centred
    if shaped is not None:
        xs = [min(max(x, shaped[0]), shaped[1]) for x in xs]
    mean_b, var_b = mean_var(xs, options.ddof)
    flat = var_b is None or max(xs) == min(xs)
    step = (
        f"x = r - mean, then whitened over the batch's {len(xs)} values of x: "
        f"mean_b = {fmt(mean_b)}, var_b (ddof={options.ddof}) = {fmt(var_b)}"
    )
    constant = g.n >= 2 and max(g.valid) == min(g.valid)

    def row(r: float) -> tuple[str, float | None]:
        x = 0.0 if constant else r - g.mean
        if shaped is not None:
            x = min(max(x, shaped[0]), shaped[1])
        if flat:
            return f"x = {fmt(x)}; every x of the batch is equal", 0.0
        text, denominator = norm_text(options, var_b or 0.0)
        return f"({fmt(x)} - {fmt(mean_b)}) / {text}", (x - mean_b) / denominator

    return Filled((step,), row)

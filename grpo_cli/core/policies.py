"""The policies every estimator shares, applied once after any engine's formula.

In order:

1. a null reward: advantage null (``nulls=exclude``) or 0 (``nulls=zero``); the reward was
   left out of every statistic (``fill_zero`` made it 0 before, ``error`` refused it);
2. a group with exactly one valid reward, for estimators with groups: 0 (``singleton=zero``),
   the raw reward (``raw``) or null (``null``); ``verl`` and ``formula`` keep the formula's
   value (``verl`` has already run the formula with mean 0 and std 1), ``drop`` removed
   those rows before;
3. ``clip`` to [lo, hi], at the advantage stage; for whitening estimators (GDPO, ``whiten``)
   with ``clip_stage=shaped`` the clip happened before the whitening, inside the formula.

A zero-variance group's exact 0 is part of each formula, not a policy. :func:`formula` is
GDPO or the estimator's formula, then the ``whiten`` stage. The rules are written over the
formula context's primitives: Polars expressions and torch tensors alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from grpo_cli.core.estimators import gdpo

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from grpo_cli.core.estimators import Estimator, FormulaContext, Value
    from grpo_cli.core.options import AdvantageOptions
    from grpo_cli.core.plan import Plan


def formula(
    ctx: FormulaContext,
    options: AdvantageOptions,
    estimator: Estimator,
    rewards: Callable[[], Sequence[FormulaContext]],
) -> Value:
    """The formula's value before the policies, on every engine and in ``explain``: GDPO
    over the contexts of ``options.reward_cols`` (``rewards()``, made only then) with the
    estimator's formula per reward under ``aggregation=normalize_then_sum``, else
    ``estimator.fn(ctx)``; then, with ``whiten``, the batch whitening ``W(x) = norm(x -
    mean_b(x), var_b(x))`` with the ``whiten_*`` ddof, eps and eps_mode (GDPO's own batch
    stage takes them instead: never whitened twice)."""
    whitening = ctx
    if options.whiten:
        whitening = ctx.with_spread(
            options.whiten_ddof, options.whiten_eps, options.whiten_eps_mode
        )
    if options.aggregation == "normalize_then_sum":
        weighted = list(zip(rewards(), options.weights, strict=True))
        return gdpo(whitening, weighted, estimator.fn)
    value = estimator.fn(ctx)
    return whitening.batch_zscore(ctx.named("x", value)) if options.whiten else value


def whitened(options: AdvantageOptions, estimator: Estimator) -> bool:
    """Whether the formula ends with a batch whitening: a whitening estimator, GDPO or
    ``whiten``."""
    return estimator.whitens or options.whiten or options.aggregation == "normalize_then_sum"


def reads_batch(options: AdvantageOptions, estimator: Estimator) -> bool:
    """Whether the formula reads batch statistics: a batch-scope estimator, or a batch
    whitening (:func:`whitened`)."""
    return estimator.scope == "batch" or whitened(options, estimator)


# The singleton policies that replace the formula's value in one-reward groups (the others
# keep it: verl, formula; drop removed the rows before).
SINGLETON_FILLS = ("zero", "raw", "null")


def overrides(
    ctx: FormulaContext,
    options: AdvantageOptions,
    estimator: Estimator,
    *,
    singleton: Value | None,
) -> list[tuple[str, Value, Value]]:
    """The rules 1 and 2 of the module docstring that apply under ``options``, by name
    (``nulls``, ``singleton``), each with where it holds and the value it sets, the first
    one holding winning; ``ctx.reward`` is null where the reward is, ``singleton`` true in
    one-reward groups (None: the unit has no singleton policy)."""
    rules = [("nulls", ctx.is_null(ctx.reward), 0.0 if options.nulls == "zero" else None)]
    if singleton is not None and estimator.uses_groups and options.singleton in SINGLETON_FILLS:
        fill = {"zero": 0.0, "raw": ctx.reward, "null": None}[options.singleton]
        rules.append(("singleton", singleton, fill))
    return rules


def final_clip(options: AdvantageOptions, estimator: Estimator) -> tuple[float, float] | None:
    """The bounds of rule 3 (None: no clip, or a whitening clipped its input)."""
    shaped = options.clip_stage == "shaped" and whitened(options, estimator)
    return None if shaped else options.clip


def policy_value(
    ctx: FormulaContext,
    raw: Value,
    options: AdvantageOptions,
    estimator: Estimator,
    *,
    singleton: Value | None,
) -> Value:
    """``raw`` (the formula's value) with the policies of ``options`` applied (see
    :func:`overrides` and :func:`final_clip`), in ``ctx``'s values."""
    value = raw
    for _, holds, fill in reversed(overrides(ctx, options, estimator, singleton=singleton)):
        value = ctx.where(holds, fill, value)
    bounds = final_clip(options, estimator)
    return value if bounds is None else value.clip(*bounds)


def apply_policies(
    raw: pl.Expr, plan: Plan, *, reward: pl.Expr, singleton: pl.Expr | None
) -> pl.Expr:
    """:func:`policy_value` as a Polars expression: ``reward`` is null where the reward is,
    ``singleton`` true in one-reward groups (None: the unit has no singleton policy)."""
    from grpo_cli.core.plan import estimator_context

    ctx = estimator_context(plan, reward)
    value = policy_value(ctx, raw, plan.options, plan.estimator, singleton=singleton)
    return value.cast(pl.Float64)  # type: ignore[no-any-return]

"""The policies every estimator shares, applied once after any engine's formula.

In order:

1. a null reward: advantage null (``nulls=exclude``) or 0 (``nulls=zero``); the reward was
   left out of every statistic (``fill_zero`` made it 0 before, ``error`` refused it);
2. a group with exactly one valid reward, for estimators with groups: 0 (``singleton=zero``),
   the raw reward (``raw``) or null (``null``); ``verl`` and ``formula`` keep the formula's
   value (``verl`` has already run the formula with mean 0 and std 1), ``drop`` removed
   those rows before;
3. ``clip`` to [lo, hi], at the advantage stage; for whitening estimators (and GDPO) with
   ``clip_stage=shaped`` the clip happened before the whitening, inside the formula.

A zero-variance group's exact 0 is part of each formula (see the estimators), not a policy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    from grpo_cli.core.plan import Plan


def apply_policies(
    raw: pl.Expr, plan: Plan, *, reward: pl.Expr, singleton: pl.Expr | None
) -> pl.Expr:
    """``raw`` (the formula's value) with the policies of ``plan`` applied (see the module
    docstring); ``reward`` is null where the reward is, ``singleton`` true in one-reward
    groups (None: the unit has no singleton policy)."""
    options = plan.options
    value = raw
    if singleton is not None and plan.estimator.uses_groups:
        fill = {
            "zero": pl.lit(0.0),
            "raw": reward,
            "null": pl.lit(None, dtype=pl.Float64),
        }.get(options.singleton)
        if fill is not None:
            value = pl.when(singleton).then(fill).otherwise(value)
    null_value = pl.lit(0.0) if options.nulls == "zero" else pl.lit(None, dtype=pl.Float64)
    result = pl.when(reward.is_null()).then(null_value).otherwise(value).cast(pl.Float64)
    whitened = options.aggregation == "normalize_then_sum" or plan.estimator.whitens
    if options.clip is not None and (options.clip_stage == "advantage" or not whitened):
        result = result.clip(*options.clip)
    return result

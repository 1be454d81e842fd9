"""The reward the estimator sees, as Polars expressions.

Each reward column is cast to Float64 with NaN as null; ``nulls=fill_zero`` fills nulls with
0; several columns are combined as a weighted sum with nulls counting 0, null only when every
reward of the row is null (TRL's weighted nansum); ``reward_clip`` then clamps it (before
any statistic). GDPO (``normalize_then_sum``) normalises each reward column instead (see
:func:`grpo_cli.core.estimators.gdpo`): each is clamped (:func:`reward_parts`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    from grpo_cli.core.options import AdvantageOptions


def reward_expr(column: str, nulls: str = "exclude") -> pl.Expr:
    """One reward column as Float64, NaN as null (``fill_zero``: null and NaN as 0)."""
    r = pl.col(column).cast(pl.Float64).fill_nan(None)
    return r.fill_null(0.0) if nulls == "fill_zero" else r


def clipped(reward: pl.Expr, options: AdvantageOptions) -> pl.Expr:
    """``reward`` clamped to ``options.reward_clip`` (unchanged without one)."""
    return reward if options.reward_clip is None else reward.clip(*options.reward_clip)


def reward_parts(options: AdvantageOptions) -> list[pl.Expr]:
    """Each reward column as GDPO's estimator sees it: :func:`reward_expr`, clamped."""
    return [clipped(reward_expr(c, options.nulls), options) for c in options.reward_cols]


def combined_reward(options: AdvantageOptions) -> pl.Expr:
    """The one reward the estimator sees (see the module docstring)."""
    parts = [reward_expr(c, options.nulls) for c in options.reward_cols]
    if len(parts) == 1 and options.weights == (1.0,):
        return clipped(parts[0], options)
    weighted = [part * weight for part, weight in zip(parts, options.weights, strict=True)]
    all_null = pl.all_horizontal([part.is_null() for part in parts])
    summed = pl.when(all_null).then(None).otherwise(pl.sum_horizontal(weighted))
    return clipped(summed.cast(pl.Float64), options)

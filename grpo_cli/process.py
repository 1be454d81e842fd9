"""Process supervision (DeepSeekMath sec. 4.1.3): advantages per reasoning step.

Each response carries a list of per-step rewards. Over a group (all responses of one prompt)
every step reward is normalised with the mean and std of *all* step rewards of the group
together, ``z = norm(s - mean_g, var_g)``; the advantage of step j of a response is the sum
of z over steps j, j+1, ... of that response (the reward-to-go). The output is a list column
aligned with the input list: an empty list gives an empty list, a null list a null, a null
step reward a null advantage (left out of the statistics).
"""

from __future__ import annotations

import polars as pl

from grpo_cli.compute import REWARD_KEY, ROW_KEY, Keys, estimator_context, reward_expr
from grpo_cli.estimators import get_estimator
from grpo_cli.options import AdvantageOptions


def process_advantages(frame: pl.LazyFrame, options: AdvantageOptions, keys: Keys) -> pl.LazyFrame:
    """``frame`` plus the list column ``options.advantage_col`` (see module docstring)."""
    assert options.step_rewards_col is not None
    column = options.step_rewards_col
    indexed = frame.with_row_index(ROW_KEY)
    steps = (
        indexed.select(ROW_KEY, *keys.group, *keys.batch, column)
        .explode(column)
        .with_columns(reward_expr(column, options.nulls).alias(REWARD_KEY))
    )
    ctx = estimator_context(options, keys)
    z = get_estimator("process").fn(ctx)
    steps = steps.with_columns(z.alias("__grpo_z"))
    # Reward-to-go within each response: reverse cumulative sum, nulls kept as null.
    to_go = pl.col("__grpo_z").fill_null(0.0).reverse().cum_sum().reverse().over(ROW_KEY)
    steps = steps.with_columns(
        pl.when(pl.col(REWARD_KEY).is_null())
        .then(pl.lit(0.0) if options.nulls == "zero" else pl.lit(None, dtype=pl.Float64))
        .otherwise(to_go)
        .alias(options.advantage_col)
    )
    if options.clip is not None:
        steps = steps.with_columns(pl.col(options.advantage_col).clip(*options.clip))
    per_row = steps.group_by(ROW_KEY, maintain_order=True).agg(pl.col(options.advantage_col))
    joined = indexed.join(per_row, on=ROW_KEY, how="left", maintain_order="left")
    source = pl.col(column)
    aligned = (
        pl.when(source.is_null())
        .then(None)
        .when(source.list.len() == 0)
        .then(pl.lit([], dtype=pl.List(pl.Float64)))
        .otherwise(pl.col(options.advantage_col))
        .alias(options.advantage_col)
    )
    return joined.with_columns(aligned).drop(ROW_KEY)

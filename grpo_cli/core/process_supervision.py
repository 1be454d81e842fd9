"""Process supervision (DeepSeekMath sec. 4.1.3): advantages per reasoning step.

Each response carries a list of per-step rewards. Over a group (all responses of one prompt)
every step reward is normalised with the mean and std of *all* step rewards of the group
together, ``z = norm(s - mean_g, var_g)``; the advantage of step j of a response is the sum
of z over steps j, j+1, ... of that response (the reward-to-go). The output is a list column
aligned with the input list: an empty list gives an empty list, a null list a null, a null
step reward a null advantage (left out of the statistics).
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from grpo_cli.core.columns import REWARD_KEY, ROW_KEY, STEP_Z
from grpo_cli.core.plan import Plan, estimator_context
from grpo_cli.core.policies import apply_policies
from grpo_cli.core.rewards import clipped, reward_expr

# The step z-scores: the exploded steps (one row per step reward, REWARD_KEY its reward)
# with the column STEP_Z added (the estimator's formula over the steps).
StepScores = Callable[[pl.LazyFrame, Plan], pl.LazyFrame]


def polars_step_scores(steps: pl.LazyFrame, plan: Plan) -> pl.LazyFrame:
    """The step z-scores with Polars windows (see :data:`StepScores`)."""
    return steps.with_columns(plan.estimator.fn(estimator_context(plan)).alias(STEP_Z))


def process_advantages(
    frame: pl.LazyFrame, plan: Plan, scores: StepScores = polars_step_scores
) -> pl.LazyFrame:
    """``frame`` plus the list column ``options.advantage_col`` (see module docstring);
    ``scores`` evaluates the formula over the steps (an engine's own arithmetic)."""
    options, keys = plan.options, plan.keys
    assert options.step_rewards_col is not None
    column = options.step_rewards_col
    indexed = frame.with_row_index(ROW_KEY)
    steps = (
        indexed.select(ROW_KEY, *dict.fromkeys((*keys.group, *keys.batch)), column)
        .explode(column)
        .with_columns(clipped(reward_expr(column, options.nulls), options).alias(REWARD_KEY))
    )
    steps = scores(steps, plan)
    # Reward-to-go within each response: reverse cumulative sum, nulls kept as null.
    to_go = pl.col(STEP_Z).fill_null(0.0).reverse().cum_sum().reverse().over(ROW_KEY)
    advantage = apply_policies(to_go, plan, reward=pl.col(REWARD_KEY), singleton=None)
    steps = steps.with_columns(advantage.alias(options.advantage_col))
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

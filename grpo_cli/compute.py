"""``compute_advantages``: the one entry point that annotates a reward log.

Pipeline, all in Polars window expressions over the group key (no Python loop over rows
or groups), in float64:

1. ``r`` = the reward cast to Float64, NaN turned into null. Null rewards are left out of
   every group statistic and get a null advantage.
2. Per group: count of valid rewards, mean, std (ddof 0 or 1), max == min.
3. The estimator's formula (see :mod:`grpo_cli.estimators`).
4. Shared policies: a null reward gives null; a group with exactly one valid reward gives
   what ``singleton`` says (``zero``, ``raw`` reward or ``null``).

Rows keep their input order, and every input column is returned unchanged.
"""

from __future__ import annotations

from typing import Any, TypeVar

import polars as pl

from grpo_cli.errors import InputError
from grpo_cli.estimators import EstimatorParams, GroupStats, get_estimator
from grpo_cli.options import AdvantageOptions
from grpo_cli.schema import check_reward_dtype, describe_bad_reward, require_columns

FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)


def reward_expr(column: str) -> pl.Expr:
    """The reward as Float64 with NaN turned into null (booleans become 0.0/1.0)."""
    return pl.col(column).cast(pl.Float64).fill_nan(None)


def group_stats(options: AdvantageOptions) -> GroupStats:
    """Window expressions of the per-group statistics for ``options``."""
    keys = list(options.group_cols)
    r = reward_expr(options.reward_col)
    return GroupStats(
        reward=r,
        count=r.count().over(keys),
        mean=r.mean().over(keys),
        std=r.std(ddof=options.ddof).over(keys),
        is_constant=r.max().over(keys) == r.min().over(keys),
    )


def advantage_expr(options: AdvantageOptions) -> pl.Expr:
    """The advantage column's expression: estimator plus the null and singleton policies."""
    stats = group_stats(options)
    estimator = get_estimator(options.estimator)
    params = EstimatorParams(ddof=options.ddof, eps=options.eps)
    singleton_value = {
        "zero": pl.lit(0.0),
        "raw": stats.reward,
        "null": pl.lit(None, dtype=pl.Float64),
    }[options.singleton]
    return (
        pl.when(stats.reward.is_null())
        .then(pl.lit(None, dtype=pl.Float64))
        .when(stats.count == 1)
        .then(singleton_value)
        .otherwise(estimator.fn(stats, params))
        .cast(pl.Float64)
        .alias(options.advantage_col)
    )


def validate_frame(frame: pl.DataFrame | pl.LazyFrame, options: AdvantageOptions) -> None:
    """Check the columns the options need, and that no added column already exists."""
    schema = frame.collect_schema()
    require_columns(schema, options.group_cols, "group")
    require_columns(schema, [options.reward_col], "reward")
    try:
        check_reward_dtype(schema, options.reward_col)
    except InputError as exc:
        if isinstance(frame, pl.DataFrame):
            exc.message += describe_bad_reward(frame, options.reward_col)
            exc.args = (exc.message,)
        raise
    existing = [col for col in options.added_columns() if col in schema]
    if existing:
        raise InputError(
            f"the input already has a column named {existing[0]!r}",
            hint="name the output column with --advantage-col, or drop the existing column",
        )
    keys_null = frame.lazy().select(
        pl.any_horizontal(*(pl.col(c).is_null() for c in options.group_cols)).sum()
    )
    n_null_keys = int(keys_null.collect().item())
    if n_null_keys:
        raise InputError(
            f"{n_null_keys} row(s) have a null group key ({', '.join(options.group_cols)})",
            hint="every response needs the id of its prompt; fill or drop those rows first",
        )


def compute_advantages(
    frame: FrameT, options: AdvantageOptions | None = None, **overrides: Any
) -> FrameT:
    """Annotate a reward log with group-relative advantages.

    Args:
        frame: a Polars DataFrame or LazyFrame with the group and reward columns.
        options: the computation's options (defaults: GRPO, ddof 1, eps 1e-8).
        **overrides: option fields to change, e.g. ``ddof=0, group_cols=("step", "prompt_id")``.

    Returns:
        The same kind of frame: every input row in input order, every input column
        unchanged, plus ``advantage`` (Float64) and, with ``with_stats``, ``group_size``
        (rows in the group), ``group_mean`` and ``group_std`` (over valid rewards).

    Raises:
        OptionsError: invalid options.
        InputError: a missing column, non-numeric rewards, a null group key.
    """
    options = (options or AdvantageOptions()).with_overrides(**overrides)
    validate_frame(frame, options)
    columns = [advantage_expr(options)]
    if options.with_stats:
        stats = group_stats(options)
        keys = list(options.group_cols)
        columns += [
            pl.len().over(keys).cast(pl.Int64).alias("group_size"),
            stats.mean.alias("group_mean"),
            stats.std.alias("group_std"),
        ]
    if isinstance(frame, pl.LazyFrame):
        return frame.with_columns(columns)
    # Explicitly in-memory: Polars 2.1's default engine may stream, and its streaming windowed
    # std varies in the last bit from run to run. Results must be repeatable.
    return frame.lazy().with_columns(columns).collect(engine="in-memory")

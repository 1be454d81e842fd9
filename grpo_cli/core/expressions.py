"""A plan's advantages as Polars expressions: the lazy annotation that the Polars,
partitioned and Ray engines run, and that the tables and checks reuse. The estimator's
formula is evaluated through :class:`grpo_cli.core.estimators.EstimatorContext` over the
window statistics of :mod:`grpo_cli.core.grouping`; the policies are applied once after it.
"""

from __future__ import annotations

import polars as pl

from grpo_cli.core.columns import REWARD_KEY, SIZE_KEY
from grpo_cli.core.grouping import group_stat_columns, row_profile, stats_columns
from grpo_cli.core.plan import (
    Plan,
    collision_columns,
    estimator_context,
    hash_columns,
    span_flag,
    with_keys,
)
from grpo_cli.core.policies import apply_policies, formula
from grpo_cli.core.rewards import combined_reward, reward_parts


def advantage_expr(plan: Plan, *, precomputed: bool = False) -> pl.Expr:
    """The advantage column (needs the key columns and REWARD_KEY, and with
    ``precomputed`` the group statistics columns): the formula, then the policies."""
    options = plan.options
    ctx = estimator_context(plan, precomputed=precomputed)
    raw = formula(
        ctx,
        options,
        plan.estimator,
        lambda: [estimator_context(plan, reward) for reward in reward_parts(options)],
    )
    value = apply_policies(raw, plan, reward=ctx.reward, singleton=ctx.is_singleton())
    return value.alias(options.advantage_col)


def prepare(frame: pl.DataFrame | pl.LazyFrame, plan: Plan) -> pl.LazyFrame:
    """The frame with the temporary key and reward columns, singletons dropped if asked."""
    options, keys = plan.options, plan.keys
    lazy = with_keys(frame.lazy(), options)
    if plan.estimator.unit == "step":
        return lazy.with_columns(hash_columns(keys)) if keys.hashed else lazy
    # Hashes and reward in one context, so that Polars puts every window over them in one
    # grouping pass (windows over columns made at different levels get separate passes).
    lazy = lazy.with_columns(*hash_columns(keys), combined_reward(options).alias(REWARD_KEY))
    if options.singleton == "drop" and plan.estimator.uses_groups:
        lazy = lazy.filter(~estimator_context(plan).is_singleton())
    return lazy


def with_group_stats(frame: pl.DataFrame | pl.LazyFrame, plan: Plan) -> pl.LazyFrame:
    """The prepared frame (see :func:`prepare`) with every group statistic, in one grouping
    pass (and CHECK_MAX when the plan's keys are hashed; the group's row count when the
    reward may be null; whether the group spans ``plan.span_col``): what
    the formulas read (response-level estimators)."""
    options, keys = plan.options, plan.keys
    size = [pl.len().over(list(keys.group)).alias(SIZE_KEY)] if plan.has_nulls else []
    # The group's rows, as a window the statistics compute anyway (one grouping pass).
    rows = pl.len() if plan.has_nulls else pl.col(REWARD_KEY).count()
    spans = (
        [span_flag(plan.span_col, keys.group, rows.over(list(keys.group)))] if plan.span_col else []
    )
    return prepare(frame, plan).with_columns(
        *group_stat_columns(pl.col(REWARD_KEY), keys.group, options.ddof),
        *collision_columns(keys),
        *size,
        *spans,
    )


def annotate_lazy(frame: pl.DataFrame | pl.LazyFrame, plan: Plan) -> pl.LazyFrame:
    """The annotated frame *with* the temporary key and reward columns (and CHECK_MAX when
    the plan's keys are hashed)."""
    if plan.estimator.unit == "step":
        from grpo_cli.core.process_supervision import process_advantages

        return process_advantages(prepare(frame, plan), plan)
    options = plan.options
    # One grouping pass for every group statistic, then the formulas on those columns.
    prepared = with_group_stats(frame, plan)
    columns = [advantage_expr(plan, precomputed=True), *row_profile(plan.has_nulls)]
    if options.with_stats:
        columns += stats_columns(
            plan.keys.group, options.ddof, precomputed=True, has_nulls=plan.has_nulls
        )
    return prepared.with_columns(columns)


def collect(frame: pl.LazyFrame, *, deterministic: bool = True) -> pl.DataFrame:
    """Collect ``frame``: with the streaming engine (Polars' parallel sums may differ in
    the last bit from run to run), or ``deterministic`` with the in-memory engine
    (bit-for-bit repeatable, slower on large logs)."""
    return frame.collect(engine="in-memory" if deterministic else "streaming")
